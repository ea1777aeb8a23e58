"""record.load_pytorch / read_pytorch against files written by torch itself."""

import collections
import io
import math
import pickle
import struct
import zipfile

import numpy as np
import pytest
import torch

from ember import nn, record
from ember.record import RecordError, UnsafePickleError, _pytorch

from .helpers import mirror, mutations, peak, values

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
        "special": torch.tensor([-0.0, float("nan"), float("inf"), -float("inf"), 1e-45]),
    }
    path = tmp_path / "views.pt"
    torch.save(sd, path, _use_new_zipfile_serialization=not legacy)
    if not legacy:
        with zipfile.ZipFile(path) as z:  # one storage for all views of `base`
            assert len([n for n in z.namelist() if "/data/" in n]) == 5
    got = record.read_pytorch(path)
    for name, t in sd.items():
        want = t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()
        assert got[name].shape == want.shape, name
        np.testing.assert_array_equal(got[name], want, err_msg=name)
        assert np.ascontiguousarray(got[name]).tobytes() == want.tobytes(), name  # bit for bit
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
    for name, make in layers:
        src = make(torch.nn)
        if name == "BatchNorm2d":
            src.train()
            src(torch.randn(2, 4, 3, 3))
        path = tmp_path / f"{name}.pt"
        torch.save(src.state_dict(), path)
        ours = make(nn)
        record.load_pytorch(path, ours)
        assert_loaded(ours, src.state_dict())
    src, ours = torch.nn.Linear(4, 3), nn.Linear(4, 3)
    torch.save(src.state_dict(), tmp_path / "lin.pt")
    record.load_pytorch(tmp_path / "lin.pt", ours)
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    from ember import Tensor

    np.testing.assert_allclose(ours(Tensor.from_data(x)).to_numpy(),
                               src(torch.from_numpy(x)).detach().numpy(), rtol=1e-5, atol=1e-6)


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


# ---- hostile files: what a file claims costs nothing until it is needed ----------------------

class Pid:
    def __init__(self, pid):
        self.pid = pid


class Claim:
    """Pickles as torch.save pickles a tensor (_rebuild_tensor_v2 of a persistent storage), with
    whatever size, stride and offset it is given."""

    def __init__(self, key, size, stride=None, offset=0, storage=torch.FloatStorage,
                 metadata=None):
        if stride is None:
            stride = [math.prod(size[i + 1:]) for i in range(len(size))]
        self.key, self.size, self.stride, self.offset = key, size, stride, offset
        self.storage, self.metadata, self.numel, self.view = storage, metadata, 0, ()

    def __reduce__(self):
        pid = Pid(("storage", self.storage, self.key, "cpu", self.numel) + self.view)
        args = (pid, self.offset, tuple(self.size), tuple(self.stride), False,
                collections.OrderedDict())
        return torch._utils._rebuild_tensor_v2, args + ((self.metadata,) if self.metadata
                                                        else ())


class ClaimPickler(pickle.Pickler):
    def persistent_id(self, obj):
        return obj.pid if isinstance(obj, Pid) else None


def archive(path, tensors, storages, methods=None):
    """A torch.save archive made by hand: data.pkl of {name: Claim}, and a member data/<key>
    for each of {key: bytes}, stored (as torch.save does) unless `methods` = {key: method}."""
    for claim in tensors.values():  # the storage's element count, as torch writes it
        claim.numel = len(storages[claim.key]) // (1 if claim.storage is torch.BoolStorage
                                                   else 4)
    buf = io.BytesIO()
    ClaimPickler(buf, protocol=2).dump(tensors)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", buf.getvalue())
        z.writestr("archive/byteorder", "little")
        for key, data in storages.items():
            z.writestr(f"archive/data/{key}", data,
                       compress_type=(methods or {}).get(key, zipfile.ZIP_STORED))
        z.writestr("archive/version", "3\n")
    return path


CENTRAL = {"flags": (8, "<H"), "method": (10, "<H"), "compressed": (20, "<I"),
           "size": (24, "<I")}


