"""PyTorch's `torch.save` files, read without torch and without running the pickle's code.

A `.pt` / `.pth` file is a zip archive (`<name>/data.pkl`, the pickled object, and
`<name>/data/<key>`, the raw bytes of each storage), or for files written by PyTorch < 1.6 (or
with `_use_new_zipfile_serialization=False`) a stream of pickles followed by the storages.

Why this is safe. A pickle is a program: its GLOBAL / STACK_GLOBAL opcodes import any
module attribute by name (os.system, builtins.eval, subprocess.Popen, ...) and REDUCE calls it.
Here the unpickler's `find_class` never imports anything: it looks the (module, name) pair up
in a fixed table of stand-ins written in this file, and raises UnsafePickleError, naming the
global, for every other pair, before the global could be called. The stand-ins only build
data: `_rebuild_tensor_v2` records (storage, offset, shape, strides, dtype) for NumPy to read
later, storage classes and torch dtypes are inert markers, OrderedDict is a dict subclass that
keeps nothing from BUILD, and NumPy's array/scalar/dtype pickles are rebuilt from raw bytes for
numeric dtypes only. The table's entries are frozen, so a BUILD opcode aimed at one cannot
change how the next file is read. `persistent_load` only turns ('storage', type, key, ...) into
a lazy reader of the archive entry `data/<key>`. Before the pickle runs, its opcodes are
scanned: EXT opcodes (globals from copyreg's registry, which skip find_class) are refused.

Why it costs no more than the file. A file claims sizes; none is allocated on its word. Before
a byte of tensor data is read, every view (offset, sizes, strides) is checked to lie inside
the bytes its storage's zip member declares, and each member's declared sizes against the
archive (see MAX_RATIO for compressed ones). Only the storages of the tensors asked for are
read, and of each only the bytes those views reach. A tensor is a read-only NumPy view of its
storage's one array, so stride-0 (expanded) tensors and names sharing a storage cost nothing.

Not read: TorchScript archives, tensors of quantized / complex32 / float8 "fnuz" dtypes,
sparse tensors, and PyTorch < 0.4's tar format; each is refused with its reason.
"""

import io
import math
import os
import pickle
import pickletools
import re
import struct
import zipfile

import numpy as np

from . import _convert, _module, _safetensors
from ._errors import RecordError, UnsafePickleError
from ._errors import short as _short

MAGIC_NUMBER = 0x1950A86A20F9469CFC6C  # torch.serialization's, first in legacy files
PROTOCOL_VERSION = 1001

# torch dtype -> (NumPy dtype of the stored bytes, widening to a NumPy dtype or None)
_DTYPES = {
    "float64": ("<f8", None), "float32": ("<f4", None), "float16": ("<f2", None),
    "bfloat16": ("<u2", _convert.bf16_to_f32),
    "float8_e4m3fn": ("u1", _convert.f8_e4m3fn_to_f32),
    "float8_e5m2": ("u1", _convert.f8_e5m2_to_f32),
    "int64": ("<i8", None), "int32": ("<i4", None), "int16": ("<i2", None), "int8": ("i1", None),
    "uint64": ("<u8", None), "uint32": ("<u4", None), "uint16": ("<u2", None),
    "uint8": ("u1", None), "bool": ("u1", lambda a: a != 0),
    "complex64": ("<c8", None), "complex128": ("<c16", None),
}
_STORAGES = {
    "DoubleStorage": "float64", "FloatStorage": "float32", "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32",
    "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8",
    "BoolStorage": "bool", "ComplexFloatStorage": "complex64",
    "ComplexDoubleStorage": "complex128", "UntypedStorage": "uint8",
}
_STATE_KEYS = ("state_dict", "model_state_dict", "model", "module")
_MAX_BYTES = np.iinfo(np.intp).max  # the largest array NumPy can index (smaller in Pyodide)


# ---- stand-ins for the globals a state dict's pickle names -----------------------------------

class _Frozen:
    """The allow-list's entries are shared by every load: a pickle's BUILD opcode (which sets
    attributes, or calls __setstate__) must not change them for the next file."""

    __slots__ = ()

    def __setattr__(self, name, value):
        raise RecordError(f"the pickle tries to change {self!r}")

    __delattr__ = __setattr__

    def __setstate__(self, state):
        raise RecordError(f"the pickle tries to change {self!r}")


class _Marker(_Frozen):
    """A torch name that is data, not code: a storage type, a dtype, a tensor class."""

    __slots__ = ("kind", "value")

    def __init__(self, kind, value):
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "value", value)

    def __repr__(self):
        return f"<{self.kind} {self.value}>"


