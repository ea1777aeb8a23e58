"""Dashboards: what a Learner shows while it trains.

    "tui"    a live terminal dashboard (Rich): a panel per metric with train and valid curves,
             left/right switch metric, up/down switch recent/full history, progress and ETA,
             `q` stops (like Ctrl-C: checkpoint, then return)
    "plain"  progress lines, for logs and CI; chosen by "auto" when stdout is not a terminal
    "json"   one JSON object per line, for programs that draw their own (the training page,
             /demos/train/, draws its curves from them)
    None     nothing

A dashboard gets `start(learner)`, `step(learner, split)` after every batch,
`epoch_end(epoch, summary, seconds)`, `message(text)` and `close()`, and may set
`stop_requested` to ask the learner to stop.
"""

import json
import math
import sys
import time

__all__ = ["Dashboard", "JsonDashboard", "NoDashboard", "PlainDashboard", "format_seconds",
           "make_dashboard"]


def format_seconds(seconds):
    """1:02:03 / 4:05 / "-" for None."""
    if seconds is None:
        return "-"
    s = int(round(max(seconds, 0)))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Dashboard:
    stop_requested = False

    def start(self, learner):
        pass

    def step(self, learner, split):
        pass

    def epoch_end(self, epoch, summary, seconds):
        pass

    def message(self, text):
        pass

    def close(self):
        pass


class NoDashboard(Dashboard):
    """Shows nothing (messages still go to stderr: how to resume matters)."""

    def message(self, text):
        print(text, file=sys.stderr, flush=True)


def _metric_text(learner, split, values=None):
    parts = []
    for m in learner.metrics[split]:
        v = m.value() if values is None else values.get(m.name)
        if v is not None:
            parts.append(f"{m.name} {m.format(v)}")
    return "  ".join(parts)


class PlainDashboard(Dashboard):
    """Progress lines on `file` (stdout): about `lines_per_epoch` per epoch of training, at
    least one every `every_seconds`, and a summary line per epoch."""

    def __init__(self, file=None, lines_per_epoch=10, every_seconds=30.0):
        self.file = file
        self.lines_per_epoch, self.every_seconds = lines_per_epoch, every_seconds
        self._last = 0.0
        self._learner = None

    def _print(self, text):
        print(text, file=self.file or sys.stdout, flush=True)

    def start(self, learner):
        self._learner = learner
        p = learner.progress()
        start = f", from epoch {learner.epoch + 1} batch {learner.batch}" if learner.step else ""
        self._print(f"{learner.title}: {p['train_batches']} train batches, "
                    f"{p['valid_batches']} valid batches per epoch, {learner.epochs} epochs"
                    f"{start}")
        self._last = time.perf_counter()

    def step(self, learner, split):
        if split != "train":
            return
        p = learner.progress()
        n, b = p["batches"], p["batch"]
        every = max(1, n // self.lines_per_epoch) if n else 50
        now = time.perf_counter()
        if b % every and b != n and now - self._last < self.every_seconds:
            return
        self._last = now
        width = len(str(n)) if n else 4
        self._print(f"epoch {p['epoch'] + 1}/{p['epochs']} train [{b:>{width}}/{n}]  "
                    f"{_metric_text(learner, 'train')}  | {format_seconds(p['elapsed'])} "
                    f"elapsed, ETA epoch {format_seconds(p['eta_epoch'])}, "
                    f"total {format_seconds(p['eta_total'])}")

    def epoch_end(self, epoch, summary, seconds):
        learner = self._learner
        parts = [f"epoch {epoch + 1} done ({format_seconds(seconds)} elapsed)"]
        for split in ("train", "valid"):
            if split in summary:
                text = "  ".join(f"{name} {_fmt(learner, name, v)}"
                                 for name, v in summary[split].items() if v is not None)
                parts.append(f"{split}: {text}")
        self._print("  |  ".join(parts))

    def message(self, text):
        self._print(text)


class JsonDashboard(Dashboard):
    """One JSON object per line on `file` (stdout): {"event": "start", epochs, train_batches,
    valid_batches, step}, {"event": "step", epoch, batch, batches, step, elapsed, eta_total,
    metrics: {name: value}} after every `every`-th train batch (and an epoch's last),
    {"event": "epoch", epoch, seconds, train: {...}, valid: {...}} and {"event": "message",
    text}. Values that are not finite are null."""

    def __init__(self, file=None, every=1):
        self.file, self.every = file, max(1, int(every))

    def _emit(self, event, **fields):
        line = json.dumps({"event": event, **_finite(fields)}, allow_nan=False)
        print(line, file=self.file or sys.stdout, flush=True)

    def start(self, learner):
        p = learner.progress()
        self._emit("start", epochs=p["epochs"], train_batches=p["train_batches"],
                   valid_batches=p["valid_batches"], step=learner.step)

    def step(self, learner, split):
        p = learner.progress()
        if split != "train" or (p["batch"] % self.every and p["batch"] != p["batches"]):
            return
        self._emit("step", epoch=p["epoch"], batch=p["batch"], batches=p["batches"],
                   step=p["step"], elapsed=p["elapsed"], eta_total=p["eta_total"],
                   metrics={m.name: m.value() for m in learner.metrics["train"]})

    def epoch_end(self, epoch, summary, seconds):
        self._emit("epoch", epoch=epoch, seconds=seconds, **summary)

    def message(self, text):
        self._emit("message", text=text)


def _finite(value):
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _fmt(learner, name, value):
    if learner is not None:
        for m in learner.metric_types:
            if m.name == name:
                return m.format(value)
    return f"{value:.4g}"


def make_dashboard(spec):
    """A Dashboard from "tui" | "plain" | "auto" | None | a Dashboard."""
    if isinstance(spec, Dashboard):
        return spec
    if spec is None or spec == "none":
        return NoDashboard()
    if spec == "auto":
        spec = "tui" if _tui_possible() else "plain"
    if spec == "plain":
        return PlainDashboard()
    if spec == "json":
        return JsonDashboard()
    if spec == "tui":
        from .tui import TuiDashboard
        return TuiDashboard()
    raise ValueError(f"dashboard must be 'tui', 'plain', 'json', 'auto', None or a Dashboard, got "
                     f"{spec!r}")


def _tui_possible():
    try:
        if not (sys.stdout.isatty() and sys.stdin.isatty()):
            return False
        import rich  # noqa: F401
        return True
    except (ImportError, AttributeError, ValueError):
        return False
