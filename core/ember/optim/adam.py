"""Adam and AdamW: torch.optim.Adam / AdamW's update (AMSGrad included)."""

from ..capture import live
from ..ops import prims
from ..tensor import Tensor, _apply, _host
from .optimizer import Optimizer, lerp

__all__ = ["Adam", "AdamW"]


class Adam(Optimizer):
    """torch.optim.Adam, step for step (weight_decay is L2 added to the gradient; AdamW
    decouples it):

        m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
        x = x - lr / (1 - beta1**t) * m / (sqrt(v) / sqrt(1 - beta2**t) + eps)
    """

    _decoupled = False

    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 amsgrad=False, *, maximize=False, grad_clip=None):
        name = type(self).__name__
        beta1, beta2 = betas
        if not 0.0 <= beta1 < 1.0 or not 0.0 <= beta2 < 1.0:
            raise ValueError(f"{name}: invalid betas {betas}: each must be in [0, 1)")
        if eps < 0 or weight_decay < 0:
            raise ValueError(f"{name}: invalid eps {eps} or weight_decay {weight_decay}")
        super().__init__(lr, grad_clip)
        self.betas = (float(beta1), float(beta2))
        self.eps, self.weight_decay = float(eps), float(weight_decay)
        self.amsgrad, self.maximize = amsgrad, maximize

    # Without AMSGrad a parameter's moments are kept as the last result of the fused `adam`
    # op (ops/optim.py), [x, m, v] in one tensor ("x_m_v"), which the next step reads back;
    # state_dict shows them as torch's exp_avg / exp_avg_sq
    def _init_state(self, x):
        if not self.amsgrad:
            return {"step": 0, "x_m_v": Tensor.zeros((3,) + x.shape, x.backend, x.dtype)}
        return {"step": 0, "exp_avg": x.zeros_like(), "exp_avg_sq": x.zeros_like(),
                "max_exp_avg_sq": x.zeros_like()}

    def _export(self, state):
        if self.amsgrad:
            return state
        x_m_v = state["x_m_v"]
        return {"step": state["step"], "exp_avg": x_m_v[1], "exp_avg_sq": x_m_v[2]}

    def _import(self, state, x):
        if self.amsgrad:
            return state
        return {"step": state["step"],
                "x_m_v": Tensor.stack([x, state["exp_avg"], state["exp_avg_sq"]])}

    def _state_keys(self):
        return {"step", "exp_avg", "exp_avg_sq"} | ({"max_exp_avg_sq"} if self.amsgrad else set())

    def _lr_is_live(self):  # the fused step's rate is live(); AdamW's decay is not
        return not self.amsgrad and not (self._decoupled and self.weight_decay != 0)

    def _update(self, x, g, state, lr):
        beta1, beta2 = self.betas
        if self.maximize:
            g = -g
        state["step"] = step = state["step"] + 1
        if self.weight_decay != 0:
            if self._decoupled:
                x = x * (1 - lr * self.weight_decay)
            else:
                g = g + x * self.weight_decay
        if not self.amsgrad:  # one op: torch's arithmetic (see ops/optim.py)
            # (under ember.jit a replay computes these anew, for the step it takes)
            bc2_sqrt, rate = live(self._scalars(step, lr),
                                  lambda: self._scalars(state["step"] + 1, self.lr))
            x_m_v = state["x_m_v"] = _apply(
                prims.adam, x, g, state["x_m_v"], 1 - beta1, beta2, bc2_sqrt, self.eps, rate)
            return _apply(prims.slice, x_m_v, starts=(0,) * x_m_v.ndim,
                          stops=(1,) + x.shape, steps=(1,) * x_m_v.ndim).reshape(x.shape)
        _host("Adam(amsgrad=True)'s step-dependent scalars")  # (ember.jit refuses to capture)
        m = state["exp_avg"] = lerp(state["exp_avg"], g, 1 - beta1)
        v = state["exp_avg_sq"] = state["exp_avg_sq"] * beta2 + g * (1 - beta2) * g
        v = state["max_exp_avg_sq"] = state["max_exp_avg_sq"].maximum(v)
        # torch's x - step_size * m / (sqrt(v) / sqrt(1 - beta2**t) + eps), with -1 / step_size
        # folded into both terms of the denominator: the scalars merge, five ops on the
        # tensors, not six (per parameter and step, as the ops, not the flops, cost here)
        step_size = lr / (1 - beta1 ** step)
        if step_size == 0:  # lr 0 (a warmup's start): torch's form, which has no 1 / lr
            return x + m * -step_size / (v.sqrt() / (1 - beta2 ** step) ** 0.5 + self.eps)
        scale = -1.0 / (step_size * (1 - beta2 ** step) ** 0.5)
        return x + m / (v.sqrt() * scale + self.eps * (-1.0 / step_size))


    def _scalars(self, step, lr):
        beta1, beta2 = self.betas
        return (1 - beta2 ** step) ** 0.5, -lr / (1 - beta1 ** step)


class AdamW(Adam):
    """torch.optim.AdamW: Adam with decoupled weight decay (x = x * (1 - lr * weight_decay)
    before the Adam step), default weight_decay 0.01."""

    _decoupled = True

    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False, grad_clip=None):
        super().__init__(lr, betas, eps, weight_decay, amsgrad, maximize=maximize,
                         grad_clip=grad_clip)
