"""The safetensors reader and writer: layout, dtypes, metadata, corrupt files, atomic writes."""

import collections
import json
import os
import random
import struct
import sys

import numpy as np
import pytest
import torch

from ember import record
from ember.record import RecordError, _safetensors

from .helpers import Net, mirror, mutations, values

WRITABLE = ["float64", "float32", "float16", "int64", "int32", "int16", "int8", "uint64",
            "uint32", "uint16", "uint8", "bool"]


def arrays():
    rng = np.random.default_rng(0)
    out = {}
    for i, dt in enumerate(WRITABLE):
        shape = [(2, 3), (5,), (), (0, 3), (1, 1, 2)][i % 5]
        if dt == "bool":
            out[f"t.{dt}"] = rng.random(shape) > 0.5
        elif dt.startswith(("int", "uint")):
            info = np.iinfo(dt)
            out[f"t.{dt}"] = rng.integers(info.min, info.max, size=shape, dtype=dt,
                                          endpoint=True)
        else:
            out[f"t.{dt}"] = rng.standard_normal(shape).astype(dt)
    return out


def handmade(path, entries, metadata=None, pad=True):
    """An independent writer in the reference layout: {name: (dtype code, shape, bytes)}."""
    header, blobs, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, (code, shape, blob) in entries.items():
        header[name] = {"dtype": code, "shape": list(shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def test_round_trip_every_dtype(tmp_path):
    path = tmp_path / "all.safetensors"
    data = arrays()
    record.write_safetensors(data, path, {"note": "hello", "ünïcode": "✓"})
    back, meta = record.read_safetensors(path)
    assert meta == {"note": "hello", "ünïcode": "✓"}
    assert set(back) == set(data)
    for name, a in data.items():
        assert back[name].dtype == a.dtype and back[name].shape == a.shape, name
        np.testing.assert_array_equal(back[name], a)


def test_layout_is_aligned_and_without_holes(tmp_path):
    path = tmp_path / "all.safetensors"
    record.write_safetensors(arrays(), path)
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0
    header = json.loads(raw[8:8 + n])
    spans = sorted(v["data_offsets"] for v in header.values())
    assert spans[0][0] == 0 and spans[-1][1] == len(raw) - 8 - n
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))  # no holes, no overlaps
    sizes = {"F64": 8, "F32": 4, "F16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8,
             "U32": 4, "U16": 2, "U8": 1, "BOOL": 1}
    for v in header.values():
        assert (8 + n + v["data_offsets"][0]) % sizes[v["dtype"]] == 0


def test_reads_files_in_the_reference_layout_with_bf16_and_float8(tmp_path):
    # what safetensors.torch.save_file writes: dtype codes, "format": "pt", raw LE bytes
    t32 = torch.randn(3, 4)
    bf = torch.randn(2, 5).to(torch.bfloat16)
    half = torch.randn(4).half()
    bits = torch.arange(256, dtype=torch.uint8)
    e4m3, e5m2 = bits.view(torch.float8_e4m3fn), bits.view(torch.float8_e5m2)
    ids = torch.tensor([1, -2, 3], dtype=torch.int64)
    flags = torch.tensor([True, False])
    path = tmp_path / "hf.safetensors"
    handmade(path, {
        "a.weight": ("F32", t32.shape, t32.numpy().tobytes()),
        "b": ("BF16", bf.shape, bf.view(torch.int16).numpy().tobytes()),
        "h": ("F16", half.shape, half.numpy().tobytes()),
        "e4": ("F8_E4M3", e4m3.shape, bits.numpy().tobytes()),
        "e5": ("F8_E5M2", e5m2.shape, bits.numpy().tobytes()),
        "ids": ("I64", ids.shape, ids.numpy().tobytes()),
        "flags": ("BOOL", flags.shape, flags.numpy().tobytes()),
    }, metadata={"format": "pt"}, pad=False)
    back, meta = record.read_safetensors(path)
    assert meta == {"format": "pt"}
    np.testing.assert_array_equal(back["a.weight"], t32.numpy())
    assert back["b"].dtype == np.float32
    np.testing.assert_array_equal(back["b"], bf.float().numpy())
    np.testing.assert_array_equal(back["h"], half.numpy())
    np.testing.assert_array_equal(back["e4"], e4m3.float().numpy())  # NaN patterns included
    np.testing.assert_array_equal(back["e5"], e5m2.float().numpy())
    np.testing.assert_array_equal(back["ids"], ids.numpy())
    assert back["flags"].dtype == np.bool_ and back["flags"].tolist() == [True, False]


