// Runs pytest inside Pyodide, in Node: the same tests/ files as CPython, on the site's Pyodide,
// numpy and ember wheel, with pure-Python pytest/hypothesis wheels vendored at build time.
// Usage: node pyodide_pytest.mjs CONFIG.json, CONFIG = {pyodide_dir, wheels: [paths],
// repo: path, files: [repo-relative paths to copy in], env: {...}, args: [pytest args]}.
// Prints pytest's output, then one line `PYODIDE_PYTEST {"exit": N, "junit": "<xml>"}`.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const cfg = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const indexURL = cfg.pyodide_dir.endsWith("/") ? cfg.pyodide_dir : cfg.pyodide_dir + "/";
const { loadPyodide } = await import(pathToFileURL(indexURL + "pyodide.mjs").href);
const py = await loadPyodide({ indexURL, env: { HOME: "/home/pyodide", ...cfg.env },
  stdout: (s) => console.log(s), stderr: (s) => console.log(s) });
await py.loadPackage(["ember", "micropip"], { messageCallback: () => {} });

// the test wheels: unpacked straight into site-packages (pure Python, no resolver needed)
for (const wheel of cfg.wheels) {
  const dst = `/tmp/${path.basename(wheel)}`;
  py.FS.writeFile(dst, fs.readFileSync(wheel));
  py.runPython(`import zipfile, site; zipfile.ZipFile(${JSON.stringify(dst)}).extractall(site.getsitepackages()[0])`);
}

// the repository's test files, copied into the in-memory file system
const repo = "/home/pyodide/repo";
function copy(rel) {
  const src = path.join(cfg.repo, rel);
  const st = fs.statSync(src);
  if (st.isDirectory()) {
    for (const name of fs.readdirSync(src)) {
      if (name === "__pycache__" || name.startsWith(".")) continue;
      copy(path.join(rel, name));
    }
  } else {
    py.FS.mkdirTree(path.posix.dirname(`${repo}/${rel}`));
    py.FS.writeFile(`${repo}/${rel}`, fs.readFileSync(src));
  }
}
for (const rel of cfg.files) copy(rel);

py.globals.set("ARGS", py.toPy(cfg.args));
const code = py.runPython(`
import os, sys
os.chdir(${JSON.stringify(repo)})
sys.path.insert(0, ${JSON.stringify(repo)})
import pytest
exit_code = int(pytest.main(list(ARGS) + ["--junitxml", "/tmp/junit.xml", "-p", "no:cacheprovider", "-p", "no:faulthandler", "--capture=sys"]))
exit_code
`);
const junit = new TextDecoder().decode(py.FS.readFile("/tmp/junit.xml"));
console.log("PYODIDE_PYTEST " + JSON.stringify({ exit: code, junit }));
