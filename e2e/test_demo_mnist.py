"""The MNIST demo page (/demos/mnist/): real MNIST test digits drawn stroke by stroke with the
mouse (each row's ink as one short stroke), recognised by the model shipped in the wheel, on
cpu and on webgpu (SwiftShader), offline; touch drawing on a phone-sized viewport; predictions
during a stroke; "not sure" for a tap or a blob; the bars in class order; the samples are
buttons; the prediction is announced; text contrast (WCAG AA)."""

from types import SimpleNamespace
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


# Every visible text's contrast against its (first opaque) background: WCAG AA asks 4.5:1, 3:1
# for large text (24 px, or 18.67 px bold). Disabled controls are exempt.
CONTRAST = """() => {
  const rgba = (s) => (s.match(/[\\d.]+/g) || []).map(Number);
  const lin = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
  const lum = ([r, g, b]) => 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b);
  const back = (el) => {
    for (; el; el = el.parentElement) {
      const c = rgba(getComputedStyle(el).backgroundColor);
      if (c.length === 3 || c[3] > 0) return c;
    }
    return [255, 255, 255];
  };
  const bad = [], walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n; (n = walk.nextNode());) {
    const el = n.parentElement;
    if (!n.textContent.trim() || !el.checkVisibility() || el.closest('option, .visually-hidden')
        || el.closest('[disabled], [aria-disabled="true"]')) continue;
    const st = getComputedStyle(el), size = parseFloat(st.fontSize);
    const a = lum(rgba(st.color)), b = lum(back(el));
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    const large = size >= 24 || (size >= 18.66 && +st.fontWeight >= 700);
    if (ratio < (large ? 3 : 4.5)) {
      bad.push([el.tagName + '#' + el.id, n.textContent.trim().slice(0, 40), +ratio.toFixed(2)]);
    }
  }
  return bad;
}"""

WIDE = """() => { const w = document.documentElement.clientWidth;
  return [document.documentElement.scrollWidth, w, [...document.querySelectorAll('body *')]
    .filter(e => e.getBoundingClientRect().right > w + 0.5)
    .map(e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '')).slice(0, 5)]; }"""


def phone(browser, server):
    """A 390 px touch phone's page (offline as the page fixture) and its errors and outside
    requests."""
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True,
                                  has_touch=True, device_scale_factor=2)
    errors, outside = [], []

    def route(r):
        if urlparse(r.request.url).hostname == "127.0.0.1" or r.request.url.startswith(
                ("blob:", "data:")):
            r.continue_()
        else:
            outside.append(r.request.url)
            r.abort()
    context.route("**/*", route)
    pg = context.new_page()
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.set_default_timeout(120_000)
    pg.base, pg.log = server.url, SimpleNamespace(console_errors=errors, outside=outside)
    return context, pg, errors, outside


def predicted(pg, backend="cpu", sure=True):
    pg.wait_for_function(UP_TO_DATE, arg=backend)
    assert pg.get_attribute("#prediction", "data-sure") == ("true" if sure else "false")
    label = pg.get_attribute("#prediction", "data-label")
    if sure:
        assert pg.text_content("#prediction") == label
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
    context, pg, errors, outside = phone(browser, server)
    try:
        assert wait_ready(pg, "demos/mnist/") == "ready"
        width = pg.eval_on_selector("#draw-canvas", "c => c.getBoundingClientRect().width")
        assert 200 <= width <= 390
        scroll_width, width, wide = pg.evaluate(WIDE)
        assert width == 390 and scroll_width <= width and not wide, (scroll_width, wide)
        image, label = digits[0]
        draw(pg, image, touch=True)
        got, _ = predicted(pg)
        assert got == str(label)
        # (a tap right after the drawing's last touch is taken as the second tap of a double
        # tap, and Chromium sends no click: a finger lifts and moves to the button first)
        pg.wait_for_timeout(1000)
        pg.tap("#samples .sample[data-label='3']")
        pg.wait_for_function("() => document.querySelector('#prediction').dataset.label === '3'")
        from conftest import SCREENSHOTS
        SCREENSHOTS.mkdir(exist_ok=True)
        pg.screenshot(path=str(SCREENSHOTS / "demo_mnist_touch_phone.png"), full_page=True)
    finally:
        context.close()
    assert not errors, errors
    assert not outside, outside


