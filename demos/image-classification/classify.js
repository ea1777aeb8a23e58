// Classify an image: a file (input or drag-and-drop) or a sample of the Fashion-MNIST test set,
// to the model's input (grayscale, fit into 28x28 with area averaging keeping the aspect ratio,
// inverted when the background is light since Fashion-MNIST's is dark), then the ConvNet shipped
// in the wheel; top-5 labels. #preview's data-version counts the images chosen, #prediction's
// data-version is the image its label belongs to.
import { startClassifier } from "../mnist/classifier.js";

const $ = (id) => document.getElementById(id);
const LABELS = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                "Sneaker", "Bag", "Ankle boot"];
const model = startClassifier({ model: "fashion-mnist", labels: LABELS, top: 5 });
const preview = $("preview"), prediction = $("prediction");
let version = 0, pixels = null, objectURL = null;

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

export function toInput(img) {
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
  // fit into 28x28 keeping the aspect ratio, centred, dark padding
  const side = Math.max(w, h), ow = Math.max(1, Math.round(28 * w / side)), oh = Math.max(1, Math.round(28 * h / side));
  const wx = areaWeights(w, ow, w), wy = areaWeights(h, oh, h);
  const ox = Math.floor((28 - ow) / 2), oy = Math.floor((28 - oh) / 2);
  const tmp = new Float32Array(oh * w);
  for (let i = 0; i < oh; i++) {
    for (const [j, wj] of wy[i]) for (let x = 0; x < w; x++) tmp[i * w + x] += wj * gray[j * w + x];
  }
  const out = new Uint8Array(784);
  for (let i = 0; i < oh; i++) {
    for (let q = 0; q < ow; q++) {
      let v = 0;
      for (const [j, wj] of wx[q]) v += wj * tmp[i * w + j];
      out[(i + oy) * 28 + q + ox] = Math.max(0, Math.min(255, Math.round(255 * v)));
    }
  }
  return out;
}

function showInput(p) {
  const c = $("input-28").getContext("2d"), img = c.createImageData(28, 28);
  for (let i = 0; i < 784; i++) {
    img.data[4 * i] = img.data[4 * i + 1] = img.data[4 * i + 2] = p[i];
    img.data[4 * i + 3] = 255;
  }
  c.putImageData(img, 0, 0);
}

let running = Promise.resolve();
function classify() {
  const v = version, p = pixels;
  running = running.then(async () => {
    if (v !== version || !p) return;
    try {
      await model.predict(p);
    } catch (e) {
      console.warn(e);
    }
    if (v === version) prediction.dataset.version = String(v);
  });
  return running;
}

async function choose(src) {
  version += 1;
  preview.dataset.version = String(version);
  const v = version;
  preview.src = src;
  try {
    await preview.decode();
  } catch {
    if (v === version) {
      prediction.textContent = "not an image this browser can read";
      prediction.dataset.version = String(v);
    }
    return;
  }
  if (v !== version) return;
  pixels = toInput(preview);
  showInput(pixels);
  await classify();
}

function chooseFile(file) {
  if (!file) return;
  if (objectURL) URL.revokeObjectURL(objectURL);
  objectURL = URL.createObjectURL(file);
  choose(objectURL);
}

$("image-input").addEventListener("change", (e) => chooseFile(e.target.files[0]));
for (const s of document.querySelectorAll(".sample")) {
  s.addEventListener("click", () => choose(s.src));
  s.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") choose(s.src); });
}
const zone = $("drop-zone");
zone.addEventListener("dragover", (e) => { e.preventDefault(); zone.classList.add("over"); });
zone.addEventListener("dragleave", () => zone.classList.remove("over"));
zone.addEventListener("drop", (e) => {
  e.preventDefault();
  zone.classList.remove("over");
  chooseFile([...e.dataTransfer.files].find((f) => f.type.startsWith("image/")));
});
model.onBackend(() => classify());
window.__classify = { toInput };
