"""record.load_pytorch / read_pytorch against files written by torch itself."""

import io
import zipfile

import numpy as np
import pytest
import torch

from ember import nn, record
from ember.record import RecordError, UnsafePickleError

from .helpers import mirror, values

EMBER_DTYPE = {torch.float32: "float32", torch.float64: "float64", torch.int64: "int64",
               torch.int32: "int32", torch.bool: "bool", torch.float16: "float32",
               torch.bfloat16: "float32"}


def torch_net():
    torch.manual_seed(0)
    net = torch.nn.Sequential()
    net.add_module("conv", torch.nn.Conv2d(3, 4, 3, groups=1))
    net.add_module("bn", torch.nn.BatchNorm2d(4))
    net.add_module("blocks", torch.nn.ModuleList([torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)]))
    net.add_module("heads", torch.nn.ModuleDict({"cls": torch.nn.Linear(2, 5)}))
    net.add_module("ln", torch.nn.LayerNorm(5))
    net.add_module("emb", torch.nn.Embedding(7, 3))
    net.bn.train()
    net.bn(torch.randn(2, 4, 5, 5))  # running statistics and num_batches_tracked move
    return net


def mirror_of(sd):
    return mirror({k: tuple(v.shape) for k, v in sd.items()},
                  {k: EMBER_DTYPE[v.dtype] for k, v in sd.items()})


def assert_loaded(module, sd):
    got = values(module)
    assert set(got) == set(sd)
    for name, t in sd.items():
        want = t.detach().float().numpy() if t.dtype in (torch.float16, torch.bfloat16) \
            else t.detach().numpy()
        np.testing.assert_array_equal(got[name], want.astype(got[name].dtype), err_msg=name)


@pytest.mark.parametrize("wrap", ["plain", "state_dict", "model", "parameters", "legacy"])
def test_torch_files_load_with_the_same_tensors(tmp_path, wrap):
    net = torch_net()
    sd = net.state_dict()
    path = tmp_path / "weights.pt"
    if wrap == "plain":
        torch.save(sd, path)
    elif wrap == "state_dict":
        optimizer = {"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.ones(4, 3, 3, 3)}},
                     "param_groups": [{"params": [0, 1], "lr": 0.1, "betas": (0.9, 0.99)}]}
        torch.save({"state_dict": sd, "epoch": 3, "optimizer": optimizer,
                    "best": np.float64(0.5), "note": "x"}, path)
    elif wrap == "model":
        torch.save({"model": sd, "args": {"lr": 0.1, "sizes": (1, 2)}}, path)
    elif wrap == "parameters":  # nn.Parameter objects (_rebuild_parameter), plus buffers
        sd = dict(net.named_parameters()) | dict(net.named_buffers())
        torch.save(sd, path)
    else:
        torch.save(sd, path, _use_new_zipfile_serialization=False)
    module = mirror_of(sd)
    ids = [p.param_id for _, p in module.named_params()]
    assert record.load_pytorch(path, module) is module
    assert_loaded(module, sd)
    assert [p.param_id for _, p in module.named_params()] == ids
    assert module.bn.num_batches_tracked.dtype == "int64"
    assert int(module.bn.num_batches_tracked.item()) == 1


