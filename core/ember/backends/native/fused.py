"""Fused elementwise kernels for NdArray natively: an ember.fusion Block (a chain of elementwise
ops) becomes one C function, generated from each op's C expression (the table `C` below: the
native set's counterpart of the op table's WGSL expressions), compiled by the machine's
compiler and cached on disk like kernels.c, and run in one pass over memory on the pool's
threads: every intermediate stays in registers.

A kernel depends on the block's ops, attributes, wiring and dtypes, which operands are scalars,
and for each input whether it walks the innermost dim contiguously, broadcasts along it or
strides through it. Shapes, strides, pointers and the scalars' values are arguments, so
`x * s + 1` compiles once for every size, layout of that kind and `s`. The block's dims are
merged where every input allows (a dense tensor is one flat run).

Results follow the NumPy path's: the same IEEE operations in the same order (no contraction
into fused multiply-adds), NumPy's NaN rules (maximum propagates NaN, casts to int saturate
with NaN -> 0), wrapping integers (-fwrapv); exp, log, sin, cos, tanh and pow come from the C
library (NumPy's own SIMD versions can differ in the last bit). A block with an op or a dtype
the table has no expression for, a scalar its dtype cannot hold exactly, or a compiler that
fails returns None: NdArray runs its tiled NumPy path instead.

A signature is compiled once the blocks it ran have covered COMPILE_AT elements (one large
block at once; a tiny one only when it keeps coming back): compiling costs ~0.1-0.5 s, a
NumPy pass over a thousand floats a microsecond. A library already in the cache loads at once.
"""

import ctypes
import math
import threading
import warnings

import numpy as np

from ... import fusion
from ...ops import BINARY, COMPARE, FLOATS, numerics, prims
from . import FLAGS, GCC_ONLY, SIMD, TUNE, _at, _parallel, _threads, compile_library

COMPILE_AT = 1 << 20  # elements a signature runs on NumPy's path before it is compiled
MIN_PARALLEL = 1 << 16  # elements from which a block is split over the pool's threads
MAX_RANK = 16  # dims after merging (the C walk's index array)

CTYPE = {"bool": "u8", "int32": "int", "int64": "i64", "float32": "float", "float64": "double"}
_TAG = {"float32": "f32", "float64": "f64"}
_LIBM = {"float32": "f", "float64": ""}  # the C library's suffix: expf, exp


def _literal(value, dtype):
    """A C literal of `value` in `dtype` (exact: the value NumPy's dtype.type(value) holds)."""
    v = float(np.dtype(dtype).type(value))
    f = "f" if dtype == "float32" else ""
    if math.isnan(v):
        return f"__builtin_nan{f}(\"\")"
    if math.isinf(v):
        return f"{'-' if v < 0 else ''}__builtin_inf{f}()"
    return repr(v) + f


def _by_kind(floats, ints):
    return lambda ins, out, attrs: floats if out in FLOATS else ints


def _cast(ins, out, attrs):
    if out == "bool":
        return "({0} != 0)"
    if ins[0] in FLOATS and out not in FLOATS:
        # saturating, NaN -> 0 (ops/definitions' _cast_np): clipped in the float's precision
        info, t = np.iinfo(out), np.dtype(ins[0]).type
        lo = _literal(info.min, ins[0])
        hi = _literal(np.nextafter(t(-info.min), t(0)), ins[0])
        return f"({{0}} != {{0}} ? 0 : ({{0}} <= {lo} ? ({{T}}){lo} : ({{0}} >= {hi} ? " \
               f"({{T}}){hi} : ({{T}}){{0}})))"
    return "(({T}){0})"


def _batch_norm(ins, out, attrs):
    return f"batch_norm_{{t}}({{0}}, {{1}}, {{2}}, {{3}}, {{4}}, {_literal(attrs['eps'], out)})"


