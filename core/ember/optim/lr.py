"""Learning-rate schedulers: small values an optimizer reads its lr from.

Each takes PyTorch's arguments with the optimizer replaced by the base learning rate
(`Step(0.1, step_size=30, gamma=0.1)` is `StepLR(SGD(lr=0.1), step_size=30, gamma=0.1)`), and
follows torch.optim.lr_scheduler's numbers step by step where a twin exists:

    sched.get_lr()   the learning rate to use now (torch's `get_last_lr()[0]`)
    sched.step()     advance by one step; returns the new learning rate
    sched.last_epoch how many times step() was called (torch's name; it counts steps)

The one rule: an optimizer given a scheduler (`optim.Adam(lr=Cosine(1e-3, T_max=1000))`) uses
`get_lr()` for an update and then calls `step()` once, so each `opt.step(model, grads)` is one
scheduler step, exactly like `opt.step(); sched.step()` in a PyTorch loop (and like Burn, where
the learner steps the scheduler once per optimizer step). Do not step it yourself as well.

Values are closed forms of `last_epoch` (no drift from repeated multiplication); state_dict()
holds plain numbers only, so checkpoints need no pickling.
"""

import math
import numbers

__all__ = ["Constant", "Cosine", "Exponential", "Lambda", "Linear", "LinearWarmup",
           "LRScheduler", "Noam", "Step", "as_scheduler"]


class LRScheduler:
    """Base class: subclasses define `get_lr()` from `self.last_epoch` (and may override
    `step()` when they wrap another scheduler)."""

    def __init__(self):
        self.last_epoch = 0

    def get_lr(self):
        raise NotImplementedError

    def step(self):
        self.last_epoch += 1
        return self.get_lr()

    # ---- checkpoints ---------------------------------------------------------------------
    def state_dict(self):
        """Every number of this scheduler (counter and settings), and nested schedulers'
        state as nested dicts: plain Python values only."""
        out = {}
        for key, value in vars(self).items():
            if isinstance(value, LRScheduler):
                out[key] = value.state_dict()
            elif isinstance(value, (bool, numbers.Number)):
                out[key] = value
        return out

    def load_state_dict(self, state):
        mine = self.state_dict()
        if set(state) != set(mine):
            raise ValueError(f"{type(self).__name__}.load_state_dict: the state has keys "
                             f"{sorted(state)}, this scheduler has {sorted(mine)}; was it "
                             "saved from another kind of scheduler?")
        for key, value in state.items():
            if isinstance(mine[key], dict):
                getattr(self, key).load_state_dict(value)
            else:
                setattr(self, key, _plain(value))

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


def _plain(value):
    """NumPy scalars and 0-d arrays (what a record file gives back) as Python numbers."""
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        value = value.item()
    return value


def _check_lr(lr, who):
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real):
        raise TypeError(f"{who}: the learning rate must be a number, got {type(lr).__name__}")
    if not lr >= 0:
        raise ValueError(f"{who}: invalid learning rate {lr}")
    return float(lr)


def as_scheduler(lr, who="optimizer"):
    """A float becomes Constant(lr); a scheduler (anything with get_lr() and step()) is kept."""
    if callable(getattr(lr, "get_lr", None)) and callable(getattr(lr, "step", None)):
        return lr
    if isinstance(lr, numbers.Real) and not isinstance(lr, bool):
        return Constant(_check_lr(lr, who))
    raise TypeError(f"{who}: lr must be a float or a scheduler from ember.optim.lr "
                    f"(Step, Cosine, ...), got {type(lr).__name__}")


class Constant(LRScheduler):
    """The same learning rate at every step (what a float lr means)."""

    def __init__(self, lr):
        super().__init__()
        self.lr = _check_lr(lr, "Constant")

    def get_lr(self):
        return self.lr


