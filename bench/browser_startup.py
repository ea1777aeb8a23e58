"""The playground's time to `ready` in headless Chromium (Pyodide booted, numpy and ember
installed and imported, the page usable), cold (a fresh browser profile: empty HTTP cache) and
warm (the same profile, a second visit: the browser's cache revalidates with 304s), with the
bytes the server sent. Two builds of the same site side by side: `ember site` as shipped
(stdlib and wheels precompiled to .pyc) against the stock Pyodide files (--no-fast-start).

Time to ready is `performance.now()` when #status turns `ready`: from the start of the
navigation, so the page, its modules, the worker and Pyodide's boot all count. The goal in
the browser issue: <= 2.5 s cold and <= 1.5 s warm on this 2-core machine.
"""

import statistics
import sys
import tempfile
import time
from pathlib import Path

GOAL_MS = {"cold": 2500, "warm": 1500}
STAGES = ("runtime", "packages", "import")


def _visit(context, server, url):
    """One navigation to the playground in `context`; (ms to ready, bytes sent, stage ms)."""
    server.reset_counts()
    page = context.new_page()
    outside = []
    # no page.route here: Playwright turns the HTTP cache off while routing. The browser's
    # host-resolver rules (OFFLINE_ARGS) block other hosts; this listener notices any attempt.
    page.on("request", lambda r: None if r.url.startswith((server.url, "data:", "blob:"))
            else outside.append(r.url))
    page.goto(url)
    page.wait_for_function("() => { const s = document.querySelector('#status').textContent;"
                           " return s === 'ready' || s.startsWith('error'); }", timeout=120_000)
    status = page.text_content("#status")
    if status != "ready":
        raise RuntimeError(f"the playground did not start: {status}")
    ember = page.evaluate("window.__ember")
    page.close()
    time.sleep(0.3)  # the worker's last requests (none expected) and the cache writes settle
    if outside:
        raise RuntimeError(f"requests left 127.0.0.1: {outside}")
    return ember["readyAt"], server.bytes_sent, ember["timings"]


def _measure(site_dir, runs, warm_visits=2):
    from playwright.sync_api import sync_playwright

    from ember.site import CHROMIUM_ARGS, OFFLINE_ARGS, SiteServer, chromium_path
    server = SiteServer(site_dir).start()
    url = server.url + "playground/"
    result = {"cold": [], "warm": [], "cold_bytes": [], "warm_bytes": [], "stages": []}
    try:
        with sync_playwright() as p:
            for _ in range(runs):
                with tempfile.TemporaryDirectory() as profile:
                    context = p.chromium.launch_persistent_context(
                        profile, executable_path=chromium_path(), args=CHROMIUM_ARGS + OFFLINE_ARGS,
                        headless=True)
                    try:
                        ms, sent, stages = _visit(context, server, url)
                        result["cold"].append(ms)
                        result["cold_bytes"].append(sent)
                        result["stages"].append(stages)
                        time.sleep(1.0)  # let the browser finish writing its caches
                        for _ in range(warm_visits):
                            ms, sent, _ = _visit(context, server, url)
                            result["warm"].append(ms)
                            result["warm_bytes"].append(sent)
                    finally:
                        context.close()
    finally:
        server.shutdown()
        server.server_close()
    return result


def startup(ctx):
    try:
        import playwright  # noqa: F401

        from ember import site
        site.chromium_path()
        root = site.source_root()
    except (ImportError, RuntimeError) as e:
        print(f"browser_startup skipped: {e} (pip install -e '.[e2e]'; make e2e-deps)",
              file=sys.stderr)
        yield ctx.row("skipped: no playwright / chromium / checkout", None, None, "-")
        return
    runs = 1 if ctx.quick else max(1, min(ctx.repeat, 3))
    with tempfile.TemporaryDirectory(dir=root / "build" if (root / "build").is_dir() else None) \
            as tmp:
        measured = {}
        for variant, fast in (("fast", True), ("stock", False)):
            out = Path(tmp) / variant
            site.build_site(out, root=root, fast_start=fast,
                            log=lambda m: print(m, file=sys.stderr))
            measured[variant] = _measure(out, runs)
    fast, stock = measured["fast"], measured["stock"]
    med = statistics.median
    for kind in ("cold", "warm"):
        yield ctx.row(f"playground ready, {kind} (ms), precompiled vs stock", med(fast[kind]),
                      med(stock[kind]), "ms", samples={"fast": fast[kind], "stock": stock[kind]},
                      goal_ms=GOAL_MS[kind], kind=kind)
    for kind in ("cold", "warm"):
        yield ctx.row(f"bytes sent, {kind} visit, precompiled vs stock",
                      med(fast[f"{kind}_bytes"]) / 1e6, med(stock[f"{kind}_bytes"]) / 1e6, "MB")
    for stage in STAGES:
        yield ctx.row(f"cold boot stage '{stage}' ends at (ms since loadEmber)",
                      med(s[stage] for s in fast["stages"]), med(s[stage] for s in stock["stages"]),
                      "ms")


BENCHMARKS = {"startup": startup}


def summarize(rows):
    lines = []
    for r in rows:
        if "goal_ms" in r:
            verdict = "meets" if r["ember"] <= r["goal_ms"] else "misses"
            lines.append(f"{r['kind']}: ready in {r['ember'] / 1000:.2f} s with precompiled "
                         f".pyc ({verdict} the {r['goal_ms'] / 1000:.1f} s goal); stock files "
                         f"{r['reference'] / 1000:.2f} s")
    return lines
