"""ember.onnx.save: a model (or function of Tensors) as an ONNX file, for onnxruntime(-web) and
every other runtime. The primitives its forward runs are captured as ember.jit captures them
(ember.capture); each becomes ONNX nodes (opset 17) through the table below, its weights and
constants become initializers. Shapes are those of the example (the captured reshapes are
static), so export at the batch size the file will run at.

    onnx.save(model.eval(), "model.onnx", example)   # example: a Tensor the model takes

Only the ops of the table are exported; any other raises OnnxError naming them all.
"""

import struct

import numpy as np

from ..tensor import Tensor
from .proto import OnnxError

OPSET = 17
_TYPES = {"float32": 1, "int32": 6, "int64": 7, "bool": 9, "float64": 11}


# ---- protobuf, written: varints, length-delimited fields -----------------------------------
def _varint(n):
    n &= (1 << 64) - 1  # negative int64s are ten bytes, as protobuf writes them
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number, value):
    """One field: an int (varint), a float (fixed32), str/bytes (length-delimited)."""
    if isinstance(value, bool) or isinstance(value, int):
        return _varint(number << 3) + _varint(int(value))
    if isinstance(value, float):
        return _varint(number << 3 | 5) + struct.pack("<f", value)
    data = value.encode() if isinstance(value, str) else bytes(value)
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _tensor(name, array):
    array = np.ascontiguousarray(array)
    return (b"".join(_field(1, d) for d in array.shape) + _field(2, _TYPES[array.dtype.name])
            + _field(8, name) + _field(9, array.astype(array.dtype.newbyteorder("<")).tobytes()))


def _attribute(name, value):
    if isinstance(value, float):
        return _field(1, name) + _field(2, value) + _field(20, 1)
    if isinstance(value, int):
        return _field(1, name) + _field(3, value) + _field(20, 2)
    return _field(1, name) + b"".join(_field(8, int(v)) for v in value) + _field(20, 7)


def _value_info(name, shape, dtype):
    dims = b"".join(_field(1, _field(1, d)) for d in shape)
    return _field(1, name) + _field(2, _field(1, _field(1, _TYPES[dtype]) + _field(2, dims)))


# ---- ember's primitives as ONNX nodes --------------------------------------------------------
class _Graph:
    def __init__(self):
        self.nodes, self.initializers, self.count = [], [], 0

    def name(self, hint):
        self.count += 1
        return f"{hint}_{self.count}"

    def const(self, array, hint="c"):
        name = self.name(hint)
        self.initializers.append(_tensor(name, np.asarray(array)))
        return name

    def node(self, op_type, inputs, attrs=None, out=None):
        out = out or self.name(op_type.lower())
        body = b"".join(_field(1, i) for i in inputs) + _field(2, out) + _field(4, op_type)
        body += b"".join(_field(5, _attribute(k, v)) for k, v in (attrs or {}).items())
        self.nodes.append(body)
        return out


_SAME = {"exp": "Exp", "log": "Log", "sqrt": "Sqrt", "erf": "Erf", "tanh": "Tanh", "sin": "Sin",
         "cos": "Cos", "neg": "Neg", "abs": "Abs", "relu": "Relu", "add": "Add", "sub": "Sub",
         "mul": "Mul", "div": "Div", "pow": "Pow", "maximum": "Max", "minimum": "Min",
         "eq": "Equal", "lt": "Less", "gt": "Greater", "le": "LessOrEqual",
         "ge": "GreaterOrEqual", "matmul": "MatMul"}


def _pads(padding):
    """ONNX's [top, left, bottom, right] from ember's ((top, bottom), (left, right)) or, for
    pooling, its symmetric (rows, columns)."""
    (top, bottom), (left, right) = (p if isinstance(p, tuple) else (p, p) for p in padding)
    return [top, left, bottom, right]


