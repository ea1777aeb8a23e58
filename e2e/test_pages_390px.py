"""At a phone's 390 px the playground, a book page and the browser-training example do not
scroll sideways (code blocks and the code editor scroll inside themselves), and the playground's
keyboard is not trapped in its code editor (CodeMirror: Tab indents, Esc then Tab moves on).
Offline as every e2e test (conftest.py)."""

import pytest
from conftest import run_code, wait_ready

WIDE = """() => { const w = document.documentElement.clientWidth;
  return [document.documentElement.scrollWidth, w, [...document.querySelectorAll('body *')]
    .filter(e => e.getBoundingClientRect().right > w + 0.5
      && !e.closest('pre, textarea, .cm-scroller'))
    .map(e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '')).slice(0, 5)]; }"""


READY = """() => { const s = document.querySelector('#status');
  return !s || /^(ready|error)/.test(s.textContent.trim()); }"""
HEADER = """() => { const h = document.querySelector('header h1, h1');
  const r = h.getBoundingClientRect(); return [r.left, r.right, r.height, h.textContent]; }"""


@pytest.mark.parametrize("path", ["", "playground/", "demos/mnist/", "demos/image-classification/",
                                  "demos/train/",
                                  "demos/pyscript/", "book/tensors/",
                                  "examples/browser-training/"])
def test_no_sideways_scroll_at_390px(page, path):
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(page.base + path)
    page.wait_for_load_state("load")
    page.wait_for_function(READY)  # a page's late content (the examples' titles) is in by then
    scroll_width, width, wide = page.evaluate(WIDE)
    assert width == 390
    assert scroll_width <= width and not wide, (scroll_width, wide)
    left, right, height, title = page.evaluate(HEADER)  # the title is whole, not cut or squeezed
    assert 0 <= left and right <= width and 0 < height < 120, (left, right, height, title)


def test_the_playground_runs_at_390px(page):
    page.set_viewport_size({"width": 390, "height": 844})
    wait_ready(page)
    assert page.locator("#run").bounding_box()["x"] + page.locator("#run").bounding_box()[
        "width"] <= 390
    assert run_code(page, "print('narrow')").startswith("narrow\n")


IN_EDITOR = "() => !!document.activeElement.closest('.cm-editor')"


def test_tab_indents_and_esc_then_tab_leaves_the_code_editor(page):
    wait_ready(page)
    page.fill("#code", "")
    page.click(".cm-content")
    page.keyboard.press("Tab")
    assert page.input_value("#code") == "    "  # the textarea follows the editor
    assert page.evaluate(IN_EDITOR)
    page.keyboard.press("Escape")
    page.keyboard.press("Tab")
    assert not page.evaluate(IN_EDITOR)
    assert page.evaluate("document.activeElement.id") != "code"  # not the textarea behind it
    assert page.input_value("#code") == "    "
    page.keyboard.press("Shift+Tab")  # back into the editor
    assert page.evaluate(IN_EDITOR)
    page.keyboard.press("End")  # any key but Esc ends the escape: Tab indents again
    page.keyboard.press("Tab")
    assert page.input_value("#code") == "        "
