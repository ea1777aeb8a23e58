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

async def run(code, filename="<playground>", fresh=True, namespace=None):
    key = filename if namespace is None else namespace
    ns = {"__name__": "__main__"} if fresh else _namespaces.setdefault(key, {"__name__": "__main__"})
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

// ---- fast install ------------------------------------------------------------------------------
// Pyodide's loadPackage downloads a wheel only once its runtime is up, unpacks it with Python's
// zipfile (inflate in WebAssembly, a write per file: 250-450 ms for numpy and ember in a warm
// start here) and then calls importlib.invalidate_caches(), which imports importlib.metadata
// (~150 ms more). Instead, fetchPackages fetches each wheel as one gzip (`ember site` writes
// <wheel>.gz, its members stored, and its server sends that with Content-Encoding: the browser's
// network stack unpacks it; fetchWheel has the fallback), checks the lock's sha256,
// finds the members in place and compiles the shared libraries, while the runtime boots (on the
// page's thread when Python runs in a worker); installUnpacked then writes the files into
// Pyodide's file system, loads the shared libraries as loadPackage does, marks the packages
// loaded and refreshes only site-packages' import cache. web/README.md has the measurements.

// ---- bytes, for a progress bar -----------------------------------------------------------------
// byteMeter(indexURL, onBytes) counts the bytes of the boot files under indexURL as they come:
// the runtime's (fetched by Pyodide itself) as each one completes, from resource timing
// (encodedBodySize: the body as sent, compressed or not, from the network or the cache), and the
// wheels' (fetched here) as they stream in. onBytes(total so far) after each change.
export function byteMeter(indexURL, onBytes = () => {}) {
  const seen = new Map(); // url -> bytes
  const report = () => onBytes([...seen.values()].reduce((a, b) => a + b, 0));
  let observer = null;
  const note = (entries) => {
    for (const e of entries) {
      if (e.name.startsWith(indexURL) && e.encodedBodySize) seen.set(e.name, e.encodedBodySize);
    }
    report();
  };
  if (typeof PerformanceObserver === "function") {
    observer = new PerformanceObserver((list) => note(list.getEntries()));
    try { observer.observe({ type: "resource" }); } catch { observer = null; }
  }
  return {
    add(url, n) { seen.set(url, (seen.get(url) ?? 0) + n); report(); },
    // (the entries not delivered yet count too: the observer's callbacks wait for a thread that
    // is busy booting Python, and a boot could end with most of the runtime's bytes uncounted)
    stop() {
      if (!observer) return;
      note(observer.takeRecords());
      observer.disconnect();
      observer = null;
    },
  };
}

// {name, fileName, installDir, files: [[path, Uint8Array]], libraries: [[path, WebAssembly.Module]]}
// for `names` and their dependencies, dependencies first; `meter`: a byteMeter; `models`: the
// names of ember.models whose weights come too (fetchWeights), as files of ember's package
export async function fetchPackages(indexURL, names = ["ember"], meter = null, models = []) {
  const site = await siteLock(indexURL);
  const lock = site.packages;
  // (a lock without the list: every shared library, as loadPackage does)
  const atBoot = new RegExp(site.ember?.boot_libraries ?? SHARED_LIBRARY.source);
  const weights = fetchWeights(indexURL, site, models);
  weights.catch(() => {}); // (awaited below, with the packages)
  const order = [];
  const visit = (name) => {
    const entry = lock[name];
    if (!entry) throw new Error(`${name} is not in ${indexURL}pyodide-lock.json`);
    if (order.includes(entry)) return;
    entry.depends.forEach(visit);
    order.push(entry);
  };
  names.forEach(visit);
  return Promise.all(order.map(async (entry) => {
    if (entry.install_dir !== "site" || !entry.file_name.endsWith(".whl")) {
      throw new Error(`${entry.name}: only wheels installed into site-packages are unpacked here`);
    }
    const files = await unzip(await fetchWheel(`${indexURL}${entry.file_name}`, entry.sha256,
                                               meter, site.ember?.wheel_sizes?.[entry.file_name]),
                              entry.file_name);
    // the shared libraries that `import ember` loads compile here too (WebAssembly.compile copies
    // the bytes at once); Python's import loads any other from the file system on first use
    const libraries = await Promise.all(files.filter(([path]) => atBoot.test(path))
      .map(async ([path, data]) => [path, await WebAssembly.compile(data)]));
    if (entry.name === "ember") files.push(...await weights);
    return { name: entry.name, fileName: entry.file_name, installDir: entry.install_dir, files,
             libraries };
  }));
}

