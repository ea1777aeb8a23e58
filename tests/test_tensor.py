"""ember.Tensor through its public API: creation, data in and out, operators, reductions,
shape ops, indexing, composites and error messages.

The per-op math is the conformance suite's (tests/ops); here the API around the ops is tested.
"""

import asyncio
import math

import numpy as np
import pytest

import ember
from ember import BackendError, Distribution, DTypeError, ShapeError, Tensor
from ember.backend import Autodiff, NdArray

SQRT_2 = math.sqrt(2)


def T(data, dtype=None):  # noqa: N802  (short constructor for the tests)
    return Tensor.from_data(data, dtype=dtype)


def arange(*shape, dtype="float32"):
    """A tensor of shape `shape` holding 0, 1, 2, ... (and its NumPy twin)."""
    a = np.arange(math.prod(shape)).reshape(shape).astype(dtype)
    return Tensor.from_data(a), a


def assert_tensor(t, expected, dtype=None, rtol=1e-6, atol=1e-6):
    expected = np.asarray(expected)
    assert t.shape == expected.shape, f"shape {t.shape} != {expected.shape}"
    if dtype is not None:
        assert t.dtype == dtype
    np.testing.assert_allclose(t.to_numpy(), expected, rtol=rtol, atol=atol)


class _OtherCpu(NdArray):
    """Another backend (a different key), to check that tensors do not mix silently."""

    def __str__(self):
        return "OtherCpu<cpu>"


# ---- creation ----------------------------------------------------------------------------
@pytest.mark.parametrize("data, dtype, shape", [
    ([[1.0, 2.0], [3.0, 4.0]], "float32", (2, 2)),
    ([[1, 2], [3, 4]], "int32", (2, 2)),
    ([[True, False]], "bool", (1, 2)),
    ([1, 2.5], "float32", (2,)),
    ([True, 2], "int32", (2,)),
    (3.0, "float32", ()),
    (7, "int32", ()),
    (False, "bool", ()),
    ([], "float32", (0,)),
    ([[[1.0]]], "float32", (1, 1, 1)),
    ((1.0, 2.0), "float32", (2,)),
])
def test_from_data_python_values_get_embers_defaults(data, dtype, shape):
    t = Tensor.from_data(data)
    assert t.dtype == dtype
    assert t.shape == shape
    np.testing.assert_array_equal(t.to_numpy(), np.array(data, dtype=dtype))


@pytest.mark.parametrize("np_dtype", ["float64", "float32", "int64", "int32", "bool"])
def test_from_data_numpy_arrays_keep_their_dtype(np_dtype):
    a = np.arange(6).reshape(2, 3).astype(np_dtype)
    t = Tensor.from_data(a)
    assert t.dtype == np_dtype
    np.testing.assert_array_equal(t.to_numpy(), a)


@pytest.mark.parametrize("dtype, expected", [
    ("float64", "float64"), ("int64", "int64"), ("bool", "bool"), (np.float32, "float32"),
    (float, "float32"), (int, "int32"), (np.dtype("int64"), "int64"),
])
def test_from_data_dtype_argument(dtype, expected):
    t = Tensor.from_data([0, 1, 2], dtype=dtype)
    assert t.dtype == expected
    assert t.to_numpy().dtype == np.dtype(expected)


def test_from_data_dtype_converts_numpy_arrays():
    t = Tensor.from_data(np.array([1.7, -1.7]), dtype="int32")
    assert t.dtype == "int32"
    assert t.tolist() == [1, -1]


def test_from_data_large_python_ints_need_int64():
    with pytest.raises(DTypeError, match="int64"):
        Tensor.from_data([1, 2**40])
    assert Tensor.from_data([1, 2**40], dtype="int64").tolist() == [1, 2**40]


@pytest.mark.parametrize("ragged", [[[1, 2], [3]], [[1.0], [2.0, 3.0]], [[[1]], [[1, 2]]]])
def test_from_data_ragged_lists_are_shape_errors(ragged):
    with pytest.raises(ShapeError, match="rectangular"):
        Tensor.from_data(ragged)


@pytest.mark.parametrize("data, words", [
    (np.array([1, None], dtype=object), ["object"]),
    ("abc", ["str"]),
    (b"abc", ["bytes"]),
    (["a", "b"], ["str"]),
    (np.array([1 + 1j]), ["complex128"]),
    (np.array([1], dtype=np.uint64), ["uint64"]),
])
def test_from_data_refuses_data_without_ember_dtype(data, words):
    with pytest.raises(DTypeError) as info:
        Tensor.from_data(data)
    assert str(info.value).startswith("from_data:")
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize("dtype", ["float16", "complex64", "uint8", "fp32"])
def test_from_data_refuses_unknown_dtype(dtype):
    with pytest.raises(DTypeError) as info:
        Tensor.from_data([1.0], dtype=dtype)
    msg = str(info.value)
    assert "from_data" in msg and dtype in msg and "float32" in msg


def test_from_data_copies_its_input():
    a = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    t = Tensor.from_data(a)
    a[0] = 100.0
    assert t.tolist() == [1.0, 2.0, 3.0]
    rows = [[1, 2], [3, 4]]
    u = Tensor.from_data(rows)
    rows[0][0] = 9
    assert u.tolist() == [[1, 2], [3, 4]]


def test_from_data_accepts_non_contiguous_arrays():
    a = np.arange(12.0).reshape(3, 4)
    t = Tensor.from_data(a[:, ::2].T)
    np.testing.assert_array_equal(t.to_numpy(), a[:, ::2].T)


def test_from_data_of_a_tensor_is_a_copy():
    x = T([1.0, 2.0])
    y = Tensor.from_data(x, dtype="float64")
    assert y.dtype == "float64" and y.tolist() == [1.0, 2.0]
    z = Tensor.from_data(x)
    z[0] = 5.0
    assert x.tolist() == [1.0, 2.0]


def test_from_data_refuses_non_backends():
    with pytest.raises(BackendError, match="NdArray()"):
        Tensor.from_data([1.0], backend="ndarray")


@pytest.mark.parametrize("shape", [[2, 3], (2, 3), 4, [], [0, 3]])
@pytest.mark.parametrize("make, value", [(Tensor.zeros, 0), (Tensor.ones, 1)])
def test_zeros_and_ones(make, value, shape):
    t = make(shape)
    expected_shape = (shape,) if isinstance(shape, int) else tuple(shape)
    assert t.shape == expected_shape and t.dtype == "float32"
    assert np.all(t.to_numpy() == value)
    assert make(shape, dtype="int64").dtype == "int64"


@pytest.mark.parametrize("value, dtype", [(2.5, "float32"), (7, "int32"), (True, "bool"),
                                          (np.float64(1.5), "float32")])
def test_full_dtype_follows_the_value(value, dtype):
    t = Tensor.full([2, 2], value)
    assert t.dtype == dtype
    assert np.all(t.to_numpy() == value)


def test_full_with_dtype():
    assert Tensor.full([3], 7, dtype="float64").to_numpy().dtype == np.float64
    assert Tensor.full([3], 2.0, dtype="int32").tolist() == [2, 2, 2]


