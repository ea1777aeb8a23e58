"""What `ember site` builds, checked on the session's site (no browser)."""

import gzip
import hashlib
import json
import re
import subprocess
import zipfile

from ember import site


def test_lock_registers_ember_with_numpy_and_every_sha256_is_the_files(site_dir):
    lock = json.loads((site_dir / "pyodide" / "pyodide-lock.json").read_text())
    assert lock["info"]["version"] == site.PYODIDE_VERSION
    ember = lock["packages"]["ember"]
    assert ember["depends"] == ["numpy"] and ember["imports"] == ["ember"]
    assert ember["file_name"].endswith("-py3-none-any.whl")
    assert set(lock["packages"]) == {"ember", "numpy", "micropip", "packaging", "pillow"}
    for entry in lock["packages"].values():
        data = (site_dir / "pyodide" / entry["file_name"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], entry["file_name"]


def test_stdlib_and_wheels_ship_as_bytecode(site_dir):
    info = json.loads((site_dir / "build-info.json").read_text())
    assert info["fast_start"] and info["techniques"]
    with zipfile.ZipFile(site_dir / "pyodide" / "python_stdlib.zip") as z:
        names = z.namelist()
    assert "os.pyc" in names and "os.py" not in names
    numpy = info["packages"]["numpy"]
    assert numpy["sha256"] != numpy["official_sha256"]  # rebuilt, and the lock says so
    with zipfile.ZipFile(site_dir / "pyodide" / numpy["file_name"]) as z:
        names = z.namelist()
    assert "numpy/__init__.pyc" in names and not any(n.endswith(".py") for n in names)


def test_the_boot_packages_ship_stored_and_gzipped_whole(site_dir):
    """numpy and ember, which every page installs at start-up (web/boot.js fetchPackages): their
    members stored, the whole wheel gzipped beside it, numpy without what no page needs."""
    lock = json.loads((site_dir / "pyodide" / "pyodide-lock.json").read_text())
    for name in ("numpy", "ember"):
        wheel = site_dir / "pyodide" / lock["packages"][name]["file_name"]
        assert gzip.decompress(wheel.with_name(wheel.name + ".gz").read_bytes()) == \
            wheel.read_bytes()
        with zipfile.ZipFile(wheel) as z:
            assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_STORED}
            names = z.namelist()
        if name == "numpy":
            assert not [n for n in names if re.search(site.DROP["numpy"], n)]
            assert "numpy/_core/_multiarray_tests.cpython-312-wasm32-emscripten.so" in names
    assert not (site_dir / "pyodide" / lock["packages"]["pillow"]["file_name"]
                ).with_suffix(".whl.gz").exists()  # loaded on demand only: loadPackage's path


def test_pages_and_runtime_are_in_place(site_dir):
    for path in ("index.html", "playground/index.html", "playground/examples.json",
                 "web/ember.js", "web/ember-worker.js", "web/boot.js", "pyscript/core.js",
                 "demos/pyscript/index.html", "pyodide/pyodide.mjs", "pyodide/pyodide.asm.wasm"):
        assert (site_dir / path).is_file(), path
    assert not (site_dir / "web" / "tools").exists()  # build-time scripts are not served
    examples = json.loads((site_dir / "playground" / "examples.json").read_text())
    assert examples[0]["name"] == "gelu_custom"


def test_the_runtime_is_pinned_and_ember_js_points_there(site_dir):
    info = json.loads((site_dir / "build-info.json").read_text())
    pinned = site_dir / info["pinned_runtime"]
    files = sorted(p.name for p in (site_dir / "pyodide").iterdir() if p.is_file())
    assert sorted(p.name for p in pinned.iterdir()) == files
    for name in files:  # the same files (hard links), not copies
        assert (pinned / name).stat().st_ino == (site_dir / "pyodide" / name).stat().st_ino
    assert f'"../{info["pinned_runtime"]}"' in (site_dir / "web" / "ember.js").read_text()


def test_compressible_files_have_their_gzip_beside_them_and_ember_js_knows_the_boot_bytes(
        site_dir):
    """precompress: what the server sends with Content-Encoding (e2e/test_startup.py serves it)."""
    made = sorted(site_dir.rglob("*.gz"))
    for name in ("pyodide/pyodide.asm.wasm", "pyodide/pyodide.asm.js", "web/boot.js",
                 "playground/index.html"):
        assert site_dir / f"{name}.gz" in made, name
    for gz in made[:40]:
        assert gzip.decompress(gz.read_bytes()) == gz.with_suffix("").read_bytes(), gz
    # the runtime's big files as zstd too (the stdlib zip stores its members: whole, it pays)
    lock = json.loads((site_dir / "pyodide" / "pyodide-lock.json").read_text())
    for name in ("pyodide.asm.wasm", "python_stdlib.zip", lock["packages"]["numpy"]["file_name"]):
        zst = site_dir / "pyodide" / f"{name}.zst"
        assert zst.stat().st_size < (site_dir / "pyodide" / f"{name}.gz").stat().st_size, name
        unpacked = subprocess.run(["zstd", "-d", "-c", "--long=23", str(zst)],
                                  capture_output=True, check=True).stdout
        assert unpacked == (site_dir / "pyodide" / name).read_bytes(), name
    with zipfile.ZipFile(site_dir / "pyodide" / "python_stdlib.zip") as z:
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_STORED}
    sw = (site_dir / "sw.js").read_text()
    precached = json.loads(sw.split("const PRECACHE = ")[1].split(";\n")[0])
    # the boot wheels by their plain names: kept as the browser unpacked them (Content-Encoding)
    assert not [f for f in precached if f.endswith((".gz", ".zst"))]
    for name in ("numpy", "ember"):
        wheel = lock["packages"][name]["file_name"]
        assert [f for f in precached if f.endswith(f"/{wheel}")], wheel
        assert lock["ember"]["wheel_sizes"][wheel] == (site_dir / "pyodide" / wheel).stat().st_size
    boot = re.search(r"const BOOT_BYTES = (\d+);", (site_dir / "web" / "ember.js").read_text())
    assert 7e6 < int(boot.group(1)) < 12e6, boot  # (as zstd: 8.5 MB in this build)
