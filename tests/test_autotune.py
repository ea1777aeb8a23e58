"""ember.autotune: a fresh cache tunes, a second process tunes nothing and gets the same
choice, EMBER_AUTOTUNE=0 measures and writes nothing, a damaged cache is ignored with a warning
and written again, a wrong or failing candidate never wins; and Wgpu's matmul is tuned."""

import importlib.util
import json
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest

from ember import autotune


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("EMBER_AUTOTUNE", raising=False)
    monkeypatch.setattr(autotune, "_memory", {})
    monkeypatch.setattr(autotune, "_fast", {})
    monkeypatch.setattr(autotune, "_file", None)
    monkeypatch.setattr(autotune, "_tuned", [])
    monkeypatch.setattr(autotune, "_cached", [])
    return tmp_path


class Family:
    """Candidates that sleep for their cost and return their value; `runs` counts calls."""

    def __init__(self, costs, values=None, fails=()):
        self.costs, self.values, self.fails, self.runs = costs, values or {}, fails, []

    def run(self, c):
        self.runs.append(c)
        if c in self.fails:
            raise RuntimeError(f"{c} does not compile here")
        time.sleep(self.costs[c])
        return self.values.get(c, np.arange(4.0))

    def choose(self, key=("dev", 64)):
        return autotune.choose("test.family", key, list(self.costs), self.run, lambda x: x,
                               lambda: None)


def test_a_fresh_cache_tunes_and_keeps_the_fastest(fresh):
    f = Family({"default": 0.004, "fast": 0.0005, "slow": 0.01})
    assert f.choose() == "fast" and f.runs
    assert len(autotune.stats()["tuned"]) == 1 and autotune.stats()["cached"] == []
    saved = json.loads((fresh / "autotune.json").read_text())
    assert list(saved.values()) == ["fast"]
    f.runs.clear()
    assert f.choose() == "fast" and f.runs == []  # remembered in this process


def test_a_second_process_tunes_nothing_and_gets_the_same_choice(fresh):
    Family({"default": 0.004, "fast": 0.0005}).choose()
    code = ("import numpy as np, ember.autotune as a\n"
            "runs = []\n"
            "w = a.choose('test.family', ('dev', 64), ['default', 'fast'],"
            " lambda c: runs.append(c) or np.arange(4.0), lambda x: x, lambda: None)\n"
            "print(w, runs, a.stats())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**__import__("os").environ,
                                          "EMBER_CACHE_DIR": str(fresh)}).stdout
    assert out.startswith("fast [] {'tuned': [], 'cached': ['test.family|dev|64|default,fast']}")


def test_the_order_of_the_candidates_is_not_part_of_the_key():
    f = Family({"default": 0.004, "fast": 0.0005})
    f.choose()
    g = Family({"fast": 0.0005, "default": 0.004})  # another default, the same set
    assert g.choose() == "fast" and g.runs == []


def test_nearby_shapes_share_a_bucket_and_a_changed_set_tunes_again():
    assert [autotune.bucket(n) for n in (0, 1, 3, 4, 5, 1000, 1024, 1025)] == [
        0, 1, 4, 4, 8, 1024, 1024, 2048]
    f = Family({"default": 0.003, "fast": 0.0005})
    f.choose(("dev", autotune.bucket(1000)))
    f.runs.clear()
    f.choose(("dev", autotune.bucket(1023)))
    assert f.runs == []
    g = Family({"default": 0.006, "fast": 0.002, "new": 0.0002})  # the set changed
    assert g.choose(("dev", 1024)) == "new" and g.runs


def test_off_measures_and_writes_nothing(fresh, monkeypatch):
    monkeypatch.setenv("EMBER_AUTOTUNE", "0")
    f = Family({"default": 0.004, "fast": 0.0005})
    assert f.choose() == "default" and f.runs == []
    assert not (fresh / "autotune.json").exists()
    assert autotune.stats() == {"tuned": [], "cached": []}


def test_a_damaged_cache_is_ignored_with_a_warning_and_written_again(fresh):
    (fresh / "autotune.json").write_text('{"half a fil')
    f = Family({"default": 0.004, "fast": 0.0005})
    with pytest.warns(RuntimeWarning, match="damaged"):
        assert f.choose() == "fast"
    assert list(json.loads((fresh / "autotune.json").read_text()).values()) == ["fast"]


