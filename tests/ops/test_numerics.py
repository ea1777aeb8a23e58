"""ember.ops.numerics.erf (the NumPy reference's erf, NumPy has none) against math.erf.

Promised accuracy (numerics.py): float32 max relative error 3.6e-7, float64 1.3e-15; checked
here at 4e-7 and 2e-15 wherever the true value is a normal number.

These test numerics' own NumPy formulas: called outside an NdArray op, they run with NumPy's
kernel set (ember.ops.kernels), never the native C kernels (tests/backends/test_native.py).
"""

import math

import numpy as np
import pytest

from ember.ops import kernels, numerics
from ember.ops.numerics import erf, gelu


@pytest.fixture(autouse=True)
def numpy_formulas():
    assert kernels.active() is kernels.NUMPY

BOUND = {np.float32: 4e-7, np.float64: 2e-15}
exact_erf = np.vectorize(math.erf, otypes=[float])


def _magnitudes(dtype):
    """A dense grid where erf bends, tiny and huge magnitudes, both signs."""
    info = np.finfo(dtype)
    grid = np.linspace(0, 7, 140_001)
    logs = np.logspace(math.log10(info.tiny), math.log10(info.max) - 0.01, 20_001)
    near_one = np.nextafter(np.array([1.0, 6.0], dtype), [-np.inf, np.inf])  # branch edges
    edges = [1.0, 6.0, info.tiny, info.eps, 1e-20, 1e-10, 1e-5, 0.5, 3.0, 27.0, 1e10,
             info.max]
    positive = np.concatenate([grid, logs, near_one, edges]).astype(dtype)
    return np.concatenate([positive, -positive])


def _relative_errors(x):
    got = erf(x)
    assert got.dtype == x.dtype and got.shape == x.shape
    want = exact_erf(x.astype(np.float64))
    normal = np.abs(want) >= np.finfo(x.dtype).tiny
    return np.abs(got[normal].astype(np.float64) - want[normal]) / np.abs(want[normal])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_erf_relative_error(dtype):
    errors = _relative_errors(_magnitudes(dtype))
    worst = errors.max()
    assert worst <= BOUND[dtype], f"max relative error {worst:.3g} > {BOUND[dtype]:g}"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_erf_random_magnitudes(dtype):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(0, 2, 50_000), rng.uniform(-1, 1, 50_000)]).astype(dtype)
    assert _relative_errors(x).max() <= BOUND[dtype]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_erf_special_values(dtype):
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0], dtype=dtype)
    got = erf(x)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got[:2], [1.0, -1.0])
    assert np.isnan(got[2])
    assert got[3] == 0 and not np.signbit(got[3])
    assert got[4] == 0 and np.signbit(got[4]), "erf(-0.0) must be -0.0, as math.erf"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_erf_subnormals(dtype):
    """Subnormal results cannot hold a relative error bound; they must be within one step."""
    step = np.finfo(dtype).smallest_subnormal
    x = (np.arange(1, 2000, 7) * step).astype(dtype)
    x = np.concatenate([x, -x])
    got = erf(x).astype(np.float64)
    want = exact_erf(x.astype(np.float64))
    assert np.all(np.abs(got - want) <= float(step))
    assert np.all(np.sign(got) == np.sign(x))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_erf_is_odd_bounded_and_monotonic(dtype):
    x = np.linspace(0, 7, 70_001).astype(dtype)
    got = erf(x)
    np.testing.assert_array_equal(erf(-x), -got)
    assert np.all(np.abs(got) <= 1)
    # float32 uses one rational function (3x faster than the two pieces float64 uses); near 1
    # its rounding wiggles by up to 3 ulp, so "never decreases" holds up to 4 ulp of 1.0
    slack = 4 * np.finfo(dtype).eps if dtype == np.float32 else 0
    assert np.all(np.diff(got) >= -slack), "erf must not decrease"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_erf_into_out_matches(dtype):
    """The backend's buffer-reuse path (out=) gives the same values, in the given buffer."""
    x = np.linspace(-7, 7, 1001).astype(dtype)
    out = x.copy()
    result = erf(out, out=out)
    assert result is out
    np.testing.assert_array_equal(out, erf(x))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_erf_of_0d_arrays(dtype):
    """0-d arrays are tensors of shape (): the result is a 0-d array of the same dtype."""
    for value in (0.3, -2.5, 7.0):
        got = erf(np.array(value, dtype=dtype))
        assert isinstance(got, np.ndarray) and got.shape == () and got.dtype == dtype
        want = math.erf(float(dtype(value)))
        assert abs(float(got) - want) <= BOUND[dtype] * abs(want)


# GELU: float32 has its own rescaled rational function (numerics._gelu32), float64 goes
# through erf; both run block by block over large arrays
exact_gelu = np.vectorize(lambda v: v * (1 + math.erf(v / math.sqrt(2))) / 2, otypes=[float])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gelu_matches_exact_within_conformance_tolerance(dtype):
    x = np.concatenate([np.linspace(-12, 12, 240_001), [0.0, 1e-30, -1e-30, 5.6568, -5.6569]])
    got = gelu(x.astype(dtype)).astype(np.float64)
    want = exact_gelu(x.astype(dtype).astype(np.float64))
    rtol, atol = (1e-5, 1e-6) if dtype == np.float32 else (1e-12, 1e-14)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gelu_blocks_and_out_match_one_piece(dtype, monkeypatch):
    x = np.random.default_rng(0).standard_normal((3, 50_000)).astype(dtype)
    blocked = gelu(x)
    out = x.copy()
    assert gelu(out, out=out) is out
    np.testing.assert_array_equal(out, blocked)
    monkeypatch.setattr(numerics, "_BLOCK", 1 << 40)
    np.testing.assert_array_equal(gelu(x), blocked)
    assert gelu(np.array(0.0, dtype)).shape == ()
    assert np.signbit(gelu(np.array(-0.0, dtype)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gelu_grad_at_zero_beside_nan(dtype):
    """A NaN in a block hides its tiny |x| from the min gelu_grad looks for them with: the
    zeros there still get Phi(0) = 1/2, the NaN stays NaN."""
    x = np.array([0.0, np.nan, -0.0, 1e-30, 1.0], dtype)
    got = numerics.gelu_grad(np.ones_like(x), x, gelu(x))
    assert np.isnan(got[1])
    np.testing.assert_allclose(got[[0, 2, 3]], 0.5, rtol=1e-6)
