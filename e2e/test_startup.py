"""Start-up on the session's site: what the server sends compressed and what it lets the browser
keep (core/ember/site.py: precompress, Handler), a warm visit that asks for none of the runtime,
and the progress bar with bytes that loadEmber shows while it loads (web/ember.js).
`ember bench browser_startup` measures the times; nothing here is timed."""

import contextlib
import io
import json
import re
import urllib.request

import numpy as np
import pytest
from conftest import run_code, wait_ready

from ember import site

GZIP = {"Accept-Encoding": "gzip, deflate, br"}


def head(url, headers=GZIP):
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers)) as r:
        return r.headers, len(r.read())


def test_the_runtime_goes_out_compressed_and_pinned_for_good(server, site_dir):
    info = json.loads((site_dir / "build-info.json").read_text())
    pinned = server.url + info["pinned_runtime"]
    wasm = site_dir / "pyodide" / "pyodide.asm.wasm"
    headers, sent = head(pinned + "pyodide.asm.wasm")
    assert headers["Content-Encoding"] == "gzip" and headers["Vary"] == "Accept-Encoding"
    assert headers["Content-Type"] == "application/wasm"
    assert headers["Cache-Control"] == "public, max-age=31536000, immutable"
    assert sent < wasm.stat().st_size / 2  # 10.1 MB -> 3.1 MB
    plain, sent = head(pinned + "pyodide.asm.wasm", headers={})
    assert plain["Content-Encoding"] is None and sent == wasm.stat().st_size
    # the pages and the site's own scripts: compressed too, and revalidated (a rebuild shows)
    for path in ("web/boot.js", "playground/"):
        headers, _ = head(server.url + path)
        assert headers["Content-Encoding"] == "gzip", path
        assert headers["Cache-Control"] == "no-cache" and headers["ETag"], path
    # the boot wheels' own .gz is a file that boot.js gunzips and checks: never an encoding
    lock = json.loads((site_dir / "pyodide" / "pyodide-lock.json").read_text())
    headers, _ = head(pinned + lock["packages"]["numpy"]["file_name"] + ".gz")
    assert headers["Content-Type"] == "application/gzip" and headers["Content-Encoding"] is None


@pytest.fixture
def own_server(site_dir):
    srv = site.SiteServer(site_dir).start()
    yield srv
    srv.stop()


# what the progress bar said, every time it changed (the bar is gone by `ready`)
BAR_PROBE = """(() => {
  window.__bar = [];
  new MutationObserver(() => {
    const label = document.querySelector(".ember-progress span");
    if (label && label.textContent !== window.__bar.at(-1)) window.__bar.push(label.textContent);
  }).observe(document, { subtree: true, childList: true, characterData: true });
})();"""


def test_a_cold_visit_shows_the_bytes_and_a_warm_one_asks_for_no_runtime_file(browser,
                                                                             own_server):
    context = browser.new_context()  # no routing: it would turn the HTTP cache off
    context.add_init_script(BAR_PROBE)
    try:
        pg = context.new_page()
        pg.set_default_timeout(120_000)
        pg.base = own_server.url
        assert wait_ready(pg) == "ready"
        said = pg.evaluate("window.__bar")
        assert pg.query_selector(".ember-progress") is None  # gone once ready
        shown = [tuple(map(float, m.groups())) for m in
                 (re.fullmatch(r"(\d+\.\d) of (\d+\.\d) MB", t) for t in said) if m]
        assert len(shown) >= 2 and shown[0][0] < shown[-1][0], said  # it moved
        total = shown[-1][1]
        assert total > 5 and shown[-1][0] > total / 2, said  # most of it counted before ready
        cold = own_server.bytes_sent
        assert 5e6 < cold < 20e6  # compressed: ~15 MB where the files hold ~32 MB
        pg.wait_for_function("() => navigator.serviceWorker.controller !== null")
        own_server.reset_counts()
        assert wait_ready(pg) == "ready"  # a warm visit
        asked = [path for path, _ in own_server.answered]
        assert not [p for p in asked if p.startswith("/pyodide/")], asked
        assert own_server.bytes_sent < 100_000, own_server.requests
    finally:
        context.close()


def test_what_start_up_leaves_out_loads_on_first_use(page):
    # boot.js links only the shared libraries `import ember` needs (site.BOOT_LIBRARIES); numpy's
    # others load on their first import. ember.models' weights come before the first run that
    # loads a model (site.split_weights). Both from the page's worker.
    lock = json.loads(urllib.request.urlopen(page.base + "pyodide/pyodide-lock.json").read())
    assert set(lock["ember"]["weights"]) == {"mnist", "fashion-mnist"}
    assert wait_ready(page) == "ready"
    code = "print(np.random.default_rng(0).integers(10, size=3), np.fft.fft([1, 2]).real)"
    out = run_code(page, f"import numpy as np, ember\n{code}\n"
                         "print(ember.models.load('fashion-mnist').training)")
    here = io.StringIO()
    with contextlib.redirect_stdout(here):
        exec(code, {"np": np})
    assert out.startswith(f"{here.getvalue()}False\n"), out
