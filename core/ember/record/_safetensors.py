"""The safetensors format, read and written with NumPy and the standard library only.

A file is an 8-byte little-endian header length N, N bytes of JSON (padded with spaces to a
multiple of 8), then the tensors' little-endian bytes, back to back:

    {"__metadata__": {"format": "ember", ...},            # str -> str
     "fc.weight": {"dtype": "F32", "shape": [10, 4], "data_offsets": [0, 160]}, ...}

Offsets count from the end of the header. Tensors are written by decreasing item size, so each
one starts at a multiple of its item size, and with no gaps (the format forbids holes). This is
the layout `safetensors.torch.save_file` writes and reads, so files go both ways.

Reading is safe by construction: the header is JSON and the rest is raw numbers; nothing in
the file is executed. Every offset, shape and size is checked against the file before a byte
of tensor data is read, so a truncated or corrupt file is reported, not half read.
"""

import contextlib
import json
import math
import os
import secrets
import struct

import numpy as np

from . import _convert
from ._errors import RecordError
from ._errors import short as _short

# safetensors dtype -> (NumPy dtype of the stored bytes, widening to a NumPy dtype, label)
_READ = {
    "F64": ("<f8", None, "float64"),
    "F32": ("<f4", None, "float32"),
    "F16": ("<f2", None, "float16"),
    "BF16": ("<u2", _convert.bf16_to_f32, "bfloat16"),
    "F8_E4M3": ("u1", _convert.f8_e4m3fn_to_f32, "float8_e4m3fn"),
    "F8_E5M2": ("u1", _convert.f8_e5m2_to_f32, "float8_e5m2"),
    "I64": ("<i8", None, "int64"),
    "I32": ("<i4", None, "int32"),
    "I16": ("<i2", None, "int16"),
    "I8": ("i1", None, "int8"),
    "U64": ("<u8", None, "uint64"),
    "U32": ("<u4", None, "uint32"),
    "U16": ("<u2", None, "uint16"),
    "U8": ("u1", None, "uint8"),
    "BOOL": ("u1", lambda a: a != 0, "bool"),
}
_WRITE = {np.dtype(code): name for name, (code, widen, _) in _READ.items() if widen is None}
_WRITE[np.dtype(bool)] = "BOOL"

MAX_HEADER = 100_000_000  # as the reference implementation: a larger header is corrupt


def dtype_code(dtype):
    """The safetensors name of a NumPy dtype, or None where the format has none."""
    return _WRITE.get(np.dtype(dtype).newbyteorder("<"))


# ---- writing ---------------------------------------------------------------------------------

