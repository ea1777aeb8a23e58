"""Wgpu.compile (core/ember/backends/wgpu/plan.py): a plan ember.jit captured replays as one
submission of dispatches recorded once, with results equal to the op-by-op replay, and
whatever cannot be recorded replays op by op."""

import numpy as np
import pytest

pytest.importorskip("wgpu")

import ember  # noqa: E402
from ember import ShapeError, Tensor  # noqa: E402
from ember.backend import Wgpu  # noqa: E402
from ember.backends.wgpu import runners  # noqa: E402
from ember.capture import live  # noqa: E402
from ember.ops import OPS  # noqa: E402

B = Wgpu()


def _x(seed, shape=(2, 1, 28, 28)):
    rng = np.random.default_rng(seed)
    return Tensor.from_data(rng.random(shape, dtype=np.float32), backend=B)


def _runner(fast):
    (plan,) = fast._plans.values()
    return None if plan.runner is None else plan.runner[0]


def _replayed(fast, *args):
    """fast(*args), with what the device did meanwhile."""
    before = B.stats()
    out = fast(*args)
    after = B.stats()
    return out, {k: after[k] - before[k] for k in ("submits", "dispatches", "reads")}


def test_a_replay_is_one_submission_and_keeps_every_result():
    model = ember.models.ConvNet(channels=(4, 8), hidden=16, backend=B).eval()
    fast = ember.jit(model)
    fast(_x(0))
    fast(_x(1))  # captured and compiled
    runner = _runner(fast)
    assert runner is not None and runner.commands
    kept = []
    for seed in range(2, 6):
        y, did = _replayed(fast, _x(seed))
        assert did == {"submits": 1, "dispatches": len(runner.commands), "reads": 0}
        kept.append((seed, y))
    for seed, y in kept:  # each replay wrote its results into buffers of their own
        np.testing.assert_allclose(y.to_numpy(), model(_x(seed)).to_numpy(), rtol=1e-5,
                                   atol=1e-6)


def test_replays_share_a_submission_while_the_gpu_is_busy(monkeypatch):
    # with `gather_after` submissions queued, `gather` plans go into one submission (each its
    # own meta words and results); a read submits what waits
    model = ember.models.ConvNet(channels=(4, 8), hidden=16, backend=B).eval()
    fast = ember.jit(model)
    fast(_x(0))
    fast(_x(1))
    n = len(_runner(fast).commands)
    monkeypatch.setattr(B.device, "gather_after", 0)  # (as if the GPU were always busy)
    kept, submits = [], []
    monkeypatch.setattr(B.device, "gather", 4)
    xs = [_x(seed) for seed in range(2, 8)]
    for seed, x in enumerate(xs, 2):
        y, did = _replayed(fast, x)
        submits.append(did["submits"])
        assert did["dispatches"] == n
        kept.append((seed, y))
    assert submits == [0, 0, 0, 1, 0, 0]
    for seed, y in kept:
        np.testing.assert_allclose(y.to_numpy(), model(_x(seed)).to_numpy(), rtol=1e-5,
                                   atol=1e-6)


def test_a_replay_allocates_nothing_new():
    fast = ember.jit(lambda x: ((x * 2).exp() + x).sum_dim(1))
    x = _x(0, (64, 64))
    for _ in range(3):
        fast(x)
    stats = B.memory_stats()
    for _ in range(5):
        y = fast(x)
        del y
    assert B.memory_stats()["allocations"] == stats["allocations"]
    a = x.to_numpy()
    np.testing.assert_allclose(fast(x).to_numpy(), (np.exp(a * 2) + a).sum(1, keepdims=True),
                               rtol=1e-5)


def test_arguments_of_another_layout_replay_op_by_op():
    fast = ember.jit(lambda x: x.exp() * 3)
    x = _x(0, (8, 8))
    fast(x)
    fast(x)
    assert _runner(fast) is not None
    t = _x(1, (8, 8)).permute((1, 0))  # same shape, other strides: the words differ
    y, did = _replayed(fast, t)
    np.testing.assert_allclose(y.to_numpy(), np.exp(t.to_numpy()) * 3, rtol=1e-6)
    assert did["dispatches"] >= 2  # the op-by-op replay


def test_a_step_that_reads_back_is_not_compiled(monkeypatch):
    exp = OPS["exp"]
    monkeypatch.setitem(runners.CACHE, exp, runners.host)  # exp on the host: a read-back
    runners._WARNED.add("exp")
    fast = ember.jit(lambda x: (x + 1).exp())
    x = _x(0, (5,))
    for _ in range(3):
        np.testing.assert_allclose(fast(x).to_numpy(), np.exp(x.to_numpy() + 1), rtol=1e-6)
    assert _runner(fast) is None


def test_index_checks_run_on_each_replays_bounds():
    fast = ember.jit(lambda x, i: x.select(0, i) * 2)
    x = _x(0, (6, 3))
    idx = Tensor.from_data(np.array([0, 5, 2], np.int32), backend=B)
    fast(x, idx)
    fast(x, idx)
    assert _runner(fast) is not None
    other = Tensor.from_data(np.array([1, 1, 4], np.int32), backend=B)
    y, did = _replayed(fast, x, other)
    assert did["submits"] == 1
    np.testing.assert_allclose(y.to_numpy(), x.to_numpy()[[1, 1, 4]] * 2, rtol=1e-6)
    with pytest.raises(ShapeError, match="select"):  # replayed op by op: it raises as eager
        fast(x, Tensor.from_data(np.array([0, 6, 1], np.int32), backend=B))


def test_live_scalars_are_patched_into_the_recorded_words():
    count = {"n": 0}

    def scale():
        count["n"] += 1
        return (0.5 * count["n"], -1.0 / count["n"])

    def f(x):
        a, b = live(scale(), scale)
        return (x * a).exp() + b

    fast = ember.jit(f)
    x = _x(0, (7,))
    for n in range(1, 7):
        y, did = _replayed(fast, x)
        assert count["n"] == n
        np.testing.assert_allclose(y.to_numpy(), np.exp(x.to_numpy() * 0.5 * n) - 1.0 / n,
                                   rtol=1e-6, atol=1e-6)
    runner = _runner(fast)
    assert runner is not None and len(runner.scalars) == 2
    assert did["submits"] == 1
