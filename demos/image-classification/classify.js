// Classify an image: a file (input or drag-and-drop) or a sample of the Fashion-MNIST test set,
// to the model's input (grayscale, fit into 28x28 with area averaging keeping the aspect ratio,
// inverted when the background is light since Fashion-MNIST's is dark), then the ConvNet shipped
// in the wheel, or a classifier the user brings as an ONNX file (ember.onnx.load in the page's
// Pyodide, on the same backend); top-5 labels. #preview's data-version counts the images chosen,
// #model-name's data-model the models chosen; #prediction's data-version and data-model are
// the image and the model its label belongs to. Every choice and drop is answered: a prediction,
// "not sure" (an image too small or too flat to show anything), or an error in #image-status that
// clears the previous result.
import { startClassifier } from "../mnist/classifier.js";

const $ = (id) => document.getElementById(id);
const LABELS = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                "Sneaker", "Bag", "Ankle boot"];
const model = startClassifier({ model: "fashion-mnist", labels: LABELS, top: 5, ranked: true });
const preview = $("preview"), prediction = $("prediction");
let version = 0, objectURL = null;

function areaWeights(n, m, len) {
  const w = [], scale = len / m;
  for (let i = 0; i < m; i++) {
    const a = i * scale, b = a + scale, row = [];
    for (let j = Math.floor(a); j < Math.ceil(b); j++) {
      const cover = Math.min(b, j + 1) - Math.max(a, j);
      if (cover > 0 && j < n) row.push([j, cover / scale]);
    }
    w.push(row);
  }
  return w;
}

export function toInput(img, S = 28) {
  // the image at (at most) 512 px on its long side, as gray in [0, 1]
  const k = Math.min(1, 512 / Math.max(img.naturalWidth, img.naturalHeight));
  const w = Math.max(1, Math.round(img.naturalWidth * k)), h = Math.max(1, Math.round(img.naturalHeight * k));
  const c = new OffscreenCanvas(w, h), ctx = c.getContext("2d");
  ctx.fillStyle = "#fff";  // transparent parts count as background
  ctx.fillRect(0, 0, w, h);
  ctx.drawImage(img, 0, 0, w, h);
  const { data } = ctx.getImageData(0, 0, w, h);
  const gray = new Float32Array(w * h);
  for (let i = 0; i < gray.length; i++) {
    gray[i] = (0.299 * data[4 * i] + 0.587 * data[4 * i + 1] + 0.114 * data[4 * i + 2]) / 255;
  }
  // light background (the border's mean) -> invert: dark background, light object
  let border = 0, n = 0;
  for (let x = 0; x < w; x++) { border += gray[x] + gray[(h - 1) * w + x]; n += 2; }
  for (let y = 0; y < h; y++) { border += gray[y * w] + gray[y * w + w - 1]; n += 2; }
  if (border / n > 0.5) for (let i = 0; i < gray.length; i++) gray[i] = 1 - gray[i];
  // fit into SxS keeping the aspect ratio, centred, dark padding
  const side = Math.max(w, h), ow = Math.max(1, Math.round(S * w / side)), oh = Math.max(1, Math.round(S * h / side));
  const wx = areaWeights(w, ow, w), wy = areaWeights(h, oh, h);
  const ox = Math.floor((S - ow) / 2), oy = Math.floor((S - oh) / 2);
  const tmp = new Float32Array(oh * w);
  for (let i = 0; i < oh; i++) {
    for (const [j, wj] of wy[i]) for (let x = 0; x < w; x++) tmp[i * w + x] += wj * gray[j * w + x];
  }
  const out = new Uint8Array(S * S);
  for (let i = 0; i < oh; i++) {
    for (let q = 0; q < ow; q++) {
      let v = 0;
      for (const [j, wj] of wx[q]) v += wj * tmp[i * w + j];
      out[(i + oy) * S + q + ox] = Math.max(0, Math.min(255, Math.round(255 * v)));
    }
  }
  return out;
}

// Why not to trust an image before any model sees it: Fashion-MNIST's pictures are 28x28 with
// the garment in strong contrast to its background; an image of less than half that size, or
// one (almost) a single flat colour (its 28x28 input's pixels spread by less than 3% of the
// range), holds nothing a classifier could recognise, whatever it answers.
export function doubt(img, pixels) {
  const w = img.naturalWidth, h = img.naturalHeight;
  if (Math.max(w, h) < 14) return `the image is only ${w}x${h} pixels: too small to show anything`;
  let sum = 0, sq = 0;
  for (const v of pixels) { sum += v; sq += v * v; }
  const mean = sum / pixels.length, spread = Math.sqrt(Math.max(0, sq / pixels.length - mean * mean));
  if (spread < 0.03 * 255) return "the image is almost one flat colour: nothing to recognise";
  return null;
}

