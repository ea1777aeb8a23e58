"""NumPy implementations that NumPy itself lacks (erf), kept apart from the op table.

erf: NumPy has no erf, and the reference must not need SciPy (it also runs in Pyodide).
Coefficients were fitted against mpmath.
- float32: one rational function, x clipped to [-4, 4] (erf(4) rounds to 1 in float32):
  erf(x) = x * P(x^2/16) / Q(x^2/16); max relative error 3.6e-7 (~3 ulp), in ~25 array
  passes (GELU calls it on every activation: speed matters here).
- float64: two polynomial pieces (Chebyshev fits stored in power form), max relative error
  1.3e-15:
    |x| < 1:   erf(x) = x * P(2x^2 - 1)
    |x| >= 1:  erf(x) = 1 - exp(-x^2) * Q(2.4/x - 1.4) / x   (x clipped to 6, where erf = 1)
tests/ops/test_numerics.py checks both against math.erf.
"""

import math

import numpy as np

from . import kernels

_F64_SMALL = (
    0.9654687386698678, -0.14053608902272097, 0.0198524966889842, -0.0022854855610637903,
    0.0002175171560409578, -1.7537169894116833e-05, 1.223382739285686e-06,
    -7.511465250744941e-08, 4.1157878049976115e-09, -2.045669745115232e-10,
    9.193960423047631e-12,
)
_F64_LARGE = (
    0.4966664851259387, -0.07128287792546747, -0.001936888067705192, 0.0062197175869440945,
    -0.002669343030691453, 0.0006408677659566164, -2.439038926010525e-06,
    -9.303490207922705e-05, 5.951650065950405e-05, -2.3854275068090476e-05,
    5.8989421621373886e-06, 2.0818966859888403e-07, -1.285479223016094e-06,
    9.377759049079888e-07, -4.5339514932207406e-07, 1.31582874020987e-07,
    -1.3736534401556093e-08, 1.1539718175583543e-08, 2.374977768831144e-09,
    -2.524482677437664e-08, 1.3660675394764661e-08, 2.582663194828324e-09,
    -2.3766650713411555e-09,
)


def _horner(coeffs, s):
    acc = s * s.dtype.type(coeffs[-1])  # (not a filled array times s: one pass fewer)
    acc += s.dtype.type(coeffs[-2])
    for c in coeffs[-3::-1]:
        acc *= s
        acc += s.dtype.type(c)
    return acc


# public: the Wgpu backend's erf kernel is generated from these
ERF_F32_P = (1.128379163749032, 3.0301937206253022, 13.464926782513356, 15.232847411377294,
          18.563795714604783, 2.1485042061348785)
ERF_F32_Q = (1.0, 8.018767005029359, 29.100295665095736, 60.924948600828486,
          75.38561983554041, 39.84494199184339)


def _erf32(x, out):
    one = np.float32(1)
    xc = np.clip(x.reshape(-1), np.float32(-4), np.float32(4))  # 1-d: no 0-d scalars
    t = np.multiply(xc, xc)
    t *= np.float32(1 / 16)
    num, den = _horner(ERF_F32_P, t), _horner(ERF_F32_Q, t)
    num *= xc
    num /= den
    np.clip(num, -one, one, out=num)  # the fit overshoots 1 by an ulp near x = 4
    if out is None:
        return num.reshape(x.shape)
    np.copyto(out, num.reshape(x.shape))
    return out


# GELU in float32 uses the same fit rescaled to x: Phi(x) = (1 + erf(x / sqrt(2))) / 2 is
# 1/2 + x * P(x^2) / Q(x^2) with P's coefficients times 1/(2 sqrt(2) 32^k) and Q's times
# 1/32^k, x clipped to [-4 sqrt(2), 4 sqrt(2)]. P and Q are summed from the powers of x^2 by
# one [2, 6] x [6, n] product (all their terms are positive: no cancellation) instead of two
# Horner chains: ~12 passes instead of ~30 for x * (1 + erf(x / sqrt(2))) / 2, ~25% faster,
# with an error within erf's (tests/ops/test_numerics.py checks it)
_GELU_F32_PQ = np.array([[p / (2 * math.sqrt(2) * 32 ** k) for k, p in enumerate(ERF_F32_P)],
                         [q / 32 ** k for k, q in enumerate(ERF_F32_Q)]], dtype=np.float32)


def _gelu32(x, out):
    flat = x.reshape(-1)  # 1-d: no 0-d scalars
    limit = np.float32(4 * math.sqrt(2))
    xc = np.clip(flat, -limit, limit)
    powers = np.empty((_GELU_F32_PQ.shape[1], flat.size), dtype=np.float32)
    powers[0] = 1
    np.multiply(xc, xc, out=powers[1])
    for k in range(2, len(powers)):
        np.multiply(powers[k - 1], powers[1], out=powers[k])
    cdf, den = kernels.active().matmul(_GELU_F32_PQ, powers)
    cdf *= xc
    cdf /= den
    cdf += np.float32(0.5)
    np.clip(cdf, np.float32(0), np.float32(1), out=cdf)  # as erf's clip to [-1, 1]
    if out is None:
        cdf *= flat
        return cdf.reshape(x.shape)
    np.multiply(cdf, flat, out=out.reshape(-1))  # (the blocks' out: flat views)
    return out