class _Call(_Frozen):
    """An allowed function, called with positional arguments only (as REDUCE does)."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        object.__setattr__(self, "fn", fn)

    def __call__(self, *args):
        return self.fn(*args)

    def __repr__(self):
        return f"<stand-in {self.fn.__name__}>"


class _StateDict(dict):
    """collections.OrderedDict as a plain dict (insertion-ordered). BUILD hands it the
    module's `_metadata` (versions of layers); it is dropped, as there is no __dict__ to fill."""

    __slots__ = ()

    def __setstate__(self, state):
        pass


class _Storage:
    """One storage of the file. `size`: the bytes the file says it holds (None: it holds none);
    `where`: where they are, for the format's reader; `need`: how many of them the file's
    tensors reach (only those are read, into `raw`). `big_endian`: the byte order of the bytes.
    Its arrays, one per way a tensor reads it (dtype, neg and conj bits), are made once and
    shared by every view of it, so a tensor costs at most its storage, whatever it claims."""

    __slots__ = ("key", "dtype", "where", "size", "need", "raw", "big_endian", "arrays")

    def __init__(self, key, dtype, where=None, size=None, big_endian=False):
        self.key, self.dtype, self.where, self.size = key, dtype, where, size
        self.need, self.raw, self.big_endian, self.arrays = 0, None, big_endian, {}

    def __setstate__(self, state):
        raise RecordError("the pickle sets attributes on a storage; not a state dict")

    def array(self, dtype, neg, conj):
        """The bytes read as a read-only 1-D array of `dtype` (native byte order, widened to
        float32 for bfloat16 / float8, negated / conjugated as the tensor's bits say)."""
        key = (dtype, neg, conj)
        if key not in self.arrays:
            stored, widen = _DTYPES[dtype]
            stored = np.dtype(stored).newbyteorder(">" if self.big_endian else "<")
            values = np.frombuffer(self.raw, stored, len(self.raw) // stored.itemsize)
            values = values.astype(stored.newbyteorder("="), copy=False)
            if widen is not None:
                values = widen(values)
            if neg:
                if values.dtype == bool:
                    raise RecordError("a bool tensor has the neg bit, which torch never sets")
                values = -values
            if conj:
                values = np.conj(values)
            values.flags.writeable = False
            self.arrays[key] = values
        return self.arrays[key]


class TensorRef:
    """A tensor of the file: its dtype and shape are known at once; `load()` gives its values
    as a read-only NumPy view of its storage's array (bfloat16 / float8 widened to float32),
    once the storage's bytes are read (`need()` of them). `dtype`: the storage's by default."""

    __slots__ = ("storage", "offset", "shape", "stride", "dtype", "flags", "source")

    def __init__(self, storage, offset, shape, stride, dtype=None, metadata=None):
        if not isinstance(storage, _Storage):
            raise RecordError(f"a tensor's storage is a {type(storage).__name__}")
        self.storage, self.dtype = storage, dtype or storage.dtype
        self.offset = _int(offset, "storage offset")
        self.shape = _ints(shape, "size")
        self.stride = _ints(stride, "stride")
        if len(self.shape) != len(self.stride) or min(
                (self.offset,) + self.shape + self.stride) < 0:
            raise RecordError(f"a tensor has size {_short(list(self.shape))}, stride "
                              f"{_short(list(self.stride))} and offset {_short(self.offset)}")
        self.flags = dict(metadata) if isinstance(metadata, dict) else {}
        self.source = "the file"

    def __setstate__(self, state):
        raise RecordError("the pickle sets attributes on a tensor; not a state dict")

    def _last(self):
        """The index of the last element the view reaches (-1 for an empty tensor)."""
        if 0 in self.shape:
            return -1
        return self.offset + sum((n - 1) * s for n, s in zip(self.shape, self.stride))

    def need(self):
        """How many bytes of its storage the view reaches, or a RecordError if it reaches
        beyond the bytes the file holds."""
        itemsize, last = np.dtype(_DTYPES[self.dtype][0]).itemsize, self._last()
        size = self.storage.size
        if size is None:
            raise RecordError(f"record.load_pytorch: {self.source} lacks the entry holding "
                              f"storage {self.storage.key!r}: truncated or corrupt")
        if last >= size // itemsize:
            raise RecordError(
                f"record.load_pytorch: cannot read {self.source}: a {self.dtype} tensor of size "
                f"{_short(list(self.shape))}, stride {_short(list(self.stride))} and offset "
                f"{_short(self.offset)} reaches element {_short(last)} of a storage of "
                f"{size // itemsize}: the file is corrupt or truncated")
        return (last + 1) * itemsize

    def load(self):
        base = self.storage.array(self.dtype, self.flags.get("neg") is True,
                                  self.flags.get("conj") is True)
        if self._last() >= len(base):  # need() was checked against the bytes claimed
            raise RecordError(f"record.load_pytorch: {self.source} is truncated (storage "
                              f"{self.storage.key!r})")
        if math.prod(n for n in self.shape if n) * base.itemsize > _MAX_BYTES:
            raise RecordError(f"record.load_pytorch: {self.source} has a tensor of size "
                              f"{_short(list(self.shape))}, too large for NumPy to index")
        if 0 in self.shape:
            values = np.zeros(self.shape, base.dtype)
            values.flags.writeable = False
            return values
        # torch saves expanded tensors with stride 0: a view, not a copy of what it claims;
        # the stride of a dimension of size 1 is never used, and may be anything
        strides = [s * base.itemsize if n > 1 else 0 for n, s in zip(self.shape, self.stride)]
        return np.lib.stride_tricks.as_strided(base[self.offset:], self.shape, strides,
                                               writeable=False)


def _int(value, what):
    if type(value) is not int:
        raise RecordError(f"a tensor's {what} is {_short(value)}, not an integer")
    return value


def _ints(values, what):
    if not isinstance(values, tuple):
        raise RecordError(f"a tensor's {what} is {_short(values)}, not a tuple")
    return tuple(_int(v, what) for v in values)


def _dtype_of(marker, what):
    if not isinstance(marker, _Marker) or marker.kind not in ("storage", "dtype"):
        raise RecordError(f"{what} is {_short(marker)}, not a torch dtype")
    if marker.value not in _DTYPES:
        raise RecordError(f"tensors of dtype torch.{marker.value} cannot be read")
    return marker.value


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False,
                       backward_hooks=None, metadata=None):
    # (also torch's _rebuild_tensor, which takes the first four)
    return TensorRef(storage, storage_offset, size, stride, None, metadata)


