// Shared by the demo pages (mnist, image-classification): boots ember in a Web Worker through
// web/ember.js, loads a model shipped in the wheel (ember.models.load), runs it on the chosen
// backend (cpu: NdArray, webgpu: Wgpu through the browser's WebGPU) and renders the page
// contract of API.md: #status, #backend, #prediction, #probabilities, #inference-ms.
import { loadEmber } from "../../web/ember.js";

const $ = (id) => document.getElementById(id);

const SETUP = (model) => String.raw`
import base64, json, time
import numpy as np
import ember
from ember import Tensor

_NAME = ${JSON.stringify(model)}
# where each source's model comes from: the shipped weights, or (the drawing page) the weights
# trained in /demos/train/ (_set_source); one model per (source, backend), made when first used
_makers = {"shipped": lambda backend: ember.models.load(_NAME, backend=backend)}
_backends = {"cpu": None}
_models = {}

def _model(source, name):
    # ember.jit: from the third prediction on, the model's captured ops replay without its Python
    if (source, name) not in _models:
        _models[source, name] = ember.jit(_makers[source](_backends[name]))
    return _models[source, name]

async def _use(source, name):
    if name not in _backends:
        from ember.backend import Wgpu
        from ember.backends.wgpu import bridge_browser
        await bridge_browser.request_device()
        _backends[name] = Wgpu()
    _model(source, name)
    return name

_model("shipped", "cpu")

async def _predict(source, name, pixels):
    x = np.frombuffer(base64.b64decode(pixels), dtype=np.uint8).astype(np.float32)
    x = x.reshape(-1, 1, 28, 28) / 255.0
    t0 = time.perf_counter()
    logits = await _model(source, name)(Tensor.from_data(x, backend=_backends[name])).to_numpy_async()
    ms = (time.perf_counter() - t0) * 1000.0
    logits = logits.astype(np.float64)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    print("RESULT" + json.dumps({"probs": p.tolist(), "ms": ms}))
`;

function setStatus(text) {
  const status = $("status");
  status.textContent = text;
  status.classList.toggle("error", text.startsWith("error"));
}

function b64(bytes) {
  let s = "";
  for (let i = 0; i < bytes.length; i++) s += String.fromCharCode(bytes[i]);
  return btoa(s);
}

// {why} where the page has no WebGPU; {software} true where its adapter is a CPU emulation
// (SwiftShader, llvmpipe): usable, but slower than the cpu backend, and the selector says so
export async function webgpuReason() {
  if (!("gpu" in navigator)) return { why: "this browser has no WebGPU" };
  try {
    const adapter = await navigator.gpu.requestAdapter();
    if (!adapter) return { why: "WebGPU: no adapter available" };
    const info = adapter.info ?? {};
    const text = `${info.vendor ?? ""} ${info.architecture ?? ""} ${info.description ?? ""}`;
    return { software: !!info.isFallbackAdapter || /swiftshader|llvmpipe|lavapipe/i.test(text) };
  } catch (e) {
    return { why: `WebGPU: ${e.message}` };
  }
}

// the backend selector's webgpu option, told what webgpuReason found; the reason, or null
export function describeWebgpu(select, reason, { why, software }) {
  const option = select.querySelector('option[value="webgpu"]');
  if (why) {
    option.disabled = true;
    option.textContent = "webgpu (unavailable)";
    reason.textContent = why;
  } else if (software) {
    option.textContent = "webgpu (software)";
    reason.textContent = "This WebGPU is a software adapter: slower than cpu.";
  }
  return why ?? null;
}

// A label is given only when the model is fairly sure; below this top probability the page says
// "not sure" and names the two likeliest classes instead.
export const SURE = 0.5;