def patch(path, member, **fields):
    """Change what the central directory declares for `member` (its flags, compression method,
    compressed size or size), which is what zipfile reads."""
    data = bytearray(path.read_bytes())
    name = member.encode()
    at = data.find(b"PK\x01\x02")
    while at >= 0:
        n = struct.unpack_from("<H", data, at + 28)[0]
        if data[at + 46: at + 46 + n] == name:
            for field, value in fields.items():
                offset, fmt = CENTRAL[field]
                struct.pack_into(fmt, data, at + offset, value)
            path.write_bytes(bytes(data))
            return path
        at = data.find(b"PK\x01\x02", at + 4)
    raise AssertionError(f"no {member} in {path}")


@pytest.fixture
def bytes_read(monkeypatch):
    """The bytes load_pytorch reads or inflates from the storages of zip archives."""
    counted = []
    real = _pytorch._Zip.read

    def read(self, info, need):
        data = real(self, info, need)
        if "/data/" in info.filename:
            counted.append(len(data))
        return data

    monkeypatch.setattr(_pytorch._Zip, "read", read)
    return counted


MB = 1 << 20
GIB_FLOATS = 1 << 29  # 2 GiB of float32


def test_handmade_archives_are_what_torch_writes(tmp_path):
    # the attacks below are built with `archive`; torch itself reads what it makes
    base = np.arange(12, dtype=np.float32)
    path = archive(tmp_path / "hand.pt", {"w": Claim("0", [3, 4]), "t": Claim("0", [4, 3],
                                                                             [1, 4])},
                   {"0": base.tobytes()})
    want = torch.load(path, weights_only=True)
    got = record.read_pytorch(path)
    for name in ("w", "t"):
        np.testing.assert_array_equal(got[name], want[name].numpy())


@pytest.mark.parametrize("method, name", [(zipfile.ZIP_BZIP2, "bzip2"),
                                          (zipfile.ZIP_LZMA, "lzma")])
def test_a_bzip2_or_lzma_bomb_is_refused_before_inflating(tmp_path, bytes_read, method, name):
    # the member really inflates to 16 MiB and its header claims 2 GiB, as the pickle does
    zeros = bytes(16 * MB)
    path = archive(tmp_path / "bomb.pt", {"w": Claim("0", [GIB_FLOATS]),
                                          "v": Claim("0", [4 * MB])}, {"0": zeros},
                   {"0": method})
    patch(path, "archive/data/0", size=2 * 1024 * MB)
    assert path.stat().st_size < 40_000
    with zipfile.ZipFile(path) as z:
        assert z.getinfo("archive/data/0").file_size == 2 * 1024 * MB
    fits, other = mirror({"v": (4 * MB,)}), mirror({"other": (2,)})
    loads = [lambda: record.read_pytorch(path),
             lambda: record.load_pytorch(path, fits, strict=False),
             lambda: record.load_pytorch(path, other)]  # no name matches
    for load in loads:
        error, most = peak(load)
        assert isinstance(error, RecordError), error
        assert f"compressed with {name}" in str(error) and "data/0" in str(error)
        assert most < 8 * MB
    assert bytes_read == []


def test_a_deflate_bomb_is_refused_before_inflating(tmp_path, bytes_read):
    # honest sizes: 64 MiB of zeros deflate to 64 KiB, a ratio of 1000 (torch.save: 1)
    path = archive(tmp_path / "bomb.pt", {"w": Claim("0", [16 * MB])}, {"0": bytes(64 * MB)},
                   {"0": zipfile.ZIP_DEFLATED})
    assert path.stat().st_size < 100_000
    fits = mirror({"w": (16 * MB,)})
    for load in (lambda: record.read_pytorch(path), lambda: record.load_pytorch(path, fits)):
        error, most = peak(load)
        assert isinstance(error, RecordError), error
        assert "a ratio no torch.save file has" in str(error) and "zip bomb" in str(error)
        assert most < 8 * MB
    # lying sizes: a small deflated member whose header claims 2 GiB
    path = archive(tmp_path / "liar.pt", {"w": Claim("0", [GIB_FLOATS])}, {"0": bytes(MB)},
                   {"0": zipfile.ZIP_DEFLATED})
    patch(path, "archive/data/0", size=2 * 1024 * MB)
    error, most = peak(lambda: record.read_pytorch(path))
    assert isinstance(error, RecordError) and "ratio" in str(error), error
    assert most < 8 * MB
    assert bytes_read == []


