"""The op table's optimizer primitive: Adam's whole update of one parameter as one op.

Declared like every other primitive (see ops/__init__.py); imported by ops/__init__.py.

adam(x, g, s, w, beta2, bc2_sqrt, eps, step) -> [3, *x.shape] = (x', m', v')
    s is the previous step's result (zeros before the first step): its rows 1 and 2 are the
    moments m and v (row 0, the parameter as it was, is not read: x is, so a parameter changed
    between steps is updated from its new value). The scalars are Python numbers; they are
    inputs, not attrs, because step-dependent values would otherwise make a new GPU kernel per
    step. torch.optim.Adam's arithmetic, each step rounded in the parameter's dtype (torch's
    CPU kernels fuse some multiply-adds, so the two agree to an ulp or so, not bit for bit):

        m' = lerp(m, g, w)                       (w = 1 - beta1; torch's two-sided lerp)
        v' = v * beta2 + (1 - beta2) * g * g     (addcmul)
        x' = x + step * m' / (sqrt(v') / bc2_sqrt + eps)   (addcdiv; step = -lr / (1 - beta1^t))

One op instead of twelve per parameter and step: the MNIST benchmark's 16 parameters ran 192
ops (most of the optimizer's time was per-op overhead on small tensors, and temporaries on the
large ones). No gradient: optimizers run under no_grad.
"""

import numpy as np

from .. import shape as S
from ..errors import ShapeError
from . import kernels
from .table import FLOATS, UPDATE, one_dtype, op


def _adam_rule(xs, gs, ss, *scalars):
    if gs != xs or ss != (3,) + tuple(xs):
        raise ShapeError(f"adam: the gradient {S.fmt(gs)} must have the parameter's shape "
                         f"{S.fmt(xs)}, and the state {S.fmt(ss)} must be [3, *parameter shape] "
                         "(the previous step's result, or zeros)")
    return ss


_one_dtype = one_dtype("adam")


def _adam_dtype(x, g, s, *scalars):
    return _one_dtype(x, g, s)  # (the scalars have no dtype)


# blocks of this many elements: the dozen passes over a block stay in the CPU's cache (the
# MNIST model's 371k-weight layer: ~1.6 ms in one piece, measured)
_BLOCK = 1 << 14


def _adam_np(x, g, s, w, beta2, bc2_sqrt, eps, step):
    t = x.dtype.type
    # scalars in the parameter's dtype, as torch's kernels take them (1 - w in that dtype too)
    w, small = t(w), abs(w) < 0.5
    scalars = (w if small else t(1) - w, small, t(1 - beta2), t(beta2), t(bc2_sqrt), t(eps),
               t(step))
    out = np.empty(s.shape, dtype=x.dtype)
    flat = [np.ascontiguousarray(a).reshape(-1)  # (a weight's gradient is often transposed)
            for a in (x, g, s[1, ...], s[2, ...])] + list(out.reshape(3, -1))
    if kernels.active().adam(*flat, *scalars):  # natively: one pass of C
        return out
    tmp = np.empty(min(_BLOCK, flat[0].size), dtype=x.dtype)
    for i in range(0, flat[0].size, _BLOCK):
        block = [a[i:i + _BLOCK] for a in flat]
        _adam_block(*block, tmp[:block[0].size], *scalars)
    return out


def _adam_block(x, g, m0, v0, new_x, m, v, tmp, w, small, c2, beta2, bc2_sqrt, eps, step):
    np.subtract(g, m0, out=m)  # lerp: m0 + w (g - m0) below w = 0.5, else g - (g - m0)(1 - w)
    m *= w
    if small:
        m += m0
    else:
        np.subtract(g, m, out=m)
    np.multiply(g, c2, out=v)
    v *= g
    v += np.multiply(v0, beta2, out=tmp)
    np.sqrt(v, out=new_x)  # the denominator, in the result's row until the division
    new_x /= bc2_sqrt
    new_x += eps
    np.divide(np.multiply(m, step, out=tmp), new_x, out=new_x)
    new_x += x


op("adam", UPDATE, _adam_np, None, None, shape=_adam_rule, dtype=_adam_dtype, dtypes=FLOATS)
