// The Web Worker behind loadEmber({worker: true}): boots Pyodide here and runs code on request,
// so a long Python computation never freezes the page. Messages in: boot, packages (the wheels
// the page fetched and unpacked meanwhile: fetchPackages in boot.js), run; out: progress, ready,
// stdout, stderr, done, error.
import { boot } from "./boot.js";

let py = null;
let current = null; // id of the run in progress: its output is tagged with it
let queue = Promise.resolve(); // runs go one at a time, in the order they were asked for
let gotPackages;
const packages = new Promise((resolve, reject) => { gotPackages = { resolve, reject }; });

self.onmessage = async ({ data: m }) => {
  if (m.type === "packages") {
    if (m.error) gotPackages.reject(new Error(m.error));
    else gotPackages.resolve(m.packages);
  } else if (m.type === "boot") {
    try {
      py = await boot({
        indexURL: m.indexURL, cdn: m.cdn, emberWheelURL: m.wheel,
        unpacked: m.packagesFromPage ? packages : undefined,
        progress: (stage, message) => postMessage({ type: "progress", stage, message }),
        stdout: (text) => postMessage({ type: "stdout", id: current, text }),
        stderr: (text) => postMessage({ type: "stderr", id: current, text }),
      });
      let flushSignal = null;
      if (m.interrupt) {
        py.pyodide.setInterruptBuffer(m.interrupt);
        flushSignal = py.bufferOutput(); // the page sends it while a run goes on (ember.js)
      }
      postMessage({ type: "ready", versions: py.versions, timings: py.timings, flushSignal });
    } catch (e) {
      postMessage({ type: "error", message: String(e?.message ?? e) });
    }
  } else if (m.type === "run") {
    if (!py) return postMessage({ type: "error", id: m.id, message: "ember is not booted" });
    queue = queue.then(async () => {
      current = m.id;
      // while the run awaits, this thread is free: what it printed before shows meanwhile
      const flusher = setInterval(() => py.flushOutput(), 50);
      try {
        postMessage({ type: "done", id: m.id, outcome: await py.run(m.code, m.opts) });
      } catch (e) {
        postMessage({ type: "error", id: m.id, message: String(e?.message ?? e) });
      } finally {
        clearInterval(flusher);
        current = null;
      }
    });
  }
};
