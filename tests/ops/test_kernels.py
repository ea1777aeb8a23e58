"""ember.ops.kernels: the inner loops behind matmul, the convolutions and max pooling, on
random shapes above the WebAssembly kernels' break-even sizes, sizes that are not multiples of
the kernels' tiles (4, 6, 8), transposed and broadcast operands, padding, strides, dilation.

In CPython they are NumPy's own (or the native C set's); inside Pyodide
(e2e/test_pyodide_conformance.py runs this file there) NdArray runs with the WebAssembly SIMD
set, so the same cases check those kernels against NumPy references: float64 NumPy for
products and convolutions (float64 never leaves NumPy), and ember's NumPy implementation for
max pooling's indices (exact)."""

import sys

import numpy as np
import pytest

from ember import Tensor
from ember.backend import Autodiff, NdArray
from ember.errors import ShapeError
from ember.nn import functional as F
from ember.ops import OPS, kernels
from ember.tensor import _apply

PYODIDE = sys.platform == "emscripten"
rng = np.random.default_rng(20261130)


K = NdArray().kernels  # the set NdArray runs with here: WebAssembly's inside Pyodide


def test_the_kernels_are_on_exactly_inside_pyodide():
    from ember.backends import wasm
    if PYODIDE:
        # loaded on first use: any call of the set loads them
        a = _f32(64, 64)
        np.testing.assert_allclose(K.matmul(a, a), a @ a, rtol=1e-4, atol=1e-4)
        assert wasm.variant() in ("relaxed", "simd128") and K is wasm.KERNELS
    else:
        # natively: NumPy's, or the C kernels' thread pool (backends/native)
        assert wasm.variant() is None and K is not wasm.KERNELS
    assert NdArray(kernels="numpy").kernels is kernels.NUMPY


def _f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def _close(got, ref, k):
    # float32 products of k terms: rounding grows ~sqrt(k); relaxed SIMD may fuse multiply-adds
    np.testing.assert_allclose(got, ref, rtol=2e-5 * np.sqrt(k) + 1e-5,
                               atol=2e-5 * np.sqrt(k) * max(1.0, float(np.abs(ref).max())))


MATMULS = [((m, k), (k, n)) for m, k, n in (
    (1, 3136, 128), (1, 37, 130), (2, 40, 45), (3, 129, 67), (5, 64, 64), (7, 300, 9),
    (13, 17, 31), (33, 130, 17), (64, 288, 196), (121, 255, 10), (130, 513, 50), (257, 3, 70))] + [
    ((3, 1, 20, 30), (4, 30, 21)), ((1, 64, 27), (2, 1, 27, 45)), ((1, 64, 27), (1, 1, 27, 45)),
    ((2, 64, 600), (600, 9)),
    ((6, 45, 33), (6, 33, 19))]


@pytest.mark.parametrize("sa, sb", MATMULS, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("layout", ["rows", "transposed"])
def test_matmul(sa, sb, layout):
    a, b = _f32(*sa), _f32(*sb)
    if layout == "transposed":  # the same values through transposed views (x @ W.T, ...)
        a = np.ascontiguousarray(np.swapaxes(a, -1, -2)).swapaxes(-1, -2)
        b = np.ascontiguousarray(np.swapaxes(b, -1, -2)).swapaxes(-1, -2)
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    got = K.matmul(a, b)
    assert got.dtype == np.float32 and got.shape == ref.shape
    _close(got, ref, sa[-1])
    out = (Tensor.from_data(a) @ Tensor.from_data(b)).to_numpy()  # through the op table
    _close(out, ref, sa[-1])


def test_matmul_sliced_and_reversed_views():
    a, b = _f32(90, 70), _f32(61, 140)
    a, b = a[::-2, 3:64], b[:, ::-3].T  # [45, 61], [47, 61] -> b.T [61, 47]
    _close(K.matmul(a, b.T), a.astype(np.float64) @ b.T.astype(np.float64), 61)


def test_special_values_propagate():
    a, b = _f32(20, 40), _f32(40, 30)
    a[3, 5], b[7, 2] = np.nan, np.inf
    ref, got = a.astype(np.float64) @ b.astype(np.float64), K.matmul(a, b)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(ref))


