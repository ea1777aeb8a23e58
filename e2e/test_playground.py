"""The playground (/playground/), the landing page and the PyScript page, in headless Chromium,
offline: nothing may leave 127.0.0.1 (see conftest.py)."""

import math
import time

import numpy as np
import pytest
from conftest import run_code, wait_ready

from ember import site


def gelu_reference(values):
    a = np.asarray(values, dtype=np.float64)
    return a * (np.vectorize(math.erf)(a / math.sqrt(2)) + 1) / 2


def test_landing_page_says_what_ember_is_and_shows_the_pages(page):
    page.goto(page.base)
    lead = page.text_content(".lead")
    assert "deep-learning framework in Python" in lead and "Burn" in lead
    assert all(b in lead for b in ("NdArray", "Wgpu", "Torch", "Pyodide"))
    cards = page.eval_on_selector_all("#pages li", """els => els.map(e => [
      e.querySelector('a').getAttribute('href'), e.querySelector('p')?.textContent ?? ''])""")
    links = [href for href, _ in cards]
    assert links[:4] == ["demos/mnist/", "demos/image-classification/", "demos/train/",
                         "playground/"], links
    assert "demos/pyscript/" in links and "book/" in links
    assert all(len(line) > 20 for _, line in cards), cards  # a line that says what each does
    for href in links:  # every card leads to a page of the site
        assert page.request.get(page.base + href).ok, href


def test_playground_reaches_ready_and_runs_the_seeds_gelu_custom(page):
    assert wait_ready(page) == "ready"
    assert "def gelu_custom(x):" in page.input_value("#code")  # the first example is preloaded
    out = run_code(page)
    assert page.get_attribute("#output", "data-state") == "ok", out
    assert "gelu_custom(x) = Tensor(shape=[4, 4], dtype=float32, backend=NdArray<cpu>" in out
    # the last expression's value: gelu_custom of a known input, checked against float64 NumPy
    last = out[out.rindex("Tensor(shape=[2, 3]"):]
    got = np.array([float(v) for v in
                    last.split("data=")[1].replace("[", " ").replace("]", " ")
                    .replace(",", " ").replace(")", " ").split()])
    want = gelu_reference([[-2.0, -0.5, 0.0], [0.5, 1.0, 3.0]]).ravel()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert page.text_content("#status") == "ready"
    versions = page.text_content("#versions")
    assert "Pyodide 0.27.7" in versions and "NumPy 2.0.2" in versions and "Web Worker" in versions


def test_playground_runs_the_autodiff_example(page):
    wait_ready(page)
    page.select_option("#examples", "autodiff")
    assert "Autodiff(NdArray())" in page.input_value("#code")
    out = run_code(page)
    assert page.get_attribute("#output", "data-state") == "ok", out
    assert "backend: Autodiff<NdArray<cpu>>" in out
    assert "y.grad(grads): shape (32, 32), dtype float32, on NdArray<cpu>" in out


def test_every_example_runs_without_error(page):
    wait_ready(page)
    names = page.eval_on_selector_all("#examples option", "os => os.map(o => o.value)")
    assert len(names) >= 4
    for name in names:
        page.select_option("#examples", name)
        out = run_code(page)
        assert page.get_attribute("#output", "data-state") == "ok", f"{name}: {out}"


def test_top_level_await_reaches_the_pages_webgpu(page):
    wait_ready(page)
    page.select_option("#examples", "await_webgpu")
    out = run_code(page)
    assert page.get_attribute("#output", "data-state") == "ok", out
    assert "WebGPU adapter:" in out  # Chromium runs with --enable-unsafe-webgpu (SwiftShader)


def test_a_traceback_shows_the_users_code_and_stdout_before_it(page):
    wait_ready(page)
    out = run_code(page, 'print("before")\ndef f():\n    raise ValueError("boom")\nf()\n')
    assert page.get_attribute("#output", "data-state") == "error"
    assert out.startswith("before\n")
    assert "Traceback (most recent call last):" in out
    assert 'File "<playground>", line 4, in <module>' in out
    assert '    raise ValueError("boom")' in out and out.rstrip().endswith("ValueError: boom")
    assert "_pyodide" not in out  # Pyodide's own runner frames are cut
    assert page.text_content("#status") == "ready"  # a failing run is not a failing page
    out = run_code(page, "import ember\nember.Tensor.ones([2, 3]) @ ember.Tensor.ones([2, 3])")
    assert "ember.errors.ShapeError: matmul" in out or "ShapeError: matmul" in out


def test_the_page_stays_responsive_and_stop_interrupts(page):
    wait_ready(page)
    page.fill("#code", "import time\nprint('start', flush=True)\nwhile True:\n    time.sleep(0)\n")
    page.click("#run")
    page.wait_for_function("() => document.querySelector('#output').textContent.includes('start')")
    t0 = time.perf_counter()
    assert page.evaluate("() => document.querySelector('#status').textContent") == "running"
    assert time.perf_counter() - t0 < 1.0  # the main thread answers while Python loops
    assert page.evaluate("crossOriginIsolated")  # COOP/COEP from the server: interrupts work
    page.click("#stop")
    page.wait_for_function("() => document.querySelector('#output').dataset.runs === '1'")
    assert "KeyboardInterrupt" in page.text_content("#output")
    out = run_code(page, "1 + 1")  # the interpreter is still usable
    assert out.rstrip().endswith("2")


