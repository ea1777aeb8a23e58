"""THE op table: every primitive of ember is declared here, once, and nowhere else.

An entry holds everything about a primitive on adjacent lines: its name, its kind (which gives
the default shape and dtype rule), the NumPy implementation (the reference every backend is
tested against), the WGSL expression or kernel name, and the gradient rule written with
ember's own tensor ops (so it runs on every backend and can itself be differentiated).

Backends and decorators read this table; they never name an op. The Tensor class gets its
primitive methods from it; composites (softmax, gelu, clamp, ...) are Tensor methods.

Calling conventions
- inputs: backend primitives, or Python scalars where the kind allows them (elementwise ops);
  the Tensor layer has already cast every tensor input to the dtype the op computes in.
- attrs: static Python values (dims, shapes, slices) passed as keyword arguments.
- np(*inputs, out=None, **attrs): `out` is an input's own buffer that the backend may
  overwrite (Burn's ownership optimisation); only offered for inputs listed in `donors`.
- grad(g, out, *inputs, **attrs) -> one gradient per input (a Tensor or None), where g, out
  and inputs are Tensors. `saves` names what the rule reads: "out" and/or input positions,
  so Autodiff keeps only those alive. An expensive gradient may be returned as a
  zero-argument function: Autodiff calls it only when that input needs a gradient.
"""

from types import SimpleNamespace

from . import definitions, nn, optim  # noqa: F401  (each fills OPS)
from .table import (
    BINARY,
    COMPARE,
    ELEMENTWISE,
    FLOATS,
    INDEX,
    LINALG,
    MAP,
    MOVEMENT,
    NUMBERS,
    OPS,
    REDUCE,
    SOURCE,
    UNARY,
    UPDATE,
    WINDOW,
    Op,
    one_dtype,
    op,
)

# the primitives by name, for the Tensor layer and nn (`prims.conv2d`): OPS as attributes
prims = SimpleNamespace(**OPS)

__all__ = ["BINARY", "COMPARE", "ELEMENTWISE", "FLOATS", "INDEX", "LINALG", "MAP", "MOVEMENT",
           "NUMBERS", "OPS", "Op", "REDUCE", "SOURCE", "UNARY", "UPDATE", "WINDOW", "one_dtype",
           "op", "prims"]
