"""Wgpu's prim: a GPU buffer seen through a shape, strides and an offset (all in elements).

Movement ops (reshape of dense data, permute, expand, slice, squeeze, ...) only make new
prims over the same Storage; kernels read their inputs through strides, so a transposed or
broadcast operand is never copied.
"""

import math

import numpy as np

# dtypes WGSL can hold: bool lives in u32 words (0 or 1)
DTYPES = ("bool", "int32", "float32")
STORAGE = {"float32": "f32", "int32": "i32", "bool": "u32"}
VALUE = {"float32": "f32", "int32": "i32", "bool": "bool"}
NUMPY_STORAGE = {"float32": np.float32, "int32": np.int32, "bool": np.uint32}


class Prim:
    __slots__ = ("storage", "shape", "strides", "offset", "dtype", "range", "__weakref__")

    def __init__(self, storage, shape, strides, offset, dtype, range=None):  # noqa: A002
        self.storage = storage
        self.shape = shape
        self.strides = strides
        self.offset = offset
        self.dtype = dtype
        self.range = range  # (lo, hi) bounds of an int32 prim's values where known, else None

    def __repr__(self):
        return (f"Prim({self.dtype}, shape={self.shape}, strides={self.strides}, "
                f"offset={self.offset})")


_DENSE = {}


def dense_strides(shape):
    strides = _DENSE.get(shape)
    if strides is None:
        out, acc = [], 1
        for s in reversed(shape):
            out.append(acc)
            acc *= s
        strides = tuple(reversed(out))
        if len(_DENSE) < 65536:
            _DENSE[tuple(shape)] = strides
    return strides


def is_dense(shape, strides):
    """C-contiguous (dims of size 1 may have any stride); empty tensors count as dense."""
    acc = 1
    for s, st in zip(reversed(shape), reversed(strides)):
        if s == 0:
            return True
        if s != 1 and st != acc:
            return False
        acc *= s
    return True


def numel(shape):
    return math.prod(shape)


def broadcast_strides(prim, shape):
    """prim's strides seen in the broadcast `shape` (0 where it repeats)."""
    lead = len(shape) - len(prim.shape)
    return (0,) * lead + tuple(0 if s == 1 and n != 1 else st for s, st, n in
                               zip(prim.shape, prim.strides, shape[lead:]))


def coalesce(shape, stride_lists):
    """Merge neighbouring dims that every view walks as one (and drop dims of size 1):
    fewer dims, less index arithmetic in the kernels. Returns (shape, stride_lists)."""
    out_shape, out_strides = [], [[] for _ in stride_lists]
    for d, size in enumerate(shape):
        if size == 1:
            continue
        if out_shape and all(st[-1] == s[d] * size for st, s in zip(out_strides, stride_lists)):
            out_shape[-1] *= size
            for st, s in zip(out_strides, stride_lists):
                st[-1] = s[d]
            continue
        out_shape.append(size)
        for st, s in zip(out_strides, stride_lists):
            st.append(s[d])
    if not out_shape:
        return [1], [[0] for _ in stride_lists]
    return out_shape, out_strides


def view_words(shape, views, scalar=0):
    """`info` words of views.wgsl: numel, rank, dense flag, scalar, shape, then each view's
    offset and strides. `views` is a list of (offset, strides) in `shape`."""
    cshape, cstrides = coalesce(shape, [st for _, st in views])
    dense = len(cshape) == 1 and all(st[0] == 1 for st in cstrides)
    words = [numel(shape), len(cshape), int(dense), scalar, *cshape]
    for (offset, _), st in zip(views, cstrides):
        words.append(offset)
        words.extend(st)
    return words


def groups_1d(n, per_group=256, max_x=65535):
    """Workgroup counts (x, y, 1) that cover n invocations (linear_index in views.wgsl)."""
    g = -(-n // per_group)
    if g <= max_x:
        return (g, 1, 1)
    return (max_x, -(-g // max_x), 1)
