# Runs inside Pyodide (in ember's worker), after models.py: loads a model on a backend and times
# batch-1 forwards (forward + read-back to NumPy, as the demos do). Prints one RESULT line.
import base64
import json
import time

import numpy as np

import ember
from ember import Tensor, record

_models, _backends = {}, {"cpu": None}


async def _backend(name):
    if name not in _backends:
        from ember.backend import Wgpu
        from ember.backends.wgpu import bridge_browser
        await bridge_browser.request_device()
        _backends[name] = Wgpu()
    return _backends[name]


async def _model(model, backend_name, weights_url):
    key = (model, backend_name)
    if key not in _models:
        backend = await _backend(backend_name)
        if model == "mnist":
            m = ember.models.load("mnist", backend=backend)
        else:
            from pyodide.http import pyfetch
            path = f"/tmp/{model}.safetensors"
            with open(path, "wb") as f:
                f.write(await (await pyfetch(weights_url)).bytes())
            m = SqueezeNet(backend=backend)  # noqa: F821 (defined by models.py, run before this)
            record.load(m, path)
            m.eval()
        _models[key] = ember.jit(m)  # as the demos run it: replayed from the third call on
    return _models[key]


async def bench(model, backend_name, x_b64, shape, warmup, runs, budget_s, weights_url=None):
    m = await _model(model, backend_name, weights_url)
    backend = _backends[backend_name]
    x = np.frombuffer(base64.b64decode(x_b64), dtype=np.float32).reshape(shape)

    async def once():
        return await m(Tensor.from_data(x, backend=backend)).to_numpy_async()

    t0 = time.perf_counter()
    out = await once()
    first_ms = (time.perf_counter() - t0) * 1e3
    for _ in range(warmup - 1):
        await once()
    times, start = [], time.perf_counter()
    while len(times) < runs and (len(times) < 3 or time.perf_counter() - start < budget_s):
        t0 = time.perf_counter()
        await once()
        times.append((time.perf_counter() - t0) * 1e3)
    from ember.backends import wasm  # which WebAssembly kernels NdArray runs on (None: NumPy)
    print("RESULT" + json.dumps({"output": base64.b64encode(
        np.ascontiguousarray(out, dtype=np.float32).tobytes()).decode(),
        "times": times, "first_ms": first_ms, "kernels": wasm.variant()}))
