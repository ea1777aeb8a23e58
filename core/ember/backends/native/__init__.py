"""Native C kernels for NdArray on CPython: loops NumPy runs as many array passes, as one.

NumPy's BLAS makes GEMMs fast natively, but an elementwise chain such as GELU (erf's rational
fit: ~14 NumPy passes forward, ~9 backward) streams every activation through memory once per
pass, and a convolution as im2col + GEMM writes and reads its columns (9x its input for a 3x3
kernel). kernels.c computes GELU in one pass, and convolutions at stride 1 (conv2d, its input
gradient conv_transpose2d, its weight gradient conv2d_weight) directly from the padded input,
vectorized along the flattened pixels, on all cores (kernels.c's own thread pool: a slice of
the batch per worker, handed over in ~1 us to a worker still spinning after the last job).
mask_where (ReLU's gradient) is a select in one pass where NumPy's masked copy branched on
every element (~4 ns each).

kernels.c is compiled on first use with the host's C compiler ($CC, else cc, gcc or clang on
PATH) at -O3 for this CPU, and the shared library is cached in $XDG_CACHE_HOME/ember/native
(~/.cache/ember/native), keyed by the source, the compiler, the flags and the CPU, so a process
pays for compiling once per machine (~0.3-1 s) and then only a lookup. The wheel stays pure
Python: no compiler (or EMBER_NATIVE=0 in the environment) means NumPy computes everything, as
before; a compiler that fails warns once.

ember's GEMMs run on the same pool: OpenBLAS's idle worker threads busy-wait for ~0.1 s after
every multi-threaded BLAS call, and in a training step (a GEMM every few ms) they kept a core
spinning, so a convolution split over two threads ran at the speed of one (measured). So
`matmul` asks NumPy's OpenBLAS to run single-threaded for the duration of each of ember's
GEMMs (a large one split over the pool instead) and gives it its thread count back after: its
workers never get ember's work, and NumPy code outside ember keeps OpenBLAS as it was.

Under Fusion(NdArray()), each fused chain of elementwise ops becomes a C kernel of its own,
generated from the ops' C expressions, compiled and cached the same way (fused.py).

Like the WebAssembly kernels inside Pyodide (backends/wasm), this is a set of
ember.ops.kernels (KERNELS, a `Native`), which NdArray(kernels="auto") runs with; `status()`
says what is in use and why.
"""

import ctypes
import functools
import hashlib
import math
import os
import platform
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
import warnings
from pathlib import Path

import numpy as np

from ... import autotune
from ...autotune import bucket
from ...ops import kernels, numerics

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "kernels.c"
# -nostdlib: kernels.c calls nothing, so only a compiler and a linker are needed (-fno-builtin,
# and GCC's -fno-tree-loop-distribute-patterns, keep the optimiser from turning its loops into
# calls of memset/memcpy); -ffp-contract=fast: fused multiply-adds (ISO C modes turn them off);
# -fno-trapping-math: selects on floats (GELU's clamps) may become vector blends (GCC 12 kept
# them branches, and GELU and its gradient ran scalar: 5x slower, bench/primitives.py);
# -fno-math-errno: a square root is one instruction (Adam's), not a call for errno's sake;
# -fopenmp-simd: its `omp simd` loops (no OpenMP runtime). The optional flags are tried from the
# fullest set down (a compiler refusing one: clang the GCC-only flag, some -march=native),
# the base flags alone last.
FLAGS = ("-O3", "-std=c11", "-ffp-contract=fast", "-fno-trapping-math", "-fno-math-errno",
         "-fPIC", "-shared", "-nostdlib", "-fno-builtin")
SIMD = ("-fopenmp-simd",)
GCC_ONLY = ("-fno-tree-loop-distribute-patterns",)
TUNE = ("-march=native",)

_F32 = np.dtype(np.float32)
_BYTE = ctypes.c_char