// The site's pyodide-lock.json, read once per folder (a promise)
const locks = new Map();
function siteLock(indexURL) {
  if (!locks.has(indexURL)) {
    locks.set(indexURL, fetch(`${indexURL}pyodide-lock.json`).then((r) => {
      if (!r.ok) throw new Error(`cannot load ${indexURL}pyodide-lock.json`);
      return r.json();
    }));
    locks.get(indexURL).catch(() => locks.delete(indexURL)); // a later call asks again
  }
  return locks.get(indexURL);
}

// ---- ember's model weights ---------------------------------------------------------------------
// `ember site` serves the weights of ember.models (3.4 MB, most of ember's wheel) as files of
// their own beside the wheel, listed in the lock's `ember.weights` (site.split_weights): only
// the pages that show a model need them. A page names its models (loadEmber({models})) and they
// come with the packages; other code gets them before its first run that loads one, as Pyodide
// loads a shipped package on its first import (`needsWeights`).
export const WEIGHTS_DIR = "ember/models/weights/";
const LOADS_WEIGHTS = /\bmodels\s*\.\s*(load|info|weights_path)\b|from\s+ember\.models\s+import[^\n]*\b(load|info|weights_path)\b/;

// the models whose weights `code` may load: those named in it as strings, or else all
function modelsIn(code, weights) {
  if (!LOADS_WEIGHTS.test(code)) return [];
  const named = Object.keys(weights).filter((name) => code.includes(`"${name}"`) || code.includes(`'${name}'`));
  return named.length ? named : Object.keys(weights);
}

// [[path in site-packages, Uint8Array]] of `models`' weights, each checked against the lock
async function fetchWeights(indexURL, site, models) {
  const weights = site.ember?.weights ?? {};
  return Promise.all(models.map(async (name) => {
    const entry = weights[name];
    if (!entry) throw new Error(`no weights of ember.models "${name}" in ${indexURL}pyodide-lock.json`);
    const response = await fetch(`${indexURL}${entry.file_name}`, { integrity: sri(entry.sha256) });
    if (!response.ok) throw new Error(`cannot load ${indexURL}${entry.file_name}: ${response.status}`);
    return [`${WEIGHTS_DIR}${name}.safetensors`, new Uint8Array(await response.arrayBuffer())];
  }));
}

const sri = (hex) => `sha256-${btoa(String.fromCharCode(...hex.match(/../g).map((h) => parseInt(h, 16))))}`;

// The wheel's bytes, checked against the lock's sha256 (crypto.subtle; without it, outside a
// secure context, the browser checks them through subresource integrity). The site's server
// sends a boot wheel from its <wheel>.gz (a gzip of the whole wheel, its members stored) with
// Content-Encoding: gzip: the network stack unpacks it away from this thread (on a warm visit
// too: the HTTP cache keeps it as sent; the service worker's keeps it unpacked). Gunzipping here
// instead (DecompressionStream, on this thread) held up the worker's own loads by ~70 ms of
// every start. A host that sends the wheel as it is gets asked for the .gz instead, gunzipped
// here. `size`: the wheel's bytes (the lock's ember.wheel_sizes), to count the bytes as sent.
async function fetchWheel(url, sha256, meter, size) {
  const subtle = globalThis.crypto?.subtle;
  if (!subtle) {
    const response = await fetch(url, { integrity: sri(sha256) });
    if (!response.ok) throw new Error(`cannot load ${url}: ${response.status}`);
    return response.arrayBuffer();
  }
  const plain = new AbortController();
  let response = await fetch(url, { signal: plain.signal });
  if (!response.ok) throw new Error(`cannot load ${url}: ${response.status}`);
  const encoded = response.headers.has("Content-Encoding");
  let gunzip = false;
  if (!encoded && typeof DecompressionStream === "function") {
    const gz = await fetch(`${url}.gz`).catch(() => null);
    if (gz?.ok) {
      plain.abort();
      [response, gunzip] = [gz, true];
    }
  }
  // the bytes as sent: where the browser unpacks them, those it gives scaled to the sent size
  const sent = Number(response.headers.get("Content-Length"));
  const scale = encoded && sent && size ? sent / size : 1;
  let counted = response.body.pipeThrough(new TransformStream({ transform(chunk, queue) {
    meter?.add(response.url, chunk.byteLength * scale);
    queue.enqueue(chunk);
  } }));
  if (gunzip) counted = counted.pipeThrough(new DecompressionStream("gzip"));
  const bytes = await new Response(counted).arrayBuffer();
  const digest = new Uint8Array(await subtle.digest("SHA-256", bytes));
  const hex = Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
  if (hex !== sha256) throw new Error(`${response.url}: sha256 ${hex} is not the lock's ${sha256}`);
  return bytes;
}