CONVS = [  # x shape, weight shape, stride, padding, dilation, groups
    ((1, 1, 28, 28), (32, 1, 3, 3), 1, 1, 1, 1),
    ((1, 32, 14, 14), (64, 32, 3, 3), 1, 1, 1, 1),
    ((1, 3, 61, 59), (16, 3, 3, 3), 2, 0, 1, 1),
    ((2, 16, 15, 13), (24, 16, 1, 1), 1, 0, 1, 1),
    ((1, 12, 19, 17), (18, 4, 3, 5), (2, 1), (2, 1), (1, 2), 3),
    ((1, 7, 23, 21), (9, 7, 5, 3), 1, 2, 2, 1),
]


@pytest.mark.parametrize("xs, ws, stride, padding, dilation, groups", CONVS,
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_conv2d_and_its_gradients(xs, ws, stride, padding, dilation, groups):
    x, w = _f32(*xs), _f32(*ws)
    args = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    k = ws[1] * ws[2] * ws[3]

    def run(dtype):
        b = Autodiff(NdArray())
        xt = Tensor.from_data(x.astype(dtype), backend=b).require_grad()
        wt = Tensor.from_data(w.astype(dtype), backend=b).require_grad()
        y = F.conv2d(xt, wt, **args)
        g = np.cos(np.arange(y.numel())).reshape(y.shape).astype(dtype)
        grads = (y * Tensor.from_data(g, backend=b)).sum().backward()
        return y.to_numpy(), xt.grad(grads).to_numpy(), wt.grad(grads).to_numpy()

    for got, ref in zip(run(np.float32), run(np.float64)):
        _close(got, ref, k * 4)


# (channels, stride, dilation): inside Pyodide the one-call path (columns, GEMM and bias in
# WebAssembly), and 3x3 at stride 1 from 8 channels Winograd F(2x2, 3x3) (odd output sizes:
# partial tiles and groups)
CONV_PATHS = {"columns": (6, (2, 1), (1, 2)), "winograd": (8, (1, 1), (1, 1))}


@pytest.mark.parametrize("path", list(CONV_PATHS))
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
@pytest.mark.parametrize("padding", [((1, 1), (1, 1)), ((2, -1), (-2, 3)), ((0, 1), (2, 0))])
def test_conv2d_with_bias_strided_inputs_and_cropping(path, layout, padding):
    # against float64 NumPy, on inputs that are views and with the negative padding gradients use
    c, stride, dilation = CONV_PATHS[path]
    x, w, b = _f32(2, c, 17, 15), _f32(10, c, 3, 3), _f32(10)
    if layout == "transposed":
        x = np.ascontiguousarray(x.swapaxes(2, 3)).swapaxes(2, 3)
    elif layout == "sliced":
        x = _f32(2, c, 34, 15)[:, :, ::2]
    attrs = dict(stride=stride, padding=padding, dilation=dilation, groups=1)
    got = _apply(OPS["conv2d"], Tensor.from_data(x), Tensor.from_data(w), Tensor.from_data(b),
                 **attrs).to_numpy()
    ref = _apply(OPS["conv2d"], *(Tensor.from_data(a.astype(np.float64)) for a in (x, w, b)),
                 **attrs).to_numpy()
    _close(got, ref, c * 9)


POOLS = [  # x shape, kernel, stride, padding, dilation, ceil_mode
    ((1, 32, 28, 28), 2, 2, 0, 1, False),
    ((1, 64, 111, 111), 3, 2, 0, 1, True),
    ((2, 5, 17, 19), 3, 1, 1, 1, False),
    ((1, 6, 23, 13), (3, 2), (2, 3), (1, 1), (2, 1), True),
    ((1, 3, 9, 30), (1, 4), (1, 3), (0, 2), 1, False),
]


@pytest.mark.parametrize("xs, kernel, stride, padding, dilation, ceil_mode", POOLS,
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
@pytest.mark.parametrize("values", ["random", "ties", "nan_inf", "transposed"])
def test_max_pool2d_indices(xs, kernel, stride, padding, dilation, ceil_mode,
                            values):
    x = _f32(*xs)
    if values != "random":
        x = np.round(x)  # many ties: the first maximum of a window wins
    if values == "nan_inf":
        x[x == 1], x[x == -1] = np.nan, -np.inf
    if values == "transposed":
        x = np.ascontiguousarray(x.swapaxes(2, 3)).swapaxes(2, 3)
    args = dict(kernel_size=kernel, stride=stride, padding=padding, dilation=dilation,
                ceil_mode=ceil_mode, return_indices=True)
    out, idx = (t.to_numpy() for t in F.max_pool2d(Tensor.from_data(x), **args))
    alone = F.max_pool2d(Tensor.from_data(x), **{**args, "return_indices": False}).to_numpy()
    numpy = NdArray(kernels="numpy")  # ember's own NumPy path
    ref_out, ref_idx = (t.to_numpy() for t in F.max_pool2d(Tensor.from_data(x, backend=numpy),
                                                            **args))
    np.testing.assert_array_equal(idx, ref_idx)
    np.testing.assert_array_equal(out, ref_out)
    np.testing.assert_array_equal(alone, ref_out)


@pytest.mark.parametrize("shape", [(4096,), (1, 32, 28, 28), (3, 50, 71), (5,)])
@pytest.mark.parametrize("inplace", [False, True])
def test_relu(shape, inplace):
    x = _f32(*shape)
    x.flat[::7], x.flat[3::11], x.flat[5::13] = np.nan, -0.0, -np.inf
    want = np.maximum(x, np.float32(0))
    if inplace:  # NdArray hands relu its input's buffer when nothing else holds it
        got = Tensor.from_data(x.copy()).relu().to_numpy()
    else:
        t = Tensor.from_data(x)
        got = t.relu().to_numpy()
        np.testing.assert_array_equal(t.to_numpy(), x)  # the input is unchanged
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))  # -0.0 kept, as NumPy