def _at(x):
    """The address of x's data, from the buffer x exports: a quarter of `x.ctypes.data`'s
    time, which builds an object on every call (~1 us here, and a small op passes 2-5 arrays).
    An array that exports no writable C-contiguous buffer (read-only, a strided view, empty)
    goes through `.ctypes.data`."""
    try:
        return ctypes.addressof(_BYTE.from_buffer(x))
    except (TypeError, ValueError):
        return x.ctypes.data


_PQ = np.ascontiguousarray(numerics._GELU_F32_PQ, dtype=np.float32).reshape(-1)
_PQ_AT = _at(_PQ)  # (the module holds _PQ for good: its address is found once)
_lock = threading.Lock()
_lib = None
_failed = False  # a load failed: NumPy computes, and no second attempt (nor warning)
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


@functools.cache
def device():
    """This machine in ember.autotune's keys: its CPU's model name."""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f
                          if line.startswith("model name")), "")
    except OSError:
        model = ""
    return f"cpu {model or platform.processor() or platform.machine()}"


def _cpu():
    # the CPU's feature flags: a library built with -march=native must not be loaded by a
    # machine with fewer of them (a cache shared over NFS, a copied home directory)
    try:
        with open("/proc/cpuinfo") as f:
            return next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        return platform.processor()


def build(cc=None, tune=TUNE):
    """Path of the compiled kernels, compiling them unless the cache has them. Raises OSError
    (no compiler, or it failed: its message included). `tune`: the flags tried first (then
    none: the compiler's generic target)."""
    sets = (FLAGS + SIMD + GCC_ONLY + tune, FLAGS + SIMD + tune, FLAGS + SIMD, FLAGS)
    return compile_library(SOURCE.read_text(), "kernels", sets, cc)


def compile_library(text, stem, flag_sets, cc=None, libs=(), build=True):
    """Path of the shared library built from the C source `text`, compiled unless the cache
    has it (the key: the source, the compiler, its flags and the CPU), with the first of
    `flag_sets` the compiler accepts (build=False: None instead of compiling). Raises OSError
    (no compiler, or every set failed: the compiler's message included). fused.py builds its
    generated kernels through it too."""
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
        text, " ".join(cc[1:]), who, " | ".join(" ".join(f) for f in flag_sets),
        " ".join(libs), platform.machine(), _cpu()]).encode()).hexdigest()[:20]
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:  # no writable cache: build into a folder of this process's own
        folder = Path(tempfile.mkdtemp(prefix="ember-native-"))
    path = folder / f"{stem}-{key}.so"
    if path.is_file() or not build:
        return path if path.is_file() else None
    # compiled to a name of this process's own, then renamed: concurrent builders (pytest
    # workers, two notebooks) never load a half-written library
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=folder)
    os.close(fd)
    try:
        errors = []
        for flags in flag_sets:  # (the source on stdin: nothing else written to disk)
            run = subprocess.run([*cc, *flags, "-o", tmp, "-x", "c", "-", *libs], input=text,
                                 capture_output=True, text=True)
            if run.returncode == 0:
                os.replace(tmp, path)
                return path
            errors.append(run.stderr.strip().splitlines()[-1:] or [f"exit {run.returncode}"])
        raise OSError(f"{' '.join(cc)} failed to compile {stem}.c: {errors[-1][0]}")
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
        try:
            _lib = Library(path)
        except (OSError, AttributeError):  # a cached file that does not load (cut short by a
            path.unlink(missing_ok=True)   # full disk, say): built again, once
            _lib = Library(build())
        _status = f"loaded {path} ({_lib.vector}-float vectors, {THREADS} threads)"
        return _lib


_P, _I, _I64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
_SIGNATURES = {
    "gelu_f32": (_P, _P, _I64, _P),
    "gelu_grad_f32": (_P, _P, _P, _I64, _P),
    "mask_where_f32": (_P, _P, ctypes.c_float, _P, _I64),
    "relu_f32": (_P, _P, _I64),
    "adam_f32": (_P, _P, _P, _P, _P, _P, _P, _I64, ctypes.c_float, _I, _P),
}

