"""`ember train` as a user runs it: a real subprocess on MNIST, interrupted with SIGINT and
resumed; a second Ctrl-C; the TUI driven with arrow keys and q in tmux."""

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
EMBER = [sys.executable, "-m", "ember.cli"]


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
    assert proc.returncode == 0, rest
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
    print(f"\nexit status after two Ctrl-C: {proc.returncode}")
    assert proc.returncode in (0, 130), out  # 0 when the first stop already finished
    folder = tmp_path / "run" / "checkpoints"
    names = os.listdir(folder) if folder.exists() else []
    assert not [n for n in names if n.endswith(".tmp")]
    for name in names:
        train.checkpoint.load(folder / name)
    if proc.returncode == 130:
        assert "stopped at once (second Ctrl-C)" in out


def test_resume_refuses_what_it_cannot_do(tmp_path):
    run = subprocess.run(EMBER + ["train", "mnist", "--out", str(tmp_path), "--resume"],
                         capture_output=True, text=True, env=ENV, timeout=120)
    assert run.returncode == 2 and "does not exist" in run.stderr


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
    command = " ".join([sys.executable, "-m", "ember.cli", "train", "mnist", "--dashboard",
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
        assert "EXIT=0" in screen
        assert "to resume: ember train mnist" in screen.replace("\n", "")
        assert train.checkpoint.latest(out / "checkpoints") is not None
    finally:
        _tmux("kill-session", "-t", session)
