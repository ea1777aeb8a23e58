"""WGSL sources: hand-written kernels from shaders/*.wgsl, elementwise kernels generated from
the op table's expressions, and the per-device cache of compiled pipelines.

Shaders are read from `ember/shaders` inside the wheel, or from the repository's top-level
`shaders/` in an editable install. A line `//! include NAME.wgsl` pulls in another file once;
lines between `//! unroll NAME COUNT` and `//! end unroll` are repeated COUNT times with `#NAME`
replaced by 0, 1, ... (WGSL has no unroll hint, and a driver that leaves a hot loop rolled keeps
its index arithmetic and bounds clamps inside it); `${FIELD}` marks a field the host fills
(string.Template). Kernels are keyed by what changes
their code (op, dtypes, where the scalars are), never by shapes: shapes, strides and scalars
travel in `info`, so a model compiles a handful of kernels once.
"""

import itertools
import re
import string
from pathlib import Path

import numpy as np

from ... import fusion
from ...ops import COMPARE, numerics
from .layout import STORAGE, VALUE


def _shader_dir():
    here = Path(__file__).resolve()
    for candidate in (here.parents[2] / "shaders", here.parents[4] / "shaders"):
        if (candidate / "views.wgsl").is_file():
            return candidate
    raise FileNotFoundError("ember's WGSL shaders were not found (neither ember/shaders in the "
                            f"package nor shaders/ in the repository, from {here})")


SHADERS = _shader_dir()
_SOURCES = {}
_INCLUDE = re.compile(r"^//! include (\S+)\s*$", re.M)
_UNROLL = re.compile(r"^[ \t]*//! unroll (\w+) (\d+)[ \t]*\n(.*?)^[ \t]*//! end unroll[ \t]*\n",
                     re.M | re.S)


def _unroll(text):
    return _UNROLL.sub(lambda m: "".join(
        m.group(3).replace("#" + m.group(1), str(i)) for i in range(int(m.group(2)))), text)


def _f32(c):
    return repr(float(np.float32(c)))


def _horner(var, coeffs):
    expr = _f32(coeffs[-1])
    for c in coeffs[-2::-1]:
        expr = f"({expr} * {var} + {_f32(c)})"
    return expr


def _erf_body():
    """op_erf's body from the float32 coefficients of ember/ops/numerics.py (public there for
    this reason), so that the reference and the kernel compute the same function."""
    return ("let xc = clamp(x, -4.0, 4.0);\n    let t = xc * xc * 0.0625;\n"
            f"    return clamp(xc * ({_horner('t', numerics.ERF_F32_P)}) / "
            f"({_horner('t', numerics.ERF_F32_Q)}), -1.0, 1.0);")


def source(name, extra_dirs=()):
    """A shader file's text with its includes expanded (each file once)."""
    key = (name, tuple(extra_dirs))
    text = _SOURCES.get(key)
    if text is None:
        seen = set()

        def expand(n):
            if n in seen:
                return ""
            seen.add(n)
            for d in (*extra_dirs, SHADERS):
                path = Path(d) / n
                if path.is_file():
                    body = path.read_text()
                    break
            else:
                raise FileNotFoundError(f"shader {n} not found in {[*extra_dirs, SHADERS]}")
            if n == "lib.wgsl":
                body = string.Template(body).substitute(ERF=_erf_body())
            return _INCLUDE.sub(lambda m: expand(m.group(1)), _unroll(body))

        text = _SOURCES[key] = expand(name)
    return text


def render(name, **fields):
    return string.Template(source(name)).substitute(fields)


class Kernel:
    """A compiled pipeline and what its dispatches bind."""

    __slots__ = ("name", "pipeline", "signature", "source")

    def __init__(self, name, pipeline, signature, source):
        self.name, self.pipeline, self.signature, self.source = name, pipeline, signature, source

    def __repr__(self):
        return f"Kernel({self.name}, {self.signature})"


def compile_kernel(device, key, name, build):
    """The kernel cached under `key`, built by `build() -> (source, entry, signature)`."""
    kernel = device.kernels.get(key)
    if kernel is None:
        with device.lock:
            kernel = device.kernels.get(key)
            if kernel is None:
                src, entry, signature = build()
                pipeline = device.bridge.pipeline(src, entry, signature)
                kernel = device.kernels[key] = Kernel(name, pipeline, signature, src)
                device.counters["pipelines"] += 1
                fusion.compiled()
    return kernel


# ---- generated elementwise kernels ----------------------------------------------------------
_PROBES = {
    "float32": (0.0, 1.0, -2.5, 0.5, np.inf, -np.inf, np.nan),
    "int32": (0, 1, -3, 2),
    "bool": (False, True),
}


def _same(results):
    first = results[0]
    for r in results[1:]:
        if type(r) is not type(first):
            return False
        if isinstance(r, float) and np.isnan(r) and np.isnan(first):
            continue
        if r != first or (isinstance(r, float) and np.signbit(r) != np.signbit(first)):
            return False
    return True


