"""At a phone's 390 px the playground, a book page and the browser-training example do not
scroll sideways (code blocks and the code box scroll inside themselves), and the playground's
keyboard is not trapped in its code box. Offline as every e2e test (conftest.py)."""

import pytest
from conftest import run_code, wait_ready

WIDE = """() => { const w = document.documentElement.clientWidth;
  return [document.documentElement.scrollWidth, w, [...document.querySelectorAll('body *')]
    .filter(e => e.getBoundingClientRect().right > w + 0.5 && !e.closest('pre, textarea'))
    .map(e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '')).slice(0, 5)]; }"""


@pytest.mark.parametrize("path", ["playground/", "book/tensors/", "examples/browser-training/"])
def test_no_sideways_scroll_at_390px(page, path):
    page.set_viewport_size({"width": 390, "height": 844})
    if path == "playground/":
        assert wait_ready(page) == "ready"  # the examples' titles are in the selector by then
    else:
        page.goto(page.base + path)
        page.wait_for_load_state("load")
    scroll_width, width, wide = page.evaluate(WIDE)
    assert width == 390
    assert scroll_width <= width and not wide, (scroll_width, wide)


def test_the_playground_runs_at_390px(page):
    page.set_viewport_size({"width": 390, "height": 844})
    wait_ready(page)
    assert page.locator("#run").bounding_box()["x"] + page.locator("#run").bounding_box()[
        "width"] <= 390
    assert run_code(page, "print('narrow')").startswith("narrow\n")


def test_tab_indents_and_esc_then_tab_leaves_the_code_box(page):
    wait_ready(page)
    page.fill("#code", "")
    page.focus("#code")
    page.keyboard.press("Tab")
    assert page.input_value("#code") == "    "
    assert page.evaluate("document.activeElement.id") == "code"
    page.keyboard.press("Escape")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") != "code"
    assert page.input_value("#code") == "    "
