"""Tensor: a backend primitive with its shape and dtype, and the tensor API of API.md.

Primitive methods run an entry of the op table (ember.ops.OPS) on the tensor's backend; the
op table's rules give the result's shape and dtype, so lazy backends never need to run to
answer them, and mistakes raise ShapeError / DTypeError before any backend sees them.
Everything else here (softmax, gelu, clamp, mean, stack, ...) is a composite of primitives:
it needs no backend work and Autodiff differentiates it for free.
"""

import math
import sys
import threading
import weakref

import numpy as np

from . import dtype as D
from . import shape as S
from .backend.base import Backend, default_backend
from .distribution import Distribution
from .errors import BackendError, DTypeError, OutOfMemoryError, ShapeError
from .ops import COMPARE, prims

_NO = object()  # "no second operand"
_RESHAPE, _SUM, _MATMUL = prims.reshape, prims.sum, prims.matmul
_NO_ATTRS = {}
# x.sum()'s attributes by rank (NumPy's 64 dims at most), made once: nothing changes them
_SUM_ALL = [{"dims": tuple(range(n)), "keepdim": False} for n in range(65)]

# ember.jit's recorder while this thread captures a function (None otherwise): every primitive
# the Tensor layer runs goes through _execute, and what a replay could not repeat (reading
# values, drawing random numbers) through _host, so that the recorder sees them. It is per
# thread: a capture sees only its own thread's ops, and eager ops in other threads never see it.
# Setting it counts the threads capturing now: while none is, an op reads that global instead
# of a thread-local attribute (a tenth of a tiny op's time).
_captures, _captures_lock = 0, threading.Lock()


class _Capturing(threading.local):
    _tracer = None
    tracer = property(lambda self: self._tracer)

    @tracer.setter
    def tracer(self, recorder):
        global _captures
        with _captures_lock:
            _captures += (recorder is not None) - (self._tracer is not None)
            self._tracer = recorder


capturing = _Capturing()


def _execute(backend, op, prims, attrs, shape, dtype):
    tracer = capturing.tracer if _captures else None
    try:
        if tracer is None:
            return backend.execute(op, prims, attrs, shape, dtype)
        # the inputs are named (and held) first: an op may write into an input nothing else holds
        ins = tracer.inputs(prims)
        prim = backend.execute(op, prims, attrs, shape, dtype)
    except MemoryError as e:
        _out_of_memory(op.name, shape, dtype, backend, e)
    tracer.op(backend, op, ins, attrs, shape, dtype, prim)
    return prim


def _out_of_memory(op, shape, dtype, backend, error):
    """NumPy's or a GPU's allocation failure, said with the op, the shape and the fix."""
    nbytes = S.prod(shape) * np.dtype(dtype).itemsize
    raise OutOfMemoryError(f"{op}: a result of shape {S.fmt(shape)} {dtype} needs "
                           f"{nbytes / 2**30:.3g} GiB, more than {backend} can allocate "
                           f"({error}); use a smaller shape or batch") from None


def _host(what):
    tracer = capturing.tracer if _captures else None
    if tracer is not None:
        tracer.host(what)


# ---- ownership: which tensors only a temporary expression refers to -----------------------
#
# In `((x / c).erf() + 1).sqrt()` the intermediate tensors are referenced by the expression
# being evaluated and nothing else: their buffers can be reused for the next result. A tensor
# is "unshared" when its reference count is below that of any tensor a name, container or
# closure refers to, on every way a Tensor method is entered. `_take` is only ever reached
# as `method(self, ...) -> _elementwise/_apply(op, a, ...) -> _take(a)`: internal code must
# not call _elementwise/_apply with a tensor it reads afterwards (call the public method
# instead).
#
# The limit is found at import (bottom of this file) by trying limits on probe tensors and
# watching which give their buffer away, on method calls (`t.exp()`) and operators (`t + 1`);
# nothing reads frames or bytecode. A temporary reached through a call moves its reference
# into the method, so it counts one less than any named tensor and is donated. One reached
# through an operator keeps a reference on the caller's stack and counts as much as a named
# tensor reached through a call, so the eager Tensor API cannot tell it apart and leaves it
# alone: operator chains reuse buffers where ownership is known instead, in ember.jit's replay
# (an intermediate's last use) and in Fusion's blocks (no intermediate is written at all).

_UNSHARED = -1  # the highest reference count of an unshared tensor; -1: donation is off
_refcount = sys.getrefcount


def _take(t, op, pos):
    """The prim of input `t` at position `pos`, stolen from `t` if the op may reuse it."""
    if pos in op.donors and _refcount(t) <= _UNSHARED:
        prim, t._prim = t._prim, None
        return prim
    return t._prim


def _backend_of(op, items):
    backend = None
    for t in items:
        if isinstance(t, Tensor):
            if backend is None:
                backend = t.backend
            elif t.backend is not backend and t.backend != backend:
                raise BackendError(
                    f"{op}: operands live on different backends ({backend} and {t.backend}); "
                    "move one with .to(other.backend)")
    return backend


def _scalar(op, value, dtype):
    """A Python scalar for an op computing in `dtype` (weak typing, range checked)."""
    if isinstance(value, np.generic):
        value = value.item()  # NumPy scalars are not weak in NumPy 2: unwrap them
    D.scalar_category(value, op)
    if D.is_int(dtype) and not isinstance(value, bool):
        info = np.iinfo(dtype)
        if not info.min <= value <= info.max:
            raise DTypeError(f"{op}: the scalar {value} does not fit {dtype}; cast the tensor "
                             "with .cast('int64') or .cast('float32') first")
    return value


