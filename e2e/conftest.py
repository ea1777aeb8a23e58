"""End-to-end fixtures: the site is built once per session (as `ember site` builds it), served
on 127.0.0.1, and driven by Playwright in Debian's headless Chromium.

Every page runs in a fresh browser context that aborts any request leaving 127.0.0.1 (and the
browser itself resolves no other host), collects console errors and uncaught page errors, and
leaves a screenshot in e2e/screenshots/. A test fails on an outside request or a console error
unless it is marked `allow_outside(host)` / `allow_console_errors`.
"""

import re
import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest

from ember import site

SCREENSHOTS = Path(__file__).parent / "screenshots"


def pytest_configure(config):
    config.addinivalue_line("markers", "allow_outside(host): the test expects (blocked) "
                            "requests to this host")
    config.addinivalue_line("markers", "allow_console_errors: console errors are expected")


@pytest.fixture(scope="session")
def site_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("e2e") / "site"
    site.build_site(out, log=lambda m: print(f"[site] {m}", file=sys.stderr))
    return out


@pytest.fixture(scope="session")
def server(site_dir):
    srv = site.SiteServer(site_dir).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=site.chromium_path(), headless=True,
                              args=site.CHROMIUM_ARGS + site.OFFLINE_ARGS)
        yield b
        b.close()


class PageLog:
    def __init__(self):
        self.outside, self.console_errors = [], []


@pytest.fixture
def page(browser, server, request):
    log = PageLog()
    context = browser.new_context()

    def route(r):
        host = urlparse(r.request.url).hostname
        if r.request.url.startswith(("data:", "blob:")) or host == "127.0.0.1":
            r.continue_()
        else:
            log.outside.append(r.request.url)
            r.abort("blockedbyclient")
    context.route("**/*", route)
    pg = context.new_page()
    pg.on("console", lambda m: log.console_errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: log.console_errors.append(f"uncaught: {e}"))
    pg.set_default_timeout(120_000)
    pg.log, pg.base = log, server.url
    yield pg
    SCREENSHOTS.mkdir(exist_ok=True)
    name = re.sub(r"[^\w.-]+", "_", request.node.nodeid.split("::", 1)[-1])
    try:
        pg.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
    finally:
        context.close()
    allowed = {m.args[0] for m in request.node.iter_markers("allow_outside")}
    outside = [u for u in log.outside if urlparse(u).hostname not in allowed]
    assert not outside, f"requests left 127.0.0.1: {outside}"
    if not request.node.get_closest_marker("allow_console_errors"):
        assert not log.console_errors, f"console errors: {log.console_errors}"


def wait_ready(pg, path="playground/"):
    """Open a page of the site and wait until #status says ready (or error); the status."""
    pg.goto(pg.base + path)
    pg.wait_for_function("() => { const s = document.querySelector('#status').textContent;"
                         " return s === 'ready' || s.startsWith('error'); }")
    return pg.text_content("#status")


def run_code(pg, code=None):
    """Put `code` in the playground (None: keep what is there), run it, wait; the output."""
    runs = int(pg.get_attribute("#output", "data-runs"))
    if code is not None:
        pg.fill("#code", code)
    pg.click("#run")
    pg.wait_for_function(f"() => document.querySelector('#output').dataset.runs === '{runs + 1}'")
    return pg.text_content("#output")
