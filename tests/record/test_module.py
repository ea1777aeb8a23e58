"""record.save / record.load / state_dict / load_state_dict on modules."""

import json
import re
import warnings

import numpy as np
import pytest

from ember import Tensor, nn, record
from ember.backend import Autodiff, NdArray
from ember.record import RecordError

from .helpers import Leaf, Net, mirror, param, values


def snapshot(module):
    """Everything a failed load must leave as it was: values, dtypes, Param objects, ids."""
    return [(n, p, p.param_id, p.dtype, p.trainable, np.array(p.to_numpy()))
            for n, p in module.named_params()]


def assert_unchanged(module, snap):
    now = snapshot(module)
    assert [s[:5] for s in now] == [s[:5] for s in snap]  # the very same Param objects
    for (n, *_, a), (*_, b) in zip(now, snap):
        np.testing.assert_array_equal(a, b, err_msg=n)


def test_round_trip_restores_values_and_keeps_the_targets_ids(tmp_path):
    path = tmp_path / "net.safetensors"
    source, target = Net(seed=1), Net(seed=2)
    record.save(source, path, metadata={"epoch": "3"})
    ids = {n: (p.param_id, p.trainable, p.dtype) for n, p in target.named_params()}
    assert record.load(target, path) is target
    assert {n: (p.param_id, p.trainable, p.dtype) for n, p in target.named_params()} == ids
    want, got = values(source), values(target)
    assert list(got) == list(want)
    for name in want:
        assert got[name].dtype == want[name].dtype, name
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    assert got["blocks.1.0.num_batches_tracked"].dtype == np.int64
    assert got["mask"].dtype == np.bool_ and got["table"].dtype == np.float64


def test_file_names_dtypes_and_metadata(tmp_path):
    path = tmp_path / "net.safetensors"
    net = Net(seed=1)
    record.save(net, path, metadata={"epoch": "3"})
    tensors, meta = record.read_safetensors(path)
    assert set(tensors) == {n for n, _ in net.named_params()}
    assert "blocks.1.0.running_var" in tensors and "heads.cls.weight" in tensors
    assert meta["format"] == "ember" and meta["epoch"] == "3"
    assert meta["ember.version"] and meta["ember.type"] == "Net"
    assert re.match(r"\d{4}-\d\d-\d\dT", meta["ember.created"])
    dtypes = json.loads(meta["ember.dtypes"])
    assert dtypes["steps"] == "int32" and dtypes["table"] == "float64"
    with pytest.raises(RecordError, match="ember's own"):
        record.save(net, path, metadata={"ember.version": "x"})


def test_load_on_autodiff_keeps_trainable_leaves(tmp_path):
    path = tmp_path / "net.safetensors"
    record.save(Net(seed=1), path)
    backend = Autodiff(NdArray())
    target = Net(seed=2, backend=backend)
    record.load(target, path)
    for name, p in target.named_params():
        assert p.backend == backend
        assert p.is_require_grad() == (p.trainable and p.dtype.startswith("float")), name
    np.testing.assert_array_equal(values(target)["stem.weight"], values(Net(seed=1))[
        "stem.weight"])


