"""NdArray: the reference backend. A prim is a NumPy array; executing an op is calling its
NumPy implementation from the op table. Runs wherever NumPy runs: CPython and Pyodide.

Ownership (Burn's optimisation, in Python): an elementwise result may be written into an
input's own buffer when nothing else can see that buffer. The Tensor layer hands over the
array of a tensor that only a temporary expression referenced (see tensor._take); here
the array must then be referenced by our inputs list alone, own its memory (not a view, and
no view of it alive: a view holds a reference to its base), be writeable, and already have
the result's shape and dtype.
"""

import contextvars
import math
import os
import sys
import threading

import numpy as np

from ..backend.base import _FREE, Backend
from ..errors import BackendError
from ..fusion import launched, tracing
from ..ops import MOVEMENT
from ..ops import kernels as _kernels

# Each op runs with its instance's kernel set active and NumPy silent on overflow, 0/0,
# log(0), inf - inf (as every GPU backend is): two context variables. Setting and resetting
# them around each op costs ~1 us, most of a tiny op's time; instead each thread keeps one
# Context a kernel set, where both are set once, and an op runs inside it (Context.run only
# switches to it). A fresh Context: nothing of the caller's context variables reaches the op
# (and no op's function runs another NdArray op, which would enter it twice).
_contexts = threading.local()
_ACTIVE = _kernels.ACTIVE
_refcount = sys.getrefcount


def _context(kernels):
    ctx = contextvars.Context()
    ctx.run(_ACTIVE.set, kernels)
    ctx.run(np.seterr, all="ignore")  # (NumPy 2: a context variable, so here only)
    if not hasattr(_contexts, "by_set"):
        _contexts.by_set = {}
    _contexts.by_set[kernels] = ctx
    return ctx


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
_heap_kept = False


def _keep_heap():
    """Have glibc's malloc keep freed memory for the next training step.

    NumPy allocates every array with malloc. glibc serves large requests with fresh mmaps and
    hands the top of its heap back to the OS once more than a threshold is free, and both
    thresholds move with the largest buffer freed so far. A training step frees its
    activations after each backward, so unless one buffer happens to be large enough to lift
    the thresholds, the next forward page-faults them all back in: the MNIST model's step with
    conv2d's columns in blocks took ~2200 faults per step (none with this setting). Fixed
    thresholds (arrays up to 32 MB from the heap, up to 256 MB of free heap kept) make speed
    independent of which op allocates what. Process-wide, set once, glibc on Linux only (not
    Pyodide, musl or macOS); EMBER_KEEP_HEAP=0 leaves malloc alone."""
    global _heap_kept
    if _heap_kept or sys.platform != "linux" or os.environ.get("EMBER_KEEP_HEAP") == "0":
        return
    _heap_kept = True
    import ctypes
    import platform
    if platform.libc_ver()[0] != "glibc":
        return
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(_M_MMAP_THRESHOLD, 32 << 20)
        libc.mallopt(_M_TRIM_THRESHOLD, 256 << 20)
    except (OSError, AttributeError):  # no mallopt in this process: leave malloc alone
        pass


def compiled_kernels(threads=None):
    """The compiled kernel set "auto" means here: WebAssembly SIMD inside Pyodide (EMBER_WASM=0
    opts out), C compiled on first use natively (EMBER_NATIVE=0 opts out; `threads` caps the
    threads its ops use), else NumPy's."""
    if sys.platform == "emscripten":
        if os.environ.get("EMBER_WASM", "1") != "0":
            from . import wasm
            return wasm.KERNELS
    elif os.environ.get("EMBER_NATIVE", "1") != "0":
        from . import native
        return native.KERNELS if threads is None else native.Native(threads)
    return _kernels.NUMPY


TILE = 1 << 16  # elements of a fused chain's tile: a few of them fit in L2 with their inputs


