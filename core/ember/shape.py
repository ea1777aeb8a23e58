"""Shape rules as pure functions: broadcasting, dims, reshape, indexing.

Every function takes the op's name so that its ShapeError can say which op failed.
"""

import operator
from functools import lru_cache

from .errors import ShapeError


def fmt(shape):
    return "[" + ", ".join(map(str, shape)) + "]"


def as_shape(shape, op):
    """A tuple of non-negative ints from a list/tuple (or a single int)."""
    if isinstance(shape, int):
        shape = (shape,)
    try:
        out = tuple(_size(s, op, shape) for s in shape)
    except TypeError:
        raise ShapeError(f"{op}: a shape is a list or tuple of ints, got {shape!r}") from None
    if any(s < 0 for s in out):
        raise ShapeError(f"{op}: negative size in shape {fmt(out)}")
    return out


def _size(s, op, shape):
    """One size of a shape: an int (Python's or NumPy's), never a float, string or bool, which
    int() would quietly turn into another size (zeros([2.5]) had shape [2])."""
    if not isinstance(s, bool):
        try:
            return operator.index(s)
        except TypeError:
            pass
    raise ShapeError(f"{op}: sizes in a shape are ints, got {s!r} in {list(shape)!r}; e.g. "
                     "int(n) for a computed size")


@lru_cache(maxsize=4096)
def _broadcast(shapes):
    ndim = max(len(s) for s in shapes)
    out = []
    for i in range(-ndim, 0):
        size = 1
        for s in shapes:
            if len(s) >= -i and s[i] != 1:
                if size not in (1, s[i]):
                    return None, ndim + i
                size = s[i]
        out.append(size)
    return tuple(out), None


def broadcast(op, *shapes):
    """The NumPy broadcast of `shapes`, or a ShapeError naming every shape and the failing dim."""
    if len(shapes) == 1:
        return shapes[0]
    if len(shapes) == 2 and shapes[0] == shapes[1]:
        return shapes[0]
    out, bad = _broadcast(shapes)
    if out is None:
        listed = " and ".join(fmt(s) for s in shapes)
        raise ShapeError(
            f"{op}: shapes {listed} do not broadcast (dim {bad} of the result, counted from the "
            "left after aligning on the right, has sizes that are neither equal nor 1); "
            "reshape or unsqueeze one operand so the trailing dims match"
        )
    return out


def norm_dim(op, dim, ndim):
    """A dim in [0, ndim) from a possibly negative one."""
    if not isinstance(dim, int):
        raise ShapeError(f"{op}: dim must be an int, got {dim!r}")
    if not -ndim <= dim < ndim:
        if ndim == 0:
            raise ShapeError(f"{op}: dim {dim} does not exist: the tensor has rank 0; "
                             "reshape it first (e.g. .reshape([1]))")
        raise ShapeError(f"{op}: dim {dim} is out of range for a tensor of rank {ndim} "
                         f"(valid: {-ndim}..{ndim - 1})")
    return dim % ndim


def norm_dims(op, dims, ndim):
    out = tuple(norm_dim(op, d, ndim) for d in dims)
    if len(set(out)) != len(out):
        raise ShapeError(f"{op}: repeated dim in {tuple(dims)}")
    return out


def reshape(op, shape, new):
    """Resolve one -1 in `new` against the number of elements of `shape`."""
    new = tuple(_size(s, op, new) for s in new)
    size = prod(shape)
    if new.count(-1) > 1:
        raise ShapeError(f"{op}: only one dim may be -1, got {fmt(new)}")
    if any(s < -1 for s in new):
        raise ShapeError(f"{op}: negative size in {fmt(new)}")
    if -1 in new:
        known = prod(s for s in new if s != -1)
        if known == 0 or size % known:
            raise ShapeError(f"{op}: cannot infer -1 in {fmt(new)} from {fmt(shape)} "
                             f"({size} elements)")
        new = tuple(size // known if s == -1 else s for s in new)
    if prod(new) != size:
        raise ShapeError(f"{op}: cannot reshape {fmt(shape)} ({size} elements) into {fmt(new)} "
                         f"({prod(new)} elements)")
    return new


def prod(values):
    out = 1
    for v in values:
        out *= v
    return out


def parse_index(shape, key):
    """Split a NumPy-style basic index into primitive steps.

    Returns (starts, stops, steps, out_shape) for one strided slice over all dims of `shape`,
    then the final shape after ints drop their dim and None adds one. Advanced (tensor) indices
    are handled by the caller before this.
    """
    if not isinstance(key, tuple):
        key = (key,)
    n_real = sum(1 for k in key if k is not None and k is not Ellipsis)
    if sum(1 for k in key if k is Ellipsis) > 1:
        raise ShapeError("index: an index can only have a single ellipsis ('...')")
    if n_real > len(shape):
        raise ShapeError(f"index: too many indices ({n_real}) for a tensor of shape {fmt(shape)}")
    if Ellipsis in key:
        at = key.index(Ellipsis)
        key = key[:at] + (slice(None),) * (len(shape) - n_real) + key[at + 1:]
    else:
        key = key + (slice(None),) * (len(shape) - n_real)
    starts, stops, steps, final = [], [], [], []
    dim = 0
    for k in key:
        if k is None:
            final.append(1)
            continue
        size = shape[dim]
        if isinstance(k, slice):
            if k.step == 0:
                raise ShapeError("index: slice step cannot be zero")
            start, stop, step = k.indices(size)
            n = len(range(start, stop, step))
            starts.append(start)
            stops.append(stop)
            steps.append(step)
            final.append(n)
        elif isinstance(k, int) or hasattr(k, "__index__"):
            i = k.__index__()
            if not -size <= i < size:
                raise ShapeError(f"index: index {i} is out of bounds for dim {dim} of size {size} "
                                 f"(tensor shape {fmt(shape)})")
            i %= size
            starts.append(i)
            stops.append(i + 1)
            steps.append(1)
        else:
            raise ShapeError(f"index: unsupported index {k!r}; use ints, slices, None, '...', "
                             "or one 1-D int tensor/list (select)")
        dim += 1
    return tuple(starts), tuple(stops), tuple(steps), tuple(final)


def slice_shape(starts, stops, steps):
    return tuple(len(range(a, b, c)) for a, b, c in zip(starts, stops, steps, strict=True))
