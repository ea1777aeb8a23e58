"""Batch-1 inference latency in headless Chromium: ember (Pyodide; cpu = NdArray, webgpu = Wgpu
on the browser's WebGPU) against onnxruntime-web (npm; wasm execution provider, 1 and 2
threads), on the same weights, for two models:

- mnist: the shipped ConvNet (`ember.models.load("mnist")`, 421,834 parameters);
- squeezenet: a SqueezeNet-1.1-sized CNN (fire modules, 1,235,496 parameters, 3x224x224 input),
  seeded random weights (He-normal), defined in bench/browser_inference/models.py.

The ONNX files are written with the `onnx` package's helper API from the same NumPy arrays that
ember loads (no torch export). Before timing, each ember output is checked against ORT's (1
thread) on the same input. Timing is done inside the page (ember: time.perf_counter in Pyodide
around forward + read-back to NumPy; ORT: performance.now around session.run with the read-back),
median of N runs after warm-up; slow cases stop early after a time budget (at least 3 runs).
ember runs each model under ember.jit, as the demos do: the warm-up's second call captures the
forward's ops, the timed calls replay them (at least two warm-up calls, so none is timed).

Here WebGPU is SwiftShader (a CPU emulation of a GPU): the webgpu column says nothing about a
real GPU. The site server sends COOP/COEP, so the page is cross-origin isolated and ORT can use
threads. Offline: onnxruntime-web is `npm pack`ed once into .cache/ember-site/downloads/.
"""

