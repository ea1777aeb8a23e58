"""Real models: small PyTorch definitions with random weights, exported by torch.onnx, loaded
by ember.onnx and compared with onnxruntime on the same inputs (within 1e-4)."""

import io

import numpy as np
import pytest

from ember import onnx as eonnx
from ember.backend import NdArray

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")
nn = torch.nn


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2), nn.BatchNorm2d(16), nn.ReLU6(),
            nn.AvgPool2d(2, ceil_mode=True), nn.Conv2d(16, 16, 1), nn.Sigmoid())
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2),
                                  nn.Linear(16, 10))

    def forward(self, x):
        return self.head(self.features(x)).softmax(-1)


class Block(nn.Module):  # ResNet's basic block
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.bn2(self.conv2(self.bn1(self.conv1(x)).relu()))
        return (y + (x if self.down is None else self.down(x))).relu()


class ResNet(nn.Module):  # ResNet-18's layout, narrower and shorter
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 7, 2, 3, bias=False), nn.BatchNorm2d(8),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        self.blocks = nn.Sequential(Block(8, 8, 1), Block(8, 16, 2), Block(16, 32, 2))
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.blocks(
            self.stem(x)), 1), 1))


class Fire(nn.Module):  # SqueezeNet's
    def __init__(self, cin, squeeze, expand):
        super().__init__()
        self.squeeze = nn.Conv2d(cin, squeeze, 1)
        self.e1 = nn.Conv2d(squeeze, expand, 1)
        self.e3 = nn.Conv2d(squeeze, expand, 3, padding=1)

    def forward(self, x):
        s = self.squeeze(x).relu()
        return torch.cat([self.e1(s).relu(), self.e3(s).relu()], 1)


class SqueezeNet(nn.Module):  # SqueezeNet 1.1's layout, narrower
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 16, 3, 2), nn.ReLU(), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(16, 4, 8), Fire(16, 4, 8), nn.MaxPool2d(3, 2, ceil_mode=True), Fire(16, 8, 16),
            nn.Dropout(0.5), nn.Conv2d(32, 10, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
            nn.Flatten())

    def forward(self, x):
        return self.net(x)


class MobileBlock(nn.Module):  # MobileNetV3's inverted residual with squeeze-excitation
    def __init__(self, c, expand):
        super().__init__()
        self.expand = nn.Sequential(nn.Conv2d(c, expand, 1, bias=False), nn.BatchNorm2d(expand),
                                    nn.Hardswish())
        self.depthwise = nn.Sequential(
            nn.Conv2d(expand, expand, 5, padding=2, groups=expand, bias=False),
            nn.BatchNorm2d(expand), nn.Hardswish())
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(expand, 8, 1), nn.ReLU(),
                                nn.Conv2d(8, expand, 1), nn.Hardsigmoid())
        self.project = nn.Sequential(nn.Conv2d(expand, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        h = self.depthwise(self.expand(x))
        return x + self.project(h * self.se(h))


class MobileNet(nn.Module):  # MobileNetV3-small's building blocks
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.Hardswish())
        self.blocks = nn.Sequential(MobileBlock(16, 32), MobileBlock(16, 48))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 32),
                                  nn.Hardswish(), nn.Dropout(0.2), nn.Linear(32, 10))

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))


class Decoder(nn.Module):  # a U-Net's way up: transposed convs, resizing, skip concats
    def __init__(self):
        super().__init__()
        self.down = nn.Conv2d(3, 8, 3, 2, 1)
        self.up = nn.ConvTranspose2d(8, 4, 3, 2, 1, output_padding=1)
        self.mix = nn.Conv1d(7, 5, 3, padding=1)

    def forward(self, x):
        d = self.down(x).relu()
        u = torch.cat([self.up(d), x], 1)
        u = nn.functional.interpolate(u, scale_factor=2, mode="bilinear", align_corners=False)
        u = u + nn.functional.interpolate(u, size=u.shape[-2:], mode="nearest")
        return self.mix(u.flatten(2)).transpose(1, 2).softmax(-1)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(12, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 16),
                                 nn.Tanh(), nn.Linear(16, 4))

    def forward(self, x):
        return self.net(x.flatten(1)).log_softmax(-1)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 32)
        self.layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.out = nn.Linear(32, 3)

    def forward(self, tokens, mask):
        h = self.layer(self.embed(tokens), src_key_padding_mask=mask)
        return self.out(h.mean(1)), h


class Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(6, 8, num_layers=2, batch_first=True, bidirectional=True)
        self.gru = nn.GRU(16, 5, batch_first=True)
        self.out = nn.Linear(5, 2)

    def forward(self, x):
        h, _ = self.lstm(x)
        h, last = self.gru(h)
        return self.out(h[:, -1]), last


class CausalLm(nn.Module):  # a decoder-only block: causal attention, GELU (tanh), RMS-free
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(40, 16)
        self.qkv = nn.Linear(16, 48)
        self.norm = nn.LayerNorm(16)
        self.ff = nn.Sequential(nn.Linear(16, 32), nn.GELU(approximate="tanh"), nn.Linear(32, 40))

    def forward(self, tokens):
        h = self.embed(tokens)
        b, t, _ = h.shape
        q, k, v = self.qkv(h).view(b, t, 3, 2, 8).permute(2, 0, 3, 1, 4)
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = self.norm(h + a.transpose(1, 2).reshape(b, t, 16))
        return self.ff(h)


def _export(model, inputs, names, dynamic, axes=(0,), **kw):
    model.eval()
    f = io.BytesIO()
    torch.onnx.export(model, inputs, f, input_names=names, dynamo=False,
                      dynamic_axes={n: {a: f"d{a}" for a in axes} for n in dynamic}, **kw)
    return f.getvalue()


