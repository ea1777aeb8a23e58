"""ember.site without a network or a browser: the sha256 check against the official lock, the
lock entry, the cached downloads, the server's headers, the playground's examples and the CLI.
The real build and the browser are exercised in e2e/."""

import ast
import asyncio
import gzip
import hashlib
import json
import shutil
import subprocess
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest

from ember import cli, site

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "demos" / "playground" / "examples"


def fake_release(tmp_path, data=b"wheel bytes", lock_data=None):
    name = "numpy-2.0.2-cp312-cp312-pyodide_2024_0_wasm32.whl"
    archive = tmp_path / "assets.whl"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr(site.WHEELS_FOLDER + name, data)
    digest = hashlib.sha256(lock_data if lock_data is not None else data).hexdigest()
    lock = {"packages": {"numpy": {"file_name": name, "sha256": digest, "depends": []}}}
    return archive, lock, name


def test_a_wheel_whose_sha256_differs_from_the_official_lock_is_refused(tmp_path):
    archive, lock, name = fake_release(tmp_path, b"tampered", lock_data=b"official")
    with pytest.raises(site.SiteError) as e:
        site.extract_wheels(archive, lock, ["numpy"], tmp_path)
    assert name in str(e.value) and "sha256" in str(e.value)
    assert not (tmp_path / name).exists()


def test_a_matching_wheel_is_extracted(tmp_path):
    archive, lock, name = fake_release(tmp_path)
    site.extract_wheels(archive, lock, ["numpy"], tmp_path)
    assert (tmp_path / name).read_bytes() == b"wheel bytes"


def test_a_wheel_missing_from_the_archive_is_named(tmp_path):
    archive, lock, name = fake_release(tmp_path)
    lock["packages"]["numpy"]["file_name"] = "numpy-9.whl"
    with pytest.raises(site.SiteError, match="numpy-9.whl"):
        site.extract_wheels(archive, lock, ["numpy"], tmp_path)


def test_dependencies_are_closed_over():
    lock = {"packages": {"micropip": {"depends": ["packaging"]}, "packaging": {"depends": []},
                         "numpy": {"depends": []}}}
    assert site.with_dependencies(lock, ["numpy", "micropip"]) == \
        ["numpy", "micropip", "packaging"]
    with pytest.raises(site.SiteError, match="scipy"):
        site.with_dependencies(lock, ["scipy"])


@pytest.mark.parametrize("member, dropped", [
    ("numpy/__init__.pyi", True), ("numpy/_core/include/numpy/ndarraytypes.h", True),
    ("numpy/_core/lib/libnpymath.a", True), ("numpy/random/c_distributions.pxd", True),
    ("numpy/f2py/src/fortranobject.c", True), ("numpy/random/_examples/cython/meson.build", True),
    ("numpy/_core/_umath_tests.cpython-312-wasm32-emscripten.so", True),
    # numpy's import documents a function of _multiarray_tests: it must stay
    ("numpy/_core/_multiarray_tests.cpython-312-wasm32-emscripten.so", False),
    ("numpy/_core/_multiarray_umath.cpython-312-wasm32-emscripten.so", False),
    ("numpy/__init__.pyc", False), ("numpy/lib/format.pyc", False),
    ("numpy-2.0.2.dist-info/METADATA", False), ("numpy/py.typed", False),
])
def test_numpy_members_no_page_needs_are_dropped(member, dropped):
    import re
    assert bool(re.search(site.DROP["numpy"], member)) is dropped


def test_write_gzip_is_deterministic(tmp_path):
    import gzip
    wheel = tmp_path / "x-1.0-py3-none-any.whl"
    wheel.write_bytes(b"stored members " * 100)
    site.write_gzip(wheel)
    first = (tmp_path / "x-1.0-py3-none-any.whl.gz").read_bytes()
    site.write_gzip(wheel)
    assert (tmp_path / "x-1.0-py3-none-any.whl.gz").read_bytes() == first  # no name, no time
    assert gzip.decompress(first) == wheel.read_bytes()


def test_lock_entry_for_the_ember_wheel(tmp_path):
    wheel = tmp_path / "ember-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"zip")
    entry = site.lock_entry(wheel, "ember", "0.1.0", ["ember"], ["numpy"])
    assert entry["file_name"] == wheel.name and entry["depends"] == ["numpy"]
    assert entry["sha256"] == hashlib.sha256(b"zip").hexdigest()