def test_mnist_page_predicts_during_a_stroke_without_a_pause(page, digits):
    assert wait_ready(page, "demos/mnist/") == "ready"
    page.evaluate("""() => { window.__seen = [];
        new MutationObserver(() => window.__seen.push(document.querySelector('#prediction')
            .dataset.version)).observe(document.querySelector('#prediction'),
            {attributes: true, attributeFilter: ['data-version']}); }""")
    box = page.locator("#draw-canvas").bounding_box()
    page.mouse.move(box["x"] + 0.3 * box["width"], box["y"] + 0.15 * box["height"])
    page.mouse.down()
    # one continuous stroke, a 7, a few px every 20 ms (never the old 150 ms pause)
    path = [(0.3 + 0.4 * t, 0.15) for t in np.linspace(0, 1, 40)]
    path += [(0.7 - 0.25 * t, 0.15 + 0.7 * t) for t in np.linspace(0, 1, 60)]
    for x, y in path:
        page.mouse.move(box["x"] + x * box["width"], box["y"] + y * box["height"])
        page.wait_for_timeout(20)
    during = page.evaluate("window.__seen.length")
    drawn = int(page.get_attribute("#draw-canvas", "data-version"))
    page.mouse.up()
    got, _ = predicted(page)
    assert during >= 1, "no prediction while the stroke went on"
    print(f"predictions during the stroke: {during} of {drawn} drawing changes; final: {got}")
    assert got == "7"
    assert page.text_content("#announce").startswith("Prediction: 7, ")


def test_mnist_page_is_not_sure_of_a_tap_or_a_blob_and_keeps_class_order(page):
    assert wait_ready(page, "demos/mnist/") == "ready"
    box = page.locator("#draw-canvas").bounding_box()
    page.click("#clear")
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)  # one tap
    predicted(page, sure=False)
    assert page.text_content("#prediction") == "not sure"
    assert "too little ink" in page.text_content("#prediction-note")
    assert page.text_content("#announce").startswith("Not sure: too little ink")
    page.click("#clear")
    for k in range(12):  # a filled square blob: far more ink than any training digit
        y = box["y"] + (0.3 + 0.4 * k / 11) * box["height"]
        page.mouse.move(box["x"] + 0.3 * box["width"], y)
        page.mouse.down()
        page.mouse.move(box["x"] + 0.7 * box["width"], y, steps=8)
        page.mouse.up()
    predicted(page, sure=False)
    assert "more ink than any training digit" in page.text_content("#prediction-note")
    order = page.eval_on_selector_all(
        "#probabilities .prob", "els => els.map(e => [e.dataset.label, e.style.order,"
        " e.getBoundingClientRect().top])")
    assert [o[0] for o in order] == [str(d) for d in range(10)]
    assert all(o[1] == "" for o in order) and [o[2] for o in order] == sorted(o[2] for o in order)


def test_mnist_page_samples_are_buttons_and_its_text_has_aa_contrast(page):
    assert wait_ready(page, "demos/mnist/") == "ready"
    page.wait_for_function("() => !document.querySelector('#model-source').disabled")
    assert page.evaluate(CONTRAST) == []
    samples = page.locator("#samples .sample")
    assert samples.count() == 10
    assert page.eval_on_selector_all("#samples .sample",
                                     "els => els.every(e => e.tagName === 'BUTTON')")
    correct = 0
    for k in range(10):
        samples.nth(k).focus()
        page.keyboard.press("Enter")  # a keyboard user's click
        page.wait_for_function("v => +document.querySelector('#draw-canvas').dataset.version > v",
                               arg=k)
        got, _ = predicted(page)
        correct += got == samples.nth(k).get_attribute("data-label")
    assert correct >= 9
    assert page.evaluate(CONTRAST) == []
    # the model selector: nothing trained in this fresh browser, so said and not selectable
    assert page.eval_on_selector("#model-source option[value=trained]", "o => o.disabled")
    assert "training page" in page.text_content("#model-note")


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
