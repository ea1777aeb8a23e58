"""ember.onnx.save: ember's own models as ONNX files that onnxruntime runs with ember's results
and that ember.onnx.load reads back to the same predictions."""

import math

import numpy as np
import onnxruntime as ort
import pytest

import ember
from ember import Tensor, models, nn
from ember import onnx as eonnx


def _ort(path, *arrays):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {f"input_{i}": a for i, a in enumerate(arrays)})


class Mlp(nn.Module):
    """GELU, LayerNorm, a softmax and a slice: composites of many primitives."""

    def __init__(self):
        self.fc1, self.norm, self.fc2 = nn.Linear(12, 16), nn.LayerNorm(16), nn.Linear(16, 5)

    def forward(self, x):
        h = self.norm(self.fc1(x).gelu())
        return self.fc2(h).softmax(-1)[:, ::-1] * 2 - (x[:, :5] / math.sqrt(2)).erf()


@pytest.mark.parametrize("make, shape", [(lambda: models.ConvNet(), (3, 1, 28, 28)),
                                         (lambda: models.ConvNet(channels=(4, 8), hidden=16),
                                          (2, 1, 28, 28)),
                                         (Mlp, (6, 12))])
def test_a_model_exports_runs_in_onnxruntime_and_loads_back(tmp_path, make, shape):
    ember.seed(0)
    model = make().eval()
    x = np.random.default_rng(1).random(shape, dtype=np.float32)
    want = model(Tensor.from_data(x)).to_numpy()
    path = eonnx.save(model, tmp_path / "model.onnx", Tensor.from_data(x))
    (got,) = _ort(path, x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    back = eonnx.load(path)
    np.testing.assert_allclose(back(Tensor.from_data(x)).to_numpy(), want, rtol=1e-5,
                               atol=1e-6)
    assert eonnx.unsupported(path) == []


def test_a_model_in_training_mode_or_without_inputs_is_refused(tmp_path):
    model = models.ConvNet()
    x = Tensor.from_data(np.zeros((1, 1, 28, 28), np.float32))
    with pytest.raises(eonnx.OnnxError, match="training mode"):
        eonnx.save(model, tmp_path / "m.onnx", x)
    with pytest.raises(eonnx.OnnxError, match="example inputs"):
        eonnx.save(model.eval(), tmp_path / "m.onnx")


def test_an_op_without_an_onnx_form_is_named(tmp_path):
    from ember.nn import functional as F
    x = Tensor.from_data(np.ones((1, 2, 4, 4), np.float32))
    w = Tensor.from_data(np.ones((2, 2, 3, 3), np.float32))
    with pytest.raises(eonnx.OnnxError, match="conv_transpose2d"):
        eonnx.save(lambda t: F.conv_transpose2d(t, w), tmp_path / "m.onnx", x)


@pytest.mark.parametrize("name", models.available())
def test_the_shipped_trained_models_export_with_equal_predictions(tmp_path, name):
    model = models.load(name).eval()
    x = np.random.default_rng(2).random((8, 1, 28, 28), dtype=np.float32)
    want = model(Tensor.from_data(x)).to_numpy()
    path = eonnx.save(model, tmp_path / f"{name}.onnx", Tensor.from_data(x))
    (got,) = _ort(path, x)
    back = eonnx.load(path)(Tensor.from_data(x)).to_numpy()
    np.testing.assert_array_equal(got.argmax(1), want.argmax(1))
    np.testing.assert_array_equal(back.argmax(1), want.argmax(1))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
