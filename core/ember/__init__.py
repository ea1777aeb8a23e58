"""ember: a deep-learning framework after Rust's Burn, native and in the browser."""

from . import autodiff, dtype, fusion, ops
from .autodiff import Gradients, no_grad
from .backend import default_backend, set_default_backend
from .capture import JitError, jit
from .distribution import Distribution, seed
from .errors import BackendError, DTypeError, EmberError, OutOfMemoryError, ShapeError
from .tensor import Tensor

__version__ = "0.1.0"

__all__ = [
    "BackendError", "DTypeError", "Distribution", "EmberError", "Gradients", "JitError",
    "OutOfMemoryError", "ShapeError", "Tensor", "autodiff", "autotune", "default_backend", "dtype",
    "fusion", "jit", "no_grad", "ops", "seed", "set_default_backend",
]


def __getattr__(name):
    # `import ember; ember.nn` works without importing every subpackage at start-up (autotune:
    # json, tempfile, pathlib, threading: ~50 ms of a page's start in Pyodide)
    if name in ("nn", "optim", "record", "train", "data", "onnx", "models", "autotune"):
        import importlib

        return importlib.import_module(f"ember.{name}")
    raise AttributeError(f"module 'ember' has no attribute {name!r}")
