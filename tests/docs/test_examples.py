"""docs/examples/: each example's CI-sized run (the command its README gives) must succeed.
The examples check their own results (values against NumPy or PyTorch, gradients against
finite differences) and exit non-zero when one is off."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"


def run(script, *args):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "core"), *filter(None, [os.environ.get("PYTHONPATH")])])}
    r = subprocess.run([sys.executable, str(EXAMPLES / script), *args], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{script} {' '.join(args)} failed:\n{r.stdout[-3000:]}\n{r.stderr}"
    return r.stdout


def test_every_example_has_a_readme_and_a_test():
    folders = sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir())
    assert folders == ["browser_training", "custom_wgsl_op", "mnist", "onnx_import",
                       "pytorch_import", "text_classification", "transformer_rows"]
    for name in folders:
        assert (EXAMPLES / name / "README.md").is_file(), name


def test_mnist(mnist_ready):
    out = run("mnist/train.py", "--limit", "512", "--epochs", "1")
    summary = out.strip().splitlines()[-1]
    assert summary.startswith("mnist: 512 train digits, 1 epoch(s)"), summary
    accuracy = float(re.search(r"test accuracy ([\d.]+)%", summary).group(1))
    assert accuracy > 20, f"no better than chance (10%) after 8 steps: {summary}"


def test_transformer_rows(mnist_ready):
    out = run("transformer_rows/train.py", "--limit", "1024", "--epochs", "2")
    summary = out.strip().splitlines()[-1]
    assert summary.startswith("transformer_rows: 1024 train digits, 2 epoch(s)"), summary
    accuracy = float(re.search(r"test accuracy ([\d.]+)%", summary).group(1))
    assert accuracy > 15, f"no better than chance (10%) after 32 steps: {summary}"


def test_custom_wgsl_op():
    pytest.importorskip("wgpu", reason="Wgpu needs wgpu-py: pip install -e '.[wgpu]'")
    out = run("custom_wgsl_op/swish.py", "--n", "4096")
    assert "values and gradients match" in out


def test_pytorch_import():
    pytest.importorskip("torch", reason="the file is made by PyTorch: pip install torch==2.13.0")
    out = run("pytorch_import/import_weights.py", "--steps", "5")
    assert "predictions agree" in out


def test_onnx_import():
    for module in ("torch", "onnx", "onnxruntime"):
        pytest.importorskip(module, reason="the test extra: pip install -e '.[test]'")
    out = run("onnx_import/run_onnx.py", "--size", "32", "--runs", "2")
    assert "ember matches onnxruntime" in out


@pytest.fixture(scope="session")
def spam_assassin_ready():
    import shutil

    from ember import data
    if shutil.which("npm") is None and not (
            data.data_dir() / "spam-assassin-0.2.3.json.gz").is_file():
        pytest.skip("the SpamAssassin corpus needs npm once (apt-get install npm)")


def test_text_classification(spam_assassin_ready):
    out = run("text_classification/train.py", "--limit", "2000", "--epochs", "2")
    summary = out.strip().splitlines()[-1]
    assert summary.startswith("text_classification: 1600 train messages, 2 epoch(s)"), summary
    accuracy = float(re.search(r"test accuracy ([\d.]+)%", summary).group(1))
    spam = float(re.search(r"\((\d+)% spam\)", summary).group(1))
    # better than always answering the majority class (ham) after 50 steps
    assert accuracy > max(spam, 100 - spam) + 5, summary


def test_browser_training_natively():
    """The same train.py runs in the page (e2e/test_example_pages.py)."""
    out = run("browser_training/train.py", "--epochs", "8")
    summary = out.strip().splitlines()[-1]
    assert summary.startswith("browser_training: 1600 train points, 8 epoch(s)"), summary
    accuracy = float(re.search(r"test accuracy ([\d.]+)%", summary).group(1))
    assert accuracy > 80, f"no better than a linear boundary (66%): {summary}"
