// ember in the browser: `const ember = await loadEmber({...})` boots Pyodide, installs the ember
// wheel and returns a handle that runs Python (top-level await allowed).
//
//   indexURL  where Pyodide lives; default: the site's own /pyodide/ (beside this file's folder)
//   cdn       true: take Pyodide from the jsDelivr CDN instead (ember's wheel still comes from
//             this site); only when a page asks for it
//   worker    true: run Python in a Web Worker, so the page never freezes while Python runs
//   models    names of ember.models the page loads at start ("mnist", "fashion-mnist"): their
//             weights come with the packages (others: before the first run that loads them)
//   snapshots true (default): boot from the memory snapshot of an interpreter that an earlier
//             visit kept (boot.js), and keep one once ready where there was none
//             (handle.snapshot: "restored", "none" or "failed"; handle.snapshotSaved: a
//             promise of its bytes, or null)
//   onProgress({stage, message, ms})   stages: runtime, packages, import, ready
//   onBytes({loaded, total})   the boot files' bytes so far, and in all (null where not known)
//   progressBar  true (default): while loading, a bar with those bytes right after the page's
//             #status (API.md's page contract), removed once ready or failed
//   onStdout(text), onStderr(text)     default sinks (runPython can pass its own per run)
//
// handle.runPython(code, {onStdout, onStderr, filename, fresh, namespace}) resolves to
//   {ok: true, result: repr-of-last-expression | null} or {ok: false, error: traceback-text};
// it rejects only when the runtime itself failed. handle.interrupt() raises KeyboardInterrupt in
// a running worker (needs cross-origin isolation: `ember demo` sends COOP/COEP).
// handle.versions, handle.timings (ms since loadEmber), handle.worker, handle.close().
import { boot, byteMeter, CDN_URL, fetchPackages, PYODIDE_VERSION, transferables } from "./boot.js";

export { CDN_URL, PYODIDE_VERSION };
// `ember site` rewrites this URL to the build's pinned runtime, ../pyodide/<tag>/ (site.py)
export const DEFAULT_INDEX_URL = new URL("../pyodide/", import.meta.url).href;
// the bytes a boot loads from DEFAULT_INDEX_URL, as the site's server sends them (`ember site`
// writes the figure in; null: not known), and those of each model's weights (loadEmber's models)
const BOOT_BYTES = null;
const WEIGHT_BYTES = {};

async function emberWheelURL() {
  const info = await (await fetch(new URL("../build-info.json", import.meta.url))).json();
  return new URL(`../${info.ember_wheel}`, import.meta.url).href;
}

export async function loadEmber({ indexURL, cdn = false, worker = false, models = [],
                                  snapshots = true, onProgress = () => {},
                                  onBytes = () => {}, progressBar = true, onStdout = () => {},
                                  onStderr = () => {} } = {}) {
  const t0 = performance.now();
  const total = indexURL === undefined && !cdn && BOOT_BYTES
    ? models.reduce((sum, name) => sum + (WEIGHT_BYTES[name] ?? 0), BOOT_BYTES) : null;
  indexURL = new URL(indexURL ?? (cdn ? CDN_URL : DEFAULT_INDEX_URL), location.href).href;
  if (!indexURL.endsWith("/")) indexURL += "/";
  const wheel = cdn ? await emberWheelURL() : undefined;
  const progress = (stage, message) => onProgress({ stage, message, ms: Math.round(performance.now() - t0) });
  const bar = progressBar ? showBar() : null;
  // bytes counted here (the wheels, for a worker) and in the worker (the runtime), summed
  const counts = [0, 0];
  const bytes = (which) => (n) => {
    counts[which] = n;
    const loaded = counts[0] + counts[1];
    onBytes({ loaded, total });
    bar?.show(loaded, total);
  };
  let handle;
  try {
    handle = worker
      ? await bootWorker({ indexURL, cdn, wheel, models, snapshots, progress, bytes, onStdout,
                           onStderr })
      : await bootHere({ indexURL, cdn, wheel, models, snapshots, progress, bytes: bytes(0),
                         onStdout, onStderr });
  } finally {
    bar?.remove();
  }
  handle.timings.ready = Math.round(performance.now() - t0);
  // the site's offline copy (web/offline.js), imported only now: one module fewer on the way to
  // the worker's start
  if (!cdn) import("./offline.js").then((m) => m.registerOffline(), () => {});
  // the next visits boot from a memory snapshot (boot.js), made where none restored once the
  // page's #status reads ready (offline.js: its own start-up, a model and a first inference,
  // competed with it for the CPU); the User Timing mark says how this boot went (the start-up
  // bench reads it)
  performance.mark?.(`ember:ready:snapshot-${handle.snapshot}`);
  handle.snapshotSaved = !cdn && snapshots && handle.snapshot !== "restored"
    ? import("./offline.js").then((m) => m.pageReady(), () => {}).then(() => saveSnapshot(indexURL))
    : Promise.resolve(null);
  progress("ready", "ready");
  return handle;
}

