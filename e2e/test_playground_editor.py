"""The playground's code editor: CodeMirror 6, served by the site itself (web/vendor/, from
npm at build time), over the textarea #code that stays the value behind it. Offline as every
e2e test (conftest.py): a module fetched from anywhere else would fail the test."""

import pytest
from conftest import run_code, wait_ready

from ember import site

EDITOR_TEXT = "() => window.__editor.state.doc.toString()"


def editor_text(page):
    # the document as CodeMirror holds it (innerText of .cm-content drops off-screen lines)
    return page.evaluate(EDITOR_TEXT)


def test_the_editor_is_codemirror_from_this_site(page):
    modules = []
    page.on("request", lambda r: modules.append(r.url) if "/web/vendor/" in r.url else None)
    wait_ready(page)
    page.wait_for_selector(".cm-editor .cm-content[contenteditable=true]")
    names = {u.split("/web/vendor/")[1].rsplit("/", 2)[0] for u in modules}
    assert {"@codemirror/view", "@codemirror/lang-python", "@lezer/python"} <= names, names
    assert all(u.startswith(page.base) for u in modules)
    precached = page.evaluate("async () => (await (await fetch('/sw.js')).text())")
    missing = [u for u in modules if f'"{u[len(page.base):]}"' not in precached]
    assert not missing, f"not in the service worker's precache (offline): {missing}"
    # the textarea is behind it: out of the tab order and of the accessibility tree
    assert page.get_attribute("#code", "tabindex") == "-1"
    assert page.get_attribute("#code", "aria-hidden") == "true"
    assert page.get_attribute(".cm-content", "aria-label") == "Python code"
    assert editor_text(page) == page.input_value("#code")


def test_python_is_highlighted(page):
    wait_ready(page)
    page.wait_for_selector(".cm-content")
    colour = """([text]) => { const s = [...document.querySelectorAll('.cm-content span')]
      .find(e => e.textContent === text); return s && getComputedStyle(s).color; }"""
    plain = page.evaluate("() => getComputedStyle(document.querySelector('.cm-line')).color")
    assert page.evaluate(colour, ["def"]) == "rgb(122, 31, 162)"  # a keyword
    strings = page.evaluate("""() => [...document.querySelectorAll('.cm-content span')]
      .filter(e => /^["']/.test(e.textContent)).map(e => getComputedStyle(e).color)""")
    assert strings and set(strings) == {"rgb(163, 21, 21)"}
    assert plain not in ("rgb(122, 31, 162)", "rgb(163, 21, 21)")


def test_the_textarea_and_the_editor_stay_one_value(page):
    wait_ready(page)
    page.wait_for_selector(".cm-content")
    page.fill("#code", "x = 1\n")  # a script (or a test) writing the textarea: the editor follows
    assert editor_text(page) == "x = 1\n"
    page.click(".cm-content")
    page.keyboard.press("Control+End")
    page.keyboard.type("print(x + 1)")  # typing in the editor: the textarea follows
    assert page.input_value("#code") == "x = 1\nprint(x + 1)"
    page.keyboard.press("Control+Enter")  # runs from the editor
    page.wait_for_function("() => document.querySelector('#output').dataset.runs === '1'")
    assert page.text_content("#output").startswith("2\n")
    page.select_option("#examples", "autodiff")  # an example replaces both
    assert "Autodiff(NdArray())" in editor_text(page)
    assert editor_text(page) == page.input_value("#code")


def test_a_share_link_opens_its_code_in_the_editor(page):
    wait_ready(page)
    page.wait_for_selector(".cm-content")
    code = "# shared\nprint('from the link', 6 * 7)\n"
    page.fill("#code", code)
    page.click("#share")
    link = page.input_value("#share-link")
    page.fill("#code", "print('other')\n")
    page.goto(page.base)
    page.goto(link)
    page.wait_for_selector(".cm-content")
    assert editor_text(page) == code == page.input_value("#code")
    assert run_code(page).startswith("from the link 42\n")
    # a link pasted into the open page (only the fragment changes: no reload)
    other = page.evaluate("""() => { const u = new URL(location.href);
      u.hash = 'code=' + btoa('print(1)\\n').replace(/=+$/, ''); return u.href; }""")
    page.goto(other)
    page.wait_for_function(f"() => ({EDITOR_TEXT})() === 'print(1)\\n'")
    assert page.input_value("#code") == "print(1)\n"


def test_the_editor_loads_offline_after_one_visit(browser, site_dir):
    """The service worker (web/service-worker.js) keeps the editor's modules: with the server
    gone, a reload still gets CodeMirror, not the plain text box. A context without routing
    (Playwright's routes bypass service workers); OFFLINE_ARGS keep requests on 127.0.0.1."""
    srv = site.SiteServer(site_dir).start()
    context = browser.new_context()
    try:
        pg = context.new_page()
        pg.set_default_timeout(120_000)
        pg.base = srv.url
        assert wait_ready(pg) == "ready"
        pg.wait_for_selector(".cm-content")
        pg.wait_for_function("() => navigator.serviceWorker.controller !== null")
        pg.wait_for_function("async () => (await caches.keys()).length > 0")
        srv.stop()
        pg.reload()
        pg.wait_for_selector(".cm-editor .cm-content")
        assert "def gelu_custom(x):" in editor_text(pg)
        assert pg.get_attribute("#code", "aria-hidden") == "true"  # the editor, not the fallback
    finally:
        context.close()
        srv.stop()


@pytest.mark.allow_console_errors  # (the refused modules are logged as failed loads)
def test_without_the_editors_modules_the_textarea_is_the_editor(page):
    page.route("**/web/vendor/**", lambda r: r.abort())
    assert wait_ready(page) == "ready"
    assert page.locator(".cm-editor").count() == 0
    assert page.is_visible("#code") and page.get_attribute("#code", "tabindex") is None
    assert "def gelu_custom(x):" in page.input_value("#code")
    page.fill("#code", "")
    page.focus("#code")
    page.keyboard.press("Tab")  # the plain box indents too, and Esc then Tab still leaves it
    assert page.input_value("#code") == "    "
    page.keyboard.press("Escape")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") != "code"
    assert run_code(page, "print('plain')").startswith("plain\n")
