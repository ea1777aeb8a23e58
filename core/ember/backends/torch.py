"""Torch: PyTorch's kernels (CPU, CUDA, tensor cores) under ember's API.

    from ember.backend import Torch, Autodiff
    B = Torch()                       # or Torch("cuda"), Torch("cuda:1"), Torch("cuda", tf32=True)
    B = Autodiff(Torch("cuda"))       # ember's own Autodiff over it (never torch.autograd)

A prim is a torch.Tensor on the backend's device. Every op of the op table runs as torch
kernels, looked up in one table keyed by op (KERNELS, filled when the first Torch() is made):
explicit entries where torch's function differs from the op, and a fallback by kind for the
elementwise ops that torch names alike (torch.exp, torch.add, torch.lt, ...). torch is imported
only then: ember itself never needs it (pip install ember[torch]).

- dtypes: all of ember's (bool, int32, int64, float32, float64).
- Views: reshape (where the layout allows), permute, expand and slice are torch views; a slice
  with a negative step is also a flip, a copy (torch has no negative strides).
- Ownership: an elementwise result (and slice_assign, scatter, mask_where) is written into an
  input that nothing else refers to (ember.backend.sole_owner) and that is no view, as NdArray
  does; a view of a tensor, or an array from to_numpy, refers to it. `inplace=False`: never.
- Data: on the CPU, from_numpy is torch.from_numpy and to_numpy a read-only .numpy(), neither
  copies. On CUDA both copy, and to_numpy waits for the GPU.
- tf32=True lets this backend's CUDA matmuls and convolutions run on TF32 tensor cores: their
  float32 inputs are rounded to a 10-bit mantissa (float32 has 23), so a product's relative
  error grows from ~1e-7 to ~1e-3, for several times the float32 rate. tf32=False (the default)
  asks for IEEE float32 (PyTorch's own default lets cuDNN convolutions use TF32). The setting is
  made around each such call and restored after, so other torch code keeps its own. No effect
  on the CPU.
"""

import functools
import math
import re
import warnings

import numpy as np

from ..backend.base import Backend, sole_owner
from ..dtype import DTYPES
from ..errors import BackendError
from ..fusion import launched
from ..ops import BINARY, COMPARE, LINALG, MOVEMENT, OPS, SOURCE, UNARY
from ..ops.definitions import _check_index

torch = F = None  # imported by _load(), when the first Torch() is made
KERNELS = {}  # THE table: op -> fn(*inputs, **attrs), `out=` an input it may write into
CHECKED = set()  # the index ops whose kernels check their indices (_in_range) on the host
TORCH_DTYPES = {}  # ember dtype -> torch dtype
_DEVICE = re.compile(r"cpu|cuda(:\d+)?")
_proven = False  # True while a CUDA graph's plan runs: its indices are checked (_Graph)