def _fill_value(op, value, dtype):
    """A scalar written into a tensor of `dtype` (full, mask_fill, slice_assign): converted
    to that dtype, or DTypeError where the conversion would change the value."""
    if isinstance(value, np.generic):
        value = value.item()
    D.scalar_category(value, op)
    if D.is_float(dtype):
        return float(value)
    if dtype == "bool":
        if isinstance(value, bool) or value in (0, 1):
            return bool(value)
    elif isinstance(value, bool) or float(value).is_integer():
        return _scalar(op, int(value), dtype)
    raise DTypeError(f"{op}: the value {value!r} does not fit a {dtype} tensor; cast the tensor "
                     "first (e.g. .cast('float32'))")


def _operand(op_name, value):
    if type(value) is Tensor or isinstance(value, (bool, int, float, np.generic)):
        return value
    if isinstance(value, Tensor):
        return value
    if isinstance(value, (np.ndarray, list, tuple)):
        raise DTypeError(f"{op_name}: got a {type(value).__name__}; wrap it first with "
                         "Tensor.from_data(value, backend=x.backend)")
    raise DTypeError(f"{op_name}: unsupported operand of type {type(value).__name__}")


def _elementwise(op, a, b=_NO):
    """Run a unary/binary/compare primitive: promotion, Python scalars, buffer donation."""
    # the common case, kept short: operands that need no promotion (a float tensor with a
    # Python number, or tensors of one dtype on one backend). Only here may an operand's
    # buffer be donated; the refcount thresholds are calibrated on exactly these calls.
    prims = None
    if isinstance(a, Tensor) and a.dtype in op.native:
        backend, dtype, shape = a.backend, a.dtype, a.shape
        if b is _NO:
            prims = [_take(a, op, 0)]
        elif isinstance(b, Tensor):
            if b.dtype == dtype and (b.backend is backend
                                     or b.backend._identity == backend._identity):
                if b.shape != shape:
                    shape = S.broadcast(op.name, shape, b.shape)
                prims = [_take(a, op, 0), _take(b, op, 1)]
        elif (type(b) is float or type(b) is int) and dtype[0] == "f":
            prims = [_take(a, op, 0), b]
    elif isinstance(b, Tensor) and b.dtype in op.native and b.dtype[0] == "f" and (
            type(a) is float or type(a) is int):
        backend, dtype, shape = b.backend, b.dtype, b.shape
        prims = [a, _take(b, op, 1)]
    if prims is None:
        return _promoting(op, a, b)
    out_dtype = "bool" if op.kind == COMPARE else dtype
    try:
        prim = _execute(backend, op, prims, _NO_ATTRS, shape, out_dtype)
    except BaseException:
        _restore((a, b), prims)
        raise
    return Tensor(prim, backend, shape, out_dtype)


def _promoting(op, a, b):
    """The general case: promote dtypes, check scalars, cast what differs."""
    inputs = (a,) if b is _NO else (a, b)
    inputs = tuple(_operand(op.name, x) for x in inputs)
    tensors = [x for x in inputs if isinstance(x, Tensor)]
    backend = _backend_of(op.name, tensors)
    dt = D.result_type([t.dtype for t in tensors],
                       [x for x in inputs if not isinstance(x, Tensor)], op.name)
    if op.float_only:
        dt = D.to_float(dt)
    elif dt == "bool" and "bool" not in op.native:
        dt = D.DEFAULT_INT  # arithmetic on bools counts, as NumPy's sum does
    if dt not in op.native:
        raise DTypeError(f"{op.name}: dtype {dt} is not supported; it takes "
                         f"{', '.join(sorted(op.native))}")
    prims, shapes = [], []
    for x in inputs:
        if not isinstance(x, Tensor):
            prims.append(_scalar(op.name, x, dt))
            continue
        shapes.append(x.shape)
        if x.dtype == dt:
            prims.append(x._prim)  # not donated: only the fast path can tell it is unshared
        else:
            x = x.cast(dt)  # a fresh temporary nothing else sees: its buffer may be reused
            prims.append(x._prim)
            x._prim = None
    shape = shapes[0] if len(shapes) == 1 else S.broadcast(op.name, *shapes)
    out_dtype = "bool" if op.kind == COMPARE else dt
    return Tensor(_execute(backend, op, prims, _NO_ATTRS, shape, out_dtype), backend, shape,
                  out_dtype)


def _restore(inputs, prims):
    for x, p in zip(inputs, prims):
        if isinstance(x, Tensor) and x._prim is None:
            x._prim = p


def _apply(op, x, *rest, **attrs):
    """Run any primitive whose dtype rule is its own (no promotion): x is input 0.

    For an op with donors, `x` may lose its buffer when only the caller's frame refers to it:
    call this from a Tensor method with `self` as x (as slice_assign, scatter and mask_where
    do), never with a local tensor that is read afterwards. Ops without donors (nn/functional's
    convolutions and pools) may be run from anywhere."""
    # rules first (they may raise), then take x's buffer; `_take(x, ...)` must see the same
    # references on every path, so no tuple or loop variable holds x at that point
    if rest:
        _backend_of(op.name, (x,) + rest)
        shapes, dtypes, others = [x.shape], [x.dtype], []
        for t in rest:  # (a loop, not comprehensions: each of those is a call of its own)
            if isinstance(t, Tensor):
                shapes.append(t.shape)
                dtypes.append(t.dtype)
                others.append(t._prim)
            else:
                shapes.append(())
                dtypes.append(None)
                others.append(t)
        shape = op.shape(*shapes, **attrs)
        dtype = op.out_dtype(*dtypes, **attrs)
    else:
        shape = op.shape(x.shape, **attrs)
        dtype = op.out_dtype(x.dtype, **attrs)
        others = ()
    prims = [_take(x, op, 0)]
    prims += others
    try:
        prim = _execute(x.backend, op, prims, attrs, shape, dtype)
    except BaseException:
        _restore((x,) + rest, prims)
        raise
    return Tensor(prim, x.backend, shape, dtype)


