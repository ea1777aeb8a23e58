"""Module and Param: Burn's modules, with PyTorch's spellings.

A Module finds its parameters by walking its attributes: sub-modules, `Param`s, and lists,
tuples and dicts of those. A `Param` is a Tensor with a stable id (Burn's ParamId) that an
update keeps, so optimizer state and gradients can be keyed by it. Non-trainable params
(BatchNorm's running statistics) are saved with the module but never optimized.

Modules are updated functionally in spirit (Burn's `model = opt.step(model, grads)`), but in
place in practice: `map_params` swaps each Param for a new one with the same id and returns
the module, so no copy of a large model is made.
"""

import copy
import itertools

from ..autodiff import Autodiff, is_grad_enabled, no_grad
from ..backend.base import Backend, default_backend
from ..errors import BackendError, ShapeError
from ..shape import prod
from ..tensor import Tensor

_ids = itertools.count(1)


def derived(module, slot, make, *tensors, also=()):
    """make(), a value computed from `tensors` and the plain values `also` alone (BatchNorm's
    folded scale and shift, a transposed weight), kept on `module` and reused while each
    tensor still holds the very same data object and `also` is equal: any rebinding (an
    optimizer step, record loading, __setitem__, .to()) gives a tensor a new prim and so a
    fresh value, and prims never change in place. The kept key holds the prims themselves,
    so a freed one's id cannot come back for another. Nothing is kept while a gradient is
    being recorded through one of `tensors`: the value would carry one step's graph into the
    next."""
    if is_grad_enabled() and any(t is not None and t.is_require_grad() for t in tensors):
        return make()
    key = tuple(None if t is None else t._prim for t in tensors)
    kept = module.__dict__.get(slot)
    if (kept is not None and len(kept[0]) == len(key) and kept[1] == also
            and all(a is b for a, b in zip(kept[0], key))):
        return kept[2]
    value = make()
    module.__dict__[slot] = (key, also, value)  # "_"-named slots are skipped by _walk
    return value


class Param(Tensor):
    """A module parameter: a tensor with an id that survives updates, and a trainable flag."""

    __slots__ = ("param_id", "trainable")

    def __init__(self, tensor, trainable=True, param_id=None):
        if not isinstance(tensor, Tensor):
            raise TypeError(f"Param: expected a Tensor, got {type(tensor).__name__}")
        prim = tensor._prim
        if trainable and isinstance(tensor.backend, Autodiff):
            # a fresh leaf: gradients of a step are keyed by it
            prim = tensor.detach().require_grad()._prim
        super().__init__(prim, tensor.backend, tensor.shape, tensor.dtype)
        self.param_id = next(_ids) if param_id is None else param_id
        self.trainable = trainable

    def with_value(self, tensor):
        """A Param with this one's id and flag, holding `tensor` (moved to this Param's
        backend; from the inner backend of an Autodiff one without a copy)."""
        if tensor.shape != self.shape:
            raise ShapeError(f"Param.with_value: new value of shape {list(tensor.shape)} for a "
                             f"parameter of shape {list(self.shape)}")
        return Param(tensor.to(self.backend), self.trainable, self.param_id)

    def value(self):
        """The plain Tensor (no id), sharing the data."""
        return Tensor(self._prim, self.backend, self.shape, self.dtype)

    def inner(self):
        """The value without gradient tracking: on the inner backend of an Autodiff backend
        (where optimizers compute updates), else the value itself. No copy."""
        if isinstance(self.backend, Autodiff):
            return self.to(self.backend.inner)
        return self.value()

    def __repr__(self):
        kind = "Param" if self.trainable else "Param(trainable=False)"
        return f"{kind}#{self.param_id} " + super().__repr__()

    __hash__ = Tensor.__hash__


def _walk(obj, prefix):
    """(name, container, key, value) for every Param and Module directly under obj."""
    items = vars(obj).items() if isinstance(obj, Module) else (
        obj.items() if isinstance(obj, dict) else enumerate(obj))
    for key, value in items:
        if isinstance(obj, Module) and key.startswith("_"):
            continue
        name = f"{prefix}{key}"
        if isinstance(value, (Param, Module)):
            yield name, obj, key, value
        elif isinstance(value, (list, tuple, dict)) and value:
            yield from _walk(value, name + ".")