def nan_rules(op, dtypes, attrs):
    """For each float32 operand: the result the NumPy reference gives whenever that operand is
    NaN, if it is always the same (maximum -> NaN, ne -> true, cast to bool -> true), else None.
    WGSL may assume finite math, so the kernel applies these rules itself."""
    rules = []
    for k, dt in enumerate(dtypes):
        if dt != "float32":
            rules.append(None)
            continue
        others = [_PROBES[d] for j, d in enumerate(dtypes) if j != k]
        results = []
        try:
            with np.errstate(all="ignore"):
                for combo in itertools.product(*others):
                    args = list(combo)
                    args.insert(k, np.nan)
                    arrays = [np.array(a, dtype=np.bool_ if d == "bool" else d)
                              for a, d in zip(args, dtypes)]
                    results.append(np.asarray(op.np(*arrays, **attrs)).item())
        except Exception:  # a reference that refuses NaN: no rule
            rules.append(None)
            continue
        rules.append(results[0] if results and _same(results) else None)
    return rules


def _literal(value, dtype):
    if dtype == "bool":
        return "true" if value else "false"
    if dtype == "int32":
        return f"bitcast<i32>({int(value) & 0xFFFFFFFF}u)"
    if np.isnan(value):
        return "f32_nan()"
    if np.isinf(value):
        return "f32_inf()" if value > 0 else "-f32_inf()"
    return _f32(value)


# WGSL builtins whose accuracy or domain WGSL leaves to the implementation (sin and cos are
# only bounded inside [-pi, pi]: NVIDIA's sin(100) is off by 1e-5 relative; SwiftShader's
# log(-2) is log(2) and its tanh(inf) NaN): an op's expression calls these functions of
# lib.wgsl instead
PRECISE = {"sin": "precise_sin", "cos": "precise_cos", "log": "precise_log",
           "sqrt": "precise_sqrt", "tanh": "precise_tanh"}
_BUILTIN_CALL = re.compile(r"\b(" + "|".join(PRECISE) + r")\(")


def _flat4_source(op, kinds, out_dtype, alias, body, store):
    ints_for_bools = op.kind == COMPARE
    bindings, quads, t, s = [], [], 0, 0
    lanes = []
    names = []  # per operand: its quad variable, or its scalar expression
    for k, (dt, is_scalar) in enumerate(kinds):
        if is_scalar:
            raw = f"info[sb + {s}]"
            s += 1
            names.append(("scalar", {"float32": f"bitcast<f32>({raw})", "int32": raw,
                                     "bool": raw if ints_for_bools else f"({raw} != 0)"}[dt]))
            continue
        src = "out" if k == alias else f"in{t}"
        if k != alias:
            bindings.append(f"@group(1) @binding({len(bindings) + 1}) var<storage, read> "
                            f"in{t}: array<vec4<{STORAGE[dt]}>>;")
        quads.append(f"let q{k} = {src}[info[{5 + 2 * t}] / 4 + i];")
        names.append((dt, f"q{k}"))
        t += 1
    for lane in "xyzw":
        lets = []
        for k, (kind, name) in enumerate(names):
            if kind == "scalar":
                lets.append(f"let v{k} = {name};")
            elif kind == "bool":
                lets.append(f"let v{k} = " + (f"i32({name}.{lane});" if ints_for_bools
                                              else f"({name}.{lane} != 0u);"))
            else:
                lets.append(f"let v{k} = {name}.{lane};")
        lanes.append("{\n        " + "\n        ".join(lets + body + [f"res.{lane} = {store};"])
                     + "\n    }")
    src = render("elementwise4.wgsl", OUT=STORAGE[out_dtype], BINDINGS="\n".join(bindings),
                 NT=t, QUADS="\n    ".join(quads), LANES="\n    ".join(lanes))
    return src, "flat4", ("w",) + ("r",) * len(bindings)


