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
    # a boot wheel goes out from its .gz with Content-Encoding (the browser unpacks it, boot.js
    # only checks it); the .gz itself is a file, for hosts that send the wheel as it is
    lock = json.loads((site_dir / "pyodide" / "pyodide-lock.json").read_text())
    wheel = lock["packages"]["numpy"]["file_name"]
    headers, sent = head(pinned + wheel)
    assert headers["Content-Encoding"] == "gzip" and headers["Content-Type"] == "application/zip"
    assert sent == (site_dir / "pyodide" / f"{wheel}.gz").stat().st_size
    headers, _ = head(pinned + wheel + ".gz")
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


@pytest.fixture
def barred(browser, own_server):
    """A page in a context of its own (a cold visit) that notes the progress bar's labels."""
    context = browser.new_context()  # no routing: it would turn the HTTP cache off
    context.add_init_script(BAR_PROBE)
    pg = context.new_page()
    pg.set_default_timeout(120_000)
    pg.base = own_server.url
    yield pg
    context.close()


def test_a_cold_visit_shows_the_bytes_and_a_warm_one_asks_for_no_runtime_file(barred,
                                                                             own_server):
    pg = barred
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


def test_a_host_that_sends_the_wheels_as_they_are_gets_asked_for_their_gz(barred, own_server,
                                                                           monkeypatch):
    # no Content-Encoding for a wheel (a static host that compresses only text): boot.js asks
    # for the wheel's .gz instead and gunzips it itself, rather than taking the 11 MB as it is
    monkeypatch.setattr(site.Handler, "accepts",
                        lambda self, encoding: not self.path.split("?")[0].endswith(".whl"))
    pg = barred
    assert wait_ready(pg) == "ready"
    asked = dict(own_server.requests)
    gz = [p for p in asked if p.endswith(".whl.gz")]
    assert len(gz) == 2 and all(asked[p] > 1e5 for p in gz), asked  # numpy's and ember's
    # (the plain ones are cut short once the .gz answers; on this loopback they are all in
    # by then) the bar counts the .gz files, not the plain wheels it gave up
    said = pg.evaluate("window.__bar")
    done, total = map(float, re.fullmatch(r"(\d+\.\d) of (\d+\.\d) MB", said[-1]).groups())
    assert total / 2 < done <= total * 1.05, said
    assert run_code(pg, "import numpy as np; print(np.arange(3).sum())").startswith("3\n")


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


# ---- the memory snapshot (web/boot.js): made after the first ready, restored on later visits ----
BOOTED = """performance.getEntriesByType("mark").map((m) => m.name)
  .filter((n) => n.startsWith("ember:ready:snapshot-")).map((n) => n.slice(21))"""
SAVED = "() => performance.getEntriesByName('ember:snapshot-saved').length > 0"
KEPT = """async () => { const c = await caches.open("pyodide-snapshots");
  return (await c.keys()).map((r) => r.url); }"""
# what the numbers print in Python natively and in the page: numpy's linalg (a shared library
# linked at boot), ember on its NdArray backend
CHECK = ("import numpy as np, ember\n"
         "print(np.linalg.inv(np.eye(3) * 2).sum(), ember.Tensor.ones([2, 3]).sum().item())")


def _visit(pg, path="playground/"):
    """Open `path`, wait for ready; how loadEmber booted (web/ember.js's mark)."""
    assert wait_ready(pg, path) == "ready"
    (booted,) = pg.evaluate(BOOTED)
    return booted


@pytest.fixture
def fresh(browser, own_server, site_dir):
    """A page in a context of its own (an empty Cache Storage), on the session's site."""
    context = browser.new_context()  # no routing: it would turn the HTTP cache off
    pg = context.new_page()
    pg.set_default_timeout(120_000)
    errors = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.base = own_server.url
    pg.pinned = own_server.url + json.loads((site_dir / "build-info.json").read_text())[
        "pinned_runtime"]
    yield pg
    context.close()
    assert not errors, errors


