"""A 390 px touch phone on every page that has no touch test of its own (the three demos have
theirs: test_demo_mnist.py, test_demo_image_classification.py, test_demo_train.py): the
landing page, the playground, the browser-training example, the PyScript page and a book page
load, do not scroll sideways, and answer taps. Offline as every e2e test."""

from test_demo_mnist import phone
from test_pages_390px import WIDE


def _narrow(pg):
    scroll_width, width, wide = pg.evaluate(WIDE)
    assert width == 390 and scroll_width <= width and not wide, (scroll_width, wide)


def _touch(browser, server, path, work):
    context, pg, errors, outside = phone(browser, server)
    try:
        pg.goto(pg.base + path)
        pg.wait_for_load_state("load")
        work(pg)
        _narrow(pg)
    finally:
        context.close()
    assert not errors, errors
    assert not outside, outside


def _ready(pg):
    pg.wait_for_function("() => /^(ready|error)/.test(document.querySelector('#status')"
                         ".textContent)")
    assert pg.text_content("#status") == "ready"


def test_the_landing_page_with_touch(browser, server):
    def work(pg):
        _narrow(pg)
        pg.tap("#pages a[href='demos/train/']")
        pg.wait_for_url("**/demos/train/")
        _ready(pg)
    _touch(browser, server, "", work)


def test_the_playground_with_touch(browser, server):
    def work(pg):
        _ready(pg)
        _narrow(pg)
        pg.fill("#code", "print('tapped', 6 * 7)")
        pg.tap("#run")
        pg.wait_for_function("() => document.querySelector('#output').dataset.runs === '1'")
        assert pg.text_content("#output").startswith("tapped 42\n")
    _touch(browser, server, "playground/", work)


def test_the_browser_training_example_with_touch(browser, server):
    def work(pg):
        _ready(pg)
        _narrow(pg)
        pg.tap("#start")
        pg.wait_for_function("() => document.querySelector('#output').textContent"
                             ".includes('epoch 1 done')")
        pg.tap("#stop")
        pg.wait_for_function("() => document.querySelector('#output').dataset.runs === '1'")
        assert pg.text_content("#status") == "stopped", pg.text_content("#output")[-3000:]
    _touch(browser, server, "examples/browser-training/?epochs=200", work)


def test_the_pyscript_page_with_touch(browser, server):
    def work(pg):
        _ready(pg)
        assert "gelu_custom(x) = Tensor(shape=[2, 3]" in pg.text_content("#output")
    _touch(browser, server, "demos/pyscript/", work)


def test_a_book_page_with_touch(browser, server):
    def work(pg):
        _narrow(pg)
        pg.tap(".md-footer__link--next")
        pg.wait_for_url("**/book/backends/")
    _touch(browser, server, "book/tensors/", work)
