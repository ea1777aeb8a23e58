"""WebAssembly SIMD kernels for NdArray inside Pyodide: the float32 GEMM behind matmul and the
convolutions, on NumPy's own buffers (zero copy).

NumPy in Pyodide has no BLAS and no SIMD; kernels.c is a packed, register-blocked SIMD128 GEMM
(relaxed SIMD where the engine has it), 5-20x faster there. KERNELS (a `Wasm`, the set of
ember.ops.kernels NdArray(kernels="auto") runs with inside Pyodide) takes float32 products
above a measured break-even size and hands everything else to np.matmul. The same goes for
the other inner loops a batch-1 forward spends its time in, where NumPy there runs one
scalar element at a time (~1-2 ns each): im2col's strided copy, max pooling's indices and its
gather, comparisons with a scalar and the select of one (ReLU), add and multiply with a
per-channel operand (bias, BatchNorm) — each 4-8x faster than NumPy there on activations.
Convolutions run in one call each (columns, GEMM, bias), 3x3 ones at stride 1 through
Winograd F(2x2, 3x3). The kernels load on the set's first call inside Pyodide; natively nothing
here is loaded. EMBER_WASM=0 in the environment keeps NumPy.

A plan that ember.jit captured goes further (compile_plan, at the end): its kernel calls are
strung into programs that one call runs, so a replayed model pays the ctypes call and the
Python around each op once per program instead of once per op.

How the module is loaded: as an Emscripten side module through `ctypes.CDLL`, i.e. Pyodide's
own dynamic loader (the one that loads NumPy's extension modules) links it into Pyodide's
memory and table. That needs no JavaScript at all, so it works the same on a page's main
thread, in ember's Web Worker and in Node (the conformance run), with no hook into how a page
boots Pyodide (the JS-glue route needs Pyodide's WebAssembly.Memory, which 0.27.7 does not
expose: a page would have to intercept WebAssembly.instantiate during loadPyodide). A call
costs ~5-10 us through ctypes, about what a call into a JS function costs through the FFI.
The relaxed-SIMD build is tried first: an engine without relaxed SIMD refuses to compile it
(OSError), and the SIMD128 build loads instead.
"""

import ctypes
import functools
import math
import threading
import warnings
from pathlib import Path

import numpy as np
from numpy.lib.array_utils import byte_bounds

from ...ops import kernels

HERE = Path(__file__).resolve().parent
VARIANTS = ("relaxed", "simd128")  # the order they are tried in

# Below these sizes NumPy is faster than a call through ctypes (~10-13 us) plus the kernel.
# Measured in Node 20, Pyodide 0.27.7 (medians; headless Chromium is alike):
#   GEMM m=n=k:         20^3 NumPy 5.8 us, wasm 12.3;  24^3 8.6 / 12.7;  32^3 18.7 / 13.5
#   im2col copy 3x3:    4608 elements NumPy 10.4 us, wasm 13.3;  9216: 19.7 / 15.4
#   max-pool indices:   NumPy's path costs ~130 us at any size (13 array passes); wasm ~10
MIN_MACS = 20000     # multiply-adds (m*n*k) of one product
MIN_COPY = 8192      # elements of a strided copy
MIN_POOL = 1         # outputs of a max pooling: always
# A 3x3 stride-1 convolution goes through Winograd F(2x2, 3x3) (2.25x fewer multiply-adds, plus
# transforms) from these channel counts and output pixels on; measured (Node, Chromium alike):
#   32 -> 64 channels, 14x14: 167 vs 238 us direct;  8 -> 8, 10x10: 20.0 / 23.4;
#   64 -> 64, 7x7: 169 / 155 (the weights' transform outweighs 49 pixels);
#   4 -> 64, 28x28: 127 / 122
MIN_WINOGRAD = 8
MIN_WINOGRAD_PIXELS = 100
MIN_FLAT = 4096      # elements of a gather or a select (NumPy runs either a scalar at a time,
                     # ~1-2 ns an element, plus a pass per bounds check)