# Each elementwise op's C expression: a format string ({0}, {1}, ... the operands; {T} the
# result's C type, {f} the C library's suffix for it, {t} the prelude's), or a function of
# (operand dtypes, result dtype, attrs) giving one (None: no C form, NumPy's path runs).
C = {
    prims.exp: "exp{f}({0})",
    prims.log: "log{f}({0})",
    prims.sqrt: "__builtin_sqrt{f}({0})",
    prims.erf: "erf_{t}({0})",
    prims.gelu: "gelu_{t}({0})",
    prims.tanh: "tanh{f}({0})",
    prims.sin: "sin{f}({0})",
    prims.cos: "cos{f}({0})",
    prims.neg: "(-{0})",
    prims.abs: _by_kind("__builtin_fabs{f}({0})", "({0} < 0 ? -{0} : {0})"),
    prims.relu: _by_kind("max_{t}({0}, 0)", "({0} > 0 ? {0} : 0)"),
    prims.add: "({0} + {1})",
    prims.sub: "({0} - {1})",
    prims.mul: "({0} * {1})",
    prims.div: "({0} / {1})",
    prims.pow: "pow{f}({0}, {1})",
    prims.maximum: _by_kind("max_{t}({0}, {1})", "({0} > {1} ? {0} : {1})"),
    prims.minimum: _by_kind("min_{t}({0}, {1})", "({0} < {1} ? {0} : {1})"),
    prims.eq: "({0} == {1})",
    prims.ne: "({0} != {1})",
    prims.lt: "({0} < {1})",
    prims.le: "({0} <= {1})",
    prims.gt: "({0} > {1})",
    prims.ge: "({0} >= {1})",
    prims.cast: _cast,
    prims.mask_where: "({1} ? {2} : {0})",
    prims.gelu_grad: "gelu_grad_{t}({0}, {1}, {2})",
    prims.batch_norm: _batch_norm,
}


# ---- the prelude: helpers the expressions call, per float type --------------------------------
def _horner(var, coeffs, lit):
    """_horner of numerics.py, operation for operation: s c[-1] + c[-2], then (acc s + c)."""
    acc = f"({var} * {lit(coeffs[-1])} + {lit(coeffs[-2])})"
    for c in coeffs[-3::-1]:
        acc = f"({acc} * {var} + {lit(c)})"
    return acc


def _prelude():
    f32 = lambda c: _literal(c, "float32")  # noqa: E731
    f64 = lambda c: _literal(c, "float64")  # noqa: E731
    pq = [f32(c) for c in numerics._GELU_F32_PQ.reshape(-1)]
    lines = [
        "typedef long long i64;", "typedef unsigned char u8;",
        # the C library's (no headers: only these are needed)
        *(f"{t} {name}{s}({t}); " for t, s in (("float", "f"), ("double", ""))
          for name in ("exp", "log", "sin", "cos", "tanh")),
        "float powf(float, float); double pow(double, double);",
    ]
    for dt, t in (("float32", "float"), ("float64", "double")):
        g, s, lit = _TAG[dt], _LIBM[dt], (f32 if dt == "float32" else f64)
        tiny = _literal(np.finfo(dt).tiny, dt)
        inv = _literal(numerics.INV_SQRT_2PI, dt)
        lines += [  # maximum/minimum as NumPy's: NaN wins, a tie gives the second operand
            f"static inline {t} max_{g}({t} a, {t} b) {{ return (a != a || a > b) ? a : b; }}",
            f"static inline {t} min_{g}({t} a, {t} b) {{ return (a != a || a < b) ? a : b; }}",
            f"static inline {t} gelu_grad_{g}({t} g, {t} x, {t} y) {{",  # numerics.gelu_grad
            f"  {t} xx = x * x, e = exp{s}(xx * {lit(-0.5)}) * x * {inv};",
            f"  {t} cdf = xx < {tiny} ? {lit(0.5)} + x * {inv} : y / x;",
            "  return (cdf + e) * g; }",
            f"static inline {t} batch_norm_{g}({t} x, {t} m, {t} v, {t} w, {t} b, {t} eps) {{",
            f"  {t} scale = w / __builtin_sqrt{s}(v + eps);",
            "  return x * scale + (b - m * scale); }",
        ]
    lines += [  # erf and GELU: numerics.py's fits, operation for operation
        "static inline float erf_f32(float x) {",
        "  float xc = x < -4.0f ? -4.0f : (x > 4.0f ? 4.0f : x), t = xc * xc * 0.0625f;",
        f"  float c = {_horner('t', numerics.ERF_F32_P, f32)} * xc / "
        f"{_horner('t', numerics.ERF_F32_Q, f32)};",
        "  return c < -1.0f ? -1.0f : (c > 1.0f ? 1.0f : c); }",
        "static inline double erf_f64(double x) {",
        "  double ax = __builtin_fabs(x), t = min_f64(ax, 1.0);",
        "  t = t * t * 2.0 - 1.0;",
        f"  double near = {_horner('t', numerics._F64_SMALL, f64)} * x;",
        "  double xb = ax < 1.0 ? 1.0 : (ax > 6.0 ? 6.0 : ax), s = 2.4 / xb - 1.4;",
        f"  double far = {_horner('s', numerics._F64_LARGE, f64)} / xb * exp(-(xb * xb));",
        "  far = __builtin_copysign(1.0 - far, x);",
        "  return ax < 1.0 ? near : far; }",
        "static inline float gelu_f32(float v) {",  # kernels.c's gelu_f32
        "  float x = v < -5.656854249492381f ? -5.656854249492381f : "
        "(v > 5.656854249492381f ? 5.656854249492381f : v), s = x * x;",
        f"  float p = ((((({pq[5]} * s + {pq[4]}) * s + {pq[3]}) * s + {pq[2]}) * s + {pq[1]})"
        f" * s + {pq[0]});",
        f"  float q = ((((({pq[11]} * s + {pq[10]}) * s + {pq[9]}) * s + {pq[8]}) * s + "
        f"{pq[7]}) * s + {pq[6]});",
        "  float c = 0.5f + x * p / q;",
        "  return v * (c < 0.0f ? 0.0f : (c > 1.0f ? 1.0f : c)); }",
        "static inline double gelu_f64(double x) {",  # numerics._gelu
        "  return (erf_f64(x * 0.7071067811865476) + 1.0) * x * 0.5; }",
    ]
    return "\n".join(lines) + "\n"


