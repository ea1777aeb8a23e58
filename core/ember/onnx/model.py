"""An ONNX graph as an nn.Module: initializers as Params under their ONNX names, nodes run in
topological order through the op table (ops.py).

Values are Tensors on the module's backend, or NumPy arrays for constants: Constant nodes,
integer initializers, and whatever is computed from them alone (shape arithmetic such as
Shape -> Gather -> Concat -> Reshape). Nodes whose inputs are all constants at load time are
folded then; those that depend on an input's shape (dynamic batch dims) fold on the host at
each call, since a Tensor's shape is known without running anything. Nodes no output needs are
dropped. Float initializers are never folded: they are the trainable Params.
"""

from collections import namedtuple

import numpy as np

from ..backend import NdArray, default_backend
from ..nn.module import Module, Param
from ..tensor import Tensor
from . import proto
from .ops import OPS
from .proto import OnnxError

Unsupported = namedtuple("Unsupported", "domain op_type opset reason")
# implicit: the outer names a node's subgraphs (If, Loop, Scan) read; it runs after them
Node = namedtuple("Node", "fn domain op_type inputs outputs attrs opset implicit",
                  defaults=((),))
_HOST = NdArray()


class UnsupportedError(OnnxError):
    """A model using ops (or dtypes) ember cannot run; `.ops` lists every one of them."""

    def __init__(self, ops):
        self.ops = ops
        what = sorted({u.op_type if u.reason == "no implementation" else u.reason for u in ops})
        listed = "; ".join(f"{u.op_type} ({u.domain or 'ai.onnx'}, opset {u.opset}): {u.reason}"
                           for u in ops)
        super().__init__(f"onnx: the model uses what ember cannot run (unsupported: "
                         f"{', '.join(what)}): {listed}")


def opsets(model):
    out = {}
    for o in model.get("opset_import", []):
        out["" if o.get("domain", "") == "ai.onnx" else o.get("domain", "")] = o.get("version", 1)
    return out


def find_unsupported(model):
    """Every op and dtype of `model` (a parsed ModelProto) ember cannot run, once each."""
    versions = opsets(model)
    graph = model.get("graph", {})
    found = {}

    def note(domain, op_type, reason):
        found.setdefault((domain, op_type, reason),
                         Unsupported(domain, op_type, versions.get(domain, 0), reason))

    for what in ("input", "output"):
        for v in graph.get(what, []):
            name, code, _ = proto.value_info(v)
            if set(v.get("type", {})) - {"tensor_type"}:
                note("", f"graph {what} {name!r}", "sequence, map or optional values")
            elif code is not None and proto.DTYPES.get(code) not in _DTYPES:
                note("", f"graph {what} {name!r}", f"dtype {proto.dtype_name(code)}")
    for t in graph.get("initializer", []):
        if proto.DTYPES.get(t.get("data_type")) not in _DTYPES:
            note("", f"initializer {t.get('name', '')!r}",
                 f"dtype {proto.dtype_name(t.get('data_type', 0))}")
    if graph.get("sparse_initializer"):
        note("", "sparse initializer", "sparse tensors")

    def walk(g):
        for n in g.get("node", []):
            domain = n.get("domain", "")
            domain = "" if domain == "ai.onnx" else domain
            op_type = n.get("op_type", "")
            if (domain, op_type) not in OPS:
                note(domain, op_type, "no implementation")
            for a in n.get("attribute", []):
                for sub in ([a["g"]] if "g" in a else []) + a.get("graphs", []):
                    walk(sub)
                codes = [a["i"]] if a.get("name") in ("to", "dtype") and "i" in a else []
                codes += [t.get("data_type", 0) for t in [a.get("t")] if t is not None]
                for code in codes:
                    if proto.DTYPES.get(code) not in _DTYPES:
                        note(domain, op_type, f"dtype {proto.dtype_name(code)}")
                if a.get("type") not in range(1, 11) or "sparse_tensor" in a:
                    note(domain, op_type, "sparse or type attributes")
    walk(graph)
    return sorted(found.values(), key=lambda u: (u.domain, u.op_type, u.reason))


