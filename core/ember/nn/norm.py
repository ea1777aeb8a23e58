"""Normalisation layers: BatchNorm1d/2d, LayerNorm, GroupNorm, RMSNorm (PyTorch's parameters,
defaults and state-dict names)."""

import numpy as np

from ..autodiff import no_grad
from ..errors import ShapeError
from ..ops import prims
from ..ops.nn import batch_stats
from ..shape import prod
from ..tensor import Tensor, _apply
from . import init
from .module import Module, Param, derived


def _normalize(x, dims, eps):
    """(x - mean) / sqrt(var + eps) over dims, with the biased variance; also the mean and
    the variance (kept dims)."""
    mean = x.mean_dim(dims)
    xc = x - mean
    var = (xc * xc).mean_dim(dims)
    return xc / (var + eps).sqrt(), mean, var


class _BatchNorm(Module):
    """Batch statistics in training (running statistics updated, without gradient tracking),
    running statistics in eval. momentum=None is a cumulative average, as PyTorch's."""

    _ranks = ()

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, backend=None, dtype=None):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        n = [num_features]
        self.weight = Param(init.ones(n, backend, dtype)) if affine else None
        self.bias = Param(init.zeros(n, backend, dtype)) if affine else None
        if track_running_stats:
            self.running_mean = Param(init.zeros(n, backend, dtype), trainable=False)
            self.running_var = Param(init.ones(n, backend, dtype), trainable=False)
            # int32, ember's default int (PyTorch's int64 loads into it): WebGPU has no int64
            self.num_batches_tracked = Param(Tensor.zeros([], backend, "int32"),
                                             trainable=False)
        else:
            self.running_mean = self.running_var = self.num_batches_tracked = None

    def forward(self, x):
        if x.ndim not in self._ranks:
            ranks = " or ".join(map(str, self._ranks))
            raise ShapeError(f"{type(self).__name__}: expected a {ranks}-d input [N, C, ...], "
                             f"got shape {list(x.shape)}")
        if x.shape[1] != self.num_features:
            raise ShapeError(f"{type(self).__name__}: expected {self.num_features} channels in "
                             f"dim 1, got shape {list(x.shape)}")
        dims = (0,) + tuple(range(2, x.ndim))
        stat_shape = (1, self.num_features) + (1,) * (x.ndim - 2)
        if not self.training and self.track_running_stats:
            return self._eval_affine(x, stat_shape)
        n = prod(x.shape) // self.num_features
        if self.training and n <= 1:
            raise ShapeError(f"{type(self).__name__}: expected more than 1 value per channel "
                             f"when training, got input shape {list(x.shape)}")
        if self.weight is not None and self.bias is not None:
            # one op (ops/nn.py batch_norm) whose gradient accounts for the statistics itself:
            # they are computed here without a gradient of their own
            with no_grad():
                mean, _, var = batch_stats(x, dims)
            if self.training and self.track_running_stats:
                self._update(mean, var, n)
            return _apply(prims.batch_norm, x, mean, var, self.weight.reshape(stat_shape),
                          self.bias.reshape(stat_shape), eps=float(self.eps))
        mean, xc, var = batch_stats(x, dims)
        if self.training and self.track_running_stats:
            self._update(mean, var, n)
        # the weight and 1 / std fold into one per-channel scale: the per-element work is two
        # passes forward, and Autodiff's backward runs fewer passes over the activation too
        std = (var + self.eps).sqrt()
        scale = self.weight.reshape(stat_shape) / std if self.weight is not None \
            else std.recip()
        y = xc * scale
        return y + self.bias.reshape(stat_shape) if self.bias is not None else y

    def _eval_affine(self, x, stat_shape):
        # with running statistics, y = x * scale + shift (the mean folds into the shift, as in
        # PyTorch's CPU kernel). scale and shift depend on the parameters alone: kept while
        # those are unchanged, so an eval forward runs two ops here, not ten
        scale, shift = derived(self, "_eval_scale_shift", lambda: self._scale_shift(stat_shape),
                               self.weight, self.bias, self.running_mean, self.running_var,
                               also=(self.eps, stat_shape))
        return x * scale + shift

    def _scale_shift(self, stat_shape):
        # on the [C] vectors, reshaped only at the end to broadcast
        std = (self.running_var + self.eps).sqrt()
        scale = self.weight / std if self.weight is not None else std.recip()
        shift = self.running_mean * scale
        shift = self.bias - shift if self.bias is not None else -shift
        return scale.reshape(stat_shape), shift.reshape(stat_shape)

    def _update(self, mean, var, n):
        with no_grad():
            mean = mean.detach().reshape(-1)
            var_unbiased = var.detach().reshape(-1) * (n / (n - 1))
            self.num_batches_tracked = self.num_batches_tracked.with_value(
                self.num_batches_tracked + 1)
            m = self.momentum
            if m is None:
                m = 1.0 / float(self.num_batches_tracked.item())
            self.running_mean = self.running_mean.with_value(
                self.running_mean * (1 - m) + mean * m)
            self.running_var = self.running_var.with_value(
                self.running_var * (1 - m) + var_unbiased * m)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Over [N, C] or [N, C, L]."""

    _ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Over [N, C, H, W]."""

    _ranks = (4,)


