"""Malicious pickles: refused with the global named, and their side effects never happen."""

import copyreg
import io
import os
import pickle
import struct
import subprocess
import sys
import tracemalloc
import zipfile

import numpy as np
import pytest
import torch

from ember import record
from ember.record import RecordError, UnsafePickleError, _pytorch
from ember.record._pytorch import MAGIC_NUMBER, PROTOCOL_VERSION

from .helpers import mirror

ENV = "EMBER_RECORD_PWNED"


class Reduce:
    """An object whose unpickling calls fn(*args)."""

    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


def payloads(marker):
    touch = f"open({str(marker)!r}, 'w').write('pwned')"
    env = f"__import__('os').environ.__setitem__({ENV!r}, '1')"
    return {
        "os.system": (pickle.dumps({"w": Reduce(os.system, f"touch {marker}")}, protocol=2),
                      os.system.__module__ + ".system"),
        "builtins.eval": (pickle.dumps(Reduce(eval, env), protocol=2), "__builtin__.eval"),
        "subprocess.Popen": (pickle.dumps({"w": Reduce(subprocess.Popen, ["touch",
                                                                          str(marker)])},
                                          protocol=4), "subprocess.Popen"),
        "subprocess.check_call": (pickle.dumps([Reduce(subprocess.check_call,
                                                       ["touch", str(marker)])], protocol=5),
                                  "subprocess.check_call"),
        # hand-written opcodes: GLOBAL + REDUCE, INST, STACK_GLOBAL, a getattr chain
        "GLOBAL builtins.exec": (b"cbuiltins\nexec\n(V" + touch.encode() + b"\ntR.",
                                 "builtins.exec"),
        "INST os.system": (b"(S'touch " + str(marker).encode() + b"'\nios\nsystem\n.",
                           "os.system"),
        "STACK_GLOBAL exec": (b"\x80\x04\x8c\x08builtins\x8c\x04exec\x93\x8c"
                              + bytes([len(touch)]) + touch.encode() + b"\x85R.",
                              "builtins.exec"),
        "getattr chain": (b"cbuiltins\ngetattr\n(cos\nenviron\nVclear\ntR)R.",
                          "builtins.getattr"),
        "dotted name": (b"\x80\x04\x8c\x02os\x8c\x0bpath.system\x93.", "os.path.system"),
        "py2 spelling": (b"c__builtin__\neval\n(V" + env.encode() + b"\ntR.",
                         "__builtin__.eval"),
    }


def torch_zip(tmp_path, pickled):
    """A genuine torch.save archive whose data.pkl is replaced by `pickled`."""
    good = tmp_path / "good.pt"
    torch.save({"w": torch.ones(2)}, good)
    path = tmp_path / "evil.pt"
    with zipfile.ZipFile(good) as z, zipfile.ZipFile(path, "w") as out:
        for info in z.infolist():
            data = pickled if info.filename.endswith("data.pkl") else z.read(info.filename)
            out.writestr(info, data)
    return path


def legacy(pickled):
    """The legacy layout: magic number, protocol, system info, then the payload."""
    return (pickle.dumps(MAGIC_NUMBER, protocol=2) + pickle.dumps(PROTOCOL_VERSION, protocol=2)
            + pickle.dumps({"little_endian": True}, protocol=2) + pickled)


@pytest.fixture
def clean_env():
    os.environ.pop(ENV, None)
    yield
    os.environ.pop(ENV, None)


@pytest.mark.parametrize("name", list(payloads("x")))
@pytest.mark.parametrize("container", ["raw pickle", "torch zip", "legacy stream"])
def test_malicious_pickles_are_refused_and_nothing_happens(tmp_path, clean_env, name,
                                                           container):
    marker = tmp_path / "pwned"
    pickled, global_name = payloads(marker)[name]
    if container == "torch zip":
        path = torch_zip(tmp_path, pickled)
    else:
        path = tmp_path / "evil.pt"
        path.write_bytes(pickled if container == "raw pickle" else legacy(pickled))
    for load in (lambda: record.read_pytorch(path),
                 lambda: record.load_pytorch(path, mirror({"w": (2,)}))):
        with pytest.raises(UnsafePickleError) as info:
            load()
        msg = str(info.value)
        assert f"global {global_name}," in msg and "nothing was executed" in msg, msg
        assert "evil.pt" in msg
    assert not marker.exists()
    assert ENV not in os.environ