def test_a_wrong_or_failing_candidate_never_wins():
    f = Family({"default": 0.004, "wrong": 0.0001, "broken": 0.0001, "right": 0.001},
               values={"wrong": np.arange(4.0) + 1e-2}, fails=("broken",))
    with pytest.warns(RuntimeWarning, match="wrong disagrees.*|broken failed"):
        assert f.choose() == "right"


def test_a_candidate_slower_than_a_sample_of_the_best_is_launched_once_more_only():
    f = Family({"default": 0.001, "slow": 0.08})  # a sample: 4 launches of the default
    assert f.choose() == "default"
    assert f.runs.count("slow") == 2  # its check, then one launch


def test_repeats_time_n_launches_in_one_call(monkeypatch):
    runs, clock = [], [0.0]  # a clock that the launches advance: no sleeping, no load

    def run(c, n=1):
        runs.append((c, n))
        clock[0] += n * {"default": 4e-4, "fast": 1e-4}[c]
        return np.arange(4.0)
    monkeypatch.setattr(autotune, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    assert autotune.choose("test.repeats", ("dev",), ["default", "fast"], run, lambda x: x,
                           lambda: None, repeats=True) == "fast"
    assert max(n for _, n in runs) == 8 and len(runs) < 20  # 8 launches: a 3 ms sample


def test_one_candidate_is_not_tuned():
    f = Family({"only": 0.001})
    assert f.choose() == "only" and f.runs == []


@pytest.mark.skipif(importlib.util.find_spec("wgpu") is None, reason="wgpu-py not installed")
def test_wgpu_matmul_is_tuned_once_per_bucket_and_stays_right(fresh):
    from ember import BackendError, Tensor
    from ember.backend import Wgpu
    try:
        B = Wgpu()
    except BackendError as e:
        pytest.skip(str(e))
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 96), dtype=np.float32), rng.standard_normal(
        (96, 128), dtype=np.float32)
    got = (Tensor.from_data(a, backend=B) @ Tensor.from_data(b, backend=B)).to_numpy()
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
    tuned = autotune.stats()["tuned"]
    assert len(tuned) == 1 and tuned[0].startswith("wgpu.matmul|")
    (Tensor.from_data(a[:60], backend=B) @ Tensor.from_data(b, backend=B)).to_numpy()
    assert len(autotune.stats()["tuned"]) == 1  # 60 rows: the same bucket as 64


@pytest.fixture
def wgpu_backend():
    if importlib.util.find_spec("wgpu") is None:
        pytest.skip("wgpu-py not installed")
    from ember import BackendError
    from ember.backend import Wgpu
    try:
        return Wgpu()
    except BackendError as e:
        pytest.skip(str(e))


def _product(B, a, b, bias=None):
    from ember import Tensor
    from ember.backend import Fusion
    if bias is None:
        return (Tensor.from_data(a, backend=B) @ Tensor.from_data(b, backend=B)).to_numpy()
    F = Fusion(B)
    x, w, c = (Tensor.from_data(v, backend=F) for v in (a, b, bias))
    return (x @ w + c).relu().to_numpy()


# odd rows, K past a whole tile step, a broadcast batch, N a multiple of 4 but not of a tile
AWKWARD = [((37, 132), (132, 20)), ((2, 3, 67, 40), (40, 68)), ((129, 1028), (1028, 12))]


def _tile_candidates():
    from ember.backends.wgpu import runners
    return [*runners.MATMUL_TILES, "t64x64k32/s3", "t128x128k16/s2", "t32x128k16/s16",
            "w64x128k16/s3", "narrow"]


@pytest.mark.parametrize("cand", _tile_candidates())
def test_every_matmul_candidate_gives_the_fallbacks_result(wgpu_backend, monkeypatch, cand):
    monkeypatch.setenv("EMBER_AUTOTUNE", "0")
    rng = np.random.default_rng(1)
    for sa, sb in AWKWARD:
        a, b = rng.standard_normal(sa, dtype=np.float32), rng.standard_normal(sb, dtype=np.float32)
        monkeypatch.setenv("EMBER_WGPU_MATMUL", "vec4")
        want = _product(wgpu_backend, a, b)
        monkeypatch.setenv("EMBER_WGPU_MATMUL", cand)
        got = _product(wgpu_backend, a, b)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{cand} {sa}@{sb}")
        np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