def _convert(g, op, ins, attrs, dtype, out):
    """The nodes of one primitive; ins: the names of its inputs. Returns False for an op
    this table has no form for."""
    name = op.name
    if name in _SAME:
        g.node(_SAME[name], ins, out=out)
    elif name == "ne":
        g.node("Not", [g.node("Equal", ins)], out=out)
    elif name == "gelu":  # x (1 + erf(x / sqrt 2)) / 2, as the op computes it
        x = ins[0]
        erf = g.node("Erf", [g.node("Div", [x, g.const(np.float32(np.sqrt(2)))])])
        half = g.node("Mul", [x, g.node("Add", [erf, g.const(np.float32(1))])])
        g.node("Div", [half, g.const(np.float32(2))], out=out)
    elif name == "cast":
        g.node("Cast", ins, {"to": _TYPES[attrs["dtype"]]}, out=out)
    elif name == "mask_where":  # value where mask, else x
        g.node("Where", [ins[1], ins[2], ins[0]], out=out)
    elif name in ("reshape", "expand"):
        g.node(name.capitalize(), [ins[0], g.const(np.asarray(attrs["shape_to"], np.int64))],
               out=out)
    elif name == "permute":
        g.node("Transpose", ins, {"perm": list(attrs["dims"])}, out=out)
    elif name == "slice":
        # ember's bounds are normalised; a stop of -1 with a negative step means "before index
        # 0", which ONNX would read as the last element
        starts, steps = attrs["starts"], attrs["steps"]
        stops = [-2**62 if c < 0 and b < 0 else b for b, c in zip(attrs["stops"], steps)]
        g.node("Slice", [ins[0], *(g.const(np.asarray(v, np.int64)) for v in (
            starts, stops, range(len(starts)), steps))], out=out)
    elif name == "cat":
        g.node("Concat", ins, {"axis": attrs["dim"]}, out=out)
    elif name == "sum":
        g.node("ReduceSum", [ins[0], g.const(np.asarray(attrs["dims"], np.int64))],
               {"keepdims": int(attrs.get("keepdim", True))}, out=out)
    elif name in ("max", "min"):
        g.node("ReduceMax" if name == "max" else "ReduceMin", ins,
               {"axes": list(attrs["dims"]), "keepdims": 1}, out=out)
    elif name in ("argmax", "argmin"):
        index = g.node("ArgMax" if name == "argmax" else "ArgMin", ins,
                       {"axis": attrs["dims"][0], "keepdims": 1})
        g.node("Cast", [index], {"to": _TYPES[dtype]}, out=out)
    elif name == "conv2d":
        g.node("Conv", ins, {"strides": list(attrs["stride"]), "pads": _pads(attrs["padding"]),
                             "dilations": list(attrs["dilation"]), "group": attrs["groups"]},
               out=out)
    elif name == "max_pool2d":
        g.node("MaxPool", ins, {"kernel_shape": list(attrs["kernel"]),
                                "strides": list(attrs["stride"]), "pads": _pads(attrs["padding"]),
                                "dilations": list(attrs["dilation"]),
                                "ceil_mode": int(bool(attrs["ceil_mode"]))}, out=out)
    else:
        return False
    return True


def save(model, path, *example):
    """Write `model` (a Module in eval mode, or a function of Tensors) as ONNX to `path`,
    capturing the primitives it runs on `example` (its input Tensors). Returns the path."""
    from ..capture import _capture, _signature, _slots
    if not example or not all(isinstance(t, Tensor) for t in example):
        raise OnnxError("onnx.save: give the example inputs (Tensors) the model takes")
    if getattr(model, "training", False):
        raise OnnxError("onnx.save: the model is in training mode (dropout, batch statistics);"
                        " call .eval() first")
    _, tensors, entries = _signature(example, {})
    out, plan = _capture(model, example, {}, tensors, entries)
    outputs = list(_slots(plan.layout))
    g, names, dtypes, missing = _Graph(), {}, {}, []
    for i, t in enumerate(example):
        names[i], dtypes[i] = f"input_{i}", t.dtype
    scalars, weights = {}, {}  # constant slots: scalars written per use, in the dtype their
    for slot, value in enumerate(plan.table):  # op computes in; weights when first read
        if value is not None and slot not in names:
            (scalars if isinstance(value, (int, float, bool)) else weights)[slot] = value
    for _, op, ins, attrs, _, dtype, out_slot, _ in plan.steps:
        for s in ins:
            if s in weights and s not in names:
                array = example[0].backend.to_numpy(weights[s])
                names[s], dtypes[s] = g.const(array, "w"), array.dtype.name
        typed = next((dtypes[s] for s in ins if s in names), dtype)
        inputs = [g.const(np.asarray(scalars[s], typed)) if s in scalars else names[s]
                  for s in ins]
        names[out_slot] = f"output_{outputs.index(out_slot)}" if out_slot in outputs \
            else g.name(op.name)
        dtypes[out_slot] = dtype
        if not _convert(g, op, inputs, attrs, dtype, names[out_slot]):
            missing.append(op.name)
    if missing:
        raise OnnxError(f"onnx.save: no ONNX form for ember's {sorted(set(missing))} here yet")
    results = [out] if isinstance(out, Tensor) else list(out)
    graph = b"".join(_field(1, n) for n in g.nodes) + _field(2, "ember")
    graph += b"".join(_field(5, t) for t in g.initializers)
    graph += b"".join(_field(11, _value_info(f"input_{i}", t.shape, t.dtype))
                      for i, t in enumerate(example))
    graph += b"".join(_field(12, _value_info(names[s], t.shape, t.dtype))
                      for s, t in zip(outputs, results))
    model_proto = (_field(1, 8) + _field(2, "ember") + _field(7, graph)
                   + _field(8, _field(1, "") + _field(2, OPSET)))
    with open(path, "wb") as f:
        f.write(model_proto)
    return path
