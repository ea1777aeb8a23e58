"""What the dashboards plot: per-batch points and per-epoch values of every metric.

The x axis of the points is training progress in epochs (2.5 = halfway through the third
epoch), for train and valid alike, so both curves share one axis.
"""

import numpy as np

__all__ = ["History"]


class History:
    def __init__(self):
        self.points = {}   # name -> split -> ([x], [y])
        self.epochs = {}   # name -> split -> {epoch: value}

    def names(self):
        return list(self.points)

    def add_point(self, name, split, x, y):
        xs, ys = self.points.setdefault(name, {}).setdefault(split, ([], []))
        xs.append(float(x))
        ys.append(float(y))

    def add_epoch(self, name, split, epoch, value):
        self.points.setdefault(name, {})
        self.epochs.setdefault(name, {}).setdefault(split, {})[int(epoch)] = float(value)

    def series(self, name, split):
        """(xs, ys) as NumPy arrays (empty where nothing was recorded)."""
        xs, ys = self.points.get(name, {}).get(split, ([], []))
        return np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)

    def epoch_values(self, name, split):
        """{epoch: value} of a metric."""
        return dict(self.epochs.get(name, {}).get(split, {}))

    # ---- checkpoints: arrays for the points, plain numbers for the epochs -------------------
    def state_dict(self):
        points = {name: {split: np.asarray([xs, ys], dtype=np.float64)
                         for split, (xs, ys) in splits.items()}
                  for name, splits in self.points.items()}
        epochs = {name: {split: [[e, v] for e, v in sorted(values.items())]
                         for split, values in splits.items()}
                  for name, splits in self.epochs.items()}
        return {"points": points, "epochs": epochs}

    def load_state_dict(self, state):
        self.points = {name: {split: (list(map(float, a[0])), list(map(float, a[1])))
                              for split, a in splits.items()}
                       for name, splits in state["points"].items()}
        self.epochs = {name: {split: {int(e): float(v) for e, v in pairs}
                              for split, pairs in splits.items()}
                       for name, splits in state["epochs"].items()}
