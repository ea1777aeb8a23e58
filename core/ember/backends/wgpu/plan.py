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
still to measure), a host write, an argument written in place, arguments sharing a buffer.
An int32 argument is replayed only within the bounds its capture had (index checks that
passed on those bounds are not rerun); outside them that call replays op by op.
"""

from .layout import Prim


class Unrecordable(Exception):
    """Raised by the device when a recorded step reads back or writes from the host."""


class Recording:
    def __init__(self):
        self.commands = []  # (kernel, buffers, words, groups, cache)
        self.sizes = {}     # gpu buffer -> bytes, for the buffers Wgpu.empty handed out


def compile_plan(be, steps, table, inputs, outputs):
    """A runner for the plan (see Backend.compile), or None."""
    if any(type(p) is not Prim for p in inputs) or len(
            {id(p.storage) for p in inputs}) != len(inputs):
        return None
    device = be.device
    rec = Recording()
    with device.lock:
        device.flush()
        device.recording = rec
        try:
            results = _run(be, steps, table, inputs, outputs)
        except Unrecordable:
            return None
        finally:
            device.recording = None
    n = len(inputs)
    arg_of = {p.storage.gpu: i for i, p in enumerate(inputs)}
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
    block = device.block
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
            patches.append((k, tuple(refs)))
    return Runner(be, meta, commands, patches, inputs, out_sizes, out_specs, owned, table)


def _run(be, steps, table, inputs, outputs):
    """The steps run as a replay runs them (each slot freed at its last use, so the pool
    shares buffers by lifetime and elementwise ops reuse their inputs')."""
    pinned = set(range(len(inputs))) | set(outputs)
    last = {}
    for i, step in enumerate(steps):
        for s in step.inputs:
            last[s] = i
    values = list(table)
    values[:len(inputs)] = inputs
    for i, (op, ins, attrs, shape, dtype, out) in enumerate(steps):
        prims = [values[s] for s in ins]
        for s in set(ins):
            if last[s] == i and s not in pinned and table[s] is None:
                values[s] = None
        values[out] = be.execute(op, prims, attrs, shape, dtype)
        del prims
    return {s: values[s] for s in outputs}


class Runner:
    """Replays a compiled plan: runner(argument prims) -> {output slot: prim}, or None where
    an argument's layout or bounds differ from the capture's (op-by-op replay then)."""

    def __init__(self, be, meta, commands, patches, inputs, out_sizes, out_specs, owned, table):
        self.be, self.meta, self.commands, self.patches = be, bytes(meta), commands, patches
        self.layouts = [(p.strides, p.offset) for p in inputs]
        self.bounds = [p.range if p.dtype == "int32" else None for p in inputs]
        self.out_sizes, self.out_specs = out_sizes, out_specs
        self.owned = owned  # the intermediates' buffers, held as long as the plan
        self.table = table  # the constants, likewise

    def __call__(self, prims):
        for p, layout, bound in zip(prims, self.layouts, self.bounds):
            if type(p) is not Prim or (p.strides, p.offset) != layout:
                return None
            if bound is not None and (p.range is None or p.range[0] < bound[0]
                                      or p.range[1] > bound[1]):
                return None
        pool = self.be.pool
        made = [pool.take(n) for n in self.out_sizes]
        bound_now = ([p.storage.gpu for p in prims], [s.gpu for s in made])
        commands = self.commands
        if self.patches:
            commands = list(commands)
            for k, refs in self.patches:
                pipeline, _, offset, groups, cache = commands[k]
                buffers = tuple(r if kind == 2 else bound_now[kind][r] for kind, r in refs)
                commands[k] = (pipeline, buffers, offset, groups, cache)
        self.be.device.submit_plan(self.meta, commands)
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
