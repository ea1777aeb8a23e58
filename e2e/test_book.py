"""The book under /book/ of the served site (site.build_book): its Python blocks run in the page
through ember's Pyodide (web/book.js), offline, with the output CPython gives for the same
blocks. Nothing may leave 127.0.0.1 (conftest.py aborts such requests and fails the test; these
tests also list every request the page made)."""

import contextlib
import io
import re
from pathlib import Path
from urllib.parse import urlparse

import pytest

import ember

BOOK = Path(__file__).resolve().parents[1] / "docs" / "book"
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)


def native_outputs(page, count):
    """What CPython prints for the first `count` Python blocks of a book page, run in order in
    one namespace (as tests/docs/test_book.py runs them)."""
    namespace, outputs = {"__name__": "__main__"}, []
    before = ember.default_backend()
    try:
        for code in FENCE.findall((BOOK / page).read_text(encoding="utf-8"))[:count]:
            with contextlib.redirect_stdout(io.StringIO()) as out:
                exec(compile(code, page, "exec"), namespace)  # noqa: S102
            outputs.append(out.getvalue())
    finally:
        ember.set_default_backend(before)
    return outputs


def requests_of(pg):
    urls = []
    pg.on("request", lambda r: urls.append(r.url))
    return urls


def run_block(pg, index):
    """Click Run on the page's block `index` (0-based) and wait until its run ends; its output."""
    out = pg.locator("pre.ember-output").nth(index)
    runs = int(out.get_attribute("data-runs"))
    pg.locator(".ember-run button").nth(index).click()
    pg.wait_for_function("([i, n]) => document.querySelectorAll('pre.ember-output')[i]"
                         ".dataset.runs === String(n)", arg=[index, runs + 1])
    return out.text_content()


def test_the_landing_page_links_the_book(page):
    page.goto(page.base)
    links = page.eval_on_selector_all("#pages a", "els => els.map(e => e.getAttribute('href'))")
    assert "book/" in links
    assert not [u for u in links if u.startswith("book/") and u != "book/"]  # not every chapter


def test_a_block_runs_in_the_page_offline_with_cpythons_output(page):
    urls = requests_of(page)
    page.goto(page.base + "book/tensors/")
    blocks = page.locator("div.language-python")
    assert blocks.count() >= 5
    assert page.locator(".ember-run button").count() == blocks.count()  # one Run per block
    assert page.locator("pre.ember-output").first.is_hidden()
    # Run on the second block runs the first one too (one namespace per page, as in the tests)
    out = run_block(page, 1)
    want = native_outputs("tensors.md", 2)
    assert page.locator("pre.ember-output").nth(1).get_attribute("data-state") == "ok", out
    assert out == want[1]
    assert page.locator("pre.ember-output").nth(0).text_content() == want[0]
    assert "(2, 3) float32 2 6" in want[0]
    # a second Run of the same block reuses the booted runtime and the namespace
    assert run_block(page, 1) == want[1]
    assert {urlparse(u).hostname for u in urls if not u.startswith(("data:", "blob:"))} == \
        {"127.0.0.1"}
    assert any("/pyodide/" in u for u in urls)  # Python came from this site


@pytest.mark.parametrize("chapter", ["getting-started", "browser"])
def test_a_block_for_the_page_runs_there(page, chapter):
    """Blocks marked `# book: skip (runs inside Pyodide ...)` (top-level await, the page's
    WebGPU) cannot run under pytest; in the page they do, on SwiftShader's WebGPU here."""
    page.goto(page.base + f"book/{chapter}/")
    codes = page.eval_on_selector_all("div.language-python code",
                                      "els => els.map(e => e.textContent)")
    index = next(i for i, c in enumerate(codes) if "runs inside Pyodide" in c.split("\n")[0])
    out = run_block(page, index)
    assert page.locator("pre.ember-output").nth(index).get_attribute("data-state") == "ok", out
    assert out.strip()


def run_block_with(pg, text):
    """Run the block whose code contains `text`; (its index, its output)."""
    codes = pg.eval_on_selector_all(
        ".ember-run", "bars => bars.map(b => b.previousElementSibling.textContent)")
    index = next(i for i, c in enumerate(codes) if text in c)
    return index, run_block(pg, index)


def test_a_wgpu_block_runs_on_the_pages_webgpu(page):
    """A block written for native runs (`G = Wgpu()`, `y.to_numpy()`) runs unchanged: book.js
    makes the page's WebGPU device first (SwiftShader here)."""
    page.goto(page.base + "book/backends/")
    index, out = run_block_with(page, "G = Wgpu()")
    assert page.locator("pre.ember-output").nth(index).get_attribute("data-state") == "ok", out
    assert out == "(64, 64)\nTrue\n"
    _, out = run_block_with(page, "F = Fusion(Wgpu())")
    assert "Kernel(" in out, out


def test_a_block_that_cannot_run_in_the_page_fails_with_a_clean_traceback(page):
    page.goto(page.base + "book/backends/")
    index, out = run_block_with(page, 'Torch(device="cuda"')
    assert page.locator("pre.ember-output").nth(index).get_attribute("data-state") == "error"
    assert out.startswith("Traceback (most recent call last):")
    assert 'File "<book block' in out and "_pyodide" not in out
    assert "BackendError: Torch needs PyTorch" in out
    assert "failed in" in page.locator(".ember-note").nth(index).text_content()


def test_native_blocks_show_why_instead_of_a_button(page):
    page.goto(page.base + "book/records/")
    notes = page.eval_on_selector_all(".ember-native", "els => els.map(e => e.textContent)")
    assert notes == ["runs natively only: PyTorch writes the checkpoint: no PyTorch in the page",
                     "runs natively only: torch.save writes the file: no PyTorch in the page"]
    assert page.locator(".ember-run button").count() == \
        page.locator("div.language-python").count() - 2


CHAPTERS = sorted(p.stem for p in BOOK.glob("*.md") if FENCE.search(p.read_text("utf-8")))


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_block_with_a_run_button_runs_in_the_page(page, chapter):
    """Run on a chapter's last unmarked block runs all those above it: each must end `ok`.
    (Blocks marked `# book: native` have no button; `# book: skip` ones run on their own.)"""
    page.goto(page.base + ("book/" if chapter == "index" else f"book/{chapter}/"))
    codes = page.eval_on_selector_all(
        ".ember-run", "bars => bars.map(b => b.previousElementSibling.textContent)")
    plain = [i for i, c in enumerate(codes) if not c.startswith("# book:")]
    if not plain:
        pytest.skip(f"{chapter}: no unmarked block")
    run_block(page, plain[-1])
    states = page.eval_on_selector_all("pre.ember-output", "els => els.map(e => e.dataset.state)")
    outputs = page.eval_on_selector_all("pre.ember-output", "els => els.map(e => e.textContent)")
    failed = {i: outputs[i][-600:] for i in plain if states[i] != "ok"}
    assert not failed, failed
