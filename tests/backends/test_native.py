"""ember.backends.native: C kernels compiled on first use for NdArray on CPython.

They must agree with numerics.py's NumPy formulas (which the conformance suite checks against
independent references) everywhere, special values included; fall back to NumPy for what they
do not take (dtypes, layouts, broadcasting); be built once per machine (the cache); and leave
NumPy computing, right, when no compiler exists or it fails.
"""

import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

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
def test_ndarray_routes_gelu_to_native_kernels(lib):
    import ember  # noqa: F401  (importing ember installs the stand-ins)
    numerics.gelu(np.ones(4, np.float32))
    assert kernels.gelu is native.gelu and kernels.gelu_grad is native.gelu_grad
    assert native.status().startswith("loaded ")


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
    print("routed", kernels.gelu is native.gelu)
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
def test_a_fresh_cache_compiles_and_routes(tmp_path):
    done = run_python(CHECK, tmp_path)
    assert "routed True" in done.stdout and str(tmp_path) in done.stdout