_POOL = (("pool_work", (_I64, _I64), _I64), ("pool_post", (_P, _P, _I64, _I64), _I64),
         ("pool_join", (), None), ("pool_inline", (_P, _P, _I64, _I64), None),
         ("pool_set_spin", (_I64,), None), ("pool_pause", (_I64,), None),
         ("pool_reset", (), None))


class Library:
    """A loaded build of kernels.c: its functions, typed, and its tile sizes."""

    def __init__(self, path):
        self.path = path
        lib = ctypes.CDLL(str(path))
        for name, argtypes in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = argtypes, None
            setattr(self, name, fn)
        self.tile, self.block, self.vector = (lib.conv_tile_pixels(), lib.conv_tile_channels(),
                                              lib.conv_vector())
        self.conv2d_scratch = lib.conv2d_scratch
        self.conv2d_scratch.argtypes = (_I,) * 8
        self.conv2d_scratch.restype = _I64
        self.conv2d_weight_block = lib.conv2d_weight_block
        self.conv2d_weight_block.argtypes = (_I,) * 6
        for name, argtypes, restype in _POOL:
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = argtypes, restype
            setattr(self, name, fn)
        # the parts the pool runs (_parallel), by name: their addresses
        self.parts = {name: ctypes.cast(getattr(lib, f"{name}_part"), _P).value
                      for name in ("conv2d", "conv2d_weight", "fused", "gemm")}
        # the pool's state lives in this build's statics, so its workers are this build's:
        # per worker (1 ..) started, the semaphore it sleeps on (_start_workers)
        self.wakes = [None]


def status():
    """What computes the native set's kernels in this process, and why."""
    if _lib is None and os.environ.get("EMBER_NATIVE") == "0":
        return "off (EMBER_NATIVE=0): NumPy computes everything"
    return _status


_BLAS_NAMES = ("openblas", "scipy_openblas")  # NumPy's wheels: scipy_openblas(64_)


@functools.cache
def _blas_library():
    """(the library, its prefix, its suffix) of the OpenBLAS this process loaded (NumPy's), or
    None: another BLAS, or a system without /proc to find it through."""
    try:
        with open("/proc/self/maps") as f:
            paths = sorted(set(re.findall(r"(/\S*openblas\S*\.so\S*)", f.read())))
    except OSError:
        return None
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix in _BLAS_NAMES:
            for suffix in ("", "64_"):
                if hasattr(lib, f"{prefix}_set_num_threads{suffix}") and hasattr(
                        lib, f"{prefix}_get_num_threads{suffix}"):
                    return lib, prefix, suffix
    return None


@functools.cache
def _openblas():
    """(set_num_threads, get_num_threads) of NumPy's OpenBLAS, or None."""
    found = _blas_library()
    if found is None:
        return None
    lib, prefix, suffix = found
    setter = getattr(lib, f"{prefix}_set_num_threads{suffix}")
    getter = getattr(lib, f"{prefix}_get_num_threads{suffix}")
    setter.argtypes, setter.restype = (ctypes.c_int,), None
    getter.argtypes, getter.restype = (), ctypes.c_int
    return setter, getter


@functools.cache
def _cblas():
    """(cblas_sgemm's address, cblas_dgemm's, 1 where their integers are 64-bit) of NumPy's
    OpenBLAS (scipy_cblas_sgemm64_ in NumPy's wheels), or None."""
    found = _blas_library()
    if found is None:
        return None
    lib, prefix, suffix = found
    names = [f"{prefix.replace('openblas', '')}cblas_{t}gemm{suffix}" for t in "sd"]
    if not all(hasattr(lib, name) for name in names):
        return None
    return (*(ctypes.cast(getattr(lib, name), _P).value for name in names),
            int(suffix == "64_"))


