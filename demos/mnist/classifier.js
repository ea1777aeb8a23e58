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
# ember.jit: from the third prediction on, the model's captured ops replay without its Python
_models = {"cpu": ember.jit(ember.models.load(_NAME))}
_backends = {"cpu": None}

async def _use(name):
    if name not in _models:
        from ember.backend import Wgpu
        from ember.backends.wgpu import bridge_browser
        await bridge_browser.request_device()
        backend = Wgpu()
        _models[name] = ember.jit(ember.models.load(_NAME, backend=backend))
        _backends[name] = backend
    return name

async def _predict(name, pixels):
    x = np.frombuffer(base64.b64decode(pixels), dtype=np.uint8).astype(np.float32)
    x = x.reshape(-1, 1, 28, 28) / 255.0
    t0 = time.perf_counter()
    logits = await _models[name](Tensor.from_data(x, backend=_backends[name])).to_numpy_async()
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

async function webgpuReason() {
  if (!("gpu" in navigator)) return "this browser has no WebGPU";
  try {
    const adapter = await navigator.gpu.requestAdapter();
    return adapter ? null : "WebGPU: no adapter available";
  } catch (e) {
    return `WebGPU: ${e.message}`;
  }
}

// startClassifier({model, labels, top}) -> {ready: Promise, predict(Uint8Array 784) -> result}
// `top`: show only the `top` most likely labels (all classes keep an element, the rest hidden).
export function startClassifier({ model, labels, top = labels.length }) {
  const select = $("backend"), reason = $("backend-reason");
  let backend = "cpu";
  const gpu = webgpuReason().then((why) => {
    const option = select.querySelector('option[value="webgpu"]');
    if (why) {
      option.disabled = true;
      option.textContent = "webgpu (unavailable)";
      reason.textContent = why;
    }
    return why;
  });

  const probs = $("probabilities");
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
  select.addEventListener("change", async () => {
    const wanted = select.value;
    select.disabled = true;
    setStatus(`loading: ${wanted}`);
    try {
      if (wanted === "webgpu" && await gpu) throw new Error(await gpu);
      await run(`await _use(${JSON.stringify(wanted)})`);
      backend = wanted;
      setStatus("ready");
    } catch (e) {
      const why = e.message.trim().split("\n").pop();
      reason.textContent = `${wanted}: ${why}`;
      select.value = backend;
      setStatus("ready");
    } finally {
      select.disabled = false;
      document.body.dataset.backend = backend;
      for (const f of listeners) f(backend);
    }
  });
  document.body.dataset.backend = backend;

  function show(p, ms) {
    const order = p.map((v, i) => i).sort((a, b) => p[b] - p[a]);
    order.forEach((i, rank) => {
      const row = rows[i];
      row.dataset.prob = p[i].toFixed(6);
      row.style.order = String(rank);
      row.hidden = rank >= top;
      row.classList.toggle("best", rank === 0);
      row.querySelector(".bar span").style.width = `${(100 * p[i]).toFixed(1)}%`;
      row.querySelector(".value").textContent = `${(100 * p[i]).toFixed(1)}%`;
    });
    $("prediction").textContent = labels[order[0]];
    $("prediction").dataset.backend = backend;
    $("inference-ms").textContent = ms.toFixed(1);
  }

  function reset() {
    for (const row of rows) {
      row.dataset.prob = "0";
      row.hidden = false;
      row.style.order = "";
      row.classList.remove("best");
      row.querySelector(".bar span").style.width = "0%";
      row.querySelector(".value").textContent = "";
    }
    $("prediction").textContent = "–";
  }
  if (top < labels.length) rows.forEach((r, i) => { r.hidden = i >= top; });

  async function predict(pixels) {
    await ready;
    const out = await run(`await _predict(${JSON.stringify(backend)}, ${JSON.stringify(b64(pixels))})`);
    const line = out.split("\n").find((l) => l.startsWith("RESULT"));
    const { probs: [p], ms } = JSON.parse(line.slice(6));
    show(p, ms);
    return { probs: p, ms, backend };
  }
  return { ready, predict, reset, onBackend: (f) => listeners.push(f), backend: () => backend,
           run, show, setLabels };
}
