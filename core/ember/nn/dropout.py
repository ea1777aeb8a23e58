"""Dropout: zeroes entries with probability p in training and scales the rest by 1/(1-p);
the identity in eval mode. Masks are drawn from ember's generator (`ember.seed`)."""

import math

import numpy as np

from ..capture import live
from ..distribution import rng
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
    shape, dtype, backend = x.shape, x.dtype, x.backend

    def mask():  # under ember.jit, every replay draws its own, where this call draws it
        return Tensor.from_data(_scaled_mask(shape, 1 - p, dtype), backend=backend)
    return x * live(mask(), mask)


def _scaled_mask(shape, keep, dtype):
    """1 / keep with probability keep (to 1/65536), else 0: the generator's raw 64-bit outputs
    read as four 16-bit draws each, compared and scaled in one pass (~5x faster than uniform
    floats, a compare and a scale; 2.4 ms a step in Burn's MNIST model at batch 64)."""
    n, below, scale = math.prod(shape), round(keep * 65536), np.dtype(dtype).type(1 / keep)
    if below >= 65536:  # keep within 2^-17 of 1: keep everything
        return np.full(shape, scale, dtype)
    draws = rng().bit_generator.random_raw(-(-n // 4)).view(np.uint16)[:n].reshape(shape)
    return np.multiply(draws < below, scale, dtype=dtype)


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