def _unary(op):
    def method(self):
        return _elementwise(op, self)
    method.__name__ = op.name
    method.__doc__ = f"Elementwise {op.name} (primitive)."
    return method


def _binary(op, reflected=False):
    if reflected:
        def method(self, other):
            return _elementwise(op, other, self)
    else:
        def method(self, other):
            return _elementwise(op, self, other)
    method.__name__ = op.name
    return method


def _as_int_tuple(dims, op):
    if isinstance(dims, int):
        return (dims,)
    try:
        return tuple(int(d) for d in dims)
    except TypeError:
        raise ShapeError(f"{op}: expected an int or a sequence of ints, got {dims!r}") from None


def _dims_arg(args):
    """Accept reshape(2, 3) as well as reshape([2, 3])."""
    return args[0] if len(args) == 1 and not isinstance(args[0], int) else args


class Tensor:
    """An n-dimensional array on a backend. Immutable: every op returns a new tensor
    (`x[i] = v` rebinds x to a new tensor, it never changes another tensor's data)."""

    __slots__ = ("_prim", "backend", "shape", "dtype", "__weakref__")
    __array_ufunc__ = None  # NumPy defers to our reflected operators (which explain the fix)

    def __init__(self, prim, backend, shape, dtype):
        self._prim = prim
        self.backend = backend
        self.shape = shape
        self.dtype = dtype

    def _alias(self):
        # ops that change nothing still return a new Tensor object (sharing the data), so that
        # `y = x.reshape(x.shape); x[0] = 1` leaves y as it was
        return Tensor(self._prim, self.backend, self.shape, self.dtype)

    # ---- creation --------------------------------------------------------------------------
    @staticmethod
    def from_data(data, backend=None, dtype=None):
        """A tensor from a NumPy array, nested lists, a scalar or another Tensor (copied)."""
        backend = _resolve_backend(backend)
        if type(data) is np.ndarray and dtype is None:  # the common case (an input per call)
            want = D.of_numpy(data)
            array = np.array(data, dtype=want, copy=True, order="C")
            return Tensor(backend.from_numpy(array), backend, array.shape, want)
        if isinstance(data, Tensor):
            data = data.to_numpy()
        want = D.canonical(dtype, "from_data") if dtype is not None else None
        array = _to_array(data)
        have = D.of_numpy(array)
        if want is None:
            want = have
            if isinstance(data, (list, tuple, int, float, bool)):
                # Python numbers: floats become float32 and ints int32 (ember's defaults)
                want = {"float64": D.DEFAULT_FLOAT, "int64": D.DEFAULT_INT}.get(have, have)
                if want == "int32" and array.size and (
                        array.min() < -2**31 or array.max() >= 2**31):
                    raise DTypeError("from_data: integers outside int32's range; pass "
                                     "dtype='int64'")
        if array.dtype != want or not array.flags.c_contiguous or array.base is not None \
                or array is data:
            array = np.array(array, dtype=want, copy=True, order="C")
        return Tensor(backend.from_numpy(array), backend, array.shape, want)

    @staticmethod
    def full(shape, value, backend=None, dtype=None):
        backend = _resolve_backend(backend)
        shape = S.as_shape(shape, "full")
        if dtype is None:
            dtype = D.result_type([], [value], "full")
        dtype = D.canonical(dtype, "full")
        value = _fill_value("full", value, dtype)
        attrs = dict(shape_to=shape, value=value, dtype=dtype)
        return Tensor(_execute(backend, prims.full, [], attrs, shape, dtype), backend, shape,
                      dtype)

    @staticmethod
    def zeros(shape, backend=None, dtype=None):
        return Tensor.full(shape, 0, backend, dtype or D.DEFAULT_FLOAT)

    @staticmethod
    def ones(shape, backend=None, dtype=None):
        return Tensor.full(shape, 1, backend, dtype or D.DEFAULT_FLOAT)

    @staticmethod
    def arange(start, end=None, step=1, backend=None, dtype=None):
        """Values from start (inclusive) to end (exclusive); arange(n) counts from 0."""
        if end is None:
            start, end = 0, start
        if step == 0:
            raise ShapeError("arange: step must not be zero")
        dtype = D.canonical(dtype or D.result_type([], [start, end, step], "arange"), "arange")
        n = max(0, math.ceil((end - start) / step))
        if D.is_int(dtype) and n:  # checked before NumPy allocates: arange(2**33) is 64 GiB
            _scalar("arange", start, dtype)
            _scalar("arange", start + (n - 1) * step, dtype)
        try:
            values = np.arange(start, end, step)
        except MemoryError as e:
            _out_of_memory("arange", (n,), dtype, _resolve_backend(backend), e)
        return Tensor.from_data(values, backend, dtype)

    @staticmethod
    def eye(n, m=None, backend=None, dtype=None):
        return Tensor.from_data(np.eye(n, m), backend, dtype or D.DEFAULT_FLOAT)

    @staticmethod
    def random(shape, distribution=None, backend=None, dtype=None):
        """Samples of `distribution` (default: Distribution.Default, uniform in [0, 1))."""
        dist = Distribution.Default if distribution is None else distribution
        if not isinstance(dist, Distribution):
            raise TypeError(f"random: expected a Distribution, got {dist!r}; e.g. "
                            "Distribution.Normal(0, 1)")
        dtype = D.canonical(dtype or D.DEFAULT_FLOAT, "random")
        _host("drawing random numbers")
        shape = S.as_shape(shape, "random")
        try:
            samples = dist.sample(shape, dtype)
        except MemoryError as e:
            _out_of_memory("random", shape, dtype, _resolve_backend(backend), e)
        return Tensor.from_data(samples, backend, dtype)

    def new_zeros(self, shape):
        """Zeros of `shape` with this tensor's dtype and backend."""
        return Tensor.full(shape, 0, self.backend, self.dtype)

    def zeros_like(self):
        return Tensor.full(self.shape, 0, self.backend, self.dtype)

    def ones_like(self):
        return Tensor.full(self.shape, 1, self.backend, self.dtype)

    def full_like(self, value):
        return Tensor.full(self.shape, value, self.backend, self.dtype)

    # ---- data in and out -------------------------------------------------------------------
    @property
    def ndim(self):
        return len(self.shape)

    def numel(self):
        return S.prod(self.shape)

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def to_numpy(self):
        """The values as a NumPy array (blocks until the backend has computed them)."""
        _host("reading a tensor's values")
        return self.backend.to_numpy(self._prim)

    def to_numpy_async(self):
        """The values as a NumPy array, awaiting the backend (the browser's way to read)."""
        _host("reading a tensor's values")
        # the backend's awaitable itself (await it): one coroutine less per read
        return self.backend.to_numpy_async(self._prim)

    def __array__(self, dtype=None, copy=None):
        array = self.to_numpy()
        return array if dtype is None else array.astype(dtype)

    def item(self):
        if self.numel() != 1:
            raise ShapeError(f"item: needs exactly one element, the tensor has shape "
                             f"{S.fmt(self.shape)}")
        return self.to_numpy().reshape(()).item()

    def tolist(self):
        return self.to_numpy().tolist()

    def __bool__(self):
        if self.numel() != 1:
            raise ShapeError(f"the truth value of a tensor of shape {S.fmt(self.shape)} is "
                             "ambiguous; reduce it first (e.g. (x > 0).all())")
        return bool(self.item())

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def to(self, backend):
        """This tensor on another backend (itself if it is already there)."""
        if not isinstance(backend, Backend):
            raise BackendError(f"to: expected a backend such as NdArray(), got {backend!r}; "
                               "to change the dtype use .cast(dtype)")
        if backend == self.backend:  # same kind of data: share it, adopt the given backend
            return Tensor(self._prim, backend, self.shape, self.dtype)
        # into or out of a decorator (Autodiff(NdArray()) <-> NdArray()): no copy
        if backend.inner is not None and backend.inner == self.backend:
            return Tensor(backend.wrap(self._prim, self.shape, self.dtype), backend, self.shape,
                          self.dtype)
        if self.backend.inner is not None and self.backend.inner == backend:
            return Tensor(self.backend.unwrap(self._prim), backend, self.shape, self.dtype)
        array = np.array(self.to_numpy(), copy=True, order="C")
        return Tensor(backend.from_numpy(array), backend, self.shape, self.dtype)

    def cast(self, dtype):
        """This tensor's values as `dtype`."""
        dtype = D.canonical(dtype, "cast")
        if dtype == self.dtype:
            return self._alias()
        return _apply(prims.cast, self, dtype=dtype)

    def __repr__(self):
        body = np.array2string(self.to_numpy(), separator=", ", threshold=200, edgeitems=3,
                               prefix=" " * 12)
        return (f"Tensor(shape={S.fmt(self.shape)}, dtype={self.dtype}, "
                f"backend={self.backend},\n       data={body})")

    __str__ = __repr__
    __hash__ = object.__hash__

    # ---- elementwise primitives ------------------------------------------------------------
    exp = _unary(prims.exp)
    log = _unary(prims.log)
    sqrt = _unary(prims.sqrt)
    erf = _unary(prims.erf)
    gelu = _unary(prims.gelu)  # GELU with erf: the exact form, PyTorch's default
    relu = _unary(prims.relu)
    tanh = _unary(prims.tanh)
    sin = _unary(prims.sin)
    cos = _unary(prims.cos)
    abs = _unary(prims.abs)
    neg = _unary(prims.neg)
    __neg__ = neg
    __abs__ = abs

    add = __add__ = _binary(prims.add)
    sub = __sub__ = _binary(prims.sub)
    mul = __mul__ = _binary(prims.mul)
    div = __truediv__ = _binary(prims.div)
    powf = __pow__ = _binary(prims.pow)
    __radd__ = _binary(prims.add, reflected=True)
    __rsub__ = _binary(prims.sub, reflected=True)
    __rmul__ = _binary(prims.mul, reflected=True)
    __rtruediv__ = _binary(prims.div, reflected=True)
    __rpow__ = _binary(prims.pow, reflected=True)
    maximum = _binary(prims.maximum)
    minimum = _binary(prims.minimum)

    eq = __eq__ = _binary(prims.eq)
    ne = __ne__ = _binary(prims.ne)
    lt = __lt__ = _binary(prims.lt)
    le = __le__ = _binary(prims.le)
    gt = __gt__ = _binary(prims.gt)
    ge = __ge__ = _binary(prims.ge)
    equal, not_equal, lower, lower_equal, greater, greater_equal = eq, ne, lt, le, gt, ge

    # ---- elementwise composites ------------------------------------------------------------
    def sigmoid(self):
        # via tanh: no overflow for large |x|, one transcendental
        return (self * 0.5).tanh() * 0.5 + 0.5


    def clamp(self, min=None, max=None):  # noqa: A002  (PyTorch's argument names)
        out = self._alias()
        if min is not None:
            out = out.maximum(min)
        if max is not None:
            out = out.minimum(max)
        return out

    def clamp_min(self, min):  # noqa: A002
        return self.maximum(min)

    def clamp_max(self, max):  # noqa: A002
        return self.minimum(max)

    def sign(self):
        return (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)

    def square(self):
        return self * self

    def recip(self):
        return 1 / self

    def logical_not(self):
        return self._bool_operand("logical_not") == False  # noqa: E712

    def logical_and(self, other):
        other = Tensor._as_bool(other, self, "logical_and")
        return self._bool_operand("logical_and").mask_where(other.logical_not(), False)

    def logical_or(self, other):
        other = Tensor._as_bool(other, self, "logical_or")
        return self._bool_operand("logical_or").mask_where(other, True)

    __invert__ = logical_not
    __and__ = __rand__ = logical_and
    __or__ = __ror__ = logical_or

    def _bool_operand(self, op):
        if self.dtype != "bool":
            raise DTypeError(f"{op}: needs bool tensors, got {self.dtype}; compare first "
                             "(e.g. x > 0)")
        return self

    @staticmethod
    def _as_bool(other, like, op):
        if isinstance(other, bool):
            return Tensor.full(like.shape, other, like.backend, "bool")
        if not isinstance(other, Tensor):
            raise DTypeError(f"{op}: expected a bool tensor or a bool, got "
                             f"{type(other).__name__}")
        return other._bool_operand(op)

    def softmax(self, dim=-1):
        shifted = self - self.max_dim(dim).detach()
        e = shifted.exp()
        return e / e.sum_dim(dim)

    def log_softmax(self, dim=-1):
        shifted = self - self.max_dim(dim).detach()
        return shifted - shifted.exp().sum_dim(dim).log()

    # ---- reductions ------------------------------------------------------------------------
    def _reduce(self, op, dims, keepdim):
        name = op.name
        dims = S.norm_dims(name, _as_int_tuple(dims, name), self.ndim) if dims is not None \
            else tuple(range(self.ndim))
        x = self
        if op is _SUM and self.dtype == "bool":
            x = x.cast(D.DEFAULT_INT)
        if keepdim:
            return _apply(op, x, dims=dims)
        if op is _SUM:  # sum drops the dims itself: one op
            return _apply(op, x, dims=dims, keepdim=False)
        # the reduced dims have size 1: dropping them is a reshape that needs no checking
        out = _apply(op, x, dims=dims)
        return out._reshaped(tuple([s for i, s in enumerate(self.shape) if i not in dims]))

    def sum(self):
        """Sum of all elements, as a 0-d tensor."""
        if self.dtype not in _SUM.native:  # bool (counted as ints), or the rule's error
            return self._reduce(_SUM, None, False)
        # the commonest reduction, without _reduce's general steps, as one op: sum's own
        # keepdim=False drops the dims (one execute: a tiny sum's time is mostly calls)
        backend, dtype = self.backend, self.dtype
        return Tensor(_execute(backend, _SUM, [self._prim], _SUM_ALL[len(self.shape)], (),
                               dtype), backend, (), dtype)

    def sum_dim(self, dim):
        """Sum over `dim` (an int or a tuple of ints), keeping it with size 1 (as Burn)."""
        return self._reduce(prims.sum, dim, True)

    def mean(self):
        x = self if D.is_float(self.dtype) else self.cast(D.DEFAULT_FLOAT)
        return x.sum() / self.numel()  # nan for an empty tensor, as NumPy and PyTorch

    def mean_dim(self, dim):
        x = self if D.is_float(self.dtype) else self.cast(D.DEFAULT_FLOAT)
        dims = _as_int_tuple(dim, "mean_dim")
        count = S.prod(self.shape[S.norm_dim("mean_dim", d, self.ndim)] for d in dims)
        return x.sum_dim(dims) / count

    def max(self):
        return self._reduce(prims.max, None, False)

    def min(self):
        return self._reduce(prims.min, None, False)

    def max_dim(self, dim):
        return self._reduce(prims.max, dim, True)

    def min_dim(self, dim):
        return self._reduce(prims.min, dim, True)

    def argmax(self, dim):
        """Index of the largest value along `dim` (int32), keeping the dim (as Burn)."""
        return self._reduce(prims.argmax, S.norm_dim("argmax", dim, self.ndim), True)

    def argmin(self, dim):
        return self._reduce(prims.argmin, S.norm_dim("argmin", dim, self.ndim), True)

    def all(self):
        """True where every element is true (also for an empty tensor), as a 0-d bool."""
        return self._bool_operand("all").logical_not().cast(D.DEFAULT_INT).sum() == 0

    def any(self):
        return self._bool_operand("any").cast(D.DEFAULT_INT).sum() > 0

    # ---- shape -----------------------------------------------------------------------------
    def reshape(self, *shape):
        shape = S.reshape("reshape", self.shape, _dims_arg(shape))
        if shape == self.shape:
            return self._alias()
        return self._reshaped(shape)

    def _reshaped(self, shape):
        # `shape` resolved and checked by the caller, and reshape takes no donors: no need for
        # _apply's second pass over the op's rules (a batch-1 forward runs a dozen reshapes)
        prim = _execute(self.backend, _RESHAPE, [self._prim], {"shape_to": shape}, shape,
                        self.dtype)
        return Tensor(prim, self.backend, shape, self.dtype)

    def permute(self, *dims):
        dims = _dims_arg(dims)
        if len(dims) != self.ndim:
            raise ShapeError(f"permute: {tuple(dims)} names {len(dims)} dims, the tensor of "
                             f"shape {S.fmt(self.shape)} has {self.ndim}")
        dims = S.norm_dims("permute", dims, self.ndim)
        if dims == tuple(range(self.ndim)):
            return self._alias()
        return _apply(prims.permute, self, dims=dims)

    def swap_dims(self, dim1, dim2):
        dims = list(range(self.ndim))
        a, b = S.norm_dim("swap_dims", dim1, self.ndim), S.norm_dim("swap_dims", dim2, self.ndim)
        dims[a], dims[b] = dims[b], dims[a]
        return self.permute(dims)

    def transpose(self):
        """Swap the last two dims (Burn's transpose)."""
        return self.swap_dims(-2, -1)

    def flatten(self, start_dim=0, end_dim=-1):
        if self.ndim == 0:
            return self.reshape((1,))
        a = S.norm_dim("flatten", start_dim, self.ndim)
        b = S.norm_dim("flatten", end_dim, self.ndim)
        if a > b:
            raise ShapeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
        return self.reshape(self.shape[:a] + (S.prod(self.shape[a:b + 1]),) + self.shape[b + 1:])

    def squeeze(self, dim=None):
        """Drop `dim` (which must have size 1), or every dim of size 1."""
        if dim is None:
            return self.reshape(tuple(s for s in self.shape if s != 1))
        dims = S.norm_dims("squeeze", _as_int_tuple(dim, "squeeze"), self.ndim)
        for d in dims:
            if self.shape[d] != 1:
                raise ShapeError(f"squeeze: dim {d} has size {self.shape[d]}, not 1 (shape "
                                 f"{S.fmt(self.shape)})")
        return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in dims))

    def unsqueeze(self, dim=0):
        d = S.norm_dim("unsqueeze", dim, self.ndim + 1)
        return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

    def expand(self, *shape):
        """Broadcast to `shape` (-1 keeps a dim), without copying where the backend can."""
        shape = tuple(_dims_arg(shape))
        if len(shape) < self.ndim:
            raise ShapeError(f"expand: cannot expand {S.fmt(self.shape)} to fewer dims "
                             f"{S.fmt(shape)}")
        lead = len(shape) - self.ndim
        shape = tuple(self.shape[i - lead] if s == -1 and i >= lead else s
                      for i, s in enumerate(shape))
        shape = S.as_shape(shape, "expand")
        if shape == self.shape:
            return self._alias()
        return _apply(prims.expand, self, shape_to=shape)

    def repeat(self, *sizes):
        """Tile the tensor `sizes[i]` times along dim i (PyTorch's repeat)."""
        sizes = _as_int_tuple(_dims_arg(sizes), "repeat")
        if len(sizes) < self.ndim:
            raise ShapeError(f"repeat: {len(sizes)} sizes for a tensor of rank {self.ndim}")
        base = (1,) * (len(sizes) - self.ndim) + self.shape
        # (s0, s1) -> (1, s0, 1, s1) -> expand to (r0, s0, r1, s1) -> (r0*s0, r1*s1)
        x = self.reshape(tuple(v for s in base for v in (1, s)))
        x = x.expand(tuple(v for r, s in zip(sizes, base) for v in (r, s)))
        return x.reshape(tuple(r * s for r, s in zip(sizes, base)))

    @staticmethod
    def cat(tensors, dim=0):
        tensors = list(tensors)
        if not tensors:
            raise ShapeError("cat: needs at least one tensor")
        ndim = tensors[0].ndim
        if any(t.ndim != ndim for t in tensors):
            raise ShapeError("cat: all tensors need the same rank, got shapes "
                             + ", ".join(S.fmt(t.shape) for t in tensors))
        if ndim == 0:
            raise ShapeError("cat: cannot concatenate 0-d tensors; use Tensor.stack")
        dim = S.norm_dim("cat", dim, ndim)
        dtype = D.result_type([t.dtype for t in tensors], (), "cat")
        tensors = [t.cast(dtype) for t in tensors]
        if len(tensors) == 1:
            return tensors[0]
        return _apply(prims.cat, *tensors, dim=dim)

    @staticmethod
    def stack(tensors, dim=0):
        tensors = list(tensors)
        if not tensors:
            raise ShapeError("stack: needs at least one tensor")
        d = S.norm_dim("stack", dim, tensors[0].ndim + 1)
        return Tensor.cat([t.unsqueeze(d) for t in tensors], d)

    # ---- indexing --------------------------------------------------------------------------
    def __getitem__(self, key):
        key = _plain_ints(key, self.shape)
        index = _tensor_index(key)
        if index is not None:
            pos, idx = index
            return self.select(pos, idx)
        starts, stops, steps, final = S.parse_index(self.shape, key)
        if (starts, stops, steps) == ((0,) * self.ndim, self.shape, (1,) * self.ndim):
            return self.reshape(final)
        return _apply(prims.slice, self, starts=starts, stops=stops, steps=steps).reshape(final)

    def slice_assign(self, key, value):
        """A copy of this tensor with `self[key]` replaced by `value` (broadcast to fit)."""
        starts, stops, steps, indexed = S.parse_index(self.shape, key)
        region = S.slice_shape(starts, stops, steps)  # `indexed` with int dims kept as size 1
        if isinstance(value, Tensor):
            value = value.cast(self.dtype)
            if value.shape != region:
                # NumPy's rule: the value broadcasts to the shape that self[key] has
                if value.ndim > len(indexed) or S.broadcast(
                        "slice_assign", value.shape, indexed) != indexed:
                    raise ShapeError(
                        f"slice_assign: a value of shape {S.fmt(value.shape)} does not "
                        f"broadcast to {S.fmt(indexed)}, the shape of x[key] (x has shape "
                        f"{S.fmt(self.shape)})")
                value = value.expand(indexed).reshape(region)
        else:
            value = _fill_value("slice_assign", _operand("slice_assign", value), self.dtype)
        return _apply(prims.slice_assign, self, value, starts=starts, stops=stops, steps=steps)

    def __setitem__(self, key, value):
        # rebinding, not mutation: other tensors that shared this one's data are unaffected
        new = self.slice_assign(key, value)
        self._prim = new._prim

    def gather(self, dim, indices):
        """`out[i][j] = self[indices[i][j]][j]` along `dim` (torch.gather); indices as self's
        rank."""
        dim = S.norm_dim("gather", dim, self.ndim)
        return _apply(prims.gather, self, _index_tensor("gather", indices, self), dim=dim)

    def scatter(self, dim, indices, values):
        """A copy of self with `values` *added* at `indices` along `dim` (Burn's scatter)."""
        dim = S.norm_dim("scatter", dim, self.ndim)
        values = _value_tensor("scatter", values, self).cast(self.dtype)
        return _apply(prims.scatter, self, _index_tensor("scatter", indices, self), values,
                      dim=dim)

    def select(self, dim, indices):
        """The entries at `indices` (1-D) along `dim` (torch.index_select)."""
        dim = S.norm_dim("select", dim, self.ndim)
        return _apply(prims.select, self, _index_tensor("select", indices, self), dim=dim)

    def mask_where(self, mask, value):
        """`value` where `mask` is true, self elsewhere (Burn's mask_where)."""
        if isinstance(value, Tensor):
            value = value.cast(self.dtype)
        else:
            value = _fill_value("mask_where", _operand("mask_where", value), self.dtype)
        return _apply(prims.mask_where, self, mask, value)

    def mask_fill(self, mask, value):
        """`value` (a scalar) where `mask` is true, self elsewhere."""
        if isinstance(value, Tensor):
            raise DTypeError("mask_fill: value must be a scalar; use mask_where for tensors")
        return self.mask_where(mask, value)

    # ---- linear algebra --------------------------------------------------------------------
    def matmul(self, other):
        """Matrix product with NumPy's rules: batch dims broadcast, 1-D operands become a row
        (left) or a column (right) and that dim is dropped from the result."""
        if isinstance(other, Tensor) and self.dtype == other.dtype != "bool":
            a, b = self.shape, other.shape
            if (len(a) == len(b) == 2 and a[1] == b[0] and self.dtype in _MATMUL.native
                    and (other.backend is self.backend
                         or other.backend._identity == self.backend._identity)):
                # 2-D, one dtype, one backend: the rules' answer without running them (matmul
                # takes no donors, so nothing to hand back on an error either)
                shape = (a[0], b[1])
                return Tensor(_execute(self.backend, _MATMUL, [self._prim, other._prim],
                                       _NO_ATTRS, shape, self.dtype), self.backend, shape,
                              self.dtype)
            if len(a) > 1 and len(b) > 1:
                return _apply(prims.matmul, self, other)  # no promotion, no 1-D
        if not isinstance(_operand("matmul", other), Tensor):
            raise DTypeError(f"matmul: expected a Tensor, got {type(other).__name__}; use * "
                             "to scale by a number")
        if self.ndim == 0 or other.ndim == 0:
            raise ShapeError(f"matmul: 0-d operands have no matrix product ({S.fmt(self.shape)} "
                             f"@ {S.fmt(other.shape)}); use * instead")
        a = self.unsqueeze(0) if self.ndim == 1 else self
        b = other.unsqueeze(-1) if other.ndim == 1 else other
        if a.dtype != b.dtype or a.dtype == "bool":
            dtype = D.result_type([a.dtype, b.dtype], (), "matmul")
            dtype = D.DEFAULT_INT if dtype == "bool" else dtype
            a, b = a.cast(dtype), b.cast(dtype)
        out = _apply(prims.matmul, a, b)
        if other.ndim == 1:
            out = out.squeeze(-1)
        if self.ndim == 1:
            out = out.squeeze(-2 if other.ndim > 1 else -1)
        return out

    __matmul__ = matmul

    def __rmatmul__(self, other):
        _operand("matmul", other)  # explains arrays and lists
        raise DTypeError(f"matmul: expected a Tensor on the left, got {type(other).__name__}")

    # ---- autodiff (implemented by the Autodiff backend decorator) ---------------------------
    def require_grad(self):
        """Track gradients for this tensor (needs an Autodiff backend)."""
        return self._autodiff("require_grad")(self)

    def is_require_grad(self):
        fn = getattr(self.backend, "is_require_grad", None)
        return bool(fn and fn(self))

    def detach(self):
        """This tensor cut from the autodiff graph (itself on other backends)."""
        fn = getattr(self.backend, "detach", None)
        return fn(self) if fn else self._alias()

    def backward(self, retain_graph=False):
        """Gradients of this tensor with respect to every tensor that requires them (an
        ember.Gradients). A non-scalar tensor is seeded with ones, as Burn does."""
        return self._autodiff("backward")(self, retain_graph=retain_graph)

    def grad(self, grads):
        """This tensor's gradient in `grads` (from backward()), or None."""
        return grads.get(self)

    def _autodiff(self, what):
        fn = getattr(self.backend, what, None)
        if fn is None:
            raise BackendError(f"{what}: the backend {self.backend} does not compute gradients; "
                               f"wrap it: Autodiff({self.backend}) and create the tensors there "
                               "(or move them with .to(Autodiff(...)))")
        return fn


