"""Nested state (optimizer state, checkpoints) in a safetensors file.

`save_state` stores every array under a dotted name built from its path in the structure
({"state": {"fc.weight": {"exp_avg": a}}} -> "state.fc.weight.exp_avg"), so other tools see
ordinary tensors. Since parameter names contain dots themselves, the structure is not
recovered from the names: a JSON skeleton in the header's metadata ("ember.state") records
every dict (with its keys' types), list and tuple, every Python scalar (exactly: ints stay ints,
floats round-trip), and which name holds each array. `load_state` rebuilds the same structure.
"""

import json
import os

import numpy as np

from ..tensor import Tensor
from . import _module, _safetensors
from ._errors import RecordError

_KEY_TYPES = (str, int, float, bool, type(None))
_SCALARS = (str, int, float, bool, type(None))


def save_state(state, path, metadata=None):
    """Write nested dicts / lists / tuples of NumPy arrays, ember Tensors, NumPy scalars and
    Python scalars (numbers, bools, strings, None) to a safetensors file, atomically."""
    tensors = {}
    skeleton = _encode(state, "", tensors)
    meta = _module.header_metadata("state", type(state).__name__)
    meta["ember.state"] = json.dumps(skeleton, separators=(",", ":"))
    meta.update(_module.user_metadata(metadata, "record.save_state"))
    _safetensors.write(tensors, path, meta, who="record.save_state")


def load_state(path, backend=None):
    """The structure `save_state` wrote, with NumPy arrays (ember Tensors where Tensors were
    saved, on `backend` or the default one). A safetensors file from elsewhere gives a flat
    {name: NumPy array} dict."""
    file = _safetensors.File(path, "record.load_state")
    arrays = dict(zip(file.entries, file.read(list(file.entries.values()))))
    text = file.metadata.get("ember.state")
    if text is None:
        return arrays
    try:
        skeleton = json.loads(text)
    except json.JSONDecodeError as e:
        raise RecordError(f"record.load_state: cannot read {os.fspath(path)!r}: its "
                          f"'ember.state' metadata is not valid JSON ({e})") from None
    try:
        return _decode(skeleton, arrays, backend)
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise RecordError(f"record.load_state: cannot read {os.fspath(path)!r}: its "
                          f"'ember.state' metadata does not match its tensors ({e!r})") from None


def _encode(obj, path, tensors):
    if isinstance(obj, dict):
        items = []
        for key, value in obj.items():
            if not isinstance(key, _KEY_TYPES):
                raise RecordError(f"record.save_state: the key {key!r} at {path or 'the top'!r}"
                                  f" is a {type(key).__name__}; keys must be str, int, float, "
                                  "bool or None")
            items.append([key, _encode(value, _join(path, key), tensors)])
        return {"dict": items}
    if isinstance(obj, (list, tuple)):
        kind = "list" if isinstance(obj, list) else "tuple"
        return {kind: [_encode(v, _join(path, i), tensors) for i, v in enumerate(obj)]}
    if isinstance(obj, Tensor):
        return {"tensor": _store(obj.to_numpy(), path, tensors)}
    if isinstance(obj, np.ndarray):
        return {"array": _store(obj, path, tensors)}
    if isinstance(obj, np.generic):
        return {"numpy": _store(np.asarray(obj), path, tensors)}
    if isinstance(obj, _SCALARS):
        return obj  # JSON keeps int / float / bool / str / None apart; containers are objects
    raise RecordError(f"record.save_state: cannot store a {type(obj).__name__} at "
                      f"{path or 'the top'!r}; it stores dicts, lists and tuples of NumPy "
                      "arrays, Tensors, NumPy scalars and Python numbers, bools, strings, None")


def _join(path, key):
    return f"{path}.{key}" if path else str(key)


def _store(array, path, tensors):
    if array.dtype.kind not in "biuf" or _safetensors.dtype_code(array.dtype) is None:
        raise RecordError(f"record.save_state: the array at {path or 'the top'!r} has dtype "
                          f"{array.dtype}, which safetensors cannot store")
    name, n = path or "value", 1
    while name in tensors:  # {"a.b": x} and {"a": {"b": y}} both want "a.b"
        n += 1
        name = f"{path or 'value'}~{n}"
    tensors[name] = array
    return name


def _decode(node, arrays, backend):
    if isinstance(node, dict):
        (kind, value), = node.items()
        if kind == "dict":
            return {key: _decode(v, arrays, backend) for key, v in value}
        if kind == "list":
            return [_decode(v, arrays, backend) for v in value]
        if kind == "tuple":
            return tuple(_decode(v, arrays, backend) for v in value)
        if kind == "array":
            return arrays[value]
        if kind == "numpy":
            return arrays[value][()]
        if kind == "tensor":
            return Tensor.from_data(arrays[value], backend=backend)
        raise ValueError(f"unknown node {kind!r}")
    return node
