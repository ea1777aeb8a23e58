"""Fusion(inner): a backend decorator that queues elementwise ops lazily and runs each chain of
them as one kernel of `inner`, generated at run time (Burn's burn-fusion, tinygrad's lazy
schedule). It names no op: what it may fuse is the op table's ELEMENTWISE kinds.

    B = Autodiff(Fusion(Wgpu()))     # or Fusion(NdArray()); any stack
    y = gelu_custom(x)               # 5 elementwise ops queued, nothing run yet
    y.to_numpy()                     # one generated kernel computes y

A prim of Fusion is a `Lazy`: an inner prim, or a pending op whose inputs are Lazies (and
Python scalars). A chain is run ("realized") when its result is read, when an op that is not
elementwise needs it, when it reaches `max_ops` ops or would read more buffers than a kernel
can bind. Realizing asks `inner.fuse(block)` for the whole chain; the block writes the chain's
result and every intermediate something else still refers to (intermediates nobody reads are
never written to memory). An inner backend without `fuse` runs the chain op by op, and every
other op runs through `inner.execute` as it would without Fusion: every op keeps its eager
fallback.

An inner backend may also run some other ops inside a block (`inner.fusable(op)`): Wgpu
runs a reduction and what reads its result back in the reduced row as one row-wise kernel
(softmax, layer_norm: one kernel), and elementwise work after a matmul in the matmul's
epilogue (`relu(x @ w + b)`: one kernel). Such ops are queued too; `inner.fuse(block)` returns
None where it cannot run a block of them as one kernel, and Fusion then runs them on their own
first.

ember.fusion.trace() says what ran on any backend (Fusion or not): the kernels launched, each
with the op names it ran, and how many kernels were compiled.
"""

import contextlib
import contextvars
import threading
import weakref

from ..backend.base import Backend, OpRecord, others, run_steps
from ..ops import ELEMENTWISE, REDUCE
from ..ops import prims as _prims

__all__ = ["Block", "Fusion", "Lazy", "trace"]


# ---- trace: what ran, on any backend --------------------------------------------------------
class Launch:
    """One kernel launched: the names of the ops it computed, in order."""

    __slots__ = ("ops",)

    def __init__(self, ops):
        self.ops = tuple(ops)

    def __repr__(self):
        return f"Kernel({', '.join(self.ops)})"


class Trace:
    def __init__(self):
        self.kernels = []  # Launch, in order
        self.compiled = 0  # kernels compiled (0 when every one came from a cache)

    def __repr__(self):
        return f"Trace({len(self.kernels)} kernels, {self.compiled} compiled: {self.kernels})"


_TRACE = contextvars.ContextVar("ember.fusion.trace", default=None)


@contextlib.contextmanager
def trace():
    """Record the kernels launched in this context while the block runs (a chain Fusion still
    holds pending runs when it is read, or at its backend's sync())."""
    t = Trace()
    token = _TRACE.set(t)
    try:
        yield t
    finally:
        _TRACE.reset(token)


# the trace recording in this context, or None: a backend on a hot path asks this before it
# builds the arguments of launched() (a Python call and a tuple an op, with no trace almost always)
tracing = _TRACE.get


def launched(ops):
    """Backends call this once per kernel they launch (ops: the op names it computed)."""
    t = _TRACE.get()
    if t is not None:
        t.kernels.append(Launch(ops))


def compiled(n=1):
    """Backends call this when they compile a kernel."""
    t = _TRACE.get()
    if t is not None:
        t.compiled += n


# ---- the lazy prims and the blocks handed to inner.fuse ------------------------------------
class Lazy:
    """Fusion's prim: `value`, an inner prim, once realized; until then `node`, an OpRecord
    whose inputs are Lazies or Python scalars, and `leaves`, the realized Lazies its chain
    reads, and `ops`, how many pending ops the chain holds."""

    __slots__ = ("value", "node", "shape", "dtype", "leaves", "ops", "__weakref__")

    def __init__(self, shape, dtype, value=None, node=None, leaves=(), ops=0):
        self.value, self.node, self.shape, self.dtype = value, node, shape, dtype
        self.leaves, self.ops = leaves, ops

    def __repr__(self):
        state = "pending" if self.node is not None else "realized"
        return f"Lazy({state}, {list(self.shape)}, {self.dtype})"


