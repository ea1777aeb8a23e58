// The benchmark page's two entry points, called by bench/browser_inference.py through
// Playwright. Both time batch-1 inference inside the page (no Playwright round trip counted):
//   emberBench(args)  ember in Pyodide (web/ember.js, worker mode), cpu (NdArray) or webgpu (Wgpu)
//   ortBench(args)    onnxruntime-web, wasm execution provider, args.threads threads
// Each returns {output: base64 float32, times: [ms...], first_ms}.
import { loadEmber } from "../web/ember.js";

const log = (t) => { document.getElementById("log").textContent += t + "\n"; };
const here = (path) => new URL(path, location.href).href;

let ember = null;
async function bootEmber() {
  if (!ember) {
    ember = (async () => {
      const py = await loadEmber({ worker: true });
      const src = await Promise.all(["models.py", "ember_bench.py"].map(
        async (f) => (await fetch(here(f))).text()));
      await run(py, src.join("\n"));
      return py;
    })();
  }
  return ember;
}

async function run(py, code) {
  let out = "";
  const outcome = await py.runPython(code, { filename: "<bench>", fresh: false,
                                            onStdout: (t) => { out += t; },
                                            onStderr: (t) => console.warn(t) });
  if (!outcome.ok) throw new Error(outcome.error);
  return out;
}

window.emberBench = async ({ model, backend, input, shape, warmup, runs, budgetMs, weights }) => {
  const py = await bootEmber();
  const args = [model, backend, input, shape, warmup, runs, budgetMs / 1000,
                weights ? here(weights) : null].map((a) => JSON.stringify(a)).join(", ")
    .replaceAll("null", "None");
  const out = await run(py, `await bench(${args})`);
  const line = out.split("\n").find((l) => l.startsWith("RESULT"));
  log(`ember ${model} ${backend}: done`);
  return JSON.parse(line.slice(6));
};

let ortSession = {};
window.ortBench = async ({ model, threads, input, shape, warmup, runs, budgetMs, onnx }) => {
  const ort = await import("../ort/ort.wasm.min.mjs");
  ort.env.wasm.wasmPaths = here("../ort/");
  ort.env.wasm.numThreads = threads;  // read once, when the first session starts the runtime
  const session = ortSession[model] ??= await ort.InferenceSession.create(here(onnx), {
    executionProviders: ["wasm"], graphOptimizationLevel: "all" });
  const bytes = Uint8Array.from(atob(input), (c) => c.charCodeAt(0));
  const x = new Float32Array(bytes.buffer);
  const once = async () => {
    const feeds = { [session.inputNames[0]]: new ort.Tensor("float32", x, shape) };
    const result = await session.run(feeds);
    return result[session.outputNames[0]].data;  // already read back to a Float32Array
  };
  let t0 = performance.now();
  const out = await once();
  const first_ms = performance.now() - t0;
  for (let i = 1; i < warmup; i++) await once();
  const times = [], start = performance.now();
  while (times.length < runs && (times.length < 3 || performance.now() - start < budgetMs)) {
    t0 = performance.now();
    await once();
    times.push(performance.now() - t0);
  }
  const o = new Uint8Array(new Float32Array(out).buffer);
  let s = "";
  for (let i = 0; i < o.length; i++) s += String.fromCharCode(o[i]);
  log(`ort ${model} ${threads} thread(s): done`);
  return { output: btoa(s), times, first_ms, threads: ort.env.wasm.numThreads,
           isolated: globalThis.crossOriginIsolated };
};
window.benchReady = true;
