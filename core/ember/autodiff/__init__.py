"""Autodiff(inner): Burn's autodiff as a backend decorator.

It wraps any backend. Its prims (ADPrim) pair the inner backend's prim with the graph node
that produced it; executing an op runs it on the inner backend and, when an input is tracked,
records a Node holding only what the op's gradient rule reads (the op table's `saves`).
`backward()` walks the nodes in reverse topological order and calls each op's grad rule from
the table, on the inner backend (or on this one, to build a graph of the gradient itself:
`grad(..., create_graph=True)`, for double backward). Gradients are plain values: a
`Gradients` container keyed by leaf, holding tensors of the inner backend.

Nothing here names an op: everything comes from the op table.
"""

import itertools
import threading

from ..backend.base import Backend, sole_owner
from ..dtype import is_float
from ..errors import BackendError, DTypeError
from ..ops import FLOATS, Op, prims
from ..tensor import Tensor

_state = threading.local()  # per thread: no_grad in one thread does not affect another
_ids = itertools.count(1)


def is_grad_enabled():
    return getattr(_state, "enabled", True)


class no_grad:  # noqa: N801  (a context manager, named like PyTorch's)
    """`with ember.no_grad():` runs ops without recording them (inference, updates)."""

    def __enter__(self):
        self._prev = is_grad_enabled()
        _state.enabled = False

    def __exit__(self, *exc):
        _state.enabled = self._prev

    def __call__(self, fn):
        def wrapped(*args, **kw):
            with no_grad():
                return fn(*args, **kw)
        wrapped.__name__ = getattr(fn, "__name__", "wrapped")
        return wrapped


class enable_grad(no_grad):  # noqa: N801
    def __enter__(self):
        self._prev = is_grad_enabled()
        _state.enabled = True


class Node:
    """One recorded op (or, with op None, a leaf that requires grad)."""

    __slots__ = ("op", "attrs", "parents", "metas", "saved", "id")

    def __init__(self, op, attrs, parents, metas, saved):
        self.op, self.attrs, self.parents, self.metas, self.saved = op, attrs, parents, metas, saved
        self.id = next(_ids)


class ADPrim:
    __slots__ = ("prim", "node", "shape", "dtype")

    def __init__(self, prim, node, shape, dtype):
        self.prim, self.node, self.shape, self.dtype = prim, node, shape, dtype


class Autodiff(Backend):
    """`Autodiff(NdArray())`: tensors on it can `require_grad()` and `backward()`."""

    def __init__(self, inner=None):
        if inner is None:
            from ..backends.ndarray import NdArray
            inner = NdArray()
        if not isinstance(inner, Backend):
            raise BackendError(f"Autodiff: expected a backend to wrap, got {inner!r}")
        if isinstance(inner, Autodiff):
            raise BackendError("Autodiff: the backend is already wrapped in Autodiff; for "
                               "higher-order gradients use ember.autodiff.grad(create_graph=True)")
        self.inner = inner
        self.dtypes = getattr(inner, "dtypes", None)  # what it holds is what inner holds

    def __str__(self):
        return f"Autodiff<{self.inner}>"

    # ---- the protocol ----------------------------------------------------------------------
    def execute(self, op, inputs, attrs, shape, dtype):
        # comprehensions, not loops: a loop variable would hold a reference to an input
        inner_inputs = [x.prim if type(x) is ADPrim else x for x in inputs]
        parents = [x.node if type(x) is ADPrim else None for x in inputs]
        # (the cheap tests first: every op of a training step pays for these)
        record = op.grad is not None and dtype in FLOATS and parents.count(None) < len(
            parents) and is_grad_enabled()
        # the inputs the grad rule reads, held before the inner backend runs: their references
        # keep it from writing its result into their buffers
        saved = {pos: inner_inputs[pos] for pos in op.saves if pos != "out"} if record else None
        moved = []
        for i in op.donors:  # hand an unshared input's buffer down to the inner backend
            if i < len(inputs) and sole_owner(inputs, i) and type(inputs[i]) is ADPrim:
                moved.append(i)
                inputs[i].prim = None
        try:
            out = self.inner.execute(op, inner_inputs, attrs, shape, dtype)
        except BaseException:
            for i in moved:
                inputs[i].prim = inner_inputs[i]
            raise
        if not record:
            return ADPrim(out, None, shape, dtype)
        metas = tuple([(x.shape, x.dtype) if type(x) is ADPrim else None for x in inputs])
        if None in metas:  # Python scalars: rules read them (g * b)
            saved.update((pos, x) for pos, x in enumerate(inputs) if type(x) is not ADPrim)
        if "out" in op.saves:
            saved["out"] = out
        return ADPrim(out, Node(op, attrs, tuple(parents), metas, saved), shape, dtype)

    def from_numpy(self, array):
        return ADPrim(self.inner.from_numpy(array), None, array.shape, array.dtype.name)

    def to_numpy(self, prim):
        return self.inner.to_numpy(prim.prim)

    async def to_numpy_async(self, prim):
        return await self.inner.to_numpy_async(prim.prim)

    def sync(self):
        self.inner.sync()

    def wrap(self, inner_prim, shape, dtype):
        return ADPrim(inner_prim, None, shape, dtype)

    def unwrap(self, prim):
        return prim.prim

    # ---- what Tensor's autodiff methods call -----------------------------------------------
    def require_grad(self, t):
        if not is_float(t.dtype):
            raise DTypeError(f"require_grad: only float tensors have gradients, got {t.dtype}; "
                             "cast first with .cast('float32')")
        p = t._prim
        if p.node is None or p.node.op is not None:
            t._prim = ADPrim(p.prim, Node(None, None, (), (), None), p.shape, p.dtype)
        return t

    def is_require_grad(self, t):
        return t._prim.node is not None

    def detach(self, t):
        p = t._prim
        return Tensor(ADPrim(p.prim, None, p.shape, p.dtype), self, t.shape, t.dtype)

    def backward(self, t, retain_graph=False, on_final=None):
        """The Gradients of t. on_final(leaf_id, grad), if given, is called as soon as a
        leaf's gradient is complete, during the walk (data parallel training starts
        reducing it while backward goes on); leaf_id is the key Gradients uses."""
        root = t._prim.node
        if root is None:
            raise BackendError("backward: this tensor does not depend on any tensor that "
                               "requires grad; call .require_grad() on the inputs first")
        grads = Gradients()
        seed = Tensor.full(t.shape, 1, self.inner, t.dtype)
        _backprop(root, seed, self, create_graph=False, retain=retain_graph, sink=grads._grads,
                  on_final=on_final)
        return grads

    def grad_tensor(self, prim, shape, dtype, node, create_graph):
        """A Tensor over a saved inner prim: on the inner backend, or tracked here."""
        if create_graph:
            return Tensor(ADPrim(prim, node, shape, dtype), self, shape, dtype)
        return Tensor(prim, self.inner, shape, dtype)