// the ArrayBuffers under fetchPackages' result (to transfer it to a worker without a copy)
export function transferables(packages) {
  return [...new Set(packages.flatMap((p) => p.files.map(([, data]) => data.buffer)))];
}

// [[path, Uint8Array]] of a zip archive's files (stored or deflated members; no zip64)
async function unzip(buffer, what) {
  const bytes = new Uint8Array(buffer), view = new DataView(buffer);
  const fail = (why) => { throw new Error(`${what}: ${why}`); };
  let end = bytes.length - 22;
  while (end >= Math.max(0, bytes.length - 22 - 65535) && view.getUint32(end, true) !== 0x06054b50) end--;
  if (end < 0 || view.getUint32(end, true) !== 0x06054b50) fail("not a zip archive");
  const count = view.getUint16(end + 10, true);
  let at = view.getUint32(end + 16, true);
  if (count === 0xffff || at === 0xffffffff) fail("zip64 archives are not unpacked here");
  const names = new TextDecoder();
  const files = [];
  for (let i = 0; i < count; i++) {
    if (view.getUint32(at, true) !== 0x02014b50) fail("damaged central directory");
    const flags = view.getUint16(at + 8, true), method = view.getUint16(at + 10, true);
    const size = view.getUint32(at + 20, true), fullSize = view.getUint32(at + 24, true);
    const nameLength = view.getUint16(at + 28, true), local = view.getUint32(at + 42, true);
    const name = names.decode(bytes.subarray(at + 46, at + 46 + nameLength));
    at += 46 + nameLength + view.getUint16(at + 30, true) + view.getUint16(at + 32, true);
    if (name.endsWith("/")) continue;
    if (flags & 1) fail(`${name} is encrypted`);
    if (name.startsWith("/") || name.split("/").includes("..")) fail(`unsafe member name ${name}`);
    if (view.getUint32(local, true) !== 0x04034b50) fail(`damaged local header of ${name}`);
    const start = local + 30 + view.getUint16(local + 26, true) + view.getUint16(local + 28, true);
    const data = bytes.subarray(start, start + size);
    if (method === 0) files.push([name, data]);
    else if (method === 8) files.push([name, inflate(data, fullSize)]);
    else fail(`${name}: compression method ${method}`);
  }
  return Promise.all(files.map(async ([name, data]) => [name, await data]));
}

async function inflate(data, size) {
  const stream = new Blob([data]).stream().pipeThrough(new DecompressionStream("deflate-raw"));
  const out = new Uint8Array(await new Response(stream).arrayBuffer());
  if (out.length !== size) throw new Error(`inflated ${out.length} bytes, expected ${size}`);
  return out;
}

const SHARED_LIBRARY = /\.so(\.\d+)*$/;

