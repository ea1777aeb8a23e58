"""Linear, Identity and Flatten."""

import math

from . import init
from .module import Module, Param, derived


class Linear(Module):
    """y = x @ weight.T + bias, with weight [out_features, in_features] as PyTorch's.

    Initialised as PyTorch: weight and bias from U(-1/sqrt(in), 1/sqrt(in))."""

    def __init__(self, in_features, out_features, bias=True, backend=None, dtype=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Param(init.kaiming_uniform([out_features, in_features], a=math.sqrt(5),
                                                 backend=backend, dtype=dtype))
        bound = 1 / math.sqrt(in_features) if in_features > 0 else 0.0
        self.bias = Param(init.uniform([out_features], -bound, bound, backend=backend,
                                       dtype=dtype)) if bias else None

    def forward(self, x):
        # the transposed weight is kept while the weight is unchanged: one permute op less
        # per forward where no gradient is recorded (inference, no_grad)
        wt = derived(self, "_weight_t", self.weight.transpose, self.weight)
        y = x.matmul(wt)
        return y + self.bias if self.bias is not None else y

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Identity(Module):
    """Returns its input (a placeholder where a layer is optional)."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x):
        return x


class Flatten(Module):
    """x.flatten(start_dim, end_dim); PyTorch's default keeps the batch dim."""

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return x.flatten(self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"