_DTYPES = ("bool", "int32", "int64", "float32", "float64")


class Context:
    """What an op function sees: the backend, its domain's opset, its node's output count."""

    def __init__(self, backend, cache, int64="int64"):
        # int64: what holds ONNX's int64 values: "int32" on a backend without 64-bit integers
        # (Wgpu: WGSL has none), range-checked, as onnxruntime-web does on WebGPU
        self.backend, self.cache, self.int64 = backend, cache, int64
        self.opset, self.outputs, self.op = 0, 1, ""
        self.env, self.versions, self.folder = {}, {}, None  # (for subgraphs)

    def t(self, v):
        if isinstance(v, Tensor):
            return v
        kept = self.cache.get(id(v))
        if kept is not None and kept[0] is v:
            return kept[1]
        array = np.asarray(v)
        t = Tensor.from_data(_narrow(array) if self.int64 != "int64" else array, self.backend)
        if id(v) in self.cache.get("consts", ()):  # a constant of the module: made once
            self.cache[id(v)] = (v, t)
        return t

    def dtype(self, name):
        return self.int64 if name == "int64" else name

    def np(self, v):
        return v.to_numpy() if isinstance(v, Tensor) else np.asarray(v)

    def subgraph(self, g, values):
        return subgraph(self, g, values)


class OnnxModule(Module):
    """A loaded ONNX model: call it with the graph's inputs (positional, in the graph's order, or
    by name); returns the output, or a tuple of them."""

    def __init__(self, model, backend=None, folder=None):
        bad = find_unsupported(model)
        if bad:
            raise UnsupportedError(bad)
        backend = default_backend() if backend is None else backend
        graph = model.get("graph", {})
        versions = opsets(model)
        self._keys, consts = {}, {}
        for t in graph.get("initializer", []):
            name, array = t.get("name", ""), proto.tensor(t, folder)
            trainable = array.dtype.kind == "f"
            if not trainable:
                consts[name] = array
            add_param(self, name, array, backend)
        given = set(self._keys)
        infos = [proto.value_info(v) for v in graph.get("input", [])]
        self._inputs = [name for name, _, _ in infos if name not in given]
        self._outputs = [proto.value_info(v)[0] for v in graph.get("output", [])]
        self._dtypes = {name: code for name, code, _ in infos}
        # what a caller must give: name -> dims (ints; a string or None where dynamic) or None
        self.input_shapes = {name: dims for name, _, dims in infos if name not in given}
        self._nodes = _sorted(graph.get("node", []), set(self._inputs) | given, versions, folder)
        self._nodes = _live(self._nodes, self._outputs)
        self._consts, self._backend = consts, backend
        self._versions, self._folder = versions, folder
        self._nodes = self._fold(self._nodes)
        self._cache = {}

    def _fold(self, nodes):
        """Run the nodes whose inputs are all constants now (on the host), keeping the rest."""
        kept, ctx = [], Context(_HOST, {})
        for node in nodes:
            if not node.implicit and all(i == "" or i in self._consts for i in node.inputs):
                values = [self._consts.get(i) for i in node.inputs]
                self._consts.update(zip(node.outputs, _run(ctx, node, values, host=True)))
            else:
                kept.append(node)
        return kept

    def forward(self, *args, **kwargs):
        if len(args) > len(self._inputs):
            raise OnnxError(f"onnx: the model takes {len(self._inputs)} inputs "
                            f"({', '.join(self._inputs)}), got {len(args)}")
        given = dict(zip(self._inputs, args), **kwargs)
        missing = [n for n in self._inputs if n not in given]
        if missing or set(given) - set(self._inputs):
            raise OnnxError(f"onnx: the model's inputs are {self._inputs}; missing {missing}, "
                            f"unknown {sorted(set(given) - set(self._inputs))}")
        ctx = context(self)
        env = dict(self._consts)
        env.update((n, vars(self)[k]) for n, k in self._keys.items() if n not in env)
        env.update((n, self._input(ctx, n, v)) for n, v in given.items())
        ctx.env, ctx.versions, ctx.folder = env, self._versions, self._folder
        for node in self._nodes:
            env.update(zip(node.outputs, step(ctx, node, [env.get(i) for i in node.inputs])))
        outs = [ctx.t(env[n]) for n in self._outputs]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _input(self, ctx, name, v):
        """An input as a Tensor on the run's backend: data (arrays, lists) converted to the
        dtype the graph declares, a Tensor of another dtype refused."""
        want = proto.DTYPES.get(self._dtypes.get(name))
        if not isinstance(v, Tensor):
            return ctx.t(np.asarray(v, dtype=want))
        if want is not None and v.dtype != ctx.dtype(want):
            raise OnnxError(f"onnx: input {name!r} is declared {want}, got a {v.dtype} tensor; "
                            f"cast it with .cast({want!r})")
        return v.to(ctx.backend)


