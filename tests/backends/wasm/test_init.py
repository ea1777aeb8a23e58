"""The routing in ember.backends.wasm. Natively NumPy keeps every GEMM and nothing is loaded;
the wasm matmul's dispatch (which products it takes, the addresses and strides it passes for
batched, broadcast and transposed inputs) is checked here with a NumPy stand-in for the kernel
that works on the very addresses it is given. The kernel itself runs inside Pyodide against
NumPy in e2e/test_pyodide_conformance.py."""

import ctypes

import numpy as np
import pytest

from ember.backends import wasm
from ember.ops import kernels

as_strided = np.lib.stride_tricks.as_strided


K = wasm.KERNELS


def test_natively_the_gemm_is_not_webassembly():
    # NumPy's, or natively compiled C's pool (backends/native), never this module's
    from ember.backend import NdArray
    assert NdArray().kernels is not K and NdArray(kernels="numpy").kernels is kernels.NUMPY
    assert kernels.active() is kernels.NUMPY  # outside an NdArray op
    assert wasm.variant() is None


def test_loading_without_a_module_is_a_clear_oserror(monkeypatch, tmp_path):
    monkeypatch.setattr(wasm, "HERE", tmp_path)
    monkeypatch.setattr(wasm, "_lib", None)
    with pytest.raises(OSError, match=r"missing \(build it: make kernels\)"):
        wasm.load()


def _at(ptr, shape, strides):
    first = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(1,))
    return as_strided(first, shape, strides)


@pytest.fixture
def stand_in(monkeypatch):
    """wasm._call executed by NumPy at the raw addresses (the kernel's calling convention)."""
    calls = []

    def call(sa, sb, pa, pb, pc, m, n, k):
        calls.append((m, n, k))
        a, b = _at(pa, (m, k), sa), _at(pb, (k, n), sb)
        _at(pc, (m, n), (4 * n, 4))[...] = a.astype(np.float64) @ b.astype(np.float64)

    monkeypatch.setattr(wasm.Wasm, "_call", lambda self, *args: call(*args))
    monkeypatch.setattr(wasm, "_lib", object())  # "loaded": the set's methods run
    return calls


rng = np.random.default_rng(9)


def _pair(sa, sb, dtype=np.float32):
    return rng.standard_normal(sa).astype(dtype), rng.standard_normal(sb).astype(dtype)


@pytest.mark.parametrize("sa, sb", [
    ((33, 130), (130, 17)),              # 2-D, sizes not multiples of 4
    ((3, 1, 20, 50), (4, 50, 21)),       # batch broadcast both ways
    ((1, 64, 27), (2, 1, 27, 45)),       # the convolution's [G, O, K] @ [N, G, K, P]
    ((1, 64, 27), (1, 1, 27, 45)),       # ... at batch 1: one GEMM on the matrices' views
    ((1, 1, 40, 30), (30, 50)),          # batch dims of 1 on the left only
    ((2, 64, 600), (600, 9)),            # a 2-D right side broadcast over a batch
    ((1, 300), (300, 129)),              # one row (the kernel streams B)
])
def test_dispatch_matches_numpy(stand_in, sa, sb):
    a, b = _pair(sa, sb)
    got = K.matmul(a, b)
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert got.dtype == np.float32 and got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    assert stand_in and len(stand_in) == int(np.prod(ref.shape[:-2]))


def test_transposed_and_sliced_views_go_zero_copy(stand_in):
    a, b = _pair((40, 30), (50, 40))
    a_t, b_t = a.T[::-1], b.T[:, ::2]  # [30, 40] reversed rows, [40, 25] every other column
    np.testing.assert_allclose(K.matmul(a_t, b_t), a_t @ b_t, rtol=1e-4, atol=1e-4)
    x = rng.standard_normal((3, 50, 40)).astype(np.float32).transpose(0, 2, 1)  # [3, 40, 50]
    np.testing.assert_allclose(K.matmul(x, b), x @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("sa, sb, dtype", [
    ((4, 4), (4, 4), np.float32),        # below the break-even size
    ((64, 64), (64, 64), np.float64),    # float64: NumPy's
    ((64, 64), (64, 64), np.int32),
    ((64,), (64, 64), np.float32),       # a vector operand
])
def test_numpy_keeps_the_rest(stand_in, sa, sb, dtype):
    a, b = _pair(sa, sb, dtype)
    np.testing.assert_array_equal(K.matmul(a, b), np.matmul(a, b))
    assert stand_in == []


def test_shape_errors_are_numpys(stand_in):
    a, b = _pair((64, 30), (31, 64))
    with pytest.raises(ValueError, match="matmul"):
        K.matmul(a, b)


def test_loaded_on_first_use_not_at_import(monkeypatch, stand_in):
    """Nothing loads until a method of the set is called; the first call loads the kernels
    and is computed by them, and an NdArray running with the set routes its ops to them."""
    from ember import Tensor
    from ember.backend import NdArray
    loads = []
    monkeypatch.setattr(wasm, "_lib", None)

    def load():
        loads.append(1)
        wasm._lib = object()
        return "simd128"
    monkeypatch.setattr(wasm, "load", load)
    B = NdArray(kernels=K)
    assert loads == []
    a, b = _pair((40, 50), (50, 30))
    got = (Tensor.from_data(a, backend=B) @ Tensor.from_data(b, backend=B)).to_numpy()
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)
    assert loads == [1] and stand_in == [(40, 30, 50)]
    K.matmul(a, b)
    assert loads == [1]
    # another instance in the same process keeps NumPy's GEMM
    Tensor.from_data(a, backend=NdArray(kernels="numpy")).matmul(Tensor.from_data(b)).to_numpy()
    assert stand_in == [(40, 30, 50)] * 2


def test_a_module_that_does_not_load_leaves_numpy_with_one_warning(monkeypatch):
    def fail():
        raise OSError("no WebAssembly kernel module loads here")
    monkeypatch.setattr(wasm, "load", fail)
    monkeypatch.setattr(wasm, "_lib", None)
    monkeypatch.setattr(wasm, "_failed", False)
    a, b = _pair((4, 5), (5, 3))
    with pytest.warns(RuntimeWarning, match="NumPy computes everything"):
        np.testing.assert_allclose(K.matmul(a, b), a @ b, rtol=1e-6)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning (nor load), NumPy's results
        np.testing.assert_array_equal(K.add(a, a), a + a)
        assert K.take(a.reshape(-1), np.arange(3, dtype=np.int32)) is None
    assert K.compile_plan([], [], [], [], None) is None


@pytest.mark.parametrize("sa, sb", [((0, 2), (0, 1)), ((0, 5000), (1, 5000)), ((3, 0), (0,))])
def test_binary_ops_on_empty_operands_are_numpys(monkeypatch, sa, sb):
    # routed add/mul check sizes before they work out rows (an empty operand has none): found
    # by the conformance suite's property tests in Pyodide (a ZeroDivisionError before)
    monkeypatch.setattr(wasm, "_lib", object())  # "loaded": a call into it would fail
    a, b = _pair(sa, sb)
    for fn, ref in ((K.add, np.add), (K.multiply, np.multiply)):
        got = fn(a, b)
        assert got.shape == ref(a, b).shape and got.dtype == np.float32
