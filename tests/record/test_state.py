"""record.save_state / record.load_state: nested optimizer state and checkpoints."""

import math

import numpy as np
import pytest

from ember import Tensor, record
from ember.record import RecordError

from .helpers import Net


def same(a, b, path="state"):
    """Equal values *and* equal types, all the way down."""
    assert type(a) is type(b), (path, type(a), type(b))
    if isinstance(a, dict):
        assert list(a) == list(b), path
        assert [type(k) for k in a] == [type(k) for k in b], path
        for k in a:
            same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{i}]")
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, path
        np.testing.assert_array_equal(a, b, err_msg=path)
    elif isinstance(a, np.generic):
        assert a.dtype == b.dtype and (a == b or (np.isnan(a) and np.isnan(b))), path
    elif isinstance(a, Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape, path
        np.testing.assert_array_equal(a.to_numpy(), b.to_numpy(), err_msg=path)
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b), path
    else:
        assert a == b, path


def adam_like():
    rng = np.random.default_rng(0)
    return {
        "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "amsgrad": False,
                          "name": "default", "weight_decay": 0, "maximize": None}],
        "state": {
            "fc.weight": {"step": 7, "exp_avg": rng.standard_normal((3, 4)).astype("f4"),
                          "exp_avg_sq": rng.random((3, 4)).astype("f4")},
            "fc.bias": {"step": 7, "exp_avg": np.zeros(3, "f4"),
                        "exp_avg_sq": np.zeros(3, "f4")},
            "bn.num_batches_tracked": {"count": np.array(5, np.int64)},
        },
        "by_id": {1: np.arange(3, dtype=np.int32), 2.5: "float key", False: "bool key",
                  None: "none key"},
        "scalars": [np.float32(1.5), np.int64(-3), np.bool_(True), 2**70, -0.0, math.inf,
                    math.nan, ""],
        "tensor": Tensor.from_data(np.arange(6, dtype=np.float32).reshape(2, 3)),
        "empty": {"list": [], "dict": {}, "tuple": ()},
    }


def test_nested_state_round_trips_exactly(tmp_path):
    path = tmp_path / "optim.safetensors"
    state = adam_like()
    record.save_state(state, path, metadata={"run": "a"})
    back = record.load_state(path)
    same(back, state)


def test_arrays_are_ordinary_tensors_under_dotted_names(tmp_path):
    path = tmp_path / "optim.safetensors"
    record.save_state(adam_like(), path)
    tensors, meta = record.read_safetensors(path)
    assert {"state.fc.weight.exp_avg", "state.fc.bias.exp_avg_sq", "by_id.1",
            "scalars.0", "tensor"} <= set(tensors)
    assert meta["ember.kind"] == "state" and "ember.state" in meta
    assert not any(k.startswith("param_groups") for k in tensors)  # scalars live in metadata


def test_name_collisions_get_distinct_names(tmp_path):
    path = tmp_path / "s.safetensors"
    state = {"a.b": np.zeros(2), "a": {"b": np.ones(2)}}
    record.save_state(state, path)
    assert len(record.read_safetensors(path)[0]) == 2
    same(record.load_state(path), state)


def test_checkpoint_of_a_model_and_its_state(tmp_path):
    path = tmp_path / "ckpt.safetensors"
    net = Net(seed=1)
    record.save_state({"model": record.state_dict(net), "epoch": 3, "best": 0.25}, path)
    ckpt = record.load_state(path)
    assert ckpt["epoch"] == 3 and ckpt["best"] == 0.25
    target = Net(seed=2)
    record.load_state_dict(target, ckpt["model"])
    for (n, p), (_, q) in zip(net.named_params(), target.named_params()):
        np.testing.assert_array_equal(p.to_numpy(), q.to_numpy(), err_msg=n)


def test_real_optimizer_state_round_trips(tmp_path):
    from ember import optim
    from ember.backend import Autodiff, NdArray

    net = Net(seed=1, backend=Autodiff(NdArray()))
    opt = optim.Adam(lr=1e-2)
    loss = net.stem.weight.sum() * 2 + net.heads["cls"].bias.square().sum() + (
        net.scale * net.table.cast("float32").sum())
    net = opt.step(net, optim.GradientsParams.from_grads(loss.backward(), net))
    state = opt.state_dict(net)
    path = tmp_path / "adam.safetensors"
    record.save_state(state, path)
    same(record.load_state(path), state)


def test_foreign_safetensors_give_a_flat_dict(tmp_path):
    path = tmp_path / "plain.safetensors"
    record.write_safetensors({"x.y": np.arange(3), "z": np.ones(2, np.float16)}, path)
    back = record.load_state(path)
    assert set(back) == {"x.y", "z"} and back["z"].dtype == np.float16


@pytest.mark.parametrize("bad, where", [
    ({"a": {"b": object()}}, "'a.b'"),
    ({"a": [b"bytes"]}, "'a.0'"),
    ({("tuple", "key"): 1}, "the top"),
    ({"c": np.zeros(2, np.complex64)}, "'c'"),
    ({"o": np.array([None, 1], dtype=object)}, "'o'"),
])
def test_unstorable_values_are_named(tmp_path, bad, where):
    with pytest.raises(RecordError, match=where):
        record.save_state(bad, tmp_path / "x.safetensors")
    assert not (tmp_path / "x.safetensors").exists()


def test_tensors_come_back_on_the_given_backend(tmp_path):
    from ember.backend import Autodiff, NdArray

    path = tmp_path / "t.safetensors"
    record.save_state({"t": Tensor.from_data([[1.0, 2.0]])}, path)
    backend = Autodiff(NdArray())
    t = record.load_state(path, backend=backend)["t"]
    assert t.backend == backend and t.dtype == "float32" and t.tolist() == [[1.0, 2.0]]
