"""dtypes and the promotion rule, written once.

ember has five dtypes, named by strings: "bool", "int32", "int64", "float32", "float64".
The default float is float32 and the default integer is int32: WebGPU has no 64-bit
integers, so (as in JAX and TensorFlow.js) int32 is what runs everywhere.

Promotion follows PyTorch: bool < integers < floats; inside a category the wider wins.
Python scalars are *weak*: they never widen a tensor of their own category or above
(`float32 + 2.0` stays float32, `int32 + 1` stays int32), and lift a tensor of a lower
category to that category's default (`int32 + 0.5` is float32).
"""

import numpy as np

from .errors import DTypeError

DTYPES = ("bool", "int32", "int64", "float32", "float64")
DEFAULT_FLOAT = "float32"
DEFAULT_INT = "int32"

_CATEGORY = {"bool": 0, "int32": 1, "int64": 1, "float32": 2, "float64": 2}
_DEFAULT_OF_CATEGORY = ("bool", DEFAULT_INT, DEFAULT_FLOAT)
_ORDER = {d: i for i, d in enumerate(DTYPES)}  # category, then width

# NumPy dtypes that convert to an ember dtype without losing information.
_WIDEN = {
    "bool": "bool", "int8": "int32", "int16": "int32", "uint8": "int32", "uint16": "int32",
    "int32": "int32", "uint32": "int64", "int64": "int64",
    "float16": "float32", "float32": "float32", "float64": "float64",
}
_ALIASES = {bool: "bool", int: DEFAULT_INT, float: DEFAULT_FLOAT}
# PyTorch's spellings, so that "float" means float32 here too (NumPy reads it as float64)
_NAMES = {"float": "float32", "double": "float64", "int": "int32", "long": "int64"}


def canonical(dtype, op="dtype"):
    """The ember name of `dtype` (a string, a NumPy dtype or a Python type), or DTypeError."""
    if isinstance(dtype, str) and dtype in _CATEGORY:
        return dtype
    if isinstance(dtype, str) and dtype in _NAMES:
        return _NAMES[dtype]
    if isinstance(dtype, type) and dtype in _ALIASES:
        return _ALIASES[dtype]
    name = None
    if isinstance(dtype, (str, type, np.dtype)):  # not None: NumPy would read it as float64
        try:
            name = np.dtype(dtype).name
        except TypeError:
            pass
    if name in _CATEGORY:
        return name
    raise DTypeError(f"{op}: unknown dtype {dtype!r}; ember's dtypes are {', '.join(DTYPES)}")


def of_numpy(array, op="from_data"):
    """The ember dtype that holds a NumPy array's values exactly, or DTypeError saying why not."""
    name = array.dtype.name
    if name in _WIDEN:
        return _WIDEN[name]
    if array.dtype == object:
        fix = "nested lists must be rectangular and hold only numbers or bools"
    elif name == "uint64":
        fix = "uint64 may not fit int64: convert with array.astype(np.int64) if the values allow"
    else:
        fix = f"convert it to one of {', '.join(DTYPES)} first"
    raise DTypeError(f"{op}: data of NumPy dtype {name} has no ember dtype; {fix}")


def is_float(dtype):
    return _CATEGORY[dtype] == 2


def is_int(dtype):
    return _CATEGORY[dtype] == 1


def to_float(dtype):
    """The float dtype a float-only op (exp, div, mean, ...) computes in for inputs of `dtype`."""
    return dtype if _CATEGORY[dtype] == 2 else DEFAULT_FLOAT


def scalar_category(value, op):
    """The category (0 bool, 1 int, 2 float) of a Python or NumPy scalar, or DTypeError."""
    if isinstance(value, (bool, np.bool_)):
        return 0
    if isinstance(value, (int, np.integer)):
        return 1
    if isinstance(value, (float, np.floating)):
        return 2
    raise DTypeError(
        f"{op}: cannot use {type(value).__name__} {value!r} as an operand; "
        "use a Tensor, a bool, an int or a float"
    )


def result_type(dtypes, scalars=(), op="op"):
    """The dtype of an elementwise op over tensors of `dtypes` and weak Python `scalars`."""
    best = None
    for d in dtypes:
        if best is None or _ORDER[d] > _ORDER[best]:
            best = d
    cat = _CATEGORY[best] if best is not None else -1
    top = max((scalar_category(s, op) for s in scalars), default=-1)
    if top > cat:
        return _DEFAULT_OF_CATEGORY[top]
    return best