def _rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks,
                       dtype, metadata=None):
    return TensorRef(storage, storage_offset, size, stride, _dtype_of(dtype, "a tensor's dtype"),
                     metadata)


def _rebuild_parameter(data, requires_grad=True, backward_hooks=None, state=None):
    if not isinstance(data, TensorRef):
        raise RecordError(f"a parameter holds a {type(data).__name__}, not a tensor")
    return data


def _rebuild_from_type_v2(func, new_type, args, state):
    # a tensor subclass (or a tensor with Python attributes): the data is what matters
    if not any(func is f for f in _REBUILDERS) or not isinstance(args, tuple):
        raise RecordError(f"a tensor is rebuilt by {_short(func)}")
    if not (isinstance(new_type, _Marker) and new_type.kind == "tensor class"):
        raise RecordError(f"a tensor of class {_short(new_type)}")
    return func(*args)


def _size(values=()):
    return tuple(values)


def _device(*args):
    return args[0] if args and isinstance(args[0], str) else "cpu"


def _codecs_encode(text, encoding="utf-8"):
    # protocol 2 pickles Python 3 bytes as _codecs.encode(str, "latin1")
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise RecordError(f"_codecs.encode({type(text).__name__}, {encoding!r}) is not how "
                          "pickle writes bytes")
    return text.encode("latin1")


def _bytearray(data=b""):
    if not isinstance(data, (bytes, bytearray)):
        raise RecordError(f"bytearray({type(data).__name__}) is not how pickle writes bytes")
    return bytearray(data)


# NumPy's own pickles: arrays and scalars of numeric dtypes only

class _NumpyDType:
    __slots__ = ("dtype",)

    def __init__(self, dtype):
        self.dtype = dtype

    def __setstate__(self, state):
        if not isinstance(state, tuple) or len(state) < 2 or state[1] not in "<>|=":
            raise RecordError(f"a NumPy dtype with state {_short(state)}")
        if len(state) > 3 and state[3] is not None:
            raise RecordError("a structured NumPy dtype")
        self.dtype = self.dtype.newbyteorder(state[1])


def _numpy_dtype(name, align=False, copy=True):
    try:
        dtype = np.dtype(name) if isinstance(name, str) else None
    except TypeError:
        dtype = None
    if dtype is None or dtype.kind not in "biufc":
        raise RecordError(f"a NumPy dtype {_short(name)}: only numeric dtypes are read")
    return _NumpyDType(dtype)


class _NumpyArray:
    __slots__ = ("array",)

    def __init__(self):
        self.array = None

    def __setstate__(self, state):
        if not (isinstance(state, tuple) and len(state) == 5):
            raise RecordError("a NumPy array with an unknown state")
        _, shape, dtype, fortran, raw = state
        if not isinstance(dtype, _NumpyDType) or not isinstance(raw, (bytes, bytearray)):
            raise RecordError("a NumPy array of objects: only numeric arrays are read")
        shape = _ints(shape, "NumPy shape")
        count = math.prod(shape)
        if len(raw) != count * dtype.dtype.itemsize:
            raise RecordError(f"a NumPy array of shape {list(shape)} with {len(raw)} bytes")
        flat = np.frombuffer(raw, dtype.dtype, count)
        self.array = flat.reshape(shape, order="F" if fortran else "C").astype(
            dtype.dtype.newbyteorder("="), order="C")


