"""Wgpu inside Pyodide in headless Chromium (SwiftShader WebGPU): the op suite (tests/ops) runs
in the browser on Wgpu through bridge_browser, with blocking reads where Chromium's JS promise
integration allows them (it does in Chromium 156).

Heavy (builds the site, starts Chromium, ~1 min): runs only with EMBER_BROWSER_TESTS=1 and where
Playwright and Debian's chromium are installed (make e2e-deps). It belongs with the e2e tests;
it lives here, beside the backend it checks, until the e2e suite adopts it.
"""

import io
import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(os.environ.get("EMBER_BROWSER_TESTS") != "1",
                                reason="browser tests: set EMBER_BROWSER_TESTS=1")

SETUP = """
import io, os, sys, tarfile, zipfile, site
from pyodide.http import pyfetch
for name in {wheels!r}:
    data = await (await pyfetch("../extra/" + name)).bytes()
    zipfile.ZipFile(io.BytesIO(data)).extractall(site.getsitepackages()[0])
data = await (await pyfetch("../extra/tests.tar")).bytes()
os.makedirs("/home/pyodide/repo", exist_ok=True)
tarfile.open(fileobj=io.BytesIO(data)).extractall("/home/pyodide/repo", filter="data")
os.chdir("/home/pyodide/repo")
sys.path.insert(0, "/home/pyodide/repo")
from ember.backends.wgpu import bridge_browser
print("DEVICE", await bridge_browser.request_device())
"""

PYTEST = """
import json, pytest
code = pytest.main({args!r})
print("PYTEST_EXIT", int(code))
"""


@pytest.fixture(scope="module")
def playground(tmp_path_factory):
    pytest.importorskip("playwright")
    from playwright.sync_api import sync_playwright

    from ember import site
    out = tmp_path_factory.mktemp("browser") / "site"
    site.build_site(out, log=lambda m: None)
    extra = out / "extra"
    extra.mkdir()
    wheels = []
    for wheel in site.test_wheels(ROOT):
        shutil.copy(wheel, extra / wheel.name)
        wheels.append(wheel.name)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for rel in ("pyproject.toml", "tests/conftest.py", "tests/ops"):
            tar.add(ROOT / rel, arcname=rel,
                    filter=lambda t: None if "__pycache__" in t.name else t)
    (extra / "tests.tar").write_bytes(buf.getvalue())
    server = site.SiteServer(out).start()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=site.chromium_path(), headless=True,
                                        args=site.CHROMIUM_ARGS + site.OFFLINE_ARGS)
            page = browser.new_page()
            page.set_default_timeout(1_500_000)
            page.goto(server.url + "playground/")
            page.wait_for_function("() => { const s = document.querySelector('#status')"
                                   ".textContent; return s === 'ready' || s.startsWith('error'); }")
            assert page.text_content("#status") == "ready"

            def run(code):
                runs = int(page.get_attribute("#output", "data-runs"))
                page.fill("#code", code)
                page.click("#run")
                page.wait_for_function("() => document.querySelector('#output').dataset.runs"
                                       f" === '{runs + 1}'")
                return page.text_content("#output")

            output = run(SETUP.format(wheels=wheels))
            assert "DEVICE webgpu:" in output, output[-3000:]
            yield run
            browser.close()
    finally:
        server.shutdown()


def test_op_suite_passes_on_wgpu_in_the_browser(playground):
    args = ["tests/ops", "-k", "wgpu", "-p", "no:cacheprovider", "-p", "no:faulthandler",
            "--capture=sys", "-W", "ignore", "--tb=short"]
    output = playground(PYTEST.format(args=args))
    assert "PYTEST_EXIT 0" in output, output[-6000:]
    assert " passed" in output, output[-3000:]
    print(output[output.rfind("\n", 0, output.rfind(" passed")):].strip())


def test_str_and_async_reads_in_the_browser(playground):
    code = """
import numpy as np
from ember import Tensor
from ember.backend import Wgpu
B = Wgpu()
x = Tensor.from_data(np.arange(6, dtype=np.float32).reshape(2, 3), backend=B)
print("RESULT", json.dumps([str(B), (await (x @ x.transpose()).to_numpy_async()).tolist()]))
"""
    output = playground("import json\n" + code)
    line = next(s for s in output.splitlines() if s.startswith("RESULT"))
    name, product = json.loads(line[len("RESULT "):])
    assert name.startswith("Wgpu<webgpu: ")
    assert product == [[5.0, 14.0], [14.0, 50.0]]
