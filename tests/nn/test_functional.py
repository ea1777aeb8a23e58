"""ember.nn.functional against torch.nn.functional (float32): values, and the gradients of
every input through Autodiff(NdArray()), over grids of the geometry arguments (odd sizes
included), random geometries (hypothesis), double backward, and the error messages."""

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ember
from ember import DTypeError, ShapeError, Tensor
from ember.backend import Autodiff, NdArray
from ember.nn import functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

B = Autodiff(NdArray())
RTOL, ATOL = 1e-4, 1e-5
PROPERTY = settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _close(got, want, what):
    want = want.detach().numpy()
    assert got.shape == want.shape, f"{what}: shape {got.shape} != torch's {want.shape}"
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=what)


def compare(fn_ember, fn_torch, arrays, diff=None, seed=0):
    """fn_ember(*Tensors) against fn_torch(*torch tensors): the values, then the gradient of
    sum(out * r) (r random) for each input whose index is in `diff` (default: the float
    ones)."""
    diff = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"] if diff is None else diff
    xs = [Tensor.from_data(a, backend=B) for a in arrays]
    xs = [x.require_grad() if i in diff else x for i, x in enumerate(xs)]
    ts = [torch.tensor(a, requires_grad=i in diff) for i, a in enumerate(arrays)]
    out, ref = fn_ember(*xs), fn_torch(*ts)
    assert out.dtype == str(ref.dtype).removeprefix("torch.")
    _close(out.to_numpy(), ref, "forward")
    if not diff:
        return
    r = np.random.default_rng(seed).standard_normal(ref.shape).astype(np.float32)
    grads = (out * Tensor.from_data(r, backend=B)).sum().backward()
    (ref * torch.tensor(r)).sum().backward()
    for i in diff:
        g = xs[i].grad(grads)
        assert g is not None, f"no gradient for input {i}"
        _close(g.to_numpy(), ts[i].grad, f"gradient of input {i}")


def sample(grid, n, seed=0):
    """n combinations of a product grid, spread by a seeded draw (the full grids run to
    hundreds of cases; every value of each axis still shows up many times)."""
    grid = list(grid)
    keep = np.random.default_rng(seed).choice(len(grid), min(n, len(grid)), replace=False)
    return [grid[i] for i in sorted(keep)]


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ---- conv2d -----------------------------------------------------------------------------------
def _conv2d_grid():
    for h, w, k, s, p, d, g in sample(itertools.product(
            (5, 8), (7,), ((3, 3), (2, 3), (1, 1)), (1, 2, (2, 1)), (0, 1, (2, 1), "same"),
            (1, 2), (1, 2)), 70):
        if p == "same" and s != 1:
            continue
        extent = [dd * (kk - 1) + 1 for kk, dd in zip(k, (d, d))]
        pad = (0, 0) if p == "same" else (p, p) if isinstance(p, int) else p
        if h + 2 * pad[0] < extent[0] or w + 2 * pad[1] < extent[1]:
            continue
        yield pytest.param(h, w, k, s, p, d, g, id=f"{h}x{w}-k{k}-s{s}-p{p}-d{d}-g{g}")


@pytest.mark.parametrize(("h", "w", "k", "s", "p", "d", "g"), list(_conv2d_grid()))
def test_conv2d(h, w, k, s, p, d, g):
    x, wt, b = rand(2, 2 * g, h, w), rand(3 * g, 2, *k, seed=1), rand(3 * g, seed=2)
    compare(lambda x, wt, b: F.conv2d(x, wt, b, stride=s, padding=p, dilation=d, groups=g),
            lambda x, wt, b: TF.conv2d(x, wt, b, stride=s, padding=p, dilation=d, groups=g),
            [x, wt, b])


@PROPERTY
@given(n=st.integers(1, 2), cg=st.integers(1, 3), og=st.integers(1, 3), g=st.integers(1, 3),
       h=st.integers(1, 9), w=st.integers(1, 9), kh=st.integers(1, 4), kw=st.integers(1, 4),
       sh=st.integers(1, 3), sw=st.integers(1, 3), ph=st.integers(0, 2), pw=st.integers(0, 2),
       dh=st.integers(1, 3), dw=st.integers(1, 3), bias=st.booleans())