def test_a_member_that_inflates_past_its_claim_is_read_no_further(tmp_path, bytes_read):
    # the tensor needs 16 bytes; the member says 16 and holds 32 MiB of deflated zeros
    path = archive(tmp_path / "long.pt", {"w": Claim("0", [4])}, {"0": bytes(32 * MB)},
                   {"0": zipfile.ZIP_DEFLATED})
    patch(path, "archive/data/0", size=16)
    error, most = peak(lambda: record.read_pytorch(path))
    assert isinstance(error, RecordError) and "damaged" in str(error), error  # its CRC
    assert most < 2 * MB and bytes_read == []  # refused inside the read: counted nothing


def test_declared_sizes_are_checked_before_reading(tmp_path, bytes_read):
    # a stored member claiming more than the archive holds, and a tensor claiming more than
    # its member: refused from the sizes alone
    path = archive(tmp_path / "claims.pt", {"w": Claim("0", [GIB_FLOATS])}, {"0": bytes(64)})
    error, most = peak(lambda: record.read_pytorch(path))
    assert isinstance(error, RecordError) and "reaches element 536870911 of a storage of 16" \
        in str(error), error
    patch(path, "archive/data/0", size=2 * 1024 * MB, compressed=2 * 1024 * MB)
    error, most = peak(lambda: record.read_pytorch(path))
    assert isinstance(error, RecordError), error
    assert "2147483648 bytes of it are needed but it holds" in str(error)
    assert "truncated" in str(error)
    assert most < 2 * MB and bytes_read == []


def test_only_the_storages_of_matching_tensors_are_read(tmp_path, bytes_read):
    big = torch.arange(8 * MB, dtype=torch.float32)  # 32 MiB, stored
    small = torch.arange(6.0).reshape(2, 3)
    path = tmp_path / "mixed.pt"
    torch.save({"w": small, "unused": big, "head": big[:4]}, path)
    error, most = peak(lambda: record.load_pytorch(path, mirror({"x": (2, 3)})))
    assert isinstance(error, RecordError) and "unexpected: 3" in str(error)
    assert most < 2 * MB and bytes_read == []  # no name matches: nothing read
    module = mirror({"w": (2, 3)})
    with pytest.warns(UserWarning, match="unused"):
        error, most = peak(lambda: record.load_pytorch(path, module, strict=False))
    assert error is module and most < 2 * MB and bytes_read == [24]
    np.testing.assert_array_equal(module.w.to_numpy(), small.numpy())
    # a view of 4 floats of the 32 MiB storage reads 16 bytes of it
    bytes_read.clear()
    got, most = peak(lambda: record.load_pytorch(path, mirror({"head": (4,)}), strict=False))
    assert bytes_read == [16] and most < 2 * MB
    np.testing.assert_array_equal(got.head.to_numpy(), [0, 1, 2, 3])


def test_a_repacked_deflated_archive_still_loads(tmp_path):
    net = torch_net()
    sd = net.state_dict()
    good, packed = tmp_path / "good.pt", tmp_path / "deflated.pt"
    torch.save(sd, good)
    with zipfile.ZipFile(good) as z, zipfile.ZipFile(packed, "w", zipfile.ZIP_DEFLATED) as out:
        for info in z.infolist():
            out.writestr(info.filename, z.read(info.filename))
    with zipfile.ZipFile(packed) as z:
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_DEFLATED}
    module = mirror_of(sd)
    record.load_pytorch(packed, module)
    assert_loaded(module, sd)


