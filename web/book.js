// The book's Run buttons: `ember site` adds this script to every page of /book/ (site.py,
// build_book). Each Python block gets a Run button; Python (ember's Pyodide, in a Web Worker,
// from this site: offline) boots on the first click. A page's blocks share one namespace, as in
// tests/docs/test_book.py: Run on a block first runs the blocks above it that have not run yet,
// except those marked `# book: skip (...)` (the tests skip them too; each still runs on its own
// button, and many of them are the blocks written for the page). A block marked
// `# book: native (reason)` (PyTorch, files it writes) runs in the tests but not here: it shows
// the reason instead of a button, and the blocks below it do not wait for it.
// Contract for e2e: each block's output is a `pre.ember-output` after it, with data-state
// (running, ok, error) and data-runs (runs finished).
import { loadEmber } from "./ember.js";
import { outputWriter } from "./output.js";

const SKIP = /^#\s*book:\s*skip\b/;
const NATIVE = /^#\s*book:\s*native\s*\((.+)\)/;
const namespace = `<book ${location.pathname}>`;
let ember = null; // the handle's promise, made on the first Run
let queue = Promise.resolve(); // one block at a time, in the order asked for

const style = document.createElement("link");
style.rel = "stylesheet";
style.href = new URL("book.css", import.meta.url).href;
document.head.append(style);
// Material's search box is a dialog without a name (axe: aria-dialog-name)
document.querySelector('.md-search[role="dialog"]:not([aria-label])')?.setAttribute("aria-label", "Search");

const blocks = [...document.querySelectorAll("div.language-python")].map((div, index) => {
  const code = div.querySelector("code")?.textContent ?? "";
  const bar = document.createElement("div");
  bar.className = "ember-run";
  const native = NATIVE.exec(code);
  if (native) {
    bar.className = "ember-native";
    bar.textContent = `runs natively only: ${native[1]}`;
    div.after(bar);
    return null;
  }
  const button = document.createElement("button");
  button.type = "button";
  button.textContent = "Run";
  button.title = "Run this block in the page (Python in your browser, offline)";
  const note = document.createElement("span");
  note.className = "ember-note";
  const pre = document.createElement("pre");
  pre.className = "ember-output";
  pre.hidden = true;
  pre.dataset.runs = "0";
  pre.setAttribute("aria-live", "polite");
  pre.setAttribute("aria-label", `output of block ${index + 1}`);
  bar.append(button, note);
  div.after(bar, pre);
  const block = { index, code, skip: SKIP.test(code), ran: false, button, note, pre,
                  out: outputWriter(pre) };
  button.onclick = () => runUpTo(block);
  return block;
}).filter(Boolean);

// Blocks that make `Wgpu()` (written for native runs, where devices come at once) find the
// page's WebGPU device made first, as `await Wgpu.create()` would: to_numpy() can wait for the GPU
// in the worker (JS promise integration), so they run unchanged.
const WEBGPU = `
import js
from ember.errors import BackendError
from ember.backends.wgpu import bridge_browser
try:
    if hasattr(js.navigator, "gpu"):
        await bridge_browser.request_device()
except BackendError:
    pass  # no adapter: the block's own Wgpu() says so
`;
let webgpu = null;

function boot(block) {
  if (!ember) {
    ember = loadEmber({
      worker: true,
      onProgress: ({ stage, message }) => { block.note.textContent = stage === "ready" ? "" : message; },
    });
  }
  if (!/\bWgpu\b/.test(block.code)) return ember;
  webgpu ??= ember.then(async (py) => { await py.runPython(WEBGPU, { filename: "<book webgpu>" }); return py; });
  return webgpu;
}

function runUpTo(block) {
  const todo = blocks.filter((b) => b.index < block.index && !b.ran && !b.skip);
  todo.push(block);
  for (const b of todo) b.button.disabled = true;
  queue = queue.then(async () => {
    for (const b of todo) {
      if (await runBlock(b)) continue;
      if (b !== block) { // a failing block stops the ones after it
        block.note.textContent = `not run: block ${b.index + 1} above it failed (its output says why)`;
      }
      break;
    }
  }).finally(() => { for (const b of todo) b.button.disabled = false; });
}

async function runBlock(b) {
  b.pre.hidden = false;
  b.out.clear();
  b.pre.dataset.state = "running";
  b.note.textContent = "running";
  let ok = false;
  try {
    const py = await boot(b);
    const t0 = performance.now();
    const outcome = await py.runPython(b.code, {
      filename: `<book block ${b.index + 1}>`, fresh: false, namespace,
      onStdout: (t) => b.out.write(t), onStderr: (t) => b.out.write(t, "stderr"),
    });
    if (outcome.ok && outcome.result !== null) b.out.write(`${outcome.result}\n`, "result");
    if (!outcome.ok) b.out.write(outcome.error, "error");
    ok = outcome.ok;
    b.ran = ok;
    b.note.textContent = `${ok ? "ran" : "failed"} in ${((performance.now() - t0) / 1000).toFixed(2)} s`;
  } catch (e) { // the runtime itself failed (boot, worker)
    b.out.write(`${e?.message ?? e}\n`, "error");
    b.note.textContent = "error";
  }
  b.out.flush();
  if (!b.pre.textContent) b.out.write("(no output)", "note");
  b.out.flush();
  b.pre.dataset.state = ok ? "ok" : "error";
  b.pre.dataset.runs = String(Number(b.pre.dataset.runs) + 1);
  return ok;
}
