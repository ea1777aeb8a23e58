"""ember's exceptions. Each message names the op, the offending shapes or dtypes, and the fix."""


class EmberError(Exception):
    """Base class of every error ember raises on purpose."""


class ShapeError(EmberError, ValueError):
    """Shapes that do not fit an op (broadcasting, dims, reshape sizes, indices)."""


class DTypeError(EmberError, TypeError):
    """A dtype an op cannot take, or data that has no ember dtype."""


class OutOfMemoryError(EmberError, MemoryError):
    """A result larger than the backend can hold: host memory, or a GPU's buffer size limit."""


class BackendError(EmberError, RuntimeError):
    """Mixed backends, a missing capability (e.g. backward without Autodiff), a bad backend name."""