// A throwaway worker boots one more interpreter and keeps its snapshot (boot.js makeSnapshot):
// resolves to its size in bytes, or null where it could not (a note on the console). The
// User Timing mark `ember:snapshot-saved` (or `ember:snapshot-failed`) says when it is done.
function saveSnapshot(indexURL) {
  return new Promise((resolve) => {
    let w;
    const done = (bytes, why) => {
      w?.terminate();
      if (why) console.warn(`ember: no memory snapshot for the next visits (${why})`);
      performance.mark?.(bytes ? "ember:snapshot-saved" : "ember:snapshot-failed");
      resolve(bytes ?? null);
    };
    try {
      w = new Worker(new URL("./snapshot-worker.js", import.meta.url), { type: "module" });
    } catch (e) {
      done(null, e.message);
      return;
    }
    w.onmessage = ({ data }) => done(data.bytes, data.error);
    w.onerror = (e) => { e.preventDefault?.(); done(null, e.message || "its worker failed"); };
    w.postMessage({ indexURL });
  });
}

// A <progress> with "3.1 of 14.8 MB" after #status, redrawn at most once a frame (or 50 ms).
function showBar() {
  const status = globalThis.document?.getElementById("status");
  if (!status) return null;
  const bar = document.createElement("span");
  bar.className = "ember-progress";
  // small and wrapping: it must fit beside #status in a 390 px wide header
  bar.style.cssText = "display:inline-flex;flex-wrap:wrap;align-items:center;gap:.4em;" +
    "max-width:100%;margin:0 .5em;font-size:.85em";
  const meter = document.createElement("progress"), label = document.createElement("span");
  meter.style.width = "6em";
  meter.setAttribute("aria-label", "loading Python");
  bar.append(meter, label);
  status.after(bar);
  let frame = 0, latest = [0, null];
  const mb = (n) => (n / 1e6).toFixed(1);
  const draw = () => {
    frame = 0;
    const [loaded, total] = latest;
    if (total) { // (more than the total: a server that sends the files uncompressed)
      meter.max = Math.max(total, loaded);
      meter.value = loaded;
      label.textContent = `${mb(loaded)} of ${mb(Math.max(total, loaded))} MB`;
    } else {
      label.textContent = `${mb(loaded)} MB`;
    }
  };
  draw();
  let drawn = performance.now();
  return {
    // (at once where the last draw is 50 ms old or all is in: a burst of counts handled just
    // before ready would otherwise leave a stale label, its frame cancelled by remove)
    show(loaded, total) {
      latest = [loaded, total];
      const now = performance.now();
      if (now - drawn > 50 || (total && loaded >= total)) {
        cancelAnimationFrame(frame);
        drawn = now;
        draw();
      } else {
        frame ||= requestAnimationFrame(() => { drawn = performance.now(); draw(); });
      }
    },
    remove() { cancelAnimationFrame(frame); bar.remove(); },
  };
}

