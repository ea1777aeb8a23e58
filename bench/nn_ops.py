"""ember.nn.functional against PyTorch CPU eager: conv2d and max_pool2d, forward and
forward+backward, on the shapes of Burn's MNIST example (batch 64, 3x3 kernels:
[64,1,28,28] -> 8 channels, [64,8,26,26] -> 16, [64,16,24,24] -> 24).

ember runs on NdArray (forward) and Autodiff(NdArray) (forward+backward); both sides use the
same data, run in this process with the same number of threads (PyTorch is set to the count
NumPy's BLAS uses: OPENBLAS_NUM_THREADS or OMP_NUM_THREADS where set, else the CPU count),
and are checked to give the same values and gradients before timing. The first
layer's input is data (no gradient); the later layers' inputs get one, as inside a network.
PyTorch is a reference only: without it (pip install torch==2.13.0) nothing is measured.
"""

import os

import numpy as np
from _helpers import cpus

from ember import Tensor
from ember.backend import Autodiff, NdArray
from ember.nn import functional as F

BATCH = 64
LAYERS = [(1, 8, 28), (8, 16, 26), (16, 24, 24)]  # in channels, out channels, input size
POOLS = [(16, 24), (24, 22)]  # channels, input size; 2x2 windows, stride 2


def _threads():
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return cpus()


def _torch():
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(_threads())
    return torch


def _missing(ctx, what):
    return ctx.row(f"{what}: PyTorch not installed (pip install torch==2.13.0)", float("nan"),
                   float("nan"), "ms")


def _conv_data(c_in, c_out, size):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, c_in, size, size)).astype(np.float32)
    w = (rng.standard_normal((c_out, c_in, 3, 3)) / 3).astype(np.float32)
    b = rng.standard_normal(c_out).astype(np.float32)
    return x, w, b


def _timed(ctx, case, ours, theirs):
    """Check that both give the same values (up to float32 rounding of sums over up to
    64*26*26 terms), then time them side by side."""
    for a, b in zip(ours(), theirs()):
        b = b.detach().numpy()
        np.testing.assert_allclose(a.to_numpy(), b, rtol=1e-4, atol=1e-5 * np.abs(b).max())
    return ctx.time_row(case, *ctx.measure(ours, theirs))


# ---- the callables, one pair per case -----------------------------------------------------
def _conv_forward(torch, x, w, b):
    ex, ew, eb = (Tensor.from_data(a, backend=NdArray()) for a in (x, w, b))
    tx, tw, tb = (torch.tensor(a) for a in (x, w, b))
    return (lambda: [F.conv2d(ex, ew, eb)],
            lambda: [torch.nn.functional.conv2d(tx, tw, tb)])


def _conv_backward(torch, x, w, b, x_grad):
    backend = Autodiff(NdArray())
    ex, ew, eb = (Tensor.from_data(a, backend=backend) for a in (x, w, b))
    ours_in = [ex.require_grad()] if x_grad else []
    ours_in += [ew.require_grad(), eb.require_grad()]
    tx = torch.tensor(x, requires_grad=x_grad)
    tw, tb = (torch.tensor(a, requires_grad=True) for a in (w, b))
    theirs_in = ([tx] if x_grad else []) + [tw, tb]

    def ours():
        grads = F.conv2d(ex, ew, eb).backward()
        return [t.grad(grads) for t in ours_in]

    def theirs():
        for t in theirs_in:
            t.grad = None
        out = torch.nn.functional.conv2d(tx, tw, tb)
        out.backward(torch.ones_like(out))
        return [t.grad for t in theirs_in]
    return ours, theirs


def _pool_forward(torch, x):
    ex, tx = Tensor.from_data(x, backend=NdArray()), torch.tensor(x)
    return (lambda: [F.max_pool2d(ex, 2)],
            lambda: [torch.nn.functional.max_pool2d(tx, 2)])


def _pool_backward(torch, x):
    ex = Tensor.from_data(x, backend=Autodiff(NdArray())).require_grad()
    tx = torch.tensor(x, requires_grad=True)

    def theirs():
        tx.grad = None
        out = torch.nn.functional.max_pool2d(tx, 2)
        out.backward(torch.ones_like(out))
        return [tx.grad]
    return lambda: [ex.grad(F.max_pool2d(ex, 2).backward())], theirs


# ---- the benchmarks -------------------------------------------------------------------------
def conv2d_forward(ctx):
    torch = _torch()
    if torch is None:
        yield _missing(ctx, "conv2d forward")
        return
    for c_in, c_out, size in LAYERS:
        yield _timed(ctx, f"conv2d fwd [64,{c_in},{size},{size}] -> {c_out}ch 3x3, NdArray",
                     *_conv_forward(torch, *_conv_data(c_in, c_out, size)))


def conv2d_forward_backward(ctx):
    torch = _torch()
    if torch is None:
        yield _missing(ctx, "conv2d forward+backward")
        return
    for c_in, c_out, size in LAYERS:
        x_grad = c_in > 1  # the first layer's input is data
        yield _timed(ctx, f"conv2d fwd+bwd [64,{c_in},{size},{size}] -> {c_out}ch 3x3 (grads: "
                     f"{'x, ' if x_grad else ''}w, b), Autodiff(NdArray)",
                     *_conv_backward(torch, *_conv_data(c_in, c_out, size), x_grad))


def max_pool2d(ctx):
    torch = _torch()
    if torch is None:
        yield _missing(ctx, "max_pool2d")
        return
    for c, size in POOLS:
        x = np.random.default_rng(1).standard_normal((BATCH, c, size, size)).astype(np.float32)
        yield _timed(ctx, f"max_pool2d 2x2 fwd [64,{c},{size},{size}], NdArray",
                     *_pool_forward(torch, x))
        yield _timed(ctx, f"max_pool2d 2x2 fwd+bwd [64,{c},{size},{size}], Autodiff(NdArray)",
                     *_pool_backward(torch, x))


def summarize(rows):
    return [f"PyTorch and NumPy's BLAS on {_threads()} thread(s); on a shared machine "
            "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 gives steadier ratios"]


# ---- per-call overhead: tiny ops, where the Tensor layer and dispatch are all there is ----------
TINY = {"add": (lambda a, b: a + b, lambda a, b: a + b),
        "exp": (lambda a, b: a.exp(), lambda a, b: a.exp()),
        "matmul": (lambda a, b: a @ b, lambda a, b: a @ b),
        "sum": (lambda a, b: a.sum(), lambda a, b: a.sum())}


def tiny_ops(ctx):
    """8x8 float32 on NdArray() against PyTorch CPU eager: the cost of one call."""
    torch = _torch()
    if torch is None:
        yield _missing(ctx, "tiny ops")
        return
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((8, 8)).astype(np.float32) for _ in range(2))
    ea, eb = (Tensor.from_data(x, backend=NdArray()) for x in (a, b))
    ta, tb = torch.tensor(a), torch.tensor(b)
    for name, (ours, theirs) in TINY.items():
        yield _timed(ctx, f"{name} 8x8 float32, NdArray", lambda o=ours: [o(ea, eb)],
                     lambda t=theirs: [t(ta, tb)])


BENCHMARKS = {"tiny_ops": tiny_ops, "conv2d_forward": conv2d_forward,
              "conv2d_forward_backward": conv2d_forward_backward,
              "max_pool2d": max_pool2d}
