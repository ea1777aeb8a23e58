"""ember.backends.native: C kernels compiled on first use for NdArray on CPython.

GELU, ReLU, Adam, the stride-1 convolutions, mask_where and the pooled GEMMs must agree with
the NumPy paths they replace (which the conformance suite checks against independent
references) everywhere, special values and every geometry included, on every vector width;
fall back to NumPy for what they do not take (dtypes, layouts, broadcasting, strides); be built
once per machine (the cache); leave NumPy computing, right, when no compiler exists or it
fails; and leave OpenBLAS's own thread count alone outside ember's GEMMs.
"""

import math
import os
import platform
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from ember import autotune
from ember.backends import native
from ember.ops import kernels, numerics

HAVE_CC = native.compiler() is not None
# CI installs a compiler (.ci/deps): there the native path must be tested, never skipped
needs_cc = pytest.mark.skipif(not HAVE_CC and os.environ.get("CI") != "true",
                              reason="no C compiler on this machine")

exact_gelu = np.vectorize(lambda v: v * (1 + math.erf(v / math.sqrt(2))) / 2, otypes=[float])
exact_gelu_grad = np.vectorize(
    lambda v: (1 + math.erf(v / math.sqrt(2))) / 2 + v * math.exp(-v * v / 2)
    / math.sqrt(2 * math.pi), otypes=[float])
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 1e-45, 5.6568, -5.6569,
                    13.0, -13.0, 14.0, -14.0, 100.0, -100.0, 3e38, -3e38], np.float32)


@pytest.fixture(scope="module")
def lib():
    return native.load()


def numpy_gelu(x):
    return numerics._blocked(numerics._gelu, x, None)


def numpy_gelu_grad(g, x):
    return numerics._blocked(numerics._gelu_grad, x, None, g, numpy_gelu(x))


@needs_cc
def test_ndarray_runs_with_the_native_set_and_numpy_on_request(lib, monkeypatch):
    from ember import Tensor
    from ember.backend import NdArray
    auto, numpy = NdArray(), NdArray(kernels="numpy")
    assert auto.kernels is native.KERNELS and numpy.kernels is kernels.NUMPY
    calls = []
    monkeypatch.setattr(native, "gelu", lambda x, out=None: calls.append(x.shape) or None)
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    a = Tensor.from_data(x, backend=auto).gelu().to_numpy()
    b = Tensor.from_data(x, backend=numpy).gelu().to_numpy()
    assert calls == [(3, 4)]  # the auto instance asked the native set, the other one never
    np.testing.assert_allclose(a, b, rtol=1e-6)
    assert native.status().startswith("loaded ")