class Module:
    """Base class of layers and models: subclasses set attributes in __init__ and define
    forward(); `module(x)` calls forward."""

    training = True

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    # ---- walking -----------------------------------------------------------------------------
    def named_modules(self, prefix=""):
        """(dotted name, module) for this module and every module under it."""
        yield prefix, self
        for name, _, _, value in _walk(self, f"{prefix}." if prefix else ""):
            if isinstance(value, Module):
                yield from value.named_modules(name)

    def named_params(self, prefix=""):
        """(dotted name, Param) for every Param, trainable or not, under every name it has
        (tied weights appear twice): what records save, like PyTorch's state_dict."""
        for mod_name, module in self.named_modules(prefix):
            for name, _, _, value in _walk(module, f"{mod_name}." if mod_name else ""):
                if isinstance(value, Param):
                    yield name, value

    def named_parameters(self):
        """(dotted name, Param) for the trainable parameters, each once (a tied weight under
        its first name), as PyTorch's named_parameters."""
        seen = set()
        for n, p in self.named_params():
            if p.trainable and id(p) not in seen:
                seen.add(id(p))
                yield n, p

    def parameters(self):
        return [p for _, p in self.named_parameters()]

    def named_buffers(self):
        """(dotted name, Param) for the non-trainable ones (running statistics)."""
        return ((n, p) for n, p in self.named_params() if not p.trainable)

    def num_params(self):
        """How many trainable numbers the module has."""
        return sum(prod(p.shape) for p in self.parameters())

    # ---- updating ----------------------------------------------------------------------------
    def map_params(self, fn):
        """Replace every Param p (named n) by fn(n, p), which must return a Param (or p).
        Shared Params are mapped once. Returns self."""
        slots = [(module, entry) for mod_name, module in list(self.named_modules())
                 for entry in _walk(module, f"{mod_name}." if mod_name else "")
                 if isinstance(entry[3], Param)]
        for _, (name, container, _, _) in slots:  # refuse before changing anything
            if isinstance(container, tuple):
                raise TypeError(f"Module: the Param {name} sits in a tuple, which cannot be "
                                "updated; use a list")
        done = {}  # every new Param first: if fn raises, nothing has changed
        for _, (name, _, _, value) in slots:
            if id(value) not in done:
                done[id(value)] = fn(name, value)
        for module, (_, container, key, value) in slots:
            _set(module, container, key, done[id(value)])
        return self

    def to(self, backend):
        """Move every parameter to `backend` (returns self)."""
        if not isinstance(backend, Backend):
            raise BackendError(f"Module.to: expected a backend such as NdArray(), got "
                               f"{backend!r}")
        return self.map_params(lambda n, p: Param(p.to(backend), p.trainable, p.param_id))

    def backend(self):
        """The backend of the parameters (the default backend for a module without any)."""
        for _, p in self.named_params():
            return p.backend
        return default_backend()

    def train(self, mode=True):
        for _, m in self.named_modules():
            m.training = mode
        return self

    def eval(self):
        return self.train(False)

    def clone(self):
        """An independent copy: its own data and, on Autodiff, its own gradient leaves (a
        graph using both gets separate gradients), but the same param ids, so optimizer state
        and GradientsParams of the original apply to it."""
        out = copy.deepcopy(self)
        if isinstance(out.backend(), Autodiff):
            out.map_params(lambda n, p: Param(p.value(), p.trainable, p.param_id))
        return out

    def valid(self):
        """This module on the inner backend of its Autodiff backend, for validation (Burn's
        valid): a copy without gradient tracking, in eval mode."""
        backend = self.backend()
        inner = backend.inner if isinstance(backend, Autodiff) else backend
        with no_grad():
            out = _copy_tree(self)
            out.map_params(lambda n, p: Param(p.to(inner), p.trainable, p.param_id))
        return out.eval()

    # ---- display -----------------------------------------------------------------------------
    def extra_repr(self):
        return ""

    def __repr__(self):
        children = [(n, v) for n, _, _, v in _walk(self, "") if isinstance(v, Module)]
        own = sum(prod(p.shape) for n, _, _, p in _walk(self, "")
                  if isinstance(p, Param) and p.trainable)
        head = f"{type(self).__name__}({self.extra_repr()})"
        total = self.num_params()
        if not children:
            return f"{head}  # {total:,} params" if total else head
        lines = [f"{head}  # {total:,} params" + (f" ({own:,} own)" if own else "")]
        for name, child in children:
            text = repr(child).replace("\n", "\n  ")
            lines.append(f"  ({name}): {text}")
        return "\n".join(lines)


def _set(module, container, key, value):
    if container is module:
        object.__setattr__(module, key, value)
    else:
        container[key] = value


def _copy_tree(module):
    """A copy of the module tree whose containers are new but whose Params are shared (they
    are replaced right after by map_params, so no tensor data is copied)."""
    memo = {id(p): p for _, p in module.named_params()}
    return copy.deepcopy(module, memo)