def _compare(data, inputs, backend=None):
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    model = eonnx.load(data, backend=backend or NdArray())
    assert eonnx.unsupported(data) == []
    names = [i.name for i in session.get_inputs()]
    for feed in inputs:
        want = session.run(None, dict(zip(names, feed)))
        got = model(*feed)
        got = got if isinstance(got, tuple) else (got,)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.to_numpy(), w, rtol=1e-4, atol=1e-4)


@pytest.fixture(autouse=True)
def _torch_seed():
    torch.manual_seed(0)


def _randomize_batchnorm(model):
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.5, 0.5)


def test_convnet_batchnorm_pooling():
    model = ConvNet()
    _randomize_batchnorm(model)
    x = torch.randn(2, 3, 20, 20)
    data = _export(model, (x,), ["x"], ["x"])
    rng = np.random.default_rng(0)
    _compare(data, [(rng.normal(size=(n, 3, 20, 20)).astype(np.float32),) for n in (1, 2, 5)])


def _backend(name):
    if name == "ndarray":
        return NdArray()
    pytest.importorskip("wgpu")
    from ember.backend import Wgpu
    return Wgpu()


@pytest.mark.parametrize("backend", ["ndarray", "wgpu"])
@pytest.mark.parametrize("make", [ResNet, SqueezeNet])
def test_resnet_and_squeezenet_layouts(make, backend):
    model = make()
    _randomize_batchnorm(model)
    data = _export(model, (torch.randn(1, 3, 64, 64),), ["x"], ["x"])
    rng = np.random.default_rng(3)
    _compare(data, [(rng.normal(size=(n, 3, 64, 64)).astype(np.float32),) for n in (1, 2)],
             _backend(backend))


@pytest.mark.parametrize("opset", [9, 10, 11, 17])  # 9: Upsample, 10: Resize's first form
@pytest.mark.parametrize("make", [MobileNet, Decoder])
def test_mobilenet_blocks_and_a_decoder(make, opset):
    model = make()
    _randomize_batchnorm(model)
    data = _export(model, (torch.randn(2, 3, 16, 16),), ["x"], ["x"], opset_version=opset)
    rng = np.random.default_rng(5)
    _compare(data, [(rng.normal(size=(n, 3, 16, 16)).astype(np.float32),) for n in (1, 3)])


@pytest.mark.parametrize("opset", [9, 11, 13, 17])
def test_mlp_across_opsets(opset):
    data = _export(Mlp(), (torch.randn(2, 3, 4),), ["x"], ["x"], opset_version=opset)
    rng = np.random.default_rng(1)
    _compare(data, [(rng.normal(size=(n, 3, 4)).astype(np.float32),) for n in (1, 4)])


def test_transformer_encoder_layer_with_padding_mask():
    model = Encoder()
    tokens = torch.randint(0, 50, (2, 7))
    mask = torch.zeros(2, 7, dtype=torch.bool)
    mask[1, 5:] = True
    data = _export(model, (tokens, mask), ["tokens", "mask"], ["tokens", "mask"], opset_version=17)
    rng = np.random.default_rng(2)
    feeds = []
    for n in (2, 3):
        m = np.zeros((n, 7), bool)
        m[-1, 4:] = True
        feeds.append((rng.integers(0, 50, (n, 7)).astype(np.int64), m))
    _compare(data, feeds)


@pytest.mark.parametrize("opset,backend", [(14, "ndarray"), (18, "ndarray"), (20, "ndarray"),
                                           (17, "wgpu")])
def test_causal_lm_with_dynamic_batch_and_length(opset, backend):
    """int64 token ids and shape arithmetic; on Wgpu (no int64) held as int32."""
    data = _export(CausalLm(), (torch.randint(0, 40, (2, 6)),), ["tokens"], ["tokens"],
                   axes=(0, 1), opset_version=opset)
    rng = np.random.default_rng(6)
    _compare(data, [(rng.integers(0, 40, (n, t)).astype(np.int64),) for n, t in ((1, 3), (2, 9))],
             _backend(backend))


def test_lstm_and_gru():
    data = _export(Recurrent(), (torch.randn(2, 5, 6),), ["x"], ["x"], opset_version=14)
    rng = np.random.default_rng(4)
    _compare(data, [(rng.normal(size=(n, 5, 6)).astype(np.float32),) for n in (1, 3)])


def test_under_jit_and_fine_tuning_a_convnet():
    import ember
    from ember import Tensor, optim
    from ember.backend import Autodiff

    data = _export(ConvNet(), (torch.randn(2, 3, 20, 20),), ["x"], ["x"])
    rng = np.random.default_rng(7)
    x = rng.normal(size=(4, 3, 20, 20)).astype(np.float32)
    model = eonnx.load(data, backend=NdArray())
    fast = ember.jit(model)
    outs = [fast(Tensor.from_data(x)).to_numpy() for _ in range(4)]  # captured from the third
    assert "1 captured" in repr(fast)
    for out in outs:
        np.testing.assert_allclose(out, model(x).to_numpy(), rtol=1e-6, atol=1e-7)
    backend = Autodiff(NdArray())
    model = eonnx.load(data, backend=backend)
    target = Tensor.from_data(np.eye(10, dtype=np.float32)[[1, 3, 5, 7]], backend)
    xs, opt = Tensor.from_data(x, backend), optim.Adam(lr=1e-2)

    def loss(m):
        return -(m(xs).log() * target).sum() / 4
    first = loss(model)
    for _ in range(3):
        value = loss(model)
        model = opt.step(model, optim.GradientsParams.from_grads(value.backward(), model))
    assert loss(model).item() < first.item()
