"""Conformance cases for the neural-network primitives (ember/ops/nn.py), added to CASES by
cases.py. References are explicit loops over output positions and kernel offsets in float64
(max_pool2d_indices: PyTorch's scan, element by element), independent of the op table's
im2col implementations. The user-facing ops run through ember.nn.functional; conv2d_weight
(a gradient, no user API) and the padding forms only gradients use (asymmetric, negative)
run the primitive itself.
"""

import numpy as np

from ember import DTypeError, ShapeError
from ember.nn import functional as F
from ember.ops import OPS
from ember.tensor import _apply

from .cases import F32, F64, I32, I64, A, Case, add, err, lit


def prim(name, **attrs):
    """Call the primitive `name` on Tensors with normalised attrs."""
    return lambda *ts: _apply(OPS[name], *ts, **attrs)


def _padded(x, pads):
    """x [N, C, H, W] zero-padded by ((top, bottom), (left, right)); negative amounts crop.
    Built index by index: padded[i] = x[i - top] where that lies inside x."""
    (top, bottom), (left, right) = pads
    n, c, h, w = x.shape
    out = np.zeros((n, c, h + top + bottom, w + left + right))
    for i in range(out.shape[2]):
        for j in range(out.shape[3]):
            if 0 <= i - top < h and 0 <= j - left < w:
                out[:, :, i, j] = x[:, :, i - top, j - left]
    return out


