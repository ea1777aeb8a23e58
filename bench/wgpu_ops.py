"""Wgpu (WGSL kernels through wgpu-py) against NumPy on the same float32 data; on a GPU machine
also against PyTorch (CUDA).

    ember bench wgpu_ops             # the runner's table: time per call, Wgpu / NumPy
    python bench/wgpu_ops.py         # a throughput table: us/op, GB/s, GFLOP/s
    python bench/wgpu_ops.py --gpu   # the GPU run: matmul 1024/2048/4096 vs torch.matmul fp32
                                     # (cuBLAS, TF32 off), add and gelu_custom in GB/s vs torch

Every Wgpu timing ends with `sync()` (a read-back of a few bytes waits for the GPU), so it
counts the GPU's work, not only the recording. `dispatch` shows the cost of one tiny op in a
long chain (recording, batching, submission and lavapipe's per-dispatch work); the others show
kernels at sizes where the arithmetic or the memory traffic dominates. Each case first checks
that both sides compute the same values. On lavapipe (a CPU pretending to be a GPU) Wgpu is
expected to lose to NumPy: these numbers track the backend's own overheads.

Measured 2026-11-30, `python bench/wgpu_ops.py --gpu` on one NVIDIA H200 (Vulkan, driver
580.159.04, wgpu-py 0.32.0; PyTorch 2.11 with TF32 off as the reference), two runs in a row:

    dispatch: tiny add, chained          |  14.0 / 20.0 us/op | -
    add 268435456 float32                |  4039 / 4033 GB/s  | torch 4354 / 4340 GB/s
    gelu_custom 268435456 float32        |   699 / 710 GB/s   | torch 777 / 773 GB/s
    matmul 1024^3 fp32 (max err 2.3e-04) | 18.9 / 18.1 TFLOP/s | cuBLAS 36.4 / 36.1 (0.52x / 0.50x)
    matmul 2048^3 fp32 (max err 4.7e-04) | 40.7 / 39.6 TFLOP/s | cuBLAS 50.0 / 49.5 (0.81x / 0.80x)
    matmul 4096^3 fp32 (max err 1.0e-03) | 43.3 / 43.3 TFLOP/s | cuBLAS 51.3 / 51.2 (0.84x / 0.85x)

(gelu_custom: five kernels, bytes counted once, as for torch's five; the "tiled" matmul, then
matmul_tiled.wgsl, now generated from matmul_tile.wgsl: BK=32, 2-D workgroup tiles, the k
loop unrolled; its earlier form (BK=16, a `for` loop) gave 27.0
TFLOP/s at 4096 (0.53x), the vec4 kernel without workgroup memory 23.4. At 1024^3 the 64
workgroups of 128x128 leave half of the 132 SMs idle.) And `python
bench/wgpu_ops.py` on lavapipe (2 shared cores, LLVM 15):

    dispatch: tiny add, chained |       25.2 us/op | -
    add 4194304 float32         |        3.65 GB/s | numpy 61.14 GB/s
    gelu_custom 4194304 float32 |        0.61 GB/s | numpy 1.10 GB/s
    matmul 512^3 fp32           |      9.7 GFLOP/s | numpy 11.2 GFLOP/s
    matmul 1024^3 fp32          |      9.4 GFLOP/s | numpy 67.1 GFLOP/s
"""

import argparse
import math
import sys
import time

import numpy as np
from _helpers import synced as _synced

from ember import Tensor
from ember.backend import Wgpu

SQRT_2 = math.sqrt(2)
ELEMENTS = 1 << 22  # 4M float32: 16 MiB per tensor


def gelu_custom(x):  # the seed's GELU, five elementwise ops
    x = x * ((x / SQRT_2).erf() + 1)
    return x / 2


def _gelu_numpy(a):
    from ember.ops.numerics import erf
    return a * (erf(a / np.float32(SQRT_2)) + 1) / 2


def _backend():
    return Wgpu()


def _pair(shape, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape, dtype=np.float32)
    b = rng.standard_normal(shape, dtype=np.float32)
    return a, b