class Gradients:
    """The gradients of one backward pass, keyed by the leaf tensors that required them.

    A plain value: it can be passed to another thread, added to another (`a + b`), or
    read with `x.grad(grads)`. Tensors inside live on the inner backend."""

    def __init__(self, grads=None):
        self._grads = dict(grads or {})

    def get(self, t):
        node = getattr(t._prim, "node", None)
        return self._grads.get(node.id) if node is not None else None

    def remove(self, t):
        node = getattr(t._prim, "node", None)
        return self._grads.pop(node.id, None) if node is not None else None

    def __add__(self, other):
        out = dict(self._grads)
        for k, g in other._grads.items():
            out[k] = out[k] + g if k in out else g
        return Gradients(out)

    def __len__(self):
        return len(self._grads)

    def __repr__(self):
        return f"Gradients({len(self._grads)} tensors)"


class _Unsaved:
    """Stands for an input (at position `pos`; "out": the output) whose values the grad rule
    of `op` does not read (not in `saves`)."""

    __slots__ = ("shape", "dtype", "_op", "_pos")

    def __init__(self, shape, dtype, op, pos):
        self.shape, self.dtype, self._op, self._pos = shape, dtype, op, pos

    @property
    def ndim(self):
        return len(self.shape)

    def __getattr__(self, name):
        what = "output" if self._pos == "out" else f"input {self._pos}"
        raise BackendError(f"the grad rule of {self._op.name} ({what}) reads .{name}, but the op "
                           "table's `saves` does not keep that value: add it to the op's saves")


def _topological(root):
    """Nodes reachable from root, each before its parents (iterative: graphs can be deep)."""
    order, seen, stack = [], {root.id}, [(root, iter(root.parents))]
    while stack:
        node, parents = stack[-1]
        for p in parents:
            if p is not None and p.id not in seen:
                seen.add(p.id)
                stack.append((p, iter(p.parents)))
                break
        else:
            stack.pop()
            order.append(node)
    order.reverse()
    return order


def _sum_to(g, shape):
    """Sum a gradient of a broadcast result down to its input's shape, in one op where the
    shapes allow (a bias's gradient: the leading dims dropped by the sum itself)."""
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    dims = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape)
                                      if s == 1 and g.shape[lead + i] != 1)
    if dims:  # leading dims are dropped by the sum itself (the reshape puts back size-1 dims)
        g = g._reduce(prims.sum, dims, keepdim=not lead)
    return g if g.shape == shape else g.reshape(shape)


def _backprop(root, seed, backend, create_graph, retain, sink, on_final=None):
    """Run every node's grad rule from root down; leaf gradients are added into `sink`."""
    outer, _state.sink = getattr(_state, "sink", None), sink  # for checkpoint's rule
    try:
        _walk(root, seed, backend, create_graph, retain, sink, on_final)
    finally:
        _state.sink = outer


