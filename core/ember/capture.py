"""ember.jit (this module is ember.capture): capture the primitives a function runs once, then
replay them without the Python that chose them (tinygrad's TinyJit, torch.jit.trace).

    fast = ember.jit(model)          # a Module, or any function of Tensors
    y = fast(x)                      # 1st call runs as written, 2nd runs and captures, then replays

A replay runs the captured list of op-table primitives on their backends, with the new
arguments' data in place of the old: modules, functional argument handling, shape and dtype
rules and the Tensor layer are skipped. At batch 1 inside Pyodide that Python costs as much as
the kernels (the MNIST ConvNet: ~0.4 of ~0.9 ms). A replay also frees each intermediate at its
last use, so elementwise ops reuse their input's buffer (NdArray's ownership rule). At capture,
per-channel constants after a convolution are folded into it (BatchNorm in eval mode), and the
backend may take the whole plan (Backend.compile: NdArray inside Pyodide runs its WebAssembly
kernels as programs, one call for a run of them).

What is captured, and so what a replay assumes:
- The ops must not depend on tensor values: reading values (to_numpy, item, bool(x)) or drawing
  random numbers (dropout in training) while capturing raises JitError. Python control flow
  on shapes, dtypes and plain arguments is fine: each different signature (the tensor
  arguments' shapes, dtypes and backends, the other arguments' values, whether gradients are
  recorded) gets its own capture.
- Tensors the function reads but is not passed (weights, tensors made with from_data) are
  captured as they are. For a Module that is checked on every call: a parameter rebound
  (an optimizer step, record.load, .to()) or a train()/eval() switch drops the captures, and
  the next calls run and capture again. For a plain function, pass what changes as arguments.
- Arguments: Tensors and hashable plain values, positional or by keyword; results: a Tensor,
  or a tuple, list or dict of Tensors.
"""


import numpy as np

from . import tensor as _tensor
from .autodiff import Autodiff, is_grad_enabled
from .backend.base import OpRecord
from .errors import EmberError
from .tensor import Tensor

__all__ = ["Jit", "JitError", "jit"]

class JitError(EmberError, RuntimeError):
    """A function ember.jit cannot capture (it reads values, draws random numbers, ...)."""


def jit(fn):
    """A callable that runs `fn` (a Module or a function of Tensors) by replaying its captured
    primitives from the third call with the same signature on; see the module's doc."""
    return Jit(fn)


class Jit:
    def __init__(self, fn):
        if not callable(fn):
            raise TypeError(f"ember.jit: expected a Module or a function, got {fn!r}")
        self.fn = fn
        self._plans = {}   # signature -> _Plan
        self._calls = {}   # signature -> calls so far (before its capture)
        self._guards = None

    def __repr__(self):
        return f"jit({_name(self.fn)}, {len(self._plans)} captured)"

    def __call__(self, *args, **kwargs):
        if _tensor.capturing.tracer is not None:  # inside another capture: be part of it
            return self.fn(*args, **kwargs)
        key = _signature(args, kwargs)
        if self._guards is not None and not _holds(self._guards):
            self._plans.clear()  # the module changed under the captures: start over
            self._calls.clear()
            self._guards = None
        plan = self._plans.get(key)
        if plan is not None:
            return plan.replay(args, kwargs)
        seen = self._calls.get(key, 0)
        self._calls[key] = seen + 1
        if seen == 0:  # the first call fills lazy caches (BatchNorm's folded scale and shift)
            return self.fn(*args, **kwargs)
        guards = _module_guards(self.fn)
        out, plan = _capture(self.fn, args, kwargs)
        if guards is not None and not _holds(guards):
            raise JitError(f"ember.jit: {_name(self.fn)} rebinds its own parameters when it runs "
                           "(e.g. BatchNorm's running statistics in training mode), which a "
                           "replay would not do; call .eval() first, or run it without "
                           "ember.jit")
        self._plans[key] = plan
        self._guards = guards
        return out


def _signature(args, kwargs):
    parts, prims = [is_grad_enabled()], []
    for name, value in (*((None, a) for a in args), *sorted(kwargs.items())):
        if isinstance(value, Tensor):
            # which earlier argument holds the same data, if any: f(x, x) captures one slot
            same = next((i for i, p in enumerate(prims) if p is value._prim), None)
            prims.append(value._prim)
            parts.append((name, value.shape, value.dtype, value.backend.key(), same))
            continue
        try:
            hash(value)
        except TypeError:
            raise JitError(f"ember.jit: argument {value!r} is neither a Tensor nor hashable; "
                           "captures are kept per value of the other arguments") from None
        parts.append((name, type(value), value))
    return tuple(parts)