def _numpy_reconstruct(cls, shape=(0,), typecode=b"b"):
    if not (isinstance(cls, _Marker) and cls.kind == "numpy class"):
        raise RecordError(f"a NumPy array of class {_short(cls)}")
    return _NumpyArray()


def _numpy_scalar(dtype, raw=None):
    if not isinstance(dtype, _NumpyDType) or not isinstance(raw, bytes) or (
            len(raw) != dtype.dtype.itemsize):
        raise RecordError("a NumPy scalar that is not a number")
    return np.frombuffer(raw, dtype.dtype, 1).astype(dtype.dtype.newbyteorder("="))[0]


def _numpy_frombuffer(buffer, dtype, shape, order):
    # NumPy's protocol-5 array pickle
    array = _NumpyArray()
    array.__setstate__((1, shape, dtype, order == "F", bytes(buffer)))
    return array


_REBUILDERS = tuple(_Call(f) for f in (_rebuild_tensor_v2, _rebuild_tensor_v3,
                                         _rebuild_parameter))


def _allowed():
    rebuild_v2, rebuild_v3, parameter = _REBUILDERS
    table = {
        ("collections", "OrderedDict"): _StateDict,
        ("torch._utils", "_rebuild_tensor"): rebuild_v2,
        ("torch._utils", "_rebuild_tensor_v2"): rebuild_v2,
        ("torch._utils", "_rebuild_tensor_v3"): rebuild_v3,
        ("torch._utils", "_rebuild_parameter"): parameter,
        ("torch._utils", "_rebuild_parameter_with_state"): parameter,
        ("torch._tensor", "_rebuild_from_type_v2"): _Call(_rebuild_from_type_v2),
        ("torch", "Size"): _Call(_size),
        ("torch", "device"): _Call(_device),
        ("torch", "Tensor"): _Marker("tensor class", "Tensor"),
        ("torch.nn.parameter", "Parameter"): _Marker("tensor class", "Parameter"),
        ("torch.storage", "UntypedStorage"): _Marker("storage", "uint8"),
        ("_codecs", "encode"): _Call(_codecs_encode),
        ("numpy", "dtype"): _Call(_numpy_dtype),
        ("numpy", "ndarray"): _Marker("numpy class", "ndarray"),
    }
    for module in ("torch", "torch.cuda"):
        for name, dtype in _STORAGES.items():
            table[(module, name)] = _Marker("storage", dtype)
    for name in _DTYPES:
        table[("torch", name)] = _Marker("dtype", name)
    for module in ("builtins", "__builtin__"):  # Python 2 era files spell it __builtin__
        # immutable builtin types: BUILD cannot change them either
        table.update({(module, "set"): set, (module, "frozenset"): frozenset,
                      (module, "slice"): slice, (module, "complex"): complex,
                      (module, "bytearray"): _Call(_bytearray)})
    for module in ("numpy.core.multiarray", "numpy._core.multiarray"):
        table[(module, "_reconstruct")] = _Call(_numpy_reconstruct)
        table[(module, "scalar")] = _Call(_numpy_scalar)
    for module in ("numpy.core.numeric", "numpy._core.numeric"):
        table[(module, "_frombuffer")] = _Call(_numpy_frombuffer)
    return table


ALLOWED = _allowed()


class _Unpickler(pickle.Unpickler):
    """pickle.Unpickler whose globals come from ALLOWED only, and whose persistent ids are
    storages of the file (through `storage(pid)`, or none)."""

    def __init__(self, file, source, storage=None):
        super().__init__(file, encoding="utf-8")
        self._source, self._storage = source, storage

    def find_class(self, module, name):
        found = ALLOWED.get((module, name))
        if found is None:
            raise UnsafePickleError(
                f"record.load_pytorch: refused to load {self._source}: its pickle asks for the "
                f"global {module}.{name}, which is not part of a state dict of tensors. ember "
                "unpickles with an allow-list (tensors, storages, dtypes, OrderedDict, NumPy "
                "numbers) and never imports or calls anything else, so a file cannot run code "
                "here; nothing was executed. If the file is trusted and holds a whole pickled "
                "model or other Python objects, re-save its weights with "
                "torch.save(model.state_dict(), path) or safetensors.")
        return found

    def persistent_load(self, pid):
        if self._storage is None:
            raise RecordError(f"a persistent id {_short(pid)} where none belongs")
        return self._storage(pid)


class _CorruptPickle(RecordError):
    pass