def add_param(module, name, array, backend):
    """An initializer as a Param under its ONNX name (records and state_dict see it); a name
    Module would hide ("_...") or that it uses itself gets the prefix "onnx."."""
    key = name if name and not name.startswith("_") and not hasattr(Module, name) \
        and name != "training" else f"onnx.{name}"
    module._keys[name] = key
    if array.dtype == np.int64 and not holds_int64(backend):
        array = _narrow(array)
    vars(module)[key] = Param(Tensor.from_data(array, backend), trainable=array.dtype.kind == "f")


def holds_int64(backend):
    """Whether the backend has int64 tensors (Wgpu has none)."""
    from ..errors import DTypeError

    try:
        Tensor.from_data(np.zeros(1, np.int64), backend)
        return True
    except DTypeError:
        return False


def _narrow(array):
    """int64 values as int32, for a backend without 64-bit integers; refused if they do not fit."""
    if array.dtype != np.int64:
        return array
    if array.size and (array.min() < -2**31 or array.max() >= 2**31):
        raise OnnxError("onnx: int64 values beyond int32's range on a backend without 64-bit "
                        "integers (Wgpu); run this model on NdArray")
    return array.astype(np.int32)


def context(module):
    """The run's Context on the backend the module's Params are on now (after .to(), too);
    its constants' tensors are made once per backend."""
    backend = next((p.backend for _, p in module.named_params()), module._backend)
    if module._cache.get("backend") != backend:
        int64 = "int64" if holds_int64(backend) else "int32"
        module._cache = {"backend": backend, "int64": int64,
                         "consts": {id(v) for v in module._consts.values()}}
    return Context(backend, module._cache, module._cache["int64"])


def step(ctx, node, values):
    """Run one node: on the host (NumPy results) when every input is a constant."""
    on_host = not node.implicit and all(v is None or isinstance(v, np.ndarray) for v in values)
    return _run(Context(_HOST, {}) if on_host else ctx, node, values, on_host)


def _run(ctx, node, values, host=False):
    ctx.opset, ctx.outputs, ctx.op = node.opset, len(node.outputs), node.op_type
    try:
        out = node.fn(ctx, node.attrs, *values)
    except OnnxError:
        raise
    except Exception as e:
        raise OnnxError(f"onnx: node {node.op_type} ({', '.join(node.inputs)} -> "
                        f"{', '.join(node.outputs)}) failed: {type(e).__name__}: {e}") from e
    out = out if isinstance(out, tuple) else (out,)
    if host:
        out = tuple(v.to_numpy() if isinstance(v, Tensor) else v for v in out)
    return out