def test_mismatch_report_lists_everything_and_changes_nothing(tmp_path):
    path = tmp_path / "a.safetensors"
    a = nn.Module()
    a.fc = Leaf(4, 3, seed=0)               # fc.weight [3, 4]
    a.proj = Leaf(3, 2, seed=1)
    a.extra = param([2], seed=2)            # not in b
    a.count = nn.Param(Tensor.from_data(np.array([5_000_000_000]), dtype="int64"),
                       trainable=False)
    a.frac = param([2], "float32", seed=3)
    record.save(a, path)

    b = nn.Module()
    b.fc = Leaf(3, 4, seed=5)               # transposed weight, bias [4] vs [3]
    b.proj = Leaf(3, 2, seed=6)             # fits
    b.head = Leaf(2, 2, seed=7)             # missing from the file
    b.count = nn.Param(Tensor.zeros([1], dtype="int32"), trainable=False)  # out of range
    b.frac = nn.Param(Tensor.zeros([2], dtype="int32"))                    # fractions
    snap = snapshot(b)
    with pytest.raises(RecordError) as info:
        record.load(b, path)
    msg = str(info.value)
    assert "nothing was loaded" in msg and "(7 problems)" in msg
    for text in ["head.weight", "head.bias", "extra",
                 "shape of fc.weight: [3, 4] in", "[4, 3] in the module (the transpose)",
                 "shape of fc.bias: [3] in", "[4] in the module",
                 "dtype of count: int64", "5000000000", "int32", "lossy cast refused",
                 "dtype of frac: float32"]:
        assert text in msg, (text, msg)
    assert "proj" not in msg
    assert_unchanged(b, snap)


def test_strict_false_skips_names_with_a_warning_but_not_shapes(tmp_path):
    path = tmp_path / "a.safetensors"
    a = nn.Module()
    a.fc = Leaf(4, 3, seed=0)
    a.old = param([2], seed=1)
    record.save(a, path)
    b = nn.Module()
    b.fc = Leaf(4, 3, seed=5)
    b.new = param([2], seed=6)
    new_before = np.array(b.new.to_numpy())
    with pytest.warns(UserWarning, match=r"1 missing .*new.*1 unexpected .*old"):
        record.load(b, path, strict=False)
    np.testing.assert_array_equal(b.fc.weight.to_numpy(), a.fc.weight.to_numpy())
    np.testing.assert_array_equal(b.new.to_numpy(), new_before)

    c = nn.Module()
    c.fc = Leaf(5, 3, seed=5)
    snap = snapshot(c)
    with pytest.raises(RecordError, match=r"shape of fc.weight: \[3, 4\]"):
        record.load(c, path, strict=False)
    assert_unchanged(c, snap)


@pytest.mark.parametrize("stored, want, ok", [
    (np.array([1.5, -2.25], np.float64), "float32", True),
    (np.array([1.5, -2.25], np.float16), "float32", True),
    (np.array([1.5, 2.0], np.float32), "float64", True),
    (np.array([1, 2**31 - 1], np.int64), "int32", True),
    (np.array([1, 2**31], np.int64), "int32", False),
    (np.array([3, 4], np.int32), "int64", True),
    (np.array([3, 4], np.uint8), "int32", True),
    (np.array([3, 4], np.int64), "float32", True),          # exact
    (np.array([2**24 + 1, 0], np.int64), "float32", False),  # not exact
    (np.array([2.0, 3.0], np.float32), "int32", True),      # whole numbers
    (np.array([2.5, 3.0], np.float32), "int32", False),
    (np.array([1e300, 0], np.float64), "float32", False),   # overflow to inf
    (np.array([np.inf, np.nan], np.float64), "float32", True),
    (np.array([1, 0], np.uint8), "bool", True),
    (np.array([2, 0], np.uint8), "bool", False),
])
def test_dtype_casts(stored, want, ok):
    m = nn.Module()
    m.p = nn.Param(Tensor.zeros([2], dtype=want))
    if ok:
        record.load_state_dict(m, {"p": stored})
        assert m.p.dtype == want
        np.testing.assert_array_equal(m.p.to_numpy(), stored.astype(want))
    else:
        with pytest.raises(RecordError, match="lossy cast refused"):
            record.load_state_dict(m, {"p": stored})
        np.testing.assert_array_equal(m.p.to_numpy(), np.zeros(2))


def test_state_dict_and_load_state_dict():
    net = Net(seed=1)
    sd = record.state_dict(net)
    assert list(sd) == [n for n, _ in net.named_params()]
    assert all(isinstance(v, np.ndarray) for v in sd.values())
    other = Net(seed=2)
    mixed = {n: (Tensor.from_data(v) if i % 2 else v) for i, (n, v) in enumerate(sd.items())}
    record.load_state_dict(other, mixed)
    for n, v in values(other).items():
        np.testing.assert_array_equal(v, sd[n])


