"""Dropout: zeroes entries with probability p in training and scales the rest by 1/(1-p);
the identity in eval mode. Masks are drawn from ember's generator (`ember.seed`)."""

from ..distribution import Distribution
from ..tensor import Tensor
from .module import Module


def dropout(x, p=0.5, training=True):
    """Functional dropout (also used inside attention)."""
    if not 0 <= p <= 1:
        raise ValueError(f"dropout: p must lie in [0, 1], got {p}")
    if not training or p == 0:
        return x
    if p == 1:
        return x * 0.0
    keep = Tensor.random(x.shape, Distribution.Bernoulli(1 - p), backend=x.backend,
                         dtype=x.dtype)
    return x * (keep * (1 / (1 - p)))


class Dropout(Module):
    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if not 0 <= p <= 1:
            raise ValueError(f"Dropout: p must lie in [0, 1], got {p}")
        self.p = p

    def forward(self, x):
        return dropout(x, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}"