// Writes fetchPackages' files into site-packages and does what Pyodide's loadPackage does after
// unpacking: the INSTALLER / PYODIDE_SOURCE records, the shared libraries (those compiled in
// fetchPackages; Python's import loads any other from the file system), loadedPackages.
async function installUnpacked(pyodide, packages) {
  const api = pyodide._api;
  const site = api.sitePackages;
  const FS = pyodide.FS;
  const made = new Set();
  const mkdir = (dir) => { if (!made.has(dir)) { FS.mkdirTree(dir); made.add(dir); } };
  for (const { name, fileName, files, libraries } of packages) {
    for (const [path, data] of files) {
      const target = `${site}/${path}`;
      mkdir(target.slice(0, target.lastIndexOf("/")));
      FS.writeFile(target, data, { canOwn: true });
    }
    const dynlibs = (libraries ?? []).map(([path]) => `${site}/${path}`);
    const distInfo = files.map(([p]) => p.split("/")[0]).find((d) => d.endsWith(".dist-info"));
    if (distInfo) {
      FS.writeFile(`${site}/${distInfo}/INSTALLER`, "pyodide.loadPackage");
      FS.writeFile(`${site}/${distInfo}/PYODIDE_SOURCE`, "pyodide");
    }
    // instantiated here from the modules compiled beside the fetch, then found by Pyodide's loader
    // as preloaded (what Emscripten's own wasm preload plugin does); loaded in the same order
    const mod = pyodide._module;
    if (typeof mod.loadWebAssemblyModule === "function" && mod.preloadedWasm) {
      for (const [path, compiled] of libraries ?? []) {
        const target = `${site}/${path}`;
        mod.preloadedWasm[target] = await mod.loadWebAssemblyModule(
          compiled, { loadAsync: true, nodelete: true, allowUndefined: true }, target, {});
      }
    }
    await api.loadDynlibsFromPackage({ file_name: fileName }, dynlibs);
    pyodide.loadedPackages[name] = "default channel";
  }
  // the finder of site-packages may have listed the folder before the files came
  const globals = pyodide.toPy({});
  try {
    pyodide.runPython(`import sys\nf = sys.path_importer_cache.get(${JSON.stringify(site)})\n` +
                      "if f is not None: f.invalidate_caches()", { globals });
  } finally {
    globals.destroy();
  }
}

// the Pyodide internals installUnpacked needs (pinned release; else loadPackage does the work)
function canInstallUnpacked(pyodide) {
  const api = pyodide._api;
  return typeof api?.loadDynlibsFromPackage === "function" && typeof api.sitePackages === "string"
    && typeof pyodide.FS?.writeFile === "function" && typeof pyodide.loadedPackages === "object";
}

// ---- a memory snapshot of the booted interpreter -----------------------------------------------
// Python's own start and Pyodide's bootstrap (~0.4-0.6 s of every start here) are the same on
// every visit: once a page is ready for the first time, makeSnapshot (in a throwaway worker:
// snapshot-worker.js) boots one more interpreter with `_makeSnapshot`, copies its heap right
// after the bootstrap (Pyodide 0.27.7 snapshots only before any package is loaded) and keeps it
// in Cache Storage, keyed by the pinned runtime's URL (content-addressed: a new runtime never
// finds an old heap, and makeSnapshot deletes the others). Later boots restore that heap
// (`_loadSnapshot`) and go on as usual: packages, imports. The interpreter that made it is
// thrown away because `_makeSnapshot` wraps the page's globals in proxies for the rest of its
// life (a DOM method called through one fails). A snapshot that does not restore, or a boot from
// one that fails anywhere later, is deleted and the page boots afresh.
export const SNAPSHOTS = "pyodide-snapshots";
const snapshotKey = (indexURL) => `${indexURL}memory-snapshot.bin`;
// Kept beside the bytes: their length and a sum of every 64th word (~1 ms; a SHA-256 of the
// ~21 MB took 60-130 ms here). It tells a snapshot kept whole from a truncated or foreign one
// (a heap smaller than the runtime's memory would hang Pyodide's instantiation, not fail it);
// one damaged inside fails in the restore, which boot() survives.
const CHECK = "X-Ember-Snapshot-Check";
function check(bytes) {
  const words = new Uint32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength >> 2);
  let sum = 0;
  for (let i = 0; i < words.length; i += 64) sum = (Math.imul(sum, 31) + words[i]) >>> 0;
  return `${bytes.byteLength}:${sum.toString(16)}`;
}