def test_shared_params_stay_shared(tmp_path):
    def tied(seed):
        m = nn.Module()
        m.embed = Leaf(4, 3, seed=seed)
        m.out = nn.Module()
        m.out.weight = m.embed.weight  # weight tying: one Param under two names
        return m

    path = tmp_path / "tied.safetensors"
    record.save(tied(1), path)
    assert {"embed.weight", "out.weight"} <= set(record.read_safetensors(path)[0])
    target = tied(2)
    pid = target.embed.weight.param_id
    record.load(target, path)
    assert target.out.weight is target.embed.weight and target.embed.weight.param_id == pid
    np.testing.assert_array_equal(target.out.weight.to_numpy(),
                                  tied(1).embed.weight.to_numpy())


def test_params_in_a_tuple_fail_before_any_change(tmp_path):
    path = tmp_path / "t.safetensors"
    m = nn.Module()
    m.a = param([2], seed=0)
    m.pair = (param([2], seed=1), param([2], seed=2))
    record.save(m, path)
    target = nn.Module()
    target.a = param([2], seed=3)
    target.pair = (param([2], seed=4), param([2], seed=5))
    snap = snapshot(target)
    with pytest.raises(TypeError, match="tuple"):
        record.load(target, path)
    assert_unchanged(target, snap)


def test_wrong_arguments_and_files(tmp_path):
    net = Net(seed=0)
    with pytest.raises(TypeError, match="module comes first"):
        record.save(tmp_path / "x", net)
    pt = tmp_path / "w.pt"
    pt.write_bytes(b"PK\x03\x04" + bytes(40))
    with pytest.raises(RecordError, match="load_pytorch"):
        record.load(net, pt)
    with pytest.raises(FileNotFoundError):
        record.load(net, tmp_path / "missing.safetensors")


def test_a_module_without_params_round_trips(tmp_path):
    path = tmp_path / "empty.safetensors"
    record.save(nn.Module(), path)
    assert record.load(nn.Module(), path) is not None
    assert record.read_safetensors(path)[0] == {}


def test_prefix_hint():
    m = mirror({"fc.weight": (2, 2), "fc.bias": (2,)})
    with pytest.raises(RecordError, match=r"extra prefix 'module\.'"):
        record.load_state_dict(m, {"module.fc.weight": np.zeros((2, 2), np.float32),
                                   "module.fc.bias": np.zeros(2, np.float32)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        record.load_state_dict(m, {"fc.weight": np.ones((2, 2)), "fc.bias": np.ones(2)})
    np.testing.assert_array_equal(m.fc.weight.to_numpy(), np.ones((2, 2)))


def test_load_onto_wgpu_narrows_int64_in_range(tmp_path):
    try:
        from ember.backend import Wgpu

        backend = Wgpu()
    except Exception as e:  # no adapter on this machine
        pytest.skip(f"no Wgpu: {e}")

    def make(seed, backend=None):
        m = nn.Module()
        m.fc = Leaf(4, 3, seed=seed, backend=backend)
        m.count = nn.Param(Tensor.from_data(np.array([1, 2], np.int32), backend=backend),
                           trainable=False)
        return m

    source = make(1)
    source.count = nn.Param(Tensor.from_data(np.array([7, 2**31 - 1]), dtype="int64"),
                            trainable=False)
    path = tmp_path / "w.safetensors"
    record.save(source, path)
    target = make(2, backend)
    record.load(target, path)  # WebGPU holds no int64: in-range values fit int32
    assert target.count.dtype == "int32" and target.count.backend == backend
    assert target.count.tolist() == [7, 2**31 - 1]
    np.testing.assert_array_equal(target.fc.weight.to_numpy(), source.fc.weight.to_numpy())