_F32 = np.dtype(np.float32)
_BYTE = ctypes.c_byte
_BOOL = np.dtype(np.bool_)
_I32 = np.dtype(np.int32)
_lib = None        # the loaded ctypes.CDLL, or None
_variant = None    # which build it is
_work = None       # the scratch array sgemm packs into (grown on demand, kept)
_work_ptr = 0
_work_len = 0
_sizes = (0, 0, 0, 0)  # the build's MR, NR, KC, MC (its workspace formula's constants)


def load():
    """Load the fastest build this engine runs; its variant name. Raises OSError when none
    loads (no .wasm in this install, or an engine without SIMD)."""
    global _lib, _variant, _sizes
    if _lib is not None:
        return _variant
    errors = []
    for variant in VARIANTS:
        path = HERE / f"ember_kernels_{variant}.wasm"
        if not path.is_file():
            errors.append(f"{path.name}: missing (build it: make kernels)")
            continue
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as e:
            errors.append(f"{path.name}: {str(e).splitlines()[-1]}")
            continue
        _sizes = (lib.sgemm_mr(), lib.sgemm_nr(), lib.sgemm_kc(), lib.sgemm_mc())
        _lib, _variant = lib, variant
        _warm_up()
        return variant
    raise OSError("no WebAssembly kernel module loads here: " + "; ".join(errors))


def _warm_up():
    # the first calls run in the engine's baseline tier (3-4x slower; V8 tiers a function up
    # between calls, not inside one): tier every kernel up now, on small inputs (~1 ms)
    a = np.ones((64, 64), _F32)
    x = np.ones((1, 4, 16, 16), _F32)
    x8, w8 = np.ones((1, 8, 12, 12), _F32), a.reshape(-1)[:576].reshape(8, 8, 3, 3)
    flat, mask, idx = a.reshape(-1), a > 0, np.arange(4096, dtype=np.int32)
    relu_program = _words([PROGRAM_KERNELS["relu_f32"][0], 3, _addr(a), _addr(a), a.size])
    k = KERNELS
    for _ in range(3):
        k.take(flat, idx)
        k.where(mask, 0, a)
        k.compare(np.less_equal, a, 0)
        k.add(a, a[:1])
        k.multiply(a, a)
        k._gemm(a, a)
        k._gemm(a[:1], a)
        k._gemm(a[:1], a.T)
        _lib.copy_strided(a.ctypes.data, a.T.ctypes.data, 1, 1, 1, 1, 64, 64, 0, 0, 0, 0, 1, 64)
        k.max_pool2d(x, (3, 3), (2, 2), (1, 1), (1, 1), (8, 8))
        k.relu(a, out=a)
        k.conv2d(x, a.reshape(-1)[:288].reshape(8, 4, 3, 3), a[0, :8], (1, 1),
                 ((0, 0), (0, 0)), (1, 1), 1, (14, 14))
        k.conv2d(x8, w8, None, (1, 1), ((1, 1), (1, 1)), (1, 1), 1, (12, 12))  # Winograd
        _lib.run_program(_addr(relu_program), len(relu_program))  # a replay's programs


def variant():
    """The kernel build in use ('relaxed' or 'simd128'), or None when NumPy does it all."""
    return _variant


_failed = False  # a load failed: NumPy computes, and no second attempt (nor warning)


def _ready():
    """True once the kernels are loaded; the first call loads them, or warns once and leaves
    NumPy computing (no .wasm in this install, or an engine without SIMD). Loading costs
    50-150 ms in Pyodide (the dynamic linker, compiling, tiering the kernels up): at
    `import ember` that delayed every page's `ready`, and a page that never computes never
    needs it."""
    global _failed
    if _lib is not None:
        return True
    if not _failed:
        try:
            load()
            return True
        except OSError as error:
            _failed = True
            warnings.warn(f"ember: WebAssembly kernels unavailable, NumPy computes everything "
                          f"({error})", RuntimeWarning, stacklevel=4)
    return False


