"""Every page's time to `ready` in headless Chromium (Pyodide booted, numpy and ember installed
and imported, the page's own start-up done: #status reads `ready`), cold (a fresh browser
profile: empty HTTP cache, no service worker) and warm (the same profile, the next visits: the
HTTP cache, the service worker and the interpreter's memory snapshot the first visit left:
web/boot.js), with the bytes the server sent until `ready` (the bodies as they went over the
wire: compressed where the server compressed them) and then for the service worker's offline
copy of the site (until it controls the page and the snapshot is kept). Also the CPU seconds
the browser's processes used until `ready` (Linux): on a machine whose cores a visit keeps
busy, only less work makes it faster. Each visit's line on
stderr says how loadEmber booted: from the snapshot (`restored`), without one (`none`), from a
damaged one that it deleted (`failed`); None for a page without loadEmber (PyScript's).

Time to ready is `performance.now()` when #status first reads `ready`: from the start of the
navigation, so the page, its modules, the worker and Pyodide's boot all count. The reference
column is the goal of issue 25 (<= 1.5 s cold, <= 0.8 s warm, <= 15 MB sent cold on this
2-core machine): a ratio above 1.00x misses it.

The site is built with `ember site` into a temporary folder, or taken as it is from
$EMBER_STARTUP_SITE (a build folder: to measure an older build with the same harness).
$EMBER_STARTUP_PAGES=playground/,demos/mnist/ measures only those; $EMBER_STARTUP_VERBOSE=1
lists every request of every visit on stderr; $EMBER_STARTUP_BEFORE=DIR measures that build
too, its visits interleaved with this build's, as the reference column (instead of the goal).
"""

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

GOAL = {"cold": 1500, "warm": 800, "cold_mb": 15.0}
PAGES = ("playground/", "demos/mnist/", "demos/image-classification/", "demos/train/",
         "demos/pyscript/", "examples/browser-training/")
WARM_VISITS = 2

# Notes the moment #status first reads `ready` (or `error...`), whoever writes it.
READY_PROBE = """(() => {
  const note = () => {
    const s = document.getElementById("status");
    const text = s ? s.textContent.trim() : "";
    if (window.__startup === undefined && (text === "ready" || text.startsWith("error"))) {
      window.__startup = { status: text, ms: performance.now() };
    }
  };
  new MutationObserver(note).observe(document, { subtree: true, childList: true,
                                                 characterData: true });
})();"""