class Torch(Backend):
    """PyTorch's kernels. `device`: "cpu", "cuda" (the current GPU) or "cuda:N". `tf32`: CUDA
    matmuls and convolutions on TF32 tensor cores (see the module's docstring for the cost).
    `inplace=False` turns off writing results into unshared inputs."""

    def __init__(self, device="cpu", tf32=False, inplace=True):
        if not isinstance(device, str) or not _DEVICE.fullmatch(device):
            raise BackendError(f"Torch: device must be 'cpu', 'cuda' or 'cuda:N' (N a GPU "
                               f"index), got {device!r}")
        _load()
        if device != "cpu":
            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if ":" in device:
                index = int(device[5:])
            else:
                index = torch.cuda.current_device() if count else 0
            if index >= count:
                raise BackendError(f"Torch({device!r}): this torch ({torch.__version__}, CUDA "
                                   f"{torch.version.cuda}) sees {count} CUDA GPU(s); use "
                                   "Torch('cpu'), or a GPU index below the count")
            device = f"cuda:{index}"
        self.device = torch.device(device)
        self.tf32, self.inplace = bool(tf32), inplace
        # the fp32 precision this backend's CUDA matmuls and convolutions ask for (None: CPU)
        self._precision = None if device == "cpu" else "tf32" if tf32 else "ieee"

    def __str__(self):
        return f"Torch<{self.device}{', tf32' if self.tf32 else ''}>"

    def key(self):
        return ("Torch", str(self.device))  # tf32 or not, the data is the same: share it

    # ---- the protocol ----------------------------------------------------------------------
    def execute(self, op, inputs, attrs, shape, dtype):
        fn = KERNELS.get(op)
        if fn is None:
            raise BackendError(f"Torch: no kernel for op {op.name!r}; add one to KERNELS in "
                               "ember/backends/torch.py")
        want = TORCH_DTYPES[dtype]
        if op.kind != MOVEMENT:  # (views launch nothing)
            launched((op.name,))
        if self.inplace and op.donors:
            for i in op.donors:
                if i >= len(inputs):
                    break
                if sole_owner(inputs, i):
                    x = inputs[i]
                    if (type(x) is torch.Tensor and x.dtype is want and x.shape == shape
                            and not x._is_view()):
                        return fn(*inputs, out=x, **attrs)
        if op.kind == SOURCE:
            out = fn(*inputs, device=self.device, **attrs)
        elif self._precision is not None and op.kind == LINALG:
            out = self._precise(fn, inputs, attrs)
        else:
            out = fn(*inputs, **attrs)
        # torch's promotion differs from ember's in places (where(bool mask, int, bool) is
        # int64): the op table's dtype rule decides
        return out if out.dtype is want else out.to(want)

    def _precise(self, fn, inputs, attrs):
        mm, conv = torch.backends.cuda.matmul, torch.backends.cudnn.conv
        before = mm.fp32_precision, conv.fp32_precision
        mm.fp32_precision = conv.fp32_precision = self._precision
        try:
            return fn(*inputs, **attrs)
        finally:
            mm.fp32_precision, conv.fp32_precision = before

    def from_numpy(self, array):
        # torch.from_numpy refuses negative strides, and ember may write into the buffer (a
        # read-only array would warn): those are copied, the rest shared
        if not (array.flags.writeable and array.flags.c_contiguous):
            array = np.array(array, order="C")
        t = torch.from_numpy(array)
        return t if self.device.type == "cpu" else t.to(self.device)

    def to_numpy(self, prim):
        # read-only: writing into the array would change an immutable tensor (.copy() it)
        view = (prim if prim.device.type == "cpu" else prim.cpu()).numpy()
        view.flags.writeable = False
        return view

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    compiles_scalars = True  # compile() takes live scalars (Python floats) among its inputs

    def compile(self, steps, table, inputs, outputs, run=None):
        """ember.jit's plan as one CUDA graph: captured on its first replay, then each replay
        copies the arguments in and launches the whole plan at once, no Python per op. Index
        ops check their indices on the host, which a graph cannot wait for: a plan is graphed
        where each index is in range by construction (max pooling's, _bounds) or is an
        argument (labels), whose bounds one reduction checks before each replay; a replay that
        fails it runs op by op, which raises ember's error. Elsewhere (and on the CPU): None."""
        if run is not None or self.device.type != "cuda" or any(
                type(p) is not torch.Tensor and type(p) is not float for p in inputs):
            return None
        limits = _index_limits(steps, table, inputs)
        return None if limits is None else _Graph(self, steps, table, inputs, outputs,
                                                  limits).run


def _index_limits(steps, table, inputs):
    """{argument: the size its values must stay below} for the plan's index ops, or None
    where an index computed in the plan is not proven in range. An index may be an argument
    or a view of one; or values whose bounds _bounds follows from their making."""
    shapes = {i: p.shape for i, p in enumerate(inputs) if type(p) is torch.Tensor}
    shapes.update((i, p.shape) for i, p in enumerate(table) if type(p) is torch.Tensor)
    arg_of = {i: i for i in shapes if i < len(inputs)}  # slot -> the argument it views
    bounds, limits = {}, {}  # slot -> (lowest, highest) value
    for op, ins, attrs, shape, dtype, out in steps:
        shapes[out] = shape
        if op in CHECKED:  # (input 1 indexes dim `dim` of input 0)
            idx, size = ins[1], shapes[ins[0]][attrs["dim"]]
            if idx in arg_of:
                limits[arg_of[idx]] = min(size, limits.get(arg_of[idx], size))
                continue
            lo, hi = _bound(idx, bounds, table) or (-1, -1)
            if lo < 0 or hi >= size:
                return None
        elif op.kind == MOVEMENT and len(ins) == 1:  # a view: some of the values, repeated
            if ins[0] in arg_of:
                arg_of[out] = arg_of[ins[0]]
            elif _bound(ins[0], bounds, table) is not None:
                bounds[out] = bounds[ins[0]]
        else:
            found = _bounds(op, [_bound(s, bounds, table) for s in ins],
                            [shapes.get(s) for s in ins], dtype)
            if found is not None:
                bounds[out] = found
    return limits


