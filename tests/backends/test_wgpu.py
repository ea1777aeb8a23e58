"""Wgpu, the WebGPU backend (natively through wgpu-py; lavapipe on machines without a GPU).

The op suite (tests/ops) checks every op's values on Wgpu; this file checks what is Wgpu's
own: dtypes it refuses, views that copy nothing, buffer reuse and the pool, asynchronous
batching, index checks, NaN semantics (WGSL may assume finite math), custom kernels, memory
that stays flat over thousands of training steps.
"""

import asyncio
import gc
import threading
import warnings

import numpy as np
import pytest

pytest.importorskip("wgpu")

import ember  # noqa: E402
from ember import DTypeError, ShapeError, Tensor  # noqa: E402
from ember.backend import Autodiff, NdArray, Wgpu  # noqa: E402
from ember.backends.wgpu import custom_op, layout, runners  # noqa: E402
from ember.backends.wgpu.custom import fused_softmax  # noqa: E402
from ember.backends.wgpu.pool import size_class  # noqa: E402

B = Wgpu()


def t(data, dtype="float32", backend=B):
    return Tensor.from_data(np.asarray(data), backend=backend, dtype=dtype)


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def dispatches():
    return B.stats()["dispatches"]


# ---- the backend as a value ---------------------------------------------------------------------
def test_name_registration_and_equality():
    assert str(B).startswith("Wgpu<") and B.device.name in str(B)
    assert str(Autodiff(B)) == f"Autodiff<{B}>"
    assert ember.backend.from_name("wgpu") == B
    assert ember.backend.from_name("autodiff(wgpu)") == Autodiff(B)
    assert Wgpu(memory="exclusive") == B  # one device: tensors mix freely
    assert Wgpu().device is B.device
    assert B.dtypes == ("bool", "int32", "float32")