def test_conv2d_random_geometry(n, cg, og, g, h, w, kh, kw, sh, sw, ph, pw, dh, dw, bias):
    if h + 2 * ph < dh * (kh - 1) + 1 or w + 2 * pw < dw * (kw - 1) + 1:
        with pytest.raises(ShapeError, match="conv2d: kernel"):
            F.conv2d(Tensor.from_data(rand(n, cg * g, h, w)),
                     Tensor.from_data(rand(og * g, cg, kh, kw)), stride=(sh, sw),
                     padding=(ph, pw), dilation=(dh, dw), groups=g)
        return
    arrays = [rand(n, cg * g, h, w), rand(og * g, cg, kh, kw, seed=1)]
    if bias:
        arrays.append(rand(og * g, seed=2))
    kw_ = dict(stride=(sh, sw), padding=(ph, pw), dilation=(dh, dw), groups=g)
    compare(lambda *a: F.conv2d(*a, **kw_), lambda *a: TF.conv2d(*a, **kw_), arrays)


def test_conv2d_float64_and_unbatched():
    x, w = rand(3, 6, 5).astype(np.float64), rand(4, 3, 3, 2, seed=1).astype(np.float64)
    compare(lambda x, w: F.conv2d(x, w, padding=1), lambda x, w: TF.conv2d(x, w, padding=1),
            [x, w])


# ---- conv1d -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("length", "k", "s", "p", "d", "g"), [
    (9, 3, 1, 0, 1, 1), (10, 3, 2, 1, 1, 1), (11, 2, 3, 2, 2, 2), (7, 4, 1, "same", 1, 1),
    (8, 3, 1, "same", 2, 2), (6, 1, 2, 0, 1, 3), (5, 5, 1, "valid", 1, 1)])
def test_conv1d(length, k, s, p, d, g):
    x, w, b = rand(2, 2 * g, length), rand(3 * g, 2, k, seed=1), rand(3 * g, seed=2)
    compare(lambda x, w, b: F.conv1d(x, w, b, stride=s, padding=p, dilation=d, groups=g),
            lambda x, w, b: TF.conv1d(x, w, b, stride=s, padding=p, dilation=d, groups=g),
            [x, w, b])


def test_conv1d_unbatched():
    compare(F.conv1d, TF.conv1d, [rand(3, 8), rand(2, 3, 3, seed=1)])


# ---- conv_transpose2d ---------------------------------------------------------------------------
def _conv_t_grid():
    for h, k, s, p, op, d, g in sample(itertools.product(
            (3, 4), ((3, 3), (2, 3)), (1, 2, (3, 2)), (0, 1, (1, 0)), (0, 1), (1, 2), (1, 2)),
            70):
        if any(o >= max(ss, d) for o, ss in zip((op, op), s if isinstance(s, tuple) else (s, s))):
            continue
        yield pytest.param(h, k, s, p, op, d, g, id=f"{h}-k{k}-s{s}-p{p}-op{op}-d{d}-g{g}")


@pytest.mark.parametrize(("h", "k", "s", "p", "op", "d", "g"), list(_conv_t_grid()))
def test_conv_transpose2d(h, k, s, p, op, d, g):
    x, w, b = rand(2, 2 * g, h, h + 1), rand(2 * g, 3, *k, seed=1), rand(3 * g, seed=2)
    kw = dict(stride=s, padding=p, output_padding=op, groups=g, dilation=d)
    compare(lambda x, w, b: F.conv_transpose2d(x, w, b, **kw),
            lambda x, w, b: TF.conv_transpose2d(x, w, b, **kw), [x, w, b])


def test_conv_transpose2d_unbatched_positional():
    compare(lambda x, w: F.conv_transpose2d(x, w, None, 2, 1, 1),
            lambda x, w: TF.conv_transpose2d(x, w, None, 2, 1, 1),
            [rand(2, 3, 4), rand(2, 3, 3, 3, seed=1)])


