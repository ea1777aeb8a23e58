// Draw a digit: pointer events (mouse, touch, pen) on #draw-canvas, preprocessing as MNIST was
// made (crop to the ink's bounding box, fit into 20x20 keeping the aspect ratio with area
// averaging, centre by the centre of mass in 28x28), then the ConvNet shipped in the wheel.
// #draw-canvas's data-version counts drawing changes; #prediction's data-version is the
// drawing its label belongs to (equal: the prediction is up to date), data-source the model
// ("shipped" or "trained": the one trained in /demos/train/, from IndexedDB, #model-source).
// Predictions run at most every EVERY ms while a stroke goes on, and once more when it ends.
import { startClassifier } from "./classifier.js";
import { loadTrained } from "../train/store.js";

const $ = (id) => document.getElementById(id);
const canvas = $("draw-canvas"), ctx = canvas.getContext("2d", { willReadFrequently: true });
const prediction = $("prediction");
const LABELS = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];
const BRUSH = canvas.width / 14;  // about MNIST's pen: ~2 px of the 20 px digit box
const EVERY = 100;  // ms between predictions during a stroke

const model = startClassifier({ model: "mnist", labels: LABELS });

let version = 0;
let hasInk = false;

function clearCanvas() {
  ctx.fillStyle = "#000";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
}
clearCanvas();

// ---- drawing -----------------------------------------------------------------------------
const strokes = new Map();  // pointerId -> last point {x, y, w}

function point(e) {
  const r = canvas.getBoundingClientRect();
  const x = (e.clientX - r.left) * canvas.width / r.width;
  const y = (e.clientY - r.top) * canvas.height / r.height;
  // pens and touch report pressure; a mouse reports 0.5 while a button is down
  const pressure = e.pointerType === "mouse" || !e.pressure ? 0.5 : e.pressure;
  return { x, y, w: BRUSH * (0.75 + 0.5 * pressure) };
}

function dot(p) {
  ctx.fillStyle = "#fff";
  ctx.beginPath();
  ctx.arc(p.x, p.y, p.w / 2, 0, 2 * Math.PI);
  ctx.fill();
}

function segment(a, b) {
  // ink: round ends, width easing from one sample to the next, a faint soft edge
  ctx.strokeStyle = "#fff";
  ctx.lineCap = ctx.lineJoin = "round";
  ctx.shadowColor = "rgba(255,255,255,0.6)";
  ctx.shadowBlur = 2;
  ctx.lineWidth = (a.w + b.w) / 2;
  ctx.beginPath();
  ctx.moveTo(a.x, a.y);
  ctx.lineTo(b.x, b.y);
  ctx.stroke();
  ctx.shadowBlur = 0;
}

function changed() {
  version += 1;
  hasInk = true;
  canvas.dataset.version = String(version);
}

canvas.addEventListener("pointerdown", (e) => {
  if (e.button !== 0 && e.pointerType === "mouse") return;
  e.preventDefault();
  canvas.setPointerCapture(e.pointerId);
  const p = point(e);
  strokes.set(e.pointerId, p);
  dot(p);
  changed();
  schedule();
});

canvas.addEventListener("pointermove", (e) => {
  const last = strokes.get(e.pointerId);
  if (!last) return;
  e.preventDefault();
  let prev = last;
  const events = e.getCoalescedEvents ? e.getCoalescedEvents() : [];
  for (const ev of events.length ? events : [e]) {
    const p = point(ev);
    segment(prev, p);
    prev = p;
  }
  strokes.set(e.pointerId, prev);
  changed();
  schedule();  // live prediction while drawing, throttled
});

function end(e) {
  if (!strokes.delete(e.pointerId)) return;
  schedule(true);
}
canvas.addEventListener("pointerup", end);
canvas.addEventListener("pointercancel", end);
canvas.addEventListener("contextmenu", (e) => e.preventDefault());

$("clear").addEventListener("click", () => {
  clearCanvas();
  version += 1;
  hasInk = false;
  canvas.dataset.version = String(version);
  $("input-28").getContext("2d").clearRect(0, 0, 28, 28);
  model.reset();
  prediction.dataset.version = String(version);
  model.announce("Cleared.");
});

// a sample: an MNIST test digit drawn onto the canvas as if it were ink
for (const button of document.querySelectorAll("#samples .sample")) {
  button.addEventListener("click", () => {
    clearCanvas();
    ctx.imageSmoothingEnabled = true;
    ctx.imageSmoothingQuality = "high";
    ctx.drawImage(button.querySelector("img"), 0, 0, canvas.width, canvas.height);
    changed();
    schedule(true);
  });
}