def test_downloads_come_from_the_cache_when_present(tmp_path, monkeypatch):
    (tmp_path / "downloads").mkdir()
    (tmp_path / "downloads" / "pyodide-0.27.7.tgz").write_bytes(b"")
    (tmp_path / "downloads" / "pytest-9.2.0-py3-none-any.whl").write_bytes(b"")

    def offline(*a, **kw):
        raise AssertionError("no download expected")
    monkeypatch.setattr(site, "_run", offline)
    assert site.npm_pack("pyodide@0.27.7", tmp_path).name == "pyodide-0.27.7.tgz"
    assert site.pip_download(["pytest==9.2.0"], tmp_path)[0].name.startswith("pytest-9.2.0")


def test_a_missing_tool_is_a_clear_error():
    with pytest.raises(site.SiteError, match="not found"):
        site._run(["no-such-tool-for-ember"], "testing")


@pytest.fixture
def served(tmp_path):
    (tmp_path / "a.wasm").write_bytes(b"\0asm" + bytes(100))
    (tmp_path / "m.mjs").write_text("export {};")
    (tmp_path / "index.html").write_text("<title>t</title>")
    server = site.SiteServer(tmp_path).start()
    yield server
    server.stop()


def test_server_headers_mime_types_and_revalidation(served):
    with urllib.request.urlopen(served.url + "a.wasm") as r:
        assert r.headers["Content-Type"] == "application/wasm"
        assert r.headers["Cross-Origin-Opener-Policy"] == "same-origin"
        assert r.headers["Cross-Origin-Embedder-Policy"] == "require-corp"
        assert r.headers["Cache-Control"] == "no-cache"
        etag = r.headers["ETag"]
        assert len(r.read()) == 104
    with urllib.request.urlopen(served.url + "m.mjs") as r:
        assert r.headers["Content-Type"] == "text/javascript"
        assert r.read() == b"export {};"  # the body is counted before it is sent
    assert served.bytes_sent == 104 + len("export {};")
    request = urllib.request.Request(served.url + "a.wasm", headers={"If-None-Match": etag})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(request)
    assert e.value.code == 304
    assert served.url.startswith("http://127.0.0.1:")


def test_a_gzipped_wheel_is_sent_as_a_file_not_as_an_encoding(served, tmp_path):
    # boot.js gunzips it itself and checks the sha256 of what comes out: the browser must not
    (tmp_path / "x-1.0-py3-none-any.whl.gz").write_bytes(b"\x1f\x8b gz")
    with urllib.request.urlopen(served.url + "x-1.0-py3-none-any.whl.gz") as r:
        assert r.headers["Content-Type"] == "application/gzip"
        assert r.headers["Content-Encoding"] is None
        assert r.read() == b"\x1f\x8b gz"



def test_the_pinned_runtime_is_cached_for_good_and_the_rest_revalidated(served, tmp_path):
    runtime = tmp_path / "pyodide"
    runtime.mkdir()
    (runtime / "pyodide.mjs").write_text("export {};")
    (runtime / "pyodide-lock.json").write_text("{}")
    tag = site.pin_runtime(runtime)
    assert sorted(p.name for p in (runtime / tag).iterdir()) == ["pyodide-lock.json",
                                                                 "pyodide.mjs"]
    assert (runtime / tag / "pyodide.mjs").stat().st_ino == (runtime / "pyodide.mjs").stat().st_ino
    with urllib.request.urlopen(f"{served.url}pyodide/{tag}/pyodide.mjs") as r:
        assert r.headers["Cache-Control"] == "public, max-age=31536000, immutable"
        assert r.read() == b"export {};"
    with urllib.request.urlopen(served.url + "pyodide/pyodide.mjs") as r:
        assert r.headers["Cache-Control"] == "no-cache"
    # the tag follows the content: a changed file is a new folder, never a changed URL
    (runtime / "pyodide-lock.json").write_text('{"packages": {}}')
    assert site.pin_runtime(runtime) != tag
    assert site.is_pinned(f"/pyodide/{tag}/x.whl") and not site.is_pinned("/pyodide/x.whl")
    assert not site.is_pinned("/pyodide/not-a-hex-tag!!/x") and not site.is_pinned("/web/a.js")


