"""Wgpu: ember's WebGPU backend. WGSL compute kernels, natively through wgpu-py (Vulkan, Metal,
DX12; Mesa's lavapipe on machines without a GPU) and in the browser through Pyodide.

    from ember.backend import Wgpu
    B = Wgpu()                       # or Wgpu(memory="exclusive"); EMBER_BACKEND=wgpu
    str(B)                           # 'Wgpu<vulkan: llvmpipe (LLVM 15.0.6, 256 bits)>'
    B.memory_stats(); B.stats(); B.trim()

- dtypes: float32, int32 and bool (stored as u32). WGSL has no 64-bit types: float64/int64
  data is refused with a DTypeError naming the fix, never narrowed silently.
- A prim is a GPU buffer seen through shape, strides and offset (layout.py): reshape of dense
  data, permute, expand and slice are free; kernels read operands through strides.
- Asynchronous: execute() only records dispatches (device.py); they are submitted in batches
  and nothing waits on the GPU until data is read back (to_numpy / to_numpy_async / sync).
- Memory: buffers return to a pool (pool.py) when their last tensor dies; an unshared input's
  buffer is reused for an elementwise result (ember.backend.sole_owner), as NdArray does.
- Kernels: elementwise kernels are generated from the op table's WGSL expressions; the rest
  are in shaders/*.wgsl (runners.py says which op runs how). Custom ops: custom.py.
- Bridges (bridge.py): bridge_native (wgpu-py) and bridge_browser (Pyodide) implement the same
  few calls; everything else here is shared.
"""

import numpy as np

from ... import fusion
from ...backend.base import Backend
from ...errors import DTypeError
from . import runners
from .custom import custom_op, register_kernel
from .layout import DTYPES, NUMPY_STORAGE, Prim, dense_strides, is_dense, numel


def _refusal(what, dtype):
    narrow = "int32" if dtype == "int64" else "float32"
    return (f"Wgpu: {what} {dtype}: WGSL has no 64-bit types, so Wgpu holds float32, int32 "
            f"and bool only (nothing is narrowed silently). Use {narrow}: .cast('{narrow}') "
            f"before moving the tensor here, or Tensor.from_data(data, dtype='{narrow}')")