def test_the_payloads_are_live(tmp_path, clean_env):
    # the control: plain pickle runs them (a harmless file write and an environment variable)
    marker = tmp_path / "pwned"
    pickle.loads(payloads(marker)["GLOBAL builtins.exec"][0])
    assert marker.read_text() == "pwned"
    pickle.loads(payloads(marker)["builtins.eval"][0])
    assert os.environ[ENV] == "1"


def test_refused_globals_are_never_imported(tmp_path):
    name = "ember_record_never_imported"
    module = tmp_path / f"{name}.py"
    module.write_text(f"open({str(tmp_path / 'imported')!r}, 'w').write('x')\nrun = print\n")
    sys.path.insert(0, str(tmp_path))
    try:
        path = tmp_path / "evil.pt"
        path.write_bytes(f"c{name}\nrun\n(tR.".encode())
        with pytest.raises(UnsafePickleError, match=f"{name}.run"):
            record.read_pytorch(path)
    finally:
        sys.path.remove(str(tmp_path))
    assert name not in sys.modules and not (tmp_path / "imported").exists()


def test_evil_persistent_ids_and_storage_keys(tmp_path, clean_env):
    marker = tmp_path / "pwned"

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            return obj.pid if isinstance(obj, Pid) else None

    class Pid:
        def __init__(self, pid):
            self.pid = pid

    cases = {
        "global in the id": (("storage", Reduce(os.system, f"touch {marker}"), "0", "cpu", 1),
                             UnsafePickleError),
        "path in the key": (("storage", None, "../../etc/passwd", "cpu", 1), RecordError),
        "unknown id": (("module", "x"), RecordError),
    }
    for what, (pid, error) in cases.items():
        buf = io.BytesIO()
        Pickler(buf, protocol=2).dump({"w": Pid(pid)})
        path = torch_zip(tmp_path, buf.getvalue())
        with pytest.raises(error):
            record.read_pytorch(path)
        assert not marker.exists(), what


@pytest.mark.parametrize("pickled, message", [
    # the allowed stand-ins only build data and check their arguments
    (b"ctorch._utils\n_rebuild_tensor_v2\n(Vnot a storage\nK\x00)))\x89NtR.", "storage is a str"),
    (b"c_codecs\nencode\n(Vx\nVrot13\ntR.", "not how pickle writes bytes"),
    (b"cnumpy\ndtype\n(VO\n\x89\x88tR.", "only numeric dtypes"),
    (b"ccollections\nOrderedDict\n)R}V__class__\ncbuiltins\nset\nsb.", None),
    (b"\x80\x02ctorch\nFloatStorage\n)R.", "not callable"),
])
def test_allowed_names_cannot_be_abused(tmp_path, pickled, message):
    with pytest.raises(RecordError, match=message or "no tensors"):
        record.read_pytorch(torch_zip(tmp_path, pickled))


@pytest.mark.parametrize("pickled", [
    b"ctorch\nFloatStorage\n(N}Vvalue\nVint64\nstb.",          # slot state on a marker
    b"ctorch._utils\n_rebuild_tensor_v2\n(N}Vfn\nctorch\nSize\nstb.",  # on a function
    b"ctorch._utils\n_rebuild_tensor_v2\n}Vfn\nVx\nsb.",          # dict state on a function
    b"ccollections\nOrderedDict\n}Vget\nVx\nsb.",                 # on the class itself
    b"cbuiltins\nset\n(N}V__len__\nVx\nstb.",
])
@pytest.mark.parametrize("container", ["raw pickle", "torch zip"])
def test_a_pickle_cannot_change_the_allow_list(tmp_path, pickled, container):
    before = {k: (v, repr(v)) for k, v in _pytorch.ALLOWED.items()}
    if container == "torch zip":
        path = torch_zip(tmp_path, pickled)
    else:
        path = tmp_path / "evil.pt"
        path.write_bytes(pickled)
    with pytest.raises(RecordError):
        record.read_pytorch(path)
    assert {k: (v, repr(v)) for k, v in _pytorch.ALLOWED.items()} == before
    assert _pytorch.ALLOWED[("collections", "OrderedDict")].get is dict.get
    good = tmp_path / "good.pt"
    torch.save({"w": torch.arange(3.0)}, good)
    assert record.read_pytorch(good)["w"].tolist() == [0.0, 1.0, 2.0]


