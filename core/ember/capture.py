"""ember.jit (this module is ember.capture): capture the primitives a function runs once, then
replay them without the Python that chose them (tinygrad's TinyJit, torch.jit.trace).

    fast = ember.jit(model)          # a Module, or any function of Tensors
    y = fast(x)                      # 1st call runs as written, 2nd runs and captures, then replays
    step = ember.jit(train_step)     # whole training steps: see API.md
    model, loss = step(model, x, y)  # forward, backward and the optimizer's update replayed

A replay runs the captured list of op-table primitives on their backends, with the new
arguments' data in place of the old: modules, functional argument handling, shape and dtype
rules and the Tensor layer are skipped. At batch 1 inside Pyodide that Python costs as much as
the kernels (the MNIST ConvNet: ~0.4 of ~0.9 ms). A replay also frees each intermediate at its
last use, so elementwise ops reuse their input's buffer (NdArray's ownership rule). At capture,
per-channel constants after a convolution are folded into it (BatchNorm in eval mode), and the
backend may take the whole plan (Backend.compile: NdArray inside Pyodide runs its WebAssembly
kernels as programs, one call for a run of them; Wgpu submits the plan's recorded dispatches
in one go).

What is captured, and so what a replay assumes:
- The ops must not depend on tensor values: reading values (to_numpy, item, bool(x)) or drawing
  random numbers (Tensor.random) while capturing raises JitError. Python control flow on
  shapes, dtypes and plain arguments is fine: each different signature (the tensor arguments'
  shapes, dtypes and backends, the other arguments' values, whether gradients are recorded)
  gets its own capture. What a replay must compute anew is marked with live() (dropout's masks,
  drawn from ember's generator where eager training draws them; Adam's step-dependent scalars).
- Tensors the function reads but is not passed (weights, tensors made with from_data) are
  captured as they are. For a Module that is checked on every call: a parameter rebound
  (an optimizer step, record.load, .to()) or a train()/eval() switch drops the captures, and
  the next calls run and capture again. For a plain function, pass what changes as arguments.
- Arguments: Tensors, Modules (their Params are arguments; the Params a Module holds after the
  call, an optimizer's or BatchNorm's, are put back by each replay) and hashable plain values,
  positional or by keyword; results: a Tensor, a Module argument, or a tuple, list or dict of
  those. An optimizer's state is carried along (carry(), on_replay()).
- Training steps: when no result can still be differentiated (the function ran backward
  itself), Autodiff's steps replay as their inner backend's ops: no tape is recorded, and the
  saved activations backward reads are the slots of the steps that made them.
"""


import numpy as np

from . import tensor as _tensor
from .autodiff import ADPrim, Autodiff, is_grad_enabled
from .backend.base import OpRecord
from .errors import EmberError
from .tensor import Tensor

__all__ = ["Jit", "JitError", "carry", "jit", "live", "on_replay"]

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
        key, tensors, entries = _signature(args, kwargs)
        if self._guards is not None and not _holds(self._guards):
            self._plans.clear()  # the module changed under the captures: start over
            self._calls.clear()
            self._guards = None
        plan = self._plans.get(key)
        if plan is not None:
            return plan.replay(args, kwargs, tensors, entries)
        seen = self._calls.get(key, 0)
        self._calls[key] = seen + 1
        if seen == 0:  # the first call fills lazy caches (BatchNorm's folded scale and shift)
            return self.fn(*args, **kwargs)
        guards = _module_guards(self.fn)
        out, plan = _capture(self.fn, args, kwargs, tensors, entries)
        if guards is not None and not _holds(guards):
            raise JitError(f"ember.jit: {_name(self.fn)} rebinds its own parameters when it runs "
                           "(e.g. BatchNorm's running statistics in training mode), which a "
                           "replay would not do; call .eval() first, pass the module as an "
                           "argument, or run it without ember.jit")
        self._plans[key] = plan
        self._guards = guards
        return out


def live(value, recompute):
    """`value`, which a replay computes anew: under a capture, each replay calls recompute()
    (in capture order, before the captured ops run) for a value of the same kind: a Tensor
    (dropout's random mask, an optimizer's current state) or a tuple of floats (an optimizer's
    step-dependent scalars, each passed to ops as it is). Outside a capture: value."""
    tracer = _tensor.capturing.tracer
    if tracer is not None:
        tracer.live(value, recompute)
    return value


def on_replay(action, *tensors):
    """Under a capture: after each replay, call action(*those tensors as that replay made
    them) (an optimizer storing its new state, advancing its step count). Else nothing."""
    tracer = _tensor.capturing.tracer
    if tracer is not None:
        tracer.actions.append((action, tensors))


