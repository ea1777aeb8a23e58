"""The primitives. One entry each; see ops/__init__.py for the calling conventions.

Gradient rules return one value per input in the *output's* shape; Autodiff sums a gradient
down to its input's shape where the op broadcast it, so the rules stay one line each.
"""

import math

import numpy as np

from .. import shape as S
from ..dtype import DEFAULT_INT
from ..errors import DTypeError, ShapeError
from . import kernels
from .numerics import INV_SQRT_2PI as _INV_SQRT_2PI
from .numerics import erf as _np_erf
from .numerics import gelu as _np_gelu
from .numerics import gelu_grad as _np_gelu_grad
from .table import (
    BINARY,
    COMPARE,
    FLOATS,
    INDEX,
    LINALG,
    MAP,
    MOVEMENT,
    NUMBERS,
    REDUCE,
    SOURCE,
    UNARY,
    _reduce_shape,
    _run,
    one_dtype,
    op,
)


# ---- unary -------------------------------------------------------------------------------
def unary(name, np_fn, wgsl, grad, saves, float_only=True, **kw):
    dtypes = FLOATS if float_only else NUMBERS
    return op(name, UNARY, np_fn, wgsl, grad, saves=saves, float_only=float_only,
              dtypes=dtypes, **kw)


unary("exp", np.exp, "exp({0})", lambda g, y, x: (g * y,), ("out",))
unary("log", np.log, "log({0})", lambda g, y, x: (g / x,), (0,))
unary("sqrt", np.sqrt, "sqrt({0})", lambda g, y, x: (g / (y * 2),), ("out",))
unary("erf", _np_erf, "op_erf({0})",
            lambda g, y, x: (g * (x * x * -1).exp() * (2 / math.sqrt(math.pi)),), (0,))


# GELU is a primitive although erf is one: as a composite it cost 5 ops forward (5 kernels on
# Wgpu, 5 passes over every activation) and ran erf again backward; as one op the forward is one
# kernel (NumPy: blocks that stay in cache). Its gradient is gelu_grad, one op too (below).
unary("gelu", _np_gelu, "op_gelu({0})",
      lambda g, y, x: (_run("gelu_grad", g, x, y),), (0, "out"))
unary("tanh", np.tanh, "tanh({0})", lambda g, y, x: (g * (1 - y * y),), ("out",))
unary("sin", np.sin, "sin({0})", lambda g, y, x: (g * x.cos(),), (0,))
unary("cos", np.cos, "cos({0})", lambda g, y, x: (-(g * x.sin()),), (0,))
unary("neg", np.negative, "(-{0})", lambda g, y, x: (-g,), (), float_only=False)
unary("abs", np.abs, "abs({0})", lambda g, y, x: (g * x.sign(),), (0,), float_only=False)
# ReLU is a primitive although it is maximum(x, 0): maximum's gradient at a tie is shared (1/2
# at x = 0, PyTorch's ReLU has 0 there), and as x.mask_where(x <= 0, 0) it cost two ops and two
# passes over every activation (a compare and a select: 3 of an MNIST ConvNet's 35 ops at
# batch 1). NaN stays NaN, and its gradient passes where y > 0 or y is NaN, as PyTorch's.
unary("relu", lambda x, out=None: kernels.active().relu(x, out=out), "max({0}, {dtype}(0))",
      lambda g, y, x: (g.mask_where(y <= 0, 0),), ("out",), float_only=False)


# ---- binary (Python scalars allowed on either side) ---------------------------------------
def binary(name, np_fn, wgsl, grad, saves, float_only=False, **kw):
    dtypes = FLOATS if float_only else NUMBERS
    return op(name, BINARY, np_fn, wgsl, grad, saves=saves, float_only=float_only,
              dtypes=dtypes, **kw)


def _max_grad(g, y, a, b):
    # ties share the gradient, as PyTorch does for maximum/minimum
    wa = (a == y).cast(g.dtype)
    if isinstance(b, (int, float)):
        return (g * wa, None)
    wb = (b == y).cast(g.dtype)
    share = wa + wb
    return (g * wa / share, g * wb / share)


def _pow_grad(g, y, a, b):
    # either side may be a Python scalar, which gets no gradient
    ga = None if isinstance(a, (int, float)) else g * b * a ** (b - 1)
    if isinstance(b, (int, float)):
        return (ga, None)
    return (ga, g * y * (math.log(a) if isinstance(a, (int, float)) else a.log()))


