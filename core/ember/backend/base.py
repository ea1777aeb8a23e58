"""The Backend protocol, the registry of backends by name and the default backend.

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
                                           None (optional; see ember.capture); steps are
                                           OpRecords, the one record of an applied op
Shapes and dtypes never come from a backend: the op table's rules give them, so a lazy backend
need not run anything to answer `x.shape`.
"""

import functools
import importlib
import os
import sys
from typing import Any, NamedTuple

from ..errors import BackendError


def _count(inputs, i):
    return sys.getrefcount(inputs[i])


_FREE = _count([object()], 0)  # measured, not assumed: CPython versions count differently


def sole_owner(inputs, i):
    """True when the `inputs` list alone refers to `inputs[i]`, so an op may overwrite it.
    Any other reference (a tensor, a view's base, a saved activation, a caller's local) fails."""
    return _count(inputs, i) <= _FREE


def others(objs, i):
    """How many references to `objs[i]` there are besides the list's own."""
    return _count(objs, i) - _FREE


def run_steps(execute, steps, table, inputs, outputs):
    """A plan's steps (OpRecords on slots) run once through execute(op, prims, attrs, shape,
    dtype) as a replay runs them: each slot freed at its last use, so a pool shares buffers by
    lifetime and elementwise ops reuse their inputs'. -> {output slot: prim}"""
    pinned = set(range(len(inputs))) | set(outputs)
    last = {}
    for i, step in enumerate(steps):
        for s in step.inputs:
            last[s] = i
    values = list(table)
    values[:len(inputs)] = inputs
    for i, (op, ins, attrs, shape, dtype, out) in enumerate(steps):
        prims = [values[s] for s in ins]
        for s in set(ins):
            if last[s] == i and s not in pinned and table[s] is None:
                values[s] = None
        values[out] = execute(op, prims, attrs, shape, dtype)
        del prims
    return {s: values[s] for s in outputs}


class OpRecord(NamedTuple):
    """One op applied to inputs, as data: what ember.jit captures and hands to
    Backend.compile, and what a lazy backend queues. inputs: prims, or slots of a plan's table;
    shape and dtype: the result's (from the op's rules); out: the result's slot in a plan."""

    op: Any
    inputs: tuple
    attrs: dict
    shape: tuple
    dtype: str
    out: Any = None


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

    def compile(self, steps, table, inputs, outputs, run=None):
        """A runner for a plan ember.jit captured on this backend alone, or None (replay op by
        op). steps: OpRecords whose inputs and out are slots; table: the slots' constants (None
        elsewhere); inputs: this run's argument prims (slots 0..); outputs: the result slots.
        runner(argument prims) -> {output slot: prim}, or None for this call.
        run: a decorator's way of running the steps, run(steps, table, inputs, outputs) ->
        {output slot: prim} (Fusion's, with its fused kernels), for a backend that records
        the kernels a run launches (Wgpu); one that cannot returns None when given it."""
        return None

    # decorators only: move a prim of the inner backend in and out without copying
    def wrap(self, inner_prim, shape, dtype):
        raise NotImplementedError

    def unwrap(self, prim):
        raise NotImplementedError

    def key(self):
        """What makes two instances the same backend (equal keys share tensors freely)."""
        return (type(self).__name__, self.inner.key() if self.inner is not None else None)

    @functools.cached_property
    def _identity(self):
        # key() once an instance: what a backend is never changes after it is made, and two
        # distinct but equal instances (NdArray() made twice) are compared on every op that
        # mixes their tensors, where building both keys was a fifth of an 8x8 add (the Tensor
        # layer's fast paths compare _identity themselves: __eq__'s call was another 5%)
        return self.key()

    def __eq__(self, other):
        return self is other or (isinstance(other, Backend) and self._identity == other._identity)

    def __hash__(self):
        return hash(self._identity)

    def __repr__(self):
        return str(self)


# name -> a factory, or "module:attribute" of one, imported when first asked for: the
# implementations import this module, never the other way round
_REGISTRY = {"ndarray": "ember.backends.ndarray:NdArray", "autodiff": "ember.autodiff:Autodiff",
             "fusion": "ember.fusion:Fusion", "wgpu": "ember.backends.wgpu:Wgpu",
             "torch": "ember.backends.torch:Torch"}
_default = None


def register(name, factory):
    """Make a backend constructible by name, for EMBER_BACKEND (e.g. "ndarray")."""
    _REGISTRY[name.lower()] = factory


def resolve(name):
    """The factory registered as `name`, imported on first use."""
    factory = _REGISTRY[name]
    if isinstance(factory, str):
        module, attribute = factory.split(":")
        try:
            factory = getattr(importlib.import_module(module), attribute)
        except AttributeError as e:  # not "cannot import name": say what went wrong
            raise ImportError(f"{module}: {e}") from e
        _REGISTRY[name] = factory
    return factory


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
    return resolve(name)


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