// Half of a heap's 4 KiB pages are zeros (49% of Pyodide 0.27.7's 21 MB after its bootstrap;
// its top 4.5 MB are all zeros), and every warm visit reads the snapshot back from disk while
// the runtime's files come from the HTTP cache: it is kept sparse. [magic, length, runs] as
// 32-bit words, a run's (offset, length) pair each, then the runs' bytes one after the other;
// the pages between runs are zeros.
const SPARSE = 0x31534d45; // "EMS1"
const PAGE = 4096;
function sparse(bytes) {
  if (bytes.byteLength % 4 || bytes.byteOffset % 4) throw new Error("a heap is whole 32-bit words");
  const words = new Uint32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength >> 2);
  const runs = [];
  for (let page = 0; page * PAGE < bytes.byteLength; page++) {
    const start = page * PAGE, end = Math.min(start + PAGE, bytes.byteLength);
    let zero = true;
    for (let w = start >> 2; w < end >> 2; w++) if (words[w]) { zero = false; break; }
    if (zero) continue;
    const last = runs[runs.length - 1];
    if (last && last[0] + last[1] === start) last[1] = end - last[0];
    else runs.push([start, end - start]);
  }
  const head = 3 + 2 * runs.length;
  const out = new Uint8Array(4 * head + runs.reduce((n, [, length]) => n + length, 0));
  const header = new Uint32Array(out.buffer, 0, head);
  header.set([SPARSE, bytes.byteLength, runs.length]);
  let at = 4 * head;
  runs.forEach(([offset, length], i) => {
    header.set([offset, length], 3 + 2 * i);
    out.set(bytes.subarray(offset, offset + length), at);
    at += length;
  });
  return out;
}

// sparse's inverse; null where `kept` is not one of its outputs (or is cut short) or does not
// unpack to `length` bytes (what the check kept beside it says: a damaged header must not
// make this allocate what it claims)
function unsparse(kept, length) {
  if (kept.byteLength < 12) return null;
  const [magic, claimed, count] = new Uint32Array(kept.buffer, kept.byteOffset, 3);
  const head = 3 + 2 * count;
  if (magic !== SPARSE || claimed !== length || kept.byteLength < 4 * head) return null;
  const runs = new Uint32Array(kept.buffer, kept.byteOffset, head);
  const bytes = new Uint8Array(length);
  let at = 4 * head;
  for (let i = 3; i < head; i += 2) {
    const [offset, size] = [runs[i], runs[i + 1]];
    if (offset + size > length || at + size > kept.byteLength) return null;
    bytes.set(kept.subarray(at, at + size), offset);
    at += size;
  }
  return at === kept.byteLength ? bytes : null;
}

// The kept snapshot: null where there is none, else {bytes: a promise of them}, read and checked
// while loadPyodide loads pyodide.asm.js (it awaits the promise only then: the 21 MB, kept
// whole, took 60-85 ms here, on the way to the runtime's own files before). One that fails the check
// rejects its promise: loadPyodide fails, and boot() deletes it and boots afresh.
// (caches.match with a cacheName, not caches.open: a first visit creates no cache to find none)
export async function findSnapshot(indexURL) {
  let hit;
  try {
    hit = await caches.match(snapshotKey(indexURL), { cacheName: SNAPSHOTS });
  } catch { // no Cache Storage (outside a secure context, some private windows)
    return null;
  }
  if (!hit) return null;
  const bytes = hit.arrayBuffer().then((buffer) => {
    const bytes = unsparse(new Uint8Array(buffer), parseInt(hit.headers.get(CHECK), 10));
    if (!bytes || bytes.byteLength % 4 || hit.headers.get(CHECK) !== check(bytes)) {
      throw new Error("the kept memory snapshot is damaged");
    }
    return bytes;
  });
  bytes.catch(() => {}); // (loadPyodide awaits it, or boot gives up before)
  return { bytes };
}

async function forgetSnapshot(indexURL) {
  try { await (await caches.open(SNAPSHOTS)).delete(snapshotKey(indexURL)); } catch { /* none */ }
}