class Wgpu(Backend):
    """The WebGPU backend. `memory`: "pool" (reuse freed buffers, the default) or "exclusive"
    (one buffer per tensor, released when it dies). `inplace=False` turns off the reuse of
    unshared inputs' buffers (results must not depend on it)."""

    dtypes = DTYPES
    compiles_scalars = True  # compile() takes live scalars among a plan's inputs (plan.py)

    def __init__(self, memory="pool", inplace=True, bridge=None):
        from .device import get_device
        self.device = get_device(bridge or _default_bridge())
        self.pool = self.device.pool(memory)
        self.memory = memory
        self.inplace = inplace
        self.cache = self.pool.reuse  # bind groups of pooled buffers are worth keeping

    @classmethod
    async def create(cls, *args, **kwargs):
        """`B = await Wgpu.create()`: the public way to get a WebGPU backend. In a page it asks
        the browser for its GPU first (once: bridge_browser.request_device); natively it
        returns Wgpu(...) at once."""
        if _default_bridge() == "browser" and kwargs.get("bridge") is None:
            from . import bridge_browser
            await bridge_browser.request_device()
        return cls(*args, **kwargs)

    def __str__(self):
        return f"Wgpu<{self.device.name}>"

    def key(self):
        return ("Wgpu", self.device.name)

    # ---- the protocol ----------------------------------------------------------------------
    def execute(self, op, inputs, attrs, shape, dtype):
        if dtype not in DTYPES:
            raise DTypeError(_refusal(f"{op.name} would produce", dtype))
        run = runners.CACHE.get(op)
        if run is None:
            run = runners.runner_for(op)
        counters = self.device.counters
        before = counters["dispatches"]
        out = run(self, op, inputs, attrs, shape, dtype)
        if counters["dispatches"] != before:  # (views and host fallbacks launch none)
            fusion.launched((op.name,))
        return out

    # the most leaves and outputs one fused kernel binds (Fusion closes a block before)
    fused_buffers = runners._MAX_BUFFERS

    def fusable(self, op):
        """Whether an ember.fusion Block may hold op besides elementwise ops (sum, max, min:
        a row kernel; matmul: its epilogue)."""
        return runners.fusable(op)

    def compile(self, steps, table, inputs, outputs, run=None):
        """A captured plan encoded once, replayed as one submission (plan.py), or None."""
        from .plan import compile_plan
        return compile_plan(self, steps, table, inputs, outputs, run)

    def fuse(self, block):
        """An ember.fusion Block as one generated kernel, or None (see runners.fused)."""
        return runners.fused(self, block)

    def fuse_reduce(self, block, op, attrs, shape, dtype):
        """A reduction of a Block's result in one kernel, or None (the plain path then)."""
        return runners.fused_reduce(self, block, op, attrs, shape, dtype)

    def from_numpy(self, array):
        dtype = array.dtype.name
        if dtype not in DTYPES:
            raise DTypeError(_refusal("cannot hold", dtype))
        prim = self.empty(array.shape, dtype)
        if array.size:
            data = array.astype(np.uint32) if dtype == "bool" else np.ascontiguousarray(array)
            self.device.upload(prim.storage.gpu, data)
            if dtype == "int32":
                prim.range = (int(data.min()), int(data.max()))
        return prim

    def _readable(self, prim):
        if numel(prim.shape) and not is_dense(prim.shape, prim.strides):
            prim = self.dense_copy(prim)
        return prim

    @staticmethod
    def _array(prim, data):
        out = np.frombuffer(data, NUMPY_STORAGE[prim.dtype], count=numel(prim.shape))
        out = out.reshape(prim.shape)
        return out.astype(np.bool_) if prim.dtype == "bool" else out

    def to_numpy(self, prim):
        if numel(prim.shape) == 0:
            return np.zeros(prim.shape, prim.dtype)
        prim = self._readable(prim)
        data = self.device.read(prim.storage.gpu, prim.offset * 4, numel(prim.shape) * 4)
        return self._array(prim, data)

    async def to_numpy_async(self, prim):
        if numel(prim.shape) == 0:
            return np.zeros(prim.shape, prim.dtype)
        prim = self._readable(prim)
        data = await self.device.read_async(prim.storage.gpu, prim.offset * 4,
                                            numel(prim.shape) * 4)
        return self._array(prim, data)

    def sync(self):
        self.device.sync()

    # ---- helpers for runners and custom kernels ------------------------------------------------
    def empty(self, shape, dtype):
        """A new dense prim (uninitialised)."""
        storage = self.pool.take(max(numel(shape), 1) * 4)
        if self.device.recording is not None:  # compiling a plan: it needs the buffers' sizes
            self.device.recording.sizes[storage.gpu] = storage.nbytes
        return Prim(storage, tuple(shape), dense_strides(shape), 0, dtype)

    def dense_copy(self, prim):
        """A dense copy of prim in a buffer of its own."""
        out = self.empty(prim.shape, prim.dtype)
        runners.copy_into(self, out, 0, out.strides, prim)
        out.range = prim.range
        return out

    def dense(self, prim):
        """prim itself when it is dense (at any offset), else a dense copy."""
        return prim if is_dense(prim.shape, prim.strides) else self.dense_copy(prim)

    # ---- introspection ---------------------------------------------------------------------
    def memory_stats(self):
        """Bytes and buffers in use and cached by this instance's strategy, and peaks."""
        return self.pool.stats()

    def stats(self):
        """What the device did: dispatches, submissions, reads, compiled kernels, ..."""
        return self.device.stats()

    def trim(self):
        """Release the pool's cached buffers; returns the bytes released."""
        return self.pool.trim()


def _default_bridge():
    import sys
    return "browser" if sys.platform == "emscripten" else "native"



__all__ = ["Wgpu", "custom_op", "register_kernel"]