def elementwise_source(op, kinds, out_dtype, alias, attrs, entry):
    """WGSL for `op` over operands `kinds` (a tuple of (dtype, is_scalar)); `alias`: the
    operand read from `out` itself (its buffer was donated), or -1; `entry`: "flat" (every
    operand dense: `info` as view_words gives it for rank 1) or "main"."""
    bindings, loads, flat_loads, t, s = [], [], [], 0, 0
    ints_for_bools = op.kind == COMPARE  # WGSL orders no bools: compare them as 0/1
    for k, (dt, is_scalar) in enumerate(kinds):
        if is_scalar:
            raw = f"info[sb + {s}]"
            s += 1
            if dt == "float32":
                value = f"bitcast<f32>({raw})"
            elif dt == "bool":
                value = raw if ints_for_bools else f"({raw} != 0)"
            else:
                value = raw
        else:
            name = "out" if k == alias else f"in{t}"
            if k != alias:
                bindings.append(f"@group(1) @binding({len(bindings) + 1}) var<storage, read> "
                                f"in{t}: array<{STORAGE[dt]}>;")
            value = f"{name}[at{t}]"
            flat = f"{name}[info[{5 + 2 * t}] + i]"
            t += 1
            if dt == "bool":
                value, flat = ((f"i32({v})" if ints_for_bools else f"({v} != 0u)")
                               for v in (value, flat))
            flat_loads.append(f"let v{k} = {flat};")
            loads.append(f"let v{k} = {value};")
            continue
        loads.append(f"let v{k} = {value};")
        flat_loads.append(f"let v{k} = {value};")
    # attrs too: a static value of the op (batch_norm's eps) is a constant of its kernel;
    # {dtype} is always the result's WGSL type (cast's own dtype attr names the same)
    expr = op.wgsl.format(*(f"v{k}" for k in range(len(kinds))),
                          **{**attrs, "dtype": VALUE[out_dtype]})
    expr = _BUILTIN_CALL.sub(lambda m: PRECISE[m.group(1)] + "(", expr)
    body = [f"var r = {expr};"]
    rules = nan_rules(op, [dt for dt, _ in kinds], attrs)
    for k, rule in enumerate(rules):
        if rule is not None:
            body.append(f"if (is_nan(v{k})) {{ r = {_literal(rule, out_dtype)}; }}")
    store = "select(0u, 1u, r)" if out_dtype == "bool" else "r"
    if entry == "flat4":
        return _flat4_source(op, kinds, out_dtype, alias, body, store)
    # the strided entry: i's coordinates found once (one division per dim), every operand's
    # element from them (on lavapipe 2.4x faster than a division per operand and dim)
    walk = [f"var at{u} = info[4 + rank + {u} * (rank + 1)];" for u in range(t)]
    walk += ["var rem = i;", "for (var d = rank - 1; d >= 0; d--) {",
             "    let size = info[4 + d];", "    let q = rem / size;",
             "    let c = rem - q * size;", "    rem = q;"]
    walk += [f"    at{u} += c * info[5 + rank + {u} * (rank + 1) + d];" for u in range(t)]
    walk += ["}"]
    src = render("elementwise.wgsl", OUT=STORAGE[out_dtype], BINDINGS="\n".join(bindings),
                 NT=t, LOADS="\n    ".join(walk + loads),
                 FLAT_LOADS="\n    ".join(flat_loads), BODY="\n    ".join(body), STORE=store)
    signature = ("w",) + ("r",) * len(bindings)
    return src, entry, signature


# ---- fused kernels: a chain of elementwise ops (ember.fusion) -------------------------------
def _scalar_value(raw, dt):
    return {"float32": f"bitcast<f32>({raw})", "int32": raw, "bool": f"({raw} != 0)"}[dt]


def _chain_body(block, leaf_dtypes, values=None, nan_scalars=None):
    """(the scalars' `let`s, each node's statements, each node's dtype) of a fusion Block: node
    j's result is `rJ`, computed from `vT` (leaf T's element) and `sJ` (scalar J, from info);
    `values` maps a node that is not elementwise (a reduction, a producer) to its value;
    `nan_scalars`, where given, the scalars known to be NaN (the NaN rules of the others are
    left out: the host knows them not to be NaN)."""
    scalars, body, dtypes = [], [], []
    for j, n in enumerate(block.nodes):
        if values and j in values:
            body.append([f"let r{j} = {values[j]};"])
            dtypes.append(n.dtype)
            continue
        names, kinds = [], []
        for i in n.inputs:
            if type(i) is tuple:
                names.append(f"v{i[1]}" if i[0] == "leaf" else f"r{i[1]}")
                kinds.append(leaf_dtypes[i[1]] if i[0] == "leaf" else dtypes[i[1]])
            else:
                names.append(None)
                kinds.append(None)
        typed = next(k for k in kinds if k is not None)  # a scalar takes its tensors' dtype
        for k, name in enumerate(names):
            if name is None:
                s = len(scalars)
                names[k], kinds[k] = f"s{s}", typed
                scalars.append(f"let s{s} = {_scalar_value(f'info[sb + {s}]', typed)};")
        # WGSL orders no bools: a comparison reads them as 0/1
        operands = [f"i32({m})" if k == "bool" and n.op.kind == COMPARE else m
                    for m, k in zip(names, kinds)]
        expr = n.op.wgsl.format(*operands, **{**n.attrs, "dtype": VALUE[n.dtype]})
        stmts = [f"var r{j} = {_BUILTIN_CALL.sub(lambda m: PRECISE[m.group(1)] + '(', expr)};"]
        for k, rule in enumerate(nan_rules(n.op, kinds, n.attrs)):
            if rule is not None and (nan_scalars is None or not names[k].startswith("s")
                                     or int(names[k][1:]) in nan_scalars):
                stmts.append(f"if (is_nan({names[k]})) {{ r{j} = {_literal(rule, n.dtype)}; }}")
        body.append(stmts)
        dtypes.append(n.dtype)
    return scalars, body, dtypes


def _needs(block, roots, stop=()):
    """The nodes (in order) and leaves that computing `roots` reads, through nodes in `stop`
    (reductions already done: values) not."""
    nodes, leaves, todo = set(), set(), list(roots)
    while todo:
        j = todo.pop()
        if j in nodes:
            continue
        nodes.add(j)
        if j in stop:
            continue
        for i in block.nodes[j].inputs:
            if type(i) is tuple:
                (leaves.add(i[1]) if i[0] == "leaf" else todo.append(i[1]))
    return sorted(nodes), sorted(leaves)


# vec4s a fused flat4 invocation computes: on the H200 gelu_custom over 256M float32 ran 0.756 ms
# with 1, 0.724 with 2, 0.649 with 4 (`bench/fusion.py --gpu --only gelu --quads N`); later,
# with even grids and a submission a call, 0.609 with 4 and 0.610 with 8
FUSED_QUADS = 4