def carry(state, update):
    """update(), which rebinds entries of the dict `state` (one parameter's optimizer state);
    under a capture, replays read its tensors from `state` and put the new ones back, and
    its integers (step counts) advance as they did here."""
    tracer = _tensor.capturing.tracer
    if tracer is None:
        return update()
    before = dict(state)
    for key, v in before.items():
        if isinstance(v, Tensor):
            tracer.live(v, lambda key=key: state[key])
    out = update()
    for key, v in state.items():
        if isinstance(v, Tensor):
            on_replay(lambda t, key=key: state.__setitem__(key, t), v)
        elif type(v) is int and v != before.get(key):
            step = v - before.get(key, 0)
            on_replay(lambda key=key, d=step: state.__setitem__(key, state[key] + d))
    return out


def _arguments(args, kwargs):
    return [*((None, a) for a in args), *sorted(kwargs.items())]


def _entries(module, modules=None):
    """(container, key, Param) for every place a Param sits under a Module argument (modules:
    its named_modules() already listed)."""
    from .nn.module import Param, _walk
    return [(vars(m) if container is m else container, key, value)
            for m in modules or [m for _, m in module.named_modules()]
            for _, container, key, value in _walk(m, "") if isinstance(value, Param)]


def _is_module(value):
    from .nn.module import Module
    return isinstance(value, Module)


def _signature(args, kwargs):
    """(the call's key, its tensor arguments in order (a Module's Params in its place), the
    _entries of each Module argument): each Module is walked once a call."""
    parts, tensors, entries = [is_grad_enabled()], [], []

    def tensor(t):
        # which earlier tensor holds the same data, if any: f(x, x) captures one slot
        same = next((i for i, u in enumerate(tensors) if u._prim is t._prim), None)
        tensors.append(t)
        return (t.shape, t.dtype, t.backend.key(), same)

    for name, value in _arguments(args, kwargs):
        if isinstance(value, Tensor):
            parts.append((name, *tensor(value)))
        elif _is_module(value):  # its parameters are arguments; its structure is the key
            modules = [m for _, m in value.named_modules()]
            entries.append(_entries(value, modules))
            parts.append((name, type(value), tuple(m.training for m in modules),
                          tuple((key, p.trainable, *tensor(p)) for _, key, p in entries[-1])))
        else:
            try:
                hash(value)
            except TypeError:
                raise JitError(f"ember.jit: argument {value!r} is neither a Tensor, a Module nor "
                               "hashable; captures are kept per value of the other arguments"
                               ) from None
            parts.append((name, type(value), value))
    return tuple(parts), tensors, entries


def _modules(args, kwargs):
    return [v for _, v in _arguments(args, kwargs) if _is_module(v)]


class _Recorder:
    """What a capture sees: every primitive run in its thread, with its inputs named by slot.
    It keeps every object it names alive, so that no id is reused during the capture."""

    def __init__(self, inputs):
        self.slots = {}      # id(prim or literal) -> slot
        self.keep = []       # the objects of the slots, in slot order
        self.constants = {}  # slot -> prim or literal not made by a captured op
        self.steps = []      # (backend, OpRecord whose inputs and out are slots)
        self.lives = []      # (slots, recompute, tuple or not): see live()
        self.actions = []    # (action, tensors): see on_replay()
        self.refused = None
        for prim in inputs:
            self._slot(prim)
        self.made = set(range(len(inputs)))  # slots an argument, a live value or an op gave

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
        slot = self._slot(out)
        self.made.add(slot)
        self.steps.append((backend, OpRecord(op, ins, attrs, shape, dtype, slot)))

    def live(self, value, recompute):
        objs = value if isinstance(value, tuple) else (value,)
        slots = []
        for v in objs:
            obj = v._prim if isinstance(v, Tensor) else v
            slot = self.slots.get(id(obj))
            if slot is not None and slot in self.made:
                self.host("a value made inside the capture passed as one a replay recomputes "
                          "(an optimizer's first step creates its state: take one step first)")
            if slot is None or slot in self.constants:
                slot = self._slot(obj)
            self.made.add(slot)
            slots.append(slot)
        self.lives.append((tuple(slots), recompute, isinstance(value, tuple)))

    def host(self, what):
        if self.refused is None:
            self.refused = what


def _capture(fn, args, kwargs, tensors, entries):
    """Run fn once while recording; (its result, the plan that replays it). tensors, entries:
    _signature's."""
    inputs = [t._prim for t in tensors]
    modules = _modules(args, kwargs)
    before = [[p for _, _, p in found] for found in entries]
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
    layout = _layout(fn, out, recorder, modules)
    # the Params a Module argument holds afterwards, where they changed (an optimizer's step,
    # BatchNorm's running statistics): a replay puts its own there
    rebinds = []
    for k, m in enumerate(modules):
        for j, ((_, _, p), old) in enumerate(zip(_entries(m), before[k])):
            if p is not old:
                rebinds.append((k, j, _layout(fn, p, recorder, modules), p.trainable,
                                p.param_id))
    actions = [(action, [_layout(fn, t, recorder, modules) for t in tensors])
               for action, tensors in recorder.actions]
    _fold_into_convs(recorder, set(_slots(layout)))
    plan = _Plan(recorder, len(inputs), layout, rebinds, actions, _lowerable(out, recorder))
    return out, plan