@pytest.mark.parametrize("make, dtype", [
    (lambda: Tensor.zeros([2], dtype=None), "float32"),
    (lambda: Tensor.ones([2], dtype=None), "float32"),
    (lambda: Tensor.random([2], dtype=None), "float32"),
    (lambda: Tensor.eye(2, dtype=None), "float32"),
    (lambda: Tensor.full([2], 1, dtype=None), "int32"),
    (lambda: Tensor.arange(3, dtype=None), "int32"),
])
def test_creation_with_dtype_none_gives_embers_defaults(make, dtype):
    assert make().dtype == dtype


def test_negative_shape_is_a_shape_error():
    with pytest.raises(ShapeError, match="full: negative size"):
        Tensor.zeros([2, -1])


@pytest.mark.parametrize("args, kwargs, expected, dtype", [
    ((5,), {}, np.arange(5), "int32"),
    ((2, 7, 2), {}, np.arange(2, 7, 2), "int32"),
    ((5, 0, -2), {}, np.arange(5, 0, -2), "int32"),
    ((0, 1, 0.25), {}, np.arange(0, 1, 0.25), "float32"),
    ((3.0,), {}, np.arange(3.0), "float32"),
    ((4,), {"dtype": "float64"}, np.arange(4.0), "float64"),
    ((3, 3), {}, np.arange(0), "int32"),
])
def test_arange(args, kwargs, expected, dtype):
    assert_tensor(Tensor.arange(*args, **kwargs), expected, dtype)


def test_arange_beyond_int32_is_not_wrapped():
    assert Tensor.arange(2**40, 2**40 + 3, dtype="int64").tolist() == [2**40, 2**40 + 1, 2**40 + 2]
    with pytest.raises(DTypeError, match="int64"):
        Tensor.arange(2**40, 2**40 + 3)


def test_full_beyond_int32_is_a_dtype_error():
    assert Tensor.full([2], 2**40, dtype="int64").tolist() == [2**40, 2**40]
    with pytest.raises(DTypeError, match="int64"):
        Tensor.full([2], 2**40)


def test_arange_step_zero():
    with pytest.raises(ShapeError, match="arange: step"):
        Tensor.arange(0, 5, 0)


@pytest.mark.parametrize("n, m", [(3, None), (2, 4), (4, 2), (1, None)])
def test_eye(n, m):
    assert_tensor(Tensor.eye(n, m), np.eye(n, m), "float32")
    assert Tensor.eye(n, m, dtype="int32").dtype == "int32"


@pytest.mark.parametrize("dist, dtype", [
    (Distribution.Default, "float32"),
    (Distribution.Uniform(-1, 1), "float64"),
    (Distribution.Normal(0, 1), "float32"),
    (Distribution.Bernoulli(0.5), "bool"),
    (Distribution.Uniform(0, 10), "int32"),
])
def test_random_each_distribution(dist, dtype):
    t = Tensor.random([4, 5], dist, dtype=dtype)
    assert t.shape == (4, 5) and t.dtype == dtype
    ember.seed(11)
    a = Tensor.random([4, 5], dist, dtype=dtype).to_numpy()
    ember.seed(11)
    np.testing.assert_array_equal(Tensor.random([4, 5], dist, dtype=dtype).to_numpy(), a)


def test_like_constructors():
    x = T([[1, 2, 3]], dtype="int64")
    for t, v in ((x.zeros_like(), 0), (x.ones_like(), 1), (x.full_like(4), 4)):
        assert t.shape == (1, 3) and t.dtype == "int64" and np.all(t.to_numpy() == v)
    z = x.new_zeros([2])
    assert z.shape == (2,) and z.dtype == "int64"


# ---- properties and data out -------------------------------------------------------------
def test_properties():
    x = Tensor.zeros([2, 3, 4])
    assert x.shape == (2, 3, 4) and type(x.shape) is tuple
    assert all(type(s) is int for s in x.shape)
    assert x.ndim == 3
    assert x.dtype == "float32" and type(x.dtype) is str
    assert x.backend == NdArray()
    assert x.numel() == 24
    assert T(1.0).ndim == 0


def test_shape_of_list_input_is_a_tuple_of_ints():
    x = Tensor.zeros(np.array([2, 3]))
    assert x.shape == (2, 3) and all(type(s) is int for s in x.shape)


def test_to_numpy_is_read_only():
    x = T([1.0, 2.0])
    a = x.to_numpy()
    assert isinstance(a, np.ndarray) and a.dtype == np.float32
    assert not a.flags.writeable
    with pytest.raises(ValueError):
        a[0] = 5.0
    b = a.copy()
    b[0] = 5.0
    assert x.tolist() == [1.0, 2.0]


def test_to_numpy_async():
    x = T([[1, 2], [3, 4]])
    out = asyncio.run(x.to_numpy_async())
    np.testing.assert_array_equal(out, [[1, 2], [3, 4]])
    assert out.dtype == np.int32


def test_to_numpy_async_inside_a_running_loop():
    async def main():
        return await (T([1.0, 2.0]) * 2).to_numpy_async()
    np.testing.assert_array_equal(asyncio.run(main()), [2.0, 4.0])


def test_numpy_conversion_protocol():
    x = T([1, 2])
    assert np.asarray(x).tolist() == [1, 2]
    assert np.asarray(x, dtype=np.float64).dtype == np.float64


@pytest.mark.parametrize("data, value, kind", [
    (2.5, 2.5, float), ([3], 3, int), ([[True]], True, bool), (np.float64(1.25), 1.25, float),
])
def test_item(data, value, kind):
    out = T(data).item()
    assert out == value and type(out) is kind


def test_item_needs_one_element():
    with pytest.raises(ShapeError, match=r"item.*\[2\]"):
        T([1.0, 2.0]).item()


