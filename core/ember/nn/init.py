"""Initialisers, as PyTorch's `torch.nn.init` (same fans, gains and bounds).

Tensors are immutable, so an initialiser returns a new value instead of filling one in place
(PyTorch's trailing underscore is dropped; the in-place names raise an error that says so).
The first argument, `tensor` as in PyTorch, says what to build:

- a shape (list/tuple of ints): a new Tensor on `backend` (the default backend when None);
- a Tensor: a new Tensor of its shape, dtype and backend;
- a Param: a Param holding the new value with the same id and trainable flag, so
  `layer.weight = nn.init.xavier_uniform(layer.weight)` re-initialises a layer in place.

Random draws use ember's global generator: `ember.seed(n)` makes them reproducible. Inside
`with nn.init.skip():` they draw nothing and leave zeros: for a model built only to have every
parameter loaded right after (ember.models.load).
"""

import contextlib
import contextvars
import math

import numpy as np

from ..distribution import Distribution, rng
from ..errors import ShapeError
from ..shape import prod
from ..tensor import Tensor
from .module import Param

__all__ = [
    "calculate_gain", "constant", "kaiming_normal", "kaiming_uniform", "normal", "ones",
    "skip", "trunc_normal", "uniform", "xavier_normal", "xavier_uniform", "zeros",
]

_SKIPPING = contextvars.ContextVar("ember.nn.init.skip", default=False)


@contextlib.contextmanager
def skip():
    """Inside, the random initialisers (uniform, normal, trunc_normal, xavier_*, kaiming_*)
    draw nothing and return zeros, and ember's global generator does not advance. For a model
    whose parameters are all loaded from a record next (record.load is strict by default, so
    none stays zero unnoticed): the draws would be thrown away, and in the browser the first
    one loads numpy.random's extension modules, ~0.1 s of a demo page's start-up."""
    token = _SKIPPING.set(True)
    try:
        yield
    finally:
        _SKIPPING.reset(token)


def calculate_gain(nonlinearity, param=None):
    """The recommended gain for a nonlinearity (PyTorch's table)."""
    linear = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
              "conv_transpose3d", "sigmoid")
    if nonlinearity in linear:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        if isinstance(slope, bool) or not isinstance(slope, (int, float)):
            raise ValueError(f"calculate_gain: negative_slope {slope!r} is not a number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}")


def fan_in_and_fan_out(shape):
    """(fan_in, fan_out) of a weight shape: [out, in, *kernel] as PyTorch counts them (a
    ConvTranspose weight [in, out/g, *k] is read the same way, as PyTorch does)."""
    shape = tuple(shape)
    if len(shape) < 2:
        raise ShapeError(f"init: fan in and fan out need a tensor of at least 2 dims, got shape "
                         f"{list(shape)}")
    receptive = prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


def _fan(shape, mode):
    fan_in, fan_out = fan_in_and_fan_out(shape)
    if mode == "fan_in":
        return fan_in
    if mode == "fan_out":
        return fan_out
    raise ValueError(f"init: mode must be 'fan_in' or 'fan_out', got {mode!r}")


def _target(tensor, backend, dtype):
    """(shape, backend, dtype, finish) for what the initialiser was given."""
    if isinstance(tensor, Tensor):
        shape, backend, dtype = tensor.shape, tensor.backend, tensor.dtype
        if isinstance(tensor, Param):
            return shape, backend, dtype, tensor.with_value
        return shape, backend, dtype, lambda t: t
    return tuple(int(s) for s in tensor), backend, dtype, lambda t: t


def _sample(tensor, dist, backend, dtype):
    if _SKIPPING.get():
        return zeros(tensor, backend, dtype)
    shape, backend, dtype, finish = _target(tensor, backend, dtype)
    return finish(Tensor.random(shape, dist, backend=backend, dtype=dtype or "float32"))


def uniform(tensor, a=0.0, b=1.0, backend=None, dtype=None):
    """Values drawn from U(a, b)."""
    return _sample(tensor, Distribution.Uniform(a, b), backend, dtype)


def normal(tensor, mean=0.0, std=1.0, backend=None, dtype=None):
    """Values drawn from N(mean, std²)."""
    return _sample(tensor, Distribution.Normal(mean, std), backend, dtype)


def trunc_normal(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, backend=None, dtype=None):
    """N(mean, std²) redrawn until inside [a, b] (bounds in absolute units, as PyTorch)."""
    if _SKIPPING.get():
        return zeros(tensor, backend, dtype)
    shape, backend, dtype, finish = _target(tensor, backend, dtype)
    dtype = dtype or "float32"
    g = rng()
    out = g.normal(mean, std, size=shape)
    bad = (out < a) | (out > b)
    while bad.any():
        out[bad] = g.normal(mean, std, size=int(bad.sum()))
        bad = (out < a) | (out > b)
    return finish(Tensor.from_data(np.asarray(out, dtype=dtype), backend, dtype))


def constant(tensor, val, backend=None, dtype=None):
    shape, backend, dtype, finish = _target(tensor, backend, dtype)
    return finish(Tensor.full(shape, val, backend, dtype or "float32"))


def zeros(tensor, backend=None, dtype=None):
    return constant(tensor, 0, backend, dtype)


def ones(tensor, backend=None, dtype=None):
    return constant(tensor, 1, backend, dtype)


def _shape_of(tensor):
    return tensor.shape if isinstance(tensor, Tensor) else tuple(tensor)


def xavier_uniform(tensor, gain=1.0, backend=None, dtype=None):
    """U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)) (Glorot)."""
    fan_in, fan_out = fan_in_and_fan_out(_shape_of(tensor))
    a = gain * math.sqrt(6.0 / float(fan_in + fan_out))
    return uniform(tensor, -a, a, backend, dtype)


def xavier_normal(tensor, gain=1.0, backend=None, dtype=None):
    """N(0, std²) with std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = fan_in_and_fan_out(_shape_of(tensor))
    return normal(tensor, 0.0, gain * math.sqrt(2.0 / float(fan_in + fan_out)), backend, dtype)


def kaiming_uniform(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", backend=None,
                    dtype=None):
    """U(-b, b) with b = gain * sqrt(3 / fan) (He); a is the leaky_relu slope."""
    fan = _fan(_shape_of(tensor), mode)
    if fan == 0:
        return zeros(tensor, backend, dtype)  # PyTorch warns and leaves an empty tensor
    bound = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / fan)
    return uniform(tensor, -bound, bound, backend, dtype)


def kaiming_normal(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", backend=None,
                   dtype=None):
    """N(0, std²) with std = gain / sqrt(fan)."""
    fan = _fan(_shape_of(tensor), mode)
    if fan == 0:
        return zeros(tensor, backend, dtype)
    return normal(tensor, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(fan), backend, dtype)


def __getattr__(name):
    # PyTorch's in-place spellings (xavier_uniform_, ...) cannot exist for immutable tensors
    if name.endswith("_") and name[:-1] in __all__:
        raise AttributeError(
            f"ember.nn.init has no {name}: tensors are immutable, so initialisers return a new "
            f"value; write `layer.weight = nn.init.{name[:-1]}(layer.weight, ...)`")
    raise AttributeError(f"module 'ember.nn.init' has no attribute {name!r}")
