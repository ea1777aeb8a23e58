"""A reader of the ONNX protobuf wire format (no `onnx` or `protobuf` package: it runs in Pyodide).

Only the messages a model needs are described (SCHEMA below); unknown fields are skipped, as
protobuf readers do. The reader trusts nothing in the file: every length is checked against the
bytes actually present before it is used, varints are at most 10 bytes, a known field with the
wrong wire type is refused, nesting (subgraphs in attributes) is bounded, and a tensor's data
must have exactly the size its dims and dtype give before an array is made of it. External data
is read only from files inside the model's own folder.
"""

import os

import numpy as np

from ..errors import EmberError


class OnnxError(EmberError, ValueError):
    """An ONNX file ember cannot read or run: malformed, hostile, or using what ember lacks."""


MAX_DEPTH = 64  # nested messages; a graph inside an attribute costs 3 levels

# a message: {field number: (name, kind, repeated)}; kinds: "int" (varint, signed 64-bit),
# "float", "double", "str", "bytes", "f32"/"f64"/"i64" (repeated numbers, packed or not), or
# the name of a message
_M = {
    "Model": {1: ("ir_version", "int", 0), 8: ("opset_import", "Opset", 1),
              2: ("producer_name", "str", 0), 7: ("graph", "Graph", 0),
              25: ("functions", "Function", 1)},
    "Opset": {1: ("domain", "str", 0), 2: ("version", "int", 0)},
    "Graph": {1: ("node", "Node", 1), 2: ("name", "str", 0), 5: ("initializer", "Tensor", 1),
              15: ("sparse_initializer", "bytes", 1), 11: ("input", "Value", 1),
              12: ("output", "Value", 1), 13: ("value_info", "Value", 1)},
    "Node": {1: ("input", "str", 1), 2: ("output", "str", 1), 3: ("name", "str", 0),
             4: ("op_type", "str", 0), 7: ("domain", "str", 0), 5: ("attribute", "Attr", 1)},
    "Attr": {1: ("name", "str", 0), 21: ("ref_attr_name", "str", 0), 20: ("type", "int", 0),
             2: ("f", "float", 0), 3: ("i", "int", 0), 4: ("s", "bytes", 0),
             5: ("t", "Tensor", 0), 6: ("g", "Graph", 0), 7: ("floats", "f32", 1),
             8: ("ints", "i64", 1), 9: ("strings", "bytes", 1), 10: ("tensors", "Tensor", 1),
             11: ("graphs", "Graph", 1), 22: ("sparse_tensor", "bytes", 0)},
    "Tensor": {1: ("dims", "i64", 1), 2: ("data_type", "int", 0), 4: ("float_data", "f32", 1),
               5: ("int32_data", "i64", 1), 6: ("string_data", "bytes", 1),
               7: ("int64_data", "i64", 1), 8: ("name", "str", 0), 9: ("raw_data", "bytes", 0),
               10: ("double_data", "f64", 1), 11: ("uint64_data", "i64", 1),
               13: ("external_data", "Entry", 1), 14: ("data_location", "int", 0),
               3: ("segment", "bytes", 0)},
    "Entry": {1: ("key", "str", 0), 2: ("value", "str", 0)},
    "Value": {1: ("name", "str", 0), 2: ("type", "Type", 0)},
    "Type": {1: ("tensor_type", "TensorType", 0), 4: ("sequence_type", "bytes", 0),
             5: ("map_type", "bytes", 0), 9: ("optional_type", "bytes", 0),
             8: ("sparse_tensor_type", "bytes", 0)},
    "TensorType": {1: ("elem_type", "int", 0), 2: ("shape", "Shape", 0)},
    "Shape": {1: ("dim", "Dim", 1)},
    "Dim": {1: ("dim_value", "int", 0), 2: ("dim_param", "str", 0)},
    "Function": {1: ("name", "str", 0), 10: ("domain", "str", 0)},
}
_WIRE = {"int": 0, "float": 5, "double": 1}  # the rest: 2 (length-delimited)
_PACKED = {"f32": ("<f4", 5, 4), "f64": ("<f8", 1, 8), "i64": (None, 0, 0)}

# TensorProto.DataType -> NumPy dtype; ember runs five of them (the rest are read, then refused
# by the loader with their name)
DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
          9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64"}