def _kernel(method):
    """A method of the set that runs on the kernels once they load (else NumPy's method of
    the same name), its result noted while compile_plan records."""
    numpy_one = getattr(kernels.NUMPY, method.__name__)  # (a bound method, or a ufunc)

    @functools.wraps(method)
    def run(self, *args, **kwargs):
        if self.lib is None and not _ready():
            return numpy_one(*args, **kwargs)
        out = method(self, *args, **kwargs)
        if self.routed is not None:
            self.routed.append(out)
        return out
    return run


def _addr(x):
    """The address of x's first element. `x.ctypes.data` costs ~3.7 us inside Pyodide (it builds
    a ctypes helper object), the array interface ~2.3: a few of these per kernel call add up."""
    return x.__array_interface__["data"][0]


def _new_addr(x):
    """The address of an array this module just allocated (writeable, C-contiguous, not empty):
    through the buffer protocol, ~1 us inside Pyodide."""
    return ctypes.addressof(_BYTE.from_buffer(x))


def _workspace(floats):
    global _work, _work_ptr, _work_len
    if floats > _work_len:
        _work_len = max(floats, 2 * _work_len)
        _work = np.empty(_work_len, _F32)
        _work_ptr = _work.ctypes.data
    return _work_ptr


def _gemm_work(n, k):
    """Floats of scratch sgemm needs for a product with n columns and depth k: the module's
    sgemm_work_size, computed here from its constants (read once) to save a call."""
    mr, nr, kc, mc = _sizes
    return min(k, kc) * -(-n // nr) * nr + mc * kc + mr * nr


@functools.lru_cache(maxsize=4096)
def _pool_args(shape, strides, dtype, kernel, stride, padding, dilation, out_hw):
    """A pooling's output shape and the kernel call's int arguments, or None where NumPy's
    implementation runs; remembered per geometry: in Pyodide this Python cost more than the
    kernel."""
    n, c = shape[:2]
    if (dtype != _F32 or n * c * out_hw[0] * out_hw[1] < MIN_POOL
            or any(s & 3 for s in strides)):
        return None
    return (n, c) + tuple(out_hw), (*shape, *(s >> 2 for s in strides), *kernel, *stride,
                                    *padding, *dilation, *out_hw)


def _f32_bits(value):
    """The bits of a Python number as float32, or None where float32 does not hold it exactly
    (NaN it does): there NumPy's own conversion and rounding rules apply."""
    if value == 0 and math.copysign(1.0, value) > 0:
        return 0  # ReLU's +0 without NumPy scalars (several us each inside Pyodide)
    v = np.float32(value)
    if v != value and value == value:
        return None
    return int(v.view(np.int32))


# the comparison ufuncs the kernel has, by its codes
_COMPARES = {np.equal: 0, np.not_equal: 1, np.less: 2, np.less_equal: 3, np.greater: 4,
             np.greater_equal: 5}


@functools.lru_cache(maxsize=4096)
def _rows(ashape, bshape):
    """(rows, inner, channels) when b broadcasts against a as one value per row of a (b's sizes
    equal a's on one block of dims and are 1 elsewhere): a [N, C, H, W] with b [1, C, 1, 1] is
    N*C rows of H*W, b[r % C] for row r; b of a's shape is a.size rows of 1. Else None.
    Remembered per pair of shapes: a few recur every forward."""
    size = math.prod(ashape)
    if bshape == ashape:
        return size, 1, size
    if len(bshape) > len(ashape):
        return None
    bs = (1,) * (len(ashape) - len(bshape)) + bshape
    dims = [i for i, d in enumerate(bs) if d != 1]
    if not dims:
        return 1, size, 1
    last = dims[-1]
    if any(bs[i] != ashape[i] for i in range(dims[0], last + 1)):
        return None
    rows = math.prod(ashape[:last + 1])
    return rows, size // rows, math.prod(bshape)


class Wasm(kernels.Kernels):
    """NdArray's set inside Pyodide (NdArray(kernels="auto") there): the WebAssembly SIMD
    kernels, loaded on first use (NumPy's set computes where none loads). The size thresholds
    are attributes, so compile_plan's recording set can lower them without touching the
    module."""

    name = "wasm"
    min_macs, min_copy, min_flat = MIN_MACS, MIN_COPY, MIN_FLAT
    routed = None  # compile_plan's recording set: the list each routed result is noted in

    @property
    def lib(self):
        return _lib

    def _gemm(self, a, b):
        """a [m, k] @ b [k, n] (float32, any strides) into a new C-contiguous array."""
        m, k = a.shape
        n = b.shape[1]
        out = np.empty((m, n), _F32)
        self._call(a.strides, b.strides, _addr(a), _addr(b), _new_addr(out), m, n, k)
        return out

    def _call(self, sa, sb, pa, pb, pc, m, n, k):
        """One GEMM on raw addresses: sa, sb are the (row, column) byte strides of A and B; C is
        C-contiguous [m, n]."""
        work = _workspace(_gemm_work(n, k))
        status = self.lib.sgemm(m, n, k, pa, sa[0] >> 2, sa[1] >> 2, pb, sb[0] >> 2,
                                sb[1] >> 2, pc, n, work, _work_len)
        if status:  # the module sizes the workspace itself: this is a bug, not bad input
            raise RuntimeError(f"sgemm refused {m}x{k} @ {k}x{n} (status {status})")

    @_kernel
    def matmul(self, a, b):
        """np.matmul(a, b), float32 products of at least min_macs multiply-adds on the
        kernels."""
        if (a.dtype != _F32 or b.dtype != _F32 or a.ndim < 2 or b.ndim < 2
                or a.shape[-1] != b.shape[-2]):
            return np.matmul(a, b)  # other dtypes, vectors; NumPy also words the shape errors
        m, k = a.shape[-2:]
        n = b.shape[-1]
        if m * n * k < self.min_macs or any(s & 3 for s in a.strides + b.strides):
            return np.matmul(a, b)  # (strides that are not whole floats: odd as_strided views)
        if a.ndim == 2 and b.ndim == 2:
            return self._gemm(a, b)
        if a.size == m * k and b.size == k * n:
            # every batch dim is 1 (a convolution at batch 1: [1, O, K] @ [1, 1, K, P]): one GEMM
            # on the matrices' own views, skipping the batch bookkeeping below (~100 us in Pyodide)
            lead = (1,) * (max(a.ndim, b.ndim) - 2)
            return self._gemm(a.reshape(m, k), b.reshape(k, n)).reshape(lead + (m, n))
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        out = np.empty(batch + (m, n), _F32)
        # one GEMM per batch entry; a batch dim an input lacks or has as 1 is broadcast (stride 0)
        nd = len(batch)
        steps = []
        for x in (a, b, out):
            lead = nd - x.ndim + 2
            steps.append((0,) * lead + tuple(0 if d == 1 else s
                                             for d, s in zip(x.shape[:-2], x.strides[:-2])))
        (sa, sb, so), ra, rb = steps, a.strides[-2:], b.strides[-2:]
        pa0, pb0, pc0 = _addr(a), _addr(b), _new_addr(out)
        for index in np.ndindex(*batch):
            pa, pb, pc = pa0, pb0, pc0
            for i, v in enumerate(index):
                pa += v * sa[i]
                pb += v * sb[i]
                pc += v * so[i]
            self._call(ra, rb, pa, pb, pc, m, n, k)
        return out

    @_kernel
    def conv2d(self, x, w, b, stride, padding, dilation, groups, out_hw):
        """conv2d's float32 result [N, O, OH, OW] with its bias (b or None) on the kernel: the
        columns, the GEMM and the bias add in one call, per image (the columns of one image stay in
        cache), or Winograd's transforms and 16 GEMMs for 3x3 at stride 1 (MIN_WINOGRAD); None where
        NumPy's path runs (other dtypes, products below self.min_macs)."""
        n, c, h, wd = x.shape
        o, cg, kh, kw = w.shape
        oh, ow = out_hw
        k, p = cg * kh * kw, oh * ow
        if (x.dtype != _F32 or w.dtype != _F32 or (b is not None and b.dtype != _F32)
                or o * p * k < self.min_macs or any(s & 3 for s in x.strides)
                or not w.flags.c_contiguous or (b is not None and not b.flags.c_contiguous)):
            return None
        out = np.empty((n, o, oh, ow), _F32)
        if out.size == 0:
            return out
        (top, _), (left, _) = padding
        if (kh == kw == 3 and stride == (1, 1) and dilation == (1, 1) and groups == 1
                and min(c, o) >= MIN_WINOGRAD and p >= MIN_WINOGRAD_PIXELS):
            floats = self.lib.conv2d_winograd_work_size(c, o, oh, ow)
            status = self.lib.conv2d_winograd_f32(
                _addr(x), n, c, h, wd, *(s >> 2 for s in x.strides), _addr(w), o, top, left,
                oh, ow, 0 if b is None else _addr(b), _new_addr(out), _workspace(floats), floats)
            if status:
                raise RuntimeError(f"conv2d_winograd_f32 refused x {x.shape} w {w.shape}")
            return out
        gemm = _gemm_work(p, k)
        work = _workspace(k * p + gemm)
        status = self.lib.conv2d_f32(
            _addr(x), n, c, h, wd, *(s >> 2 for s in x.strides), _addr(w), o, kh, kw, *stride,
            top, left, *dilation, groups, oh, ow, 0 if b is None else _addr(b), _new_addr(out),
            work, work + 4 * k * p, gemm)
        if status:  # the workspace is sized here from the module's own constants: a bug
            raise RuntimeError(f"conv2d_f32 refused x {x.shape} w {w.shape} (status {status})")
        return out

    @_kernel
    def copyto(self, dst, src):
        """np.copyto(dst, src) for a C-contiguous float32 dst and a same-shaped float32 src (a
        strided view of up to 6 dims) on the kernel; anything else by NumPy."""
        if (dst.dtype != _F32 or src.dtype != _F32 or dst.shape != src.shape or src.ndim > 6
                or dst.size < self.min_copy or not dst.flags.c_contiguous
                or any(s & 3 for s in src.strides)):
            return np.copyto(dst, src)
        pad = 6 - src.ndim
        shape = (1,) * pad + src.shape
        strides = (0,) * pad + tuple(s >> 2 for s in src.strides)
        self.lib.copy_strided(_addr(dst), _addr(src), *shape, *strides)

    def _pool(self, x, kernel, stride, padding, dilation, out_hw, values):
        """One scan of the pooling kernel: (indices, None), or (None, values) with the indices in
        scratch, or None where NumPy's implementation runs (the op's shape rule has checked the
        geometry already)."""
        args = _pool_args(x.shape, x.strides, x.dtype, kernel, stride, padding, dilation, out_hw)
        if args is None:
            return None
        shape, ints = args
        if values:  # the indices only as the scan's scratch
            vals = np.empty(shape, _F32)
            self.lib.max_pool2d_indices(_addr(x), *ints, _workspace(math.prod(shape)),
                                        _new_addr(vals))
            return None, vals
        idx = np.empty(shape, np.int32)
        self.lib.max_pool2d_indices(_addr(x), *ints, _new_addr(idx), 0)
        return idx, None

    @_kernel
    def max_pool2d_indices(self, x, kernel, stride, padding, dilation, out_hw):
        """max_pool2d_indices' int32 [N, C, OH, OW] for float32 x on the kernel, else None."""
        got = self._pool(x, kernel, stride, padding, dilation, out_hw, False)
        return None if got is None else got[0]

    @_kernel
    def max_pool2d(self, x, kernel, stride, padding, dilation, out_hw):
        """max_pool2d's float32 [N, C, OH, OW] on the kernel (it finds the indices on the way, into
        scratch), else None."""
        got = self._pool(x, kernel, stride, padding, dilation, out_hw, True)
        return None if got is None else got[1]

    @_kernel
    def relu(self, x, out=None):
        """np.maximum(x, 0, out=out) for a contiguous float32 x (out: None or x itself, NdArray's
        ownership rule) on the kernel; anything else by NumPy."""
        if (x.dtype != _F32 or x.size < self.min_flat or not x.flags.c_contiguous
                or (out is not None and out is not x)):
            return kernels.Kernels.relu(self, x, out=out)
        if out is None:
            out = np.empty(x.shape, _F32)
            pout = _new_addr(out)
        else:
            pout = _addr(out)
        self.lib.relu_f32(pout, _addr(x), x.size)
        return out

    @_kernel
    def take(self, x, idx):
        """x[idx] for a contiguous 1-D float32 x and contiguous int32 indices on the kernel; None
        for anything else, or when an index is out of range (the caller's path reports it)."""
        n = idx.size
        if (x.dtype != _F32 or idx.dtype != _I32 or x.ndim != 1 or n < self.min_flat
                or not (x.flags.c_contiguous and idx.flags.c_contiguous)):
            return None
        out = np.empty(idx.shape, _F32)
        if self.lib.take_f32(_new_addr(out), _addr(x), x.size, _addr(idx), n):
            return None
        return out

    @_kernel
    def where(self, mask, value, x):
        """np.where(mask, value, x) for a float32 x, a bool mask of its shape (both contiguous) and
        a Python number that float32 holds exactly, on the kernel; anything else by NumPy."""
        if (x.dtype != _F32 or mask.dtype != _BOOL or x.shape != mask.shape
                or x.size < self.min_flat or type(value) not in (int, float)
                or not (x.flags.c_contiguous and mask.flags.c_contiguous)):
            return np.where(mask, value, x)
        bits = _f32_bits(value)
        if bits is None:
            return np.where(mask, value, x)
        out = np.empty(x.shape, _F32)
        self.lib.select_f32(_new_addr(out), _addr(mask), bits, _addr(x), x.size)
        return out

    @_kernel
    def compare(self, ufunc, a, b):
        """ufunc(a, b) for a comparison ufunc; a contiguous float32 array against a Python number
        that float32 holds exactly (NumPy compares in float32 there too) on the kernel."""
        code = _COMPARES.get(ufunc)
        if (code is None or type(a) is not np.ndarray or type(b) not in (int, float)
                or a.dtype != _F32 or a.size < self.min_flat or not a.flags.c_contiguous):
            return ufunc(a, b)
        bits = _f32_bits(b)
        if bits is None:
            return ufunc(a, b)
        out = np.empty(a.shape, _BOOL)
        self.lib.compare_f32(_new_addr(out), _addr(a), bits, code, a.size)
        return out

    def _binary(self, code, ufunc, a, b, out):
        if (type(a) is not np.ndarray or type(b) is not np.ndarray or a.dtype != _F32
                or b.dtype != _F32):
            return ufunc(a, b, out=out)  # Python scalars, other dtypes
        if b.size > a.size:
            a, b = b, a  # both ops commute: the larger operand sets the rows
        if a.size < self.min_flat:  # (first: an empty operand has no rows to divide by)
            return ufunc(a, b, out=out)
        geometry = _rows(a.shape, b.shape)
        if (geometry is None
                or (geometry[1] < 4 and geometry[2] != geometry[0])  # rows too short to pay
                or not (a.flags.c_contiguous and b.flags.c_contiguous)
                or (out is not None and not (out.dtype == _F32 and out.shape == a.shape
                                             and out.flags.c_contiguous))):
            return ufunc(a, b, out=out)
        if out is None:
            out = np.empty(a.shape, _F32)
            pout = _new_addr(out)
        else:  # an input handed over by NdArray's ownership rule (see the kernel: aliasing is fine)
            pout = _addr(out)
        self.lib.rows_f32(pout, _addr(a), _addr(b), *geometry, code)
        return out

    @_kernel
    def add(self, a, b, out=None):
        """np.add(a, b, out=out); float32 arrays of one shape, or with a per-channel operand (a
        bias), on the kernel."""
        return self._binary(0, np.add, a, b, out)

    @_kernel
    def multiply(self, a, b, out=None):
        """np.multiply(a, b, out=out), as add."""
        return self._binary(1, np.multiply, a, b, out)

    def compile_plan(self, steps, table, inputs, outputs, execute):
        return compile_plan(steps, table, inputs, outputs, execute)


KERNELS = Wasm()


# ---- lowering a replayed plan (ember.jit) to one call per run of kernels ----------------------
# run_program's codes, in order, and where each kernel takes pointers (the rest are ints)
PROGRAM_KERNELS = {
    "sgemm": (0, (3, 6, 9, 11)),
    "conv2d_f32": (1, (0, 9, 22, 23, 24, 25)),
    "conv2d_winograd_f32": (2, (0, 9, 15, 16, 17)),
    "rows_f32": (3, (0, 1, 2)),
    "relu_f32": (4, (0, 1)),
    "max_pool2d_indices": (5, (0, 19, 20)),
    "select_f32": (6, (0, 1, 3)),
    "compare_f32": (7, (0, 1)),
}
_PURE = {"conv2d_winograd_work_size"}  # what a wrapper asks the module on the way


class _Recording:
    """Stands in for the module while a plan is lowered: calls go through, and are noted with
    the workspace they saw."""

    def __init__(self, lib, calls):
        self._lib, self._calls = lib, calls

    def __getattr__(self, name):
        fn = getattr(self._lib, name)

        def call(*args):
            self._calls.append((name, args, _work_ptr, _work_len))
            return fn(*args)
        return call


class _Recorder(Wasm):
    """The set compile_plan runs a plan's steps with: the kernels with every call noted, each
    routed result noted, and the size thresholds at their minimum (inside a program a call
    costs nothing)."""

    min_macs = min_copy = min_flat = 1

    def __init__(self):
        self.calls, self.routed = [], []
        self._recording = _Recording(_lib, self.calls)

    @property
    def lib(self):
        return self._recording


def _word(value):
    """An int32 program word: addresses of 2 GiB and up wrap (the kernel reads them unsigned)."""
    return value - (1 << 32) if value >= 1 << 31 else value


def _words(program):
    return np.array([_word(v) for v in program], np.int32)


def compile_plan(steps, table, inputs, outputs, execute):
    """A runner for a captured plan (see ember.capture) on NdArray inside Pyodide, or None:
    every step that is one kernel call on buffers that stay put (the weights, and results this
    runner keeps and reuses: an arena) goes into a program that run_program runs in one call;
    the others (NumPy's ops, reshapes of the arguments) run as before, between programs.

    Each step runs once here with every kernel call noted: a step is lowered when exactly one
    routed function ran, returned the step's result, and called only kernels of run_program on
    memory of the plan's arguments, weights, earlier results or the workspace; with the size
    thresholds at their minimum (inside a program a call costs nothing).
    steps: (op, input slots, attrs, shape, dtype, output slot); table: the slots' constants;
    inputs: the arguments' arrays of this run (slots 0..); outputs: the result slots.
    runner(arrays) -> {slot: array} for the output slots, or None when the arguments' layout
    differs from this run's (the caller replays op by op)."""
    if _lib is None:
        return None
    values = list(table)
    values[:len(inputs)] = inputs
    dynamic = set(range(len(inputs)))  # slots whose arrays change from run to run
    layouts = [(x.shape, x.strides) for x in inputs]
    recorder = _Recorder()
    segments, program, patches, work_len = [], [], [], 0
    with kernels.using(recorder):  # (this context's ops only: other threads keep their sets)
        for op, ins, attrs, shape, dtype, out in steps:
            args = [values[s] for s in ins]
            recorder.routed.clear()
            recorder.calls.clear()
            result = op.np(*args, **attrs)
            if type(result) is not np.ndarray:
                result = np.asarray(result)
            values[out] = result
            words = _lower(ins, result, values, dynamic, recorder.routed, recorder.calls)
            if words is None:  # runs as itself, between programs
                if program:
                    segments.append((_words(program), patches))
                    program, patches = [], []
                segments.append((op, ins, attrs, shape, dtype, out))
                dynamic.add(out)
                continue
            for word, slot, offset in words[1]:
                patches.append((len(program) + word, slot, offset))
            program += words[0]
            work_len = max([work_len] + [c[3] for c in recorder.calls])
    if program:
        segments.append((_words(program), patches))
    if not any(type(s[0]) is np.ndarray for s in segments):
        return None
    constants = {s for s, v in enumerate(table) if v is not None}
    expected = {s: np.array(values[s], copy=True) for s in outputs}
    runner = _Runner(segments, values, constants, layouts, outputs, work_len, execute)
    # a safety net for the rule above (an op that changed its one kernel's result afterwards
    # in NumPy would be lowered wrongly): the first run must give what the ops gave
    got = runner(inputs)
    if not all(np.allclose(got[s], want, rtol=1e-4, atol=1e-6, equal_nan=True)
               for s, want in expected.items()):
        return None
    return runner


def _lower(ins, result, values, dynamic, routed, calls):
    """(program words, [(word, slot, offset)]) for one step, or None (see compile_plan)."""
    if not calls:
        # no kernel: a view (a reshape) of memory that stays put is lowered to nothing
        if routed or result.base is None:
            return None
        for s in ins:
            if s not in dynamic and isinstance(values[s], np.ndarray) and \
                    np.shares_memory(result, values[s]):
                return [], []
        return None
    if len(routed) != 1 or routed[0] is not result or result.base is not None:
        return None
    fixed = [(byte_bounds(v), None) for s, v in enumerate(values)
             if s not in dynamic and isinstance(v, np.ndarray) and v.size]
    moving = [(byte_bounds(values[s]), s) for s in dynamic if values[s].size]
    words, patches = [], []
    for name, args, work_ptr, work_floats in calls:
        if name in _PURE:
            continue
        if name not in PROGRAM_KERNELS:
            return None
        code, pointers = PROGRAM_KERNELS[name]
        start = len(words) + 2
        words += [code, len(args)]
        for i, arg in enumerate(args):
            if i not in pointers or arg == 0:
                words.append(arg)
                continue
            if work_ptr <= arg < work_ptr + 4 * work_floats:  # scratch: the runner's own
                words.append(arg - work_ptr)
                patches.append((start + i, "work", 0))
                continue
            slot = next((s for (lo, hi), s in moving if lo <= arg < hi), False)
            if slot is not False:
                words.append(0)
                patches.append((start + i, slot, arg - _addr(values[slot])))
            elif any(lo <= arg < hi for (lo, hi), _ in fixed):
                words.append(arg)
            else:  # memory the step made for itself and let go: not replayable
                return None
    return words, patches


class _Runner:
    """Runs a lowered plan: programs with the run's addresses patched in, other steps as ops."""

    def __init__(self, segments, values, constants, layouts, outputs, work_len, execute):
        self.work = np.empty(max(work_len, 1), _F32)
        work = _addr(self.work)
        self.segments = []
        for seg in segments:
            if type(seg[0]) is np.ndarray:
                prog, patches = seg
                moving = []
                for word, slot, offset in patches:
                    if slot == "work":
                        prog[word] = _word(int(prog[word]) + work)
                    else:
                        moving.append((word, slot, offset))
                seg = (prog, _addr(prog), len(prog), moving)
            self.segments.append(seg)
        self.values = values  # the arena: weights and the lowered steps' results, kept
        self.constants = constants
        self.layouts = layouts
        self.outputs = outputs
        self.execute = execute
        self.lock = threading.Lock()

    def __call__(self, inputs):
        if any((x.shape, x.strides) != layout for x, layout in zip(inputs, self.layouts)):
            return None
        with self.lock:
            values = self.values
            values[:len(inputs)] = inputs
            for seg in self.segments:
                if len(seg) == 4:
                    prog, addr, n, moving = seg
                    for word, slot, offset in moving:
                        prog[word] = _word(_addr(values[slot]) + offset)
                    status = _lib.run_program(addr, n)
                    if status:
                        raise RuntimeError(f"run_program: a kernel refused its call (status "
                                           f"{status})")
                else:
                    op, ins, attrs, shape, dtype, out = seg
                    values[out] = self.execute(op, [values[s] for s in ins], attrs, shape, dtype)
            # the results: arguments and weights as they are, the rest copied out of memory
            # that the next run overwrites
            result = {s: values[s] if s < len(inputs) or s in self.constants
                      else np.array(values[s], copy=True) for s in self.outputs}
            for s in range(len(inputs)):
                values[s] = None
            return result