# ---- the runner's benchmarks --------------------------------------------------------------------
def dispatch(ctx):
    """One tiny add in a chain of 100, per op: Python (Tensor layer, kernel lookup, info words),
    batching and lavapipe's per-dispatch cost; NumPy's own per-call cost beside it."""
    backend = _backend()
    a = np.ones(16, np.float32)
    x = Tensor.from_data(a, backend=backend)

    def chain():
        y = x
        for _ in range(100):
            y = y + 1
        return y

    def numpy_chain():
        y = a
        for _ in range(100):
            y = y + 1
        return y

    np.testing.assert_allclose(chain().to_numpy(), numpy_chain())
    ember, ref = ctx.measure(_synced(backend, chain), numpy_chain)
    yield ctx.row("add 16 floats, 100 chained, +sync (per op)", ember.median * 1e4,
                  ref.median * 1e4, "us", ember_min=ember.min * 1e4, reference_min=ref.min * 1e4)
    record, ref = ctx.measure(chain, numpy_chain)
    yield ctx.row("add 16 floats, recording only (per op)", record.median * 1e4,
                  ref.median * 1e4, "us", ember_min=record.min * 1e4, reference_min=ref.min * 1e4)


ELEMENTWISE = {  # name -> (ember, numpy, bytes moved per element)
    "add": (lambda x, y: x + y, lambda a, b: a + b, 12),
    "mul (strided: y transposed)": (lambda x, y: x * y.transpose(), lambda a, b: a * b.T, 12),
    "exp": (lambda x, y: x.exp(), lambda a, b: np.exp(a), 8),
    "gelu_custom (5 ops)": (lambda x, y: gelu_custom(x), lambda a, b: _gelu_numpy(a), 8),
    "sum": (lambda x, y: x.sum(), lambda a, b: a.sum(), 4),
    "sum_dim(1)": (lambda x, y: x.sum_dim(1), lambda a, b: a.sum(1, keepdims=True), 4),
    "softmax(-1) (composite)": (lambda x, y: x.softmax(-1), None, 8),
}


def elementwise(ctx):
    backend = _backend()
    side = int(math.isqrt(ELEMENTS))
    a, b = _pair((side, side))
    x, y = Tensor.from_data(a, backend=backend), Tensor.from_data(b, backend=backend)
    for name, (fn, ref, _) in ELEMENTWISE.items():
        if ref is None:
            ref = lambda a, b: _softmax_numpy(a)  # noqa: E731
        np.testing.assert_allclose(fn(x, y).to_numpy(), ref(a, b), rtol=1e-4, atol=1e-3)
        yield ctx.time_row(f"{name} {side}x{side} float32", *ctx.measure(
            _synced(backend, lambda fn=fn: fn(x, y)), lambda ref=ref: ref(a, b)))


def _softmax_numpy(a):
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def matmul(ctx):
    backend = _backend()
    for n in (128, 512) if ctx.quick else (128, 512, 1024):
        a, b = _pair((n, n))
        x, y = Tensor.from_data(a, backend=backend), Tensor.from_data(b, backend=backend)
        np.testing.assert_allclose((x @ y).to_numpy(), a @ b, rtol=1e-3, atol=1e-3)
        yield ctx.time_row(f"matmul {n}x{n} float32", *ctx.measure(
            _synced(backend, lambda x=x, y=y: x @ y), lambda a=a, b=b: a @ b))


BENCHMARKS = {"dispatch": dispatch, "elementwise": elementwise, "matmul": matmul}


def summarize(rows):
    lines = []
    for row in rows:
        case, unit = row["case"], row["unit"]
        scale = {"us": 1e-6, "ms": 1e-3}.get(unit)
        if scale is None or "per op" in case:
            continue
        if case.startswith("matmul"):
            n = int(case.split()[1].split("x")[0])
            work, what = 2 * n ** 3 / 1e9, "GFLOP/s"
        else:
            name = next(k for k in ELEMENTWISE if case.startswith(k))
            work, what = ELEMENTWISE[name][2] * ELEMENTS / 1e9, "GB/s"
        ember = work / (row["ember"] * scale)
        ref = work / (row["reference"] * scale)
        lines.append(f"{case}: Wgpu {ember:.2f} {what}, NumPy {ref:.2f} {what}")
    return lines


# ---- standalone: a throughput table, and the GPU run --------------------------------------------
def _clock(fn, repeat, inner):
    fn()
    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        best = min(best, (time.perf_counter() - start) / inner)
    return best


def _wgpu_time(backend, fn, repeat=5, inner=10):
    """Seconds per call of fn on Wgpu: `inner` calls recorded back to back, then one sync
    (at least 0.2 s of them, so that the sync's own cost stays out of the number), after 0.5 s
    of warm-up: on the H200 the first calls of a fresh process (new 1 GiB buffers, clocks
    ramping up) ran an add at 1.8-2.7 TB/s, the same kernel 4.1 TB/s a second later."""
    _warm_up(fn, backend.sync)
    start = time.perf_counter()
    fn()
    backend.sync()
    inner = max(inner, min(1000, int(0.2 / max(time.perf_counter() - start, 1e-6))))
    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        backend.sync()
        best = min(best, (time.perf_counter() - start) / inner)
    return best