@needs_cc
def test_two_instances_in_two_threads_keep_their_own_sets(lib, monkeypatch):
    import threading

    from ember import Tensor
    from ember.backend import NdArray
    seen, barrier = {}, threading.Barrier(2, timeout=10)
    real = native.Native.matmul

    def spying(self, a, b):
        seen.setdefault("native", set()).add(threading.get_ident())
        return real(self, a, b)
    monkeypatch.setattr(native.Native, "matmul", spying)

    def run(name, backend):
        barrier.wait()
        a = Tensor.from_data(np.ones((32, 32), np.float32), backend=backend)
        for _ in range(50):
            a = (a @ a) * (1 / 32)
        seen[name] = (threading.get_ident(), float(a.sum().item()))
    threads = [threading.Thread(target=run, args=(n, NdArray(kernels=k)))
               for n, k in (("auto", "auto"), ("numpy", "numpy"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen["native"] == {seen["auto"][0]}  # only the auto instance's thread
    assert seen["auto"][1] == seen["numpy"][1] == 1024.0


@needs_cc
def test_gelu_matches_exact_and_numpy(lib):
    x = np.concatenate([np.linspace(-12, 12, 240_001), [0.0, 1e-30, -1e-30]]).astype(np.float32)
    got = native.gelu(x)
    want = exact_gelu(x.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # both within the exact bounds, so within twice them of each other
    np.testing.assert_allclose(got, numpy_gelu(x), rtol=2e-5, atol=2e-6)


@needs_cc
def test_gelu_grad_matches_exact_and_numpy(lib):
    x = np.linspace(-16, 16, 320_001).astype(np.float32)
    g = np.random.default_rng(0).standard_normal(x.shape).astype(np.float32)
    got = native.gelu_grad(g, x)
    want = g * exact_gelu_grad(x.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, numpy_gelu_grad(g, x), rtol=2e-5, atol=2e-6)


@needs_cc
def test_special_values_as_numpy(lib):
    with np.errstate(all="ignore"):
        want = numpy_gelu(SPECIAL)
        want_grad = numpy_gelu_grad(np.ones_like(SPECIAL), SPECIAL)
    got, got_grad = native.gelu(SPECIAL), native.gelu_grad(np.ones_like(SPECIAL), SPECIAL)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-30)
    np.testing.assert_array_equal(np.isnan(got_grad), np.isnan(want_grad))
    np.testing.assert_allclose(got_grad, want_grad, rtol=1e-6, atol=1e-30)


@needs_cc
def test_in_place_and_out(lib):
    """NdArray hands a donated input over as out: the kernels read each element before they
    write it, so out may be x (or g)."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 24, 22, 22)).astype(np.float32)
    g = rng.standard_normal(x.shape).astype(np.float32)
    y, dx = native.gelu(x), native.gelu_grad(g, x)
    inplace = x.copy()
    assert native.gelu(inplace, out=inplace) is inplace
    np.testing.assert_array_equal(inplace, y)
    for which in ("g", "x"):
        gg, xx = g.copy(), x.copy()
        out = gg if which == "g" else xx
        assert native.gelu_grad(gg, xx, out=out) is out
        np.testing.assert_array_equal(out, dx)
    assert native.gelu(np.array(-0.5, np.float32)).shape == ()
    assert native.gelu(np.empty((0, 3), np.float32)).shape == (0, 3)


def test_an_arrays_address_is_its_data_whatever_buffer_it_exports():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    ro = x.copy()
    ro.flags.writeable = False
    for a in (x, x[1:], x.T, x[:, ::2], ro, np.broadcast_to(x[:1], (3, 4)), np.empty(0),
              np.array(1.5), np.zeros((2, 2), bool)):
        assert native._at(a) == a.ctypes.data


@needs_cc
def test_a_read_only_input_is_read_where_it_lies(lib):
    x = np.random.default_rng(3).standard_normal(1000).astype(np.float32)
    x.flags.writeable = False
    np.testing.assert_array_equal(native.relu(x), np.maximum(x, 0))
    np.testing.assert_array_equal(native.mask_where(x, x < 0, 2.0), np.where(x < 0, 2, x))


@needs_cc
def test_what_the_kernels_do_not_take_falls_back_to_numpy(lib):
    x = np.random.default_rng(2).standard_normal((6, 8)).astype(np.float32)
    g = np.ones_like(x)
    assert native.gelu(x.astype(np.float64)) is None
    assert native.gelu(x.T) is None  # not C-contiguous
    assert native.gelu(x, out=np.empty((6, 8), np.float64)) is None
    assert native.gelu_grad(g[:1], x) is None  # broadcasting
    assert native.gelu_grad(g, x.astype(np.float16)) is None
    # ... and the public functions still compute them
    np.testing.assert_allclose(numerics.gelu(x.T), exact_gelu(x.T.astype(np.float64)),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(numerics.gelu_grad(g[:1], x, numerics.gelu(x)),
                               exact_gelu_grad(x.astype(np.float64)), rtol=1e-5, atol=1e-6)


@needs_cc
def test_build_is_cached_per_source_and_flags(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = native.build()
    assert first.parent == tmp_path / "ember" / "native" and first.is_file()

    def no_compiling(*args, **kwargs):
        raise AssertionError("compiled again although the cache has the library")
    monkeypatch.setattr(native.subprocess, "run", no_compiling)
    assert native.build() == first
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cc = native.compiler()
    other = native.build(cc + ["-DEMBER_TEST_FLAG=1"])  # other flags: another library
    assert other != first and other.is_file()
    assert sorted(p.name for p in first.parent.iterdir()) == sorted([first.name, other.name])


def run_python(code, tmp_path, **env):
    environ = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), **env}
    done = subprocess.run([sys.executable, "-W", "always", "-c", code],
                          capture_output=True, text=True, env=environ, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


CHECK = textwrap.dedent("""
    import numpy as np, ember
    from ember.backends import native
    from ember.ops import kernels, numerics
    x = np.linspace(-3, 3, 101, dtype=np.float32)
    y = numerics.gelu(x)
    assert abs(float(y[-1]) - 2.99595) < 1e-4, y[-1]
    from ember.backend import NdArray
    print("routed", NdArray().kernels is native.KERNELS and native.KERNELS.gelu(x) is not None)
    print("status", native.status())
""")


def test_a_failing_compiler_warns_once_and_numpy_computes(tmp_path):
    fake = tmp_path / "cc"
    fake.write_text("#!/bin/sh\necho 'fake-cc: error: no such thing' >&2\nexit 1\n")
    fake.chmod(0o755)
    done = run_python(CHECK + "numerics.gelu(x); numerics.gelu_grad(x, x, y)\n", tmp_path,
                      CC=str(fake))
    assert "routed False" in done.stdout
    assert "fake-cc: error: no such thing" in done.stdout  # status() names the cause
    assert done.stderr.count("native kernels unavailable") == 1, done.stderr


def test_no_compiler_is_silent(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CC"}
    env["PATH"] = str(tmp_path)  # no cc, gcc or clang there
    done = subprocess.run([sys.executable, "-W", "always", "-c", CHECK],
                          capture_output=True, text=True, timeout=120,
                          env={**env, "XDG_CACHE_HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert "routed False" in done.stdout and "no C compiler found" in done.stdout
    assert "Warning" not in done.stderr


def test_ember_native_0_opts_out(tmp_path):
    done = run_python(CHECK, tmp_path, EMBER_NATIVE="0")
    assert "routed False" in done.stdout and "EMBER_NATIVE=0" in done.stdout
    assert not (tmp_path / "ember").exists()  # nothing compiled


@needs_cc
def test_a_broken_cached_library_is_built_again(tmp_path):
    """A cached .so that does not load (cut short, say) is replaced, not fatal forever."""
    code = CHECK.replace("import numpy as np, ember", "import numpy as np, ember\n"
                         "from ember.backends import native as n\n"
                         "n.build().write_bytes(b'not a library')")
    done = run_python(code, tmp_path)
    assert "routed True" in done.stdout, done.stdout + done.stderr


@needs_cc
def test_a_fresh_cache_compiles_and_routes(tmp_path):
    done = run_python(CHECK, tmp_path)
    assert "routed True" in done.stdout and str(tmp_path) in done.stdout


# ---- convolutions at stride 1 -------------------------------------------------------------
# (kernel, padding, dilation): taps in one block, in several (5x5: 25 taps), odd shapes,
# asymmetric and negative (cropping) padding
CONV_GEOMETRIES = [
    ((3, 3), ((0, 0), (0, 0)), (1, 1)),
    ((3, 3), ((1, 1), (1, 1)), (1, 1)),
    ((5, 5), ((2, 1), (0, 3)), (1, 1)),
    ((2, 3), ((1, 0), (2, 2)), (2, 1)),
    ((3, 3), ((-1, 2), (1, -1)), (1, 2)),
    ((1, 1), ((0, 0), (1, 0)), (1, 1)),
]
def conv_ops(x, w, b, g, kernel, padding, dilation, kernel_set=None):
    """conv2d and its two gradients, the op table's implementations run with the native set
    (or `kernel_set`: kernels.NUMPY for NumPy's path)."""
    from ember.ops import nn as N
    attrs = dict(stride=(1, 1), padding=padding, dilation=dilation, groups=1)
    with kernels.using(kernel_set or native.KERNELS):
        y = N._conv2d_np(x, w, b, **attrs)
        back = N._input_padding(x.shape[2:], kernel, (1, 1), padding, dilation)
        dx = N._conv_transpose2d_np(g, w, (1, 1), back, dilation, 1)
        dw = N._conv2d_weight_np(x, g, kernel, **attrs)
    return y, dx, dw


def conv_case(n, c, o, hw, kernel, padding, dilation, seed=0):
    from ember.ops import nn as N
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c) + hw).astype(np.float32)
    w = rng.standard_normal((o, c) + kernel).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    oh, ow = N._window_out("t", hw, kernel, (1, 1), padding, dilation, x.shape)
    g = rng.standard_normal((n, o, oh, ow)).astype(np.float32)
    return x, w, b, g


@needs_cc
@pytest.mark.parametrize("kernel, padding, dilation", CONV_GEOMETRIES)
@pytest.mark.parametrize("n, c, o", [(1, 1, 1), (3, 5, 13), (7, 16, 24), (19, 3, 5)])
def test_convolutions_match_numpy(lib, monkeypatch, n, c, o, kernel, padding, dilation):
    # every image count splits over threads here (in use, only large convolutions do); 19
    # images: conv2d_weight pads 8 at a time, so a thread takes a whole block and a partial one
    monkeypatch.setattr(native, "MIN_PARALLEL_MACS", 0)
    x, w, b, g = conv_case(n, c, o, (11, 9), kernel, padding, dilation)
    got = conv_ops(x, w, b, g, kernel, padding, dilation)
    want = conv_ops(x, w, b, g, kernel, padding, dilation, kernels.NUMPY)
    for what, a, e in zip(("conv2d", "conv_transpose2d", "conv2d_weight"), got, want):
        assert a.shape == e.shape and a.dtype == e.dtype and a.flags.c_contiguous, what
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-4 * max(1, np.abs(e).max()),
                                   err_msg=what)


@needs_cc
def test_convolutions_take_the_native_path(lib, monkeypatch):
    """What the MNIST model runs goes to C (and what the kernels leave, to NumPy)."""
    x, w, b, g = conv_case(4, 8, 16, (26, 26), (3, 3), ((0, 0), (0, 0)), (1, 1))
    z = ((0, 0), (0, 0))
    assert native.conv2d(x, w, b, (1, 1), z, (1, 1), 1, (24, 24)) is not None
    assert native.conv_transpose2d(g, w, (1, 1), z, (1, 1), 1, (26, 26)) is not None
    assert native.conv2d_weight(x, g, (3, 3), (1, 1), z, (1, 1), 1) is not None
    assert native.conv2d(x, w, b, (2, 2), z, (1, 1), 1, (12, 12)) is None  # stride 2
    assert native.conv2d(x, w[:, :4], b, (1, 1), z, (1, 1), 2, (24, 24)) is None  # groups
    assert native.conv2d(x.astype(np.float64), w, b, (1, 1), z, (1, 1), 1, (24, 24)) is None
    assert native.conv2d_weight(x, g[..., :1, :1], (1, 1), (1, 1), z, (1, 1), 1) is None
    inf_w = w.copy()
    inf_w[0, 0, 0, 0] = np.inf
    assert native.conv_transpose2d(g, inf_w, (1, 1), z, (1, 1), 1, (26, 26)) is None


@needs_cc
def test_non_finite_values_stay_where_they_belong(lib, monkeypatch):
    """Tiles compute past a plane's end (thrown away) and the weight gradient masks its last
    vector: a NaN or inf in one image or channel reaches only what NumPy's path reaches."""
    monkeypatch.setattr(native, "MIN_PARALLEL_MACS", 0)
    kernel, padding, dilation = (3, 3), ((1, 1), (1, 1)), (1, 1)
    x, w, b, g = conv_case(3, 4, 5, (9, 10), kernel, padding, dilation)
    x[1, 2, 0, 0] = np.inf
    x[2, 0, 8, 9] = np.nan
    g[0, 4, 0, 0] = np.inf
    with np.errstate(all="ignore"):
        got = conv_ops(x, w, b, g, kernel, padding, dilation)
        want = conv_ops(x, w, b, g, kernel, padding, dilation, kernels.NUMPY)
    for what, a, e in zip(("conv2d", "conv_transpose2d", "conv2d_weight"), got, want):
        np.testing.assert_array_equal(np.isnan(a), np.isnan(e), err_msg=what)
        np.testing.assert_array_equal(np.isinf(a), np.isinf(e), err_msg=what)
        finite = np.isfinite(e)
        np.testing.assert_allclose(a[finite], e[finite], rtol=1e-4, atol=1e-3, err_msg=what)


@needs_cc
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 targets")
@pytest.mark.parametrize("target", ["x86-64", "haswell"])
def test_other_vector_widths_agree(monkeypatch, tmp_path, target):
    """kernels.c picks its vector width and register tiles from the target (AVX-512, AVX,
    SSE): the builds for the other targets this CPU also runs give the same results."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    other = native.Library(native.build(tune=(f"-march={target}",)))
    assert other.vector == {"x86-64": 4, "haswell": 8}[target]
    monkeypatch.setattr(native, "MIN_PARALLEL_MACS", 0)
    kernel, padding, dilation = (3, 3), ((1, 0), (2, 1)), (1, 1)
    x, w, b, g = conv_case(3, 6, 10, (12, 13), kernel, padding, dilation)
    want = conv_ops(x, w, b, g, kernel, padding, dilation)
    monkeypatch.setattr(native, "_lib", other)
    got = conv_ops(x, w, b, g, kernel, padding, dilation)
    y = np.random.default_rng(3).standard_normal(1000).astype(np.float32)
    np.testing.assert_allclose(native.gelu(y), numpy_gelu(y), rtol=2e-5, atol=2e-6)
    for a, e in zip(got, want):
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-4 * np.abs(e).max())


# ---- GEMMs: OpenBLAS's own threads; over the pool, single-threaded, on a capped instance -----
def _gemm_close(got, a, b):
    """A split or a wrong part is off by whole products; rounding, by a few ulps of the sum of
    |products| (a fixed atol of 1e-5 failed where 300 products cancelled to -0.125)."""
    want, scale = np.matmul(a, b), np.matmul(np.abs(a), np.abs(b))
    assert got.shape == want.shape and got.dtype == want.dtype
    assert np.all(np.abs(got - want) <= 8 * np.finfo(a.dtype).eps * scale), \
        float(np.max(np.abs(got - want) / scale))


@needs_cc
@pytest.mark.parametrize("a_shape, b_shape", [
    ((64, 300), (300, 32)),       # rows of a split
    ((24, 144), (5, 144, 530)),   # columns of b split, b batched, a broadcast
    ((3, 1, 64, 64), (2, 64, 70)),  # both batched, broadcast: the batch split
    ((1, 4, 64, 64), (5, 4, 64, 70)),  # a broadcast along the batch's first dim
    ((64, 66), (2, 66, 70)),        # a not batched
    ((2, 3), (3, 2)),             # too small: whole
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matmul_parts_match_numpy(lib, monkeypatch, a_shape, b_shape, dtype):
    monkeypatch.setenv("EMBER_AUTOTUNE", "0")  # the default, split over the pool
    monkeypatch.setattr(native, "MIN_PARALLEL_GEMM", 0)
    monkeypatch.setattr(native, "THREADS", 3)
    rng = np.random.default_rng(4)
    a = rng.standard_normal(a_shape).astype(dtype)
    b = rng.standard_normal(b_shape).astype(dtype)
    with kernels.using(native.Native(threads=3)):  # a capped instance splits over the pool
        _gemm_close(native.matmul(a, b), a, b)
        bt, at = b.swapaxes(-1, -2), a.swapaxes(-1, -2)
        _gemm_close(native.matmul(bt, at), bt, at)  # transposed (F-order) views
        # layouts BLAS cannot read (rows reversed, one row repeated by a 0 stride, every other
        # column): the product reads a copy
        for odd in (a[..., ::-1, :], np.broadcast_to(a[..., :1, :], a.shape),
                    np.repeat(a, 2, -1)[..., ::2]):
            _gemm_close(native.matmul(odd, b), odd, b)
        ints = native.matmul(a.astype(np.int32), b.astype(np.int32))  # not BLAS: NumPy whole
        np.testing.assert_array_equal(ints, np.matmul(a.astype(np.int32), b.astype(np.int32)))
        with pytest.raises(ValueError):
            native.matmul(a, b[..., :-1, :])  # NumPy's own error for a mismatch


@needs_cc
def test_a_gemm_is_split_or_not_as_measured_on_this_machine(lib, monkeypatch, tmp_path):
    """Whether a product is split over the pool is ember.autotune's choice here: both ways
    measured (and checked against each other) once per bucket of shapes, then remembered;
    EMBER_AUTOTUNE=0 splits, as every product did before."""
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("EMBER_AUTOTUNE", raising=False)
    for name, empty in (("_memory", {}), ("_fast", {}), ("_file", None), ("_tuned", []),
                        ("_cached", [])):
        monkeypatch.setattr(autotune, name, empty)
    monkeypatch.setattr(native, "MIN_PARALLEL_GEMM", 0)
    monkeypatch.setattr(native, "THREADS", 2)
    splits, split = [], native._split
    monkeypatch.setattr(native, "_split", lambda *args: splits.append(1) or split(*args))
    rng = np.random.default_rng(5)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in ((64, 96), (96, 80)))
    with kernels.using(native.Native(threads=2)):
        _gemm_close(native.matmul(a, b), a, b)
        tuned = autotune.stats()["tuned"]
        assert len(tuned) == 1 and tuned[0].startswith("native.gemm|cpu ") and splits
        assert (tmp_path / "autotune.json").is_file()
        splits.clear()
        _gemm_close(native.matmul(a[:60], b), a[:60], b)  # the same bucket: not tuned again
        assert len(autotune.stats()["tuned"]) == 1
        monkeypatch.setenv("EMBER_AUTOTUNE", "0")
        splits.clear()
        _gemm_close(native.matmul(a, b[:, :48]), a, b[:, :48])
        assert splits and len(autotune.stats()["tuned"]) == 1


@needs_cc
@pytest.mark.skipif(sys.platform != "linux", reason="finds OpenBLAS through /proc")
def test_openblas_is_single_threaded_only_inside_embers_gemms(lib, monkeypatch):
    """An instance with no thread cap leaves a large GEMM to OpenBLAS's own threads; one capped
    (a data-parallel replica: NdArray(threads=...)) splits it over the pool with OpenBLAS
    single-threaded (its spinning workers would take the other replicas' cores); NumPy code
    outside them keeps OpenBLAS's own thread count."""
    blas = native._openblas()
    if blas is None:
        assert os.environ.get("CI") != "true", "NumPy's OpenBLAS not found"
        pytest.skip("this NumPy has no OpenBLAS")
    set_threads, get_threads = blas
    monkeypatch.setenv("EMBER_AUTOTUNE", "0")  # "split over the pool" is the default's
    before = get_threads()
    set_threads(2)
    try:
        seen, numpy_matmul = [], np.matmul

        def spy(*args, **kwargs):
            seen.append(get_threads())
            return numpy_matmul(*args, **kwargs)
        monkeypatch.setattr(np, "matmul", spy)  # a product run whole
        parallel = native._parallel

        def spy_split(*args):  # a product split over the pool (its parts call cblas)
            seen.append(get_threads())
            return parallel(*args)
        monkeypatch.setattr(native, "_parallel", spy_split)
        monkeypatch.setattr(native, "MIN_PARALLEL_GEMM", 0)
        a = np.ones((64, 64), np.float32)
        native.matmul(a[:8, :8], a[:8, :8])  # small: OpenBLAS's calling thread anyway
        monkeypatch.setattr(native, "OWN_BLAS_FROM", 64 ** 3)
        native.matmul(a, a)  # no cap, a large product: OpenBLAS's threads
        assert seen == [2, 2]
        seen.clear()
        monkeypatch.setattr(native, "OWN_BLAS_FROM", 64 ** 3 + 1)
        native.matmul(a, a)  # no cap, a smaller product: split over the pool
        assert seen and set(seen) == {1}
        assert get_threads() == 2
        seen.clear()
        with kernels.using(native.Native(threads=2)):
            native.matmul(a, a)  # split over the pool
            monkeypatch.setattr(native, "MIN_PARALLEL_GEMM", 1 << 40)
            native.matmul(a, a)  # whole
            assert seen and set(seen) == {1}
            assert get_threads() == 2  # given back
            with pytest.raises(ValueError):
                native.matmul(a, a[:3])
            assert get_threads() == 2  # given back after an error too
        assert get_threads() == 2
    finally:
        set_threads(before)


@needs_cc
def test_a_part_no_worker_takes_is_run_by_the_caller(lib, monkeypatch, tmp_path):
    """On a busy machine a worker may not run for a while: the caller, its own part done, runs
    the parts no worker has taken yet, so a job never waits for a worker to start."""
    import threading
    copy = tmp_path / "kernels-copy.so"  # (another file: a second load, with statics of its own)
    shutil.copy(lib.path, copy)
    alone = native.Library(copy)
    alone.wakes = [None, threading.Semaphore(0)]  # as if its worker had started: none will run
    monkeypatch.setattr(native, "_lib", alone)
    monkeypatch.setattr(native, "MIN_PARALLEL_GEMM", 0)
    monkeypatch.setattr(native, "THREADS", 2)
    monkeypatch.setenv("EMBER_AUTOTUNE", "0")  # (split, the default)
    a = np.random.default_rng(6).standard_normal((96, 80)).astype(np.float32)
    got = []

    def product():
        with kernels.using(native.Native(threads=2)):
            got.append(native.matmul(a, a.T))
    t = threading.Thread(target=product, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "the job waited for a worker that never ran"
    _gemm_close(got[0], a, a.T)


@needs_cc
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_gets_a_pool_of_its_own(lib, monkeypatch):
    """A child forked after the pool started has none of its threads: work handed to them
    would never run. The child starts a pool of its own (os.register_at_fork)."""
    import signal
    monkeypatch.setattr(native, "MIN_PARALLEL_GEMM", 0)
    monkeypatch.setattr(native, "THREADS", 2)
    a = np.random.default_rng(5).standard_normal((64, 64)).astype(np.float32)
    capped = native.Native(threads=2)  # (which splits GEMMs over the pool)
    with kernels.using(capped):
        native.matmul(a, a)  # the pool's threads start here
    assert len(native._lib.wakes) >= 2  # (the caller's place, then a worker's at least)
    pid = os.fork()
    if pid == 0:  # the child: killed by the alarm if the work never runs
        signal.alarm(20)
        try:
            with kernels.using(capped):
                done = np.allclose(native.matmul(a, a), a @ a, atol=1e-4)
            os._exit(0 if done else 1)
        except BaseException:
            os._exit(2)
    _, code = os.waitpid(pid, 0)
    assert os.WIFEXITED(code) and os.WEXITSTATUS(code) == 0, code


# ---- mask_where -----------------------------------------------------------------------------
@needs_cc
def test_mask_where(lib):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 5, 6)).astype(np.float32)
    x.flat[::5] = np.nan
    mask = x > 0.3
    for value in (0, -0.0, 2.5, float("nan"), float("-inf")):
        want = np.where(mask, np.float32(value), x)
        got = native.mask_where(x, mask, value)
        np.testing.assert_array_equal(got, want)
        assert np.array_equal(np.signbit(got), np.signbit(want))
        inplace = x.copy()
        assert native.mask_where(inplace, mask, value, out=inplace) is inplace
        np.testing.assert_array_equal(inplace, want)
    assert native.mask_where(x, mask, 0.1) is None  # not exact in float32: NumPy's rules
    assert native.mask_where(x.astype(np.float64), mask, 0) is None
    assert native.mask_where(x, mask[:1], 0) is None  # broadcasting
    assert native.mask_where(x, mask.astype(np.int8), 0) is None
    assert native.mask_where(x, mask, np.float32(0)) is None  # (only Python numbers)


@needs_cc
def test_relu(lib):
    x = np.concatenate([SPECIAL, -SPECIAL, np.linspace(-3, 3, 1001, dtype=np.float32)])
    want = np.maximum(x, np.float32(0))
    got = native.relu(x)
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want))  # (NaN kept, -0.0 gives +0.0)
    inplace = x.copy()
    assert native.relu(inplace, out=inplace) is inplace
    np.testing.assert_array_equal(inplace, want)
    assert native.relu(x.astype(np.float64)) is None
    assert native.relu(x[::2]) is None  # strided: NumPy's maximum
    np.testing.assert_array_equal(native.KERNELS.relu(x[::2]), want[::2])


