"""Dtypes NumPy lacks (bfloat16, float8), and the casts a load may make into a parameter.

bfloat16 is the top half of a float32 and float8_e5m2 the top half of a float16, so both widen
exactly with a shift; float8_e4m3fn goes through a 256-entry table. The results are exact.

A load casts a stored tensor into the parameter's dtype when no value changes (int64 -> int32
in range, int -> float where exact, ...), and between float dtypes always (rounding a float64
or reading a float16/bfloat16 is what loading weights means), except where a finite value would
become infinite. Anything else is refused with the reason: the caller lists it in its report.
"""

import warnings

import numpy as np


def bf16_to_f32(bits):
    """bfloat16 values stored as uint16 bit patterns -> float32 (exact)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f8_e5m2_to_f32(bits):
    """float8_e5m2 bit patterns (uint8) -> float32 (exact: they are float16's top byte)."""
    return (bits.astype(np.uint16) << 8).view(np.float16).astype(np.float32)


def _e4m3fn_table():
    b = np.arange(256)
    sign = np.where(b >> 7, -1.0, 1.0)
    exp, man = (b >> 3) & 0xF, (b & 7).astype(np.float64)
    value = np.where(exp == 0, man / 8 * 2.0 ** -6, (1 + man / 8) * 2.0 ** (exp - 7))
    value = np.where((exp == 0xF) & (man == 7), np.nan, value)  # "fn": no infinities
    return (sign * value).astype(np.float32)


_E4M3FN = _e4m3fn_table()


def f8_e4m3fn_to_f32(bits):
    """float8_e4m3fn bit patterns (uint8) -> float32 (exact)."""
    return _E4M3FN[bits]


def fit(array, want):
    """`array` as NumPy dtype `want`: (converted array, None), or (None, why it is refused)."""
    want = np.dtype(want)
    src = array.dtype
    if src == want:
        return array, None
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ComplexWarning: checked below, not warned about
        out = array.astype(want)
        if src.kind == "f" and want.kind == "f":
            bad = np.isinf(out) & np.isfinite(array)
            if bad.any():
                worst = float(np.abs(array[bad]).max())
                return None, (f"a value of magnitude {worst:g} would overflow {want.name} "
                              "(lossy cast refused)")
            return out, None
        back = out.astype(src)
    same = np.array_equal(back, array, equal_nan=src.kind in "fc")
    if same:
        return out, None
    return None, _why(array, want) + " (lossy cast refused)"


def _why(array, want):
    src = array.dtype
    if src.kind in "iub" and want.kind in "iu":
        info, low, high = np.iinfo(want), array.min(), array.max()
        values = (f"the value {low} does not" if low == high
                  else f"values from {low} to {high} do not all")
        return f"{values} fit {want.name} ([{info.min}, {info.max}])"
    if src.kind == "c":
        return "complex values with a non-zero imaginary part have no real dtype"
    if src.kind == "f" and want.kind in "iu":
        return f"float values that are not whole numbers in {want.name}'s range would change"
    if want.kind == "b":
        return "values other than 0 and 1 would become True"
    if want.kind == "f":
        return f"integers this large are not exact in {want.name}"
    return f"values would change when cast to {want.name}"
