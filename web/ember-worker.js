// The Web Worker behind loadEmber({worker: true}): boots Pyodide here and runs code on request,
// so a long Python computation never freezes the page. Messages in: boot, packages (the wheels
// the page fetched and unpacked meanwhile: fetchPackages in boot.js), run; out: progress, bytes, ready,
// stdout, stderr, done, error.
import { boot } from "./boot.js";

// Output in 8 KB blocks, not lines: a JS call per printed line cost ~75 us (100,000 lines took
// 7 s). The page (ember.js) sends SIGUSR1 through the interrupt buffer every 50 ms while Python
// runs, a timer here flushes while a run awaits, and each run's end flushes. stderr flushes
// stdout before it writes, so their order holds. -> (flush, the signal's number)
const BUFFER_OUTPUT = String.raw`
import io, signal, sys

def flush_output(*_):
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a stream the user's code swapped in, closed
            pass

class Stderr(io.TextIOWrapper):
    def write(self, text):
        sys.stdout.flush()
        return super().write(text)

sys.stdout.reconfigure(line_buffering=False)
_err = sys.stderr
sys.stderr = Stderr(_err.buffer, encoding=_err.encoding, errors=_err.errors, line_buffering=True)
signal.signal(signal.SIGUSR1, flush_output)
(flush_output, int(signal.SIGUSR1))
`;

let py = null;
let flushOutput = () => {};
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
        indexURL: m.indexURL, cdn: m.cdn, emberWheelURL: m.wheel, models: m.models,
        snapshots: m.snapshots,
        unpacked: m.packagesFromPage ? packages : undefined,
        progress: (stage, message) => postMessage({ type: "progress", stage, message }),
        bytes: (n) => postMessage({ type: "bytes", n }),
        stdout: (text) => postMessage({ type: "stdout", id: current, text }),
        stderr: (text) => postMessage({ type: "stderr", id: current, text }),
      });
      let flushSignal = null;
      if (m.interrupt) {
        py.pyodide.setInterruptBuffer(m.interrupt);
        const made = py.pyodide.runPython(BUFFER_OUTPUT, { globals: py.pyodide.toPy({}) });
        [flushOutput, flushSignal] = made.toJs({ depth: 1 }); // ember.js sends it during runs
        made.destroy();
      }
      postMessage({ type: "ready", versions: py.versions, timings: py.timings, flushSignal,
                    snapshot: py.snapshot });
    } catch (e) {
      postMessage({ type: "error", message: String(e?.message ?? e) });
    }
  } else if (m.type === "run") {
    if (!py) return postMessage({ type: "error", id: m.id, message: "ember is not booted" });
    queue = queue.then(async () => {
      current = m.id;
      // while the run awaits, this thread is free: what it printed before shows meanwhile
      const flusher = setInterval(() => flushOutput(), 50);
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
