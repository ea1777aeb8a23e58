"""/demos/train/: ember's Learner trains a small ConvNet on the site's MNIST digits inside the
page (a Web Worker), offline; stop and resume; progress with samples/s and the time left; the
weights the page offers load natively with record.load and reach the validation accuracy the
page showed; "use in the drawing demo" keeps them in IndexedDB and the drawing page predicts
with them (as ember does natively with the downloaded file); 390 px with touch; AA contrast.
On the page's WebGPU (SwiftShader here: the GPU emulated on the CPU) the step is recorded
(Learner(jit=True)) and the page trains its small variant; the same checks hold there."""

import json
import time

import numpy as np
import pytest
from conftest import wait_ready
from test_demo_mnist import CONTRAST, WIDE, phone

import ember
from ember import data, record, train
from ember.backend import NdArray
from ember.models import ConvNet

PAGE = "demos/train/"
STEPS = 150  # per run: two runs (stop, resume) make a few hundred steps
GPU_STEPS = 100  # per run on SwiftShader (0.5-1 s a step of the small variant here)
SMALL = {"channels": [4, 8], "hidden": 32, "batch": 8}  # VARIANTS in demos/train/train.js
STANDARD = {"channels": [8, 16], "hidden": 64, "batch": 64}


def _step(page):
    return int(page.get_attribute("#status", "data-step") or 0)


def _train_until(page, steps):
    page.wait_for_function("() => { const s = document.querySelector('#status'); return "
                           "s.textContent.startsWith('error') || +(s.dataset.step || 0) >= "
                           f"{steps}; }}", timeout=600_000, polling=500)  # (not each frame)
    assert not page.text_content("#status").startswith("error"), page.log.console_errors


def _stop(page):
    page.click("#stop")
    page.wait_for_function("() => ['stopped', 'done'].includes("
                           "document.querySelector('#status').textContent)", timeout=600_000,
                           polling=500)
    page.wait_for_function("() => document.querySelector('#download')"
                           ".getAttribute('aria-disabled') === 'false'", timeout=300_000)


def _chart(page):
    return page.eval_on_selector("#chart", "c => c.toDataURL()")


def _train_stop_resume(page, backend, steps):
    """Start on `backend`, stop after `steps`, resume for `steps` more, stop: the steps
    trained, the model's config and the valid accuracy the page shows. The curves move: a
    point a step, the chart redrawn."""
    config = json.loads(page.get_attribute("#model", "data-config"))
    page.click("#start")
    _train_until(page, steps)
    assert page.text_content("#status") == "training"
    speed = page.text_content("#speed")
    assert "samples/s" in speed and "left" in speed, speed
    assert 0 < page.eval_on_selector("#progress", "p => p.value") < 1
    _stop(page)
    assert page.text_content("#status") == "stopped"
    first = _step(page)
    points = int(page.get_attribute("#chart", "data-points"))
    assert points == first >= steps
    losses, chart = [float(page.text_content("#loss"))], _chart(page)
    assert page.text_content("#start") == "Resume"

    page.click("#start")  # resumes the same learner: the step count goes on
    _train_until(page, first + steps)
    _stop(page)
    second = _step(page)
    print(f"{backend}: trained {second} steps in the page ({config}); speed: {speed}")
    assert second >= first + steps and int(page.get_attribute("#chart", "data-points")) == second
    assert _chart(page) != chart  # drawn again, with the new points
    losses.append(float(page.text_content("#loss")))
    assert all(np.isfinite(losses)) and losses[-1] < 2.0, losses  # it learns (chance: ln 10)
    assert page.get_attribute("#accuracy", "data-split") == "valid"
    shown = float(page.get_attribute("#accuracy", "data-value"))
    print(f"{backend}: losses at the stops {losses}, valid accuracy shown {shown}")
    return second, config, shown


def _weights_load_natively(page, tmp_path, config, shown):
    """The downloaded weights, loaded with record.load into the same ConvNet on NdArray,
    validate natively to the accuracy the page showed; the path of the file."""
    with page.expect_download() as info:
        page.click("#download")
    path = tmp_path / "weights.safetensors"
    info.value.save_as(path)
    model = ConvNet(channels=tuple(config["channels"]), hidden=config["hidden"],
                    backend=NdArray())
    record.load(model, path)
    valid = data.Subset(data.MNIST(split="test"), range(512))
    learner = train.Learner(model, ember.optim.Adam(), metrics=[train.Accuracy()], dashboard=None)
    native = learner.validate(data.DataLoader(valid, batch_size=256))["Accuracy"]
    print(f"native accuracy {native} (page: {shown})")
    # the page's kernels (WebAssembly or WebGPU) and native C round differently: a digit or
    # two may flip
    assert native == pytest.approx(shown, abs=2 / 512)
    return path


