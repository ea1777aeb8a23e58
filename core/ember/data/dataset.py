"""Datasets: anything with `len(ds)` and `ds[i] -> item` (Burn's Dataset trait, PyTorch's
map-style dataset). Items of the image datasets are (image float32 [C, H, W], label int).

A dataset may also define `get_batch(indices) -> tuple of NumPy arrays` (one array per item
field, batch first): DataLoader then builds a batch with a few array operations instead of a
Python loop over items. Every dataset here does.
"""

import numbers

import numpy as np

__all__ = ["Dataset", "InMemoryDataset", "MapDataset", "Subset", "random_split"]


class Dataset:
    """Base class (optional: any object with __len__ and __getitem__ works)."""

    def __len__(self):
        raise NotImplementedError(f"{type(self).__name__} must define __len__")

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")

    def __iter__(self):
        return (self[i] for i in range(len(self)))


def _index(index, n, who):
    if isinstance(index, bool) or not isinstance(index, numbers.Integral):
        raise TypeError(f"{who}: indices must be integers, got {type(index).__name__}")
    i = int(index)
    if not -n <= i < n:
        raise IndexError(f"{who}: index {i} is out of range for a dataset of {n} items")
    return i % n


class InMemoryDataset(Dataset):
    """Items held as NumPy arrays of equal length: `InMemoryDataset(images, labels)` gives
    items `(images[i], labels[i])` (a single array gives bare items).

    `scale` turns integer arrays of the first field into float32 on the way out (e.g. 1/255
    for uint8 pixels, so 60,000 images are held in 47 MB, not 188 MB). Labels come out as
    Python ints from `ds[i]` and as int64 arrays from `get_batch`.
    """

    def __init__(self, *arrays, scale=None):
        if not arrays:
            raise ValueError("InMemoryDataset: give at least one array")
        arrays = [np.asarray(a) for a in arrays]
        n = len(arrays[0])
        bad = [a.shape for a in arrays if a.ndim == 0 or len(a) != n]
        if bad:
            raise ValueError(f"InMemoryDataset: every array needs the same length along dim 0; "
                             f"got shapes {[a.shape for a in arrays]}")
        self.arrays, self.scale = arrays, scale

    def __len__(self):
        return len(self.arrays[0])

    def _field(self, k, value):
        if k == 0 and self.scale is not None:
            return (np.asarray(value, dtype=np.float32) * np.float32(self.scale))
        if value.dtype.kind in "iub":
            return value.astype(np.int64) if value.ndim else int(value)
        return value

    def __getitem__(self, index):
        i = _index(index, len(self), type(self).__name__)
        item = tuple(self._field(k, a[i]) for k, a in enumerate(self.arrays))
        return item if len(item) > 1 else item[0]

    def get_batch(self, indices):
        indices = np.asarray(indices, dtype=np.int64)
        out = []
        for k, a in enumerate(self.arrays):
            v = a[indices]
            if k == 0 and self.scale is not None:
                v = v.astype(np.float32) * np.float32(self.scale)
            elif v.dtype.kind in "iub":
                v = v.astype(np.int64)
            out.append(v)
        return tuple(out)

    def __repr__(self):
        shapes = ", ".join(f"{a.dtype}{list(a.shape[1:])}" for a in self.arrays)
        return f"{type(self).__name__}({len(self)} items: {shapes})"


class Subset(Dataset):
    """The items of `dataset` at `indices`, in that order."""

    def __init__(self, dataset, indices):
        self.dataset = dataset
        self.indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        n = len(dataset)
        if self.indices.size and (self.indices.min() < -n or self.indices.max() >= n):
            raise IndexError(f"Subset: indices must lie in [0, {n}) for a dataset of {n} items")
        self.indices %= max(n, 1)

    def __len__(self):
        return len(self.indices)

    def __getitem__(self, index):
        return self.dataset[int(self.indices[_index(index, len(self), "Subset")])]

    def get_batch(self, indices):
        return _batch(self.dataset, self.indices[np.asarray(indices, dtype=np.int64)])

    def __repr__(self):
        return f"Subset({len(self)} of {self.dataset!r})"


class MapDataset(Dataset):
    """`fn(item)` for each item of `dataset` (Burn's MapperDataset); fn runs per item."""

    def __init__(self, dataset, fn):
        if not callable(fn):
            raise TypeError("MapDataset: fn must be callable")
        self.dataset, self.fn = dataset, fn

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        return self.fn(self.dataset[index])


def random_split(dataset, lengths, seed=0):
    """Split into non-overlapping Subsets of the given lengths (ints summing to len(dataset),
    or fractions summing to 1), from a seeded permutation: the same seed, the same split."""
    n = len(dataset)
    lengths = list(lengths)
    if lengths and all(isinstance(v, float) for v in lengths):
        if abs(sum(lengths) - 1) > 1e-6:
            raise ValueError(f"random_split: fractions must sum to 1, got {sum(lengths)}")
        counts = [int(np.floor(n * f)) for f in lengths]
        for i in range(n - sum(counts)):  # the remainder, round robin
            counts[i % len(counts)] += 1
        lengths = counts
    if sum(lengths) != n or any(v < 0 for v in lengths):
        raise ValueError(f"random_split: lengths {lengths} must be >= 0 and sum to the dataset's "
                         f"{n} items")
    order = np.random.default_rng(seed).permutation(n)
    bounds = np.cumsum([0] + lengths)
    return [Subset(dataset, order[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


def _batch(dataset, indices):
    """A batch as a tuple of stacked NumPy arrays (or a single array for bare items)."""
    get = getattr(dataset, "get_batch", None)
    if get is not None:
        return get(indices)
    items = [dataset[int(i)] for i in indices]
    return collate(items)


def collate(items):
    """Stack a list of items (tuples of arrays / numbers, or bare arrays) into arrays."""
    if not items:
        raise ValueError("collate: an empty batch")
    first = items[0]
    if isinstance(first, tuple | list):
        return tuple(_stack([item[k] for item in items]) for k in range(len(first)))
    return (_stack(items),)


def _stack(values):
    first = values[0]
    if isinstance(first, bool | np.bool_):
        return np.asarray(values, dtype=bool)
    if isinstance(first, numbers.Integral):
        return np.asarray(values, dtype=np.int64)
    if isinstance(first, numbers.Real):
        return np.asarray(values, dtype=np.float32)
    return np.stack([np.asarray(v) for v in values])
