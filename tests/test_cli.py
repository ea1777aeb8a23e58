"""`ember bench`: runs, prints a table, writes JSON, and explains a wrong name. Timings are
never asserted (CI machines are small and shared); only the shape of the report is."""

import json

import pytest

from ember import cli


def test_bench_quick_prints_a_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert cli.main(["bench", "--quick", "ndarray_vs_numpy", "--json", str(out)]) == 0
    stdout = capsys.readouterr().out
    header = next(line for line in stdout.splitlines() if line.startswith("benchmark"))
    for column in ("case", "ember", "reference", "ratio", "unit"):
        assert column in header
    assert "add 1024x1024 float32" in stdout and "matmul 8x8 float32" in stdout
    assert "ember - numpy" in stdout  # the tiny-op overhead rows

    report = json.loads(out.read_text())
    assert {"machine", "settings", "rows"} <= set(report)
    assert {"python", "numpy", "cpu_count", "date"} <= set(report["machine"])
    assert report["settings"]["quick"] is True
    benchmarks = {row["benchmark"] for row in report["rows"]}
    assert benchmarks == {f"ndarray_vs_numpy.{name}" for name in
                          ("noise", "elementwise", "matmul", "reductions", "overhead")}
    for row in report["rows"]:
        assert {"benchmark", "case", "ember", "reference", "ratio", "unit"} <= set(row)
        assert isinstance(row["ember"], float)
        if row["reference"] is not None:
            assert row["ratio"] == pytest.approx(row["ember"] / row["reference"])


def test_bench_one_benchmark_of_a_module(capsys):
    assert cli.main(["bench", "--quick", "--repeat", "2", "ndarray_vs_numpy.matmul"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines()
            if line.startswith("ndarray_vs_numpy.")]
    assert len(rows) == 2 and all(r.startswith("ndarray_vs_numpy.matmul ") for r in rows)


def test_bench_native_kernels_checks_and_times_every_kernel(capsys):
    """bench/native_kernels: each C kernel against NumPy's path, and the split GEMMs against
    OpenBLAS's threads (each checked equal first)."""
    from ember.backends import native
    assert cli.main(["bench", "--quick", "--repeat", "2", "native_kernels"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("native_kernels.")]
    ops = [r for r in rows if r.startswith("native_kernels.kernels_vs_numpy ")]
    gemms = [r for r in rows if r.startswith("native_kernels.gemm_split ")]
    assert len(ops) == 10 and len(gemms) == 4 and len(rows) == 14
    if native.compiler() is not None:  # (without one, each row says there are no kernels)
        assert "NdArray's native kernels: loaded" in out and "nan" not in " ".join(ops)
        if native.THREADS > 1 and native._cblas() is not None:  # (else: "not measured")
            assert "nan" not in " ".join(gemms)


@pytest.mark.parametrize("name, hints", [("nope", ["ndarray_vs_numpy", "ownership"]),
                                         ("ownership.nope", ["ownership has: chain"])])
def test_bench_unknown_name_is_a_clear_error(name, hints, capsys):
    assert cli.main(["bench", name]) == 2
    err = capsys.readouterr().err
    assert f"unknown benchmark '{name}'" in err and all(h in err for h in hints)


def test_bench_outside_a_source_checkout(monkeypatch, capsys):
    monkeypatch.setattr(cli, "_bench_dir", lambda: None)
    assert cli.main(["bench"]) == 2
    assert "source" in capsys.readouterr().err


def test_bench_repeat_must_be_positive(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["bench", "--repeat", "0"])
    assert exit_.value.code == 2
    assert "at least 1" in capsys.readouterr().err


def test_python_dash_m_ember_is_the_ember_command():
    import subprocess
    import sys

    import ember
    run = subprocess.run([sys.executable, "-m", "ember", "--version"], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0 and run.stdout.strip() == f"ember {ember.__version__}"
    run = subprocess.run([sys.executable, "-m", "ember"], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 2 and run.stderr == cli.build_parser().format_help()
    run = subprocess.run([sys.executable, "-m", "ember", "train", "mnist", "--limit", "0"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "--limit: must be at least 1, got 0" in run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("port, message", [
    ("99999", "at most 65535, got 99999"), ("-1", "at least 0"),
    ("http", "invalid integer value: 'http'")])
def test_demo_port_out_of_range_is_a_usage_error(port, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["demo", "--no-build", "--port", port])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "usage: ember demo" in err and "error: argument --port: " in err and message in err


def test_export_writes_a_shipped_model_as_onnx_that_onnxruntime_runs(tmp_path, capsys):
    import numpy as np
    import onnxruntime as ort

    from ember import Tensor, models
    from ember import onnx as eonnx
    out = tmp_path / "mnist.onnx"
    assert cli.main(["export", "mnist", str(out), "--batch", "3"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"wrote {out}: mnist as ONNX")
    assert "[3, 1, 28, 28] -> [3, 10]" in printed
    x = np.random.default_rng(5).random((3, 1, 28, 28), dtype=np.float32)
    want = models.load("mnist")(Tensor.from_data(x)).to_numpy()
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    (got,) = sess.run(None, {"input_0": x})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(eonnx.load(out)(x).to_numpy(), want, rtol=1e-5, atol=1e-6)


def test_export_takes_the_weights_ember_train_writes(tmp_path, capsys):
    import numpy as np

    import ember
    from ember import Tensor, models, record
    from ember import onnx as eonnx
    ember.seed(1)
    model = models.ConvNet(channels=(4, 8), hidden=16).eval()
    record.save(model, tmp_path / "model.safetensors",
                metadata={"config": json.dumps(model.config)})
    out = tmp_path / "model.onnx"
    assert cli.main(["export", str(tmp_path / "model.safetensors"), str(out)]) == 0
    x = np.random.default_rng(6).random((1, 1, 28, 28), dtype=np.float32)
    np.testing.assert_allclose(eonnx.load(out)(x).to_numpy(),
                               model(Tensor.from_data(x)).to_numpy(), rtol=1e-5, atol=1e-6)


def test_export_refuses_an_unknown_model_and_an_unwritable_file(tmp_path, capsys):
    assert cli.main(["export", "resnet", str(tmp_path / "m.onnx")]) == 2
    err = capsys.readouterr().err
    assert "'resnet' is neither a shipped model (mnist, fashion-mnist) nor a weights file" in err
    assert cli.main(["export", "mnist", str(tmp_path / "no" / "such" / "m.onnx")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ember export: ") and "m.onnx" in err and "Traceback" not in err
    (tmp_path / "junk.safetensors").write_bytes(b"not safetensors")
    assert cli.main(["export", str(tmp_path / "junk.safetensors"), str(tmp_path / "m.onnx")]) == 1
    assert "ember export: " in capsys.readouterr().err