def _drawing_page_uses_it(page, path, config, steps, backend):
    """"use in the drawing demo": kept in IndexedDB, the drawing page switches to it and
    predicts with it (as ember does natively with the downloaded file), and back."""
    page.click("#use-in-demo")
    page.wait_for_function(f"() => document.querySelector('#use-note').dataset.saved === "
                           f"'{steps}'")
    page.click("#open-demo")
    assert wait_ready(page, "demos/mnist/?model=trained") == "ready"
    page.wait_for_function("() => document.querySelector('#model-source').value === 'trained'"
                           " && !document.querySelector('#model-source').disabled")
    assert f"{steps} steps on {backend}" in page.text_content("#model-note")
    page.click("#samples .sample[data-label='4']")
    probs = _drawn(page, "trained")
    x = _input(page)
    fresh = ConvNet(channels=tuple(config["channels"]), hidden=config["hidden"],
                    backend=NdArray())
    trained = _probs(record.load(fresh, path).eval(), x)
    shipped = _probs(ember.models.load("mnist"), x)
    print("page (trained):", probs.round(4), "\nnative trained:", trained.round(4))
    assert np.abs(probs - trained).max() < 1e-3  # the model just trained, as ember runs it
    assert np.abs(probs - shipped).max() > 1e-2  # and not the shipped one
    page.select_option("#model-source", "shipped")  # and back
    assert np.abs(_drawn(page, "shipped") - shipped).max() < 1e-3


def test_trains_stops_resumes_and_its_weights_load_natively(page, tmp_path):
    t0 = time.perf_counter()
    assert wait_ready(page, PAGE) == "ready"
    page.select_option("#epochs", "3")
    assert page.evaluate(CONTRAST) == []
    assert json.loads(page.get_attribute("#model", "data-config")) == STANDARD
    steps, config, shown = _train_stop_resume(page, "cpu", STEPS)
    assert shown > 0.5
    path = _weights_load_natively(page, tmp_path, config, shown)
    assert page.evaluate(CONTRAST) == []
    _drawing_page_uses_it(page, path, config, steps, "cpu")
    print(f"cpu test: {time.perf_counter() - t0:.0f} s")


def _drawn(page, source):
    """The drawing page's probabilities once up to date for the drawing and `source`."""
    page.wait_for_function("s => { const p = document.querySelector('#prediction'); return "
                           "p.dataset.source === s && p.dataset.version === document."
                           "querySelector('#draw-canvas').dataset.version; }", arg=source)
    return np.array(page.eval_on_selector_all("#probabilities [data-label]",
                                              "els => els.map(e => +e.dataset.prob)"))


def _input(page):
    """The drawing page's 28x28 model input (#input-28), float32 [1, 1, 28, 28] in [0, 1]."""
    gray = page.eval_on_selector("#input-28", "c => Array.from(c.getContext('2d')"
                                 ".getImageData(0, 0, 28, 28).data.filter((_, i) => i % 4 === 0))")
    return (np.array(gray, np.float32) / 255).reshape(1, 1, 28, 28)


def _probs(model, x):
    logits = model(ember.Tensor.from_data(x)).to_numpy()[0].astype(np.float64)
    p = np.exp(logits - logits.max())
    return p / p.sum()


def test_trains_on_webgpu_stops_resumes_and_its_weights_load_natively(page, tmp_path):
    t0 = time.perf_counter()
    assert wait_ready(page, PAGE) == "ready"
    label = page.text_content('#backend option[value="webgpu"]')
    assert "software" in label  # SwiftShader in headless Chromium: said so, not hidden
    page.select_option("#backend", "webgpu")
    # the small variant, where the GPU is emulated: said so
    assert json.loads(page.get_attribute("#model", "data-config")) == SMALL
    assert "emulated" in page.text_content("#model")
    steps, config, shown = _train_stop_resume(page, "webgpu", GPU_STEPS)
    assert shown > 0.3  # 1,600 digits seen by a small net (chance: 0.1)
    path = _weights_load_natively(page, tmp_path, config, shown)
    _drawing_page_uses_it(page, path, config, steps, "webgpu")
    print(f"webgpu test: {time.perf_counter() - t0:.0f} s")


def test_the_training_page_at_390px_with_touch(browser, server):
    context, pg, errors, outside = phone(browser, server)
    try:
        assert wait_ready(pg, PAGE) == "ready"
        scroll_width, width, wide = pg.evaluate(WIDE)
        assert width == 390 and scroll_width <= width and not wide, (scroll_width, wide)
        pg.tap("#start")
        _train_until(pg, 5)
        pg.tap("#stop")
        pg.wait_for_function("() => document.querySelector('#status').textContent === "
                             "'stopped'", timeout=600_000)
        assert int(pg.get_attribute("#chart", "data-points")) == _step(pg) >= 5
        scroll_width, width, wide = pg.evaluate(WIDE)
        assert scroll_width <= width and not wide, (scroll_width, wide)
    finally:
        context.close()
    assert not errors, errors
    assert not outside, outside