class Block:
    """A chain of elementwise ops for inner.fuse: `nodes` are OpRecords whose inputs are
    ("leaf", k) for leaves[k] (an inner prim), ("node", j) for node j's result, or a Python
    scalar; every node's shape broadcasts to `shape`, the block's (its last node's); `outputs`
    are the nodes to write (each of the block's shape, or of a reduction's in the block), in
    order. fuse(block) returns their prims, in that order. Nodes of ops that are not
    elementwise are only handed to an inner whose `fusable` accepts them: a reduction of a
    node or leaf of the block's shape, or a producer (matmul) of the block's shape whose
    inputs are leaves."""

    __slots__ = ("nodes", "leaves", "outputs", "shape", "_key")

    def __init__(self, nodes, leaves, outputs, shape):
        self.nodes, self.leaves, self.outputs, self.shape = nodes, leaves, outputs, shape
        self._key = None

    def key(self):
        """What a generated kernel depends on: the ops, their attrs and wiring, the dtypes, and
        which operands are scalars (never their values, nor shapes). Computed once a block
        (a backend asks for it several times a call)."""
        if self._key is None:
            wiring = tuple((n.op, tuple(sorted(n.attrs.items())) if n.attrs else (),
                            tuple(i if type(i) is tuple else type(i) for i in n.inputs),
                            n.dtype) for n in self.nodes)
            self._key = wiring, tuple(self.outputs)
        return self._key

    def names(self):
        return [n.op.name for n in self.nodes]


def run_block(backend, block):
    """A Block op by op through backend.execute: what a backend without a fused path does."""
    done = []
    for n in block.nodes:
        ins = [block.leaves[i[1]] if type(i) is tuple and i[0] == "leaf"
               else done[i[1]] if type(i) is tuple else i for i in n.inputs]
        done.append(backend.execute(n.op, ins, n.attrs, n.shape, n.dtype))
    return [done[j] for j in block.outputs]


