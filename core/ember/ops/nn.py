"""The op table's neural-network primitives: the convolutions and max pooling.

Declared like every other primitive (see ops/__init__.py); imported by ops/__init__.py.

Only what cannot be a composite is here; ember.nn.functional builds the rest:

- conv2d(x, w[, b])       x [N, C, H, W], w [O, C/groups, KH, KW], b [O] -> [N, O, OH, OW]
- conv_transpose2d(x, w)  x [N, C, H, W], w [C, O/groups, KH, KW] -> [N, O, OH, OW]; the
                          adjoint of conv2d in x: conv2d's input gradient, and a user op
- conv2d_weight(x, g)     conv2d's weight gradient [O, C/groups, KH, KW] (also that of
                          conv_transpose2d, with the roles of x and g swapped)
- max_pool2d(x)           each window's maximum [N, C, OH, OW]; its gradient scatters g to
                          where max_pool2d_indices says the maxima are
- max_pool2d_indices(x)   the flat index (into H*W) of each window's maximum, PyTorch's
                          `return_indices` (ties: the first maximum; NaN: the last NaN)

The three convolutions are each other's gradients, so every derivative of any order stays
inside this set. Their attrs are normalised by ember.nn.functional: `stride` and `dilation`
pairs, `padding` as ((top, bottom), (left, right)) where a negative amount crops (gradients
of convolutions whose last window stops short of the input's end need it), `groups` an int.

NumPy implementations: the input's windows are one as_strided view [N, C, KH, KW, OH, OW];
conv2d and conv2d_weight copy it once, in its own order (so the copy streams), into
[N, groups, C/groups*KH*KW, OH*OW] columns and run one batched matmul (at stride 1, columns
on the padded input's own width, _grid: each row one contiguous run); conv_transpose2d
computes its columns with one matmul and adds them back with one strided add per kernel
offset. Nothing loops over pixels or output positions. All three at stride 1 (most
convolutions and their gradients) run over the batch in blocks of images
whose columns fit in the CPU's cache (_batch_blocks), so the columns one step writes are read
back from cache by the next, not from memory; that conv_transpose2d sums over the kernel's
columns inside its GEMM and adds back only one plane per kernel row, as long contiguous runs
(_conv_transpose2d_flat).
"""

import functools

import numpy as np

from .. import shape as S
from ..dtype import DEFAULT_INT
from ..errors import ShapeError
from . import kernels
from .table import FLOATS, LINALG, MAP, NUMBERS, WINDOW, _run, _same_dtype, one_dtype, op


# ---- geometry -----------------------------------------------------------------------------
def _memo(rule):
    """A shape rule remembered per arguments. The convolutions' and pools' checks cost 15-40 us
    of Python a call inside Pyodide and run twice per op (the Tensor layer, then the NumPy
    implementation's output size), for the same few shapes every step. Errors are not kept:
    bad arguments raise every time, and unhashable ones (lists) are checked every time."""
    seen = {}

    @functools.wraps(rule)
    def memo(*args, **attrs):
        try:
            key = (args, *attrs.items())
            out = seen.get(key)
        except TypeError:
            return rule(*args, **attrs)
        if out is None:
            if len(seen) >= 4096:
                seen.clear()
            out = seen[key] = rule(*args, **attrs)
        return out
    return memo


def _check_geometry(name, stride, dilation, groups=1):
    for what, pair in (("stride", stride), ("dilation", dilation)):
        if len(pair) != 2 or any(type(v) is not int or v < 1 for v in pair):
            raise ShapeError(f"{name}: {what} must be two positive ints, got {pair!r}")
    if type(groups) is not int or groups < 1:
        raise ShapeError(f"{name}: groups must be a positive int, got {groups!r}")


def _hw(pair):
    return f"{pair[0]}x{pair[1]}"


