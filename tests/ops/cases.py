"""Conformance cases for every primitive of ember.ops.OPS, built from small tables.

A Case names its inputs (random arrays of a given shape and dtype, literal arrays, Python
scalars, or the backend itself), calls the op through the public Tensor API, and gives an
independent reference in NumPy/Python: not the op table's own `np` implementation, so that the
suite checks those implementations and the op table's shape and dtype rules as well.

References compute in float64 (or int64) where they can and the expected dtype is stated on its
own (`Case.dtype`, or `arithmetic_dtype` below, which restates ember's promotion rule from
API.md rather than importing it).
"""

import math
import operator
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from ember import DTypeError, ShapeError, Tensor

F32, F64, I32, I64, BOOL = "float32", "float64", "int32", "int64", "bool"
CATEGORY = {BOOL: 0, I32: 1, I64: 1, F32: 2, F64: 2}
INF, NAN = math.inf, math.nan


# ---- inputs ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class A:
    """A random input array: its shape, dtype and the interval [lo, hi] of its values."""

    shape: tuple
    dtype: str = F32
    lo: float = -3.0
    hi: float = 3.0
    whole: bool = False  # whole numbers only, also for floats (ties for compares and argmax)

    def make(self, rng):
        if self.dtype == BOOL:
            values = rng.random(self.shape) < 0.5
        elif CATEGORY[self.dtype] == 1 or self.whole:
            values = rng.integers(math.ceil(self.lo), math.floor(self.hi), self.shape,
                                  endpoint=True)
        else:
            values = rng.uniform(self.lo, self.hi, self.shape)
        return np.asarray(values, dtype=self.dtype)


def I(shape, below, dtype=I32):  # noqa: E743  (an index array, as A is an array)
    """Random indices in [0, below)."""
    return A(shape, dtype, 0, below - 1)


def M(shape):
    """A random bool mask."""
    return A(shape, BOOL)


def lit(values, dtype):
    return np.array(values, dtype=dtype)


class _BackendMarker:
    def __repr__(self):
        return "BACKEND"


BACKEND = _BackendMarker()  # in Case.args: the backend under test (for creation ops)


def ember_dtype(array):
    """The ember dtype of a reference result; anything else is a bug in the reference."""
    name = np.asarray(array).dtype.name
    if name not in CATEGORY:
        raise AssertionError(f"reference produced NumPy dtype {name}, which ember lacks")
    return name


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple  # A specs and arrays become Tensors; BACKEND the backend; the rest passes as is
    call: Callable  # public Tensor API: call(*args) -> Tensor
    ref: Callable | None = None  # independent NumPy/Python: ref(*NumPy args) -> expected values
    dtype: str | None = None  # the expected ember dtype where it is not the reference's own
    raises: type[Exception] | None = None  # the error `call` raises instead (ref is unused)
    match: str | None = None  # a regex the error message must contain
    rtol: float | None = None
    atol: float | None = None

    def inputs(self):
        """NumPy arrays and scalars for the args; the same every run (seeded by the id)."""
        rng = np.random.default_rng(zlib.crc32(self.id.encode()))
        return [a.make(rng) if isinstance(a, A) else a.copy() if isinstance(a, np.ndarray)
                else a for a in self.args]

    def tensors(self, values, backend):
        return [Tensor.from_data(v, backend=backend) if isinstance(v, np.ndarray)
                else backend if v is BACKEND else v for v in values]

    def expected(self, values):
        args = [v.copy() if isinstance(v, np.ndarray) else None if v is BACKEND else v
                for v in values]
        with np.errstate(all="ignore"):
            out = np.asarray(self.ref(*args))
            if self.dtype is not None:
                out = out.astype(self.dtype)
        ember_dtype(out)
        return out

    def tolerance(self, dtype):
        rtol, atol = {F32: (1e-5, 1e-6), F64: (1e-12, 1e-14)}.get(dtype, (0.0, 0.0))
        return (rtol if self.rtol is None else self.rtol,
                atol if self.atol is None else self.atol)


CASES: dict[str, list[Case]] = {}


def add(op, *cases):
    CASES.setdefault(op, []).extend(cases)


def err(id, args, call, raises=ShapeError, match=None):
    return Case(id, args, call, raises=raises, match=match)


# ---- dtypes: ember's promotion rule, restated from API.md -----------------------------------
def _kind(operand):
    """The dtype of a tensor operand (an A spec or an array), or the Python scalar itself."""
    if isinstance(operand, A):
        return operand.dtype
    if isinstance(operand, np.ndarray):
        return ember_dtype(operand)
    return operand


def _scalar_category(value):
    if isinstance(value, (bool, np.bool_)):
        return 0
    return 1 if isinstance(value, (int, np.integer)) else 2


def result_dtype(*operands):
    """bool < ints < floats, the wider wins inside a category; a Python scalar is weak: it
    only lifts tensors of a lower category, to its category's default (int32, float32)."""
    tensors = [o for o in operands if isinstance(o, str)]
    best = max(tensors, key=lambda d: (CATEGORY[d], d.endswith("64")))
    weak = max((_scalar_category(s) for s in operands if not isinstance(s, str)), default=-1)
    return (BOOL, I32, F32)[weak] if weak > CATEGORY[best] else best


def arithmetic_dtype(operands, float_only=False):
    """The dtype an arithmetic op returns: bools count as int32, float-only ops (exp, div,
    pow, ...) lift ints and bools to float32."""
    dtype = result_dtype(*operands)
    if float_only and CATEGORY[dtype] < 2:
        return F32
    return I32 if dtype == BOOL else dtype


def _wide(value, dtype):
    """An operand in the NumPy dtype that computes `dtype`'s results exactly enough."""
    if isinstance(value, np.ndarray):
        return value.astype(np.float64 if CATEGORY[dtype] == 2 else np.int64)
    return value


# ---- elementwise: unary and binary ----------------------------------------------------------
@dataclass(frozen=True)
class Elementwise:
    call: Callable  # through the Tensor API
    ref: Callable  # NumPy/Python on float64 or int64 values
    lo: float = -3.0  # the interval of the (first) operand's values
    hi: float = 3.0
    rhs: tuple = (-3.0, 3.0)  # the interval of the second operand's values
    float_only: bool = False
    reflected: bool = True  # a Python scalar may stand on the left (2 - x)


def elementwise_reference(spec, values, dtype):
    with np.errstate(all="ignore"):
        return np.asarray(spec.ref(*(_wide(v, dtype) for v in values))).astype(dtype)


