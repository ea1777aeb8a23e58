"""Data parallel training (ember.train.parallel): the bucketed reducer and its thread group,
the on_final hook's overlap, and two processes under torchrun (gloo on the CPU) that train as
one process does with the same global batch, stop at the same step and resume."""

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from ember import Tensor, optim, train
from ember.autodiff import Autodiff, checkpoint
from ember.backend import NdArray
from ember.train import parallel

from .helpers import loaders, model, weights

HERE = Path(__file__).parent


def _one_process(epochs=5):
    learner = train.Learner(model(seed=3, dropout=0.0), optim.SGD(lr=0.1, momentum=0.9),
                            dashboard=None)
    learner.fit(loaders(batch_size=10)[0], epochs=epochs)
    losses = learner.history.epoch_values("Loss", "train")
    return weights(learner.model), [losses[e] for e in sorted(losses)]


def _replica_grads(m, x, y, group, rank, weight, hook=True):
    """m's gradients of the loss on (x, y) through a Reducer, and the plain ones."""
    from ember import nn
    loss = nn.CrossEntropyLoss()(m(Tensor.from_data(x, backend=m.backend())),
                                 Tensor.from_data(y, backend=m.backend()))
    reducer = parallel.Reducer(group, rank, m, weight)
    grads = loss.backend.backward(loss, on_final=reducer.on_final if hook else None)
    return reducer, grads


def _data(n=8, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 4)).astype(np.float32), (np.arange(n) % 3).astype(np.int32)


@pytest.mark.parametrize("hook", [True, False])
def test_reducer_sums_the_replicas_weighted_gradients_in_buckets(monkeypatch, hook):
    monkeypatch.setattr(parallel, "BUCKET_BYTES", 64)  # several buckets for a small model
    one = model(dropout=0.0).to(Autodiff(NdArray()))
    two = one.clone().to(Autodiff(NdArray()))
    (x0, y0), (x1, y1) = _data(seed=1), _data(seed=2)
    group = parallel.ThreadGroup(2)
    results = {}

    def run(rank, m, x, y):
        reducer, grads = _replica_grads(m, x, y, group, rank, [0.25, 0.75][rank], hook)
        results[rank] = (reducer.finish(grads), optim.GradientsParams.from_grads(grads, m),
                         len(reducer.handles))
    threads = [threading.Thread(target=run, args=a) for a in [(0, one, x0, y0),
                                                              (1, two, x1, y1)]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (sum0, plain0, buckets), (sum1, plain1, _) = results[0], results[1]
    assert buckets > 1
    assert set(sum0.ids()) == set(plain0.ids()) == set(sum1.ids())
    for pid in plain0.ids():
        want = 0.25 * plain0[pid].to_numpy() + 0.75 * plain1[pid].to_numpy()
        np.testing.assert_allclose(sum0[pid].to_numpy(), want, rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(sum1[pid].to_numpy(), sum0[pid].to_numpy())


def test_buckets_start_reducing_during_backward(monkeypatch):
    monkeypatch.setattr(parallel, "BUCKET_BYTES", 64)
    m = model(dropout=0.0).to(Autodiff(NdArray()))
    group, events = parallel.ThreadGroup(1), []
    real = group.start
    monkeypatch.setattr(group, "start", lambda *a: events.append("reduce") or real(*a))
    reducer, grads = _replica_grads(m, *_data(), group, 0, 1.0)
    events.append("backward returned")
    reducer.finish(grads)
    assert events.index("backward returned") > events.index("reduce")  # overlapped
    assert events.count("reduce") == len(reducer.handles) > 1


def test_a_gradient_that_grew_after_its_hook_is_sent_in_full():
    # a weight used inside a checkpoint and outside it: the checkpoint's rule may add to its
    # gradient after the walk has passed its leaf; the reducer sends the difference
    from ember import nn
    B = Autodiff(NdArray())
    lin = nn.Linear(4, 4, backend=B)
    x = Tensor.from_data(_data()[0], backend=B)
    loss = (checkpoint(lambda t: lin(t).relu(), x) @ lin.weight.value()).sum()
    reducer = parallel.Reducer(parallel.ThreadGroup(1), 0, lin, 1.0)
    grads = loss.backend.backward(loss, retain_graph=True, on_final=reducer.on_final)
    plain = optim.GradientsParams.from_grads(grads, lin)
    # and a gradient the hook saw at half its final value
    late = parallel.Reducer(parallel.ThreadGroup(1), 0, lin, 1.0)
    late.on_final(lin.weight._prim.node.id, plain[lin.weight] * 0.5)
    for summed in (reducer.finish(grads), late.finish(grads)):
        for name, p in lin.named_params():
            np.testing.assert_allclose(summed[p].to_numpy(), plain[p].to_numpy(), rtol=1e-6,
                                       err_msg=name)


def test_a_failing_replica_wakes_the_others():
    group = parallel.ThreadGroup(2)
    waiting = group.start(0, 0, Tensor.from_data(np.ones(3, np.float32)))
    group.abort(ValueError("replica 1 broke"))
    with pytest.raises(RuntimeError, match="another replica failed"):
        waiting.wait()


def test_replicas_with_other_gradients_are_refused():
    group = parallel.ThreadGroup(2)
    waiting = group.start(0, 0, Tensor.from_data(np.ones(3, np.float32)))
    group.start(1, 0, Tensor.from_data(np.ones(4, np.float32)))
    with pytest.raises(RuntimeError, match="another replica failed") as e:
        waiting.wait()
    assert "bucket 0 has sizes [3, 4]" in str(e.value.__cause__)


def test_environment_of_torchrun(monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR"):
        monkeypatch.delenv(k, raising=False)
    assert parallel.environment() is None
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert parallel.environment() is None  # no MASTER_ADDR: not torchrun
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    assert parallel.environment() == (1, 2)
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert parallel.environment() is None  # one process: nothing to reduce


def test_torchrun_without_torch_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "torch.distributed", None)
    with pytest.raises(ImportError, match="runs under torchrun.*pip install torch"):
        parallel.TorchGroup(NdArray())


# ---- two processes under torchrun ---------------------------------------------------------------
def _torchrun(out, mode):
    pytest.importorskip("torch.distributed", reason="the torchrun path needs torch")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("RANK", None)
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
         "--master-addr", "127.0.0.1", "--master-port", str(port),
         str(HERE / "dist_worker.py"), str(out), mode],
        env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [dict(np.load(out / f"rank{r}.npz")) for r in range(2)]


def _same(a, b, exact=False):
    for name in b:
        if exact:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)
        else:
            np.testing.assert_allclose(a[name], b[name], rtol=2e-5, atol=2e-6, err_msg=name)


