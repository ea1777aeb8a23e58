"""Module behaviour on a small model made of the nn layers, checked against its PyTorch twin:
parameter discovery and names, loading a PyTorch state dict, num_params, to/valid/clone,
train/eval, repr and inference without gradients."""

import numpy as np
import pytest
import torch

import ember
from ember import BackendError, Tensor, nn
from ember.backend import NdArray

from .twins import AD, close, compare, load_torch_weights, randn


class Net(nn.Module):
    """Parameters in a Sequential, a list, a dict and a bare Param."""

    def __init__(self, backend=None):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 4, 3, backend=backend),
                                      nn.BatchNorm2d(4, backend=backend), nn.Relu(),
                                      nn.MaxPool2d(2))
        self.blocks = [nn.Linear(64, 8, backend=backend), nn.Linear(8, 8, backend=backend)]
        self.heads = {"a": nn.Linear(8, 3, backend=backend),
                      "b": nn.Linear(8, 2, bias=False, backend=backend)}
        self.scale = nn.Param(Tensor.ones([3], backend))
        self.dropout = nn.Dropout(0.5)

    def forward(self, x):
        h = self.features(x).flatten(1)
        for block in self.blocks:
            h = block(h).relu()
        return self.heads["a"](self.dropout(h)) * self.scale, self.heads["b"](h)


class TorchNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.BatchNorm2d(4),
                                            torch.nn.ReLU(), torch.nn.MaxPool2d(2))
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(64, 8), torch.nn.Linear(8, 8)])
        self.heads = torch.nn.ModuleDict({"a": torch.nn.Linear(8, 3),
                                          "b": torch.nn.Linear(8, 2, bias=False)})
        self.scale = torch.nn.Parameter(torch.randn(3))
        self.dropout = torch.nn.Dropout(0.5)

    def forward(self, x):
        h = self.features(x).flatten(1)
        for block in self.blocks:
            h = block(h).relu()
        return self.heads["a"](self.dropout(h)) * self.scale, self.heads["b"](h)


def test_names_are_pytorch_state_dict_keys_in_order():
    ours, twin = Net(), TorchNet()
    assert [n for n, _ in ours.named_params()] == list(twin.state_dict())
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in twin.named_parameters()]
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in twin.named_buffers()]
    assert ours.num_params() == sum(p.numel() for p in twin.parameters())
    assert len(ours.parameters()) == len(list(twin.parameters()))
    # plain lists and dicts stand for ModuleList / ModuleDict, which are not modules here
    containers = (torch.nn.ModuleList, torch.nn.ModuleDict)
    assert [n for n, _ in ours.named_modules()] == [
        n for n, m in twin.named_modules() if not isinstance(m, containers)]


def test_pytorch_weights_give_pytorch_outputs_and_gradients():
    ours, twin = Net(), TorchNet()
    ours.dropout.p = twin.dropout.p = 0.0
    compare(ours, twin, randn(2, 1, 10, 10))  # train mode: batch statistics
    close(ours.features[1].running_mean, twin.features[1].running_mean)
    ours.eval()
    twin.eval()
    compare(ours, twin, randn(3, 1, 10, 10, seed=1), load=False)  # running statistics


def test_train_and_eval_reach_every_module():
    net = Net()
    assert net.eval() is net
    assert all(not m.training for _, m in net.named_modules())
    assert not net.heads["b"].training and not net.features[1].training
    net.train()
    assert all(m.training for _, m in net.named_modules())
    net.train(False)
    assert not net.dropout.training


def test_to_moves_every_param_and_keeps_ids():
    net = Net()
    ids = [p.param_id for _, p in net.named_params()]
    assert net.to(AD) is net
    assert all(p.backend == AD for _, p in net.named_params())
    assert [p.param_id for _, p in net.named_params()] == ids
    assert all(p.is_require_grad() for p in net.parameters())
    assert not net.features[1].running_var.is_require_grad()
    assert net.backend() == AD
    with pytest.raises(BackendError):
        net.to("cuda")


def test_valid_is_an_eval_copy_on_the_inner_backend():
    net = Net(backend=AD)
    x = Tensor.from_data(randn(2, 1, 10, 10), AD)
    v = net.valid()
    assert v is not net and not v.training and all(not m.training for _, m in v.named_modules())
    assert all(p.backend == NdArray() for _, p in v.named_params())
    assert [p.param_id for _, p in v.named_params()] == [p.param_id for _, p in
                                                        net.named_params()]
    assert net.training and net.backend() == AD  # the original is untouched
    out = v(x.to(NdArray()))[0]
    expected = net.eval()(x)[0]
    close(out, expected.to_numpy())


def test_clone_is_independent():
    net = Net()
    copy = net.clone()
    assert [p.param_id for _, p in copy.named_params()] == [p.param_id for _, p in
                                                           net.named_params()]
    copy.map_params(lambda n, p: p.with_value(p.zeros_like()) if p.trainable else p)
    assert np.any(net.blocks[0].weight.to_numpy() != 0)
    copy.eval()
    assert net.training and net.heads["a"].training


def test_repr_shows_parameter_counts():
    text = repr(Net())
    assert text.startswith("Net(")
    assert f"# {Net().num_params():,} params" in text
    assert "(features): Sequential" in text and "(0): Conv2d(1, 4, kernel_size=(3, 3)" in text
    assert "Linear(in_features=64, out_features=8, bias=True)  # 520 params" in text
    assert "(3 own)" in text  # the bare scale Param
    assert "BatchNorm2d(4, eps=1e-05" in text and "Dropout(p=0.5)" in text


def test_inference_under_no_grad():
    net = Net(backend=AD).eval()
    x = Tensor.from_data(randn(1, 1, 10, 10), AD)
    with ember.no_grad():
        out = net(x)[0]
    assert not out.is_require_grad()
    with pytest.raises(BackendError):
        out.sum().backward()
    # and with gradients again outside
    assert net(x)[0].is_require_grad()


def test_sequential_container():
    seq = nn.Sequential(nn.Linear(3, 4), nn.Relu(), nn.Linear(4, 2))
    assert len(seq) == 3 and isinstance(seq[1], nn.Relu) and isinstance(seq[-1], nn.Linear)
    assert [n for n, _ in seq.named_params()] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    tail = seq[1:]
    assert [n for n, _ in tail.named_params()] == ["2.weight", "2.bias"]  # names kept
    seq.append(nn.Tanh())
    assert len(seq) == 4 and list(seq)[3].__class__ is nn.Tanh
    named = nn.Sequential({"fc": nn.Linear(2, 2), "act": nn.Gelu()})
    assert [n for n, _ in named.named_params()] == ["fc.weight", "fc.bias"]
    twin = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2),
                               torch.nn.Tanh())
    compare(seq, twin, randn(5, 3))


def test_flatten_and_identity():
    x = Tensor.from_data(randn(2, 3, 4))
    assert nn.Flatten()(x).shape == (2, 12)
    assert nn.Flatten(0, 1)(x).shape == (6, 4)
    assert nn.Identity(54, unused="x")(x) is x


def test_load_torch_weights_detects_missing_names():
    class Renamed(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)
    with pytest.raises(AssertionError):
        load_torch_weights(Renamed(), torch.nn.Sequential(torch.nn.Linear(2, 2)))