def fused_source(block, leaf_dtypes, entry, nan_scalars=None):
    """WGSL for a fusion Block (ember.fusion): each node's expression in registers, node by
    node with its own NaN rules, and only block.outputs stored. `leaf_dtypes`: the dtypes of
    block.leaves; `entry`: "flat4" or "flat" (every leaf dense in the block's shape; flat4:
    also 16-byte aligned and a multiple of 4 elements, a vec4 per invocation) or "main"."""
    nt, vec = len(leaf_dtypes), entry == "flat4"
    wrap = (lambda t: f"vec4<{t}>") if vec else (lambda t: t)
    outputs = [f"@group(1) @binding({o}) var<storage, read_write> out{o}: "
               f"array<{wrap(STORAGE[block.nodes[j].dtype])}>;"
               for o, j in enumerate(block.outputs)]
    bindings = [f"@group(1) @binding({len(outputs) + t}) var<storage, read> in{t}: "
                f"array<{wrap(STORAGE[dt])}>;" for t, dt in enumerate(leaf_dtypes)]
    scalars, body, dtypes = _chain_body(block, leaf_dtypes, nan_scalars=nan_scalars)
    body = [line for stmts in body for line in stmts]

    def load(t, value):
        return f"let v{t} = {f'({value} != 0u)' if leaf_dtypes[t] == 'bool' else value};"

    def stored(j):
        return f"select(0u, 1u, r{j})" if dtypes[j] == "bool" else f"r{j}"

    fields = dict(OUTPUTS="\n".join(outputs), BINDINGS="\n".join(bindings), NT=nt)
    if vec:
        # FUSED_QUADS vec4s an invocation, 256 apart (neighbours read neighbouring vec4s): all
        # loads first (clamped to the last vec4: no branch), then the chain and the stores
        per = FUSED_QUADS
        quads = [f"let o{t} = info[{5 + 2 * t}] / 4;" for t in range(nt)]
        lanes = []
        for u in range(per):
            quads.append(f"let i{u} = base + {256 * u};")
            quads.append(f"let j{u} = min(i{u}, n4 - 1);")
            quads += [f"let q{t}_{u} = in{t}[o{t} + j{u}];" for t in range(nt)]
        body_vec = [f"var res{o}: vec4<{STORAGE[dtypes[j]]}>;"
                    for o, j in enumerate(block.outputs)]
        for u in range(per):
            lanes.append(f"if (i{u} < n4) {{")
            lanes += ["    " + line for line in body_vec]
            for lane in "xyzw":
                lanes += ["    {"] + ["        " + line for line in (
                    [load(t, f"q{t}_{u}.{lane}") for t in range(nt)] + body
                    + [f"res{o}.{lane} = {stored(j)};" for o, j in enumerate(block.outputs)])]
                lanes += ["    }"]
            lanes += [f"    out{o}[i{u}] = res{o};" for o in range(len(outputs))] + ["}"]
        src = render("fused4.wgsl", **fields, PER=per, QUADS="\n    ".join(quads + scalars),
                     LANES="\n    ".join(lanes))
        return src, entry, ("w",) * len(outputs) + ("r",) * nt
    stores = [f"out{o}[i] = {stored(j)};" for o, j in enumerate(block.outputs)]
    walk = [f"var at{u} = info[4 + rank + {u} * (rank + 1)];" for u in range(nt)]
    if nt:
        walk += ["var rem = i;", "for (var d = rank - 1; d >= 0; d--) {",
                 "    let size = info[4 + d];", "    let q = rem / size;",
                 "    let c = rem - q * size;", "    rem = q;"]
        walk += [f"    at{u} += c * info[5 + rank + {u} * (rank + 1) + d];" for u in range(nt)]
        walk += ["}"]
    loads = [load(t, f"in{t}[at{t}]") for t in range(nt)] + scalars
    flat_loads = [load(t, f"in{t}[info[{5 + 2 * t}] + i]") for t in range(nt)] + scalars
    src = render("fused.wgsl", **fields, LOADS="\n    ".join(walk + loads),
                 FLAT_LOADS="\n    ".join(flat_loads), BODY="\n    ".join(body),
                 STORES="\n    ".join(stores))
    return src, entry, ("w",) * len(outputs) + ("r",) * nt