def test_two_processes_train_as_one_with_the_same_global_batch(tmp_path):
    r0, r1 = _torchrun(tmp_path, "full")
    w, losses = _one_process()
    assert r0["step"] == r1["step"] == 20
    _same(r0, w)
    _same(r1, r0, exact=True)  # the same sums, the same updates
    np.testing.assert_allclose(r0["losses"], losses, rtol=1e-5)  # process 0 reports all
    assert (tmp_path / "run0" / "model.safetensors").is_file()
    assert not (tmp_path / "run1").exists()  # process 1 writes nothing


def test_two_processes_stop_at_the_same_step_and_resume(tmp_path):
    r0, r1 = _torchrun(tmp_path, "stop")  # process 0 asks after step 7: both stop after 8
    assert r0["step"] == r1["step"] == 8
    _same(r1, r0, exact=True)
    names = [p.name for p in (tmp_path / "run0" / "checkpoints").iterdir()]
    assert "ckpt-e0001-s00000008.safetensors" in names
    r0, r1 = _torchrun(tmp_path, "resume")
    w, _ = _one_process()
    assert r0["step"] == r1["step"] == 20
    _same(r0, w)
    _same(r1, r0, exact=True)


def test_several_devices_per_process_under_torchrun_are_refused(monkeypatch):
    for k, v in {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValueError, match="under torchrun each process trains on one device"):
        train.Learner(model(), optim.SGD(lr=0.1), dashboard=None,
                      devices=[NdArray(), NdArray()])