def test_importing_ember_does_not_import_wgpu():
    import subprocess
    import sys
    code = ("import sys, ember, ember.backend; assert 'wgpu' not in sys.modules; "
            "assert 'ember.backends.wgpu' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_bad_memory_strategy():
    with pytest.raises(ValueError, match="pool.*exclusive"):
        Wgpu(memory="lru")


# ---- dtypes: no 64-bit types, refused with the fix ----------------------------------------------
@pytest.mark.parametrize(("dtype", "fix"), [("float64", "float32"), ("int64", "int32")])
def test_64_bit_data_is_refused_with_the_fix(dtype, fix):
    with pytest.raises(DTypeError, match=rf"{dtype}.*\.cast\('{fix}'\)"):
        Tensor.from_data(np.zeros(3, dtype), backend=B)
    with pytest.raises(DTypeError, match=dtype):
        Tensor.zeros([2], backend=B, dtype=dtype)
    with pytest.raises(DTypeError, match=dtype):
        t([1.0, 2.0]).cast(dtype)
    with pytest.raises(DTypeError, match=dtype):
        Tensor.from_data(np.zeros(3, dtype)).to(B)
    # the fix works
    x = Tensor.from_data(np.arange(3, dtype=dtype)).cast(fix).to(B)
    assert x.dtype == fix and x.to_numpy().tolist() == [0, 1, 2]


def test_bool_and_int32_round_trip():
    a = np.array([[True, False], [False, True]])
    assert t(a, "bool").to_numpy().dtype == np.bool_
    np.testing.assert_array_equal(t(a, "bool").to_numpy(), a)
    i = np.array([-(2**31), 2**31 - 1, 0], np.int32)
    np.testing.assert_array_equal(t(i, "int32").to_numpy(), i)


# ---- views: movement ops copy nothing -----------------------------------------------------------
def test_movement_ops_are_views():
    x = t(rand(2, 3, 4))
    before = dispatches()
    views = [x.permute(2, 0, 1), x.reshape(6, 4), x[1, :, ::-2], x.unsqueeze(0).expand(5, 2, 3, 4),
             x.transpose(), x.flatten(1), x[:, 1:2].squeeze(1)]
    assert dispatches() == before
    for v in views:
        assert v._prim.storage is x._prim.storage
    a = x.to_numpy()
    np.testing.assert_array_equal(views[0].to_numpy(), a.transpose(2, 0, 1))
    np.testing.assert_array_equal(views[2].to_numpy(), a[1, :, ::-2])
    np.testing.assert_array_equal(views[3].to_numpy(), np.broadcast_to(a, (5, 2, 3, 4)))


def test_reshape_of_a_transposed_tensor_copies_once():
    x = t(rand(3, 4))
    y = x.transpose()
    before = dispatches()
    z = y.reshape(12)
    assert dispatches() == before + 1
    assert z._prim.storage is not x._prim.storage
    np.testing.assert_array_equal(z.to_numpy(), x.to_numpy().T.reshape(12))


def test_kernels_read_strided_and_broadcast_operands():
    a, b, c = rand(4, 5), rand(5, 4, seed=1), rand(5, seed=2)
    x, y, z = t(a), t(b), t(c)
    got = (x + y.transpose()) * z - x[::-1, ::2].sum()
    np.testing.assert_allclose(got.to_numpy(), (a + b.T) * c - a[::-1, ::2].sum(), rtol=1e-5)
    np.testing.assert_allclose((x.transpose() @ y.transpose()).to_numpy(), a.T @ b.T,
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(x[1:, ::-1].max_dim(0).to_numpy(),
                               a[1:, ::-1].max(0, keepdims=True))


def test_large_problems_use_two_dimensional_grids(monkeypatch):
    small = lambda n, per_group=256, max_x=3: layout.groups_1d(n, per_group, max_x)  # noqa
    monkeypatch.setattr(runners, "groups_1d", small)
    a = rand(40, 50)
    x = t(a)
    np.testing.assert_allclose(((x + 1) * x).to_numpy(), (a + 1) * a, rtol=1e-6)
    np.testing.assert_allclose(x.sum_dim(1).to_numpy(), a.sum(1, keepdims=True), rtol=1e-5,
                               atol=1e-5)


def test_matmul_shapes_and_ints():
    rng = np.random.default_rng(3)
    for (m, k, n) in [(1, 1, 1), (5, 7, 3), (33, 65, 31), (64, 64, 64), (130, 17, 67)]:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        np.testing.assert_allclose((t(a) @ t(b)).to_numpy(), a @ b, rtol=1e-4, atol=1e-4)
    a = rng.standard_normal((2, 1, 6, 5)).astype(np.float32)
    b = rng.standard_normal((3, 5, 4)).astype(np.float32)
    np.testing.assert_allclose((t(a) @ t(b)).to_numpy(), a @ b, rtol=1e-5, atol=1e-5)
    i = rng.integers(-5, 5, (7, 9)).astype(np.int32)
    np.testing.assert_array_equal((t(i, "int32") @ t(i.T, "int32")).to_numpy(), i @ i.T)



@pytest.mark.parametrize("kernel", ["scalar", "vec4", "tiled", "narrow"])
def test_every_matmul_kernel_on_edges_batches_and_views(monkeypatch, kernel):
    """Each kernel forced (a CPU adapter would pick vec4): sizes across the 128x128 tiles and
    the BK=32 steps of "tiled" (matmul_tile.wgsl), broadcast batches, an operand at an offset."""
    monkeypatch.setenv("EMBER_WGPU_MATMUL", kernel)
    rng = np.random.default_rng(4)
    for (m, k, n) in [(4, 4, 4), (129, 36, 132), (130, 68, 260), (3, 100, 8), (70, 130, 10)]:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        np.testing.assert_allclose((t(a) @ t(b)).to_numpy(), a @ b, rtol=1e-4, atol=1e-4)
    a = rng.standard_normal((2, 1, 40, 36)).astype(np.float32)
    b = rng.standard_normal((3, 36, 132)).astype(np.float32)
    np.testing.assert_allclose((t(a) @ t(b)).to_numpy(), a @ b, rtol=1e-4, atol=1e-4)
    whole = rng.standard_normal((9, 64)).astype(np.float32)
    b = rng.standard_normal((64, 36)).astype(np.float32)
    np.testing.assert_allclose((t(whole)[1:] @ t(b)).to_numpy(), whole[1:] @ b, rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("kernel", [*runners._CONV_TILES, "direct"])
def test_every_conv_kernel_against_numpy(monkeypatch, kernel):
    """conv2d (with a bias), conv_transpose2d and conv2d_weight, each kernel forced: channels
    across conv_gemm.wgsl's tiles (64x64, 32x128, 64x128 of 4x8 and 8x4 a thread) and its BK=16
    steps, strides, dilations, groups, asymmetric padding, and weight gradients over enough
    pixels to run in chunks."""
    from ember.ops import OPS
    monkeypatch.setenv("EMBER_WGPU_CONV", kernel)
    rng = np.random.default_rng(5)
    cases = [  # x shape, O, kernel, stride, padding, dilation, groups
        ((2, 3, 7, 6), 4, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),
        ((2, 4, 9, 8), 6, (3, 2), (2, 1), ((1, 0), (0, 2)), (1, 2), 2),
        ((3, 6, 5, 5), 70, (1, 1), (1, 1), ((0, 0), (0, 0)), (1, 1), 1),
        ((2, 20, 12, 12), 8, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),
        ((4, 3, 16, 16), 5, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),  # 4 chunks
        ((9, 3, 3, 3), 4, (3, 3), (1, 1), ((0, 0), (0, 0)), (1, 1), 1),  # 1 pixel an image
    ]
    for xs, o, kernel_hw, stride, padding, dilation, groups in cases:
        attrs = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
        x = rng.standard_normal(xs).astype(np.float32)
        w = rng.standard_normal((o, xs[1] // groups, *kernel_hw)).astype(np.float32)
        b = rng.standard_normal(o).astype(np.float32)
        for args in ((x, w, b), (x, w)):
            want = OPS["conv2d"].np(*args, **attrs)
            got = B.execute(OPS["conv2d"], [B.from_numpy(a) for a in args], attrs, want.shape,
                            "float32")
            np.testing.assert_allclose(B.to_numpy(got), want, rtol=1e-4, atol=1e-4)
        g = rng.standard_normal(want.shape).astype(np.float32)
        for op, args, extra in ((OPS["conv_transpose2d"], (g, w), {}),
                                (OPS["conv2d_weight"], (x, g), {"kernel": kernel_hw})):
            want = op.np(*args, **attrs, **extra)
            got = B.execute(op, [B.from_numpy(a) for a in args], dict(attrs, **extra),
                            want.shape, "float32")
            np.testing.assert_allclose(B.to_numpy(got), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("o", [70, 20])
@pytest.mark.parametrize("kernel", [*runners._CONV_TILES])
def test_conv2d_runs_the_chain_after_it_in_its_epilogue(monkeypatch, kernel, o):
    """Fusion(Wgpu()): a conv2d (with or without its bias) and the elementwise ops after it
    (a per-channel scale, a residual of the result's shape, relu) are one kernel, which also
    writes the conv's own result where the caller keeps it; on the tile the unfused conv takes
    (each forced), o output channels across its rows."""
    from ember.fusion import Fusion
    from ember.nn import functional as F
    monkeypatch.setenv("EMBER_WGPU_CONV", kernel)
    rng = np.random.default_rng(6)
    x, w = rng.standard_normal((2, 3, 9, 7)), rng.standard_normal((o, 3, 3, 3))
    b, s = rng.standard_normal(o), rng.standard_normal((1, o, 1, 1))
    r = rng.standard_normal((2, o, 5, 4))
    for bias in (b, None):
        def graph(be, bias=bias):
            X, Wt, S, R = (t(a, backend=be) for a in (x, w, s, r))
            y = F.conv2d(X, Wt, None if bias is None else t(bias, backend=be), stride=2,
                         padding=1)
            return (y * S + R).relu(), y
        with ember.fusion.trace() as trace:
            got = [out.to_numpy() for out in graph(Fusion(B))]
        assert [k.ops for k in trace.kernels] == [("conv2d", "mul", "add", "relu")]
        assert any(type(key) is tuple and key[:3] == ("conv_gemm", 0, runners._CONV_TILES[kernel])
                   and len(key) > 5 for key in B.device.kernels)  # a fused store, on that tile
        for a, want in zip(got, graph(NdArray())):
            np.testing.assert_allclose(a, want.to_numpy(), rtol=1e-4, atol=1e-4)


def test_shader_unroll_directive():
    from ember.backends.wgpu import kernels
    text = kernels._unroll("a\n    //! unroll i 3\n    x[#i] += #i;\n    //! end unroll\nb\n")
    assert text == "a\n    x[0] += 0;\n    x[1] += 1;\n    x[2] += 2;\nb\n"
    from ember.backends.wgpu import runners
    assert "#" not in runners._tile_source("tiled", "f32", "")

# ---- buffers: reuse of unshared inputs, the pool, exclusive memory ----------------------------
def test_a_chain_of_temporaries_reuses_one_buffer():
    x = t(rand(64, 64))
    in_use = B.memory_stats()["buffers_in_use"]
    y = ((x * 0.5).exp() + 1).tanh().sqrt()
    assert B.memory_stats()["buffers_in_use"] == in_use + 1
    a = x.to_numpy().astype(np.float64)
    np.testing.assert_allclose(y.to_numpy(), np.sqrt(np.tanh(np.exp(a * 0.5) + 1)), rtol=1e-5)


def test_inplace_false_never_reuses_inputs():
    c = Wgpu(inplace=False)
    x = t(rand(8), backend=c)
    in_use = c.memory_stats()["buffers_in_use"]
    y = ((x * 2).exp() + 1).tanh()
    assert c.memory_stats()["buffers_in_use"] == in_use + 1  # the temporaries died
    z = x * 2
    w = z.exp()
    assert w._prim.storage is not z._prim.storage
    np.testing.assert_allclose(y.to_numpy(), np.tanh(np.exp(x.to_numpy() * 2) + 1), rtol=1e-5)


def test_views_keep_their_buffer_from_being_reused():
    x = t(rand(4, 4))
    y = x.transpose()
    keep = y.to_numpy().copy()
    z = x.exp() + 0  # x is named: nothing is donated
    del x
    w = (z * 3).sin()  # z's buffer is reused, y's (x's) must not be
    np.testing.assert_array_equal(y.to_numpy(), keep)
    assert w.shape == (4, 4)


def test_the_pool_reuses_freed_buffers():
    B.sync()
    stats = B.memory_stats()
    for _ in range(20):
        (t(rand(100)) * 2).to_numpy()
    after = B.memory_stats()
    assert after["allocations"] - stats["allocations"] <= 2
    assert after["reuses"] - stats["reuses"] >= 19  # x * 2 reuses x's own buffer
    assert after["bytes_in_use"] == stats["bytes_in_use"]


def test_exclusive_memory_releases_buffers():
    c = Wgpu(memory="exclusive")
    x = t(rand(1000), backend=c)
    s = c.memory_stats()
    assert s["strategy"] == "exclusive" and s["bytes_in_use"] >= 4000 and s["bytes_cached"] == 0
    y = (x + 1).to_numpy()
    del x
    assert c.memory_stats()["bytes_in_use"] == s["bytes_in_use"] - 4000
    assert y.shape == (1000,)


def test_trim_gives_cached_buffers_back():
    (t(rand(5000)) + 1).to_numpy()
    assert B.memory_stats()["bytes_cached"] > 0
    released = B.trim()
    assert released > 0 and B.memory_stats()["bytes_cached"] == 0
    np.testing.assert_allclose((t([1.0, 2.0]) * 2).to_numpy(), [2.0, 4.0])


def test_size_classes():
    assert size_class(1) == size_class(256) == 256
    assert size_class(257) == 320 and size_class(1000) == 1024 and size_class(1025) == 1280
    for n in range(1, 100000, 997):
        c = size_class(n)
        assert n <= c <= max(256, n * 1.25 + 1)


def test_tensors_in_garbage_cycles_release_live_buffers():
    # a Storage finalised inside a cycle must not return a buffer wgpu-py has released
    for _ in range(50):
        box = {"t": t(rand(64))}
        box["self"] = box
        del box
    gc.collect()
    for _ in range(50):
        (t(rand(64)) * 2).to_numpy()


# ---- asynchronous: record, submit in batches, wait only to read -------------------------------
def test_execute_records_without_submitting():
    B.sync()
    submits = B.stats()["submits"]
    x = t(rand(16))
    for _ in range(10):
        x = x + 1
    assert B.stats()["pending_dispatches"] >= 10 and B.stats()["submits"] == submits
    x.to_numpy()
    assert B.stats()["pending_dispatches"] == 0 and B.stats()["submits"] == submits + 1


def test_batches_are_flushed_by_count():
    B.sync()
    submits = B.stats()["submits"]
    x = t(rand(16))
    for _ in range(B.device.max_batch + 5):
        x = x + 1
    assert B.stats()["submits"] == submits + 1
    np.testing.assert_allclose(x.to_numpy(), t(rand(16)).to_numpy() + B.device.max_batch + 5,
                               rtol=1e-5)


def test_many_submissions_wait_for_the_older_half_only(monkeypatch):
    # at max_in_flight submissions the device waits for the one max_in_flight // 2 back (its
    # token), not for everything: the GPU keeps the newer half queued while Python goes on
    device, bridge = B.device, B.device.bridge
    B.sync()
    waited, wait = [], bridge.wait
    monkeypatch.setattr(bridge, "wait", lambda token=None: (waited.append(token), wait(token)))
    monkeypatch.setattr(device, "max_in_flight", 4)
    x, tokens = t(rand(16)), []
    submit = bridge.submit
    monkeypatch.setattr(bridge, "submit", lambda *a: tokens.append(submit(*a)) or tokens[-1])
    for _ in range(9):
        x = x + 1
        device.flush()
    assert len(tokens) == 9 and all(k is not None for k in tokens)
    assert waited == [tokens[1], tokens[3], tokens[5]]  # (at 4 in flight: 2 are kept)
    assert list(device._in_flight) == tokens[6:]
    np.testing.assert_allclose(x.to_numpy(), t(rand(16)).to_numpy() + 9, rtol=1e-6)
    assert not device._in_flight  # (a read waits for everything before it)


def test_a_submission_with_the_meta_already_written_skips_the_write():
    # the native bridge leaves its info buffer as it is when a submission's words are the ones
    # it holds (a replayed plan, a kernel called again on the same layout): same results
    bridge = B.device.bridge
    a, b = rand(64, seed=1), rand(64, seed=2)
    np.testing.assert_allclose((t(a) * 2 + 1).to_numpy(), a * 2 + 1, rtol=1e-6)
    written = bridge._meta_written
    np.testing.assert_allclose((t(b) * 2 + 1).to_numpy(), b * 2 + 1, rtol=1e-6)
    assert bridge._meta_written is written  # (the same words: not written again)
    np.testing.assert_allclose((t(rand(3, 5)) - 1).to_numpy(), rand(3, 5) - 1, rtol=1e-6)
    assert bridge._meta_written != written
    np.testing.assert_allclose((t(a) * 2 + 1).to_numpy(), a * 2 + 1, rtol=1e-6)
    assert bridge._meta_written == written


def test_to_numpy_async():
    x = t(rand(3, 4))
    y = x.transpose() * 2

    async def read():
        return await y.to_numpy_async(), await Tensor.zeros([0, 2], backend=B).to_numpy_async()

    got, empty = asyncio.run(read())
    np.testing.assert_allclose(got, x.to_numpy().T * 2)
    assert empty.shape == (0, 2)


def test_threads_share_the_device():
    results, errors = {}, []

    def work(k):
        try:
            x = t(np.full(100, k, np.float32))
            for _ in range(50):
                x = x * 1 + 1
            results[k] = x.to_numpy()
        except Exception as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    for k in range(4):
        np.testing.assert_array_equal(results[k], np.full(100, k + 50, np.float32))


# ---- indices: checked without a read-back where bounds are known --------------------------------
def test_index_bounds_from_uploads_avoid_read_backs():
    x = t(rand(4, 6))
    idx = t([[0, 5], [1, 2], [3, 3], [0, 0]], "int32")
    before = B.stats()["index_checks_read_back"]
    x.gather(1, idx)
    x.select(0, t([3, 0], "int32"))
    x.gather(1, x.argmax(1))  # argmax's results are known to lie in [0, 6)
    assert B.stats()["index_checks_read_back"] == before
    with pytest.raises(ShapeError, match="out of range"):
        x.gather(1, idx + 1)  # computed indices: read back, and 6 is out of range
    assert B.stats()["index_checks_read_back"] == before + 1


def test_loose_bounds_are_confirmed_by_reading_back():
    labels = t([0, 9, 1, 2], "int32")  # bounds (0, 9)
    x = t(rand(5, 3))
    got = x.select(0, labels[2:])  # its values (1, 2) fit, its bounds do not
    np.testing.assert_array_equal(got.to_numpy(), x.to_numpy()[[1, 2]])
    with pytest.raises(ShapeError, match="index 9 is out of range"):
        x.select(0, labels)


# ---- NaN: WGSL may assume finite math; results follow NumPy ------------------------------------
def test_nan_follows_numpy():
    a = np.array([np.nan, 1.0, -np.inf, 2.0], np.float32)
    b = np.array([0.0, np.nan, 3.0, np.inf], np.float32)
    x, y = t(a), t(b)
    with np.errstate(all="ignore"):
        for got, want in [(x.maximum(y), np.maximum(a, b)), (x.minimum(y), np.minimum(a, b)),
                          (x != y, a != b), (x == x, a == a), (x ** y, a ** b),
                          (x.cast("bool"), a.astype(bool)), (x.erf(), np.array(
                              [np.nan, 0.8427008, -1.0, 0.9953223], np.float32))]:
            np.testing.assert_allclose(got.to_numpy(), want, rtol=1e-6)
    assert np.isnan(x.max().item()) and np.isnan(x.min().item())
    assert x.argmax(0).item() == 0 and x.argmin(0).item() == 0
    assert x[1:].argmax(0).item() == 2 and x[1:].max().item() == 2.0


# ---- ops without a kernel fall back to the host, once warned ------------------------------------
def test_an_op_without_a_kernel_runs_on_the_host():
    twice = custom_op("twice_on_host", "unary", np=lambda x, out=None: np.multiply(x, 2, out=out),
                      wgsl=None, grad=lambda g, y, x: (g * 2,))
    x = t([1.0, 2.0])
    with pytest.warns(UserWarning, match="twice_on_host"):
        y = twice(x)
    assert B.stats()["host_fallbacks"] >= 1
    np.testing.assert_array_equal(y.to_numpy(), [2.0, 4.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once only
        twice(x)


# ---- custom ops --------------------------------------------------------------------------------
swish = custom_op(
    "swish_test", "unary",
    np=lambda x, out=None: np.divide(x, 1 + np.exp(-x), out=out),
    wgsl="({0} / (1.0 + exp(-{0})))",
    grad=lambda g, y, x: (g * (y + x.sigmoid() * (1 - y)),), saves=(0, "out"))


@pytest.mark.parametrize("make", [NdArray, Wgpu], ids=["ndarray", "wgpu"])
def test_custom_elementwise_op_with_gradient(make):
    a = rand(3, 5)
    x = Tensor.from_data(a, backend=Autodiff(make())).require_grad()
    y = swish(x)
    s = 1 / (1 + np.exp(-a))
    np.testing.assert_allclose(y.to_numpy(), a * s, rtol=1e-5, atol=1e-6)
    g = x.grad(y.sum().backward()).to_numpy()
    np.testing.assert_allclose(g, s + a * s * (1 - s), rtol=1e-4, atol=1e-5)


def test_custom_op_is_not_added_to_the_op_table():
    assert "swish_test" not in ember.ops.OPS and "fused_softmax" not in ember.ops.OPS


@pytest.mark.parametrize("shape", [(4, 10), (3, 1000), (2, 3, 1), (0, 5)])
def test_fused_softmax_matches_the_composite(shape):
    a = rand(*shape) * 4
    for backend in (Wgpu(), NdArray()):
        x = Tensor.from_data(a, backend=backend)
        np.testing.assert_allclose(fused_softmax(x).to_numpy(), x.softmax(-1).to_numpy(),
                                   rtol=1e-5, atol=1e-7)


def test_fused_softmax_gradient():
    a = rand(3, 7)
    w = rand(3, 7, seed=1)
    grads = []
    for backend in (Autodiff(Wgpu()), Autodiff(NdArray())):
        x = Tensor.from_data(a, backend=backend).require_grad()
        loss = (fused_softmax(x) * Tensor.from_data(w, backend=backend)).sum()
        ref = Tensor.from_data(a, backend=backend).require_grad()
        ref_loss = (ref.softmax(-1) * Tensor.from_data(w, backend=backend)).sum()
        grads.append((x.grad(loss.backward()).to_numpy(), ref.grad(ref_loss.backward())
                      .to_numpy()))
    for got, want in grads:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_elementwise_kernels_are_few():
    """Kernels are generated per op, dtypes and layout class (dense, dense by vec4, strided),
    never per shape or rank."""
    def run(shapes):
        for shape in shapes:
            y = t(rand(*shape))
            y.exp().to_numpy()
            (y.exp() + t(rand(shape[-1]))).to_numpy()

    run([(5,), (4, 2), (3, 3, 2)])
    kernels = B.stats()["kernels"]
    run([(7,), (2, 3), (4, 1, 3), (2, 2, 2, 2, 2, 2), (3, 1, 5, 1, 2)])
    assert B.stats()["kernels"] == kernels


# ---- memory stays flat over thousands of steps --------------------------------------------------
def test_no_memory_growth_over_thousands_of_training_steps():
    backend = Autodiff(Wgpu())
    rng = np.random.default_rng(0)
    x = Tensor.from_data(rng.standard_normal((16, 8)), backend=backend, dtype="float32")
    y = Tensor.from_data(rng.standard_normal((16, 2)), backend=backend, dtype="float32")
    w1 = Tensor.from_data(rng.standard_normal((8, 16)) * 0.3, backend=backend,
                          dtype="float32").require_grad()
    w2 = Tensor.from_data(rng.standard_normal((16, 2)) * 0.3, backend=backend,
                          dtype="float32").require_grad()

    def step(w1, w2):
        loss = (((x @ w1).tanh() @ w2 - y) ** 2).mean()
        grads = loss.backward()
        with ember.no_grad():
            w1 = (w1 - w1.grad(grads).to(backend) * 0.05).detach().require_grad()
            w2 = (w2 - w2.grad(grads).to(backend) * 0.05).detach().require_grad()
        return w1, w2, loss

    for _ in range(20):  # warm up: kernels compiled, pool filled
        w1, w2, loss = step(w1, w2)
    first = loss.item()
    pool = backend.inner.pool
    gc.collect()
    base = dict(pool.stats(), kernels=backend.inner.stats()["kernels"])
    for i in range(2000):
        w1, w2, loss = step(w1, w2)
        if i % 500 == 0:
            loss.item()
    last = loss.item()
    gc.collect()
    now = dict(pool.stats(), kernels=backend.inner.stats()["kernels"])
    assert last < first
    for key in ("bytes_in_use", "buffers_in_use", "bytes_reserved", "kernels"):
        assert now[key] == base[key], (key, base, now)
    assert now["allocations"] == base["allocations"]


def test_int32_sums_wrap_as_wgsl_does():
    # WGSL has no 64-bit ints to add in, so Wgpu's int32 sums wrap (NdArray's are exact or
    # raise, tests/test_tensor.py); this records the documented difference
    x = Tensor.from_data(np.full(4, 2**30, np.int32), backend=Wgpu())
    assert x.sum().item() == 0


def test_a_buffer_over_the_device_limit_names_the_op():
    from ember import OutOfMemoryError
    with pytest.raises(OutOfMemoryError, match=r"^full: a result of shape \[1099511627776\] "
                                               r"float32 .*maxBufferSize"):
        Tensor.zeros([2**40], backend=Wgpu())
    B = Wgpu()
    assert Tensor.ones([3], backend=B).sum().item() == 3  # the pool still works afterwards


def test_create_is_the_public_way_and_natively_returns_at_once():
    B = asyncio.run(Wgpu.create())
    assert isinstance(B, Wgpu) and B == Wgpu()
    assert asyncio.run(Wgpu.create(memory="exclusive")).memory == "exclusive"


def test_a_fused_channel_sum_in_a_gpus_workgroup_chunks(monkeypatch):
    """Fusion(Wgpu()): BatchNorm's sum of a chain over (N, H, W), in the 4096-element chunks a
    workgroup that a GPU takes (lavapipe takes 1024 a thread): one fused kernel, then the
    chunks' sum."""
    from ember.fusion import Fusion
    monkeypatch.setattr(B.device.bridge, "is_cpu", False)
    rng = np.random.default_rng(7)
    x, y = rng.standard_normal((8, 3, 40, 41)), rng.standard_normal((8, 3, 40, 41))
    with ember.fusion.trace() as trace:
        got = (t(x, backend=Fusion(B)) * t(y, backend=Fusion(B))).sum_dim((0, 2, 3)).to_numpy()
    assert [k.ops for k in trace.kernels] == [("mul", "sum")]
    np.testing.assert_allclose(got, (x * y).sum((0, 2, 3), keepdims=True), rtol=1e-4,
                               atol=1e-3)