import base64
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent / "browser_inference"
ORT_VERSION = "1.30.0"
ORT_FILES = ("ort.wasm.min.mjs", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm")
SEED = 20261130
# measured anchors of issue 8 (same machine class): ORT-web wasm 1 thread; plain NumPy in Pyodide
ANCHORS = {"mnist": "Burn's MNIST web model: ORT 1 thread ~1.6 ms, NumPy in Pyodide ~6 ms",
           "squeezenet": "SqueezeNet 1.1: ORT 1 thread ~30 ms, NumPy in Pyodide ~250-430 ms"}


# ---- weights and ONNX graphs ------------------------------------------------------------------
def _models_module():
    import importlib.util
    spec = importlib.util.spec_from_file_location("ember_bench_models", HERE / "models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def squeezenet_weights():
    """{name: float32 array}: He-normal conv weights, small biases, seeded."""
    from ember import record
    names = record.state_dict(_models_module().SqueezeNet())
    rng = np.random.default_rng(SEED)
    out = {}
    for name, v in names.items():
        if name.endswith(".weight"):
            fan_in = int(np.prod(v.shape[1:]))
            out[name] = (rng.standard_normal(v.shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        else:
            out[name] = (rng.standard_normal(v.shape) * 0.01).astype(np.float32)
    return out


def mnist_weights():
    import ember
    from ember import record
    return record.read_safetensors(ember.models.weights_path("mnist"))[0]


class _Graph:
    def __init__(self, weights):
        self.w, self.nodes, self.inits, self.n = weights, [], {}, 0

    def init(self, name, array=None):
        if name not in self.inits:
            self.inits[name] = np.ascontiguousarray(self.w[name] if array is None else array)
        return name

    def op(self, kind, inputs, **attrs):
        from onnx import helper
        self.n += 1
        out = f"{kind.lower()}_{self.n}"
        self.nodes.append(helper.make_node(kind, inputs, [out], **attrs))
        return out

    def conv(self, x, prefix, pad=0, stride=1):
        k = self.w[f"{prefix}.weight"].shape[-1]
        return self.op("Conv", [x, self.init(f"{prefix}.weight"), self.init(f"{prefix}.bias")],
                       kernel_shape=[k, k], pads=[pad] * 4, strides=[stride] * 2)

    def model(self, x, y, in_shape, out_shape):
        import onnx
        from onnx import TensorProto, helper, numpy_helper
        graph = helper.make_graph(
            self.nodes, "g", [helper.make_tensor_value_info(x, TensorProto.FLOAT, in_shape)],
            [helper.make_tensor_value_info(y, TensorProto.FLOAT, out_shape)],
            [numpy_helper.from_array(a.astype(np.float32) if a.dtype.kind == "f" else a, n)
             for n, a in self.inits.items()])
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m.SerializeToString()


def mnist_onnx(w):
    g = _Graph(w)
    x = "input"
    h = x
    for conv, bn in (("conv1", "bn1"), ("conv2", "bn2")):
        h = g.conv(h, conv, pad=1)
        h = g.op("BatchNormalization", [h] + [g.init(f"{bn}.{p}") for p in
                                              ("weight", "bias", "running_mean", "running_var")],
                 epsilon=1e-5)
        h = g.op("MaxPool", [g.op("Relu", [h])], kernel_shape=[2, 2], strides=[2, 2])
    h = g.op("Flatten", [h], axis=1)
    h = g.op("Relu", [g.op("Gemm", [h, g.init("fc1.weight"), g.init("fc1.bias")], transB=1)])
    y = g.op("Gemm", [h, g.init("fc2.weight"), g.init("fc2.bias")], transB=1)
    return g.model(x, y, [1, 1, 28, 28], [1, 10])


def squeezenet_onnx(w):
    fires = _models_module().FIRES
    g = _Graph(w)
    x = "input"
    pool = dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    h = g.op("MaxPool", [g.op("Relu", [g.conv(x, "conv1", stride=2)])], **pool)
    i = 2
    for f in fires:
        if f == "pool":
            h = g.op("MaxPool", [h], **pool)
            continue
        s = g.op("Relu", [g.conv(h, f"fire{i}.squeeze")])
        h = g.op("Concat", [g.op("Relu", [g.conv(s, f"fire{i}.expand1")]),
                            g.op("Relu", [g.conv(s, f"fire{i}.expand3", pad=1)])], axis=1)
        i += 1
    h = g.op("GlobalAveragePool", [g.op("Relu", [g.conv(h, "conv10")])])
    y = g.op("Flatten", [h], axis=1)
    return g.model(x, y, [1, 3, 224, 224], [1, 1000])


# ---- the site -----------------------------------------------------------------------------------
def build(out, log):
    """The ember site + the bench page (out/bench/), onnxruntime-web (out/ort/), the weights."""
    from ember import record, site
    root = site.source_root()
    site.build_site(out, root=root, log=log)
    ort_tgz = site.npm_pack(f"onnxruntime-web@{ORT_VERSION}", site.cache_dir(root), log)
    (out / "ort").mkdir()
    with tarfile.open(ort_tgz) as tar:
        for f in ORT_FILES:
            (out / "ort" / f).write_bytes(tar.extractfile(f"package/dist/{f}").read())
    bench = out / "bench"
    bench.mkdir()
    for f in ("index.html", "bench.js", "models.py", "ember_bench.py"):
        (bench / f).write_bytes((HERE / f).read_bytes())
    sq = squeezenet_weights()
    record.write_safetensors(sq, bench / "squeezenet.safetensors")
    (bench / "squeezenet.onnx").write_bytes(squeezenet_onnx(sq))
    (bench / "mnist.onnx").write_bytes(mnist_onnx(mnist_weights()))


CASES = {  # model: input shape, ember-side weights url (None: shipped in the wheel)
    "mnist": ((1, 1, 28, 28), None),
    "squeezenet": ((1, 3, 224, 224), "squeezenet.safetensors"),
}


def _b64(a):
    return base64.b64encode(np.ascontiguousarray(a, dtype=np.float32).tobytes()).decode()


def _unb64(s):
    return np.frombuffer(base64.b64decode(s), dtype=np.float32)


def measure(quick, log):
    from playwright.sync_api import sync_playwright

    from ember import site
    rng = np.random.default_rng(SEED + 1)
    inputs = {m: rng.random(shape, dtype=np.float32) for m, (shape, _) in CASES.items()}
    # warm-up calls, timed calls, time budget; MNIST's warm-up is long on both sides: in ember's
    # worker the first ~40 replays after a page load ran at 0.73-0.78 ms and the rest at
    # 0.25-0.30 in 2 of 4 loads (the engine's optimising compiler finishing in the background)
    runs = {"mnist": (5 if quick else 100, 10 if quick else 50, 5_000),
            "squeezenet": (2 if quick else 3, 3 if quick else 10, 15_000 if quick else 30_000)}
    results = {}
    with tempfile.TemporaryDirectory(dir=_build_dir()) as tmp:
        out = Path(tmp) / "site"
        build(out, log)
        server = site.SiteServer(out).start()
        outside = []
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=site.chromium_path(), headless=True,
                                            args=site.CHROMIUM_ARGS + site.OFFLINE_ARGS)
                try:
                    def page():
                        pg = browser.new_page()
                        pg.on("request", lambda r: None if r.url.startswith(
                            (server.url, "data:", "blob:")) else outside.append(r.url))
                        pg.on("console", lambda m: m.type == "error" and log(f"console: {m.text}"))
                        pg.goto(server.url + "bench/")
                        pg.wait_for_function("() => window.benchReady === true")
                        return pg
                    for threads in (1, 2):  # one page per thread count: ORT reads it once
                        pg = page()
                        for model, (shape, _) in CASES.items():
                            warm, n, budget = runs[model]
                            log(f"ort {model}, {threads} thread(s)")
                            results[(model, f"ort{threads}")] = pg.evaluate(
                                "a => window.ortBench(a)",
                                dict(model=model, threads=threads, input=_b64(inputs[model]),
                                     shape=list(shape), warmup=max(warm, 5), runs=max(n, 20),
                                     budgetMs=budget, onnx=f"{model}.onnx"))
                        pg.close()
                    pg = page()
                    pg.set_default_timeout(600_000)
                    for backend in ("cpu", "webgpu"):
                        for model, (shape, weights) in CASES.items():
                            warm, n, budget = runs[model]
                            log(f"ember {model}, {backend}")
                            t0 = time.perf_counter()
                            try:
                                results[(model, backend)] = pg.evaluate(
                                    "a => window.emberBench(a)",
                                    dict(model=model, backend=backend, input=_b64(inputs[model]),
                                         shape=list(shape), warmup=warm, runs=n, budgetMs=budget,
                                         weights=weights))
                            except Exception as e:  # noqa: BLE001 (reported in the table)
                                results[(model, backend)] = {"error": str(e).strip()[-300:]}
                            log(f"  {time.perf_counter() - t0:.1f} s")
                    pg.close()
                finally:
                    browser.close()
        finally:
            server.stop()
    if outside:
        raise RuntimeError(f"requests left 127.0.0.1: {outside}")
    return results


def _build_dir():
    from ember import site
    build = site.source_root() / "build"
    build.mkdir(exist_ok=True)
    return build


def inference(ctx):
    try:
        import onnx  # noqa: F401
        import playwright  # noqa: F401

        from ember import site
        site.chromium_path()
        site.source_root()
    except (ImportError, RuntimeError) as e:
        print(f"browser_inference skipped: {e} (pip install -e '.[e2e]' onnx; make e2e-deps)",
              file=sys.stderr)
        yield ctx.row("skipped: no playwright / onnx / chromium / checkout", None, None, "-")
        return
    results = measure(ctx.quick, lambda m: print(m, file=sys.stderr))
    med = statistics.median
    for model in CASES:
        ref = _unb64(results[(model, "ort1")]["output"])
        ort2 = _unb64(results[(model, "ort2")]["output"])
        scale = float(np.abs(ref).max()) or 1.0
        for backend in ("cpu", "webgpu"):
            r = results[(model, backend)]
            if "error" in r:
                yield ctx.row(f"{model}: ember {backend} FAILED: {r['error'][-120:]}", None, None,
                              "ms")
                continue
            out = _unb64(r["output"])
            diff = float(np.abs(out - ref).max()) / scale
            agree = diff < 1e-3 and int(out.argmax()) == int(ref.argmax())
            for threads in (1, 2):
                o = results[(model, f"ort{threads}")]
                yield ctx.row(f"{model} b1: ember {backend} / ORT wasm {threads}t",
                              med(r["times"]), med(o["times"]), "ms",
                              ember_min=min(r["times"]), reference_min=min(o["times"]),
                              repeat=len(r["times"]), reference_repeat=len(o["times"]),
                              first_ms=r["first_ms"], max_rel_diff=diff, agree=agree,
                              kernels=r.get("kernels"),
                              model=model, backend=backend, threads=threads,
                              ort_threads_reported=o.get("threads"),
                              isolated=o.get("isolated"),
                              samples_ms={"ember": r["times"], "reference": o["times"]})
        yield ctx.row(f"{model} b1: ORT wasm 2t / 1t", med(results[(model, "ort2")]["times"]),
                      med(results[(model, "ort1")]["times"]), "ms",
                      max_rel_diff=float(np.abs(ort2 - ref).max()) / scale, model=model)


BENCHMARKS = {"inference": inference}


def summarize(rows):
    lines, seen = [], set()
    for r in rows:
        if "agree" in r and (r["model"], r["backend"]) not in seen:
            seen.add((r["model"], r["backend"]))
            lines.append(f"{r['model']} ember {r['backend']}: output vs ORT max |diff|/max|ref| "
                         f"{r['max_rel_diff']:.1e} ({'agrees' if r['agree'] else 'DISAGREES'}); "
                         f"{r['repeat']} timed runs, first call {r['first_ms']:.0f} ms"
                         + (f"; WebAssembly kernels: {r['kernels'] or 'off (NumPy)'}"
                            if r["backend"] == "cpu" else ""))
    for r in rows:
        if r.get("threads") == 2 and r.get("backend") == "cpu":
            lines.append(f"{r['model']} ORT: numThreads {r['ort_threads_reported']}, "
                         f"crossOriginIsolated {r['isolated']}; "
                         f"{r['reference_repeat']} timed runs")
    for model, text in ANCHORS.items():
        lines.append(f"anchor ({model}): {text}")
    lines.append("webgpu here is SwiftShader (CPU emulation of WebGPU), not a GPU")
    return lines
