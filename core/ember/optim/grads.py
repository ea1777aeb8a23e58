"""GradientsParams: the gradients of a module's parameters, keyed by param id (Burn's
GradientsParams), and GradientsAccumulator for gradient accumulation.

Both are plain values: the tensors inside live on the parameters' inner backend (NdArray
under Autodiff(NdArray())), carry no graph, and can be built in one thread, sent to another
and summed there (`gp1 + gp2`, `sum([...])`, `GradientsParams.average([...])`).
"""

import math
import numbers

from ..autodiff import Autodiff, Gradients, no_grad
from ..errors import BackendError, EmberError, ShapeError
from ..nn.module import Module, Param
from ..tensor import Tensor

__all__ = ["GradientsAccumulator", "GradientsParams", "OptimError", "check_module"]


class OptimError(EmberError, ValueError):
    """Gradients or optimizer state that do not belong to the module they are used with."""


def check_module(module, who):
    if not isinstance(module, Module):
        raise TypeError(f"{who}: expected an nn.Module, got {type(module).__name__}"
                        + (" (the arguments are (model, grads))"
                           if isinstance(module, (Gradients, GradientsParams)) else ""))


def _key(param):
    if isinstance(param, Param):
        return param.param_id
    if isinstance(param, int) and not isinstance(param, bool):
        return param
    raise TypeError(f"GradientsParams: expected an nn.Param or a param id, got "
                    f"{type(param).__name__}")


class GradientsParams:
    """param_id -> gradient Tensor (on the parameter's inner backend, no graph)."""

    __slots__ = ("_grads",)

    def __init__(self, grads=None):
        self._grads = {}
        for k, g in dict(grads or {}).items():
            if not isinstance(g, Tensor):
                raise TypeError(f"GradientsParams: the gradient of param {k} is a "
                                f"{type(g).__name__}, not a Tensor")
            self._grads[_key(k)] = g

    @classmethod
    def from_grads(cls, grads, module):
        """The gradients in `grads` (from `loss.backward()`) of module's trainable params."""
        if not isinstance(grads, Gradients):
            raise TypeError(f"GradientsParams.from_grads: expected the Gradients that "
                            f"loss.backward() returns, got {type(grads).__name__}")
        check_module(module, "GradientsParams.from_grads")
        out, backends = {}, set()
        for _, p in module.named_parameters():
            backends.add(p.backend)
            if p.param_id not in out:
                g = grads.get(p)
                if g is not None:
                    out[p.param_id] = g
        if backends and not any(isinstance(b, Autodiff) for b in backends):
            raise BackendError(f"GradientsParams.from_grads: the parameters of this "
                               f"{type(module).__name__} live on {backends.pop()}, which "
                               "records no gradients; build the model with backend=Autodiff(...)"
                               " or move it with model.to(Autodiff(...))")
        if not out and len(grads):
            raise OptimError(f"GradientsParams.from_grads: none of the {len(grads)} gradients "
                             f"belongs to a parameter of this {type(module).__name__}; were "
                             "they computed from another model (or from a copy made before "
                             "the loss was computed)?")
        return cls(out)

    # ---- reading -------------------------------------------------------------------------
    def get(self, param):
        """The gradient of `param` (a Param or its id), or None."""
        return self._grads.get(_key(param))

    def __getitem__(self, param):
        return self._grads[_key(param)]

    def __contains__(self, param):
        return _key(param) in self._grads

    def __len__(self):
        return len(self._grads)

    def __iter__(self):
        return iter(self._grads)

    def ids(self):
        return self._grads.keys()

    def items(self):
        return self._grads.items()

    def remove(self, param):
        """Take out and return the gradient of `param` (None if absent)."""
        return self._grads.pop(_key(param), None)

    def map(self, fn):
        """A new GradientsParams with fn(param_id, grad) for each gradient."""
        with no_grad():
            return GradientsParams({k: fn(k, g) for k, g in self._grads.items()})

    def to(self, backend):
        return self.map(lambda k, g: g.to(backend))

    def __repr__(self):
        return f"GradientsParams({len(self._grads)} tensors)"

    # ---- arithmetic: summing and averaging -----------------------------------------------
    def __add__(self, other):
        if not isinstance(other, GradientsParams):
            return NotImplemented
        out = dict(self._grads)
        with no_grad():
            for k, g in other._grads.items():
                if k in out:
                    if out[k].shape != g.shape:
                        raise ShapeError(f"GradientsParams +: param {k} has gradients of shapes "
                                         f"{list(out[k].shape)} and {list(g.shape)}")
                    if g.backend != out[k].backend:
                        g = g.to(out[k].backend)
                    out[k] = out[k] + g
                else:
                    out[k] = g
        return GradientsParams(out)

    def __radd__(self, other):
        if isinstance(other, numbers.Number) and other == 0:  # sum([gp1, gp2, ...])
            return self
        return NotImplemented

    def __mul__(self, scale):
        if not isinstance(scale, numbers.Real):
            return NotImplemented
        return self.map(lambda k, g: g * float(scale))

    __rmul__ = __mul__

    def __truediv__(self, n):
        if not isinstance(n, numbers.Real):
            return NotImplemented
        return self.map(lambda k, g: g / float(n))

    @staticmethod
    def sum(grads_list):
        grads_list = list(grads_list)
        if not grads_list:
            return GradientsParams()
        total = grads_list[0]
        for gp in grads_list[1:]:
            total = total + gp
        return total

    @staticmethod
    def average(grads_list):
        """The mean of several GradientsParams (equal-size micro-batches of a mean loss: the
        gradient of the whole batch). A param missing from some counts as zero there."""
        grads_list = list(grads_list)
        if not grads_list:
            raise ValueError("GradientsParams.average: nothing to average")
        return GradientsParams.sum(grads_list) / len(grads_list)

    # ---- clipping (torch.nn.utils.clip_grad_norm_ / clip_grad_value_) ---------------------
    def norm(self, norm_type=2.0):
        """The norm of all gradients together, as if concatenated into one vector: a 0-d
        float32 Tensor (computed without reading back, so GPU backends need not sync)."""
        norm_type = float(norm_type)
        if not norm_type > 0:
            raise ValueError(f"GradientsParams.norm: norm_type must be > 0 or inf, got "
                             f"{norm_type}")
        grads = list(self._grads.values())
        if not grads:
            return Tensor.zeros([], dtype="float32")
        with no_grad():
            backend = grads[0].backend
            norms = Tensor.stack([_norm(g, norm_type).cast("float32").to(backend)
                                  for g in grads])
            return _norm(norms, norm_type)

    def clip_norm(self, max_norm, norm_type=2.0):
        """All gradients scaled by min(1, max_norm / (total_norm + 1e-6)), as
        torch.nn.utils.clip_grad_norm_ (which also always multiplies)."""
        if not self._grads:
            return GradientsParams()
        with no_grad():
            coef = (float(max_norm) / (self.norm(norm_type) + 1e-6)).clamp(max=1.0)
            return self.map(lambda k, g: (g * coef.to(g.backend).cast(g.dtype)))

    def clip_value(self, clip_value):
        """Every gradient element clamped to [-clip_value, clip_value]
        (torch.nn.utils.clip_grad_value_)."""
        v = float(clip_value)
        if not v >= 0:
            raise ValueError(f"GradientsParams.clip_value: clip_value must be >= 0, got {v}")
        return self.map(lambda k, g: g.clamp(-v, v))


