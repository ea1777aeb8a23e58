"""The Backend protocol, the default backend, and the names users import backends by.

A backend is a value. It executes primitives of the op table on its own primitive objects
("prims": a NumPy array for NdArray, a GPU buffer handle for Wgpu, a tape node for Autodiff)
and moves data in and out as NumPy arrays. Decorators (Autodiff, Fusion) are backends that
wrap an `inner` backend and speak the same protocol, so they compose in any order.

The protocol is small on purpose:
    execute(op, inputs, attrs, shape, dtype) -> prim
                                           run one primitive (op: an entry of ember.ops.OPS);
                                           shape/dtype: the result's, from the op's rules
    from_numpy(array) -> prim              array already holds an ember dtype
    to_numpy(prim) -> np.ndarray           the only blocking read
    await to_numpy_async(prim)             the browser's way to read
    sync()                                 wait for queued work (no-op for eager CPU)
    compile(steps, table, inputs, outputs) a faster runner for a captured plan (ember.jit), or
                                           None (optional; see ember.capture)
Shapes and dtypes never come from a backend: the op table's rules give them, so a lazy backend
need not run anything to answer `x.shape`.
"""

import os
import sys

from ..errors import BackendError


def _count(inputs, i):
    return sys.getrefcount(inputs[i])


_FREE = _count([object()], 0)  # measured, not assumed: CPython versions count differently


def sole_owner(inputs, i):
    """True when the `inputs` list alone refers to `inputs[i]`, so an op may overwrite it.
    Any other reference (a tensor, a view's base, a saved activation, a caller's local) fails."""
    return _count(inputs, i) <= _FREE


class Backend:
    """Base class: subclasses implement execute, from_numpy and to_numpy."""

    inner = None  # the wrapped backend, for decorators

    def execute(self, op, inputs, attrs, shape, dtype):
        raise NotImplementedError

    def from_numpy(self, array):
        raise NotImplementedError

    def to_numpy(self, prim):
        raise NotImplementedError

    async def to_numpy_async(self, prim):
        return self.to_numpy(prim)

    def sync(self):
        pass

    def compile(self, steps, table, inputs, outputs):
        """A runner for a plan ember.jit captured on this backend alone, or None (replay op by
        op). steps: (op, input slots, attrs, shape, dtype, output slot); table: the slots'
        constants (None elsewhere); inputs: this run's argument prims (slots 0..); outputs: the
        result slots. runner(argument prims) -> {output slot: prim}, or None for this call."""
        return None

    # decorators only: move a prim of the inner backend in and out without copying
    def wrap(self, inner_prim, shape, dtype):
        raise NotImplementedError

    def unwrap(self, prim):
        raise NotImplementedError

    def key(self):
        """What makes two instances the same backend (equal keys share tensors freely)."""
        return (type(self).__name__, self.inner.key() if self.inner is not None else None)

    def __eq__(self, other):
        return isinstance(other, Backend) and self.key() == other.key()

    def __hash__(self):
        return hash(self.key())

    def __repr__(self):
        return str(self)


_REGISTRY = {}
_default = None


def register(name, factory):
    """Make a backend constructible by name, for EMBER_BACKEND (e.g. "ndarray")."""
    _REGISTRY[name.lower()] = factory


def from_name(spec):
    """Build a backend from a name such as "ndarray" or "autodiff(ndarray)"."""
    spec = spec.strip().lower().replace(" ", "")
    if "(" in spec:
        if not spec.endswith(")"):
            raise BackendError(f"backend name {spec!r}: unbalanced parentheses")
        outer, rest = spec.split("(", 1)
        return _lookup(outer, spec)(from_name(rest[:-1]))
    return _lookup(spec, spec)()


def _lookup(name, spec):
    if name not in _REGISTRY:
        known = ", ".join(sorted(_REGISTRY))
        raise BackendError(f"unknown backend {name!r} in {spec!r}; known backends: {known} "
                           "(decorators wrap others, e.g. autodiff(ndarray))")
    return _REGISTRY[name]


def set_default_backend(backend):
    """The backend used by creation functions that get no backend=."""
    global _default
    if not isinstance(backend, Backend):
        raise BackendError(f"set_default_backend: expected a backend such as NdArray(), "
                           f"got {backend!r}")
    _default = backend


def default_backend():
    """The default backend: set_default_backend's, else $EMBER_BACKEND's, else NdArray()."""
    global _default
    if _default is None:
        _default = from_name(os.environ.get("EMBER_BACKEND", "") or "ndarray")
    return _default


# the implementations register themselves; they import this module, so they come last
from ..autodiff import Autodiff  # noqa: E402
from ..backends.ndarray import NdArray  # noqa: E402


def __getattr__(name):  # Wgpu and Torch load on first use: ember never needs wgpu-py or torch
    if name == "Torch":  # (torch itself is imported when a Torch() is made)
        from ..backends.torch import Torch
        return Torch
    if name == "Wgpu":
        try:
            from ..backends.wgpu import Wgpu
        except AttributeError as e:  # not "cannot import name": say what went wrong
            raise ImportError(f"ember.backends.wgpu: {e}") from e
        return Wgpu
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


register("wgpu", lambda *args, **kw: __getattr__("Wgpu")(*args, **kw))
register("torch", lambda *args, **kw: __getattr__("Torch")(*args, **kw))

__all__ = ["Autodiff", "Backend", "NdArray", "default_backend", "register",
           "set_default_backend"]