# (/s2: falls back to the tile alone)
@pytest.mark.parametrize("cand", ["t128x64k16", "w64x128k16", "t64x64k32/s2", "narrow"])
def test_matmul_candidates_run_a_fused_epilogue(wgpu_backend, monkeypatch, cand):
    monkeypatch.setenv("EMBER_AUTOTUNE", "0")
    monkeypatch.setenv("EMBER_WGPU_MATMUL", cand)
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((3, 37, 132), dtype=np.float32), rng.standard_normal(
        (132, 68), dtype=np.float32)
    bias = rng.standard_normal(68, dtype=np.float32)
    np.testing.assert_allclose(_product(wgpu_backend, a, b, bias), np.maximum(a @ b + bias, 0),
                               rtol=1e-4, atol=1e-4)


def test_matmul_candidates_fit_a_browser_and_split_only_long_products():
    from ember.backends.wgpu import runners
    for name, (wx, wy, ra, tn, bk) in runners.MATMUL_TILES.items():
        flags = runners._flags(name)
        sets = 2 if "d" in flags else 1  # double-buffered
        assert wx * wy <= 256 and set(flags) <= set("tdpw")
        assert runners._tile_bytes(name) == sets * 4 * bk * (4 * ra * wy + 4 * tn * wx) <= 32768
        if "w" in flags:  # whole warps of 8 x 4 invocations
            assert wx % 8 == 0 and wy % 4 == 0
    gpu = SimpleNamespace(device=SimpleNamespace(bridge=SimpleNamespace(
        is_cpu=False, limits={"workgroup_storage": 32768})))
    long = runners._matmul_kernels(gpu, True, 64, 4096, 4096, 1, None)
    assert long[0] == "tiled" and any("/s" in c for c in long)
    # a device at WebGPU's default 16 KiB: no kernel that needs 32 KiB, a tile of 16 KiB first
    for is_cpu in (False, True):
        small = SimpleNamespace(device=SimpleNamespace(bridge=SimpleNamespace(
            is_cpu=is_cpu, limits={"workgroup_storage": 16384})))
        kernels = runners._matmul_kernels(small, True, 256, 256, 256, 1, None)
        assert "tiled" not in kernels and "t128x128k16" in kernels[:2]
        assert all(runners._tile_bytes(k) <= 16384 for k in kernels if k in runners.MATMUL_TILES)
        assert len(kernels) == len(set(kernels))
    assert not any("/s" in c for c in runners._matmul_kernels(gpu, True, 64, 4096, 4096, 1,
                                                              "a block"))
    assert not any("/s" in c for c in runners._matmul_kernels(gpu, True, 4096, 4096, 4096, 1,
                                                              None))
    assert runners._matmul_kernels(gpu, False, 64, 64, 64, 1, None) == ["scalar"]
    # a narrow C (a classifier's 10 classes) is offered the kernel that splits k, after the default
    assert runners._matmul_kernels(gpu, False, 256, 10, 128, 1, None) == ["scalar", "narrow"]
    assert runners._matmul_kernels(gpu, True, 256, 8, 128, 1, None)[-1] == "narrow"
    assert runners._matmul_kernels(gpu, False, 256, 10, 128, 1, "a block") == ["scalar"]


REDUCTIONS = [((37, 1029), (1,)), ((1029, 37), (0,)), ((5, 300, 7), (0, 2)), ((4100,), (0,))]


@pytest.mark.parametrize("cand", ["g1", "t1", "c1", "g3", "t8", "c8", "c32"])
def test_every_reduce_candidate_gives_the_fallbacks_result(wgpu_backend, monkeypatch, cand):
    from ember import Tensor
    monkeypatch.setenv("EMBER_AUTOTUNE", "0")
    rng = np.random.default_rng(3)
    for shape, dims in REDUCTIONS:
        a = rng.standard_normal(shape, dtype=np.float32)
        x = Tensor.from_data(a, backend=wgpu_backend)
        xt = Tensor.from_data(a.T.copy(), backend=wgpu_backend).permute(
            tuple(range(len(shape)))[::-1])  # the same values, strided
        results = []
        for forced in (None, cand):
            if forced:
                monkeypatch.setenv("EMBER_WGPU_REDUCE", forced)
            results.append([t.sum_dim(dims).to_numpy() for t in (x, xt)]
                           + [t.max_dim(dims).to_numpy() for t in (x, xt)]
                           + [x.argmin(dims[0]).to_numpy()])
        monkeypatch.delenv("EMBER_WGPU_REDUCE")
        (want, got) = results
        for w, g in zip(want, got):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"{cand} {shape}")
        np.testing.assert_allclose(got[0], a.sum(axis=dims, keepdims=True), rtol=1e-4,
                                   atol=1e-4)