# ---- the decorator -------------------------------------------------------------------------
class Fusion(Backend):
    """Fuse chains of elementwise ops into one kernel of `inner` (see the module's doc).
    max_ops: the longest chain; max_buffers: the most buffers (leaves and outputs) one kernel
    binds, by default what inner says (its `fused_buffers`: 7 on Wgpu) or 8."""

    def __init__(self, inner, max_ops=64, max_buffers=None):
        if not isinstance(inner, Backend):
            raise TypeError(f"Fusion: expected a backend to wrap, such as Wgpu(), got {inner!r}")
        if isinstance(inner, Fusion):
            raise TypeError(f"Fusion: {inner} is fused already; wrap its inner backend once")
        self.inner = inner
        self.max_ops = max_ops
        self.max_buffers = max_buffers or getattr(inner, "fused_buffers", 8)
        self.dtypes = getattr(inner, "dtypes", None)  # what it holds is what inner holds
        self._lock = threading.RLock()  # chains may be shared across threads: one realizes
        self._pending = []  # weak references to the chains queued since the last sync()

    def __str__(self):
        return f"Fusion<{self.inner}>"

    # ---- the protocol ----------------------------------------------------------------------
    def execute(self, op, inputs, attrs, shape, dtype):
        if op.kind == REDUCE and attrs.get("keepdim") is False:
            # (sum's x.sum() as one op) a block's reductions keep their dims: the keep-dims
            # reduction, then the reshape that drops them
            kept = {**attrs, "keepdim": True}
            x = self.execute(op, inputs, kept, op.out_shape(inputs[0].shape, **kept), dtype)
            return self.execute(_prims.reshape, [x], {"shape_to": shape}, shape, dtype)
        # (a dtype inner cannot hold runs eagerly: inner refuses it now, not at a later read)
        if op.kind in ELEMENTWISE and op.wgsl is not None and (
                self.dtypes is None or dtype in self.dtypes):
            return self._queue(op, inputs, attrs, shape, dtype)
        fusable = getattr(self.inner, "fusable", None)
        if fusable is not None and fusable(op):
            if op.kind != REDUCE:  # a producer reads its inputs from memory
                for x in inputs:
                    if type(x) is Lazy:
                        self.realize(x)
            return self._queue(op, inputs, attrs, shape, dtype)
        if op.kind == REDUCE and type(inputs[0]) is Lazy and inputs[0].node is not None:
            lazy = self._queue(op, inputs, attrs, shape, dtype)
            self.realize(lazy)  # now (inner runs no reduction inside a block), fused on read
            return lazy
        prims = [self.realize(x) if type(x) is Lazy else x for x in inputs]
        return Lazy(shape, dtype, value=self.inner.execute(op, prims, attrs, shape, dtype))

    def from_numpy(self, array):
        return Lazy(array.shape, array.dtype.name, value=self.inner.from_numpy(array))

    def to_numpy(self, prim):
        return self.inner.to_numpy(self.realize(prim))

    async def to_numpy_async(self, prim):
        return await self.inner.to_numpy_async(self.realize(prim))

    def sync(self):
        """Run every chain still pending (the newest first: it writes what older ones share)
        and wait for inner."""
        with self._lock:
            pending, self._pending = self._pending, []
        for ref in reversed(pending):
            x = ref()
            if x is not None and x.node is not None:
                self.realize(x)
        self.inner.sync()

    def wrap(self, inner_prim, shape, dtype):
        return Lazy(shape, dtype, value=inner_prim)

    def compile(self, steps, table, inputs, outputs, run=None):
        """ember.jit's plan compiled by inner as this backend runs it (Wgpu records the
        fused kernels of one run, and each replay submits them: fused and no Python per op),
        or None. Inner sees inner prims; the runner hands back this backend's."""
        if run is not None:
            return None
        mine = {}  # id(inner prim) -> the Lazy it came from (the capture's constants, inputs)

        def unwrap(p):
            if type(p) is not Lazy:
                return p
            value = self.realize(p)
            mine[id(value)] = p
            return value

        def run_here(steps, table, inputs, outputs):
            wrapped = [mine.get(id(p), p) for p in inputs]
            got = run_steps(self.execute, steps, [mine.get(id(p), p) for p in table], wrapped,
                            outputs)
            return {s: self.realize(p) if type(p) is Lazy else p for s, p in got.items()}

        kinds = {step.out: (step.shape, step.dtype) for step in steps}
        kinds.update((k, (p.shape, p.dtype)) for k, p in enumerate(inputs) if type(p) is Lazy)
        kinds.update((k, (p.shape, p.dtype)) for k, p in enumerate(table) if type(p) is Lazy)
        runner = self.inner.compile(steps, [unwrap(p) for p in table],
                                    [unwrap(p) for p in inputs], outputs, run=run_here)
        if runner is None:
            return None

        def replay(prims):
            got = runner([self.realize(p) if type(p) is Lazy else p for p in prims])
            if got is None:
                return None
            return {s: Lazy(*kinds[s], value=p) for s, p in got.items()}
        return replay

    def unwrap(self, prim):
        return self.realize(prim)

    def __getattr__(self, name):  # what the inner backend offers beyond the protocol (stats)
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    # ---- queueing and realizing ------------------------------------------------------------
    def _queue(self, op, inputs, attrs, shape, dtype):
        leaves, ops = _reach(inputs)
        if ops > self.max_ops or len(leaves) >= self.max_buffers:
            # too long, or too many buffers for one kernel (its leaves and one output): realize
            # the longest pending inputs first, each then read as one buffer
            pending = [x for x in inputs if type(x) is Lazy and x.node is not None]
            while pending and (ops > self.max_ops or len(leaves) + 1 > self.max_buffers):
                x = max(pending, key=lambda p: (len(p.leaves), p.ops))
                pending.remove(x)
                self.realize(x)
                leaves, ops = _reach(inputs)
        lazy = Lazy(shape, dtype, None, OpRecord(op, tuple(inputs), attrs, shape, dtype), leaves,
                    ops)
        with self._lock:
            if len(self._pending) >= 4096:  # (forget those realized or gone meanwhile)
                self._pending = [r for r in self._pending if (p := r()) is not None
                                 and p.node is not None]
            self._pending.append(weakref.ref(lazy))
        return lazy

    def realize(self, lazy):
        """The inner prim of `lazy`, running its pending chain first (once)."""
        if lazy.node is None:
            return lazy.value
        with self._lock:
            if lazy.node is not None:
                self._run(lazy)
        return lazy.value

    def _run(self, root):
        if root.node.op.kind == REDUCE:
            return self._run_reduce(root)
        while True:
            block, outputs = self._plan(root)
            fuse = getattr(self.inner, "fuse", None)
            if fuse is None or len(block.nodes) == 1:
                prims = run_block(self.inner, block)
                break
            prims = fuse(block)
            if prims is not None:
                launched(block.names())
                break
            # inner cannot run this block's reductions or producer in one kernel (too many
            # buffers, reductions of other dims, a product that runs better alone): a producer
            # runs first on its own and the chain after it as one block; for reductions,
            # root's longest input that holds one runs first (as a block where inner can),
            # else the first of them
            first = _special(root)
            if first is None:  # a plain chain inner refuses: op by op
                prims = run_block(self.inner, block)
                break
            del block, outputs
            if first.node.op.kind != REDUCE:
                self.realize(first)
                continue
            held = [x for x in root.node.inputs if type(x) is Lazy and x.node is not None
                    and _special(x) is not None]
            if held:  # (no local name may hold a pending Lazy of the chain: _plan counts them)
                first = max(held, key=lambda x: x.ops)
            del held
            self.realize(first)
            del first
        for x, prim in zip(outputs, prims):
            x.value, x.node, x.leaves, x.ops = prim, None, (), 0

    def _run_reduce(self, root):
        """A reduction read on its own (fuse-on-read): its input's pending chain computed
        inside the reduction's kernel where inner can (the chain stays pending: what reads it
        later computes it again, in registers, which costs less than writing it to memory and
        reading it back), else through inner.execute. A chain that holds reductions of the
        same rows runs with it as one block where inner can (a row kernel); other reductions
        or a producer in the chain: the chain is realized first, the reduction then reads it."""
        n = root.node  # (no local names the chain's Lazies: they would count as held)
        prim = None
        fuse_reduce = getattr(self.inner, "fuse_reduce", None)
        if fuse_reduce is not None and n.inputs[0].node is not None and _special(
                n.inputs[0]) is not None:
            block, outputs = self._plan(root)  # (it may run reductions of other rows first)
            if any(b.op.kind not in ELEMENTWISE for b in block.nodes[:-1]):
                prims = self.inner.fuse(block)
                if prims is not None:
                    launched(block.names())
                    for y, p in zip(outputs, prims):
                        y.value, y.node, y.leaves, y.ops = p, None, (), 0
                    return
                del block, outputs
                # else the input first (with its reductions or producer, where inner can),
                # then the reduction of it
                self.realize(n.inputs[0])
            else:
                del block, outputs
        if fuse_reduce is not None and n.inputs[0].node is not None:
            block, _ = self._plan(n.inputs[0], writes=False)
            prim = fuse_reduce(block, n.op, n.attrs, n.shape, n.dtype)
            if prim is not None:
                launched(block.names() + [n.op.name])
        if prim is None:
            prim = self.inner.execute(n.op, [self.realize(n.inputs[0])], n.attrs, n.shape,
                                      n.dtype)
        root.value, root.node, root.leaves, root.ops = prim, None, (), 0

    def _plan(self, root, writes=True):
        """The Block that computes root's chain, and the Lazies it writes (root last; with
        writes=False root alone, whoever holds the intermediates). The block's shape is root's,
        or for a reduction its input's."""
        n = root.node
        span = n.inputs[0].shape if n.op.kind == REDUCE else root.shape
        while True:
            order, uses = _chain(root)
            outputs = [root]
            if writes:
                # an intermediate is written only when something outside the chain still holds
                # it (a tensor, another chain): a reference beyond `order`'s and the chain's
                outputs = [order[k] for k in range(len(order) - 1)
                           if others(order, k) > uses[id(order[k])]] + [root]
            rows = {x.shape for x in order if x.node.op.kind == REDUCE}
            # first, on their own: an intermediate to write of another shape (than the
            # block's, or a reduction's in it), a reduction or producer spanning another shape
            todo = [x for x in outputs if x.shape != span and x.shape not in rows]
            todo += [x for x in order[:-1] if x.node.op.kind not in ELEMENTWISE and (
                x.node.inputs[0].shape if x.node.op.kind == REDUCE else x.shape) != span]
            if not todo:
                break
            for x in todo:
                self.realize(x)
            del order, outputs, todo, x  # (their references would count as outside ones)
        index = {id(x): j for j, x in enumerate(order)}
        leaves, leaf_index, nodes, wiring = [], {}, [], []
        for x in order:  # (the key is built on the way: Block.key's walk, once)
            n = x.node
            ins, scalars = [], False
            for i in n.inputs:
                if type(i) is not Lazy:
                    scalars = True
                elif i.node is None:
                    k = leaf_index.get(id(i))
                    if k is None:
                        k = leaf_index[id(i)] = len(leaves)
                        leaves.append(i.value)
                    i = ("leaf", k)
                else:
                    i = ("node", index[id(i)])
                ins.append(i)
            ins = tuple(ins)
            nodes.append(OpRecord(n.op, ins, n.attrs, n.shape, n.dtype))
            wiring.append((n.op, tuple(sorted(n.attrs.items())) if n.attrs else (), tuple(
                i if type(i) is tuple else type(i) for i in ins) if scalars else ins, n.dtype))
        outputs_at = [index[id(x)] for x in outputs]
        block = Block(nodes, leaves, outputs_at, span)
        block._key = tuple(wiring), tuple(outputs_at)
        return block, outputs