def fused_reduce_source(block, leaf_dtypes, fields):
    """WGSL for a reduction of a fusion Block's result (fused_reduce.wgsl): `fields` are
    reduce.wgsl's for the reduction (T, OUT, NAN, CMP, INIT, COMBINE, RESULT)."""
    nt = len(leaf_dtypes)
    scalars, body, dtypes = _chain_body(block, leaf_dtypes)
    body = [line for stmts in body for line in stmts]
    bindings = [f"@group(1) @binding({1 + t}) var<storage, read> in{t}: "
                f"array<{STORAGE[dt]}>;" for t, dt in enumerate(leaf_dtypes)]

    def leaf(t):  # where operand t's words start in info
        return f"7 + rk + rr + {t} * (1 + rk + rr)"
    kept = [f"kb[{t}] = info[{leaf(t)}];" for t in range(nt)]
    kept += ["var rem = o;", "for (var d = rk - 1; d >= 0; d--) {",
             "    let size = info[7 + d];", "    let q = rem / size;",
             "    let c = rem - q * size;", "    rem = q;"]
    kept += [f"    kb[{t}] += c * info[{leaf(t)} + 1 + d];" for t in range(nt)] + ["}"]
    element = [f"var at{t} = kb[{t}];" for t in range(nt)]
    element += ["var rem = r;", "for (var d = rr - 1; d >= 0; d--) {",
                "    let size = info[7 + rk + d];", "    let q = rem / size;",
                "    let c = rem - q * size;", "    rem = q;"]
    element += [f"    at{t} += c * info[{leaf(t)} + 1 + rk + d];" for t in range(nt)] + ["}"]
    element += [f"let v{t} = " + (f"(in{t}[at{t}] != 0u);" if dt == "bool" else f"in{t}[at{t}];")
                for t, dt in enumerate(leaf_dtypes)]
    element += scalars + body + [f"return Acc(r{len(block.nodes) - 1}, r);"]
    return string.Template(source("fused_reduce.wgsl")).substitute(
        fields, BINDINGS="\n".join(bindings), NT=nt, KEPT="\n    ".join(kept),
        ELEMENT="\n    ".join(element))


def _load(t, dt, index):
    return f"let v{t} = " + (f"(in{t}[{index}] != 0u);" if dt == "bool" else f"in{t}[{index}];")


# the reductions a row kernel runs: (identity, combine(a, b)) by kernel and dtype
_ROW_REDUCERS = {
    ("sum", "f32"): ("0.0", "a + b"), ("sum", "i32"): ("0", "a + b"),
    ("max", "f32"): ("-f32_inf()", "select(max(a, b), f32_nan(), is_nan(a) || is_nan(b))"),
    ("min", "f32"): ("f32_inf()", "select(min(a, b), f32_nan(), is_nan(a) || is_nan(b))"),
    ("max", "i32"): ("i32(-2147483647 - 1)", "max(a, b)"), ("min", "i32"): ("2147483647",
                                                                           "min(a, b)"),
}


def _row_pass(block, j, p, dtypes, leaf_dtypes, done, shared):
    """Reduction pass p of a row kernel, for its reduction node j: (the nodes and leaves it
    computes, the value it reduces, the reduction's identity); its workgroup array and combine
    function go into `shared`."""
    src = block.nodes[j].inputs[0]
    t = STORAGE[dtypes[src[1]] if src[0] == "node" else leaf_dtypes[src[1]]]
    init, combine = _ROW_REDUCERS[(block.nodes[j].op.name, t)]
    nodes, leaves = _needs(block, [src[1]] if src[0] == "node" else [], stop=done)
    if src[0] == "leaf":
        leaves = sorted({*leaves, src[1]})
    shared.append(f"var<workgroup> part{p}: array<{t}, 256>;")
    shared.append(f"fn combine{p}(a: {t}, b: {t}) -> {t} {{\n    return {combine};\n}}")
    return nodes, leaves, f"r{src[1]}" if src[0] == "node" else f"v{src[1]}", init


def _row_tree(p, start, me, first):
    """The end of reduction pass p: each invocation's acc into part{p}, combined in a tree from
    stride `start` by the invocations whose `me` is below it, red{p} read at `first`."""
    return [f"    part{p}[lid] = acc;", "}", "workgroupBarrier();",
            f"for (var s = {start}; s > 0u; s >>= 1u) {{", f"    if ({me} < s) {{",
            f"        part{p}[lid] = combine{p}(part{p}[lid], part{p}[lid + s]);",
            "    }", "    workgroupBarrier();", "}", f"let red{p} = part{p}[{first}];"]


