"""Convolution layers: Conv1d, Conv2d, ConvTranspose2d (PyTorch's weight layouts and default
initialisation), calling ember.nn.functional."""

import math

from ..errors import ShapeError
from . import functional as F
from . import init
from .module import Module, Param


def _tuple(value, n, name):
    if isinstance(value, int):
        return (value,) * n
    value = tuple(int(v) for v in value)
    if len(value) != n:
        raise ShapeError(f"{name}: expected an int or {n} ints, got {value}")
    return value



class _ConvNd(Module):
    _n = 2
    _transposed = False

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, padding_mode="zeros", output_padding=0,
                 backend=None, dtype=None):
        super().__init__()
        name, n = type(self).__name__, self._n
        if in_channels % groups or out_channels % groups:
            raise ShapeError(f"{name}: in_channels ({in_channels}) and out_channels "
                             f"({out_channels}) must be divisible by groups ({groups})")
        if padding_mode != "zeros":
            raise NotImplementedError(f"{name}: padding_mode={padding_mode!r} is not supported "
                                      "(only 'zeros'); pad the input yourself")
        if isinstance(padding, str):
            if padding not in ("same", "valid") or self._transposed:
                raise ValueError(f"{name}: padding must be an int, a tuple or 'same'/'valid', "
                                 f"got {padding!r}")
            self.padding = padding
        else:
            self.padding = _tuple(padding, n, name)
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _tuple(kernel_size, n, name)
        self.stride = _tuple(stride, n, name)
        self.dilation = _tuple(dilation, n, name)
        self.output_padding = _tuple(output_padding, n, name)
        self.padding_mode = padding_mode
        if self._transposed:
            shape = [in_channels, out_channels // groups, *self.kernel_size]
        else:
            shape = [out_channels, in_channels // groups, *self.kernel_size]
        # PyTorch's reset_parameters: kaiming_uniform(a=sqrt(5)), bias U(+-1/sqrt(fan_in))
        self.weight = Param(init.kaiming_uniform(shape, a=math.sqrt(5), backend=backend,
                                                 dtype=dtype))
        fan_in = init.fan_in_and_fan_out(shape)[0]
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        self.bias = Param(init.uniform([out_channels], -bound, bound, backend=backend,
                                       dtype=dtype)) if bias else None

    def extra_repr(self):
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0,) * self._n:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * self._n:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * self._n:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s


class Conv1d(_ConvNd):
    """[N, C_in, L] -> [N, C_out, L_out]; weight [C_out, C_in/groups, K]."""

    _n = 1

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, padding_mode="zeros", backend=None,
                 dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, backend=backend, dtype=dtype)

    def forward(self, x):
        padding = self.padding if isinstance(self.padding, str) else self.padding[0]
        return F.conv1d(x, self.weight, self.bias, stride=self.stride[0],
                        padding=padding, dilation=self.dilation[0],
                        groups=self.groups)


class Conv2d(_ConvNd):
    """[N, C_in, H, W] -> [N, C_out, H_out, W_out]; weight [C_out, C_in/groups, KH, KW]."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, padding_mode="zeros", backend=None,
                 dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, backend=backend, dtype=dtype)

    def forward(self, x):
        return F.conv2d(x, self.weight, self.bias, stride=self.stride,
                        padding=self.padding, dilation=self.dilation,
                        groups=self.groups)


class ConvTranspose2d(_ConvNd):
    """[N, C_in, H, W] -> [N, C_out, H_out, W_out]; weight [C_in, C_out/groups, KH, KW] (as
    PyTorch's). forward(x, output_size=None) picks output_padding from a wanted size."""

    _transposed = True

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 backend=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, output_padding, backend=backend,
                         dtype=dtype)
        for op, s, d in zip(self.output_padding, self.stride, self.dilation):
            if op >= max(s, d):
                raise ValueError(f"ConvTranspose2d: output_padding {self.output_padding} must "
                                 f"be smaller than stride {self.stride} or dilation "
                                 f"{self.dilation}")

    def _output_padding(self, x, output_size):
        if output_size is None:
            return self.output_padding
        size = tuple(output_size)[-2:]
        out = []
        for i in range(2):
            least = ((x.shape[2 + i] - 1) * self.stride[i] - 2 * self.padding[i]
                     + self.dilation[i] * (self.kernel_size[i] - 1) + 1)
            extra = size[i] - least
            if not 0 <= extra < max(self.stride[i], self.dilation[i]):
                raise ShapeError(f"ConvTranspose2d: output_size {list(size)} is not reachable "
                                 f"from an input of shape {list(x.shape)} (dim {i}: "
                                 f"{least} to {least + max(self.stride[i], self.dilation[i]) - 1})")
            out.append(extra)
        return tuple(out)

    def forward(self, x, output_size=None):
        return F.conv_transpose2d(
            x, self.weight, self.bias, stride=self.stride, padding=self.padding,
            output_padding=self._output_padding(x, output_size), groups=self.groups,
            dilation=self.dilation)
