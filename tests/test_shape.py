"""ember.shape: broadcasting, dims, reshape and indexing rules, as pure functions."""

import numpy as np
import pytest

from ember import ShapeError
from ember import shape as S


def test_fmt():
    assert S.fmt((2, 3)) == "[2, 3]"
    assert S.fmt(()) == "[]"


@pytest.mark.parametrize("given, expected", [
    ([2, 3], (2, 3)), ((4,), (4,)), (5, (5,)), ([], ()), ([0, 2], (0, 2)),
    (np.array([2, 3]), (2, 3)),
])
def test_as_shape(given, expected):
    out = S.as_shape(given, "zeros")
    assert out == expected
    assert all(type(s) is int for s in out)


@pytest.mark.parametrize("bad", [[2, -1], None, 2.5j])
def test_as_shape_errors_name_the_op(bad):
    with pytest.raises(ShapeError, match="^zeros:"):
        S.as_shape(bad, "zeros")


# ---- broadcast ---------------------------------------------------------------------------
@pytest.mark.parametrize("shapes", [
    [(2, 3), (2, 3)],
    [(2, 3), (3,)],
    [(2, 1), (1, 3)],
    [(4, 1, 3), (2, 1)],
    [(), (2, 3)],
    [(2, 3), ()],
    [(1,), (0,)],
    [(5, 1, 4), (1, 3, 1), (4,)],
    [(3,)],
])
def test_broadcast_matches_numpy(shapes):
    assert S.broadcast("add", *shapes) == np.broadcast_shapes(*shapes)


@pytest.mark.parametrize("a, b", [((2, 3), (4,)), ((2, 3), (3, 2)), ((2, 0), (2, 3))])
def test_broadcast_error_names_op_and_both_shapes(a, b):
    with pytest.raises(ShapeError) as info:
        S.broadcast("mul", a, b)
    msg = str(info.value)
    assert msg.startswith("mul:")
    assert S.fmt(a) in msg and S.fmt(b) in msg


def test_broadcast_error_names_every_shape():
    with pytest.raises(ShapeError) as info:
        S.broadcast("mask_where", (2, 3), (2, 1), (4,))
    for s in ("[2, 3]", "[2, 1]", "[4]"):
        assert s in str(info.value)


# ---- dims --------------------------------------------------------------------------------
@pytest.mark.parametrize("dim, ndim, expected", [
    (0, 1, 0), (-1, 1, 0), (2, 3, 2), (-1, 3, 2), (-3, 3, 0), (1, 2, 1),
])
def test_norm_dim(dim, ndim, expected):
    assert S.norm_dim("sum", dim, ndim) == expected


@pytest.mark.parametrize("dim, ndim", [(3, 3), (-4, 3), (0, 0), (1, 1), (-2, 1)])
def test_norm_dim_out_of_range(dim, ndim):
    with pytest.raises(ShapeError) as info:
        S.norm_dim("sum_dim", dim, ndim)
    msg = str(info.value)
    assert msg.startswith("sum_dim:")
    assert f"dim {dim}" in msg and f"rank {ndim}" in msg


@pytest.mark.parametrize("bad", [1.0, "0", None])
def test_norm_dim_needs_an_int(bad):
    with pytest.raises(ShapeError, match="must be an int"):
        S.norm_dim("sum_dim", bad, 2)


def test_norm_dims():
    assert S.norm_dims("permute", (-1, 0, 1), 3) == (2, 0, 1)
    assert S.norm_dims("sum_dim", (), 3) == ()


@pytest.mark.parametrize("dims", [(0, 0), (1, -1)])
def test_norm_dims_repeated(dims):
    with pytest.raises(ShapeError, match="repeated dim"):
        S.norm_dims("permute", dims, 2)


def test_norm_dims_out_of_range():
    with pytest.raises(ShapeError, match="out of range"):
        S.norm_dims("permute", (0, 5), 2)


# ---- reshape -----------------------------------------------------------------------------
@pytest.mark.parametrize("shape, new, expected", [
    ((2, 3), (6,), (6,)),
    ((2, 3), (-1,), (6,)),
    ((2, 3), (3, -1), (3, 2)),
    ((2, 3, 4), (-1, 4), (6, 4)),
    ((2, 3), (1, -1, 1), (1, 6, 1)),
    ((), (1, 1), (1, 1)),
    ((1,), (), ()),
    ((0, 3), (-1, 3), (0, 3)),
    ((0, 3), (3, 0), (3, 0)),
])
def test_reshape_resolves_minus_one(shape, new, expected):
    assert S.reshape("reshape", shape, new) == expected