def _unpickle(file, source, storage=None):
    """The next pickle of `file`, through _Unpickler."""
    start = file.tell()
    try:
        # EXT1/2/4 name a global by a number of copyreg's registry, and pickle takes it from
        # its cache of extensions without asking find_class: refused before anything runs
        for op, arg, at in pickletools.genops(file):
            if op.code in "\x82\x83\x84":  # EXT1, EXT2, EXT4
                raise UnsafePickleError(
                    f"record.load_pytorch: refused to load {source}: its pickle uses the "
                    f"opcode {op.name} (a global from copyreg's extension registry, which "
                    "would bypass the allow-list); torch.save never writes it. Nothing was "
                    "executed.")
            # the unpickler's memo is a table as long as the largest index PUT: picklers
            # number from 0, so an index past the bytes read so far only makes it allocate
            if op.code in "pr" and arg > at - start:  # PUT, LONG_BINPUT (BINPUT: < 256)
                raise _CorruptPickle(f"record.load_pytorch: cannot read {source}: its pickle "
                                     f"memoizes at index {arg}, at byte {at - start}: corrupt")
        file.seek(start)
        return _Unpickler(file, source, storage).load()
    except (UnsafePickleError, _CorruptPickle):
        raise
    except RecordError as e:  # a stand-in refused its arguments
        raise RecordError(f"record.load_pytorch: cannot read {source}: {e}") from None
    except Exception as e:  # the pickle itself is broken: truncated, wrong opcodes, bad args
        raise _CorruptPickle(f"record.load_pytorch: cannot read {source}: its pickle is "
                             f"corrupt or truncated ({type(e).__name__}: {e})") from None


def _storage_id(pid, source):
    if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] in ("storage", b"storage")):
        raise RecordError(f"an unknown persistent id {_short(pid)}")
    marker, key = pid[1], pid[2]
    if isinstance(key, bytes):
        key = key.decode("ascii", "replace")
    if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z0-9_]+", key):
        raise RecordError(f"a storage named {_short(key)}")
    return _dtype_of(marker, "a storage's type"), key


# ---- the zip format --------------------------------------------------------------------------

# torch.save stores every member uncompressed (ZIP_STORED). A compressed member means a zip tool
# repacked the archive, with deflate, which zipfile inflates in bounded steps (bzip2 and lzma it
# inflates a chunk at once, whatever it holds, so they are refused). Weights barely compress:
# float bits look random (about 1.1:1), and pruned or quantized weights rarely reach 10:1.
# So the members read from one archive may inflate to at most MAX_RATIO times their compressed
# bytes, plus SLACK for a few small, very compressible ones (zero biases, the pickle): beyond
# that the archive is a bomb, refused before anything is inflated, and a bomb costs at most
# MAX_RATIO times its size.
MAX_RATIO = 64
SLACK = 1 << 20


class _Zip:
    """The members of a torch.save archive, each checked against the sizes the central
    directory declares (and the archive holds) before a byte is read or inflated."""

    def __init__(self, path, source):
        self.source = source
        try:
            self.archive = zipfile.ZipFile(path)
            self.size = os.fstat(self.archive.fp.fileno()).st_size
        except Exception as e:  # zipfile reports damage with many types: all mean damaged
            raise RecordError(f"record.load_pytorch: cannot read {source}: not a readable zip "
                              f"archive, truncated or corrupt ({type(e).__name__}: {e})"
                              ) from None
        self.inflated, self.compressed = 0, 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.archive.close()

    def info(self, name):
        try:
            return self.archive.getinfo(name)
        except KeyError:
            return None

    def check(self, info, need):
        """Refuse a member from which `need` bytes cannot be read at a cost bounded by what
        the archive holds."""
        where = f"record.load_pytorch: cannot read {info.filename!r} of {self.source}"
        if info.flag_bits & 1:
            raise RecordError(f"{where}: it is encrypted, which torch.save never does")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            method = {zipfile.ZIP_BZIP2: "bzip2", zipfile.ZIP_LZMA: "lzma"}.get(
                info.compress_type, f"method {info.compress_type}")
            raise RecordError(f"{where}: it is compressed with {method}; torch.save stores "
                              "members uncompressed, and ember reads stored or deflated ones "
                              "only (re-save the file with torch.save)")
        if need > info.file_size or info.header_offset + info.compress_size > self.size or (
                info.compress_type == zipfile.ZIP_STORED and need > info.compress_size):
            raise RecordError(f"{where}: {need} bytes of it are needed but it holds "
                              f"{min(info.file_size, info.compress_size)} of the "
                              f"{self.size}-byte archive: truncated or corrupt")
        if info.compress_type == zipfile.ZIP_DEFLATED:
            self.inflated += need
            self.compressed += info.compress_size
            if self.inflated > MAX_RATIO * self.compressed + SLACK:
                raise RecordError(
                    f"{where}: {self.compressed} compressed bytes would inflate to "
                    f"{self.inflated}, a ratio no torch.save file has (ember allows "
                    f"{MAX_RATIO}:1): a zip bomb, or a damaged archive; refused before "
                    "inflating it")

    def read(self, info, need):
        """The first `need` bytes of a member, inflating no more than that (plus a chunk)."""
        try:
            with self.archive.open(info) as f:
                data = f.read(need)
        except Exception as e:  # zlib.error, BadZipFile (a wrong CRC), EOFError, ...
            raise RecordError(f"record.load_pytorch: cannot read {info.filename!r} of "
                              f"{self.source}: the archive is damaged ({type(e).__name__}: "
                              f"{e})") from None
        if len(data) != need:
            raise RecordError(f"record.load_pytorch: {info.filename!r} of {self.source} is "
                              f"cut short ({len(data)} of {need} bytes): truncated or corrupt")
        return data

    def member(self, name, optional=False, limit=None):
        info = self.info(name)
        if info is None:
            if optional:
                return None
            raise RecordError(f"record.load_pytorch: {self.source} lacks the entry {name!r}: "
                              "truncated or corrupt")
        need = info.file_size if limit is None else min(info.file_size, limit)
        self.check(info, need)
        return self.read(info, need)


