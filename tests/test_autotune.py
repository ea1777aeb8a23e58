"""ember.autotune: a fresh cache tunes, a second process tunes nothing and gets the same
choice, EMBER_AUTOTUNE=0 measures and writes nothing, a damaged cache is ignored with a warning
and written again, a wrong or failing candidate never wins; and Wgpu's matmul is tuned."""

import importlib.util
import json
import subprocess
import sys
import time

import numpy as np
import pytest

from ember import autotune


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("EMBER_AUTOTUNE", raising=False)
    monkeypatch.setattr(autotune, "_memory", {})
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
    g = Family({"default": 0.003, "fast": 0.0005, "new": 0.0001})  # the set changed
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
