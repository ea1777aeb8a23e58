"""ember.onnx.proto: the protobuf reader, on valid files (compared with the onnx package) and on
malformed and hostile ones, which must each raise OnnxError (and never allocate what they only
claim)."""

import os

import numpy as np
import pytest

from ember import onnx as eonnx
from ember.onnx import proto

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _model(initializers=(), nodes=None):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    nodes = nodes or [helper.make_node("Relu", ["x"], ["y"])]
    graph = helper.make_graph(nodes, "g", [x], [y], initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# a few protobuf encoders, to write what the onnx package would refuse to
def varint(v):
    out = bytearray()
    v &= (1 << 64) - 1
    while True:
        out.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
        v >>= 7
        if not v:
            return bytes(out)


def field(number, payload=None, wire=2, value=0):
    key = varint(number << 3 | wire)
    if wire == 2:
        return key + varint(len(payload)) + payload
    return key + varint(value)


def test_reads_what_onnx_writes():
    arrays = {"f": np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5,
              "i": np.array([-1, 2**40, -2**62], np.int64), "b": np.array([True, False]),
              "d": np.array([[1.5]], np.float64), "n": np.array(-7, np.int32)}
    inits = [numpy_helper.from_array(a, n) for n, a in arrays.items()]
    inits.append(helper.make_tensor("typed", TensorProto.FLOAT, [2], [0.5, -1.0]))  # float_data
    inits.append(helper.make_tensor("typed64", TensorProto.INT64, [3], [-3, 0, 5]))
    model = proto.parse(_model(inits).SerializeToString())
    got = {t["name"]: proto.tensor(t) for t in model["graph"]["initializer"]}
    for name, a in arrays.items():
        np.testing.assert_array_equal(got[name], a)
        assert got[name].dtype == a.dtype and got[name].shape == a.shape
    np.testing.assert_array_equal(got["typed"], [0.5, -1.0])
    np.testing.assert_array_equal(got["typed64"], [-3, 0, 5])
    assert model["opset_import"][0].get("version") == 17
    node = model["graph"]["node"][0]
    assert (node["op_type"], node["input"], node["output"]) == ("Relu", ["x"], ["y"])


def test_attributes():
    node = helper.make_node("Foo", ["x"], ["y"], f=0.25, i=-3, s="text", ints=[1, -2],
                            floats=[0.5], strings=["a", "b"],
                            t=numpy_helper.from_array(np.ones(2, np.float32)))
    parsed = proto.parse(_model(nodes=[node]).SerializeToString())["graph"]["node"][0]
    attrs = {a["name"]: proto.attribute(a) for a in parsed["attribute"]}
    assert attrs["f"] == 0.25 and attrs["i"] == -3 and attrs["s"] == "text"
    assert attrs["ints"] == [1, -2] and attrs["floats"] == [0.5] and attrs["strings"] == ["a", "b"]
    np.testing.assert_array_equal(attrs["t"], np.ones(2, np.float32))


def test_every_truncation_is_refused():
    data = _model([numpy_helper.from_array(np.ones((2, 3), np.float32), "w")]).SerializeToString()
    for end in range(len(data) - 1, 0, -1):
        try:
            m = eonnx.load(data[:end])
        except eonnx.OnnxError:
            continue  # refused with ember's error: fine
        # a cut at a field boundary is a shorter valid message: it must still make sense
        assert isinstance(m, eonnx.OnnxModule)


def test_wrong_wire_type():
    bad = field(7, wire=0, value=5)  # ModelProto.graph (a message) as a varint
    with pytest.raises(eonnx.OnnxError, match="wire type"):
        proto.parse(bad)
    with pytest.raises(eonnx.OnnxError, match="wire type 3"):
        proto.parse(varint(7 << 3 | 3))  # groups: never ONNX


def test_lengths_past_the_end_and_long_varints():
    with pytest.raises(eonnx.OnnxError, match="claims"):
        proto.parse(varint(7 << 3 | 2) + varint(2**40) + b"abc")
    with pytest.raises(eonnx.OnnxError, match="longer than 10 bytes"):
        proto.parse(varint(1 << 3) + b"\xff" * 11 + b"\x01")
    with pytest.raises(eonnx.OnnxError, match="truncated"):
        proto.parse(varint(1 << 3) + b"\xff")


def test_nesting_is_bounded():
    graph = b""
    for _ in range(40):  # graph -> node -> attribute -> graph -> ...
        attr = field(1, b"g") + field(20, wire=0, value=5) + field(6, graph)
        graph = field(1, field(4, b"If") + field(5, attr))
    with pytest.raises(eonnx.OnnxError, match="deeper than"):
        proto.parse(field(7, graph))


def test_claimed_sizes_are_checked_before_allocating():
    huge = field(1, wire=0, value=2**40) + field(2, wire=0, value=1) + field(9, b"\0" * 8)
    t = proto.parse(huge, "Tensor")
    with pytest.raises(eonnx.OnnxError, match="needs 4398046511104 bytes"):
        proto.tensor(t)
    typed = field(1, wire=0, value=2**40) + field(2, wire=0, value=7) + field(7, varint(1))
    with pytest.raises(eonnx.OnnxError, match="needs 1099511627776 values"):
        proto.tensor(proto.parse(typed, "Tensor"))
    with pytest.raises(eonnx.OnnxError, match="negative dims"):
        proto.tensor(proto.parse(field(1, wire=0, value=-1) + field(2, wire=0, value=1),
                                 "Tensor"))


def _external(location, nbytes=24, offset=0):
    t = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(nbytes))):
        e = t.external_data.add()
        e.key, e.value = k, v
    return _model([t]).SerializeToString()


