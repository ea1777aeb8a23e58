"""The examples that have a page (docs/examples/*/index.html, served at /examples/<name>/): the
browser-training example trains with the Learner in a Web Worker on the site's Pyodide, on cpu
and on WebGPU (SwiftShader here), offline (conftest.py fails a test on any outside request)."""

import re

import pytest


def train(pg, epochs, backend):
    pg.goto(pg.base + f"examples/browser-training/?epochs={epochs}")
    pg.wait_for_function("() => ['ready', 'error'].some("
                         "s => document.querySelector('#status').textContent.startsWith(s))")
    assert pg.text_content("#status") == "ready"
    pg.select_option("#backend", backend)
    pg.click("#start")
    pg.wait_for_function("() => document.querySelector('#output').dataset.runs === '1'",
                         timeout=300_000)  # a hang guard, not a speed check
    return pg.text_content("#status"), pg.text_content("#summary"), pg.text_content("#output")


def test_the_landing_page_lists_the_example(page):
    page.goto(page.base)
    links = page.eval_on_selector_all("#pages a", "els => els.map(e => e.getAttribute('href'))")
    assert "examples/browser-training/" in links


@pytest.mark.parametrize("backend,epochs,floor", [("autodiff(ndarray)", 8, 80),
                                                  ("autodiff(fusion(wgpu))", 2, 0)])
def test_training_in_the_page(page, backend, epochs, floor):
    status, summary, output = train(page, epochs, backend)
    assert status == "done", output[-2000:]
    m = re.fullmatch(rf"browser_training: 1600 train points, {epochs} epoch\(s\) on (.+): test "
                     r"accuracy ([\d.]+)% on 400 points, [\d.]+ s, 4,482 parameters", summary)
    assert m, summary
    assert ("Wgpu<webgpu" in m.group(1)) == ("wgpu" in backend), m.group(1)
    assert f"epoch {epochs} done" in output  # the Learner's dashboard streamed into the page
    assert float(m.group(2)) > floor, summary


def test_stop_interrupts_the_training(page):
    page.goto(page.base + "examples/browser-training/?epochs=200")
    page.wait_for_function("() => document.querySelector('#status').textContent === 'ready'")
    page.click("#start")
    page.wait_for_function("() => document.querySelector('#output').textContent"
                           ".includes('epoch 1 done')")
    page.click("#stop")
    page.wait_for_function("() => document.querySelector('#output').dataset.runs === '1'")
    assert page.text_content("#status") == "stopped", page.text_content("#output")[-3000:]
    # the Learner takes Stop as Ctrl-C: it ends after the step, and train.py says so
    assert "browser_training: stopped at step" in page.text_content("#output")
    assert page.text_content("#summary") == ""