# add and mul through ops.kernels: inside Pyodide a WebAssembly kernel takes float32 operands of
# one shape or with a per-channel one (a bias). The gradients that cost a pass are lazy: one
# operand is often a constant or a Python scalar (x * mask in dropout, x * 0.5, x / n), whose
# gradient Autodiff would compute over the whole tensor and throw away
binary("add", lambda a, b, out=None: kernels.active().add(a, b) if out is None
       else kernels.active().add(a, b, out), "({0} + {1})",
       lambda g, y, a, b: (g, g), ())
binary("sub", np.subtract, "({0} - {1})", lambda g, y, a, b: (g, lambda: -g), ())
binary("mul", lambda a, b, out=None: kernels.active().multiply(a, b) if out is None
       else kernels.active().multiply(a, b, out),
       "({0} * {1})",
       lambda g, y, a, b: (lambda: g * b, lambda: g * a), (0, 1))
binary("div", np.divide, "({0} / {1})",
       lambda g, y, a, b: (lambda: g / b, lambda: -(g * y / b)), (1, "out"), float_only=True)
binary("pow", np.power, "op_pow({0}, {1})", _pow_grad, (0, 1, "out"),
       float_only=True)
binary("maximum", np.maximum, "max({0}, {1})", _max_grad, (0, 1, "out"))
binary("minimum", np.minimum, "min({0}, {1})", _max_grad, (0, 1, "out"))


# ---- comparisons: bool results, no gradient ------------------------------------------------
def compare(name, np_fn, wgsl):
    # through ops.kernels: inside Pyodide a WebAssembly kernel compares float32 with a scalar
    return op(name, COMPARE, lambda a, b: kernels.active().compare(np_fn, a, b), wgsl)


compare("eq", np.equal, "({0} == {1})")
compare("ne", np.not_equal, "({0} != {1})")
compare("lt", np.less, "({0} < {1})")
compare("le", np.less_equal, "({0} <= {1})")
compare("gt", np.greater, "({0} > {1})")
compare("ge", np.greater_equal, "({0} >= {1})")


# ---- dtype --------------------------------------------------------------------------------
def _cast_np(x, dtype):
    if x.dtype.kind != "f" or np.dtype(dtype).kind != "i":
        return x.astype(dtype)
    # saturating, as WGSL defines it (clamped in the float's own precision), NaN -> 0: C and
    # NumPy leave it undefined (x86 gives the int's minimum for inf, NaN and every overflow)
    info = np.iinfo(dtype)
    hi = np.nextafter(x.dtype.type(-info.min), x.dtype.type(0))  # largest float below 2^(n-1)
    return np.where(np.isnan(x), 0, np.clip(x, x.dtype.type(info.min), hi)).astype(dtype)


op("cast", UNARY, _cast_np, "{dtype}({0})",
          lambda g, y, x, dtype: (g.cast(x.dtype) if x.dtype in FLOATS else None,),
          dtype=lambda d, dtype: dtype, donors=())


# ---- reductions over `dims`, keeping them (the Tensor layer drops them; sum can itself) ----
def _nonempty(name):
    def rule(shape, dims):
        for d in dims:
            if shape[d] == 0:
                raise ShapeError(f"{name}: cannot reduce dim {d} of size 0 (shape "
                                 f"{S.fmt(shape)}): {name} of nothing is undefined")
        return tuple(1 if i in dims else s for i, s in enumerate(shape))
    return rule


def _extreme_grad(g, y, x, dims):
    hit = (x == y).cast(g.dtype)
    return (g * hit / hit.sum_dim(dims),)


_INT32 = np.dtype(np.int32)  # (a dtype against a dtype: no conversion per call)


def _sum_np(x, dims, keepdim=True):
    if x.dtype == _INT32:
        # exact or an error, never wrapped: added in int64, then checked against int32's range
        # (Wgpu, which has no 64-bit ints, wraps as WGSL's i32 does)
        wide = np.add.reduce(x, axis=dims, keepdims=keepdim, dtype=np.int64)
        if wide.size and (wide.min() < -2**31 or wide.max() >= 2**31):
            raise DTypeError(f"sum: the int32 sum over dims {list(dims)} of shape "
                             f"{S.fmt(x.shape)} reaches {int(np.abs(wide).max())}, outside "
                             "int32's range; .cast('int64') (or 'float32') before summing")
        return wide.astype(np.int32)
    if 0 in dims and len(dims) > 1 and x.size >= 1 << 16:
        # the leading dim first, as whole planes added one after another, then the rest of
        # one plane: NumPy given (0, 2, 3) of [N, C, H, W] at once (batch norm, bias
        # gradients) runs ~2x slower
        rest = tuple(d - 1 for d in dims if d != 0)
        first = np.add.reduce(x, axis=0, dtype=x.dtype)
        out = np.add.reduce(first, axis=rest, keepdims=keepdim, dtype=x.dtype)
        return out[None] if keepdim else out
    # (int64, float32, float64: NumPy's add.reduce keeps them; no dtype= to parse per call)
    return np.add.reduce(x, axis=dims, keepdims=keepdim)