@pytest.mark.parametrize("legacy", [False, True])
def test_half_bfloat16_and_double_tensors(tmp_path, legacy):
    torch.manual_seed(1)
    sd = {"h": torch.randn(3, 4).half(), "b": torch.randn(5).bfloat16(),
          "d": torch.randn(2, 2).double(), "d32": torch.randn(4).double(),
          "i": torch.tensor([1, -2**31, 2**31 - 1]), "flags": torch.tensor([True, False])}
    path = tmp_path / "mixed.pt"
    torch.save(sd, path, _use_new_zipfile_serialization=not legacy)
    dtypes = {"h": "float32", "b": "float32", "d": "float64", "d32": "float32", "i": "int32",
              "flags": "bool"}
    module = mirror({k: tuple(v.shape) for k, v in sd.items()}, dtypes)
    record.load_pytorch(path, module)
    got = values(module)
    np.testing.assert_array_equal(got["h"], sd["h"].float().numpy())
    np.testing.assert_array_equal(got["b"], sd["b"].float().numpy())
    np.testing.assert_array_equal(got["d"], sd["d"].numpy())
    assert got["d"].dtype == np.float64
    np.testing.assert_array_equal(got["d32"], sd["d32"].float().numpy())
    np.testing.assert_array_equal(got["i"], sd["i"].numpy().astype(np.int32))
    assert got["flags"].tolist() == [True, False]
    raw = record.read_pytorch(path)  # without a module: the stored dtypes, widened only if
    assert raw["h"].dtype == np.float16 and raw["b"].dtype == np.float32  # NumPy lacks one
    assert raw["d"].dtype == np.float64 and raw["i"].dtype == np.int64


@pytest.mark.parametrize("legacy", [False, True])
def test_views_and_shared_storages(tmp_path, legacy):
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    sd = {
        "base": base,
        "transposed": base.t(),                    # non-contiguous
        "strided": base[:, ::2],                   # step
        "offset": base[2:, 1:4],                   # storage offset
        "row": base[3],
        "broadcast": torch.ones(3).expand(2, 3),   # stride 0
        "scalar": base[1, 2],                      # 0-d view
        "empty": base[:0],
        "bf_view": torch.arange(8, dtype=torch.bfloat16).reshape(2, 4).t(),
        "other": torch.randn(2),
    }
    path = tmp_path / "views.pt"
    torch.save(sd, path, _use_new_zipfile_serialization=not legacy)
    if not legacy:
        with zipfile.ZipFile(path) as z:  # one storage for all views of `base`
            assert len([n for n in z.namelist() if "/data/" in n]) == 4
    got = record.read_pytorch(path)
    for name, t in sd.items():
        want = t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()
        assert got[name].shape == want.shape, name
        np.testing.assert_array_equal(got[name], want, err_msg=name)
        assert not got[name].flags.writeable, name  # read-only views, as the storage is shared
    for name in ("transposed", "strided", "offset", "row", "scalar"):  # one array per storage
        assert np.shares_memory(got[name], got["base"]), name
    assert got["broadcast"].strides == (0, 4)  # expanded: a view of 3 floats, not a copy


def test_more_dtypes_and_negative_bit(tmp_path):
    sd = {"u16": torch.tensor([1, 65535], dtype=torch.uint16),
          "i8": torch.tensor([-128, 127], dtype=torch.int8),
          "u8": torch.tensor([0, 255], dtype=torch.uint8),
          "e4": torch.tensor([0.5, -448.0]).to(torch.float8_e4m3fn),
          "e5": torch.tensor([0.25, 57344.0]).to(torch.float8_e5m2),
          "c64": torch.tensor([1 + 2j], dtype=torch.complex64)}
    path = tmp_path / "dtypes.pt"
    torch.save(sd, path)
    got = record.read_pytorch(path)
    for name, t in sd.items():
        want = t.float().numpy() if name in ("e4", "e5") else t.numpy()
        np.testing.assert_array_equal(got[name], want, err_msg=name)
    assert got["u16"].dtype == np.uint16


def test_big_endian_archives(tmp_path):
    # torch writes storages in the machine's byte order and says which in `byteorder`
    sd = {"w": torch.arange(6.0).reshape(2, 3).t(), "i": torch.tensor([1, -2, 2**40]),
          "b": torch.tensor([1.5, -2.0]).bfloat16()}
    little, big = tmp_path / "little.pt", tmp_path / "big.pt"
    torch.save(sd, little)
    sizes = {"0": 4, "1": 8, "2": 2}

    def swap(name, data):
        if name.endswith("byteorder"):
            return b"big"
        if "/data/" in name:
            width = sizes[name.rsplit("/", 1)[1]]
            return np.frombuffer(data, f"<u{width}").byteswap().tobytes()
        return data

    rewrite_zip(little, big, swap)
    got = record.read_pytorch(big)
    np.testing.assert_array_equal(got["w"], sd["w"].numpy())
    np.testing.assert_array_equal(got["i"], sd["i"].numpy())
    np.testing.assert_array_equal(got["b"], sd["b"].float().numpy())