def test_ember_js_is_pointed_at_the_pinned_runtime(tmp_path):
    ember_js = tmp_path / "ember.js"
    ember_js.write_text((ROOT / "web" / "ember.js").read_text())
    site.point_at_pinned(ember_js, "0123456789abcdef", 14_000_000, {"mnist": 1_700_000})
    assert 'new URL("../pyodide/0123456789abcdef/", import.meta.url)' in ember_js.read_text()
    assert "const BOOT_BYTES = 14000000;" in ember_js.read_text()  # for the progress bar
    assert 'const WEIGHT_BYTES = {"mnist": 1700000};' in ember_js.read_text()
    with pytest.raises(site.SiteError, match="default indexURL"):
        site.point_at_pinned(ember_js, "0123456789abcdef")  # already pinned: nothing to rewrite


def test_connections_are_kept_alive(served):
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", served.server_address[1])
    for _ in range(3):  # three requests on one connection
        conn.request("GET", "/m.mjs")
        r = conn.getresponse()
        assert r.status == 200 and r.read() == b"export {};"
    conn.close()


def test_a_stopped_server_answers_no_kept_alive_connection_either(served):
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", served.server_address[1], timeout=5)
    conn.request("GET", "/m.mjs")
    assert conn.getresponse().read() == b"export {};"
    served.stop()  # shutdown() alone would leave this connection served (the offline e2e)
    with pytest.raises((http.client.HTTPException, OSError)):
        conn.request("GET", "/m.mjs")
        conn.getresponse()
    conn.close()

def test_examples_are_ordered_and_titled():
    examples = site.playground_examples(EXAMPLES)
    assert [e["name"] for e in examples][:2] == ["gelu_custom", "autodiff"]
    assert all(e["title"] and not e["title"].startswith("#") for e in examples)
    assert "def gelu_custom(x):" in examples[0]["code"]


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.py")), ids=lambda p: p.stem)
def test_examples_run_in_cpython_too(path, capsys):
    code = path.read_text()
    if "import js" in code:
        pytest.skip("needs the browser's JavaScript globals")
    compiled = compile(code, str(path), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(compiled, {"__name__": "__main__"})
    if asyncio.iscoroutine(result):
        asyncio.run(result)
    assert capsys.readouterr().out


def test_cli_has_site_and_demo():
    parser = cli.build_parser()
    args = parser.parse_args(["demo"])
    assert args.port == 8000 and args.fast_start and args.run is cli._demo
    args = parser.parse_args(["site", "--out", "x", "--no-fast-start"])
    assert args.out == "x" and not args.fast_start and args.run is cli._site
    with pytest.raises(SystemExit):
        parser.parse_args(["site"])  # --out is required


def test_landing_page_shows_the_built_pages_as_cards(tmp_path):
    for page, title in (("playground", "ember playground"), ("demos/mnist", "MNIST"),
                        ("demos/new-one", "A <new> page")):
        (tmp_path / page).mkdir(parents=True)
        (tmp_path / page / "index.html").write_text(f"<title>{title}</title>")
    (tmp_path / "pyscript").mkdir()
    (tmp_path / "pyscript" / "index.html").write_text("<title>x</title>")
    site.write_landing(tmp_path, {"ember": "0.1.0", "techniques": [], "book": "book/"})
    text = (tmp_path / "index.html").read_text()
    cards = text.split('<ul id="pages">')[1].split("</ul>")[0].strip().splitlines()
    # the known pages first, in PAGES' order, each with its line; an unknown one by its title
    assert [c.split('"')[1] for c in cards] == ["demos/mnist/", "playground/", "demos/new-one/"]
    assert "<p>An MNIST ConvNet reads your handwriting" in cards[0]
    assert ">Playground</a><p>" in cards[1] and ">A &lt;new&gt; page</a></li>" in cards[2]
    assert 'href="pyscript/"' not in text  # (the runtime's folder, not a page)
    # a visit to this page alone makes the site's offline copy (it boots no ember.js)
    assert 'import { registerOffline } from "./web/offline.js";\nregisterOffline();' in text
    assert "deep-learning framework in Python after Rust's Burn" in text


def fake_npm_package(cache, spec, files, exports=True):
    """An npm tarball where npm_pack looks for it, with package.json naming dist/index.js."""
    import io
    import tarfile
    name, _, version = spec.rpartition("@")
    path = cache / "downloads" / f"{name.lstrip('@').replace('/', '-')}-{version}.tgz"
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"exports": {"import": "./dist/index.js"}} if exports else {"main": "index.cjs"}
    with tarfile.open(path, "w:gz") as tar:
        for member, data in {"package.json": json.dumps(meta), "LICENSE": "MIT", **files}.items():
            info = tarfile.TarInfo(f"package/{member}")
            info.size = len(data.encode())
            tar.addfile(info, io.BytesIO(data.encode()))


