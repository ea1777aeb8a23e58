"""The ONNX backend node tests through ember.onnx's op table, one test per case.

A case ember cannot run (an op it lacks, a dtype it does not have, sequence values) is skipped
with ember's own reason ("unsupported: X"); `python tests/onnx/node_cases.py -v` prints the
pass count by op family and every reason.
"""

import pytest

pytest.importorskip("onnx")

import node_cases  # noqa: E402  (no __init__.py here: a package would hide onnx)

from ember.backend import Autodiff, NdArray  # noqa: E402

CASES = node_cases.cases()


@pytest.mark.parametrize("name", sorted(CASES))
def test_node_case(name):
    status, detail = node_cases.run(CASES[name])
    if status == "unsupported":
        pytest.skip(detail)
    assert status == "pass", detail


@pytest.mark.parametrize("name", sorted(CASES)[::10])
def test_node_case_under_autodiff(name):
    """Every tenth case again on Autodiff(NdArray()): the table's compositions are the same
    there (`python tests/onnx/node_cases.py --autodiff` runs them all: the same count)."""
    status, detail = node_cases.run(CASES[name], backend=Autodiff(NdArray()))
    if status == "unsupported":
        pytest.skip(detail)
    assert status == "pass", detail


@pytest.mark.parametrize("name", sorted(CASES)[5::20])
def test_node_case_on_wgpu(name):
    """Every twentieth case on Wgpu (`node_cases.py --wgpu` runs them all): int64 held as
    int32 there, float64 unsupported."""
    pytest.importorskip("wgpu")
    from ember.backend import Wgpu

    status, detail = node_cases.run(CASES[name], backend=Wgpu())
    if status == "unsupported":
        pytest.skip(detail)
    assert status == "pass", detail


@pytest.mark.parametrize("x_shape, w_shape, attrs", [
    ((1, 16, 9, 9), (24, 16, 1, 1), {"strides": [2, 2]}),  # 1x1: a matmul at any size
    ((2, 8, 5, 7), (6, 8, 1, 1), {}),
    ((1, 64, 4, 5), (480, 64, 3, 3), {"pads": [1, 0, 2, 1], "strides": [1, 2]}),  # weights >= out
    ((1, 96, 6, 6), (480, 96, 3, 2), {"auto_pad": "SAME_UPPER"}),
    ((1, 96, 7, 6), (480, 96, 3, 2), {"dilations": [2, 1], "pads": [2, 0, 1, 1]}),
    ((1, 6, 5), (32, 6, 1), {"strides": [2]}),  # 1-D
    ((1, 8, 6, 6), (40, 4, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),  # (the primitive)
])
def test_conv_as_a_matmul_matches_onnxruntime_and_has_its_gradients(x_shape, w_shape, attrs):
    """Conv 1x1, or with large weights that outnumber the output's positions, runs as one
    product over the input's windows: onnxruntime's values, the conv2d primitive's gradients."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from ember import Tensor
    from ember import onnx as eonnx
    from ember.onnx import ops
    from ember.ops import OPS as PRIMS
    from ember.tensor import _apply

    rng = np.random.default_rng(0)
    x = rng.normal(size=x_shape).astype(np.float32)
    w, b = rng.normal(size=w_shape).astype(np.float32), rng.normal(size=w_shape[0]).astype(
        np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, x_shape)], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], [numpy_helper.from_array(w, "w"),
                                             numpy_helper.from_array(b, "b")])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]
                             ).SerializeToString()
    (want,) = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    backend = Autodiff(NdArray())
    model = eonnx.load(data, backend=backend)
    xt = Tensor.from_data(x, backend).require_grad()
    y = model(xt)
    np.testing.assert_allclose(y.to_numpy(), want, rtol=1e-4, atol=1e-4)
    g = Tensor.from_data(rng.normal(size=want.shape).astype(np.float32), backend)
    grads = (y * g).sum().backward()
    x2, w2, g2 = (xt, model.w, g) if len(x_shape) == 4 else (
        xt.unsqueeze(2), model.w.unsqueeze(2), g.unsqueeze(2))  # 1-D: over a unit height
    strides, dil, pads = ops._geometry(attrs, xt.shape, list(model.w.shape[2:]))
    if len(x_shape) == 3:
        strides, dil, pads = [1] + strides, [1] + dil, [(0, 0)] + pads
    ref = _apply(PRIMS["conv2d"], x2, w2, model.b, stride=tuple(strides), padding=tuple(pads),
                 dilation=tuple(dil), groups=attrs.get("group", 1))
    np.testing.assert_allclose(ref.to_numpy().reshape(want.shape), want, rtol=1e-4, atol=1e-4)
    ref_grads = (ref * g2).sum().backward()
    for t in (xt, model.w, model.b):
        np.testing.assert_allclose(grads.get(t).to_numpy(), ref_grads.get(t).to_numpy(),
                                   rtol=1e-4, atol=1e-4)