@pytest.mark.parametrize("n", [4096, 5003, 70001])
def test_gather_on_a_flat_array(n):
    x = _f32(n)
    x[::11] = np.nan
    idx = rng.integers(0, n, n + 5).astype(np.int32)
    got = Tensor.from_data(x).gather(0, Tensor.from_data(idx)).to_numpy()
    np.testing.assert_array_equal(got, x[idx])
    for bad in (n, -1):  # the kernel refuses them, the NumPy path words the error
        idx[n // 2] = bad
        with pytest.raises(ShapeError, match=f"index {bad} is out of range for dim 0 of size {n}"):
            Tensor.from_data(x).gather(0, Tensor.from_data(idx))


@pytest.mark.parametrize("value", [0, 0.0, -0.0, 1, -2.5, 0.1, float("inf"), float("nan")])
@pytest.mark.parametrize("shape", [(4096,), (3, 50, 71), (1, 64, 33, 33)])
def test_mask_where_with_a_scalar(shape, value):
    x = _f32(*shape)
    x.reshape(-1)[::13] = np.nan
    mask = x <= 0
    got = Tensor.from_data(x).mask_where(Tensor.from_data(mask), value).to_numpy()
    ref = np.where(mask, value, x).astype(np.float32)
    np.testing.assert_array_equal(got.view(np.int32), ref.view(np.int32))  # bits: -0.0, NaNs
    relu = Tensor.from_data(x).relu().to_numpy()
    np.testing.assert_array_equal(relu, np.where(x <= 0, np.float32(0), x))


@pytest.mark.parametrize("value", [0, -0.0, 1, -2.5, 0.1, 3e38, 16777217, np.inf, np.nan])
@pytest.mark.parametrize("shape", [(4096,), (3, 50, 71)])
def test_comparisons_with_a_scalar(shape, value):
    x = _f32(*shape)
    flat = x.reshape(-1)
    flat[::13], flat[5::17], flat[7::19] = np.nan, np.inf, 0.0
    flat[9::23] = -0.0
    flat[11::29] = np.float32(value)
    t = Tensor.from_data(x)
    for name, ref in (("eq", np.equal), ("ne", np.not_equal), ("lt", np.less),
                      ("le", np.less_equal), ("gt", np.greater), ("ge", np.greater_equal)):
        got = getattr(t, name)(value).to_numpy()
        assert got.dtype == np.bool_
        np.testing.assert_array_equal(got, ref(x, np.float32(value)), err_msg=name)


@pytest.mark.parametrize("sa, sb", [
    ((4096,), (4096,)), ((2, 33, 70), (2, 33, 70)),          # one shape
    ((1, 64, 9, 11), (1, 64, 1, 1)), ((3, 16, 13, 17), (16, 1, 1)),  # a bias, batch 1 and 3
    ((5, 7, 30, 40), (7, 30, 1)), ((70, 80), (1,)), ((2, 9, 300), (2, 9, 1)),
    ((1, 64, 1, 1), (1, 64, 9, 11)),                          # the per-channel operand first
    ((2000, 3), (2000, 1)),                                   # rows shorter than a vector
    ((6, 40, 50), (6, 1, 50)), ((3, 40, 50), (50,)),          # other broadcasts: NumPy
])
def test_add_and_mul(sa, sb):
    a, b = _f32(*sa), _f32(*sb)
    a.reshape(-1)[::31] = np.nan
    ta, tb = Tensor.from_data(a), Tensor.from_data(b)
    two, one = np.float32(2), np.float32(1)
    for got, ref in ((ta + tb, a + b), (ta * tb, a * b), (tb + ta, b + a),
                     (ta * 2 + tb, a * two + b), ((ta + 1) * tb, (a + one) * b)):  # donated
        np.testing.assert_array_equal(got.to_numpy(), ref)
    np.testing.assert_array_equal(ta.to_numpy(), a)  # the inputs are unchanged
    np.testing.assert_array_equal(tb.to_numpy(), b)


def test_a_jit_replay_runs_as_webassembly_programs_inside_pyodide():
    # ember.jit hands its plan to NdArray, which inside Pyodide lowers runs of kernel calls to
    # programs (backends/wasm compile_plan); natively the plan replays op by op. Either way the
    # replay must compute what the function computes.
    import ember
    from ember import nn

    model = ember.models.ConvNet(channels=(8, 16), hidden=24).eval()
    w3 = Tensor.from_data(_f32(12, 16, 3, 3))
    const = Tensor.from_data(_f32(5))

    def f(x, y):
        h = model.pool(model.relu(model.bn1(model.conv1(x))))
        h = model.relu(model.bn2(model.conv2(h)))  # 3x3, 8 -> 16 channels, 14x14: Winograd
        z = nn.functional.conv2d(h, w3, padding=1).relu()
        z = z.mask_where(z > 1.5, 1.5)  # a comparison and a select with a scalar
        logits = model(x) + Tensor.cat([const, const], 0).reshape(1, 10) * 0.5
        # softmax's exp and sum are NumPy's: steps between programs
        return logits.softmax(-1), z.reshape(z.shape[0], -1)[:, :7] * y.reshape(1, -1), y

    fast = ember.jit(f)
    outs = []
    for _ in range(5):
        x, y = Tensor.from_data(_f32(2, 1, 28, 28)), Tensor.from_data(_f32(7))
        got, want = fast(x, y), f(x, y)
        for g, v in zip(got, want):
            np.testing.assert_allclose(g.to_numpy(), v.to_numpy(), rtol=1e-4, atol=1e-5)
        assert np.array_equal(got[2].to_numpy(), y.to_numpy())
        outs.append([g.to_numpy().copy() for g in got])
        kept = got[0].to_numpy()
        fast(x, y)  # results are the caller's: the next replay does not overwrite them
        np.testing.assert_array_equal(kept, outs[-1][0])
    (plan,) = fast._plans.values()
    if PYODIDE:
        assert plan.runner is not None
        runner, _ = plan.runner  # (the compiled runner, the slot order it sees)
        assert any(len(seg) == 4 for seg in runner.segments)  # at least one program
    else:
        assert plan.runner is None
    # arguments laid out differently (a transposed view): replayed op by op, still right
    x = Tensor.from_data(np.ascontiguousarray(_f32(2, 1, 28, 28).swapaxes(2, 3)))
    xt = x.swap_dims(2, 3)
    y = Tensor.from_data(_f32(7))
    for g, v in zip(fast(xt, y), f(xt, y)):
        np.testing.assert_allclose(g.to_numpy(), v.to_numpy(), rtol=1e-4, atol=1e-5)
