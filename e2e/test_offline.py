"""The site works offline after one visit (web/service-worker.js, written to /sw.js by
`ember site`; web/offline.js registers it once a page is ready): a server of its own serves the
built site, the playground is visited once, the server is stopped (SiteServer.stop: its kept-alive
connections too), and the playground (its
Python runs, a shipped model loads, booted from the memory snapshot the first visit kept), the
landing page, the drawing page and the browser-training page still load and reach `ready`.
Only 127.0.0.1 is ever asked (OFFLINE_ARGS; the requests are listed)."""

from urllib.parse import urlparse

import pytest
from conftest import run_code, wait_ready

from ember import site


@pytest.fixture
def offline_page(browser, site_dir):
    srv = site.SiteServer(site_dir).start()
    context = browser.new_context()  # no routing: Playwright's routes bypass service workers
    pg = context.new_page()
    pg.set_default_timeout(120_000)
    pg.base, pg.server, pg.urls, errors = srv.url, srv, [], []
    pg.on("request", lambda r: pg.urls.append(r.url))
    pg.on("pageerror", lambda e: errors.append(str(e)))
    yield pg
    context.close()
    srv.stop()  # (again: a no-op where the test stopped it)
    assert not errors, errors
    hosts = {urlparse(u).hostname for u in pg.urls if not u.startswith(("data:", "blob:"))}
    assert hosts <= {"127.0.0.1"}, hosts


def test_pages_load_and_run_with_the_server_gone(offline_page):
    pg = offline_page
    assert wait_ready(pg) == "ready"
    pg.wait_for_function("() => navigator.serviceWorker.controller !== null")
    # and the memory snapshot of the interpreter (web/boot.js), kept beside the offline copy
    pg.wait_for_function("() => performance.getEntriesByName('ember:snapshot-saved').length")
    assert run_code(pg, "print(6 * 7)").startswith("42\n")
    caches = pg.evaluate("() => caches.keys()")
    assert sorted(caches)[1] == "pyodide-snapshots" and sorted(caches)[0].startswith("ember-")
    pg.server.stop()  # its kept-alive connections too: the pages must come from the cache
    with pytest.raises(Exception):  # noqa: B017 (any network error: the server is gone)
        pg.request.get(pg.base + "playground/", timeout=5_000)
    pg.reload()
    pg.wait_for_function("() => { const s = document.querySelector('#status').textContent;"
                         " return s === 'ready' || s.startsWith('error'); }")
    assert pg.text_content("#status") == "ready"
    assert pg.evaluate("performance.getEntriesByName('ember:ready:snapshot-restored').length")
    assert pg.evaluate("crossOriginIsolated")  # the cached pages keep COOP/COEP: Stop works
    out = run_code(pg, "import ember\nprint(ember.Tensor.ones([2, 3]).sum().item())")
    assert out.startswith("6.0\n"), out
    # ember.models' weights are files of their own (site.split_weights), fetched by the first
    # run that loads one: the offline copy holds them too
    out = run_code(pg, 'import ember\nprint(type(ember.models.load("mnist")).__name__)')
    assert out.endswith("ConvNet\n"), out  # (the output so far, then this run's)
    assert wait_ready(pg, "demos/mnist/") == "ready"  # the drawing page's model, from the cache
    assert wait_ready(pg, "playground/?worker=0") == "ready"  # a query of a cached page
    pg.goto(pg.base)
    links = pg.eval_on_selector_all("#pages a", "els => els.map(e => e.getAttribute('href'))")
    assert "playground/" in links
    assert wait_ready(pg, "examples/browser-training/") == "ready"