def _bound(slot, bounds, table):
    # an integer constant's bounds are read once, at compile time
    c = table[slot]
    if slot not in bounds and type(c) is int:
        bounds[slot] = c, c
    elif slot not in bounds and type(c) is torch.Tensor and c.numel() and not (
            c.is_floating_point() or c.dtype is torch.bool):
        bounds[slot] = tuple(torch.stack(torch.aminmax(c)).tolist())
    return bounds.get(slot)


def _bounds(op, bounds, shapes, dtype):
    """The bounds of an integer op's result from its inputs', where known: max pooling's flat
    indices into H*W, and sums of bounded values (max pooling's gradient offsets each plane's
    indices by a constant)."""
    if op is OPS["max_pool2d_indices"]:
        h, w = shapes[0][2:]
        return 0, h * w - 1
    if op is OPS["add"] and None not in bounds and dtype in ("int32", "int64"):
        lo, hi = bounds[0][0] + bounds[1][0], bounds[0][1] + bounds[1][1]
        return (lo, hi) if -2 ** 31 <= lo and hi < 2 ** 31 else None  # (no int32 wrap)
    return None


class _Graph:
    def __init__(self, backend, steps, table, inputs, outputs, limits):
        self.backend, self.steps, self.table = backend, steps, table
        self.n_inputs, self.outputs, self.limits = len(inputs), outputs, limits
        self.names = tuple(step.op.name for step in steps if step.op.kind != MOVEMENT)
        self.graph, self.failed = None, False

    def _run(self, values):
        global _proven
        execute, _proven = self.backend.execute, True  # (_index_limits checked the indices)
        try:
            for op, ins, attrs, shape, dtype, out in self.steps:
                values[out] = execute(op, [values[s] for s in ins], attrs, shape, dtype)
        finally:
            _proven = False

    def _capture(self, inputs):
        # the graph reads its arguments from buffers of its own, live scalars from a float64
        # vector (0-d tensors where the ops took floats); warmed up on a side stream first, so
        # cuBLAS and cuDNN set up their workspaces outside the capture
        device = self.backend.device
        self.scalars = [i for i, x in enumerate(inputs) if type(x) is float]
        self.vector = torch.tensor([inputs[i] for i in self.scalars], dtype=torch.float64,
                                   device=device)
        self.tensors = [i for i, x in enumerate(inputs) if type(x) is torch.Tensor]
        self.static = [inputs[i].clone() for i in self.tensors]
        values = list(self.table)
        for i, x in zip(self.tensors, self.static):
            values[i] = x
        for k, i in enumerate(self.scalars):
            values[i] = self.vector[k]
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            self._run(list(values))
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._run(values)
        self.graph, self.values = graph, values
        self.made = [s for s in self.outputs if s >= self.n_inputs and self.table[s] is None]

    def _in_range(self, inputs):
        """Whether the arguments used as indices are below their sizes: one reduction of each
        and one wait for the GPU, for all of them."""
        used = [(inputs[i], size) for i, size in self.limits.items() if inputs[i].numel()]
        if not used:
            return True
        ends = torch.stack([torch.stack(torch.aminmax(x)).long() for x, _ in used]).tolist()
        return all(lo >= 0 and hi < size for (lo, hi), (_, size) in zip(ends, used))

    def run(self, inputs):
        if self.failed or not self._in_range(inputs):
            return None
        if self.graph is None:
            try:
                self._capture(inputs)
            except Exception as e:  # noqa: BLE001 (an op torch cannot capture: op by op)
                self.failed = True
                warnings.warn(f"Torch: ember.jit's plan cannot be a CUDA graph ({e}); it "
                              "replays op by op", RuntimeWarning, stacklevel=3)
                return None
        if self.scalars:
            self.vector.copy_(torch.tensor([inputs[i] for i in self.scalars],
                                           dtype=torch.float64))
        torch._foreach_copy_(self.static, [inputs[i] for i in self.tensors])
        self.graph.replay()
        launched(self.names)  # (the whole plan: one launch)
        # the graph's buffers are overwritten by the next replay: results are copies
        made = [torch.empty_like(self.values[s]) for s in self.made]
        torch._foreach_copy_(made, [self.values[s] for s in self.made])
        out = {s: inputs[s] if s < self.n_inputs else self.table[s] for s in self.outputs}
        out.update(zip(self.made, made))
        return out


