"""The MNIST demo page (/demos/mnist/): real MNIST test digits drawn stroke by stroke with the
mouse (each row's ink as one short stroke), recognised by the model shipped in the wheel, on
cpu and on webgpu (SwiftShader), offline; touch drawing on a phone-sized viewport."""

from urllib.parse import urlparse

import numpy as np
import pytest
from conftest import wait_ready

N_DIGITS = 10
UP_TO_DATE = ("b => { const p = document.querySelector('#prediction');"
              " return p.dataset.version === document.querySelector('#draw-canvas')"
              ".dataset.version && p.dataset.backend === b; }")


@pytest.fixture(scope="module")
def digits():
    from ember.data import MNIST
    ds = MNIST("test")  # grouped by label: the first test digit of each class
    labels = np.array([int(ds[i][1]) for i in range(len(ds))])
    firsts = [int(np.flatnonzero(labels == d)[0]) for d in range(N_DIGITS)]
    return [(ds[i][0][0], int(ds[i][1])) for i in firsts]


def strokes(image, threshold=0.5):
    """The ink of a 28x28 image as horizontal strokes: (y, x_start, x_end) per run of a row."""
    out = []
    for y, row in enumerate(image >= threshold):
        x = 0
        while x < 28:
            if row[x]:
                start = x
                while x < 28 and row[x]:
                    x += 1
                out.append((y, start, x - 1))
            x += 1
    return out


def draw(pg, image, touch=False):
    pg.click("#clear") if not touch else pg.tap("#clear")
    box = pg.locator("#draw-canvas").bounding_box()
    s = box["width"] / 28
    at = lambda x, y: (box["x"] + (x + 0.5) * s, box["y"] + (y + 0.5) * s)  # noqa: E731
    if touch:
        cdp = pg.context.new_cdp_session(pg)
    for y, x0, x1 in strokes(image):
        (ax, ay), (bx, by) = at(x0, y), at(x1, y)
        if touch:
            def touch_at(kind, x, y=ay):
                cdp.send("Input.dispatchTouchEvent",
                         {"type": kind, "touchPoints": [{"x": x, "y": y, "id": 1}]})
            touch_at("touchStart", ax)
            for k in range(1, x1 - x0 + 1):
                touch_at("touchMove", ax + k * s)
            cdp.send("Input.dispatchTouchEvent", {"type": "touchEnd", "touchPoints": []})
        else:
            pg.mouse.move(ax, ay)
            pg.mouse.down()
            pg.mouse.move(bx, by, steps=max(1, x1 - x0))
            pg.mouse.up()


def predicted(pg, backend="cpu"):
    pg.wait_for_function(UP_TO_DATE, arg=backend)
    label = pg.text_content("#prediction")
    probs = pg.eval_on_selector_all(
        "#probabilities [data-label]", "els => els.map(e => [e.dataset.label, +e.dataset.prob])")
    return label, dict(probs)


def test_mnist_page_recognises_drawn_test_digits_on_cpu_and_webgpu(page, digits):
    assert wait_ready(page, "demos/mnist/") == "ready"
    assert page.eval_on_selector("#backend option[value=webgpu]", "o => !o.disabled")
    results = []
    for image, label in digits:
        draw(page, image)
        got, probs = predicted(page, "cpu")
        assert sorted(probs) == [str(d) for d in range(10)]
        assert abs(sum(probs.values()) - 1) < 1e-3 and max(probs, key=probs.get) == got
        assert float(page.text_content("#inference-ms")) > 0
        page.select_option("#backend", "webgpu")
        got_gpu, probs_gpu = predicted(page, "webgpu")
        page.select_option("#backend", "cpu")
        predicted(page, "cpu")
        results.append((label, got, got_gpu, probs[got], probs_gpu[got]))
    print("digit, cpu, webgpu, p_cpu, p_webgpu:", results)
    correct = sum(str(label) == got for label, got, *_ in results)
    assert correct >= 9, results
    for _, got, got_gpu, p, p_gpu in results:
        assert got == got_gpu and abs(p - p_gpu) < 1e-3, results


def test_mnist_page_draws_with_touch_on_a_phone(browser, server, digits):
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True,
                                  has_touch=True, device_scale_factor=2)
    errors, outside = [], []

    def route(r):
        if urlparse(r.request.url).hostname == "127.0.0.1" or r.request.url.startswith("blob:"):
            r.continue_()
        else:
            outside.append(r.request.url)
            r.abort()
    context.route("**/*", route)
    pg = context.new_page()
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.set_default_timeout(120_000)
    pg.base = server.url
    try:
        assert wait_ready(pg, "demos/mnist/") == "ready"
        width = pg.eval_on_selector("#draw-canvas", "c => c.getBoundingClientRect().width")
        assert 200 <= width <= 390
        image, label = digits[0]
        draw(pg, image, touch=True)
        got, _ = predicted(pg)
        assert got == str(label)
        from conftest import SCREENSHOTS
        SCREENSHOTS.mkdir(exist_ok=True)
        pg.screenshot(path=str(SCREENSHOTS / "demo_mnist_touch_phone.png"), full_page=True)
    finally:
        context.close()
    assert not errors, errors
    assert not outside, outside


def test_mnist_page_without_webgpu_disables_it_and_says_why(page, digits):
    page.add_init_script("delete Navigator.prototype.gpu")
    assert wait_ready(page, "demos/mnist/") == "ready"
    assert page.eval_on_selector("#backend option[value=webgpu]", "o => o.disabled")
    assert "no WebGPU" in page.text_content("#backend-reason")
    assert page.is_visible("#backend-reason")
    image, label = digits[7]
    draw(page, image)
    assert predicted(page)[0] == str(label)


def test_strokes_cover_the_ink():
    image = np.zeros((28, 28), np.float32)
    image[5, 3:7] = 1
    image[6, 10] = 0.9
    assert strokes(image) == [(5, 3, 6), (6, 10, 10)]