// Keeps `bytes` as the snapshot of the runtime at indexURL, the only one kept.
export async function keepSnapshot(indexURL, bytes) {
  const cache = await caches.open(SNAPSHOTS);
  for (const old of await cache.keys()) {
    if (old.url !== snapshotKey(indexURL)) await cache.delete(old);
  }
  await cache.put(snapshotKey(indexURL), new Response(sparse(bytes), {
    headers: { "Content-Type": "application/octet-stream", [CHECK]: check(bytes) },
  }));
}

// Boots a throwaway interpreter, snapshots it, keeps the snapshot; resolves to its size in bytes.
export async function makeSnapshot(indexURL) {
  const { loadPyodide } = await import(/* @vite-ignore */ `${indexURL}pyodide.mjs`);
  const pyodide = await loadPyodide({ indexURL, fullStdLib: false, _makeSnapshot: true });
  const snapshot = pyodide.makeMemorySnapshot();
  await keepSnapshot(indexURL, snapshot);
  return snapshot.length;
}

// boot({indexURL, cdn, emberWheelURL, unpacked, progress, bytes, stdout, stderr, snapshots})
//   -> {pyodide, run, versions, timings, snapshot}
// snapshot: "restored" (booted from the kept snapshot), "none" (there was none: the page may
// make one, makeSnapshot) or "failed" (it was damaged or did not boot, and was deleted:
// booted afresh). snapshots: false boots without one.
// unpacked: a promise of fetchPackages(indexURL) started elsewhere (ember.js, on the page's thread,
// for a worker); by default boot fetches them itself once the runtime is up. A failure there falls
// back to loadPackage. progress(stage, message); bytes(n): the boot files' bytes so far (byteMeter);
// stdout/stderr(text) receive raw text as Python writes it.
// ember's caches (~/.cache/ember: ember.autotune's choices) live in IndexedDB, so a second visit
// tunes nothing: the folder is mounted from it before ember is imported, and written back after
// each run (a walk over a few small files). Where IndexedDB is missing (some private windows),
// the cache lasts one visit.
const CACHE_DIR = "/home/pyodide/.cache/ember";

async function mountCache(FS) {
  const sync = (populate) => new Promise((resolve, reject) =>
    FS.syncfs(populate, (e) => (e ? reject(e) : resolve())));
  try {
    FS.mkdirTree(CACHE_DIR);
    FS.mount(FS.filesystems.IDBFS, {}, CACHE_DIR);
    await sync(true);
  } catch (e) {
    return async () => {};
  }
  return () => sync(false).catch(() => {});
}

export async function boot(options) {
  // (looked up while the runtime's scripts load; the CDN's runtime is not the site's: none is kept)
  const found = options.cdn || options.snapshots === false ? Promise.resolve(null)
    : findSnapshot(options.indexURL);
  let used = false;
  try {
    const py = await bootOnce(options, found.then((kept) => { used = !!kept; return kept; }));
    return { ...py, snapshot: used ? "restored" : "none" };
  } catch (e) {
    if (!used) throw e;
    await forgetSnapshot(options.indexURL); // (damaged, or it did not boot)
    options.progress?.("runtime", `the kept interpreter failed (${e?.message ?? e}); booting afresh`);
    return { ...await bootOnce(options, Promise.resolve(null)), snapshot: "failed" };
  }
}

