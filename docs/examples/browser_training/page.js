// Runs train.py (fetched from beside this page) in ember's Web Worker: its argparse gets the
// page's choices through sys.argv, its printed lines stream into #output (web/output.js batches
// them), and its summary line goes to #summary. Contract for e2e: #status reads ready,
// training, done, stopped or error: ...; ?epochs=N presets the epochs.
import { loadEmber } from "../../web/ember.js";
import { outputWriter } from "../../web/output.js";

const $ = (id) => document.getElementById(id);
const status = $("status"), start = $("start"), stop = $("stop"), output = $("output");
const out = outputWriter(output);
const params = new URLSearchParams(location.search);
if (params.get("epochs")) $("epochs").value = params.get("epochs");

function setStatus(text) {
  status.textContent = text;
  status.classList.toggle("error", text.startsWith("error"));
}

const source = fetch("train.py").then((r) => {
  if (!r.ok) throw new Error(`cannot load train.py: ${r.status}`);
  return r.text();
});
const ember = loadEmber({ worker: true, onProgress: ({ stage }) => { if (stage !== "ready") setStatus(`loading: ${stage}`); } });
Promise.all([ember, source]).then(() => { start.disabled = false; setStatus("ready"); },
                                  (e) => setStatus(`error: ${e.message}`));

start.onclick = async () => {
  const [py, code] = await Promise.all([ember, source]);
  const backend = $("backend").value;
  const argv = ["train.py", "--epochs", String(Math.max(1, Number($("epochs").value) || 1)), "--backend", backend];
  // the page's GPU is asked for once, asynchronously, before the (synchronous) training starts
  const prelude = `import sys\nsys.argv = ${JSON.stringify(argv)}\n` +
    (backend.includes("wgpu") ? "from ember.backend import Wgpu\nawait Wgpu.create()\n" : "");
  start.disabled = true;
  stop.disabled = false;
  out.clear();
  $("summary").textContent = "";
  setStatus("training");
  let state = "error: the run failed (see the output)";
  try {
    const ready = await py.runPython(prelude); // (its own run: train.py keeps its line numbers)
    if (!ready.ok) throw new Error(ready.error.trim().split("\n").pop());
    const outcome = await py.runPython(code, {
      filename: "train.py",
      onStdout: (t) => out.write(t), onStderr: (t) => out.write(t, "stderr"),
    });
    if (outcome.ok) state = "done";
    else if (outcome.error.includes("KeyboardInterrupt")) state = "stopped";
    if (!outcome.ok) out.write(outcome.error, "error");
  } catch (e) {
    out.write(`${e.message}\n`, "error");
    state = `error: ${e.message}`;
  }
  out.flush();
  const last = output.textContent.trim().split("\n").filter((l) => l.startsWith("browser_training:")).pop();
  if (state === "done" && last?.startsWith("browser_training: stopped")) state = "stopped";
  $("summary").textContent = state === "done" && last ? last : "";
  output.dataset.runs = String(Number(output.dataset.runs) + 1);
  start.disabled = false;
  stop.disabled = true;
  setStatus(state);
};
stop.onclick = async () => (await ember).interrupt();
