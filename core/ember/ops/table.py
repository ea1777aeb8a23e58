"""The op table's machinery: Op, the kinds, OPS and `op()` to declare an entry. The entries
themselves are in definitions.py, nn.py and optim.py (ember.ops imports them all); this module
imports none of them, so each can import it."""


from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import shape as S
from ..dtype import DTYPES
from ..errors import DTypeError

# What an op is. Elementwise kinds (the result's element i reads element i of each broadcast
# input) carry a WGSL expression and are what a fusing backend may chain: UNARY, BINARY and
# COMPARE get default rules by arity; MAP is elementwise with its own rules (mask_where's
# select, gelu_grad, batch_norm given its statistics). The rest run a kernel of their own.
UNARY, BINARY, COMPARE, MAP = "unary", "binary", "compare", "map"
REDUCE, INDEX, MOVEMENT, LINALG, SOURCE, WINDOW, UPDATE = (
    "reduce", "index", "movement", "linalg", "source", "window", "update")
ELEMENTWISE = (UNARY, BINARY, COMPARE, MAP)
FLOATS = ("float32", "float64")  # the dtypes an op's `dtypes` names most often
NUMBERS = ("int32", "int64", "float32", "float64")


def _same_shape(*shapes, **attrs):
    return shapes[0]


def _same_dtype(*dtypes, **attrs):
    return dtypes[0]


def _bool(*dtypes, **attrs):
    return "bool"


def _reduce_shape(shape, dims, keepdim=True, **attrs):
    if not keepdim:  # (sum's attribute: x.sum() in one op)
        return tuple(s for i, s in enumerate(shape) if i not in dims)
    return tuple(1 if i in dims else s for i, s in enumerate(shape))


@dataclass(frozen=True, eq=False)
class Op:
    name: str
    kind: str
    np: Callable
    wgsl: str | None = None
    grad: Callable | None = None
    shape: Callable | None = None
    dtype: Callable | None = None
    saves: tuple = ()
    donors: tuple = ()          # input positions whose buffer the output may reuse
    float_only: bool = False    # inputs are cast to a float dtype first (exp, div, ...)
    scalars: bool = False       # Python scalars are accepted as inputs
    dtypes: tuple | None = None  # dtypes the op takes; None: all
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        # the dtypes this op computes in as they are (no promotion needed); a plain attribute,
        # read on every elementwise call
        object.__setattr__(self, "native", frozenset(self.dtypes or DTYPES))

    def __repr__(self):
        return f"Op({self.name})"

    def out_shape(self, *shapes, **attrs):
        return self.shape(*shapes, **attrs)

    def out_dtype(self, *dtypes, **attrs):
        if self.dtypes is not None:
            for d in dtypes:
                if d is not None and d not in self.native:
                    raise DTypeError(f"{self.name}: dtype {d} is not supported; "
                                     f"it takes {', '.join(self.dtypes)}")
        return self.dtype(*dtypes, **attrs)


OPS: dict[str, Op] = {}


def op(name, kind, np, wgsl=None, grad=None, **rules: Any):
    """Declare a primitive. Kinds give default rules; `rules` override them."""
    defaults = {
        UNARY: dict(shape=_same_shape, dtype=_same_dtype, donors=(0,)),
        BINARY: dict(shape=lambda *s, **a: S.broadcast(name, *s), dtype=_same_dtype,
                     donors=(0, 1), scalars=True),
        COMPARE: dict(shape=lambda *s, **a: S.broadcast(name, *s), dtype=_bool, scalars=True),
        REDUCE: dict(shape=_reduce_shape, dtype=_same_dtype),
    }.get(kind, {})
    entry = Op(name, kind, np, wgsl, grad, **{**defaults, **rules})
    if name in OPS:
        raise ValueError(f"op {name!r} declared twice")
    OPS[name] = entry
    return entry


def one_dtype(name):
    """A dtype rule: every tensor input in one dtype (the op's `dtypes` limits which)."""
    def rule(a, *others, **attrs):
        if any(b != a for b in others):
            raise DTypeError(f"{name}: the inputs must have one dtype, got "
                             f"{', '.join((a, *others))}; cast with .cast()")
        return a
    return rule


def _run(name, *inputs, **attrs):
    """Run the primitive `name` on Tensors: gradient rules written with other primitives."""
    from ..tensor import _apply  # tensor.py imports the op table: import when first used
    return _apply(OPS[name], *inputs, **attrs)