def test_main_thread_mode(page):
    assert wait_ready(page, "playground/?worker=0") == "ready"
    out = run_code(page)
    assert page.get_attribute("#output", "data-state") == "ok", out
    assert "on the page's thread" in page.text_content("#versions")


@pytest.mark.parametrize("query", ["", "?worker=0"])
def test_the_wheels_are_installed_without_pythons_unpacking(page, query):
    """boot.js unzips numpy's and ember's wheels in JS (fetchPackages) and writes them into
    Pyodide's file system: no loadPackage, so neither its unpacking modules nor
    importlib.metadata (which importlib.invalidate_caches() imports) are loaded at start-up; the
    packages still count as loaded, with their dist-info and shared libraries."""
    assert wait_ready(page, f"playground/{query}") == "ready"
    out = run_code(page, "import sys\n"
                         "print(sorted(m for m in ('importlib.metadata', 'tarfile', 'email')"
                         " if m in sys.modules))\n"
                         "import pyodide_js, numpy.linalg, numpy.random, ember\n"
                         "print(sorted(pyodide_js.loadedPackages.to_py()))\n"
                         "from importlib.metadata import distribution\n"
                         "d = distribution('numpy')\n"
                         "print(d.version, d.read_text('INSTALLER'),"
                         " distribution('ember').version)\n"
                         "print(round(float(numpy.linalg.det(numpy.eye(3) * 2)), 6),"
                         " numpy.random.default_rng(0).integers(0, 1, 2).tolist())\n")
    assert page.get_attribute("#output", "data-state") == "ok", out
    assert out.splitlines()[:4] == ["[]", "['ember', 'numpy']",
                                    "2.0.2 pyodide.loadPackage 0.1.0", "8.0 [0, 0]"], out


def test_namespaces_are_fresh_and_outputs_stream_in_order(page):
    wait_ready(page)
    run_code(page, "x = 41")
    out = run_code(page, "print('a'); import sys; print('b', file=sys.stderr); print('c')\n"
                         "'x' in globals()")
    assert out.endswith("a\nb\nc\nFalse\n")


@pytest.mark.allow_outside("cdn.jsdelivr.net")
@pytest.mark.allow_console_errors
def test_cdn_only_when_asked_and_a_failure_is_shown(page):
    status = wait_ready(page, "playground/?cdn=1")
    assert status.startswith("error: ")  # the CDN is unreachable here: the page says so
    assert any("cdn.jsdelivr.net/pyodide/v0.27.7/full/" in u for u in page.log.outside)


def test_pyscript_page_runs_ember_offline(page):
    asked = []
    page.on("request", lambda r: asked.append(r.url))
    page.goto(page.base + "demos/pyscript/")
    page.wait_for_function("() => document.querySelector('#status').textContent === 'ready'")
    assert "gelu_custom(x) = Tensor(shape=[2, 3]" in page.text_content("#output")
    # booted as every page is (web/pyscript-interpreter.mjs, loadEmber's marks), not by
    # micropip installing ember
    marks = page.evaluate("performance.getEntriesByType('mark').map((m) => m.name)")
    assert [m for m in marks if m.startswith("ember:ready:snapshot-")], marks
    assert not [u for u in asked if "micropip" in u or "packaging" in u], asked
    # PyScript's own output sinks (the console here) still get whole lines
    said = []
    page.on("console", lambda m: said.append(m.text))
    with page.expect_console_message(lambda m: "and another" in m.text):
        page.evaluate("""() => { const s = document.createElement("script"); s.type = "py";
          s.textContent = "print('a line')\\nprint('and another')"; document.body.append(s); }""")
    assert said[-2:] == ["a line", "and another"], said


def test_a_second_visit_asks_nothing_of_the_pinned_runtime(browser, server, tmp_path):
    """The runtime's files come from the browser's cache on a warm visit, not even revalidated.
    A profile on disk, as a user's browser has (an in-memory cache drops the 8 MB .wasm; the
    `page` fixture routes requests, which turns the cache off); OFFLINE_ARGS still keep every
    request on 127.0.0.1."""
    context = browser.browser_type.launch_persistent_context(
        str(tmp_path / "profile"), executable_path=site.chromium_path(), headless=True,
        args=site.CHROMIUM_ARGS + site.OFFLINE_ARGS)
    try:
        pg = context.new_page()
        pg.set_default_timeout(120_000)
        pg.base = server.url
        server.reset_counts()
        assert wait_ready(pg) == "ready"
        first = [p for p, _ in server.answered if site.is_pinned(p)]
        assert any(p.endswith("pyodide.asm.wasm") for p in first), first
        # the first visit's service worker has precached the offline copy (it fetches runtime
        # files this page did not load, micropip's for PyScript: the first visit's requests)
        pg.evaluate("() => navigator.serviceWorker.ready.then(() => true)")
        time.sleep(1.0)  # the cache entries are written
        server.reset_counts()
        assert wait_ready(pg) == "ready"
        assert [a for a in server.answered if site.is_pinned(a[0])] == []
        assert server.answered, "the page itself is revalidated"
    finally:
        context.close()
