"""ember.onnx.model: loading graphs as modules (Params under ONNX names, several inputs and
outputs, dynamic batch dims through folded shape arithmetic, topological order, dead nodes),
training one, and `unsupported` listing all that a model lacks at once."""

import numpy as np
import pytest

from ember import Tensor, record
from ember import onnx as eonnx
from ember.backend import Autodiff, NdArray

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(0)


def _value(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def _bytes(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              initializer=[numpy_helper.from_array(a, n) for n, a in inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]) \
        .SerializeToString()


def _mlp():
    """x [N, 4] -> Gemm -> Relu -> MatMul + b, then a Reshape to [N, 1, 3] whose shape is
    computed from x's (Shape -> Gather -> Unsqueeze -> Concat), as PyTorch exports write it."""
    w1, b1 = RNG.normal(size=(5, 4)).astype(np.float32), RNG.normal(size=5).astype(np.float32)
    w2, b2 = RNG.normal(size=(5, 3)).astype(np.float32), RNG.normal(size=3).astype(np.float32)
    nodes = [
        helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], transB=1),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("MatMul", ["r", "fc2.weight"], ["m"]),
        helper.make_node("Add", ["m", "fc2.bias"], ["y2d"]),
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "zeros"], ["n1"]),
        helper.make_node("Concat", ["n1", "rest"], ["shape"], axis=0),
        helper.make_node("Reshape", ["y2d", "shape"], ["y"]),
        helper.make_node("Neg", ["r"], ["unused"]),  # a dead node
    ]
    inits = [("fc1.weight", w1), ("fc1.bias", b1), ("fc2.weight", w2), ("fc2.bias", b2),
             ("zero", np.array(0, np.int64)), ("zeros", np.array([0], np.int64)),
             ("rest", np.array([1, 3], np.int64))]
    data = _bytes(nodes, [_value("x", ["N", 4])], [_value("y", ["N", 1, 3])], inits)

    def reference(x):
        return (np.maximum(x @ w1.T + b1, 0) @ w2 + b2).reshape(len(x), 1, 3)
    return data, reference


def test_mlp_with_dynamic_batch_matches_numpy():
    data, reference = _mlp()
    model = eonnx.load(data, backend=NdArray())
    for n in (1, 3, 7):
        x = RNG.normal(size=(n, 4)).astype(np.float32)
        np.testing.assert_allclose(model(x).to_numpy(), reference(x), rtol=1e-5, atol=1e-6)
    # the dead Neg is dropped; the shape arithmetic depends on x's batch dim, so it runs on
    # the host at each call
    assert [n.op_type for n in model._nodes].count("Neg") == 0 and len(model._nodes) == 9
    names = dict(model.named_params())
    assert set(names) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "zero", "zeros",
                          "rest"}
    assert [n for n, _ in model.named_parameters()] == ["fc1.weight", "fc1.bias", "fc2.weight",
                                                        "fc2.bias"]


def test_state_dict_and_record_round_trip(tmp_path):
    data, _ = _mlp()
    a, b = eonnx.load(data), eonnx.load(data)
    b.map_params(lambda n, p: p.with_value(p.value() * 0) if p.trainable else p)
    record.save(a, tmp_path / "w.safetensors")
    record.load(b, tmp_path / "w.safetensors")
    x = RNG.normal(size=(2, 4)).astype(np.float32)
    np.testing.assert_array_equal(a(x).to_numpy(), b(x).to_numpy())
    assert set(record.state_dict(a)) == {n for n, _ in a.named_params()}


def test_fine_tuning_one_step_lowers_the_loss():
    from ember import optim

    data, _ = _mlp()
    backend = Autodiff(NdArray())
    model = eonnx.load(data, backend=backend)
    x = Tensor.from_data(RNG.normal(size=(8, 4)).astype(np.float32), backend)
    target = Tensor.from_data(RNG.normal(size=(8, 1, 3)).astype(np.float32), backend)
    opt = optim.SGD(lr=0.05)

    def loss_of(m):
        d = m(x) - target
        return (d * d).mean()

    before = loss_of(model)
    grads = optim.GradientsParams.from_grads(before.backward(), model)
    assert len(grads) == 4  # the four float initializers, and only they
    model = opt.step(model, grads)
    assert loss_of(model).item() < before.item()


def test_several_inputs_and_outputs_by_position_or_name():
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Mul", ["a", "b"], ["p"])]
    data = _bytes(nodes, [_value("a", [2]), _value("b", [2])], [_value("s", [2]), _value("p", [2])])
    model = eonnx.load(data)
    a, b = np.array([1, 2], np.float32), np.array([3, 5], np.float32)
    s, p = model(a, b)
    np.testing.assert_array_equal(s.to_numpy(), a + b)
    np.testing.assert_array_equal(model(b=b, a=a)[1].to_numpy(), a * b)
    with pytest.raises(eonnx.OnnxError, match="missing"):
        model(a)
    with pytest.raises(eonnx.OnnxError, match="takes 2 inputs"):
        model(a, b, a)
    s, _ = model([1, 2], np.array([3, 5], np.float64))  # data: made the declared float32
    assert s.dtype == "float32" and s.tolist() == [4, 7]
    with pytest.raises(eonnx.OnnxError, match=r"declared float32, got a int32 tensor; cast"):
        model(Tensor.from_data([1, 2]), b)


def test_nodes_out_of_order_and_cycles():
    nodes = [helper.make_node("Relu", ["t"], ["y"]), helper.make_node("Neg", ["x"], ["t"])]
    model = eonnx.load(_bytes(nodes, [_value("x", [2])], [_value("y", [2])]))
    np.testing.assert_array_equal(model(np.array([-1, 2], np.float32)).to_numpy(), [1, 0])
    cycle = [helper.make_node("Relu", ["t"], ["y"]), helper.make_node("Add", ["x", "y"], ["t"])]
    with pytest.raises(eonnx.OnnxError, match="cycle"):
        eonnx.load(_bytes(cycle, [_value("x", [2])], [_value("y", [2])]))
    with pytest.raises(eonnx.OnnxError, match="reads 'nowhere'"):
        eonnx.load(_bytes([helper.make_node("Relu", ["nowhere"], ["y"])], [_value("x", [2])],
                          [_value("y", [2])]))


def test_unsupported_lists_everything_at_once():
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("TopKish", ["a"], ["b"], domain="com.example"),
             helper.make_node("StringNormalizer", ["b"], ["c"]),
             helper.make_node("Cast", ["c"], ["y"], to=TensorProto.FLOAT16)]
    data = _bytes(nodes, [_value("x", [2])], [_value("y", [2], TensorProto.FLOAT16)])
    found = eonnx.unsupported(data)
    assert {(u.domain, u.op_type) for u in found} >= {("com.example", "TopKish"),
                                                      ("", "StringNormalizer"), ("", "Cast")}
    assert any("float16" in u.reason for u in found)
    with pytest.raises(eonnx.UnsupportedError) as e:
        eonnx.load(data)
    assert e.value.ops == found
    assert "TopKish" in str(e.value) and "StringNormalizer" in str(e.value)
    data, _ = _mlp()
    assert eonnx.unsupported(data) == []
