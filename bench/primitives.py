"""The op table's speed primitives against the composites they stand for (issue 19): gelu (its
gradient is the gelu_grad primitive), relu, batch_norm and adam, each as its one op and as the
chain of other primitives it replaced, side by side in one process. Ratios are composite time
over primitive time: above 1 the primitive is faster; within ~1.05 the composite may return.

    ember bench primitives             # the runner's table: NdArray() and Fusion(NdArray())
    python bench/primitives.py --cpu   # NdArray() and Fusion(NdArray()), forward, and forward
                                       # + backward under Autodiff: medians of process_time
                                       # (CPU seconds: a busy shared machine inflates less)
    python bench/primitives.py --gpu   # Wgpu(), Fusion(Wgpu()) and Autodiff(Fusion(Wgpu())):
                                       # kernels launched (ember.fusion.trace()) and ms,
                                       # queued calls with one sync (as in a model)

Sizes: gelu and relu over n float32, batch_norm over a ConvNet activation [B, 32, 28, 28]
(BatchNorm2d(32) in training mode: the batch's statistics), adam over a flat parameter of p
float32 (the composite keeps m and v as two tensors; the primitive one [3, p] state).
"""

import argparse
import math
import statistics
import time

import numpy as np
from _helpers import synced as _synced

import ember
from ember import Tensor
from ember.backend import Autodiff, Fusion, NdArray
from ember.ops import prims
from ember.ops.nn import batch_stats
from ember.optim.optimizer import lerp
from ember.tensor import _apply

SQRT_2 = math.sqrt(2)
BETA1, BETA2, EPS, BC2_SQRT, RATE = 0.9, 0.999, 1e-8, 0.3, -1e-3  # a mid-run Adam step


# ---- the composites: what each primitive computes, written with other primitives ------------
def gelu_composite(x):  # the seed's gelu_custom: the exact (erf) GELU, as the primitive
    return x * ((x / SQRT_2).erf() + 1) / 2


def relu_composite(x):  # 0 where x <= 0 (its gradient there 0, as torch's); NaN stays NaN
    return x.mask_where(x <= 0, 0)


DIMS = (0, 2, 3)


def batch_norm_primitive(x, w, b, eps=1e-5):  # BatchNorm2d's training forward
    with ember.no_grad():
        mean, _, var = batch_stats(x, DIMS)
    return _apply(prims.batch_norm, x, mean, var, w.reshape(1, -1, 1, 1), b.reshape(1, -1, 1, 1),
                  eps=eps)


def batch_norm_composite(x, w, b, eps=1e-5):  # the statistics differentiated op by op
    _, xc, var = batch_stats(x, DIMS)
    return xc * (w.reshape(1, -1, 1, 1) / (var + eps).sqrt()) + b.reshape(1, -1, 1, 1)


def adam_primitive(x, g, s):
    return _apply(prims.adam, x, g, s, 1 - BETA1, BETA2, BC2_SQRT, EPS, RATE)


def adam_composite(x, g, m, v):  # ops/optim.py's arithmetic, op by op
    m = lerp(m, g, 1 - BETA1)
    v = v * BETA2 + g * (1 - BETA2) * g
    return x + m * RATE / (v.sqrt() / BC2_SQRT + EPS), m, v


def _cases(B, n, batch, params, grad):
    """name -> (primitive call, composite call), each returning what it computed (held while
    the backend syncs). grad: forward and backward (B is an Autodiff stack; adam has none)."""
    rng = np.random.default_rng(0)

    def t(shape, scale=1.0):
        return Tensor.from_data(rng.standard_normal(shape, dtype=np.float32) * np.float32(scale),
                                backend=B)
    x = t(n)
    xb, w, b = t((batch, 32, 28, 28)), t(32, 0.5) + 1, t(32, 0.1)
    if grad:
        x, xb, w, b = (v.require_grad() for v in (x, xb, w, b))

    ups = {}  # an upstream gradient per output shape (not the seed of ones: a broadcast)

    def run(f, *args):
        if not grad:
            return lambda: f(*args)
        c = ups.setdefault(args[0].shape, t(args[0].shape).detach())
        return lambda: tuple(a.grad(grads) for grads in [(f(*args) * c).sum().backward()]
                             for a in args)
    cases = {
        f"gelu [{n}]": (run(lambda x: x.gelu(), x), run(gelu_composite, x)),
        f"relu [{n}]": (run(lambda x: x.relu(), x), run(relu_composite, x)),
        f"batch_norm [{batch}, 32, 28, 28]": (run(batch_norm_primitive, xb, w, b),
                                             run(batch_norm_composite, xb, w, b)),
    }
    if not grad:
        p, gp, m, v = t(params), t(params, 1e-2), t(params, 1e-3), t(params, 1e-4) ** 2
        s = Tensor.stack([p, m, v])
        cases[f"adam [{params}]"] = (lambda: adam_primitive(p, gp, s),
                                     lambda: adam_composite(p, gp, m, v))
    return cases