def test_metadata_must_be_strings(tmp_path):
    with pytest.raises(RecordError, match="strings to strings.*epoch"):
        record.write_safetensors({"a": np.zeros(2)}, tmp_path / "x", {"epoch": 3})
    with pytest.raises(RecordError, match="cannot store"):
        record.write_safetensors({"a": np.zeros(2, np.complex64)}, tmp_path / "x")
    with pytest.raises(RecordError, match="__metadata__"):
        record.write_safetensors({"__metadata__": np.zeros(2)}, tmp_path / "x")
    assert not (tmp_path / "x").exists()


CORRUPT = {
    "empty": (b"", "too few"),
    "short": (b"\x01\x02\x03", "too few"),
    "huge header": (struct.pack("<Q", 2**40) + b"{}", "not a safetensors"),
    "header past the end": (struct.pack("<Q", 100) + b"{}", "truncated"),
    "not json": (struct.pack("<Q", 8) + b"{nope!!}", "not valid JSON"),
    "not an object": (struct.pack("<Q", 8) + b"[1, 2]  ", "not a JSON object"),
    "bad metadata": (struct.pack("<Q", 32) + b'{"__metadata__": {"a": 1}}      ',
                     "strings to strings"),
}


@pytest.mark.parametrize("case", list(CORRUPT))
def test_corrupt_headers_give_clear_errors(tmp_path, case):
    raw, message = CORRUPT[case]
    path = tmp_path / "bad.safetensors"
    path.write_bytes(raw)
    with pytest.raises(RecordError, match=message) as info:
        record.read_safetensors(path)
    assert "bad.safetensors" in str(info.value)