def _layout(fn, out, recorder, modules=()):
    """The result's structure, each Tensor in it as (slot, backend, shape, dtype, wrapped):
    wrapped when the slot holds the inner prim of a decorator's (a Param made by with_value)."""
    if isinstance(out, (tuple, list)):
        return type(out), [_layout(fn, t, recorder, modules) for t in out]
    if isinstance(out, dict):
        return dict, {k: _layout(fn, t, recorder, modules) for k, t in out.items()}
    if any(out is m for m in modules):  # a Module argument, updated in place
        return "module", next(i for i, m in enumerate(modules) if out is m)
    if not isinstance(out, Tensor):
        raise JitError(f"ember.jit: {_name(fn)} returned {type(out).__name__}; it must return "
                       "Tensors (one, or tuples, lists or dicts of them) or its Module "
                       "arguments")
    slot, wrapped = recorder.slots.get(id(out._prim)), False
    if slot is None and isinstance(out.backend, Autodiff):
        slot, wrapped = recorder.slots.get(id(out.backend.unwrap(out._prim))), True
    if slot is None:  # made outside any captured op (e.g. by from_data): a constant
        slot, wrapped = recorder._constant(out._prim), False
    return Tensor, (slot, out.backend, out.shape, out.dtype, wrapped)


def _lowerable(out, recorder):
    """Whether the Autodiff steps may run as their inner backend's ops: no result can still be
    differentiated (no result is a tracked tensor whose graph a backward has not freed), so
    the tape a replay would record is never read (a whole training step)."""
    if not any(isinstance(b, Autodiff) for b, _ in recorder.steps):
        return False
    stack = [out]
    while stack:
        t = stack.pop()
        if isinstance(t, (tuple, list)):
            stack.extend(t)
        elif isinstance(t, dict):
            stack.extend(t.values())
        elif isinstance(t, Tensor) and isinstance(t.backend, Autodiff):
            node = t._prim.node
            if node is not None and node.op is not None and node.saved is not None:
                return False
    return True


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
    elif kind != "module":
        for item in (spec.values() if kind is dict else spec):
            yield from _slots(item)


def _rebuild(layout, values, modules=(), args=()):
    kind, spec = layout
    if kind is Tensor:
        slot, backend, shape, dtype, wrapped = spec
        if wrapped and slot < len(args):  # an argument returned as it is
            return Tensor(args[slot], backend, shape, dtype)
        prim = values[slot]
        return Tensor(backend.wrap(prim, shape, dtype) if wrapped else prim, backend, shape,
                      dtype)
    if kind == "module":
        return modules[spec]
    if kind is dict:
        return {k: _rebuild(item, values, modules, args) for k, item in spec.items()}
    return kind(_rebuild(item, values, modules, args) for item in spec)


def _name(fn):
    return getattr(fn, "__qualname__", None) or type(fn).__name__  # a function's, or a Module's


def _lower(recorder, n_inputs, live_slots):
    """Every Autodiff step as its inner backend's op on the inner prims (see _lowerable):
    arguments and live values then stand for their inner prims, and the inner prims that
    backward and the optimizer read (saved activations, p.inner()) are the slots of the
    steps that made them, not constants. Returns slot -> its slot in the lowered plan."""
    slots, keep, constants = recorder.slots, recorder.keep, recorder.constants
    inner, rename = {}, {}
    for s in range(len(keep)):
        obj = keep[s]
        if type(obj) is not ADPrim:
            continue
        t = slots.get(id(obj.prim))
        if s < n_inputs or s in live_slots:
            if t is not None and t != s:
                rename[t] = s
                constants.pop(t, None)
            inner[s] = s
        elif s in constants:
            inner[s] = t if t is not None else recorder._constant(obj.prim)
        else:  # made by an Autodiff step: the lowered step makes the inner prim
            if t is None:
                t = recorder._slot(obj.prim)
            constants.pop(t, None)
            inner[s] = t

    def new(s):
        return inner.get(s, rename.get(s, s))

    recorder.steps = [
        (backend.inner if isinstance(backend, Autodiff) else backend,
         step._replace(inputs=tuple(new(s) for s in step.inputs), out=new(step.out)))
        for backend, step in recorder.steps]
    return new


