"""`ember train` as a user runs it: a real subprocess on MNIST, interrupted with SIGINT or
SIGTERM and resumed (exit status 130); a second Ctrl-C; a damaged newest checkpoint; a diverging
learning rate; a full disk; bad arguments as usage errors; the TUI driven with arrow keys and q
in tmux."""

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from ember import train

ENV = dict(os.environ, PYTHONUNBUFFERED="1")
EMBER = [sys.executable, "-m", "ember"]


def _start(args, cwd):
    return subprocess.Popen(EMBER + args, cwd=cwd, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _wait_for(proc, pattern, timeout=120):
    """Lines of proc's output up to the first matching `pattern` (a regex)."""
    lines, end = [], time.monotonic() + timeout
    while time.monotonic() < end:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if re.search(pattern, line):
            return lines
    proc.kill()
    raise AssertionError(f"never saw {pattern!r}; output:\n{''.join(lines)}")


def test_sigint_checkpoints_and_resume_continues(mnist_ready, tmp_path):
    args = ["train", "mnist", "--dashboard", "plain", "--limit", "1024", "--batch-size", "32",
            "--epochs", "2", "--out", str(tmp_path / "run")]
    proc = _start(args, tmp_path)
    _wait_for(proc, r"epoch 1/2 train \[\s*(6|9|12)/32\]")
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    assert time.monotonic() - sent < 20, "Ctrl-C must stop within seconds"
    assert proc.returncode == 130, rest  # stopped, not done: scripts can tell
    assert "Ctrl-C: stopping after this step" in rest
    m = re.search(r"stopped at epoch 1, batch (\d+) \(step (\d+)\); to resume: "
                  r"ember train mnist --out (\S+) --resume", rest)
    assert m, rest
    stopped = int(m.group(2))
    assert 6 <= stopped < 32
    state = train.checkpoint.load(tmp_path / "run" / "checkpoints")
    assert state["step"] == stopped and state["epoch"] == 0
    assert state["extra"]["config"]["limit"] == 1024

    done = subprocess.run(EMBER + ["train", "mnist", "--dashboard", "plain", "--out",
                                   str(tmp_path / "run"), "--resume"],
                          cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert f"from epoch 1 batch {stopped}" in out
    first = [int(b) for b in re.findall(r"epoch 1/2 train \[\s*(\d+)/32\]", out)]
    assert first and min(first) > stopped  # it went on, not back to the start
    assert "ember train mnist: 2 epochs, 64 steps" in out
    accuracy = float(re.search(r"test accuracy ([\d.]+)%", out).group(1))
    print(f"\nresumed MNIST run on 1,024 digits: test accuracy {accuracy:.2f}%")
    assert accuracy > 50
    for name in ("model.safetensors", "best.safetensors", "history.json", "curves.png"):
        assert (tmp_path / "run" / name).is_file()


def test_second_sigint_stops_at_once(mnist_ready, tmp_path):
    proc = _start(["train", "mnist", "--dashboard", "plain", "--limit", "1024",
                   "--batch-size", "32", "--epochs", "2", "--out", str(tmp_path / "run")],
                  tmp_path)
    _wait_for(proc, r"train \[\s*(3|6)/32\]")
    proc.send_signal(signal.SIGINT)
    _wait_for(proc, r"Ctrl-C: stopping after this step")  # the first one was seen
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out  # also when the first stop had already finished
    folder = tmp_path / "run" / "checkpoints"
    names = os.listdir(folder) if folder.exists() else []
    assert not [n for n in names if n.endswith(".tmp")]
    for name in names:
        train.checkpoint.load(folder / name)
    # at once, or (when the first stop had already finished) with the resume hint
    assert "stopped at once (second Ctrl-C)" in out or "to resume: ember train" in out, out


def test_resume_refuses_what_it_cannot_do(tmp_path):
    run = subprocess.run(EMBER + ["train", "mnist", "--out", str(tmp_path), "--resume"],
                         capture_output=True, text=True, env=ENV, timeout=120)
    assert run.returncode == 2 and "does not exist" in run.stderr


def _run(args, cwd, timeout=300):
    return subprocess.run(EMBER + args, cwd=cwd, env=ENV, capture_output=True, text=True,
                          timeout=timeout)


SMALL = ["train", "mnist", "--dashboard", "plain", "--limit", "256", "--batch-size", "32"]


def test_sigterm_checkpoints_like_ctrl_c_and_exits_130(mnist_ready, tmp_path):
    proc = _start(["train", "mnist", "--dashboard", "plain", "--limit", "1024", "--batch-size",
                   "32", "--epochs", "2", "--out", str(tmp_path / "run")], tmp_path)
    _wait_for(proc, r"epoch 1/2 train \[\s*(6|9|12)/32\]")
    proc.send_signal(signal.SIGTERM)  # what `kill`, systemd and docker stop send
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, rest
    assert "SIGTERM: stopping after this step" in rest and "to resume:" in rest
    state = train.checkpoint.load(tmp_path / "run" / "checkpoints")
    assert state["epoch"] == 0 and 6 <= state["step"] < 32


def test_resume_falls_back_from_a_damaged_newest_checkpoint(mnist_ready, tmp_path):
    run = tmp_path / "run"
    done = _run(SMALL + ["--epochs", "2", "--out", str(run)], tmp_path)
    assert done.returncode == 0, done.stderr
    older, newest = train.checkpoint.list_checkpoints(run / "checkpoints")
    newest.write_bytes(newest.read_bytes()[:1000])  # a crash of the disk, not of ember
    leftover = run / "checkpoints" / f".{newest.name}.0123456789ab.tmp"  # an interrupted write
    leftover.write_bytes(b"half")
    mine = run / "checkpoints" / "notes.tmp"  # not ember's: stays
    mine.write_text("mine")
    again = _run(SMALL[:2] + ["--dashboard", "plain", "--epochs", "3", "--out", str(run),
                              "--resume"], tmp_path)
    assert again.returncode == 0, again.stderr
    assert "Traceback" not in again.stderr
    assert f"skipping checkpoint {newest} cannot be read" in again.stderr
    assert f"using {older}, the newest checkpoint that can be read" in again.stderr
    assert "from epoch 2 batch 0" in again.stdout  # epoch 1's checkpoint: epoch 2 again
    assert "3 epochs, 24 steps" in again.stdout
    assert not leftover.exists() and mine.read_text() == "mine"


def test_resume_refuses_a_new_lr_rather_than_ignoring_it(mnist_ready, tmp_path):
    run = tmp_path / "run"
    assert _run(SMALL + ["--epochs", "1", "--out", str(run)], tmp_path).returncode == 0
    bad = _run(["train", "mnist", "--epochs", "2", "--lr", "1e-5", "--out", str(run),
                "--resume"], tmp_path)
    assert bad.returncode == 2 and "--lr cannot change on --resume (the run uses 0.002)" in \
        bad.stderr


def test_resume_with_no_readable_checkpoint_is_a_clear_error(tmp_path):
    folder = tmp_path / "run" / "checkpoints"
    folder.mkdir(parents=True)
    (folder / train.checkpoint.checkpoint_name(1, 8)).write_bytes(b"\0" * 64)
    bad = _run(["train", "mnist", "--out", str(tmp_path / "run"), "--resume"], tmp_path)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "no checkpoint in" in bad.stderr and "cannot be read" in bad.stderr


def test_a_diverging_run_stops_at_the_step_and_keeps_the_good_checkpoint(mnist_ready, tmp_path):
    run = tmp_path / "run"
    assert _run(SMALL + ["--epochs", "1", "--out", str(run)], tmp_path).returncode == 0
    (good,) = train.checkpoint.list_checkpoints(run / "checkpoints")
    before = good.read_bytes()
    bad = _run(SMALL + ["--epochs", "1", "--lr", "inf", "--out", str(run)], tmp_path)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "Traceback" not in bad.stderr
    # step 1 ran with lr inf and made the weights inf/nan; step 2's loss shows it
    assert "the training loss is nan at step 2 (epoch 1, batch 2)" in bad.stderr
    assert f"newest complete checkpoint: {good}" in bad.stderr
    assert train.checkpoint.list_checkpoints(run / "checkpoints") == [good]
    assert good.read_bytes() == before


def full_disk_at(monkeypatch, name_part):
    """record's atomic writes of files whose name holds `name_part` fail as on a full disk,
    after their temporary file was made."""
    import errno

    from ember.record import _safetensors
    real = _safetensors.atomic_write

    def no_space(chunks):
        raise OSError(errno.ENOSPC, "No space left on device")
        yield from chunks

    def atomic_write(path, chunks):
        return real(path, no_space(chunks) if name_part in os.fspath(path) else chunks)
    monkeypatch.setattr(_safetensors, "atomic_write", atomic_write)


def test_a_full_disk_stops_the_run_with_a_message_and_no_damage(mnist_ready, tmp_path,
                                                              monkeypatch, capsys):
    from ember import cli
    full_disk_at(monkeypatch, "ckpt-e0002-")  # the second epoch's checkpoint
    run = tmp_path / "run"
    assert cli.main([*SMALL, "--epochs", "3", "--out", str(run)]) == 1
    err = capsys.readouterr().err
    assert "could not write the checkpoint of step 16" in err and "No space left" in err
    (first,) = train.checkpoint.list_checkpoints(run / "checkpoints")
    assert first.name == "ckpt-e0001-s00000008.safetensors" and f"{first}, is kept" in err
    assert train.checkpoint.load(first)["step"] == 8
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [first.name]  # no .tmp


def test_a_full_disk_at_the_final_outputs_is_a_message_too(mnist_ready, tmp_path, monkeypatch,
                                                          capsys):
    from ember import cli
    full_disk_at(monkeypatch, "model.safetensors")
    run = tmp_path / "run"
    assert cli.main([*SMALL, "--epochs", "1", "--out", str(run)]) == 1
    err = capsys.readouterr().err
    assert "stopped: [Errno 28] No space left on device" in err
    (last,) = train.checkpoint.list_checkpoints(run / "checkpoints")
    assert f"newest complete checkpoint: {last}" in err and not (run / "model.safetensors").exists()


@pytest.mark.parametrize("args, message", [
    (["--limit", "-5"], "--limit: must be at least 1, got -5"),
    (["--limit", "0"], "--limit: must be at least 1, got 0"),
    (["--seed", "-1"], "--seed: must be at least 0, got -1"),
    (["--epochs", "0"], "--epochs: must be at least 1"),
    (["--batch-size", "x"], "--batch-size: invalid integer value: 'x'"),
    (["--lr", "0"], "--lr must be > 0"),
    (["--lr", "nan"], "--lr must be > 0"),
    (["--backend", "nosuch"], "unknown backend 'nosuch'"),
])
def test_bad_arguments_are_usage_errors(args, message, tmp_path, capsys):
    from ember import cli
    try:
        code = cli.main(["train", "mnist", "--out", str(tmp_path / "run"), *args])
    except SystemExit as e:  # argparse's usage error
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_unwritable_out_and_export_are_refused_before_training(tmp_path, capsys):
    from ember import cli
    blocker = tmp_path / "a-file"
    blocker.write_text("mine")
    for args, message in ((["--out", str(blocker / "run")], f"cannot write --out {blocker}"),
                          (["--out", str(tmp_path / "run"), "--export", str(tmp_path)],
                           "it is a folder"),
                          (["--out", str(tmp_path / "run"), "--export",
                            str(blocker / "m.safetensors")], "cannot write --export")):
        assert cli.main(["train", "mnist", "--dashboard", "none", *args]) == 2
        err = capsys.readouterr().err
        assert message in err and "choose a path you can write to" in err, err
    assert blocker.read_text() == "mine"


def _tmux(*args):
    return subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=30)


def _screen(session):
    return _tmux("capture-pane", "-p", "-t", session).stdout


def _until(session, text, timeout=90):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        screen = _screen(session)
        if text in screen:
            return screen
        time.sleep(0.3)
    raise AssertionError(f"never saw {text!r} on the screen:\n{_screen(session)}")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (apt-get install tmux)")
def test_tui_driven_with_arrows_and_q_in_tmux(mnist_ready, tmp_path):
    pytest.importorskip("rich", reason="the tui dashboard needs Rich")
    session = f"ember-tui-{os.getpid()}"
    out = tmp_path / "run"
    command = " ".join([*EMBER, "train", "mnist", "--dashboard",
                        "tui", "--limit", "4096", "--batch-size", "32", "--epochs", "3",
                        "--out", str(out)])
    _tmux("new-session", "-d", "-s", session, "-x", "120", "-y", "40",
          f"cd {tmp_path} && PYTHONUNBUFFERED=1 {command}; echo EXIT=$?; sleep 60")
    try:
        _until(session, "Loss — recent history")
        screen = _until(session, "ETA")
        assert "Accuracy" in screen and "q stop" in screen
        _tmux("send-keys", "-t", session, "Right")
        _until(session, "Accuracy — recent history")
        _tmux("send-keys", "-t", session, "Up")
        _until(session, "Accuracy — full history")
        _tmux("send-keys", "-t", session, "Down")
        _until(session, "Accuracy — recent history")
        _tmux("send-keys", "-t", session, "Left")
        _until(session, "Loss — recent history")
        _tmux("send-keys", "-t", session, "q")
        screen = _until(session, "EXIT=")
        assert "EXIT=130" in screen
        assert "to resume: ember train mnist" in screen.replace("\n", "")
        assert train.checkpoint.latest(out / "checkpoints") is not None
    finally:
        _tmux("kill-session", "-t", session)


def test_devices_trains_data_parallel(mnist_ready, tmp_path, capsys):
    from ember import cli
    run = tmp_path / "run"
    assert cli.main([*SMALL, "--epochs", "1", "--devices", "2", "--out", str(run)]) == 0
    assert (run / "model.safetensors").is_file() and (run / "history.json").is_file()
    with pytest.raises(SystemExit) as usage:  # argparse's usage error
        cli.main([*SMALL, "--devices", "0", "--out", str(run)])
    assert usage.value.code == 2


def test_torchrun_trains_over_two_processes(mnist_ready, tmp_path):
    pytest.importorskip("torch.distributed", reason="the torchrun path needs torch")
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
         "--master-addr", "127.0.0.1", "--master-port", str(port), "-m", "ember",
         *SMALL, "--epochs", "1", "--out", str(run)],
        cwd=tmp_path, env=dict(ENV, OMP_NUM_THREADS="1"), capture_output=True, text=True,
        timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("test accuracy") == 1  # process 0 reports
    assert (run / "model.safetensors").is_file() and (run / "history.json").is_file()