def _read_zip(path, source, key):
    with _Zip(path, source) as z:
        names = z.archive.namelist()
        pickles = sorted((n for n in names if n.endswith("data.pkl")
                          and n.count("/") <= 1), key=len)
        prefix = pickles[0][: -len("data.pkl")] if pickles else ""
        if any(n.endswith("constants.pkl") for n in names) and (
                not pickles or prefix + "constants.pkl" in names):
            raise RecordError(f"record.load_pytorch: {source} is a TorchScript archive "
                              "(torch.jit.save); save its weights with "
                              "torch.save(torch.jit.load(path).state_dict(), out)")
        if not pickles:
            raise RecordError(f"record.load_pytorch: {source} is a zip archive without "
                              "data.pkl: not a file written by torch.save")
        big = z.member(prefix + "byteorder", optional=True, limit=16) == b"big"
        storages = {}

        def storage(pid):
            dtype, name = _storage_id(pid, source)
            if name not in storages:
                info = z.info(f"{prefix}data/{name}")
                storages[name] = _Storage(name, dtype, info, getattr(info, "file_size", None),
                                          big)
            return storages[name]

        pickled = z.member(pickles[0])
        obj = _unpickle(io.BytesIO(pickled), source, storage)
        tensors, others = _state_dict(obj, source, key, len(pickled))
        for s in _plan(tensors, source):
            z.check(s.where, s.need)

    def read(f, s, need):
        return f.read(s.where, need)

    return tensors, others, _fetcher(lambda: _Zip(path, source), read)


def _plan(tensors, source):
    """The storages the tensors use, each with `need` set: how many of its bytes they reach.
    Checked before anything is read: every view lies inside the bytes its storage holds."""
    used = {}
    for t in tensors.values():
        if isinstance(t, TensorRef):
            t.source = source
            t.storage.need = max(t.storage.need, t.need())
            used[t.storage] = True
    return list(used)


def _fetcher(open_file, read):
    """read(entries) -> their arrays, reading (in one opening of the file) only the storages
    those entries use, and of each only the bytes they reach."""

    def fetch(entries):
        need = {}
        for e in entries:
            if isinstance(e, TensorRef):
                need[e.storage] = max(need.get(e.storage, 0), e.need())
        todo = [(s, n) for s, n in need.items() if s.raw is None or len(s.raw) < n]
        if todo:
            with open_file() as f:
                for s, n in todo:
                    s.raw, s.arrays = read(f, s, n) if n else b"", {}
        return [e.load() for e in entries]

    return fetch


# ---- the legacy format (PyTorch < 1.6) -------------------------------------------------------

