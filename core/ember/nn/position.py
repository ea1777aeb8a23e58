"""Position encodings: sinusoidal PositionalEncoding (added to [B, T, D]) and rotary RoPE
(applied to [..., T, D], e.g. [B, H, T, D]). Their tables are computed, not learned: they are
not parameters (nothing to save), and are built once per backend and dtype."""

import math

import numpy as np

from ..errors import ShapeError
from ..tensor import Tensor
from .dropout import Dropout
from .module import Module


class _Tables:
    """Lazily built constant tables, cached per (backend, dtype)."""

    def __init__(self, build):
        self._build, self._cache = build, {}

    def get(self, backend, dtype):
        key = (backend, dtype)
        if key not in self._cache:
            self._cache[key] = [Tensor.from_data(a.astype(dtype), backend, dtype)
                                for a in self._build()]
        return self._cache[key]

    def __deepcopy__(self, memo):
        return _Tables(self._build)


def sinusoids(length, d_model, max_timescale=10000.0):
    """The [length, d_model] table of "Attention is all you need": sin on even columns,
    cos on odd ones (float64 NumPy)."""
    pos = np.arange(length, dtype=np.float64)[:, None]
    div = np.exp(np.arange(0, d_model, 2, dtype=np.float64) * (-math.log(max_timescale)
                                                                 / d_model))
    table = np.zeros((length, d_model))
    table[:, 0::2] = np.sin(pos * div)
    table[:, 1::2] = np.cos(pos * div)[:, :d_model // 2]
    return table


class PositionalEncoding(Module):
    """x [B, T, d_model] -> dropout(x + table[:T]) with the sinusoidal table (batch first;
    the PyTorch tutorial's version takes [T, B, D] and stores the table as buffer 'pe',
    which here is not saved)."""

    def __init__(self, d_model, dropout=0.1, max_len=5000, max_timescale=10000.0):
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        self.dropout = Dropout(dropout)
        self.max_timescale = max_timescale
        self._table = _Tables(lambda: [sinusoids(max_len, d_model, max_timescale)])

    def forward(self, x, start=0):
        T = x.shape[-2]
        if x.shape[-1] != self.d_model:
            raise ShapeError(f"PositionalEncoding: expected a last dim of {self.d_model}, got "
                             f"shape {list(x.shape)}")
        if start + T > self.max_len:
            raise ShapeError(f"PositionalEncoding: positions up to {start + T} exceed max_len "
                             f"{self.max_len}")
        (table,) = self._table.get(x.backend, x.dtype)
        return self.dropout(x + table[start:start + T])

    def extra_repr(self):
        return f"d_model={self.d_model}, max_len={self.max_len}"


class RoPE(Module):
    """Rotary position embedding (Su et al.) over x [..., T, dim]: the second-to-last dim is
    the position, so [B, H, T, D] (heads before time) and [B, T, D] work as they are; swap
    dims 1 and 2 of a [B, T, H, D] tensor first.

    Pairs are rotated by angle pos * theta^(-2i/dim). interleaved=True rotates
    (x[2i], x[2i+1]) (Meta's LLaMA, Burn, torchtune); interleaved=False rotates
    (x[i], x[i + dim/2]) (GPT-NeoX, Hugging Face). forward(x, start=0): `start` is the position
    of the first row (for decoding with a cache)."""

    def __init__(self, dim, max_len=4096, theta=10000.0, interleaved=True):
        super().__init__()
        if dim % 2:
            raise ShapeError(f"RoPE: dim must be even, got {dim}")
        self.dim, self.max_len, self.theta, self.interleaved = dim, max_len, theta, interleaved

        def build():
            freqs = theta ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
            angles = np.arange(max_len, dtype=np.float64)[:, None] * freqs  # [T, dim/2]
            return [np.cos(angles), np.sin(angles)]
        self._table = _Tables(build)

    def forward(self, x, start=0):
        T, D = x.shape[-2], x.shape[-1]
        if D != self.dim:
            raise ShapeError(f"RoPE: expected a last dim of {self.dim}, got shape "
                             f"{list(x.shape)}")
        if start + T > self.max_len:
            raise ShapeError(f"RoPE: positions up to {start + T} exceed max_len {self.max_len}")
        cos, sin = (t[start:start + T] for t in self._table.get(x.backend, x.dtype))
        if self.interleaved:
            pairs = x.reshape(x.shape[:-1] + (D // 2, 2))
            a, b = pairs[..., 0], pairs[..., 1]
            out = Tensor.stack([a * cos - b * sin, a * sin + b * cos], -1)
            return out.reshape(x.shape)
        a, b = x[..., :D // 2], x[..., D // 2:]
        return Tensor.cat([a * cos - b * sin, b * cos + a * sin], -1)

    def extra_repr(self):
        return (f"dim={self.dim}, max_len={self.max_len}, theta={self.theta}, "
                f"interleaved={self.interleaved}")


RotaryEncoding = RoPE  # Burn's name
