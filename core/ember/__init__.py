"""ember: a deep-learning framework after Rust's Burn, native and in the browser."""

from . import dtype, ops
from .backend import default_backend, set_default_backend
from .distribution import Distribution, seed
from .errors import BackendError, DTypeError, EmberError, ShapeError
from .tensor import Tensor

__version__ = "0.1.0"

__all__ = [
    "BackendError", "DTypeError", "Distribution", "EmberError", "ShapeError", "Tensor",
    "default_backend", "dtype", "ops", "seed", "set_default_backend",
]
