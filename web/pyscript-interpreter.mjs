// PyScript's interpreter for this site's pages: `<script type="py" config='{"interpreter":
// "../../web/pyscript-interpreter.mjs"}'>`. PyScript imports a module like Pyodide's own
// pyodide.mjs ({loadPyodide, version}) and calls loadPyodide({stdout, stderr, indexURL, ...});
// this one boots the way every other page of the site does (loadEmber on the page's thread: the
// kept memory snapshot, numpy and ember unpacked while the runtime starts, one kept for the next
// visits once the page is ready) instead of Pyodide's plain boot and micropip's install of
// ember, and hands PyScript the interpreter. So the page's config names no "packages": numpy
// and ember are there, and any other import loads a package of the site's runtime on first use
// (Pyodide's loadPackagesFromImports) as in every page.
import { loadEmber, PYODIDE_VERSION } from "./ember.js";

export const version = PYODIDE_VERSION;

// indexURL, lockFileURL: PyScript's guess from this module's URL, not the runtime's (the site's
// pinned one is loadEmber's default); packages: what a config names, loaded after the boot
export async function loadPyodide({ stdout, stderr, packages = [] } = {}) {
  const ember = await loadEmber({ worker: false });
  const pyodide = ember.pyodide;
  // PyScript's own sinks take whole lines, as Pyodide's `batched` output gives them
  if (stdout) pyodide.setStdout({ batched: stdout });
  if (stderr) pyodide.setStderr({ batched: stderr });
  if (packages.length) await pyodide.loadPackage(packages, { messageCallback: () => {} });
  return pyodide;
}
