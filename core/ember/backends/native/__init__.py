"""Native C kernels for NdArray on CPython: loops NumPy runs as many array passes, as one.

NumPy's BLAS makes GEMMs fast natively, but an elementwise chain such as GELU (erf's rational
fit: ~14 NumPy passes forward, ~9 backward) streams every activation through memory once per
pass. kernels.c computes each in one pass. It is compiled on first use with the host's C
compiler ($CC, else cc, gcc or clang on PATH) at -O3 for this CPU, and the shared library is
cached in $XDG_CACHE_HOME/ember/native (~/.cache/ember/native), keyed by the source, the
compiler, the flags and the CPU, so a process pays for compiling once per machine (~1 s) and
then only a lookup. The wheel stays pure Python: no compiler (or EMBER_NATIVE=0 in the
environment) means NumPy computes everything, as before; a compiler that fails warns once.

Like the WebAssembly kernels inside Pyodide (backends/wasm), this rebinds names of
ember.ops.kernels, which the op table's NumPy implementations call; `status()` says what is in
use and why.
"""

import ctypes
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
import threading
import warnings
from pathlib import Path

import numpy as np

from ...ops import kernels, numerics

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "kernels.c"
# -nostdlib: kernels.c calls nothing, so only a compiler and a linker are needed;
# -fopenmp-simd: its `omp simd` loops (no OpenMP runtime); -march=native is dropped if refused
FLAGS = ("-O3", "-std=c11", "-fPIC", "-shared", "-nostdlib", "-fopenmp-simd")
TUNE = ("-march=native",)

_ROUTED = ("gelu", "gelu_grad")
_NUMPY = {name: getattr(kernels, name) for name in _ROUTED}
_F32 = np.dtype(np.float32)
_PQ = np.ascontiguousarray(numerics._GELU_F32_PQ, dtype=np.float32).reshape(-1)
_lock = threading.Lock()
_lib = None
_status = "not loaded yet"


def compiler():
    """The C compiler command (a list), or None: $CC, else cc, gcc or clang on PATH."""
    if os.environ.get("CC"):
        return shlex.split(os.environ["CC"])
    for name in ("cc", "gcc", "clang"):
        path = shutil.which(name)
        if path:
            return [path]
    return None


def cache_dir():
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "ember" / "native"


def _cpu():
    # the CPU's feature flags: a library built with -march=native must not be loaded by a
    # machine with fewer of them (a cache shared over NFS, a copied home directory)
    try:
        with open("/proc/cpuinfo") as f:
            return next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        return platform.processor()


def build(cc=None):
    """Path of the compiled kernels, compiling them unless the cache has them. Raises OSError
    (no compiler, or it failed: its message included)."""
    cc = cc or compiler()
    if cc is None:
        raise OSError("no C compiler found (set CC, or install cc/gcc/clang)")
    exe = shutil.which(cc[0]) or cc[0]
    try:
        stat = os.stat(exe)
        who = f"{os.path.realpath(exe)} {stat.st_size} {stat.st_mtime_ns}"
    except OSError as e:
        raise OSError(f"C compiler {cc[0]!r} not found: {e}") from None
    key = hashlib.sha256("\0".join([
        SOURCE.read_text(), " ".join(cc[1:]), who, " ".join(FLAGS + TUNE),
        platform.machine(), _cpu()]).encode()).hexdigest()[:20]
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:  # no writable cache: build into a folder of this process's own
        folder = Path(tempfile.mkdtemp(prefix="ember-native-"))
    path = folder / f"kernels-{key}.so"
    if path.is_file():
        return path
    # compiled to a name of this process's own, then renamed: concurrent builders (pytest
    # workers, two notebooks) never load a half-written library
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=folder)
    os.close(fd)
    try:
        errors = []
        for flags in (FLAGS + TUNE, FLAGS):
            run = subprocess.run([*cc, *flags, "-o", tmp, str(SOURCE)], capture_output=True,
                                 text=True)
            if run.returncode == 0:
                os.replace(tmp, path)
                return path
            errors.append(run.stderr.strip().splitlines()[-1:] or [f"exit {run.returncode}"])
        raise OSError(f"{' '.join(cc)} failed to compile {SOURCE.name}: {errors[-1][0]}")
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def load():
    """Compile (or find in the cache) and load the kernels. Raises OSError when none loads."""
    global _lib, _status
    with _lock:
        if _lib is not None:
            return _lib
        path = build()
        lib = ctypes.CDLL(str(path))
        ptr, i64 = ctypes.c_void_p, ctypes.c_longlong
        lib.gelu_f32.argtypes = (ptr, ptr, i64, ptr)
        lib.gelu_grad_f32.argtypes = (ptr, ptr, ptr, i64, ptr)
        for fn in (lib.gelu_f32, lib.gelu_grad_f32):
            fn.restype = None
        _lib, _status = lib, f"loaded {path}"
        return lib


def status():
    """What computes ember.ops.kernels' native names in this process, and why."""
    if _lib is None and os.environ.get("EMBER_NATIVE") == "0":
        return "off (EMBER_NATIVE=0): NumPy computes everything"
    return _status


def install():
    """Route GELU and its gradient (float32) to the native kernels. Raises OSError when they do
    not load (no compiler, or it failed)."""
    load()
    for name in _ROUTED:
        setattr(kernels, name, globals()[name])


def uninstall():
    for name, numpy_one in _NUMPY.items():
        setattr(kernels, name, numpy_one)


def install_on_first_use():
    """Route to the kernels from the first call of a routed name on: each name is bound to a
    stand-in that installs the kernels (compiling them if this machine has none cached) and
    makes the call. No compiler: NumPy, silently (status() says so); a compiler that fails:
    NumPy, with one warning."""
    def stand_in(name):
        def first_call(*args, **kwargs):
            global _status
            if getattr(kernels, name) is first_call:  # not installed (nor failed) meanwhile
                try:
                    install()
                except OSError as e:
                    uninstall()
                    _status = f"NumPy computes everything: {e}"
                    if compiler() is not None:
                        warnings.warn(f"ember: native kernels unavailable, NumPy computes "
                                      f"everything ({e})", RuntimeWarning, stacklevel=2)
            return getattr(kernels, name)(*args, **kwargs)
        return first_call
    for name in _ROUTED:
        setattr(kernels, name, stand_in(name))


def _fits(a):
    return a.dtype == _F32 and a.flags.c_contiguous


def gelu(x, out=None):
    if not _fits(x) or (out is not None and (not _fits(out) or out.shape != x.shape)):
        return None
    if out is None:
        out = np.empty(x.shape, _F32)
    _lib.gelu_f32(x.ctypes.data, out.ctypes.data, x.size, _PQ.ctypes.data)
    return out


def gelu_grad(g, x, out=None):
    if not (_fits(g) and _fits(x) and g.shape == x.shape) or (
            out is not None and (not _fits(out) or out.shape != x.shape)):
        return None
    if out is None:
        out = np.empty(x.shape, _F32)
    _lib.gelu_grad_f32(g.ctypes.data, x.ctypes.data, out.ctypes.data, x.size, _PQ.ctypes.data)
    return out


__all__ = ["build", "cache_dir", "compiler", "install", "install_on_first_use", "load",
           "status", "uninstall"]