def test_tolist():
    assert T([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
    assert T(3.0).tolist() == 3.0
    assert T([True]).tolist() == [True]


def test_len_and_iter():
    x, a = arange(3, 2)
    assert len(x) == 3
    rows = list(x)
    assert len(rows) == 3
    for row, expected in zip(rows, a):
        assert_tensor(row, expected)
    with pytest.raises(TypeError):
        len(T(1.0))


@pytest.mark.parametrize("data, expected", [([1.0], True), (0.0, False), ([[0]], False),
                                            (True, True)])
def test_bool(data, expected):
    assert bool(T(data)) is expected


def test_bool_of_many_elements_is_ambiguous():
    with pytest.raises(ShapeError, match="ambiguous"):
        bool(T([1.0, 2.0]))
    with pytest.raises(ValueError):
        if T([True, True]):
            pass


def test_float_and_int():
    assert float(T([2.5])) == 2.5
    assert int(T(7)) == 7
    assert int(T(2.9)) == 2
    with pytest.raises(ShapeError):
        float(T([1.0, 2.0]))


def test_to_same_backend_is_free():
    x = Tensor.zeros([64, 64])
    y = x.to(NdArray())
    assert y.backend == x.backend
    assert y.to_numpy().__array_interface__["data"] == x.to_numpy().__array_interface__["data"]


def test_to_other_backend():
    other = _OtherCpu()
    x = T([[1.0, 2.0]])
    y = x.to(other)
    assert y.backend == other and y.backend != x.backend
    assert y.shape == x.shape and y.dtype == x.dtype
    np.testing.assert_array_equal(y.to_numpy(), x.to_numpy())
    assert y.to(NdArray()).backend == NdArray()


def test_to_refuses_non_backends():
    with pytest.raises(BackendError, match="cast"):
        T([1.0]).to("float64")


@pytest.mark.parametrize("src, dtype, expected", [
    ([1.7, -1.7], "int32", [1, -1]),
    ([0.0, 2.0], "bool", [False, True]),
    ([True, False], "float32", [1.0, 0.0]),
    ([1, 2], "float64", [1.0, 2.0]),
    ([1, 2], np.int64, [1, 2]),
    ([1, 2], float, [1.0, 2.0]),
])
def test_cast(src, dtype, expected):
    y = T(src).cast(dtype)
    assert y.dtype == ember.dtype.canonical(dtype)
    assert y.tolist() == expected


def test_cast_unknown_dtype():
    with pytest.raises(DTypeError, match="cast.*'float16'"):
        T([1.0]).cast("float16")


def test_repr_shows_shape_dtype_backend_and_data():
    r = repr(T([[1.5, 2.0, 3.0], [4.0, 5.0, 6.0]]))
    for part in ("[2, 3]", "float32", "NdArray<cpu>", "1.5", "6."):
        assert part in r
    assert "int32" in repr(T([1])) and str(T([1])) == repr(T([1]))


def test_repr_of_a_big_tensor_is_summarized():
    assert "..." in repr(Tensor.zeros([1000]))


# ---- operators ---------------------------------------------------------------------------
BINARY = [
    ("add", lambda a, b: a + b),
    ("sub", lambda a, b: a - b),
    ("mul", lambda a, b: a * b),
    ("div", lambda a, b: a / b),
    ("pow", lambda a, b: a ** b),
]


@pytest.mark.parametrize("name, fn", BINARY, ids=[n for n, _ in BINARY])
def test_operators_with_scalars_on_both_sides(name, fn):
    x, a = arange(2, 3)
    x, a = x + 1, a + 1
    assert_tensor(fn(x, 2.0), fn(a, np.float32(2.0)), "float32", rtol=1e-5)
    assert_tensor(fn(2.0, x), fn(np.float32(2.0), a), "float32", rtol=1e-5)
    assert_tensor(fn(x, 3), fn(a, np.float32(3)), "float32", rtol=1e-5)


@pytest.mark.parametrize("name, fn", BINARY, ids=[n for n, _ in BINARY])
@pytest.mark.parametrize("sa, sb", [((2, 3), (3,)), ((2, 1), (1, 3)), ((4, 1, 3), (2, 1)),
                                    ((), (2, 2)), ((3,), (2, 3))])
def test_operators_broadcast(name, fn, sa, sb):
    x = Tensor.random(sa, Distribution.Uniform(1, 2))
    y = Tensor.random(sb, Distribution.Uniform(1, 2))
    out = fn(x, y)
    assert_tensor(out, fn(x.to_numpy(), y.to_numpy()), "float32", rtol=1e-5)


def test_methods_and_operators_agree():
    x, y = T([1.0, 2.0]), T([3.0, 5.0])
    pairs = [(x.add(y), x + y), (x.sub(y), x - y), (x.mul(y), x * y), (x.div(y), x / y),
             (x.powf(y), x ** y), (x.neg(), -x), (x.abs(), abs(x))]
    for method, operator in pairs:
        np.testing.assert_array_equal(method.to_numpy(), operator.to_numpy())


def test_unary_operators():
    x = T([-1.5, 0.0, 2.0])
    assert (-x).tolist() == [1.5, -0.0, -2.0]
    assert abs(x).tolist() == [1.5, 0.0, 2.0]
    assert (-T([1, -2])).dtype == "int32"


@pytest.mark.parametrize("a, b, expected", [
    ("int32", "int32", "int32"), ("int32", "float32", "float32"), ("int32", "int64", "int64"),
    ("float32", "float64", "float64"), ("bool", "bool", "int32"), ("bool", "float32", "float32"),
])
def test_tensor_tensor_promotion(a, b, expected):
    x = Tensor.ones([2], dtype=a)
    y = Tensor.ones([2], dtype=b)
    assert (x + y).dtype == expected
    assert (y * x).dtype == expected


def test_division_of_ints_is_float():
    out = T([1, 2]) / T([2, 4])
    assert out.dtype == "float32" and out.tolist() == [0.5, 0.5]
    assert (T([1, 2]) / 2).tolist() == [0.5, 1.0]


def test_scalar_that_does_not_fit_int32():
    with pytest.raises(DTypeError, match="does not fit int32"):
        T([1, 2]) + 2**40
    assert (T([1, 2], dtype="int64") + 2**40).tolist() == [2**40 + 1, 2**40 + 2]


COMPARES = [
    (lambda a, b: a == b), (lambda a, b: a != b), (lambda a, b: a < b),
    (lambda a, b: a <= b), (lambda a, b: a > b), (lambda a, b: a >= b),
]


@pytest.mark.parametrize("fn", COMPARES)
def test_comparisons_give_bool(fn):
    x, y = T([[1.0, 2.0, 3.0]]), T([[2.0], [1.0]])
    a, b = x.to_numpy(), y.to_numpy()
    assert_tensor(fn(x, y), fn(a, b), "bool")
    assert_tensor(fn(x, 2), fn(a, 2), "bool")
    assert_tensor(fn(2, x), fn(2, a), "bool")
    assert_tensor(fn(T([1, 2, 3]), 2.5), fn(np.array([1, 2, 3]), 2.5), "bool")


def test_comparison_methods():
    x = T([1, 2, 3])
    assert x.equal(2).tolist() == [False, True, False]
    assert x.greater_equal(2).tolist() == [False, True, True]
    assert x.lower(T([2, 2, 2])).tolist() == [True, False, False]


def test_logical_operators_on_bools():
    a, b = T([True, True, False, False]), T([True, False, True, False])
    assert (a & b).tolist() == [True, False, False, False]
    assert (a | b).tolist() == [True, True, True, False]
    assert (~a).tolist() == [False, False, True, True]
    assert (a & True).tolist() == [True, True, False, False]
    assert (False | b).tolist() == [True, False, True, False]
    assert (a & b).dtype == "bool" and (~a).dtype == "bool"


def test_logical_operators_broadcast():
    a, b = T([[True], [False]]), T([True, False])
    assert (a & b).tolist() == [[True, False], [False, False]]
    assert (a | b).tolist() == [[True, True], [True, False]]


@pytest.mark.parametrize("fn", [lambda x: ~x, lambda x: x & x, lambda x: x | True])
def test_logical_operators_need_bools(fn):
    with pytest.raises(DTypeError, match="needs bool tensors, got int32"):
        fn(T([1, 0]))


def test_all_and_any():
    assert T([True, True]).all().item() is True
    assert T([True, False]).all().item() is False
    assert T([False, True]).any().item() is True
    assert T([False, False]).any().item() is False
    assert Tensor.zeros([0], dtype="bool").all().item() is True
    assert Tensor.zeros([0], dtype="bool").any().item() is False


# ---- reductions --------------------------------------------------------------------------
def test_full_reductions_are_0d():
    x, a = arange(2, 3)
    for t, expected in ((x.sum(), a.sum()), (x.mean(), a.mean()), (x.max(), a.max()),
                        (x.min(), a.min())):
        assert_tensor(t, np.array(expected, dtype=np.float32), "float32")


@pytest.mark.parametrize("dim", [0, 1, 2, -1, -3])
def test_dim_reductions_keep_the_dim(dim):
    x, a = arange(2, 3, 4)
    assert_tensor(x.sum_dim(dim), a.sum(axis=dim, keepdims=True))
    assert_tensor(x.mean_dim(dim), a.mean(axis=dim, keepdims=True))
    assert_tensor(x.max_dim(dim), a.max(axis=dim, keepdims=True))
    assert_tensor(x.min_dim(dim), a.min(axis=dim, keepdims=True))


def test_dim_reductions_over_several_dims():
    x, a = arange(2, 3, 4)
    assert_tensor(x.sum_dim((0, 2)), a.sum(axis=(0, 2), keepdims=True))
    assert_tensor(x.mean_dim([-1, 0]), a.mean(axis=(0, 2), keepdims=True))


def test_sum_keeps_the_dtype_and_counts_bools():
    assert T([1, 2, 3]).sum().dtype == "int32"
    assert T([1, 2], dtype="int64").sum().dtype == "int64"
    count = T([True, False, True, True]).sum()
    assert count.dtype == "int32" and count.item() == 3
    assert T([[True, False], [True, True]]).sum_dim(0).tolist() == [[2, 1]]


def test_mean_of_ints_is_float():
    m = T([1, 2]).mean()
    assert m.dtype == "float32" and m.item() == 1.5
    assert T([[1, 2]]).mean_dim(1).tolist() == [[1.5]]
    assert T([True, False]).mean().item() == 0.5


def test_mean_of_empty_is_nan():
    m = Tensor.zeros([0]).mean()
    assert m.shape == () and math.isnan(m.item())


@pytest.mark.parametrize("reduce", [lambda t: t.max(), lambda t: t.min(),
                                    lambda t: t.argmax(0), lambda t: t.max_dim(0)])
def test_extremes_of_empty_are_shape_errors(reduce):
    with pytest.raises(ShapeError, match="size 0"):
        reduce(Tensor.zeros([0, 2]))


def test_argmax_argmin():
    x = T([[1.0, 5.0, 3.0], [7.0, 0.0, 2.0]])
    for got, expected in ((x.argmax(1), [[1], [0]]), (x.argmin(1), [[0], [1]]),
                          (x.argmax(0), [[1, 0, 0]]), (x.argmin(-2), [[0, 1, 1]])):
        assert got.dtype == "int32"
        assert got.tolist() == expected


def test_reduction_dim_errors():
    with pytest.raises(ShapeError, match="sum.*dim 2.*rank 2"):
        Tensor.zeros([2, 3]).sum_dim(2)
    with pytest.raises(ShapeError, match="argmax"):
        Tensor.zeros([2, 3]).argmax(-3)


# ---- shape ops ---------------------------------------------------------------------------
@pytest.mark.parametrize("args, expected", [
    (([3, 2],), (3, 2)), (((6,),), (6,)), ((3, 2), (3, 2)), ((-1,), (6,)), ((2, -1, 1), (2, 3, 1)),
    ((1, 2, 3), (1, 2, 3)), ((-1, 3), (2, 3)),
])
def test_reshape(args, expected):
    x, a = arange(2, 3)
    assert_tensor(x.reshape(*args), a.reshape(expected))


def test_reshape_errors_name_both_shapes():
    with pytest.raises(ShapeError, match=r"reshape.*\[2, 3\].*\[4\]"):
        Tensor.zeros([2, 3]).reshape(4)
    with pytest.raises(ShapeError, match="only one dim may be -1"):
        Tensor.zeros([2, 3]).reshape(-1, -1)


@pytest.mark.parametrize("dims", [(2, 0, 1), (-1, 0, 1), (0, 1, 2), (1, 0, 2)])
def test_permute(dims):
    x, a = arange(2, 3, 4)
    assert_tensor(x.permute(dims), np.transpose(a, dims))
    assert_tensor(x.permute(*dims), np.transpose(a, dims))


@pytest.mark.parametrize("dims, match", [((0, 1), "names 2 dims"), ((0, 0, 1), "repeated"),
                                         ((0, 1, 3), "out of range")])
def test_permute_errors(dims, match):
    with pytest.raises(ShapeError, match=match):
        Tensor.zeros([2, 3, 4]).permute(dims)


def test_swap_dims_and_transpose():
    x, a = arange(2, 3, 4)
    assert_tensor(x.swap_dims(0, 2), np.swapaxes(a, 0, 2))
    assert_tensor(x.swap_dims(-1, 1), np.swapaxes(a, 1, 2))
    assert_tensor(x.transpose(), np.swapaxes(a, -1, -2))


@pytest.mark.parametrize("start, end, expected", [
    (0, -1, (24,)), (1, -1, (2, 12)), (0, 1, (6, 4)), (1, 1, (2, 3, 4)), (-2, -1, (2, 12)),
])
def test_flatten(start, end, expected):
    x, a = arange(2, 3, 4)
    assert_tensor(x.flatten(start, end), a.reshape(expected))
    if (start, end) == (0, -1):
        assert_tensor(x.flatten(), a.reshape(-1))


def test_flatten_errors():
    with pytest.raises(ShapeError, match="start_dim"):
        Tensor.zeros([2, 3, 4]).flatten(2, 1)
    assert T(1.0).flatten().shape == (1,)


def test_squeeze_and_unsqueeze():
    x = Tensor.zeros([1, 3, 1, 2])
    assert x.squeeze().shape == (3, 2)
    assert x.squeeze(0).shape == (3, 1, 2)
    assert x.squeeze(-2).shape == (1, 3, 2)
    assert x.squeeze((0, 2)).shape == (3, 2)
    y = Tensor.zeros([3, 2])
    assert y.unsqueeze(0).shape == (1, 3, 2)
    assert y.unsqueeze(-1).shape == (3, 2, 1)
    assert y.unsqueeze(1).shape == (3, 1, 2)
    assert y.unsqueeze(2).shape == (3, 2, 1)
    assert y.unsqueeze().shape == (1, 3, 2)


def test_squeeze_errors():
    with pytest.raises(ShapeError, match="squeeze: dim 1 has size 3"):
        Tensor.zeros([1, 3]).squeeze(1)
    with pytest.raises(ShapeError, match="unsqueeze"):
        Tensor.zeros([3]).unsqueeze(3)


@pytest.mark.parametrize("src, target, expected", [
    ((3, 1), (3, 4), (3, 4)), ((3, 1), (-1, 4), (3, 4)), ((3,), (2, 3), (2, 3)),
    ((3,), (2, -1), (2, 3)), ((1, 1), (2, 5, 3), (2, 5, 3)), ((2, 3), (2, 3), (2, 3)),
])
def test_expand(src, target, expected):
    x, a = arange(*src)
    assert_tensor(x.expand(target), np.broadcast_to(a, expected))
    assert_tensor(x.expand(*target), np.broadcast_to(a, expected))


@pytest.mark.parametrize("src, target", [((3,), (4,)), ((2, 3), (3,)), ((3,), (-1, 3)),
                                         ((2, 3), (2, 6))])
def test_expand_errors(src, target):
    with pytest.raises(ShapeError, match="expand"):
        Tensor.zeros(src).expand(target)


@pytest.mark.parametrize("src, sizes", [
    ((2, 3), (2, 1)), ((2, 3), (1, 3)), ((2, 3), (2, 2)), ((2, 3), (2, 1, 1)), ((3,), (2,)),
    ((3,), (2, 2)), ((2, 3), (1, 1)), ((2, 3), (0, 1)),
])
def test_repeat_is_torch_repeat(src, sizes):
    x, a = arange(*src)
    # torch.Tensor.repeat(sizes) == np.tile(a, sizes) when len(sizes) >= a.ndim
    assert_tensor(x.repeat(sizes), np.tile(a, sizes))
    assert_tensor(x.repeat(*sizes), np.tile(a, sizes))


def test_repeat_needs_a_size_per_dim():
    with pytest.raises(ShapeError, match="repeat"):
        Tensor.zeros([2, 3]).repeat(2)


# ---- indexing ----------------------------------------------------------------------------
@pytest.mark.parametrize("key", [
    0, -1, (0, 1), (slice(0, 2), Ellipsis, 1), (Ellipsis, -1), None, (None, 1),
    slice(None, None, -1), (slice(None), slice(None, None, -2)), (1, 2, 3), slice(1, None),
    (slice(None), None, slice(1, 3)), slice(5, 9), (Ellipsis,),
])
def test_basic_indexing_matches_numpy(key):
    x, a = arange(3, 4, 5)
    assert_tensor(x[key], a[key])


def test_indexing_examples_from_the_api():
    x, a = arange(3, 4, 5)
    assert_tensor(x[0:2, ..., 1], a[0:2, ..., 1])
    assert_tensor(x[None], a[None])
    assert_tensor(x[::-1], a[::-1])
    assert_tensor(x[:, [2, 0]], a[:, [2, 0]])
    assert_tensor(x[T([2, 0, 2])], a[[2, 0, 2]])
    assert_tensor(x[:, :, np.array([4, 0])], a[:, :, [4, 0]])


def test_indexing_with_a_0d_int_tensor_is_like_an_int():
    # NumPy's and PyTorch's habit: x[i] with a 0-d integer array/tensor, e.g. an argmax
    x, a = arange(3, 4)
    i = T([0.0, 9.0, 1.0]).argmax(0).squeeze()
    assert i.shape == ()
    assert_tensor(x[i], a[1])
    assert_tensor(x[:, T(2)], a[:, 2])


def test_indexing_a_0d_element():
    x, a = arange(2, 3)
    e = x[1, 2]
    assert e.shape == () and e.item() == a[1, 2]


@pytest.mark.parametrize("key, error, match", [
    (3, ShapeError, r"index 3 is out of bounds.*size 3"),
    ((0, 0, 0), ShapeError, "too many indices"),
    (slice(None, None, 0), ShapeError, "step"),
    ("a", ShapeError, "unsupported index"),
    ((slice(None), [0, 1], [0]), ShapeError, "tensor/list index"),
    ([5], ShapeError, "out of range"),
    ([0.5], DTypeError, "int32 or int64"),
])
def test_indexing_errors(key, error, match):
    with pytest.raises(error, match=match):
        Tensor.zeros([3, 4])[key]


def test_setitem_rebinds_and_matches_numpy():
    x, a = arange(3, 4)
    x[0] = 100.0
    a[0] = 100.0
    x[:, 1] = T([7.0, 8.0, 9.0])
    a[:, 1] = [7.0, 8.0, 9.0]
    x[1:, ::2] = T([[1.0, 2.0], [3.0, 4.0]])
    a[1:, ::2] = [[1.0, 2.0], [3.0, 4.0]]
    x[-1, -1] = 5
    a[-1, -1] = 5
    assert_tensor(x, a, "float32")


def test_setitem_casts_the_value_to_the_tensors_dtype():
    x = T([1, 2, 3])
    x[0] = T([9.7])
    assert x.dtype == "int32" and x.tolist() == [9, 2, 3]


@pytest.mark.parametrize("share", [
    lambda x: x[0:2],
    lambda x: x[0],
    lambda x: x.reshape(-1),
    lambda x: x.permute(1, 0),
    lambda x: x.expand(2, 3, 4),
    lambda x: x[:],
    lambda x: x[...],
    lambda x: x.reshape(3, 4),
    lambda x: x.permute(0, 1),
    lambda x: x.expand(3, 4),
    lambda x: x.squeeze(),
    lambda x: Tensor.cat([x]),
], ids=["slice", "row", "reshape", "permute", "expand", "full-slice", "ellipsis",
        "same-reshape", "identity-permute", "same-expand", "noop-squeeze", "cat-of-one"])
def test_setitem_leaves_tensors_that_shared_data_unchanged(share):
    x, a = arange(3, 4)
    other = share(x)
    before = other.to_numpy().copy()
    held = x.to_numpy()
    x[0] = -1.0
    np.testing.assert_array_equal(other.to_numpy(), before)
    np.testing.assert_array_equal(held, a)
    assert x.tolist()[0] == [-1.0] * 4


def test_slice_assign_returns_a_new_tensor():
    x, a = arange(3, 4)
    y = x.slice_assign((slice(0, 2), slice(1, 3)), T([[1.0, 2.0], [3.0, 4.0]]))
    a2 = a.copy()
    a2[0:2, 1:3] = [[1.0, 2.0], [3.0, 4.0]]
    assert_tensor(y, a2)
    assert_tensor(x, a)


@pytest.mark.parametrize("key, value, np_value", [
    ((slice(0, 2), slice(1, 3)), 5.0, 5.0),
    ((slice(0, 2),), T([1.0, 2.0, 3.0, 4.0]), [1.0, 2.0, 3.0, 4.0]),
    ((slice(None), slice(1, 2)), T([[1.0], [2.0], [3.0]]), [[1.0], [2.0], [3.0]]),
    ((slice(None), 1), T([1.0, 2.0, 3.0]), [1.0, 2.0, 3.0]),   # shaped like x[:, 1]
    ((1, slice(None)), T([1.0, 2.0, 3.0, 4.0]), [1.0, 2.0, 3.0, 4.0]),
    ((1, 2), T(9.0), 9.0),
    ((slice(None, None, -1), 0), T([1.0, 2.0, 3.0]), [1.0, 2.0, 3.0]),
    ((Ellipsis, slice(0, 4, 2)), T([1.0, 2.0]), [1.0, 2.0]),
])
def test_slice_assign_broadcasts_the_value(key, value, np_value):
    x, a = arange(3, 4)
    a[key] = np_value
    assert_tensor(x.slice_assign(key, value), a)


def test_slice_assign_value_that_does_not_fit():
    with pytest.raises(ShapeError, match=r"slice_assign.*\[3\].*\[2, 2\]"):
        Tensor.zeros([4, 4]).slice_assign((slice(0, 2), slice(0, 2)), Tensor.ones([3]))


# ---- cat and stack -----------------------------------------------------------------------
@pytest.mark.parametrize("dim", [0, 1, -1, -2])
def test_cat(dim):
    x, a = arange(2, 3)
    y, b = arange(2, 3)
    assert_tensor(Tensor.cat([x, y * 2], dim), np.concatenate([a, b * 2], axis=dim))


def test_cat_promotes_and_accepts_generators():
    out = Tensor.cat(t for t in (T([1, 2]), T([0.5]), T([True])))
    assert out.dtype == "float32" and out.tolist() == [1.0, 2.0, 0.5, 1.0]


@pytest.mark.parametrize("dim", [0, 1, 2, -1, -3])
def test_stack(dim):
    x, a = arange(2, 3)
    assert_tensor(Tensor.stack([x, x + 1, x + 2], dim), np.stack([a, a + 1, a + 2], axis=dim))


def test_stack_promotes():
    out = Tensor.stack([T([1, 2]), T([1.5, 2.5])])
    assert out.dtype == "float32" and out.shape == (2, 2)


@pytest.mark.parametrize("make, match", [
    (lambda: Tensor.cat([]), "cat: needs at least one"),
    (lambda: Tensor.stack([]), "stack: needs at least one"),
    (lambda: Tensor.cat([Tensor.zeros([2, 3]), Tensor.zeros([3])]), r"same rank.*\[2, 3\]"),
    (lambda: Tensor.cat([Tensor.zeros([2, 3]), Tensor.zeros([2, 4])]),
     r"cat.*\[2, 3\].*\[2, 4\]"),
    (lambda: Tensor.cat([Tensor.zeros([2, 3]), Tensor.zeros([2, 3])], 2), "out of range"),
    (lambda: Tensor.cat([T(1.0), T(2.0)]), "stack"),
    (lambda: Tensor.stack([Tensor.zeros([2]), Tensor.zeros([3])]), r"\[1, 2\].*\[1, 3\]"),
])
def test_cat_and_stack_errors(make, match):
    with pytest.raises(ShapeError, match=match):
        make()


# ---- gather, scatter, select, masks ------------------------------------------------------
def test_gather():
    x, a = arange(3, 4)
    idx = np.array([[0, 3], [1, 1], [2, 0]])
    assert_tensor(x.gather(1, T(idx)), np.take_along_axis(a, idx, 1))
    idx0 = np.array([[2, 0, 1, 0]])
    assert_tensor(x.gather(0, idx0), np.take_along_axis(a, idx0, 0))
    assert_tensor(x.gather(-1, T(idx, dtype="int64")), np.take_along_axis(a, idx, 1))


def test_scatter_adds_duplicates():
    out = Tensor.zeros([3]).scatter(0, T([0, 0, 2]), T([1.0, 2.0, 3.0]))
    assert out.tolist() == [3.0, 0.0, 3.0]
    base = Tensor.ones([2, 3])
    out = base.scatter(1, T([[0, 0, 1], [2, 2, 2]]), T([[1.0, 1.0, 1.0], [1.0, 2.0, 3.0]]))
    assert out.tolist() == [[3.0, 2.0, 1.0], [1.0, 1.0, 7.0]]
    assert base.tolist() == [[1.0] * 3] * 2


def test_scatter_casts_values():
    out = Tensor.zeros([2], dtype="int32").scatter(0, [1], [2.9])
    assert out.dtype == "int32" and out.tolist() == [0, 2]


def test_select():
    x, a = arange(3, 4)
    assert_tensor(x.select(0, T([2, 0, 2])), a[[2, 0, 2]])
    assert_tensor(x.select(1, [3, 1]), a[:, [3, 1]])
    assert_tensor(x.select(-1, np.array([0])), a[:, [0]])


@pytest.mark.parametrize("make, error, match", [
    (lambda x: x.gather(1, T([[4]] * 3)), ShapeError, "gather: index 4 is out of range"),
    (lambda x: x.gather(1, T([[0, 1]])), ShapeError, r"\[1, 2\].*\[3, 4\]"),
    (lambda x: x.gather(1, T([[0.0]] * 3)), DTypeError, "gather.*float32"),
    (lambda x: x.select(0, T([3])), ShapeError, "select: index 3"),
    (lambda x: x.select(0, T([[0]])), ShapeError, "select: indices must be 1-D"),
    (lambda x: x.select(0, T([True])), DTypeError, "select.*bool"),
    (lambda x: x.scatter(0, T([[-1] * 4]), Tensor.ones([1, 4])), ShapeError, "scatter: index -1"),
    (lambda x: x.scatter(0, T([[0] * 4]), Tensor.ones([2, 4])), ShapeError,
     r"scatter: values of shape \[2, 4\]"),
])
def test_index_op_errors(make, error, match):
    x, _ = arange(3, 4)
    with pytest.raises(error, match=match):
        make(x)


def test_mask_where_and_mask_fill():
    x, a = arange(2, 3)
    mask = x > 2
    assert_tensor(x.mask_where(mask, T([-1.0, -2.0, -3.0])),
                  np.where(a > 2, [-1.0, -2.0, -3.0], a))
    assert_tensor(x.mask_fill(mask, 0.5), np.where(a > 2, 0.5, a))
    col = T([[True], [False]])
    assert_tensor(x.mask_fill(col, -1), np.where([[True], [False]], -1, a))
    ints = T([1, 2, 3])
    out = ints.mask_fill(ints > 1, 0)
    assert out.dtype == "int32" and out.tolist() == [1, 0, 0]


@pytest.mark.parametrize("make, error, match", [
    (lambda x: x.mask_fill(x, 0.0), DTypeError, "mask must be bool, got float32"),
    (lambda x: x.mask_fill(x > 0, x), DTypeError, "mask_where"),
    (lambda x: x.mask_fill(T([True, False]), 0.0), ShapeError, r"\[2, 3\].*\[2\]"),
])
def test_mask_errors(make, error, match):
    x, _ = arange(2, 3)
    with pytest.raises(error, match=match):
        make(x)


# ---- matmul ------------------------------------------------------------------------------
@pytest.mark.parametrize("sa, sb", [
    ((2, 3), (3, 4)), ((3,), (3,)), ((3,), (3, 4)), ((2, 3), (3,)), ((5, 2, 3), (3, 4)),
    ((2, 3), (5, 3, 4)), ((2, 1, 2, 3), (5, 3, 4)), ((3,), (5, 3, 4)), ((5, 2, 3), (3,)),
    ((1, 3), (3, 1)),
])
def test_matmul_follows_numpy(sa, sb):
    x = Tensor.random(sa, Distribution.Uniform(-1, 1))
    y = Tensor.random(sb, Distribution.Uniform(-1, 1))
    expected = np.matmul(x.to_numpy(), y.to_numpy())
    assert_tensor(x @ y, expected, "float32", rtol=1e-5)
    assert_tensor(x.matmul(y), expected, "float32", rtol=1e-5)


@pytest.mark.parametrize("a, b, expected", [("int32", "int32", "int32"),
                                            ("int32", "float32", "float32"),
                                            ("bool", "bool", "int32")])
def test_matmul_dtypes(a, b, expected):
    out = Tensor.ones([2, 3], dtype=a) @ Tensor.ones([3, 2], dtype=b)
    assert out.dtype == expected and out.tolist() == [[3, 3], [3, 3]]


@pytest.mark.parametrize("sa, sb", [((2, 3), (4, 2)), ((3,), (4,)), ((2, 2, 3), (3, 3, 1))])
def test_matmul_shape_errors_name_both_shapes(sa, sb):
    with pytest.raises(ShapeError) as info:
        Tensor.zeros(sa) @ Tensor.zeros(sb)
    assert "matmul" in str(info.value)


def test_matmul_error_names_both_shapes():
    with pytest.raises(ShapeError, match=r"matmul.*\[2, 3\].*\[4, 2\]"):
        Tensor.zeros([2, 3]) @ Tensor.zeros([4, 2])


def test_matmul_of_0d():
    with pytest.raises(ShapeError, match="0-d"):
        T(2.0) @ T([1.0])


# ---- composites --------------------------------------------------------------------------
def test_sigmoid_is_stable_at_the_extremes():
    out = T([-100.0, -10.0, 0.0, 10.0, 100.0]).sigmoid().to_numpy()
    assert np.all(np.isfinite(out))
    expected = 1 / (1 + np.exp(-np.array([-100.0, -10.0, 0.0, 10.0, 100.0])))
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-7)
    assert out[0] >= 0 and out[-1] == 1.0


def test_relu():
    assert T([-2.0, 0.0, 3.0]).relu().tolist() == [0.0, 0.0, 3.0]
    assert T([-2, 3]).relu().tolist() == [0, 3]
    assert np.isnan(T([math.nan]).relu().to_numpy()[0])


def test_relu_gradient_is_pytorchs_at_zero_and_nan():
    # one op; its gradient is 0 at exactly 0 (maximum(x, 0) would give 1/2) and passes at NaN,
    # as torch.relu's does
    x = Tensor.from_data([-1.0, 0.0, 2.0, math.nan], backend=Autodiff(NdArray())).require_grad()
    g = x.relu().sum().backward()
    assert x.grad(g).tolist() == [0.0, 0.0, 1.0, 1.0]


def _gelu_reference(a):
    a = np.asarray(a, dtype=np.float64)
    return a * (np.vectorize(math.erf)(a / SQRT_2) + 1) / 2


def gelu_custom(x):
    # the seed's custom GELU, unchanged (API.md)
    x = x * ((x / SQRT_2).erf() + 1)
    return x / 2


@pytest.mark.parametrize("dtype, tol", [("float32", 1e-6), ("float64", 1e-12)])
def test_gelu_matches_an_erf_reference(dtype, tol):
    values = np.linspace(-6, 6, 241)
    x = T(values, dtype=dtype)
    expected = _gelu_reference(x.to_numpy())
    np.testing.assert_allclose(x.gelu().to_numpy(), expected, rtol=4 * tol, atol=tol)
    np.testing.assert_allclose(gelu_custom(x).to_numpy(), expected, rtol=4 * tol, atol=tol)
    assert gelu_custom(x).dtype == dtype


def test_seed_gelu_custom_on_random_input():
    x = Tensor.random([16, 16], Distribution.Normal(0, 3))
    y = gelu_custom(x)
    assert y.shape == (16, 16) and y.dtype == "float32"
    np.testing.assert_allclose(y.to_numpy(), _gelu_reference(x.to_numpy()), rtol=4e-6,
                               atol=1e-6)


def test_gelu_custom_of_ints_is_float():
    y = gelu_custom(T([-1, 0, 1]))
    assert y.dtype == "float32"
    np.testing.assert_allclose(y.to_numpy(), _gelu_reference([-1, 0, 1]), atol=1e-6)


@pytest.mark.parametrize("lo, hi", [(-1.0, 1.0), (None, 0.5), (0.0, None), (2, 3)])
def test_clamp(lo, hi):
    x, a = arange(2, 3)
    x, a = x - 2.5, a - 2.5
    assert_tensor(x.clamp(lo, hi), np.clip(a, lo, hi))
    assert_tensor(x.clamp(min=lo, max=hi), np.clip(a, lo, hi))


def test_clamp_min_max():
    x = T([-2.0, 0.5, 3.0])
    assert x.clamp_min(0).tolist() == [0.0, 0.5, 3.0]
    assert x.clamp_max(1).tolist() == [-2.0, 0.5, 1.0]


@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_softmax_sums_to_one(dim):
    x = Tensor.random([4, 5], Distribution.Normal(0, 3))
    s = x.softmax(dim)
    a = x.to_numpy().astype(np.float64)
    e = np.exp(a - a.max(axis=dim, keepdims=True))
    assert_tensor(s, e / e.sum(axis=dim, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(s.sum_dim(dim).to_numpy(), 1.0, rtol=1e-6)
    ls = x.log_softmax(dim)
    np.testing.assert_allclose(ls.exp().sum_dim(dim).to_numpy(), 1.0, rtol=1e-5)
    np.testing.assert_allclose(ls.to_numpy(), np.log(s.to_numpy()), rtol=1e-5, atol=1e-5)


def test_softmax_is_stable_with_large_values():
    x = T([[1000.0, 1001.0, 1002.0], [-1000.0, 0.0, 1000.0]])
    s = x.softmax(-1).to_numpy()
    assert np.all(np.isfinite(s))
    np.testing.assert_allclose(s[0], [0.09003057, 0.24472847, 0.66524096], rtol=1e-5)
    np.testing.assert_allclose(s[1], [0.0, 0.0, 1.0], atol=1e-7)
    ls = x.log_softmax(-1).to_numpy()
    assert np.all(np.isfinite(ls))
    np.testing.assert_allclose(ls[0], [-2.40760596, -1.40760596, -0.40760596], rtol=1e-5)
    np.testing.assert_allclose(ls[1], [-2000.0, -1000.0, 0.0], rtol=1e-6)


def test_inf_and_nan_come_silently(recwarn):
    x = T([1.0, 0.0, -1.0])
    outs = [x / 0, x.log(), x.sqrt(), (x * 1000).exp(), x ** -1, T([1, 0]) / 0]
    assert np.isinf(outs[0].to_numpy()[0]) and np.isnan(outs[1].to_numpy()[2])
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_small_composites():
    x = T([-2.0, 0.0, 3.0])
    assert x.sign().tolist() == [-1.0, 0.0, 1.0]
    assert x.square().tolist() == [4.0, 0.0, 9.0]
    assert T([2.0, 4.0]).recip().tolist() == [0.5, 0.25]
    assert x.maximum(T([0.0, 1.0, 2.0])).tolist() == [0.0, 1.0, 3.0]
    assert x.minimum(0).tolist() == [-2.0, 0.0, 0.0]


# ---- what a tensor says it is, its data is ------------------------------------------------
SCALAR_OPS = {
    "add": lambda t, s: t + s, "radd": lambda t, s: s + t, "rsub": lambda t, s: s - t,
    "mul": lambda t, s: t * s, "div": lambda t, s: t / s, "pow": lambda t, s: t ** s,
    "maximum": lambda t, s: t.maximum(s), "clamp": lambda t, s: t.clamp(s, None),
    "eq": lambda t, s: t == s, "lt": lambda t, s: s < t,
    "mask_fill": lambda t, s: t.mask_fill(t.cast("bool"), s),
    "mask_where": lambda t, s: t.mask_where(t.cast("bool"), s),
    "slice_assign": lambda t, s: t.slice_assign((0,), s),
    "full_like": lambda t, s: t.full_like(s),
}


@pytest.mark.parametrize("op", SCALAR_OPS.values(), ids=SCALAR_OPS.keys())
@pytest.mark.parametrize("scalar", [True, 2, 2.5, np.float64(1.5), np.int64(3)],
                         ids=["bool", "int", "float", "np-float", "np-int"])
@pytest.mark.parametrize("dtype", ["bool", "int32", "int64", "float32", "float64"])
def test_data_has_the_dtype_and_shape_the_tensor_reports(dtype, scalar, op):
    x = Tensor.from_data([[0, 1, 2], [3, 4, 5]], dtype=dtype)
    try:
        out = op(x, scalar)
    except DTypeError:
        return  # refusing a combination is fine; mislabelling the data is not
    a = out.to_numpy()
    assert (a.dtype.name, a.shape) == (out.dtype, out.shape)


# ---- errors ------------------------------------------------------------------------------
@pytest.mark.parametrize("fn, op", [
    (lambda a, b: a + b, "add"), (lambda a, b: a - b, "sub"), (lambda a, b: a * b, "mul"),
    (lambda a, b: a / b, "div"), (lambda a, b: a ** b, "pow"), (lambda a, b: a < b, "lt"),
    (lambda a, b: a == b, "eq"), (lambda a, b: a.maximum(b), "maximum"),
])
def test_shape_errors_name_the_op_and_both_shapes(fn, op):
    with pytest.raises(ShapeError) as info:
        fn(Tensor.ones([2, 3]), Tensor.ones([4]))
    msg = str(info.value)
    assert msg.startswith(f"{op}:")
    assert "[2, 3]" in msg and "[4]" in msg


@pytest.mark.parametrize("make, words", [
    (lambda: T([1, 2]).logical_and(T([1.0])), ["logical_and", "float32"]),
    (lambda: ~T([1.0]), ["logical_not", "float32"]),
    (lambda: T([1.0]).mask_fill(T([1]), 0), ["mask_where", "int32"]),
    (lambda: T([1.0]).gather(0, T([0.0])), ["gather", "float32"]),
    (lambda: T([1.0]).cast("uint8"), ["cast", "uint8"]),
])
def test_dtype_errors_name_the_op_and_dtype(make, words):
    with pytest.raises(DTypeError) as info:
        make()
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize("other", [_OtherCpu(), Autodiff(NdArray())], ids=["other", "autodiff"])
@pytest.mark.parametrize("fn", [
    lambda a, b: a + b, lambda a, b: b * a, lambda a, b: a @ b.reshape(3, 1),
    lambda a, b: Tensor.cat([a, b]), lambda a, b: a.mask_where(b > 0, 1.0),
    lambda a, b: a.mask_where(a > 0, b), lambda a, b: a.gather(0, b.cast("int32")),
])
def test_mixing_backends_says_to_move_with_to(fn, other):
    a = Tensor.ones([3])
    b = Tensor.ones([3], backend=other)
    with pytest.raises(BackendError) as info:
        fn(a, b)
    msg = str(info.value)
    assert ".to(" in msg
    assert str(other) in msg and "NdArray<cpu>" in msg
    assert (a + b.to(a.backend)).tolist() == [2.0, 2.0, 2.0]


@pytest.mark.parametrize("call", [lambda t: t.backward(), lambda t: t.require_grad()])
def test_autodiff_calls_on_plain_ndarray_say_to_wrap_it(call):
    t = Tensor.ones([2]).sum()
    with pytest.raises(BackendError) as info:
        call(t)
    assert "Autodiff(" in str(info.value)


def test_plain_tensors_are_not_tracked():
    t = Tensor.ones([2])
    assert t.is_require_grad() is False
    assert t.detach() .tolist() == [1.0, 1.0]


@pytest.mark.parametrize("fn", [
    lambda t, n: t + n, lambda t, n: n + t, lambda t, n: t * n, lambda t, n: n - t,
    lambda t, n: n / t, lambda t, n: t ** n, lambda t, n: t < n, lambda t, n: n == t,
    lambda t, n: t @ n, lambda t, n: n @ t, lambda t, n: t.maximum(n),
], ids=["add", "radd", "mul", "rsub", "rdiv", "pow", "lt", "req", "matmul", "rmatmul",
        "maximum"])
@pytest.mark.parametrize("numpy_operand", [np.ones(3), np.ones(3, dtype=np.float32),
                                           [1.0, 1.0, 1.0]], ids=["f64", "f32", "list"])
def test_numpy_arrays_as_operands_suggest_from_data(fn, numpy_operand):
    t = Tensor.ones([3])
    with pytest.raises(DTypeError, match=r"Tensor\.from_data"):
        fn(t, numpy_operand)


@pytest.mark.parametrize("value", ["2", None, object(), 1 + 2j])
def test_other_operands_are_dtype_errors(value):
    with pytest.raises(DTypeError, match="add"):
        Tensor.ones([3]) + value


# ---- mistakes and hostile sizes (issue 17) ---------------------------------------------------
@pytest.mark.parametrize("size", [2.5, 2.0, "3", True, np.float32(2), None])
@pytest.mark.parametrize("make", ["zeros", "ones", "full", "random", "reshape"])
def test_sizes_must_be_ints(make, size):
    # zeros([2.5]) had shape [2], zeros(["3"]) shape [3], zeros([True]) shape [1]
    calls = {"zeros": lambda s: Tensor.zeros(s), "ones": lambda s: Tensor.ones(s),
             "full": lambda s: Tensor.full(s, 1.0), "random": lambda s: Tensor.random(s),
             "reshape": lambda s: Tensor.zeros([4]).reshape(s + [1])}
    with pytest.raises(ShapeError, match=r"a shape|sizes in a shape are ints"):
        calls[make]([size])


def test_numpy_and_index_ints_are_sizes():
    assert Tensor.zeros([np.int64(3), np.int32(2)]).shape == (3, 2)
    assert Tensor.zeros([4]).reshape([np.int64(2), 2]).shape == (2, 2)


def test_arange_checks_its_range_before_allocating():
    import tracemalloc
    tracemalloc.start()
    try:
        with pytest.raises(DTypeError, match=r"arange: .*8589934591 does not fit int32"):
            Tensor.arange(0, 2**33)  # 64 GiB of int64 before the int32 check, until now
        assert tracemalloc.get_traced_memory()[1] < 1 << 20
    finally:
        tracemalloc.stop()
    assert Tensor.arange(0, 2**33, 2**31, dtype="int64").to_numpy().tolist() == [
        0, 2**31, 2**32, 3 * 2**31]
    assert Tensor.arange(5, 0, -2).to_numpy().tolist() == [5, 3, 1]
    assert Tensor.arange(3, 3).shape == (0,)


@pytest.mark.parametrize("make", [lambda: Tensor.zeros([2**40]), lambda: Tensor.ones([2**20] * 3),
                                  lambda: Tensor.random([2**40]),
                                  lambda: Tensor.arange(0.0, 2.0**40)])
def test_results_too_large_to_allocate_name_the_op(make):
    with pytest.raises(ember.OutOfMemoryError, match=r"^(full|random|arange): a result of shape "
                                                     r"\[.*\] (float32|int32) needs .* GiB"):
        make()
    assert issubclass(ember.OutOfMemoryError, MemoryError)  # `except MemoryError` still works


def test_int32_sums_are_exact_or_refused_on_ndarray():
    x = Tensor.from_data(np.full(4, 2**30, np.int32))  # NumPy's own int32 reduce wraps to 0
    with pytest.raises(DTypeError, match=r"sum: the int32 sum over dims \[0\] of shape \[4\] "
                                         r"reaches 4294967296.*cast\('int64'\)"):
        x.sum()
    assert x.cast("int64").sum().item() == 2**32
    assert Tensor.from_data(np.full(3, 2**29, np.int32)).sum().item() == 3 * 2**29
    y = Tensor.from_data(np.array([[2**31 - 1, 1], [-2**31, -1]], np.int32))
    with pytest.raises(DTypeError, match="int32 sum"):
        y.sum_dim(1)
    assert y.sum_dim(0).to_numpy().tolist() == [[-1, 0]]