def write(tensors, path, metadata=None, who="record.write_safetensors"):
    """Write {name: NumPy array} (and str -> str metadata) to `path`, atomically."""
    arrays = []
    for name, value in tensors.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise RecordError(f"{who}: tensor names must be strings other than "
                              f"'__metadata__', got {name!r}")
        array = np.asarray(value)
        code = dtype_code(array.dtype)
        if code is None:
            raise RecordError(f"{who}: {name!r} has dtype {array.dtype}, which safetensors "
                              f"cannot store; it stores {', '.join(sorted(_READ))}")
        little = array.dtype.newbyteorder("<")
        arrays.append((name, code, np.asarray(array, dtype=little, order="C")))
    arrays.sort(key=lambda item: (-item[2].dtype.itemsize, item[0]))

    header, offset = {}, 0
    if metadata:
        header["__metadata__"] = check_metadata(metadata, who)
    for name, code, array in arrays:
        header[name] = {"dtype": code, "shape": list(array.shape),
                        "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)

    def chunks():
        yield struct.pack("<Q", len(text))
        yield text
        for _, _, array in arrays:
            if array.size:
                yield array.reshape(-1).view(np.uint8)

    atomic_write(path, chunks())


def check_metadata(metadata, who):
    if not isinstance(metadata, dict):
        raise RecordError(f"{who}: metadata must be a dict of str -> str, got "
                          f"{type(metadata).__name__}")
    bad = [k for k, v in metadata.items() if not isinstance(k, str) or not isinstance(v, str)]
    if bad:
        raise RecordError(f"{who}: safetensors metadata maps strings to strings; the entries "
                          f"{bad!r} are not (json.dumps the values first)")
    return dict(metadata)


def atomic_write(path, chunks):
    """Write the byte chunks to a temporary file next to `path`, fsync it, then rename it over
    `path`: a crash or an error at any point leaves the old file (or none) in place, never a
    truncated one."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                write_chunk(f, chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_folder(folder)


def write_chunk(f, chunk):
    f.write(chunk)


def _fsync_folder(folder):
    # makes the rename itself durable on POSIX; Windows and some browsers' file systems cannot
    # open a folder, and the rename has still happened there
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ---- reading ---------------------------------------------------------------------------------

class Entry:
    """One tensor of a file, read only when `load()` is called. `dtype` is the stored dtype's
    name (it may be one NumPy lacks, e.g. bfloat16); load() gives a NumPy array, widened to
    float32 for bfloat16 and float8."""

    __slots__ = ("file", "name", "code", "shape", "begin", "end")

    def __init__(self, file, name, code, shape, begin, end):
        self.file, self.name, self.code = file, name, code
        self.shape, self.begin, self.end = shape, begin, end

    @property
    def dtype(self):
        return _READ[self.code][2]

    def load(self):
        return self.file.read([self])[0]


class File:
    """A safetensors file whose header has been read and checked."""

    def __init__(self, path, who="record"):
        self.path = os.fspath(path)
        self.who = who
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(8)
            if len(head) < 8:
                self._fail(f"it has {size} bytes, too few for a safetensors file")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER:
                self._fail(f"its first 8 bytes give a header of {n} bytes; not a safetensors "
                           "file")
            if 8 + n > size:
                self._fail(f"the header says it is {n} bytes long but the file has only "
                           f"{size} bytes: truncated, or not a safetensors file")
            raw = f.read(n)
        try:
            header = json.loads(raw.decode("utf-8"))
        # ValueError: bad UTF-8 or JSON, a number of more than 4300 digits; RecursionError:
        # arrays nested deeper than Python recurses
        except (ValueError, RecursionError) as e:
            self._fail(f"its header is not valid JSON ({type(e).__name__}: {e}): corrupt, "
                       "or not a safetensors file")
        if not isinstance(header, dict):
            self._fail("its header is not a JSON object")
        self.data_start = 8 + n
        self.data_size = size - self.data_start
        meta = header.pop("__metadata__", None) or {}
        if not isinstance(meta, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
            self._fail("its __metadata__ is not a map of strings to strings")
        self.metadata = meta
        self.entries = {}
        problems = []
        for name, info in header.items():
            try:
                self.entries[name] = self._entry(name, info)
            except ValueError as e:
                problems.append(f"{name!r}: {e}")
        spans = sorted((e.begin, e.end, e.name) for e in self.entries.values() if e.end > e.begin)
        for (_, end, a), (begin, _, b) in zip(spans, spans[1:]):
            if begin < end:
                problems.append(f"{a!r} and {b!r} overlap")
        if problems:
            self._fail("its header is inconsistent:\n  " + "\n  ".join(problems))

    def _fail(self, why):
        raise RecordError(f"{self.who}: cannot read {self.path!r}: {why}")

    def _entry(self, name, info):
        if not isinstance(info, dict):
            raise ValueError("its entry is not a JSON object")
        code, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if not isinstance(code, str) or code not in _READ:
            raise ValueError(f"dtype {_short(code)} is not one ember reads ({', '.join(_READ)})")
        if not isinstance(shape, list) or not all(
                type(d) is int and d >= 0 for d in shape):
            raise ValueError(f"shape {_short(shape)} is not a list of non-negative integers")
        if not (isinstance(offsets, list) and len(offsets) == 2
                and all(type(o) is int for o in offsets) and 0 <= offsets[0] <= offsets[1]):
            raise ValueError(f"data_offsets {_short(offsets)} are not [begin, end]")
        begin, end = offsets
        itemsize = np.dtype(_READ[code][0]).itemsize
        nbytes = math.prod(shape) * itemsize  # Python ints: a product of huge sizes never wraps
        if end - begin != nbytes:
            raise ValueError(f"shape {_short(shape)} of {code} needs {_short(nbytes)} bytes "
                             f"but data_offsets span {end - begin}")
        if math.prod(d for d in shape if d) * max(itemsize, 4) > np.iinfo(np.intp).max:
            raise ValueError(f"shape {_short(shape)} is too large for NumPy to index")
        if end > self.data_size:
            raise ValueError(f"its data ends at byte {end} but the file holds only "
                             f"{self.data_size} bytes of data: truncated")
        return Entry(self, name, code, tuple(shape), begin, end)

    def read(self, entries):
        """A NumPy array for each of the given entries, reading the file once."""
        out = []
        with open(self.path, "rb") as f:
            for e in entries:
                stored, widen, _ = _READ[e.code]
                array = np.empty(e.shape, dtype=stored)
                if e.end > e.begin:
                    f.seek(self.data_start + e.begin)
                    got = f.readinto(array.reshape(-1).view(np.uint8))
                    if got != e.end - e.begin:
                        self._fail(f"{e.name!r} is cut short (the file changed while read?)")
                if array.dtype.byteorder == ">":  # big-endian machines only
                    array = array.astype(array.dtype.newbyteorder("="))
                out.append(widen(array) if widen is not None else array)
        return out


def read(path, who="record.read_safetensors"):
    """({name: NumPy array}, metadata) of a safetensors file."""
    f = File(path, who)
    return dict(zip(f.entries, f.read(list(f.entries.values())))), dict(f.metadata)


def looks_like(head, size):
    """Whether the first bytes of a file of `size` bytes look like safetensors."""
    if len(head) < 9:
        return False
    (n,) = struct.unpack("<Q", head[:8])
    return 0 < n <= MAX_HEADER and 8 + n <= size and head[8:9] == b"{"