def fused_rows_source(block, leaf_dtypes, special, row_outputs, invariant):
    """WGSL for a fusion Block with reductions (fused_rows.wgsl): a workgroup per row of the
    reduced dims runs one pass over the row per reduction in `special` (its input computed
    from the leaves, in registers, as in fused_reduce), then a last pass that computes and
    writes block.outputs (those in `row_outputs`, of the reductions' shape, once a row).
    `invariant`: the leaves and nodes constant along a row (layer_norm's 1 / sqrt(var + eps)),
    computed once before a pass, not per element."""
    nt, no = len(leaf_dtypes), len(block.outputs)
    values = {j: f"red{p}" for p, j in enumerate(special)}
    scalars, body, dtypes = _chain_body(block, leaf_dtypes, values)
    outputs = [f"@group(1) @binding({o}) var<storage, read_write> out{o}: "
               f"array<{STORAGE[dtypes[j]]}>;" for o, j in enumerate(block.outputs)]
    bindings = [f"@group(1) @binding({no + t}) var<storage, read> in{t}: "
                f"array<{STORAGE[dt]}>;" for t, dt in enumerate(leaf_dtypes)]
    views = range(nt + no)  # the leaves, then the outputs
    # each view's offset at this row (kb), where its reduced strides start in info (rs), and
    # its one reduced stride when the reduced dims coalesce to one (rst)
    kept = [f"let rs{v} = 7 + rk + rr + {v} * (1 + rk + rr) + 1 + rk;" for v in views]
    kept += [f"let rst{v} = info[rs{v}];" for v in views]
    kept += [f"var kb{v} = info[rs{v} - 1 - rk];" for v in views]
    kept += ["var rem = o;", "for (var d = rk - 1; d >= 0; d--) {",
             "    let size = info[7 + d];", "    let q = rem / size;",
             "    let c = rem - q * size;", "    rem = q;"]
    kept += [f"    kb{v} += c * info[rs{v} - rk + d];" for v in views] + ["}"]

    def element(vs, inner):
        """The loop over this thread's elements of the row: views `vs` at `atV`, then inner."""
        walk = [f"var at{v} = kb{v};" for v in vs]
        walk += ["if (rr == 1) {"] + [f"    at{v} += r * rst{v};" for v in vs]
        walk += ["} else {", "    var rem = r;", "    for (var d = rr - 1; d >= 0; d--) {",
                 "        let size = info[7 + rk + d];", "        let q = rem / size;",
                 "        let c = rem - q * size;", "        rem = q;"]
        walk += [f"        at{v} += c * info[rs{v} + d];" for v in vs] + ["    }", "}"]
        return (["for (var r = i32(lid); r < nr; r += 256) {"]
                + ["    " + line for line in walk + inner] + ["}"])

    hoisted, loaded = set(), set()

    def split(nodes, leaves):
        """(statements before the loop: the row's invariant nodes not computed yet, with their
        leaves; the loop's leaf loads and statements)."""
        pre = [k for k in nodes if (k in invariant or k in values) and k not in hoisted]
        pre_leaves = sorted({i[1] for k in pre if k not in values for i in block.nodes[k].inputs
                             if type(i) is tuple and i[0] == "leaf"} - loaded)
        hoisted.update(pre)
        loaded.update(pre_leaves)
        before = [_load(k, leaf_dtypes[k], f"kb{k}") for k in pre_leaves]
        before += [line for k in pre for line in body[k]]
        inner = [_load(k, leaf_dtypes[k], f"at{k}") for k in leaves if k not in loaded]
        inner += [line for k in nodes if k not in hoisted for line in body[k]]
        return before, inner, [k for k in leaves if k not in loaded]

    passes, shared, done = [], [], set()
    for p, j in enumerate(special):
        nodes, leaves, value, init = _row_pass(block, j, p, dtypes, leaf_dtypes, done, shared)
        before, inner, walked = split(nodes, leaves)
        inner += [f"acc = combine{p}(acc, {value});"]
        passes += before + ["{", f"    var acc = {init};"]
        passes += ["    " + line for line in element(walked, inner)]
        passes += _row_tree(p, "128u", "lid", "0")
        done.add(j)
    nodes, leaves = _needs(block, block.outputs, stop=done)
    before, inner, walked = split(nodes, leaves)
    rows = []
    for o, j in enumerate(block.outputs):
        value = f"select(0u, 1u, r{j})" if dtypes[j] == "bool" else f"r{j}"
        (rows if o in row_outputs else inner).append(f"out{o}[at{nt + o}] = {value};")
    if rows:
        inner += ["if (r == 0) {"] + ["    " + line for line in rows] + ["}"]
    last = before + element(walked + [nt + o for o in range(no)], inner)
    return render("fused_rows.wgsl", OUTPUTS="\n".join(outputs), BINDINGS="\n".join(bindings),
                  NT=nt + no, SHARED="\n".join(shared), KEPT="\n    ".join(kept),
                  SCALARS="\n    ".join(scalars), PASSES="\n    ".join(passes + last))