# ---- helpers for creation and indexing ------------------------------------------------------
def _resolve_backend(backend):
    if backend is None:
        return default_backend()
    if not isinstance(backend, Backend):
        raise BackendError(f"expected a backend such as NdArray(), got {backend!r}")
    return backend


def _to_array(data):
    if isinstance(data, np.ndarray):
        return data
    if isinstance(data, (str, bytes)):
        raise DTypeError(f"from_data: cannot make a tensor from {type(data).__name__}")
    try:
        return np.array(data)
    except ValueError as e:
        raise ShapeError(f"from_data: nested lists must be rectangular (every row the same "
                         f"length); NumPy says: {e}") from None


def _plain_ints(key, shape):
    """0-d int tensors index like ints (as in NumPy and PyTorch: it reads the value), and
    negative entries of list/array indices count from the end."""
    parts = key if isinstance(key, tuple) else (key,)
    if not any(isinstance(k, (Tensor, list, np.ndarray)) for k in parts):
        return key
    out, dim = [], 0
    for k in parts:
        if isinstance(k, Tensor) and k.ndim == 0 and D.is_int(k.dtype):
            k = k.item()
        elif isinstance(k, (list, np.ndarray)) and dim < len(shape):
            a = np.asarray(k)
            if a.dtype.kind in "iu" and a.size and a.min() < 0:
                k = np.where(a < 0, a + shape[dim], a)
        if k is Ellipsis:
            dim = len(shape) - sum(1 for p in parts if p is not None and p is not Ellipsis)
        elif k is not None:
            dim += 1
        out.append(k)
    return tuple(out) if isinstance(key, tuple) else out[0]