def _window_out(name, size, kernel, stride, padding, dilation, xs, ws=None):
    """Output height and width of a sliding window, or a ShapeError when it does not fit."""
    padded = tuple(n + a + b for n, (a, b) in zip(size, padding))
    extent = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation))
    if any(k < 1 for k in kernel) or any(p < e for p, e in zip(padded, extent)):
        what = f"weight {S.fmt(ws)}" if ws is not None else "the window"
        raise ShapeError(
            f"{name}: kernel {_hw(kernel)} (dilation {_hw(dilation)}: extent {_hw(extent)}) of "
            f"{what} is larger than the padded input {_hw(padded)} (input {S.fmt(xs)}, padding "
            f"{padding}); pad more, or use a smaller kernel")
    return tuple((p - e) // s + 1 for p, e, s in zip(padded, extent, stride))


# ---- NumPy helpers --------------------------------------------------------------------------
def _pad(x, padding, rows, cols, value=0):
    """x [N, C, H, W] padded by ((top, bottom), (left, right)), negative amounts cropping,
    and cut or extended to exactly rows x cols (what the windows read)."""
    (top, _), (left, _) = padding
    _, _, h, w = x.shape
    if top == 0 and left == 0 and rows <= h and cols <= w:
        return x  # the windows read x itself (the bottom and right ends are never read)
    out = np.full(x.shape[:2] + (rows, cols), value, dtype=x.dtype)
    r0, c0 = max(top, 0), max(left, 0)  # where x's first kept row/col lands
    sr, sc = max(-top, 0), max(-left, 0)  # x's first kept row/col
    nr, nc = min(h - sr, rows - r0), min(w - sc, cols - c0)
    if nr > 0 and nc > 0:
        out[:, :, r0:r0 + nr, c0:c0 + nc] = x[:, :, sr:sr + nr, sc:sc + nc]
    return out


def _windows(x, kernel, stride, padding, dilation, out_hw, value=0):
    """A read-only view [N, C, KH, KW, OH, OW] of the padded input's windows."""
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = kernel, stride, dilation, out_hw
    xp = _pad(x, padding, (oh - 1) * sh + dh * (kh - 1) + 1, (ow - 1) * sw + dw * (kw - 1) + 1,
              value)
    n, c = xp.shape[:2]
    s = xp.strides
    return np.lib.stride_tricks.as_strided(
        xp, (n, c, kh, kw, oh, ow), (s[0], s[1], dh * s[2], dw * s[3], sh * s[2], sw * s[3]),
        writeable=False)


def _columns(x, kernel, stride, padding, dilation, out_hw, groups):
    """The windows copied into [N, groups, C/groups*KH*KW, OH*OW] (im2col: one copy, in the
    view's own order, so it streams through memory)."""
    win = _windows(x, kernel, stride, padding, dilation, out_hw)
    cols = np.empty(win.shape, dtype=x.dtype)
    kernels.active().copyto(cols, win)  # np.copyto, or a WebAssembly copy inside Pyodide
    n, c = x.shape[:2]
    return cols.reshape(n, groups, c // groups * kernel[0] * kernel[1], out_hw[0] * out_hw[1])


def _grid(x, kernel, padding, dilation, out_hw):
    """Stride 1: the padded input, C-contiguous, and its width wp. Output (r, q) then reads,
    for kernel offset (i, j), flat position r*wp + q + i*dh*wp + j*dw of its plane: on this
    grid of width wp (its last wp - OW columns unused), each offset's window is one shifted
    contiguous run."""
    (kh, kw), (dh, dw), (oh, ow) = kernel, dilation, out_hw
    xp = np.ascontiguousarray(_pad(x, padding, oh + dh * (kh - 1), ow + dw * (kw - 1)))
    return xp, xp.shape[3]


def _grid_columns(xp, kernel, dilation, out_hw, groups, b):
    """Images b of the padded input xp (from _grid) copied into grid columns
    [n, groups, C/groups*KH*KW, (OH-1)*wp + OW]: one row per (channel, offset), each a
    contiguous run of its plane (im2col rows of OW, copied row by row, ran ~1.5x slower)."""
    (kh, kw), (dh, dw), (oh, ow) = kernel, dilation, out_hw
    xb = xp[b]
    n, c, _, wp = xb.shape
    size = (oh - 1) * wp + ow  # past the last output, the run would leave the plane
    s = xb.strides
    view = np.lib.stride_tricks.as_strided(
        xb, (n, c, kh, kw, size), (s[0], s[1], dh * s[2], dw * s[3], s[3]), writeable=False)
    cols = np.empty(view.shape, dtype=xp.dtype)
    kernels.active().copyto(cols, view)
    return cols.reshape(n, groups, c // groups * kh * kw, size)


def _off_grid(y, oh, ow, wp):
    """A view [..., OH, OW] of grid outputs y [..., (OH-1)*wp + OW] (row r at r*wp)."""
    s = y.strides
    return np.lib.stride_tricks.as_strided(y, y.shape[:-1] + (oh, ow),
                                           s[:-1] + (wp * s[-1], s[-1]), writeable=False)


# the columns of a batch are several times its activations (MNIST's third conv: 18 MB, where
# the CPU caches 1 MB per core); a block of ~2 MB of them stays in cache between the copy,
# the GEMM and the adds (conv2d_weight ~10%, conv_transpose2d ~25% faster there, measured)
_BLOCK_BYTES = 1 << 21


def _batch_blocks(n, per_image_bytes):
    """Slices of the batch [0, n) holding about _BLOCK_BYTES of columns each."""
    step = max(1, _BLOCK_BYTES // max(per_image_bytes, 1))
    return [slice(i, min(i + step, n)) for i in range(0, n, step)]


# ---- conv2d ---------------------------------------------------------------------------------
@_memo
def _conv2d_rule(xs, ws, *bias, stride, padding, dilation, groups):
    name = "conv2d"
    if len(xs) != 4 or len(ws) != 4:
        raise ShapeError(f"{name}: input must be 4-D [N, C, H, W] and weight 4-D "
                         f"[O, C/groups, KH, KW], got input {S.fmt(xs)} and weight {S.fmt(ws)}")
    _check_geometry(name, stride, dilation, groups)
    n, c, h, w = xs
    o, cg, kh, kw = ws
    if c != cg * groups:
        raise ShapeError(f"{name}: input {S.fmt(xs)} has {c} channels but weight {S.fmt(ws)} "
                         f"takes {cg} per group x groups={groups} = {cg * groups}")
    if o % groups:
        raise ShapeError(f"{name}: weight {S.fmt(ws)} has {o} output channels, which "
                         f"groups={groups} does not divide")
    if bias and bias[0] != (o,):
        raise ShapeError(f"{name}: bias must have shape [{o}] (one value per output channel of "
                         f"weight {S.fmt(ws)}), got {S.fmt(bias[0])}")
    oh, ow = _window_out(name, (h, w), (kh, kw), stride, padding, dilation, xs, ws)
    return (n, o, oh, ow)


def _conv2d_np(x, w, b=None, *, stride, padding, dilation, groups):
    n = x.shape[0]
    o, _, kh, kw = w.shape
    oh, ow = _conv2d_rule(x.shape, w.shape, stride=stride, padding=padding, dilation=dilation,
                          groups=groups)[2:]
    k = kernels.active()
    fast = k.conv2d(x, w, b, stride, padding, dilation, groups, (oh, ow))
    if fast is not None:  # one call of C (natively) or WebAssembly (Pyodide) kernels
        return fast
    wg = w.reshape(groups, o // groups, -1)
    if stride == (1, 1):  # on the grid, in blocks of images whose columns stay in cache
        # (MNIST's third conv: 19 MB of columns for the batch; blocked, its training step ran
        # ~2.5 ms faster on a quiet machine. That relies on NdArray's heap setting,
        # backends/ndarray.py _keep_heap: without it, no 19 MB buffer lifts glibc's thresholds
        # and each step page-faults its activations back in)
        xp, wp = _grid(x, (kh, kw), padding, dilation, (oh, ow))
        out = np.empty((n, o, oh, ow), dtype=x.dtype)
        size = (oh - 1) * wp + ow
        for blk in _batch_blocks(n, x.shape[1] * kh * kw * size * x.itemsize):
            y = k.matmul(wg, _grid_columns(xp, (kh, kw), dilation, (oh, ow), groups, blk))
            if b is not None:  # the bias, over the block's product while it is in cache
                k.add(y, b.reshape(groups, o // groups, 1), out=y)
            out[blk] = _off_grid(y.reshape(-1, o, size), oh, ow, wp)
        return out
    cols = _columns(x, (kh, kw), stride, padding, dilation, (oh, ow), groups)
    # [G, O/G, C/G*KH*KW] @ [N, G, C/G*KH*KW, OH*OW]: BLAS once per (n, g)
    out = k.matmul(wg, cols).reshape(n, o, oh, ow)
    if b is not None:  # the bias, added over the fresh product in place
        k.add(out, b.reshape(1, o, 1, 1), out=out)
    return out


def _input_padding(in_hw, kernel, stride, padding, dilation):
    """The padding that makes conv_transpose2d (the adjoint) give back exactly in_hw: the
    rows and cols that no window reached are cropped from the bottom and the right."""
    out = []
    for n, k, s, (a, b), d in zip(in_hw, kernel, stride, padding, dilation):
        spare = (n + a + b - d * (k - 1) - 1) % s
        out.append((a, b - spare))
    return tuple(out)


def _conv2d_grad(g, y, x, w, *bias, stride, padding, dilation, groups):
    kernel = w.shape[2:]
    back = _input_padding(x.shape[2:], kernel, stride, padding, dilation)
    return (
        lambda: _run("conv_transpose2d", g, w, stride=stride, padding=back, dilation=dilation,
                     groups=groups),
        lambda: _run("conv2d_weight", x, g, kernel=kernel, stride=stride, padding=padding,
                     dilation=dilation, groups=groups),
        lambda: g.sum_dim((0, 2, 3)).reshape(w.shape[0]))[:2 + len(bias)]


op("conv2d", LINALG, _conv2d_np, None, _conv2d_grad, saves=(0, 1),
   shape=_conv2d_rule, dtype=one_dtype("conv2d"), dtypes=FLOATS)


# ---- conv_transpose2d: the adjoint of conv2d in its input -----------------------------------
@_memo
def _conv_transpose2d_rule(xs, ws, stride, padding, dilation, groups):
    name = "conv_transpose2d"
    if len(xs) != 4 or len(ws) != 4:
        raise ShapeError(f"{name}: input must be 4-D [N, C, H, W] and weight 4-D "
                         f"[C, O/groups, KH, KW], got input {S.fmt(xs)} and weight {S.fmt(ws)}")
    _check_geometry(name, stride, dilation, groups)
    n, c, h, w = xs
    cw, og, kh, kw = ws
    if c != cw:
        raise ShapeError(f"{name}: input {S.fmt(xs)} has {c} channels but weight {S.fmt(ws)} "
                         f"takes {cw} (its first dim)")
    if c % groups:
        raise ShapeError(f"{name}: input {S.fmt(xs)} has {c} channels, which groups={groups} "
                         "does not divide")
    if kh < 1 or kw < 1:
        raise ShapeError(f"{name}: weight {S.fmt(ws)} has an empty kernel")
    size = tuple((i - 1) * s + d * (k - 1) + 1 - a - b
                 for i, k, s, d, (a, b) in zip((h, w), (kh, kw), stride, dilation, padding))
    if any(i < 1 for i in (h, w)) or any(s < 1 for s in size):
        raise ShapeError(f"{name}: input {S.fmt(xs)} with weight {S.fmt(ws)}, stride {stride}, "
                         f"dilation {dilation} and padding {padding} gives an output of "
                         f"{_hw(size)}; it must be at least 1x1")
    return (n, og * groups) + size


def _conv_transpose2d_flat(x, w, dilation, top, left, oh, ow):
    """Stride 1, one group, on the output's full width fw (x's rows widened by zeros), where
    a kernel offset (i, j) moves a pixel by i*dh*fw + j*dw in the flattened plane. The column
    offsets j go into the GEMM: x's plane is copied KW times, each shifted by j*dw (contiguous
    runs: a fast copy), so one product [KH*O, KW*C] @ [KW*C, H*fw] sums over j and c at once,
    and only the KH row offsets are added back, each as one contiguous run per (image,
    channel). (Each offset its own GEMM output plane, as before, ran 3x the adds and a GEMM
    with K = C only: ~1.5x slower on the MNIST model's convolutions, measured.)"""
    n, c, h, wd = x.shape
    _, o, kh, kw = w.shape
    dh, dw = dilation
    fh, fw = h + dh * (kh - 1), wd + dw * (kw - 1)
    pre, size = (kw - 1) * dw, h * fw
    # the widened planes behind a run of zeros: a shift by j*dw reads the zeros (no wrap)
    xw = np.empty((n, c, pre + size), dtype=x.dtype)  # (only the zeros are zero-filled)
    xw[:, :, :pre] = 0
    rows = xw[:, :, pre:].reshape(n, c, h, fw)
    rows[..., :wd] = x
    rows[..., wd:] = 0
    s = xw.strides
    shifted = np.lib.stride_tricks.as_strided(  # [N, KW, C, H*fw]: plane c moved by j*dw
        xw[:, :, pre:], (n, kw, c, size), (s[0], -dw * s[2], s[1], s[2]), writeable=False)
    wm = w.transpose(2, 1, 3, 0).reshape(kh * o, kw * c)  # [(i, o), (j, c)]
    full = np.empty((n, o, fh * fw), dtype=x.dtype)
    k = kernels.active()
    for b in _batch_blocks(n, (kw * c + kh * o) * size * x.itemsize):
        cols = np.empty((b.stop - b.start, kw, c, size), dtype=x.dtype)
        k.copyto(cols, shifted[b])
        rows = k.matmul(wm, cols.reshape(-1, kw * c, size)).reshape(-1, kh, o, size)
        planes = full[b]
        planes[..., :size] = rows[:, 0]  # the first kernel row is set, not added to zeros
        planes[..., size:] = 0
        for i in range(1, kh):
            planes[..., i * dh * fw:i * dh * fw + size] += rows[:, i]
    out = full.reshape(n, o, fh, fw)[:, :, top:top + oh, left:left + ow]
    return out if out.shape[2:] == (fh, fw) else np.ascontiguousarray(out)


def _conv_transpose2d_np(x, w, stride, padding, dilation, groups):
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    (sh, sw), (dh, dw), ((top, _), (left, _)) = stride, dilation, padding
    o = og * groups
    oh, ow = _conv_transpose2d_rule(x.shape, w.shape, stride, padding, dilation, groups)[2:]
    fast = kernels.active().conv_transpose2d(x, w, stride, padding, dilation, groups, (oh, ow))
    if fast is not None:  # natively, one call of C kernels (ops/kernels.py)
        return fast
    fits = (0 <= top and top + oh <= h + dh * (kh - 1) and 0 <= left
            and left + ow <= wd + dw * (kw - 1))
    # (a weight that is not finite would spread NaN through the zero columns: general path)
    if stride == (1, 1) and groups == 1 and fits and np.isfinite(w).all():
        return _conv_transpose2d_flat(x, w, dilation, top, left, oh, ow)
    # columns [N, G, KH, KW, O/G, H*W] = w^T x (offset-major: each offset's plane is one
    # block per image, which the adds below read fastest), then each offset adds its plane
    cg = c // groups
    wm = w.reshape(groups, cg, og, kh, kw).transpose(0, 3, 4, 2, 1).reshape(groups, -1, cg)
    cols = kernels.active().matmul(wm, x.reshape(n, groups, cg, h * wd)).reshape(
        n, groups, kh, kw, og, h, wd)
    full_h = max((h - 1) * sh + dh * (kh - 1) + 1, top + oh)
    full_w = max((wd - 1) * sw + dw * (kw - 1) + 1, left + ow)
    full = np.zeros((n, o, full_h + max(-top, 0), full_w + max(-left, 0)), dtype=x.dtype)
    planes = full.reshape(n, groups, og, *full.shape[2:])
    r0, c0 = max(-top, 0), max(-left, 0)  # a negative top/left pads the output instead
    for i in range(kh):
        for j in range(kw):
            r, q = r0 + i * dh, c0 + j * dw
            planes[..., r:r + (h - 1) * sh + 1:sh, q:q + (wd - 1) * sw + 1:sw] += \
                cols[:, :, i, j]
    top, left = max(top, 0), max(left, 0)
    out = full[:, :, top:top + oh, left:left + ow]
    return out if out.shape == full.shape else np.ascontiguousarray(out)


def _conv_transpose2d_grad(g, y, x, w, stride, padding, dilation, groups):
    kernel = w.shape[2:]
    return (
        lambda: _run("conv2d", g, w, stride=stride, padding=padding, dilation=dilation,
                     groups=groups),
        lambda: _run("conv2d_weight", g, x, kernel=kernel, stride=stride, padding=padding,
                     dilation=dilation, groups=groups))


op("conv_transpose2d", LINALG, _conv_transpose2d_np, None,
   _conv_transpose2d_grad, saves=(0, 1), shape=_conv_transpose2d_rule,
   dtype=one_dtype("conv_transpose2d"), dtypes=FLOATS)


# ---- conv2d_weight: the gradient of conv2d in its weight -------------------------------------
@_memo
def _conv2d_weight_rule(xs, gs, kernel, stride, padding, dilation, groups):
    name = "conv2d_weight"
    if len(xs) != 4 or len(gs) != 4:
        raise ShapeError(f"{name}: input and output gradient must be 4-D, got {S.fmt(xs)} and "
                         f"{S.fmt(gs)}")
    _check_geometry(name, stride, dilation, groups)
    n, c, h, w = xs
    if gs[0] != n or c % groups or gs[1] % groups:
        raise ShapeError(f"{name}: input {S.fmt(xs)} and output gradient {S.fmt(gs)} need one "
                         f"batch size, and channel counts that groups={groups} divides")
    out = _window_out(name, (h, w), kernel, stride, padding, dilation, xs)
    if out != gs[2:]:
        raise ShapeError(f"{name}: a {_hw(kernel)} kernel over input {S.fmt(xs)} gives "
                         f"{_hw(out)} outputs, the output gradient {S.fmt(gs)} has {_hw(gs[2:])}")
    return (gs[1], c // groups) + tuple(kernel)


def _conv2d_weight_np(x, g, kernel, stride, padding, dilation, groups):
    fast = kernels.active().conv2d_weight(x, g, kernel, stride, padding, dilation, groups)
    if fast is not None:  # natively, one call of C kernels (ops/kernels.py)
        return fast
    n, c = x.shape[:2]
    o, oh, ow = g.shape[1:]
    dw = np.zeros((groups, o // groups, c // groups * kernel[0] * kernel[1]), dtype=x.dtype)
    if stride == (1, 1):  # on the grid (see _grid): g widened by zero columns to wp
        xp, wp = _grid(x, kernel, padding, dilation, (oh, ow))
        size = (oh - 1) * wp + ow
        gw = np.empty((n, o, oh * wp), dtype=x.dtype)
        gw.reshape(n, o, oh, wp)[..., :ow] = g
        gw.reshape(n, o, oh, wp)[..., ow:] = 0
        gm = gw[..., :size].reshape(n, groups, o // groups, size)
        columns = functools.partial(_grid_columns, xp, kernel, dilation, (oh, ow), groups)
    else:
        gm, size = g.reshape(n, groups, o // groups, oh * ow), oh * ow
        columns = (lambda b: _columns(x[b], kernel, stride, padding, dilation, (oh, ow),
                                      groups))
    k = kernels.active()
    for b in _batch_blocks(n, c * kernel[0] * kernel[1] * size * x.itemsize):
        cols = columns(b)
        # [n, G, O/G, OH*OW] @ [n, G, OH*OW, C/G*KH*KW], then the (small) sum over the batch
        dw += k.matmul(gm[b], cols.transpose(0, 1, 3, 2)).sum(axis=0, dtype=x.dtype)
    return dw.reshape(o, c // groups, *kernel)


def _conv2d_weight_grad(gw, y, x, g, kernel, stride, padding, dilation, groups):
    back = _input_padding(x.shape[2:], kernel, stride, padding, dilation)
    return (
        lambda: _run("conv_transpose2d", g, gw, stride=stride, padding=back, dilation=dilation,
                     groups=groups),
        lambda: _run("conv2d", x, gw, stride=stride, padding=padding, dilation=dilation,
                     groups=groups))


op("conv2d_weight", LINALG, _conv2d_weight_np, None, _conv2d_weight_grad,
   saves=(0, 1), shape=_conv2d_weight_rule, dtype=one_dtype("conv2d_weight"),
   dtypes=FLOATS)


# ---- max_pool2d_indices: where each window's maximum is ---------------------------------------
def _pool_out(name, xs, kernel, stride, padding, dilation, ceil_mode):
    """PyTorch's pooling output size (ceil_mode drops a last window that starts in the
    padding), with its checks."""
    if len(xs) != 4:
        raise ShapeError(f"{name}: input must be 4-D [N, C, H, W], got {S.fmt(xs)}")
    if len(kernel) != 2 or any(type(k) is not int or k < 1 for k in kernel):
        raise ShapeError(f"{name}: kernel_size must be two positive ints, got {kernel!r}")
    _check_geometry(name, stride, dilation)
    out = []
    for n, k, s, p, d in zip(xs[2:], kernel, stride, padding, dilation):
        extent = d * (k - 1) + 1
        if type(p) is not int or p < 0 or p > extent // 2:
            raise ShapeError(f"{name}: padding {padding} must be at most half the kernel "
                             f"extent: kernel {_hw(kernel)}, dilation {_hw(dilation)}")
        size = (n + 2 * p - extent + (s - 1 if ceil_mode else 0)) // s + 1
        if ceil_mode and (size - 1) * s >= n + p:
            size -= 1
        out.append(size)
    if any(v < 1 for v in out):
        raise ShapeError(f"{name}: input {S.fmt(xs)} with kernel {_hw(kernel)}, stride "
                         f"{_hw(stride)}, padding {padding} and dilation {_hw(dilation)} gives an "
                         f"output of {_hw(out)}; it must be at least 1x1")
    return tuple(out)


@_memo
def _max_pool2d_indices_rule(xs, kernel, stride, padding, dilation, ceil_mode):
    return xs[:2] + _pool_out("max_pool2d", xs, kernel, stride, padding, dilation, ceil_mode)


def _pool_windows(x, kernel, stride, padding, dilation, oh, ow):
    """The window view [N, C, KH, KW, OH, OW] over x padded with the dtype's lowest value (it
    never beats a real element), and the windows' offsets in scan order."""
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    h, w = x.shape[2:]
    pads = ((ph, (oh - 1) * sh + dilation[0] * (kh - 1) + 1 - h - ph),
            (pw, (ow - 1) * sw + dilation[1] * (kw - 1) + 1 - w - pw))
    low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    win = _windows(x, kernel, stride, pads, dilation, (oh, ow), low)
    return win, [(i, j) for i in range(kh) for j in range(kw)]


def _window_max(win, offsets):
    best = win[:, :, 0, 0].copy()
    for i, j in offsets[1:]:
        np.maximum(best, win[:, :, i, j], out=best)  # NaN propagates, as in PyTorch
    return best


def _max_pool2d_indices_np(x, kernel, stride, padding, dilation, ceil_mode):
    n, c, h, w = x.shape
    oh, ow = _max_pool2d_indices_rule(x.shape, kernel, stride, padding, dilation, ceil_mode)[2:]
    fast = kernels.active().max_pool2d_indices(x, kernel, stride, padding, dilation, (oh, ow))
    if fast is not None:  # inside Pyodide, a WebAssembly kernel (ops/kernels.py)
        return fast if DEFAULT_INT == "int32" else fast.astype(DEFAULT_INT)
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    win, offsets = _pool_windows(x, kernel, stride, padding, dilation, oh, ow)
    # which (output position, kernel offset) read a real element: rows x cols, tiny
    row_ok = np.arange(oh)[:, None] * sh - ph + np.arange(kh)[None, :] * dh  # [OH, KH]
    col_ok = np.arange(ow)[:, None] * sw - pw + np.arange(kw)[None, :] * dw  # [OW, KW]
    row_ok, col_ok = (row_ok >= 0) & (row_ok < h), (col_ok >= 0) & (col_ok < w)
    best = _window_max(win, offsets)
    # PyTorch keeps the first maximum of a window (it replaces only on a larger value):
    # walk the offsets backwards and let each equal one take over. Masked writes branch
    # on every element; the select is written as arithmetic instead.
    where = np.zeros((n, c, oh, ow), dtype=np.int32)  # the maximum's offset i*dh*W + j*dw
    step = np.empty_like(where)
    for i, j in reversed(offsets):
        ok = row_ok[:, i, None] & col_ok[None, :, j]  # [OH, OW]
        hit = win[:, :, i, j] == best
        if not ok.all():
            hit &= ok
        np.subtract(i * dh * w + j * dw, where, out=step)
        step *= hit
        where += step
    if x.dtype.kind == "f":
        nan = np.isnan(best)
        if nan.any():  # PyTorch takes a NaN over anything, and the last NaN of a window
            for i, j in offsets:
                ok = row_ok[:, i, None] & col_ok[None, :, j]
                np.copyto(where, i * dh * w + j * dw, where=np.isnan(win[:, :, i, j]) & ok)
    first = (np.arange(oh)[:, None] * sh - ph) * w + np.arange(ow)[None, :] * sw - pw
    where += first.astype(np.int32)
    return where if DEFAULT_INT == "int32" else where.astype(DEFAULT_INT)


def _int_out(*dtypes, **attrs):
    return DEFAULT_INT


op("max_pool2d_indices", WINDOW, _max_pool2d_indices_np, None,
   shape=_max_pool2d_indices_rule, dtype=_int_out, dtypes=NUMBERS)


# ---- max_pool2d: each window's maximum ---------------------------------------------------------
# A primitive of its own, although it is a gather at max_pool2d_indices: as that composite it
# cost an index pass, an offset add and a gather forward (7 ops with their reshapes; an MNIST
# ConvNet's two pools were 14 of its 35 ops at batch 1). The gradient finds the indices then:
# the scatter the gather's gradient was, ties and NaN routed by max_pool2d_indices' rule.
def _max_pool2d_np(x, kernel, stride, padding, dilation, ceil_mode):
    oh, ow = _max_pool2d_indices_rule(x.shape, kernel, stride, padding, dilation, ceil_mode)[2:]
    fast = kernels.active().max_pool2d(x, kernel, stride, padding, dilation, (oh, ow))
    if fast is not None:  # inside Pyodide, a WebAssembly kernel (ops/kernels.py)
        return fast
    return _window_max(*_pool_windows(x, kernel, stride, padding, dilation, oh, ow))


def _max_pool2d_grad(g, y, x, **attrs):
    def dx():
        from ..tensor import Tensor
        n, c, h, w = x.shape
        idx = _run("max_pool2d_indices", x, **attrs)
        # each plane's indices moved to its offset in x flattened whole: NumPy's scatter-add
        # is several times faster on one dim than on three
        size = n * c * h * w
        start = np.arange(n * c, dtype=np.int64 if size >= 2**31 else np.int32) * (h * w)
        where = idx + Tensor.from_data(start.reshape(n, c, 1, 1), backend=g.backend)
        return g.new_zeros((size,)).scatter(0, where.reshape(where.numel()),
                                            g.reshape(g.numel())).reshape(x.shape)
    return (dx,)


op("max_pool2d", WINDOW, _max_pool2d_np, None, _max_pool2d_grad, saves=(0,),
   shape=_max_pool2d_indices_rule, dtype=_same_dtype, dtypes=NUMBERS)


# ---- batch_norm: training-mode batch normalisation ----------------------------------------------
# y = (x - mean) / sqrt(var + eps) * w + b, where mean and var are x's own statistics over the
# dims where they have size 1 (BatchNorm in training mode computes them, without a gradient, and
# passes them in). The gradient in x is the full one, through the statistics too, so they get
# none of their own: as composites, BatchNorm's forward and backward ran ~19 passes over every
# activation (its mean and variance differentiated op by op); this op's backward runs 8. Under
# create_graph the rule recomputes the statistics from x with ember ops, so higher derivatives
# see them as functions of x too.
def batch_stats(x, dims):
    """x's mean over `dims`, x minus it, and x's (biased) variance, kept with size-1 dims, in
    ember ops: what BatchNorm passes to batch_norm (or, without an affine, differentiates
    itself), and what batch_norm's gradient recomputes under create_graph. `x + -mean`, not
    `x - mean`: the gradient reaching mean is then negated once, after the sum."""
    mean = x.mean_dim(dims)
    xc = x + -mean
    return mean, xc, (xc * xc).mean_dim(dims)


def _batch_norm_rule(xs, ms, vs, ws, bs, eps):
    if ms != vs:
        raise ShapeError(f"batch_norm: mean {S.fmt(ms)} and var {S.fmt(vs)} must have one shape")
    out = S.broadcast("batch_norm", xs, ms, vs, ws, bs)
    if out != tuple(xs) or len(ms) > len(xs):
        raise ShapeError(f"batch_norm: mean {S.fmt(ms)}, weight {S.fmt(ws)} and bias {S.fmt(bs)} "
                         f"must broadcast into the input {S.fmt(xs)} (e.g. [1, C, 1, 1] for "
                         "[N, C, H, W])")
    return out


def _batch_norm_np(x, mean, var, w, b, eps):
    # x * scale + shift, the statistics folded per channel first: two passes over x instead of
    # three ((x - mean) * scale + b), and PyTorch's own CPU form (input * alpha + beta)
    scale = w / np.sqrt(var + x.dtype.type(eps))
    k = kernels.active()
    out = k.multiply(x, scale)
    return k.add(out, b - mean * scale, out=out)


def _batch_norm_grad(g, y, x, mean, var, w, b, eps):
    ms = (1,) * (x.ndim - mean.ndim) + mean.shape
    dims = tuple(d for d, m in enumerate(ms) if m == 1)
    count = S.prod(x.shape[d] for d in dims)
    from ..autodiff import is_grad_enabled  # (autodiff imports the op table)
    # create_graph with x tracked: the statistics as functions of x (higher orders). A plain
    # backward runs its rules with grad mode on too, but on the inner backend: x untracked
    if is_grad_enabled() and x.is_require_grad():
        mean, xc, var = batch_stats(x, dims)
    else:
        xc = x - mean  # (not sum(g x) - mean sum(g): that cancels when the mean is large)
    invstd = (var + eps).sqrt().recip()
    sg = g.sum_dim(dims)
    sg_xhat = (g * xc).sum_dim(dims) * invstd  # the sum of g * xhat
    # dx = a (g - sg / n - xhat sg_xhat / n), a = w invstd, written as a g + k xc + c
    a = w * invstd
    k = a * invstd * sg_xhat * (-1.0 / count)
    return (g * a + xc * k + a * sg * (-1.0 / count), None, None, sg_xhat, sg)


op("batch_norm", MAP, _batch_norm_np,
   "((({0} - {1}) * inverseSqrt({2} + {dtype}({eps}))) * {3} + {4})", _batch_norm_grad,
   saves=(0, 1, 2, 3), shape=_batch_norm_rule, dtype=one_dtype("batch_norm"), dtypes=FLOATS)