def conv2d_ref(stride, pads, dilation, groups):
    def ref(x, w):
        xp = _padded(x.astype(np.float64), pads)
        w = w.astype(np.float64)
        o, cg, kh, kw = w.shape
        oh = (xp.shape[2] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
        ow = (xp.shape[3] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
        out = np.zeros((x.shape[0], o, oh, ow))
        og = o // groups
        for oc in range(o):
            chans = slice(oc // og * cg, (oc // og + 1) * cg)
            for i in range(oh):
                for j in range(ow):
                    for a in range(kh):
                        for b in range(kw):
                            pixel = xp[:, chans, i * stride[0] + a * dilation[0],
                                       j * stride[1] + b * dilation[1]]
                            out[:, oc, i, j] += pixel @ w[oc, :, a, b]
        return out.astype(x.dtype)
    return ref


def conv_transpose2d_ref(stride, pads, dilation, groups):
    """Each input pixel scatters weight * value into the full output; padding crops it."""
    def ref(x, w):
        dtype = x.dtype
        x, w = x.astype(np.float64), w.astype(np.float64)
        n, c, h, wd = x.shape
        _, og, kh, kw = w.shape
        cg = c // groups
        (top, bottom), (left, right) = pads
        fh = (h - 1) * stride[0] + dilation[0] * (kh - 1) + 1
        fw = (wd - 1) * stride[1] + dilation[1] * (kw - 1) + 1
        full = np.zeros((n, og * groups, fh, fw))
        for g in range(groups):
            xs, outs = slice(g * cg, (g + 1) * cg), slice(g * og, (g + 1) * og)
            for i in range(h):
                for j in range(wd):
                    for a in range(kh):
                        for b in range(kw):
                            full[:, outs, i * stride[0] + a * dilation[0],
                                 j * stride[1] + b * dilation[1]] += x[:, xs, i, j] @ w[xs, :, a, b]
        # cropping by padding is padding by minus the amount
        return _padded(full, ((-top, -bottom), (-left, -right))).astype(dtype)
    return ref


def conv2d_weight_ref(kernel, stride, pads, dilation, groups):
    def ref(x, g):
        xp = _padded(x.astype(np.float64), pads)
        g = g.astype(np.float64)
        o, oh, ow = g.shape[1:]
        cg, og = x.shape[1] // groups, o // groups
        out = np.zeros((o, cg) + kernel)
        for oc in range(o):
            chans = slice(oc // og * cg, (oc // og + 1) * cg)
            for a in range(kernel[0]):
                for b in range(kernel[1]):
                    for i in range(oh):
                        for j in range(ow):
                            pixel = xp[:, chans, i * stride[0] + a * dilation[0],
                                       j * stride[1] + b * dilation[1]]
                            out[oc, :, a, b] += g[:, oc, i, j] @ pixel
        return out.astype(x.dtype)
    return ref


def max_pool2d_indices_ref(kernel, stride, padding, dilation, ceil_mode):
    """PyTorch's CPU kernel, one window at a time: scan the real (unpadded) positions in
    order; a larger value or a NaN takes over."""
    def size(n, k, s, p, d):
        out = (n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
        return out - 1 if ceil_mode and (out - 1) * s >= n + p else out

    def ref(x):
        n, c, h, w = x.shape
        oh, ow = (size(*a) for a in zip((h, w), kernel, stride, padding, dilation))
        out = np.zeros((n, c, oh, ow), dtype=np.int64)
        for b, ch, i, j in np.ndindex(n, c, oh, ow):
            best, where = None, None
            for a in range(kernel[0]):
                for q in range(kernel[1]):
                    r = i * stride[0] - padding[0] + a * dilation[0]
                    s = j * stride[1] - padding[1] + q * dilation[1]
                    if not (0 <= r < h and 0 <= s < w):
                        continue
                    v = x[b, ch, r, s]
                    if best is None or v > best or v != v:
                        best, where = v, r * w + s
            out[b, ch, i, j] = where
        return out.astype(I32)
    return ref


# ---- conv2d ---------------------------------------------------------------------------------
CONV2D = [  # id, x, w, stride, padding (F's argument), dilation, groups, the padding pairs
    ("basic", A((2, 3, 5, 6)), A((4, 3, 3, 3)), 1, 0, 1, 1, 0),
    ("stride2-pad1-f64", A((2, 2, 7, 6), F64), A((3, 2, 3, 3), F64), 2, 1, 1, 1, 1),
    ("rect-kernel-stride-pair", A((1, 2, 6, 7)), A((2, 2, 2, 3)), (2, 1), (0, 2), 1, 1, (0, 2)),
    ("dilation2", A((2, 2, 7, 7)), A((3, 2, 3, 2)), 1, 1, (2, 3), 1, 1),
    ("groups2", A((2, 4, 5, 5)), A((6, 2, 3, 3)), 1, 1, 1, 2, 1),
    ("depthwise-f64", A((1, 3, 6, 5), F64), A((3, 1, 2, 2), F64), 2, 0, 1, 3, 0),
    ("groups-stride-dilation", A((2, 4, 8, 7)), A((4, 2, 2, 3)), (2, 3), 1, 2, 2, 1),
    ("1x1", A((3, 4, 3, 2)), A((5, 4, 1, 1)), 1, 0, 1, 1, 0),
    ("kernel-equals-input", A((2, 2, 3, 4)), A((3, 2, 3, 4)), 1, 0, 1, 1, 0),
    ("same-odd", A((1, 2, 5, 4)), A((3, 2, 3, 3)), 1, "same", 1, 1, 1),
    ("same-even-kernel", A((1, 2, 5, 6)), A((2, 2, 2, 4)), 1, "same", (2, 1), 1,
     ((1, 1), (1, 2))),
    ("valid", A((1, 1, 4, 4)), A((1, 1, 2, 2)), 1, "valid", 1, 1, 0),
    ("batch0", A((0, 2, 4, 4)), A((3, 2, 3, 3)), 1, 0, 1, 1, 0),
]


def _pairs(p):
    if isinstance(p, int):
        return ((p, p), (p, p))
    if isinstance(p[0], int):
        return ((p[0], p[0]), (p[1], p[1]))
    return p


def _two(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _conv2d_case(id, x, w, stride, padding, dilation, groups, pads):
    ref = conv2d_ref(_two(stride), _pairs(pads), _two(dilation), groups)
    return Case(id, (x, w),
                lambda x, w: F.conv2d(x, w, stride=stride, padding=padding, dilation=dilation,
                                      groups=groups),
                ref, atol=1e-5)


def _conv2d_bias(x, w, b):
    return conv2d_ref((1, 1), ((1, 1), (1, 1)), (1, 1), 1)(x, w) + b[None, :, None, None]


add("conv2d", *(_conv2d_case(*row) for row in CONV2D),
    Case("bias", (A((2, 3, 4, 4)), A((2, 3, 3, 3)), A((2,))),
         lambda x, w, b: F.conv2d(x, w, b, padding=1), _conv2d_bias, atol=1e-5),
    # the op takes the bias as its third input: strided (a view) and grouped
    Case("prim-bias-view-groups", (A((2, 4, 5, 5)), A((6, 2, 3, 3)), A((12,))),
         lambda x, w, b: _apply(OPS["conv2d"], x, w, b[::2], stride=(1, 1),
                                padding=((1, 1), (1, 1)), dilation=(1, 1), groups=2),
         lambda x, w, b: conv2d_ref((1, 1), ((1, 1), (1, 1)), (1, 1), 2)(x, w)
         + b[::2][None, :, None, None], atol=1e-5),
    err("err-prim-bias-shape", (A((1, 2, 4, 4)), A((3, 2, 3, 3)), A((3, 1))),
        lambda x, w, b: _apply(OPS["conv2d"], x, w, b, stride=(1, 1), padding=((0, 0), (0, 0)),
                               dilation=(1, 1), groups=1), match=r"bias must have shape \[3\]"),
    Case("unbatched", (A((3, 4, 4)), A((2, 3, 3, 3))), lambda x, w: F.conv2d(x, w),
         lambda x, w: conv2d_ref((1, 1), _pairs(0), (1, 1), 1)(x[None], w)[0], atol=1e-5),
    Case("promotes-to-f64", (A((1, 2, 4, 4)), A((3, 2, 3, 3), F64)), F.conv2d,
         lambda x, w: conv2d_ref((1, 1), _pairs(0), (1, 1), 1)(x.astype(F64), w)),
    Case("conv1d", (A((2, 3, 9)), A((4, 3, 3))),
         lambda x, w: F.conv1d(x, w, stride=2, padding=1, dilation=2),
         lambda x, w: conv2d_ref((1, 2), ((0, 0), (1, 1)), (1, 2), 1)(
             x[:, :, None], w[:, :, None])[:, :, 0], atol=1e-5),
    Case("conv1d-groups-same", (A((1, 4, 7), F64), A((6, 2, 4), F64)),
         lambda x, w: F.conv1d(x, w, padding="same", groups=2),
         lambda x, w: conv2d_ref((1, 1), ((0, 0), (1, 2)), (1, 1), 2)(
             x[:, :, None], w[:, :, None])[:, :, 0]),
    # what only gradients ask for: negative (cropping) and asymmetric padding
    Case("prim-negative-padding", (A((1, 2, 6, 7)), A((2, 2, 2, 3))),
         prim("conv2d", stride=(2, 1), padding=((1, -1), (-2, 2)), dilation=(1, 1), groups=1),
         conv2d_ref((2, 1), ((1, -1), (-2, 2)), (1, 1), 1), atol=1e-5),
    err("err-channels", (A((1, 3, 5, 5)), A((2, 2, 3, 3))), F.conv2d,
        match=r"conv2d: input \[1, 3, 5, 5\] has 3 channels but weight \[2, 2, 3, 3\]"),
    err("err-kernel-too-large", (A((1, 1, 4, 4)), A((1, 1, 5, 3))), F.conv2d,
        match=r"conv2d: kernel 5x3 .* larger than the padded input 4x4"),
    err("err-dilated-kernel-too-large", (A((1, 1, 4, 4)), A((1, 1, 2, 2))),
        lambda x, w: F.conv2d(x, w, dilation=4), match=r"extent 5x5"),
    err("err-groups-divide-out", (A((1, 4, 5, 5)), A((3, 2, 3, 3))),
        lambda x, w: F.conv2d(x, w, groups=2), match=r"groups=2 does not divide"),
    err("err-weight-rank", (A((1, 1, 4, 4)), A((1, 3, 3))), F.conv2d, match="weight must be 4-D"),
    err("err-input-rank", (A((4, 4)), A((1, 1, 3, 3))), F.conv2d, match=r"input must be 4-D"),
    err("err-bias-shape", (A((1, 2, 4, 4)), A((3, 2, 3, 3)), A((2,))), F.conv2d,
        match=r"bias must have shape \[3\]"),
    err("err-same-strided", (A((1, 1, 4, 4)), A((1, 1, 3, 3))),
        lambda x, w: F.conv2d(x, w, stride=2, padding="same"), match="same"),
    err("err-padding-word", (A((1, 1, 4, 4)), A((1, 1, 3, 3))),
        lambda x, w: F.conv2d(x, w, padding="full"), match="padding"),
    err("err-negative-padding", (A((1, 1, 4, 4)), A((1, 1, 3, 3))),
        lambda x, w: F.conv2d(x, w, padding=-1), match="padding"),
    err("err-zero-stride", (A((1, 1, 4, 4)), A((1, 1, 3, 3))),
        lambda x, w: F.conv2d(x, w, stride=0), match="stride"),
    err("err-int-input", (A((1, 1, 4, 4), I32), A((1, 1, 3, 3))), F.conv2d, DTypeError,
        match="conv2d"),
    err("err-prim-mixed-dtypes", (A((1, 1, 4, 4)), A((1, 1, 3, 3), F64)),
        prim("conv2d", stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1), groups=1),
        DTypeError, match="conv2d"),
    err("err-conv1d-channels", (A((2, 3, 9)), A((4, 2, 3))), F.conv1d,
        match=r"conv1d: input \[2, 3, 9\] has 3 channels"),
    err("err-conv1d-kernel", (A((2, 3, 2)), A((4, 3, 3))), F.conv1d, match="conv1d: kernel 3"))


# ---- conv_transpose2d -----------------------------------------------------------------------
CONV_T = [  # id, x, w, stride, padding, output_padding, dilation, groups
    ("basic", A((2, 3, 4, 5)), A((3, 2, 3, 3)), 1, 0, 0, 1, 1),
    ("stride2-pad1-f64", A((1, 2, 3, 4), F64), A((2, 3, 3, 2), F64), 2, 1, 0, 1, 1),
    ("output-padding", A((2, 2, 3, 3)), A((2, 2, 3, 3)), 2, 1, 1, 1, 1),
    ("rect-pairs", A((1, 2, 4, 3)), A((2, 1, 2, 3)), (3, 2), (1, 0), (2, 1), 1, 1),
    ("dilation-groups", A((2, 4, 3, 4)), A((4, 3, 2, 3)), 2, 1, (1, 0), (2, 1), 2),
    ("depthwise", A((1, 3, 4, 4), F64), A((3, 1, 3, 3), F64), 1, 1, 0, 1, 3),
]


def _conv_t_case(id, x, w, stride, padding, extra, dilation, groups):
    p, e = _two(padding), _two(extra)
    pads = tuple((a, a - b) for a, b in zip(p, e))
    ref = conv_transpose2d_ref(_two(stride), pads, _two(dilation), groups)
    return Case(id, (x, w),
                lambda x, w: F.conv_transpose2d(x, w, stride=stride, padding=padding,
                                                output_padding=extra, groups=groups,
                                                dilation=dilation),
                ref, atol=1e-5)


add("conv_transpose2d", *(_conv_t_case(*row) for row in CONV_T),
    Case("bias-unbatched", (A((2, 3, 3)), A((2, 4, 2, 2)), A((4,))),
         lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2),
         lambda x, w, b: conv_transpose2d_ref((2, 2), _pairs(0), (1, 1), 1)(x[None], w)[0]
         + b[:, None, None], atol=1e-5),
    Case("prim-negative-padding", (A((1, 2, 3, 3)), A((2, 2, 3, 2))),
         prim("conv_transpose2d", stride=(2, 2), padding=((-1, 2), (1, -2)), dilation=(1, 1),
              groups=1),
         conv_transpose2d_ref((2, 2), ((-1, 2), (1, -2)), (1, 1), 1), atol=1e-5),
    err("err-channels", (A((1, 3, 4, 4)), A((2, 2, 3, 3))), F.conv_transpose2d,
        match=r"conv_transpose2d: input \[1, 3, 4, 4\] has 3 channels but weight"),
    err("err-output-padding", (A((1, 2, 4, 4)), A((2, 2, 3, 3))),
        lambda x, w: F.conv_transpose2d(x, w, stride=2, output_padding=2),
        match="output_padding"),
    err("err-output-too-small", (A((1, 1, 2, 2)), A((1, 1, 2, 2))),
        lambda x, w: F.conv_transpose2d(x, w, padding=2), match="at least 1x1"),
    err("err-groups", (A((1, 3, 4, 4)), A((3, 2, 3, 3))),
        lambda x, w: F.conv_transpose2d(x, w, groups=2), match="groups=2 does not divide"))


# ---- conv2d_weight (conv2d's weight gradient) -----------------------------------------------
CONV_W = [  # id, x, g, kernel, stride, padding pairs, dilation, groups
    ("basic", A((2, 3, 5, 6)), A((2, 4, 3, 4)), (3, 3), (1, 1), 0, (1, 1), 1),
    ("stride-pad-f64", A((2, 2, 7, 6), F64), A((2, 3, 4, 3), F64), (3, 3), (2, 2), 1, (1, 1), 1),
    ("stride-remainder", A((1, 2, 7, 8)), A((1, 2, 3, 3)), (2, 3), (2, 2), 0, (1, 1), 1),
    ("dilation-groups", A((2, 4, 7, 7)), A((2, 6, 3, 5)), (3, 2), (1, 1), 0, (2, 2), 2),
    ("negative-padding", A((1, 2, 6, 5)), A((1, 2, 3, 3)), (2, 2), (2, 1), ((1, -1), (0, -1)),
     (1, 1), 1),
]


def _conv_w_case(id, x, g, kernel, stride, padding, dilation, groups):
    pads = _pairs(padding)
    return Case(id, (x, g),
                prim("conv2d_weight", kernel=kernel, stride=stride, padding=pads,
                     dilation=dilation, groups=groups),
                conv2d_weight_ref(kernel, stride, pads, dilation, groups), atol=1e-5)


_W_ATTRS = dict(kernel=(3, 3), stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1),
                groups=1)

add("conv2d_weight", *(_conv_w_case(*row) for row in CONV_W),
    err("err-grad-size", (A((1, 2, 5, 5)), A((1, 3, 4, 4))), prim("conv2d_weight", **_W_ATTRS),
        match=r"conv2d_weight: a 3x3 kernel .* gives 3x3 outputs"),
    err("err-batch", (A((2, 2, 5, 5)), A((1, 3, 3, 3))), prim("conv2d_weight", **_W_ATTRS),
        match="batch"),
    err("err-mixed-dtypes", (A((1, 2, 5, 5), F64), A((1, 3, 3, 3))),
        prim("conv2d_weight", **_W_ATTRS), DTypeError))


# ---- max_pool2d_indices (max_pool2d gathers at them) ----------------------------------------
POOLS = [  # id, x, kernel, stride, padding, dilation, ceil_mode
    ("2x2", A((2, 3, 6, 6)), 2, None, 0, 1, False),
    ("3x3-s2-p1-ties", A((2, 2, 7, 6), F32, -2, 2, whole=True), 3, 2, 1, 1, False),
    ("ceil-mode", A((1, 2, 7, 5), F64), 2, 2, 0, 1, True),
    ("ceil-mode-pad", A((1, 2, 6, 7)), 3, 2, 1, 1, True),
    ("rect-dilation", A((1, 2, 8, 7)), (2, 3), (1, 2), (1, 1), (3, 2), False),
    ("int32", A((2, 2, 5, 5), I32, -3, 3), 2, 1, 0, 1, False),
    ("int64-pad", A((1, 2, 5, 4), I64, -3, 3), 3, 2, 1, 1, True),
    ("nan-inf", lit([[[[np.nan, 1.0, -np.inf], [2.0, np.nan, np.inf], [-np.inf, -np.inf, 0.0]]]],
                    F32), 2, 1, 1, 1, False),
    ("all-minus-inf", lit([[[[-np.inf, -np.inf], [-np.inf, -np.inf]]]], F64), 2, 1, 1, 1,
     False),
]


def _pool_case(id, x, kernel, stride, padding, dilation, ceil_mode, values=False):
    k = _two(kernel)
    ref = max_pool2d_indices_ref(k, k if stride is None else _two(stride), _two(padding),
                                 _two(dilation), ceil_mode)

    def call(t):
        if values:
            return F.max_pool2d(t, kernel, stride, padding, dilation, ceil_mode)
        return F.max_pool2d(t, kernel, stride, padding, dilation, ceil_mode,
                            return_indices=True)[1]

    def at_indices(a):  # the values: each plane gathered at the reference's indices
        idx = ref(a)
        flat = a.reshape(a.shape[0], a.shape[1], -1)
        return np.take_along_axis(flat, idx.reshape(idx.shape[0], idx.shape[1], -1),
                                  -1).reshape(idx.shape)
    return Case(id, (x,), call, at_indices if values else ref)


add("max_pool2d_indices", *(_pool_case(*row) for row in POOLS),
    Case("unbatched", (A((2, 4, 4)),),
         lambda t: F.max_pool2d(t, 2, return_indices=True)[1],
         lambda a: max_pool2d_indices_ref((2, 2), (2, 2), (0, 0), (1, 1), False)(a[None])[0]),
    err("err-padding", (A((1, 1, 5, 5)),), lambda t: F.max_pool2d(t, 3, padding=2),
        match=r"max_pool2d: padding .* at most half"),
    err("err-too-small", (A((1, 1, 2, 2)),), lambda t: F.max_pool2d(t, 3),
        match=r"max_pool2d: .* gives an output of 0x0"),
    err("err-rank", (A((2, 2)),), lambda t: F.max_pool2d(t, 2), match="max_pool2d: input"),
    err("err-bool", (A((1, 1, 2, 2), "bool"),), lambda t: F.max_pool2d(t, 2), DTypeError),
    err("err-kernel", (A((1, 1, 4, 4)),), lambda t: F.max_pool2d(t, 0), ShapeError,
        match="kernel_size"))
add("max_pool2d", *(_pool_case(*row, values=True) for row in POOLS),
    Case("unbatched", (A((2, 4, 4)),), lambda t: F.max_pool2d(t, 2),
         lambda a: a.reshape(2, 2, 2, 2, 2).max(axis=(2, 4))),
    Case("with-indices", (A((2, 2, 6, 5)),),
         lambda t: F.max_pool2d(t, 3, 2, 1, ceil_mode=True, return_indices=True)[0],
         _pool_case("", None, 3, 2, 1, 1, True, values=True).ref),
    err("err-bool", (A((1, 1, 2, 2), "bool"),), lambda t: F.max_pool2d(t, 2), DTypeError))


# ---- batch_norm (training mode: x's own statistics, passed in) ----------------------------------
def _bn_call(eps):
    def call(x, w, b):
        c = x.shape[1]
        shape, dims = (1, c) + (1,) * (x.ndim - 2), (0,) + tuple(range(2, x.ndim))
        mean = x.mean_dim(dims)
        xc = x - mean
        return _apply(OPS["batch_norm"], x, mean, (xc * xc).mean_dim(dims), w.reshape(shape),
                      b.reshape(shape), eps=eps)
    return call


def _bn_ref(eps):
    def ref(x, w, b):
        dims = (0,) + tuple(range(2, x.ndim))
        shape = (1, -1) + (1,) * (x.ndim - 2)
        x64 = x.astype(np.float64)
        mean, var = x64.mean(dims, keepdims=True), x64.var(dims, keepdims=True)
        y = (x64 - mean) / np.sqrt(var + eps) * w.reshape(shape) + b.reshape(shape)
        return y.astype(x.dtype)
    return ref


add("batch_norm",
    Case("nchw", (A((4, 3, 5, 6)), A((3,)), A((3,))), _bn_call(1e-5), _bn_ref(1e-5),
         rtol=1e-4, atol=1e-5),
    Case("nc-f64", (A((7, 5), F64), A((5,), F64), A((5,), F64)), _bn_call(1e-3), _bn_ref(1e-3),
         rtol=1e-12, atol=1e-12),
    Case("ncl-offset-mean", (A((3, 4, 9), F32, 1000, 1004), A((4,)), A((4,))), _bn_call(1e-5),
         _bn_ref(1e-5), rtol=1e-4, atol=2e-3),
    err("err-stat-shapes", (A((2, 3, 4)), A((3,)), A((3,))),
        lambda x, w, b: _apply(OPS["batch_norm"], x, w.reshape(1, 3, 1), b.reshape(3, 1),
                               w.reshape(1, 3, 1), b.reshape(1, 3, 1), eps=1e-5),
        match="mean .* and var .* one shape"),
    err("err-expands-x", (A((2, 3)), A((4, 1, 1)), A((3,))),
        lambda x, w, b: _apply(OPS["batch_norm"], x, w, w, b, b, eps=1e-5),
        match="must broadcast into the input"),
    err("err-mixed-dtypes", (A((2, 3)), A((3,), F64), A((3,))),
        lambda x, w, b: _apply(OPS["batch_norm"], x, b, b, w, b, eps=1e-5), DTypeError,
        match="batch_norm"))