UNARY = {
    "exp": Elementwise(Tensor.exp, np.exp, -5, 5, float_only=True),
    "log": Elementwise(Tensor.log, np.log, 0.05, 10, float_only=True),
    "sqrt": Elementwise(Tensor.sqrt, np.sqrt, 0, 10, float_only=True),
    "erf": Elementwise(Tensor.erf, np.vectorize(math.erf, otypes=[float]), -4, 4,
                       float_only=True),
    "gelu": Elementwise(Tensor.gelu, np.vectorize(
        lambda v: v * (1 + math.erf(v / math.sqrt(2))) / 2, otypes=[float]), -5, 5,
        float_only=True),
    "tanh": Elementwise(Tensor.tanh, np.tanh, -5, 5, float_only=True),
    "sin": Elementwise(Tensor.sin, np.sin, -7, 7, float_only=True),
    "cos": Elementwise(Tensor.cos, np.cos, -7, 7, float_only=True),
    "neg": Elementwise(operator.neg, np.negative),
    "abs": Elementwise(abs, np.abs),
    "relu": Elementwise(Tensor.relu, lambda v: np.maximum(v, 0)),
}

BINARY = {
    "add": Elementwise(operator.add, np.add),
    "sub": Elementwise(operator.sub, np.subtract),
    "mul": Elementwise(operator.mul, np.multiply),
    "div": Elementwise(operator.truediv, np.divide, rhs=(0.5, 3), float_only=True),
    "pow": Elementwise(operator.pow, np.power, 0.1, 3, rhs=(-2, 2), float_only=True),
    "maximum": Elementwise(Tensor.maximum, np.maximum, reflected=False),
    "minimum": Elementwise(Tensor.minimum, np.minimum, reflected=False),
}

# Python's operator for each compare, and the one that Python reflects it to (2 < x runs x > 2)
COMPARE = {
    "eq": (operator.eq, np.equal, "eq"),
    "ne": (operator.ne, np.not_equal, "ne"),
    "lt": (operator.lt, np.less, "gt"),
    "le": (operator.le, np.less_equal, "ge"),
    "gt": (operator.gt, np.greater, "lt"),
    "ge": (operator.ge, np.greater_equal, "le"),
}

SPECIALS = [0.0, -0.0, INF, -INF, NAN, -1.0, 0.5, 1e-30, 100.0, -100.0]
BINARY_SPECIALS = [0.0, -0.0, INF, -INF, NAN, 1.0, -2.0]

UNARY_OPERANDS = [
    ("f32", A((2, 3))),
    ("f64-rank6", A((2, 1, 3, 1, 2, 2), F64)),
    ("0d", A(())),
    ("0d-f64", A((), F64)),
    ("0size", A((0, 3))),
    ("0size-f64", A((2, 0, 1), F64)),
    ("int32", A((3, 4), I32)),
    ("int64", A((5,), I64)),
    ("bool", A((2, 2), BOOL)),
]

BINARY_OPERANDS = [  # id, lhs, rhs
    ("f32", A((2, 3)), A((2, 3))),
    ("bcast", A((3, 1, 4)), A((2, 1))),
    ("bcast-rank5-f64", A((2, 1, 3, 1, 2), F64), A((4, 1, 5, 1), F64)),
    ("0size", A((0, 3)), A((1, 3))),
    ("0size-bcast", A((2, 0, 1)), A((4,))),
    ("0d-2d", A(()), A((2, 3))),
    ("0d-0d-f64", A((), F64), A((), F64)),
    ("scalar-right", A((2, 3)), 2.5),
    ("scalar-left", 2.5, A((2, 3))),
    ("f64-int-scalar", A((3,), F64), 2),
    ("int32", A((2, 3), I32), A((2, 3), I32)),
    ("int32-int64", A((2, 3), I32), A((3,), I64)),
    ("int32-f32", A((2, 3), I32), A((2, 3))),
    ("int64-f64", A((4,), I64), A((2, 1), F64)),
    ("f32-f64", A((2, 3)), A((2, 3), F64)),
    ("int32-int-scalar", A((2, 3), I32), 3),
    ("int-scalar-int64", 3, A((2, 3), I64)),
    ("int32-float-scalar", A((2, 3), I32), 0.5),
    ("bool-bool", A((2, 3), BOOL), A((2, 3), BOOL)),
    ("bool-int32", A((2, 3), BOOL), A((3,), I32)),
    ("bool-float-scalar", A((2, 3), BOOL), 1.5),
    ("f32-bool-scalar", A((2, 3)), True),
    ("int32-bool-scalar", A((2, 3), I32), False),
    ("numpy-scalar-right", A((2, 3)), np.float64(2.5)),  # NumPy scalars are weak too
    ("numpy-scalar-left", np.float32(1.5), A((2, 3), F64)),
]


def _is_scalar(operand):
    return not isinstance(operand, (A, np.ndarray))


def _in(operand, lo, hi, whole=False):
    """An A operand moved into [lo, hi] (bools and scalars stay as they are)."""
    if isinstance(operand, A) and operand.dtype != BOOL:
        return replace(operand, lo=lo, hi=hi, whole=whole)
    return operand


def _unary_cases(name, spec):
    def case(id, x):
        dtype = arithmetic_dtype([_kind(x)], spec.float_only)
        return Case(id, (x,), spec.call,
                    lambda a: elementwise_reference(spec, [a], dtype), dtype=dtype)

    add(name, *(case(id, _in(x, spec.lo, spec.hi)) for id, x in UNARY_OPERANDS))
    add(name, *(case(f"special-{d}", lit(SPECIALS, d)) for d in (F32, F64)))


def _binary_cases(name, spec):
    def case(id, lhs, rhs):
        dtype = arithmetic_dtype([_kind(lhs), _kind(rhs)], spec.float_only)
        return Case(id, (lhs, rhs), spec.call,
                    lambda a, b: elementwise_reference(spec, [a, b], dtype), dtype=dtype)

    for id, lhs, rhs in BINARY_OPERANDS:
        if spec.reflected or not _is_scalar(lhs):
            add(name, case(id, _in(lhs, spec.lo, spec.hi), _in(rhs, *spec.rhs)))
    for d in (F32, F64):  # every pair of special values, by broadcasting a column and a row
        column = lit(BINARY_SPECIALS, d).reshape(-1, 1)
        add(name, case(f"special-{d}", column, column.reshape(1, -1)))
    add(name,
        err("err-bcast", (A((2, 3)), A((4,))), spec.call, match=rf"{name}.*\[2, 3\].*\[4\]"),
        err("err-str-operand", (A((2,)), "a"), spec.call, DTypeError),
        err("err-list-operand", (A((2,)), [1.0, 2.0]), spec.call, DTypeError))
    if not spec.float_only:
        add(name, err("err-int-scalar-overflow", (A((2,), I32), 2**40), spec.call, DTypeError))