// The user's own classifier, kept in the worker's Python beside the shipped model (_backends,
// from classifier.js): its bytes come in base64 parts, ember.onnx.load reads them, one run on
// zeros gives its class count; the preprocessing follows its input's layout.
const OWN_SETUP = String.raw`
import math
from ember import onnx as _onnx

_own, _own_parts = {}, []
_MEAN, _STD = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)

def _own_part(b64):
    _own_parts.append(base64.b64decode(b64))

def _own_layout(name, dims):
    """(layout, channels, height, width) of an image input, or a ValueError saying why not."""
    d = [x if isinstance(x, int) and x > 0 else None for x in (dims or [])]
    if len(d) == 4 and d[1] in (1, 3):
        layout, c, h, w = "nchw", d[1], d[2], d[3]
    elif len(d) == 4 and d[3] in (1, 3):
        layout, c, h, w = "nhwc", d[3], d[1], d[2]
    elif len(d) == 3:
        layout, c, h, w = "nhw", 1, d[1], d[2]
    elif len(d) == 2 and d[1] and math.isqrt(d[1]) ** 2 == d[1]:
        layout, c, h, w = "flat", 1, math.isqrt(d[1]), math.isqrt(d[1])
    else:
        raise ValueError(f"input {name!r} has shape {dims}; the page gives an image as "
                         "[N,C,H,W] or [N,H,W,C] (C = 1 or 3), [N,H,W] or [N,H*W]")
    if d[0] not in (None, 1):
        raise ValueError(f"input {name!r} has batch size {d[0]}; the page gives one image")
    return layout, c, h or 224, w or 224

def _own_arrange(s, x):
    """x [H,W,C] in the model's input layout, with the batch dimension."""
    if s["layout"] == "nchw":
        return x.transpose(2, 0, 1)[None]
    return {"nhwc": x[None], "nhw": x[None, :, :, 0], "flat": x.reshape(1, -1)}[s["layout"]]

def _own_open(filename):
    data = b"".join(_own_parts)
    _own_parts.clear()
    model = _onnx.load(data)
    if len(model.input_shapes) != 1:
        raise ValueError(f"the model takes {len(model.input_shapes)} inputs "
                         f"({', '.join(model.input_shapes)}); the page gives one image")
    ((name, dims),) = model.input_shapes.items()
    s = dict(zip(("layout", "c", "h", "w"), _own_layout(name, dims)))
    out = model(_own_arrange(s, np.zeros((s["h"], s["w"], s["c"]), np.float32)))
    out = out[0] if isinstance(out, tuple) else out
    if out.shape[0] != 1 or math.prod(out.shape) != out.shape[-1]:
        raise ValueError(f"the model's output has shape {list(out.shape)}; the page needs "
                         "class scores, [1, classes]")
    _own.clear()
    _own.update(s, data=data, models={"cpu": model}, classes=out.shape[-1])
    print("RESULT" + json.dumps({"input": name, "dims": dims, "layout": s["layout"],
                                 "channels": s["c"], "height": s["h"], "width": s["w"],
                                 "classes": out.shape[-1], "bytes": len(data)}))

async def _own_predict(backend, pixels, normalize):
    s, h, w = _own, _own["h"], _own["w"]
    x = np.frombuffer(base64.b64decode(pixels), dtype=np.uint8).astype(np.float32) / 255.0
    if x.size == h * w:  # gray, already preprocessed as for the shipped model
        x = x.reshape(h, w, 1)
    else:  # RGBA
        x = x.reshape(h, w, 4)[:, :, :3]
        if s["c"] == 1:
            x = x @ np.array([[0.299], [0.587], [0.114]], np.float32)
        elif normalize == "imagenet":
            x = (x - _MEAN) / _STD
    if backend not in s["models"]:
        s["models"][backend] = _onnx.load(s["data"], backend=_backends[backend])
    t0 = time.perf_counter()
    out = s["models"][backend](_own_arrange(s, x))
    out = out[0] if isinstance(out, tuple) else out
    scores = (await out.to_numpy_async()).reshape(-1).astype(np.float64)
    ms = (time.perf_counter() - t0) * 1000.0
    if scores.min() >= 0 and abs(scores.sum() - 1) < 1e-3:  # already probabilities
        p = scores
    else:
        p = np.exp(scores - scores.max())
        p /= p.sum()
    print("RESULT" + json.dumps({"probs": p.tolist(), "ms": ms}))
`;

