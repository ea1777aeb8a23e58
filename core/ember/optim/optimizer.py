"""Optimizer: Burn's functional step over ember modules, PyTorch's update rules.

`model = opt.step(model, grads)` updates every trainable parameter that has a gradient:
the update runs on the parameter's inner backend (`p.inner()`, no graph), and the result
goes back with `p.with_value(new)`, a fresh autodiff leaf with the same param id. The module
is changed in place (Module.map_params) and returned. Optimizer state (moments, step counts)
is keyed by param id, created at a parameter's first update, on its inner backend.

Subclasses give `_update(x, g, state, lr) -> new x` for one parameter (x, g: Tensors on the
inner backend; state: that parameter's dict, which the update rebinds) and `_state_keys()`.
"""

import numbers

import numpy as np

from ..autodiff import Gradients, no_grad
from ..capture import carry, on_replay
from ..errors import ShapeError
from ..tensor import Tensor, _host
from .grads import GradientsParams, OptimError, check_module
from .lr import Constant, as_scheduler

__all__ = ["Optimizer"]


class Optimizer:
    """Base class of SGD, Adam, AdamW, RMSProp and AdaGrad.

    lr: a float or a scheduler from ember.optim.lr; the scheduler is advanced once after
        each step (see ember.optim.lr).
    grad_clip: None, ClipNorm(max_norm) or ClipValue(value) (or any function from
        GradientsParams to GradientsParams), applied to the gradients before the update.
    """

    def __init__(self, lr, grad_clip=None):
        self.lr = lr
        if grad_clip is not None and not callable(grad_clip):
            raise TypeError(f"{type(self).__name__}: grad_clip must be ClipNorm(...), "
                            f"ClipValue(...) or a function of GradientsParams, got "
                            f"{type(grad_clip).__name__}")
        self.grad_clip = grad_clip
        self.state = {}        # param_id -> {name: Tensor | int}
        self.step_count = 0    # how many times step() ran

    # ---- the learning rate -------------------------------------------------------------
    @property
    def lr(self):
        """The learning rate the next step will use (a float). Assign a float or a
        scheduler to change it."""
        return float(self.scheduler.get_lr())

    @lr.setter
    def lr(self, value):
        self.scheduler = as_scheduler(value, type(self).__name__)

    # ---- the step ------------------------------------------------------------------------
    def step(self, model, grads):
        """Update model's parameters from `grads` (GradientsParams, or the Gradients of
        loss.backward()); returns the model (updated in place, same param ids)."""
        who = f"{type(self).__name__}.step"
        check_module(model, who)
        if isinstance(grads, Gradients):
            grads = GradientsParams.from_grads(grads, model)
        elif not isinstance(grads, GradientsParams):
            raise TypeError(f"{who}: expected GradientsParams (optim.GradientsParams."
                            f"from_grads(grads, model)) or Gradients, got "
                            f"{type(grads).__name__}")
        params = {p.param_id: (name, p) for name, p in model.named_params()}
        unknown = [k for k in grads.ids() if k not in params]
        if unknown:
            raise OptimError(f"{who}: {len(unknown)} of the {len(grads)} gradients belong to "
                             f"parameters that are not in this {type(model).__name__} (param "
                             f"ids {sorted(unknown)[:5]}); were they computed from another "
                             "model? Build them with GradientsParams.from_grads(grads, model) "
                             "for the model you step")
        for k, g in grads.items():
            name, p = params[k]
            if g.shape != p.shape:
                raise ShapeError(f"{who}: the gradient of {name} has shape {list(g.shape)}, "
                                 f"the parameter {list(p.shape)}")
        if self.grad_clip is not None:  # the norm counts only what this step updates
            grads = self.grad_clip(GradientsParams(
                {k: g for k, g in grads.items() if params[k][1].trainable}))
        lr = float(self.scheduler.get_lr())
        if not isinstance(self.scheduler, Constant) and not self._lr_is_live():
            _host("a learning-rate schedule (a replay would keep the captured rate)")

        def update(name, p):
            if not p.trainable:
                return p
            g = grads.get(p.param_id)
            if g is None:
                return p
            x = p.inner()
            if g.backend != x.backend:
                g = g.to(x.backend)
            if g.dtype != x.dtype:
                g = g.cast(x.dtype)
            state = self.state.get(p.param_id)
            if state is None:
                state = self.state[p.param_id] = self._init_state(x)
            else:
                _follow(state, x)
            # (under ember.jit, replays read and store the state in self.state as this does)
            return p.with_value(carry(state, lambda: self._update(x, g, state, lr)))

        with no_grad():
            model.map_params(update)
        self._advance()
        on_replay(self._advance)
        return model

    def _lr_is_live(self):
        """True where _update reads the rate only through live() scalars, which a replay of
        ember.jit computes anew (so a schedule can be replayed); else a capture refuses it."""
        return False

    def _advance(self):
        self.step_count += 1
        self.scheduler.step()

    def _init_state(self, x):
        """The state of a parameter before its first update."""
        return {}

    def _state_keys(self):
        """The keys a parameter's state has once it has been updated."""
        return set()

    _scalar_keys = frozenset({"step"})  # state entries that are numbers; the rest are tensors

    def _export(self, state):
        """A parameter's state as state_dict saves it: the keys of _state_keys(), each tensor
        in the parameter's shape (an optimizer may keep its state in another form)."""
        return state

    def _import(self, state, x):
        """The inverse of _export, for the parameter x (on its inner backend)."""
        return state

    def _update(self, x, g, state, lr):
        raise NotImplementedError

    def reset(self):
        """Forget all state (moments, step counts) and restart the scheduler's count."""
        self.state.clear()
        self.step_count = 0

    # ---- checkpoints ---------------------------------------------------------------------
    def state_dict(self, model):
        """{"step_count": int, "lr": the scheduler's state, "state": {param name: {key:
        int | float | np.ndarray}}}: plain Python numbers and NumPy arrays only, keyed by
        the parameter names of `model` (ids do not survive a restart; names do)."""
        check_module(model, f"{type(self).__name__}.state_dict")
        names = {}
        for name, p in model.named_params():
            names.setdefault(p.param_id, name)
        per_param = {}
        for k, state in self.state.items():
            if k not in names:
                raise OptimError(f"{type(self).__name__}.state_dict: the optimizer holds state "
                                 f"for param id {k}, which is not in this {type(model).__name__}"
                                 "; pass the model this optimizer steps")
            per_param[names[k]] = {key: _to_plain(v) for key, v in self._export(state).items()}
        out = {"step_count": self.step_count, "state": per_param}
        sched = getattr(self.scheduler, "state_dict", None)
        out["lr"] = sched() if callable(sched) else {}
        return out

    def load_state_dict(self, state, model):
        """Restore what state_dict(model) gave (possibly for another instance of the same
        model: parameters are matched by name). Replaces all current state."""
        who = f"{type(self).__name__}.load_state_dict"
        check_module(model, who)
        if not isinstance(state, dict) or not {"step_count", "state", "lr"} <= set(state):
            raise OptimError(f"{who}: expected the dict that state_dict(model) returns, with "
                             "keys 'step_count', 'state' and 'lr'")
        params = dict(model.named_params())
        missing = [n for n in state["state"] if n not in params]
        if missing:
            raise OptimError(f"{who}: the state has parameters this {type(model).__name__} "
                             f"does not: {missing[:5]}")
        want = self._state_keys()
        loaded = {}
        for name, entry in state["state"].items():
            p = params[name]
            if set(entry) != want:
                raise OptimError(f"{who}: the state of {name} has keys {sorted(entry)}, "
                                 f"{self!r} keeps {sorted(want)}; was it saved from another "
                                 "optimizer or other settings?")
            x = p.inner()
            restored = {}
            for key, value in entry.items():
                if key not in self._scalar_keys:
                    if tuple(value.shape) != tuple(p.shape):
                        raise ShapeError(f"{who}: {name}'s {key} has shape {list(value.shape)}, "
                                         f"the parameter {list(p.shape)}")
                    restored[key] = Tensor.from_data(np.asarray(value), backend=x.backend,
                                                     dtype=x.dtype)
                else:
                    restored[key] = _from_plain(value)
            loaded[p.param_id] = self._import(restored, x)
        sched = getattr(self.scheduler, "load_state_dict", None)
        if callable(sched):
            sched(state["lr"])
        self.state = loaded
        self.step_count = int(_from_plain(state["step_count"]))

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self._hparams().items())
        return f"{type(self).__name__}({args})"

    def _hparams(self):
        out = {"lr": self.lr if isinstance(self.scheduler, Constant) else self.scheduler}
        out.update((k, v) for k, v in vars(self).items()
                   if k not in ("scheduler", "state", "step_count", "grad_clip"))
        if self.grad_clip is not None:
            out["grad_clip"] = self.grad_clip
        return out


def _follow(state, x):
    """Move state tensors along when the model was moved to another backend (.to())."""
    for key, v in state.items():
        if isinstance(v, Tensor) and v.backend != x.backend:
            state[key] = v.to(x.backend)


def _to_plain(value):
    if isinstance(value, Tensor):
        return np.array(value.to_numpy(), copy=True)
    return value


def _from_plain(value):
    if isinstance(value, np.ndarray | np.generic):
        value = value.item()
    if isinstance(value, numbers.Integral):
        return int(value)
    return value


def lerp(a, b, w):
    """a + w * (b - a), computed as torch.lerp does (one form each side of w = 0.5), so
    moments match torch's bit for bit where the element ops do."""
    if w < 0.5:
        return a + (b - a) * w
    return b - (b - a) * (1 - w)