@pytest.mark.parametrize("entry, message", [
    ({"dtype": "C64", "shape": [2], "data_offsets": [0, 16]}, "dtype 'C64'"),
    ({"dtype": "F32", "shape": [2, -1], "data_offsets": [0, 8]}, "non-negative"),
    ({"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}, "needs 12 bytes"),
    ({"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}, "begin, end"),
    ({"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}, "truncated"),
    ({"shape": [2], "data_offsets": [0, 8]}, "dtype None"),
])
def test_inconsistent_entries_are_reported(tmp_path, entry, message):
    text = json.dumps({"x": entry}).encode()
    path = tmp_path / "bad.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + bytes(8))
    with pytest.raises(RecordError, match=message):
        record.read_safetensors(path)


def test_overlapping_tensors_are_reported(tmp_path):
    text = json.dumps({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                       "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}).encode()
    path = tmp_path / "bad.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + bytes(12))
    with pytest.raises(RecordError, match="'a' and 'b' overlap"):
        record.read_safetensors(path)


def test_truncated_file_is_refused_before_reading(tmp_path):
    path = tmp_path / "cut.safetensors"
    record.write_safetensors(arrays(), path)
    raw = path.read_bytes()
    path.write_bytes(raw[:-5])
    with pytest.raises(RecordError, match="truncated"):
        record.read_safetensors(path)


# ---- atomic writes ---------------------------------------------------------------------------

def leftovers(folder):
    return [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_a_failure_mid_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "model.safetensors"
    record.write_safetensors({"old": np.arange(1000, dtype=np.float32)}, path)
    before = path.read_bytes()
    calls = []

    def crash(f, chunk):
        calls.append(1)
        if len(calls) == 3:  # header length, header, then half of the first tensor: crash
            f.write(bytes(memoryview(chunk)[: len(chunk) // 2]))
            raise OSError("disk full (simulated)")
        f.write(chunk)

    monkeypatch.setattr(_safetensors, "write_chunk", crash)
    with pytest.raises(OSError, match="simulated"):
        record.write_safetensors({"new": np.ones(5000, dtype=np.float32)}, path)
    assert path.read_bytes() == before
    assert leftovers(tmp_path) == []


def test_a_failure_at_rename_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "model.safetensors"
    record.write_safetensors({"old": np.zeros(3)}, path)
    before = path.read_bytes()

    def fail(*args):
        raise KeyboardInterrupt  # even an interrupt leaves no temporary file

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(KeyboardInterrupt):
        record.write_safetensors({"new": np.ones(3)}, path)
    assert path.read_bytes() == before
    assert leftovers(tmp_path) == []


def test_written_file_has_ordinary_permissions(tmp_path):
    path = tmp_path / "m.safetensors"
    record.write_safetensors({"a": np.zeros(2)}, path)
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
    record.write_safetensors({"a": np.ones(2)}, path)  # over an existing file
    np.testing.assert_array_equal(record.read_safetensors(path)[0]["a"], np.ones(2))
    assert leftovers(tmp_path) == []


# ---- hostile headers -------------------------------------------------------------------------

def header_file(path, text):
    text = text.encode() if isinstance(text, str) else text
    path.write_bytes(struct.pack("<Q", len(text)) + text)
    return path


DIGITS = "9" * 5000


@pytest.mark.parametrize("header, message", [
    ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", "not valid JSON \\(RecursionError"),
    ('{"a": {"dtype": "F32", "shape": [' + DIGITS + '], "data_offsets": [0, 0]}}',
     "not valid JSON \\(ValueError"),
    ('{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, ' + DIGITS + ']}}',
     "not valid JSON \\(ValueError"),
    (json.dumps({"a": {"dtype": "F32", "shape": [2**64], "data_offsets": [0, 0]}}),
     "needs 73786976294838206464 bytes but data_offsets span 0"),
    # int64 products wrap: 2**32 * 2**32 was 0 elements, 0 bytes, and passed
    (json.dumps({"a": {"dtype": "F32", "shape": [2**32, 2**32], "data_offsets": [0, 0]}}),
     "needs 73786976294838206464 bytes but data_offsets span 0"),
    (json.dumps({"a": {"dtype": "F32", "shape": [10**4000] * 3, "data_offsets": [0, 0]}}),
     "needs <int too long to print> bytes but data_offsets span 0"),  # 12001 digits
    (json.dumps({"a": {"dtype": "U8", "shape": [0, 2**64], "data_offsets": [0, 0]}}),
     "too large for NumPy"),
    (json.dumps({"a": {"dtype": ["F32"], "shape": [1], "data_offsets": [0, 4]}}),
     "dtype \\['F32'\\] is not one ember reads"),
    (json.dumps({"a": {"dtype": {"F32": 1}, "shape": [1], "data_offsets": [0, 4]}}),
     "dtype {'F32': 1} is not one ember reads"),
    (json.dumps({"a": {"dtype": "F32", "shape": [1.0], "data_offsets": [0, 4]}}),
     "non-negative integers"),
    (json.dumps({"a": {"dtype": "F32", "shape": [True], "data_offsets": [0, 4]}}),
     "non-negative integers"),
    (json.dumps({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 2**70]}}),
     "needs 4 bytes"),
    (json.dumps({"a": {"dtype": "F32", "shape": [1] * 100_000, "data_offsets": [0, 4]}}),
     "shape \\[1, 1, 1, 1, 1, 1, 1, 1, \\.\\.\\.\\] is too large|truncated"),
])
def test_hostile_headers_raise_record_errors(tmp_path, header, message):
    path = header_file(tmp_path / "bad.safetensors", header)
    for load in (lambda: record.read_safetensors(path),
                 lambda: record.load(mirror({"a": (1,)}), path),
                 lambda: record.load_pytorch(path, mirror({"a": (1,)}))):
        with pytest.raises(RecordError, match=message) as info:
            load()
        assert len(str(info.value)) < 2000  # the header is not quoted whole


def test_huge_integers_are_refused_when_python_parses_them(tmp_path):
    # with Python's limit on integer digits lifted, the number parses and is still refused
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        path = header_file(tmp_path / "bad.safetensors", '{"a": {"dtype": "F32", "shape": ['
                           + DIGITS + '], "data_offsets": [0, 4]}}')
        with pytest.raises(RecordError, match="needs 3999.* bytes but data_offsets span 4"):
            record.read_safetensors(path)
    finally:
        sys.set_int_max_str_digits(old)


def test_fuzzed_safetensors_raise_only_record_errors(tmp_path):
    net = Net(seed=1)
    good, path = tmp_path / "good.safetensors", tmp_path / "fuzzed.safetensors"
    record.save(net, good)
    raw = good.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    rng = random.Random(5)
    # numbers and brackets where the header has digits: the JSON stays JSON, its values change
    texts = ["18446744073709551616", "4294967296", "-1", "1e999", "1.5", "[]", "{}", "null",
             DIGITS, "[" * 5000, '"F32"', "true"]
    header_mutations = []
    for _ in range(150):
        text = raw[8: 8 + n].decode()
        for _ in range(rng.randint(1, 3)):
            at = rng.choice([i for i, c in enumerate(text) if c.isdigit()])
            text = text[:at] + rng.choice(texts) + text[at + 1:]
        text = text.encode()
        header_mutations.append(struct.pack("<Q", len(text)) + text + raw[8 + n:])
    outcomes = collections.Counter()
    for data in header_mutations + list(mutations(raw, seed=3, count=200)):
        path.write_bytes(data)
        for load in (lambda: record.read_safetensors(path),
                     lambda: record.load(Net(), path),
                     lambda: record.load_pytorch(path, Net())):
            try:
                load()
                outcomes["loaded"] += 1
            except RecordError as e:
                assert str(e)
                outcomes["refused"] += 1
    assert 0 < outcomes["loaded"] < outcomes["refused"], outcomes
    loaded = Net()
    record.load(loaded, good)
    for name, v in values(net).items():
        np.testing.assert_array_equal(values(loaded)[name], v)
