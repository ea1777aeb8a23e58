"""ember.dtype: canonical names, the promotion table, weak Python scalars, NumPy widening."""

import numpy as np
import pytest

from ember import DTypeError, Tensor
from ember import dtype as D

EMBER_DTYPES = ("bool", "int32", "int64", "float32", "float64")


def test_the_five_dtypes_and_defaults():
    assert D.DTYPES == EMBER_DTYPES
    assert D.DEFAULT_FLOAT == "float32"
    assert D.DEFAULT_INT == "int32"


# ---- canonical ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", EMBER_DTYPES)
def test_canonical_strings_are_themselves(name):
    assert D.canonical(name) == name


@pytest.mark.parametrize("given, expected", [
    (np.bool_, "bool"), (np.int32, "int32"), (np.int64, "int64"),
    (np.float32, "float32"), (np.float64, "float64"),
    (np.dtype("bool"), "bool"), (np.dtype("int32"), "int32"), (np.dtype("int64"), "int64"),
    (np.dtype("float32"), "float32"), (np.dtype("float64"), "float64"),
    ("f4", "float32"), ("i8", "int64"),
])
def test_canonical_numpy_dtypes(given, expected):
    assert D.canonical(given) == expected


@pytest.mark.parametrize("given, expected", [(bool, "bool"), (int, "int32"), (float, "float32")])
def test_canonical_python_types_give_embers_defaults(given, expected):
    assert D.canonical(given) == expected


@pytest.mark.parametrize("bad", [
    "float16", "uint8", "int8", "complex64", "string", "nonsense",
    np.uint8, np.float16, np.uint64, np.complex128, complex, str, object,
])
def test_canonical_unknown_raises_naming_it_and_listing_embers(bad):
    with pytest.raises(DTypeError) as info:
        D.canonical(bad, op="my_op")
    msg = str(info.value)
    assert "my_op" in msg
    assert repr(bad) in msg
    for name in EMBER_DTYPES:
        assert name in msg


@pytest.mark.parametrize("bad", [None, ["float32"], {"dtype": "float32"}])
def test_canonical_refuses_non_dtypes_with_dtype_error(bad):
    # None is not NumPy's float64 here, and unhashable values are no dtype either
    with pytest.raises(DTypeError, match="unknown dtype"):
        D.canonical(bad, op="cast")


def test_dtype_error_is_a_type_error():
    with pytest.raises(TypeError):
        D.canonical("nonsense")


# ---- promotion table ---------------------------------------------------------------------
@pytest.mark.parametrize("a, b, expected", [
    ("bool", "bool", "bool"),
    ("bool", "int32", "int32"),
    ("bool", "int64", "int64"),
    ("bool", "float32", "float32"),
    ("bool", "float64", "float64"),
    ("int32", "int32", "int32"),
    ("int32", "int64", "int64"),
    ("int32", "float32", "float32"),
    ("int64", "float32", "float32"),  # category beats width, as in PyTorch
    ("int64", "float64", "float64"),
    ("float32", "float64", "float64"),
])
def test_promotion_table_is_symmetric(a, b, expected):
    assert D.result_type([a, b]) == expected
    assert D.result_type([b, a]) == expected


def test_promotion_of_many():
    assert D.result_type(["bool", "int32", "int64", "bool"]) == "int64"
    assert D.result_type(["int64", "float32", "int32"]) == "float32"


# ---- weak Python scalars -----------------------------------------------------------------
@pytest.mark.parametrize("dtype, scalar, expected", [
    ("float32", 2.0, "float32"),
    ("float32", 2, "float32"),
    ("float32", True, "float32"),
    ("float64", 2.0, "float64"),
    ("int32", 0.5, "float32"),
    ("int64", 0.5, "float32"),
    ("int32", 1, "int32"),
    ("int64", 1, "int64"),
    ("int32", True, "int32"),
    ("bool", 1, "int32"),
    ("bool", 1.5, "float32"),
    ("bool", True, "bool"),
    ("float32", np.float64(2.0), "float32"),  # NumPy scalars are weak too
    ("int32", np.int64(3), "int32"),
])
def test_weak_scalars(dtype, scalar, expected):
    assert D.result_type([dtype], [scalar]) == expected


