"""ember.nn.functional: convolution, pooling, embedding and resizing, as functions.

PyTorch's signatures and semantics, NCHW layouts, weights in PyTorch's layout, so that
PyTorch weights load as they are. Inputs may leave out the batch dim (conv1d [C, L];
conv2d and the pools [C, H, W]), as in PyTorch.

Five primitives of the op table do the work (ember/ops/nn.py): conv2d, conv_transpose2d,
conv2d_weight (their gradients), max_pool2d and max_pool2d_indices. Everything else is a
composite, so it needs no backend work and Autodiff differentiates it through the primitives it
uses:

- conv1d is conv2d over a unit height; bias is a broadcast add
- avg_pool2d, adaptive_avg_pool2d and bilinear interpolation are separable: A_h @ x @ A_w^T
  with small constant averaging/interpolation matrices built here in NumPy
- nearest interpolation and embedding select rows
"""

import math
from numbers import Real

import numpy as np

from .. import shape as S
from ..dtype import is_float
from ..errors import DTypeError, ShapeError
from ..ops import prims
from ..ops.nn import _pool_out
from ..tensor import Tensor, _apply

__all__ = ["adaptive_avg_pool2d", "avg_pool2d", "conv1d", "conv2d", "conv_transpose2d",
           "embedding", "interpolate", "max_pool2d"]


# ---- arguments ------------------------------------------------------------------------------
def _ints(name, what, value, n, low=0):
    """An int or a sequence of n ints (each >= low) as a tuple of n ints."""
    if type(value) is int and value >= low:  # the common case, short: every layer, every call
        return (value,) * n
    items = (value,) * n if isinstance(value, (int, np.integer)) else value
    try:
        items = tuple(items)
    except TypeError:
        items = None
    if (items is None or len(items) != n or
            any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low
                for v in items)):
        want = "a positive int" if low > 0 else "a non-negative int"
        raise ShapeError(f"{name}: {what} must be {want} or {n} of them, got {value!r}")
    return tuple(int(v) for v in items)


def _tensor(name, x, what="input"):
    if not isinstance(x, Tensor):
        raise DTypeError(f"{name}: the {what} must be a Tensor, got {type(x).__name__}; wrap "
                         "it with Tensor.from_data")
    return x


def _floats(name, *tensors):
    """The tensors (None kept) in one float dtype: float64 if any is, else float32."""
    present = [t for t in tensors if t is not None]
    for t in present:
        if not is_float(t.dtype):
            raise DTypeError(f"{name}: takes float32 or float64 tensors, got {t.dtype}; cast "
                             "with .cast('float32')")
    dtype = "float64" if any(t.dtype == "float64" for t in present) else "float32"
    return [None if t is None else t.cast(dtype) for t in tensors]


def _batched(name, x, rank, layout):
    """x with a batch dim (added when x has rank - 1 dims), and whether it was added."""
    if x.ndim == rank - 1:
        return x.unsqueeze(0), True
    if x.ndim != rank:
        raise ShapeError(f"{name}: input must be {rank}-D {layout} (or {rank - 1}-D without "
                         f"the batch dim), got {S.fmt(x.shape)}")
    return x, False


def _transposed_with_bias(name, x, weight, bias, channels, **attrs):
    """conv_transpose2d(x, weight) + bias over the output channels (conv2d's op takes its bias
    itself; this one's stays a broadcast add)."""
    if bias is not None and channels is not None and bias.shape != (channels,):
        # (channels None: a weight of the wrong rank, which the op words)
        raise ShapeError(f"{name}: bias must have shape [{channels}] (one value per output "
                         f"channel), got {S.fmt(bias.shape)}")
    # `out` stays named on purpose, so the add gets a fresh buffer: handing it the conv's
    # (tensor._take donating it) measured slower in Pyodide, SqueezeNet-sized forward 30 -> 42-45 ms
    # in headless Chromium (the in-place per-channel add over the conv's output)
    out = _apply(prims.conv_transpose2d, x, weight, **attrs)
    return out if bias is None else out + bias.reshape((1, -1, 1, 1))


