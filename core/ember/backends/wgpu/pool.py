"""GPU memory: buffers owned by prims, returned when the last prim using them dies.

`Storage` wraps one GPU buffer; every prim (and every view of it) refers to its Storage, so
CPython frees the Storage, and hands the buffer back, the moment the last tensor that can see
the data dies. Two strategies:

- "pool" (the default): freed buffers wait in size classes (four per power of two, so at most
  a quarter is wasted) and the next request of that class reuses one; a training loop reaches
  a steady state where no step allocates. `trim()` gives the cached buffers back.
- "exclusive": every request creates a buffer of its own size and every free destroys it (after
  the open batch, if that uses it); slower (buffer creation costs), the smallest footprint.

A buffer freed while the open batch still uses it can be handed out again at once: every use
of a buffer is a command of the same queue, executed in recording order. Only a host write
(queue.writeBuffer runs before the batch it is recorded in) must not target such a buffer;
the device flushes first in that case (see Device.upload).
"""

import threading


def size_class(nbytes):
    """The pool's size for a request: 256 bytes at least, else rounded up to a quarter step."""
    if nbytes <= 256:
        return 256
    step = 1 << max((nbytes - 1).bit_length() - 3, 0)
    return -(-nbytes // step) * step


class Storage:
    __slots__ = ("gpu", "nbytes", "pool", "__weakref__")

    def __init__(self, gpu, nbytes, pool):
        self.gpu, self.nbytes, self.pool = gpu, nbytes, pool

    def __del__(self):
        pool = self.pool
        if pool is not None:
            try:
                pool.release(self.gpu, self.nbytes)
            except Exception:  # interpreter shutdown: modules may already be gone
                pass


class Pool:
    def __init__(self, device, strategy):
        if strategy not in ("pool", "exclusive"):
            raise ValueError(f"Wgpu(memory={strategy!r}): expected 'pool' or 'exclusive'")
        self.device = device
        self.strategy = strategy
        self.reuse = strategy == "pool"
        self._free = {}
        # every buffer handed out stays reachable from here: a Storage caught in a garbage
        # cycle is finalized together with whatever only it reaches, and wgpu-py releases a
        # finalized buffer; returning that one to the pool would hand out a dead buffer
        self._owned = set()
        self._lock = threading.RLock()
        self.bytes_in_use = self.buffers_in_use = 0
        self.bytes_cached = self.buffers_cached = 0
        self.peak_bytes_in_use = self.peak_bytes_reserved = 0
        self.allocations = self.reuses = 0

    def take(self, nbytes):
        size = size_class(nbytes) if self.reuse else max(16, -(-nbytes // 16) * 16)
        gpu = None
        with self._lock:
            if self.reuse:
                free = self._free.get(size)
                if free:
                    gpu = free.pop()
                    self.reuses += 1
                    self.bytes_cached -= size
                    self.buffers_cached -= 1
            self.bytes_in_use += size
            self.buffers_in_use += 1
            if self.bytes_in_use > self.peak_bytes_in_use:
                self.peak_bytes_in_use = self.bytes_in_use
            reserved = self.bytes_in_use + self.bytes_cached
            if reserved > self.peak_bytes_reserved:
                self.peak_bytes_reserved = reserved
        if gpu is None:
            limit = self.device.bridge.limits.get("max_buffer")
            if limit is not None and size > limit:
                with self._lock:
                    self.bytes_in_use -= size
                    self.buffers_in_use -= 1
                # a MemoryError: the Tensor layer names the op and the shape
                raise MemoryError(f"a buffer of {size} bytes is over this device's "
                                  f"maxBufferSize ({limit})")
            gpu = self.device.bridge.create_buffer(size)
            self.allocations += 1
            with self._lock:
                self._owned.add(gpu)
        return Storage(gpu, size, self)

    def release(self, gpu, size):
        with self._lock:
            self.bytes_in_use -= size
            self.buffers_in_use -= 1
            if self.reuse:
                self._free.setdefault(size, []).append(gpu)
                self.bytes_cached += size
                self.buffers_cached += 1
            else:
                self._owned.discard(gpu)
        if not self.reuse:
            self.device.release_buffer(gpu)

    def trim(self):
        """Give every cached buffer back to the device; returns the bytes released."""
        self.device.flush()  # a cached buffer may still be bound in the open batch
        with self._lock:
            free, self._free = self._free, {}
            released = self.bytes_cached
            self.bytes_cached = self.buffers_cached = 0
            for buffers in free.values():
                self._owned.difference_update(buffers)
        self.device.bridge.forget_bind_groups()
        for buffers in free.values():
            for gpu in buffers:
                self.device.bridge.destroy_buffer(gpu)
        return released

    def stats(self):
        return {
            "strategy": self.strategy,
            "bytes_in_use": self.bytes_in_use,
            "buffers_in_use": self.buffers_in_use,
            "bytes_cached": self.bytes_cached,
            "buffers_cached": self.buffers_cached,
            "bytes_reserved": self.bytes_in_use + self.bytes_cached,
            "peak_bytes_in_use": self.peak_bytes_in_use,
            "peak_bytes_reserved": self.peak_bytes_reserved,
            "allocations": self.allocations,
            "reuses": self.reuses,
        }