def _norm(g, p):
    if p == math.inf:
        return g.abs().max()
    if p == 2.0:
        return (g * g).sum().sqrt()
    if p == 1.0:
        return g.abs().sum()
    return (g.abs() ** p).sum() ** (1.0 / p)


class GradientsAccumulator:
    """Sums GradientsParams over micro-batches; `grads()` gives their mean (the gradient of
    one big batch when the loss is a mean over equal micro-batches) and starts over.

        acc = optim.GradientsAccumulator()
        for xb, yb in micro_batches:
            acc.accumulate(loss_fn(model(xb), yb).backward(), model)
        model = opt.step(model, acc.grads())
    """

    def __init__(self):
        self._total = None
        self.count = 0

    def accumulate(self, grads, module=None):
        """Add one micro-batch: a GradientsParams, or Gradients with the module."""
        if isinstance(grads, Gradients):
            if module is None:
                raise TypeError("GradientsAccumulator.accumulate: pass the module with raw "
                                "Gradients: accumulate(loss.backward(), model)")
            grads = GradientsParams.from_grads(grads, module)
        elif not isinstance(grads, GradientsParams):
            raise TypeError(f"GradientsAccumulator.accumulate: expected GradientsParams or "
                            f"Gradients, got {type(grads).__name__}")
        self._total = grads if self._total is None else self._total + grads
        self.count += 1

    def __len__(self):
        return self.count

    def grads(self, average=True):
        """The mean (or, with average=False, the sum) of what was accumulated; resets."""
        if self._total is None:
            raise ValueError("GradientsAccumulator.grads: nothing was accumulated")
        total, n = self._total, self.count
        self._total, self.count = None, 0
        return total / n if average and n > 1 else total
