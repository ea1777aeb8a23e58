"""Lstm and Gru, multi-layer and optionally bidirectional, with PyTorch's parameters
(weight_ih_l{k}[_reverse], weight_hh_l{k}, bias_ih_l{k}, bias_hh_l{k}; gate order i, f, g, o
for the LSTM and r, z, n for the GRU) and PyTorch's results: (output, h_n) for Gru and
(output, (h_n, c_n)) for Lstm.

ember is batch first: batch_first=True is the default (PyTorch's is False), so inputs are
[B, T, input_size] and output [B, T, D * hidden_size]; h_n and c_n are
[D * num_layers, B, hidden_size] either way, as in PyTorch. Unbatched [T, input_size] works.
"""

import math

from ..errors import ShapeError
from ..tensor import Tensor
from . import init
from .dropout import dropout
from .module import Module, Param


class _Rnn(Module):
    _gates = 1

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=True,
                 dropout=0.0, bidirectional=False, proj_size=0, backend=None, dtype=None):
        super().__init__()
        if proj_size:
            raise NotImplementedError(f"{type(self).__name__}: proj_size is not supported")
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, dropout
        self.bidirectional = bidirectional
        # PyTorch: every weight and bias from U(-1/sqrt(hidden), 1/sqrt(hidden))
        k = 1 / math.sqrt(hidden_size) if hidden_size > 0 else 0.0
        G = self._gates * hidden_size
        dirs = 2 if bidirectional else 1
        for layer in range(num_layers):
            n_in = input_size if layer == 0 else hidden_size * dirs
            for suffix in ("", "_reverse")[:dirs]:
                def new(shape):
                    return Param(init.uniform(shape, -k, k, backend=backend, dtype=dtype))
                setattr(self, f"weight_ih_l{layer}{suffix}", new([G, n_in]))
                setattr(self, f"weight_hh_l{layer}{suffix}", new([G, hidden_size]))
                if bias:
                    setattr(self, f"bias_ih_l{layer}{suffix}", new([G]))
                    setattr(self, f"bias_hh_l{layer}{suffix}", new([G]))

    def _weights(self, layer, suffix):
        get = lambda n: getattr(self, f"{n}_l{layer}{suffix}", None)
        return get("weight_ih"), get("weight_hh"), get("bias_ih"), get("bias_hh")

    def _initial(self, x, hx):
        dirs = 2 if self.bidirectional else 1
        shape = (self.num_layers * dirs, x.shape[0], self.hidden_size)
        if hx is None:
            return Tensor.zeros(shape, x.backend, x.dtype)
        if tuple(hx.shape) != shape:
            raise ShapeError(f"{type(self).__name__}: initial state of shape {list(hx.shape)}, "
                             f"expected {list(shape)}")
        return hx if hx.backend == x.backend else hx.to(x.backend)

    def _run(self, x, states):
        """x [B, T, F] batch first; states: a list per state kind of [L*D, B, H] tensors.
        Returns output [B, T, D*H] and the final states, the same structure."""
        dirs = 2 if self.bidirectional else 1
        T = x.shape[1]
        finals = [[] for _ in states]
        for layer in range(self.num_layers):
            outs = []
            for d, suffix in enumerate(("", "_reverse")[:dirs]):
                w_ih, w_hh, b_ih, b_hh = self._weights(layer, suffix)
                xw = x.matmul(w_ih.transpose())  # every step's input projection at once
                if b_ih is not None:
                    xw = xw + b_ih
                state = [s[layer * dirs + d] for s in states]
                steps = [None] * T
                for t in (range(T - 1, -1, -1) if d else range(T)):
                    hw = state[0].matmul(w_hh.transpose())
                    if b_hh is not None:
                        hw = hw + b_hh
                    state = self._cell(xw[:, t], hw, state)
                    steps[t] = state[0]
                outs.append(Tensor.stack(steps, 1))
                for f, s in zip(finals, state):
                    f.append(s)
            x = outs[0] if dirs == 1 else Tensor.cat(outs, -1)
            if layer < self.num_layers - 1:
                x = dropout(x, self.dropout, self.training)
        return x, [Tensor.stack(f, 0) for f in finals]

    def _forward(self, x, hx):
        name = type(self).__name__
        if x.ndim not in (2, 3) or x.shape[-1] != self.input_size:
            raise ShapeError(f"{name}: expected input [B, T, {self.input_size}] (or unbatched "
                             f"[T, {self.input_size}]), got shape {list(x.shape)}")
        unbatched = x.ndim == 2
        if unbatched:
            x = x.unsqueeze(0)
            hx = [h.unsqueeze(1) for h in hx] if hx is not None else None
        elif not self.batch_first:
            x = x.swap_dims(0, 1)
        n_states = 2 if self._gates == 4 else 1
        hx = [None] * n_states if hx is None else list(hx)
        out, finals = self._run(x, [self._initial(x, h) for h in hx])
        if unbatched:
            return out.squeeze(0), [f.squeeze(1) for f in finals]
        if not self.batch_first:
            out = out.swap_dims(0, 1)
        return out, finals

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        s += f", batch_first={self.batch_first}"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s


class Lstm(_Rnn):
    """forward(x, hx=None) with hx = (h_0, c_0) -> (output, (h_n, c_n))."""

    _gates = 4

    def _cell(self, xw, hw, state):
        h, c = state
        H = self.hidden_size
        gates = xw + hw
        i = gates[:, :H].sigmoid()
        f = gates[:, H:2 * H].sigmoid()
        g = gates[:, 2 * H:3 * H].tanh()
        o = gates[:, 3 * H:].sigmoid()
        c = f * c + i * g
        return [o * c.tanh(), c]

    def forward(self, x, hx=None):
        out, (h, c) = self._forward(x, hx)
        return out, (h, c)


class Gru(_Rnn):
    """forward(x, hx=None) with hx = h_0 -> (output, h_n)."""

    _gates = 3

    def _cell(self, xw, hw, state):
        (h,) = state
        H = self.hidden_size
        r = (xw[:, :H] + hw[:, :H]).sigmoid()
        z = (xw[:, H:2 * H] + hw[:, H:2 * H]).sigmoid()
        n = (xw[:, 2 * H:] + r * hw[:, 2 * H:]).tanh()
        return [(1 - z) * n + z * h]

    def forward(self, x, hx=None):
        out, (h,) = self._forward(x, None if hx is None else [hx])
        return out, h
