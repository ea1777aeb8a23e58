"""The inner loops the op table's NumPy implementations spend their time in, as one set of
named functions, so that faster implementations can take over where NumPy is slow.

`Kernels` is NumPy's set (or "no faster kernel here": the methods that return None). Faster
sets are subclasses that override some methods: natively, when the machine has a C compiler,
ember.backends.native's (stride-1 convolutions, GELU and mask_where in C compiled on first
use, matmul spread over its thread pool); inside Pyodide, where NumPy has no BLAS and no SIMD
(a float32 matmul runs at 1-3 GFLOP/s there), ember.backends.wasm's WebAssembly SIMD kernels
for the shapes where those win.

Each NdArray instance holds the set it runs with (`NdArray(kernels="auto" | "numpy")`) and makes
it the active one while it runs an op; the implementations call `kernels.active().matmul(a, b)`.
The active set is a context variable, so two instances with different sets work side by side
in one process, in any threads; outside an NdArray op (a Wgpu host fallback, a test calling an
implementation directly) NumPy's set is active. Ops stay named in the op table only.
"""

import contextlib
import contextvars

import numpy as np


class Kernels:
    """NumPy's inner loops; the methods returning None mean "no faster kernel here: the op's
    own NumPy implementation runs"."""

    name = "numpy"

    def __repr__(self):
        return f"Kernels({self.name})"

    def matmul(self, a, b):
        """a @ b with NumPy's broadcasting: the matmul op and the convolutions' GEMMs."""
        return np.matmul(a, b)

    def conv2d(self, x, w, b, stride, padding, dilation, groups, out_hw):
        """conv2d's result (its bias b added, unless None) in one call, or None."""
        return None

    def conv_transpose2d(self, x, w, stride, padding, dilation, groups, out_hw):
        """conv_transpose2d's result in one call, or None."""
        return None

    def conv2d_weight(self, x, g, kernel, stride, padding, dilation, groups):
        """conv2d_weight's result (conv2d's gradient in its weight), or None."""
        return None

    def copyto(self, dst, src):
        """np.copyto for a C-contiguous dst: the convolutions' im2col copies of their window
        view (a 6-D strided view of the input)."""
        return np.copyto(dst, src)

    def where(self, mask, value, x):
        """np.where with a Python scalar value (mask_where's select: ReLU)."""
        return np.where(mask, value, x)

    # The add and mul ops (a convolution's bias, BatchNorm's shift: a pass over every
    # activation), called add(a, b) or add(a, b, out): NumPy's ufuncs themselves here, not
    # methods around them (a method's call was a tenth of an 8x8 add); a faster set overrides
    # them with methods taking the same arguments.
    add = np.add
    multiply = np.multiply

    def relu(self, x, out=None):
        """max(x, 0) with NaN kept (NumPy's maximum propagates it): the relu op."""
        zero = x.dtype.type(0)
        return np.maximum(x, zero) if out is None else np.maximum(x, zero, out=out)

    def compare(self, ufunc, a, b):
        """ufunc(a, b) for a comparison ufunc (np.less_equal, ...): the comparison ops (ReLU's
        x <= 0 is one on every activation)."""
        return ufunc(a, b)

    def take(self, x, idx):
        """x[idx] for a 1-D x (max pooling's values), or None: no faster kernel, or an index
        out of range (the caller's own path runs and reports it)."""
        return None

    def max_pool2d_indices(self, x, kernel, stride, padding, dilation, out_hw):
        """max_pool2d_indices' int32 result [N, C, OH, OW], or None."""
        return None

    def max_pool2d(self, x, kernel, stride, padding, dilation, out_hw):
        """max_pool2d's result [N, C, OH, OW], or None."""
        return None

    def mask_where(self, x, mask, value, out=None):
        """mask_where's result (value where mask, else x; into out when given), or None."""
        return None

    def adam(self, x, g, m0, v0, new_x, m, v, w, small, *scalars):
        """The adam op over flat contiguous rows (ops/optim.py) in one pass: True, or None."""
        return None

    def gelu(self, x, out=None):
        """The exact GELU of x (numerics.gelu), into out when given, or None."""
        return None

    def gelu_grad(self, g, x, out=None):
        """g * GELU'(x) (numerics.gelu_grad), or None."""
        return None


NUMPY = Kernels()
# the active set: NdArray sets it around each op (ACTIVE.set / reset: cheaper than `using`)
ACTIVE = contextvars.ContextVar("ember.ops.kernels", default=NUMPY)


# active(): the set of the NdArray op running now in this context (NumPy's outside one); the
# context variable's own method, so that reading it adds no Python call to every op
active = ACTIVE.get


@contextlib.contextmanager
def using(kernels):
    """Make `kernels` the active set inside the block (NdArray does it around each op)."""
    token = ACTIVE.set(kernels)
    try:
        yield kernels
    finally:
        ACTIVE.reset(token)


__all__ = ["ACTIVE", "NUMPY", "Kernels", "active", "using"]
