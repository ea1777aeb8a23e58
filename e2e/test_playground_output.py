"""The playground's output (web/output.js, boot.js buffer_output): a flood of printed lines
does not freeze the page, output still streams while Python runs or awaits, stdout and
stderr keep their order; at 390 px the page does not scroll sideways. Offline as every e2e
test (conftest.py)."""

import time

from conftest import run_code, wait_ready


def test_100000_printed_lines_arrive_whole_without_freezing_the_page(page):
    wait_ready(page)
    page.fill("#code", "for i in range(100_000):\n    print(i)\n")
    page.click("#run")
    t0 = time.perf_counter()
    # the page answers while the lines pour in (a hang guard, not a speed check)
    assert page.evaluate("() => document.querySelector('#status').textContent") in (
        "running", "ready")
    page.wait_for_function("() => document.querySelector('#output').dataset.runs === '1'",
                           timeout=60_000)
    seconds = time.perf_counter() - t0
    out = page.text_content("#output")
    assert out == "".join(f"{i}\n" for i in range(100_000)), (len(out), out[-200:])
    assert page.get_attribute("#output", "data-state") == "ok"
    print(f"100,000 lines in {seconds:.2f} s")  # -s shows it; measured, not asserted
    page.click("#clear-output")  # (a full-page screenshot of 100,000 lines cannot be taken)


def test_output_streams_while_python_runs_and_while_it_awaits(page):
    wait_ready(page)
    page.fill("#code", "import asyncio, time\n"
                       "print('busy')\n"
                       "t = time.perf_counter()\n"
                       "while time.perf_counter() - t < 3:\n"
                       "    pass\n"
                       "print('awaiting')\n"
                       "await asyncio.sleep(3)\n"
                       "print('end')\n")
    page.click("#run")
    # no flush=True: the page's 50 ms flush signal (busy) and the worker's timer (await) show it
    page.wait_for_function("() => document.querySelector('#output').textContent === 'busy\\n'",
                           timeout=2_500)
    page.wait_for_function(
        "() => document.querySelector('#output').textContent === 'busy\\nawaiting\\n'",
        timeout=2_500 + 3_000)
    assert page.get_attribute("#output", "data-runs") == "0"  # still running
    page.wait_for_function("() => document.querySelector('#output').dataset.runs === '1'")
    assert page.text_content("#output") == "busy\nawaiting\nend\n"


def test_stdout_and_stderr_keep_their_order_and_styles(page):
    wait_ready(page)
    out = run_code(page, "import sys\nfor i in range(3):\n    print('out', i)\n"
                         "    print('err', i, file=sys.stderr)\nprint('x', end='')\nprint('y')\n")
    assert out == "out 0\nerr 0\nout 1\nerr 1\nout 2\nerr 2\nxy\n"
    errs = page.eval_on_selector_all("#output .stderr", "els => els.map(e => e.textContent)")
    assert "".join(errs) == "err 0\nerr 1\nerr 2\n"
    page.click("#clear-output")
    assert page.text_content("#output") == ""


def test_a_share_link_carries_the_code(page):
    wait_ready(page)
    code = "# ünïcode, quotes \" ' and +/= survive\nprint('shared', 2 ** 10)\n"
    page.fill("#code", code)
    page.click("#share")
    link = page.input_value("#share-link")
    assert link.startswith(page.base + "playground/#code=") and code not in link
    page.goto(page.base)  # elsewhere, then the link in a fresh load
    page.goto(link)
    page.wait_for_function("() => document.querySelector('#status').textContent === 'ready'")
    assert page.input_value("#code") == code
    assert run_code(page).startswith("shared 1024\n")
    page.goto(page.base)
    page.goto(page.base + "playground/#code=____")  # not UTF-8: the first example, said so
    page.wait_for_function("() => document.querySelector('#status').textContent === 'ready'")
    assert "def gelu_custom(x):" in page.input_value("#code")
    assert "could not be read" in page.text_content("#output")


def test_the_webgpu_example_makes_its_backend_with_wgpu_create(page):
    wait_ready(page)
    page.select_option("#examples", "webgpu_backend")
    assert "await Wgpu.create()" in page.input_value("#code")
    out = run_code(page)
    assert page.get_attribute("#output", "data-state") == "ok", out
    assert "backend: Wgpu<webgpu: " in out  # SwiftShader here
    assert "d/dw sum(w * w) = [2.0, -4.0, 6.0]" in out and "on the GPU: True" in out