def _browser_cpu():
    """CPU seconds used so far by the browser's processes (this process's descendants but
    Playwright's driver), the exited ones included (their parents' cutime); None without
    Linux's /proc. On this 2-core machine a visit keeps both cores busy (the browser used
    1.5-2.5 CPU seconds in a 0.8-1.3 s warm visit): its time to ready follows the work it
    does, not how that work overlaps."""
    try:
        procs = {}
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open(f"/proc/{pid}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        driver = b"run-driver" in f.read()  # (Node, its protocol)
                except OSError:  # (exited meanwhile)
                    continue
                procs[int(pid)] = (int(fields[1]), sum(map(int, fields[11:15])), driver)
    except OSError:
        return None
    children = {}
    for pid, (parent, _, _) in procs.items():
        children.setdefault(parent, []).append(pid)
    below, ticks = list(children.get(os.getpid(), ())), 0
    while below:
        pid = below.pop()
        below += children.get(pid, ())
        _, used, driver = procs[pid]
        if not driver:
            ticks += used
    return ticks / os.sysconf("SC_CLK_TCK")


def _visit(context, server, url, settle=None, booted=None, cpu=None):
    """One navigation in `context`: ms to ready. The server's counts are the caller's.
    settle(page): called once the page is ready, before it closes; booted: a list that gets
    how loadEmber booted (_snapshot); cpu: one that gets the browser's CPU seconds until
    ready (_browser_cpu), where known."""
    page = context.new_page()
    before = _browser_cpu()
    outside = []
    # no page.route here: Playwright turns the HTTP cache off while routing. The browser's
    # host-resolver rules (OFFLINE_ARGS) block other hosts; this listener notices any attempt.
    page.on("request", lambda r: None if r.url.startswith((server.url, "data:", "blob:"))
            else outside.append(r.url))
    page.goto(url)
    page.wait_for_function("() => window.__startup !== undefined", timeout=120_000)
    got = page.evaluate("window.__startup")
    after = _browser_cpu()
    if cpu is not None and before is not None and after is not None:
        cpu.append(after - before)
    if booted is not None:
        booted.append(_snapshot(page))
    if settle:
        settle(page)
    page.close()
    if got["status"] != "ready":
        raise RuntimeError(f"{url} did not start: {got['status']}")
    if outside:
        raise RuntimeError(f"requests left 127.0.0.1: {outside}")
    return got["ms"]


def _offline_copy(page, timeout_ms=8_000):
    """Wait until the service worker controls the page (it has cached the site) and a page
    that booted with web/boot.js has kept its memory snapshot (or failed to: the marks
    ember.js sets), so that the warm visits do not compete with either; pages without a
    service worker wait timeout_ms."""
    try:
        page.wait_for_function("() => navigator.serviceWorker?.controller != null",
                               timeout=timeout_ms)
    except Exception:  # noqa: BLE001 (Playwright's timeout: a page that registers none)
        pass
    if _snapshot(page) not in (None, "restored"):
        page.wait_for_function("() => ['ember:snapshot-saved', 'ember:snapshot-failed'].some("
                               "(m) => performance.getEntriesByName(m).length)", timeout=120_000)


def _snapshot(page):
    """How the page's loadEmber booted (web/ember.js's mark at ready): "restored" (from a memory
    snapshot), "none", "failed"; None for a page without loadEmber."""
    return page.evaluate("""performance.getEntriesByType("mark").map((m) => m.name)
        .filter((n) => n.startsWith("ember:ready:snapshot-")).map((n) => n.slice(21))[0] ?? null""")


def _sent(server, what, log):
    with server._lock:
        sent, answered, bodies = server.bytes_sent, list(server.answered), dict(server.requests)
    if log:
        print(f"  {what}: {sent / 1e6:.2f} MB, {len(answered)} requests", file=sys.stderr)
        for path, status in answered:
            print(f"    {status} {bodies.get(path, 0):>9} {path}", file=sys.stderr)
    server.reset_counts()
    return sent


def _cold_and_warm(p, server, name, r, log):
    """A fresh profile's first visit to `name`, then WARM_VISITS more; appended to `r`."""
    from ember.site import CHROMIUM_ARGS, OFFLINE_ARGS, chromium_path
    with tempfile.TemporaryDirectory() as profile:
        context = p.chromium.launch_persistent_context(
            profile, executable_path=chromium_path(), args=CHROMIUM_ARGS + OFFLINE_ARGS,
            headless=True)
        context.add_init_script(READY_PROBE)
        try:
            server.reset_counts()
            sent = []
            r["cold"].append(_visit(context, server, server.url + name, settle=lambda page: (
                sent.append(_sent(server, f"{name} cold", log)), _offline_copy(page)),
                booted=r["booted"], cpu=r["cold_cpu"]))
            r["cold_bytes"] += sent
            time.sleep(0.5)  # the cache writes
            r["offline_bytes"].append(_sent(server, f"{name} offline copy", log))
            for _ in range(WARM_VISITS):
                r["warm"].append(_visit(context, server, server.url + name, booted=r["booted"],
                                        cpu=r["warm_cpu"]))
                time.sleep(0.3)
                r["warm_bytes"].append(_sent(server, f"{name} warm", log))
        finally:
            context.close()


def _measure(sites, pages, runs, log):
    """{site: {page: {cold, warm, cold_bytes, offline_bytes, warm_bytes: [samples]}}}, the
    sites' visits interleaved page by page (a busy machine slows them alike)."""
    from playwright.sync_api import sync_playwright

    from ember.site import SiteServer
    servers = {k: SiteServer(folder).start() for k, folder in sites.items()}
    keys = ("cold", "warm", "cold_bytes", "offline_bytes", "warm_bytes", "cold_cpu", "warm_cpu")
    result = {k: {page: {key: [] for key in (*keys, "booted")} for page in pages} for k in sites}
    try:
        with sync_playwright() as p:
            for _ in range(runs):
                for name in pages:
                    for k, server in servers.items():
                        r = result[k][name]
                        _cold_and_warm(p, server, name, r, log)
                        visits = r["cold_cpu"][-1:] + r["warm_cpu"][-WARM_VISITS:]
                        cpu = [round(c, 2) for c in visits]
                        print(f"  {k} {name}: cold {r['cold'][-1]:.0f} ms, warm "
                              f"{[round(w) for w in r['warm'][-WARM_VISITS:]]} ms, "
                              f"{r['cold_bytes'][-1] / 1e6:.2f} MB; snapshot "
                              f"{r['booted'][-1 - WARM_VISITS:]}; browser CPU s {cpu}",
                              file=sys.stderr)
    finally:
        for server in servers.values():
            server.stop()
    return result


def startup(ctx):
    try:
        import playwright  # noqa: F401

        from ember import site
        site.chromium_path()
        given = os.environ.get("EMBER_STARTUP_SITE")
        root = None if given else site.source_root()
    except (ImportError, RuntimeError) as e:
        print(f"browser_startup skipped: {e} (pip install -e '.[e2e]'; make e2e-deps)",
              file=sys.stderr)
        yield ctx.row("skipped: no playwright / chromium / checkout", None, None, "-")
        return
    runs = 1 if ctx.quick else max(1, min(ctx.repeat, 3))
    log = bool(os.environ.get("EMBER_STARTUP_VERBOSE"))
    before = os.environ.get("EMBER_STARTUP_BEFORE")
    with tempfile.TemporaryDirectory(
            dir=root / "build" if root and (root / "build").is_dir() else None) as tmp:
        if given:
            out = Path(given)
        else:
            out = Path(tmp) / "site"
            site.build_site(out, root=root, log=lambda m: print(m, file=sys.stderr))
        wanted = os.environ.get("EMBER_STARTUP_PAGES")
        pages = [p for p in (wanted.split(",") if wanted else PAGES)
                 if (out / p / "index.html").is_file()]
        sites = {"this": out, **({"before": Path(before)} if before else {})}
        measured = _measure(sites, pages, runs, log)
    vs = "vs the build before" if before else "vs the goal"
    for name in pages:
        yield from _rows(ctx, name, measured["this"][name],
                         measured.get("before", {}).get(name), vs)


def _rows(ctx, name, m, ref, vs):
    med = statistics.median
    against = " vs the build before" if ref else ""
    for case, key, kind, scale, unit in (
            (f"ready, cold (ms) {vs}", "cold", "cold", 1, "ms"),
            (f"ready, warm (ms) {vs}", "warm", "warm", 1, "ms"),
            (f"sent until ready, cold (MB) {vs}", "cold_bytes", "cold_mb", 1e6, "MB"),
            ("then sent for the offline copy (MB)", "offline_bytes", "offline_mb", 1e6, "MB"),
            ("sent, warm (MB)", "warm_bytes", "warm_mb", 1e6, "MB"),
            (f"browser CPU until ready, cold (s){against}", "cold_cpu", "cold_cpu", 1, "s"),
            (f"browser CPU until ready, warm (s){against}", "warm_cpu", "warm_cpu", 1, "s")):
        if not m[key]:  # (the CPU rows: not known without /proc)
            continue
        reference = med(ref[key]) / scale if ref and ref[key] else GOAL.get(kind)
        yield ctx.row(f"{name} {case}", med(m[key]) / scale, reference, unit,
                      samples=m[key], kind=kind, page=name, goal=GOAL.get(kind))


BENCHMARKS = {"startup": startup}


def summarize(rows):
    lines = []
    for kind, unit in (("cold", "s"), ("warm", "s"), ("cold_mb", "MB")):
        got = [r for r in rows if r.get("kind") == kind]
        if not got:
            continue
        scale = 1000 if unit == "s" else 1
        worst = max(got, key=lambda r: r["ember"])
        missed = [r["page"] for r in got if r["ember"] > r["goal"]]
        lines.append(f"{kind}: worst {worst['page']} {worst['ember'] / scale:.2f} {unit} (goal "
                     f"{worst['goal'] / scale:.1f} {unit}); "
                     + (f"missed by {', '.join(missed)}" if missed else "every page meets it"))
    for visit in ("cold", "warm"):
        wall = {r["page"]: r["ember"] / 1000 for r in rows if r.get("kind") == visit}
        busy = [r["ember"] / wall[r["page"]] for r in rows
                if r.get("kind") == f"{visit}_cpu" and r["page"] in wall]
        if busy:
            lines.append(f"{visit}: the browser kept {min(busy):.1f}-{max(busy):.1f} cores busy "
                         f"until ready (its CPU seconds over the seconds to ready; this machine "
                         f"has {os.cpu_count()})")
    return lines