def _compare_cases(name, fn, ref, mirror):
    def case(id, lhs, rhs, call=fn, ref=ref):
        return Case(id, (lhs, rhs), call, ref, dtype=BOOL)

    for id, lhs, rhs in BINARY_OPERANDS:
        lhs, rhs = _in(lhs, -2, 2, whole=True), _in(rhs, -2, 2, whole=True)  # with ties
        if _is_scalar(lhs):  # Python runs the mirrored method: keep the op
            flipped, flipped_ref = COMPARE[mirror][:2]
            add(name, case(id, lhs, rhs, flipped, flipped_ref))
        else:
            add(name, case(id, lhs, rhs))
    for d in (F32, F64):
        column = lit(BINARY_SPECIALS, d).reshape(-1, 1)
        add(name, case(f"special-{d}", column, column.reshape(1, -1)))
    add(name, err("err-bcast", (A((2, 3)), A((4,))), fn, match=rf"{name}.*\[2, 3\].*\[4\]"))


for _name, _spec in UNARY.items():
    _unary_cases(_name, _spec)
for _name, _spec in BINARY.items():
    _binary_cases(_name, _spec)
for _name, (_fn, _ref, _mirror) in COMPARE.items():
    _compare_cases(_name, _fn, _ref, _mirror)


# ---- cast -----------------------------------------------------------------------------------
def _convert(a, dtype):
    """Element by element through Python's own bool/int/float."""
    python = {BOOL: bool, I32: int, I64: int, F32: float, F64: float}[dtype]
    return np.array([python(v) for v in a.ravel().tolist()], dtype=dtype).reshape(a.shape)


CASTS = [  # id, input, the dtype argument, the ember dtype it names
    ("f32-to-int32", A((3, 4), F32, -3.7, 3.7), "int32", I32),
    ("f64-to-int64", A((5,), F64, -100, 100), "int64", I64),
    ("f32-to-f64", A((2, 3)), "float64", F64),
    ("f64-to-f32", A((2, 3), F64), "float32", F32),
    ("int32-to-f32", A((4,), I32, -50, 50), "float32", F32),
    ("int32-to-int64", A((4,), I32), "int64", I64),
    ("int64-to-int32", A((2, 2), I64, -1000, 1000), "int32", I32),
    ("int32-to-bool", A((3, 3), I32, -1, 1), "bool", BOOL),
    ("f32-to-bool", A((3, 3), F32, -1, 1, whole=True), "bool", BOOL),
    ("bool-to-f32", A((2, 3), BOOL), "float32", F32),
    ("bool-to-int64", A((2, 3), BOOL), "int64", I64),
    ("0size", A((0, 2)), "int32", I32),
    ("0d", A(()), "float64", F64),
    ("rank5", A((1, 2, 1, 3, 2), F64), "float32", F32),
    ("numpy-dtype", A((3,)), np.float64, F64),
    ("python-float", A((3,), I32), float, F32),
    ("python-int", A((3,)), int, I32),
    ("python-bool", A((3,), I32), bool, BOOL),
]


def _cast_case(id, x, dtype, name):
    return Case(id, (x,), lambda t: t.cast(dtype), lambda a: _convert(a, name))


# Float -> int casts saturate (WGSL's rule, clamped in the float's own precision) and NaN gives
# 0, the same on every backend; written here as integers, independently of ember's clamp
_SATURATED = {(F32, I32): 2**31 - 2**7, (F64, I32): 2**31 - 1, (F32, I64): 2**63 - 2**39,
              (F64, I64): 2**63 - 2**10}
_EDGES = [INF, -INF, NAN, 3e9, -3e9, 2.5e9, 2**31, -2**31, 1e19, -1e19, 7.9, -7.9, 0.0]


def _saturate_ref(src, dst):
    hi, lo = _SATURATED[src, dst], -2**63 if dst == I64 else -2**31  # (powers of 2: exact)

    def ref(a):
        out = [0 if v != v else hi if v >= hi else lo if v <= lo else int(v)
               for v in a.ravel().tolist()]
        return np.array(out, dtype=dst).reshape(a.shape)
    return ref


def _saturate_case(src, dst):
    return Case(f"{src}-to-{dst}-saturates", (lit(_EDGES, src),), lambda t: t.cast(dst),
                _saturate_ref(src, dst))


add("cast", *(_cast_case(*row) for row in CASTS), *(_saturate_case(*k) for k in _SATURATED),
    err("err-float16", (A((2,)),), lambda t: t.cast("float16"), DTypeError),
    err("err-not-a-dtype", (A((2,)),), lambda t: t.cast("complex128"), DTypeError))


# ---- reductions -----------------------------------------------------------------------------
def _reduce_call(method, dims):
    """x.sum() for dims None, else x.sum_dim(dims) (Burn's keep-dim form)."""
    if dims is None:
        return lambda t: getattr(t, method)()
    return lambda t: getattr(t, f"{method}_dim")(dims)


def _reduce_ref(fn, dims):
    def ref(a):
        axes = None if dims is None else tuple(dims) if isinstance(dims, list | tuple) \
            else (dims,)
        return fn(a, axis=axes, keepdims=dims is not None)
    return ref


REDUCE_DIMS = [  # id, input, dims (None: reduce everything to a 0-d tensor)
    ("all", A((2, 3, 4)), None),
    ("dim1", A((2, 3, 4)), 1),
    ("neg-dim-f64", A((2, 3, 4), F64), -1),
    ("dims-0-2", A((2, 3, 4)), (0, 2)),
    ("dims-rank5-f64", A((2, 1, 3, 2, 2), F64), (1, -1, 2)),
    ("every-dim-tuple", A((2, 3)), (0, 1)),
    ("dims-list", A((2, 3, 2)), [2, 0]),
    ("int32", A((3, 4), I32, -100, 100), 0),
    ("int64-all", A((3, 4), I64, -100, 100), None),
    ("0d", A(()), None),
    ("0size-kept", A((0, 3)), 1),
]

SUM_ONLY = [
    ("0size-reduced", A((0, 3)), 0),
    ("0size-all", A((2, 0)), None),
    ("bool-counts", A((5, 4), BOOL), 0),
    ("bool-all", A((5, 4), BOOL), None),
]

EXTREME_ONLY = [
    ("bool", A((3, 4), BOOL), 1),
    ("nan", lit([[1.0, NAN, 3.0], [4.0, 5.0, 6.0]], F32), 1),
    ("inf", lit([-INF, -INF, -1.0], F64), None),
]


def _sum_ref(dims):
    wide = _reduce_ref(np.sum, dims)
    return lambda a: wide(a.astype(np.float64 if CATEGORY[ember_dtype(a)] == 2 else np.int64))


