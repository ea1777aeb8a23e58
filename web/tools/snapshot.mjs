// Build-time step of `ember site`: the memory snapshot the site ships, so that a first visit
// restores a booted interpreter instead of running Python's start and Pyodide's bootstrap
// (web/boot.js findSnapshot; web/README.md has the measurements). Usage:
//   node snapshot.mjs INDEX_DIR OUT
// INDEX_DIR is the site's runtime folder (its pyodide.asm.wasm, its python_stdlib.zip: the heap
// holds zipimport's table of that very zip, so the snapshot is only good with those files).
// Node boots the same wasm the browser does; the heap holds no JS object (Pyodide's snapshot
// header lists none), so it restores in a page as one made there does.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [dir, out] = process.argv.slice(2);
// Emscripten takes the program's name from argv[1] (Python's sys.executable, the `_` variable):
// the name a page's runtime has, not this script's path on the build machine
process.argv[1] = "./this.program";
const { loadPyodide } = await import(pathToFileURL(path.join(dir, "pyodide.mjs")).href);
const py = await loadPyodide({ indexURL: dir + path.sep, fullStdLib: false, _makeSnapshot: true,
                               stdout: () => {}, stderr: (s) => console.error(s) });
fs.writeFileSync(out, py.makeMemorySnapshot());
