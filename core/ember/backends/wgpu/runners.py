"""How Wgpu runs each primitive: KERNELS, its one kernel table, keyed by the op table's Op
objects (the only place in Wgpu that names ops), and a fallback by kind for the rest:

- an elementwise op (ember.ops.ELEMENTWISE: its `wgsl` is an expression such as "exp({0})")
  runs a kernel generated from that expression;
- a movement op (reshape, permute, expand, ...) becomes a view: its NumPy reference is applied
  to a stand-in array with the prim's strides, and the view NumPy returns gives the new strides
  and offset. Where NumPy would copy (reshape of a transposed tensor), the prim is made dense
  first;
- anything else runs its NumPy reference on the host (a read-back; warned once per op).
Users add kernels for their own ops with ember.backends.wgpu.register_kernel(op, runner).
"""

import os
import re
import struct
import sys
import warnings

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ... import autotune
from ...autotune import bucket
from ...backend.base import sole_owner
from ...errors import DTypeError
from ...ops import ELEMENTWISE, MOVEMENT, OPS, REDUCE
from ...ops.definitions import _check_index
from . import kernels
from .kernels import (
    compile_kernel,
    elementwise_source,
    epilogue_source,
    fused_reduce_source,
    fused_rows4_source,
    fused_rows_source,
    fused_source,
    render,
)
from .layout import (
    STORAGE,
    Prim,
    broadcast_strides,
    coalesce,
    dense_strides,
    groups_1d,
    is_dense,
    numel,
    view_words,
)

KERNELS = {}  # Op -> runner(backend, op, inputs, attrs, shape, dtype)


def kernel(name):
    """Register a runner as the kernel of the op table's op `name`."""
    def register(fn):
        KERNELS[OPS[name]] = fn
        return fn
    return register


_F32 = struct.Struct("<f")
_I32 = struct.Struct("<i")


def _bits(value, dtype):
    """A scalar as the i32 word that holds it in `info`."""
    if dtype == "float32":
        try:
            return _I32.unpack(_F32.pack(value))[0]
        except OverflowError:  # beyond float32: inf, as NumPy's cast gives
            return _I32.unpack(_F32.pack(float("inf") if value > 0 else float("-inf")))[0]
    return int(value)


def _donor(be, inputs, i, shape, dtype):
    """inputs[i] when its buffer may become the result's: no one else refers to the prim or
    its storage, it is dense from offset 0, and has the result's shape and dtype."""
    if not be.inplace or i >= len(inputs) or not sole_owner(inputs, i):
        return None
    x = inputs[i]
    if (type(x) is Prim and x.dtype == dtype and x.shape == shape and x.offset == 0
            and is_dense(x.shape, x.strides) and sys.getrefcount(x.storage) == 2):
        return x
    return None