def _sum_case(id, x, dims):
    dtype = arithmetic_dtype([_kind(x)])
    atol = {F32: 1e-5, F64: 1e-13}.get(dtype)  # partial sums round at their own magnitude
    return Case(id, (x,), _reduce_call("sum", dims), _sum_ref(dims), dtype=dtype, atol=atol)


add("sum", *(_sum_case(*row) for row in REDUCE_DIMS + SUM_ONLY),
    err("err-dim-out-of-range", (A((2, 3)),), lambda t: t.sum_dim(2), match="sum"),
    err("err-repeated-dim", (A((2, 3, 4)),), lambda t: t.sum_dim((1, -2)), match="sum"),
    err("err-0d-dim", (A(()),), lambda t: t.sum_dim(0)))

for _name, _fn in (("max", np.max), ("min", np.min)):
    add(_name, *(Case(id, (x,), _reduce_call(_name, dims), _reduce_ref(_fn, dims))
                 for id, x, dims in REDUCE_DIMS + EXTREME_ONLY),
        err("err-0size-reduced", (A((0, 3)),), _reduce_call(_name, 0), match=_name),
        err("err-0size-all", (A((2, 0)),), _reduce_call(_name, None), match=_name),
        err("err-dim-out-of-range", (A((2, 3)),), _reduce_call(_name, -3)))


def arg_reference(pick):
    """argmax/argmin along `dim` by Python's list.index of max/min: the first of ties."""
    def ref(a, dim):
        moved = np.moveaxis(a, dim, -1)
        rows = moved.reshape(-1, moved.shape[-1]).tolist()
        found = np.array([row.index(pick(row)) for row in rows], dtype=np.int64)
        return np.expand_dims(found.reshape(moved.shape[:-1]), dim)
    return ref


ARG_DIMS = [  # id, input, dim
    ("ties-f32", A((3, 5), F32, 0, 2, whole=True), 1),
    ("dim0-f64", A((4, 3), F64), 0),
    ("neg-dim", A((2, 3, 4)), -1),
    ("rank5", A((2, 3, 1, 2, 3), F32, -2, 2, whole=True), 3),
    ("int32-ties", A((3, 6), I32, -2, 2), 1),
    ("int64", A((5,), I64, -100, 100), 0),
    ("bool", A((4, 3), BOOL), 0),
    ("0size-kept", A((0, 3)), 1),
]

for _name, _pick in (("argmax", max), ("argmin", min)):
    add(_name, *(Case(id, (x,), lambda t, d=dim, n=_name: getattr(t, n)(d),
                      lambda a, d=dim, p=_pick: arg_reference(p)(a, d), dtype=I32)
                 for id, x, dim in ARG_DIMS),
        err("err-0size-reduced", (A((3, 0)),), lambda t, n=_name: getattr(t, n)(1), match=_name),
        err("err-0d", (A(()),), lambda t, n=_name: getattr(t, n)(0)),
        err("err-dim-out-of-range", (A((2, 3)),), lambda t, n=_name: getattr(t, n)(2)))


# ---- movement -------------------------------------------------------------------------------
RESHAPES = [  # id, input, call, the shape NumPy's reshape gets
    ("2d-to-3d", A((2, 6)), lambda t: t.reshape(3, 2, 2), (3, 2, 2)),
    ("list-infer", A((2, 3, 4), I64), lambda t: t.reshape([-1, 4]), (6, 4)),
    ("tuple-infer-middle", A((2, 3, 4)), lambda t: t.reshape((2, -1, 3)), (2, 4, 3)),
    ("to-0d", A((1, 1)), lambda t: t.reshape(()), ()),
    ("from-0d", A((), F64), lambda t: t.reshape(1, 1, 1), (1, 1, 1)),
    ("0size", A((0, 3)), lambda t: t.reshape(3, 0), (3, 0)),
    ("rank6", A((2, 3, 4), I32), lambda t: t.reshape(1, 2, 1, 3, 2, 2), (1, 2, 1, 3, 2, 2)),
    ("bool", A((4,), BOOL), lambda t: t.reshape(2, 2), (2, 2)),
    ("flatten", A((2, 3, 4)), lambda t: t.flatten(1), (2, 12)),
    ("flatten-all", A((2, 3, 4)), lambda t: t.flatten(), (24,)),
    ("flatten-middle", A((2, 3, 4, 5)), lambda t: t.flatten(1, -2), (2, 12, 5)),
    ("squeeze-all", A((1, 3, 1)), lambda t: t.squeeze(), (3,)),
    ("squeeze-dim", A((2, 1)), lambda t: t.squeeze(-1), (2,)),
    ("unsqueeze-neg", A((2, 3)), lambda t: t.unsqueeze(-1), (2, 3, 1)),
    ("unsqueeze-0d", A(()), lambda t: t.unsqueeze(0), (1,)),
]

add("reshape", *(Case(id, (x,), call, lambda a, s=shape: a.reshape(s))
                 for id, x, call, shape in RESHAPES),
    err("err-size", (A((2, 3)),), lambda t: t.reshape(4, 2), match=r"reshape.*\[2, 3\]"),
    err("err-two-infer", (A((2, 3)),), lambda t: t.reshape(-1, -1)),
    err("err-infer-0size", (A((0, 3)),), lambda t: t.reshape(-1, 0)),
    err("err-squeeze-not-1", (A((2, 3)),), lambda t: t.squeeze(0)))


def _permute_ref(dims):
    """out[pos] = a[pos moved back through dims], one element at a time."""
    def ref(a):
        perm = [d % a.ndim for d in dims]
        out = np.empty([a.shape[d] for d in perm], dtype=a.dtype)
        for pos in np.ndindex(out.shape):
            src = [0] * a.ndim
            for i, d in enumerate(perm):
                src[d] = pos[i]
            out[pos] = a[tuple(src)]
        return out
    return ref


PERMUTES = [  # id, input, call, the permutation it means
    ("3d", A((2, 3, 4)), lambda t: t.permute(2, 0, 1), (2, 0, 1)),
    ("neg-dims", A((2, 3, 4)), lambda t: t.permute(-1, 0, 1), (2, 0, 1)),
    ("list", A((2, 3), I32), lambda t: t.permute([1, 0]), (1, 0)),
    ("swap-dims", A((2, 3, 4), F64), lambda t: t.swap_dims(0, -1), (2, 1, 0)),
    ("transpose", A((2, 3, 4)), lambda t: t.transpose(), (0, 2, 1)),
    ("rank5", A((2, 3, 1, 4, 2)), lambda t: t.permute(4, 0, 3, 1, 2), (4, 0, 3, 1, 2)),
    ("0size", A((0, 3)), lambda t: t.permute(1, 0), (1, 0)),
    ("bool", A((2, 3), BOOL), lambda t: t.permute(1, 0), (1, 0)),
]

