"""/demos/train/: ember's Learner trains a small ConvNet on the site's MNIST digits inside the
page (a Web Worker), offline; stop and resume; the weights the page offers load natively with
record.load and reach the validation accuracy the page showed."""

import numpy as np
import pytest
from conftest import wait_ready

import ember
from ember import data, record, train
from ember.backend import NdArray
from ember.models import ConvNet

PAGE = "demos/train/"


def _step(page):
    return int(page.get_attribute("#status", "data-step") or 0)


def _train_until(page, steps):
    page.wait_for_function("() => { const s = document.querySelector('#status'); return "
                           "s.textContent.startsWith('error') || +(s.dataset.step || 0) >= "
                           f"{steps}; }}", timeout=600_000)
    assert not page.text_content("#status").startswith("error"), page.log.console_errors


def _stop(page):
    page.click("#stop")
    page.wait_for_function("() => ['stopped', 'done'].includes("
                           "document.querySelector('#status').textContent)", timeout=600_000)
    page.wait_for_function("() => document.querySelector('#download')"
                           ".getAttribute('aria-disabled') === 'false'", timeout=300_000)


def test_trains_stops_resumes_and_its_weights_load_natively(page, tmp_path):
    assert wait_ready(page, PAGE) == "ready"
    page.select_option("#epochs", "3")
    page.click("#start")
    _train_until(page, 60)
    assert page.text_content("#status") == "training"
    _stop(page)
    assert page.text_content("#status") == "stopped"
    first = _step(page)
    points = int(page.get_attribute("#chart", "data-points"))
    assert points == first >= 60
    losses = [float(page.text_content("#loss"))]
    assert page.text_content("#start") == "Resume"

    page.click("#start")  # resumes the same learner: the step count goes on
    _train_until(page, first + 60)
    _stop(page)
    second = _step(page)
    assert second >= first + 60 and int(page.get_attribute("#chart", "data-points")) == second
    losses.append(float(page.text_content("#loss")))
    assert all(np.isfinite(losses)) and losses[-1] < 2.0  # it learns (chance: ln 10 = 2.3)
    assert page.get_attribute("#accuracy", "data-split") == "valid"
    shown = float(page.get_attribute("#accuracy", "data-value"))
    assert shown > 0.5

    with page.expect_download() as info:
        page.click("#download")
    path = tmp_path / "weights.safetensors"
    info.value.save_as(path)
    model = ConvNet(channels=(8, 16), hidden=64, backend=NdArray())
    record.load(model, path)
    valid = data.Subset(data.MNIST(split="test"), range(512))
    learner = train.Learner(model, ember.optim.Adam(), metrics=[train.Accuracy()], dashboard=None)
    native = learner.validate(data.DataLoader(valid, batch_size=256))["Accuracy"]
    # the page's WebAssembly kernels and native C round differently: a digit or two may flip
    assert native == pytest.approx(shown, abs=2 / 512)


def test_trains_on_webgpu(page):
    assert wait_ready(page, PAGE) == "ready"
    label = page.text_content('#backend option[value="webgpu"]')
    assert "software" in label  # SwiftShader in headless Chromium: said so, not hidden
    page.select_option("#backend", "webgpu")
    page.click("#start")
    _train_until(page, 20)
    _stop(page)
    assert page.text_content("#status") == "stopped"
    assert np.isfinite(float(page.text_content("#loss")))
    assert int(page.get_attribute("#chart", "data-points")) == _step(page) >= 20