# ---- double backward ------------------------------------------------------------------------
@pytest.mark.parametrize("which", ["conv2d", "conv_transpose2d"])
def test_double_backward_matches_torch(which):
    """grad of sum(grad_x(out . r)^2 + grad_w(out . r)^2): every conv primitive's rule runs."""
    x, w, r = rand(2, 4, 6, 5), rand(4, 2, 3, 2, seed=1), None
    kw = dict(stride=2, padding=1, dilation=(1, 2), groups=2)
    e_fn, t_fn = (F.conv2d, TF.conv2d) if which == "conv2d" else \
        (F.conv_transpose2d, TF.conv_transpose2d)
    ex, ew = (Tensor.from_data(a, backend=B).require_grad() for a in (x, w))
    tx, tw = (torch.tensor(a, requires_grad=True) for a in (x, w))
    out, ref = e_fn(ex, ew, **kw), t_fn(tx, tw, **kw)
    r = rand(*ref.shape, seed=3)
    gx, gw = ember.autodiff.grad((out * Tensor.from_data(r, backend=B)).sum(), [ex, ew],
                                 create_graph=True)
    tgx, tgw = torch.autograd.grad((ref * torch.tensor(r)).sum(), [tx, tw], create_graph=True)
    grads = ((gx * gx).sum() + (gw * gw).sum()).backward()
    ((tgx * tgx).sum() + (tgw * tgw).sum()).backward()
    _close(ex.grad(grads).to_numpy(), tx.grad, "d/dx")
    _close(ew.grad(grads).to_numpy(), tw.grad, "d/dw")