add("permute", *(Case(id, (x,), call, _permute_ref(dims)) for id, x, call, dims in PERMUTES),
    err("err-repeated", (A((2, 3, 4)),), lambda t: t.permute(0, 0, 1)),
    err("err-count", (A((2, 3, 4)),), lambda t: t.permute(1, 0)),
    err("err-out-of-range", (A((2, 3)),), lambda t: t.permute(0, 2)))


EXPANDS = [  # id, input, call, the result shape
    ("trailing", A((3, 1)), lambda t: t.expand(3, 4), (3, 4)),
    ("new-leading", A((3, 1), I64), lambda t: t.expand([2, 3, 4]), (2, 3, 4)),
    ("keep-with-minus-1", A((3, 1)), lambda t: t.expand(2, -1, 4), (2, 3, 4)),
    ("from-0d", A((), F64), lambda t: t.expand(2, 3), (2, 3)),
    ("to-0size", A((1, 3)), lambda t: t.expand(0, 3), (0, 3)),
    ("rank5-bool", A((1, 2, 1), BOOL), lambda t: t.expand(2, 1, 3, 2, 4), (2, 1, 3, 2, 4)),
    ("repeat", A((2, 3)), lambda t: t.repeat(2, 1, 2), None),
]


def _expand_ref(shape):
    if shape is None:  # repeat: NumPy's tile
        return lambda a: np.tile(a, (2, 1, 2))
    return lambda a: np.zeros(shape, a.dtype) + a


add("expand", *(Case(id, (x,), call, _expand_ref(shape)) for id, x, call, shape in EXPANDS),
    err("err-not-1", (A((3, 2)),), lambda t: t.expand(3, 4), match=r"expand.*\[3, 2\]"),
    err("err-fewer-dims", (A((2, 3)),), lambda t: t.expand(3)))


SLICES = [  # id, input, index (x[key] must equal NumPy's a[key])
    ("rows", A((4, 5)), np.s_[1:3]),
    ("neg-step", A((4, 5)), np.s_[:, ::-1]),
    ("neg-step-2", A((5,), I32), np.s_[::-2]),
    ("int-drops-dim", A((4, 5)), np.s_[-1]),
    ("ellipsis-int", A((2, 3, 4), F64), np.s_[..., 1]),
    ("newaxis", A((4, 5)), np.s_[None, 1:]),
    ("empty", A((4, 5)), np.s_[2:1]),
    ("neg-bounds-step", A((6, 4)), np.s_[-3:-1, ::2]),
    ("past-end", A((4, 5)), np.s_[:, 3:10]),
    ("neg-step-from-index", A((5,)), np.s_[3::-1]),
    ("neg-step-to-stop", A((6,), I64), np.s_[5:1:-2]),
    ("neg-step-start-before-0", A((4,)), np.s_[-10::-1]),
    ("neg-step-start-past-end", A((4,)), np.s_[10:0:-1]),
    ("rank5", A((2, 3, 2, 3, 2)), np.s_[1, :, ::-1, 1:, 0]),
    ("0size", A((0, 3)), np.s_[:, 1:]),
    ("to-0d", A((3, 4)), np.s_[1, 2]),
    ("bool", A((3, 4), BOOL), np.s_[::2, 1:3]),
]

add("slice", *(Case(id, (x,), lambda t, k=key: t[k], lambda a, k=key: a[k])
               for id, x, key in SLICES),
    err("err-index-out-of-range", (A((3,)),), lambda t: t[3], match="out of"),
    err("err-neg-index-out-of-range", (A((3, 4)),), lambda t: t[:, -5], match="out of"),
    err("err-too-many", (A((3,)),), lambda t: t[0, 0]),
    err("err-zero-step", (A((3,)),), lambda t: t[::0]))


def _assigned(key):
    def ref(a, v):
        out = a.copy()
        out[key] = v
        return out
    return ref


def _setitem(key):
    """x[key] = v on a copy, so that the input tensor stays as it was."""
    def call(t, v):
        out = Tensor.from_data(t, backend=t.backend)
        out[key] = v
        return out
    return call


SLICE_ASSIGNS = [  # id, input, index, value
    ("rows", A((4, 5)), np.s_[1:3], A((2, 5))),
    ("bcast-row", A((4, 5)), np.s_[1:3], A((1, 5))),
    ("bcast-lower-rank", A((4, 5), F64), np.s_[:, 1:4], A((3,), F64)),
    ("scalar", A((4, 5)), np.s_[::2, 1], 7.5),
    ("neg-steps", A((4, 5)), np.s_[::-1, ::-2], A((4, 3))),
    ("int-index-drops-dim", A((4, 5)), np.s_[2], A((5,))),
    ("int-index-drops-last-dim", A((2, 3, 4)), np.s_[:, :, 0], A((2, 3))),
    ("int-index-drops-middle-dim", A((2, 3, 4), I32), np.s_[:, 1], A((2, 4), I32)),
    ("int-value-into-f32", A((3, 4)), np.s_[1:], A((2, 4), I32)),
    ("bool", A((3, 4), BOOL), np.s_[:, 1], True),
    ("empty-region", A((3, 4)), np.s_[2:1], 1.0),
    ("rank5", A((2, 3, 2, 2, 2)), np.s_[1, :, ::-1], A((3, 2, 2, 2))),
    ("neg-step-start-before-0", A((4,)), np.s_[-10::-1], 9.0),
]

add("slice_assign",
    *(Case(id, (x, v), lambda t, v, k=key: t.slice_assign(k, v), _assigned(key))
      for id, x, key, v in SLICE_ASSIGNS),
    Case("setitem", (A((4, 5)), A((2, 5))), _setitem(np.s_[1:3]), _assigned(np.s_[1:3])),
    Case("setitem-like-getitem", (A((2, 3, 4)), A((2, 3))), _setitem(np.s_[..., -1]),
         _assigned(np.s_[..., -1])),
    Case("setitem-scalar-0d", (A(()), 3.0), _setitem(()), _assigned(())),
    err("err-value-does-not-fit", (A((4, 5)), A((3, 5))),
        lambda t, v: t.slice_assign(np.s_[1:3], v), match="slice_assign"),
    # NumPy refuses it too: a value may drop the dims an int index drops, nothing else
    err("err-value-transposed", (A((4, 5)), A((1, 3))),
        lambda t, v: t.slice_assign(np.s_[0:3, 0:1], v), match="slice_assign"),
    err("err-index-out-of-range", (A((4, 5)), 1.0), lambda t, v: t.slice_assign(np.s_[4], v),
        match="out of"),
    # a scalar that the tensor's dtype cannot hold is refused, not truncated
    err("err-float-scalar-into-int32", (A((3, 4), I32), 2.7),
        lambda t, v: t.slice_assign(np.s_[0], v), DTypeError, match="slice_assign"),
    err("err-int-scalar-into-bool", (A((3, 4), BOOL), 2),
        lambda t, v: t.slice_assign(np.s_[0], v), DTypeError))


