"""Learner(devices=[...]): data parallel on threads, samples per second of one training step
of the MNIST ConvNet of ember.models at batch 64 (Adam, the same weights and data) on

- 1 device: NdArray(), its ops on every core (the reference of every row);
- 2 virtual devices, NdArray(threads=1) each (two replicas, each its own thread and core):
  strategy="ddp" with the all-reduce overlapping backward (buckets reduced as soon as
  backward has finished their gradients), "ddp" reducing after backward, and "multi"
  (gradients gathered on the first device, one update, weights sent back).

The ratios are time per step against the 1-device step (below 1.00x: the replicas' threads
overlap, since NumPy's BLAS, the C kernels and ctypes release the GIL); the summary prints
samples/s and the overlap's gain (DDP reducing after backward / overlapped)."""

from functools import partial

import numpy as np

import ember
from ember import models, optim, train
from ember.backend import NdArray

BATCH = 64
CASES = {"ddp, all-reduce overlapping backward": ("ddp", True),
         "ddp, all-reduce after backward": ("ddp", False),
         "multi (update on the first device)": ("multi", True)}


def _learner(devices, strategy="ddp", overlap=True):
    ember.seed(0)
    learner = train.Learner(models.ConvNet(), optim.Adam(lr=1e-3), dashboard=None,
                            devices=devices, strategy=strategy)
    learner._overlap = overlap  # (the switch this benchmark exists for; not an API)
    return learner


def step(ctx):
    rng = np.random.default_rng(0)
    batch = (rng.random((BATCH, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, BATCH))
    one = _learner(None)
    many = [_learner([NdArray(threads=1), NdArray(threads=1)], *how) for how in CASES.values()]
    stats = ctx.measure(*[partial(lr._train_step, batch, False) for lr in [one, *many]])
    for (name, _), s in zip(CASES.items(), stats[1:]):
        yield ctx.time_row(f"ConvNet step, batch {BATCH}, 2 virtual devices vs 1: {name}", s,
                           stats[0])


def summarize(rows):
    out = []
    steps = {r["case"].split(": ", 1)[1]: r for r in rows if r["ratio"] == r["ratio"]}
    if steps:
        first = next(iter(steps.values()))
        out.append(f"samples/s: 1 device {BATCH / (first['reference'] / 1e3):.0f}; 2 virtual "
                   "devices " + ", ".join(f"{name} {BATCH / (r['ember'] / 1e3):.0f} "
                                           f"({1 / r['ratio']:.2f}x)"
                                           for name, r in steps.items()))
    names = list(CASES)
    if names[0] in steps and names[1] in steps:
        gain = steps[names[1]]["ember"] / steps[names[0]]["ember"]
        out.append(f"overlapping the all-reduce with backward: {gain:.3f}x the samples/s of "
                   "reducing after backward")
    return out


BENCHMARKS = {"step": step}