def _ready():
    """True once the kernels are loaded; the first call loads (compiling them if this machine
    has none cached). No compiler: False, silently (status() says so); a compiler that fails:
    False, with one warning."""
    global _status, _failed
    if _lib is not None:
        return True
    if _failed:
        return False
    try:
        load()
        return True
    except OSError as error:
        _failed = True
        _status = f"NumPy computes everything: {error}"
        if compiler() is not None:
            warnings.warn(f"ember: native kernels unavailable, NumPy computes everything "
                          f"({error})", RuntimeWarning, stacklevel=4)
        return False


class Native(kernels.Kernels):
    """NdArray's native set (NdArray(kernels="auto") on CPython): GELU, ReLU, mask_where, stride-1
    convolutions and GEMMs on the compiled kernels and ember's threads, loaded on first use;
    where they cannot load, NumPy's set computes everything."""

    name = "native"

    def __init__(self, threads=None):
        self.threads = threads  # at most this many of the pool's threads per op (None: all)

    def matmul(self, a, b):
        # (a tiny product straight to NumPy, as matmul would: no checks to pay per call)
        small = a.size * b.size < _BLAS_THREADS_FROM
        return np.matmul(a, b) if small or not _ready() else matmul(a, b)

    def gelu(self, x, out=None):
        return gelu(x, out) if _ready() else None

    def gelu_grad(self, g, x, out=None):
        return gelu_grad(g, x, out) if _ready() else None

    def mask_where(self, x, mask, value, out=None):
        return mask_where(x, mask, value, out) if _ready() else None

    def adam(self, x, g, m0, v0, new_x, m, v, w, small, *scalars):
        if x.dtype != _F32 or not _ready():
            return None
        s = np.array(scalars, _F32)
        _lib.adam_f32(*(_at(a) for a in (x, g, m0, v0, new_x, m, v)), x.size, w, small,
                      _at(s))
        return True

    def relu(self, x, out=None):
        got = relu(x, out) if _ready() else None
        return super().relu(x, out) if got is None else got

    def conv2d(self, x, w, b, stride, padding, dilation, groups, out_hw):
        return conv2d(x, w, b, stride, padding, dilation, groups, out_hw) if _ready() else None

    def conv_transpose2d(self, x, w, stride, padding, dilation, groups, out_hw):
        if not _ready():
            return None
        return conv_transpose2d(x, w, stride, padding, dilation, groups, out_hw)

    def conv2d_weight(self, x, g, kernel, stride, padding, dilation, groups):
        if not _ready():
            return None
        return conv2d_weight(x, g, kernel, stride, padding, dilation, groups)

    def fuse(self, block):
        """An ember.fusion Block's outputs from one generated C kernel (fused.py), or None."""
        from . import fused  # (it builds on this module: the pool, compile_library)
        return fused.fuse(block) if _ready() else None


KERNELS = Native()


# ---- threads: kernels.c's pool, a worker per core but the caller's -------------------------
try:
    THREADS = max(1, min(8, len(os.sched_getaffinity(0))))
except AttributeError:  # not Linux
    THREADS = max(1, min(8, os.cpu_count() or 1))
# below this many multiply-adds a convolution runs on one thread (~80 us of work: the MNIST
# model's first convolution, 3.4M, ran no faster on two)
MIN_PARALLEL_MACS = 1 << 22
# An idle worker spins this long for the next job before it sleeps (kernels.c says why): a
# training step's ops come closer than this, and a step's end leaves a core busy no longer
SPIN_SECONDS = 1e-3
_pooled = []  # the Libraries whose workers have started (a fork forgets them)
_start_lock = threading.Lock()


def _threads():
    """The threads an op may use: the pool's, or fewer where the active kernel set says so
    (NdArray(threads=1): data-parallel replicas, each on its own core)."""
    limit = getattr(kernels.active(), "threads", None)
    return THREADS if limit is None else max(1, min(THREADS, limit))


def _parts(n, macs):
    """Into how many parts (threads) to cut a batch of n images costing `macs`."""
    return min(_threads(), n) if macs >= MIN_PARALLEL_MACS else 1


