"""Autodiff(NdArray) against PyTorch CPU eager on one training step of an MLP 784-256-10
(ReLU, cross-entropy), batch 64: forward, backward, every parameter's gradient read out.

Both sides use the same weights and data, run in this process with the same number of
threads (PyTorch is set to the CPU count NumPy's BLAS sees), and are checked to produce the
same gradients before timing. PyTorch is a reference only: without it (pip install
torch==2.13.0) the benchmark says so and measures nothing.
"""

import numpy as np
from _helpers import cpus

from ember import Tensor
from ember.backend import Autodiff, NdArray

BATCH, D_IN, HIDDEN, CLASSES = 64, 784, 256, 10


def _weights():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, D_IN)).astype(np.float32)
    labels = rng.integers(0, CLASSES, (BATCH, 1)).astype(np.int32)
    params = [(rng.standard_normal((D_IN, HIDDEN)) * 0.05).astype(np.float32),
              np.zeros(HIDDEN, np.float32),
              (rng.standard_normal((HIDDEN, CLASSES)) * 0.05).astype(np.float32),
              np.zeros(CLASSES, np.float32)]
    return x, labels, params


def ember_step(backend, x, labels, params):
    params = [Tensor.from_data(p, backend=backend).require_grad() for p in params]
    x, labels = Tensor.from_data(x, backend=backend), Tensor.from_data(labels, backend=backend)

    def step():
        w1, b1, w2, b2 = params
        logits = (x @ w1 + b1).relu() @ w2 + b2
        loss = -logits.log_softmax(-1).gather(1, labels).mean()
        grads = loss.backward()
        return [p.grad(grads) for p in params]
    return step


def torch_step(torch, x, labels, params):
    params = [torch.tensor(p, requires_grad=True) for p in params]
    x, labels = torch.tensor(x), torch.tensor(labels[:, 0]).long()

    def step():
        w1, b1, w2, b2 = params
        for p in params:
            p.grad = None
        logits = torch.relu(x @ w1 + b1) @ w2 + b2
        torch.nn.functional.cross_entropy(logits, labels).backward()
        return [p.grad for p in params]
    return step


def train_step(ctx):
    try:
        import torch
    except ImportError:
        yield ctx.row("MLP 784-256-10 batch 64 step: PyTorch not installed "
                      "(pip install torch==2.13.0)", float("nan"), float("nan"), "ms")
        return
    torch.set_num_threads(cpus())
    x, labels, params = _weights()
    ours = ember_step(Autodiff(NdArray()), x, labels, params)
    theirs = torch_step(torch, x, labels, params)
    for a, b in zip(ours(), theirs()):
        np.testing.assert_allclose(a.to_numpy(), b.numpy(), rtol=1e-4, atol=1e-6)
    t_ours, t_theirs = ctx.measure(ours, theirs)
    yield ctx.time_row("MLP 784-256-10 batch 64 forward+backward, Autodiff(NdArray) vs "
                       "PyTorch eager", t_ours, t_theirs)


BENCHMARKS = {"train_step": train_step}
