"""The browser bridge: WebGPU through the page's (or worker's) `navigator.gpu`, inside Pyodide.

    from ember.backends.wgpu import bridge_browser
    await bridge_browser.request_device()     # once: a browser creates devices asynchronously
    B = Wgpu()                                 # 'Wgpu<webgpu: google swiftshader>'
    y = await (x @ w).to_numpy_async()         # reading back is asynchronous in a browser

Every Python -> JS call costs microseconds (PLATFORM.md), so the bridge keeps the JS side's
objects (buffers, pipelines, bind groups) in a small JS helper (`_HELPER_JS`, created at
`request_device()`) and talks to it in integers: a buffer or a pipeline is an id, and a whole
batch of dispatches crosses the boundary in one call as two byte arrays (the `info` words and
the commands). Descriptors are built in JS, so Pyodide's dict conversion (PLATFORM.md: always
`Object.fromEntries`) is needed only for the device request.

A browser cannot wait for the GPU: `to_numpy()` works only where JS promise integration lets
Pyodide block (`pyodide.ffi.run_sync`); elsewhere it raises a BackendError that names
`await tensor.to_numpy_async()`. Where it cannot block, index bounds that are not known on the
host (indices computed on the GPU) are not checked (WebGPU clamps out-of-range reads).
"""

from ...errors import BackendError
from .bridge import META_BLOCK, Bridge

_HELPER_JS = r"""
(device) => {
  const STAGE = GPUShaderStage.COMPUTE;
  const USAGE = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;
  const META_BLOCK = META_BLOCK_BYTES;
  const buffers = new Map();
  const pipelines = [];
  const layouts = new Map();
  const groups = new Map();  // "signature:id,id,..." -> {group, ids}; insertion order = age
  let nextId = 1;
  const metaLayout = device.createBindGroupLayout({entries: [{binding: 0, visibility: STAGE,
    buffer: {type: "read-only-storage", hasDynamicOffset: true}}]});
  let metaBuffer = null, metaGroup = null;
  const errors = [];  // WebGPU reports errors asynchronously: kept for the next read
  device.addEventListener("uncapturederror", (e) => errors.push(e.error.message));
  function layoutFor(signature) {
    let found = layouts.get(signature);
    if (!found) {
      const group = device.createBindGroupLayout({entries: Array.from(signature, (a, i) => ({
        binding: i, visibility: STAGE,
        buffer: {type: a === "w" ? "storage" : "read-only-storage"}}))});
      found = {group, layout: device.createPipelineLayout({bindGroupLayouts: [metaLayout, group]})};
      layouts.set(signature, found);
    }
    return found;
  }
  return {
    createBuffer(size) {
      const id = nextId++;
      buffers.set(id, device.createBuffer({size: Math.max(16, size), usage: USAGE}));
      return id;
    },
    destroyBuffer(id) {
      const b = buffers.get(id);
      if (b) { b.destroy(); buffers.delete(id); }
      for (const [key, v] of groups) if (v.ids.includes(id)) groups.delete(key);
    },
    write(id, offset, bytes) { device.queue.writeBuffer(buffers.get(id), offset, bytes); },
    async read(id, offset, size) {
      const tmp = device.createBuffer({size,
                                       usage: GPUBufferUsage.COPY_DST | GPUBufferUsage.MAP_READ});
      const encoder = device.createCommandEncoder();
      encoder.copyBufferToBuffer(buffers.get(id), offset, tmp, 0, size);
      device.queue.submit([encoder.finish()]);
      await tmp.mapAsync(GPUMapMode.READ);
      const out = new Uint8Array(tmp.getMappedRange().slice(0));  // copied before unmap
      tmp.unmap();
      tmp.destroy();
      return out;
    },
    async wait() { await device.queue.onSubmittedWorkDone(); },
    takeErrors() { return errors.splice(0).join("\n"); },
    pipeline(code, entry, signature) {
      const {layout, group} = layoutFor(signature);
      const module = device.createShaderModule({code});
      const pipeline = device.createComputePipeline({layout, compute: {module, entryPoint: entry}});
      pipelines.push({pipeline, group, signature});
      return pipelines.length - 1;
    },
    async checkedPipeline(code, entry, signature) {  // where Python can wait: errors raise
      const {layout, group} = layoutFor(signature);
      const module = device.createShaderModule({code});
      const pipeline = await device.createComputePipelineAsync(
        {layout, compute: {module, entryPoint: entry}});
      pipelines.push({pipeline, group, signature});
      return pipelines.length - 1;
    },
    forgetGroups() { groups.clear(); },
    submit(meta, commands) {
      if (!metaBuffer || metaBuffer.size < meta.byteLength) {
        const size = Math.max(meta.byteLength, 2 * (metaBuffer ? metaBuffer.size : 0),
                              META_BLOCK * 256);
        metaBuffer = device.createBuffer({size, usage: USAGE});
        metaGroup = device.createBindGroup({layout: metaLayout, entries: [
          {binding: 0, resource: {buffer: metaBuffer, offset: 0, size: META_BLOCK}}]});
      }
      device.queue.writeBuffer(metaBuffer, 0, meta);
      const words = new Int32Array(commands.buffer, commands.byteOffset, commands.byteLength >> 2);
      const encoder = device.createCommandEncoder();
      const pass = encoder.beginComputePass();
      let last = -1;
      for (let i = 0; i < words.length;) {
        const p = words[i], offset = words[i + 1], cache = words[i + 5], n = words[i + 6];
        const ids = Array.from(words.subarray(i + 7, i + 7 + n));
        const entry = pipelines[p];
        if (p !== last) { pass.setPipeline(entry.pipeline); last = p; }
        pass.setBindGroup(0, metaGroup, [offset]);
        const key = entry.signature + ":" + ids.join(",");
        let found = cache ? groups.get(key) : undefined;
        if (!found) {
          found = {ids, group: device.createBindGroup({layout: entry.group, entries: ids.map(
            (id, b) => ({binding: b, resource: {buffer: buffers.get(id)}}))})};
          if (cache) {
            groups.set(key, found);
            if (groups.size > 4096) groups.delete(groups.keys().next().value);
          }
        }
        pass.setBindGroup(1, found.group);
        pass.dispatchWorkgroups(words[i + 2], words[i + 3], words[i + 4]);
        i += 7 + n;
      }
      pass.end();
      device.queue.submit([encoder.finish()]);
    },
  };
}
""".replace("META_BLOCK_BYTES", str(META_BLOCK))

