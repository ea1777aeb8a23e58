"""Activation layers (no parameters): Relu, LeakyRelu, Gelu, Sigmoid, Tanh, Silu, Softmax,
LogSoftmax. Each is a composite of tensor ops."""

import math

from .module import Module


def leaky_relu(x, negative_slope=0.01):
    # mask_where, not max(x, a*x): the gradient is negative_slope for x <= 0, as PyTorch's
    return x.mask_where(x <= 0, x * negative_slope)


def gelu(x, approximate="none"):
    if approximate == "none":
        return x.gelu()
    if approximate == "tanh":
        inner = (x + x * x * x * 0.044715) * math.sqrt(2 / math.pi)
        return x * (inner.tanh() + 1) * 0.5
    raise ValueError(f"Gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def silu(x):
    return x * x.sigmoid()


class Relu(Module):
    def forward(self, x):
        return x.relu()


class LeakyRelu(Module):
    def __init__(self, negative_slope=0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        return leaky_relu(x, self.negative_slope)

    def extra_repr(self):
        return f"negative_slope={self.negative_slope}"


class Gelu(Module):
    """GELU; approximate="tanh" is the tanh approximation (GPT-2's)."""

    def __init__(self, approximate="none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"Gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x):
        return gelu(x, self.approximate)

    def extra_repr(self):
        return f"approximate={self.approximate!r}"


class Sigmoid(Module):
    def forward(self, x):
        return x.sigmoid()


class Tanh(Module):
    def forward(self, x):
        return x.tanh()


class Silu(Module):
    """x * sigmoid(x) (also called swish)."""

    def forward(self, x):
        return silu(x)


class Softmax(Module):
    def __init__(self, dim=-1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return x.softmax(self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    def forward(self, x):
        return x.log_softmax(self.dim)