def test_nested_dicts_and_key_paths(tmp_path):
    path = tmp_path / "nested.pt"
    enc, dec = torch.nn.Linear(2, 3), torch.nn.Linear(3, 2)
    torch.save({"nets": {"encoder": enc.state_dict(), "decoder": dec.state_dict()},
                "step": 10}, path)
    flat = record.read_pytorch(path)
    assert set(flat) == {"nets.encoder.weight", "nets.encoder.bias", "nets.decoder.weight",
                         "nets.decoder.bias"}
    only = record.read_pytorch(path, key="nets/decoder")
    np.testing.assert_array_equal(only["weight"], dec.weight.detach().numpy())
    m = mirror({"encoder.weight": (3, 2), "encoder.bias": (3,), "decoder.weight": (2, 3),
                "decoder.bias": (2,)})
    record.load_pytorch(path, m, key="nets")
    np.testing.assert_array_equal(m.encoder.bias.to_numpy(), enc.bias.detach().numpy())


def test_dtypes_ember_cannot_read_are_named(tmp_path):
    path = tmp_path / "q.pt"
    torch.save({"c": torch.ones(2, dtype=torch.complex32)}, path)
    with pytest.raises(UnsafePickleError, match="torch.complex32"):
        record.read_pytorch(path)
    q = torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8)
    torch.save({"q": q}, path)
    with pytest.raises(UnsafePickleError, match="_rebuild_qtensor"):
        record.read_pytorch(path)


def test_key_map_renames_every_key(tmp_path):
    torch.manual_seed(0)
    src = torch.nn.Module()
    src.conv = torch.nn.Conv2d(1, 2, 3)
    src.fc = torch.nn.Linear(2, 3)
    path = tmp_path / "w.pth"
    torch.save(src.state_dict(), path)
    target = mirror({"conv1.weight": (2, 1, 3, 3), "conv1.bias": (2,),
                     "head.weight": (3, 2), "head.bias": (3,)})
    record.load_pytorch(path, target, key_map={r"^conv\.(.*)": r"conv1.\1", r"^fc\.": "head."})
    np.testing.assert_array_equal(target.conv1.weight.to_numpy(), src.conv.weight.detach())
    np.testing.assert_array_equal(target.head.bias.to_numpy(), src.fc.bias.detach())

    # in order, each applied to the result of the previous; a list of pairs works too
    again = mirror({"conv1.weight": (2, 1, 3, 3), "conv1.bias": (2,),
                    "head.weight": (3, 2), "head.bias": (3,)})
    record.load_pytorch(path, again, key_map=[(r"^conv\.", "c."), (r"^c\.", "conv1."),
                                              (r"^fc", "head")])
    np.testing.assert_array_equal(again.conv1.bias.to_numpy(), src.conv.bias.detach())


def test_unmatched_keys_are_reported_at_once(tmp_path):
    src = torch.nn.Module()
    src.conv = torch.nn.Conv2d(1, 2, 3)
    src.fc = torch.nn.Linear(2, 3)
    path = tmp_path / "w.pth"
    torch.save(src.state_dict(), path)
    target = mirror({"conv1.weight": (2, 1, 3, 3), "conv1.bias": (2,), "fc.weight": (3, 4),
                     "fc.bias": (3,), "extra.weight": (1,)})
    snap = values(target)
    with pytest.raises(RecordError) as info:
        record.load_pytorch(path, target, key_map={r"^conv\.(.*)": r"conv1.\1",
                                                   r"^nothing": "x"})
    msg = str(info.value)
    for text in ["missing: 1", "extra.weight", "shape of fc.weight: [3, 2] in the file, "
                 "[3, 4] in the module", "note: key_map pattern '^nothing' matched no name",
                 "(2 problems)"]:
        assert text in msg, (text, msg)
    for name, v in values(target).items():
        np.testing.assert_array_equal(v, snap[name])

    with pytest.raises(RecordError) as info:
        record.load_pytorch(path, mirror({"weight": (2, 1, 3, 3)}))
    assert "conv.weight" in str(info.value) and "fc.bias" in str(info.value)