def _read_legacy(path, source, key, sure=True):
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        try:
            magic = _unpickle(f, source)
        except _CorruptPickle:
            if sure:
                raise
            raise RecordError(f"record.load_pytorch: {source} is neither a torch.save file "
                              "(zip or legacy pickle) nor safetensors") from None
        if magic != MAGIC_NUMBER:
            raise RecordError(f"record.load_pytorch: {source} is a pickle but not one written "
                              "by torch.save (no magic number); ember reads torch.save files "
                              "and safetensors")
        version = _unpickle(f, source)
        if version != PROTOCOL_VERSION:
            raise RecordError(f"record.load_pytorch: {source} uses the legacy protocol "
                              f"{_short(version)}; ember reads {PROTOCOL_VERSION}")
        _unpickle(f, source)  # system info: the data is little-endian
        storages, views = {}, []

        def storage(pid):
            dtype, name = _storage_id(pid, source)
            view = pid[5] if len(pid) > 5 else None
            if name not in storages:
                storages[name] = _Storage(name, dtype)
            if view is None:
                return storages[name]
            # a view of a storage (PyTorch < 0.4): (view key, offset, size) in elements
            if not (isinstance(view, tuple) and len(view) == 3):
                raise RecordError(f"a storage view {_short(view)}")
            itemsize = np.dtype(_DTYPES[dtype][0]).itemsize
            start = _int(view[1], "view offset") * itemsize
            views.append((_Storage(str(view[0]), dtype), storages[name], start,
                          _int(view[2], "view size") * itemsize))
            return views[-1][0]

        start = f.tell()
        obj = _unpickle(f, source, storage)
        pickled = f.tell() - start
        keys = _unpickle(f, source)
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise RecordError(f"record.load_pytorch: {source} has no list of storages after "
                              "its pickle: truncated or corrupt")
        for name in keys:  # each: its element count (8 bytes), then its bytes, skipped here
            head = f.read(8)
            if len(head) < 8:
                raise RecordError(f"record.load_pytorch: {source} is truncated (storage "
                                  f"{name!r} is missing)")
            (count,) = struct.unpack("<q", head)
            stored = storages.get(name)
            if stored is None:
                raise RecordError(f"record.load_pytorch: {source} stores {name!r}, which its "
                                  "pickle never uses: corrupt")
            nbytes = count * np.dtype(_DTYPES[stored.dtype][0]).itemsize
            if count < 0:
                raise RecordError(f"record.load_pytorch: {source} is corrupt (storage {name!r} "
                                  f"has {count} elements)")
            if f.tell() + nbytes > size:
                raise RecordError(f"record.load_pytorch: {source} is truncated (storage "
                                  f"{name!r} needs {nbytes} bytes)")
            stored.where, stored.size = f.tell(), nbytes
            f.seek(nbytes, os.SEEK_CUR)
    for view, root, start, length in views:
        if root.size is not None:
            view.where, view.size = root.where + start, max(0, min(length, root.size - start))
    tensors, others = _state_dict(obj, source, key, pickled)
    _plan(tensors, source)

    def read(f, s, need):
        f.seek(s.where)
        data = f.read(need)
        if len(data) != need:
            raise RecordError(f"record.load_pytorch: {source} was cut short while read")
        return data

    return tensors, others, _fetcher(lambda: open(path, "rb"), read)


# ---- finding the state dict ------------------------------------------------------------------

def _state_dict(obj, source, key=None, size=0):
    """({name: TensorRef or NumPy array}, [names of entries that are not tensors]) of the
    unpickled object, from a pickle of `size` bytes."""
    if not isinstance(obj, dict):
        raise RecordError(f"record.load_pytorch: {source} holds a {type(obj).__name__}, not a "
                          "dict of tensors")
    if key is not None:
        for part in key.split("/"):
            if not isinstance(obj, dict) or part not in obj:
                raise RecordError(f"record.load_pytorch: {source} has no entry {key!r}; its "
                                  f"top-level keys: {_keys(obj)}")
            obj = obj[part]
        return _state_dict(obj, source, size=size)
    if not any(isinstance(v, TensorRef) for v in dict.values(obj)):
        for k in _STATE_KEYS:
            if isinstance(obj.get(k), dict):
                return _state_dict(obj[k], source, size=size)
    # dotted names repeat the keys of the dicts above them: nested deep under a long key that
    # the pickle writes once, they could take far more memory than the file
    tensors, others, seen, budget = {}, [], {id(obj)}, 8 * size + (1 << 20)
    left = budget

    def flatten(d, prefix):
        nonlocal left
        for key, value in dict.items(d):
            name = prefix + (key if isinstance(key, str) else _short(key))
            left -= len(name)
            if left < 0:
                raise RecordError(f"record.load_pytorch: the names of the entries of {source} "
                                  f"add up to more than {budget} characters, from a pickle of "
                                  f"{size} bytes: not a state dict")
            if isinstance(value, TensorRef):
                tensors[name] = value
            elif isinstance(value, _NumpyArray) and value.array is not None:
                tensors[name] = _module.ArrayEntry(value.array)
            elif isinstance(value, dict) and id(value) not in seen:
                seen.add(id(value))
                flatten(value, name + ".")
            else:
                others.append(name)

    try:
        flatten(obj, "")
    except RecursionError:
        raise RecordError(f"record.load_pytorch: {source} nests dicts too deeply for a state "
                          "dict") from None
    if not tensors:
        raise RecordError(f"record.load_pytorch: found no tensors in {source}; its top-level "
                          f"keys: {_keys(obj)}; pick the entry with key=")
    return tensors, others