# ---- pooling --------------------------------------------------------------------------------
def _max_pool_grid():
    for h, k, s, p, d, ceil in sample(itertools.product(
            (5, 6, 7), (2, 3, (2, 3)), (None, 1, 2, (2, 3)), (0, 1), (1, 2), (False, True)), 70):
        kk = k if isinstance(k, tuple) else (k, k)
        if any(p > (d * (q - 1) + 1) // 2 for q in kk):
            continue
        yield pytest.param(h, k, s, p, d, ceil, id=f"{h}-k{k}-s{s}-p{p}-d{d}-ceil{ceil}")


@pytest.mark.parametrize(("h", "k", "s", "p", "d", "ceil"), list(_max_pool_grid()))
def test_max_pool2d(h, k, s, p, d, ceil):
    # whole numbers in a small range: windows with tied maxima, which take the first
    x = np.random.default_rng(h).integers(-3, 4, (2, 3, h, h + 2)).astype(np.float32)
    compare(lambda x: F.max_pool2d(x, k, s, p, d, ceil_mode=ceil),
            lambda x: TF.max_pool2d(x, k, s, p, d, ceil_mode=ceil), [x])
    _, idx = F.max_pool2d(Tensor.from_data(x), k, s, p, d, ceil, return_indices=True)
    _, ref = TF.max_pool2d(torch.tensor(x), k, s, p, d, ceil, return_indices=True)
    np.testing.assert_array_equal(idx.to_numpy(), ref.numpy())


def test_max_pool2d_unbatched_and_float64():
    x = rand(3, 7, 6).astype(np.float64)
    compare(lambda x: F.max_pool2d(x, 3, 2, 1), lambda x: TF.max_pool2d(x, 3, 2, 1), [x])


@pytest.mark.parametrize("shape, k", [((2, 3, 6, 8), 2), ((3, 4, 9), 3), ((1, 2, 6, 6), (2, 3))])
def test_max_pool2d_without_gradient_matches_torch(shape, k):
    # windows that tile the input, with and without a gradient to route: NaN kept
    x = np.random.default_rng(0).integers(-3, 4, shape).astype(np.float32)
    x.flat[5] = np.nan
    want = TF.max_pool2d(torch.tensor(x), k).numpy()
    np.testing.assert_array_equal(F.max_pool2d(Tensor.from_data(x), k).to_numpy(), want)
    with ember.no_grad():
        got = F.max_pool2d(Tensor.from_data(x, B).require_grad(), k)
    np.testing.assert_array_equal(got.to_numpy(), want)


def _avg_pool_grid():
    for h, k, s, p, ceil, inc in sample(itertools.product(
            (5, 6, 7), (2, 3, (3, 2)), (None, 1, 2, (2, 3)), (0, 1, (1, 0)), (False, True),
            (True, False)), 90):
        kk = k if isinstance(k, tuple) else (k, k)
        pp = p if isinstance(p, tuple) else (p, p)
        if any(a > q // 2 for a, q in zip(pp, kk)):
            continue
        yield pytest.param(h, k, s, p, ceil, inc, id=f"{h}-k{k}-s{s}-p{p}-ceil{ceil}-inc{inc}")


@pytest.mark.parametrize(("h", "k", "s", "p", "ceil", "inc"), list(_avg_pool_grid()))
def test_avg_pool2d(h, k, s, p, ceil, inc):
    compare(lambda x: F.avg_pool2d(x, k, s, p, ceil, inc),
            lambda x: TF.avg_pool2d(x, k, s, p, ceil, inc), [rand(2, 3, h, h + 1, seed=h)])


@pytest.mark.parametrize(("h", "w", "out"), [
    (7, 7, 1), (7, 5, (3, 2)), (6, 9, (4, 4)), (5, 5, 5), (3, 4, (5, 7)), (8, 6, (None, 4)),
    (1, 1, 2)])
def test_adaptive_avg_pool2d(h, w, out):
    compare(lambda x: F.adaptive_avg_pool2d(x, out), lambda x: TF.adaptive_avg_pool2d(x, out),
            [rand(2, 3, h, w)])


# ---- interpolate ------------------------------------------------------------------------------
RESIZES = [  # size, scale_factor
    ((8, 10), None), ((3, 4), None), ((5, 5), None), (7, None), ((10, 3), None), ((1, 1), None),
    (None, 2), (None, 0.5), (None, (1.5, 2.5)), (None, 1.7), (None, 3)]


@pytest.mark.parametrize(("size", "scale"), RESIZES, ids=str)
def test_interpolate_nearest(size, scale):
    compare(lambda x: F.interpolate(x, size, scale),
            lambda x: TF.interpolate(x, size, scale), [rand(2, 3, 5, 4)])


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize(("size", "scale"), RESIZES, ids=str)
def test_interpolate_bilinear(size, scale, align_corners):
    compare(lambda x: F.interpolate(x, size, scale, "bilinear", align_corners),
            lambda x: TF.interpolate(x, size, scale, mode="bilinear",
                                     align_corners=align_corners), [rand(2, 3, 5, 4)])


def test_interpolate_bilinear_default_is_align_corners_false():
    compare(lambda x: F.interpolate(x, (7, 9), mode="bilinear"),
            lambda x: TF.interpolate(x, (7, 9), mode="bilinear"), [rand(1, 2, 4, 5)])


def test_interpolate_nearest_int_input():
    x = np.arange(20, dtype=np.int32).reshape(1, 1, 4, 5)
    got = F.interpolate(Tensor.from_data(x), scale_factor=2)
    want = TF.interpolate(torch.tensor(x).float(), scale_factor=2).numpy().astype(np.int32)
    assert got.dtype == "int32"
    np.testing.assert_array_equal(got.to_numpy(), want)


# ---- embedding --------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(5,), (2, 3), (2, 2, 3), (), (0, 2)], ids=str)
def test_embedding(shape):
    idx = np.random.default_rng(1).integers(0, 6, shape).astype(np.int64)
    compare(F.embedding, TF.embedding, [idx, rand(6, 4)], diff=[1])


def test_embedding_repeated_indices_add_up_and_int32_lists():
    w = rand(5, 3)
    compare(lambda i, w: F.embedding(i, w), TF.embedding,
            [np.array([[1, 1], [4, 1]], dtype=np.int64), w], diff=[1])
    out = F.embedding([0, 4], Tensor.from_data(w))
    np.testing.assert_array_equal(out.to_numpy(), w[[0, 4]])


# ---- dtypes and results -----------------------------------------------------------------------
def test_results_are_new_tensors():
    x = Tensor.from_data(rand(1, 1, 3, 3))
    for out in (F.avg_pool2d(x, 1), F.interpolate(x, size=3),
                F.interpolate(x, size=3, mode="bilinear"), F.adaptive_avg_pool2d(x, 3)):
        assert out is not x
        np.testing.assert_array_equal(out.to_numpy(), x.to_numpy())


def test_float64_stays_float64_and_mixed_promotes():
    x64 = Tensor.from_data(rand(1, 2, 5, 5).astype(np.float64))
    w32 = Tensor.from_data(rand(3, 2, 3, 3))
    assert F.conv2d(x64, w32).dtype == "float64"
    for out in (F.max_pool2d(x64, 2), F.avg_pool2d(x64, 2), F.adaptive_avg_pool2d(x64, 2),
                F.interpolate(x64, scale_factor=2, mode="bilinear"),
                F.interpolate(x64, scale_factor=2)):
        assert out.dtype == "float64"


# ---- errors -----------------------------------------------------------------------------------
def t(*shape, dtype=np.float32):
    return Tensor.from_data(np.zeros(shape, dtype=dtype))


ERRORS = [  # call, error, message regex
    (lambda: F.conv2d(t(1, 3, 5, 5), t(2, 2, 3, 3)), ShapeError,
     r"conv2d: input \[1, 3, 5, 5\] has 3 channels but weight \[2, 2, 3, 3\] takes 2 per "
     r"group x groups=1"),
    (lambda: F.conv2d(t(1, 1, 4, 4), t(1, 1, 5, 5), padding=0), ShapeError,
     r"conv2d: kernel 5x5 .* larger than the padded input 4x4 \(input \[1, 1, 4, 4\]"),
    (lambda: F.conv2d(t(1, 4, 4, 4), t(4, 2, 3, 3), groups=3), ShapeError, "conv2d"),
    (lambda: F.conv2d(t(1, 2, 4, 4), t(3, 2, 3, 3), t(4)), ShapeError, r"bias.*\[3\]"),
    (lambda: F.conv2d(t(1, 2, 4, 4), t(3, 2, 3, 3), stride=(1, 2, 3)), ShapeError, "stride"),
    (lambda: F.conv2d(t(1, 2, 4, 4), t(3, 2, 3, 3), groups=0), ShapeError, "groups"),
    (lambda: F.conv2d(t(2, 1, 2, 4, 4), t(3, 2, 3, 3)), ShapeError, r"4-D.*\[2, 1, 2, 4, 4\]"),
    (lambda: F.conv2d(t(1, 2, 4, 4, dtype=np.int32), t(3, 2, 3, 3)), DTypeError,
     "conv2d: takes float32 or float64"),
    (lambda: F.conv2d(np.zeros((1, 2, 4, 4)), t(3, 2, 3, 3)), DTypeError, "Tensor"),
    (lambda: F.conv1d(t(1, 2, 4), t(3, 2, 3, 3)), ShapeError, "conv1d: weight must be 3-D"),
    (lambda: F.conv1d(t(1, 2, 2), t(3, 2, 3), dilation=1), ShapeError, "conv1d: kernel 3"),
    (lambda: F.conv_transpose2d(t(1, 2, 4, 4), t(2, 1, 3, 3), stride=2, output_padding=2),
     ShapeError, "output_padding"),
    (lambda: F.conv_transpose2d(t(1, 2, 4, 4), t(3, 1, 3, 3)), ShapeError,
     r"conv_transpose2d: input \[1, 2, 4, 4\] has 2 channels"),
    (lambda: F.max_pool2d(t(1, 1, 5, 5), 3, padding=2), ShapeError, "at most half"),
    (lambda: F.max_pool2d(t(1, 1, 2, 2), 3), ShapeError, "at least 1x1"),
    (lambda: F.avg_pool2d(t(1, 1, 2, 2), (3, 1)), ShapeError, "avg_pool2d.*at least 1x1"),
    (lambda: F.avg_pool2d(t(1, 1, 4, 4, dtype=np.int32), 2), DTypeError, "avg_pool2d"),
    (lambda: F.adaptive_avg_pool2d(t(1, 1, 4, 4), 0), ShapeError, "output_size"),
    (lambda: F.interpolate(t(1, 1, 4, 4), size=2, scale_factor=2), ValueError, "exactly one"),
    (lambda: F.interpolate(t(1, 1, 4, 4)), ValueError, "exactly one"),
    (lambda: F.interpolate(t(1, 1, 4, 4), size=2, align_corners=True), ValueError,
     "align_corners"),
    (lambda: F.interpolate(t(1, 1, 4, 4), size=2, mode="bicubic"), ValueError, "mode"),
    (lambda: F.interpolate(t(1, 4, 4), size=2), ShapeError, "4-D"),
    (lambda: F.interpolate(t(1, 1, 4, 4), scale_factor=0.1), ShapeError, "empty"),
    (lambda: F.embedding(Tensor.from_data([0, 6]), t(6, 2)), ShapeError,
     r"embedding: indices must lie in \[0, 6\)"),
    (lambda: F.embedding(t(3), t(6, 2)), DTypeError, "embedding: indices must be int32"),
    (lambda: F.embedding(Tensor.from_data([0]), t(6)), ShapeError, "embedding: weight"),
]


@pytest.mark.parametrize(("call", "error", "match"), ERRORS,
                         ids=[f"{i}-{e[2][:30]}" for i, e in enumerate(ERRORS)])
def test_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()
