// Build-time step of `ember site`: compile the Python modules of the stdlib zip and of wheels to
// bytecode with Pyodide's own CPython (the .pyc magic and marshal format must be the ones the
// browser runs), in Node. Usage: node precompile.mjs JOB.json, where JOB.json is
// {indexURL, jobs: [{src, dst, kind: "stdlib" | "wheel", keep_source, drop, store}]}.
// stdlib / keep_source=false: foo.py becomes a sourceless foo.pyc (unchecked hash) in place.
// keep_source=true: foo.py stays and __pycache__/foo.cpython-312.pyc (unchecked hash) is added.
// drop: a regular expression (Python syntax); members whose names match it are left out (what
// no page needs at run time: type stubs, C headers, static libraries, test-only extensions).
// store: every member is stored, none deflated (a page unzips the wheel in JS, after one native
// gunzip of the whole file: web/boot.js fetchPackages; the stdlib zip goes out compressed as a
// whole, and zipimport then inflates nothing).
// Wheels get a new RECORD. Prints one JSON line: per job, the counts and sizes.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const job = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const { loadPyodide } = await import(pathToFileURL(path.join(job.indexURL, "pyodide.mjs")).href);
const py = await loadPyodide({ indexURL: job.indexURL, stdout: () => {}, stderr: (s) => console.error(s) });

const COMPILE = String.raw`
import base64, csv, hashlib, importlib.util, io, re, sys, zipfile, zlib
from importlib._bootstrap_external import _code_to_hash_pyc

TAG = sys.implementation.cache_tag

def _pyc(data, filename):
    code = compile(data, filename, "exec", dont_inherit=True)
    return _code_to_hash_pyc(code, importlib.util.source_hash(data), checked=False)

def compile_archive(src, dst, kind, keep_source, drop=None, store=False):
    drop = re.compile(drop) if drop else None
    # where the modules live once installed: tracebacks name these paths
    prefix = f"/lib/python{sys.version_info[0]}{sys.version_info[1]}.zip/" if kind == "stdlib" \
        else f"/lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages/"
    compiled = kept = dropped = 0
    written = {}
    record = None
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        def put(info, name, data):
            out = zipfile.ZipInfo(name, date_time=info.date_time)
            # a member deflate barely shrinks (model weights, .wasm) is stored: every start
            # unpacks the wheel in the page, and inflating 3 MB of weights cost ~25 ms there
            shrinks = not store and (len(data) <= 4096 or len(zlib.compress(data, 6)) < 0.9 * len(data))
            out.compress_type = zipfile.ZIP_DEFLATED if shrinks else zipfile.ZIP_STORED
            out.external_attr = info.external_attr
            zout.writestr(out, data)
            written[name] = data
        for info in zin.infolist():
            if info.is_dir():
                continue
            if drop is not None and drop.search(info.filename):
                dropped += 1
                continue
            name, data = info.filename, zin.read(info)
            if kind == "wheel" and name.endswith(".dist-info/RECORD"):
                record = (info, name)
                continue
            if name.endswith(".py"):
                try:
                    pyc = _pyc(data, prefix + name)
                except (SyntaxError, ValueError):
                    put(info, name, data)   # not valid Python 3.12 (templates, test data): as is
                    kept += 1
                    continue
                compiled += 1
                if keep_source:
                    put(info, name, data)
                    folder, _, stem = name.rpartition("/")
                    cached = f"{folder}/__pycache__/{stem[:-3]}.{TAG}.pyc" if folder \
                        else f"__pycache__/{stem[:-3]}.{TAG}.pyc"
                    put(info, cached, pyc)
                else:
                    put(info, name + "c", pyc)
            else:
                put(info, name, data)
        if record is not None:
            info, name = record
            buf = io.StringIO()
            w = csv.writer(buf, lineterminator="\n")
            for n, data in written.items():
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
                w.writerow([n, "sha256=" + digest.decode(), len(data)])
            w.writerow([name, "", ""])
            put(info, name, buf.getvalue().encode())
    return {"compiled": compiled, "kept_as_source": kept, "dropped": dropped}
`;
py.runPython(COMPILE);
const compileArchive = py.globals.get("compile_archive");
const report = [];
for (const [i, j] of job.jobs.entries()) {
  const src = `/tmp/in${i}`, dst = `/tmp/out${i}`;
  py.FS.writeFile(src, fs.readFileSync(j.src));
  const t0 = performance.now();
  const counts = compileArchive(src, dst, j.kind, j.keep_source, j.drop ?? null, j.store ?? false).toJs({ dict_converter: Object.fromEntries });
  fs.mkdirSync(path.dirname(j.dst), { recursive: true });
  fs.writeFileSync(j.dst, py.FS.readFile(dst));
  report.push({ file: path.basename(j.src), ...counts, seconds: (performance.now() - t0) / 1000,
                bytes_before: fs.statSync(j.src).size, bytes_after: fs.statSync(j.dst).size });
  py.FS.unlink(src); py.FS.unlink(dst);
}
console.log(JSON.stringify(report));