def _load():
    global torch, F
    if torch is not None:
        return
    try:
        import torch as t
        import torch.nn.functional as f
    except ImportError as e:
        raise BackendError("Torch needs PyTorch: pip install 'ember[torch]' (or pip install "
                           "torch)") from e
    torch, F = t, f
    TORCH_DTYPES.update({d: getattr(torch, d) for d in DTYPES})
    KERNELS.update(_kernels())
    CHECKED.update(OPS[name] for name in ("gather", "scatter", "select"))


# ---- the kernels ----------------------------------------------------------------------------
def _scalar(v, like):
    """A Python scalar as a 0-d CPU tensor of `like`'s dtype, where torch wants a tensor (torch
    takes 0-d CPU tensors alongside CUDA ones)."""
    return v if type(v) is torch.Tensor else torch.tensor(v, dtype=like.dtype)


# (torch parses a keyword `out=None` at a cost per call: it is passed only when given)
def _unary(fn):
    return lambda x, out=None: fn(x) if out is None else fn(x, out=out)


def _binary(fn, scalar_right=True):
    """torch takes a Python scalar on the right of most binary functions (not a bool: True - x
    is an error), never on the left."""
    def run(a, b, out=None):
        if type(a) is not torch.Tensor:
            a = _scalar(a, b)
        elif not scalar_right:
            b = _scalar(b, a)
        elif type(b) is bool:
            b = int(b)
        return fn(a, b) if out is None else fn(a, b, out=out)
    return run


def _in_range(name, idx, size, dim):
    """The op table's index check (a ShapeError naming the bad index): on CUDA an index out of
    range is a device-side assert that ends the process. Skipped in a CUDA graph's plan, whose
    indices _index_limits proved in range (_proven)."""
    if idx.numel() and not _proven:
        _check_index(name, np.array(torch.stack(torch.aminmax(idx)).tolist()), size, dim)


def _keys(starts, stops, steps):
    """torch indices for range-normalised slices, and the dims to flip: torch slices with
    positive steps only, so a negative one takes the same elements forwards, then flips."""
    keys, flips = [], []
    for d, (a, b, c) in enumerate(zip(starts, stops, steps)):
        n = len(range(a, b, c))
        if c > 0 or n == 0:
            keys.append(slice(a, b, c) if n else slice(0, 0))
        else:
            keys.append(slice(a + (n - 1) * c, a + 1, -c))
            flips.append(d)
    return tuple(keys), flips


def _slice(x, starts, stops, steps):
    keys, flips = _keys(starts, stops, steps)
    return x[keys].flip(flips) if flips else x[keys]


def _slice_assign(x, v, starts, stops, steps, out=None):
    keys, flips = _keys(starts, stops, steps)
    out = x.clone() if out is None else out
    if type(v) is torch.Tensor:
        lead = out.ndim - v.ndim  # v broadcasts: its dims align on the right
        v = v.flip([d - lead for d in flips if d >= lead]) if flips else v
        out[keys].copy_(v)
    else:
        out[keys].fill_(v)
    return out


def _scatter(x, idx, v, dim, out=None):
    _in_range("scatter", idx, x.shape[dim], dim)
    out = x.clone() if out is None else out
    return out.scatter_add_(dim, idx.long(), v)  # (int64 indices: what every torch takes)