_STATE = {}


async def request_device(power_preference="high-performance"):
    """Create the WebGPU device for Wgpu() in this page or worker (once; later calls return
    at once). Raises BackendError where the browser has no WebGPU."""
    if _STATE:
        return _STATE["name"]
    import js
    from pyodide.code import run_js
    from pyodide.ffi import to_js

    gpu = getattr(js.navigator, "gpu", None)
    if gpu is None:
        raise BackendError("Wgpu: this browser has no WebGPU (navigator.gpu is missing); use "
                           "NdArray(), or a browser with WebGPU enabled")
    adapter = await gpu.requestAdapter(to_js({"powerPreference": power_preference},
                                             dict_converter=js.Object.fromEntries))
    if adapter is None:
        raise BackendError("Wgpu: navigator.gpu.requestAdapter() found no adapter")
    lim = adapter.limits
    wanted = {k: getattr(lim, k) for k in ("maxStorageBufferBindingSize", "maxBufferSize",
                                            "maxComputeWorkgroupStorageSize",
                                            "maxComputeInvocationsPerWorkgroup",
                                            "maxStorageBuffersPerShaderStage")}
    device = await adapter.requestDevice(to_js({"requiredLimits": wanted},
                                               dict_converter=js.Object.fromEntries))
    info = getattr(adapter, "info", None)
    vendor = str(getattr(info, "vendor", "") or "") if info is not None else ""
    arch = str(getattr(info, "architecture", "") or "") if info is not None else ""
    fallback = bool(getattr(adapter, "isFallbackAdapter", False)) or bool(
        getattr(info, "isFallbackAdapter", False))
    _STATE.update(
        helper=run_js(_HELPER_JS)(device), device=device,
        name=f"webgpu: {' '.join(p for p in (vendor, arch) if p) or 'adapter'}",
        is_cpu=fallback or "swiftshader" in arch.lower(),
        limits={
            "max_storage_binding": int(device.limits.maxStorageBufferBindingSize),
            "max_buffer": int(device.limits.maxBufferSize),
            "offset_alignment": int(device.limits.minStorageBufferOffsetAlignment),
            "workgroup_storage": int(device.limits.maxComputeWorkgroupStorageSize),
            "invocations": int(device.limits.maxComputeInvocationsPerWorkgroup),
            "max_workgroups": int(device.limits.maxComputeWorkgroupsPerDimension),
        })
    return _STATE["name"]