def _parallel(part, args, n, k):
    """kernels.c's `part` (a name in Library.parts) over [0, n) cut into k parts, run at once:
    part 0 on this thread, the others on the pool's workers (or all here while another
    thread's job is out). args: the part's integers and addresses, None for NULL; it returns
    once every part is done."""
    lib = _lib
    fn, array = lib.parts[part], (ctypes.c_int64 * len(args))(*(a or 0 for a in args))
    if k > 1:
        wakes = lib.wakes if len(lib.wakes) >= k else _start_workers(lib, k)
        asleep = lib.pool_post(fn, array, n, k)
        if asleep >= 0:
            for w in range(1, k):
                if asleep >> w & 1:
                    wakes[w].release()
            lib.pool_join()  # (ctypes lets go of the GIL: the workers' wake-up needs it)
            return
    lib.pool_inline(fn, array, n, k)


def _start_workers(lib, k):
    with _start_lock:
        if len(lib.wakes) == 1:  # the spin in pauses, timed once per build
            t = time.perf_counter()
            lib.pool_pause(20000)
            pause = max((time.perf_counter() - t) / 20000, 1e-10)
            lib.pool_set_spin(int(SPIN_SECONDS / pause))
            _pooled.append(lib)
        while len(lib.wakes) < k:
            wake, w = threading.Semaphore(0), len(lib.wakes)
            threading.Thread(target=_work, args=(lib, w, wake), daemon=True,
                             name=f"ember-native-{w}").start()
            lib.wakes.append(wake)
    return lib.wakes


def _work(lib, w, wake):
    seen = 0  # the last job this worker saw
    while True:
        seen = lib.pool_work(w, seen)  # (returns after SPIN_SECONDS without a job)
        wake.acquire()


def _forget_pool():  # a forked child has none of the pool's threads: it starts its own
    for lib in _pooled:
        del lib.wakes[1:]
        lib.pool_reset()
    _pooled.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


_BLAS_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
# OpenBLAS runs a GEMM of fewer multiply-adds than this on the calling thread itself (its
# interface/gemm.c: 65536 x GEMM_MULTITHREAD_THRESHOLD 4): no need to set its thread count
_BLAS_THREADS_FROM = 1 << 18
# Products from this many multiply-adds may be split over the pool; smaller ones run whole on
# the calling thread: a hand-off to a sleeping worker costs tens of microseconds, and the NumPy
# path's convolutions (stride 2, groups) make many products of a few million (measured no
# faster split, on 2 cores). MNIST's Linear 11616 -> 32 at batch 64 is 24M, the MLP's 12.8M.
MIN_PARALLEL_GEMM = 1 << 23
# An instance with no thread cap leaves products from this many multiply-adds to OpenBLAS's own
# threads. Smaller ones split over the pool with OpenBLAS single-threaded: its workers, woken
# by one GEMM, busy-wait ~0.1 s after it and took a core from the convolutions that follow
# (MNIST's train step, 3 GEMMs of 24M: 2x its CPU time on 2 cores, the same wall time as 1)
OWN_BLAS_FROM = 1 << 27
_blas_lock = threading.Lock()
_blas_users = 0     # ember's GEMMs running now (any thread)
_blas_threads = 1   # OpenBLAS's thread count before the first of them set it to 1


def _blas_single(enter):
    """OpenBLAS single-threaded from the first of ember's concurrent GEMMs (enter=True) to the
    last (enter=False), its own count restored then. No OpenBLAS found: nothing to do."""
    global _blas_users, _blas_threads
    blas = _openblas()
    if blas is None:
        return
    with _blas_lock:
        if enter:
            if _blas_users == 0:
                _blas_threads = blas[1]()
                blas[0](1)
            _blas_users += 1
        else:
            _blas_users -= 1
            if _blas_users == 0:
                blas[0](_blas_threads)