PRELUDE = _prelude()
_WALKS = {"c": "p{u}[k]", "b": "b{u}", "s": "p{u}[k * st{u}]"}


def _typed(block, leaf_dtypes):
    """Each node's operand dtypes (a scalar takes its first tensor operand's), or None where
    a binary op or a comparison mixes dtypes (NumPy would promote: its path runs)."""
    done, typed = [], []
    for n in block.nodes:
        tensors = [leaf_dtypes[i[1]] if i[0] == "leaf" else done[i[1]]
                   for i in n.inputs if type(i) is tuple]
        if not tensors or (n.op.kind in (BINARY, COMPARE) and len(set(tensors)) > 1):
            return None
        it = iter(tensors)
        typed.append([next(it) if type(i) is tuple else tensors[0] for i in n.inputs])
        done.append(n.dtype)
    return typed


def source(block, leaf_dtypes, walks):
    """The C source of a block's kernel, or None (an op or dtype without a C expression).
    `walks`: per leaf "c" (contiguous along the innermost dim), "b" (broadcast along it) or
    "s" (strided)."""
    typed = _typed(block, leaf_dtypes)
    if typed is None or any(d not in CTYPE for d in leaf_dtypes):
        return None
    nt, body, scalars = len(leaf_dtypes), [], []
    for j, (n, ins) in enumerate(zip(block.nodes, typed)):
        entry = C.get(n.op)
        if callable(entry):
            entry = entry(ins, n.dtype, n.attrs)
        if entry is None or n.dtype not in CTYPE:
            return None
        names = []
        for i, dt in zip(n.inputs, ins):
            if type(i) is tuple:
                names.append(f"v{i[1]}" if i[0] == "leaf" else f"r{i[1]}")
            else:
                names.append(f"s{len(scalars)}")
                scalars.append(f"const {CTYPE[dt]} s{len(scalars)} = *(const {CTYPE[dt]} *)"
                               f"(sc + {8 * len(scalars)});")
        expr = entry.format(*names, T=CTYPE[n.dtype], f=_LIBM.get(n.dtype, ""),
                            t=_TAG.get(n.dtype, ""))
        body.append(f"const {CTYPE[n.dtype]} r{j} = ({CTYPE[n.dtype]})({expr});")
    outs = [(o, j, CTYPE[block.nodes[j].dtype]) for o, j in enumerate(block.outputs)]
    ct = [CTYPE[d] for d in leaf_dtypes]
    off = "for (int u = 0; u < NT; u++) "
    lines = [
        PRELUDE, f"#define NT {nt}",
        "void fused(i64 start, i64 stop, int rank, const i64 *shape, const i64 *strides,",
        "           void *const *ptrs, const char *sc) {",
        *(f"  const {c} *in{u} = (const {c} *)ptrs[{u}];" for u, c in enumerate(ct)),
        *(f"  {c} *out{o} = ({c} *)ptrs[{nt + o}];" for o, _, c in outs),
        *("  " + s for s in scalars),
        f"  i64 idx[{MAX_RANK}], off[NT + 1], rem = start;",
        f"  {off}off[u] = 0;",
        "  for (int d = rank - 1; d >= 0; d--) {",  # start's multi-index and offsets
        "    idx[d] = rem % shape[d];",
        "    rem /= shape[d];",
        f"    {off}off[u] += idx[d] * strides[u * rank + d];",
        "  }",
        "  const i64 n = shape[rank - 1];",
        *(f"  const i64 st{u} = strides[{u} * rank + rank - 1];"
          for u, w in enumerate(walks) if w == "s"),
        "  for (i64 i = start; i < stop;) {",  # a run along the innermost dim at a time
        "    i64 len = n - idx[rank - 1];",
        "    if (len > stop - i) len = stop - i;",
        *(f"    const {c} *p{u} = in{u} + off[{u}];" for u, c in enumerate(ct) if walks[u] != "b"),
        *(f"    const {c} b{u} = in{u}[off[{u}]];" for u, c in enumerate(ct) if walks[u] == "b"),
        *(f"    {c} *o{o} = out{o} + i;" for o, _, c in outs),
        "#pragma omp simd",
        "    for (i64 k = 0; k < len; k++) {",
        *(f"      const {c} v{u} = {_WALKS[walks[u]].format(u=u)};" for u, c in enumerate(ct)),
        *("      " + b for b in body),
        *(f"      o{o}[k] = r{j};" for o, j, _ in outs),
        "    }",
        "    i += len;",
        "    if (i >= stop) break;",
        # the next row: back to column 0, then carry through the outer dims
        f"    {off}off[u] -= idx[rank - 1] * strides[u * rank + rank - 1];",
        "    idx[rank - 1] = 0;",
        "    for (int d = rank - 2; d >= 0; d--) {",
        f"      {off}off[u] += strides[u * rank + d];",
        "      if (++idx[d] < shape[d]) break;",
        f"      {off}off[u] -= shape[d] * strides[u * rank + d];",
        "      idx[d] = 0;",
        "    }",
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n"


# -ffp-contract=off: the NumPy path's roundings (no fused multiply-adds); -fwrapv: integers
# wrap as NumPy's do; -fno-math-errno: sqrt is one instruction; -fno-trapping-math: selects
# (clamps, NaN rules) vectorize as blends (values unchanged). Linked with the C library.
_BASE = tuple(f for f in FLAGS if f not in ("-nostdlib", "-fno-builtin", "-ffp-contract=fast"))
_BASE += ("-ffp-contract=off", "-fwrapv", "-fno-math-errno", "-fno-trapping-math")
FLAG_SETS = (_BASE + SIMD + GCC_ONLY + TUNE, _BASE + SIMD + TUNE, _BASE + SIMD, _BASE)
LIBS = ("-lm",)


def _layout(shape, arrays):
    """(dims, strides per leaf in elements) of the block's shape with its dims merged where
    every leaf allows and size-1 dims dropped; None if a stride is not whole elements."""
    if all(x.shape == shape and x.flags.c_contiguous for x in arrays):
        return [math.prod(shape)], [[1] for _ in arrays]  # (the common case, at once)
    per = []
    for x in arrays:
        if x.shape != shape:
            x = np.broadcast_to(x, shape)
        if any(s % x.itemsize for s in x.strides):
            return None
        per.append([s // x.itemsize for s in x.strides])
    dims, strides = [], [[] for _ in arrays]
    for d, size in enumerate(shape):
        if size == 1:
            continue
        if dims and all(st[-1] == s[d] * size for st, s in zip(strides, per)):
            dims[-1] *= size
            for st, s in zip(strides, per):
                st[-1] = s[d]
        else:
            dims.append(size)
            for st, s in zip(strides, per):
                st.append(s[d])
    if not dims:
        return [1], [[0] for _ in arrays]
    return dims, strides


def _scalar(value, dtype):
    """The 8-byte argument holding `value` in `dtype`, or None where NumPy would not read it
    as exactly that (a float for an integer, an int out of range, 2 for a bool)."""
    if not isinstance(value, (bool, int, float, np.number, np.bool_)):
        return None
    if dtype in FLOATS:
        try:
            return np.array(value, dtype).tobytes().ljust(8, b"\0")
        except (OverflowError, ValueError):
            return None
    if isinstance(value, (float, np.floating)):
        return None
    lo, hi = (0, 1) if dtype == "bool" else (np.iinfo(dtype).min, np.iinfo(dtype).max)
    if not lo <= int(value) <= hi:
        return None
    return np.array(int(value), dtype).tobytes().ljust(8, b"\0")


_P, _I64 = ctypes.c_void_p, ctypes.c_longlong
_lock = threading.Lock()
# signature -> [its loaded function (None: not yet, False: never), elements run, the dtype of
# each of its scalars in order]
_kernels = {}
counters = {"compiled": 0, "loaded": 0, "runs": 0}  # (tests and benchmarks read these)


def _state(signature, block, leaf_dtypes):
    state = _kernels.get(signature)
    if state is None:
        typed = _typed(block, leaf_dtypes)
        scalar_dtypes = [] if typed is None else [
            dt for n, ins in zip(block.nodes, typed) for i, dt in zip(n.inputs, ins)
            if type(i) is not tuple]
        state = _kernels[signature] = [None if typed else False, 0, scalar_dtypes]
    return state


def _function(state, block, leaf_dtypes, walks, size):
    """The kernel of a signature's `state`: loaded (compiled first where due), or None (not
    yet due, no C form, or its compiler failed)."""
    if state[0] is not None:
        return state[0] or None
    state[1] += size
    with _lock:
        if state[0] is not None:
            return state[0] or None
        text = source(block, leaf_dtypes, walks)
        if text is None:
            state[0] = False
            return None
        try:
            path = compile_library(text, "fused", FLAG_SETS, libs=LIBS, build=False)
            if path is None:
                if state[1] < COMPILE_AT:
                    return None
                path = compile_library(text, "fused", FLAG_SETS, libs=LIBS)
                counters["compiled"] += 1
                fusion.compiled()
            fn = ctypes.CDLL(str(path)).fused
        except (OSError, AttributeError) as error:
            state[0] = False
            warnings.warn(f"ember: a fused kernel did not compile, NumPy runs its blocks "
                          f"({error})", RuntimeWarning, stacklevel=5)
            return None
        fn.argtypes, fn.restype = (_I64, _I64, ctypes.c_int, _P, _P, _P, _P), None
        counters["loaded"] += 1
        state[0] = fn
        return fn


def fuse(block):
    """The block's outputs computed by its generated kernel, or None (NumPy's path runs)."""
    shape, leaves = tuple(block.shape), block.leaves
    size = math.prod(shape)
    if size == 0 or any(type(x) is not np.ndarray for x in leaves):
        return None
    layout = _layout(shape, leaves)
    if layout is None or len(layout[0]) > MAX_RANK:
        return None
    dims, strides = layout
    walks = tuple("c" if st[-1] == 1 else "b" if st[-1] == 0 else "s" for st in strides)
    try:
        signature = (block.key(), tuple(x.dtype for x in leaves), walks)
        state = _kernels.get(signature)
    except TypeError:  # an unhashable attribute: no kernel for it
        return None
    if state is None:
        state = _state(signature, block, tuple(x.dtype.name for x in leaves))
    if state[0] is False:
        return None
    values = [i for n in block.nodes for i in n.inputs if type(i) is not tuple]
    scalars = [_scalar(v, dt) for v, dt in zip(values, state[2])]
    if None in scalars:
        return None
    fn = state[0] or _function(state, block, tuple(x.dtype.name for x in leaves), walks, size)
    if fn is None:
        return None
    outs = [np.empty(shape, block.nodes[j].dtype) for j in block.outputs]
    rank = len(dims)
    shape_arg = np.array(dims, np.int64)
    stride_arg = np.array([s for st in strides for s in st] or [0], np.int64)
    ptrs = (ctypes.c_void_p * (len(leaves) + len(outs)))(
        *[_at(x) for x in leaves], *[_at(o) for o in outs])
    sc = b"".join(scalars) or b"\0" * 8
    args = (rank, _at(shape_arg), _at(stride_arg), ptrs, sc)
    chunks = -(-size // 64)  # parts start on 64 elements: whole cache lines of float32
    parts = min(_threads(), max(1, size // MIN_PARALLEL))
    if parts == 1:
        fn(0, size, *args)
    else:
        _parallel("fused", (ctypes.cast(fn, ctypes.c_void_p).value, size, rank,
                            _at(shape_arg), _at(stride_arg),
                            ctypes.addressof(ptrs), ctypes.cast(sc, ctypes.c_void_p).value),
                  chunks, parts)
    counters["runs"] += 1
    return outs
