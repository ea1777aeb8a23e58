"""ember.onnx.to_python: the generated module (source + safetensors) gives load's outputs."""

import importlib.util
import io

import numpy as np
import pytest

from ember import onnx as eonnx
from ember.backend import NdArray

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")


def _import(path):
    spec = importlib.util.spec_from_file_location("generated_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_round_trip_of_a_convnet_with_dynamic_batch(tmp_path):
    from test_torch_models import ConvNet, _export, _randomize_batchnorm

    torch.manual_seed(0)
    net = ConvNet()
    _randomize_batchnorm(net)
    data = _export(net, (torch.randn(2, 3, 20, 20),), ["x"], ["x"])
    (tmp_path / "net.onnx").write_bytes(data)
    weights = eonnx.to_python(tmp_path / "net.onnx", tmp_path / "net.py")
    source = (tmp_path / "net.py").read_text()
    assert "class Model(Generated)" in source and "op('Conv', " in source
    generated = _import(tmp_path / "net.py").Model(backend=NdArray())
    loaded = eonnx.load(data, backend=NdArray())
    assert {n for n, _ in generated.named_params()} == {n for n, _ in loaded.named_params()}
    assert weights.endswith("net.safetensors")
    rng = np.random.default_rng(0)
    for n in (1, 3):
        x = rng.normal(size=(n, 3, 20, 20)).astype(np.float32)
        np.testing.assert_array_equal(generated(x).to_numpy(), loaded(x).to_numpy())


def test_several_outputs_and_odd_names(tmp_path):
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Add", ["in.0", "class"], ["1st"]),
             helper.make_node("Clip", ["1st", "", "hi"], ["out/x"]),
             helper.make_node("Constant", [], ["hi"], value_float=float("inf"))]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2])
                     for n in ("in.0", "class")],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in ("1st", "out/x")])
    f = io.BytesIO(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
                   .SerializeToString())
    eonnx.to_python(f.getvalue(), tmp_path / "odd.py")
    model = _import(tmp_path / "odd.py").Model()
    a, b = np.array([1, -2], np.float32), np.array([3, 1], np.float32)
    s, c = model(a, b)
    np.testing.assert_array_equal(s.to_numpy(), a + b)
    np.testing.assert_array_equal(c.to_numpy(), a + b)