class Step(LRScheduler):
    """lr * gamma ** (steps // step_size): torch's StepLR."""

    def __init__(self, lr, step_size, gamma=0.1):
        super().__init__()
        if int(step_size) != step_size or step_size < 1:
            raise ValueError(f"Step: step_size must be a positive integer, got {step_size}")
        self.base_lr, self.step_size, self.gamma = _check_lr(lr, "Step"), int(step_size), gamma

    def get_lr(self):
        return self.base_lr * self.gamma ** (self.last_epoch // self.step_size)


class Exponential(LRScheduler):
    """lr * gamma ** steps: torch's ExponentialLR."""

    def __init__(self, lr, gamma):
        super().__init__()
        self.base_lr, self.gamma = _check_lr(lr, "Exponential"), gamma

    def get_lr(self):
        return self.base_lr * self.gamma ** self.last_epoch


class Cosine(LRScheduler):
    """Cosine annealing from lr down to eta_min over T_max steps (torch's CosineAnnealingLR,
    whose closed form this is: past T_max the cosine rises again, as torch's does)."""

    def __init__(self, lr, T_max, eta_min=0.0):  # noqa: N803  (PyTorch's argument name)
        super().__init__()
        if T_max <= 0:
            raise ValueError(f"Cosine: T_max must be positive, got {T_max}")
        self.base_lr, self.T_max, self.eta_min = _check_lr(lr, "Cosine"), T_max, eta_min

    def get_lr(self):
        cos = math.cos(math.pi * self.last_epoch / self.T_max)
        return self.eta_min + (self.base_lr - self.eta_min) * (1 + cos) / 2


class Linear(LRScheduler):
    """lr times a factor going linearly from start_factor to end_factor over total_iters
    steps, then staying there: torch's LinearLR."""

    def __init__(self, lr, start_factor=1.0 / 3, end_factor=1.0, total_iters=5):
        super().__init__()
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise ValueError("Linear: start_factor must be in (0, 1] and end_factor in [0, 1], "
                             f"got {start_factor} and {end_factor}")
        self.base_lr = _check_lr(lr, "Linear")
        self.start_factor, self.end_factor, self.total_iters = (start_factor, end_factor,
                                                                total_iters)

    def get_lr(self):
        done = min(self.last_epoch, self.total_iters) / self.total_iters if self.total_iters \
            else 1.0
        return self.base_lr * (self.start_factor + (self.end_factor - self.start_factor) * done)


class LinearWarmup(LRScheduler):
    """Warm up linearly into `lr` (a float, or another scheduler) over warmup_steps steps,
    then follow it: step t < warmup_steps uses lr * (start_factor + (1 - start_factor) *
    t / warmup_steps); from step warmup_steps on, the wrapped scheduler runs from its own
    step 0. start_factor defaults to 1 / warmup_steps (never a zero step).

    Its torch twin is SequentialLR([LinearLR(start_factor, 1.0, warmup_steps), after],
    milestones=[warmup_steps]); with a float lr, LinearLR alone."""

    def __init__(self, lr, warmup_steps, start_factor=None):
        super().__init__()
        if int(warmup_steps) != warmup_steps or warmup_steps < 0:
            raise ValueError(f"LinearWarmup: warmup_steps must be an integer >= 0, got "
                             f"{warmup_steps}")
        self.after = as_scheduler(lr, "LinearWarmup")
        self.warmup_steps = int(warmup_steps)
        if start_factor is None:
            start_factor = 1.0 / max(self.warmup_steps, 1)
        if not 0 <= start_factor <= 1:
            raise ValueError(f"LinearWarmup: start_factor must be in [0, 1], got {start_factor}")
        self.start_factor = start_factor

    def get_lr(self):
        lr = self.after.get_lr()
        if self.last_epoch >= self.warmup_steps:
            return lr
        f = self.start_factor
        return lr * (f + (1 - f) * self.last_epoch / self.warmup_steps)

    def step(self):
        self.last_epoch += 1
        if self.last_epoch > self.warmup_steps:
            self.after.step()
        return self.get_lr()


class Noam(LRScheduler):
    """The Transformer's schedule (Vaswani et al.; Burn's NoamLrScheduler): factor *
    d_model**-0.5 * min(s**-0.5, s * warmup_steps**-1.5) with s = steps + 1, so the first
    update uses s = 1. Rises linearly for warmup_steps steps, then decays as 1/sqrt(s)."""

    def __init__(self, d_model, warmup_steps=4000, factor=1.0):
        super().__init__()
        if d_model <= 0 or warmup_steps <= 0:
            raise ValueError(f"Noam: d_model and warmup_steps must be positive, got {d_model} "
                             f"and {warmup_steps}")
        self.d_model, self.warmup_steps, self.factor = d_model, warmup_steps, factor

    def get_lr(self):
        s = self.last_epoch + 1
        return self.factor * self.d_model ** -0.5 * min(s ** -0.5, s * self.warmup_steps ** -1.5)


class Lambda(LRScheduler):
    """lr * lr_lambda(steps): torch's LambdaLR (the function is not part of state_dict)."""

    def __init__(self, lr, lr_lambda):
        super().__init__()
        if not callable(lr_lambda):
            raise TypeError("Lambda: lr_lambda must be a function of the step count")
        self.base_lr, self.lr_lambda = _check_lr(lr, "Lambda"), lr_lambda

    def get_lr(self):
        return self.base_lr * self.lr_lambda(self.last_epoch)
