"""AdaGrad: torch.optim.Adagrad's update."""

from ..tensor import _host
from .optimizer import Optimizer

__all__ = ["AdaGrad"]


class AdaGrad(Optimizer):
    """torch.optim.Adagrad, step for step:

        clr = lr / (1 + (t - 1) * lr_decay)
        s = s + g * g;  x = x - clr * g / (sqrt(s) + eps)
    """

    def __init__(self, lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0,
                 eps=1e-10, *, maximize=False, grad_clip=None):
        if lr_decay < 0 or weight_decay < 0 or initial_accumulator_value < 0 or eps < 0:
            raise ValueError("AdaGrad: lr_decay, weight_decay, initial_accumulator_value and "
                             "eps must be >= 0")
        super().__init__(lr, grad_clip)
        self.lr_decay, self.weight_decay = float(lr_decay), float(weight_decay)
        self.initial_accumulator_value, self.eps = float(initial_accumulator_value), float(eps)
        self.maximize = maximize

    def _init_state(self, x):
        return {"step": 0, "sum": x.full_like(self.initial_accumulator_value)}

    def _state_keys(self):
        return {"step", "sum"}

    def _update(self, x, g, state, lr):
        if self.maximize:
            g = -g
        state["step"] = step = state["step"] + 1
        if self.weight_decay != 0:
            g = g + x * self.weight_decay
        if self.lr_decay:
            _host("AdaGrad's lr_decay (a rate that changes every step)")  # (for ember.jit)
        clr = lr / (1 + (step - 1) * self.lr_decay)
        s = state["sum"] = state["sum"] + g * g
        return x + g * -clr / (s.sqrt() + self.eps)


Adagrad = AdaGrad  # PyTorch's spelling