def _keys(obj):
    return ", ".join(_short(k) for k in list(obj)[:20]) if isinstance(obj, dict) else "none"


# ---- the public functions --------------------------------------------------------------------

def read(path, key=None):
    """(entries, names of non-tensor entries, read(entries) -> arrays) of a torch.save or
    safetensors file."""
    source = repr(os.fspath(path))
    kind = _module.sniff(path)
    if kind == "zip":
        return _read_zip(path, source, key)
    if kind in ("pickle", "unknown"):  # pickles of protocol 0 and 1 have no header
        return _read_legacy(path, source, key, sure=kind == "pickle")
    if kind == "tar":
        raise RecordError(f"record.load_pytorch: {source} is in the tar format of PyTorch "
                          "< 0.4, which ember does not read; load it with torch and re-save it "
                          "with torch.save(state_dict, path)")
    file = _safetensors.File(path, "record.load_pytorch")
    tensors = dict(file.entries)
    if key is not None:
        prefix = key.replace("/", ".") + "."
        tensors = {n[len(prefix):]: t for n, t in tensors.items() if n.startswith(prefix)}
        if not tensors:
            raise RecordError(f"record.load_pytorch: {source} has no tensors under {key!r}")
    return tensors, [], file.read


def read_pytorch(path, key=None):
    """{name: NumPy array} of the state dict in a torch.save file (or a .safetensors file),
    read without torch and without running code. `key` picks an entry of a checkpoint dict
    ("ema", "model/backbone"); by default the tensors at the top, else the entry named
    state_dict, model_state_dict, model or module. The arrays of a torch.save file are
    read-only views of their storage's bytes, as in torch (views of one storage share its
    memory; an expanded tensor has stride 0): np.array(a) gives a writable copy."""
    tensors, _, fetch = read(path, key)
    return dict(zip(tensors, fetch(list(tensors.values()))))


def load_pytorch(path, module, key_map=None, strict=True, *, key=None):
    """Load PyTorch weights into `module` in place and return it: a torch.save file of a
    state dict (or of a checkpoint dict holding one under "state_dict" / "model" / ...; `key`
    picks another entry), zip or legacy format, or a .safetensors file.
    `key_map`: {regex: replacement} applied in order to every name (re.sub) before matching,
    e.g. {r"^conv\\.(.*)": r"conv1.\\1"}. Names, shapes and dtypes are checked as in
    record.load: every problem is reported at once and nothing changes on failure. Only the
    storages of the tensors that fit a Param are read."""
    _module._check_module(module, "record.load_pytorch")
    source = repr(os.fspath(path))
    tensors, others, fetch = read(path, key)
    for name in others:  # non-tensor entries (extra state) match no Param
        tensors.setdefault(name, _NotTensor())
    renamed, notes = {}, []
    if key_map:
        tensors, renamed, notes = _remap(tensors, key_map, source)
    bad = [n for n, t in tensors.items() if isinstance(t, _NotTensor)]
    params = {n for n, _ in module.named_params()}
    if any(n in params for n in bad):
        raise RecordError(f"record.load_pytorch: in {source}, "
                          f"{', '.join(n for n in bad if n in params)} are not tensors")
    tensors = {n: t for n, t in tensors.items() if n not in bad or strict}
    return _module.fill(module, tensors, strict=strict, who="record.load_pytorch",
                        source=source, read=fetch, renamed=renamed, notes=notes)


class _NotTensor:
    shape = ()
    dtype = "object"


def _remap(tensors, key_map, source):
    pairs = list(key_map.items()) if isinstance(key_map, dict) else list(key_map)
    compiled = []
    for pattern, replacement in pairs:
        try:
            compiled.append((re.compile(pattern), replacement, pattern))
        except re.error as e:
            raise RecordError(f"record.load_pytorch: key_map pattern {pattern!r} is not a "
                              f"regular expression ({e})") from None
    out, renamed, used, clashes = {}, {}, set(), []
    for name, entry in tensors.items():
        new = name
        for regex, replacement, pattern in compiled:
            try:
                changed = regex.sub(replacement, new)
            except (re.error, IndexError) as e:
                raise RecordError(f"record.load_pytorch: key_map replacement "
                                  f"{replacement!r} for {pattern!r} fails on {new!r} ({e})"
                                  ) from None
            if changed != new:
                used.add(pattern)
            new = changed
        if new in out:
            clashes.append(f"{renamed[new]!r} and {name!r} both become {new!r}")
        out[new] = entry
        renamed[new] = name
    if clashes:
        raise RecordError(f"record.load_pytorch: key_map maps several names of {source} to "
                          "one: " + "; ".join(clashes))
    notes = [f"note: key_map pattern {p!r} matched no name" for _, _, p in compiled
             if p not in used]
    return out, renamed, notes