def matmul(a, b):
    """np.matmul with OpenBLAS single-threaded, a large float GEMM split over the pool (where
    that measured faster on this machine: _matmul): a batch by its first dim, a single product
    by the rows of a (or, when b has more columns, the columns of b), each part BLAS calls
    into its slice of the result."""
    if a.dtype not in _BLAS_DTYPES or b.dtype not in _BLAS_DTYPES or a.ndim < 2 or (
            b.ndim < 2 or a.shape[-2] * a.shape[-1] * b.shape[-1] < _BLAS_THREADS_FROM):
        return np.matmul(a, b)  # (no BLAS, or one that runs on the calling thread anyway)
    if getattr(kernels.active(), "threads", None) is None and (
            max(a.size * b.shape[-1], b.size * a.shape[-2]) >= OWN_BLAS_FROM):
        # no cap on this instance's threads: for a large product the BLAS's own threads beat
        # splitting it over the pool (H200 host, 1024^3: the split was 1.41x NumPy's time on
        # 2 cores, 5.4x on 16, where the pool stops at 8 threads of a single-threaded BLAS)
        return np.matmul(a, b)
    _blas_single(True)
    try:
        return _matmul(a, b)
    finally:
        _blas_single(False)


def _matmul(a, b):
    (m, k), n = a.shape[-2:], b.shape[-1]
    threads = _threads()
    if threads == 1 or a.dtype != b.dtype or m * n * k < MIN_PARALLEL_GEMM or (
            b.shape[-2] != k) or not a.size or not b.size or _cblas() is None:
        return np.matmul(a, b)  # (a mismatch: NumPy's own error)
    # (two matrices, a training step's products: no broadcasting to work out)
    batch = () if a.ndim == b.ndim == 2 else np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    # split over the pool, or whole on this thread: measured on this machine (ember.autotune),
    # split first (the default). A hand-off costs ~1 us to a worker still spinning after the
    # last job, 35-100 us to one asleep (a 2-vCPU VM); an MLP's 784 -> 256 at batch 64 (12.8M
    # multiply-adds) took 200 us whole and 120 us split over 2 (OpenBLAS's 2 threads: 130)
    key = (device(), threads, a.dtype.char, bucket(math.prod(batch)), bucket(m), bucket(k),
           bucket(n))

    def run(how):
        return _split(a, b, batch, threads) if how == "split" else np.matmul(a, b)
    return run(autotune.choose("native.gemm", key, ("split", "whole"), run))


def _split(a, b, batch, threads):
    """a @ b in up to `threads` parts at once (kernels.c's gemm_part, the BLAS's cblas_?gemm
    on each): items of the batch, else rows of a, else columns of b."""
    gemm = _cblas()
    (m, k), n = a.shape[-2:], b.shape[-1]
    (a, ta, lda, at), (b, tb, ldb, bt) = _operand(a, batch, m, k), _operand(b, batch, k, n)
    items = math.prod(batch)
    out = np.empty(batch + (m, n), a.dtype)
    axis, size = (0, items) if items >= threads else (1, m) if m >= n else (2, n)
    double = a.dtype == np.float64
    args = (gemm[double], double | gemm[2] << 1, axis, _at(a), _at(b),
            _at(out), m, n, k, ta, lda, tb, ldb, _at(at), _at(bt), items)
    _parallel("gemm", args, size, min(threads, size))
    return out


_NO_OFFSETS = np.zeros(1, np.int64)  # a single product's one item starts at its array's start


