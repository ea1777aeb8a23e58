"""Wgpu.compile: a plan ember.jit captured, encoded once and replayed as one submission.

At compile time the plan's steps run once through the ordinary runners while the device
records their dispatches instead of queueing them (Device.recording): pipelines, buffers,
`info` words and workgroup counts, none of it submitted. The buffers those dispatches name are
then sorted out:
- the arguments' buffers: a replay binds the caller's buffers in their place (arguments must
  have the capture's strides and offsets, which the words hold);
- the constants' buffers (weights): bound as they are, never written;
- the results' buffers: a replay takes fresh ones from the pool, since the caller keeps every
  result (a loss per step, the new parameters);
- every other buffer, an intermediate: replaced by a buffer the plan owns. The recording ran
  with the replay's frees, so the pool already shared buffers between intermediates whose
  lifetimes do not overlap; one plan buffer stands for each buffer the recording used.
A replay then patches the few commands that bind arguments or results and hands the whole
list to the bridge in one submit (one compute pass), natively and in the browser alike.

What cannot be recorded makes compile return None (ember.jit then replays op by op): a read
back to the host (a host fallback, an index check that must look at the values, autotuning
still to measure), a host write, an argument written in place. Arguments that shared a buffer
at the capture (a parameter and its Adam state) must share it again.
Index checks that passed on an argument's known bounds (labels uploaded from the host) are
rerun on each replay's bounds: a replay whose argument has no known bounds, or bounds outside
the check's, replays op by op (and raises there). Indices computed on the GPU are not checked
in a plan, as in a browser (WebGPU clamps out-of-range accesses).
"""

import struct
from functools import partial

from ...backend.base import run_steps
from .layout import Prim

_I32 = struct.Struct("<i")


class Unrecordable(Exception):
    """Raised by the device when a recorded step reads back or writes from the host."""


class Recording:
    def __init__(self):
        self.commands = []  # (kernel, buffers, words, groups, cache)
        self.sizes = {}     # gpu buffer -> bytes, for the buffers Wgpu.empty handed out
        self.checked = []   # (gpu buffer, size): index checks passed on known bounds


def compile_plan(be, steps, table, inputs, outputs, run=None):
    """A runner for the plan (see Backend.compile), or None. Python floats among `inputs` are
    scalars a replay recomputes (capture.live): the plan is recorded twice with two sets of
    stand-in values, and the `info` words where those differ, and only those, are patched
    with each replay's values (a word derived from a scalar in any other way: None). run: how
    the steps run while they are recorded (Backend.compile; default: be's own ops)."""
    if run is None:
        run = partial(run_steps, be.execute)
    if any(type(p) is not Prim and type(p) is not float for p in inputs):
        return None
    scalars = [i for i, p in enumerate(inputs) if type(p) is float]
    recorded = _record(be, run, steps, table, inputs, outputs, scalars, 0)
    if recorded is None:
        return None
    rec, results = recorded
    found = {}  # byte offset in the meta -> position of the scalar among the inputs
    if scalars:
        other = _record(be, run, steps, table, inputs, outputs, scalars, 1)
        if other is None or not _same_but_scalars(rec.commands, other[0].commands, scalars,
                                                   found):
            return None
        read = {s for step in steps for s in step.inputs}
        if not {i for i in scalars if i in read} <= set(found.values()):
            return None  # a scalar some kernel reads in another form (an int, say)
        del other
    n = len(inputs)
    arg_of, shared = {}, []  # an argument's buffer -> the first argument in it
    for i, p in enumerate(inputs):
        if type(p) is Prim:
            first = arg_of.setdefault(p.storage.gpu, i)
            if first != i:  # (a parameter and Adam's state: slices of one buffer)
                shared.append((i, first))
    fixed = {p.storage.gpu for p in table if type(p) is Prim}
    made, made_of, out_sizes, out_specs = [], {}, [], {}
    for slot in outputs:
        if slot < n:
            out_specs[slot] = ("arg", slot)
            continue
        if table[slot] is not None:
            out_specs[slot] = ("const", table[slot])
            continue
        p = results[slot]
        gpu = p.storage.gpu
        view = (p.shape, p.strides, p.offset, p.dtype, p.range)
        if gpu in arg_of:
            out_specs[slot] = ("view", arg_of[gpu], view)
        elif gpu in fixed:
            out_specs[slot] = ("const", p)
        else:
            if gpu not in made_of:
                made_of[gpu] = len(made)
                made.append(gpu)
                out_sizes.append(p.storage.nbytes)
            out_specs[slot] = ("made", made_of[gpu], view)
    del results
    owned, commands, patches = {}, [], []
    block = be.device.block
    found = {k * block + 4 * j: i for (k, j), i in found.items()}
    meta = bytearray(block * len(rec.commands))
    from .device import _packer
    for k, (kernel, buffers, words, groups, cache) in enumerate(rec.commands):
        _packer(len(words))(meta, k * block, *words)
        refs, patched = [], False
        for gpu, access in zip(buffers, kernel.signature):
            if gpu in arg_of:
                refs.append((0, arg_of[gpu]))
                patched = True
                if access == "w":
                    return None
            elif gpu in made_of:
                refs.append((1, made_of[gpu]))
                patched = True
            elif gpu in fixed:
                if access == "w":
                    return None
                refs.append((2, gpu))
            else:
                size = rec.sizes.get(gpu)
                if size is None:  # a buffer neither made here nor a slot's: not ours to bind
                    return None
                if gpu not in owned:
                    owned[gpu] = be.pool.take(size)
                refs.append((2, owned[gpu].gpu))
        command = (kernel.pipeline, tuple(r[1] for r in refs), k * block, groups, cache)
        commands.append(command)
        if patched:
            patches.append((k, (kernel.pipeline, k * block, groups, cache), tuple(refs)))
    limits = {}  # argument -> the size its indices must stay below
    for gpu, size in rec.checked:
        if gpu in arg_of:
            limits[arg_of[gpu]] = min(size, limits.get(arg_of[gpu], size))
    return Runner(be, meta, commands, patches, inputs, out_sizes, out_specs, owned, table,
                  sorted(found.items()), shared, limits)