def _tensors(args, kwargs):
    return [v for v in (*args, *(kwargs[k] for k in sorted(kwargs))) if isinstance(v, Tensor)]


class _Recorder:
    """What a capture sees: every primitive run in its thread, with its inputs named by slot.
    It keeps every object it names alive, so that no id is reused during the capture."""

    def __init__(self, inputs):
        self.slots = {}      # id(prim or literal) -> slot
        self.keep = []       # the objects of the slots, in slot order
        self.constants = {}  # slot -> prim or literal not made by a captured op
        self.steps = []      # (backend, OpRecord whose inputs and out are slots)
        self.refused = None
        for prim in inputs:
            self._slot(prim)

    def _slot(self, obj):
        self.slots[id(obj)] = slot = len(self.keep)
        self.keep.append(obj)
        return slot

    def _constant(self, obj):
        """A new slot for a prim or literal that no captured op made."""
        slot = self._slot(obj)
        self.constants[slot] = obj
        return slot

    def inputs(self, prims):
        """The slots of an op's inputs, before it runs: one not seen before is a constant, held
        from now on (so the op cannot write its result into it: a replay needs its value)."""
        ins = []
        for p in prims:
            slot = self.slots.get(id(p))
            ins.append(self._constant(p) if slot is None else slot)
        return tuple(ins)

    def op(self, backend, op, ins, attrs, shape, dtype, out):
        self.steps.append((backend, OpRecord(op, ins, attrs, shape, dtype, self._slot(out))))

    def host(self, what):
        if self.refused is None:
            self.refused = what


def _capture(fn, args, kwargs):
    """Run fn once while recording; (its result, the plan that replays it)."""
    inputs = [t._prim for t in _tensors(args, kwargs)]
    recorder = _Recorder(inputs)
    _tensor.capturing.tracer = recorder
    try:
        out = fn(*args, **kwargs)
    finally:
        _tensor.capturing.tracer = None
    if recorder.refused is not None:
        raise JitError(f"ember.jit: {_name(fn)} does something a replay would not repeat "
                       f"({recorder.refused}); run it without ember.jit, or move that part out "
                       "of the function")
    layout = _layout(fn, out, recorder)
    _fold_into_convs(recorder, set(_slots(layout)))
    return out, _Plan(recorder, len(inputs), layout)


def _layout(fn, out, recorder):
    """The result's structure, each Tensor in it as (slot, backend, shape, dtype)."""
    if isinstance(out, (tuple, list)):
        return type(out), [_layout(fn, t, recorder) for t in out]
    if isinstance(out, dict):
        return dict, {k: _layout(fn, t, recorder) for k, t in out.items()}
    if not isinstance(out, Tensor):
        raise JitError(f"ember.jit: {_name(fn)} returned {type(out).__name__}; it must return "
                       "Tensors: one, or tuples, lists or dicts of them")
    slot = recorder.slots.get(id(out._prim))
    if slot is None:  # made outside any captured op (e.g. by from_data): a constant
        slot = recorder._constant(out._prim)
    return Tensor, (slot, out.backend, out.shape, out.dtype)


# ---- a graph rewrite on the captured steps (ORT's Conv+Mul / Conv+Add fusions) ----------------
# Named ops, on purpose: this is an optimisation of known patterns, not a backend.
_CONV, _PER_CHANNEL = "conv2d", ("mul", "add")


def _fold_into_convs(recorder, outputs):
    """A conv2d whose result is read only by a mul or add with a constant that is one number,
    or one per output channel (BatchNorm in eval mode: x * scale + shift), takes that constant
    into its weight and bias, computed once here in float64: one op instead of three, one
    pass over the activation instead of three. Not on Autodiff (the weights' gradients would go
    through the folded copies)."""
    steps = recorder.steps
    readers = {}
    for i, (_, step) in enumerate(steps):
        for slot in step.inputs:
            readers.setdefault(slot, []).append(i)
    for i, (backend, step) in enumerate(steps):
        if backend is None:  # (folded into a conv2d before it)
            continue
        op, ins, attrs, shape, dtype, out = step
        if (op.name != _CONV or isinstance(backend, Autodiff)
                or any(s not in recorder.constants for s in ins[1:])):
            continue
        w = _host_value(backend, recorder.constants[ins[1]])
        b = _host_value(backend, recorder.constants[ins[2]]) if len(ins) > 2 else None
        folded = False
        while out not in outputs and len(readers.get(out, ())) == 1:
            j = readers[out][0]
            r_op, r_ins, _, r_shape, r_dtype, r_out = steps[j][1]
            other = [s for s in r_ins if s != out]
            if (r_op.name not in _PER_CHANNEL or len(other) != 1 or r_shape != shape
                    or r_dtype != dtype or other[0] not in recorder.constants):
                break
            c = _per_channel(backend, recorder.constants[other[0]], shape[1])
            if c is None:
                break
            if r_op.name == "mul":
                w = w * c.reshape(-1, 1, 1, 1)
                b = None if b is None else b * c
            else:
                b = c + (0 if b is None else b)
            steps[j] = (None, None)
            out, folded = r_out, True
        if folded:
            made = [backend.from_numpy(np.ascontiguousarray(v, dtype=dtype))
                    for v in ((w, b) if b is not None else (w,))]
            new_ins = (ins[0],) + tuple(recorder._constant(prim) for prim in made)
            steps[i] = (backend, OpRecord(op, new_ins, attrs, shape, dtype, out))
    recorder.steps = [s for s in steps if s[0] is not None]