async function bootHere({ indexURL, cdn, wheel, models, snapshots, progress, bytes, onStdout,
                          onStderr }) {
  let sinks = { out: onStdout, err: onStderr };
  const py = await boot({ indexURL, cdn, emberWheelURL: wheel, models, snapshots, progress, bytes,
                          stdout: (t) => sinks.out(t), stderr: (t) => sinks.err(t) });
  let queue = Promise.resolve();
  return {
    worker: false, versions: py.versions, timings: { ...py.timings }, pyodide: py.pyodide,
    snapshot: py.snapshot,
    runPython(code, { onStdout: o = onStdout, onStderr: e = onStderr, ...opts } = {}) {
      // one run at a time: the output sinks belong to the run in progress
      const run = queue.then(async () => {
        sinks = { out: o, err: e };
        try { return await py.run(code, opts); } finally { sinks = { out: onStdout, err: onStderr }; }
      });
      queue = run.catch(() => {});
      return run;
    },
    interrupt() {},
    close() {},
  };
}

function bootWorker({ indexURL, cdn, wheel, models, snapshots, progress, bytes, onStdout,
                      onStderr }) {
  const workerBytes = bytes(1);
  const w = new Worker(new URL("./ember-worker.js", import.meta.url), { type: "module" });
  const runs = new Map();
  let nextId = 1;
  const interrupt = globalThis.crossOriginIsolated ? new Uint8Array(new SharedArrayBuffer(1)) : null;
  // The worker's Python buffers its output (boot.js, buffer_output): every 50 ms of a run the
  // signal that flushes it goes through the interrupt buffer (never over a pending Ctrl-C).
  let flusher = 0;
  const flushWhileRunning = (signal) => {
    if (!signal || flusher) return;
    flusher = setInterval(() => {
      if (!runs.size) { clearInterval(flusher); flusher = 0; } else if (interrupt[0] === 0) interrupt[0] = signal;
    }, 50);
  };
  return new Promise((resolve, reject) => {
    const fail = (message) => {
      const error = new Error(message);
      reject(error);
      for (const r of runs.values()) r.reject(error);
      runs.clear();
    };
    w.onerror = (e) => { e.preventDefault?.(); fail(`ember worker: ${e.message || "failed to start"}`); };
    w.onmessageerror = () => fail("ember worker: a message could not be read");
    w.onmessage = ({ data: m }) => {
      const run = runs.get(m.id);
      if (m.type === "progress") progress(m.stage, m.message);
      else if (m.type === "bytes") workerBytes(m.n);
      else if (m.type === "ready") {
        resolve({
          worker: true, versions: m.versions, timings: m.timings, snapshot: m.snapshot,
          runPython(code, { onStdout: o = onStdout, onStderr: e = onStderr, ...opts } = {}) {
            const id = nextId++;
            return new Promise((res, rej) => {
              runs.set(id, { resolve: res, reject: rej, out: o, err: e });
              if (interrupt) interrupt[0] = 0;
              flushWhileRunning(m.flushSignal);
              w.postMessage({ type: "run", id, code, opts });
            });
          },
          interrupt() { if (interrupt) interrupt[0] = 2; },
          close() { w.terminate(); fail("ember worker closed"); },
        });
      } else if (m.type === "stdout") run?.out(m.text);
      else if (m.type === "stderr") run ? run.err(m.text) : onStderr(m.text);
      else if (m.type === "done") { runs.delete(m.id); run?.resolve(m.outcome); }
      else if (m.type === "error") {
        if (run) { runs.delete(m.id); run.reject(new Error(m.message)); } else fail(m.message);
      }
    };
    w.postMessage({ type: "boot", indexURL, cdn, wheel, models, snapshots, interrupt,
                    packagesFromPage: !cdn });
    if (!cdn) {
      // fetched and unzipped here while the worker boots the runtime: this thread is idle then
      const meter = byteMeter(indexURL, bytes(0));
      fetchPackages(indexURL, ["ember"], meter, models).then(
        (packages) => w.postMessage({ type: "packages", packages }, transferables(packages)),
        (e) => w.postMessage({ type: "packages", error: String(e?.message ?? e) }))
        .finally(() => meter.stop());
    }
  });
}