def _relu(x, out=None):  # (clamp_min: NaN stays NaN)
    return torch.clamp_min(x, 0) if out is None else torch.clamp_min(x, 0, out=out)


def _mask_where(x, mask, value, out=None):
    if out is None:
        return torch.where(mask, value, x)
    if type(value) is torch.Tensor:
        return torch.where(mask, value, x, out=out)
    return out.masked_fill_(mask, value)  # (where's out= form takes no scalar)


def _arg(fn):
    def run(x, dims):
        x = x.to(torch.uint8) if x.dtype is torch.bool else x  # (torch's argmax takes no bool)
        return fn(x, dims[0], keepdim=True)  # (int64: execute casts to the op's int32)
    return run


def _reduce(fn):
    # torch reduces every dim when given none; the op table means none
    return lambda x, dims: fn(x, dims, keepdim=True) if dims else x


def _sum(x, dims, keepdim=True):
    return torch.sum(x, dims, keepdim=keepdim, dtype=x.dtype) if dims else x  # (int32 stays int32)


def _matmul(a, b):
    if a.is_cuda and not a.is_floating_point():  # cuBLAS has no integer GEMM: exact products
        return (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(-2, dtype=a.dtype)
    return torch.matmul(a, b)


def _split(padding):
    """((top, bottom), (left, right)) as torch's symmetric padding, plus what remains for
    F.pad (left, right, top, bottom) (negative amounts crop)."""
    (t, b), (l, r) = padding
    ph, pw = max(min(t, b), 0), max(min(l, r), 0)
    return (ph, pw), (l - pw, r - pw, t - ph, b - ph)


def _padded(x, padding):
    pad, rest = _split(padding)
    return (F.pad(x, rest) if any(rest) else x), pad


def _conv2d(x, w, b=None, *, stride, padding, dilation, groups):
    x, pad = _padded(x, padding)
    return F.conv2d(x, w, b, stride, pad, dilation, groups)


def _conv_transpose2d(x, w, stride, padding, dilation, groups):
    pad, rest = _split(padding)  # the adjoint crops where conv2d pads, and pads where it crops
    y = F.conv_transpose2d(x, w, None, stride, pad, 0, groups, dilation)
    return F.pad(y, [-r for r in rest]) if any(rest) else y


def _conv2d_weight(x, g, kernel, stride, padding, dilation, groups):
    x, pad = _padded(x, padding)
    w = x.new_empty((g.shape[1], x.shape[1] // groups) + tuple(kernel))  # only its shape counts
    return torch.ops.aten.convolution_backward(g, x, w, None, stride, pad, dilation, False,
                                               (0, 0), groups, (False, True, False))[1]


def _max_pool2d(x, kernel, stride, padding, dilation, ceil_mode):
    if x.is_cuda and not x.is_floating_point():  # torch pools integers on the CPU only: on
        # CUDA in float64 (exact for int32, and for int64 within 2**53), cast back
        return _max_pool2d(x.double(), kernel, stride, padding, dilation, ceil_mode).to(x.dtype)
    return F.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode)


def _max_pool2d_indices(x, kernel, stride, padding, dilation, ceil_mode):
    x = x.double() if x.is_cuda and not x.is_floating_point() else x  # (as above)
    return F.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode, return_indices=True)[1]


def _gelu(x, out=None):
    y = F.gelu(x)
    if x.device.type == "cpu" and _cpu_gelu_nan_at_inf():
        y = torch.where(x == math.inf, x, y)  # gelu(+inf) is +inf
    return y


@functools.cache
def _cpu_gelu_nan_at_inf():
    """Whether this torch's vectorized CPU gelu gives NaN at +inf (torch 2.13's AVX512 kernel
    does; its scalar path and other CPUs give inf): asked once, the fix applied only there."""
    return bool(F.gelu(torch.full((64,), math.inf)).isnan().any())


def _gelu_grad(g, x, y):
    if g.shape != x.shape:  # (aten's gelu_backward does not broadcast)
        g, x = torch.broadcast_tensors(g, x)
    return torch.ops.aten.gelu_backward(g, x)


def _batch_norm(x, mean, var, w, b, eps):
    # x * scale + shift, the statistics folded per channel first (as the NumPy reference)
    scale = w / torch.sqrt(var + eps)
    return torch.addcmul(b - mean * scale, x, scale)


def _adam(x, g, s, w, beta2, bc2_sqrt, eps, step):
    # ops/optim.py's arithmetic: m' = lerp(m, g, w), v' = v beta2 + (1 - beta2) g g,
    # x' = x + step m' / (sqrt(v') / bc2_sqrt + eps), into the rows of one result
    x, g = x.contiguous(), g.contiguous()  # (a weight's gradient is often transposed: torch's
    # elementwise kernels over mixed layouts ran ~5x slower on the MNIST model's largest layer)
    out = torch.empty_like(s)
    new_x, m, v = out
    torch.lerp(s[1], g, w, out=m)
    torch.mul(s[2], beta2, out=v).addcmul_(g, g, value=1 - beta2)
    torch.sqrt(v, out=new_x).div_(bc2_sqrt).add_(eps)
    if type(step) is torch.Tensor:  # (a CUDA graph's live scalar: addcdiv takes numbers only)
        torch.div(m, new_x, out=new_x).mul_(step).add_(x)
    else:
        torch.addcdiv(x, m, new_x, value=step, out=new_x)
    return out


def _cast(x, dtype):
    want = TORCH_DTYPES[dtype]
    if x.is_floating_point() and not want.is_floating_point and want != torch.bool:
        # saturating, NaN -> 0: the op table's rule (torch, like C, leaves it undefined)
        info = torch.iinfo(want)
        top = torch.nextafter(torch.tensor(-float(info.min), dtype=x.dtype),
                              torch.tensor(0.0, dtype=x.dtype)).item()
        x = torch.nan_to_num(x.clamp(float(info.min), top), nan=0.0)
    return x.to(want)


def _kernels():
    def index(fn, name):
        def run(x, idx, dim):
            _in_range(name, idx, x.shape[dim], dim)
            return fn(x, dim, idx)
        return run

    table = {
        OPS["gelu"]: _gelu,
        OPS["relu"]: _relu,
        OPS["maximum"]: _binary(torch.maximum, scalar_right=False),
        OPS["minimum"]: _binary(torch.minimum, scalar_right=False),
        OPS["cast"]: _cast,
        OPS["sum"]: _sum,
        OPS["max"]: _reduce(torch.amax),
        OPS["min"]: _reduce(torch.amin),
        OPS["argmax"]: _arg(torch.argmax),
        OPS["argmin"]: _arg(torch.argmin),
        OPS["reshape"]: lambda x, shape_to: x.reshape(shape_to),
        OPS["permute"]: lambda x, dims: x.permute(dims),
        OPS["expand"]: lambda x, shape_to: x.expand(shape_to),
        OPS["slice"]: _slice,
        OPS["cat"]: lambda *xs, dim: torch.cat(xs, dim),
        OPS["slice_assign"]: _slice_assign,
        OPS["gather"]: index(lambda x, dim, idx: torch.gather(x, dim, idx.long()), "gather"),
        OPS["scatter"]: _scatter,
        OPS["select"]: index(torch.index_select, "select"),
        OPS["mask_where"]: _mask_where,
        OPS["gelu_grad"]: _gelu_grad,
        OPS["matmul"]: _matmul,
        OPS["full"]: lambda shape_to, value, dtype, device: torch.full(
            shape_to, value, dtype=TORCH_DTYPES[dtype], device=device),
        OPS["conv2d"]: _conv2d,
        OPS["conv_transpose2d"]: _conv_transpose2d,
        OPS["conv2d_weight"]: _conv2d_weight,
        OPS["max_pool2d"]: _max_pool2d,
        OPS["max_pool2d_indices"]: _max_pool2d_indices,
        OPS["batch_norm"]: _batch_norm,
        OPS["adam"]: _adam,
    }
    # the fallback by kind: elementwise ops that torch names alike (torch.exp, torch.add, ...)
    for op in OPS.values():
        fn = getattr(torch, op.name, None)
        if op not in table and fn is not None and op.kind in (UNARY, BINARY, COMPARE):
            table[op] = _unary(fn) if op.kind == UNARY else _binary(fn)
    return table