def _cat_ref(dim, stack=False):
    """Each part written into its slot of an empty result, in the promoted dtype."""
    def ref(*parts):
        if stack:
            parts = [np.expand_dims(p, dim) for p in parts]
        d = dim % parts[0].ndim
        shape = list(parts[0].shape)
        shape[d] = sum(p.shape[d] for p in parts)
        out = np.empty(shape, dtype=result_dtype(*(ember_dtype(p) for p in parts)))
        at = 0
        for p in parts:
            out[(slice(None),) * d + (slice(at, at + p.shape[d]),)] = p
            at += p.shape[d]
        return out
    return ref


CATS = [  # id, parts, dim
    ("dim0", (A((2, 3)), A((1, 3))), 0),
    ("neg-dim-three", (A((2, 3)), A((2, 1)), A((2, 2))), -1),
    ("rank5-f64", (A((2, 1, 3, 1, 2), F64), A((2, 1, 1, 1, 2), F64)), 2),
    ("0size-part", (A((0, 3)), A((2, 3))), 0),
    ("mixed-dtypes", (A((2, 2), I32), A((1, 2))), 0),
    ("bool-int64", (A((2,), BOOL), A((3,), I64)), 0),
    ("int32-1d", (A((2,), I32), A((3,), I32)), 0),
]

add("cat", *(Case(id, parts, lambda *ts, d=dim: Tensor.cat(list(ts), d), _cat_ref(dim))
             for id, parts, dim in CATS),
    Case("stack", (A((2, 3)), A((2, 3))), lambda *ts: Tensor.stack(ts, 1), _cat_ref(1, True)),
    Case("stack-neg-dim", (A((2,), I32), A((2,), I32), A((2,), I32)),
         lambda *ts: Tensor.stack(list(ts), -1), _cat_ref(-1, True)),
    err("err-shape-mismatch", (A((2, 3)), A((2, 4))), lambda *ts: Tensor.cat(list(ts), 0),
        match=r"cat.*\[2, 3\].*\[2, 4\]"),
    err("err-rank-mismatch", (A((2, 3)), A((3,))), lambda *ts: Tensor.cat(list(ts), 0)),
    err("err-0d", (A(()), A(())), lambda *ts: Tensor.cat(list(ts), 0)))


# ---- indexing -------------------------------------------------------------------------------
def _along(idx, dim):
    """Each position of idx, and that position with its `dim` replaced by the index there."""
    for pos in np.ndindex(idx.shape):
        yield pos, pos[:dim] + (int(idx[pos]),) + pos[dim + 1:]


def _gather_ref(dim):
    def ref(a, idx):
        out = np.empty(idx.shape, dtype=a.dtype)
        for pos, src in _along(idx, dim % a.ndim):
            out[pos] = a[src]
        return out
    return ref


def _scatter_ref(dim):
    def ref(a, idx, v):
        out = a.copy()
        for pos, dst in _along(idx, dim % a.ndim):
            out[dst] += v[pos]
        return out
    return ref


GATHERS = [  # id, input, indices, dim
    ("dim1", A((3, 4)), I((3, 2), 4), 1),
    ("dim0-more-rows", A((3, 4)), I((5, 4), 3), 0),
    ("neg-dim-int64-idx-f64", A((2, 3, 4), F64), I((2, 3, 6), 4, I64), -1),
    ("int32-values", A((3, 4), I32), I((3, 4), 4), 1),
    ("bool-values", A((3, 4), BOOL), I((2, 4), 3), 0),
    ("rank5", A((2, 1, 3, 2, 2)), I((2, 1, 4, 2, 2), 3), 2),
    ("0size-idx", A((3, 4)), I((3, 0), 4), 1),
]

_BAD_IDX = lit([[0, 4], [1, 2], [0, 0]], I32)
_NEG_IDX = lit([[0, -1], [1, 2], [0, 0]], I32)

add("gather", *(Case(id, (x, idx), lambda t, i, d=dim: t.gather(d, i), _gather_ref(dim))
                for id, x, idx, dim in GATHERS),
    err("err-index-out-of-range", (A((3, 4)), _BAD_IDX), lambda t, i: t.gather(1, i),
        match="out of range"),
    err("err-negative-index", (A((3, 4)), _NEG_IDX), lambda t, i: t.gather(1, i)),
    err("err-float-indices", (A((3, 4)), A((3, 2))), lambda t, i: t.gather(1, i), DTypeError),
    err("err-shape-mismatch", (A((3, 4)), I((2, 2), 4)), lambda t, i: t.gather(1, i)))

_DUPLICATES = lit([[0, 1, 0, 2], [0, 0, 0, 0]], I32)

SCATTERS = [  # id, input, indices, values, dim
    ("dim0-duplicates-add-up", A((3, 4)), _DUPLICATES, A((2, 4)), 0),
    ("dim1-more-than-size", A((3, 4)), I((3, 6), 4), A((3, 6)), 1),
    ("neg-dim-f64-int64-idx", A((2, 3), F64), I((2, 5), 3, I64), A((2, 5), F64), -1),
    ("int32", A((3, 4), I32), I((3, 4), 3), A((3, 4), I32), 0),
    ("int-values-into-f32", A((3, 4)), I((3, 4), 3), A((3, 4), I32), 0),
    ("rank4", A((2, 3, 2, 2)), I((2, 3, 2, 2), 2), A((2, 3, 2, 2)), 2),
    ("0size-idx", A((3, 4)), I((0, 4), 3), A((0, 4)), 0),
]

add("scatter",
    *(Case(id, (x, idx, v), lambda t, i, v, d=dim: t.scatter(d, i, v), _scatter_ref(dim))
      for id, x, idx, v, dim in SCATTERS),
    err("err-index-out-of-range", (A((3, 4)), _BAD_IDX, A((3, 2))),
        lambda t, i, v: t.scatter(1, i, v), match="out of range"),
    err("err-negative-index", (A((3, 4)), _NEG_IDX, A((3, 2))),
        lambda t, i, v: t.scatter(1, i, v)),
    err("err-values-shape", (A((3, 4)), I((3, 2), 4), A((3, 3))),
        lambda t, i, v: t.scatter(1, i, v), match="scatter"),
    err("err-float-indices", (A((3, 4)), A((3, 2)), A((3, 2))),
        lambda t, i, v: t.scatter(1, i, v), DTypeError))