def _tiles(shape, leaves):
    """Index expressions cutting `shape` into tiles of about TILE elements: flat runs when
    every leaf is C-contiguous in the block's shape (the common case), else runs of rows."""
    size = math.prod(shape)
    if size <= TILE or not shape:
        return [...], leaves
    if all(x.shape == shape and x.flags.c_contiguous for x in leaves):
        flat = [x.reshape(-1) for x in leaves]
        return [slice(i, i + TILE) for i in range(0, size, TILE)], flat
    rows = max(1, TILE // max(1, size // shape[0]))
    leaves = [np.broadcast_to(x, shape) for x in leaves]
    return [slice(i, i + rows) for i in range(0, shape[0], rows)], leaves


def _fused(block):
    shape = block.shape
    tiles, leaves = _tiles(shape, block.leaves)
    flat = len(tiles) > 1 and leaves[0].ndim == 1 if leaves else False
    outs = [np.empty(shape, block.nodes[j].dtype) for j in block.outputs]
    views = [o.reshape(-1) for o in outs] if flat else outs
    for at in tiles:
        done = []
        for n in block.nodes:
            args = [(leaves[i[1]][at] if i[0] == "leaf" else done[i[1]]) if type(i) is tuple
                    else i for i in n.inputs]
            done.append(n.op.np(*args, **n.attrs))
        for o, j in zip(views, block.outputs):
            o[at] = done[j]
    return outs


class NdArray(Backend):
    """The NumPy backend. `kernels`: "auto" (ember's compiled kernels where they exist: see
    compiled_kernels; each loads on first use), "numpy" (NumPy alone), or a kernels.Kernels
    set; per instance, so instances with different choices run side by side.
    `inplace=False` turns the ownership optimisation off. `threads`: at most this many
    threads for one op of the native kernels (data-parallel replicas: one each). The first one
    made sets glibc's malloc to keep freed memory (see _keep_heap)."""

    def __init__(self, kernels="auto", inplace=True, threads=None):
        if isinstance(kernels, _kernels.Kernels):
            self.kernels = kernels
        elif kernels in ("auto", "numpy"):
            self.kernels = compiled_kernels(threads) if kernels == "auto" else _kernels.NUMPY
        else:
            raise BackendError(f"NdArray: kernels must be 'auto' or 'numpy' (or a Kernels set), "
                               f"got {kernels!r}")
        self.inplace = inplace
        _keep_heap()

    def __str__(self):
        return "NdArray<cpu>"

    def execute(self, op, inputs, attrs, shape, dtype):
        if op.kind == MOVEMENT:
            # views and copies: no floating-point errors to silence, no kernel set to choose
            # (a batch-1 forward runs a dozen reshapes)
            return op.np(*inputs, **attrs)
        if tracing() is not None:  # (launched() and its tuple: a tenth of a tiny op)
            launched((op.name,))
        try:
            ctx = _contexts.by_set[self.kernels]
        except (AttributeError, KeyError):
            ctx = _context(self.kernels)
        if op.donors and self.inplace:
            for i in op.donors:  # (every op's donors are positions of its inputs)
                # (sole_owner's test written out: a tiny op's time is mostly calls like it)
                if _refcount(inputs[i]) <= _FREE:
                    x = inputs[i]
                    # C-contiguous only: a new result of an input that is would be too
                    # (NumPy's order K, x.copy(), the native kernels), so reusing x keeps
                    # the layout an owned-elsewhere x would give; an F-ordered donor next
                    # to a C-ordered operand made a transposed result, which BLAS's matmul
                    # then summed differently (ember.jit's replays differed from eager
                    # training by an ulp)
                    if (type(x) is np.ndarray and x.shape == shape and x.base is None
                            and x.dtype == dtype and (f := x.flags).writeable
                            and f.c_contiguous):
                        return ctx.run(op.np, *inputs, out=x, **attrs)
        # (an empty **attrs still costs a dict per call: most elementwise ops have none)
        out = ctx.run(op.np, *inputs, **attrs) if attrs else ctx.run(op.np, *inputs)
        # NumPy's ufuncs turn 0-d results into scalars: keep every prim an ndarray
        return out if type(out) is np.ndarray else np.asarray(out)

    def fuse(self, block):
        """A chain of elementwise ops (an ember.fusion Block) in one pass: natively one C
        kernel generated for the block (backends/native/fused.py), else over cache-sized
        tiles, each op reading and writing a tile that stays in cache, where op by op every
        intermediate would stream the whole tensor through memory."""
        chosen = _ACTIVE.set(self.kernels)
        try:
            generated = getattr(self.kernels, "fuse", None)
            outs = generated(block) if generated is not None else None
            if outs is not None:
                return outs
            with np.errstate(all="ignore"):
                return _fused(block)
        finally:
            _ACTIVE.reset(chosen)

    def compile(self, steps, table, inputs, outputs, run=None):
        # inside Pyodide, runs of WebAssembly kernels become one call each (backends/wasm);
        # a decorator's own run (Fusion's generated kernels) is not one of them
        compile_plan = getattr(self.kernels, "compile_plan", None)
        if compile_plan is None or run is not None:
            return None
        return compile_plan(steps, table, inputs, outputs, self.execute)

    def from_numpy(self, array):
        return array  # the Tensor layer passes an array nobody else holds

    def to_numpy(self, prim):
        # a read-only view: writing into it would change an immutable tensor (and any
        # activation Autodiff saved); .copy() it to get a writeable array
        view = prim.view()
        view.flags.writeable = False
        return view


