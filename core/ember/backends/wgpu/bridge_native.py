"""The native bridge: WebGPU through wgpu-py (wgpu-native over Vulkan, Metal or DX12).

Picks the best adapter wgpu-py offers (a discrete GPU over an integrated one over a CPU
one); `EMBER_WGPU_ADAPTER=<text>` picks the first adapter whose description contains the text
(e.g. "llvmpipe"). On a machine without a GPU, Mesa's lavapipe (`apt-get install
mesa-vulkan-drivers`) runs the same kernels on the CPU.

wgpu-py 0.32: `queue.on_submitted_work_done_sync()` raises a cffi TypeError (upstream issue
834); waiting is wgpu-native's wgpuDevicePoll (1.3 us on an H200 where reading a few bytes
back, the fallback without the raw entry points, took 154 us).
"""

import os
from collections import OrderedDict

from ...errors import BackendError
from .bridge import META_BLOCK, Bridge

_BIND_GROUP_CACHE = 4096

try:  # wgpu-native's raw entry points (pinned wgpu-py 0.32); the public API otherwise
    from wgpu.backends.wgpu_native._api import libf as _libf
    from wgpu.backends.wgpu_native._ffi import ffi as _ffi
    from wgpu.backends.wgpu_native._ffi import lib as _lib
    _RAW = (_ffi, _lib, _libf)
except Exception:  # pragma: no cover
    _RAW = None


def _import_wgpu():
    try:
        import wgpu
    except ImportError as e:
        raise BackendError(
            "Wgpu needs wgpu-py: pip install 'ember[wgpu]' (wgpu==0.32.0), plus a Vulkan, Metal "
            "or DX12 driver; without a GPU, Mesa's lavapipe (apt-get install mesa-vulkan-drivers)"
        ) from e
    return wgpu


class Pipeline:
    __slots__ = ("handle", "signature", "layout", "raw")

    def __init__(self, handle, signature, layout):
        self.handle, self.signature, self.layout = handle, signature, layout
        self.raw = getattr(handle, "_internal", None)  # wgpu-native's handle, for _record_raw


def _pick_adapter(wgpu):
    wanted = os.environ.get("EMBER_WGPU_ADAPTER", "").strip().lower()
    if wanted:
        for adapter in wgpu.gpu.enumerate_adapters_sync():
            if wanted in adapter.summary.lower():
                return adapter
        names = "; ".join(a.summary for a in wgpu.gpu.enumerate_adapters_sync())
        raise BackendError(f"EMBER_WGPU_ADAPTER={wanted!r} matches no adapter; found: {names}")
    adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    if adapter is None:
        raise BackendError("Wgpu: no WebGPU adapter found; install a Vulkan driver (without a "
                           "GPU: apt-get install mesa-vulkan-drivers for lavapipe)")
    return adapter