def _select_ref(dim):
    return lambda a, idx: a[(slice(None),) * (dim % a.ndim) + (idx,)]


SELECTS = [  # id, input, indices, dim
    ("dim0-repeats", A((4, 3)), I((6,), 4), 0),
    ("neg-dim-int64", A((2, 3, 4), F64), lit([3, 0, 3], I64), -1),
    ("int32-values", A((4, 3), I32), I((2,), 3), 1),
    ("bool-values", A((4, 3), BOOL), I((3,), 4), 0),
    ("rank5", A((2, 3, 1, 2, 4)), I((5,), 4), 4),
    ("empty", A((4, 3)), lit([], I32), 0),
]

add("select", *(Case(id, (x, idx), lambda t, i, d=dim: t.select(d, i), _select_ref(dim))
                for id, x, idx, dim in SELECTS),
    Case("getitem-list", (A((4, 3)),), lambda t: t[:, [2, 0]], lambda a: a[:, [2, 0]]),
    Case("getitem-tensor", (A((4, 3)), I((5,), 4)), lambda t, i: t[i], lambda a, i: a[i]),
    err("err-index-out-of-range", (A((4, 3)), lit([0, 4], I32)), lambda t, i: t.select(0, i),
        match="out of range"),
    err("err-negative-index", (A((4, 3)), lit([-1], I32)), lambda t, i: t.select(0, i)),
    err("err-2d-indices", (A((4, 3)), I((2, 2), 3)), lambda t, i: t.select(0, i)),
    err("err-float-indices", (A((4, 3)), lit([0.0], F32)), lambda t, i: t.select(0, i),
        DTypeError))


def _where_ref(dtype=None):
    """value where mask, x elsewhere, by boolean-mask assignment into a broadcast copy of x."""
    def ref(a, mask, value):
        shape = np.broadcast_shapes(a.shape, mask.shape, np.shape(value))
        out = np.array(np.broadcast_to(a, shape), dtype=dtype or a.dtype)
        hit = np.broadcast_to(mask, shape)
        out[hit] = np.broadcast_to(value, shape)[hit]
        return out
    return ref


MASK_WHERES = [  # id, input, mask, value (a tensor spec or a Python scalar)
    ("tensor-value", A((3, 4)), M((3, 4)), A((3, 4))),
    ("scalar", A((3, 4)), M((3, 4)), -1.5),
    ("mask-bcast", A((3, 4)), M((3, 1)), 0.0),
    ("value-bcast-f64", A((3, 4), F64), M((3, 4)), A((4,), F64)),
    ("x-bcast", A((1, 4)), M((3, 4)), A((3, 4))),
    ("int32-int-scalar", A((3, 4), I32), M((3, 4)), 7),
    ("int64-tensor", A((2, 3), I64), M((2, 3)), A((2, 3), I64)),
    ("bool", A((3, 4), BOOL), M((3, 4)), True),
    ("value-cast-to-x", A((3, 4)), M((3, 4)), A((3, 4), I32)),
    ("0size", A((0, 4)), M((0, 4)), 1.0),
    ("0d", A(()), lit(True, BOOL), 5.0),
    ("rank5", A((2, 1, 3, 1, 2)), M((1, 2, 1, 2, 1)), A((2,))),
]

add("mask_where",
    *(Case(id, (x, m, v), lambda t, m, v: t.mask_where(m, v), _where_ref())
      for id, x, m, v in MASK_WHERES),
    Case("mask-fill", (A((3, 4)), M((3, 4)), 3.0), lambda t, m, v: t.mask_fill(m, v),
         _where_ref()),
    err("err-mask-not-bool", (A((3, 4)), A((3, 4)), 0.0), lambda t, m, v: t.mask_where(m, v),
        DTypeError),
    err("err-mask-shape", (A((3, 4)), M((2, 4)), 0.0), lambda t, m, v: t.mask_where(m, v),
        match="mask_where"),
    # a scalar that the tensor's dtype cannot hold is refused, not truncated
    err("err-float-scalar-into-int32", (A((3, 4), I32), M((3, 4)), 2.5),
        lambda t, m, v: t.mask_where(m, v), DTypeError, match="mask_where"),
    err("err-float-scalar-into-bool", (A((3, 4), BOOL), M((3, 4)), 0.5),
        lambda t, m, v: t.mask_fill(m, v), DTypeError),
    err("err-int-scalar-overflow", (A((3,), I32), M((3,)), 2**40),
        lambda t, m, v: t.mask_where(m, v), DTypeError))


# ---- linear algebra and sources -------------------------------------------------------------
def _matmul_ref(a, b):
    """Sum over the shared dim of a broadcast product, in float64/int64; 1-D operands as NumPy
    treats them (a row on the left, a column on the right, that dim dropped)."""
    wide = np.float64 if CATEGORY[result_dtype(ember_dtype(a), ember_dtype(b))] == 2 \
        else np.int64
    left = a.astype(wide)[None, :] if a.ndim == 1 else a.astype(wide)
    right = b.astype(wide)[:, None] if b.ndim == 1 else b.astype(wide)
    out = (left[..., :, :, None] * right[..., None, :, :]).sum(axis=-2)
    if b.ndim == 1:
        out = out[..., 0]
    if a.ndim == 1:
        out = out[..., 0] if b.ndim == 1 else out[..., 0, :]
    return out


MATMULS = [  # id, lhs, rhs
    ("2d", A((2, 3), F32, -1, 1), A((3, 4), F32, -1, 1)),
    ("batch-bcast-f64", A((2, 1, 3, 4), F64), A((5, 4, 2), F64)),
    ("rank5", A((2, 1, 2, 3, 4), F32, -1, 1), A((1, 3, 1, 4, 2), F32, -1, 1)),
    ("1d-2d", A((3,)), A((3, 4))),
    ("2d-1d", A((2, 3)), A((3,))),
    ("1d-1d", A((3,), F64), A((3,), F64)),
    ("1d-3d", A((3,)), A((2, 3, 4))),
    ("int32", A((2, 3), I32), A((3, 2), I32)),
    ("int64-int32", A((2, 3), I64), A((3, 2), I32)),
    ("int32-f32", A((2, 3), I32), A((3, 2))),
    ("bool-bool", A((2, 3), BOOL), A((3, 2), BOOL)),
    ("k0", A((2, 0)), A((0, 3))),
    ("m0", A((0, 3)), A((3, 2))),
]


def _matmul_case(id, a, b):
    dtype = arithmetic_dtype([_kind(a), _kind(b)])
    return Case(id, (a, b), operator.matmul, _matmul_ref, dtype=dtype,
                atol={F32: 1e-5, F64: 1e-13}.get(dtype))


