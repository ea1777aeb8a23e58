"""The Rich dashboard in-process: rendering, metric and history switching, `q`; and the key
parser. (test_command.py drives the real thing in tmux.)"""

import io

import pytest

from ember import train

from .helpers import loaders, model, optimizer

rich = pytest.importorskip("rich", reason="the tui dashboard needs Rich (pip install rich)")
from rich.console import Console  # noqa: E402

from ember.train.dashboard.tui import TuiDashboard, parse_keys  # noqa: E402


def dashboard():
    console = Console(file=io.StringIO(), width=120, height=40, color_system=None)
    return TuiDashboard(console=console, keys=False)


def test_keys_are_parsed():
    assert parse_keys(b"\x1b[C\x1b[D\x1b[A\x1b[Bq") == ["right", "left", "up", "down", "q"]
    assert parse_keys(b"\x1bOCx") == ["right"]  # application cursor mode; unknown keys skipped


def test_panels_switch_with_the_arrows():
    tui = dashboard()
    learner = train.Learner(model(), optimizer(), metrics=[train.Loss(), train.Accuracy()],
                            dashboard=tui)
    tl, vl = loaders()
    learner.fit(tl, vl, epochs=2)
    screen = tui.snapshot()
    assert "Loss — recent history" in screen
    assert "epoch 2/2" in screen and "ETA" in screen and "metrics" in screen
    assert any(ch in screen for ch in "⠁⠂⠄⡀⢀⠈⠐⠠")  # Braille curve dots
    tui.press("right")
    assert tui.current() == ("Accuracy", "recent") and "Accuracy — recent" in tui.snapshot()
    tui.press("up")
    assert "Accuracy — full history" in tui.snapshot()
    tui.press("down")
    tui.press("right")  # wraps around
    assert tui.current() == ("Loss", "recent")
    tui.press("left")
    assert tui.current() == ("Accuracy", "recent")


def test_q_stops_training_like_ctrl_c(tmp_path):
    class PressQ(TuiDashboard):
        def step(self, learner, split):
            if learner.step == 3:
                self.press("q")
    console = Console(file=io.StringIO(), width=100, height=30, color_system=None)
    tui = PressQ(console=console, keys=False)
    learner = train.Learner(model(), optimizer(), dashboard=tui, checkpoint_dir=tmp_path)
    tl, vl = loaders()
    learner.fit(tl, vl, epochs=3)
    assert learner.interrupted and learner.step == 3
    assert (tmp_path / "checkpoints" / "ckpt-e0000-s00000003.safetensors").is_file()
    printed = console.file.getvalue()
    assert "q: stopping after this step" in printed and "to resume" in printed


def test_auto_is_plain_without_a_terminal():
    from ember.train.dashboard import PlainDashboard, make_dashboard
    assert isinstance(make_dashboard("auto"), PlainDashboard)  # pytest captures stdout
