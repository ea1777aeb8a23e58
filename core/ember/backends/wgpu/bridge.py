"""The bridge: the few WebGPU calls the Wgpu backend needs, implemented once per platform.

The host logic (buffer pool, pipeline cache, kernel generation, command batching) is written
once, in this package, against this small interface; `bridge_native` implements it with
wgpu-py (Vulkan / Metal / DX12, lavapipe on CPU-only machines) and `bridge_browser` with the
page's `navigator.gpu` through Pyodide. The interface is shaped by the browser's costs: every
Python->JS call costs microseconds, so the host hands a whole batch of dispatches to `submit`
in one call (one command encoder, one compute pass, one queue submission), and reading back
is asynchronous first (`read_async`); `read` may block only where the platform can.

The calling conventions every kernel shares (so that a batch is plain data):

- Bind group 0 holds one binding: `info`, a read-only storage buffer of i32 words (shapes,
  strides, offsets, scalars), bound with a dynamic offset of `k * META_BLOCK` bytes into the
  batch's meta buffer. Kernels read their parameters there, never from constants, so one
  compiled kernel serves every shape.
- Bind group 1 holds the data buffers, in the order of the kernel's `signature`: a tuple of
  "w" (read-write storage) and "r" (read-only storage).

A batch is `(meta, commands)`: `meta`, bytes-like, META_BLOCK bytes per command, and
`commands`, a list of `(pipeline, buffers, meta_offset, (x, y, z), cache)` tuples, where
`pipeline` comes from `pipeline()`, `buffers` is a tuple of buffers from `create_buffer()` in
signature order, `(x, y, z)` the workgroup counts, and `cache` says whether the bridge may
keep the bind group for these buffers (pooled buffers recur step after step; a bind group
keeps its buffers alive, so buffers that are released on death are never cached).
"""

META_BLOCK = 512  # bytes of `info` per dispatch: 128 i32 words
META_WORDS = META_BLOCK // 4


class Bridge:
    """One WebGPU device. Subclasses implement every method below."""

    name = "?"            # "vulkan: llvmpipe (LLVM 15.0.6, 256 bits)", for str(Wgpu())
    is_cpu = False        # a CPU adapter (lavapipe, SwiftShader): kernels are picked for it
    limits = {}           # "max_storage_binding", "offset_alignment", "workgroup_storage", ...
    can_block = True      # False where read() cannot wait (a browser without JSPI)

    def create_buffer(self, nbytes):
        """A storage buffer (also a copy source and destination) of `nbytes` bytes."""
        raise NotImplementedError

    def destroy_buffer(self, buffer):
        """Release a buffer no queued command uses any more."""
        raise NotImplementedError

    def write(self, buffer, offset, data):
        """queue.writeBuffer: ordered before every command submitted after this call."""
        raise NotImplementedError

    def read(self, buffer, offset, nbytes):
        """The bytes of a buffer range, after all submitted work (blocking)."""
        raise NotImplementedError

    async def read_async(self, buffer, offset, nbytes):
        """The bytes of a buffer range, after all submitted work (awaitable)."""
        raise NotImplementedError

    def pipeline(self, source, entry, signature):
        """A compute pipeline for WGSL `source` (`entry` point) with the bind groups above."""
        raise NotImplementedError

    def submit(self, meta, commands):
        """Record the commands in one compute pass and submit them. Returns a token for
        wait(), or None where the platform cannot wait for one submission alone."""
        raise NotImplementedError

    def wait(self, token=None):
        """Block until the GPU has finished the submission `submit` returned `token` for (and
        everything before it); with None, everything submitted."""
        raise NotImplementedError

    def forget_bind_groups(self):
        """Drop cached bind groups (they keep their buffers alive)."""