def _can_block():
    try:
        from pyodide.ffi import can_run_sync
        return bool(can_run_sync())
    except Exception:  # an older Pyodide: no JS promise integration
        return False


class Pipeline:
    __slots__ = ("id", "signature")

    def __init__(self, id, signature):  # noqa: A002
        self.id, self.signature = id, signature


class BrowserBridge(Bridge):
    def __init__(self):
        if not _STATE:
            raise BackendError(
                "Wgpu in the browser: create the WebGPU device first, with `await "
                "ember.backends.wgpu.bridge_browser.request_device()` (a browser creates devices "
                "asynchronously)")
        self._js = _STATE["helper"]
        self.name = _STATE["name"]
        self.is_cpu = _STATE["is_cpu"]
        self.limits = dict(_STATE["limits"])
        self.can_block = _can_block()

    @staticmethod
    def _bytes(data):
        from pyodide.ffi import to_js
        return to_js(memoryview(data).cast("B"))

    def create_buffer(self, nbytes):
        return int(self._js.createBuffer(nbytes))

    def destroy_buffer(self, buffer):
        self._js.destroyBuffer(buffer)

    def write(self, buffer, offset, data):
        self._js.write(buffer, offset, self._bytes(data))

    def _raise_errors(self):
        errors = str(self._js.takeErrors())
        if errors:
            raise BackendError(f"Wgpu: WebGPU reported: {errors}")

    async def read_async(self, buffer, offset, nbytes):
        data = await self._js.read(buffer, offset, nbytes)
        self._raise_errors()
        return data.to_bytes()

    def read(self, buffer, offset, nbytes):
        if not self.can_block:
            raise BackendError(
                "Wgpu in the browser: to_numpy() cannot wait for the GPU here (no JS promise "
                "integration); use `await tensor.to_numpy_async()`")
        from pyodide.ffi import run_sync
        return run_sync(self.read_async(buffer, offset, nbytes))

    def wait(self, token=None):  # (submit returns no tokens here: always everything)
        if self.can_block:
            from pyodide.ffi import run_sync
            run_sync(self._js.wait())

    def pipeline(self, source, entry, signature):
        if self.can_block:  # a shader that does not compile raises here, not at a later read
            from pyodide.ffi import JsException, run_sync
            try:
                id = run_sync(self._js.checkedPipeline(source, entry, "".join(signature)))  # noqa: A001
            except JsException as e:
                raise BackendError(f"Wgpu: WebGPU could not compile a kernel: {e}") from None
            return Pipeline(int(id), signature)
        return Pipeline(int(self._js.pipeline(source, entry, "".join(signature))), signature)

    def forget_bind_groups(self):
        self._js.forgetGroups()

    def submit(self, meta, commands):
        import array
        words = array.array("i")
        for pipeline, buffers, offset, groups, cache in commands:
            words.extend((pipeline.id, offset, *groups, int(cache), len(buffers), *buffers))
        self._js.submit(self._bytes(meta), self._bytes(words))
