"""The IDX file format of MNIST and Fashion-MNIST (LeCun's): a magic number (two zero bytes,
a type code, the number of dims), each dim as a big-endian uint32, then the values, row-major
and big-endian. Files may be gzip-compressed (.gz)."""

import gzip
import os
import struct

import numpy as np

__all__ = ["IdxError", "read_idx", "write_idx"]

_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
_CODES = {np.dtype(v).newbyteorder("="): k for k, v in _TYPES.items()}


class IdxError(ValueError):
    """A file that is not a valid IDX file (the message says why)."""


def _open(path):
    with open(path, "rb") as f:
        head = f.read(2)
    return gzip.open(path, "rb") if head == b"\x1f\x8b" else open(path, "rb")


def read_idx(path):
    """The array stored in an IDX file (plain or gzip'd), in native byte order."""
    name = os.fspath(path)
    with _open(path) as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise IdxError(f"read_idx: {name!r} is not an IDX file (bad magic number)")
    code, ndim = data[2], data[3]
    if code not in _TYPES:
        raise IdxError(f"read_idx: {name!r} has an unknown type code 0x{code:02x}")
    if len(data) < 4 + 4 * ndim:
        raise IdxError(f"read_idx: {name!r} is truncated in its header")
    shape = struct.unpack(f">{ndim}I", data[4:4 + 4 * ndim])
    dtype = np.dtype(_TYPES[code])
    count = int(np.prod(shape, dtype=np.int64))
    body = data[4 + 4 * ndim:]
    if len(body) != count * dtype.itemsize:
        raise IdxError(f"read_idx: {name!r} should hold {count} values of shape {list(shape)} "
                       f"({count * dtype.itemsize} bytes) but has {len(body)} bytes")
    array = np.frombuffer(body, dtype=dtype).reshape(shape)
    return array.astype(dtype.newbyteorder("="))


def write_idx(array, path, compress=None):
    """Write `array` (uint8, int8, int16, int32, float32 or float64) as an IDX file; gzip'd
    when compress is True or the name ends in .gz."""
    array = np.ascontiguousarray(array)
    code = _CODES.get(array.dtype)
    if code is None:
        raise IdxError(f"write_idx: IDX cannot store {array.dtype}")
    payload = (bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
               + array.astype(array.dtype.newbyteorder(">")).tobytes())
    if compress is None:
        compress = os.fspath(path).endswith(".gz")
    with (gzip.open(path, "wb") if compress else open(path, "wb")) as f:
        f.write(payload)