# ---- elementwise: generated from the op table's expression ------------------------------------
def elementwise(be, op, inputs, attrs, shape, dtype):
    alias, out = -1, None
    if be.inplace:
        for i in op.donors:
            x = _donor(be, inputs, i, shape, dtype)
            if x is not None:
                alias, out = i, Prim(x.storage, shape, x.strides, 0, dtype)
                break
    n = numel(shape)
    if out is None:
        out = be.empty(shape, dtype)
    if n == 0:
        return out
    signature = tuple([x.dtype if type(x) is Prim else None for x in inputs])
    first = None
    buffers, scalars = [out.storage.gpu], []
    dense = out.strides
    flat = True  # every operand dense in the result's shape: no index arithmetic at all
    for i, x in enumerate(inputs):
        if type(x) is Prim:
            if x.shape != shape or (x.strides != dense and not is_dense(shape, x.strides)):
                flat = False
            if i != alias:
                buffers.append(x.storage.gpu)
        else:
            if first is None:
                first = next(d for d in signature if d is not None)
            scalars.append(_bits(x, first))
    entry = "main"
    if flat:
        entry = "flat4" if n % 4 == 0 and all(
            x.offset % 4 == 0 for x in inputs if type(x) is Prim) else "flat"
    key = (op, signature, dtype, alias, tuple(sorted(attrs.items())) if attrs else (), entry)
    k = be.device.kernels.get(key)
    if k is None:
        first = next(d for d in signature if d is not None)
        kinds = tuple((d or first, d is None) for d in signature)
        k = compile_kernel(be.device, key, op.name,
                           lambda: elementwise_source(op, kinds, dtype, alias, attrs, entry))
    if flat:
        words = [n, 1, 1, 0, n]
        for x in inputs:
            if type(x) is Prim:
                words += (x.offset, 1)
    else:
        words = view_words(shape, [(x.offset, broadcast_strides(x, shape))
                                   for x in inputs if type(x) is Prim])
    be.device.dispatch(k, tuple(buffers), words + scalars,
                       groups_1d(n // 4 if entry == "flat4" else n), be.cache)
    return out


def _scalar_words(block):
    """The `info` words of a fusion Block's Python scalars, in node order, each in the dtype
    of its node's first tensor operand (as the generated kernel reads them)."""
    spots = _SCALAR_SPOTS.get(block.key())
    if spots is None:  # where the scalars are depends on the key only: found once
        spots = []
        for j, node in enumerate(block.nodes):
            typing = next((i for i in node.inputs if type(i) is tuple), None)
            spots += [(j, p, typing) for p, i in enumerate(node.inputs) if type(i) is not tuple]
        if len(_SCALAR_SPOTS) >= 4096:
            _SCALAR_SPOTS.clear()
        spots = _SCALAR_SPOTS[block.key()] = tuple(spots)
    nodes, leaves = block.nodes, block.leaves
    return [_bits(nodes[j].inputs[p], (leaves if k == "leaf" else nodes)[t].dtype)
            for j, p, (k, t) in spots]


_SCALAR_SPOTS = {}  # Block.key() -> (node, input, the operand whose dtype types it), a scalar


def _choose(be, family, key, candidates, run, repeats=False):
    """ember.autotune's choice among a kernel's candidates on this device. While a plan is
    recorded nothing can be read back to time them: a key first met there takes the default
    (Fusion's recording run may form blocks its eager capture did not)."""
    return autotune.choose(family, key, candidates, run, be.to_numpy, be.sync, repeats=repeats,
                           measurable=be.device.recording is None)


def fusable(op):
    """Whether a fusion Block may hold op besides elementwise ops (Wgpu.fusable): a reduction
    that fused_rows runs, or an op with an epilogue (EPILOGUES)."""
    return op in EPILOGUES or (op.kind == REDUCE and op.name in ("sum", "max", "min"))


def fused(be, block):
    """A fusion Block (ember.fusion) as one generated kernel: its leaves read through their
    strides (broadcast to the block's shape), each op in registers, block.outputs written.
    A block with reductions runs as a row kernel (fused_rows), one with a producer in the
    producer's epilogue (EPILOGUES); None where neither can."""
    special = [j for j, n in enumerate(block.nodes) if n.op.kind not in ELEMENTWISE]
    if special:
        first = block.nodes[special[0]].op
        if first.kind == REDUCE:
            return fused_rows(be, block, special)
        return EPILOGUES[first](be, block, special[0]) if len(special) == 1 else None
    shape, leaves = block.shape, block.leaves
    room = _MAX_BUFFERS - len(leaves)
    if len(block.outputs) > room > 0:
        # more outputs than one kernel can bind beside its leaves: a kernel per group of
        # them, each computing the chain again (in registers: cheaper than writing it once)
        return [prim for i in range(0, len(block.outputs), room)
                for prim in fused(be, type(block)(block.nodes, leaves,
                                                  block.outputs[i:i + room], shape))]
    if room < 1:
        return None  # (Fusion(Wgpu()) closes a block before: fused_buffers)
    n = numel(shape)
    outs = [be.empty(shape, block.nodes[j].dtype) for j in block.outputs]
    if n == 0:
        return outs
    flat = all(x.shape == shape and (x.strides == outs[0].strides
                                     or is_dense(shape, x.strides)) for x in leaves)
    entry = "main"
    if flat:
        entry = "flat4" if n % 4 == 0 and all(x.offset % 4 == 0 for x in leaves) else "flat"
    dtypes = tuple(x.dtype for x in leaves)
    # the scalars that are NaN (almost never): the others' NaN rules are left out of the kernel
    scalars = [i for n in block.nodes for i in n.inputs if type(i) is not tuple]
    nans = tuple(s for s, v in enumerate(scalars) if v != v)
    key = ("fused", block.key(), dtypes, entry, kernels.FUSED_QUADS, nans)
    k = be.device.kernels.get(key)
    if k is None:
        k = compile_kernel(be.device, key, "fused",
                           lambda: fused_source(block, dtypes, entry, nans))
    scalars = _scalar_words(block)
    if flat:
        words = [n, 1, 1, 0, n]
        for x in leaves:
            words += (x.offset, 1)
    else:
        words = view_words(shape, [(x.offset, broadcast_strides(x, shape)) for x in leaves])
    be.device.dispatch(k, tuple(o.storage.gpu for o in outs) + tuple(
        x.storage.gpu for x in leaves), words + scalars,
        _even_groups(n // 4, 256 * kernels.FUSED_QUADS) if entry == "flat4"
        else _even_groups(n, 256), be.cache)
    _submit_big(be, n)
    return outs


# ---- movement: views through NumPy's own view rules --------------------------------------------
_FAKE = [np.zeros(0, np.uint8)]


def _stand_in(x):
    """A read-only uint8 array with x's shape and strides (itemsize 1: bytes are elements)
    over zeroed memory that covers every element x can reach. Never written; a NumPy copy of
    it reads the kernel's zero pages only."""
    hi = x.offset + sum((s - 1) * st for s, st in zip(x.shape, x.strides) if st > 0)
    fake = _FAKE[0]
    if fake.size <= hi:
        fake = _FAKE[0] = np.zeros(max(hi + 1, 2 * fake.size), np.uint8)
    return fake, as_strided(fake[x.offset:], x.shape, x.strides, writeable=False)


def _numpy_view(op, x, attrs):
    fake, stand_in = _stand_in(x)
    out = np.asarray(op.np(stand_in, **attrs))
    start = fake.__array_interface__["data"][0]
    at = out.__array_interface__["data"][0] - start
    if out.flags.owndata or not 0 <= at < fake.size:
        return None  # NumPy had to copy
    return at, tuple(out.strides), tuple(out.shape)


def movement(be, op, inputs, attrs, shape, dtype):
    x = inputs[0]
    if numel(shape) == 0 or numel(x.shape) == 0:
        return be.empty(shape, dtype)
    view = _numpy_view(op, x, attrs)
    if view is None:
        x = be.dense_copy(x)
        view = _numpy_view(op, x, attrs)
        if view is None:
            return host(be, op, inputs, attrs, shape, dtype)
    offset, strides, vshape = view
    if vshape != shape:
        raise AssertionError(f"{op.name}: NumPy's view has shape {vshape}, the rule says {shape}")
    return Prim(x.storage, shape, strides, offset, dtype, x.range)


# ---- the host: NumPy's reference, for ops without a kernel --------------------------------------
_WARNED = set()


def host(be, op, inputs, attrs, shape, dtype):
    if op.name not in _WARNED:
        _WARNED.add(op.name)
        warnings.warn(f"Wgpu has no WGSL kernel for {op.name!r}: it runs on the CPU through "
                      "NumPy (a read-back each call); register one with "
                      "ember.backends.wgpu.register_kernel", stacklevel=4)
    be.device.counters["host_fallbacks"] += 1
    arrays = [be.to_numpy(x) if type(x) is Prim else x for x in inputs]
    with np.errstate(all="ignore"):
        out = np.asarray(op.np(*arrays, **attrs))
    return be.from_numpy(np.ascontiguousarray(out, dtype=dtype))


# ---- copies and fills ---------------------------------------------------------------------------
def copy_into(be, dst, dst_offset, dst_strides, src):
    """Write src (broadcast to dst's shape) into the view (dst_offset, dst_strides) of the
    prim dst's storage."""
    shape = dst.shape
    n = numel(shape)
    if n == 0:
        return
    if src.storage is dst.storage:  # one buffer cannot be bound for reading and writing
        src = be.dense_copy(src)
    k = compile_kernel(be.device, ("copy",), "copy",
                       lambda: (render("copy.wgsl"), "main", ("w", "r")))
    words = view_words(shape, [(dst_offset, dst_strides), (src.offset,
                                                          broadcast_strides(src, shape))])
    be.device.dispatch(k, (dst.storage.gpu, src.storage.gpu), words, groups_1d(n), be.cache)


def fill(be, dst, shape, offset, strides, value):
    n = numel(shape)
    if n == 0:
        return
    k = compile_kernel(be.device, ("fill",), "fill",
                       lambda: (render("fill.wgsl"), "main", ("w",)))
    words = view_words(shape, [(offset, strides)], _bits(value, dst.dtype))
    be.device.dispatch(k, (dst.storage.gpu,), words, groups_1d(n), be.cache)


def _own_copy(be, inputs, shape, dtype):
    """Input 0 as a dense prim the op may write: its own buffer if it was donated, else a copy."""
    x = _donor(be, inputs, 0, shape, dtype)
    if x is not None:
        return Prim(x.storage, shape, x.strides, 0, dtype)
    x = inputs[0]
    out = be.empty(shape, dtype)
    copy_into(be, out, 0, out.strides, x)
    return out


@kernel("full")
def full(be, op, inputs, attrs, shape, dtype):
    out = be.empty(shape, dtype)
    value = attrs["value"]
    fill(be, out, shape, 0, out.strides, value)
    if dtype == "int32":
        out.range = (int(value), int(value))
    return out


@kernel("cat")
def cat(be, op, inputs, attrs, shape, dtype):
    dim = attrs["dim"]
    out = be.empty(shape, dtype)
    at = 0
    for x in inputs:
        copy_into(be, Prim(out.storage, x.shape, out.strides, 0, dtype),
                  at * out.strides[dim], out.strides, x)
        at += x.shape[dim]
    return out


@kernel("slice_assign")
def slice_assign(be, op, inputs, attrs, shape, dtype):
    out = _own_copy(be, inputs, shape, dtype)
    value = inputs[1]
    starts, stops, steps = attrs["starts"], attrs["stops"], attrs["steps"]
    region = tuple(len(range(a, b, c)) for a, b, c in zip(starts, stops, steps))
    if numel(region) == 0:
        return out
    offset = sum(a * st for a, st in zip(starts, out.strides))
    strides = tuple(st * c for st, c in zip(out.strides, steps))
    if type(value) is Prim:
        copy_into(be, Prim(out.storage, region, strides, offset, dtype), offset, strides, value)
    else:
        fill(be, out, region, offset, strides, value)
    return out


# ---- indexing -----------------------------------------------------------------------------------
def check_indices(be, name, idx, size, dim):
    """Raise the reference's ShapeError for an index outside [0, size). Known bounds of the
    indices (from their upload, a fill, an argmax) usually settle it without a read-back."""
    if numel(idx.shape) == 0:
        return
    bounds, recording = idx.range, be.device.recording
    if recording is not None and bounds is not None:  # (plan.py: a replay's bounds must pass)
        recording.checked.append((idx.storage.gpu, size))
    if (bounds is None or bounds[0] < 0 or bounds[1] >= size) and (
            not be.device.bridge.can_block or recording is not None):
        return  # a browser cannot wait for the values, nor a plan being recorded (plan.py)
        #         for values computed on the GPU; WebGPU clamps out-of-range accesses
    if bounds is None or bounds[0] < 0 or bounds[1] >= size:
        values = be.to_numpy(idx)
        be.device.counters["index_checks_read_back"] += 1
        bounds = idx.range = (int(values.min()), int(values.max()))
    if bounds[0] < 0 or bounds[1] >= size:
        _check_index(name, np.array(bounds), size, dim)


def _gather_words(x, shape, dim, idx_offset, idx_strides):
    src = list(x.strides)  # x has the result's shape in every dim but `dim`
    step = x.strides[dim]
    src[dim] = 0
    return view_words(shape, [(x.offset, tuple(src)), (idx_offset, idx_strides)], step)


def _gather_dispatch(be, x, idx, out, words):
    k = compile_kernel(be.device, ("gather",), "gather",
                       lambda: (render("gather.wgsl"), "main", ("w", "r", "r")))
    be.device.dispatch(k, (out.storage.gpu, x.storage.gpu, idx.storage.gpu), words,
                       groups_1d(numel(out.shape)), be.cache)


def _gather_like(be, op, inputs, attrs, shape, dtype, index_strides):
    x, idx = inputs
    dim = attrs["dim"]
    _index_dtype(op, idx)
    check_indices(be, op.name, idx, x.shape[dim], dim)
    out = be.empty(shape, dtype)
    if numel(shape):
        words = _gather_words(x, shape, dim, idx.offset, index_strides(idx, dim, len(shape)))
        _gather_dispatch(be, x, idx, out, words)
    return out


@kernel("gather")
def gather(be, op, inputs, attrs, shape, dtype):
    return _gather_like(be, op, inputs, attrs, shape, dtype, lambda idx, dim, n: idx.strides)


@kernel("select")
def select(be, op, inputs, attrs, shape, dtype):
    # select is a gather whose 1-D indices are seen as a tensor of the result's shape that
    # varies along dim only
    return _gather_like(be, op, inputs, attrs, shape, dtype, lambda idx, dim, n: tuple(
        idx.strides[0] if d == dim else 0 for d in range(n)))


def _index_dtype(op, idx):
    if idx.dtype != "int32":
        raise DTypeError(f"{op.name}: Wgpu takes int32 indices, got {idx.dtype}")


_SCATTER_ADD = {
    "float32": ("u32", """var old = atomicLoad(&out[t]);
    loop {
        let r = atomicCompareExchangeWeak(&out[t], old, bitcast<u32>(bitcast<f32>(old) + v));
        if (r.exchanged) {
            break;
        }
        old = r.old_value;
    }"""),
    "int32": ("i32", "atomicAdd(&out[t], v);"),
    "bool": ("u32", "atomicOr(&out[t], v);"),
}


@kernel("scatter")
def scatter(be, op, inputs, attrs, shape, dtype):
    dim = attrs["dim"]
    idx, values = inputs[1], inputs[2]
    _index_dtype(op, idx)
    check_indices(be, op.name, idx, shape[dim], dim)
    out = _own_copy(be, inputs, shape, dtype)
    n = numel(idx.shape)
    if n == 0:
        return out
    atomic, add = _SCATTER_ADD[dtype]
    k = compile_kernel(be.device, ("scatter", dtype), "scatter", lambda: (
        render("scatter.wgsl", ATOMIC=atomic, T=STORAGE[dtype], ADD=add), "main",
        ("w", "r", "r")))
    dst = list(out.strides)
    step = dst[dim]
    dst[dim] = 0
    words = view_words(idx.shape, [(0, tuple(dst)), (idx.offset, idx.strides),
                                   (values.offset, broadcast_strides(values, idx.shape))], step)
    be.device.dispatch(k, (out.storage.gpu, idx.storage.gpu, values.storage.gpu), words,
                       groups_1d(n), be.cache)
    return out


# ---- adam: an optimizer's fused update (three results in one [3, n] buffer) ----------------------
@kernel("adam")
def adam(be, op, inputs, attrs, shape, dtype):
    x, g, s = (be.dense(p) for p in inputs[:3])
    w, beta2, bc2_sqrt, eps, step = inputs[3:]
    out = be.empty(shape, dtype)
    n = numel(shape) // 3
    if n == 0:
        return out
    k = compile_kernel(be.device, ("adam",), "adam",
                       lambda: (render("adam.wgsl"), "main", ("w", "r", "r", "r")))
    words = [n, x.offset, g.offset, s.offset] + [
        _bits(v, dtype) for v in (w, 1 - beta2, beta2, bc2_sqrt, eps, step)]
    be.device.dispatch(k, (out.storage.gpu, x.storage.gpu, g.storage.gpu, s.storage.gpu),
                       words, groups_1d(n), be.cache)
    return out


# ---- reductions ---------------------------------------------------------------------------------
_EXTREME = "if (better(b, a)) {\n        return b;\n    }\n    return a;"
REDUCERS = {  # kernel name -> (comparison, init, combine, result)
    "sum": (">", "Acc(${ZERO}, 0)", "return Acc(a.v + b.v, 0);", "a.v"),
    "max": (">", "element(base, first)", _EXTREME, "a.v"),
    "min": ("<", "element(base, first)", _EXTREME, "a.v"),
    "argmax": (">", "element(base, first)", _EXTREME, "a.i"),
    "argmin": ("<", "element(base, first)", _EXTREME, "a.i"),
}
_ZERO = {"float32": "0.0", "int32": "0", "bool": "0u"}


def _reduce_source(name, x_dtype, out_dtype):
    cmp, init, combine, result = REDUCERS[name]
    src = render("reduce.wgsl", T=STORAGE[x_dtype], OUT=STORAGE[out_dtype],
                 NAN="is_nan(x)" if x_dtype == "float32" else "false", CMP=cmp,
                 INIT=init.replace("${ZERO}", _ZERO[x_dtype]), COMBINE=combine, RESULT=result)
    return src


def _reduce_dispatch(be, name, x_dtype, out, src, n_out, n_red, offset, kshape, kstr, rshape,
                     rstr, chunks=1, chunk=None, entry=None):
    chunk = chunk or n_red
    n = n_out * chunks
    entry = entry or _reduce_entry(be, n, chunk)
    k = compile_kernel(be.device, ("reduce", name, x_dtype, entry), name, lambda: (
        _reduce_source(name, x_dtype, out.dtype), entry, ("w", "r")))
    words = [n, n_red, len(kshape), len(rshape), offset, chunks, chunk, *kshape, *kstr,
             *rshape, *rstr]
    groups = groups_1d(n, 1) if entry == "per_group" else groups_1d(n)
    be.device.dispatch(k, (out.storage.gpu, src.storage.gpu), words, groups, be.cache)


def _reduce_entry(be, n, chunk):
    """The default kernel for n reductions of `chunk` elements each: a workgroup per output for
    long ones (a CPU adapter pays dearly for its barriers), else an invocation per output."""
    cpu = be.device.bridge.is_cpu
    # (lavapipe stops a loop after 32767 iterations: a longer one per invocation is wrong there)
    per_group = n < 64 or chunk > 32767 if cpu else chunk >= 2048 or (chunk > 64 and n < 1024)
    return "per_group" if per_group else "per_thread"


REDUCE_ENTRIES = {"g": "per_group", "t": "per_thread", "c": "per_thread_cm"}


def _reduce_candidates(be, by_value, n_out, n_red):
    """How a reduction may run, the default first, as entry letter + chunks ("g256": a
    workgroup per output and chunk of 256 chunks; "c16": an invocation per output and chunk,
    chunk-major). Chunks split long reductions into few outputs (sum, max, min only: their
    partial results are values). Products under 1M elements keep the default (too small to
    matter); EMBER_WGPU_REDUCE=NAME forces one (tests)."""
    # a GPU's default chunks are a workgroup's (4096: BatchNorm's sums over [128, 32, 28, 28]
    # took 175 us each in 1024-element chunks a thread, 12 workgroups, on the H200)
    per = 1024 if be.device.bridge.is_cpu else 4096
    chunks = min(256, n_red // per) if by_value and n_out < 256 else 1
    chunks = -(-n_red // -(-n_red // max(1, chunks)))
    first = "gt"[_reduce_entry(be, n_out * chunks, -(-n_red // chunks)) == "per_thread"]
    out = [f"{first}{chunks}"]
    forced = os.environ.get("EMBER_WGPU_REDUCE")
    if forced:
        return [forced if by_value or forced[1:] == "1" else out[0]]
    if n_out * n_red < 1 << 20:
        return out
    # chunks of 64 and more: a column sum of 4096 x 4096 in chunks of 512 rows (32K
    # invocations) ran at 0.21x torch's on the H200
    for c in (1, 8, 32, 128, 512, 2048, 8192) if by_value else (1,):
        if c == 1 or n_red // c >= 64:
            # an invocation sums at most 32768 alone: more, one after another in float32,
            # disagrees with a workgroup's tree (16M elements in 8 on the H200), and is slow
            kinds = "gtc"[:2 + (c > 1)] if -(-n_red // c) <= 32768 else "g"
            out += [f"{e}{c}" for e in kinds if f"{e}{c}" != out[0]]
    return out


def _reducer(name):
    by_value = REDUCERS[name][3] == "a.v"

    def run(be, op, inputs, attrs, shape, dtype):
        x = inputs[0]
        dims = attrs["dims"]
        n_out = numel(shape)
        out = be.empty(shape, dtype)
        if n_out == 0:
            return out
        red = sorted(dims)
        kept = [d for d in range(len(x.shape)) if d not in dims]
        n_red = numel([x.shape[d] for d in red])
        if n_red == 0:  # a sum of nothing
            fill(be, out, shape, 0, out.strides, 0)
            return out
        kshape, (kstr,) = coalesce([x.shape[d] for d in kept], [[x.strides[d] for d in kept]])
        rshape, (rstr,) = coalesce([x.shape[d] for d in red], [[x.strides[d] for d in red]])

        def launch(choice, into=None):
            into = into or be.empty(shape, dtype)
            entry, chunks = REDUCE_ENTRIES[choice[0]], int(choice[1:])
            chunk = -(-n_red // chunks)
            chunks = -(-n_red // chunk)
            if chunks == 1:
                _reduce_dispatch(be, name, x.dtype, into, x, n_out, n_red, x.offset, kshape,
                                 kstr, rshape, rstr, entry=entry)
                return into
            # the chunks' partial results, [n_out, chunks] (chunk-major: [chunks, n_out]),
            # reduced by a second dispatch
            part = be.empty((n_out, chunks), x.dtype)
            _reduce_dispatch(be, name, x.dtype, part, x, n_out, n_red, x.offset, kshape, kstr,
                             rshape, rstr, chunks, chunk, entry)
            cm = entry == "per_thread_cm"
            _reduce_dispatch(be, name, x.dtype, into, part, n_out, chunks, 0, [n_out],
                             [1 if cm else chunks], [chunks], [n_out if cm else 1])
            return into

        key = (be.device.name, name, x.dtype, bucket(n_out), bucket(n_red), len(rshape),
               rstr[-1] == 1)
        choice = _choose(be, "wgpu.reduce", key,
                         _reduce_candidates(be, by_value, n_out, n_red), launch)
        launch(choice, out)
        if not by_value:
            out.range = (0, n_red - 1)
        return out
    return run


for _name in REDUCERS:
    kernel(_name)(_reducer(_name))


def fused_reduce(be, block, op, attrs, shape, dtype):
    """A reduction of a fusion Block's result in one kernel (fused_reduce.wgsl): the chain is
    computed as the reduction reads it. None where the plain path runs instead (an op that is
    not a reduction here, a bool chain, nothing to reduce or no output)."""
    name, xshape, dims = op.name, block.shape, attrs["dims"]
    x_dtype = block.nodes[-1].dtype
    n_out = numel(shape)
    red = sorted(dims)
    kept = [d for d in range(len(xshape)) if d not in dims]
    n_red = numel([xshape[d] for d in red])
    leaves = block.leaves
    if (name not in REDUCERS or x_dtype == "bool" or n_out == 0 or n_red == 0
            or len(leaves) + 1 > _MAX_BUFFERS):
        return None
    strides = [broadcast_strides(x, xshape) for x in leaves]
    kshape, kstr = coalesce([xshape[d] for d in kept], [[st[d] for d in kept] for st in strides])
    rshape, rstr = coalesce([xshape[d] for d in red], [[st[d] for d in red] for st in strides])
    by_value = REDUCERS[name][3] == "a.v"
    cpu = be.device.bridge.is_cpu
    # a GPU's chunks are a workgroup's, as _reduce_candidates' default (BatchNorm's sums over
    # [128, 32, 28, 28] took 0.5 ms each in 1024-element chunks a thread, 13 workgroups, on the
    # H200: 3 of the fused training step's 4.6 ms)
    per = 1024 if cpu else 4096
    chunks = max(1, min(256, n_red // per)) if by_value and n_out < 256 else 1
    chunk = -(-n_red // chunks)
    chunks = -(-n_red // chunk)
    out = be.empty(shape, dtype)
    first = be.empty((n_out, chunks), x_dtype) if chunks > 1 else out
    n = n_out * chunks
    # (lavapipe stops a loop after 32767 iterations: a longer one per invocation is wrong there)
    per_group = n < 64 or chunk > 32767 if cpu else chunk >= 2048 or (chunk > 64 and n < 1024)
    entry = "per_group" if per_group else "per_thread"
    dtypes = tuple(x.dtype for x in leaves)
    cmp, init, combine, result = REDUCERS[name]
    fields = dict(T=STORAGE[x_dtype], OUT=STORAGE[first.dtype], CMP=cmp, COMBINE=combine,
                  NAN="is_nan(x)" if x_dtype == "float32" else "false", RESULT=result,
                  INIT=init.replace("${ZERO}", _ZERO[x_dtype]).replace("element(base, ",
                                                                        "element("))
    key = ("fused_reduce", name, block.key(), dtypes, entry, first.dtype)
    k = be.device.kernels.get(key)
    if k is None:
        k = compile_kernel(be.device, key, f"fused_{name}", lambda: (
            fused_reduce_source(block, dtypes, fields), entry, ("w",) + ("r",) * len(leaves)))
    words = [n, n_red, len(kshape), len(rshape), 0, chunks, chunk, *kshape, *rshape]
    for x, ks, rs in zip(leaves, kstr, rstr):
        words += [x.offset, *ks, *rs]
    words += _scalar_words(block)
    groups = groups_1d(n, 1) if per_group else groups_1d(n)
    be.device.dispatch(k, (first.storage.gpu,) + tuple(x.storage.gpu for x in leaves), words,
                       groups, be.cache)
    if chunks > 1:  # the chunks' partial results, reduced as values
        _reduce_dispatch(be, name, x_dtype, out, first, n_out, chunks, 0, [n_out], [chunks],
                         [chunks], [1])
    if not by_value:
        out.range = (0, n_red - 1)
    return out


# storage buffers a fused kernel may bind for its leaves and outputs: WebGPU guarantees 8 per
# shader stage in browsers, and the info words take one (bridge_browser's metaLayout)
_MAX_BUFFERS = 7


def fused_rows(be, block, special):
    """A Block with reductions as one row kernel (fused_rows.wgsl, or fused_rows4.wgsl where
    the rows allow vec4s): a workgroup per row of the reduced dims, or several short rows a
    workgroup. None unless every reduction reduces the same dims of a node or leaf of the
    block's shape (sum, max or min of float32 or int32) and every output has the block's or
    the reductions' shape."""
    # what the plan depends on (never a tensor: the cache must not keep buffers alive)
    layout = (block.key(), tuple(n.shape for n in block.nodes),
              tuple((x.shape, x.strides, x.offset, x.dtype) for x in block.leaves),
              be.device.bridge.is_cpu, ROW_THREADS, ROW_QUADS)
    plan = _ROW_PLANS.get(layout, False)
    if plan is False:
        if len(_ROW_PLANS) >= 4096:
            _ROW_PLANS.clear()
        plan = _ROW_PLANS[layout] = _rows_plan(block, special, be.device.bridge.is_cpu)
    if plan is None:
        return None
    key, (row_outputs, invariant_nodes, invariant, per), outs, words, groups, n_all = plan
    k = be.device.kernels.get(key)
    if k is None:
        dtypes = key[2]
        k = compile_kernel(be.device, key, "fused_rows", lambda: (
            fused_rows4_source(block, dtypes, special, row_outputs, invariant_nodes, invariant,
                               per) if per is not None else
            fused_rows_source(block, dtypes, special, row_outputs, invariant_nodes), "main",
            ("w",) * len(outs) + ("r",) * len(dtypes)))
    outs = [be.empty(s, dt) for s, dt in outs]
    be.device.dispatch(k, tuple(o.storage.gpu for o in outs) + tuple(
        x.storage.gpu for x in block.leaves), words + _scalar_words(block), groups, be.cache)
    _submit_big(be, n_all)
    return outs


# fused_rows' plans by the block's layout (most models run a few layouts over and over)
_ROW_PLANS = {}


def _rows_plan(block, special, on_cpu):
    """(kernel key, fused_rows*_source's arguments, the outputs' (shape, dtype), the info
    words but the scalars, the workgroups, elements) for fused_rows, or None."""
    shape, nodes, leaves = block.shape, block.nodes, block.leaves
    dims = sorted(nodes[special[0]].attrs["dims"])
    row = nodes[special[0]].shape
    for j in special:
        n = nodes[j]
        src = n.inputs[0]
        src_shape = nodes[src[1]].shape if src[0] == "node" else leaves[src[1]].shape
        if (sorted(n.attrs["dims"]) != dims or src_shape != shape or n.op.kind != REDUCE
                or n.op.name not in ("sum", "max", "min")
                or n.dtype not in ("float32", "int32")):
            return None
    out_shapes = [nodes[j].shape for j in block.outputs]
    n_out, n_all = numel(row), numel(shape)
    if (any(s not in (shape, row) for s in out_shapes) or n_all == 0
            or len(leaves) + len(out_shapes) > _MAX_BUFFERS):
        return None
    if n_out < 128 and n_all > 4096 * n_out and not on_cpu:
        return None  # a few long rows: a GPU does better with chunked reductions first
    row_outputs = tuple(o for o, s in enumerate(out_shapes) if s != shape)

    def along_row(s):  # a shape whose every reduced dim has size 1: constant along a row
        lead = len(shape) - len(s)
        return all(d < lead or s[d - lead] == 1 for d in dims)
    invariant = tuple(k for k, x in enumerate(leaves) if along_row(x.shape))
    invariant_nodes = {j for j, n in enumerate(nodes) if along_row(n.shape)}
    views = [(x.offset, broadcast_strides(x, shape)) for x in leaves]
    views += [(0, broadcast_strides(Prim(None, s, dense_strides(s), 0, None), shape))
              for s in out_shapes]
    kept = [d for d in range(len(shape)) if d not in dims]
    kshape, kstr = coalesce([shape[d] for d in kept], [[st[d] for d in kept] for _, st in views])
    rshape, rstr = coalesce([shape[d] for d in dims], [[st[d] for d in dims] for _, st in views])
    dtypes = tuple(x.dtype for x in leaves)
    per, tpr = _rows4(n_all // n_out, views, kstr, rstr, invariant, row_outputs, len(leaves))
    key = ("fused_rows", block.key(), dtypes, row_outputs, invariant, per)
    words = [n_out, n_all // n_out, len(kshape), len(rshape), tpr, 0, 0, *kshape, *rshape]
    for (offset, _), ks, rs in zip(views, kstr, rstr):
        words += [offset, *ks, *rs]
    return (key, (row_outputs, invariant_nodes, invariant, per),
            [(s, nodes[j].dtype) for s, j in zip(out_shapes, block.outputs)], words,
            _even_groups(n_out, 256 // tpr if per is not None else 1), n_all)


# invocations a vec4 row kernel gives a row at most (its workgroup has 256), and the vec4s
# each holds at most (in registers; a longer row, or any with 0, loops over its vec4s in each
# pass instead)
ROW_THREADS, ROW_QUADS = 256, 8


def _rows4(n, views, kstr, rstr, invariant, row_outputs, nt):
    """(vec4s an invocation holds, or 0 for the loop form, invocations a row) for fused_rows4
    over rows of n elements, or (None, 1) for the scalar fused_rows: every view read or
    written along the row (the leaves not in `invariant`, the outputs not in `row_outputs`)
    must walk one reduced dim densely from 16-byte aligned starts."""
    along = [v for v in range(len(views)) if (v not in invariant if v < nt
                                               else v - nt not in row_outputs)]
    if n % 4 or len(rstr[0]) != 1 or any(
            rstr[v][0] != 1 or views[v][0] % 4 or any(s % 4 for s in kstr[v]) for v in along):
        return None, 1
    n4 = n // 4
    tpr = min(ROW_THREADS, 1 << max(0, (-(-n4 // 4) - 1).bit_length()))
    per = 1 << max(0, (-(-n4 // tpr) - 1).bit_length())
    return (per if per <= ROW_QUADS else 0), tpr


# elements from which a fused kernel's batch is submitted at once: the GPU starts on it while
# Python records what follows (a kernel this size takes tens of microseconds on any GPU, more
# than a submission costs)
_SUBMIT_AT = 1 << 24


def _even_groups(n, per_group):
    """groups_1d's workgroups spread evenly over y: past 65535 of them, groups_1d's full x
    rows would leave up to a row of empty workgroups to launch."""
    g = -(-n // per_group)
    y = -(-g // 65535)
    return (-(-g // y), y, 1)


def _submit_big(be, n):
    if n >= _SUBMIT_AT:
        be.device.flush()


# ---- matmul -------------------------------------------------------------------------------------
MATMUL_KERNELS = {"scalar": ("matmul.wgsl", 32), "vec4": ("matmul_vec4.wgsl", 64),
                  "narrow": ("matmul_narrow.wgsl", 4)}  # name -> (file, C's rows/cols a group)
# matmul_tile.wgsl's shapes: name -> (WX, WY, RA, TN, BK): WX x WY invocations, each 4 RA rows
# by 4 TN columns of a (4 RA WY) x (4 TN WX) tile, BK steps of k; "d": double-buffered. The
# workgroup memory each needs (_tile_bytes) is checked against the device's: 16 KiB is what
# browsers guarantee, "tiled" (the default where it fits) and others take 24-32 KiB
MATMUL_TILES = {"tiled": (16, 16, 2, 2, 32),
                "t128x128k16": (16, 16, 2, 2, 16), "t128x64k16": (8, 16, 2, 2, 16),
                "t64x128k16": (16, 8, 2, 2, 16), "t64x64k32": (8, 8, 2, 2, 32),
                "t64x64k16": (16, 16, 1, 1, 16), "t128x128k8": (16, 16, 2, 2, 8),
                "t64x128k16m4": (16, 16, 1, 2, 16), "t128x64k16m4": (8, 32, 1, 2, 16),
                "t32x128k16": (16, 8, 1, 2, 16),
                "d128x128k8": (16, 16, 2, 2, 8), "d64x128k8": (16, 8, 2, 2, 8),
                "d128x64k8": (8, 16, 2, 2, 8), "d64x64k16": (8, 8, 2, 2, 16),
                "d128x128k16": (16, 16, 2, 2, 16), "t128x256k16": (16, 16, 2, 4, 16),
                # "p": A staged by lanes in pairs (matmul_tile.wgsl)
                "p128x128k32": (16, 16, 2, 2, 32), "p64x128k16": (16, 8, 2, 2, 16),
                "p128x128k16": (16, 16, 2, 2, 16), "p128x256k16": (16, 16, 2, 4, 16),
                # "w": a warp's 32 invocations 8 columns x 4 rows of the tile's WX x WY, not
                # 16 x 2 (a k step's workgroup-memory reads meet fewer distinct vec4s): level
                # with t64x128k16 or 1-6% faster at 1000^3 and 1024^3 in two H200 runs
                "w64x128k16": (16, 8, 2, 2, 16)}


def _flags(name):
    """The letters before a tile's size ("dw128x128k16": "dw"); the default has none."""
    m = re.match(r"([a-z]+)\d", name)
    return m.group(1) if m else ""


def _tile_bytes(name):
    wx, wy, ra, tn, bk = MATMUL_TILES[name]
    return (2 if "d" in _flags(name) else 1) * 16 * bk * (ra * wy + tn * wx)


def _tiles(M, N, nb):
    """How many 128 x 128 tiles C has: a product with few of them leaves a GPU idle unless it
    splits k (_matmul_kernels' split-k candidates, _matmul_epilogue's decline)."""
    return nb * -(-M // 128) * -(-N // 128)


def _tile(choice):
    """(tile name, its (WX, WY, RA, TN, BK), splits S) of a matmul_tile.wgsl candidate
    "NAME" or "NAME/sS" (split-k), or None for the kernels of MATMUL_KERNELS."""
    name, _, s = choice.partition("/s")
    return (name, MATMUL_TILES[name], int(s or 1)) if name in MATMUL_TILES else None


def _tile_source(name, t, epilogue):
    """matmul_tile.wgsl for one shape: its accumulators, k loop and stores written out here."""
    wx, wy, ra, tn, bk = MATMUL_TILES[name]
    flags = _flags(name)
    n_threads, double = wx * wy, "d" in flags
    bm4, bn4 = ra * wy, tn * wx  # the tile's rows and columns, in vec4s
    a_step, b_step = n_threads // (bk // 4), n_threads // bn4  # rows staged apart
    la, lb = 4 * bm4 // a_step, bk // b_step  # vec4s staged per invocation
    acc = [(r, i, c) for r in range(ra) for i in range(4) for c in range(tn)]
    sets = ("0", "1") if double else ("",)
    tiles = "\n".join(
        f"var<workgroup> tile_a{n}: array<array<vec4<{t}>, {bm4}>, BK>;  // [k][m / 4]: A^T\n"
        f"var<workgroup> tile_b{n}: array<array<vec4<{t}>, {bn4}>, BK>;  // [k][n / 4]"
        for n in sets)

    def load(k):  # the registers of the step at k (an expression)
        return [f"pa{q} = load_a(a_row{q}, a_ok{q}, ({k}) / 4 + lc, k4);" for q in range(la)] + [
            f"pb{q} = load_b(b_col, b_ok, {k} + brow + {b_step * q}, k_end, brs);"
            for q in range(lb)]

    def stage(n):  # registers -> tile set n (A transposed: k-major)
        return [f"tile_a{n}[lc * 4 + {j}][ma + {a_step // 4 * q}][mc] = pa{q}.{'xyzw'[j]};"
                for q in range(la) for j in range(4)] + [
            f"tile_b{n}[brow + {b_step * q}][bc] = pb{q};" for q in range(lb)]

    def fma(n):  # the multiply-adds of the step in set n, its k loop unrolled
        lines = [f"let a{r} = tile_a{n}[#k][ty + {wy * r}];" for r in range(ra)]
        lines += [f"let b{c} = tile_b{n}[#k][tx + {wx * c}];" for c in range(tn)]
        lines += [f"acc{r}{i}{c} += a{r}.{'xyzw'[i]} * b{c};" for r, i, c in acc]
        return [f"//! unroll k {bk}", "{", *("    " + x for x in lines), "}", "//! end unroll"]
    if double:  # step kt from set 0 while kt + BK is staged into set 1, then the reverse
        loop = [*stage(0), "workgroupBarrier();",
                "for (var kt = k_first; kt < k_end; kt += 2 * BK) {",
                *load("kt + BK"), *fma(0), *stage(1), "workgroupBarrier();",
                "if (kt + BK >= k_end) {", "    break;", "}",
                *load("kt + 2 * BK"), *fma(1), *stage(0), "workgroupBarrier();", "}"]
    else:
        loop = ["for (var kt = k_first; kt < k_end; kt += BK) {", *stage(""),
                "workgroupBarrier();", *load("kt + BK"), *fma(""), "workgroupBarrier();", "}"]
    depth = 0  # the loop's lines indented by their braces
    for j, line in enumerate(loop):
        depth -= line.startswith("}")
        loop[j] = "    " * (depth + 1) + line
        depth += line.endswith("{")
    stores = [f"let c{c} = n0 / 4 + tx + {wx * c};" for c in range(tn)]
    for r in range(ra):
        for i in range(4):
            stores += [f"let row{r}{i} = m0 + (ty + {wy * r}) * 4 + {i};", f"if (row{r}{i} < M) {{"]
            stores += [f"    if (c{c} < n4) {{ store4(base + row{r}{i} * n4 + c{c}, row{r}{i}, "
                       f"4 * c{c}, acc{r}{i}{c}); }}" for c in range(tn)] + ["}"]
    if "p" in flags:
        staging = [f"let lr = (t / 2) % {a_step};", f"let lc = t % 2 + 2 * (t / {2 * a_step});"]
    else:
        staging = ["let lr = t / (BK / 4);", "let lc = t % (BK / 4);"]
    if "w" in flags:  # warp t / 32 of WX / 8 a row, lane t % 32 of 8 a row
        lanes = [f"let tx = t / 32 % {wx // 8} * 8 + t % 8;",
                 f"let ty = t / {4 * wx} * 4 + t % 32 / 8;"]
    else:
        lanes = ["let tx = i32(lid.x);", "let ty = i32(lid.y);"]
    text = render("matmul_tile.wgsl", T=t, STAGING="\n".join("    " + x for x in staging),
                  LANES="\n".join("    " + x for x in lanes),
                  EPILOGUE=epilogue, BK=bk, WX=wx, WY=wy, BM=4 * bm4,
                  BN=4 * bn4, BN4=bn4, AS=a_step, BS=b_step, LA=la, LB=lb, TILES=tiles,
                  ACC="\n".join(f"    var acc{r}{i}{c} = vec4<{t}>();" for r, i, c in acc),
                  LOOP="\n".join(loop), STORES="\n".join("    " + line for line in stores))
    return kernels._unroll(text)


def _matmul_kernels(be, vec4, M, N, K, nb, epilogue):
    """The kernels a product may run, the default first: row-major aligned operands take vec4
    loads; GPUs stage tiles in workgroup memory, CPU adapters (lavapipe, SwiftShader) do better
    without barriers. ember.autotune measures the others against it: on GPUs other tile shapes
    (more workgroups for small products) and, without an epilogue, split-k where the tiles are
    few and K long. EMBER_WGPU_MATMUL=NAME forces one (benchmarks, tests)."""
    forced = os.environ.get("EMBER_WGPU_MATMUL")
    if forced:
        if forced not in MATMUL_KERNELS and forced.partition("/s")[0] not in MATMUL_TILES:
            raise ValueError(f"EMBER_WGPU_MATMUL={forced!r}: expected one of "
                             f"{', '.join([*MATMUL_KERNELS, *MATMUL_TILES])} (a tile /sN: "
                             "split-k)")
        if epilogue is not None:  # split-k has no epilogue: the tile alone
            forced = forced.partition("/s")[0]
        return [forced if vec4 or forced in ("scalar", "narrow") else "scalar"]
    # few columns (a classifier's head): the others give it a handful of invocations. Not yet
    # with an epilogue: in the one H200 run that offered it there, Fusion's inference plan did
    # not compile (cause not found, not seen on lavapipe; the epilogue is tested, forced)
    narrow = ["narrow"] if N <= 32 and M <= 4 * 65535 and epilogue is None else []
    if not vec4:
        return ["scalar", *narrow]
    # "tiled" stages 32 KiB of workgroup memory; a device at WebGPU's default limit (16 KiB:
    # many browsers and phones) takes the tile of its shape that fits instead
    room = be.device.bridge.limits.get("workgroup_storage", 1 << 15)
    fits = [t for t in MATMUL_TILES if _tile_bytes(t) <= room]
    tiled = "tiled" if "tiled" in fits else "t128x128k16"
    if be.device.bridge.is_cpu:
        return ["vec4", tiled, "scalar", *narrow]
    first = [tiled, "vec4"] if M >= 64 and N >= 64 else ["vec4", tiled]
    out = list(dict.fromkeys(first + fits + narrow))  # (scalar: 2-4x the slowest tile on the H200)
    if epilogue is None and _tiles(M, N, nb) <= 256 and K >= 1024:  # few tiles, long k: split
        out += [f"{t}/s{s}" for t in ("t32x128k16", "t64x64k16", "t64x128k16", "t128x128k16",
                                       tiled, "w64x128k16") for s in (2, 4, 8) if K // s >= 256]
    return list(dict.fromkeys(out))


def _vec4_rows(x):
    """x's matrices are row-major with 16-byte aligned rows (batch strides included)."""
    return (x.strides[-1] == 1 or x.shape[-1] == 1) and x.offset % 4 == 0 and all(
        st % 4 == 0 for st in x.strides[:-1])


@kernel("matmul")
def matmul(be, op, inputs, attrs, shape, dtype):
    return _matmul(be, inputs, shape, dtype)


def _matmul(be, inputs, shape, dtype, block=None, producer=None):
    """C = A @ B; with a fusion Block whose node `producer` is this product, the rest of the
    block runs in the kernel's epilogue (matmul*.wgsl's store) and its outputs are returned,
    or None where it cannot (the plain product then runs first, through Fusion)."""
    a, b = inputs
    if block is not None:
        epi = [n for j, n in enumerate(block.nodes) if j != producer]
        ids = sorted({i[1] for n in epi for i in n.inputs if type(i) is tuple and i[0] == "leaf"})
        leaves = [block.leaves[k] for k in ids]
        out_dtypes = {block.nodes[j].dtype for j in block.outputs}
        if (numel(shape) == 0 or a.shape[-1] == 0 or out_dtypes != {dtype}
                or 3 + len(block.outputs) - 1 + len(ids) > _MAX_BUFFERS):
            return None
    out = be.empty(shape, dtype)
    if numel(shape) == 0:
        return out
    M, K = a.shape[-2:]
    N = b.shape[-1]
    if K == 0:
        fill(be, out, shape, 0, out.strides, 0)
        return out
    vec4 = K % 4 == 0 and N % 4 == 0
    if vec4 and not (_vec4_rows(a) and _vec4_rows(b)):
        # a transposed or sliced operand: a dense copy costs O(n^2), the slow kernel O(n^3)
        vec4 = M * N * K >= 1 << 18
        if vec4:
            a = a if _vec4_rows(a) else be.dense_copy(a)
            b = b if _vec4_rows(b) else be.dense_copy(b)
    batch = shape[:-2]

    def batch_strides(x):
        return broadcast_strides(Prim(None, x.shape[:-2], x.strides[:-2], 0, dtype), batch)
    strides = [batch_strides(a), batch_strides(b)] if batch else [[], []]
    if block is not None:  # each epilogue leaf's strides in C's shape, split as A's and B's
        full = [broadcast_strides(x, shape) for x in leaves]
        strides += [st[:-2] for st in full]
    bshape, bstrides = coalesce(batch, strides) if batch else ([], strides)
    nb = numel(batch)
    head = [M, N, K, len(bshape), a.offset, a.strides[-2], a.strides[-1],
            b.offset, b.strides[-2], b.strides[-1]]
    tail = [*bshape, *bstrides[0], *bstrides[1]]
    if block is not None:
        for x, st, bs in zip(leaves, full, bstrides[2:]):
            tail += [x.offset, st[-2], st[-1], *bs]
        tail += _scalar_words(block)

    def launch(choice, into=None, block=None, times=1):
        # (times: the tuner's samples, the dispatches repeated over the same buffers)
        tile = _tile(choice)
        name, size = MATMUL_KERNELS.get(choice, (choice.partition("/s")[0], None))
        splits = tile[2] if tile else 1
        into = into or [be.empty(shape, dtype)]
        target = into[0] if splits == 1 else be.empty((nb * splits, M, N), dtype)
        key = ("matmul", name, dtype)
        if block is not None:
            key += (block.key(), tuple(x.dtype for x in block.leaves))

        def build():
            epilogue = epilogue_source(
                block, [x.dtype for x in block.leaves] if block else None,
                ids if block else (), producer, choice not in ("scalar", "narrow"), STORAGE[dtype])
            return (_tile_source(tile[0], STORAGE[dtype], epilogue) if tile else render(
                name, T=STORAGE[dtype], EPILOGUE=epilogue), "main", ("w", "r", "r") + (
                "w",) * (len(into) - 1) + ("r",) * (len(ids) if block else 0))
        k = compile_kernel(be.device, key, "matmul", build)
        buffers = (target.storage.gpu, a.storage.gpu, b.storage.gpu) + tuple(
            o.storage.gpu for o in into[1:])
        if block is not None:
            buffers += tuple(x.storage.gpu for x in leaves)
        if tile:
            wx, wy, ra, tn, _ = tile[1]
            grid = (-(-N // (4 * tn * wx)), -(-M // (4 * ra * wy)))
        else:
            grid = (-(-N // size), -(-M // size))
        step = 65535 // splits
        for _ in range(times):
            for start in range(0, nb, step):
                be.device.dispatch(k, buffers, head + [start, splits] + tail,
                                   (*grid, min(step, nb - start) * splits), be.cache)
            if splits > 1:  # the sum over the splits: [nb, splits, M * N] -> [nb, M * N]
                _reduce_dispatch(be, "sum", dtype, into[0], target, nb * M * N, splits, 0,
                                 [nb, M * N], [splits * M * N, 1], [splits], [M * N])
        return into[0]

    # the fused kernel is tuned as itself: its epilogue changes what is fastest
    cands = _matmul_kernels(be, vec4, M, N, K, nb, block)
    key = (be.device.name, dtype, bucket(M), bucket(N), bucket(K), bucket(nb))
    if block is None:
        choice = _choose(be, "wgpu.matmul", key, cands, lambda c, n=1: launch(c, times=n),
                         repeats=True)
        return launch(choice, [out])
    outs = [out] + [be.empty(shape, dtype) for _ in block.outputs[1:]]
    choice = _choose(be, "wgpu.matmul", key + (len(block.outputs), len(ids)), cands,
                     lambda c, n=1: launch(c, [be.empty(shape, dtype) for _ in outs], block, n),
                     repeats=True)
    launch(choice, outs, block)
    return outs


def _matmul_epilogue(be, block, producer):
    n = block.nodes[producer]
    inputs = [block.leaves[i[1]] for i in n.inputs]
    if n.shape != block.shape:
        return None
    (M, K), N = inputs[0].shape[-2:], inputs[1].shape[-1]
    if not be.device.bridge.is_cpu and K >= 1024 and _tiles(M, N, numel(n.shape[:-2])) <= 64:
        # a handful of tiles over a long k: the plain product splits k (its candidates) and the
        # rest runs as its own elementwise kernel; an epilogue kernel cannot split (the
        # ConvNet's fc1 at batch 256 on the H200: 0.125 ms fused, 0.048 split, plus ~0.01)
        return None
    return _matmul(be, inputs, n.shape, n.dtype, block, producer)


EPILOGUES = {OPS["matmul"]: _matmul_epilogue}  # Op -> runner(be, block, producer j) or None
# (conv2d's is added with the convolutions below)


# ---- convolution and pooling (ember/ops/nn.py) --------------------------------------------------
def _conv(entry, be, out, x, second, n_out_groups, o, oh, ow, kernel, attrs, bias=None):
    (top, _), (left, _) = attrs["padding"]
    stride, dilation = attrs["stride"], attrs["dilation"]
    words = [*x.shape, o, oh, ow, *kernel, *stride, top, left, *dilation, attrs["groups"],
             x.offset, second.offset, 0 if bias is None else bias.offset]
    has_bias = bias is not None
    k = compile_kernel(be.device, ("conv", entry, out.dtype, has_bias), entry, lambda: (
        render("conv.wgsl", T=STORAGE[out.dtype],
               BIAS_DECL=(f"@group(1) @binding(3) var<storage, read> bias: "
                          f"array<{STORAGE[out.dtype]}>;") if has_bias else "",
               ACC="acc + bias[info[18] + o]" if has_bias else "acc"),
        entry, ("w", "r", "r") + ("r",) * has_bias))
    buffers = (out.storage.gpu, x.storage.gpu, second.storage.gpu)
    be.device.dispatch(k, buffers + ((bias.storage.gpu,) if has_bias else ()), words,
                       n_out_groups, be.cache)
    return out


def _conv_tile_code(ra, rc):
    """conv_gemm.wgsl's ACC, FMA (its k step, unrolled) and STORES for RA x RC vec4s of C a
    thread: rows (ty + WY * r) * 4 + i, columns (tx + WX * c) * 4 .. + 3 (the threads' vec4s
    of a tile row side by side: its loads from workgroup memory without bank conflicts)."""
    acc = [(r, i, c) for r in range(ra) for i in range(4) for c in range(rc)]
    fma = [f"let a{r} = tile_a[#k][ty + WY * {r}];" for r in range(ra)]
    fma += [f"let b{c} = tile_b[#k][tx + WX * {c}];" for c in range(rc)]
    fma += [f"acc{r}{i}{c} += a{r}.{'xyzw'[i]} * b{c};" for r, i, c in acc]
    return dict(
        ACC="\n".join(f"    var acc{r}{i}{c} = vec4<f32>();" for r, i, c in acc),
        FMA="\n".join(["        //! unroll k 16", "        {", *("            " + x for x in fma),
                       "        }", "        //! end unroll"]),
        STORES="\n".join(f"    store_row(g, chunk, m0 + (ty + WY * {r}) * 4 + {i}, "
                         f"j0 + (tx + WX * {c}) * 4, acc{r}{i}{c});" for r, i, c in acc))


def _conv_gemm(mode, be, out, x, second, o, oh, ow, kernel, attrs, bias=None, epilogue=None,
               tile=(64, 64, 1, 1)):
    """conv_gemm.wgsl's implicit GEMM (MODE 0 conv2d, 1 conv_transpose2d, 2 conv2d_weight)
    into out, on (m, j) tiles of `tile` (TM x TN, RA x RC vec4s a thread: _CONV_TILES).
    conv2d_weight's sums over N*OH*OW run in chunks (enough workgroups to fill a GPU: its C is
    only O x C/G*KH*KW), added up by a sum's kernel. `epilogue`: conv2d's fused store
    (_conv_epilogue: key, its DECLS and STORE, buffers, words, signature). False where the
    workgroup counts pass WebGPU's 65535 (conv.wgsl then)."""
    (top, _), (left, _) = attrs["padding"]
    groups = attrs["groups"]
    n, c = x.shape[:2]
    pixels, depth = n * oh * ow, (c // groups) * kernel[0] * kernel[1]
    cols, chunks, chunk = (depth, 1, 0) if mode == 2 else (pixels, 1, 0)
    tm, tn, ra, rc = tile
    tiles = (-(-cols // tn), -(-(o // groups) // tm))
    if mode == 2:  # chunks of at least 256 pixels (a multiple of the kernel's step, 16)
        want = (32 if be.device.bridge.is_cpu else 512) // (tiles[0] * tiles[1] * groups)
        chunks = max(1, min(want, pixels // 256))
        chunk = max(16, -(-pixels // chunks // 16) * 16)
        chunks = -(-pixels // chunk)
    if max(tiles) > 65535 or groups * chunks > 65535:
        return False
    words = [*x.shape, o, oh, ow, *kernel, *attrs["stride"], top, left, *attrs["dilation"],
             groups, x.offset, second.offset, 0 if bias is None else bias.offset, chunks, chunk]
    has_bias = bias is not None
    key, decls, store, more, more_words, more_sig = epilogue or (
        (), *kernels.conv_store_source(None, (), (), 0, has_bias), (), [], ())
    shape = (*kernel, *attrs["stride"])  # constants of the kernel, as its tile
    fields = dict(MODE=mode, DECLS=decls, STORE=store, TM=tm, TN=tn, TM4=tm // 4, TN4=tn // 4,
                  RA=ra, RC=rc, **_conv_tile_code(ra, rc),
                  **dict(zip(("KH", "KW", "SH", "SW"), shape)))
    k = compile_kernel(be.device, ("conv_gemm", mode, tile, shape, has_bias, *key), "conv_gemm",
                       lambda: (kernels._unroll(render("conv_gemm.wgsl", **fields)), "main",
                                ("w", "r", "r") + ("r",) * has_bias + more_sig))
    dest = out if chunks == 1 else be.empty((chunks, *out.shape), out.dtype)
    buffers = (dest.storage.gpu, x.storage.gpu, second.storage.gpu)
    be.device.dispatch(k, buffers + ((bias.storage.gpu,) if has_bias else ()) + more,
                       words + more_words, (tiles[0], tiles[1], groups * chunks), be.cache)
    if chunks > 1:  # the chunks' sums added up: a sum over dim 0 of [chunks, elements]
        total = numel(out.shape)
        _reduce_dispatch(be, "sum", out.dtype, out, dest, total, chunks, 0, [total], [1],
                         [chunks], [total])
    return True


def _conv_epilogue(be, block, producer):
    """A Block whose producer is a conv2d (EPILOGUES): the rest of the chain in conv_gemm's
    store; None where it cannot (not float32, too many buffers, a grid too large)."""
    node, shape = block.nodes[producer], block.shape
    epi = [m for j, m in enumerate(block.nodes) if j != producer]
    ids = sorted({i[1] for m in epi for i in m.inputs if type(i) is tuple and i[0] == "leaf"})
    has_bias = len(node.inputs) > 2
    if (node.shape != shape or node.dtype != "float32" or numel(shape) == 0
            or any(type(i) is not tuple or i[0] != "leaf" for i in node.inputs)
            or {block.nodes[j].dtype for j in block.outputs} != {"float32"}
            or 3 + has_bias + len(block.outputs) - 1 + len(ids) > _MAX_BUFFERS):
        return None
    x, w, *bias = (be.dense(block.leaves[i[1]]) for i in node.inputs)
    leaves = [block.leaves[k] for k in ids]
    dtypes = tuple(leaf.dtype for leaf in block.leaves)
    decls, store = kernels.conv_store_source(block, dtypes, ids, producer, has_bias)
    words = []
    for leaf in leaves:
        words += [leaf.offset, *broadcast_strides(leaf, shape)]
    outs = [be.empty(shape, "float32") for _ in block.outputs]
    epilogue = ((block.key(), dtypes), decls, store, tuple(
        p.storage.gpu for p in outs[1:] + leaves), words + _scalar_words(block),
        ("w",) * (len(outs) - 1) + ("r",) * len(leaves))
    choice = _convolve(be, "conv2d", x, w, shape, "float32", shape[1], shape[2], shape[3],
                       w.shape[2:], node.attrs, bias[0] if bias else None, choose=True)
    tile = _CONV_TILES.get(choice, _CONV_TILES["gemm"])
    if not _conv_gemm(0, be, outs[0], x, w, shape[1], shape[2], shape[3], w.shape[2:],
                      node.attrs, bias[0] if bias else None, epilogue, tile):
        return None
    return outs


_CONV_MODES = {"conv2d": 0, "conv_transpose2d": 1, "conv2d_weight": 2}
# the implicit GEMM's (TM, TN, RA, RC) tiles: 32x128 halves the work of a 64-row tile where m
# (the output channels a group; conv2d_weight's too) is 32 or fewer (H200: conv1 of the ConvNet
# at batch 256, 83 -> 76 us; a 64x128 tile of 8x4 a thread won nowhere there); 64x128 of 4x8 or
# 8x4 a thread (RA x RC vec4s) multiply twice a 4x4's elements for each one staged and gathered
# (conv2 of the ConvNet: m 64, k 288)
_CONV_TILES = {"gemm": (64, 64, 1, 1), "gemm32x128": (32, 128, 1, 1),
               "gemm64x128": (64, 128, 1, 2), "gemm64x128r": (64, 128, 2, 1)}


def _conv_kernels(be):
    """The candidates, the default first: the implicit GEMM's tiles, or conv.wgsl's direct
    kernels (one thread an output element: fewer passes over tiny problems).
    EMBER_WGPU_CONV=gemm|gemm32x128|gemm64x128|gemm64x128r|direct forces one (benchmarks,
    tests)."""
    forced = os.environ.get("EMBER_WGPU_CONV")
    if forced:
        if forced not in (*_CONV_TILES, "direct"):
            raise ValueError(f"EMBER_WGPU_CONV={forced!r}: expected "
                             f"{', '.join(_CONV_TILES)} or direct")
        return [forced]
    return [*_CONV_TILES, "direct"]


def _convolve(be, name, x, second, shape, dtype, o, oh, ow, kernel, attrs, bias=None,
              choose=False):
    """One of the three convolutions into a new prim, by the kernel autotune picks (choose:
    that kernel's name instead: a fused conv2d takes the tile of the same conv unfused)."""
    mode = _CONV_MODES[name]

    def launch(choice):
        out = be.empty(shape, dtype)
        if choice == "direct" or not _conv_gemm(mode, be, out, x, second, o, oh, ow, kernel,
                                                attrs, bias, tile=_CONV_TILES[choice]):
            groups = groups_1d(numel(shape), 1) if mode == 2 else groups_1d(numel(shape))
            _conv(name, be, out, x, second, groups, o, oh, ow, kernel, attrs, bias)
        return out
    n, c = x.shape[:2]
    key = (be.device.name, name, bucket(n * oh * ow), bucket(o), bucket(c * kernel[0] * kernel[1]),
           attrs["groups"] > 1)
    choice = _choose(be, "wgpu.conv", key, _conv_kernels(be), launch)
    return choice if choose else launch(choice)


def _conv_runner(name):
    """conv2d (with its bias, when given) and conv_transpose2d."""
    def run(be, op, inputs, attrs, shape, dtype):
        x, w = be.dense(inputs[0]), be.dense(inputs[1])
        bias = be.dense(inputs[2]) if len(inputs) > 2 else None
        if not numel(shape):
            return be.empty(shape, dtype)
        return _convolve(be, name, x, w, shape, dtype, shape[1], shape[2], shape[3],
                         w.shape[2:], attrs, bias)
    return run


for _name in ("conv2d", "conv_transpose2d"):
    kernel(_name)(_conv_runner(_name))
EPILOGUES[OPS["conv2d"]] = _conv_epilogue


@kernel("conv2d_weight")
def conv2d_weight(be, op, inputs, attrs, shape, dtype):
    x, g = be.dense(inputs[0]), be.dense(inputs[1])
    if not numel(shape):
        return be.empty(shape, dtype)
    return _convolve(be, "conv2d_weight", x, g, shape, dtype, g.shape[1], g.shape[2],
                     g.shape[3], attrs["kernel"], attrs)


def _max_pool2d_runner(values):
    """max_pool2d (values) or max_pool2d_indices: one shader, RESULT picks what it stores."""
    name = "max_pool2d" if values else "max_pool2d_indices"

    def run(be, op, inputs, attrs, shape, dtype):
        x = be.dense(inputs[0])
        out = be.empty(shape, dtype)
        n = numel(shape)
        if n == 0:
            return out
        _, _, h, w = x.shape
        words = [shape[0] * shape[1], h, w, shape[2], shape[3], *attrs["kernel"],
                 *attrs["stride"], *attrs["padding"], *attrs["dilation"], x.offset]
        k = compile_kernel(be.device, (name, x.dtype), name, lambda: (render(
            "pool.wgsl", T=STORAGE[x.dtype], OUT=STORAGE[dtype],
            RESULT="best" if values else "best_at",
            NAN="is_nan(v)" if x.dtype == "float32" else "false"), "main", ("w", "r")))
        be.device.dispatch(k, (out.storage.gpu, x.storage.gpu), words, groups_1d(n), be.cache)
        if not values:
            out.range = (0, h * w - 1)
        return out
    return run


for _name, _values in (("max_pool2d", True), ("max_pool2d_indices", False)):
    kernel(_name)(_max_pool2d_runner(_values))


CACHE = {}  # op -> its runner


def runner_for(op):
    """The runner of an op, remembered in CACHE."""
    if op in KERNELS:
        run = KERNELS[op]
    elif op.kind in ELEMENTWISE and op.wgsl is not None:
        run = elementwise
    elif op.kind == MOVEMENT:
        run = movement
    else:
        run = host
    CACHE[op] = run
    return run


__all__ = ["KERNELS", "dense_strides", "kernel", "runner_for"]