def test_a_later_visit_boots_from_the_snapshot_the_first_one_kept(fresh):
    pg = fresh
    assert _visit(pg) == "none"
    pg.wait_for_function(SAVED)  # made in a worker of its own once the page was ready
    assert pg.evaluate(KEPT) == [pg.pinned + "memory-snapshot.bin"]
    # kept sparse (boot.js): the heap's zero pages are not stored
    kept, heap = pg.evaluate("""async (pinned) => {
      const hit = await caches.match(pinned + "memory-snapshot.bin",
                                     { cacheName: "pyodide-snapshots" });
      const { findSnapshot } = await import(new URL("../../web/boot.js", pinned).href);
      const heap = await (await findSnapshot(pinned)).bytes;
      return [(await hit.arrayBuffer()).byteLength, heap.byteLength];
    }""", pg.pinned)
    assert kept < 0.75 * heap, (kept, heap)
    assert _visit(pg) == "restored"
    assert run_code(pg, CHECK).startswith("1.5 6.0\n")
    assert pg.evaluate("performance.getEntriesByName('ember:snapshot-saved').length") == 0
    # Python's `js` is this realm's globals, not the snapshot maker's
    js = "import js\nprint(js.self.constructor.name, js.location.pathname)"
    assert run_code(pg, js).endswith("DedicatedWorkerGlobalScope /web/ember-worker.js\n")
    # on the page's thread too (the snapshot was made in a worker), and in the drawing page
    assert _visit(pg, "playground/?worker=0") == "restored"
    assert run_code(pg, CHECK).startswith("1.5 6.0\n")
    js = "import js\nprint(js.document.getElementById('status').textContent)"
    assert run_code(pg, js).endswith("running\n")  # (the DOM, read while the code runs)
    assert _visit(pg, "demos/mnist/") == "restored"
    # loadEmber({snapshots: false}) boots without it, and keeps none
    assert pg.evaluate("""async (base) => {
      const { loadEmber } = await import(base + "web/ember.js");
      const ember = await loadEmber({ worker: true, snapshots: false, progressBar: false });
      const out = [ember.snapshot, await ember.snapshotSaved];
      ember.close();
      return out; }""", pg.base) == ["none", None]
    assert pg.evaluate(KEPT) == [pg.pinned + "memory-snapshot.bin"]


# Each turns the kept snapshot into one that must not boot: the page deletes it, boots afresh,
# keeps a good one again, and the visit after boots from that.
DAMAGE = {
    # bytes that are no snapshot at all, kept with their own check (so the restore refuses them)
    "not a snapshot": "(s) => ({ bytes: s.map((_, i) => (i * 7919) >> 3), recheck: true })",
    # another runtime's: Pyodide's build id (bytes 16-47 of the header) differs
    "another runtime": "(s) => { s[20] ^= 0xff; return { bytes: s, recheck: true }; }",
    # cut short under the check of the whole one (it would hang the runtime's instantiation)
    "truncated": "(s) => ({ bytes: null, recheck: false })",
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_snapshot_is_deleted_and_the_page_boots_afresh(fresh, damage):
    pg = fresh
    assert _visit(pg) == "none"
    pg.wait_for_function(SAVED)
    pg.evaluate(f"""async ([pinned, key]) => {{
      const cache = await caches.open("pyodide-snapshots");
      const hit = await cache.match(key);
      const boot = await import(new URL("../../web/boot.js", pinned).href);
      const heap = await (await boot.findSnapshot(pinned)).bytes;  // (kept sparse: the heap)
      const {{ bytes, recheck }} = ({DAMAGE[damage]})(heap);
      if (recheck) {{  // kept as boot.js keeps one: only the restore can tell
        await boot.keepSnapshot(pinned, bytes);
      }} else {{  // the bytes as kept, cut short
        const kept = new Uint8Array(await hit.arrayBuffer());
        const half = kept.slice(0, kept.length >> 1);
        await cache.put(key, new Response(half, {{ headers: hit.headers }}));
      }}
    }}""", [pg.pinned, pg.pinned + "memory-snapshot.bin"])
    assert _visit(pg) == "failed"
    assert run_code(pg, CHECK).startswith("1.5 6.0\n")
    pg.wait_for_function(SAVED)  # a good one again
    assert _visit(pg) == "restored"