@pytest.mark.parametrize("shape, new, words", [
    ((2, 3), (-1, -1), ["only one dim may be -1"]),
    ((2, 3), (-2, 3), ["negative size"]),
    ((2, 3), (4, -1), ["cannot infer -1", "[4, -1]", "[2, 3]"]),
    ((0, 3), (0, -1), ["cannot infer -1"]),
    ((2, 3), (4,), ["[2, 3]", "[4]", "6 elements", "4 elements"]),
])
def test_reshape_errors(shape, new, words):
    with pytest.raises(ShapeError) as info:
        S.reshape("reshape", shape, new)
    msg = str(info.value)
    assert msg.startswith("reshape:")
    for word in words:
        assert word in msg


# ---- parse_index -------------------------------------------------------------------------
def _apply_index(shape, key):
    """Run parse_index's strided slice and final reshape on NumPy, to compare with x[key]."""
    x = np.arange(int(np.prod(shape))).reshape(shape)
    starts, stops, steps, final = S.parse_index(shape, key)
    assert S.slice_shape(starts, stops, steps) == tuple(
        len(range(a, b, c)) for a, b, c in zip(starts, stops, steps))
    sl = tuple(slice(a, None if b < 0 else b, c) for a, b, c in zip(starts, stops, steps))
    return x[sl].reshape(final)


@pytest.mark.parametrize("key", [
    0, -1, 2,
    slice(None), slice(1, 3), slice(None, None, 2), slice(None, None, -1), slice(3, 0, -1),
    slice(-2, None), slice(None, None, -2), slice(10, -10, -1), slice(5, 1),
    (0, 1), (1, slice(None), -1), (slice(0, 2), Ellipsis, 1), (Ellipsis, 0), (0, Ellipsis),
    None, (None, 0), (slice(None), None, 1), (Ellipsis, None), (None, Ellipsis, None),
    (), Ellipsis, np.int64(1), (np.int32(-1), slice(None, None, -1)),
])
def test_parse_index_matches_numpy(key):
    shape = (3, 4, 5)
    x = np.arange(60).reshape(shape)
    np.testing.assert_array_equal(_apply_index(shape, key), x[key])


def test_parse_index_parts():
    starts, stops, steps, final = S.parse_index((4, 5), (-1, slice(None, None, -2)))
    assert (starts, stops, steps, final) == ((3, 4), (4, -1), (1, -2), (3,))


def test_parse_index_too_many_indices():
    with pytest.raises(ShapeError, match=r"too many indices \(3\).*\[2, 3\]"):
        S.parse_index((2, 3), (0, 0, 0))


def test_parse_index_none_and_ellipsis_do_not_count():
    assert S.parse_index((2, 3), (None, 0, Ellipsis, 0, None))[3] == (1, 1)


def test_parse_index_two_ellipses():
    with pytest.raises(ShapeError, match="single ellipsis"):
        S.parse_index((2, 3), (Ellipsis, 0, Ellipsis))


@pytest.mark.parametrize("key, words", [
    (3, ["index 3", "dim 0", "size 3"]),
    (-4, ["index -4", "dim 0", "size 3"]),
    ((0, 4), ["index 4", "dim 1", "size 4"]),
])
def test_parse_index_out_of_bounds(key, words):
    with pytest.raises(ShapeError) as info:
        S.parse_index((3, 4), key)
    for word in words:
        assert word in str(info.value)


def test_parse_index_zero_step_is_a_shape_error():
    with pytest.raises(ShapeError, match="step"):
        S.parse_index((3,), slice(None, None, 0))


@pytest.mark.parametrize("key", [1.5, "a", (0, 1.0)])
def test_parse_index_unsupported(key):
    with pytest.raises(ShapeError, match="unsupported index"):
        S.parse_index((3, 4), key)


def test_prod():
    assert S.prod(()) == 1
    assert S.prod((2, 3, 4)) == 24
    assert S.prod((2, 0)) == 0