def _warm_up(fn, sync, seconds=0.5):
    start = time.perf_counter()
    while True:
        fn()
        sync()
        if time.perf_counter() - start > seconds:
            return


def _torch_time(fn, repeat=5, inner=10):
    import torch
    _warm_up(fn, torch.cuda.synchronize)
    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / inner)
    return best


def standalone(gpu=False, out=sys.stdout, only=None):
    backend = _backend()
    rows = []
    print(f"backend: {backend}", file=out)

    # per-op cost of a tiny op in a long chain
    x = Tensor.from_data(np.ones(16, np.float32), backend=backend)

    def chain():
        y = x
        for _ in range(100):
            y = y + 1
        return y

    if only in (None, "dispatch"):
        t = _wgpu_time(backend, chain, inner=3) / 100
        rows.append(("dispatch: tiny add, chained", f"{t * 1e6:.1f} us/op", "-"))

    torch = None
    if gpu:
        import torch
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        dev = "cuda"

    n_el = ((1 << 28) if gpu else ELEMENTS) if only in (None, "elementwise") else 4
    a = np.random.default_rng(0).standard_normal(n_el, dtype=np.float32)
    xa = Tensor.from_data(a, backend=backend)
    xb = Tensor.from_data(a[::-1].copy(), backend=backend)
    for name, fn, tfn, nfn, nbytes in [] if only not in (None, "elementwise") else [
        ("add", lambda: xa + xb, lambda u, v: u + v, lambda: a + a, 12),
        ("gelu_custom", lambda: gelu_custom(xa), lambda u, v: gelu_custom(u),
         lambda: _gelu_numpy(a), 8),
    ]:
        t = _wgpu_time(backend, fn, repeat=3, inner=3 if not gpu else 10)
        ours = nbytes * n_el / t / 1e9
        if gpu:
            u = torch.from_numpy(a).to(dev)
            v = torch.from_numpy(a[::-1].copy()).to(dev)
            ref = nbytes * n_el / _torch_time(lambda t=tfn, u=u, v=v: t(u, v)) / 1e9
            rows.append((f"{name} {n_el} float32", f"{ours:.0f} GB/s", f"torch {ref:.0f} GB/s"))
        else:
            ref = nbytes * n_el / _clock(nfn, 3, 3) / 1e9
            rows.append((f"{name} {n_el} float32", f"{ours:.2f} GB/s", f"numpy {ref:.2f} GB/s"))

    for n in () if only not in (None, "matmul") else (1024, 2048, 4096) if gpu else (256, 512,
                                                                                      1024):
        a, b = _pair((n, n))
        x, y = Tensor.from_data(a, backend=backend), Tensor.from_data(b, backend=backend)
        got = (x @ y).to_numpy()
        err = float(np.abs(got - a @ b).max())
        t = _wgpu_time(backend, lambda x=x, y=y: x @ y, repeat=3, inner=10 if gpu else 2)
        ours = 2 * n ** 3 / t / 1e9
        if gpu:
            u, v = torch.from_numpy(a).to(dev), torch.from_numpy(b).to(dev)
            ref = 2 * n ** 3 / _torch_time(lambda u=u, v=v: u @ v) / 1e9
            rows.append((f"matmul {n}^3 fp32 (max err {err:.1e})", f"{ours / 1e3:.1f} TFLOP/s",
                         f"cuBLAS {ref / 1e3:.1f} TFLOP/s ({ours / ref:.2f}x)"))
        else:
            ref = 2 * n ** 3 / _clock(lambda a=a, b=b: a @ b, 3, 2) / 1e9
            rows.append((f"matmul {n}^3 fp32", f"{ours:.1f} GFLOP/s", f"numpy {ref:.1f} GFLOP/s"))

    width = max(len(r[0]) for r in rows)
    for case, ours, ref in rows:
        print(f"{case.ljust(width)} | {ours:>16} | {ref}", file=out)
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="GPU sizes, against torch on CUDA")
    parser.add_argument("--only", choices=["dispatch", "elementwise", "matmul"])
    args = parser.parse_args()
    standalone(gpu=args.gpu, only=args.only)