const ownStatus = $("onnx-status"), modelName = $("model-name");
let own = null, models = 0, ownSetup = null, labelsGiven = null, decoded = 0;

function note(text) {
  ownStatus.textContent = text;
  ownStatus.classList.toggle("error", text.startsWith("error"));
}

function lastLine(e) {
  // the exception's own message: the traceback's last line, without its class name
  return String(e?.message ?? e).trim().split("\n").pop().replace(/^[\w.]+(Error|Exception): /, "");
}

function b64(bytes) {
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  return btoa(s);
}

function result(out) {
  return JSON.parse(out.split("\n").find((l) => l.startsWith("RESULT")).slice(6));
}

// the image as the model's RGBA input, width x height: scaled to cover it, centred, cropped
function cover(img, width, height) {
  const c = new OffscreenCanvas(width, height), ctx = c.getContext("2d");
  const k = Math.max(width / img.naturalWidth, height / img.naturalHeight);
  const sw = width / k, sh = height / k;
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, width, height);
  ctx.imageSmoothingQuality = "high";
  ctx.drawImage(img, (img.naturalWidth - sw) / 2, (img.naturalHeight - sh) / 2, sw, sh, 0, 0, width, height);
  return new Uint8Array(ctx.getImageData(0, 0, width, height).data.buffer);
}

function ownInput(img, info) {
  return info.channels === 1 && info.width === info.height
    ? toInput(img, info.width) : cover(img, info.width, info.height);
}

function showInput(p, width = 28, height = 28) {
  const canvas = $("input-28");
  canvas.width = width;
  canvas.height = height;
  const c = canvas.getContext("2d"), img = c.createImageData(width, height), rgba = p.length === 4 * width * height;
  for (let i = 0; i < width * height; i++) {
    for (let k = 0; k < 3; k++) img.data[4 * i + k] = rgba ? p[4 * i + k] : p[i];
    img.data[4 * i + 3] = 255;
  }
  c.putImageData(img, 0, 0);
}

function applyLabels() {
  if (!own) {
    model.setLabels(LABELS);
    return "";
  }
  const n = own.info.classes, given = labelsGiven?.length ?? 0;
  model.setLabels(given >= n ? labelsGiven.slice(0, n) : Array.from({ length: n }, (_, i) => `class ${i}`));
  if (!given) return "";
  return given >= n ? `; labels: ${labelsGiven.name}` : `; labels: ${labelsGiven.name} has ${given} for ${n} classes, so classes are numbered`;
}

function describe() {
  const { info, name } = own;
  const kind = info.channels === 3 ? "colour" : "grayscale";
  $("input-note").textContent = `(${kind}, ${info.width}x${info.height}, ${info.layout}: ` +
    `input ${info.input} ${JSON.stringify(info.dims)}).`;
  note(`${name}: ${(info.bytes / 1e6).toFixed(2)} MB, input ${JSON.stringify(info.dims)}, ` +
       `${info.classes} classes` + applyLabels());
}

let running = Promise.resolve();
function classify() {
  const v = version;
  running = running.then(async () => {
    if (!v || v !== version || decoded !== v) return;
    const m = own, k = models;
    try {
      if (m) {
        const p = ownInput(preview, m.info);
        showInput(p, m.info.width, m.info.height);
        const r = result(await model.run(`await _own_predict(${JSON.stringify(model.backend())}, ` +
                                         `${JSON.stringify(b64(p))}, ${JSON.stringify($("onnx-normalize").value)})`));
        // (the user's model: its calibration is unknown, so no confidence threshold)
        model.show(r.probs, r.ms, doubt(preview, toInput(preview)), 0);
      } else {
        const p = toInput(preview);
        showInput(p);
        await model.predict(p, doubt(preview, p));
      }
      model.announce();
    } catch (e) {
      console.warn(e);
      if (m) {
        note(`error: ${lastLine(e)}`);
        model.reset();
      }
    }
    if (v === version) {
      prediction.dataset.version = String(v);
      prediction.dataset.model = String(k);
    }
  });
  return running;
}