def _host_value(backend, prim):
    return np.asarray(backend.to_numpy(prim), dtype=np.float64)


def _per_channel(backend, value, channels):
    """value (a Python number or a constant prim) as float64 [channels] when it is one number,
    or one per channel of an [N, C, H, W] result ([C, 1, 1], [1, C, 1, 1]); else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return np.full(channels, float(value))
    if isinstance(value, (bool, type(None))):
        return None
    v = _host_value(backend, value)
    dims = v.shape
    if v.size == 1 and len(dims) <= 4:
        return np.full(channels, v.reshape(()).item())
    if len(dims) >= 3 and dims[-3:] == (channels, 1, 1) and all(d == 1 for d in dims[:-3]):
        return v.reshape(channels)
    return None


def _slots(layout):
    kind, spec = layout
    if kind is Tensor:
        yield spec[0]
    else:
        for item in (spec.values() if kind is dict else spec):
            yield from _slots(item)


def _rebuild(layout, values):
    kind, spec = layout
    if kind is Tensor:
        return Tensor(values[spec[0]], *spec[1:])
    if kind is dict:
        return {k: _rebuild(item, values) for k, item in spec.items()}
    return kind(_rebuild(item, values) for item in spec)


def _name(fn):
    return getattr(fn, "__qualname__", None) or type(fn).__name__  # a function's, or a Module's


class _Plan:
    """A capture, ready to replay: a table of slots (arguments, constants, results of steps)
    and the steps, each freeing the slots it reads for the last time."""

    def __init__(self, recorder, n_inputs, layout):
        self.n_inputs = n_inputs
        self.layout = layout
        outputs = set(_slots(layout))
        pinned = set(range(n_inputs)) | set(recorder.constants) | outputs
        last = {}
        for i, (_, step) in enumerate(recorder.steps):
            for slot in step.inputs:
                last[slot] = i
        self.table = [None] * len(recorder.keep)
        for slot, value in recorder.constants.items():
            self.table[slot] = value
        self.steps = []
        for i, (backend, (op, ins, attrs, shape, dtype, out)) in enumerate(recorder.steps):
            free = tuple(s for s in set(ins) if last[s] == i and s not in pinned)
            self.steps.append((backend.execute, op, ins, attrs, shape, dtype, out, free))
        # a backend may run the whole plan its own way (NdArray in Pyodide: WebAssembly programs)
        backends = {step[0].key(): step[0] for step in recorder.steps}
        self.runner = None
        if len(backends) == 1:
            (backend,) = backends.values()
            self.runner = backend.compile(
                [step for _, step in recorder.steps], list(self.table),
                list(recorder.keep[:n_inputs]), sorted(outputs))

    def replay(self, args, kwargs):
        inputs = [t._prim for t in _tensors(args, kwargs)]
        if self.runner is not None:
            values = self.runner(inputs)
            if values is not None:
                return _rebuild(self.layout, values)
        values = self.table.copy()
        values[:self.n_inputs] = inputs
        for execute, op, ins, attrs, shape, dtype, out, free in self.steps:
            prims = [values[s] for s in ins]
            for s in free:  # last use: the op may write its result into this buffer
                values[s] = None
            values[out] = execute(op, prims, attrs, shape, dtype)
        return _rebuild(self.layout, values)


def _module_guards(fn):
    """For a Module: what must still hold for its captures to be valid (every Param where it
    was, every module's training flag); None for other callables."""
    from .nn.module import Module, Param, _walk

    if not isinstance(fn, Module):
        return None
    guards = []
    for _, module in fn.named_modules():
        guards.append((module, None, module.training))
        for _, container, key, value in _walk(module, ""):
            if isinstance(value, Param):
                guards.append((vars(module) if container is module else container, key, value))
    return guards


def _holds(guards):
    for container, key, value in guards:
        if key is None:
            if container.training != value:
                return False
        elif container[key] is not value:
            return False
    return True
