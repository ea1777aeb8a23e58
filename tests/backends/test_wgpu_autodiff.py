"""Gradients on Autodiff(Wgpu()): every gradcheck of tests/autodiff/test_gradcheck.py (the same
table, so a new op is covered here as soon as it is checked there), run in float32 on Wgpu and
compared with the float64 gradients of Autodiff(NdArray()), which test_gradcheck checks against
finite differences. Plus double backward, and an MLP and the MNIST ConvNet trained on both
backends."""

import zlib

import numpy as np
import pytest

pytest.importorskip("wgpu")

from autodiff import test_gradcheck as gc  # noqa: E402  (tests/ is on sys.path)

import ember  # noqa: E402
from ember import Tensor  # noqa: E402
from ember.backend import Autodiff, NdArray, Wgpu  # noqa: E402

# the checks that need float64 inside the function itself: Wgpu must refuse them clearly
NEEDS_FLOAT64 = {"cast"}


def _grads(name, fn, arrays, weights, backend, dtype, monkeypatch):
    def weights_like(shape):  # test_gradcheck's fixed weights, on this backend and dtype
        return Tensor.from_data(np.linspace(0.5, 1.5, int(np.prod(shape))).reshape(shape),
                                backend=backend, dtype=dtype)

    monkeypatch.setattr(gc, "_w", weights_like)
    xs = [Tensor.from_data(a, backend=backend, dtype=dtype).require_grad() for a in arrays]
    out = fn(*xs)
    loss = (out * Tensor.from_data(weights, backend=backend, dtype=dtype)).sum()
    grads = loss.backward()
    return out.to_numpy(), [x.grad(grads) for x in xs]


def _close(got, want, what):
    scale = max(1.0, float(np.abs(want).max(initial=0)))
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5 * scale, err_msg=what)


@pytest.mark.filterwarnings("ignore:Wgpu has no WGSL kernel")
@pytest.mark.parametrize("name", sorted(gc.CHECKS))
def test_gradient_matches_ndarray(name, monkeypatch):
    shapes, domain, fn = gc.CHECKS[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    arrays = gc._inputs(shapes, domain, rng)
    wgpu = Autodiff(Wgpu())
    if name in NEEDS_FLOAT64:
        with pytest.raises(ember.DTypeError, match="float64"):
            _grads(name, fn, arrays, np.ones(1), wgpu, "float32", monkeypatch)
        return
    ref = Autodiff(NdArray())
    want_out, _ = _grads(name, fn, arrays, np.ones(1), ref, "float64", monkeypatch)
    weights = rng.standard_normal(want_out.shape)
    want_out, want = _grads(name, fn, arrays, weights, ref, "float64", monkeypatch)
    got_out, got = _grads(name, fn, arrays, weights, wgpu, "float32", monkeypatch)
    _close(got_out, want_out, f"{name}: forward")
    for i, (g, w) in enumerate(zip(got, want)):
        assert g is not None, f"{name}: no gradient for input {i}"
        assert g.backend == Wgpu() and g.dtype == "float32" and g.shape == w.shape
        _close(g.to_numpy(), w.to_numpy(), f"{name}: input {i}")


@pytest.mark.parametrize("name", sorted(gc.DOUBLE))
def test_double_backward_matches_ndarray(name):
    fn = gc.DOUBLE[name]
    rng = np.random.default_rng(7)
    a = rng.standard_normal((2, 3))
    v = rng.standard_normal((2, 3))

    def second(backend, dtype):
        x = Tensor.from_data(a, backend=backend, dtype=dtype).require_grad()
        (g,) = ember.autodiff.grad(fn(x).sum(), [x], create_graph=True)
        h = (g * Tensor.from_data(v, backend=backend, dtype=dtype)).sum()
        return x.grad(h.backward()).to_numpy()

    _close(second(Autodiff(Wgpu()), "float32"), second(Autodiff(NdArray()), "float64"), name)


# ---- a small MLP trained on both backends -------------------------------------------------------
def _train(backend, steps=5, lr=0.5, seed=0):
    rng = np.random.default_rng(seed)
    x = Tensor.from_data(rng.standard_normal((64, 20)), backend=backend, dtype="float32")
    labels = rng.integers(0, 4, 64)
    onehot = Tensor.from_data(np.eye(4)[labels], backend=backend, dtype="float32")
    params = [Tensor.from_data(v, backend=backend, dtype="float32").require_grad() for v in (
        rng.standard_normal((20, 32)) * 0.3, np.zeros(32), rng.standard_normal((32, 4)) * 0.3,
        np.zeros(4))]
    losses = []
    for _ in range(steps):
        w1, b1, w2, b2 = params
        h = (x @ w1 + b1).gelu()
        logits = h @ w2 + b2
        loss = -(logits.log_softmax(-1) * onehot).sum_dim(-1).mean()
        grads = loss.backward()
        losses.append(loss.item())
        with ember.no_grad():
            params = [(p - p.grad(grads).to(backend) * lr).detach().require_grad()
                      for p in params]
    return np.array(losses)


def test_mlp_trains_with_the_same_losses_as_ndarray():
    want = _train(Autodiff(NdArray()))
    got = _train(Autodiff(Wgpu()))
    assert want[-1] < want[0]  # it learns
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _train_convnet(backend, x, y, steps=4):
    """The shipped MNIST ConvNet (conv, batch norm, pooling, dropout; train mode, seeded)
    trained with Adam for a few steps: the losses seen."""
    from ember import nn, optim
    from ember.models import ConvNet
    ember.seed(0)
    model = ConvNet(backend=backend)
    opt = optim.Adam(lr=1e-3)
    ex, ey = Tensor.from_data(x, backend=backend), Tensor.from_data(y, backend=backend)
    losses = []
    for _ in range(steps):
        loss = nn.CrossEntropyLoss()(model(ex), ey)
        losses.append(float(loss.item()))
        model = opt.step(model, optim.GradientsParams.from_grads(loss.backward(), model))
    return np.array(losses)


def test_mnist_convnet_trains_with_the_same_losses_as_ndarray():
    rng = np.random.default_rng(0)
    x = rng.random((16, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, 16).astype(np.int32)
    want = _train_convnet(Autodiff(NdArray()), x, y)
    got = _train_convnet(Autodiff(Wgpu()), x, y)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
