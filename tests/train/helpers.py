"""A tiny, fast classification task for the Learner tests."""

import numpy as np

import ember
from ember import data, nn, optim, train
from ember.backend import NdArray


def task(n=40, seed=0):
    """n points in 4-d, 3 classes separable by their first coordinates."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    x = rng.normal(size=(n, 4)).astype(np.float32) * 0.5
    x[np.arange(n), y] += 2.0
    return data.InMemoryDataset(x, y)


def model(seed=0, dropout=0.3):
    ember.seed(seed)
    return nn.Sequential(nn.Linear(4, 16, backend=NdArray()), nn.Relu(), nn.Dropout(dropout),
                         nn.Linear(16, 3, backend=NdArray()))


def loaders(batch_size=8):
    return (data.DataLoader(task(), batch_size=batch_size, shuffle=True, seed=7),
            data.DataLoader(task(24, seed=1), batch_size=12))


def optimizer(total=40):
    return optim.Adam(lr=optim.lr.Cosine(2e-2, T_max=total))


class StopAt(train.Dashboard):
    """Asks the learner to stop once it has done `step` steps (as the TUI's q does)."""

    def __init__(self, step):
        self.at, self.messages = step, []

    def step(self, learner, split):
        if learner.step >= self.at:
            self.stop_requested = True

    def message(self, text):
        self.messages.append(text)


def weights(m):
    return {n: p.to_numpy().copy() for n, p in m.named_params()}
