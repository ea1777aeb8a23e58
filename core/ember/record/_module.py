"""Saving a module's Params and loading them back: the checks shared by every loader.

A load is planned in full before anything changes: every name, shape and dtype is compared,
every cast is tried, every value is put on the parameter's backend; only then are the Params
swapped (each keeps its id and trainable flag, so optimizer state stays valid). A load that
fails raises one RecordError listing every problem and leaves the module as it was.
"""

import datetime
import json
import os
import warnings
from collections import Counter

import numpy as np

from ..nn.module import Module
from ..tensor import Tensor
from . import _convert, _safetensors
from ._errors import RecordError

_RESERVED = ("format", "ember.")


def state_dict(module):
    """{dotted name: NumPy array} of every Param of `module`, trainable or not, under
    PyTorch's state-dict names. The arrays are read-only views or copies of the values."""
    _check_module(module, "record.state_dict")
    return {name: p.to_numpy() for name, p in module.named_params()}


def save(module, path, metadata=None):
    """Write every Param of `module` (trainable and not) to a safetensors file at `path`,
    atomically. `metadata`: extra str -> str entries for the file's header."""
    _check_module(module, "record.save")
    tensors = state_dict(module)
    meta = header_metadata("module", type(module).__name__)
    meta["ember.dtypes"] = json.dumps({n: str(a.dtype) for n, a in tensors.items()})
    meta.update(user_metadata(metadata, "record.save"))
    _safetensors.write(tensors, path, meta, who="record.save")


def header_metadata(kind, what):
    from .. import __version__

    return {
        "format": "ember",
        "ember.kind": kind,
        "ember.type": what,
        "ember.version": __version__,
        "ember.created": datetime.datetime.now(datetime.UTC).isoformat(
            timespec="seconds"),
    }


def user_metadata(metadata, who):
    if metadata is None:
        return {}
    metadata = _safetensors.check_metadata(metadata, who)
    taken = [k for k in metadata if k == "format" or k.startswith("ember.")]
    if taken:
        raise RecordError(f"{who}: metadata keys {taken!r} are ember's own ('format' and "
                          "'ember.*'); choose other names")
    return metadata


def load(module, path, strict=True):
    """Load a file written by `record.save` (or any safetensors file with the module's names)
    into `module`, in place; returns the module. With strict=False, names missing on either
    side are skipped (with a warning); shapes and dtypes must still fit."""
    _check_module(module, "record.load")
    kind = sniff(path)
    if kind in ("zip", "pickle", "tar"):
        raise RecordError(f"record.load: {os.fspath(path)!r} is a PyTorch file, not a "
                          "safetensors record; read it with record.load_pytorch(path, module)")
    file = _safetensors.File(path, "record.load")
    return fill(module, file.entries, strict=strict, who="record.load",
                source=repr(os.fspath(path)), read=file.read)


def load_state_dict(module, tensors, strict=True):
    """Load {dotted name: NumPy array or Tensor} into `module` with the checks of
    `record.load` (all names, shapes and dtypes; nothing changes on failure). Returns it."""
    _check_module(module, "record.load_state_dict")
    entries = {}
    for name, value in tensors.items():
        if isinstance(value, Tensor):
            value = value.to_numpy()
        entries[name] = ArrayEntry(np.asarray(value))
    return fill(module, entries, strict=strict, who="record.load_state_dict",
                source="the state dict")


class ArrayEntry:
    """An in-memory array, with the interface of a file's lazy entries."""

    __slots__ = ("array",)

    def __init__(self, array):
        self.array = array

    @property
    def shape(self):
        return self.array.shape

    @property
    def dtype(self):
        return self.array.dtype.name

    def load(self):
        return self.array


def _check_module(module, who):
    if not isinstance(module, Module):
        raise TypeError(f"{who}: expected an nn.Module, got {type(module).__name__} "
                        "(the module comes first: record.load(model, path))")