def fused_rows4_source(block, leaf_dtypes, special, row_outputs, invariant, inv_leaves, per):
    """fused_rows_source's vec4 form (fused_rows4.wgsl): the leaves not in `inv_leaves` (those
    constant along a row, read once a row) are read as vec4s, `per` of them an invocation,
    once, and kept for every pass; or, with per 0, a loop over the row's vec4s in each pass
    (rows of any length, read again from the cache). Each pass runs the chain per lane."""
    nt, no = len(leaf_dtypes), len(block.outputs)
    values = {j: f"red{p}" for p, j in enumerate(special)}
    scalars, body, dtypes = _chain_body(block, leaf_dtypes, values)
    wide = [t not in inv_leaves for t in range(nt)] + [o not in row_outputs for o in range(no)]

    def array(v, dt):
        return f"array<vec4<{STORAGE[dt]}>>" if wide[v] else f"array<{STORAGE[dt]}>"
    outputs = [f"@group(1) @binding({o}) var<storage, read_write> out{o}: "
               f"{array(nt + o, dtypes[j])};" for o, j in enumerate(block.outputs)]
    bindings = [f"@group(1) @binding({no + t}) var<storage, read> in{t}: {array(t, dt)};"
                for t, dt in enumerate(leaf_dtypes)]
    kept = [f"let rs{v} = 7 + rk + rr + {v} * (1 + rk + rr) + 1 + rk;" for v in range(nt + no)]
    kept += [f"var kb{v} = info[rs{v} - 1 - rk];" for v in range(nt + no)]
    kept += ["var rem = o;", "for (var d = rk - 1; d >= 0; d--) {",
             "    let size = info[7 + d];", "    let q = rem / size;",
             "    let c = rem - q * size;", "    rem = q;"]
    kept += [f"    kb{v} += c * info[rs{v} - rk + d];" for v in range(nt + no)] + ["}"]
    chunks = [f"let b{v} = kb{v} / 4;" for v in range(nt + no) if wide[v]]
    chunks += [f"let j{k} = {k} * i32(tpr) + i32(loc);" for k in range(per)]
    hoisted, loaded = set(), set()

    def split(nodes, leaves, last=False):
        """(statements before the pass: the row's invariant nodes not computed yet and the
        leaves they or the pass read once a row, then the loads of the leaves kept from now
        on; the leaves read per lane; the statements per lane; the leaves the pass loads
        chunk by chunk and holds no longer: in the last pass, or in every pass with per 0)."""
        pre = [k for k in nodes if (k in invariant or k in values) and k not in hoisted]
        once = {i[1] for k in pre if k not in values for i in block.nodes[k].inputs
                if type(i) is tuple and i[0] == "leaf"} | {t for t in leaves if not wide[t]}
        once = sorted(once - loaded)
        fresh = [t for t in leaves if wide[t] and t not in loaded]
        hoisted.update(pre)
        loaded.update(once, fresh if per and not last else ())
        before = [_load(t, leaf_dtypes[t], f"kb{t}") for t in once]
        before += [line for k in pre for line in body[k]]
        for k in range(0 if last else per):
            before += [f"var q{t}_{k}: vec4<{STORAGE[leaf_dtypes[t]]}>;" for t in fresh]
            before += [f"if (j{k} < n4) {{"] + [f"    q{t}_{k} = in{t}[b{t} + j{k}];"
                                                 for t in fresh] + ["}"]
        inner = [line for k in nodes if k not in hoisted for line in body[k]]
        return before, [t for t in leaves if wide[t]], inner, fresh if last or not per else []

    def lanes(k, walked, inner, tail):
        """Chunk k's lanes: the leaves' lane values, `inner`, then tail(lane)."""
        out = []
        for lane in "xyzw":
            got = [f"let v{t} = " + (f"(q{t}_{k}.{lane} != 0u);" if leaf_dtypes[t] == "bool"
                                     else f"q{t}_{k}.{lane};") for t in walked]
            out += ["{"] + ["    " + line for line in got + inner + tail(lane)] + ["}"]
        return out

    def each_chunk(fresh, code):
        """code(k) (lines) in each chunk of the invocation's vec4s, with `fresh` loaded."""
        heads = ([(k, f"if (j{k} < n4) {{") for k in range(per)] if per else
                 [("j", "for (var jj = i32(loc); jj < n4; jj += i32(tpr)) {")])
        out = []
        for k, head in heads:
            at = f"j{k}" if per else "jj"
            out += [head] + [f"    let q{t}_{k} = in{t}[b{t} + {at}];" for t in fresh]
            out += ["    " + line for line in code(k, at)] + ["}"]
        return out

    passes, shared, done = [], [], set()
    for p, j in enumerate(special):
        nodes, leaves, value, init = _row_pass(block, j, p, dtypes, leaf_dtypes, done, shared)
        before, walked, inner, fresh = split(nodes, leaves)
        step = [f"acc = combine{p}(acc, {value});"]

        def reduced(k, at, walked=walked, inner=inner, step=step):
            return lanes(k, walked, inner, lambda lane: step)
        passes += before + ["{", f"    var acc = {init};"]
        passes += ["    " + line for line in each_chunk(fresh, reduced)]
        passes += _row_tree(p, "tpr / 2u", "loc", "lid - loc")
        done.add(j)
    nodes, leaves = _needs(block, block.outputs, stop=done)
    before, walked, inner, fresh = split(nodes, leaves, last=True)

    def stored(j):
        return f"select(0u, 1u, r{j})" if dtypes[j] == "bool" else f"r{j}"
    full = [o for o in range(no) if o not in row_outputs]

    def last(k, at):
        def tail(lane):
            lines = [f"res{o}.{lane} = {stored(block.outputs[o])};" for o in full]
            if row_outputs and lane == "x" and k in (0, "j"):  # the row's first element
                lines += [f"if ({at} == 0) {{"] + [
                    f"    out{o}[kb{nt + o}] = {stored(block.outputs[o])};"
                    for o in row_outputs] + ["}"]
            return lines
        code = [f"var res{o}: vec4<{STORAGE[dtypes[block.outputs[o]]]}>;" for o in full]
        return code + lanes(k, walked, inner, tail) + [f"out{o}[b{nt + o} + {at}] = res{o};"
                                                       for o in full]
    return render("fused_rows4.wgsl", OUTPUTS="\n".join(outputs), BINDINGS="\n".join(bindings),
                  NT=nt + no, SHARED="\n".join(shared), KEPT="\n    ".join(kept),
                  SCALARS="\n    ".join(scalars), CHUNKS="\n    ".join(chunks),
                  PASSES="\n    ".join(passes + before + each_chunk(fresh, last)))


