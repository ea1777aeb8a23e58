"""The inner loops the op table's NumPy implementations spend their time in, each behind one
module-level name, so that a faster implementation can take over where NumPy is slow.

Natively, when the machine has a C compiler, ember.backends.native rebinds the stride-1
convolutions, GELU and mask_where to C compiled on first use, and matmul to BLAS calls spread
over its thread pool. Inside Pyodide, where NumPy has no BLAS and no SIMD (a
float32 matmul runs at 1-3 GFLOP/s there), ember.backends.wasm rebinds them to WebAssembly SIMD
kernels for the shapes where those win, and keeps NumPy for the rest. Callers look the name
up at call time (`kernels.matmul(a, b)`), so a rebinding reaches every caller; ops stay named
in the op table only.
"""

import numpy as np

# matmul(a, b) -> a @ b with NumPy's broadcasting: the matmul op and the convolutions' GEMMs
matmul = np.matmul


def conv2d(x, w, b, stride, padding, dilation, groups, out_hw):
    """conv2d's result (its bias b added, unless None) computed by a faster kernel in one call,
    or None: no faster kernel here (the NumPy implementation in ops/nn.py runs)."""
    return None


def conv_transpose2d(x, w, stride, padding, dilation, groups, out_hw):
    """conv_transpose2d's result computed by a faster kernel in one call, or None (the NumPy
    implementation in ops/nn.py runs)."""
    return None


def conv2d_weight(x, g, kernel, stride, padding, dilation, groups):
    """conv2d_weight's result (conv2d's gradient in its weight) computed by a faster kernel, or
    None (the NumPy implementation in ops/nn.py runs)."""
    return None


# copyto(dst, src): np.copyto for a C-contiguous dst; the convolutions' im2col copies their
# window view (a 6-D strided view of the input) with it
copyto = np.copyto


# where(mask, value, x): np.where with a Python scalar value (mask_where's select: ReLU)
where = np.where


# add(a, b, out=None), multiply(a, b, out=None): the add and mul ops (a convolution's bias,
# BatchNorm's scale and shift: one pass over every activation each)
add = np.add
multiply = np.multiply


def relu(x, out=None):
    """max(x, 0) with NaN kept (NumPy's maximum propagates it): the relu op."""
    return np.maximum(x, x.dtype.type(0), out=out)


def compare(ufunc, a, b):
    """ufunc(a, b) for a comparison ufunc (np.less_equal, ...): the comparison ops' NumPy
    implementation (ReLU's x <= 0 is one on every activation)."""
    return ufunc(a, b)


def take(x, idx):
    """x[idx] for a 1-D x (a gather along a flat array: max pooling's values) computed by a
    faster kernel, or None: no faster kernel here, or an index out of range (the caller's own
    path runs and reports it)."""
    return None


def max_pool2d_indices(x, kernel, stride, padding, dilation, out_hw):
    """max_pool2d_indices' int32 result [N, C, OH, OW] computed by a faster kernel, or None:
    no faster kernel here (the NumPy implementation in ops/nn.py runs)."""
    return None


def max_pool2d(x, kernel, stride, padding, dilation, out_hw):
    """max_pool2d's result [N, C, OH, OW] computed by a faster kernel, or None (the NumPy
    implementation in ops/nn.py runs)."""
    return None


def mask_where(x, mask, value, out=None):
    """mask_where's result (value where mask, else x; into out when given) computed by a
    faster kernel, or None (the NumPy implementation in ops/definitions.py runs)."""
    return None


def gelu(x, out=None):
    """The exact GELU of x (numerics.gelu) computed by a faster kernel, into out when given (x's
    shape), or None: no faster kernel here, or not for x's dtype or layout (NumPy's runs)."""
    return None


def gelu_grad(g, x, out=None):
    """g * GELU'(x) (numerics.gelu_grad) computed by a faster kernel, or None (NumPy's runs)."""
    return None


# Each name's own binding here (NumPy's, or "no faster kernel"), taken before any backend
# rebinds one: what a backend's uninstall() restores.
NUMPY = {name: value for name, value in list(globals().items())
         if callable(value) and not name.startswith("_")}


def route_on_first_use(names, install, failed):
    """Bind each of `names` to a stand-in that runs install() (which rebinds them) on the first
    call of any, or failed(error) when it raises OSError, and then makes the call through
    whatever is bound by then. backends/wasm and backends/native load their kernels this way:
    a process that never computes never pays for loading (or compiling) them."""
    def stand_in(name):
        def first_call(*args, **kwargs):
            if globals()[name] is first_call:  # not installed (nor failed) meanwhile
                try:
                    install()
                except OSError as e:
                    failed(e)
            return globals()[name](*args, **kwargs)
        return first_call
    for name in names:
        globals()[name] = stand_in(name)
