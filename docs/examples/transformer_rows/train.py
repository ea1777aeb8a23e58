"""A small transformer encoder classifying MNIST digits read as sequences of 28 rows.

    python docs/examples/transformer_rows/train.py                       # the full run
    python docs/examples/transformer_rows/train.py --limit 256 --epochs 1   # the CI-sized run

Each image is a sequence of 28 tokens (its rows, 28 pixels each), embedded by a Linear layer,
given sinusoidal positions, run through a 2-layer TransformerEncoder (pre-LN, 4 heads) and
mean-pooled into a Linear head: attention, LayerNorm, GELU and the Learner on real data that
ember fetches itself (`python -m ember.data.fetch`).
"""

import argparse
import time

import numpy as np

import ember
from ember import data, nn, optim, train
from ember.backend import from_name
from ember.optim import lr as schedules


class RowTransformer(nn.Module):
    def __init__(self, d_model=64, nhead=4, layers=2, backend=None):
        super().__init__()
        self.embed = nn.Linear(28, d_model, backend=backend)
        self.position = nn.PositionalEncoding(d_model, dropout=0.0, max_len=28)
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=2 * d_model,
                                           dropout=0.1, activation="gelu", norm_first=True,
                                           backend=backend)
        self.encoder = nn.TransformerEncoder(layer, num_layers=layers)
        self.norm = nn.LayerNorm(d_model, backend=backend)
        self.head = nn.Linear(d_model, 10, backend=backend)

    def forward(self, images):                       # [B, 1, 28, 28]
        tokens = self.position(self.embed(images.squeeze(1)))       # [B, 28, d_model]
        encoded = self.norm(self.encoder(tokens))
        return self.head(encoded.mean_dim(1).squeeze(1))            # [B, 10]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--limit", type=int, default=None, help="train and test on this many digits")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--backend", default="autodiff(ndarray)")
    args = p.parse_args(argv)

    ember.seed(0)
    backend = from_name(args.backend)
    train_set, test_set = data.MNIST("train"), data.MNIST("test")
    if args.limit:  # a seeded sample (the files are sorted by class)
        pick = np.random.default_rng(0).permutation
        train_set = data.Subset(train_set, pick(len(train_set))[:args.limit].tolist())
        test_set = data.Subset(test_set, pick(len(test_set))[:args.limit].tolist())
    train_loader = data.DataLoader(train_set, batch_size=args.batch_size, shuffle=True, seed=0,
                                   backend=backend)
    test_loader = data.DataLoader(test_set, batch_size=256, backend=backend)

    model = RowTransformer(backend=backend)
    steps = args.epochs * -(-len(train_set) // args.batch_size)
    sched = schedules.LinearWarmup(schedules.Cosine(args.lr, T_max=steps), warmup_steps=steps // 10)
    learner = train.Learner(model, optim.AdamW(lr=sched, weight_decay=1e-2),
                            loss=nn.CrossEntropyLoss(), metrics=[train.Accuracy(), train.Loss()],
                            dashboard="plain")
    start = time.perf_counter()
    model = learner.fit(train_loader, test_loader, epochs=args.epochs)
    seconds = time.perf_counter() - start
    accuracy = learner.history.epoch_values("Accuracy", "valid")[args.epochs - 1]
    print(f"transformer_rows: {len(train_set)} train digits, {args.epochs} epoch(s) on {backend}: "
          f"test accuracy {accuracy:.2%} on {len(test_set)} digits, {seconds:.1f} s, "
          f"{model.num_params():,} parameters")


if __name__ == "__main__":
    main()