DTYPE_NAMES = {8: "string", 14: "complex64", 15: "complex128", 16: "bfloat16",
               17: "float8e4m3fn", 18: "float8e4m3fnuz", 19: "float8e5m2",
               20: "float8e5m2fnuz", 21: "uint4", 22: "int4", 23: "float4e2m1",
               24: "float8e8m0", 25: "uint2", 26: "int2", 27: "float6e2m3", 28: "float6e3m2"}
DTYPE_NAMES.update(DTYPES)


def dtype_name(code):
    return DTYPE_NAMES.get(code, f"data type {code}")


def _varint(buf, at, end, what):
    value = shift = 0
    for _ in range(10):
        if at >= end:
            raise OnnxError(f"onnx: truncated file: a varint of {what} runs past the end of its "
                            "message")
        b = buf[at]
        at += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, at
        shift += 7
    raise OnnxError(f"onnx: malformed file: a varint of {what} is longer than 10 bytes")


def _signed(v):
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >= 1 << 63 else v


def parse(buf, kind="Model", start=0, end=None, depth=0):
    """The message `kind` in buf[start:end] as a dict of its known fields (lists for repeated
    ones; bytes fields as bytes; absent fields are absent)."""
    if depth > MAX_DEPTH:
        raise OnnxError(f"onnx: the file nests messages (subgraphs) deeper than {MAX_DEPTH} "
                        "levels; refused")
    end = len(buf) if end is None else end
    schema, out, at = _M[kind], {}, start
    while at < end:
        key, at = _varint(buf, at, end, kind)
        number, wire = key >> 3, key & 7
        field = schema.get(number)
        if wire == 0:
            value, at = _varint(buf, at, end, kind)
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if at + size > end:
                raise OnnxError(f"onnx: truncated file: a fixed-size field of {kind} runs past "
                                "the end of its message")
            value, at = (at, at + size), at + size
        elif wire == 2:
            size, at = _varint(buf, at, end, kind)
            if size > end - at:
                raise OnnxError(f"onnx: truncated or malformed file: a field of {kind} claims "
                                f"{size} bytes, {end - at} remain")
            value, at = (at, at + size), at + size
        else:
            raise OnnxError(f"onnx: malformed file: wire type {wire} (field {number} of {kind}) "
                            "is not used by ONNX; is this an ONNX file?")
        if field is None or number == 0:
            continue
        name, ftype, repeated = field
        item = _value(buf, kind, name, ftype, wire, value, depth)
        if ftype in _PACKED:
            out.setdefault(name, []).extend(item)
        elif repeated:
            out.setdefault(name, []).append(item)
        else:
            out[name] = item
    return out


def _value(buf, kind, name, ftype, wire, value, depth):
    if ftype in _PACKED:
        dt, scalar_wire, size = _PACKED[ftype]
        if wire == scalar_wire:
            if dt is None:
                return [_signed(value)]
            return np.frombuffer(buf[value[0]:value[1]], dt).tolist()
        if wire != 2:
            return _wrong(kind, name, wire)
        a, b = value
        if dt is None:
            items = []
            while a < b:
                v, a = _varint(buf, a, b, f"{kind}.{name}")
                items.append(_signed(v))
            return items
        if (b - a) % size:
            raise OnnxError(f"onnx: malformed file: {kind}.{name} holds {b - a} bytes, not a "
                            f"whole number of {size}-byte values")
        return np.frombuffer(buf[a:b], dt)
    want = _WIRE.get(ftype, 2)
    if wire != want:
        return _wrong(kind, name, wire)
    if ftype == "int":
        return _signed(value)
    if ftype in ("float", "double"):
        return float(np.frombuffer(buf[value[0]:value[1]], "<f4" if ftype == "float" else "<f8")[0])
    if ftype == "bytes":
        return bytes(buf[value[0]:value[1]])
    if ftype == "str":
        try:
            return bytes(buf[value[0]:value[1]]).decode("utf-8")
        except UnicodeDecodeError:
            raise OnnxError(f"onnx: malformed file: {kind}.{name} is not UTF-8 text") from None
    return parse(buf, ftype, value[0], value[1], depth + 1)


def _wrong(kind, name, wire):
    raise OnnxError(f"onnx: malformed file: {kind}.{name} has wire type {wire}, which that field "
                    "never uses; the file is corrupt or not ONNX")


