"""NdArray's native C kernels (core/ember/backends/native) against NumPy's path for the same
ops, in one process, on the MNIST model's shapes (batch 64, 3x3 kernels): conv2d, its input
gradient conv_transpose2d, its weight gradient conv2d_weight, GELU and its gradient.

"ember" is the C kernel (a thread per CPU for the convolutions), "reference" the op's NumPy
implementation as it runs without them (EMBER_NATIVE=0): im2col + GEMMs on OpenBLAS's own
threads, GELU in cache-sized blocks; the C kernels are switched off around each of its calls.
Both are checked to agree before timing. The two are timed one after the other, not
interleaved, with a pause after the NumPy side: OpenBLAS's idle workers busy-wait for ~0.1 s
after a call, and interleaved timing would charge their spinning to the next C kernel.
Without a C compiler (or with EMBER_NATIVE=0) there is nothing to compare: the rows say so.
"""

import contextlib
import os
import time

import numpy as np

from ember.ops import kernels, numerics
from ember.ops import nn as N

BATCH = 64
LAYERS = [(1, 8, 28), (8, 16, 26), (16, 24, 24)]  # in channels, out channels, input size
ZERO = ((0, 0), (0, 0))


@contextlib.contextmanager
def _numpy_path():
    """ops.kernels bound to their own (NumPy) functions for the duration."""
    bound = {name: getattr(kernels, name) for name in kernels.NUMPY}
    for name, fn in kernels.NUMPY.items():
        setattr(kernels, name, fn)
    try:
        yield
    finally:
        for name, fn in bound.items():
            setattr(kernels, name, fn)


def _native():
    """The native module, installed; or the reason there is none."""
    if os.environ.get("EMBER_NATIVE") == "0":
        return None, "EMBER_NATIVE=0"
    from ember.backends import native
    try:
        native.install()
    except OSError as e:
        return None, str(e)
    return native, None


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
    with _numpy_path():
        y = numerics.gelu(x)  # (NumPy's gradient reads Phi(x) from y = gelu(x))
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

        def numpy_path(fn=fn):
            with _numpy_path():
                return fn()
        want = numpy_path()
        np.testing.assert_allclose(fn(), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
        time.sleep(0.2)  # OpenBLAS's workers go idle
        ours = ctx.measure(fn)[0]
        theirs = ctx.measure(numpy_path)[0]
        time.sleep(0.2)
        rows.append(ctx.time_row(case, ours, theirs))
    return rows


def summarize(rows):
    timed = [r for r in rows if r["ratio"] == r["ratio"]]  # (NaN: not measured)
    if not timed:
        return ["nothing measured: no native kernels"]
    from ember.backends import native
    worst = max(timed, key=lambda r: r["ratio"])
    return [f"C kernels / NumPy path: {min(r['ratio'] for r in timed):.2f}x to "
            f"{worst['ratio']:.2f}x ({worst['case']}); timed one side after the other, not "
            f"interleaved (see bench/native_kernels.py)", native.status()]


BENCHMARKS = {"kernels_vs_numpy": kernels_vs_numpy}
