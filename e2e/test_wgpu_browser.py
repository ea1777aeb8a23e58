"""Wgpu inside Pyodide in headless Chromium (SwiftShader WebGPU): the op suite (tests/ops) runs
in the browser on Wgpu through bridge_browser, with blocking reads where Chromium's JS promise
integration allows them (it does in Chromium 156).

Uses the e2e session's site and browser (e2e/conftest.py); the test files and wheels the run
needs are added to the site under extra/ and fetched from 127.0.0.1 only.
"""

import io
import json
import re
import shutil
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

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
def playground(site_dir, server, browser):
    from ember import site
    extra = site_dir / "extra"
    extra.mkdir(exist_ok=True)
    wheels = []
    for wheel in site.test_wheels(ROOT):
        shutil.copy(wheel, extra / wheel.name)
        wheels.append(wheel.name)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for rel in ("pyproject.toml", "tests/conftest.py", "tests/ops", "tests/test_capture.py"):
            tar.add(ROOT / rel, arcname=rel,
                    filter=lambda t: None if "__pycache__" in t.name else t)
    (extra / "tests.tar").write_bytes(buf.getvalue())
    context = browser.new_context()
    context.route(re.compile(r"^(?!https?://127\.0\.0\.1[:/]).*"), lambda route: route.abort())
    page = context.new_page()
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
    context.close()


def test_op_suite_passes_on_wgpu_in_the_browser(playground):
    # Wgpu, Fusion(Wgpu) and Autodiff(Fusion(Wgpu)) in the page's WebGPU: the gradient checks
    # run there too, through the fused backward kernels
    args = ["tests/ops", "-k", "wgpu", "-p", "no:cacheprovider", "-p",
            "no:faulthandler", "--capture=sys", "-W", "ignore", "--tb=short"]
    output = playground(PYTEST.format(args=args))
    assert "PYTEST_EXIT 0" in output, output[-6000:]
    assert " passed" in output, output[-3000:]
    print(output[output.rfind("\n", 0, output.rfind(" passed")):].strip())


def test_a_recorded_training_step_in_the_browser(playground):
    # ember.jit of a whole training step (forward, backward, Adam) on the page's WebGPU:
    # losses, parameters and optimizer state bit for bit those of eager training, each replay
    # one submission with no read (on Autodiff(Wgpu()) and Autodiff(Fusion(Wgpu())))
    args = ["tests/test_capture.py", "-k", "replays_on_wgpu or replays_on_fused_wgpu or "
            "wgpu_replays", "-p", "no:cacheprovider", "-p", "no:faulthandler", "--capture=sys",
            "-W", "ignore", "--tb=short", "-rs"]
    output = playground(PYTEST.format(args=args))
    assert "PYTEST_EXIT 0" in output, output[-6000:]
    assert "3 passed" in output and "skipped" not in output, output[-3000:]


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
