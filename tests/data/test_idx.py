"""The IDX reader against files written here (plain and gzip'd) and against broken ones."""

import gzip

import numpy as np
import pytest

from ember import data


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "int32", "float32", "float64"])
@pytest.mark.parametrize("name", ["a.idx", "a.idx.gz"])
def test_round_trip(tmp_path, dtype, name):
    array = (np.arange(2 * 3 * 5) - 7).astype(dtype).reshape(2, 3, 5)
    if dtype == "uint8":
        array = np.arange(30, dtype=np.uint8).reshape(2, 3, 5)
    path = tmp_path / name
    data.write_idx(array, path)
    if name.endswith(".gz"):
        assert path.read_bytes()[:2] == b"\x1f\x8b"
    back = data.read_idx(path)
    assert back.dtype == array.dtype and back.shape == array.shape
    np.testing.assert_array_equal(back, array)


def test_known_bytes(tmp_path):
    # magic 0x00000801 (ubyte, 1 dim), 3 items: the labels file layout of MNIST
    path = tmp_path / "labels"
    path.write_bytes(bytes([0, 0, 8, 1, 0, 0, 0, 3, 7, 2, 1]))
    assert data.read_idx(path).tolist() == [7, 2, 1]


def test_broken_files_are_refused(tmp_path):
    bad = tmp_path / "bad"
    bad.write_bytes(b"PK\x03\x04....")
    with pytest.raises(data.IdxError, match="magic"):
        data.read_idx(bad)
    short = tmp_path / "short.gz"
    with gzip.open(short, "wb") as f:
        f.write(bytes([0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 2, 1, 2, 3]))
    with pytest.raises(data.IdxError, match="should hold 4 values"):
        data.read_idx(short)
    code = tmp_path / "code"
    code.write_bytes(bytes([0, 0, 0x42, 1, 0, 0, 0, 1, 0]))
    with pytest.raises(data.IdxError, match="type code"):
        data.read_idx(code)