@pytest.mark.parametrize("scalar, expected", [(True, "bool"), (3, "int32"), (3.0, "float32")])
def test_scalars_alone_give_defaults(scalar, expected):
    assert D.result_type([], [scalar]) == expected


@pytest.mark.parametrize("dtype, scalar, expected", [
    ("float32", 2.0, "float32"),
    ("int32", 0.5, "float32"),
    ("int32", 1, "int32"),
    ("int64", 1, "int64"),
    ("bool", 1, "int32"),
])
def test_weak_scalars_through_tensor_operators(dtype, scalar, expected):
    t = Tensor.ones([3], dtype=dtype)
    assert (t + scalar).dtype == expected
    assert (scalar + t).dtype == expected


@pytest.mark.parametrize("value", ["2", None, [1], 1 + 2j])
def test_scalar_category_refuses_non_numbers(value):
    with pytest.raises(DTypeError, match="my_op"):
        D.scalar_category(value, "my_op")


@pytest.mark.parametrize("dtype, is_float, is_int, to_float", [
    ("bool", False, False, "float32"),
    ("int32", False, True, "float32"),
    ("int64", False, True, "float32"),
    ("float32", True, False, "float32"),
    ("float64", True, False, "float64"),
])
def test_categories(dtype, is_float, is_int, to_float):
    assert D.is_float(dtype) is is_float
    assert D.is_int(dtype) is is_int
    assert D.to_float(dtype) == to_float


# ---- of_numpy ----------------------------------------------------------------------------
@pytest.mark.parametrize("np_dtype, expected", [
    ("bool", "bool"),
    ("int8", "int32"), ("int16", "int32"), ("int32", "int32"), ("int64", "int64"),
    ("uint8", "int32"), ("uint16", "int32"), ("uint32", "int64"),
    ("float16", "float32"), ("float32", "float32"), ("float64", "float64"),
])
def test_of_numpy_widens_without_loss(np_dtype, expected):
    assert D.of_numpy(np.zeros(2, dtype=np_dtype)) == expected


@pytest.mark.parametrize("np_dtype, value", [
    ("uint8", 255), ("uint16", 65535), ("uint32", 2**32 - 1), ("int8", -128),
])
def test_from_data_keeps_extreme_values_when_widening(np_dtype, value):
    t = Tensor.from_data(np.array([value, 0], dtype=np_dtype))
    assert t.dtype == D.of_numpy(np.zeros(1, dtype=np_dtype))
    assert t.tolist() == [value, 0]


@pytest.mark.parametrize("array, words", [
    (np.array([1], dtype=np.uint64), ["uint64", "int64"]),
    (np.array([1 + 2j]), ["complex128"]),
    (np.array([1 + 2j], dtype=np.complex64), ["complex64"]),
    (np.array([None, 1], dtype=object), ["object"]),
    (np.array(["a", "b"]), ["str"]),
    (np.array([b"a"]), ["bytes"]),
])
def test_of_numpy_refuses_with_clear_messages(array, words):
    with pytest.raises(DTypeError) as info:
        D.of_numpy(array)
    msg = str(info.value)
    assert msg.startswith("from_data:")
    for word in words:
        assert word in msg


def test_of_numpy_messages_say_what_to_do():
    with pytest.raises(DTypeError, match="astype"):
        D.of_numpy(np.array([1], dtype=np.uint64))
    with pytest.raises(DTypeError, match="float32"):
        D.of_numpy(np.array([1 + 2j]))
    with pytest.raises(DTypeError, match="rectangular"):
        D.of_numpy(np.array([None, 1], dtype=object))
