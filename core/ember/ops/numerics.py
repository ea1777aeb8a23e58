"""NumPy implementations that NumPy itself lacks (erf), kept apart from the op table.

erf: NumPy has no erf, and the reference must not need SciPy (it also runs in Pyodide). Two
polynomial pieces, fitted here as Chebyshev series against mpmath and stored in power form:
  |x| < 1:   erf(x) = x * P(2x^2 - 1)
  |x| >= 1:  erf(x) = 1 - exp(-x^2) * Q(2.4/x - 1.4) / x      (x clipped to 6, where erf = 1)
float32 computes in float32 with short polynomials (max relative error 1.7e-7, ~1.5 ulp);
float64 with longer ones (max relative error 1.3e-15). tests/ops/test_numerics.py checks both
against math.erf.
"""

import numpy as np

_F32_SMALL = (
    0.9654687771455295, -0.14053609728507271, 0.019851804694516934, -0.002285419510035018,
    0.00021935975757097478, -1.766909966932193e-05,
)
_F32_LARGE = (
    0.4966664864273349, -0.07128283974348118, -0.0019369806285446183, 0.006218984719111614,
    -0.0026682823558289654, 0.0006447148000861707, -6.837164435285452e-06,
    -0.00010086010400748648, 6.7571489224622e-05, -1.7919092717980977e-05,
    -4.6491713889393094e-07,
)
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
    acc = np.full_like(s, coeffs[-1])
    for c in coeffs[-2::-1]:
        acc *= s
        acc += c
    return acc


def erf(x, out=None):
    shape = x.shape
    x = x.reshape(-1)  # 1-d: NumPy turns 0-d results into scalars, which take no out=
    small, large = (_F32_SMALL, _F32_LARGE) if x.dtype == np.float32 else (_F64_SMALL, _F64_LARGE)
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