def _sorted(raw, known, versions, folder):
    """The nodes in an order where each runs after what it reads (Kahn's algorithm)."""
    nodes = []
    for n in raw:
        domain = n.get("domain", "")
        domain = "" if domain == "ai.onnx" else domain
        attrs = {a.get("name", ""): proto.attribute(a, folder) for a in n.get("attribute", [])}
        subgraphs = [a["g"] for a in n.get("attribute", []) if "g" in a]
        nodes.append(Node(OPS[(domain, n.get("op_type", ""))], domain, n.get("op_type", ""),
                          tuple(n.get("input", [])), tuple(n.get("output", [])), attrs,
                          versions.get(domain, 1), tuple(set().union(*map(_free, subgraphs)))))
    made = {o: i for i, n in enumerate(nodes) for o in n.outputs if o}
    for n in nodes:
        for x in n.inputs:
            if x and x not in known and x not in made:
                raise OnnxError(f"onnx: node {n.op_type} reads {x!r}, which no node, input or "
                                "initializer gives")
    order, state = [], [0] * len(nodes)  # 0 new, 1 on the path being followed, 2 placed
    for start in range(len(nodes)):
        stack = [start]
        while stack:
            i = stack[-1]
            if state[i] == 2:
                stack.pop()
                continue
            state[i] = 1
            dep = next((made[x] for x in nodes[i].inputs + nodes[i].implicit
                        if x in made and x not in known and state[made[x]] != 2), None)
            if dep is None:
                state[i] = 2
                order.append(nodes[i])
                stack.pop()
            elif state[dep] == 1:
                raise OnnxError(f"onnx: the graph has a cycle through node {nodes[i].op_type} "
                                f"({', '.join(nodes[i].outputs)})")
            else:
                stack.append(dep)
    return order


def _live(nodes, outputs):
    """The nodes some graph output depends on (dead-node removal), in order."""
    need, kept = set(outputs), []
    for node in reversed(nodes):
        if any(o in need for o in node.outputs):
            kept.append(node)
            need.update(node.inputs + node.implicit)
    return kept[::-1]


def _free(g):
    """The names graph g reads from outside (its own nodes', and its subgraphs')."""
    inner = {proto.value_info(v)[0] for v in g.get("input", [])}
    inner |= {t.get("name", "") for t in g.get("initializer", [])}
    read = set()
    for n in g.get("node", []):
        read |= set(n.get("input", []))
        for a in n.get("attribute", []):
            read |= set().union(*map(_free, [a["g"]] if "g" in a else []))
        inner |= set(n.get("output", []))
    return read - inner - {""}


def subgraph(ctx, g, values):
    """Run graph g (an attribute of If, Loop, Scan) with its inputs bound to `values`, the outer
    scope's names visible, in ctx; its outputs as a list."""
    env = dict(ctx.env)
    env.update((t.get("name", ""), proto.tensor(t, ctx.folder)) for t in g.get("initializer", []))
    env.update(zip([proto.value_info(v)[0] for v in g.get("input", [])], values))
    outer = ctx.env
    ctx.env = env
    try:
        for node in _sorted(g.get("node", []), set(env), ctx.versions, ctx.folder):
            env.update(zip(node.outputs, step(ctx, node, [env.get(i) for i in node.inputs])))
    finally:
        ctx.env = outer
    return [env[proto.value_info(v)[0]] for v in g.get("output", [])]


def load(source, backend=None):
    """An ONNX model (a path, or the file's bytes) as an nn.Module on `backend`."""
    model, folder = read(source)
    return OnnxModule(model, backend, folder)


def unsupported(source):
    """Every op (with domain and opset) and dtype of the model ember cannot run; [] = all fine."""
    return find_unsupported(read(source)[0])


def read(source):
    """(the parsed ModelProto, the folder external data may come from, or None)."""
    import os

    if isinstance(source, (bytes, bytearray, memoryview)):
        data, folder = bytes(source), None
    else:
        path = os.fspath(source)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise OnnxError(f"onnx: cannot read {path!r}: {e.strerror}") from None
        folder = os.path.dirname(os.path.abspath(path))
    model = proto.parse(memoryview(data))
    if "graph" not in model:
        raise OnnxError("onnx: the file holds no graph; is it an ONNX model?")
    return model, folder


__all__ = ["OnnxError", "OnnxModule", "Unsupported", "UnsupportedError", "load",
           "read", "unsupported"]
