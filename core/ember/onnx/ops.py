"""The ONNX op table: (domain, op_type) -> a function of ember Tensor ops. One entry per op.

Each function is `fn(c, a, *inputs)`: c the run's context (backend, opset, value helpers), a the
node's attributes (a dict), inputs the node's values: Tensors, NumPy arrays (constants: shape
arithmetic that folds on the host) or None (an optional input left out). It returns one value
or a tuple. Everything is a composition of ember's Tensor methods and primitives, so it runs on
every backend and Autodiff differentiates it; where an opset changed an op's signature (inputs
that used to be attributes), the function reads c.opset.
"""

import math

import numpy as np

from ..ops import OPS as PRIMS
from ..tensor import Tensor, _apply
from .proto import DTYPES, OnnxError, dtype_name

OPS = {}
_EMBER = ("bool", "int32", "int64", "float32", "float64")


def op(*names):
    def register(fn):
        for name in names:
            OPS[("", name)] = fn
        return fn
    return register


def ember_dtype(code, what):
    name = DTYPES.get(code)
    if name not in _EMBER:
        raise OnnxError(f"onnx: {what} needs dtype {dtype_name(code)}, which ember does not have "
                        "(unsupported: dtype)")
    return name


# the most elements an op may create from sizes the model gives (ConstantOfShape, Range, Expand,
# Tile): a hostile file must not make the loader's folding (or a run) allocate what it claims
MAX_ELEMENTS = 1 << 28


def _sized(op_type, shape):
    shape = tuple(int(s) for s in shape)
    if math.prod(shape) > MAX_ELEMENTS or any(s < 0 for s in shape):
        raise OnnxError(f"onnx: {op_type} asks for a tensor of shape {list(shape)}, more than "
                        f"{MAX_ELEMENTS} elements (ember.onnx.ops.MAX_ELEMENTS); refused")
    return shape


def ints(v):
    return [int(i) for i in np.asarray(v if not isinstance(v, Tensor) else v.to_numpy()).ravel()]


def _axes(axes, ndim):
    return sorted({a + ndim if a < 0 else a for a in axes})


def _float(x):
    return x if x.dtype in ("float32", "float64") else x.cast("float32")


# ---- elementwise --------------------------------------------------------------------------
def unary(name, fn):
    OPS[("", name)] = lambda c, a, x: fn(c.t(x), a)


for _name, _fn in {
    "Abs": lambda x, a: x.abs(), "Neg": lambda x, a: -x, "Exp": lambda x, a: x.exp(),
    "Log": lambda x, a: x.log(), "Sqrt": lambda x, a: x.sqrt(), "Erf": lambda x, a: x.erf(),
    "Tanh": lambda x, a: x.tanh(), "Sin": lambda x, a: x.sin(), "Cos": lambda x, a: x.cos(),
    "Relu": lambda x, a: x.relu(), "Sigmoid": lambda x, a: x.sigmoid(),
    "Reciprocal": lambda x, a: 1 / x, "Tan": lambda x, a: x.sin() / x.cos(),
    "Sinh": lambda x, a: (x.exp() - (-x).exp()) * 0.5,
    "Cosh": lambda x, a: (x.exp() + (-x).exp()) * 0.5,
    "Asinh": lambda x, a: (x + (x * x + 1).sqrt()).log(),
    "Acosh": lambda x, a: (x + (x * x - 1).sqrt()).log(),
    "Atanh": lambda x, a: ((1 + x) / (1 - x)).log() * 0.5,
    "Sign": lambda x, a: x.sign(), "Not": lambda x, a: x.logical_not(),
    "Softsign": lambda x, a: x / (x.abs() + 1),
    "Softplus": lambda x, a: x.maximum(0) + ((-x.abs()).exp() + 1).log(),
    "Elu": lambda x, a: x.mask_where(x < 0, (x.minimum(0).exp() - 1) * a.get("alpha", 1.0)),
    "Selu": lambda x, a: x.mask_where(x <= 0, (x.minimum(0).exp() - 1) * a.get(
        "alpha", 1.67326319217681884765625)) * a.get("gamma", 1.05070102214813232421875),
    "Celu": lambda x, a: x.maximum(0) + ((x / a.get("alpha", 1.0)).minimum(0).exp() - 1) * a.get(
        "alpha", 1.0),
    "LeakyRelu": lambda x, a: x.mask_where(x < 0, x * a.get("alpha", 0.01)),
    "ThresholdedRelu": lambda x, a: x.mask_where(x <= a.get("alpha", 1.0), 0),
    "HardSigmoid": lambda x, a: (x * a.get("alpha", 0.2) + a.get("beta", 0.5)).clamp(0, 1),
    "HardSwish": lambda x, a: x * (x * (1 / 6) + 0.5).clamp(0, 1),
    "Mish": lambda x, a: x * (x.maximum(0) + ((-x.abs()).exp() + 1).log()).tanh(),
    "Swish": lambda x, a: x * (x * a.get("alpha", 1.0)).sigmoid(),
    "IsNaN": lambda x, a: x != x,
    "Floor": lambda x, a: _floor(x), "Ceil": lambda x, a: -_floor(-x),
    "Round": lambda x, a: _round(x),
    "Gelu": lambda x, a: x.gelu() if a.get("approximate", "none") == "none" else (
        x * ((x + x * x * x * 0.044715) * math.sqrt(2 / math.pi)).tanh() + x) * 0.5,
    "Shrink": lambda x, a: (x + a.get("bias", 0.0)).mask_where(
        x >= -a.get("lambd", 0.5), 0).mask_where(x > a.get("lambd", 0.5), x - a.get("bias", 0.0)),
}.items():
    unary(_name, _fn)


def _floor(x):
    if x.dtype not in ("float32", "float64"):
        return x._alias()
    # exact where |x| < 2^23 (2^52): larger floats (and inf, NaN) are whole numbers already
    big = abs(x) < (2.0 ** 23 if x.dtype == "float32" else 2.0 ** 52)
    whole = "int32" if x.dtype == "float32" else "int64"  # (Wgpu holds no int64)
    t = x.mask_where(big.logical_not(), 0).cast(whole).cast(x.dtype)  # truncated
    return x.mask_where(big, t - (t > x).cast(x.dtype))


def _round(x):  # half to even, as ONNX
    r = _floor(x + 0.5)
    odd = (r - _floor(r * 0.5) * 2) == 1
    return r.mask_where(((r - x) == 0.5).logical_and(odd), r - 1)


@op("IsInf")
def _isinf(c, a, x):
    x = c.t(x)
    none = Tensor.full(x.shape, False, c.backend, "bool")
    pos = (x == math.inf) if a.get("detect_positive", 1) else none
    return pos.logical_or((x == -math.inf) if a.get("detect_negative", 1) else none)


@op("Identity", "Dropout")
def _identity(c, a, x, ratio=None, training=None):
    if training is not None and c.np(training).item() and (
            ratio is None or c.np(ratio).item() > 0):
        raise OnnxError("onnx: Dropout in training mode draws random numbers; ember runs it in "
                        "inference mode only (unsupported: Dropout training)")
    x = x if isinstance(x, np.ndarray) else c.t(x)._alias()
    if c.outputs > 1:  # Dropout's mask: all kept
        return x, Tensor.full(x.shape, True, c.backend, "bool")
    return x


def _int_divide(a, b, trunc=True):
    q = a.cast("float64") / b.cast("float64")
    return q.cast(a.dtype) if trunc else _floor(q).cast(a.dtype)


def binary(name, fn):
    def run(c, a, x, y):
        x, y = c.t(x), c.t(y)
        if x.dtype != y.dtype and name not in ("Pow", "BitShift"):
            raise OnnxError(f"onnx: {name} got {x.dtype} and {y.dtype}; ONNX needs one dtype")
        return fn(x, y, a)
    OPS[("", name)] = run


for _name, _fn in {
    "Add": lambda x, y, a: x + y, "Sub": lambda x, y, a: x - y, "Mul": lambda x, y, a: x * y,
    "Div": lambda x, y, a: x / y if x.dtype[0] == "f" else _int_divide(x, y),
    "Pow": lambda x, y, a: (_float(x) ** _float(y).cast(_float(x).dtype)).cast(x.dtype),
    "Mod": lambda x, y, a: _mod(x, y, a.get("fmod", 0)),
    "Equal": lambda x, y, a: x == y, "Less": lambda x, y, a: x < y,
    "Greater": lambda x, y, a: x > y, "LessOrEqual": lambda x, y, a: x <= y,
    "GreaterOrEqual": lambda x, y, a: x >= y, "And": lambda x, y, a: x.logical_and(y),
    "Or": lambda x, y, a: x.logical_or(y), "Xor": lambda x, y, a: x != y,
}.items():
    binary(_name, _fn)


def _mod(x, y, fmod):
    if x.dtype[0] != "f":
        return x - _int_divide(x, y, trunc=bool(fmod)) * y
    q = x / y
    q = q.mask_where(q < 0, -_floor(-q)).mask_where(q >= 0, _floor(q)) if fmod else _floor(q)
    r = x - q * y
    if fmod:
        return r.mask_where(y.abs() == math.inf, x)
    # x mod +-inf: x where the signs agree (or x is 0), else the divisor (NumPy's rule)
    same = ((x >= 0).logical_and(y > 0)).logical_or((x <= 0).logical_and(y < 0))
    finite = x.abs() < math.inf
    return r.mask_where((y.abs() == math.inf).logical_and(finite), y.mask_where(same, x))


def variadic(name, fn):
    def run(c, a, *xs):
        out = c.t(xs[0])
        for x in xs[1:]:
            out = fn(out, c.t(x))
        return out / len(xs) if name == "Mean" else out
    OPS[("", name)] = run


for _name, _fn in {"Sum": Tensor.add, "Mean": Tensor.add, "Max": Tensor.maximum,
                   "Min": Tensor.minimum}.items():
    variadic(_name, _fn)


@op("Clip")
def _clip(c, a, x, lo=None, hi=None):
    x = c.t(x)
    if c.opset < 11:
        lo, hi = a.get("min", -math.inf), a.get("max", math.inf)
    lo = None if lo is None else c.np(lo).item()
    hi = None if hi is None else c.np(hi).item()
    return x.clamp(lo, hi)


@op("PRelu")
def _prelu(c, a, x, slope):
    x = c.t(x)
    return x.mask_where(x < 0, x * c.t(slope))


@op("Where")
def _where(c, a, cond, x, y):
    x, y, cond = c.t(x), c.t(y), c.t(cond)
    return y.expand(np.broadcast_shapes(x.shape, y.shape, cond.shape)).mask_where(cond, x)


@op("Cast")
def _cast(c, a, x):
    to = ember_dtype(a.get("to"), "Cast")
    if isinstance(x, np.ndarray):
        return x.astype(to)
    return c.t(x).cast(c.dtype(to))


@op("CastLike")
def _cast_like(c, a, x, like):
    to = like.dtype if isinstance(like, Tensor) else like.dtype.name
    return x.astype(to) if isinstance(x, np.ndarray) else c.t(x).cast(to)


# ---- linear algebra -------------------------------------------------------------------------
@op("MatMul")
def _matmul(c, a, x, y):
    return c.t(x) @ c.t(y)


@op("Gemm")
def _gemm(c, a, x, y, z=None):
    x, y = c.t(x), c.t(y)
    x = x.transpose() if a.get("transA", 0) else x
    y = y.transpose() if a.get("transB", 0) else y
    out = x @ y
    if a.get("alpha", 1.0) != 1.0:
        out = out * a["alpha"]
    if z is not None:
        z = c.t(z)
        out = out + (z * a["beta"] if a.get("beta", 1.0) != 1.0 else z)
    return out


