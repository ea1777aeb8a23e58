"""The device: one per process and bridge, shared by every Wgpu() instance (equal backends
share tensors, so they must share buffers).

It records dispatches into a batch (their `info` words in one host buffer, the commands in a
list) and submits the batch in one call when a read needs the results, when the batch is full
(`max_batch` dispatches), or on sync(); a compiled plan is submitted at once, or joins the
batch while the GPU has work queued (`gather`). Nothing waits on the GPU except a read, a
sync, and the window of submissions in flight (`max_in_flight`). It caches
compiled pipelines by kernel key, and counts what it does (`stats()`). While a plan is being
compiled (plan.py), `recording` takes the dispatches instead, and reads and writes refuse.
"""

import struct
import threading
from collections import deque

from .bridge import META_BLOCK, META_WORDS
from .plan import Unrecordable
from .pool import Pool

_PACKERS = {}


def _packer(n):
    p = _PACKERS.get(n)
    if p is None:
        p = _PACKERS[n] = struct.Struct(f"<{n}i").pack_into
    return p


class Device:
    max_batch = 256      # dispatches per submission
    # Python must not run far ahead of the GPU: at `max_in_flight` submissions not waited for,
    # wait until half of them are done, not all: a full drain leaves the GPU idle while the
    # next submissions are encoded (on an H200, a LayerNorm replay a submission: 0.124 ms a
    # call with full drains, 0.112 with a half window; the kernel alone is 0.103)
    max_in_flight = 16
    # Each submission also costs GPU time of its own (~20 us on an H200, fitted from LayerNorm
    # replays over [8192, 4096], a 0.102 ms kernel, at 20 and 100 calls a sync): while
    # `gather_after` submissions are queued, the GPU is busy, and a plan waits in the open
    # batch until `gather` plans share one submission. With fewer queued (after a read or a
    # sync, when the GPU may be idle) a plan goes at once. The queued work must outlast the
    # gathering: 4 after 6 held where a replay took the host 0.04-0.05 ms; 8 after 4 left the
    # GPU idle at 0.07 ms (H200, 20 calls a sync: LayerNorm 0.115 ms a call against 0.131).
    gather_after = 6
    gather = 4

    def __init__(self, bridge):
        self.bridge = bridge
        self.name = bridge.name
        self.lock = threading.RLock()
        self.block = max(META_BLOCK, bridge.limits.get("offset_alignment", 256))
        self._meta = bytearray(self.block * self.max_batch)
        self._commands = []
        self._plans = 0             # plans gathered into the open batch
        self._used = set()          # buffers bound since the last submission
        self._doomed = []           # buffers to destroy once the open batch is submitted
        self._in_flight = deque()  # the bridge's tokens of the submissions not waited for
        self.recording = None       # a plan.Recording while Wgpu.compile records a plan
        self.kernels = {}           # kernel key -> Kernel
        self.pools = {}
        self.counters = dict(dispatches=0, submits=0, reads=0, writes=0, pipelines=0,
                             host_fallbacks=0, index_checks_read_back=0)

    def pool(self, strategy):
        with self.lock:
            if strategy not in self.pools:
                self.pools[strategy] = Pool(self, strategy)
            return self.pools[strategy]

    # ---- recording -----------------------------------------------------------------------
    def dispatch(self, kernel, buffers, words, groups, cache=True):
        """Record one dispatch of `kernel` over `buffers` (GPU buffers in the kernel's
        signature order) with `words` (ints) as its `info`, on (x, y, z) workgroups."""
        if len(words) > META_WORDS:
            raise ValueError(f"{kernel.name}: {len(words)} info words, at most {META_WORDS} "
                             "(too many dims?)")
        with self.lock:
            if self.recording is not None:
                self.recording.commands.append((kernel, buffers, words, groups, cache))
                return
            n = len(self._commands)
            offset = n * self.block
            _packer(len(words))(self._meta, offset, *words)
            self._commands.append((kernel.pipeline, buffers, offset, groups, cache))
            self._used.update(buffers)
            self.counters["dispatches"] += 1
            if n + 1 >= self.max_batch:
                self.flush()

    def flush(self):
        """Submit the open batch (does not wait for it)."""
        with self.lock:
            if not self._commands:
                return
            commands, self._commands = self._commands, []
            self._used = set()
            self._plans = 0
            self._submitted(self.bridge.submit(
                memoryview(self._meta)[: len(commands) * self.block], commands))
            doomed, self._doomed = self._doomed, []
            for gpu in doomed:  # WebGPU destroys a buffer once submitted work using it is done
                self.bridge.destroy_buffer(gpu)

    def submit_plan(self, meta, commands):
        """Submit a compiled plan's commands (plan.py) after the open batch, in one call, or
        add them to the open batch while the GPU is busy (see gather)."""
        with self.lock:
            n = len(self._commands)
            if len(self._in_flight) < self.gather_after or n + len(commands) > self.max_batch:
                self.flush()
                if commands:
                    self.counters["dispatches"] += len(commands)
                    self._submitted(self.bridge.submit(meta, commands))
                return
            block = self.block  # (a plan's meta holds command k's words at k * block, too)
            self._meta[n * block:(n + len(commands)) * block] = meta
            for k, (pipeline, buffers, _, groups, cache) in enumerate(commands, n):
                self._commands.append((pipeline, buffers, k * block, groups, cache))
                self._used.update(buffers)
            self.counters["dispatches"] += len(commands)
            self._plans += 1
            if self._plans >= self.gather:
                self.flush()

    def _submitted(self, token):
        """Count a submission; at max_in_flight, wait for the older half (see max_in_flight)."""
        self.counters["submits"] += 1
        if not self.bridge.can_block:  # (a page: it never waits, the browser paces it)
            return
        in_flight = self._in_flight
        in_flight.append(token)
        if len(in_flight) < self.max_in_flight:
            return
        keep = self.max_in_flight // 2
        older = in_flight[-1 - keep]
        if older is None:  # a bridge without tokens: everything
            self.bridge.wait()
            in_flight.clear()
            return
        self.bridge.wait(older)
        for _ in range(len(in_flight) - keep):
            in_flight.popleft()

    def sync(self):
        with self.lock:
            self.flush()
            if self.bridge.can_block:
                self.bridge.wait()
            self._in_flight.clear()

    def release_buffer(self, gpu):
        """Destroy a buffer nothing refers to any more (after the open batch, if it uses it)."""
        with self.lock:
            if gpu in self._used:
                self._doomed.append(gpu)
            else:
                self.bridge.destroy_buffer(gpu)

    # ---- data in and out ---------------------------------------------------------------------
    def _refuse_while_recording(self, what):
        if self.recording is not None:
            raise Unrecordable(what)

    def upload(self, gpu, data):
        with self.lock:
            self._refuse_while_recording("a host write")
            if gpu in self._used:  # freed and handed out again within the open batch
                self.flush()
            self.bridge.write(gpu, 0, data)
            self.counters["writes"] += 1

    def read(self, gpu, offset, nbytes):
        with self.lock:
            self._refuse_while_recording("a read-back")
            self.flush()
            self._in_flight.clear()  # (a read waits for everything before it)
            self.counters["reads"] += 1
            return self.bridge.read(gpu, offset, nbytes)

    async def read_async(self, gpu, offset, nbytes):
        with self.lock:
            self._refuse_while_recording("a read-back")
            self.flush()
            self._in_flight.clear()  # (a read waits for everything before it)
            self.counters["reads"] += 1
        return await self.bridge.read_async(gpu, offset, nbytes)

    def stats(self):
        return dict(self.counters, kernels=len(self.kernels),
                    pending_dispatches=len(self._commands))


_DEVICES = {}
_LOCK = threading.Lock()


def get_device(bridge_name="native"):
    """The process's device for a bridge ("native" or "browser"), created on first use."""
    with _LOCK:
        device = _DEVICES.get(bridge_name)
        if device is None:
            if bridge_name == "native":
                from .bridge_native import NativeBridge
                bridge = NativeBridge()
            elif bridge_name == "browser":
                from .bridge_browser import BrowserBridge
                bridge = BrowserBridge()
            else:
                raise ValueError(f"unknown bridge {bridge_name!r}")
            device = _DEVICES[bridge_name] = Device(bridge)
        return device