// startClassifier({model, labels, top, ranked}) -> {ready, predict(Uint8Array 784, doubt), ...}
// `top`: show only the `top` most likely labels (all classes keep an element, the rest hidden);
// `ranked`: order the shown rows by probability (the top-5 of the image page); otherwise the
// rows keep the class order. predict's `doubt` (a sentence or null) is the page's own reason
// not to trust this input (too little ink, a tiny image): then #prediction says "not sure".
export function startClassifier({ model, labels, top = labels.length, ranked = false }) {
  const select = $("backend"), reason = $("backend-reason");
  let backend = "cpu", source = "shipped";
  const gpu = webgpuReason().then((found) => describeWebgpu(select, reason, found));

  const probs = $("probabilities"), prediction = $("prediction"), note = $("prediction-note");
  const build = () => labels.map((label) => {
    const row = document.createElement("div");
    row.className = "prob";
    row.dataset.label = label;
    row.dataset.prob = "0";
    row.innerHTML = '<span class="label"></span><span class="bar"><span></span></span><span class="value"></span>';
    row.querySelector(".label").textContent = label;
    probs.append(row);
    return row;
  });
  let rows = build();
  // another model's classes (the image page's own ONNX models): one row each, as at the start
  function setLabels(next) {
    labels = next;
    probs.replaceChildren();
    rows = build();
    rows.forEach((r, i) => { r.hidden = i >= top; });
  }

  const ember = loadEmber({
    worker: true,
    models: [model], // its weights are fetched with the runtime (web/boot.js)
    onProgress: ({ stage }) => { if (stage !== "ready") setStatus(`loading: ${stage}`); },
  });
  let queue = Promise.resolve();
  const run = (code) => {
    const job = queue.then(async () => {
      const py = await ember;
      let out = "";
      const outcome = await py.runPython(code, { filename: "<demo>", fresh: false,
                                                 onStdout: (t) => { out += t; },
                                                 onStderr: (t) => console.warn(t) });
      if (!outcome.ok) throw new Error(outcome.error);
      return out;
    });
    queue = job.catch(() => {});
    return job;
  };

  const ready = run(SETUP(model)).then(() => {
    setStatus("ready");
    select.disabled = false;
  }, (e) => {
    setStatus(`error: ${e.message.trim().split("\n").pop()}`);
    console.warn(e.message);
    throw e;
  });

  const listeners = [];
  const changed = () => {
    document.body.dataset.backend = backend;
    for (const f of listeners) f(backend, source);
  };
  select.addEventListener("change", async () => {
    const wanted = select.value;
    select.disabled = true;
    setStatus(`loading: ${wanted}`);
    try {
      if (wanted === "webgpu" && await gpu) throw new Error(await gpu);
      await run(`await _use(${JSON.stringify(source)}, ${JSON.stringify(wanted)})`);
      backend = wanted;
      setStatus("ready");
    } catch (e) {
      const why = e.message.trim().split("\n").pop();
      reason.textContent = `${wanted}: ${why}`;
      select.value = backend;
      setStatus("ready");
    } finally {
      select.disabled = false;
      changed();
    }
  });
  document.body.dataset.backend = backend;

  // the model's source ("shipped", or one the page defined with _makers[name] = ...)
  async function setSource(name) {
    await ready;
    await run(`await _use(${JSON.stringify(name)}, ${JSON.stringify(backend)})`);
    source = name;
    changed();
  }

  let spoken = "";
  // sure: the top probability below which to say "not sure" (0: never, for a model whose
  // calibration the page does not know)
  function show(p, ms, doubt = null, sure = SURE) {
    const order = p.map((v, i) => i).sort((a, b) => p[b] - p[a]);
    order.forEach((i, rank) => {
      const row = rows[i];
      row.dataset.prob = p[i].toFixed(6);
      row.style.order = ranked ? String(rank) : "";
      row.hidden = rank >= top;
      row.classList.toggle("best", rank === 0);
      row.querySelector(".bar span").style.width = `${(100 * p[i]).toFixed(1)}%`;
      row.querySelector(".value").textContent = `${(100 * p[i]).toFixed(1)}%`;
    });
    const [a, b] = order, pct = (i) => `${labels[i]} (${(100 * p[i]).toFixed(0)}%)`;
    const why = doubt ?? (p[a] < sure ? `the model is unsure: ${pct(a)} or ${pct(b)}` : null);
    prediction.textContent = why ? "not sure" : labels[a];
    prediction.dataset.label = labels[a];
    prediction.dataset.sure = String(!why);
    prediction.dataset.backend = backend;
    prediction.dataset.source = source;
    prediction.classList.toggle("unsure", !!why);
    if (note) note.textContent = why ?? "";
    spoken = why ? `Not sure: ${why}.` : `Prediction: ${labels[a]}, ${(100 * p[a]).toFixed(0)} percent.`;
    $("inference-ms").textContent = ms.toFixed(1);
  }

  function reset(text = "–") {
    for (const row of rows) {
      row.dataset.prob = "0";
      row.hidden = rows.indexOf(row) >= top;
      row.style.order = "";
      row.classList.remove("best");
      row.querySelector(".bar span").style.width = "0%";
      row.querySelector(".value").textContent = "";
    }
    prediction.textContent = text;
    prediction.dataset.label = "";
    prediction.dataset.sure = "false";
    prediction.classList.remove("unsure");
    if (note) note.textContent = "";
    $("inference-ms").textContent = "–";
    spoken = "";
  }
  if (top < labels.length) rows.forEach((r, i) => { r.hidden = i >= top; });

  async function predict(pixels, doubt = null) {
    await ready;
    const out = await run(`await _predict(${JSON.stringify(source)}, ${JSON.stringify(backend)}, ` +
                          `${JSON.stringify(b64(pixels))})`);
    const line = out.split("\n").find((l) => l.startsWith("RESULT"));
    const { probs: [p], ms } = JSON.parse(line.slice(6));
    show(p, ms, doubt);
    return { probs: p, ms, backend };
  }
  // say the shown prediction (or `text`) in #announce, the page's aria-live region: only when
  // asked, so that live predictions while drawing do not flood a screen reader
  function announce(text = spoken) {
    const el = $("announce");
    if (text && el.textContent !== text) el.textContent = text;
  }
  return { ready, predict, reset, announce, setSource, onBackend: (f) => listeners.push(f),
           backend: () => backend, source: () => source, run, show, setLabels };
}