def sniff(path):
    """What a file looks like from its first bytes: 'safetensors', 'zip' (torch.save),
    'pickle' (torch.save's legacy format), 'tar' (older still) or 'unknown'."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(16)
        f.seek(257)
        tar = f.read(5) == b"ustar"
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return "zip"
    if _safetensors.looks_like(head, size):
        return "safetensors"
    if tar:
        return "tar"
    if head[:1] == b"\x80":
        return "pickle"
    return "unknown"


# ---- the shared loader -----------------------------------------------------------------------

def fill(module, entries, *, strict, who, source, read=None, renamed=None, notes=()):
    """Check `entries` ({name: entry with .shape, .dtype, .load()}) against the module's Params
    and swap in the values, or raise one RecordError listing every problem.
    `read(list_of_entries)` loads several entries at once (one pass over a file);
    `renamed` maps a name to the one it had in the file (key_map), for the messages."""
    renamed = renamed or {}
    where = "the state dict" if source == "the state dict" else "the file"
    params = dict(module.named_params())
    missing = [n for n in params if n not in entries]
    unexpected = [n for n in entries if n not in params]
    matched = [n for n in params if n in entries]

    problems = []
    for n in matched:
        have, want = tuple(entries[n].shape), tuple(params[n].shape)
        if have != want:
            hint = " (the transpose)" if len(want) == 2 and have == want[::-1] else ""
            problems.append(f"shape of {_named(n, renamed)}: {list(have)} in {where}, "
                            f"{list(want)} in the module{hint}")
    wanted = [n for n in matched if tuple(entries[n].shape) == tuple(params[n].shape)]

    if read is not None:
        arrays = dict(zip(wanted, read([entries[n] for n in wanted])))
    else:
        arrays = {n: entries[n].load() for n in wanted}
    values = {}
    for n in wanted:
        array = arrays.pop(n)
        array, why = _convert.fit(np.asarray(array), params[n].dtype)
        if why is not None:
            problems.append(f"dtype of {_named(n, renamed)}: {entries[n].dtype} in {where}, "
                            f"{params[n].dtype} in the module: {why}")
        else:
            values[n] = array

    if problems or (strict and (missing or unexpected)):
        lines = []
        if missing and strict:
            lines.append(f"missing: {len(missing)} in the module but not in {where}:")
            lines += [f"    {n}" for n in missing]
        if unexpected and strict:
            lines.append(f"unexpected: {len(unexpected)} in {where} but not in the module:")
            lines += [f"    {_named(n, renamed)}" for n in unexpected]
        lines += problems
        lines += (_hints(missing, unexpected) if strict else []) + list(notes)
        count = len(problems) + (len(missing) + len(unexpected) if strict else 0)
        raise RecordError(f"{who}: {source} does not fit {type(module).__name__}; nothing was "
                          f"loaded ({count} problem{'s' * (count != 1)}):\n  "
                          + "\n  ".join(lines))

    # a Param inside a tuple cannot be replaced: find out now (mapping each Param to itself
    # changes nothing), not halfway through the real update
    module.map_params(lambda n, p: p)
    new = {}
    for n, array in values.items():
        p = params[n]
        if id(p) not in new:  # a Param shared under several names takes its first one
            new[id(p)] = p.with_value(Tensor.from_data(array, backend=p.backend,
                                                       dtype=p.dtype))
    module.map_params(lambda n, p: new.get(id(p), p))

    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"{len(missing)} missing (left as they were): {', '.join(missing)}")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected (ignored): "
                         f"{', '.join(_named(n, renamed) for n in unexpected)}")
        warnings.warn(f"{who} (strict=False): " + "; ".join(parts), stacklevel=3)
    return module


def _named(name, renamed):
    old = renamed.get(name)
    return f"{name} (from {old})" if old is not None and old != name else name


def _hints(missing, unexpected):
    """A key_map that would fix a prefix difference (DataParallel's 'module.', a wrapper)."""
    if not missing or not unexpected or len(missing) * len(unexpected) > 4_000_000:
        return []
    strip, add = Counter(), Counter()
    for u in unexpected:
        for m in missing:
            if u.endswith("." + m):
                strip[u[: len(u) - len(m)]] += 1
            elif m.endswith("." + u):
                add[m[: len(m) - len(u)]] += 1
    lines = []
    if strip:
        prefix, hits = strip.most_common(1)[0]
        if hits * 2 >= len(unexpected):
            lines.append(f"hint: {hits} names in the file have an extra prefix {prefix!r}: "
                         f"record.load_pytorch(..., key_map={{r'^{_escape(prefix)}': ''}})")
    if add:
        prefix, hits = add.most_common(1)[0]
        if hits * 2 >= len(missing):
            lines.append(f"hint: {hits} names in the file lack the prefix {prefix!r}: "
                         f"record.load_pytorch(..., key_map={{r'^': '{prefix}'}})")
    return lines


def _escape(prefix):
    return prefix.replace(".", r"\.")