def _operand(x, batch, rows, cols):
    """How gemm_part reads x [..., rows, cols] broadcast to `batch`: (the array to pass: x, or
    a C-contiguous copy where BLAS cannot read x's layout; transposed; its leading dimension;
    each batch item's offset in elements)."""
    strides = x.strides if x.ndim == 2 and not batch else np.broadcast_to(
        x, batch + (rows, cols)).strides
    *outer, sr, sc = (st // x.itemsize for st in strides)
    whole = not any(st % x.itemsize or st < 0 for st in strides)  # (in elements, forward)
    if whole and sc == 1 and sr >= max(cols, 1):
        transposed, ld = 0, sr
    elif whole and sr == 1 and sc >= max(rows, 1):
        transposed, ld = 1, sc
    else:  # (reversed, a row or a column of stride 0, say): copied
        return _operand(np.ascontiguousarray(x), batch, rows, cols)
    if not batch:
        return x, transposed, ld, _NO_OFFSETS
    offsets = np.zeros(batch, np.int64)
    for d, (size, st) in enumerate(zip(batch, outer)):
        offsets += (np.arange(size, dtype=np.int64) * st).reshape((size,) + (1,) * (
            len(batch) - d - 1))
    return x, transposed, ld, offsets.reshape(-1)


# ---- elementwise ----------------------------------------------------------------------
def _fits(a):
    return a.dtype == _F32 and a.flags.c_contiguous


def gelu(x, out=None):
    if not _fits(x) or (out is not None and (not _fits(out) or out.shape != x.shape)):
        return None
    if out is None:
        out = np.empty(x.shape, _F32)
    _lib.gelu_f32(_at(x), _at(out), x.size, _PQ_AT)
    return out


def gelu_grad(g, x, out=None):
    if not (_fits(g) and _fits(x) and g.shape == x.shape) or (
            out is not None and (not _fits(out) or out.shape != x.shape)):
        return None
    if out is None:
        out = np.empty(x.shape, _F32)
    _lib.gelu_grad_f32(_at(g), _at(x), _at(out), x.size, _PQ_AT)
    return out


def mask_where(x, mask, value, out=None):
    """out = mask ? value : x for float32 x, a bool mask of its shape and a Python number
    (ReLU's gradient), in one pass (NumPy's masked copy branches on every element)."""
    if not (_fits(x) and mask.dtype == np.bool_ and mask.flags.c_contiguous
            and mask.shape == x.shape and isinstance(value, (int, float))) or (
            out is not None and not (_fits(out) and out.shape == x.shape)):
        return None
    if float(np.float32(value)) != value and value == value:
        return None  # not exact in float32: NumPy's own conversion rules
    if out is None:
        out = np.empty(x.shape, _F32)
    _lib.mask_where_f32(_at(x), _at(mask), value, _at(out), x.size)
    return out


def relu(x, out=None):
    """max(x, 0) for float32 x, NaN kept, in one pass, or None."""
    if not _fits(x) or (out is not None and not (_fits(out) and out.shape == x.shape)):
        return None
    if out is None:
        out = np.empty(x.shape, _F32)
    _lib.relu_f32(_at(x), _at(out), x.size)
    return out


# ---- convolutions at stride 1 (kernels.c: on the grid) --------------------------------------
class _Geometry:
    """A stride-1 convolution's grid (kernels.c): x [N, C, H, W] (C-contiguous, cropped where
    the padding is negative) padded by (top, left) into hp x wp planes, the taps' offsets on
    them (int32), and the per-thread scratch the kernels pad `block` images at a time into
    (conv2d_weight: as many as its kernel asks for; conv2d: one)."""

    def __init__(self, lib, x, padding, kernel, dilation, out_hw, o, weight_grad=False):
        (kh, kw), (dh, dw), (oh, ow) = kernel, dilation, out_hw
        (top, _), (left, _) = padding
        self.hp, self.wp = oh + dh * (kh - 1), ow + dw * (kw - 1)
        self.x = np.ascontiguousarray(x[:, :, max(-top, 0):, max(-left, 0):])
        self.top, self.left = max(top, 0), max(left, 0)
        self.off = np.array([i * dh * self.wp + j * dw for i in range(kh) for j in range(kw)],
                            np.int32)
        c = x.shape[1]
        self.block = lib.conv2d_weight_block(c, self.hp, self.wp, o, oh, ow) if weight_grad \
            else 1
        self.scratch = lib.conv2d_scratch(c, self.hp, self.wp, int(self.off[-1]), o, oh, ow,
                                          self.block)

    def args(self):
        """kernels.c's (x, c, h, w, top, left, hp, wp) arguments."""
        n, c, h, w = self.x.shape
        return (_at(self.x), c, h, w, self.top, self.left, self.hp, self.wp)

    def scratches(self, parts):
        return np.empty((parts, self.scratch), _F32)


def _conv(lib, x, w, b, padding, dilation, out_hw):
    """The stride-1 convolution of x with w [O, C, KH, KW] (+ b): [N, O, OH, OW]."""
    n, c = x.shape[:2]
    o, _, kh, kw = w.shape
    t, ob = kh * kw, lib.block
    geo = _Geometry(lib, x, padding, (kh, kw), dilation, out_hw, o)
    blocks = -(-o // ob)
    wpk = np.zeros((blocks * ob, c, t), _F32)  # [O/OB][C][T][OB]: the tile's weights in a row
    wpk[:o] = w.reshape(o, c, t)
    wpk = np.ascontiguousarray(wpk.reshape(blocks, ob, c, t).transpose(0, 2, 3, 1))
    bias = None
    if b is not None:
        bias = np.zeros(blocks * ob, _F32)
        bias[:o] = b
    out = np.empty((n, o) + tuple(out_hw), _F32)
    parts = _parts(n, n * o * c * t * out_hw[0] * geo.wp)
    scratch = geo.scratches(parts)
    args = geo.args() + (_at(wpk), None if bias is None else _at(bias),
                         _at(geo.off), t, _at(out), o) + tuple(out_hw)
    _parallel("conv2d", args + (_at(scratch), scratch.shape[1]), n, parts)
    return out


def _takes(stride, groups, *arrays):
    return stride == (1, 1) and groups == 1 and all(
        a.dtype == _F32 and a.size for a in arrays)


def conv2d(x, w, b, stride, padding, dilation, groups, out_hw):
    if not _takes(stride, groups, x, w, *(() if b is None else (b,))):
        return None
    return _conv(_lib, x, w, b, padding, dilation, out_hw)


def conv_transpose2d(x, w, stride, padding, dilation, groups, out_hw):
    """At stride 1, conv2d of x padded by d (k - 1) - padding with the kernel flipped and its
    two channel axes swapped (when that padding is not negative). A weight that is not finite
    would meet the padding's zeros (inf x 0: NaN where the scatter-add has no product at all):
    NumPy's general path takes it."""
    if not _takes(stride, groups, x, w) or not np.isfinite(w).all():
        return None
    kh, kw = w.shape[2:]
    pad = tuple((d * (k - 1) - a, d * (k - 1) - z)
                for d, k, (a, z) in zip(dilation, (kh, kw), padding))
    if min(min(p) for p in pad) < 0:
        return None
    flipped = w[:, :, ::-1, ::-1].transpose(1, 0, 2, 3)
    return _conv(_lib, x, flipped, None, pad, dilation, out_hw)


def conv2d_weight(x, g, kernel, stride, padding, dilation, groups):
    kh, kw = kernel
    if not _takes(stride, groups, x, g) or kh * kw < 4:  # (1x1: a plain GEMM, BLAS's)
        return None
    lib, t = _lib, kh * kw
    n, c = x.shape[:2]
    o, oh, ow = g.shape[1:]
    geo = _Geometry(lib, x, padding, kernel, dilation, (oh, ow), o, weight_grad=True)
    g = np.ascontiguousarray(g)
    parts = _parts(n, n * o * c * t * oh * geo.wp)
    scratch = geo.scratches(parts)
    sums = np.zeros((parts, o, c, t, lib.vector), _F32)
    args = (_at(g), o, oh, ow) + geo.args() + (_at(geo.off), t)
    _parallel("conv2d_weight", args + (_at(sums), sums[0].size, geo.block,
                                       _at(scratch), scratch.shape[1]), n, parts)
    return sums.sum(axis=(0, 4), dtype=_F32).reshape(o, c, kh, kw)



__all__ = ["KERNELS", "Native", "build", "cache_dir", "compiler", "load", "status"]