def test_key_map_errors(tmp_path):
    path = tmp_path / "w.pt"
    torch.save({"a.x": torch.zeros(1), "b.x": torch.zeros(1)}, path)
    m = mirror({"c.x": (1,)})
    with pytest.raises(RecordError, match=r"'a.x' and 'b.x' both become 'c.x'"):
        record.load_pytorch(path, m, key_map={r"^[ab]\.": "c."})
    with pytest.raises(RecordError, match="not a regular expression"):
        record.load_pytorch(path, m, key_map={r"^(": ""})
    with pytest.raises(RecordError, match="fails on"):
        record.load_pytorch(path, m, key_map={r"^a": r"\3"})


def test_data_parallel_prefix_hint(tmp_path):
    net = torch.nn.Linear(2, 2)
    path = tmp_path / "dp.pt"
    torch.save({f"module.{k}": v for k, v in net.state_dict().items()}, path)
    m = mirror({"weight": (2, 2), "bias": (2,)})
    with pytest.raises(RecordError, match=r"key_map=\{r'\^module\\\.': ''\}"):
        record.load_pytorch(path, m)
    record.load_pytorch(path, m, key_map={r"^module\.": ""})
    np.testing.assert_array_equal(m.weight.to_numpy(), net.weight.detach())


def test_strict_false_and_key(tmp_path):
    net = torch.nn.Linear(2, 2)
    path = tmp_path / "ck.pt"
    torch.save({"ema": net.state_dict(), "model": {"weight": torch.zeros(2, 2)}}, path)
    m = mirror({"weight": (2, 2), "bias": (2,), "scale": (1,)})
    with pytest.warns(UserWarning, match="scale"):
        record.load_pytorch(path, m, strict=False, key="ema")
    np.testing.assert_array_equal(m.weight.to_numpy(), net.weight.detach())
    with pytest.raises(RecordError, match="no entry 'nope'.*'ema', 'model'"):
        record.read_pytorch(path, key="nope")


def test_safetensors_path_in_load_pytorch(tmp_path):
    net = torch_net()
    sd = net.state_dict()
    path = tmp_path / "model.safetensors"
    record.write_safetensors({k: v.numpy() for k, v in sd.items()}, path,
                             metadata={"format": "pt"})
    module = mirror_of(sd)
    record.load_pytorch(path, module)
    assert_loaded(module, sd)
    back = mirror_of(sd)  # and ember's own reader of the same file
    record.load(back, path)
    assert_loaded(back, sd)