def _sum_grad(g, y, x, dims, keepdim=True):
    if not keepdim and g.ndim:  # g lacks the reduced dims: put them back (size 1) to broadcast
        g = g.reshape(_reduce_shape(x.shape, dims))  # (a 0-d g, x.sum()'s, broadcasts as it is)
    return (g.expand(x.shape),)


# sum alone takes `keepdim` (default True, as every reduction): x.sum() is then one op, not a
# sum and a reshape (a tiny sum's time is mostly the calls per op)
op("sum", REDUCE, _sum_np, None, _sum_grad, dtypes=NUMBERS)
op("max", REDUCE, lambda x, dims: np.maximum.reduce(x, axis=dims, keepdims=True), None,
         _extreme_grad, saves=(0, "out"), shape=_nonempty("max"))
op("min", REDUCE, lambda x, dims: np.minimum.reduce(x, axis=dims, keepdims=True), None,
         _extreme_grad, saves=(0, "out"), shape=_nonempty("min"))
op("argmax", REDUCE,
            lambda x, dims: np.argmax(x, axis=dims[0], keepdims=True).astype(DEFAULT_INT),
            None, shape=_nonempty("argmax"), dtype=lambda d, dims: DEFAULT_INT)
op("argmin", REDUCE,
            lambda x, dims: np.argmin(x, axis=dims[0], keepdims=True).astype(DEFAULT_INT),
            None, shape=_nonempty("argmin"), dtype=lambda d, dims: DEFAULT_INT)


# ---- movement: views where the backend can, copies otherwise ------------------------------
def _same(*dtypes, **attrs):
    return dtypes[0]


def _reshape_rule(shape, shape_to):
    if S.prod(shape) != S.prod(shape_to):
        raise ShapeError(f"reshape: cannot reshape {S.fmt(shape)} into {S.fmt(shape_to)}")
    return shape_to


def _expand_rule(shape, shape_to):
    if len(shape_to) < len(shape) or S.broadcast("expand", shape, shape_to) != shape_to:
        raise ShapeError(f"expand: cannot expand {S.fmt(shape)} to {S.fmt(shape_to)}; each dim "
                         "must be equal or 1, aligned on the right")
    return shape_to


def _inverse(dims):
    inv = [0] * len(dims)
    for i, d in enumerate(dims):
        inv[d] = i
    return tuple(inv)


def _np_slices(starts, stops, steps):
    """NumPy slices for range-normalised (start, stop, step) triples. Python's normalised
    bounds can be -1 with a negative step ("before index 0"), which NumPy would read as
    "the last element", so each slice is rebuilt from its first and last index."""
    out = []
    for a, b, c in zip(starts, stops, steps):
        n = len(range(a, b, c))
        if n == 0:
            out.append(slice(0, 0))
            continue
        last = a + (n - 1) * c
        end = last + (1 if c > 0 else -1)
        out.append(slice(a, None if end < 0 else end, c))
    return tuple(out)


def _slice_rule(shape, starts, stops, steps):
    return S.slice_shape(starts, stops, steps)


def _slice_grad(g, y, x, starts, stops, steps):
    return (g.new_zeros(x.shape).slice_assign(_np_slices(starts, stops, steps), g),)


# the array methods, not np.reshape / np.transpose: those wrap the same call in Python (~2-3 us
# a call inside Pyodide, where a batch-1 forward runs a dozen reshapes)
op("reshape", MOVEMENT, lambda x, shape_to: x.reshape(shape_to), None,
             lambda g, y, x, shape_to: (g.reshape(x.shape),), shape=_reshape_rule, dtype=_same)
op("permute", MOVEMENT, lambda x, dims: x.transpose(dims), None,
             lambda g, y, x, dims: (g.permute(_inverse(dims)),),
             shape=lambda s, dims: tuple(s[d] for d in dims), dtype=_same)
op("expand", MOVEMENT, lambda x, shape_to: np.broadcast_to(x, shape_to), None,
            lambda g, y, x, shape_to: (g,), shape=_expand_rule, dtype=_same)
op("slice", MOVEMENT, lambda x, starts, stops, steps: x[_np_slices(starts, stops, steps)],
           None, _slice_grad, shape=_slice_rule, dtype=_same)


