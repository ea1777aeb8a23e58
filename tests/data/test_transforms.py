"""Transforms: shapes, dtypes, what they do to a known image, and seeded randomness."""

import numpy as np
import pytest

from ember import data


def _batch(b=8):
    x = np.zeros((b, 1, 6, 6), dtype=np.float32)
    x[:, 0, 2:4, 2:4] = 1.0  # a 2x2 square in the middle
    return x


def test_random_shift_moves_the_square_and_keeps_its_mass():
    x = _batch(64)
    out = data.RandomShift(2)(x, np.random.default_rng(0))
    assert out.shape == x.shape and out.dtype == x.dtype
    np.testing.assert_array_equal(out.sum(axis=(1, 2, 3)), 4.0)  # shifts of <= 2 keep it all
    tops = np.argmax(out[:, 0].any(axis=2), axis=1)
    lefts = np.argmax(out[:, 0].any(axis=1), axis=1)
    assert set(tops.tolist()) <= {0, 1, 2, 3, 4} and len(set(tops.tolist())) > 2
    assert len(set(lefts.tolist())) > 2


def test_random_crop_with_padding_and_single_images():
    x = _batch(4)
    out = data.RandomCrop(4, padding=0)(x, np.random.default_rng(1))
    assert out.shape == (4, 1, 4, 4)
    one = data.RandomCrop((6, 6), padding=1)(x[0], np.random.default_rng(1))
    assert one.shape == (1, 6, 6)
    with pytest.raises(ValueError, match="does not fit"):
        data.RandomCrop(9)(x, np.random.default_rng(0))


def test_flip_normalize_compose():
    x = np.arange(2 * 1 * 2 * 3, dtype=np.float32).reshape(2, 1, 2, 3)
    always = data.RandomHorizontalFlip(p=1.0)(x, np.random.default_rng(0))
    np.testing.assert_array_equal(always, x[..., ::-1])
    never = data.RandomHorizontalFlip(p=0.0)(x, np.random.default_rng(0))
    np.testing.assert_array_equal(never, x)
    norm = data.Normalize(1.0, 2.0)(x)
    np.testing.assert_allclose(norm, (x - 1) / 2)
    both = data.Compose([data.RandomHorizontalFlip(1.0), data.Normalize(0.0, 0.5)])
    np.testing.assert_allclose(both(x, np.random.default_rng(0)), x[..., ::-1] * 2)
    with pytest.raises(ValueError, match="std"):
        data.Normalize(0.0, 0.0)


def test_same_generator_same_augmentation():
    x = _batch(16)
    t = data.Compose([data.RandomShift(2), data.RandomHorizontalFlip()])
    a = t(x, np.random.default_rng(5))
    b = t(x, np.random.default_rng(5))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, t(x, np.random.default_rng(6)))
