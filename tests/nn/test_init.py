"""nn.init: PyTorch's fans, gains and bounds; what each initialiser returns."""

import math

import numpy as np
import pytest
import torch

import ember
from ember import ShapeError, Tensor, nn
from ember.backend import NdArray
from ember.nn import init

from .twins import AD


@pytest.mark.parametrize("shape", [(5, 3), (6, 4, 3), (8, 2, 3, 5), (2, 3, 1, 1, 4)])
def test_fans_match_pytorch(shape):
    expected = torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(shape))
    assert init.fan_in_and_fan_out(shape) == expected


def test_fans_need_two_dims():
    with pytest.raises(ShapeError):
        init.fan_in_and_fan_out((4,))


@pytest.mark.parametrize("name, param", [
    ("linear", None), ("conv2d", None), ("sigmoid", None), ("tanh", None), ("relu", None),
    ("leaky_relu", None), ("leaky_relu", 0.2), ("leaky_relu", math.sqrt(5)), ("selu", None)])
def test_gains_match_pytorch(name, param):
    assert init.calculate_gain(name, param) == pytest.approx(
        torch.nn.init.calculate_gain(name, param))


def test_unknown_gain():
    with pytest.raises(ValueError):
        init.calculate_gain("swish")


def _bound_and_std(values, bound):
    values = values.to_numpy()
    assert np.abs(values).max() <= bound * (1 + 1e-6)
    assert np.abs(values).max() > bound * 0.98  # the whole range is used
    assert values.std() == pytest.approx(bound / math.sqrt(3), rel=0.03)


def test_uniform_initialisers_use_pytorch_bounds():
    shape = (200, 60, 3)  # fan_in 180, fan_out 600
    _bound_and_std(init.kaiming_uniform(shape, a=math.sqrt(5)), 1 / math.sqrt(180))
    _bound_and_std(init.kaiming_uniform(shape, nonlinearity="relu"), math.sqrt(6 / 180))
    _bound_and_std(init.kaiming_uniform(shape, mode="fan_out", nonlinearity="relu"),
                   math.sqrt(6 / 600))
    _bound_and_std(init.xavier_uniform(shape), math.sqrt(6 / 780))
    _bound_and_std(init.xavier_uniform(shape, gain=2.0), 2 * math.sqrt(6 / 780))
    _bound_and_std(init.uniform(shape, -0.3, 0.3), 0.3)
    v = init.uniform(shape, 2.0, 3.0).to_numpy()
    assert v.min() >= 2 and v.max() < 3


def test_normal_initialisers_use_pytorch_stds():
    shape = (300, 100, 2)  # fan_in 200, fan_out 600
    cases = [
        (init.kaiming_normal(shape, nonlinearity="relu"), math.sqrt(2 / 200)),
        (init.kaiming_normal(shape, mode="fan_out"), math.sqrt(2 / (1 + 0.01 ** 2) / 600)),
        (init.xavier_normal(shape), math.sqrt(2 / 800)),
        (init.normal(shape, 1.0, 0.5), 0.5),
    ]
    for values, std in cases:
        assert values.to_numpy().std() == pytest.approx(std, rel=0.02)
    assert init.normal(shape, 1.0, 0.5).to_numpy().mean() == pytest.approx(1.0, abs=0.01)
    t = init.trunc_normal((5000,), 0.0, 1.0, -1.5, 0.5).to_numpy()
    assert t.min() >= -1.5 and t.max() <= 0.5 and t.dtype == np.float32


def test_constants():
    np.testing.assert_array_equal(init.zeros((2, 3)).to_numpy(), np.zeros((2, 3)))
    np.testing.assert_array_equal(init.ones([4]).to_numpy(), np.ones(4))
    np.testing.assert_array_equal(init.constant((2,), 0.25).to_numpy(), [0.25, 0.25])


def test_what_each_argument_gives_back():
    # a shape: a new tensor on the given (or default) backend and dtype
    t = init.xavier_uniform((3, 4), backend=AD, dtype="float64")
    assert isinstance(t, Tensor) and not isinstance(t, nn.Param)
    assert t.backend == AD and t.dtype == "float64" and t.shape == (3, 4)
    assert init.zeros((2,)).backend == ember.default_backend()
    # a tensor: its shape, dtype and backend
    like = Tensor.zeros([5, 2], NdArray(), "float64")
    t = init.normal(like)
    assert (t.shape, t.dtype, t.backend) == (like.shape, "float64", like.backend)
    # a Param: the same id and flag, a new value
    layer = nn.Linear(3, 4).to(AD)
    old = layer.weight
    layer.weight = init.zeros(layer.weight)
    assert isinstance(layer.weight, nn.Param) and layer.weight.param_id == old.param_id
    assert layer.weight.is_require_grad() and np.all(layer.weight.to_numpy() == 0)
    frozen = nn.Param(Tensor.ones([2]), trainable=False)
    assert init.constant(frozen, 3.0).trainable is False


def test_seed_makes_initialisation_reproducible():
    ember.seed(3)
    a = nn.Linear(4, 5).weight.to_numpy()
    ember.seed(3)
    b = nn.Linear(4, 5).weight.to_numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, nn.Linear(4, 5).weight.to_numpy())


def test_skip_draws_nothing_and_leaves_zeros():
    ember.seed(5)
    with init.skip():
        layer = nn.Linear(4, 5)
        w = init.trunc_normal(layer.weight, std=0.02)
        kept = init.ones([2])  # constants are not draws: they stay what they are
    for value in (layer.weight, layer.bias, w):
        np.testing.assert_array_equal(value.to_numpy(), 0)
        assert value.shape in ((5, 4), (5,)) and value.dtype == "float32"
    np.testing.assert_array_equal(kept.to_numpy(), 1)
    # the global generator did not advance: the next draw is the one right after the seed
    after = nn.Linear(4, 5).weight.to_numpy()
    ember.seed(5)
    np.testing.assert_array_equal(after, nn.Linear(4, 5).weight.to_numpy())
    assert np.abs(after).max() > 0  # and outside the block, layers draw again


def test_layer_defaults_follow_pytorch():
    bn = nn.BatchNorm2d(3)
    for name, value in [("weight", 1), ("bias", 0), ("running_mean", 0), ("running_var", 1)]:
        np.testing.assert_array_equal(getattr(bn, name).to_numpy(), value)
    ln = nn.LayerNorm(4)
    np.testing.assert_array_equal(ln.weight.to_numpy(), 1)
    np.testing.assert_array_equal(ln.bias.to_numpy(), 0)
    np.testing.assert_array_equal(nn.RMSNorm(4).weight.to_numpy(), 1)
    np.testing.assert_array_equal(nn.GroupNorm(2, 4).weight.to_numpy(), 1)
    gru = nn.Gru(5, 16)
    k = 1 / 4
    assert all(np.abs(p.to_numpy()).max() <= k for p in gru.parameters())


def test_in_place_names_explain_the_functional_style():
    with pytest.raises(AttributeError, match="layer.weight = nn.init.xavier_uniform"):
        init.xavier_uniform_  # noqa: B018
    with pytest.raises(AttributeError):
        init.nonexistent  # noqa: B018
