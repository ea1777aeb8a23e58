// Boots Pyodide with ember, in a page or in a worker: shared by ember.js and ember-worker.js.
// Everything a page needs comes from the site itself (indexURL), unless it asked for the CDN.

export const PYODIDE_VERSION = "0.27.7";
export const CDN_URL = `https://cdn.jsdelivr.net/pyodide/v${PYODIDE_VERSION}/full/`;

// Runs user code: top-level await, the value of a last expression as its repr, tracebacks that
// start at the user's code (not inside Pyodide's runner), output flushed at the end.
const RUNNER = String.raw`
import linecache, sys, traceback
from pyodide.code import eval_code_async

_namespaces = {}

async def run(code, filename="<playground>", fresh=True):
    ns = {"__name__": "__main__"} if fresh else _namespaces.setdefault(filename, {"__name__": "__main__"})
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    try:
        value = await eval_code_async(code, ns, filename=filename)
        return [True, None if value is None else repr(value)]
    except BaseException as e:  # the page shows every error, KeyboardInterrupt included
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != filename:
            tb = tb.tb_next
        return [False, "".join(traceback.format_exception(type(e), e, tb or e.__traceback__))]
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
`;

// boot({indexURL, cdn, emberWheelURL, progress, stdout, stderr}) -> {pyodide, run, versions, timings}
// progress(stage, message); stdout/stderr(text) receive raw text as Python writes it.
export async function boot({ indexURL, cdn = false, emberWheelURL, progress = () => {},
                             stdout = () => {}, stderr = () => {} }) {
  const t0 = performance.now();
  const timings = {};
  const mark = (name) => { timings[name] = Math.round(performance.now() - t0); };
  const decoder = new TextDecoder();
  const writer = (sink) => ({ write: (buf) => { sink(decoder.decode(buf, { stream: true })); return buf.length; } });

  progress("runtime", `loading Pyodide ${PYODIDE_VERSION}${cdn ? " from the CDN" : ""}`);
  let loadPyodide;
  try {
    ({ loadPyodide } = await import(/* @vite-ignore */ `${indexURL}pyodide.mjs`));
  } catch (e) {
    throw new Error(`cannot load ${indexURL}pyodide.mjs: ${e.message}`);
  }
  const pyodide = await loadPyodide({ indexURL, fullStdLib: false });
  pyodide.setStdout(writer(stdout));
  pyodide.setStderr(writer(stderr));
  mark("runtime");

  progress("packages", "loading numpy and ember");
  const errors = [];
  const opts = { messageCallback: (m) => progress("packages", m), errorCallback: (m) => errors.push(m) };
  if (cdn) {
    await pyodide.loadPackage(["numpy"], opts);
    await pyodide.loadPackage([emberWheelURL], opts);
  } else {
    await pyodide.loadPackage(["ember"], opts);
  }
  if (errors.length) throw new Error(`loading packages failed: ${errors.join("; ")}`);
  mark("packages");

  progress("import", "importing ember");
  const runner = pyodide.runPython(`${RUNNER}\nimport ember, numpy\nrun`, { globals: pyodide.toPy({}) });
  const versions = {
    pyodide: pyodide.version,
    python: pyodide.runPython("import sys; sys.version.split()[0]"),
    numpy: pyodide.runPython("import numpy; numpy.__version__"),
    ember: pyodide.runPython("import ember; ember.__version__"),
  };
  mark("import");

  async function run(code, { filename = "<playground>", fresh = true } = {}) {
    // an `import PIL` loads the shipped pillow wheel; unknown imports fail in Python, visibly
    await pyodide.loadPackagesFromImports(code, { messageCallback: () => {}, errorCallback: stderr });
    const out = await runner(code, filename, fresh);
    const [ok, value] = out.toJs();
    out.destroy();
    return ok ? { ok, result: value ?? null } : { ok, error: value };
  }
  return { pyodide, run, versions, timings };
}