def _tensor_index(key):
    """(dim, indices) when `key` selects along one dim with a 1-D int tensor/list, else None."""
    parts = key if isinstance(key, tuple) else (key,)
    found = [i for i, k in enumerate(parts) if isinstance(k, (Tensor, list, np.ndarray))]
    if not found:
        return None
    if len(found) > 1 or any(k != slice(None) for i, k in enumerate(parts) if i not in found):
        raise ShapeError("index: a tensor/list index is supported alone or after full slices "
                         "(x[:, idx]); combine with select/gather for more")
    return found[0], parts[found[0]]


def _index_tensor(op, indices, like):
    if not isinstance(indices, Tensor):
        array = np.asarray(indices)
        # lists are int64 on 64-bit CPython and int32 in Pyodide: use ember's default int
        # wherever the values fit, so results (and what Wgpu accepts) do not depend on that
        fits = array.dtype.kind in "iu" and (not array.size or (
            array.min() >= -2**31 and array.max() < 2**31))
        indices = Tensor.from_data(array, like.backend, D.DEFAULT_INT if fits else None)
    if indices.dtype not in ("int32", "int64"):
        raise DTypeError(f"{op}: indices must be int32 or int64, got {indices.dtype}")
    return indices


def _value_tensor(op, values, like):
    if isinstance(values, Tensor):
        return values
    return Tensor.from_data(values, like.backend, like.dtype)