@needs_cc
@pytest.mark.parametrize("w", [0.1, 0.7])  # the two sides of torch's lerp
def test_adam_matches_numpy(lib, w):
    from ember.ops.optim import _adam_np
    rng = np.random.default_rng(3)
    n = 1003  # vectors and a tail
    x, g, m = (rng.standard_normal(n).astype(np.float32) * s for s in (1, 1e-2, 1e-2))
    s = np.stack([x * 0, m, (rng.standard_normal(n).astype(np.float32) * 1e-2) ** 2])
    args = (x, g, s, w, 0.999, 0.3, 1e-8, -1e-3)
    want = _adam_np(*args)  # (NumPy's set is active outside an NdArray op)
    with kernels.using(native.KERNELS):
        got = _adam_np(*args)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    f64 = [a.astype(np.float64) for a in (x, g, m, m, x, m, m)]
    assert native.KERNELS.adam(*f64, w, True) is None  # float64: NumPy's loop


@pytest.mark.skipif(not (shutil.which("clang-19") or shutil.which("clang")),
                    reason="no clang here (CI has clang-19: .ci/deps)")
def test_clang_builds_them_too(tmp_path, monkeypatch):
    """clang refuses GCC's -fno-tree-loop-distribute-patterns: the next flag set is tried."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    clang = [shutil.which("clang-19") or shutil.which("clang")]
    built = native.Library(native.build(clang))
    x = np.linspace(-5, 5, 1001, dtype=np.float32)
    out = np.empty_like(x)
    built.gelu_f32(x.ctypes.data, out.ctypes.data, x.size, native._PQ.ctypes.data)
    np.testing.assert_allclose(out, exact_gelu(x.astype(np.float64)), rtol=1e-5, atol=1e-6)


@needs_cc
def test_threads_caps_the_threads_of_one_instance(lib, monkeypatch):
    from ember import Tensor
    from ember.backend import NdArray
    from ember.nn import functional as F
    monkeypatch.setattr(native, "THREADS", 2)
    monkeypatch.setattr(native, "MIN_PARALLEL_MACS", 0)
    parts = []
    real = native._parallel
    monkeypatch.setattr(native, "_parallel",
                        lambda part, args, n, k: parts.append(k) or real(part, args, n, k))
    x, w, _, _ = conv_case(4, 8, 16, (12, 12), (3, 3), ((0, 0), (0, 0)), (1, 1))
    outs = {}
    for threads in (None, 1):
        B = NdArray(threads=threads)
        assert (B.kernels is native.KERNELS) == (threads is None)
        parts.clear()
        outs[threads] = F.conv2d(Tensor.from_data(x, backend=B), Tensor.from_data(
            w, backend=B)).to_numpy()
        assert parts == [2 if threads is None else 1], parts
    np.testing.assert_allclose(outs[1], outs[None], rtol=1e-5, atol=1e-5)