# ---- tensors ----------------------------------------------------------------------------------
def tensor(t, folder=None):
    """The NumPy array of a parsed TensorProto. `folder`: the model's folder, for external data
    (None: external data is refused, as for a model given as bytes)."""
    name = t.get("name", "")
    code = t.get("data_type", 0)
    if code not in DTYPES:
        raise OnnxError(f"onnx: tensor {name!r} has dtype {dtype_name(code)}, which ember does "
                        "not support (unsupported: dtype)")
    dtype = np.dtype(DTYPES[code]).newbyteorder("<")
    dims = t.get("dims", [])
    if any(d < 0 for d in dims):
        raise OnnxError(f"onnx: tensor {name!r} has negative dims {dims}")
    count = 1
    for d in dims:
        count *= d
    if t.get("segment") is not None:
        raise OnnxError(f"onnx: tensor {name!r} is segmented, which ember does not read")
    if t.get("data_location", 0) == 1:
        raw = _external(t, name, folder, count * dtype.itemsize)
    else:
        raw = t.get("raw_data")
    if raw is not None:
        if len(raw) != count * dtype.itemsize:
            raise OnnxError(f"onnx: tensor {name!r} of shape {dims} ({DTYPES[code]}) needs "
                            f"{count * dtype.itemsize} bytes of data, the file holds {len(raw)}")
        return np.frombuffer(raw, dtype).astype(dtype.newbyteorder("="), copy=True).reshape(dims)
    field = {1: "float_data", 11: "double_data", 7: "int64_data", 12: "uint64_data",
             13: "uint64_data"}.get(code, "int32_data")
    values = t.get(field, [])
    if len(values) != count:
        raise OnnxError(f"onnx: tensor {name!r} of shape {dims} needs {count} values, the file "
                        f"holds {len(values)} in {field}")
    if code == 10:  # float16 is stored as its bits in int32_data
        return np.array(values, np.uint16).view(np.float16).reshape(dims)
    if code == 13:
        return np.array([v & ((1 << 64) - 1) for v in values], np.uint64).reshape(dims)
    return np.array(values, dtype.newbyteorder("=")).reshape(dims)


def _external(t, name, folder, nbytes):
    info = {e.get("key"): e.get("value", "") for e in t.get("external_data", [])}
    if folder is None:
        raise OnnxError(f"onnx: tensor {name!r} keeps its data in an external file, which a model "
                        "given as bytes cannot reach; load it from its path")
    location = info.get("location", "")
    root = os.path.realpath(folder)
    path = os.path.realpath(os.path.join(root, location))
    if not location or os.path.isabs(location) or os.path.commonpath([root, path]) != root:
        raise OnnxError(f"onnx: tensor {name!r} names external data {location!r} outside the "
                        f"model's folder {folder!r}; refused")
    try:
        offset, length = int(info.get("offset", 0)), int(info.get("length", nbytes))
    except ValueError:
        raise OnnxError(f"onnx: tensor {name!r} has a malformed offset or length") from None
    if not os.path.isfile(path):
        raise OnnxError(f"onnx: tensor {name!r}: external data file {location!r} not found")
    size = os.path.getsize(path)
    if offset < 0 or length != nbytes or offset + length > size:
        raise OnnxError(f"onnx: tensor {name!r} needs {nbytes} bytes at offset {offset} of "
                        f"{location!r} ({size} bytes, length given {length}); refused")
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(length)


def attribute(a, folder=None):
    """A parsed AttributeProto's value as Python: float, int, str, ndarray, graph dict, lists."""
    kind = a.get("type", 0)
    if kind == 1:
        return a.get("f", 0.0)
    if kind == 2:
        return a.get("i", 0)
    if kind == 3:
        return a.get("s", b"").decode("utf-8", "replace")
    if kind == 4:
        return tensor(a.get("t", {}), folder)
    if kind == 5:
        return a.get("g", {})
    if kind == 6:
        return [float(v) for v in a.get("floats", [])]
    if kind == 7:
        return list(a.get("ints", []))
    if kind == 8:
        return [s.decode("utf-8", "replace") for s in a.get("strings", [])]
    if kind == 9:
        return [tensor(t, folder) for t in a.get("tensors", [])]
    if kind == 10:
        return a.get("graphs", [])
    raise OnnxError(f"onnx: attribute {a.get('name')!r} has type {kind}, which ember does not "
                    "read (unsupported: attribute type)")


def value_info(v):
    """(name, dtype code or None, shape as ints/strings/None, or None) of a ValueInfoProto."""
    tt = v.get("type", {}).get("tensor_type")
    if tt is None:
        return v.get("name", ""), None, None
    shape = tt.get("shape")
    dims = None if shape is None else [
        d.get("dim_value", d.get("dim_param")) for d in shape.get("dim", [])]
    return v.get("name", ""), tt.get("elem_type"), dims