def _conv_padding(name, padding, kernel, stride, dilation):
    """((top, bottom), (left, right)) from an int, a pair, "valid" or "same" (PyTorch puts
    the odd one out of "same" at the bottom/right)."""
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0), (0, 0))
        if padding != "same":
            raise ShapeError(f"{name}: padding must be an int, a pair, 'same' or 'valid', got "
                             f"{padding!r}")
        if stride != (1, 1):
            raise ShapeError(f"{name}: padding='same' needs stride 1, got stride {stride}")
        total = [d * (k - 1) for k, d in zip(kernel, dilation)]
        return tuple((t // 2, t - t // 2) for t in total)
    ph, pw = _ints(name, "padding", padding, 2)
    return ((ph, ph), (pw, pw))


# ---- convolutions ---------------------------------------------------------------------------
def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D convolution (cross-correlation, as PyTorch): x [N, C, H, W], weight
    [O, C/groups, KH, KW], bias [O] -> [N, O, OH, OW]. padding: int, pair, "same", "valid"."""
    name = "conv2d"
    x, weight, bias = _floats(name, _tensor(name, x), _tensor(name, weight, "weight"),
                              None if bias is None else _tensor(name, bias, "bias"))
    x, unbatched = _batched(name, x, 4, "[N, C, H, W]")
    stride = _ints(name, "stride", stride, 2, 1)
    dilation = _ints(name, "dilation", dilation, 2, 1)
    if weight.ndim != 4:
        raise ShapeError(f"{name}: weight must be 4-D [O, C/groups, KH, KW], got "
                         f"{S.fmt(weight.shape)}")
    pads = _conv_padding(name, padding, weight.shape[2:], stride, dilation)
    # the bias is the op's third input (its shape rule checks it): added over the product
    out = _apply(prims.conv2d, x, weight, *(() if bias is None else (bias,)), stride=stride,
                 padding=pads, dilation=dilation, groups=_groups(name, groups))
    return out.squeeze(0) if unbatched else out


def _groups(name, groups):
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ShapeError(f"{name}: groups must be a positive int, got {groups!r}")
    return int(groups)


def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-D convolution: x [N, C, L], weight [O, C/groups, K], bias [O] -> [N, O, OL];
    conv2d over a unit height."""
    name = "conv1d"
    x, weight, bias = _floats(name, _tensor(name, x), _tensor(name, weight, "weight"),
                              None if bias is None else _tensor(name, bias, "bias"))
    x, unbatched = _batched(name, x, 3, "[N, C, L]")
    if weight.ndim != 3:
        raise ShapeError(f"{name}: weight must be 3-D [O, C/groups, K], got "
                         f"{S.fmt(weight.shape)}")
    (stride,), (dilation,) = _ints(name, "stride", stride, 1, 1), \
        _ints(name, "dilation", dilation, 1, 1)
    groups = _groups(name, groups)
    o, cg, k = weight.shape
    if x.shape[1] != cg * groups or o % groups:
        raise ShapeError(f"{name}: input {S.fmt(x.shape)} has {x.shape[1]} channels; weight "
                         f"{S.fmt(weight.shape)} takes {cg} per group x groups={groups}, and "
                         f"groups must divide its {o} output channels")
    if not isinstance(padding, str):
        (p,) = _ints(name, "padding", padding, 1)
        if x.shape[2] + 2 * p < dilation * (k - 1) + 1:
            raise ShapeError(f"{name}: kernel {k} (dilation {dilation}) of weight "
                             f"{S.fmt(weight.shape)} is longer than the padded input "
                             f"{x.shape[2] + 2 * p} (input {S.fmt(x.shape)}, padding {p})")
        padding = (0, p)
    out = conv2d(x.unsqueeze(2), weight.unsqueeze(2), bias, (1, stride), padding,
                 (1, dilation), groups).squeeze(2)
    return out.squeeze(0) if unbatched else out


def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """Transposed 2-D convolution (the gradient of conv2d in its input): x [N, C, H, W],
    weight [C, O/groups, KH, KW], bias [O] -> [N, O, (H-1)*stride - 2*padding +
    dilation*(KH-1) + output_padding + 1, ...]."""
    name = "conv_transpose2d"
    x, weight, bias = _floats(name, _tensor(name, x), _tensor(name, weight, "weight"),
                              None if bias is None else _tensor(name, bias, "bias"))
    x, unbatched = _batched(name, x, 4, "[N, C, H, W]")
    stride = _ints(name, "stride", stride, 2, 1)
    dilation = _ints(name, "dilation", dilation, 2, 1)
    pad = _ints(name, "padding", padding, 2)
    extra = _ints(name, "output_padding", output_padding, 2)
    if any(e >= max(s, d) for e, s, d in zip(extra, stride, dilation)):
        raise ShapeError(f"{name}: output_padding {extra} must be smaller than either stride "
                         f"{stride} or dilation {dilation}")
    pads = tuple((p, p - e) for p, e in zip(pad, extra))
    groups = _groups(name, groups)
    channels = weight.shape[1] * groups if weight.ndim == 4 else None
    out = _transposed_with_bias(name, x, weight, bias, channels, stride=stride, padding=pads,
                                dilation=dilation, groups=groups)
    return out.squeeze(0) if unbatched else out


# ---- pooling --------------------------------------------------------------------------------
def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """The maximum of each window: x [N, C, H, W] -> [N, C, OH, OW]. With return_indices,
    also each maximum's flat index into H*W (int32), as PyTorch's (ties: the first)."""
    name = "max_pool2d"
    x, unbatched = _batched(name, _tensor(name, x), 4, "[N, C, H, W]")
    kernel = _ints(name, "kernel_size", kernel_size, 2, 1)
    stride = kernel if stride is None else _ints(name, "stride", stride, 2, 1)
    padding = _ints(name, "padding", padding, 2)
    dilation = _ints(name, "dilation", dilation, 2, 1)
    attrs = dict(kernel=kernel, stride=stride, padding=padding, dilation=dilation,
                 ceil_mode=bool(ceil_mode))
    out = _apply(prims.max_pool2d, x, **attrs)  # its gradient finds the indices itself
    if not return_indices:
        return out.squeeze(0) if unbatched else out
    idx = _apply(prims.max_pool2d_indices, x, **attrs)
    if unbatched:
        out, idx = out.squeeze(0), idx.squeeze(0)
    return out, idx


def _window_matrix(size, out, kernel, stride, pad, include_pad):
    """[out, size]: row i averages input positions [i*stride - pad, ... + kernel) (PyTorch's
    avg_pool2d divisor: the window clipped to the padded input, or to the input alone)."""
    start = np.arange(out) * stride - pad
    end = np.minimum(start + kernel, size + pad)
    lo, hi = np.maximum(start, 0), np.minimum(end, size)
    count = (end - start) if include_pad else (hi - lo)
    pos = np.arange(size)
    inside = (pos >= lo[:, None]) & (pos < hi[:, None])
    return inside / np.maximum(count, 1)[:, None]


def _separable(x, rows, cols):
    """rows @ x @ cols^T over the last two dims, the matrices as constants of x's dtype;
    a matrix that is the identity is skipped."""
    def const(m):
        return Tensor.from_data(np.ascontiguousarray(m, dtype=x.dtype), backend=x.backend)
    x = x._alias()  # a new Tensor even where both matrices are identities
    if not (cols.shape[0] == cols.shape[1] and np.array_equal(cols, np.eye(cols.shape[0]))):
        x = x @ const(cols.T)
    if not (rows.shape[0] == rows.shape[1] and np.array_equal(rows, np.eye(rows.shape[0]))):
        x = const(rows) @ x
    return x


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """The mean of each window: x [N, C, H, W] -> [N, C, OH, OW] (PyTorch's divisors)."""
    name = "avg_pool2d"
    (x,) = _floats(name, _tensor(name, x))
    x, unbatched = _batched(name, x, 4, "[N, C, H, W]")
    kernel = _ints(name, "kernel_size", kernel_size, 2, 1)
    stride = kernel if stride is None else _ints(name, "stride", stride, 2, 1)
    pad = _ints(name, "padding", padding, 2)
    oh, ow = _pool_out(name, x.shape, kernel, stride, pad, (1, 1), bool(ceil_mode))
    rows, cols = (_window_matrix(n, o, k, s, p, count_include_pad)
                  for n, o, k, s, p in zip(x.shape[2:], (oh, ow), kernel, stride, pad))
    out = _separable(x, rows, cols)
    return out.squeeze(0) if unbatched else out


def _adaptive_matrix(size, out):
    """[out, size]: row i averages [floor(i*size/out), ceil((i+1)*size/out)), as PyTorch."""
    i = np.arange(out)
    lo, hi = (i * size) // out, -((-(i + 1) * size) // out)
    pos = np.arange(size)
    return ((pos >= lo[:, None]) & (pos < hi[:, None])) / (hi - lo)[:, None]


def adaptive_avg_pool2d(x, output_size):
    """Average pooling to a fixed output size (an int, a pair; None keeps that dim)."""
    name = "adaptive_avg_pool2d"
    (x,) = _floats(name, _tensor(name, x))
    x, unbatched = _batched(name, x, 4, "[N, C, H, W]")
    if isinstance(output_size, (tuple, list)) and len(output_size) == 2:
        output_size = tuple(n if o is None else o for o, n in zip(output_size, x.shape[2:]))
    size = _ints(name, "output_size", output_size, 2, 1)
    if 0 in x.shape[2:]:
        raise ShapeError(f"{name}: input {S.fmt(x.shape)} has an empty spatial dim")
    rows, cols = (_adaptive_matrix(n, o) for n, o in zip(x.shape[2:], size))
    out = _separable(x, rows, cols)
    return out.squeeze(0) if unbatched else out


# ---- resizing -------------------------------------------------------------------------------
def _resize_args(name, x, size, scale_factor):
    """Output sizes and PyTorch's scales (the given scale_factor, used as is, or None)."""
    if (size is None) == (scale_factor is None):
        raise ValueError(f"{name}: give exactly one of size and scale_factor")
    if size is not None:
        return _ints(name, "size", size, 2, 1), (None, None)
    scales = (scale_factor,) * 2 if isinstance(scale_factor, Real) else tuple(scale_factor)
    if len(scales) != 2 or any(isinstance(s, bool) or not isinstance(s, Real) or s <= 0
                               for s in scales):
        raise ValueError(f"{name}: scale_factor must be a positive number or two of them, got "
                         f"{scale_factor!r}")
    out = tuple(math.floor(n * float(s)) for n, s in zip(x.shape[2:], scales))
    if any(o < 1 for o in out):
        raise ShapeError(f"{name}: scale_factor {scale_factor} turns input {S.fmt(x.shape)} "
                         f"into an empty {_hw(out)}")
    return out, tuple(float(s) for s in scales)


def _hw(pair):
    return f"{pair[0]}x{pair[1]}"


def _nearest_index(size, out, scale):
    """PyTorch's legacy "nearest": floor(dst * scale) in float32, clamped."""
    if out == size:
        return np.arange(out)
    if out == 2 * size:
        return np.arange(out) >> 1
    ratio = np.float32(1.0 / scale) if scale is not None else np.float32(size) / np.float32(out)
    src = np.floor(np.arange(out, dtype=np.float32) * ratio).astype(np.int64)
    return np.minimum(src, size - 1)


def _bilinear_matrix(size, out, scale, align_corners):
    """[out, size]: PyTorch's bilinear weights (two taps per row) along one dim."""
    if out == size:
        return np.eye(size)
    dst = np.arange(out, dtype=np.float64)
    if align_corners:
        src = dst * ((size - 1) / (out - 1) if out > 1 else 0.0)
    else:
        ratio = 1.0 / scale if scale is not None else size / out
        src = np.maximum(ratio * (dst + 0.5) - 0.5, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), size - 1)
    i1 = i0 + (i0 < size - 1)
    frac = np.clip(src - i0, 0.0, 1.0)
    m = np.zeros((out, size))
    np.add.at(m, (np.arange(out), i0), 1.0 - frac)
    np.add.at(m, (np.arange(out), i1), frac)
    return m


def interpolate(x, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """Resize x [N, C, H, W] to `size` (or by `scale_factor`), PyTorch's "nearest" or
    "bilinear" (align_corners False by default)."""
    name = "interpolate"
    x = _tensor(name, x)
    if x.ndim != 4:
        raise ShapeError(f"{name}: input must be 4-D [N, C, H, W], got {S.fmt(x.shape)}")
    if mode not in ("nearest", "bilinear"):
        raise ValueError(f"{name}: mode must be 'nearest' or 'bilinear', got {mode!r}")
    out, scales = _resize_args(name, x, size, scale_factor)
    h, w = x.shape[2:]
    if mode == "nearest":
        if align_corners is not None:
            raise ValueError(f"{name}: align_corners only applies to mode='bilinear'")
        for dim, (n, o, s) in enumerate(zip((h, w), out, scales), start=2):
            idx = _nearest_index(n, o, s)
            if o != n or not np.array_equal(idx, np.arange(n)):
                x = x.select(dim, Tensor.from_data(idx.astype(np.int32), backend=x.backend))
        return x._alias()
    (x,) = _floats(name, x)
    rows, cols = (_bilinear_matrix(n, o, s, bool(align_corners))
                  for n, o, s in zip((h, w), out, scales))
    return _separable(x, rows, cols)


# ---- embedding ------------------------------------------------------------------------------
def embedding(indices, weight):
    """Rows of weight [V, D] at integer indices of any shape -> [*indices.shape, D]."""
    name = "embedding"
    weight = _tensor(name, weight, "weight")
    if not isinstance(indices, Tensor):
        indices = Tensor.from_data(np.asarray(indices), backend=weight.backend)
    if indices.dtype not in ("int32", "int64"):
        raise DTypeError(f"{name}: indices must be int32 or int64, got {indices.dtype}; cast "
                         "with .cast('int32')")
    if weight.ndim != 2:
        raise ShapeError(f"{name}: weight must be 2-D [num_embeddings, dim], got "
                         f"{S.fmt(weight.shape)}")
    try:
        rows = weight.select(0, indices.reshape(indices.numel()))
    except ShapeError as e:
        raise ShapeError(f"{name}: indices must lie in [0, {weight.shape[0]}) for a weight of "
                         f"shape {S.fmt(weight.shape)} ({e})") from None
    return rows.reshape(indices.shape + (weight.shape[1],))
