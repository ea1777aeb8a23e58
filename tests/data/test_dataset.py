"""InMemoryDataset, Subset, MapDataset, random_split and collate."""

import numpy as np
import pytest

from ember import data


def _images(n=10):
    x = np.arange(n * 4, dtype=np.uint8).reshape(n, 1, 2, 2)
    y = np.arange(n) % 3
    return x, y


def test_in_memory_items_and_batches_agree():
    x, y = _images()
    ds = data.InMemoryDataset(x, y, scale=1 / 255)
    assert len(ds) == 10
    img, label = ds[3]
    assert img.dtype == np.float32 and img.shape == (1, 2, 2)
    np.testing.assert_allclose(img, x[3] / 255, rtol=1e-6)
    assert type(label) is int and label == 0
    bx, by = ds.get_batch([3, 1])
    assert bx.dtype == np.float32 and by.dtype == np.int64
    np.testing.assert_array_equal(bx[0], img)
    assert by.tolist() == [0, 1]
    assert ds[-1][1] == y[-1]


def test_in_memory_refuses_bad_input():
    with pytest.raises(ValueError, match="same length"):
        data.InMemoryDataset(np.zeros((3, 2)), np.zeros(4))
    ds = data.InMemoryDataset(np.zeros((3, 2)))
    with pytest.raises(IndexError, match="out of range"):
        ds[3]
    with pytest.raises(TypeError):
        ds[1.5]


def test_subset_map_and_split():
    x, y = _images(20)
    ds = data.InMemoryDataset(x, y)
    sub = data.Subset(ds, [5, 2, 7])
    assert len(sub) == 3 and sub[0][1] == y[5]
    np.testing.assert_array_equal(sub.get_batch([2, 0])[0], x[[7, 5]])
    doubled = data.MapDataset(ds, lambda item: (item[0], item[1] * 2))
    assert doubled[4][1] == 2 * y[4]

    a, b = data.random_split(ds, [15, 5], seed=3)
    assert len(a) == 15 and len(b) == 5
    assert set(a.indices) | set(b.indices) == set(range(20))
    assert not set(a.indices) & set(b.indices)
    a2, _ = data.random_split(ds, [0.75, 0.25], seed=3)
    np.testing.assert_array_equal(a.indices, a2.indices)  # same seed, same split
    with pytest.raises(ValueError, match="sum"):
        data.random_split(ds, [10, 5])


def test_collate_stacks_items_of_any_dataset():
    class Plain:
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return np.full((2,), i, dtype=np.float32), i

    xs, ys = data.collate([Plain()[i] for i in range(3)])
    assert xs.shape == (3, 2) and ys.dtype == np.int64 and ys.tolist() == [0, 1, 2]
    loader = data.DataLoader(Plain(), batch_size=3, numpy=True)
    batches = list(loader)
    assert [len(b[1]) for b in batches] == [3, 1]
