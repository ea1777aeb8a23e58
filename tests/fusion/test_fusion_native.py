"""Fusion(NdArray()) natively: each fused block runs as one C kernel generated for it
(ember/backends/native/fused.py). Its results must be those of NumPy's tiled path (the same
operations: equal bit for bit where the C library is not involved), for broadcast, strided and
permuted inputs, scalars, every dtype and the special values; one compilation serves every
size and every scalar value, and the disk cache serves a second process; kernels="numpy", a
compiler that fails and a block's scalars NumPy would read otherwise all keep NumPy's path."""

import math
import os
import warnings

import numpy as np
import pytest

import ember
from ember import Tensor
from ember.backend import Fusion, NdArray
from ember.backend.base import OpRecord
from ember.backends import native
from ember.backends.native import fused
from ember.fusion import Block
from ember.ops import prims

from .test_fusion import GRAPHS, gelu_custom

pytestmark = pytest.mark.skipif(native.compiler() is None and os.environ.get("CI") != "true",
                                reason="no C compiler on this machine")


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """Kernels compiled at first sight, into an empty cache; fused's counters from 0."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(fused, "COMPILE_AT", 0)
    monkeypatch.setattr(fused, "_kernels", {})
    monkeypatch.setattr(fused, "counters", dict.fromkeys(fused.counters, 0))
    return tmp_path


def _run(fn, arrays, backend):
    ts = [Tensor.from_data(a, backend=backend) for a in arrays]
    with ember.fusion.trace() as t:
        out = fn(*ts)
        values = [o.to_numpy() for o in out] if isinstance(out, tuple) else out.to_numpy()
    return values, t


def _both(fn, *arrays):
    """(generated kernel's result, NumPy tiles' result, the generated run's trace); every
    fused block of the first ran as a generated kernel."""
    runs = fused.counters["runs"]
    got, t = _run(fn, arrays, Fusion(NdArray()))
    blocks = sum(len(k.ops) > 1 for k in t.kernels)
    assert fused.counters["runs"] - runs == blocks, "a block did not run its generated kernel"
    want, _ = _run(fn, arrays, Fusion(NdArray(kernels="numpy")))
    return got, want, t


def _equal(got, want):
    """Equal values (NaN where NaN), dtypes, shapes, and the signs of zeros."""
    pairs = zip(got, want) if isinstance(got, list) else [(got, want)]
    for g, w in pairs:
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
        if g.dtype.kind == "f":
            np.testing.assert_array_equal(np.signbit(g), np.signbit(w))


def _rand(shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def test_gelu_custom_is_one_generated_kernel_compiled_once_for_every_size(fresh):
    x = _rand(5000)
    got, want, t = _both(gelu_custom, x)
    _equal(got, want)
    assert [k.ops for k in t.kernels] == [("div", "erf", "add", "mul", "div")]
    assert t.compiled == 1 and fused.counters["compiled"] == 1
    for shape in [(3,), (70000,), (37, 41), (2, 3, 4, 5)]:  # other sizes, all dense: no compile
        got, want, t = _both(gelu_custom, _rand(shape, 1))
        _equal(got, want)
        assert t.compiled == 0 and len(t.kernels) == 1
    assert fused.counters["compiled"] == 1


def test_the_disk_cache_serves_a_new_process(fresh, monkeypatch):
    _both(gelu_custom, _rand(100))
    assert fused.counters["compiled"] == 1
    monkeypatch.setattr(fused, "_kernels", {})  # as a new process: loaded from the cache
    _, _, t = _both(gelu_custom, _rand(100))
    assert t.compiled == 0 and fused.counters == {"compiled": 1, "loaded": 2, "runs": 2}
    assert len(list((fresh / "ember" / "native").glob("fused-*.so"))) == 1


def test_scalars_are_arguments_one_compilation_for_every_value(fresh):
    x = _rand((30, 30))
    for s in [0.5, -3.0, 1e30, math.inf, math.nan, 7]:
        got, want, t = _both(lambda a, s=s: a * s + 1, x)
        _equal(got, want)
    # a float and an int scalar: two signatures, one source (the scalar in x's dtype)
    assert fused.counters["compiled"] == 1 and fused.counters["loaded"] == 2


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_the_fusion_graphs_equal_numpys_path(fresh, name):
    fn, shapes, _ = GRAPHS[name]
    got, want, _ = _both(fn, *(_rand(s, seed) for seed, s in enumerate(shapes)))
    # sin, exp and tanh are the C library's here and NumPy's own there: an ulp apart at most
    # (after a cancellation, as in exp(x) - 3: an ulp of the larger term)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


LAYOUTS = {  # inputs the block reads broadcast along some dims, strided, permuted or reversed
    "broadcast-inner": (lambda a, b, c: a * b + c, [(4, 5, 6), (5, 1), (6,)]),
    "broadcast-outer": (lambda a, b: (a - b) * (a + b), [(3, 1, 7), (1, 4, 7)]),
    "zero-d": (lambda a, b: (a + b) * b, [(5, 3), ()]),
    "strided": (lambda a: (a[::2, 1::3] * 2).abs() + a[1::2, ::3], [(8, 9)]),
    "permuted": (lambda a, b: a.permute(2, 0, 1) * b + 1, [(3, 4, 5), (5, 3, 4)]),
    "reversed": (lambda a: (a[::-1, ::-2] - 1) * a[::-1, ::-2], [(6, 7)]),
    "long-rows": (lambda a, b: (a * b).relu() - b, [(3, 70001), (70001,)]),
    "many-dims": (lambda a, b: a * b - a, [(2, 1, 3, 1, 2, 3, 2), (3, 2, 1, 1)]),
}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_broadcast_strided_and_permuted_inputs(fresh, name):
    fn, shapes = LAYOUTS[name]
    got, want, t = _both(fn, *(_rand(s, seed) for seed, s in enumerate(shapes)))
    _equal(got, want)
    assert sum(len(k.ops) > 1 for k in t.kernels) == 1


SPECIAL = np.array([0.0, -0.0, 1.0, -1.5, 2.5, 1e-40, -1e-45, 3e38, -3e38, np.inf, -np.inf,
                    np.nan, 4.0, -4.0, 1e10, -2147483648.0, 2147483647.0, 9.3e18], np.float32)


def _special(dtype=np.float32):
    a = SPECIAL.astype(dtype)
    return np.stack([a, np.roll(a, 5), np.roll(a, 11)])


SPECIAL_CHAINS = {  # NaN, inf, signed zeros, division by zero, domains, saturating casts
    "maximum-minimum": lambda a, b: a.maximum(b) - a.minimum(b) * 2,
    "relu-abs-neg": lambda a, b: (a.relu() + (-b).abs()) * b,
    "div-sqrt": lambda a, b: (a / b).sqrt() + (b / 0.0),
    "compare-select": lambda a, b: a.mask_where(a != b, 0.5).mask_where(a < 1, b) + 1,
    "casts": lambda a, b: ((a * 3).cast("int32").cast("float32") + b.cast("int64").cast(
        "float32") + (a - b).cast("bool").cast("float32")),
    "erf-gelu": lambda a, b: (a * 0.5).erf() * a.gelu() + b,
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(SPECIAL_CHAINS))
def test_special_values_as_numpys_path(fresh, name, dtype):
    got, want, _ = _both(SPECIAL_CHAINS[name], _special(dtype), _special(dtype)[::-1].copy())
    if name == "erf-gelu":  # the C library's exp (float64 erf), kernels.c's gelu (float32)
        tol = 1e-6 if dtype == np.float32 else 1e-15
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    else:
        _equal(got, want)


def test_library_functions_within_an_ulp_or_two(fresh):
    fn = lambda a, b: (a.exp() + b.abs().log()).tanh() + a.sin() * b.cos() + a.abs() ** b  # noqa
    for dtype, tol in [(np.float32, 1e-6), (np.float64, 1e-14)]:
        a, b = _rand((40, 50), 0, dtype), _rand((40, 50), 1, dtype)
        got, want, _ = _both(fn, a, b)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_integer_and_bool_dtypes(fresh):
    rng = np.random.default_rng(3)
    big = rng.integers(-2**31, 2**31, (50, 20), dtype=np.int64)
    for dtype in [np.int32, np.int64]:
        a, b = big.astype(dtype), big[::-1].astype(dtype)
        fn = lambda a, b: ((a * b + 7) * 65536 - a.abs() + (-b)).maximum(a.minimum(b)) * 3  # noqa
        got, want, _ = _both(fn, a, b)  # wrapping as NumPy's integers do
        _equal(got, want)
        got, want, _ = _both(lambda a, b: (a > b).mask_where(a == b, True) != (a <= 0), a, b)
        assert got.dtype == np.bool_
        _equal(got, want)
        got, want, _ = _both(lambda a, b: a.relu().cast("float32") / 3 + b.cast("float64")
                             .cast("float32"), a, b)
        _equal(got, want)
    m = rng.random((50, 20)) < 0.5
    got, want, _ = _both(lambda a, m: (a * 2).mask_where(m, -1.0) + m.cast("float32"),
                         _rand((50, 20)), m)
    _equal(got, want)


def test_multiple_outputs_are_each_written(fresh):
    def fn(a, b):  # the result read first: its block writes h too (a tensor holds it)
        h = a * b + 1
        return (h.exp() * a).relu(), h
    got, want, t = _both(fn, _rand((9, 9)), _rand((9,), 1))
    np.testing.assert_allclose(got[0], want[0], rtol=3e-7)
    _equal(got[1], want[1])
    assert [k.ops for k in t.kernels] == [("mul", "add", "exp", "mul", "relu")]


def test_kernels_numpy_in_the_same_process_never_runs_them(fresh):
    x = _rand(2000)
    numpy_side = Fusion(NdArray(kernels="numpy"))
    before = dict(fused.counters)
    want, _ = _run(gelu_custom, [x], numpy_side)
    assert fused.counters == before
    got, _ = _run(gelu_custom, [x], Fusion(NdArray()))
    assert fused.counters["runs"] == before["runs"] + 1
    _run(gelu_custom, [x], numpy_side)
    assert fused.counters["runs"] == before["runs"] + 1
    _equal(got, want)


def test_large_blocks_split_over_the_pool_and_threads_1_keeps_one(fresh, monkeypatch):
    parts = []
    real = fused._parallel
    monkeypatch.setattr(fused, "_parallel",
                        lambda part, args, n, k: parts.append(k) or real(part, args, n, k))
    x = _rand(4 * fused.MIN_PARALLEL + 3)
    for threads, split in [(None, native.THREADS > 1), (1, False)]:
        parts.clear()
        got, _ = _run(gelu_custom, [x], Fusion(NdArray(threads=threads)))
        want, _ = _run(gelu_custom, [x], Fusion(NdArray(kernels="numpy")))
        _equal(got, want)
        assert parts == ([min(native.THREADS, 4)] if split else []), (threads, parts)


def test_small_signatures_wait_until_they_have_covered_compile_at(fresh, monkeypatch):
    monkeypatch.setattr(fused, "COMPILE_AT", 1000)
    x = _rand(400)
    # 400 and 800 elements on NumPy's path, compiled at 1200, then loaded
    for compiled, now, runs in [(0, 0, 0), (0, 0, 0), (1, 1, 1), (1, 0, 2)]:
        _, t = _run(gelu_custom, [x], Fusion(NdArray()))
        assert (fused.counters["compiled"], t.compiled, fused.counters["runs"]) == (
            compiled, now, runs)


def _block(a, b, dtype):
    """add(a, b) then neg, as Fusion would hand it to NdArray.fuse."""
    nodes = [OpRecord(prims.add, (("leaf", 0), b if np.isscalar(b) else ("leaf", 1)), {},
                      a.shape, dtype), OpRecord(prims.neg, (("node", 0),), {}, a.shape, dtype)]
    return Block(nodes, [a] if np.isscalar(b) else [a, b], [1], a.shape)


def test_what_numpy_would_read_otherwise_keeps_numpys_path(fresh):
    a = _rand((4, 4))
    i = a.astype(np.int32)
    for block in [_block(a, a.astype(np.float64), "float64"),  # mixed dtypes: NumPy promotes
                  _block(i, 2**40, "int32"),  # beyond int32: NumPy's own error
                  _block(i, 2.5, "int32"),  # a float for an int: NumPy promotes
                  _block(a > 0, 2, "bool")]:  # 2 is no bool
        assert fused.fuse(block) is None
    assert fused.fuse(_block(i, -7, "int32")) is not None  # (the same blocks otherwise run)
    assert fused.counters["runs"] == 1


def test_a_failing_compiler_warns_once_and_numpy_computes(fresh, monkeypatch):
    def failing(*args, build=True, **kw):
        if build:
            raise OSError("cc: error: no such thing")
    monkeypatch.setattr(fused, "compile_library", failing)
    x = _rand(300)
    with pytest.warns(RuntimeWarning, match="no such thing"):
        got, _ = _run(gelu_custom, [x], Fusion(NdArray()))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once: not again
        got2, _ = _run(gelu_custom, [x], Fusion(NdArray()))
    want, _ = _run(gelu_custom, [x], Fusion(NdArray(kernels="numpy")))
    _equal(got, want)
    _equal(got2, want)
    assert fused.counters["runs"] == 0