def epilogue_source(block, leaf_dtypes, leaf_ids, producer, vec, t):
    """The ${EPILOGUE} of a matmul shader (matmul*.wgsl): `epilogue_begin(z)` and the store
    `store4(i, row, col, v)` (vec: C's vec4 i, row `row`, columns col..col+3) or `store1(i, row,
    col, v)` (C's element i). Without a block, C is stored as it is. With one,
    block.nodes[producer] is C and the rest of the chain runs on it element by element,
    reading the leaves `leaf_ids` (bound as in0, in1, ...; leaf_dtypes: every leaf's dtype) at
    (batch z, row, col); block.outputs are stored (the first in out, then out1, out2, ...)."""
    wide = f"vec4<{t}>" if vec else t
    store = "store4" if vec else "store1"
    head = f"fn {store}(i: i32, row: i32, col: i32, v: {wide}) {{\n"
    if block is None:
        return f"fn epilogue_begin(z: i32) {{}}\n\n{head}    out[i] = v;\n}}"
    nt, no = len(leaf_ids), len(block.outputs)
    decls = [f"@group(1) @binding({2 + o}) var<storage, read_write> out{o}: array<{wide}>;"
             for o in range(1, no)]
    decls += [f"@group(1) @binding({2 + no + u}) var<storage, read> in{u}: "
              f"array<{STORAGE[leaf_dtypes[k]]}>;" for u, k in enumerate(leaf_ids)]
    decls += [f"var<private> eb{u}: i32;" for u in range(nt)]  # leaf u's offset in batch z
    # leaf u's words in info: its offset, row stride, column stride, then its batch strides
    words = [f"let lw{u} = 12 + 3 * br + {u} * (3 + br);" for u in range(nt)]
    begin = ["let br = info[3];", *words, *(f"eb{u} = info[lw{u}];" for u in range(nt))]
    begin += ["var rem = z;", "for (var d = br - 1; d >= 0; d--) {",
              "    let size = info[12 + d];", "    let c = rem % size;", "    rem /= size;"]
    begin += [f"    eb{u} += c * info[lw{u} + 3 + d];" for u in range(nt)] + ["}"]
    scalars, body, _ = _chain_body(block, leaf_dtypes, {producer: "acc"})
    code = ["let br = info[3];", f"let sb = 12 + 3 * br + {nt} * (3 + br);", *scalars, *words]
    code += [f"var res{o}: {wide};" for o in range(no)]
    for lane, name in enumerate("xyzw" if vec else "x"):
        part = [f"let acc = v.{name};" if vec else "let acc = v;"]
        for u, k in enumerate(leaf_ids):
            at = f"eb{u} + row * info[lw{u} + 1] + (col + {lane}) * info[lw{u} + 2]"
            part.append(f"let v{k} = " + (f"(in{u}[{at}] != 0u);" if leaf_dtypes[k] == "bool"
                                          else f"in{u}[{at}];"))
        part += [line for stmts in body for line in stmts]
        part += [f"res{o}{f'.{name}' if vec else ''} = r{j};"
                 for o, j in enumerate(block.outputs)]
        code += ["{", *("    " + line for line in part), "}"]
    code += [f"out{o if o else ''}[i] = res{o};" for o in range(no)]
    return ("\n".join(decls) + "\n\nfn epilogue_begin(z: i32) {\n"
            + "".join(f"    {line}\n" for line in begin) + "}\n\n" + head
            + "".join(f"    {line}\n" for line in code) + "}")


def conv_store_source(block, leaf_dtypes, leaf_ids, producer, has_bias):
    """conv_gemm.wgsl's ${DECLS} and ${STORE}: `store(i, n, o, p, v)` writes conv2d's element
    i (image n, channel o, pixel p), its bias added. With a block, block.nodes[producer] is the
    conv and the rest of the chain runs on it element by element, reading the leaves
    `leaf_ids` (bound after the outputs as in0, in1, ...) through their strides in info (from
    word 21: offset, then N, C, H, W strides, a leaf after the other); block.outputs are
    stored (the first in out, then out1, out2, ...)."""
    decls = ["@group(1) @binding(3) var<storage, read> bias: array<f32>;"] if has_bias else []
    head = "fn store(i: i32, n: i32, o: i32, p: i32, v: f32) {\n"
    acc = "v + bias[info[18] + o]" if has_bias else "v"
    if block is None:
        return "\n".join(decls), f"{head}    out[i] = {acc};\n}}"
    first, nt, no = 3 + has_bias, len(leaf_ids), len(block.outputs)
    decls += [f"@group(1) @binding({first + o - 1}) var<storage, read_write> out{o}: array<f32>;"
              for o in range(1, no)]
    decls += [f"@group(1) @binding({first + no - 1 + u}) var<storage, read> in{u}: "
              f"array<{STORAGE[leaf_dtypes[k]]}>;" for u, k in enumerate(leaf_ids)]
    scalars, body, _ = _chain_body(block, leaf_dtypes, {producer: "acc"})
    code = [f"let acc = {acc};", "let oh = p / info[6];", "let ow = p - oh * info[6];",
            f"let sb = {21 + 5 * nt};", *scalars]
    for u, k in enumerate(leaf_ids):
        w = 21 + 5 * u
        at = (f"info[{w}] + n * info[{w + 1}] + o * info[{w + 2}] + oh * info[{w + 3}] "
              f"+ ow * info[{w + 4}]")
        code.append(f"let v{k} = " + (f"(in{u}[{at}] != 0u);" if leaf_dtypes[k] == "bool"
                                      else f"in{u}[{at}];"))
    code += [line for stmts in body for line in stmts]
    code += [f"out{o if o else ''}[i] = r{j};" for o, j in enumerate(block.outputs)]
    return "\n".join(decls), head + "".join(f"    {line}\n" for line in code) + "}"