def test_the_editor_modules_are_served_under_web_vendor_with_an_import_map(tmp_path, monkeypatch):
    specs = ("@scope/a@1.0.0", "b@2.0.0")
    fake_npm_package(tmp_path, specs[0], {"dist/index.js": "import {x} from 'b';\nexport {x};"})
    fake_npm_package(tmp_path, specs[1], {"dist/index.js": "export const x = 1;"})
    monkeypatch.setattr(site, "_run", lambda *a, **kw: pytest.fail("no download expected"))
    monkeypatch.setattr(site, "EDITOR_PACKAGES", specs)
    out = tmp_path / "site"
    (out / "playground").mkdir(parents=True)
    page = out / "playground" / "index.html"
    page.write_text(f"<head>{site.IMPORTMAP_MARK}</head>")
    site.add_editor(out, tmp_path)
    assert (out / "web/vendor/@scope/a/dist/index.js").read_text().startswith("import {x}")
    assert (out / "web/vendor/b/LICENSE").read_text() == "MIT"
    text = page.read_text()
    imports = json.loads(text.split('<script type="importmap">')[1].split("</script>")[0])
    assert imports == {"imports": {"@scope/a": "../web/vendor/@scope/a/dist/index.js",
                                   "b": "../web/vendor/b/dist/index.js"}}
    page.write_text("<head></head>")  # a page without the mark: said so
    with pytest.raises(site.SiteError, match="expected one"):
        site.add_editor(out, tmp_path)


@pytest.mark.parametrize("files,exports,error", [
    ({"dist/index.js": "import {y} from './y.js';"}, True, "imports files of its own"),
    ({"index.cjs": ""}, False, "names no ES module entry")])
def test_a_package_that_cannot_be_served_as_one_module_is_refused(tmp_path, files, exports,
                                                                   error):
    fake_npm_package(tmp_path, "c@1.0.0", files, exports)
    with pytest.raises(site.SiteError, match=error):
        site.vendor_modules(["c@1.0.0"], tmp_path, tmp_path / "vendor")


# ---- the output folder: nothing ember did not build is ever deleted ---------------------------
def fake_build(folder, marker=True):
    folder.mkdir(parents=True)
    info = {"format": site.SITE_FORMAT} if marker else {"ember": "0.1.0"}
    (folder / "build-info.json").write_text(json.dumps(info))
    (folder / "index.html").write_text("the old build")
    (folder / "web").mkdir()
    (folder / "web" / "ember.js").write_text("old")
    return folder


def listing(folder):
    return sorted((str(p.relative_to(folder)), p.read_bytes() if p.is_file() else None)
                  for p in folder.rglob("*"))