def test_a_stride_0_tensor_is_a_view_not_2_gib(tmp_path):
    # torch.save writes an expanded tensor as its one-element storage with stride 0
    path = tmp_path / "expanded.pt"
    torch.save({"w": torch.full((1,), 3.5).expand(GIB_FLOATS),
                "m": torch.arange(3.0).expand(4, 3)}, path)
    assert path.stat().st_size < 4096
    got, most = peak(lambda: record.read_pytorch(path))
    assert most < 2 * MB
    w = got["w"]
    assert w.shape == (GIB_FLOATS,) and w.strides == (0,) and not w.flags.writeable
    assert w[0] == 3.5 and w[-1] == 3.5
    with pytest.raises(ValueError, match="read-only"):
        w[0] = 1
    np.testing.assert_array_equal(got["m"], torch.load(path, weights_only=True)["m"].numpy())
    m = mirror({"m": (4, 3)})  # into a model: the view's values, copied once
    record.load_pytorch(path, m, strict=False)
    np.testing.assert_array_equal(m.m.to_numpy(), np.tile(np.arange(3.0), (4, 1)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_400_names_on_one_storage_share_one_array(tmp_path, dtype):
    base = torch.arange(MB, dtype=torch.float32).to(dtype)  # 4 MiB (2 MiB of bfloat16)
    sd = {f"alias{i}": base for i in range(200)}
    sd |= {f"view{i}": base[i:i + 1000].view(10, 100) for i in range(200)}
    path = tmp_path / "aliases.pt"
    torch.save(sd, path)
    got, most = peak(lambda: record.read_pytorch(path))
    assert most < 16 * MB  # materialised: 400 x 4 MiB = 1.6 GB
    want = base.float().numpy()
    assert all(np.shares_memory(got["alias0"], a) for a in got.values())
    np.testing.assert_array_equal(got["alias199"], want)
    np.testing.assert_array_equal(got["view150"], want[150:1150].reshape(10, 100))


def test_neg_and_conj_bits_are_read_as_torch_does(tmp_path):
    path = tmp_path / "bits.pt"
    x = torch.arange(4.0)
    sd = {"neg": x._neg_view(), "plain": x, "conj": torch.tensor([1 + 2j, 3 - 1j])._conj()}
    torch.save(sd, path)
    got = record.read_pytorch(path)
    for name, t in sd.items():
        np.testing.assert_array_equal(got[name], t.resolve_neg().resolve_conj().numpy())
    assert not np.shares_memory(got["neg"], got["plain"])


@pytest.mark.parametrize("claim, message", [
    (Claim("0", [2, 1 << 62], [1 << 62, 1]), "reaches element"),
    (Claim("0", [2], [1], offset=1 << 70), "reaches element"),
    (Claim("0", [2], [10**5000]), "reaches element <int too long to print>"),
    (Claim("0", [2], [1], offset=-10**5000), "offset <int too long to print>"),
    (Claim("0", [1 << 64], [0]), "too large for NumPy"),
    (Claim("0", [0, 1 << 64]), "too large for NumPy"),
    (Claim("0", [2, 3], [1]), "size \\[2, 3\\], stride \\[1\\]"),
    (Claim("0", [2], [-1]), "stride \\[-1\\]"),
    (Claim("0", [2.5]), "not an integer"),
    (Claim("0", [2], storage=torch.BoolStorage, metadata={"neg": True}), "neg bit"),
])
def test_odd_sizes_strides_and_bits_are_refused(tmp_path, claim, message):
    path = archive(tmp_path / "odd.pt", {"w": claim}, {"0": bytes(64)})
    with pytest.raises(RecordError, match=message):
        record.read_pytorch(path)


def test_an_unused_stride_and_huge_sizes_of_a_view_are_fine(tmp_path):
    path = archive(tmp_path / "odd.pt", {"w": Claim("0", [1, 3], [1 << 80, 1]),
                                         "e": Claim("0", [0, 1 << 40])}, {"0": bytes(12)})
    got = record.read_pytorch(path)
    assert got["w"].tolist() == [[0, 0, 0]] and got["e"].shape == (0, 1 << 40)


def test_legacy_storage_views(tmp_path):
    # PyTorch < 0.4 pickled a view of a storage as ("storage", type, key, "cpu", size,
    # (view key, offset, size)), in elements; the legacy stream then holds the root's bytes
    root = np.arange(10, dtype=np.float32)

    def legacy(claims):
        buf = io.BytesIO()
        for claim in claims.values():
            claim.numel = 10
        ClaimPickler(buf, protocol=2).dump(claims)
        return (pickle.dumps(_pytorch.MAGIC_NUMBER, protocol=2)
                + pickle.dumps(_pytorch.PROTOCOL_VERSION, protocol=2)
                + pickle.dumps({"little_endian": True}, protocol=2) + buf.getvalue()
                + pickle.dumps(["0"], protocol=2) + struct.pack("<q", 10) + root.tobytes())

    inside, plain, past = Claim("0", [3], offset=1), Claim("0", [10]), Claim("0", [3])
    inside.view, past.view = (("v", 2, 5),), (("w", 8, 5),)
    path = tmp_path / "old.pt"
    path.write_bytes(legacy({"a": inside, "b": plain}))
    got = record.read_pytorch(path)
    np.testing.assert_array_equal(got["a"], root[3:6])
    np.testing.assert_array_equal(got["b"], root)
    path.write_bytes(legacy({"c": past}))  # the view's 5 elements from 8 pass the root's end
    with pytest.raises(RecordError, match="reaches element 2 of a storage of 2"):
        record.read_pytorch(path)


def test_damaged_archives_raise_only_record_errors(tmp_path):
    good = tmp_path / "good.pt"
    torch.save({"w": torch.arange(6.0).reshape(2, 3), "b": torch.ones(2)}, good)
    raw = good.read_bytes()
    cases = {}

    good_copy = tmp_path / "copy.pt"
    good_copy.write_bytes(raw)
    data0 = next(n for n in zipfile.ZipFile(good).namelist() if n.endswith("data/0"))
    cases["encrypted"] = patch(good_copy, data0, flags=1).read_bytes(), "encrypted"
    good_copy.write_bytes(raw)
    cases["method 99"] = patch(good_copy, data0, method=99).read_bytes(), "method 99"
    garbage = archive(tmp_path / "garbage.pt", {"w": Claim("0", [4])}, {"0": bytes(16)},
                      {"0": zipfile.ZIP_DEFLATED})
    data = bytearray(garbage.read_bytes())
    at = data.find(b"archive/data/0") + len("archive/data/0")
    data[at: at + 4] = b"\xff\xff\xff\xff"  # the deflate stream of the member: invalid
    cases["bad deflate"] = bytes(data), "damaged"
    for case, (data, message) in cases.items():
        path = tmp_path / f"{case}.pt"
        path.write_bytes(data)
        with pytest.raises(RecordError, match=message):
            record.load_pytorch(path, mirror({"w": (2, 3), "b": (2,)}))
    # cut at every offset: a RecordError each time, never another exception
    for cut in range(len(raw)):
        path = tmp_path / "cut.pt"
        path.write_bytes(raw[:cut])
        with pytest.raises(RecordError):
            record.load_pytorch(path, mirror({"w": (2, 3), "b": (2,)}))


@pytest.mark.parametrize("what", ["zip bytes", "pickle in a sound zip", "legacy"])
def test_fuzzed_torch_files_raise_only_record_errors(tmp_path, what):
    net = torch_net()
    sd = net.state_dict()
    good, path = tmp_path / "good.pt", tmp_path / "fuzzed.pt"
    torch.save(sd, good, _use_new_zipfile_serialization=what != "legacy")
    raw = good.read_bytes()
    if what == "pickle in a sound zip":  # past the CRCs: the unpickler and the tensor checks
        with zipfile.ZipFile(good) as z:
            raw = z.read(next(n for n in z.namelist() if n.endswith("data.pkl")))
    outcomes = collections.Counter()
    for data in mutations(raw, seed=len(what), count=300):
        if what == "pickle in a sound zip":
            rewrite_zip(good, path, lambda n, d, new=data: new if n.endswith("data.pkl") else d)
        else:
            path.write_bytes(data)
        for load in (lambda: record.read_pytorch(path),
                     lambda: record.load_pytorch(path, mirror_of(sd))):
            try:
                load()
                outcomes["loaded"] += 1
            except RecordError as e:
                assert "record.load_pytorch: " in str(e)
                outcomes["refused"] += 1
    # some mutations hit bytes that do not matter (padding, a name, a value), most do not
    assert 0 < outcomes["loaded"] < outcomes["refused"], outcomes