def test_external_data_stays_in_the_model_folder(tmp_path):
    (tmp_path / "weights.bin").write_bytes(np.full((2, 3), 2, np.float32).tobytes())
    (tmp_path / "model.onnx").write_bytes(_external("weights.bin"))
    m = eonnx.load(tmp_path / "model.onnx")
    np.testing.assert_array_equal(m.w.to_numpy(), np.full((2, 3), 2, np.float32))
    with pytest.raises(eonnx.OnnxError, match="given as bytes"):
        eonnx.load(_external("weights.bin"))
    outside = tmp_path.parent / "secret.bin"
    outside.write_bytes(b"\0" * 24)
    for where in ("../secret.bin", str(outside), "sub/../../secret.bin"):
        (tmp_path / "evil.onnx").write_bytes(_external(where))
        with pytest.raises(eonnx.OnnxError, match="outside the model's folder"):
            eonnx.load(tmp_path / "evil.onnx")
    (tmp_path / "link.bin").symlink_to(outside)
    (tmp_path / "evil.onnx").write_bytes(_external("link.bin"))
    with pytest.raises(eonnx.OnnxError, match="outside the model's folder"):
        eonnx.load(tmp_path / "evil.onnx")
    (tmp_path / "short.onnx").write_bytes(_external("weights.bin", offset=8))
    with pytest.raises(eonnx.OnnxError, match="refused"):
        eonnx.load(tmp_path / "short.onnx")
    os.remove(outside)


def test_not_onnx():
    with pytest.raises(eonnx.OnnxError):
        eonnx.load(b"\x89PNG\r\n\x1a\n not a model at all")
    with pytest.raises(eonnx.OnnxError, match="no graph"):
        eonnx.load(b"")
    with pytest.raises(eonnx.OnnxError, match="cannot read"):
        eonnx.load("/nonexistent/model.onnx")


def test_sizes_the_graph_asks_for_are_bounded():
    shape = numpy_helper.from_array(np.array([2**20, 2**20], np.int64), "shape")
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["big"]),
             helper.make_node("Add", ["x", "big"], ["y"])]
    with pytest.raises(eonnx.OnnxError, match="ConstantOfShape asks for a tensor of shape"):
        eonnx.load(_model([shape], nodes).SerializeToString())  # folded at load: refused