def _cat_rule(*shapes, dim):
    first = shapes[0]
    for s in shapes[1:]:
        if len(s) != len(first) or any(a != b for i, (a, b) in enumerate(zip(s, first))
                                       if i != dim):
            listed = " and ".join(S.fmt(x) for x in shapes)
            raise ShapeError(f"cat: shapes {listed} differ outside dim {dim}; all but the cat "
                             "dim must match")
    return first[:dim] + (sum(s[dim] for s in shapes),) + first[dim + 1:]


def _cat_grad(g, y, *xs, dim):
    grads, at = [], 0
    for x in xs:
        n = x.shape[dim]
        grads.append(g[(slice(None),) * dim + (slice(at, at + n),)])
        at += n
    return tuple(grads)


op("cat", MOVEMENT, lambda *xs, dim: np.concatenate(xs, axis=dim), None, _cat_grad,
         shape=_cat_rule, dtype=_same)


# ---- indexing and masks -------------------------------------------------------------------
_UNSIGNED = {np.dtype(np.int32): np.uint32, np.dtype(np.int64): np.uint64}


def _check_index(name, idx, size, dim):
    unsigned = _UNSIGNED.get(idx.dtype)
    if not idx.size or (unsigned is not None and idx.view(unsigned).max() < size):
        return  # (one pass, not a min and a max: a negative index read as unsigned is huge)
    low, high = idx.min(), idx.max()
    if low < 0 or high >= size:
        bad = low if low < 0 else high
        raise ShapeError(f"{name}: index {bad} is out of range for dim {dim} of size {size}; "
                         f"indices must lie in [0, {size})")


def _slice_assign_np(x, v, starts, stops, steps, out=None):
    out = x.copy() if out is None else out
    out[_np_slices(starts, stops, steps)] = v
    return out


def _slice_assign_rule(shape, vshape, starts, stops, steps):
    region = S.slice_shape(starts, stops, steps)
    if S.broadcast("slice_assign", vshape, region) != region:
        raise ShapeError(f"slice_assign: value of shape {S.fmt(vshape)} does not fit the region "
                         f"{S.fmt(region)} of a tensor of shape {S.fmt(shape)}")
    return shape


op(
    "slice_assign", INDEX, _slice_assign_np, None,
    lambda g, y, x, v, starts, stops, steps: (
        g.slice_assign(_np_slices(starts, stops, steps), 0), g[_np_slices(starts, stops, steps)]),
    shape=_slice_assign_rule, dtype=_same, donors=(0,), scalars=True)


def _gather_rule(shape, ishape, dim):
    if len(ishape) != len(shape) or any(a != b for i, (a, b) in enumerate(zip(shape, ishape))
                                        if i != dim):
        raise ShapeError(f"gather/scatter: indices of shape {S.fmt(ishape)} must match the "
                         f"tensor's shape {S.fmt(shape)} in every dim but dim {dim}")
    return ishape


def _gather_np(x, idx, dim):
    if x.ndim == 1:  # inside Pyodide a WebAssembly kernel, bounds checked in the same pass
        fast = kernels.active().take(x, idx)
        if fast is not None:
            return fast
    _check_index("gather", idx, x.shape[dim], dim)
    return np.take_along_axis(x, idx, axis=dim)


def _scatter_np(x, idx, v, dim, out=None):
    _check_index("scatter", idx, x.shape[dim], dim)
    out = x.copy() if out is None else out
    where = list(np.indices(idx.shape, sparse=True))
    where[dim] = idx
    np.add.at(out, tuple(where), v)
    return out


def _scatter_rule(shape, ishape, vshape, dim):
    _gather_rule(shape, ishape, dim)
    if vshape != ishape:
        raise ShapeError(f"scatter: values of shape {S.fmt(vshape)} must have the indices' shape "
                         f"{S.fmt(ishape)}")
    return shape


_INDEX_DTYPES = ("int32", "int64")


def _index_dtype(name, i):
    if i not in _INDEX_DTYPES:
        raise DTypeError(f"{name}: indices must be int32 or int64, got {i}; "
                         "cast them with .cast('int32')")


def _gather_dtype(d, i, dim):
    _index_dtype("gather", i)
    return d


def _scatter_dtype(d, i, v, dim):
    _index_dtype("scatter", i)
    return d


def _select_rule(shape, ishape, dim):
    if len(ishape) != 1:
        raise ShapeError(f"select: indices must be 1-D, got shape {S.fmt(ishape)}")
    return shape[:dim] + ishape + shape[dim + 1:]


