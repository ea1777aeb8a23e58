"""Learner(devices=[...]): data parallel on threads, samples per second of one training step
on 1 device (NdArray(): its ops on every core) against 2 virtual devices
(NdArray(threads=1) each: two replicas, each its own thread and core), the MNIST
ConvNet of ember.models at batch 64, the same weights and data. The ratio printed is time per
step on 2 devices / on 1 (below 1.00x: the replicas' threads overlap: NumPy's BLAS, the C
kernels and ctypes release the GIL)."""

import numpy as np

import ember
from ember import models, optim, train
from ember.backend import NdArray

BATCH = 64


def _learner(devices):
    ember.seed(0)
    model = models.ConvNet()
    return train.Learner(model, optim.Adam(lr=1e-3), dashboard=None, devices=devices)


def step(ctx):
    rng = np.random.default_rng(0)
    batch = (rng.random((BATCH, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, BATCH))
    one, two = _learner(None), _learner([NdArray(threads=1), NdArray(threads=1)])
    ours, ref = ctx.measure(lambda: two._train_step(batch, False),
                            lambda: one._train_step(batch, False))
    row = ctx.time_row(f"ConvNet train step, batch {BATCH}: 2 virtual devices vs 1", ours, ref)
    yield row


def summarize(rows):
    out = []
    for r in rows:
        if r["ratio"] == r["ratio"]:
            out.append(f"samples/s: 1 device {BATCH / (r['reference'] / 1e3):.0f}, 2 virtual "
                       f"devices {BATCH / (r['ember'] / 1e3):.0f} ({1 / r['ratio']:.2f}x)")
    return out


BENCHMARKS = {"step": step}
