# Top-level await: ask the page's WebGPU for an adapter (browser only)
import asyncio

import js  # the browser's JavaScript globals, through Pyodide

await asyncio.sleep(0.01)
gpu = getattr(js.navigator, "gpu", None)
if gpu is None:
    print("this browser has no WebGPU (navigator.gpu is undefined)")
else:
    adapter = await gpu.requestAdapter()
    if adapter is None:
        print("WebGPU present, but no adapter")
    else:
        info = adapter.info
        fallback = getattr(info, "isFallbackAdapter", None)  # newer browsers: on info
        print(f"WebGPU adapter: {info.vendor} / {info.architecture} (fallback: {fallback})")
        print("maxComputeInvocationsPerWorkgroup:",
              adapter.limits.maxComputeInvocationsPerWorkgroup)
