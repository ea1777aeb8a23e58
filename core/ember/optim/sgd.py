"""SGD with momentum, dampening, Nesterov and weight decay: torch.optim.SGD's update."""

from .optimizer import Optimizer

__all__ = ["SGD"]


class SGD(Optimizer):
    """torch.optim.SGD, step for step:

        g = grad + weight_decay * x
        buf = g (first step), else momentum * buf + (1 - dampening) * g
        g = g + momentum * buf (nesterov) or buf (momentum != 0)
        x = x - lr * g
    """

    def __init__(self, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False, *, maximize=False, grad_clip=None):
        if momentum < 0:
            raise ValueError(f"SGD: invalid momentum value: {momentum}")
        if weight_decay < 0:
            raise ValueError(f"SGD: invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: Nesterov momentum requires a momentum and zero dampening")
        super().__init__(lr, grad_clip)
        self.momentum, self.dampening = float(momentum), float(dampening)
        self.weight_decay, self.nesterov, self.maximize = float(weight_decay), nesterov, maximize

    def _state_keys(self):
        return {"momentum_buffer"} if self.momentum != 0 else set()

    def _update(self, x, g, state, lr):
        if self.maximize:
            g = -g
        if self.weight_decay != 0:
            g = g + x * self.weight_decay
        if self.momentum != 0:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = g
            else:
                buf = buf * self.momentum + g * (1 - self.dampening)
            state["momentum_buffer"] = buf
            g = g + buf * self.momentum if self.nesterov else buf
        return x - g * lr
