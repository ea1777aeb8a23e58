"""NdArray's native C kernels (core/ember/backends/native) against NumPy's path for the same
ops, in one process, on the MNIST model's shapes (batch 64, 3x3 kernels): conv2d, its input
gradient conv_transpose2d, its weight gradient conv2d_weight, GELU and its gradient; and
(gemm_split) the training steps' float32 products split over kernels.c's thread pool against
OpenBLAS's own threads.

"ember" is the C kernel (a thread per CPU for the convolutions), "reference" the op's NumPy
implementation as it runs without them (NdArray(kernels="numpy")): im2col + GEMMs on
OpenBLAS's own threads, GELU in cache-sized blocks; the C side runs with the native set active.
Both are checked to agree before timing. The two are timed one after the other, not
interleaved, with a pause after the NumPy side: OpenBLAS's idle workers busy-wait for ~0.1 s
after a call, and interleaved timing would charge their spinning to the next C kernel.
Without a C compiler (or with EMBER_NATIVE=0) there is nothing to compare: the rows say so.
"""

import os
import time

import numpy as np

from ember.ops import kernels, numerics
from ember.ops import nn as N

BATCH = 64
LAYERS = [(1, 8, 28), (8, 16, 26), (16, 24, 24)]  # in channels, out channels, input size
ZERO = ((0, 0), (0, 0))


def _native():
    """The native kernel set, loaded; or the reason there is none."""
    if os.environ.get("EMBER_NATIVE") == "0":
        return None, "EMBER_NATIVE=0"
    from ember.backends import native
    try:
        native.load()
    except OSError as e:
        return None, str(e)
    return native.KERNELS, None


def _cases():
    rng = np.random.default_rng(0)
    for c, o, size in LAYERS:
        x = rng.standard_normal((BATCH, c, size, size)).astype(np.float32)
        w = (rng.standard_normal((o, c, 3, 3)) / 3).astype(np.float32)
        b = rng.standard_normal(o).astype(np.float32)
        g = rng.standard_normal((BATCH, o, size - 2, size - 2)).astype(np.float32)
        shape = f"[{BATCH},{c},{size},{size}] -> {o}ch"
        yield f"conv2d {shape}", lambda x=x, w=w, b=b: N._conv2d_np(
            x, w, b, stride=(1, 1), padding=ZERO, dilation=(1, 1), groups=1)
        if c > 1:  # (the first layer's input needs no gradient)
            yield f"conv_transpose2d (input grad) {shape}", lambda g=g, w=w: \
                N._conv_transpose2d_np(g, w, (1, 1), ZERO, (1, 1), 1)
        yield f"conv2d_weight (weight grad) {shape}", lambda x=x, g=g: N._conv2d_weight_np(
            x, g, (3, 3), (1, 1), ZERO, (1, 1), 1)
    x = rng.standard_normal((BATCH, 24, 22, 22)).astype(np.float32)
    g = rng.standard_normal(x.shape).astype(np.float32)
    y = numerics.gelu(x)  # (outside kernels.using: NumPy's, whose gradient reads Phi(x) from y)
    yield "gelu [64,24,22,22]", lambda: numerics.gelu(x)
    yield "gelu_grad [64,24,22,22]", lambda: numerics.gelu_grad(g, x, y)


def kernels_vs_numpy(ctx):
    native, why = _native()
    rows = []
    for case, fn in _cases():
        if native is None:
            rows.append(ctx.row(f"{case}: no native kernels ({why})", float("nan"),
                                float("nan"), "ms"))
            continue

        def native_path(fn=fn):
            with kernels.using(native):
                return fn()
        want = fn()  # (outside kernels.using: NumPy's set)
        np.testing.assert_allclose(native_path(), want, rtol=1e-4,
                                   atol=1e-4 * np.abs(want).max())
        time.sleep(0.2)  # OpenBLAS's workers go idle
        ours = ctx.measure(native_path)[0]
        theirs = ctx.measure(fn)[0]
        time.sleep(0.2)
        rows.append(ctx.time_row(case, ours, theirs))
    return rows


# the training steps' products: the MLP's (784 -> 256 forward, its weight gradient), a square
# one, and a larger one
GEMMS = [(64, 784, 256), (784, 64, 256), (256, 256, 256), (128, 1024, 512)]


def gemm_split(ctx):
    """A float32 product split over kernels.c's pool (gemm_part: cblas_sgemm per part, OpenBLAS
    single-threaded) against np.matmul on OpenBLAS's own threads, as many as this process may
    use; timed one side after the other, as above."""
    native, why = _native()
    from ember.backends import native as module
    blas, threads = module._openblas(), module.THREADS
    rows = []
    for m, k, n in GEMMS:
        case = f"matmul {m}x{k}x{n} float32 over {threads} threads: ember's pool vs OpenBLAS"
        if native is None or blas is None or module._cblas() is None or threads == 1:
            reason = why or ("one CPU" if threads == 1 else "no OpenBLAS found")
            rows.append(ctx.row(f"{case}: not measured ({reason})", float("nan"),
                                float("nan"), "us"))
            continue
        rng = np.random.default_rng(1)
        a, b = (rng.standard_normal(s).astype(np.float32) for s in ((m, k), (k, n)))

        def pool(a=a, b=b):
            module._blas_single(True)
            try:
                return module._split(a, b, (), threads)
            finally:
                module._blas_single(False)
        np.testing.assert_allclose(pool(), a @ b, rtol=1e-4, atol=1e-3)
        blas[0](threads)
        ours = ctx.measure(pool)[0]
        theirs = ctx.measure(lambda a=a, b=b: np.matmul(a, b))[0]
        time.sleep(0.2)  # OpenBLAS's workers go idle
        rows.append(ctx.time_row(case, ours, theirs))
    return rows


def summarize(rows):
    timed = [r for r in rows if r["ratio"] == r["ratio"]]  # (NaN: not measured)
    if not timed:
        return ["nothing measured: no native kernels"]
    from ember.backends import native
    lines = []
    for name, what in (("kernels_vs_numpy", "C kernels / NumPy path"),
                       ("gemm_split", "ember's pool / OpenBLAS's threads")):
        mine = [r for r in timed if r["benchmark"].endswith(name)]
        if mine:
            worst = max(mine, key=lambda r: r["ratio"])
            lines.append(f"{what}: {min(r['ratio'] for r in mine):.2f}x to "
                         f"{worst['ratio']:.2f}x ({worst['case']})")
    return lines + ["timed one side after the other, not interleaved (see "
                    "bench/native_kernels.py)", native.status()]


BENCHMARKS = {"kernels_vs_numpy": kernels_vs_numpy, "gemm_split": gemm_split}