def _as_shape(normalized_shape):
    if isinstance(normalized_shape, int):
        return (normalized_shape,)
    return tuple(int(s) for s in normalized_shape)


def _check_trailing(name, x, shape):
    if tuple(x.shape[x.ndim - len(shape):]) != shape or x.ndim < len(shape):
        raise ShapeError(f"{name}: expected an input ending in {list(shape)}, got shape "
                         f"{list(x.shape)}")


class LayerNorm(Module):
    """Normalises over the trailing `normalized_shape` dims."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True,
                 backend=None, dtype=None):
        super().__init__()
        self.normalized_shape, self.eps = _as_shape(normalized_shape), eps
        self.elementwise_affine = elementwise_affine
        s = self.normalized_shape
        self.weight = Param(init.ones(s, backend, dtype)) if elementwise_affine else None
        self.bias = Param(init.zeros(s, backend, dtype)) if elementwise_affine and bias \
            else None

    def forward(self, x):
        _check_trailing("LayerNorm", x, self.normalized_shape)
        dims = tuple(range(x.ndim - len(self.normalized_shape), x.ndim))
        y = _normalize(x, dims, self.eps)[0]
        if self.weight is not None:
            y = y * self.weight
        if self.bias is not None:
            y = y + self.bias
        return y

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class GroupNorm(Module):
    """Normalises [N, C, *] over groups of C / num_groups channels; affine per channel."""

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, backend=None,
                 dtype=None):
        super().__init__()
        if num_channels % num_groups:
            raise ShapeError(f"GroupNorm: num_channels ({num_channels}) must be divisible by "
                             f"num_groups ({num_groups})")
        self.num_groups, self.num_channels, self.eps, self.affine = (
            num_groups, num_channels, eps, affine)
        n = [num_channels]
        self.weight = Param(init.ones(n, backend, dtype)) if affine else None
        self.bias = Param(init.zeros(n, backend, dtype)) if affine else None

    def forward(self, x):
        if x.ndim < 2 or x.shape[1] != self.num_channels:
            raise ShapeError(f"GroupNorm: expected [N, {self.num_channels}, ...], got shape "
                             f"{list(x.shape)}")
        g = x.reshape((x.shape[0], self.num_groups, -1))
        y = _normalize(g, (2,), self.eps)[0].reshape(x.shape)
        if self.weight is not None:
            shape = (1, self.num_channels) + (1,) * (x.ndim - 2)
            y = y * self.weight.reshape(shape) + self.bias.reshape(shape)
        return y

    def extra_repr(self):
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"


class RMSNorm(Module):
    """x / sqrt(mean(x²) + eps) * weight over the trailing dims; eps=None is the dtype's
    machine epsilon, as PyTorch's."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, backend=None,
                 dtype=None):
        super().__init__()
        self.normalized_shape, self.eps = _as_shape(normalized_shape), eps
        self.elementwise_affine = elementwise_affine
        self.weight = Param(init.ones(self.normalized_shape, backend, dtype)) \
            if elementwise_affine else None

    def forward(self, x):
        _check_trailing("RMSNorm", x, self.normalized_shape)
        dims = tuple(range(x.ndim - len(self.normalized_shape), x.ndim))
        eps = self.eps
        if eps is None:
            eps = float(np.finfo(x.dtype).eps)
        y = x / ((x * x).mean_dim(dims) + eps).sqrt()
        return y * self.weight if self.weight is not None else y

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")