class _Probe(Backend):
    """A backend that runs nothing: it notes whether the latest probe tensor (a weak
    reference: the probe must count as it would alone) had given its buffer away."""

    latest, gave = None, []

    def execute(self, op, inputs, attrs, shape, dtype):
        t = _Probe.latest() if _Probe.latest is not None else None
        _Probe.gave.append(t is not None and t._prim is None)
        return inputs[0] if inputs and isinstance(inputs[0], np.ndarray) else np.zeros(1)


def _calibrate():
    """Set _UNSHARED to the highest limit at which no named tensor gives its buffer away, if
    at that limit every temporary reached through a call does; else donation stays off."""
    global _UNSHARED
    probe = _Probe()

    def fresh():
        t = Tensor(np.zeros(1, np.float32), probe, (1,), "float32")
        _Probe.latest = weakref.ref(t)
        return t

    def calls(make):
        _ = make().exp(), make().add(1), make().__add__(1), make().mask_where(mask, 0)

    def operators(make):
        _ = -make(), make() + 1, 1 + make(), make() * make()

    def local_named(run):  # a function's local variable, the commonest name of all
        t = fresh()
        run(lambda: t)

    def named_gives(limit):
        global _UNSHARED
        _UNSHARED, _Probe.gave, cell = limit, [], fresh()
        for run in (calls, operators):
            run(lambda: cell)
            local_named(run)
        return any(_Probe.gave)

    mask = Tensor(np.zeros(1, bool), probe, (1,), "bool")
    try:
        limit = next((k - 1 for k in range(1, 64) if named_gives(k)), -1)
        _UNSHARED, _Probe.gave = limit, []
        calls(fresh)
        temporary = list(_Probe.gave)
    finally:
        _UNSHARED, _Probe.latest = -1, None
    if limit > 0 and all(temporary):
        _UNSHARED = limit
    return dict(limit=limit, temporary_donated=temporary)


_CALIBRATION = _calibrate()
