"""ember.distribution: the global seed and the distributions Tensor.random samples.

Statistical checks use large samples and loose tolerances (many standard errors wide), so
they never flake; the seed makes them deterministic anyway.
"""

import math

import numpy as np
import pytest

import ember
from ember import Distribution, DTypeError, Tensor

N = 200_000


def sample(dist, dtype="float32", n=N):
    return Tensor.random([n], dist, dtype=dtype).to_numpy()


# ---- seed --------------------------------------------------------------------------------
@pytest.mark.parametrize("dist", [
    Distribution.Default, Distribution.Uniform(-2, 3), Distribution.Normal(1, 2),
    Distribution.Bernoulli(0.3),
])
def test_seed_makes_draws_reproducible(dist):
    ember.seed(123)
    a = Tensor.random([50], dist).to_numpy()
    b = Tensor.random([50], dist).to_numpy()
    ember.seed(123)
    np.testing.assert_array_equal(Tensor.random([50], dist).to_numpy(), a)
    np.testing.assert_array_equal(Tensor.random([50], dist).to_numpy(), b)
    assert not np.array_equal(a, b)  # the generator moves on between draws


def test_different_seeds_differ():
    ember.seed(1)
    a = Tensor.random([100]).to_numpy()
    ember.seed(2)
    b = Tensor.random([100]).to_numpy()
    assert not np.array_equal(a, b)


def test_seed_does_not_depend_on_numpys_global_state():
    ember.seed(7)
    a = Tensor.random([20]).to_numpy()
    np.random.seed(99)
    np.random.random(10)
    ember.seed(7)
    np.testing.assert_array_equal(Tensor.random([20]).to_numpy(), a)


def test_seed_accepts_numpy_ints():
    ember.seed(np.int64(5))
    a = Tensor.random([5]).to_numpy()
    ember.seed(5)
    np.testing.assert_array_equal(Tensor.random([5]).to_numpy(), a)


def test_sample_gives_numpy_arrays_of_the_dtype():
    out = Distribution.Normal(0, 1).sample((2, 3), "float64")
    assert isinstance(out, np.ndarray)
    assert out.shape == (2, 3) and out.dtype == np.float64


# ---- uniform -----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_default_is_uniform_in_zero_one(dtype):
    x = sample(Distribution.Default, dtype)
    assert x.dtype == np.dtype(dtype)
    assert x.min() >= 0 and x.max() < 1
    assert abs(x.mean() - 0.5) < 0.01
    assert abs(x.var() - 1 / 12) < 0.005


def test_random_without_distribution_is_default():
    ember.seed(3)
    a = Tensor.random([10]).to_numpy()
    ember.seed(3)
    np.testing.assert_array_equal(Tensor.random([10], Distribution.Default).to_numpy(), a)


@pytest.mark.parametrize("low, high", [(-2.0, 3.0), (10, 11), (-1e-3, 1e-3)])
def test_uniform_range_and_mean(low, high):
    x = sample(Distribution.Uniform(low, high))
    assert x.min() >= np.float32(low) and x.max() <= np.float32(high)
    width = high - low
    assert abs(x.mean() - (low + high) / 2) < 0.01 * width
    assert x.max() - x.min() > 0.99 * width


def test_uniform_of_zero_width_is_constant():
    np.testing.assert_array_equal(sample(Distribution.Uniform(2, 2), n=10), np.full(10, 2.0))


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_uniform_is_low_inclusive_high_exclusive(dtype):
    x = sample(Distribution.Uniform(-3, 4), dtype, n=10_000)
    assert x.dtype == np.dtype(dtype)
    assert set(np.unique(x).tolist()) == set(range(-3, 4))
    counts = np.bincount(x + 3)
    assert counts.min() > 0.8 * 10_000 / 7


def test_uniform_bool_is_refused():
    with pytest.raises(DTypeError, match="Bernoulli"):
        Tensor.random([3], Distribution.Default, dtype="bool")


# ---- normal ------------------------------------------------------------------------------
@pytest.mark.parametrize("mean, std", [(0.0, 1.0), (3.0, 0.5), (-10.0, 4.0)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_normal_mean_and_std(mean, std, dtype):
    x = sample(Distribution.Normal(mean, std), dtype)
    assert x.dtype == np.dtype(dtype)
    assert abs(x.mean() - mean) < 0.02 * std
    assert abs(x.std() - std) < 0.02 * std
    # about 68% within one std
    assert abs(np.mean(np.abs(x - mean) < std) - 0.6827) < 0.01


def test_normal_with_zero_std_is_constant():
    np.testing.assert_array_equal(sample(Distribution.Normal(1.5, 0), n=10), np.full(10, 1.5))


@pytest.mark.parametrize("dtype", ["int32", "int64", "bool"])
def test_normal_needs_a_float_dtype(dtype):
    with pytest.raises(DTypeError, match=f"Normal.*{dtype}"):
        Tensor.random([3], Distribution.Normal(0, 1), dtype=dtype)


# ---- bernoulli ---------------------------------------------------------------------------
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_bernoulli_fraction(p):
    x = sample(Distribution.Bernoulli(p), "bool")
    assert x.dtype == np.bool_
    assert abs(x.mean() - p) < 0.01


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_bernoulli_numeric_dtypes_hold_zeros_and_ones(dtype):
    x = sample(Distribution.Bernoulli(0.5), dtype, n=1000)
    assert x.dtype == np.dtype(dtype)
    assert set(np.unique(x).tolist()) == {0, 1}


@pytest.mark.parametrize("p, expected", [(0.0, False), (1.0, True)])
def test_bernoulli_extremes(p, expected):
    x = sample(Distribution.Bernoulli(p), "bool", n=1000)
    assert np.all(x == expected)


# ---- parameters --------------------------------------------------------------------------
@pytest.mark.parametrize("make, words", [
    (lambda: Distribution.Uniform(1, 0), ["Uniform", "high"]),
    (lambda: Distribution.Uniform(0, math.nan), ["Uniform"]),
    (lambda: Distribution.Normal(0, -1), ["Normal", "std"]),
    (lambda: Distribution.Normal(0, math.nan), ["Normal", "std"]),
    (lambda: Distribution.Bernoulli(1.5), ["Bernoulli", "[0, 1]"]),
    (lambda: Distribution.Bernoulli(-0.1), ["Bernoulli", "[0, 1]"]),
    (lambda: Distribution.Bernoulli(math.nan), ["Bernoulli"]),
])
def test_invalid_parameters(make, words):
    with pytest.raises(ValueError) as info:
        make()
    for word in words:
        assert word in str(info.value)


def test_distributions_are_values():
    assert Distribution.Normal(0, 1) == Distribution.Normal(0.0, 1.0)
    assert Distribution.Normal(0, 1) != Distribution.Uniform(0, 1)
    assert Distribution.Default.kind == "default"
    assert Distribution.Uniform() == Distribution.Uniform(0, 1)
    with pytest.raises(AttributeError):
        Distribution.Default.kind = "normal"


def test_random_refuses_non_distributions():
    with pytest.raises(TypeError, match="Distribution"):
        Tensor.random([3], "normal")