def test_reduce_candidates_leave_long_sums_to_workgroups():
    from ember.backends.wgpu import runners
    gpu = SimpleNamespace(device=SimpleNamespace(bridge=SimpleNamespace(is_cpu=False)))
    full = runners._reduce_candidates(gpu, True, 1, 1 << 24)
    assert "g8192" in full and not any(c in full for c in ("t1", "t8", "c8"))
    assert {"t1", "c32", "g32"} <= set(runners._reduce_candidates(gpu, True, 4096, 4096))


def test_a_long_reduction_is_tuned(wgpu_backend):
    from ember import Tensor
    a = np.random.default_rng(4).standard_normal((1024, 1100), dtype=np.float32)
    got = Tensor.from_data(a, backend=wgpu_backend).sum_dim(0).to_numpy()
    np.testing.assert_allclose(got, a.sum(0, keepdims=True), rtol=1e-4, atol=1e-3)
    assert [e for e in autotune.stats()["tuned"] if e.startswith("wgpu.reduce|")]


@pytest.mark.parametrize("cand", ["d64x128k8", "t64x64k32/s3", "narrow"])
def test_matmul_candidates_multiply_int32(wgpu_backend, monkeypatch, cand):
    from ember import Tensor
    monkeypatch.setenv("EMBER_AUTOTUNE", "0")
    monkeypatch.setenv("EMBER_WGPU_MATMUL", cand)
    rng = np.random.default_rng(5)
    a, b = (rng.integers(-9, 9, s).astype(np.int32) for s in ((2, 37, 1028), (1028, 20)))
    got = (Tensor.from_data(a, backend=wgpu_backend) @ Tensor.from_data(
        b, backend=wgpu_backend)).to_numpy()
    np.testing.assert_array_equal(got, a @ b)


def test_a_device_of_16_kib_multiplies_with_its_default_tile(wgpu_backend, monkeypatch):
    # (autotune off: the default kernel runs; on such a device it must be one that fits)
    from ember import Tensor
    from ember.backends.wgpu import runners
    monkeypatch.setenv("EMBER_AUTOTUNE", "0")
    bridge = wgpu_backend.device.bridge
    monkeypatch.setattr(bridge, "limits", dict(bridge.limits, workgroup_storage=16384))
    monkeypatch.setattr(bridge, "is_cpu", False)  # (the GPU's list, on any adapter)
    assert runners._matmul_kernels(wgpu_backend, True, 200, 300, 100, 1, None)[0] == \
        "t128x128k16"
    rng = np.random.default_rng(5)
    a, b = (rng.standard_normal(s, dtype=np.float32) for s in ((200, 100), (100, 300)))
    got = (Tensor.from_data(a, backend=wgpu_backend) @ Tensor.from_data(b, backend=wgpu_backend))
    np.testing.assert_allclose(got.to_numpy(), a @ b, rtol=1e-4, atol=1e-4)


def test_a_key_met_first_while_a_plan_records_takes_the_default_and_is_tuned_later(fresh):
    f = Family({"default": 0.004, "fast": 0.0005})

    def choose(measurable):
        return autotune.choose("test.family", ("dev", 64), list(f.costs), f.run, lambda x: x,
                               lambda: None, measurable=measurable)
    assert choose(False) == "default" and f.runs == [] and autotune.stats()["tuned"] == []
    assert choose(True) == "fast" and f.runs  # the next eager call tunes it
    f.runs.clear()
    assert choose(False) == "fast" and f.runs == []  # a known key: its winner, recording or not


def test_a_wgpu_recording_chooses_an_untuned_kernel_without_reading_back(wgpu_backend, fresh,
                                                                         monkeypatch):
    """Wgpu runs a product inside a plan's recording (Device.recording: reads refuse) whose
    key nothing tuned yet: the default kernel is recorded instead of the recording failing."""
    from ember import Tensor
    from ember.backends.wgpu.plan import Recording
    B = wgpu_backend
    monkeypatch.setattr(B.device.bridge, "is_cpu", False)  # (the GPU's candidates: several)
    rng = np.random.default_rng(3)
    a, b = (Tensor.from_data(rng.standard_normal(s, dtype=np.float32), backend=B)
            for s in ((72, 40), (40, 136)))
    B.sync()
    with B.device.lock:
        B.device.recording = rec = Recording()
        try:
            _ = a @ b  # (recorded, not run)
        finally:
            B.device.recording = None
    assert rec.commands and autotune.stats()["tuned"] == []