def test_ember_layers_load_torch_weights(tmp_path):
    layers = [("Linear", lambda m: m.Linear(4, 3)), ("Conv2d", lambda m: m.Conv2d(3, 4, 3)),
              ("BatchNorm2d", lambda m: m.BatchNorm2d(4)),
              ("Conv2d", lambda m: m.Conv2d(4, 4, 3, groups=2, bias=False)),
              ("ConvTranspose2d", lambda m: m.ConvTranspose2d(3, 4, 3)),
              ("LayerNorm", lambda m: m.LayerNorm(4)), ("Embedding", lambda m: m.Embedding(5, 3)),
              ("MultiheadAttention", lambda m: m.MultiheadAttention(8, 2)),
              ("LSTM", lambda m: m.LSTM(4, 3, num_layers=2)),
              ("TransformerEncoderLayer", lambda m: m.TransformerEncoderLayer(8, 2, 16)),
              ("Sequential", lambda m: m.Sequential(m.Linear(2, 3), m.ReLU(), m.Linear(3, 1)))]
    tested = 0
    for name, make in layers:
        if not all(hasattr(nn, n) for n in (name, "ReLU")):
            continue
        src = make(torch.nn)
        if name == "BatchNorm2d":
            src.train()
            src(torch.randn(2, 4, 3, 3))
        path = tmp_path / f"{name}.pt"
        torch.save(src.state_dict(), path)
        ours = make(nn)
        record.load_pytorch(path, ours)
        assert_loaded(ours, src.state_dict())
        tested += 1
    if hasattr(nn, "Linear"):
        src, ours = torch.nn.Linear(4, 3), nn.Linear(4, 3)
        torch.save(src.state_dict(), tmp_path / "lin.pt")
        record.load_pytorch(tmp_path / "lin.pt", ours)
        x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
        from ember import Tensor

        np.testing.assert_allclose(ours(Tensor.from_data(x)).to_numpy(),
                                   src(torch.from_numpy(x)).detach().numpy(), rtol=1e-5,
                                   atol=1e-6)
    if not tested:
        pytest.skip("ember.nn has no Linear / Conv2d / BatchNorm2d yet")


# ---- refused and corrupt files ---------------------------------------------------------------

def test_a_whole_pickled_model_is_refused_with_the_reason(tmp_path):
    path = tmp_path / "model.pt"
    torch.save(torch.nn.Linear(2, 2), path)
    with pytest.raises(UnsafePickleError, match=r"torch\.nn\.modules\.linear\.Linear.*"
                                                r"state_dict\(\)"):
        record.read_pytorch(path)


def test_torchscript_is_refused(tmp_path):
    path = tmp_path / "scripted.pt"
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), path)
    with pytest.raises(RecordError, match="TorchScript"):
        record.read_pytorch(path)


def rewrite_zip(src, dst, change):
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(dst, "w") as out:
        for info in z.infolist():
            data = change(info.filename, z.read(info.filename))
            if data is not None:
                out.writestr(info, data)


def test_corrupt_torch_files(tmp_path):
    good = tmp_path / "good.pt"
    torch.save({"w": torch.arange(6.0).reshape(2, 3), "b": torch.ones(2)}, good)
    raw = good.read_bytes()
    cases = {}
    cases["truncated zip"] = raw[: len(raw) // 2], "not a readable zip"
    cases["random bytes"] = b"\x13\x37" * 50, "neither a torch.save file"
    bad = tmp_path / "x.pt"
    rewrite_zip(good, bad, lambda n, d: None if n.endswith("data/0") else d)
    cases["missing storage"] = bad.read_bytes(), "lacks the entry"
    rewrite_zip(good, bad, lambda n, d: d[: len(d) // 2] if n.endswith("data.pkl") else d)
    cases["cut pickle"] = bad.read_bytes(), "pickle is corrupt or truncated"
    rewrite_zip(good, bad, lambda n, d: d[:8] if n.endswith("data/0") else d)
    cases["short storage"] = bad.read_bytes(), "reaches element 5 of a storage of 2"
    rewrite_zip(good, bad, lambda n, d: None if n.endswith("data.pkl") else d)
    cases["no data.pkl"] = bad.read_bytes(), "without data.pkl"
    buf = io.BytesIO()
    torch.save({"w": torch.ones(100)}, buf, _use_new_zipfile_serialization=False)
    legacy = buf.getvalue()
    cases["legacy truncated"] = legacy[:-40], "truncated"
    cases["legacy cut pickle"] = legacy[:60], "corrupt or truncated"
    for case, (data, message) in cases.items():
        path = tmp_path / f"{case}.pt"
        path.write_bytes(data)
        with pytest.raises(RecordError, match=message):
            record.load_pytorch(path, mirror({"w": (2, 3), "b": (2,)}))
