"""Training in the browser: an MLP learns the two-spirals problem with ember's Learner, and the
same file runs natively and in a page (`index.html` beside it; `ember site` serves it at
/examples/browser-training/, where Python runs in a Web Worker on the site's Pyodide, offline).

    python docs/examples/browser_training/train.py                 # the full run, natively
    python docs/examples/browser_training/train.py --epochs 2      # the CI run
    make demo, then open http://127.0.0.1:8000/examples/browser-training/  # in the page

The data is made here with NumPy's seeded generator (the same points natively and in the page):
two interleaved spirals of --points points each, with noise, split 80/20. Telling them apart
needs a curved boundary: a 2-64-64-2 MLP with GELU gets there, a linear one stops at 66%.
The Learner prints its plain dashboard (a line per few steps), which the page shows as it
comes, and the last line is the summary the page and the test read.
"""

import argparse
import time

import numpy as np

import ember
from ember import data, nn, optim, train
from ember.backend import from_name


def spirals(points, noise=0.15, turns=1.75, seed=0):
    """(x float32 [2 * points, 2], label int64): spiral 0 and spiral 1 (rotated by pi)."""
    rng = np.random.default_rng(seed)
    t = np.sqrt(rng.uniform(0.0, 1.0, points)) * turns * 2 * np.pi
    arm = np.stack([t * np.cos(t), t * np.sin(t)], 1) / (turns * 2 * np.pi)
    x = np.concatenate([arm, -arm]) + rng.normal(0.0, noise / 4, (2 * points, 2))
    labels = np.repeat(np.arange(2), points)
    order = rng.permutation(2 * points)
    return x[order].astype(np.float32), labels[order]


class Mlp(nn.Module):
    def __init__(self, hidden=64, backend=None):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(2, hidden, backend=backend), nn.GELU(),
                                    nn.Linear(hidden, hidden, backend=backend), nn.GELU(),
                                    nn.Linear(hidden, 2, backend=backend))

    def forward(self, x):
        return self.layers(x)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--points", type=int, default=1000, help="points per spiral")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--backend", default="autodiff(ndarray)")
    args = p.parse_args(argv)

    ember.seed(0)
    backend = from_name(args.backend)
    x, labels = spirals(args.points)
    cut = int(0.8 * len(x))
    train_loader = data.DataLoader(data.InMemoryDataset(x[:cut], labels[:cut]),
                                   batch_size=args.batch_size, shuffle=True, seed=0,
                                   backend=backend)
    test_loader = data.DataLoader(data.InMemoryDataset(x[cut:], labels[cut:]), batch_size=512,
                                  backend=backend)
    model = Mlp(backend=backend)
    learner = train.Learner(model, optim.Adam(lr=args.lr), loss=nn.CrossEntropyLoss(),
                            metrics=[train.Accuracy(), train.Loss()], dashboard="plain")
    start = time.perf_counter()
    model = learner.fit(train_loader, test_loader, epochs=args.epochs)
    seconds = time.perf_counter() - start
    if learner.interrupted:  # Ctrl-C, or Stop in the page: the Learner ends after the step
        print(f"browser_training: stopped at step {learner.step}, {seconds:.1f} s")
        return None
    accuracy = learner.history.epoch_values("Accuracy", "valid")[args.epochs - 1]
    print(f"browser_training: {cut} train points, {args.epochs} epoch(s) on {backend}: test "
          f"accuracy {accuracy:.2%} on {len(x) - cut} points, {seconds:.1f} s, "
          f"{model.num_params():,} parameters")
    return accuracy


if __name__ == "__main__":
    main()