def _relayout(layout, new):
    """A layout of the lowered plan: Autodiff tensors are wrapped inner prims."""
    kind, spec = layout
    if kind is Tensor:
        slot, backend, shape, dtype, wrapped = spec
        if isinstance(backend, Autodiff):
            wrapped = True
        return Tensor, (new(slot), backend, shape, dtype, wrapped)
    if kind == "module":
        return layout
    if kind is dict:
        return dict, {k: _relayout(item, new) for k, item in spec.items()}
    return kind, [_relayout(item, new) for item in spec]


class _Plan:
    """A capture, ready to replay: a table of slots (arguments, live values, constants,
    results of steps) and the steps, each freeing the slots it reads for the last time."""

    def __init__(self, recorder, n_inputs, layout, rebinds=(), actions=(), lower=False):
        self.n_inputs = n_inputs
        self.lives = recorder.lives
        live_slots = [s for slots, _, _ in recorder.lives for s in slots]
        new = _lower(recorder, n_inputs, set(live_slots)) if lower else (lambda s: s)
        self.lowered = lower
        self.layout = _relayout(layout, new) if lower else layout
        self.rebinds = [(k, j, _relayout(lay, new) if lower else lay, trainable, pid)
                        for k, j, lay, trainable, pid in rebinds]
        self.actions = [(action, [_relayout(lay, new) if lower else lay for lay in lays])
                        for action, lays in actions]
        outputs = set(_slots(self.layout))
        for _, _, lay, _, _ in self.rebinds:
            outputs.update(_slots(lay))
        for _, lays in self.actions:
            for lay in lays:
                outputs.update(_slots(lay))
        pinned = set(range(n_inputs)) | set(recorder.constants) | outputs | set(live_slots)
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
        # a backend may run the whole plan its own way (NdArray in Pyodide: WebAssembly
        # programs, Wgpu: one submission); it sees the plan with the arguments and the live
        # values first, as slots 0.. of its inputs
        self.runner = None
        backends = {step[0].key(): step[0] for step in recorder.steps}
        scalars = any(is_tuple for _, _, is_tuple in recorder.lives)
        if len(backends) == 1 and (not scalars or getattr(
                next(iter(backends.values())), "compiles_scalars", False)):
            (backend,) = backends.values()
            order = list(range(n_inputs)) + live_slots
            first = set(order)
            order += [s for s in range(len(self.table)) if s not in first]
            at = {s: i for i, s in enumerate(order)}
            table = [self.table[s] for s in order]
            n_first = n_inputs + len(live_slots)
            table[:n_first] = [None] * n_first
            steps = [step._replace(inputs=tuple(at[s] for s in step.inputs), out=at[step.out])
                     for _, step in recorder.steps]
            first = [self._live_value(recorder.keep[s]) for s in order[:n_first]]
            runner = backend.compile(steps, table, first, sorted(at[s] for s in outputs))
            if runner is not None:
                self.runner = (runner, order)

    def _live_value(self, value):
        if isinstance(value, Tensor):
            value = value._prim
        return value.prim if self.lowered and type(value) is ADPrim else value

    def replay(self, args, kwargs, tensors, entries):
        originals = [t._prim for t in tensors]
        inputs = [p.prim if self.lowered and type(p) is ADPrim else p for p in originals]
        lives = []
        for slots, recompute, is_tuple in self.lives:
            value = recompute()
            lives.extend(zip(slots, value if is_tuple else (value,)))
        values = None
        if self.runner is not None:
            runner, order = self.runner
            got = runner(inputs + [self._live_value(v) for _, v in lives])
            if got is not None:
                values = [None] * len(self.table)
                for i, prim in got.items():
                    values[order[i]] = prim
        if values is None:
            values = self.table.copy()
            values[:self.n_inputs] = inputs
            for slot, value in lives:
                values[slot] = self._live_value(value)
            del lives
            for execute, op, ins, attrs, shape, dtype, out, free in self.steps:
                prims = [values[s] for s in ins]
                for s in free:  # last use: the op may write its result into this buffer
                    values[s] = None
                values[out] = execute(op, prims, attrs, shape, dtype)
        modules = _modules(args, kwargs)
        if self.rebinds:
            from .nn.module import Param
            made = {}  # (entries: _signature's, made before this replay changed anything)
            for k, j, lay, trainable, pid in self.rebinds:
                container, key, _ = entries[k][j]
                slot = lay[1][0]  # (a tied weight: one Param in each of its places)
                if slot not in made:
                    made[slot] = Param(_rebuild(lay, values, modules, originals), trainable, pid)
                container[key] = made[slot]
        for action, lays in self.actions:
            action(*(_rebuild(lay, values, modules, originals) for lay in lays))
        return _rebuild(self.layout, values, modules, originals)


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