def _walk(root, seed, backend, create_graph, retain, sink, on_final=None):
    pending = {root.id: seed}
    for node in _topological(root):
        g = pending.pop(node.id, None)
        if g is None:
            continue
        if node.op is None:
            sink[node.id] = sink[node.id] + g if node.id in sink else g
            if on_final is not None:  # every consumer of a leaf comes before it in the order
                on_final(node.id, sink[node.id])
            continue
        saved, op = node.saved, node.op
        if saved is None:
            raise BackendError(f"backward: the graph through {op.name} was freed by an "
                               "earlier backward(); run the forward pass again, or pass "
                               "retain_graph=True to the first backward()")
        args = []
        for pos, meta in enumerate(node.metas):
            if meta is None:
                args.append(saved[pos])
            elif pos in saved:
                args.append(backend.grad_tensor(saved[pos], *meta, node.parents[pos],
                                                create_graph))
            else:
                args.append(_Unsaved(*meta, op, pos))
        # the output's shape/dtype are those of the seed gradient flowing into it
        out = (backend.grad_tensor(saved["out"], g.shape, g.dtype, node, create_graph)
               if "out" in saved else _Unsaved(g.shape, g.dtype, op, "out"))
        results = op.grad(g, out, *args, **node.attrs)
        if not retain:
            node.saved = None
        del g, out, args
        for parent, meta, gi in zip(node.parents, node.metas, results):
            if parent is None or gi is None:
                continue
            if callable(gi):  # a rule's lazy gradient, only paid for when needed
                gi = gi()
            gi = _sum_to(gi, meta[0])
            if gi.dtype != meta[1]:
                gi = gi.cast(meta[1])
            pending[parent.id] = pending[parent.id] + gi if parent.id in pending else gi


def checkpoint(fn, *xs):
    """fn(*xs), keeping none of fn's activations: backward runs fn again to get them.

    Trades compute for memory on deep blocks. Gradients reach xs and every tensor fn uses
    that requires grad (a module's parameters). Not usable with create_graph=True."""
    backend = xs[0].backend if xs else None
    if not isinstance(backend, Autodiff):
        raise BackendError("checkpoint: the inputs must live on an Autodiff backend")
    with no_grad():
        out = fn(*xs)
    if not is_grad_enabled():
        return out

    def rule(g, y, *saved):
        if isinstance(g.backend, Autodiff):
            raise BackendError("checkpoint: double backward (create_graph=True) through a "
                               "checkpoint is not supported")
        leaves = [backend.require_grad(Tensor(ADPrim(x.prim if isinstance(x, ADPrim) else
                                                     x._prim, None, x.shape, x.dtype),
                                              backend, x.shape, x.dtype))
                  if is_float(x.dtype) else x.to(backend) for x in saved]
        with enable_grad():
            again = fn(*leaves)
        if again._prim.node is None:
            return (None,) * len(saved)
        inner_sink = {}
        _backprop(again._prim.node, g, backend, False, False, inner_sink)
        mine = {x._prim.node.id: i for i, x in enumerate(leaves) if is_float(x.dtype)}
        for k, v in inner_sink.items():  # parameters fn used: their gradients go outside
            if k not in mine:
                _state.sink[k] = _state.sink[k] + v if k in _state.sink else v
        grads = [None] * len(saved)
        for k, i in mine.items():
            grads[i] = inner_sink.get(k)
        return tuple(grads)

    op = Op("checkpoint", "custom", None, grad=rule, saves=tuple(range(len(xs))))
    parents = tuple(x._prim.node for x in xs)
    metas = tuple((x.shape, x.dtype) for x in xs)
    node = Node(op, {}, parents, metas, {i: x._prim.prim for i, x in enumerate(xs)})
    return Tensor(ADPrim(out._prim.prim, node, out.shape, out.dtype), backend, out.shape,
                  out.dtype)


def grad(outputs, inputs, grad_outputs=None, create_graph=False, retain_graph=None):
    """Gradients of `outputs` (a tensor) with respect to `inputs` (leaf tensors), as a list.

    With create_graph=True the gradients are tensors on the Autodiff backend, tracked, so
    they can be differentiated again (double backward)."""
    backend = outputs.backend
    if not isinstance(backend, Autodiff):
        raise BackendError(f"grad: {backend} does not compute gradients; wrap it in Autodiff(...)")
    root = outputs._prim.node
    if root is None:
        raise BackendError("grad: the output does not depend on any tensor that requires grad")
    work = backend if create_graph else backend.inner
    if grad_outputs is None:
        seed = Tensor.full(outputs.shape, 1, work, outputs.dtype)
    else:
        seed = grad_outputs if create_graph else grad_outputs.to(work)
    sink = {}
    retain = create_graph if retain_graph is None else retain_graph
    with enable_grad() if create_graph else no_grad():
        _backprop(root, seed, backend, create_graph, retain, sink)
    result = []
    for x in inputs:
        node = x._prim.node
        if node is None or node.op is not None:
            raise BackendError("grad: inputs must be leaf tensors that require grad")
        result.append(sink.get(node.id))
    return result


__all__ = ["ADPrim", "Autodiff", "Gradients", "checkpoint", "enable_grad", "grad",
           "is_grad_enabled", "no_grad"]