def _check(prim, comp):
    """The two forms agree (float32 rounding apart)."""
    a, b = (r if isinstance(r, tuple) else (r,) for r in (prim(), comp()))
    if len(a) < len(b):  # adam: the primitive's [3, p] against (x, m, v)
        a = [a[0][i] for i in range(3)]
    for u, v in zip(a, b):
        np.testing.assert_allclose(u.to_numpy(), v.to_numpy(), rtol=2e-4, atol=2e-5)


def _forced(fn):
    """fn, its results then computed: a pending Fusion chain nobody holds is never run, so each
    result is realized (a queued GPU kernel need not finish: the sample's sync waits)."""
    def call():
        out = fn()
        for t in out if isinstance(out, tuple) else (out,):
            p, b = t._prim, t.backend
            while isinstance(b, (Autodiff, Fusion)):
                p = b.realize(p) if isinstance(b, Fusion) else p.prim
                b = b.inner
        return out
    return call


# ---- the runner's table ---------------------------------------------------------------------
def _rows(ctx, label, B, grad):
    for name, (prim, comp) in _cases(B, 1 << 20, 16, 1 << 20, grad).items():
        _check(prim, comp)
        c, p = ctx.measure(_synced(B, _forced(comp)), _synced(B, _forced(prim)))
        yield ctx.time_row(f"{name} {'fwd+bwd' if grad else 'fwd'} on {label}: composite vs "
                           "primitive", c, p)


def ndarray(ctx):
    yield from _rows(ctx, "NdArray()", NdArray(), False)
    yield from _rows(ctx, "Autodiff(NdArray())", Autodiff(NdArray()), True)


def fused_ndarray(ctx):
    yield from _rows(ctx, "Fusion(NdArray())", Fusion(NdArray()), False)
    yield from _rows(ctx, "Autodiff(Fusion(NdArray()))", Autodiff(Fusion(NdArray())), True)


BENCHMARKS = {"ndarray": ndarray, "fused_ndarray": fused_ndarray}


# ---- the command-line runs ------------------------------------------------------------------
def _median(clock, sync, fns, repeat, target):
    """Median seconds a call of each fn (by `clock`), a sample `number` calls and one sync;
    samples interleaved, their order rotated."""
    for fn in fns:
        fn()
        sync()
    single = []
    for fn in fns:
        t0 = clock()
        fn()
        sync()
        single.append(clock() - t0)
    number = max(1, math.ceil(target / max(max(single), 1e-6)))
    samples = [[] for _ in fns]
    order = list(range(len(fns)))
    for _ in range(repeat):
        for i in order:
            t0 = clock()
            for _ in range(number):
                fns[i]()
            sync()
            samples[i].append((clock() - t0) / number)
        order = order[1:] + order[:1]
    return [statistics.median(s) for s in samples]


def _kernels(fn, sync):
    with ember.fusion.trace() as t:
        fn()
        sync()
    return len(t.kernels)


def _table(stacks, clock, repeat, target, n, batch, params, counts):
    print(f"  {'case':32s} {'stack':28s} {'primitive':>11s} {'composite':>11s} {'ratio':>6s}"
          + ("  kernels prim/comp" if counts else ""))
    for label, B, grad in stacks:
        for name, (prim, comp) in _cases(B, n, batch, params, grad).items():
            _check(prim, comp)
            fns = [_forced(prim), _forced(comp)]
            p, c = _median(clock, B.sync, fns, repeat, target)
            k = f"  {_kernels(fns[0], B.sync):7d} / {_kernels(fns[1], B.sync)}" if counts else ""
            what = f"{name} {'f+b' if grad else 'fwd'}"
            print(f"  {what:32s} {label:28s} {p * 1e3:8.3f} ms {c * 1e3:8.3f} ms {c / p:6.2f}{k}",
                  flush=True)


def cpu(n=1 << 20, batch=16, params=1 << 20, repeat=15):
    print(f"CPU ({repeat} samples of ~0.1 s each, median process_time a call; ratio: composite "
          "/ primitive)")
    stacks = [("NdArray()", NdArray(), False), ("Fusion(NdArray())", Fusion(NdArray()), False),
              ("Autodiff(NdArray())", Autodiff(NdArray()), True),
              ("Autodiff(Fusion(NdArray()))", Autodiff(Fusion(NdArray())), True)]
    _table(stacks, time.process_time, repeat, 0.1, n, batch, params, True)


def gpu(n=1 << 26, batch=128, params=10_000_000, repeat=5):
    from ember.backend import Wgpu
    inner = Wgpu()
    print(f"GPU {inner} (median of {repeat} samples of queued calls, one sync each; ratio: "
          "composite / primitive)")
    stacks = [("Fusion(Wgpu())", Fusion(inner), False),
              ("Autodiff(Fusion(Wgpu()))", Autodiff(Fusion(inner)), True),
              ("Wgpu()", inner, False), ("Autodiff(Wgpu())", Autodiff(inner), True)]
    _table(stacks, time.perf_counter, repeat, 0.05, n, batch, params, True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--gpu", action="store_true", help="the GPU run (Wgpu)")
    which.add_argument("--cpu", action="store_true", help="the CPU run (NdArray)")
    parser.add_argument("--repeat", type=int, default=None)
    args = parser.parse_args()
    if args.cpu:
        cpu(repeat=args.repeat or 15)
    else:
        gpu(repeat=args.repeat or 5)