def test_numpy_values_in_a_checkpoint_are_read_as_numbers(tmp_path):
    path = tmp_path / "ck.pt"
    net = torch.nn.Linear(2, 2)
    torch.save({"state_dict": net.state_dict(), "best": np.float64(0.5),
                "hist": np.arange(4.0), "fortran": np.asfortranarray(np.ones((2, 3)))}, path)
    got = record.read_pytorch(path)
    assert set(got) == {"weight", "bias"}
    np.testing.assert_array_equal(got["weight"], net.weight.detach().numpy())
    with pytest.raises(UnsafePickleError, match="numpy.random"):
        torch.save({"w": torch.ones(1), "rng": np.random.RandomState(0)}, path)
        record.read_pytorch(path)


def pwn(marker):
    with open(marker, "w") as f:
        f.write("pwned")


@pytest.mark.parametrize("code, opcode", [
    (0x7F, b"\x82\x7f"),                                 # EXT1
    (0x1234, b"\x83" + struct.pack("<H", 0x1234)),        # EXT2
    (0x1234567, b"\x84" + struct.pack("<i", 0x1234567)),  # EXT4
])
def test_ext_opcodes_are_refused_even_for_registered_extensions(tmp_path, code, opcode):
    marker = tmp_path / "pwned"
    arg = str(marker).encode()
    pickled = b"\x80\x02" + opcode + b"X" + struct.pack("<I", len(arg)) + arg + b"\x85R."
    copyreg.add_extension(__name__, "pwn", code)
    try:
        # the control: once a plain load has cached the extension, an unpickler whose
        # find_class refuses everything still runs it
        pickle.loads(pickled)
        marker.unlink()

        class AllowNothing(pickle.Unpickler):
            def find_class(self, module, name):
                raise pickle.UnpicklingError(f"{module}.{name}")

        AllowNothing(io.BytesIO(pickled)).load()
        assert marker.exists()
        marker.unlink()
        for path in (torch_zip(tmp_path, pickled), tmp_path / "raw.pt", tmp_path / "legacy.pt"):
            if path.name == "raw.pt":
                path.write_bytes(pickled)
            elif path.name == "legacy.pt":
                path.write_bytes(legacy(pickled))
            with pytest.raises(UnsafePickleError, match=f"opcode EXT{min(len(opcode) - 1, 4)}"):
                record.load_pytorch(path, mirror({"w": (2,)}))
            assert not marker.exists()
    finally:
        copyreg.remove_extension(__name__, "pwn", code)


def test_a_memo_index_past_the_pickle_is_refused(tmp_path):
    # LONG_BINPUT 2**28 makes pickle's unpickler grow its memo table to 2**28 entries (2 GB)
    pickled = b"\x80\x02}r" + struct.pack("<I", 2**28) + b"."
    for path in (torch_zip(tmp_path, pickled), tmp_path / "legacy.pt"):
        if path.name == "legacy.pt":
            path.write_bytes(legacy(pickled))
        tracemalloc.start()
        try:
            with pytest.raises(RecordError, match="memoizes at index 268435456"):
                record.read_pytorch(path)
            assert tracemalloc.get_traced_memory()[1] < 8 << 20
        finally:
            tracemalloc.stop()


def test_names_that_repeat_a_long_key_are_refused(tmp_path):
    # 400 dicts nested under one 100 kB key, which the pickle writes once: the dotted names
    # would take 400 * 401 / 2 * 100 kB = 8 GB
    key = "k" * 100_000
    obj = {"w": 1}
    for _ in range(400):
        obj = {key: obj}
    pickled = pickle.dumps(obj, protocol=2)
    assert len(pickled) < 110_000
    path = torch_zip(tmp_path, pickled)
    tracemalloc.start()
    try:
        with pytest.raises(RecordError, match="names of the entries .* add up to more than"):
            record.read_pytorch(path)
        assert tracemalloc.get_traced_memory()[1] < 16 << 20
    finally:
        tracemalloc.stop()
