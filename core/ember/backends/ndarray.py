"""NdArray: the reference backend. A prim is a NumPy array; executing an op is calling its
NumPy implementation from the op table. Runs wherever NumPy runs: CPython and Pyodide.

Ownership (Burn's optimisation, in Python): an elementwise result may be written into an
input's own buffer when nothing else can see that buffer. The Tensor layer hands over the
array of a tensor that only a temporary expression referenced (see tensor._donatable); here
the array must then be referenced by our inputs list alone, own its memory (not a view, and
no view of it alive: a view holds a reference to its base), be writeable, and already have
the result's shape and dtype.
"""

import sys

import numpy as np

from .. import backend as _backend


def _refs(array):
    return sys.getrefcount(array)


def _probe(inputs):
    # Mirrors execute's references to a donor: the inputs list, the local `x`, the call.
    # Measured rather than assumed: CPython versions count stack references differently.
    x = inputs[0]  # noqa: F841
    return _refs(inputs[0])


_FREE = _probe([np.empty(1)])


def _fits(x, arrays):
    """Can `x` hold the broadcast result of `arrays` (all of x's dtype)?"""
    for y in arrays:
        if y is x or not isinstance(y, np.ndarray) or y.shape == x.shape:
            continue
        if y.ndim > x.ndim or any(s not in (1, t) for s, t in zip(y.shape[::-1], x.shape[::-1])):
            return False
    return True


class NdArray(_backend.Backend):
    """The NumPy backend. `NdArray(inplace=False)` turns the ownership optimisation off."""

    def __init__(self, inplace=True):
        self.inplace = inplace

    def __str__(self):
        return "NdArray<cpu>"

    def execute(self, op, inputs, attrs):
        if self.inplace and op.donors:
            for i in op.donors:
                if i >= len(inputs):
                    break
                x = inputs[i]
                if (type(x) is np.ndarray and x.base is None and x.flags.writeable
                        and _refs(inputs[i]) <= _FREE and _fits(x, inputs)):
                    return op.np(*inputs, out=x, **attrs)
        return op.np(*inputs, **attrs)

    def from_numpy(self, array):
        return array  # the Tensor layer passes an array nobody else holds

    def to_numpy(self, prim):
        # a read-only view: writing into it would change an immutable tensor (and any
        # activation Autodiff saved); .copy() it to get a writeable array
        view = prim.view()
        view.flags.writeable = False
        return view

    def full(self, shape, value, dtype):
        return np.full(shape, value, dtype=dtype)


_backend.register("ndarray", NdArray)