def _select_np(x, idx, dim):
    _check_index("select", idx, x.shape[dim], dim)
    # NumPy's index type is 32-bit in Pyodide (wasm32): int64 indices must be converted
    return np.take(x, idx.astype(np.intp, copy=False), axis=dim)


def _select_dtype(d, i, dim):
    _index_dtype("select", i)
    return d


def _select_grad(g, y, x, idx, dim):
    shape = [1] * g.ndim
    shape[dim] = idx.shape[0]
    full = idx.reshape(shape).expand(g.shape)
    return (g.new_zeros(x.shape).scatter(dim, full, g), None)


op("gather", INDEX, _gather_np, None,
            lambda g, y, x, idx, dim: (g.new_zeros(x.shape).scatter(dim, idx, g), None),
            saves=(1,), shape=_gather_rule, dtype=_gather_dtype)
op("scatter", INDEX, _scatter_np, None,
             lambda g, y, x, idx, v, dim: (g, None, g.gather(dim, idx)),
             saves=(1,), shape=_scatter_rule, dtype=_scatter_dtype, donors=(0,))
op("select", INDEX, _select_np, None, _select_grad, saves=(1,),
            shape=_select_rule, dtype=_select_dtype)


def _mask_where_grad(g, y, x, mask, value):
    gv = None if isinstance(value, (int, float)) else g * mask.cast(g.dtype)
    return (g.mask_fill(mask, 0), None, gv)


def _mask_where_np(x, mask, value, out=None):
    fast = kernels.active().mask_where(x, mask, value, out)
    if fast is not None:  # natively, one pass of C (ops/kernels.py)
        return fast
    if out is None:
        return kernels.active().where(mask, value, x).astype(x.dtype, copy=False)
    np.copyto(out, value, where=mask)
    return out


def _mask_where_dtype(d, m, v):
    if m != "bool":
        raise DTypeError(f"mask_where: the mask must be bool, got {m}; build it with a "
                         "comparison such as x > 0")
    return d


op(
    "mask_where", MAP, _mask_where_np, "select({0}, {2}, {1})",
    _mask_where_grad,
    saves=(1,), shape=lambda *s: S.broadcast("mask_where", *s), dtype=_mask_where_dtype,
    donors=(0,), scalars=True)


# gelu_grad(g, x, y) = g * GELU'(x) where y = gelu(x): GELU's gradient as one op (it was 11
# ops over every activation, the most of an MNIST training step's GELU cost), reading Phi(x)
# from y / x. Its own gradient (double backward): in g it is itself; in x, g * GELU''(x) with
# GELU'' = phi (2 - x^2); y only stands for gelu(x), so it has none of its own.
def _gelu_grad_grad(h, out, g, x, y):
    phi = (x * x * -0.5).exp() * _INV_SQRT_2PI
    return (lambda: _run("gelu_grad", h, x, y), lambda: h * g * phi * (2 - x * x), None)


op("gelu_grad", MAP, lambda g, x, y: _np_gelu_grad(g, x, y), "({0} * op_gelu_grad({1}, {2}))",
   _gelu_grad_grad, saves=(0, 1, 2), shape=lambda *s: S.broadcast("gelu_grad", *s),
   dtype=one_dtype("gelu_grad"), dtypes=FLOATS)


# ---- linear algebra -----------------------------------------------------------------------
def _matmul_rule(a, b):
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        raise ShapeError(f"matmul: cannot multiply {S.fmt(a)} by {S.fmt(b)}: the last dim of the "
                         f"left ({a[-1] if a else '-'}) must equal the second-to-last of the right "
                         f"({b[-2] if len(b) > 1 else '-'})")
    if len(a) == len(b) == 2:
        return (a[0], b[1])
    return S.broadcast("matmul", a[:-2], b[:-2]) + (a[-2], b[-1])


# the active kernel set's matmul: NumPy's, natively split over ember's threads, or the
# WebAssembly GEMM inside Pyodide
op("matmul", LINALG, lambda a, b: kernels.active().matmul(a, b), None,
            lambda g, y, a, b: (lambda: g @ b.swap_dims(-1, -2), lambda: a.swap_dims(-1, -2) @ g),
            saves=(0, 1),
            shape=_matmul_rule, dtype=_same, dtypes=NUMBERS)


# ---- sources ------------------------------------------------------------------------------
op("full", SOURCE, lambda shape_to, value, dtype: np.full(shape_to, value, dtype=dtype),
          None, shape=lambda shape_to, value, dtype: shape_to,
          dtype=lambda shape_to, value, dtype: dtype)
