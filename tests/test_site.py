"""ember.site without a network or a browser: the sha256 check against the official lock, the
lock entry, the cached downloads, the server's headers, the playground's examples and the CLI.
The real build and the browser are exercised in e2e/."""

import ast
import asyncio
import hashlib
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
    server.shutdown()
    server.server_close()


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
    site.point_at_pinned(ember_js, "0123456789abcdef")
    assert 'new URL("../pyodide/0123456789abcdef/", import.meta.url)' in ember_js.read_text()
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


def test_landing_page_lists_built_pages(tmp_path):
    for page, title in (("playground", "ember playground"), ("demos/mnist", "MNIST")):
        (tmp_path / page).mkdir(parents=True)
        (tmp_path / page / "index.html").write_text(f"<title>{title}</title>")
    (tmp_path / "pyscript").mkdir()
    (tmp_path / "pyscript" / "index.html").write_text("<title>x</title>")
    site.write_landing(tmp_path, {"ember": "0.1.0", "techniques": []})
    text = (tmp_path / "index.html").read_text()
    assert 'href="playground/"' in text and 'href="demos/mnist/"' in text
    assert 'href="pyscript/"' not in text and "stock files" in text