async function openOwn(file) {
  if (!file) return;
  note(`loading ${file.name}`);
  try {
    await model.ready;
    ownSetup ??= model.run(OWN_SETUP);
    await ownSetup;
    const bytes = new Uint8Array(await file.arrayBuffer());
    await model.run("_own_parts.clear()");
    for (let i = 0; i < bytes.length || i === 0; i += 3 << 20) {  // 3 MB parts
      await model.run(`_own_part(${JSON.stringify(b64(bytes.subarray(i, i + (3 << 20))))})`);
    }
    const info = result(await model.run(`_own_open(${JSON.stringify(file.name)})`));
    own = { name: file.name, info };
  } catch (e) {
    console.warn(e);
    // the model in use (shipped or an earlier file) stays
    note(`error: ${file.name}: ${lastLine(e)}` + (own ? `; still using ${own.name}` : ""));
    return;
  }
  models += 1;
  modelName.textContent = own.name;
  modelName.dataset.model = String(models);
  $("model-builtin").disabled = false;
  describe();
  await classify();
}

async function openLabels(file) {
  if (!file) return;
  const text = await file.text();
  let list;
  try {
    list = JSON.parse(text);
  } catch {
    list = null;
  }
  if (!Array.isArray(list)) list = text.split(/\r?\n/).map((l) => l.trim()).filter((l) => l);
  labelsGiven = Object.assign(list.map(String), { name: file.name });
  if (own) {
    describe();
    await classify();
  } else {
    note(`labels: ${file.name} (${list.length}), for the model you bring`);
  }
}

function useShipped() {
  own = null;
  models += 1;
  modelName.textContent = "Fashion-MNIST ConvNet (shipped)";
  modelName.dataset.model = String(models);
  $("model-builtin").disabled = true;
  $("input-note").textContent = "(grayscale, 28x28, light backgrounds inverted: Fashion-MNIST's are dark).";
  applyLabels();
  note("");
  model.run("_own.clear()").catch(() => {});
  classify();
}

const imageStatus = $("image-status"), empty = $("preview-empty"), input = $("image-input");

// a new image (or a failed try) supersedes whatever was shown: its version
function begin() {
  version += 1;
  preview.dataset.version = String(version);
  imageStatus.textContent = "";
  imageStatus.classList.remove("error");
  return version;
}

// an error replaces the previous result: no image, no bars, the reason
function failImage(v, text) {
  if (v !== version) return;
  preview.hidden = true;
  preview.removeAttribute("src");
  empty.hidden = false;
  $("input-28").getContext("2d").clearRect(0, 0, 28, 28);
  model.reset();
  imageStatus.textContent = `error: ${text}`;
  imageStatus.classList.add("error");
  prediction.dataset.version = String(v);
  prediction.dataset.model = String(models);
  model.announce(`Error: ${text}`);
}

async function choose(src, name) {
  const v = begin();
  preview.src = src;
  try {
    await preview.decode();
  } catch {
    failImage(v, `${name} is not an image this browser can read: choose a PNG or JPEG`);
    return;
  }
  if (v !== version) return;
  preview.hidden = false;
  empty.hidden = true;
  decoded = v;
  await classify();
}

const isImage = (f) => f.type ? f.type.startsWith("image/") : /\.(png|jpe?g|gif|webp|bmp)$/i.test(f.name);

function chooseFile(file) {
  input.value = "";  // so that choosing the same file again is a change too
  if (!isImage(file)) {
    failImage(begin(), `${file.name} is not an image (${file.type || "unknown type"}): ` +
                       "choose a PNG or JPEG");
    return;
  }
  if (objectURL) URL.revokeObjectURL(objectURL);
  objectURL = URL.createObjectURL(file);
  choose(objectURL, file.name);
}

input.addEventListener("change", () => { if (input.files[0]) chooseFile(input.files[0]); });
$("onnx-input").addEventListener("change", (e) => openOwn(e.target.files[0]));
$("labels-input").addEventListener("change", (e) => openLabels(e.target.files[0]));
$("onnx-normalize").addEventListener("change", () => { if (own) classify(); });
$("model-builtin").addEventListener("click", useShipped);
for (const s of document.querySelectorAll(".sample")) {
  s.addEventListener("click", () => {
    input.value = "";
    choose(s.querySelector("img").src, `the sample ${s.dataset.label}`);
  });
}
const zone = $("drop-zone");
zone.addEventListener("dragover", (e) => { e.preventDefault(); zone.classList.add("over"); });
zone.addEventListener("dragleave", () => zone.classList.remove("over"));
zone.addEventListener("drop", (e) => {
  e.preventDefault();
  zone.classList.remove("over");
  const files = [...e.dataTransfer.files];
  const onnx = files.find((f) => f.name.toLowerCase().endsWith(".onnx"));
  if (onnx) openOwn(onnx);
  else if (files.length) chooseFile(files.find(isImage) ?? files[0]);
  else failImage(begin(), "that drop held no file: drop a PNG or JPEG");
});
model.onBackend(() => classify());
window.__classify = { toInput, doubt };
