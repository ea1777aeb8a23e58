"""Modules built from nn.Module / nn.Param alone, mirroring PyTorch state-dict names; what
the tests of hostile files share (seeded mutations, peak memory)."""

import random
import struct
import tracemalloc

import numpy as np

from ember import Tensor, nn


def param(shape, dtype="float32", trainable=True, seed=None, backend=None):
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        values = rng.random(shape) > 0.5
    elif dtype.startswith("int"):
        values = rng.integers(-100, 100, size=shape).astype(dtype)
    else:
        values = rng.standard_normal(shape).astype(dtype)
    return nn.Param(Tensor.from_data(values, backend=backend, dtype=dtype), trainable=trainable)


class Leaf(nn.Module):
    """A Linear-like layer: weight [out, in] and bias [out]."""

    def __init__(self, d_in, d_out, seed=None, backend=None):
        super().__init__()
        self.weight = param([d_out, d_in], seed=seed, backend=backend)
        self.bias = param([d_out], seed=None if seed is None else seed + 1, backend=backend)


class Norm(nn.Module):
    """A BatchNorm-like layer with non-trainable buffers."""

    def __init__(self, n, seed=None, backend=None):
        super().__init__()
        self.weight = param([n], seed=seed, backend=backend)
        self.bias = param([n], seed=seed, backend=backend)
        self.running_mean = param([n], trainable=False, seed=seed, backend=backend)
        self.running_var = param([n], trainable=False, seed=seed, backend=backend)
        self.num_batches_tracked = nn.Param(Tensor.from_data(np.array(7, np.int64),
                                                             backend=backend), trainable=False)


class Net(nn.Module):
    """Nested lists and dicts of sub-modules, non-trainable params, several dtypes."""

    def __init__(self, seed=None, backend=None):
        super().__init__()
        s = (lambda k: None) if seed is None else (lambda k: seed * 100 + k)
        self.stem = Leaf(4, 3, s(1), backend)
        self.blocks = [Leaf(3, 3, s(2), backend), [Norm(3, s(3), backend), Leaf(3, 2, s(4),
                                                                             backend)]]
        self.heads = {"cls": Leaf(2, 5, s(5), backend), "box": Leaf(2, 4, s(6), backend)}
        self.scale = param([], seed=s(7), backend=backend)
        self.table = param([2, 3], "float64", seed=s(8), backend=backend)
        self.mask = param([4], "bool", trainable=False, seed=s(9), backend=backend)
        self.steps = param([3], "int32", trainable=False, seed=s(10), backend=backend)


def mirror(shapes, dtypes=None):
    """A module whose named_params are exactly `shapes` ({dotted name: shape}), zero-filled,
    with the given ember dtypes (default float32); digits become attributes too."""
    root = nn.Module()
    for name, shape in shapes.items():
        *path, leaf = name.split(".")
        node = root
        for part in path:
            child = vars(node).get(part)
            if child is None:
                child = nn.Module()
                setattr(node, part, child)
            node = child
        dtype = (dtypes or {}).get(name, "float32")
        setattr(node, leaf, nn.Param(Tensor.zeros(list(shape), dtype=dtype),
                                     trainable=dtype.startswith("float")))
    return root


def values(module):
    return {n: np.array(p.to_numpy()) for n, p in module.named_params()}


def mutations(raw, seed, count):
    """`count` seeded mutations of `raw`: flipped or replaced bytes, 32-bit numbers written
    over it (0, 1, 2**31, 2**32 - 1), inserted and deleted runs, cuts."""
    rng = random.Random(seed)
    for _ in range(count):
        data = bytearray(raw)
        for _ in range(rng.randint(1, 4)):
            if not data:
                break
            at = rng.randrange(len(data))
            kind = rng.randrange(6)
            if kind == 0:
                data[at] ^= 1 << rng.randrange(8)
            elif kind == 1:
                data[at] = rng.randrange(256)
            elif kind == 2:
                data[at: at + 4] = struct.pack("<I", rng.choice([0, 1, 2**31, 2**32 - 1]))
            elif kind == 3:
                data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
            elif kind == 4:
                del data[at: at + rng.randint(1, 64)]
            else:
                data = data[:at]
        yield bytes(data)


def peak(fn):
    """(what fn() returned or raised, the most memory Python and NumPy held at once meanwhile)"""
    tracemalloc.start()
    try:
        try:
            out = fn()
        except Exception as e:  # the caller asserts which
            out = e
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