@op("Det")
def _det(c, a, x):
    """Gaussian elimination with partial pivoting, as tensor ops: each column's pivot row is
    swapped in by a one-hot row difference (no value is read on the host); the determinant is
    the pivots' product, its sign flipped per swap."""
    x = c.t(x)
    n = x.shape[-1]
    rows = np.arange(n).reshape(n, 1)
    det = Tensor.full(x.shape[:-2], 1.0, c.backend, x.dtype)
    for k in range(n):
        col = x[..., :, k:k + 1].abs().mask_where(c.t(rows < k), -1)  # [..., n, 1]
        hot = (col.argmax(-2) == c.t(rows.astype(np.int32))).cast(x.dtype)
        unit = c.t((rows == k).astype(x.dtype))
        x = x + (unit - hot) * ((hot * x).sum_dim(-2) - x[..., k:k + 1, :])  # rows k, p swap
        pivot = x[..., k, k]
        det = det * pivot * (hot[..., k, 0] * 2 - 1)  # -1 where a row came up
        safe = pivot.mask_where(pivot == 0, 1).reshape(pivot.shape + (1, 1))
        below = c.t((rows > k).astype(x.dtype))
        x = x - x[..., :, k:k + 1] / safe * below * x[..., k:k + 1, :]
    return det


# ---- shapes -------------------------------------------------------------------------------
@op("Shape")
def _shape(c, a, x):
    shape = list(x.shape)
    start, end = a.get("start", 0), a.get("end", len(shape))
    return np.array(shape[slice(start, end)], np.int64)


@op("Size")
def _size(c, a, x):
    return np.array(math.prod(x.shape), np.int64)


def _host_or_tensor(x, np_fn, t_fn, c):
    return np_fn(x) if isinstance(x, np.ndarray) else t_fn(c.t(x))


@op("Reshape")
def _reshape(c, a, x, shape=None):
    shape = ints(shape) if c.opset >= 5 else list(a.get("shape", []))
    if not a.get("allowzero", 0):
        shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return _host_or_tensor(x, lambda v: v.reshape(shape), lambda t: t.reshape(shape), c)


@op("Flatten")
def _flatten(c, a, x):
    axis = a.get("axis", 1)
    axis += len(x.shape) if axis < 0 else 0
    shape = (math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))
    return _host_or_tensor(x, lambda v: v.reshape(shape), lambda t: t.reshape(shape), c)


@op("Transpose")
def _transpose(c, a, x):
    perm = a.get("perm", list(range(len(x.shape)))[::-1])
    return _host_or_tensor(x, lambda v: v.transpose(perm), lambda t: t.permute(perm), c)


@op("Squeeze")
def _squeeze(c, a, x, axes=None):
    axes = a.get("axes") if c.opset < 13 else (None if axes is None else ints(axes))
    if axes is None:
        shape = [s for s in x.shape if s != 1]
    else:
        drop = _axes(axes, len(x.shape))
        if any(x.shape[d] != 1 for d in drop):
            raise OnnxError(f"onnx: Squeeze of axes {axes} of shape {list(x.shape)}: not size 1")
        shape = [s for i, s in enumerate(x.shape) if i not in drop]
    return _host_or_tensor(x, lambda v: v.reshape(shape), lambda t: t.reshape(shape), c)


@op("Unsqueeze")
def _unsqueeze(c, a, x, axes=None):
    axes = a.get("axes", []) if c.opset < 13 else ints(axes)
    shape = list(x.shape)
    for d in _axes(axes, len(shape) + len(axes)):
        shape.insert(d, 1)
    return _host_or_tensor(x, lambda v: v.reshape(shape), lambda t: t.reshape(shape), c)


@op("Concat")
def _concat(c, a, *xs):
    axis = a.get("axis", 1)  # (optional, 1, before opset 4)
    if all(isinstance(x, np.ndarray) for x in xs):
        return np.concatenate(xs, axis)
    xs = [c.t(x) for x in xs if math.prod(x.shape) or len(xs) == 1]
    return Tensor.cat(xs, axis) if len(xs) > 1 else xs[0]._alias()