def test_the_step_is_recorded_by_default_on_wgpu_alone(monkeypatch):
    from argparse import Namespace

    from ember.train import command
    monkeypatch.delenv("EMBER_BACKEND", raising=False)

    def records(backend, no_jit=False, devices=1):
        return command._records(Namespace(backend=backend, no_jit=no_jit), devices)
    assert records("wgpu") and records("fusion(wgpu)")
    assert not records("wgpu", no_jit=True) and not records("wgpu", devices=2)
    assert not records(None) and not records("ndarray") and not records("torch")
    monkeypatch.setenv("EMBER_BACKEND", "wgpu")
    assert records(None)


def test_a_recorded_step_on_wgpu_trains_fused(monkeypatch):
    from argparse import Namespace

    from ember.train import command
    monkeypatch.delenv("EMBER_BACKEND", raising=False)

    def stack(backend, no_jit=False, devices=1):
        return command._stack(Namespace(backend=backend, no_jit=no_jit, devices=devices))
    assert stack("wgpu") == ("fusion(wgpu)", True) == stack("WGPU")
    assert stack("wgpu", no_jit=True) == ("wgpu", False) and stack("wgpu", devices=2)[0] == "wgpu"
    assert stack("ndarray") == ("ndarray", False) and stack(None) == (None, False)
    monkeypatch.setenv("EMBER_BACKEND", "wgpu")
    assert stack(None) == ("fusion(wgpu)", True)