@pytest.fixture
def no_downloads(monkeypatch):
    """build_site fails at its first step, a download, if it ever gets that far."""
    def npm_pack(*a, **kw):
        raise site.SiteError("npm pack called")
    monkeypatch.setattr(site, "npm_pack", npm_pack)


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A fake checkout, home and current folder: tmp/home/src (cwd: tmp/home/src/work)."""
    home = tmp_path / "home"
    root = home / "src"
    (root / "work").mkdir(parents=True)
    (home / "notes.txt").write_text("mine")
    (root / "pyproject.toml").write_text("")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(root / "work")
    return root


def test_a_folder_with_a_users_files_is_refused_and_kept(tmp_path, no_downloads, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    before = listing(mine)
    with pytest.raises(site.FolderError, match="not a build of `ember site`"):
        site.build_site(mine, root=ROOT)
    assert cli.main(["site", "--out", str(mine)]) == 2  # a usage error, not a traceback
    err = capsys.readouterr().err
    assert f"--out {mine} holds files that are not a build" in err and "choose a new" in err
    assert listing(mine) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]  # no sibling left behind


@pytest.mark.parametrize("info", ['{"ember": "0.1.0", "pyodide": "0.27.7"}', "not json", "[1]",
                                  '{"format": "ember.site/0"}'])
def test_a_build_info_without_ember_s_marker_is_not_enough(tmp_path, no_downloads, info):
    folder = fake_build(tmp_path / "site")
    (folder / "build-info.json").write_text(info)
    before = listing(folder)
    with pytest.raises(site.FolderError, match="not a build"):
        site.build_site(folder, root=ROOT)
    assert listing(folder) == before


def test_home_the_checkout_and_the_current_folder_are_refused(checkout, no_downloads, capsys):
    home, cwd = checkout.parent, checkout / "work"
    before = listing(home.parent)
    for out in (home, home.parent, checkout, cwd, cwd.parent, Path("/"), "."):
        with pytest.raises(site.FolderError, match="refusing to build over"):
            site.check_out(out, checkout)  # only a check: nothing is touched
    for out in (home, checkout, cwd, "."):  # what build_site does with them (no "/" here)
        with pytest.raises(site.FolderError):
            site.build_site(out, root=checkout)
    with pytest.raises(site.FolderError, match="the ember checkout"):
        site.check_out(ROOT, ROOT)  # the real checkout, checked only
    assert cli.main(["site", "--out", str(home)]) == 2
    assert "refusing to build over your home folder" in capsys.readouterr().err
    assert cli.main(["demo", "--out", str(cwd.parent)]) == 2
    assert "refusing to build over the current folder" in capsys.readouterr().err
    assert listing(home.parent) == before
    # inside them is fine: build/site of the checkout, a new folder in home
    assert site.check_out(checkout / "build" / "site", checkout) == checkout / "build" / "site"
    assert site.check_out(home / "site", checkout) == home / "site"


def test_a_file_is_refused(tmp_path, no_downloads):
    (tmp_path / "site").write_text("a file")
    with pytest.raises(site.FolderError, match="is a file"):
        site.build_site(tmp_path / "site", root=ROOT)
    assert (tmp_path / "site").read_text() == "a file"


def test_an_earlier_build_is_replaced_only_once_the_new_one_is_complete(tmp_path):
    out = fake_build(tmp_path / "site")
    with site.replacing(out, ROOT) as new:
        assert new.parent == tmp_path and new.name.startswith(".site.") and new != out
        assert listing(out)[0][0] == "build-info.json"  # still the old build meanwhile
        (new / "build-info.json").write_text(json.dumps({"format": site.SITE_FORMAT}))
        (new / "index.html").write_text("the new build")
    assert (out / "index.html").read_text() == "the new build" and not (out / "web").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]


def test_a_failed_build_leaves_the_earlier_build_as_it_was(tmp_path, monkeypatch):
    out = fake_build(tmp_path / "site")
    before = listing(out)

    def fails(*a, **kw):
        raise site.SiteError("pyodide tarball damaged")
    monkeypatch.setattr(site, "npm_pack", lambda spec, cache, log: tmp_path / "x.tgz")
    monkeypatch.setattr(site, "pip_download", lambda specs, cache, log: [tmp_path / "x.whl"])
    monkeypatch.setattr(site, "extract_pyodide", fails)
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(site.SiteError, match="damaged"):
        site.build_site(out, root=ROOT)
    assert listing(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "site"]
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C during a build: the same
        with site.replacing(out, ROOT) as new:
            (new / "index.html").write_text("half")
            raise KeyboardInterrupt
    assert listing(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["cache",
                                                                                     "site"]


def test_an_empty_or_missing_folder_is_built_into(tmp_path):
    for out in (tmp_path / "empty", tmp_path / "new" / "deeper"):
        if out.name == "empty":
            out.mkdir()
        with site.replacing(out, ROOT) as new:
            (new / "index.html").write_text("built")
        assert (out / "index.html").read_text() == "built"


# ---- the server under odd and many requests ---------------------------------------------------
def raw_request(server, request, timeout=30):
    """The whole answer (until the server closes) to the raw bytes `request`."""
    import socket
    with socket.create_connection(server.server_address, timeout=timeout) as s:
        s.sendall(request)
        return read_all(s)


def read_all(sock):
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def test_a_folder_url_serves_its_index_or_404(served, tmp_path):
    (tmp_path / "page").mkdir()
    (tmp_path / "page" / "index.html").write_text("<p>page</p>")
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "data.bin").write_bytes(b"x")
    with urllib.request.urlopen(served.url + "page/") as r:
        assert r.read() == b"<p>page</p>"
    with urllib.request.urlopen(served.url + "page") as r:  # redirected to page/
        assert r.url.endswith("/page/") and r.read() == b"<p>page</p>"
    with pytest.raises(urllib.error.HTTPError) as e:  # no listing of a folder without index
        urllib.request.urlopen(served.url + "bare/")
    assert e.value.code == 404 and b"data.bin" not in e.value.read()
    answer = raw_request(served, b"GET /bare/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length")))
    assert head.startswith(b"HTTP/1.1 404") and len(body) == length  # the body it announces


@pytest.mark.parametrize("path", [b"/a%00b", b"/index.html%00.js", b"/a\x00b"])
def test_a_nul_byte_in_the_path_is_answered_400(served, path):
    answer = raw_request(served, b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n"
                                 b"Connection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400")
    with urllib.request.urlopen(served.url + "index.html") as r:  # and it serves on
        assert r.status == 200


def test_traversal_stays_refused(served, tmp_path):
    (tmp_path.parent / "secret.txt").write_text("secret")
    for path in (b"/../secret.txt", b"/%2e%2e/secret.txt", b"/..%2fsecret.txt"):
        answer = raw_request(served, b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n"
                                     b"Connection: close\r\n\r\n")
        assert b"secret" not in answer.partition(b"\r\n\r\n")[2] and b" 200 " not in answer[:16]


def test_200_connections_made_before_the_server_accepts_are_all_answered(tmp_path):
    import socket
    (tmp_path / "index.html").write_text("hello")
    server = site.SiteServer(tmp_path)  # listening, not yet accepting: all wait in the backlog
    assert server.server_address[0] == "127.0.0.1"
    try:
        # with a backlog of 5 the seventh connect already hangs (its SYN dropped)
        socks = [socket.create_connection(server.server_address, timeout=10) for _ in range(200)]
        for s in socks:
            s.settimeout(60)
            s.sendall(b"GET /index.html HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        server.start()
        answers = [read_all(s) for s in socks]
    finally:
        for s in socks:
            s.close()
        server.stop()
    assert all(a.startswith(b"HTTP/1.1 200") and a.endswith(b"hello") for a in answers)
    assert len(server.answered) == 200


def test_an_idle_connection_is_closed(tmp_path, monkeypatch):
    import socket
    assert 0 < site.Handler.timeout <= 60  # by default (None: a connection may idle for good)
    monkeypatch.setattr(site.Handler, "timeout", 0.5)  # the same, sooner
    server = site.SiteServer(tmp_path).start()
    try:
        with socket.create_connection(server.server_address, timeout=60) as idle:
            assert idle.recv(1) == b""  # closed by the server, not by this 60 s timeout
    finally:
        server.stop()


def test_connections_are_served_a_bounded_number_at_a_time(tmp_path, monkeypatch):
    import socket
    monkeypatch.setattr(site.SiteServer, "max_connections", 2)
    (tmp_path / "index.html").write_text("hello")
    server = site.SiteServer(tmp_path).start()
    idle = [socket.create_connection(server.server_address, timeout=60) for _ in range(2)]
    waiting = socket.create_connection(server.server_address, timeout=1)
    try:
        waiting.sendall(b"GET /index.html HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        with pytest.raises(TimeoutError):  # two connections hold both slots: it waits
            waiting.recv(1)
        for s in idle:
            s.close()
        waiting.settimeout(60)
        assert read_all(waiting).endswith(b"hello")  # a slot freed: served
    finally:
        for s in [*idle, waiting]:
            s.close()
        server.stop()
    assert server.answered == [("/index.html", 200)]


def test_book_pages_get_the_run_script_relative_to_the_site_root(tmp_path):
    page = tmp_path / "book" / "tensors" / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text("<html><body><p>x</p></body></html>")
    site.add_book_script(page, "../../")
    assert page.read_text() == ('<html><body><p>x</p><script type="module" '
                                'src="../../web/book.js"></script></body></html>')
    page.write_text("<p>no body end</p>")
    with pytest.raises(site.SiteError, match="</body>"):
        site.add_book_script(page, "../../")


def test_without_mkdocs_the_book_is_left_out_and_the_landing_page_says_how(tmp_path, monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "mkdocs" else real(name, *a))
    notes = []
    assert site.build_book(ROOT, tmp_path / "book", log=notes.append) is False
    assert not (tmp_path / "book").exists() and "pip install -e '.[docs]'" in notes[0]
    site.write_landing(tmp_path, {"ember": "0.1.0", "techniques": [], "book": None})
    assert "The ember book is not in this build" in (tmp_path / "index.html").read_text()


def test_the_service_worker_precaches_the_pages_and_a_rebuild_renames_its_cache(tmp_path):
    out = tmp_path / "site"
    for rel in ("index.html", "playground/index.html", "web/ember.js", "book/index.html",
                "book/assets/javascripts/lunr/wordcut.js",
                "pyscript/core.js", "pyscript/core.js.map", "pyscript/core.js.gz",
                "pyodide/abcdef0123456789/pyodide.mjs"):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(rel)

    def build():
        files = site.write_service_worker(out, ROOT, "abcdef0123456789", ["pyodide.mjs"])
        text = (out / "sw.js").read_text()
        assert "__EMBER_" not in text and json.dumps(files) in text
        return files, text.split('const BUILD = "')[1][:16]

    files, first = build()
    # PyScript's scripts and the book too (unvisited pages work offline), no source maps, not
    # the search's other languages
    assert files == ["book/", "./", "playground/", "pyscript/core.js", "web/ember.js",
                     "pyodide/abcdef0123456789/pyodide.mjs"]
    assert build()[1] == first  # the same build, the same cache
    (out / "book" / "index.html").write_text("a new chapter")
    assert build()[1] != first  # any change: a new cache (the old one goes on activate)


def test_precompress_writes_a_gz_only_where_it_pays(tmp_path):
    (tmp_path / "a.wasm").write_bytes(bytes(4096))  # compresses well
    import random
    (tmp_path / "noise.js").write_bytes(random.Random(0).randbytes(2048))  # gzip cannot shrink
    (tmp_path / "tiny.json").write_text("{}" * 100)  # under 1 KiB: not worth a file
    (tmp_path / "data.npz").write_bytes(bytes(4096))  # not a kind the server compresses
    (tmp_path / "skip").mkdir()
    (tmp_path / "skip" / "b.js").write_bytes(bytes(4096))
    site.precompress(tmp_path, skip=("skip",))
    made = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.gz"))
    assert made == ["a.wasm.gz"]
    import gzip
    assert gzip.decompress((tmp_path / "a.wasm.gz").read_bytes()) == bytes(4096)
    assert site.sent_size(tmp_path / "a.wasm") == (tmp_path / "a.wasm.gz").stat().st_size
    assert site.sent_size(tmp_path / "data.npz") == 4096


def test_the_server_sends_the_precompressed_file_to_a_browser_that_takes_gzip(served, tmp_path):
    import gzip
    (tmp_path / "big.wasm").write_bytes(bytes(8192))
    site.precompress(tmp_path)

    def get(headers):
        request = urllib.request.Request(served.url + "big.wasm", headers=headers)
        with urllib.request.urlopen(request) as r:
            return r.headers, r.read()
    headers, body = get({"Accept-Encoding": "gzip, deflate, br"})
    assert headers["Content-Encoding"] == "gzip" and headers["Vary"] == "Accept-Encoding"
    assert headers["Content-Type"] == "application/wasm"  # the file's type, not gzip's
    assert int(headers["Content-Length"]) == len(body) < 8192
    assert gzip.decompress(body) == bytes(8192)
    assert served.bytes_sent == len(body)  # the bytes that went out, compressed
    for refused in ({}, {"Accept-Encoding": "br, gzip;q=0"}):
        plain, body = get(refused)
        assert plain["Content-Encoding"] is None and plain["Vary"] == "Accept-Encoding"
        assert body == bytes(8192)
        assert plain["ETag"] != headers["ETag"]  # a cache never mixes the two encodings
    request = urllib.request.Request(served.url + "big.wasm", headers={
        "Accept-Encoding": "gzip", "If-None-Match": headers["ETag"]})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(request)
    assert e.value.code == 304
    with urllib.request.urlopen(served.url + "a.wasm") as r:  # no .gz beside it: as it is
        assert r.headers["Vary"] is None and r.headers["Content-Encoding"] is None


def _unzstd(data):  # (Python 3.11's stdlib has no zstd: Debian's, which `ember site` uses)
    return subprocess.run(["zstd", "-d", "-c", "--long=23"], input=data, capture_output=True,
                          check=True).stdout


@pytest.mark.skipif(shutil.which("zstd") is None, reason="ember site's zstd (make deps)")
def test_big_files_get_a_zst_beside_their_gz_which_the_server_sends_first(served, tmp_path,
                                                                          monkeypatch):
    import random
    rng = random.Random(0)
    words = [bytes(rng.choice(b"abcdefgh") for _ in range(6)) for _ in range(300)]
    big = tmp_path / "x-1.0-py3-none-any.whl"
    big.write_bytes(b" ".join(rng.choice(words) for _ in range(site.ZSTD_FROM // 5)))
    (tmp_path / "small.wasm").write_bytes(bytes(8192))  # gzip only: under ZSTD_FROM
    cache = tmp_path / "cache"
    site.precompress(tmp_path, zstd_cache=cache)
    assert sorted(p.name for p in tmp_path.glob("*.zst")) == [big.name + ".zst"]
    zst = tmp_path / f"{big.name}.zst"
    assert _unzstd(zst.read_bytes()) == big.read_bytes()
    assert zst.stat().st_size < (tmp_path / f"{big.name}.gz").stat().st_size
    assert site.sent_size(big) == zst.stat().st_size

    def get(accept):
        request = urllib.request.Request(served.url + big.name,
                                         headers={"Accept-Encoding": accept})
        with urllib.request.urlopen(request) as r:
            return r.headers, r.read()
    headers, body = get("gzip, deflate, br, zstd")  # (Chromium's)
    assert headers["Content-Encoding"] == "zstd" and headers["Vary"] == "Accept-Encoding"
    assert _unzstd(body) == big.read_bytes()
    headers, body = get("gzip, zstd;q=0")
    assert headers["Content-Encoding"] == "gzip" and gzip.decompress(body) == big.read_bytes()
    headers, body = get("identity")
    assert headers["Content-Encoding"] is None and body == big.read_bytes()
    # a rebuild takes the cached .zst: zstd does not run again
    zst.unlink()
    monkeypatch.setattr(site, "_run", lambda *a, **k: pytest.fail("zstd ran again"))
    site.precompress(tmp_path, zstd_cache=cache)
    assert _unzstd(zst.read_bytes()) == big.read_bytes()


def test_the_model_weights_leave_the_wheel_for_files_of_their_own(tmp_path):
    wheel = tmp_path / "ember-0.1.0-py3-none-any.whl"
    record = ("ember/__init__.py,sha256=a,1\nember/models/weights/mnist.safetensors,sha256=b,4\n"
              "ember-0.1.0.dist-info/RECORD,,\n")
    with zipfile.ZipFile(wheel, "w") as z:  # stored, as the site's boot wheels are
        z.writestr("ember/__init__.py", "x = 1\n")
        z.writestr("ember/models/weights/mnist.safetensors", b"\x01\x02\x03\x04")
        z.writestr("ember-0.1.0.dist-info/RECORD", record)
    weights = site.split_weights(wheel, tmp_path)
    out = tmp_path / "ember-weights-mnist.safetensors"
    assert out.read_bytes() == b"\x01\x02\x03\x04"
    assert weights == {"mnist": {"file_name": out.name, "sha256": hashlib.sha256(
        out.read_bytes()).hexdigest()}}
    with zipfile.ZipFile(wheel) as z:
        assert z.namelist() == ["ember/__init__.py", "ember-0.1.0.dist-info/RECORD"]
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_STORED}
        assert "weights" not in z.read("ember-0.1.0.dist-info/RECORD").decode()
    assert site.split_weights(wheel, tmp_path) == {}  # nothing left to move