add("matmul", *(_matmul_case(*row) for row in MATMULS),
    Case("method", (A((2, 3)), A((3, 2))), Tensor.matmul, _matmul_ref, dtype=F32, atol=1e-5),
    err("err-inner-dims", (A((2, 3)), A((4, 2))), operator.matmul,
        match=r"matmul.*\[2, 3\].*\[4, 2\]"),
    err("err-batch", (A((2, 2, 3)), A((3, 3, 2))), operator.matmul),
    err("err-0d", (A(()), A((2, 2))), operator.matmul))


def _filled(shape, value, dtype):
    return lambda *_: np.zeros(shape, dtype) + np.array(value, dtype)


FULLS = [  # id, shape, value, the dtype argument, the expected dtype
    ("float", (2, 3), 1.5, None, F32),
    ("int", (4,), 7, None, I32),
    ("bool", (2, 2), True, None, BOOL),
    ("f64", (3,), 0.25, "float64", F64),
    ("int64-big", (2,), 2**40, "int64", I64),
    ("int-value-float-dtype", (2,), 3, "float32", F32),
    ("numpy-scalar-is-weak", (2,), np.float64(0.5), None, F32),
    ("nan", (2,), NAN, None, F32),
    ("0size", (0, 3), 1.0, None, F32),
    ("0d", (), -2.0, None, F32),
    ("rank5", (1, 2, 1, 2, 1), 4, "int64", I64),
]

add("full",
    *(Case(id, (BACKEND,), lambda b, s=shape, v=value, d=arg: Tensor.full(s, v, b, d),
           _filled(shape, value, dtype)) for id, shape, value, arg, dtype in FULLS),
    Case("ones-int32", (BACKEND,), lambda b: Tensor.ones([3], b, "int32"),
         _filled((3,), 1, I32)),
    Case("zeros-like", (A((2, 3), I64),), Tensor.zeros_like, lambda a: np.zeros_like(a)),
    Case("full-like-f64", (A((2,), F64),), lambda t: t.full_like(2.5),
         _filled((2,), 2.5, F64)),
    Case("new-zeros", (A((2,), I32),), lambda t: t.new_zeros([4, 1]), _filled((4, 1), 0, I32)),
    err("err-negative-size", (BACKEND,), lambda b: Tensor.full([-1, 2], 1.0, b)),
    err("err-int32-overflow", (BACKEND,), lambda b: Tensor.full([2], 2**40, b), DTypeError),
    err("err-unknown-dtype", (BACKEND,), lambda b: Tensor.full([2], 1, b, "float16"),
        DTypeError))


# ---- gelu_grad: GELU's gradient, g * GELU'(x) with y = gelu(x) -------------------------------
def _gelu_grad_ref(g, x):
    erf = np.vectorize(math.erf, otypes=[float])
    return g * ((1 + erf(x / math.sqrt(2))) / 2 + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi))


def _gelu_grad_call(g, x):
    from ember.ops import OPS
    from ember.tensor import _apply
    return _apply(OPS["gelu_grad"], g, x, x.gelu())


add("gelu_grad",
    Case("f32", (A((3, 40)), A((3, 40), F32, -5, 5)), _gelu_grad_call, _gelu_grad_ref, F32,
         rtol=1e-5, atol=1e-6),
    Case("f64-bcast", (A((2, 1, 3), F64), A((4, 3), F64, -5, 5)), _gelu_grad_call,
         _gelu_grad_ref, rtol=1e-12, atol=1e-14),
    # at 0 and where y underflows y / x fails: Phi's series; and the blocked path (> 64k elements)
    Case("near-zero", (A((5,)), lit([0.0, -0.0, 1e-30, -3e-4, 2e-3], F32)), _gelu_grad_call,
         _gelu_grad_ref, F32, rtol=1e-6, atol=1e-7),
    Case("blocked", (A((70000,)), A((70000,), F32, -6, 6)), _gelu_grad_call, _gelu_grad_ref,
         F32, rtol=1e-5, atol=1e-6),
    err("err-mixed-dtypes", (A((3,)), A((3,), F64)), _gelu_grad_call, DTypeError,
        match="gelu_grad"))


# ---- adam: an optimizer's fused update, [x', m', v'] from x, g and the state [_, m, v] ----------
_ADAM = dict(beta2=0.999, bc2_sqrt=math.sqrt(1 - 0.999 ** 3), eps=1e-8,
             step=-1e-2 / (1 - 0.9 ** 3))


def _adam_ref(w, transposed=False):
    def ref(x, g, m, v):
        g = g.T if transposed else g
        v = np.abs(v)
        m1 = m + w * (g - m) if w < 0.5 else g - (g - m) * (1 - w)
        v1 = v * _ADAM["beta2"] + (1 - _ADAM["beta2"]) * g * g
        x1 = x + _ADAM["step"] * m1 / (np.sqrt(v1) / _ADAM["bc2_sqrt"] + _ADAM["eps"])
        return np.stack([x1, m1, v1])
    return ref


def _adam_call(w, transposed=False):
    def call(x, g, m, v):
        g = g.swap_dims(0, 1) if transposed else g
        return _adam_op(x, g, Tensor.stack([x * 0, m, v.abs()]), w)  # (row 0 is not read)
    return call


def _adam_op(x, g, state, w):
    from ember.ops import OPS
    from ember.tensor import _apply
    return _apply(OPS["adam"], x, g, state, w, *_ADAM.values())


add("adam",
    Case("f32", (A((4, 5)), A((4, 5)), A((4, 5)), A((4, 5))), _adam_call(0.1), _adam_ref(0.1)),
    Case("f32-lerp-upper-half", (A((7,)), A((7,)), A((7,)), A((7,))), _adam_call(0.7),
         _adam_ref(0.7)),
    Case("f64", (A((3, 2), F64), A((3, 2), F64), A((3, 2), F64), A((3, 2), F64)),
         _adam_call(0.1), _adam_ref(0.1)),
    Case("scalar-param", (A(()), A(()), A(()), A(())), _adam_call(0.1), _adam_ref(0.1)),
    Case("transposed-grad", (A((4, 6)), A((6, 4)), A((4, 6)), A((4, 6))),
         _adam_call(0.1, True), _adam_ref(0.1, True)),
    err("err-state-shape", (A((4,)), A((4,)), A((3, 4))),
        lambda x, g, s: _adam_op(x, g, s.reshape(2, 6), 0.1), match="adam"))


from . import cases_nn  # noqa: E402,F401  (adds the cases of the nn primitives, ops/nn.py)


def _check_ids():
    for op, cases in CASES.items():
        ids = [c.id for c in cases]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise AssertionError(f"{op}: duplicate case ids {dupes}")


_check_ids()