class NativeBridge(Bridge):
    def __init__(self):
        os.environ.setdefault("MESA_SHADER_CACHE_MAX_SIZE", "1G")
        wgpu = _import_wgpu()
        self._wgpu = wgpu
        adapter = _pick_adapter(wgpu)
        info = adapter.info
        lim = adapter.limits
        wanted = ("max-storage-buffer-binding-size", "max-buffer-size",
                  "max-compute-workgroup-storage-size", "max-compute-invocations-per-workgroup",
                  "max-compute-workgroup-size-x", "max-compute-workgroup-size-y",
                  "max-storage-buffers-per-shader-stage")
        self.device = adapter.request_device_sync(
            required_limits={k: lim[k] for k in wanted if k in lim})
        self.queue = self.device.queue
        dev = self.device.limits
        self.limits = {
            "max_storage_binding": dev["max-storage-buffer-binding-size"],
            "max_buffer": dev["max-buffer-size"],
            "offset_alignment": dev["min-storage-buffer-offset-alignment"],
            "workgroup_storage": dev["max-compute-workgroup-storage-size"],
            "invocations": dev["max-compute-invocations-per-workgroup"],
            "max_workgroups": dev["max-compute-workgroups-per-dimension"],
        }
        self.name = f"{info['backend_type'].lower()}: {info['device']}"
        self.is_cpu = info.get("adapter_type", "").lower() == "cpu"
        self.adapter_info = dict(info)
        self._usage = (wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC
                       | wgpu.BufferUsage.COPY_DST)
        stage = wgpu.ShaderStage.COMPUTE
        self._meta_layout = self.device.create_bind_group_layout(entries=[
            {"binding": 0, "visibility": stage,
             "buffer": {"type": "read-only-storage", "has_dynamic_offset": True}}])
        self._layouts = {}  # signature -> (bind group layout, pipeline layout)
        self._bind_groups = OrderedDict()
        self._meta_buffer = None
        self._meta_group = None
        self._ensure_meta(META_BLOCK * 256)
        self._probe = self.device.create_buffer(size=16, usage=self._usage)

    # ---- buffers -------------------------------------------------------------------------
    def create_buffer(self, nbytes):
        return self.device.create_buffer(size=max(16, nbytes), usage=self._usage)

    def destroy_buffer(self, buffer):
        buffer.destroy()

    def write(self, buffer, offset, data):
        self.queue.write_buffer(buffer, offset, data)

    def read(self, buffer, offset, nbytes):
        return self.queue.read_buffer(buffer, offset, nbytes)

    async def read_async(self, buffer, offset, nbytes):
        wgpu = self._wgpu
        tmp = self.device.create_buffer(size=nbytes,
                                        usage=wgpu.BufferUsage.COPY_DST | wgpu.BufferUsage.MAP_READ)
        encoder = self.device.create_command_encoder()
        encoder.copy_buffer_to_buffer(buffer, offset, tmp, 0, nbytes)
        self.queue.submit([encoder.finish()])
        await tmp.map_async("READ")
        data = tmp.read_mapped()
        tmp.unmap()
        tmp.destroy()
        return data

    def wait(self, token=None):
        if _RAW is not None:  # blocks until that submission (or the last) is done: no read-back
            ffi = _RAW[0]
            index = ffi.NULL if token is None else ffi.new("WGPUSubmissionIndex[1]", [token])
            _RAW[2].wgpuDevicePoll(self.device._internal, True, index)
        else:
            self.queue.read_buffer(self._probe, 0, 4)

    # ---- pipelines -------------------------------------------------------------------------
    def _layout(self, signature):
        found = self._layouts.get(signature)
        if found is None:
            stage = self._wgpu.ShaderStage.COMPUTE
            group = self.device.create_bind_group_layout(entries=[
                {"binding": i, "visibility": stage,
                 "buffer": {"type": "storage" if access == "w" else "read-only-storage"}}
                for i, access in enumerate(signature)])
            layout = self.device.create_pipeline_layout(
                bind_group_layouts=[self._meta_layout, group])
            found = self._layouts[signature] = (group, layout)
        return found

    def pipeline(self, source, entry, signature):
        group, layout = self._layout(signature)
        module = self.device.create_shader_module(code=source)
        handle = self.device.create_compute_pipeline(
            layout=layout, compute={"module": module, "entry_point": entry})
        return Pipeline(handle, signature, group)

    # ---- batches -----------------------------------------------------------------------------
    def _ensure_meta(self, nbytes):
        if self._meta_buffer is not None and self._meta_buffer.size >= nbytes:
            return
        size = max(nbytes, 2 * (self._meta_buffer.size if self._meta_buffer else 0))
        self._meta_buffer = self.device.create_buffer(size=size, usage=self._usage)
        self._meta_written = None  # what the meta buffer holds (a submit may skip its write)
        self._meta_group = self.device.create_bind_group(layout=self._meta_layout, entries=[
            {"binding": 0, "resource": {"buffer": self._meta_buffer, "offset": 0,
                                        "size": META_BLOCK}}])

    def _bind_group(self, pipeline, buffers, cache):
        """(bind group, its wgpu-native handle) for the buffers, cached where `cache` allows."""
        if not cache:
            group = self.device.create_bind_group(layout=pipeline.layout, entries=[
                {"binding": i, "resource": b} for i, b in enumerate(buffers)])
            return group, getattr(group, "_internal", None)
        # the key holds the buffers themselves (hashed by identity): a buffer's identity cannot
        # be reused while its entry lives
        key = (pipeline.layout, buffers)
        cached = self._bind_groups.get(key)
        if cached is not None:
            self._bind_groups.move_to_end(key)
            return cached
        group = self.device.create_bind_group(layout=pipeline.layout, entries=[
            {"binding": i, "resource": b} for i, b in enumerate(buffers)])
        cached = self._bind_groups[key] = (group, getattr(group, "_internal", None))
        if len(self._bind_groups) > _BIND_GROUP_CACHE:
            self._bind_groups.popitem(last=False)
        return cached

    def forget_bind_groups(self):
        self._bind_groups.clear()

    def submit(self, meta, commands):
        self._ensure_meta(len(meta))
        if _RAW is not None:
            return self._submit_raw(meta, commands)
        self.queue.write_buffer(self._meta_buffer, 0, meta)
        encoder = self.device.create_command_encoder()
        compute = encoder.begin_compute_pass()
        meta_group, last = self._meta_group, None
        for pipeline, buffers, offset, groups, cache in commands:
            if pipeline is not last:
                compute.set_pipeline(pipeline.handle)
                last = pipeline
            compute.set_bind_group(0, meta_group, (offset,))
            compute.set_bind_group(1, self._bind_group(pipeline, buffers, cache)[0])
            compute.dispatch_workgroups(*groups)
        compute.end()
        self.queue.submit([encoder.finish()])
        return None  # (wgpu-py's submit gives no submission index: wait() waits for all)

    def _submit_raw(self, meta, commands):
        # the same calls through wgpu-native's entry points, without wgpu-py's descriptor
        # structs and wrapper objects (tens of microseconds a submission). The calls that can
        # fail go through `libf`, wgpu-py's error capture, so errors still raise; the meta
        # write is skipped when the buffer holds these bytes already (a replayed plan, a
        # kernel called again with the same shapes): no staging copy before the pass
        ffi, lib, libf = _RAW
        meta = bytes(meta)
        if meta != self._meta_written:
            libf.wgpuQueueWriteBuffer(self.queue._internal, self._meta_buffer._internal, 0,
                                      ffi.from_buffer("uint8_t[]", meta), len(meta))
            self._meta_written = meta
        encoder = libf.wgpuDeviceCreateCommandEncoder(self.device._internal, ffi.NULL)
        try:
            compute = libf.wgpuCommandEncoderBeginComputePass(encoder, ffi.NULL)
            try:
                groups_used = self._record_raw(compute, commands)
                libf.wgpuComputePassEncoderEnd(compute)
            finally:
                lib.wgpuComputePassEncoderRelease(compute)
            done = libf.wgpuCommandEncoderFinish(encoder, ffi.NULL)
        finally:
            lib.wgpuCommandEncoderRelease(encoder)
        try:  # (the index lets the device wait for this submission alone)
            index = libf.wgpuQueueSubmitForIndex(self.queue._internal, 1,
                                                 ffi.new("WGPUCommandBuffer[1]", [done]))
        finally:
            lib.wgpuCommandBufferRelease(done)
        del groups_used
        return index

    def _record_raw(self, compute, commands):
        # wgpu-py wraps every native call in Python error capture (~15 us a call, three calls a
        # dispatch); recording calls report their errors through the encoder, which finish()
        # raises, so the hot loop calls wgpu-native directly, with the handles looked up once
        # (a pipeline's at its creation, a bind group's with the group: ~1 us a dispatch less)
        ffi, lib, _ = _RAW
        offsets = ffi.new("uint32_t[]", [c[2] for c in commands])
        set_pipeline = lib.wgpuComputePassEncoderSetPipeline
        set_group = lib.wgpuComputePassEncoderSetBindGroup
        dispatch = lib.wgpuComputePassEncoderDispatchWorkgroups
        bind_group, null = self._bind_group, ffi.NULL
        encoder = compute
        meta_group = self._meta_group._internal
        groups_used, last = [], None  # keeps the bind groups alive until the submission
        for k, (pipeline, buffers, _, groups, cache) in enumerate(commands):
            if pipeline is not last:
                set_pipeline(encoder, pipeline.raw)
                last = pipeline
            set_group(encoder, 0, meta_group, 1, offsets + k)
            group = bind_group(pipeline, buffers, cache)
            groups_used.append(group)
            set_group(encoder, 1, group[1], 0, null)
            dispatch(encoder, *groups)
        return groups_used
