"""ember's NdArray backend against raw NumPy on the same arrays, in one process.

Tiny (8x8) float32 shows ember's per-call overhead (the Tensor layer, the op table, dtype and
shape rules, the ownership check); large (1024x1024) float32 shows whether ember keeps up with
NumPy where the arithmetic dominates (the issue's done-when: within 1.1x of NumPy there).
"""

import statistics

import numpy as np

from ember import Tensor
from ember.backend import NdArray

SIZES = {"8x8": (8, 8), "1024x1024": (1024, 1024)}
TINY, LARGE = "8x8", "1024x1024"

# name -> (ember, numpy, ops per call); both take the same two operands
ELEMENTWISE = {
    "add": (lambda a, b: a + b, lambda a, b: a + b, 1),
    "mul": (lambda a, b: a * b, lambda a, b: a * b, 1),
    "exp": (lambda a, b: a.exp(), lambda a, b: np.exp(a), 1),
    "chain5": (lambda a, b: ((a * 2 + 1).exp() - 3) / 4,
               lambda a, b: (np.exp(a * 2 + 1) - 3) / 4, 5),
}
MATMUL = {"matmul": (lambda a, b: a @ b, lambda a, b: a @ b, 1)}
REDUCTIONS = {
    "sum": (lambda a, b: a.sum(), lambda a, b: a.sum(), 1),
    "sum_dim(1)": (lambda a, b: a.sum_dim(1), lambda a, b: a.sum(axis=1, keepdims=True), 1),
    "max_dim(1)": (lambda a, b: a.max_dim(1), lambda a, b: a.max(axis=1, keepdims=True), 1),
}
ALL = {**ELEMENTWISE, **MATMUL, **REDUCTIONS}


def _operands(size):
    """NumPy's operands are views of ember's buffers: the same memory for both. (NumPy's own
    speed on two copies of one array can differ by 15% with their addresses.)"""
    rng = np.random.default_rng(0)
    backend = NdArray()
    ta = Tensor.from_data(rng.random(SIZES[size], dtype=np.float32), backend=backend)
    tb = Tensor.from_data(rng.random(SIZES[size], dtype=np.float32) + np.float32(0.5),
                          backend=backend)
    return (ta.to_numpy(), tb.to_numpy()), (ta, tb)


def _measure(ctx, name, size):
    """(ember Stats, numpy Stats) of one op at one size, measured once per run."""
    key = (__name__, name, size)
    if key not in ctx.cache:
        ember_fn, numpy_fn, _ = ALL[name]
        (a, b), (ta, tb) = _operands(size)
        # the same values, or the timing compares different work (a check, not a timing)
        np.testing.assert_allclose(ember_fn(ta, tb).to_numpy(), numpy_fn(a, b), rtol=1e-4)
        ctx.cache[key] = ctx.measure(lambda: ember_fn(ta, tb), lambda: numpy_fn(a, b))
    return ctx.cache[key]


def _rows(ctx, table):
    for size in SIZES:
        for name in table:
            yield ctx.time_row(f"{name} {size} float32", *_measure(ctx, name, size))


def elementwise(ctx):
    return _rows(ctx, ELEMENTWISE)


def matmul(ctx):
    return _rows(ctx, MATMUL)


def reductions(ctx):
    return _rows(ctx, REDUCTIONS)


def overhead(ctx):
    """ember's cost per op on 8x8 above NumPy's: ember's median minus NumPy's, in us."""
    for name, (_, _, ops) in ALL.items():
        ember, ref = _measure(ctx, name, TINY)
        per = f" ({ops} ops, per op)" if ops > 1 else ""
        yield ctx.row(f"{name} {TINY}: ember - numpy{per}",
                      (ember.median - ref.median) * 1e6 / ops, None, "us/op")


def noise(ctx):
    """NumPy against itself (an A/A test): how far from 1.00x a ratio strays on this machine
    right now when nothing differs."""
    (a, b), _ = _operands(LARGE)
    yield ctx.time_row(f"numpy add {LARGE} vs itself (A/A: noise)",
                       *ctx.measure(lambda: a + b, lambda: a + b))


BENCHMARKS = {"noise": noise, "elementwise": elementwise, "matmul": matmul,
              "reductions": reductions, "overhead": overhead}


def summarize(rows):
    lines = []
    large = [r for r in rows if LARGE in r["case"] and r["ratio"] is not None
             and not r["benchmark"].endswith(".noise")]
    if large:
        worst = max(large, key=lambda r: r["ratio"])
        lines.append(f"{LARGE} float32: ember/numpy from {min(r['ratio'] for r in large):.2f}x "
                     f"to {worst['ratio']:.2f}x (worst: {worst['case']}); the issue's "
                     "target is within 1.1x")
    over = [r["ember"] for r in rows if r["unit"] == "us/op"]
    if over:
        lines.append(f"{TINY} overhead: median {statistics.median(over):.1f} us/op, from "
                     f"{min(over):.1f} to {max(over):.1f} us/op")
    return lines