// ---- preprocessing -----------------------------------------------------------------------
// area-average resampling weights: out[i] = sum_j w[i][j] * in[j], for n -> m samples
function areaWeights(n, m, start, len) {
  const w = [];
  const scale = len / m;
  for (let i = 0; i < m; i++) {
    const a = start + i * scale, b = a + scale, row = [];
    for (let j = Math.floor(a); j < Math.ceil(b); j++) {
      const cover = Math.min(b, j + 1) - Math.max(a, j);
      if (cover > 0 && j >= 0 && j < n) row.push([j, cover / scale]);
    }
    w.push(row);
  }
  return w;
}

export function preprocess(gray, width, height) {
  // gray: Float32Array in [0, 1], white ink on black; returns {pixels: Uint8Array(784), box:
  // the ink's bounding box [width, height] in input pixels} or null (no ink)
  let x0 = width, y0 = height, x1 = -1, y1 = -1;
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      if (gray[y * width + x] > 0.05) {
        if (x < x0) x0 = x;
        if (x > x1) x1 = x;
        if (y < y0) y0 = y;
        if (y > y1) y1 = y;
      }
    }
  }
  if (x1 < 0) return null;
  const bw = x1 - x0 + 1, bh = y1 - y0 + 1, side = Math.max(bw, bh);
  const ow = Math.max(1, Math.round(20 * bw / side)), oh = Math.max(1, Math.round(20 * bh / side));
  const wx = areaWeights(width, ow, x0, bw), wy = areaWeights(height, oh, y0, bh);
  // rows first, then columns
  const tmp = new Float32Array(oh * width);
  for (let i = 0; i < oh; i++) {
    for (const [j, wj] of wy[i]) {
      for (let x = x0; x <= x1; x++) tmp[i * width + x] += wj * gray[j * width + x];
    }
  }
  const small = new Float32Array(oh * ow);
  let mass = 0, mx = 0, my = 0;
  for (let i = 0; i < oh; i++) {
    for (let k = 0; k < ow; k++) {
      let v = 0;
      for (const [j, wj] of wx[k]) v += wj * tmp[i * width + j];
      small[i * ow + k] = v;
      mass += v; mx += v * k; my += v * i;
    }
  }
  // centre of mass to the centre of the 28x28 field (integer shift, as MNIST did)
  const cx = mass ? mx / mass : (ow - 1) / 2, cy = mass ? my / mass : (oh - 1) / 2;
  const dx = Math.round(13.5 - cx), dy = Math.round(13.5 - cy);
  const out = new Uint8Array(784);
  for (let i = 0; i < oh; i++) {
    for (let k = 0; k < ow; k++) {
      const y = i + dy, x = k + dx;
      if (x >= 0 && x < 28 && y >= 0 && y < 28) {
        out[y * 28 + x] = Math.max(0, Math.min(255, Math.round(255 * small[i * ow + k])));
      }
    }
  }
  return { pixels: out, box: [bw, bh] };
}

// Why not to trust a drawing even before the model sees it: the input must look like the
// training digits. Each of the 7,996 training digits the site serves has an ink mass (sum of
// its 28x28 pixels in [0, 1]) between 21.9 and 266.9 and covers at most 67% of the square
// around it; a dot or a blob scaled up to the digit box covers more (a disc: 79%).
export function doubt({ pixels, box }, side) {
  if (Math.max(...box) < side / 10) return "too little ink: draw the digit larger";
  let mass = 0, x0 = 28, y0 = 28, x1 = -1, y1 = -1;
  for (let i = 0; i < 784; i++) {
    const v = pixels[i] / 255;
    mass += v;
    if (v > 0.05) {
      const x = i % 28, y = (i - x) / 28;
      x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y);
    }
  }
  if (mass < 20) return "too little ink: draw the whole digit";
  const square = Math.max(x1 - x0 + 1, y1 - y0 + 1) ** 2;
  if (mass > 270 || mass / square > 0.67) {
    return "this is more ink than any training digit has: draw a digit with thin strokes";
  }
  return null;
}

function currentInput() {
  const { data, width, height } = ctx.getImageData(0, 0, canvas.width, canvas.height);
  const gray = new Float32Array(width * height);
  for (let i = 0; i < gray.length; i++) {
    gray[i] = (0.299 * data[4 * i] + 0.587 * data[4 * i + 1] + 0.114 * data[4 * i + 2]) / 255;
  }
  return preprocess(gray, width, height);
}