_STAND_IN = ((1.7, 0.003), (-2.9, -0.005))  # scalar i of recording r: a + b * (i + 1)


def _record(be, run, steps, table, inputs, outputs, scalars, r):
    """The plan's dispatches, recorded (scalars replaced by stand-ins r), and its results."""
    values = list(inputs)
    a, b = _STAND_IN[r]
    for k, i in enumerate(scalars):
        values[i] = a + b * (k + 1)
    device = be.device
    rec = Recording()
    with device.lock:
        device.flush()
        device.recording = rec
        try:
            results = run(steps, table, values, outputs)
        except Unrecordable:
            return None
        finally:
            device.recording = None
    return rec, results


def _same_but_scalars(one, two, scalars, found):
    """Whether two recordings are the same dispatches, their words differing only where one
    holds stand-in k of recording 0 and the other stand-in k of recording 1 (found: those
    places, byte offset -> input position)."""
    from .runners import _bits
    bits = [{_bits(a + b * (k + 1), "float32"): i for k, i in enumerate(scalars)}
            for a, b in _STAND_IN]
    if len(one) != len(two):
        return False
    same = {}  # buffer of one -> buffer of two
    for c, ((k1, b1, w1, g1, _), (k2, b2, w2, g2, _)) in enumerate(zip(one, two)):
        if k1 is not k2 or g1 != g2 or len(w1) != len(w2) or len(b1) != len(b2):
            return False
        if any(same.setdefault(x, y) is not y for x, y in zip(b1, b2)):
            return False
        for j, (x, y) in enumerate(zip(w1, w2)):
            if x != y:
                i = bits[0].get(x)
                if i is None or bits[1].get(y) != i:
                    return False
                found[c, j] = i
    return True


class Runner:
    """Replays a compiled plan: runner(argument prims and scalars) -> {output slot: prim}, or
    None where an argument's layout or bounds differ from the capture's (op-by-op then)."""

    def __init__(self, be, meta, commands, patches, inputs, out_sizes, out_specs, owned, table,
                 scalars, shared, limits):
        self.be, self.meta, self.commands, self.patches = be, bytes(meta), commands, patches
        self.layouts = [(p.strides, p.offset) if type(p) is Prim else None for p in inputs]
        self.limits = limits  # argument -> the size its values must stay below
        self.out_sizes, self.out_specs = out_sizes, out_specs
        self.scalars = scalars  # (byte offset in meta, input position) of each scalar word
        self.shared = shared  # (argument, the first argument in its buffer), from the capture
        self.owned = owned  # the intermediates' buffers, held as long as the plan
        self.table = table  # the constants, likewise

    def __call__(self, prims):
        for p, layout in zip(prims, self.layouts):
            if layout is not None and (type(p) is not Prim or (p.strides, p.offset) != layout):
                return None
        for i, size in self.limits.items():
            bounds = prims[i].range
            if bounds is None or bounds[0] < 0 or bounds[1] >= size:
                return None
        for i, first in self.shared:
            if prims[i].storage is not prims[first].storage:
                return None
        meta = self.meta
        if self.scalars:
            from .runners import _bits
            meta = bytearray(meta)
            for at, i in self.scalars:
                _I32.pack_into(meta, at, _bits(prims[i], "float32"))
        pool = self.be.pool
        made = [pool.take(n) for n in self.out_sizes]
        bound_now = ([p.storage.gpu if type(p) is Prim else None for p in prims],
                     [s.gpu for s in made])
        commands = self.commands
        if self.patches:
            commands = list(commands)
            for k, (pipeline, offset, groups, cache), refs in self.patches:
                buffers = tuple([r if kind == 2 else bound_now[kind][r] for kind, r in refs])
                commands[k] = (pipeline, buffers, offset, groups, cache)
        self.be.device.submit_plan(meta, commands)
        out = {}
        for slot, spec in self.out_specs.items():
            kind = spec[0]
            if kind == "arg":
                out[slot] = prims[spec[1]]
            elif kind == "const":
                out[slot] = spec[1]
            else:
                storage = prims[spec[1]].storage if kind == "view" else made[spec[1]]
                shape, strides, offset, dtype, bounds = spec[2]
                if kind == "view" and dtype == "int32":
                    bounds = prims[spec[1]].range
                out[slot] = Prim(storage, shape, strides, offset, dtype, bounds)
        return out
