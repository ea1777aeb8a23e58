"""RMSProp (centered or not, with momentum): torch.optim.RMSprop's update."""

from .optimizer import Optimizer, lerp

__all__ = ["RMSProp"]


class RMSProp(Optimizer):
    """torch.optim.RMSprop, step for step:

        v = alpha * v + (1 - alpha) * g * g
        avg = sqrt(v - gavg**2) (centered, gavg = lerp(gavg, g, 1 - alpha)) or sqrt(v), + eps
        buf = momentum * buf + g / avg; x = x - lr * buf   (momentum > 0)
        x = x - lr * g / avg                               (otherwise)
    """

    def __init__(self, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0,
                 centered=False, *, maximize=False, grad_clip=None):
        if alpha < 0 or eps < 0 or weight_decay < 0 or momentum < 0:
            raise ValueError(f"RMSProp: invalid alpha {alpha}, eps {eps}, weight_decay "
                             f"{weight_decay} or momentum {momentum}: each must be >= 0")
        super().__init__(lr, grad_clip)
        self.alpha, self.eps = float(alpha), float(eps)
        self.weight_decay, self.momentum = float(weight_decay), float(momentum)
        self.centered, self.maximize = centered, maximize

    def _init_state(self, x):
        state = {"step": 0, "square_avg": x.zeros_like()}
        if self.momentum > 0:
            state["momentum_buffer"] = x.zeros_like()
        if self.centered:
            state["grad_avg"] = x.zeros_like()
        return state

    def _state_keys(self):
        return ({"step", "square_avg"} | ({"momentum_buffer"} if self.momentum > 0 else set())
                | ({"grad_avg"} if self.centered else set()))

    def _update(self, x, g, state, lr):
        alpha = self.alpha
        if self.maximize:
            g = -g
        state["step"] += 1
        if self.weight_decay != 0:
            g = g + x * self.weight_decay
        v = state["square_avg"] = state["square_avg"] * alpha + g * (1 - alpha) * g
        if self.centered:
            gavg = state["grad_avg"] = lerp(state["grad_avg"], g, 1 - alpha)
            avg = (v - gavg * gavg).sqrt()
        else:
            avg = v.sqrt()
        avg = avg + self.eps
        if self.momentum > 0:
            buf = state["momentum_buffer"] = state["momentum_buffer"] * self.momentum + g / avg
            return x - buf * lr
        return x + g * -lr / avg


RMSprop = RMSProp  # PyTorch's spelling