# erf and GELU are chains of ~25 NumPy passes: run over a whole activation, every pass streams
# megabytes of temporaries through memory; block by block, the temporaries of a block stay in
# the CPU's cache (2-3x faster on the MNIST model's activations; 32768 elements measured best)
_BLOCK = 1 << 15


def _blocked(fn, x, out, *more):
    """fn(x, *more, out) computed block by block over contiguous x, out and the arrays `more`
    of x's shape (else in one piece)."""
    n = x.size
    if n <= 2 * _BLOCK or not x.flags.c_contiguous or (
            out is not None and not out.flags.c_contiguous) or any(
            m.shape != x.shape or not m.flags.c_contiguous for m in more):
        return fn(x, *more, out)
    result = np.empty(x.shape, dtype=x.dtype) if out is None else out
    xs, rs, ms = x.reshape(-1), result.reshape(-1), [m.reshape(-1) for m in more]
    for i in range(0, n, _BLOCK):
        fn(xs[i:i + _BLOCK], *(m[i:i + _BLOCK] for m in ms), rs[i:i + _BLOCK])
    return result


def gelu(x, out=None):
    """x * (1 + erf(x / sqrt(2))) / 2, the exact GELU."""
    fast = kernels.active().gelu(x, out)
    if fast is not None:
        return fast
    return _blocked(_gelu, x, out)


def _gelu(x, out):
    if x.dtype == np.float32:
        return _gelu32(x, out)
    c = _erf(x * x.dtype.type(0.7071067811865476), None)
    c += 1
    c *= x
    c *= 0.5
    if out is None:
        return c
    np.copyto(out, c)
    return out


INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)  # (ops/definitions' GELU gradient rules too)


def gelu_grad(g, x, y, out=None):
    """g * GELU'(x) = g * (Phi(x) + x phi(x)), Phi read from y = gelu(x) = x Phi(x) (one
    division instead of erf's ~25 passes). y / x is exact to an ulp or two wherever y is a
    normal number; below that (|x| < ~1e-19 in float32, where x * x underflows past the
    smallest normal, and at x = 0), Phi's series 1/2 + x / sqrt(2 pi) is exact to the dtype's
    precision. Blocked like gelu: ~9 passes that stay in cache, where the same formula as
    ember ops ran 11 passes over memory with a temporary each (~5x slower, measured)."""
    fast = kernels.active().gelu_grad(g, x, out)
    if fast is not None:
        return fast
    if g.shape != x.shape or y.shape != x.shape:
        g, x, y = np.broadcast_arrays(g, x, y)
    return _blocked(_gelu_grad, x, out, g, y)


def _gelu_grad(x, g, y, out):
    t = x.dtype.type
    xphi = np.multiply(x, x)
    # one min over x * x finds the tiny |x| (a compare and an any() over a mask cost two
    # passes of every block, to find values that activations almost never hold); a NaN
    # makes the min NaN: that block takes the mask too
    tiny = x.size and not xphi.min() >= np.finfo(x.dtype).tiny
    xphi *= t(-0.5)
    np.exp(xphi, out=xphi)
    xphi *= x
    xphi *= t(INV_SQRT_2PI)
    cdf = np.divide(y, x, out=out)
    if tiny:
        small = x * x < np.finfo(x.dtype).tiny
        cdf[small] = t(0.5) + x[small] * t(INV_SQRT_2PI)
    cdf += xphi
    cdf *= g
    return cdf


def erf(x, out=None):
    return _blocked(_erf, x, out)


def _erf(x, out):
    if x.dtype == np.float32:
        return _erf32(x, out)
    shape = x.shape
    x = x.reshape(-1)  # 1-d: NumPy turns 0-d results into scalars, which take no out=
    small, large = _F64_SMALL, _F64_LARGE
    one = x.dtype.type(1)
    ax = np.abs(x)
    t = np.minimum(ax, one)
    t *= t
    t *= 2
    t -= 1
    near = _horner(small, t)
    near *= x
    xb = np.clip(ax, one, x.dtype.type(6))
    s = np.divide(2.4, xb, dtype=x.dtype)
    s -= 1.4
    far = _horner(large, s)
    far /= xb
    e = np.square(xb)
    np.negative(e, out=e)
    np.exp(e, out=e)
    far *= e
    np.subtract(one, far, out=far)
    np.copysign(far, x, out=far)
    result = np.where(ax < one, near, far).reshape(shape)
    if out is None:
        return result
    np.copyto(out, result)
    return out