def _reach(inputs):
    """The realized Lazies (by id) a new op on `inputs` reads through its chain, and how many
    ops the chain would then hold."""
    leaves, ops = {}, 1
    for x in inputs:
        if type(x) is Lazy:
            if x.node is None:
                leaves[id(x)] = x
            else:
                leaves.update(x.leaves)
                ops += x.ops
    return leaves, ops


def _special(root):
    """The first pending op of root's chain that is not elementwise, or None."""
    order, _ = _chain(root)
    return next((x for x in order if x.node.op.kind not in ELEMENTWISE), None)


def _chain(root):
    """The pending Lazies root's chain holds, inputs before their users, and how often the
    chain's nodes read each Lazy (by id)."""
    order, uses = [], {}
    _visit(root, order, uses)
    return order, uses


def _visit(x, order, uses):
    # (depth-first, the last input's subchain first; chains are at most max_ops deep. Not a
    # closure: a recursive one is a reference cycle that would keep `order`, and so the
    # Lazies' reference counts that _plan reads, alive until a garbage collection)
    for i in reversed(x.node.inputs):
        if type(i) is Lazy:
            k = id(i)
            if k in uses:
                uses[k] += 1
            else:
                uses[k] = 1
                if i.node is not None:
                    _visit(i, order, uses)
    order.append(x)