function showInput({ pixels }) {
  const c = $("input-28").getContext("2d");
  const img = c.createImageData(28, 28);
  for (let i = 0; i < 784; i++) {
    img.data[4 * i] = img.data[4 * i + 1] = img.data[4 * i + 2] = pixels[i];
    img.data[4 * i + 3] = 255;
  }
  c.putImageData(img, 0, 0);
}

// ---- prediction: one at a time, always for the newest drawing ----------------------------
let timer = null, running = false, again = false, started = -Infinity;

// now: at once (a stroke ended, a sample); otherwise throttled to one prediction per EVERY ms
function schedule(now = false) {
  if (timer !== null && !now) return;
  clearTimeout(timer);
  const wait = now ? 0 : Math.max(0, started + EVERY - performance.now());
  timer = setTimeout(() => { timer = null; predictNow(); }, wait);
}

async function predictNow() {
  if (running) { again = true; return; }
  running = true;
  try {
    do {
      again = false;
      started = performance.now();
      const v = version;
      const input = hasInk ? currentInput() : null;
      if (input) {
        showInput(input);
        await model.predict(input.pixels, doubt(input, canvas.width));
      }
      if (v === version) prediction.dataset.version = String(v);
    } while (again || Number(prediction.dataset.version) !== version && !strokes.size);
    if (!strokes.size && hasInk) model.announce();
  } catch (e) {
    console.warn(e);
  } finally {
    running = false;
  }
}

// ---- the model: shipped, or trained in /demos/train/ (IndexedDB) -------------------------------
const sourceSelect = $("model-source"), sourceNote = $("model-note");
const TRAINED = String.raw`
def _set_trained(b64, channels, hidden):
    from ember import record
    from ember.models import ConvNet
    with open("/tmp/trained.safetensors", "wb") as f:
        f.write(base64.b64decode(b64))
    def make(backend):
        net = ConvNet(channels=tuple(channels), hidden=hidden, backend=backend)
        return record.load(net, "/tmp/trained.safetensors").eval()
    _makers["trained"] = make
    for key in [k for k in _models if k[0] == "trained"]:
        del _models[key]
`;

function b64(bytes) {
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  return btoa(s);
}

async function trainedRecord() {
  try {
    return await loadTrained();
  } catch (e) {
    console.warn(e);
    return undefined;  // no IndexedDB (a private window may refuse it): as if none
  }
}

async function describeTrained() {
  const option = sourceSelect.querySelector('option[value="trained"]');
  const rec = await trainedRecord();
  option.disabled = !rec;
  if (!rec) {
    option.textContent = "trained here (none yet)";
    sourceNote.innerHTML = 'Train one in <a href="../train/">the training page</a> to use it here.';
    return null;
  }
  const when = new Date(rec.saved).toLocaleString();
  option.textContent = `trained here (${(100 * rec.accuracy).toFixed(1)}%)`;
  const what = `${rec.steps} steps on ${rec.backend}, ${(100 * rec.accuracy).toFixed(1)}% on ` +
    `${rec.valid} test digits, saved ${when}`;
  sourceNote.textContent = sourceSelect.value === "trained"
    ? `The model trained in /demos/train/ (${what}).`
    : `A model trained in this browser is there too (${what}): choose it above.`;
  return rec;
}

async function useSource(name) {
  sourceSelect.disabled = true;
  try {
    if (name === "trained") {
      const rec = await describeTrained();
      if (!rec) throw new Error("no trained model in this browser yet");
      await model.ready;
      await model.run(TRAINED);
      await model.run(`_set_trained(${JSON.stringify(b64(rec.weights))}, ` +
                      `${JSON.stringify(rec.config.channels)}, ${rec.config.hidden})`);
    }
    await model.setSource(name);
    sourceSelect.value = name;
  } catch (e) {
    console.warn(e);
    sourceSelect.value = model.source();
    sourceNote.textContent = `Could not use the trained model: ${e.message.trim().split("\n").pop()}`;
    return;
  } finally {
    sourceSelect.disabled = false;
  }
  await describeTrained();
}

sourceSelect.addEventListener("change", () => useSource(sourceSelect.value));
model.ready.then(async () => {
  const rec = await describeTrained();
  sourceSelect.disabled = false;
  if (rec && new URLSearchParams(location.search).get("model") === "trained") {
    await useSource("trained");
  }
}, () => {});

model.onBackend(() => { if (hasInk) schedule(true); });
window.__mnist = { preprocess, doubt };
