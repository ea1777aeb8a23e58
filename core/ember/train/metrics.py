"""Training metrics (Burn's burn-train metrics): each one reads a step's output and keeps a
running value over the epoch.

    metric.update(out)   out: StepOutput of one batch (loss, logits, targets, lr, split)
    metric.value()       the epoch's value so far (a float, or None before any update)
    metric.last          the last batch's value (what the live curves plot)
    metric.reset()       at each epoch start

`higher_is_better` tells checkpointing and early stopping which way is better; `percent`
tells dashboards to show the value as a percentage. Metrics only see NumPy arrays and
Python numbers, so they work the same on every backend.
"""

import os
import sys
import time
from dataclasses import dataclass

import numpy as np

__all__ = ["Accuracy", "CpuUse", "LearningRate", "Loss", "MemoryUse", "Metric", "StepOutput",
           "TopKAccuracy"]


@dataclass
class StepOutput:
    """What one training or validation step hands the metrics."""

    split: str                 # "train" | "valid"
    loss: float
    output: np.ndarray | None  # logits [B, C] (None where no metric needs them)
    target: np.ndarray | None  # class indices [B]
    batch_size: int
    lr: float | None = None


class Metric:
    """Base class: a weighted mean of per-batch values over the epoch; subclasses give
    `batch_value(out) -> (value, weight)` (value None: nothing to record)."""

    name = "metric"
    higher_is_better = True
    percent = False
    splits = ("train", "valid")   # where the metric is recorded
    needs_output = False          # whether update() reads logits

    def __init__(self):
        self.reset()

    def reset(self):
        self.total, self.weight, self.last = 0.0, 0.0, None

    def update(self, out):
        value, weight = self.batch_value(out)
        if value is None:
            return
        self.last = float(value)
        self.total += float(value) * weight
        self.weight += weight

    def batch_value(self, out):
        raise NotImplementedError

    def value(self):
        return self.total / self.weight if self.weight else None

    def format(self, value):
        if value is None:
            return "-"
        return f"{value * 100:.2f}%" if self.percent else f"{value:.4g}"

    def state_dict(self):
        return {"total": self.total, "weight": self.weight, "last": self.last}

    def load_state_dict(self, state):
        self.total, self.weight = float(state["total"]), float(state["weight"])
        self.last = None if state.get("last") is None else float(state["last"])

    def __repr__(self):
        return f"{type(self).__name__}()"


class Loss(Metric):
    """The mean loss (weighted by batch size)."""

    name = "Loss"
    higher_is_better = False

    def batch_value(self, out):
        return out.loss, out.batch_size


def _targets(out, who):
    target = np.asarray(out.target).reshape(-1)
    logits = np.asarray(out.output)
    if logits.ndim != 2 or len(logits) != len(target):
        raise ValueError(f"{who}: expected logits [B, C] and targets [B], got "
                         f"{list(logits.shape)} and {list(target.shape)}")
    return logits, target


class Accuracy(Metric):
    """The fraction of items whose top class is the target."""

    name = "Accuracy"
    percent = True
    needs_output = True

    def batch_value(self, out):
        logits, target = _targets(out, self.name)
        return float(np.mean(logits.argmax(axis=1) == target)), len(target)


class TopKAccuracy(Metric):
    """The fraction of items whose target is among the k highest logits."""

    percent = True
    needs_output = True

    def __init__(self, k=5):
        if k < 1:
            raise ValueError(f"TopKAccuracy: k must be >= 1, got {k}")
        self.k = int(k)
        self.name = f"Top{self.k}Accuracy"
        super().__init__()

    def batch_value(self, out):
        logits, target = _targets(out, self.name)
        k = min(self.k, logits.shape[1])
        top = np.argpartition(-logits, k - 1, axis=1)[:, :k]
        return float(np.mean((top == target[:, None]).any(axis=1))), len(target)

    def __repr__(self):
        return f"TopKAccuracy(k={self.k})"


class LearningRate(Metric):
    """The learning rate the step used (training only); its epoch value is the last one."""

    name = "LearningRate"
    splits = ("train",)

    def batch_value(self, out):
        return out.lr, 1.0

    def update(self, out):
        if out.lr is not None:
            self.last = float(out.lr)

    def value(self):
        return self.last

    def format(self, value):
        return "-" if value is None else f"{value:.3g}"


class CpuUse(Metric):
    """This process's CPU use since the last update, in percent of one core (several
    threads can exceed 100%)."""

    name = "CpuUse"
    splits = ("train",)

    def reset(self):
        super().reset()
        self._mark = (time.perf_counter(), time.process_time())

    def batch_value(self, out):
        wall, cpu = time.perf_counter(), time.process_time()
        (wall0, cpu0), self._mark = self._mark, (wall, cpu)
        if wall - wall0 <= 0:
            return None, 0
        return 100.0 * (cpu - cpu0) / (wall - wall0), wall - wall0

    def format(self, value):
        return "-" if value is None else f"{value:.0f}%"

    def state_dict(self):
        return {"total": self.total, "weight": self.weight, "last": self.last}


def _rss_bytes():
    """The resident memory of this process, or None where it cannot be read (Pyodide)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError, IndexError):
        pass
    try:
        import resource
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024
    except (ImportError, OSError, AttributeError):
        return None


class MemoryUse(Metric):
    """The process's resident memory in MB, read after each step (the epoch's value: the
    highest reading)."""

    name = "MemoryUse"
    higher_is_better = False
    splits = ("train",)

    def batch_value(self, out):
        rss = _rss_bytes()
        return (None, 0) if rss is None else (rss / 2**20, 1.0)

    def update(self, out):
        value, _ = self.batch_value(out)
        if value is not None:
            self.last = value
            self.total = max(self.total, value)
            self.weight = 1.0

    def value(self):
        return self.total if self.weight else None

    def format(self, value):
        return "-" if value is None else f"{value:.0f} MB"