async function bootOnce({ indexURL, cdn = false, emberWheelURL, unpacked, models = [],
                          progress = () => {}, bytes = () => {}, stdout = () => {},
                          stderr = () => {} }, snapshot = Promise.resolve(null)) {
  // snapshot: a promise of findSnapshot's answer
  const t0 = performance.now();
  unpacked?.catch(() => {}); // handled below, once the runtime is up
  const timings = {};
  // also a User Timing mark, `ember:<stage>` (performance tools and the start-up bench read them)
  const mark = (name) => {
    timings[name] = Math.round(performance.now() - t0);
    performance.mark?.(`ember:${name}`);
  };
  const decoder = new TextDecoder();
  const writer = (sink) => ({ write: (buf) => { sink(decoder.decode(buf, { stream: true })); return buf.length; } });

  progress("runtime", `loading Pyodide ${PYODIDE_VERSION}${cdn ? " from the CDN" : ""}`);
  let loadPyodide;
  try {
    ({ loadPyodide } = await import(/* @vite-ignore */ `${indexURL}pyodide.mjs`));
  } catch (e) {
    throw new Error(`cannot load ${indexURL}pyodide.mjs: ${e.message}`);
  }
  const meter = byteMeter(indexURL, bytes);
  let pyodide;
  try {
    const kept = await snapshot;
    const restore = kept ? { _loadSnapshot: kept.bytes } : {};
    pyodide = await loadPyodide({ indexURL, fullStdLib: false, ...restore });
  } finally {
    if (unpacked) meter.stop(); // (else the wheels' bytes follow: fetchPackages below)
  }
  pyodide.setStdout(writer(stdout));
  pyodide.setStderr(writer(stderr));
  // (its first read of IndexedDB, up to 0.2 s in a fresh profile, goes on while the packages
  // install: only ember's import needs it)
  const cache = mountCache(pyodide.FS);
  mark("runtime");

  progress("packages", "loading numpy and ember");
  const errors = [];
  const opts = { messageCallback: (m) => progress("packages", m), errorCallback: (m) => errors.push(m) };
  let packages = null;
  if (!cdn && canInstallUnpacked(pyodide)) {
    try {
      packages = await (unpacked ?? fetchPackages(indexURL, ["ember"], meter, models));
    } catch (e) {
      progress("packages", `unpacking in JS failed (${e?.message ?? e}); loadPackage instead`);
    }
  }
  meter.stop();
  if (packages) {
    await installUnpacked(pyodide, packages);
  } else if (cdn) {
    await pyodide.loadPackage(["numpy"], opts);
    await pyodide.loadPackage([emberWheelURL], opts);
  } else {
    await pyodide.loadPackage(["ember"], opts);
  }
  if (errors.length) throw new Error(`loading packages failed: ${errors.join("; ")}`);
  // the weights of ember.models: the page's with the packages (above, where unpacked here), any
  // other before the run whose code loads it
  const site = pyodide._api?.sitePackages ?? "/lib/python3.12/site-packages";
  const weightsFrom = cdn ? new URL(".", emberWheelURL).href : indexURL; // (the site's own)
  async function addWeights(names) {
    const missing = names.filter((n) => !pyodide.FS.analyzePath(`${site}/${WEIGHTS_DIR}${n}.safetensors`).exists);
    if (!missing.length) return;
    const files = await fetchWeights(weightsFrom, await siteLock(weightsFrom), missing);
    pyodide.FS.mkdirTree(`${site}/${WEIGHTS_DIR}`);
    for (const [path, data] of files) pyodide.FS.writeFile(`${site}/${path}`, data, { canOwn: true });
  }
  if (!packages) await addWeights(models);
  mark("packages");

  const persist = await cache;
  progress("import", "importing ember");
  // one runPython (each call parses and compiles its code): the runner and the versions
  const loaded = pyodide.runPython(
    `${RUNNER}\nimport ember, numpy\n(run, sys.version.split()[0], numpy.__version__, ember.__version__)`,
    { globals: pyodide.toPy({}) });
  const [runner, python, numpyVersion, emberVersion] = loaded.toJs({ depth: 1 });
  loaded.destroy();
  const versions = { pyodide: pyodide.version, python, numpy: numpyVersion, ember: emberVersion };
  mark("import");

  // fresh: false keeps one namespace per `namespace` (default: per filename) across runs
  async function run(code, { filename = "<playground>", fresh = true, namespace } = {}) {
    // an `import PIL` loads the shipped pillow wheel; unknown imports fail in Python, visibly
    await pyodide.loadPackagesFromImports(code, { messageCallback: () => {}, errorCallback: stderr });
    if (LOADS_WEIGHTS.test(code)) {
      try {
        await addWeights(modelsIn(code, (await siteLock(weightsFrom)).ember?.weights ?? {}));
      } catch (e) { // the code runs all the same, and ember.models says what is missing
        stderr(`ember: the weights of ember.models could not be loaded (${e?.message ?? e})\n`);
      }
    }
    const out = await runner(code, filename, fresh, namespace ?? undefined);
    const [ok, value] = out.toJs();
    out.destroy();
    await persist();
    return ok ? { ok, result: value ?? null } : { ok, error: value };
  }
  return { pyodide, run, persist, versions, timings };
}