@op("Split")
def _split(c, a, x, split=None):
    x = c.t(x)
    axis = a.get("axis", 0) % x.ndim
    sizes = a.get("split") if c.opset < 13 else (None if split is None else ints(split))
    if sizes is None:
        n = a.get("num_outputs", c.outputs)
        step = -(-x.shape[axis] // n)
        sizes = [min(step, x.shape[axis] - i * step) for i in range(n)]
    outs, at = [], 0
    for s in sizes:
        outs.append(x[(slice(None),) * axis + (slice(at, at + s),)])
        at += s
    return tuple(outs)


@op("Slice")
def _slice(c, a, x, starts=None, ends=None, axes=None, steps=None):
    if c.opset < 10:
        starts, ends, axes = a["starts"], a["ends"], a.get("axes")
    else:
        starts, ends = ints(starts), ints(ends)
        axes = None if axes is None else ints(axes)
        steps = None if steps is None else ints(steps)
    ndim = len(x.shape)
    axes = list(range(len(starts))) if axes is None else [d % ndim for d in axes]
    key = [slice(None)] * ndim
    for i, d in enumerate(axes):
        key[d] = slice(starts[i], ends[i], 1 if steps is None else steps[i])
    key = tuple(key)
    return _host_or_tensor(x, lambda v: v[key], lambda t: t[key], c)


@op("Gather")
def _gather(c, a, x, idx):
    axis = a.get("axis", 0) % len(x.shape)
    n = x.shape[axis]
    if isinstance(idx, np.ndarray):
        idx = np.where(idx < 0, idx + n, idx)
        if isinstance(x, np.ndarray):
            return np.take(x, idx, axis)
    idx = c.t(idx)
    idx = idx.mask_where(idx < 0, idx + n)
    out = c.t(x).select(axis, idx.reshape(idx.numel()))
    return out.reshape(x.shape[:axis] + idx.shape + x.shape[axis + 1:])


@op("GatherElements")
def _gather_elements(c, a, x, idx):
    x, idx = c.t(x), c.t(idx)
    axis = a.get("axis", 0) % x.ndim
    idx = idx.mask_where(idx < 0, idx + x.shape[axis])
    x = x[tuple(slice(None) if d == axis else slice(0, s) for d, s in enumerate(idx.shape))]
    return x.gather(axis, idx)


@op("Expand")
def _expand(c, a, x, shape):
    x = c.t(x)
    return x.expand(_sized("Expand", np.broadcast_shapes(x.shape, tuple(ints(shape)))))


@op("Tile")
def _tile(c, a, x, repeats):
    x, repeats = c.t(x), ints(repeats)
    _sized("Tile", [s * r for s, r in zip(x.shape, repeats)])
    return x.repeat(repeats)


@op("Constant")
def _constant(c, a):
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if key in a:
            return np.asarray(a[key], np.float32 if "float" in key else np.int64 if "int" in key
                              else None)
    raise OnnxError(f"onnx: Constant with {sorted(a)} (unsupported: Constant {sorted(a)})")


@op("ConstantOfShape")
def _constant_of_shape(c, a, shape):
    value = a.get("value", np.zeros(1, np.float32))
    return Tensor.full(_sized("ConstantOfShape", ints(shape)), value.ravel()[0].item(), c.backend,
                       c.dtype(value.dtype.name))


@op("Range")
def _range(c, a, start, limit, delta):
    start, limit, delta = (c.np(v).ravel()[0] for v in (start, limit, delta))
    n = _sized("Range", [max(int(math.ceil((limit - start) / delta)), 0)])[0]
    return (start + np.arange(n) * delta).astype(start.dtype)


@op("EyeLike")
def _eye_like(c, a, x):
    dtype = ember_dtype(a["dtype"], "EyeLike") if "dtype" in a else x.dtype
    return np.eye(*x.shape, k=a.get("k", 0)).astype(dtype)


@op("Trilu")
def _trilu(c, a, x, k=None):
    x = c.t(x)
    k = 0 if k is None else ints(k)[0]
    rows, cols = x.shape[-2:]
    keep = (np.triu if a.get("upper", 1) else np.tril)(np.ones((rows, cols), bool), k)
    return x.mask_where(c.t(~keep), 0)


@op("OneHot")
def _one_hot(c, a, idx, depth, values):
    idx, depth, values = c.t(idx), int(c.np(depth).item()), c.t(values)
    idx = idx.mask_where(idx < 0, idx + depth)
    axis = a.get("axis", -1) % (idx.ndim + 1)
    shape = [1] * (idx.ndim + 1)
    shape[axis] = depth
    hot = idx.unsqueeze(axis) == c.t(np.arange(depth, dtype=idx.dtype).reshape(shape))
    return values[0].expand(hot.shape).mask_where(hot, values[1])


@op("CumSum")
def _cumsum(c, a, x, axis):
    x, axis = c.t(x), ints(axis)[0]
    n = x.shape[axis]
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    m = (i >= j) if a.get("reverse", 0) else (i <= j)
    if a.get("exclusive", 0):
        m &= i != j
    out = x.swap_dims(axis, -1) @ c.t(m.astype(x.dtype))
    return out.swap_dims(axis, -1)


@op("DepthToSpace")
def _depth_to_space(c, a, x):
    x, b = c.t(x), a["blocksize"]
    n, ch, h, w = x.shape
    if a.get("mode", "DCR") == "DCR":
        y = x.reshape(n, b, b, ch // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, ch // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3)
    return y.reshape(n, ch // (b * b), h * b, w * b)


@op("SpaceToDepth")
def _space_to_depth(c, a, x):
    x, b = c.t(x), a["blocksize"]
    n, ch, h, w = x.shape
    y = x.reshape(n, ch, h // b, b, w // b, b).permute(
        (0, 3, 5, 1, 2, 4) if a.get("mode", "DCR") == "DCR" else (0, 1, 3, 5, 2, 4))
    return y.reshape(n, ch * b * b, h // b, w // b)


@op("Pad")
def _pad(c, a, x, pads=None, value=None, axes=None):
    x = c.t(x)
    if c.opset < 11:
        pads, value = a.get("pads", a.get("paddings")), a.get("value", 0.0)
    else:
        pads = ints(pads)
        value = 0 if value is None or not math.prod(value.shape) else c.np(value).item()
    axes = list(range(x.ndim)) if axes is None else _axes(ints(axes), x.ndim)
    mode = a.get("mode", "constant")
    for i, d in enumerate(axes):
        x = _pad_dim(c, x, d, pads[i], pads[i + len(axes)], mode, value)
    return x


def _pad_dim(c, x, d, before, after, mode, value):
    n = x.shape[d]
    if mode == "constant":
        x = x[(slice(None),) * d + (slice(max(-before, 0), n - max(-after, 0)),)]
        before, after = max(before, 0), max(after, 0)
        if not before and not after:
            return x
        shape = x.shape[:d] + (x.shape[d] + before + after,) + x.shape[d + 1:]
        full = Tensor.full(shape, value, c.backend, x.dtype)
        return full.slice_assign((slice(None),) * d + (slice(before, before + x.shape[d]),), x)
    pos = np.arange(-before, n + after)
    if mode == "edge":
        pos = np.clip(pos, 0, n - 1)
    elif mode == "wrap":
        pos = pos % n
    else:  # reflect
        period = 2 * (n - 1) if n > 1 else 1
        pos = np.abs(pos) % period
        pos = np.where(pos >= n, period - pos, pos)
    return x.select(d, pos.astype(np.int32))


# ---- reductions ----------------------------------------------------------------------------
_REDUCE = {
    "ReduceSum": (lambda x, d: x.sum_dim(d), 0), "ReduceMean": (lambda x, d: x.mean_dim(d), None),
    "ReduceMax": (lambda x, d: x.max_dim(d), -math.inf),
    "ReduceMin": (lambda x, d: x.min_dim(d), math.inf),
    "ReduceL1": (lambda x, d: x.abs().sum_dim(d), 0),
    "ReduceL2": (lambda x, d: (x * x).sum_dim(d).cast(_float(x).dtype).sqrt(), 0),
    "ReduceSumSquare": (lambda x, d: (x * x).sum_dim(d), 0),
    "ReduceLogSum": (lambda x, d: x.sum_dim(d).cast(_float(x).dtype).log(), -math.inf),
    "ReduceLogSumExp": (lambda x, d: _logsumexp(x, d), -math.inf),
    "ReduceProd": (lambda x, d: _prod(x, d), 1),
}


def _identity_of(value, dtype):
    if value is None or dtype[0] == "f":
        return math.nan if value is None else value
    if dtype == "bool":
        return value > 0 if value not in (0, 1) else bool(value)
    info = np.iinfo(dtype)
    return info.min if value == -math.inf else info.max if value == math.inf else value


def _logsumexp(x, dims):
    m = x.max_dim(dims).detach()
    m = m.mask_where((m == math.inf).logical_or(m == -math.inf), 0)
    return (x - m).exp().sum_dim(dims).log() + m


def _prod(x, dims):
    out = x
    for d in dims:  # one multiply per step along the dim: no product primitive
        parts = [out[(slice(None),) * d + (slice(i, i + 1),)] for i in range(out.shape[d])]
        out = parts[0]
        for p in parts[1:]:
            out = out * p
    return out


def reduce(name):
    fn, empty = _REDUCE[name]

    def run(c, a, x, axes=None):
        x = c.t(x)
        if c.opset < (13 if name == "ReduceSum" else 18):
            axes = a.get("axes")
        else:
            axes = None if axes is None else ints(axes)
        if not axes:
            if a.get("noop_with_empty_axes", 0):
                return x._alias()
            axes = list(range(x.ndim))
        dims = tuple(_axes(axes, x.ndim))
        kept = tuple(1 if i in dims else s for i, s in enumerate(x.shape))
        if any(x.shape[d] == 0 for d in dims):  # the reduction of nothing: its identity
            out = Tensor.full(kept, _identity_of(empty, x.dtype), c.backend, x.dtype)
        else:
            out = fn(x, dims).cast(x.dtype) if dims else x._alias()
        if not a.get("keepdims", 1):
            out = out.reshape([s for i, s in enumerate(x.shape) if i not in dims])
        return out
    OPS[("", name)] = run


for _name in _REDUCE:
    reduce(_name)


def arg(name):
    def run(c, a, x):
        x = c.t(x)
        axis = a.get("axis", 0) % x.ndim
        n = x.shape[axis]
        if a.get("select_last_index", 0):
            x = x.select(axis, np.arange(n - 1, -1, -1, dtype=np.int32))
        out = (x.argmax(axis) if name == "ArgMax" else x.argmin(axis)).cast(c.int64)
        if a.get("select_last_index", 0):
            out = (n - 1) - out
        return out if a.get("keepdims", 1) else out.squeeze(axis)
    OPS[("", name)] = run


arg("ArgMax")
arg("ArgMin")


def softmax(name, fn):
    def run(c, a, x):
        x = c.t(x)
        if c.opset >= 13:
            return fn(x, a.get("axis", -1) % max(x.ndim, 1))
        axis = a.get("axis", 1) % max(x.ndim, 1)
        flat = x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))
        return fn(flat, 1).reshape(x.shape)
    OPS[("", name)] = run


def _hardmax(x, axis):
    hot = x.argmax(axis) == _positions(x, axis)
    return hot.cast(x.dtype)


def _positions(x, axis):
    """0, 1, ... along axis (int32), shaped to broadcast against x."""
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    return Tensor.from_data(np.arange(x.shape[axis], dtype=np.int32).reshape(shape), x.backend)


softmax("Softmax", Tensor.softmax)
softmax("LogSoftmax", Tensor.log_softmax)
softmax("Hardmax", _hardmax)


# ---- normalisation ------------------------------------------------------------------------
def _channel(t, ndim):
    return t.reshape((1, -1) + (1,) * (ndim - 2))


@op("BatchNormalization")
def _batch_norm(c, a, x, scale, bias, mean, var):
    x, eps = c.t(x), a.get("epsilon", 1e-5)
    scale, bias, mean, var = (_channel(c.t(v), x.ndim) for v in (scale, bias, mean, var))
    if not a.get("training_mode", 0):
        return (x - mean) / (var + eps).sqrt() * scale + bias
    dims = (0,) + tuple(range(2, x.ndim))
    bm = x.mean_dim(dims)
    bv = ((x - bm) * (x - bm)).mean_dim(dims)
    m = a.get("momentum", 0.9)
    y = (x - bm) / (bv + eps).sqrt() * scale + bias
    return y, (mean * m + bm * (1 - m)).reshape(-1), (var * m + bv * (1 - m)).reshape(-1)


def _normalize(x, dims, eps):
    mean = x.mean_dim(dims)
    xc = x - mean
    inv = ((xc * xc).mean_dim(dims) + eps).sqrt().recip()
    return xc * inv, mean, inv


@op("LayerNormalization")
def _layer_norm(c, a, x, scale, bias=None):
    x = c.t(x)
    axis = a.get("axis", -1) % x.ndim
    y, mean, inv = _normalize(_float(x), tuple(range(axis, x.ndim)), a.get("epsilon", 1e-5))
    y = y.cast(x.dtype) * c.t(scale)
    y = y if bias is None else y + c.t(bias)
    return (y, mean, inv)[:c.outputs]


@op("InstanceNormalization")
def _instance_norm(c, a, x, scale, bias):
    x = c.t(x)
    y = _normalize(x, tuple(range(2, x.ndim)), a.get("epsilon", 1e-5))[0]
    return y * _channel(c.t(scale), x.ndim) + _channel(c.t(bias), x.ndim)


@op("GroupNormalization")
def _group_norm(c, a, x, scale, bias):
    x, g = c.t(x), a["num_groups"]
    n, ch = x.shape[:2]
    y = _normalize(x.reshape(n, g, -1), (2,), a.get("epsilon", 1e-5))[0].reshape(x.shape)
    scale, bias = c.t(scale), c.t(bias)
    if c.opset < 21:  # one scale and bias per group
        scale = scale.unsqueeze(1).expand(g, ch // g).reshape(ch)
        bias = bias.unsqueeze(1).expand(g, ch // g).reshape(ch)
    return y * _channel(scale, x.ndim) + _channel(bias, x.ndim)


@op("RMSNormalization")
def _rms_norm(c, a, x, scale):
    x = c.t(x)
    axis = a.get("axis", -1) % x.ndim
    xf = _float(x)
    ms = (xf * xf).mean_dim(tuple(range(axis, x.ndim)))
    return (xf / (ms + a.get("epsilon", 1e-5)).sqrt()).cast(x.dtype) * c.t(scale)


@op("LpNormalization")
def _lp_norm(c, a, x):
    x = c.t(x)
    axis = a.get("axis", -1)
    norm = x.abs().sum_dim(axis) if a.get("p", 2) == 1 else (x * x).sum_dim(axis).sqrt()
    return (x / norm).mask_where(norm == 0, 0)


@op("MeanVarianceNormalization")
def _mvn(c, a, x):
    x = c.t(x)
    return _normalize(x, tuple(_axes(a.get("axes", [0, 2, 3]), x.ndim)), 1e-9)[0]


@op("LRN")
def _lrn(c, a, x):
    x, size = c.t(x), a["size"]
    sq = _pad_dim(c, x * x, 1, (size - 1) // 2, size // 2, "constant", 0)
    total = sq[:, 0:x.shape[1]]
    for i in range(1, size):
        total = total + sq[:, i:i + x.shape[1]]
    return x / (total * (a.get("alpha", 1e-4) / size) + a.get("bias", 1.0)) ** a.get("beta", 0.75)


# ---- convolution and pooling -----------------------------------------------------------------
def _geometry(a, x_shape, kernel, transposed=False):
    """strides, dilations and pads [(begin, end), ...] of a window op, auto_pad resolved."""
    n = len(kernel)
    strides, dil = a.get("strides", [1] * n), a.get("dilations", [1] * n)
    pads = a.get("pads", [0] * 2 * n)
    pads = [(pads[i], pads[i + n]) for i in range(n)]
    auto = a.get("auto_pad", "NOTSET")
    if auto == "VALID":
        pads = [(0, 0)] * n
    elif auto in ("SAME_UPPER", "SAME_LOWER") and not transposed:
        pads = []
        for size, k, s, d in zip(x_shape[2:], kernel, strides, dil):
            total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
            small = total // 2
            pads.append((small, total - small) if auto == "SAME_UPPER" else (total - small, small))
    return list(strides), list(dil), pads


@op("Conv")
def _conv(c, a, x, w, b=None):
    x, w = c.t(x), c.t(w)
    kernel = list(w.shape[2:])
    strides, dil, pads = _geometry(a, x.shape, kernel)
    one_d = x.ndim == 3
    if x.ndim not in (3, 4):
        raise OnnxError(f"onnx: Conv over {x.ndim - 2} spatial dims (unsupported: Conv "
                        f"{x.ndim - 2}-D); ember convolves 1-D and 2-D")
    if one_d:
        x, w = x.unsqueeze(2), w.unsqueeze(2)
        strides, dil, pads = [1] + strides, [1] + dil, [(0, 0)] + pads
    bias = () if b is None else (c.t(b),)
    n, o = x.shape[0], w.shape[0]
    out = [(size + p0 + p1 - (k - 1) * d - 1) // s + 1
           for size, (p0, p1), k, d, s in zip(x.shape[2:], pads, w.shape[2:], dil, strides)]
    if a.get("group", 1) == 1 and x.dtype == "float32" and min(sum(pads, ())) >= 0 and \
            min(out) > 0 and (w.shape[2:] == (1, 1) or n * out[0] * out[1] <= o and
                              math.prod(w.shape) >= 1 << 18):
        y = _conv_as_matmul(c, x, w, bias, strides, dil, pads, out)
    else:
        y = _apply(PRIMS["conv2d"], x, w, *bias, stride=tuple(strides), padding=tuple(pads),
                   dilation=tuple(dil), groups=a.get("group", 1))
    return y.squeeze(2) if one_d else y


def _conv_as_matmul(c, x, w, bias, strides, dil, pads, out):
    """A convolution as one product of the weights [O, C*KH*KW] with the input's windows
    [N, C*KH*KW, OH*OW] (one strided slice per tap). For 1x1 convolutions, and large weights
    that outnumber the output's positions (a ResNet's late stages), BLAS's product is faster
    than NdArray's direct convolution, which packs the weights anew on every call (~6 ms of
    its 11 for 512x512x3x3 at 7x7 here)."""
    n, ch = x.shape[:2]
    o, _, kh, kw = w.shape
    (oh, ow), (sh, sw), (dh, dw) = out, strides, dil
    for d, (p0, p1) in ((2, pads[0]), (3, pads[1])):
        x = _pad_dim(c, x, d, p0, p1, "constant", 0)
    taps = [x[:, :, i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw]
            for i in range(kh) for j in range(kw)]
    cols = taps[0] if len(taps) == 1 else Tensor.stack(taps, 2)
    y = w.reshape(o, ch * kh * kw) @ cols.reshape(n, ch * kh * kw, oh * ow)
    if bias:
        y = y + bias[0].reshape(o, 1)
    return y.reshape(n, o, oh, ow)


@op("ConvTranspose")
def _conv_transpose(c, a, x, w, b=None):
    x, w = c.t(x), c.t(w)
    if x.ndim not in (3, 4):
        raise OnnxError(f"onnx: ConvTranspose over {x.ndim - 2} spatial dims (unsupported: "
                        f"ConvTranspose {x.ndim - 2}-D)")
    one_d = x.ndim == 3
    if one_d:  # over a unit height
        x, w = x.unsqueeze(2), w.unsqueeze(2)
    k, auto = 1 if one_d else 2, a.get("auto_pad", "NOTSET")  # k: the file's spatial dims

    def attr(name, fill):
        return [fill] * one_d + list(a.get(name, [fill] * k))
    strides, dil, extra = attr("strides", 1), attr("dilations", 1), attr("output_padding", 0)
    p = a.get("pads", [0] * 2 * k)
    pads = [(0, 0)] * one_d + [(p[i], p[i + k]) for i in range(k)]
    if "output_shape" in a or auto in ("SAME_UPPER", "SAME_LOWER"):
        size = x.shape[2:]
        out = [1] * one_d + list(a["output_shape"][-k:]) if "output_shape" in a else [
            i * s for i, s in zip(size, strides)]
        pads = []
        for i, kk, s, d, o in zip(size, w.shape[2:], strides, dil, out):
            total = s * (i - 1) + (kk - 1) * d + 1 - o
            small = total // 2
            pads.append((small, total - small) if auto == "SAME_UPPER" else (total - small, small))
        extra = [0, 0]
    padding = tuple((p0, p1 - e) for (p0, p1), e in zip(pads, extra))
    y = _apply(PRIMS["conv_transpose2d"], x, w, stride=tuple(strides), padding=padding,
               dilation=tuple(dil), groups=a.get("group", 1))
    if b is not None:
        y = y + _channel(c.t(b), 4)
    return y.squeeze(2) if one_d else y


def _pool_size(size, k, s, d, pads, ceil):
    span = (k - 1) * d + 1
    out = (size + pads[0] + pads[1] - span + (s - 1 if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= size + pads[0]:
        out -= 1  # a last window that would start in the end padding
    return out


def _windows(c, x, a, fill, include=None):
    """The pooling windows of x as a list of strided slices (one per kernel offset) over x padded
    with `fill`, and (with `include` 0/1) how many real (or padded) elements each window has."""
    kernel = a["kernel_shape"]
    strides, dil, pads = _geometry(a, x.shape, kernel)
    ceil = a.get("ceil_mode", 0)
    outs = [_pool_size(n, k, s, d, p, ceil)
            for n, k, s, d, p in zip(x.shape[2:], kernel, strides, dil, pads)]
    ends = [(o - 1) * s + (k - 1) * d + 1 - n - p0
            for o, s, k, d, n, (p0, _) in zip(outs, strides, kernel, dil, x.shape[2:], pads)]
    mask = np.ones(x.shape[2:], x.dtype) if include is not None else None
    for i, ((p0, p1), e) in enumerate(zip(pads, ends)):
        x = _pad_dim(c, x, i + 2, p0, max(e, 0), "constant", fill)
        if mask is not None:  # the window positions that count: real ones, and (include) pads
            width = [(0, 0)] * mask.ndim
            width[i] = (p0, min(p1, max(e, 0)))
            mask = np.pad(mask, width, constant_values=include)
            width[i] = (0, max(e - p1, 0))
            mask = np.pad(mask, width)
    parts, counts = [], 0
    for offset in np.ndindex(*kernel):
        key = tuple(slice(o * d, o * d + (n - 1) * s + 1, s)
                    for o, d, n, s in zip(offset, dil, outs, strides))
        parts.append(x[(slice(None), slice(None)) + key])
        if mask is not None:
            counts = counts + mask[key]
    return parts, counts


@op("MaxPool")
def _max_pool(c, a, x):
    x = c.t(x)
    kernel = a["kernel_shape"]
    strides, dil, pads = _geometry(a, x.shape, kernel)
    if x.ndim == 4 and a.get("storage_order", 0) == 0 and all(
            p0 == p1 <= ((k - 1) * d + 1) // 2 for (p0, p1), k, d in zip(pads, kernel, dil)):
        attrs = dict(kernel=tuple(kernel), stride=tuple(strides),
                     padding=tuple(p for p, _ in pads), dilation=tuple(dil),
                     ceil_mode=bool(a.get("ceil_mode", 0)))
        y = _apply(PRIMS["max_pool2d"], x, **attrs)
        if c.outputs < 2:
            return y
        idx = _apply(PRIMS["max_pool2d_indices"], x, **attrs).cast(c.int64)
        n, ch, h, w = x.shape
        offset = np.arange(n * ch, dtype=np.int64).reshape(n, ch, 1, 1) * (h * w)
        return y, idx + c.t(offset)
    if c.outputs > 1:
        raise OnnxError("onnx: MaxPool's Indices output for this geometry (unsupported: MaxPool "
                        "Indices)")
    low = -math.inf if x.dtype[0] == "f" else int(np.iinfo(x.dtype).min)
    parts, _ = _windows(c, x, a, low)
    out = parts[0]
    for p in parts[1:]:
        out = out.maximum(p)
    return out


@op("AveragePool")
def _avg_pool(c, a, x):
    x = c.t(x)
    parts, counts = _windows(c, x, a, 0, a.get("count_include_pad", 0))
    out = parts[0]
    for p in parts[1:]:
        out = out + p
    return out / c.t(np.maximum(counts, 1).astype(x.dtype))


@op("LpPool")
def _lp_pool(c, a, x):
    x, p = c.t(x), a.get("p", 2)
    parts, _ = _windows(c, x, a, 0)
    out = parts[0].abs() ** p
    for q in parts[1:]:
        out = out + q.abs() ** p
    return out ** (1 / p)


@op("GlobalAveragePool")
def _global_avg_pool(c, a, x):
    x = c.t(x)
    return x.mean_dim(tuple(range(2, x.ndim)))


@op("GlobalMaxPool")
def _global_max_pool(c, a, x):
    x = c.t(x)
    return x.max_dim(tuple(range(2, x.ndim)))


# ---- attention and losses --------------------------------------------------------------------
def _safe_softmax(x):
    """Softmax over the last dim where a row of only -inf gives zeros, not NaN."""
    m = x.max_dim(-1).detach()
    m = m.mask_where(m == -math.inf, 0)
    e = (x - m).exp()
    s = e.sum_dim(-1)
    return e / s.mask_where(s == 0, 1)


def _heads(x, n):
    """[B, L, n * h] -> [B, n, L, h]; 4-D inputs are already split."""
    return x if x.ndim == 4 else x.reshape(x.shape[0], x.shape[1], n, -1).permute(0, 2, 1, 3)


@op("Attention")
def _attention(c, a, q, k, v, mask=None, past_k=None, past_v=None, nonpad=None):
    q3 = q.ndim == 3
    q, k, v = (_heads(c.t(t), a.get(n)) for t, n in ((q, "q_num_heads"), (k, "kv_num_heads"),
                                                     (v, "kv_num_heads")))
    if past_k is not None:
        k, v = Tensor.cat([c.t(past_k), k], 2), Tensor.cat([c.t(past_v), v], 2)
    present_k, present_v = k, v
    lq, lk = q.shape[2], k.shape[2]
    bias = np.zeros((lq, lk), q.dtype)
    # query i sits at position offset + i among the keys: after the cache, or the padding
    offset = past_k.shape[2] if past_k is not None else 0
    offset = offset if nonpad is None else (c.np(nonpad).reshape(-1, 1, 1, 1) - lq)
    ahead = np.arange(lq)[:, None] + offset - np.arange(lk)[None, :]  # query minus key position
    left, right = a.get("left_window_size", -1), a.get("right_window_size", -1)
    allowed = (ahead >= 0) if a.get("is_causal", 0) else np.ones_like(ahead, bool)
    if left >= 0:
        allowed = allowed & (ahead <= left)
    if right >= 0:
        allowed = allowed & (-ahead <= right)
    bias = np.where(allowed, 0, -np.inf).astype(q.dtype)
    if nonpad is not None:
        keep = np.arange(lk) < c.np(nonpad).reshape(-1, 1, 1, 1)
        bias = bias + np.where(keep, 0, -np.inf).astype(q.dtype)
    bias = c.t(bias)
    if mask is not None:
        mask = c.t(mask)
        if mask.shape[-1] < lk:
            mask = _pad_dim(c, mask, mask.ndim - 1, 0, lk - mask.shape[-1], "constant",
                            False if mask.dtype == "bool" else -math.inf)
        if mask.dtype == "bool":
            mask = mask.logical_not().cast(q.dtype).mask_where(mask.logical_not(), -math.inf)
        bias = bias + mask
    if q.shape[1] != k.shape[1]:  # grouped-query attention: each kv head serves several
        reps = q.shape[1] // k.shape[1]
        k, v = (t.unsqueeze(2).expand(t.shape[0], t.shape[1], reps, *t.shape[2:]).reshape(
            t.shape[0], -1, *t.shape[2:]) for t in (k, v))
    scale = math.sqrt(a.get("scale", 1 / math.sqrt(q.shape[3])))
    scores = (q * scale) @ (k * scale).swap_dims(-1, -2)
    cap = a.get("softcap", 0.0)
    if cap > 0:
        scores = (scores / cap).tanh() * cap
    mode, qk = a.get("qk_matmul_output_mode", 0), scores
    scores = scores + bias
    qk = scores if mode == 2 else qk
    p = _safe_softmax(scores)
    p = p.mask_where((bias.max_dim(-1) == -math.inf).expand(p.shape), 0)
    qk = p if mode == 3 else qk
    y = p @ v
    if q3:
        y = y.permute(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1)
    return (y, present_k, present_v, qk)[:c.outputs]


def _nll(c, a, logp, target, weight=None):
    target = c.t(target)
    ignore = a.get("ignore_index")
    keep = None if ignore is None else target != ignore
    safe = target if keep is None else target.mask_where(keep.logical_not(), 0)
    picked = -logp.gather(1, safe.unsqueeze(1)).squeeze(1)
    w = None
    if weight is not None:
        w = c.t(weight).select(0, safe.reshape(safe.numel())).reshape(safe.shape)
    if keep is not None:
        kept = keep.cast(logp.dtype)
        w = kept if w is None else w * kept
    loss = picked if w is None else picked * w
    reduction = a.get("reduction", "mean")
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / (w.sum() if w is not None else loss.numel())


@op("NegativeLogLikelihoodLoss")
def _nll_loss(c, a, x, target, weight=None):
    return _nll(c, a, c.t(x), target, weight)


@op("SoftmaxCrossEntropyLoss")
def _softmax_ce(c, a, x, target, weight=None):
    logp = c.t(x).log_softmax(1)
    loss = _nll(c, a, logp, target, weight)
    return (loss, logp)[:c.outputs]


# ---- resizing: per axis, a host-built [out, in] weight matrix (separable interpolation) -------
def _coeffs(mode, ratio, scale, a):
    if mode == "nearest":
        if ratio == 1 or float(ratio).is_integer():
            return np.array([0.0, 1.0])
        near = a.get("nearest_mode", "round_prefer_floor")
        up = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
              "floor": False, "ceil": True}[near]
        return np.array([float(not up), float(up)])
    anti = a.get("antialias", 0) and scale < 1
    s = min(scale, 1.0) if anti else 1.0
    if mode == "linear":
        start = int(np.floor(-1 / s) + 1) if anti else 0
        taps = np.arange(start, 2 - start) - ratio
        w = np.clip(1 - np.abs(taps * s), 0, 1)
    else:  # cubic, with the coefficient A
        A = a.get("cubic_coeff_a", -0.75)
        start = int(np.floor(-2 / s) + 1) if anti else -1
        t = np.abs((np.arange(start, 2 - start) - ratio) * s)
        w = np.where(t <= 1, (A + 2) * t ** 3 - (A + 3) * t ** 2 + 1,
                     np.where(t < 2, A * t ** 3 - 5 * A * t ** 2 + 8 * A * t - 4 * A, 0))
    return w / w.sum() if anti else w


def _resize_matrix(a, mode, size, out, scale, roi):
    """[out, size] weights, and which outputs fall outside the input (tf_crop_and_resize)."""
    y = np.arange(out, dtype=np.float64)
    ctm = a.get("coordinate_transformation_mode", "half_pixel")
    width = scale * size
    if ctm == "align_corners":
        x = np.zeros(out) if width == 1 else y * (size - 1) / (width - 1)
    elif ctm == "asymmetric":
        x = y / scale
    elif ctm == "tf_crop_and_resize":
        x = (np.full(out, (roi[1] - roi[0]) * (size - 1) / 2) if width == 1 else
             y * (roi[1] - roi[0]) * (size - 1) / (width - 1)) + roi[0] * (size - 1)
    elif ctm == "pytorch_half_pixel":
        x = np.full(out, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
    elif ctm == "half_pixel_symmetric":
        x = size / 2 * (1 - out / width) + (y + 0.5) / scale - 0.5
    else:
        x = (y + 0.5) / scale - 0.5
    outside = (x < 0) | (x > size - 1) if ctm == "tf_crop_and_resize" else np.zeros(out, bool)
    m = np.zeros((out, size))
    for i, xi in enumerate(x):
        base = np.floor(xi)
        w = _coeffs(mode, 1.0 if xi == base else xi - base, scale, a)
        n = len(w)
        # the n nearest taps, the lower ones on a tie
        first = int(base) - n // 2 + (xi != base) if n % 2 == 0 else \
            int(base) - (n - 1) // 2 + (xi - base > 0.5)
        taps = first + np.arange(n)
        if a.get("exclude_outside", 0):
            w = np.where((taps < 0) | (taps >= size), 0.0, w)
            w = w / (w.sum() or 1.0)
        np.add.at(m[i], np.clip(taps, 0, size - 1), w)
    return m, outside


@op("Resize", "Upsample")
def _resize(c, a, x, roi=None, scales=None, sizes=None):
    x = c.t(x)
    mode = a.get("mode", "nearest")
    if c.opset < 11 or c.op == "Upsample":  # (X, scales): asymmetric, nearest rounds down
        a = dict(a, coordinate_transformation_mode="asymmetric", nearest_mode="floor")
        scales = a["scales"] if "scales" in a else roi
        roi = None
    mode = {"bilinear": "linear", "trilinear": "linear"}.get(mode, mode)
    axes = list(range(x.ndim)) if "axes" not in a else [d % x.ndim for d in a["axes"]]
    roi = None if roi is None or not math.prod(roi.shape) else c.np(roi).tolist()
    if sizes is not None and math.prod(sizes.shape):
        sizes = ints(sizes)
        factors = [o / x.shape[d] for o, d in zip(sizes, axes)]
        policy = a.get("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            s = min(factors) if policy == "not_larger" else max(factors)
            factors, sizes = [s] * len(axes), [int(s * x.shape[d] + 0.5) for d in axes]
    else:
        factors = [float(v) for v in c.np(scales).ravel()]
        factors = [factors[d] for d in axes] if len(factors) > len(axes) else factors
        sizes = [int(f * x.shape[d]) for f, d in zip(factors, axes)]
    dtype = x.dtype
    y, outside = (x if dtype[0] == "f" else x.cast("float64")), None
    for i, d in enumerate(axes):
        r = None if roi is None else (roi[i], roi[i + len(axes)])
        if len(roi or ()) == 2 * x.ndim and "axes" in a:
            r = (roi[d], roi[d + x.ndim])
        if factors[i] == 1 and sizes[i] == x.shape[d] and (r is None or tuple(r) == (0, 1)):
            continue
        m, out = _resize_matrix(a, mode, x.shape[d], sizes[i], factors[i], r)
        y = (y.swap_dims(d, -1) @ c.t(m.T.astype(y.dtype))).swap_dims(d, -1)
        if out.any():
            shape = [1] * x.ndim
            shape[d] = len(out)
            out = c.t(out.reshape(shape))
            outside = out if outside is None else outside.logical_or(out)
    if outside is not None:
        y = y.mask_where(outside, a.get("extrapolation_value", 0.0))
    return y if dtype[0] == "f" else _round(y).cast(dtype)


# ---- ai.onnx.ml ---------------------------------------------------------------------------
def _binarizer(c, a, x):
    x = c.t(x)
    return (x > a.get("threshold", 0.0)).cast(x.dtype)


def _array_feature_extractor(c, a, x, idx):
    x = c.t(x)
    x = x.reshape(1, -1) if x.ndim == 1 else x
    return x.select(x.ndim - 1, c.t(idx).reshape(-1))


OPS[("ai.onnx.ml", "Binarizer")] = _binarizer
OPS[("ai.onnx.ml", "ArrayFeatureExtractor")] = _array_feature_extractor


# ---- outputs shaped by values: their inputs read on the host (ember.jit refuses to capture them)
def _first(c, v, default):
    """The one value of an optional scalar input (a missing or empty one: `default`)."""
    v = None if v is None else c.np(v).reshape(-1)
    return default if v is None or v.size == 0 else v[0].item()


@op("NonZero")
def _nonzero(c, a, x):
    x = c.np(x)
    return np.array(np.nonzero(x.reshape(1) if x.ndim == 0 else x), np.int64).reshape(
        max(x.ndim, 1), -1)


@op("Compress")
def _compress(c, a, x, condition):
    keep = np.flatnonzero(c.np(condition).astype(bool))
    axis = a.get("axis")
    x = (x if isinstance(x, np.ndarray) else c.t(x)).reshape(-1) if axis is None else x
    axis = 0 if axis is None else axis % len(x.shape)
    if keep.size and keep[-1] >= x.shape[axis]:
        raise OnnxError(f"onnx: Compress's condition selects index {keep[-1]} of an axis of "
                        f"length {x.shape[axis]}")
    if isinstance(x, np.ndarray):
        return np.take(x, keep, axis)
    return c.t(x).select(axis, keep.astype(np.int32))


@op("Unique")
def _unique(c, a, x):
    data, axis = c.np(x), a.get("axis")
    flat = data.reshape(-1) if axis is None else data
    axis = 0 if axis is None else axis % data.ndim
    _, first, inverse, counts = np.unique(flat, True, True, True, axis=axis)
    inverse = inverse.reshape(-1)
    if not a.get("sorted", 1):  # in the order of first occurrence
        order = np.argsort(first)
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    if isinstance(x, np.ndarray):
        y = np.take(flat, first, axis)
    else:  # a selection of x's own values (its gradient flows back to them)
        y = (c.t(x).reshape(-1) if data.ndim != flat.ndim else c.t(x)).select(
            axis, first.astype(np.int32))
    return (y, *(v.astype(np.int64) for v in (first, inverse, counts)))[:c.outputs]


@op("TfIdfVectorizer")
def _tfidf(c, a, x):
    """Counts of the pool's n-grams in each row (integers; skip-grams up to max_skip_count,
    unigrams counted once), weighted as `mode` says."""
    pool, starts, index = a.get("pool_int64s", []), a["ngram_counts"], a["ngram_indexes"]
    lo, hi, skip = a["min_gram_length"], a["max_gram_length"], a["max_skip_count"]
    grams, j = {}, 0  # n-gram -> its output position
    for n, start in enumerate(starts, 1):
        end = starts[n] if n < len(starts) else len(pool)
        for g in range(start, end - n + 1, n):
            if lo <= n <= hi:
                grams[tuple(pool[g:g + n])] = index[j]
            j += 1
    data = c.np(x)
    rows = data.reshape(1, -1) if data.ndim < 2 else data
    counts = np.zeros((len(rows), max(index) + 1))
    for r, row in enumerate(rows.tolist()):
        for d in range(1, skip + 2):
            for n in range(max(lo, 1 if d == 1 else 2), hi + 1):
                for i in range(len(row) - (n - 1) * d):
                    k = grams.get(tuple(row[i:i + (n - 1) * d + 1:d]))
                    if k is not None:
                        counts[r, k] += 1
    w = np.asarray(a.get("weights", np.ones(counts.shape[1])))
    mode = a.get("mode", "TF")
    out = counts if mode == "TF" else (counts > 0) * w if mode == "IDF" else counts * w
    return out.astype(np.float32).reshape(-1) if data.ndim < 2 else out.astype(np.float32)


@op("NonMaxSuppression")
def _non_max_suppression(c, a, boxes, scores, limit=None, iou=None, least=None):
    """Per batch and class: boxes in order of score (ties: the lower index first), each kept
    unless it overlaps one kept before by more than `iou` (intersection over union); in the
    boxes' own dtype, as onnxruntime computes it."""
    boxes, scores = c.np(boxes), c.np(scores)
    limit, iou, least = max(int(_first(c, limit, 0)), 0), _first(c, iou, 0.0), _first(
        c, least, None)
    iou = np.asarray(iou, boxes.dtype)
    if a.get("center_point_box", 0):  # [x, y, width, height] -> the edges
        x, y, w, h = np.moveaxis(boxes, -1, 0)
        x0, x1, y0, y1 = x - w / 2, x + w / 2, y - h / 2, y + h / 2
    else:  # [y1, x1, y2, x2], either corner first
        ya, xa, yb, xb = np.moveaxis(boxes, -1, 0)
        x0, x1, y0, y1 = np.minimum(xa, xb), np.maximum(xa, xb), np.minimum(ya, yb), \
            np.maximum(ya, yb)
    area = (x1 - x0) * (y1 - y0)
    out = []
    for b, k in np.ndindex(*scores.shape[:2]):
        s = scores[b, k]
        order = np.arange(s.size) if least is None else np.flatnonzero(s > least)
        kept = []
        for i in order[np.argsort(-s[order], kind="stable")]:
            if len(kept) >= limit:
                break
            j = np.array(kept, np.int64)
            w = np.minimum(x1[b, i], x1[b, j]) - np.maximum(x0[b, i], x0[b, j])
            h = np.minimum(y1[b, i], y1[b, j]) - np.maximum(y0[b, i], y0[b, j])
            inter = w * h
            union = area[b, i] + area[b, j] - inter
            with np.errstate(divide="ignore", invalid="ignore"):
                over = (w > 0) & (h > 0) & (area[b, i] > 0) & (area[b, j] > 0) & (union > 0) & (
                    inter / union > iou)
            if not over.any():
                kept.append(i)
        out += [(b, k, i) for i in kept]
    return np.array(out, np.int64).reshape(-1, 3)


# ---- scatter and gather by index tuples --------------------------------------------------------
def _replace(data, dim, idx, updates, reduction):
    """data with `updates` written at `idx` along `dim` (ember's scatter adds: a replace first
    zeroes the places written to)."""
    if reduction == "add":
        return data.scatter(dim, idx, updates)
    if reduction in ("max", "min", "mul"):  # per position along dim: the updates aimed at it
        low, high = (-math.inf, math.inf) if data.dtype[0] == "f" else (
            int(np.iinfo(data.dtype).min), int(np.iinfo(data.dtype).max))
        neutral = {"max": low, "min": high, "mul": 1}[reduction]
        parts = []
        for p in range(data.shape[dim]):
            vals = updates.mask_where((idx == p).logical_not(), neutral)
            parts.append(vals.max_dim(dim) if reduction == "max" else vals.min_dim(dim)
                         if reduction == "min" else _prod(vals, (dim,)))
        got = Tensor.cat(parts, dim) if len(parts) > 1 else parts[0]
        return data.maximum(got) if reduction == "max" else data.minimum(got) \
            if reduction == "min" else data * got
    hit = data.new_zeros(data.shape).scatter(dim, idx, updates.ones_like()) > 0
    return data.mask_where(hit, 0).scatter(dim, idx, updates)


@op("ScatterElements", "Scatter")
def _scatter_elements(c, a, data, idx, updates):
    data, idx, updates = c.t(data), c.t(idx), c.t(updates)
    axis = a.get("axis", 0) % data.ndim
    idx = idx.mask_where(idx < 0, idx + data.shape[axis])
    region = tuple(slice(None) if d == axis else slice(0, s) for d, s in enumerate(idx.shape))
    part = _replace(data[region], axis, idx, updates, a.get("reduction", "none"))
    return data.slice_assign(region, part) if part.shape != data.shape else part


def _linear(c, data, idx, batch=0):
    """Flat row numbers of the index tuples idx [..., k] into data's first batch + k dims."""
    k = idx.shape[-1]
    dims = data.shape[:batch + k]
    idx = idx.mask_where(idx < 0, idx + c.t(np.array(dims[batch:], idx.dtype)))
    strides = np.array([math.prod(dims[i + 1:]) for i in range(len(dims))], np.int64)
    lin = (idx * c.t(strides[batch:].astype(idx.dtype))).sum_dim(-1).squeeze(-1)
    if batch:
        rows = np.indices(idx.shape[:batch]).reshape(batch, -1).T @ strides[:batch]
        lin = lin + c.t(rows.reshape(idx.shape[:batch] + (1,) * (lin.ndim - batch)).astype(
            lin.dtype))
    return lin, data.reshape((math.prod(dims),) + data.shape[batch + k:])


@op("GatherND")
def _gather_nd(c, a, data, idx):
    data, idx, b = c.t(data), c.t(idx), a.get("batch_dims", 0)
    lin, flat = _linear(c, data, idx, b)
    rows = flat.select(0, lin.reshape(lin.numel()))
    return rows.reshape(idx.shape[:-1] + flat.shape[1:])


@op("ScatterND")
def _scatter_nd(c, a, data, idx, updates):
    data, idx, updates = c.t(data), c.t(idx), c.t(updates)
    lin, flat = _linear(c, data, idx)
    n = lin.numel()
    rows = lin.reshape((n,) + (1,) * (flat.ndim - 1)).expand((n,) + flat.shape[1:])
    out = _replace(flat, 0, rows, updates.reshape(rows.shape), a.get("reduction", "none"))
    return out.reshape(data.shape)


@op("CumProd")
def _cumprod(c, a, x, axis):
    x, axis = c.t(x), ints(axis)[0] % c.t(x).ndim
    parts = [x[(slice(None),) * axis + (slice(i, i + 1),)] for i in range(x.shape[axis])]
    if a.get("reverse", 0):
        parts = parts[::-1]
    out, run = [], None
    for p in parts:  # one multiply per step: ember has no product primitive
        if a.get("exclusive", 0):
            out.append(p.ones_like() if run is None else run)
            run = p if run is None else run * p
        else:
            run = p if run is None else run * p
            out.append(run)
    return Tensor.cat(out[::-1] if a.get("reverse", 0) else out, axis)


@op("TopK")
def _topk(c, a, x, k=None):
    x = c.t(x)
    k = a["k"] if c.opset < 10 else ints(k)[0]
    axis = a.get("axis", -1) % x.ndim
    largest = a.get("largest", 1)
    low = -math.inf if x.dtype[0] == "f" else int(np.iinfo(x.dtype).min)
    y = x if largest else -x
    values, indices = [], []
    pos = _positions(x, axis)
    for _ in range(k):  # k rounds of argmax (ties: the lower index first, as ONNX)
        i = y.argmax(axis)
        values.append(x.gather(axis, i))
        indices.append(i)
        y = y.mask_where(pos == i, low)
    if not k:
        shape = x.shape[:axis] + (0,) + x.shape[axis + 1:]
        return x.new_zeros(shape), Tensor.full(shape, 0, c.backend, c.int64)
    return Tensor.cat(values, axis), Tensor.cat(indices, axis).cast(c.int64)


@op("Einsum")
def _einsum(c, a, *xs):
    """Each operand laid out over all the equation's letters (size 1 where it lacks one),
    multiplied by broadcasting, then summed over the letters the output lacks."""
    xs = [c.t(x) for x in xs]
    spec = a["equation"].replace(" ", "")
    ins, _, out = spec.partition("->")
    ins = ins.split(",")
    rank = max(x.ndim - len(s.replace("...", "")) for x, s in zip(xs, ins))
    dots = "".join(chr(0x100 + i) for i in range(rank))  # the ellipsis' letters
    ins = [s.replace("...", dots[rank - (x.ndim - len(s.replace("...", ""))):])
           for x, s in zip(xs, ins)]
    if not _:
        out = dots + "".join(sorted(ch for ch in set("".join(ins)) if "".join(ins).count(ch) == 1
                                    and ch not in dots))
    out = out.replace("...", dots)
    letters = out + "".join(sorted(set("".join(ins)) - set(out)))
    total = None
    for x, s in zip(xs, ins):
        for ch in set(s):
            while s.count(ch) > 1:  # a repeated letter: the diagonal
                i, j = s.index(ch), s.index(ch, s.index(ch) + 1)
                eye = np.eye(x.shape[i], dtype=x.dtype).reshape(
                    [x.shape[i] if d in (i, j) else 1 for d in range(x.ndim)])
                x = (x * c.t(eye)).sum_dim(j).squeeze(j)
                s = s[:j] + s[j + 1:]
        order = sorted(range(len(s)), key=lambda d: letters.index(s[d]))
        x = x.permute(order)
        shape, at = [], 0
        for ch in letters:
            if ch in s:
                shape.append(x.shape[at])
                at += 1
            else:
                shape.append(1)
        x = x.reshape(shape)
        total = x if total is None else total * x
    extra = tuple(range(len(out), len(letters)))
    return total.sum_dim(extra).reshape(total.shape[:len(out)]) if extra else total


# ---- recurrent layers: the time loop unrolled into ember ops -----------------------------------
def _activation(c, name, alpha, beta):
    if name == "Affine":
        return lambda x: x * alpha + beta
    if name == "ScaledTanh":
        return lambda x: (x * beta).tanh() * alpha
    attrs = {} if alpha is None else {"alpha": alpha, **({} if beta is None else {"beta": beta})}
    fn = OPS[("", name)]
    return lambda x: fn(c, attrs, x)


_GATES = {"RNN": (1, ["Tanh"]), "GRU": (3, ["Sigmoid", "Tanh"]),
          "LSTM": (4, ["Sigmoid", "Tanh", "Tanh"])}


def recurrent(kind):
    gates, default = _GATES[kind]

    def run(c, a, x, w, r, b=None, lens=None, h0=None, c0=None, peep=None):
        x, w, r = c.t(x), c.t(w), c.t(r)
        if a.get("layout", 0):
            x = x.swap_dims(0, 1)
        steps, batch = x.shape[:2]
        dirs, size = w.shape[0], w.shape[1] // gates
        names = a.get("activations", default * dirs)
        alphas, betas = a.get("activation_alpha", []), a.get("activation_beta", [])
        acts = [_activation(c, n.capitalize() if n.islower() else n,
                            alphas[i] if i < len(alphas) else None,
                            betas[i] if i < len(betas) else None) for i, n in enumerate(names)]
        zeros = Tensor.full((dirs, batch, size), 0, c.backend, x.dtype)
        h0 = zeros if h0 is None else c.t(h0)
        c0 = zeros if c0 is None else c.t(c0)
        if a.get("layout", 0):
            h0, c0 = h0.swap_dims(0, 1), c0.swap_dims(0, 1)
        lens = None if lens is None else c.np(lens)
        outs, last_h, last_c = [], [], []
        for d in range(dirs):
            reverse = a.get("direction", "forward") == "reverse" or d == 1
            f = acts[d * len(default):(d + 1) * len(default)]
            wt, rt = w[d].transpose(), r[d].transpose()
            bias = None if b is None else c.t(b)[d]
            xs = x @ wt if bias is None else x @ wt + bias[:gates * size]
            rb = None if bias is None else bias[gates * size:]
            pk = None if peep is None else c.t(peep)[d]
            h, cell, ys = h0[d], c0[d], [None] * steps
            for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
                h_new, c_new = _cell(kind, a, f, xs[t], h, cell, rt, rb, pk, size)
                if lens is not None:  # past its length, a sequence keeps its state
                    live = c.t((t < lens).reshape(batch, 1))
                    h_new = h.mask_where(live, h_new)
                    c_new = cell.mask_where(live, c_new)
                    ys[t] = h_new.mask_where(live.logical_not(), 0)
                else:
                    ys[t] = h_new
                h, cell = h_new, c_new
            outs.append(Tensor.stack(ys, 0))
            last_h.append(h)
            last_c.append(cell)
        y, yh, yc = Tensor.stack(outs, 1), Tensor.stack(last_h, 0), Tensor.stack(last_c, 0)
        if a.get("layout", 0):
            y, yh, yc = y.permute(2, 0, 1, 3), yh.swap_dims(0, 1), yc.swap_dims(0, 1)
        return (y, yh, yc)[:c.outputs]
    OPS[("", kind)] = run


def _cell(kind, a, f, xw, h, cell, rt, rb, peep, n):
    clip = a.get("clip")

    def gate(v):
        return v if clip is None else v.clamp(-clip, clip)
    hr = h @ rt if rb is None else h @ rt + rb
    if kind == "RNN":
        return f[0](gate(xw + hr)), cell
    if kind == "GRU":
        z = f[0](gate(xw[:, :n] + hr[:, :n]))
        rg = f[0](gate(xw[:, n:2 * n] + hr[:, n:2 * n]))
        if a.get("linear_before_reset", 0):
            hh = f[1](gate(xw[:, 2 * n:] + rg * hr[:, 2 * n:]))
        else:
            rh = (rg * h) @ rt[:, 2 * n:]
            hh = f[1](gate(xw[:, 2 * n:] + (rh if rb is None else rh + rb[2 * n:])))
        return (1 - z) * hh + z * h, cell
    v = xw + hr  # LSTM: gates i, o, f, c
    pi, po, pf = (None, None, None) if peep is None else (peep[:n], peep[n:2 * n], peep[2 * n:])
    i = f[0](gate(v[:, :n] if pi is None else v[:, :n] + pi * cell))
    fg = f[0](gate(v[:, 2 * n:3 * n] if pf is None else v[:, 2 * n:3 * n] + pf * cell))
    if a.get("input_forget", 0):
        fg = 1 - i
    cell = fg * cell + i * f[1](gate(v[:, 3 * n:]))
    o = f[0](gate(v[:, n:2 * n] if po is None else v[:, n:2 * n] + po * cell))
    return o * f[2](cell), cell


for _name in _GATES:
    recurrent(_name)


# ---- more layers -------------------------------------------------------------------------------
@op("RotaryEmbedding")
def _rotary(c, a, x, cos, sin, pos=None):
    x = c.t(x)
    four = x.ndim == 4
    y = x.permute(0, 2, 1, 3) if four else x.reshape(*x.shape[:2], a["num_heads"], -1)
    dim = a.get("rotary_embedding_dim", 0) or y.shape[3]
    cos, sin = c.t(cos), c.t(sin)
    if pos is not None:
        pos = c.t(pos)
        cos, sin = (t.select(0, pos.reshape(pos.numel())).reshape(*pos.shape, -1)
                    for t in (cos, sin))
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
    turn, keep = y[..., :dim], y[..., dim:]
    if a.get("interleaved", 0):
        x1, x2 = turn[..., 0::2], turn[..., 1::2]
    else:
        x1, x2 = turn[..., :dim // 2], turn[..., dim // 2:]
    re, im = cos * x1 - sin * x2, sin * x1 + cos * x2
    turn = Tensor.stack([re, im], -1).reshape(turn.shape) if a.get("interleaved", 0) else \
        Tensor.cat([re, im], -1)
    y = Tensor.cat([turn, keep], -1) if keep.shape[-1] else turn
    return y.permute(0, 2, 1, 3) if four else y.reshape(x.shape)


@op("SwiGLU")
def _swiglu(c, a, x, y):
    x = c.t(x)
    return x * (x * a.get("alpha", 1.0)).sigmoid() * c.t(y)


@op("CenterCropPad")
def _center_crop_pad(c, a, x, shape):
    x, shape = c.t(x), ints(shape)
    axes = _axes(a.get("axes", list(range(x.ndim))), x.ndim)
    for d, want in zip(axes, shape):
        extra = want - x.shape[d]
        before = extra // 2 if extra > 0 else -((-extra) // 2)
        x = _pad_dim(c, x, d, before, extra - before, "constant", 0)
    return x


@op("Col2Im")
def _col2im(c, a, x, image, block):
    """The adjoint of im2col: a transposed convolution with a one-hot weight."""
    if len(ints(image)) != 2:
        raise OnnxError(f"onnx: Col2Im of {len(ints(image))}-D images (unsupported: Col2Im "
                        f"{len(ints(image))}-D)")
    x, (h, w), (kh, kw) = c.t(x), ints(image), ints(block)
    n, ck, _ = x.shape
    ch = ck // (kh * kw)
    s, d = a.get("strides", [1, 1]), a.get("dilations", [1, 1])
    p = a.get("pads", [0, 0, 0, 0])
    oh = (h + p[0] + p[2] - d[0] * (kh - 1) - 1) // s[0] + 1
    ow = (w + p[1] + p[3] - d[1] * (kw - 1) - 1) // s[1] + 1
    eye = np.eye(ck, dtype=x.dtype).reshape(ck, ch, kh, kw)
    rows = (oh - 1) * s[0] + d[0] * (kh - 1) + 1
    cols = (ow - 1) * s[1] + d[1] * (kw - 1) + 1
    y = _apply(PRIMS["conv_transpose2d"], x.reshape(n, ck, oh, ow), c.t(eye),
               stride=tuple(s), padding=((p[0], rows - p[0] - h), (p[1], cols - p[1] - w)),
               dilation=tuple(d), groups=1)
    return y


def window(name, fn):
    def run(c, a, size):
        n = int(c.np(size).item())
        period = n if a.get("periodic", 1) else n - 1
        t = 2 * np.pi * np.arange(n) / max(period, 1)
        return fn(t).astype(ember_dtype(a.get("output_datatype", 1), name))
    OPS[("", name)] = run


window("HannWindow", lambda t: 0.5 - 0.5 * np.cos(t))
window("HammingWindow", lambda t: 25 / 46 - 21 / 46 * np.cos(t))
window("BlackmanWindow", lambda t: 0.42 - 0.5 * np.cos(t) + 0.08 * np.cos(2 * t))


@op("ReverseSequence")
def _reverse_sequence(c, a, x, lens):
    x, lens = c.t(x), c.np(lens)
    bt, tt = a.get("batch_axis", 1), a.get("time_axis", 0)
    steps = np.arange(x.shape[tt])[:, None]
    idx = np.where(steps < lens[None, :], lens[None, :] - 1 - steps, steps)  # [time, batch]
    idx = idx if tt < bt else idx.T
    shape = [1] * x.ndim
    shape[tt], shape[bt] = x.shape[tt], x.shape[bt]
    return x.gather(tt, c.t(idx.reshape(shape).astype(np.int64)).expand(x.shape))


@op("MaxUnpool")
def _max_unpool(c, a, x, idx, shape=None):
    x, idx = c.t(x), c.t(idx)
    k, s = a["kernel_shape"], a.get("strides", [1] * len(a["kernel_shape"]))
    p = a.get("pads", [0] * 2 * len(k))
    size = list(x.shape[:2]) + [(i - 1) * st + kk - p[j] - p[j + len(k)] for j, (i, st, kk)
                                in enumerate(zip(x.shape[2:], s, k))]
    flat = Tensor.full((math.prod(size),), 0, c.backend, x.dtype)
    y = flat.scatter(0, idx.reshape(idx.numel()), x.reshape(x.numel())).reshape(size)
    if shape is None:
        return y
    out = Tensor.full(tuple(ints(shape)), 0, c.backend, x.dtype)  # the indices' tensor in a
    return out.slice_assign(tuple(slice(0, n) for n in size), y)  # corner of a larger one


# ---- the training ops (ai.onnx.preview.training): one optimizer step as a formula --------------
def training(name, fn, states):
    def run(c, a, rate, count, *rest):
        n = len(rest) // (2 + states)
        groups = [rest[i * n:(i + 1) * n] for i in range(2 + states)]
        rate, count = float(c.np(rate)), int(c.np(count))
        outs = [fn(a, rate, count, *(c.t(v) for v in vals)) for vals in zip(*groups)]
        return tuple(o[i] for i in range(1 + states) for o in outs)
    OPS[("ai.onnx.preview.training", name)] = run


def _adagrad(a, r, t, x, g, h):
    r = r / (1 + t * a.get("decay_factor", 0.0))
    g = g + x * a.get("norm_coefficient", 0.0)
    h = h + g * g
    return x - g * r / (h.sqrt() + a.get("epsilon", 0.0)), h


def _momentum(a, r, t, x, g, v):
    alpha, beta = a["alpha"], a["beta"] if t > 0 else 1.0
    g = g + x * a["norm_coefficient"]
    v = v * alpha + g * beta
    step = g + v * alpha if a.get("mode") == "nesterov" else v
    return x - step * r, v


def _adam(a, r, t, x, g, v, h):
    alpha, beta = a.get("alpha", 0.9), a.get("beta", 0.999)
    g = g + x * a.get("norm_coefficient", 0.0)
    v, h = v * alpha + g * (1 - alpha), h * beta + g * g * (1 - beta)
    if t > 0:
        r = r * math.sqrt(1 - beta ** t) / (1 - alpha ** t)
    x = x - v / (h.sqrt() + a.get("epsilon", 1e-6)) * r
    return x * (1 - a.get("norm_coefficient_post", 0.0)), v, h


training("Adagrad", _adagrad, 1)
training("Momentum", _momentum, 1)
training("Adam", _adam, 2)


# ---- control flow: subgraphs run by the context, with the outer scope visible -----------------
@op("If")
def _if(c, a, cond):
    out = c.subgraph(a["then_branch"] if c.np(cond).item() else a["else_branch"], [])
    return tuple(out)


@op("Loop")
def _loop(c, a, trips=None, cond=None, *state):
    trips = math.inf if trips is None else int(c.np(trips).item())
    go = True if cond is None else bool(c.np(cond).item())
    state, scans, i = list(state), [], 0
    while i < trips and go:
        out = c.subgraph(a["body"], [np.array(i, np.int64), np.array(go)] + state)
        go, state = bool(c.np(out[0]).item()), out[1:1 + len(state)]
        scans.append(out[1 + len(state):])
        i += 1
    stacked = [Tensor.stack([c.t(v) for v in vals], 0) for vals in zip(*scans)]
    return tuple(state + stacked)


@op("Scan")
def _scan(c, a, *values):
    if c.opset < 9:
        raise OnnxError("onnx: Scan before opset 9 (unsupported: Scan opset 8)")
    m = a["num_scan_inputs"]
    state, xs = list(values[:-m]), [c.t(v) for v in values[-m:]]
    axes = [d % x.ndim for d, x in zip(a.get("scan_input_axes", [0] * m), xs)]
    turn = a.get("scan_input_directions", [0] * m)
    steps = xs[0].shape[axes[0]]
    scans = []
    for t in range(steps):
        elems = [x[(slice(None),) * d + (steps - 1 - t if r else t,)]
                 for x, d, r in zip(xs, axes, turn)]
        out = c.subgraph(a["body"], state + elems)
        state, ys = out[:len(state)], out[len(state):]
        scans.append([c.t(y) for y in ys])
    k = len(scans[0]) if scans else 0
    out_axes = a.get("scan_output_axes", [0] * k)
    back = a.get("scan_output_directions", [0] * k)
    stacked = []
    for j in range(k):
        seq = [s[j] for s in scans]
        seq = seq[::-1] if back[j] else seq
        stacked.append(Tensor.stack(seq, out_axes[j] % (seq[0].ndim + 1)))
    return tuple(state + stacked)


# ---- sampling grids ------------------------------------------------------------------------------
@op("AffineGrid")
def _affine_grid(c, a, theta, size):
    theta, size = c.t(theta), ints(size)
    spatial, align = size[2:], a.get("align_corners", 0)
    axes = [np.linspace(-1, 1, n) if align else (2 * np.arange(n) + 1) / n - 1 for n in spatial]
    mesh = list(np.meshgrid(*axes, indexing="ij"))[::-1]  # (x, y, z): x along the last dim
    base = np.stack(mesh + [np.ones_like(mesh[0])], -1).reshape(-1, len(spatial) + 1)
    grid = c.t(base.astype(theta.dtype)) @ theta.swap_dims(1, 2)
    return grid.reshape(size[0], *spatial, len(spatial))


def _reflect(v, lo, hi):
    span = hi - lo

    def fold(d, start, sign):  # d >= 0 past the border: reflect back and forth
        n = _floor(d / span)
        r = d - n * span
        even = (n - _floor(n * 0.5) * 2) == 0
        return (start + r * sign).mask_where(even.logical_not(), start + (span - r) * sign)
    v = v.mask_where(v < lo, fold(lo - v, lo, 1))
    return v.mask_where(v > hi, fold(v - hi, hi, -1))


@op("GridSample")
def _grid_sample(c, a, x, grid):
    x, grid = c.t(x), c.t(grid)
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(a.get("mode", "linear"),
                                                           a.get("mode", "linear"))
    pad, align = a.get("padding_mode", "zeros"), a.get("align_corners", 0)
    n, ch, spatial = x.shape[0], x.shape[1], x.shape[2:]
    r, out = len(spatial), grid.shape[1:-1]
    taps = []  # per dim: [(index tensor, weight tensor or None, in-range mask or None)]
    for k, size in enumerate(spatial):
        g = grid[..., r - 1 - k]
        v = (g + 1) * 0.5 * (size - 1) if align else ((g + 1) * size - 1) * 0.5
        lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        if mode == "nearest":
            v = _round(v)
        if pad == "border":
            v = v.mask_where((v < lo).logical_or(v > hi), v.clamp(0, size - 1))
        elif pad == "reflection":
            v = _reflect(v, lo, hi)
        base = v if mode == "nearest" else _floor(v)
        frac = v - base
        if mode == "nearest":
            offsets, weights = [0], [None]
        elif mode == "linear":
            offsets, weights = [0, 1], [1 - frac, frac]
        else:  # cubic, A = -0.75, taps at -1, 0, 1, 2
            t = [frac + 1, frac, 1 - frac, 2 - frac]
            offsets = [-1, 0, 1, 2]
            weights = [((-0.75 * u + 3.75) * u - 6) * u + 3 if i in (0, 3) else
                       (1.25 * u - 2.25) * u * u + 1 for i, u in enumerate(t)]
        dim = []
        for o, w in zip(offsets, weights):
            i = base + o
            ok = None
            if pad == "zeros":
                ok = (i >= 0).logical_and(i <= size - 1)
            elif pad == "border":
                i = i.clamp(0, size - 1)
            else:
                i = _reflect(i, lo, hi).maximum(0)
            dim.append((_floor(i.clamp(0, size - 1)).cast("int32"), w, ok))
        taps.append(dim)
    flat = x.reshape(n, ch, -1)
    strides = [math.prod(spatial[k + 1:]) for k in range(r)]
    total = None
    for combo in np.ndindex(*[len(t) for t in taps]):
        idx, weight = None, None
        for k, j in enumerate(combo):
            i, w, ok = taps[k][j]
            idx = i * strides[k] if idx is None else idx + i * strides[k]
            if ok is not None:
                w = ok.cast(x.dtype) if w is None else w.mask_where(ok.logical_not(), 0)
            weight = w if weight is None else (weight if w is None else weight * w)
        idx = idx.reshape(n, 1, -1).expand(n, ch, math.prod(out))
        part = flat.gather(2, idx)
        if weight is not None:
            part = part * weight.reshape(n, 1, -1)
        total = part if total is None else total + part
    return total.reshape(n, ch, *out)


# ---- recurrent-state layers of linear attention models -----------------------------------------
@op("CausalConvWithState")
def _causal_conv(c, a, x, w, b=None, past=None):
    x, w = c.t(x), c.t(w)
    n, ch, k = x.shape[0], x.shape[1], w.shape[2]
    past = Tensor.full((n, ch, k - 1), 0, c.backend, x.dtype) if past is None else c.t(past)
    padded = Tensor.cat([past, x], 2) if k > 1 else x
    bias = () if b is None else (c.t(b),)
    y = _apply(PRIMS["conv2d"], padded.unsqueeze(2), w.unsqueeze(2), *bias, stride=(1, 1),
               padding=((0, 0), (0, 0)), dilation=(1, 1), groups=ch).squeeze(2)
    if a.get("activation", "none") in ("silu", "swish"):
        y = y * y.sigmoid()
    return y, padded[:, :, padded.shape[2] - (k - 1):]


@op("LinearAttention")
def _linear_attention(c, a, q, k, v, past=None, decay=None, beta=None):
    hq, hk = a["q_num_heads"], a["kv_num_heads"]
    q, k, v = (_heads(c.t(t), h) for t, h in ((q, hq), (k, hk), (v, hk)))
    b, _, steps, dk = k.shape
    rule = a.get("update_rule", "gated_delta")
    if decay is not None:
        decay = c.t(decay)
        decay = decay.reshape(b, steps, hk, 1).permute(0, 2, 1, 3) if decay.shape[-1] == hk \
            else _heads(decay, hk)
    if beta is not None:
        beta = c.t(beta)
        beta = beta.reshape(b, steps, beta.shape[-1], 1).permute(0, 2, 1, 3)
    state = Tensor.full((b, hk, dk, v.shape[3]), 0, c.backend, q.dtype) if past is None \
        else c.t(past)
    scale = a.get("scale", 0.0) or 1 / math.sqrt(dk)
    outs = []
    for t in range(steps):  # the state update, one step at a time (the reference's order)
        kt, vt = k[:, :, t], v[:, :, t]
        if rule in ("gated", "gated_delta"):
            state = state * decay[:, :, t].exp().unsqueeze(-1)
        if rule in ("delta", "gated_delta"):
            vt = beta[:, :, t] * (vt - (state * kt.unsqueeze(-1)).sum_dim(2).squeeze(2))
        state = state + kt.unsqueeze(-1) * vt.unsqueeze(-2)
        read = state if hq == hk else state.unsqueeze(2).expand(
            b, hk, hq // hk, *state.shape[2:]).reshape(b, hq, *state.shape[2:])
        outs.append((q[:, :, t].unsqueeze(-2) @ read).squeeze(-2) * scale)
    y = Tensor.stack(outs, 2).permute(0, 2, 1, 3).reshape(b, steps, -1)
    return y, state


@op("TensorScatter")
def _tensor_scatter(c, a, cache, update, where=None):
    cache, update = c.t(cache), c.t(update)
    axis = a.get("axis", -2) % cache.ndim
    n, s = cache.shape[axis], update.shape[axis]
    start = np.zeros(cache.shape[0], np.int64) if where is None else c.np(where)
    pos = start.reshape((-1,) + (1,) * (cache.ndim - 1)) + np.arange(s).reshape(
        [s if d == axis else 1 for d in range(cache.ndim)])
    pos = pos % n if a.get("mode", "linear") == "circular" else pos
    idx = c.t(np.broadcast_to(pos, update.shape).astype(np.int64))
    return _replace(cache, axis, idx, update, "none")


# ---- inverse trigonometry and the DFT, from atan and matrix products ----------------------------
def _atan(x):
    # |x| > 1: pi/2 - atan(1/|x|); then two half-angle steps put |t| below tan(pi/16) ~ 0.2,
    # where the odd series to t^23 is exact to float64's precision
    ax = x.abs()
    big = ax > 1
    t = ax.mask_where(big, 1 / ax.maximum(1e-300 if x.dtype == "float64" else 1e-30))
    for _ in range(2):
        t = t / ((t * t + 1).sqrt() + 1)
    tt, total = t * t, t * 0
    for k in range(23, 0, -2):
        total = total * tt + (1 / k if k % 4 == 1 else -1 / k)
    y = total * t * 4
    y = y.mask_where(big, math.pi / 2 - y)
    return y.mask_where(x < 0, -y).mask_where(x != x, x)


unary("Atan", lambda x, a: _atan(x))
unary("Asin", lambda x, a: _atan(x / (1 - x * x).sqrt()).mask_where(x.abs() > 1, math.nan))
unary("Acos", lambda x, a: math.pi / 2 - _atan(x / (1 - x * x).sqrt()).mask_where(
    x.abs() > 1, math.nan))


@op("DFT")
def _dft(c, a, x, length=None, axis=None):
    x = c.t(x)
    axis = (a.get("axis", 1) if c.opset < 20 else (-2 if axis is None else ints(axis)[0]))
    n = None if length is None or not math.prod(length.shape) else ints(length)[0]
    return _spectrum(c, x, axis % x.ndim, n, a.get("inverse", 0), a.get("onesided", 0))


def _spectrum(c, x, axis, n, inverse, half):
    """The DFT of x [..., 1 or 2] (real or complex as its last dim) along axis, length n."""
    given = n is not None
    n = n if given else x.shape[axis]
    if inverse and half:  # a half spectrum back to n real values (Hermitian symmetry)
        m = x.shape[axis]
        n = n if given else 2 * (m - 1)
        k, t = np.arange(m), np.arange(n)[:, None]
        w = np.where((k == 0) | (2 * k == n), 1.0, 2.0) / n
        cos = c.t((w * np.cos(2 * np.pi * k * t / n)).astype(x.dtype))
        sin = c.t((w * np.sin(2 * np.pi * k * t / n)).astype(x.dtype))
        along = (lambda v, mat: (v.swap_dims(axis, -1) @ mat.transpose()).swap_dims(axis, -1))
        y = along(x[..., 0:1], cos)
        return y - along(x[..., 1:2], sin) if x.shape[-1] == 2 else y
    x = _pad_dim(c, x, axis, 0, n - x.shape[axis], "constant", 0) if n > x.shape[axis] else \
        x[(slice(None),) * axis + (slice(0, n),)]
    real, imag = x[..., 0:1], (x[..., 1:2] if x.shape[-1] == 2 else None)
    m = n // 2 + 1 if half else n
    angle = 2 * np.pi * np.outer(np.arange(m), np.arange(n)) / n * (1 if inverse else -1)
    cos, sin = (c.t((f(angle) / (n if inverse else 1)).astype(x.dtype)) for f in (np.cos, np.sin))

    def along(t, w):  # w [m, n] applied along axis
        return (t.swap_dims(axis, -1) @ w.transpose()).swap_dims(axis, -1)
    re, im = along(real, cos), along(real, sin)
    if imag is not None:
        re, im = re - along(imag, sin), im + along(imag, cos)
    return Tensor.cat([re, im], -1)


@op("STFT")
def _stft(c, a, signal, step, window=None, length=None):
    x, step = c.t(signal), int(c.np(step).item())
    width = window.shape[0] if window is not None else ints(length)[0]
    count = (x.shape[1] - width) // step + 1
    frames = Tensor.stack([x[:, f * step:f * step + width] for f in range(count)], 1)
    if window is not None:
        frames = frames * c.t(window).reshape(1, 1, width, 1)
    return _spectrum(c, frames, 2, width, 0, a.get("onesided", 1))


@op("MelWeightMatrix")
def _mel(c, a, bins, length, rate, low, high):
    bins, length, rate = (int(c.np(v).item()) for v in (bins, length, rate))
    mel = [2595 * np.log10(1 + float(c.np(v).item()) / 700) for v in (low, high)]
    edges = np.arange(bins + 2) * (mel[1] - mel[0]) / (bins + 2) + mel[0]
    edges = (((length + 1) * 700 * (10 ** (edges / 2595) - 1)) // rate).astype(int)
    out = np.zeros((length // 2 + 1, bins))
    for i in range(bins):  # triangles rising from edges[i] to edges[i+1], falling to edges[i+2]
        lo, mid, hi = edges[i:i + 3]
        j = np.arange(lo, mid + 1)
        out[j, i] = (j - lo) / (mid - lo) if mid > lo else 1
        j = np.arange(mid, hi)
        out[j, i] = (hi - j) / (hi - mid) if hi > mid else out[j, i]
    return out.astype(ember_dtype(a.get("output_datatype", 1), "MelWeightMatrix"))


@op("GlobalLpPool")
def _global_lp_pool(c, a, x):
    x, p = c.t(x), a.get("p", 2)
    return (x.abs() ** p).sum_dim(tuple(range(2, x.ndim))) ** (1 / p)


def _flex_attention(c, a, q, k, v):
    q, k, v = c.t(q), c.t(k), c.t(v)
    if q.shape[1] != k.shape[1]:
        reps = q.shape[1] // k.shape[1]
        k, v = (t.unsqueeze(2).expand(t.shape[0], t.shape[1], reps, *t.shape[2:]).reshape(
            t.shape[0], -1, *t.shape[2:]) for t in (k, v))
    scale = math.sqrt(a.get("scale", 1 / math.sqrt(q.shape[3])))
    scores = (q * scale) @ (k * scale).swap_dims(-1, -2)
    if "score_mod" in a:
        scores = c.t(c.subgraph(a["score_mod"], [scores])[0])
    p = scores.softmax(-1)
    if "prob_mod" in a:
        p = c.t(c.subgraph(a["prob_mod"], [p])[0])
    return p @ v


OPS[("ai.onnx.preview", "FlexAttention")] = _flex_attention
