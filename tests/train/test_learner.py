"""Learner: training improves the model, validation, metrics per split, checkpoints (keep
last N, best), resume gives bit-identical weights, early stopping, Ctrl-C and its second press,
outputs (model.safetensors, history.json, curves.png)."""

import json
import os
import signal
import zlib

import numpy as np
import pytest

from ember import optim, record, train
from ember.autodiff import Autodiff
from ember.backend import NdArray

from .helpers import StopAt, loaders, model, optimizer, weights


def fit(tmp_path, epochs=4, dashboard=None, **kw):
    m = model()
    tl, vl = loaders()
    learner = train.Learner(m, optimizer(), metrics=[train.Accuracy(), train.Loss(),
                                                     train.LearningRate()],
                            dashboard=dashboard, checkpoint_dir=tmp_path, **kw)
    return learner, learner.fit(tl, vl, epochs=epochs)


def test_fit_learns_and_records(tmp_path):
    learner, m = fit(tmp_path, epochs=5)
    assert isinstance(m.backend(), Autodiff)  # moved onto Autodiff for training
    acc = learner.history.epoch_values("Accuracy", "valid")
    assert sorted(acc) == [0, 1, 2, 3, 4] and acc[4] > 0.9
    loss = learner.history.epoch_values("Loss", "train")
    assert loss[4] < loss[0]
    assert learner.step == 25 and learner.epoch == 5 and not learner.interrupted
    assert "LearningRate" not in {m.name for m in learner.metrics["valid"]}
    assert learner.validate(loaders()[1])["Accuracy"] == pytest.approx(acc[4])
    # outputs
    files = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert files == ["ckpt-e0004-s00000020.safetensors", "ckpt-e0005-s00000025.safetensors"]
    saved = model()
    record.load(saved, tmp_path / "model.safetensors")
    for name, value in weights(m).items():
        np.testing.assert_array_equal(weights(saved)[name], value)
    history = json.loads((tmp_path / "history.json").read_text())
    assert history["epochs_done"] == 5
    assert history["metrics"]["Accuracy"]["valid"]["4"] == pytest.approx(acc[4])
    png = (tmp_path / "curves.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and b"IDAT" in png


def test_best_weights_are_kept(tmp_path):
    learner, _ = fit(tmp_path, epochs=3, best_metric=("valid", "Accuracy"))
    best_value, best_epoch = learner.best
    acc = learner.history.epoch_values("Accuracy", "valid")
    assert best_value == max(acc.values()) and acc[best_epoch] == best_value
    _, meta = record.read_safetensors(tmp_path / "best.safetensors")
    assert meta["epoch"] == str(best_epoch) and meta["metric"] == "valid/Accuracy"


def test_resume_continues_bit_for_bit(tmp_path):
    _, full = fit(tmp_path / "full", epochs=4)
    stopper = StopAt(7)  # mid-epoch 2 (5 steps per epoch)
    learner, _ = fit(tmp_path / "cut", epochs=4, dashboard=stopper)
    assert learner.interrupted and learner.step == 7 and (learner.epoch, learner.batch) == (1, 2)
    assert any("to resume" in m for m in stopper.messages)

    m = model(seed=123)  # other initial weights, another RNG state: the checkpoint decides
    again = train.Learner(m, optimizer(), metrics=[train.Accuracy(), train.Loss(),
                                                   train.LearningRate()],
                          dashboard=None, checkpoint_dir=tmp_path / "cut")
    again.resume()
    assert (again.epoch, again.batch, again.step) == (1, 2, 7)
    tl, vl = loaders()
    resumed = again.fit(tl, vl, epochs=4)
    assert again.step == 20
    for name, value in weights(full).items():
        np.testing.assert_array_equal(weights(resumed)[name], value, err_msg=name)
    assert again.optimizer.scheduler.last_epoch == 20  # the scheduler went on too
    # the curves went on where they stopped
    xs, _ = again.history.series("Loss", "train")
    assert len(xs) == 20 and np.all(np.diff(xs) > 0)


def test_resume_of_a_stop_during_validation(tmp_path):
    class StopInValidation(train.Dashboard):
        def step(self, learner, split):
            if split == "valid":
                self.stop_requested = True
    learner, _ = fit(tmp_path, epochs=2, dashboard=StopInValidation())
    assert learner.interrupted and (learner.epoch, learner.batch) == (0, 5)
    again = train.Learner(model(), optimizer(), metrics=[train.Accuracy()], dashboard=None,
                          checkpoint_dir=tmp_path)
    again.resume()
    tl, vl = loaders()
    again.fit(tl, vl, epochs=2)
    assert again.step == 10 and sorted(again.history.epoch_values("Loss", "valid")) == [0, 1]


def test_early_stopping(tmp_path):
    m = model()
    tl, vl = loaders()
    stopper = train.EarlyStopping("Loss", "valid", patience=2)
    learner = train.Learner(m, optimizer(), dashboard=None, early_stopping=stopper)
    learner.optimizer.lr = 0.0  # nothing improves after the first epoch
    learner.fit(tl, vl, epochs=10)
    assert learner.stopped_early and learner.epoch == 3


def test_keep_last_and_checkpoint_every(tmp_path):
    fit(tmp_path, epochs=2, keep_last=3, checkpoint_every=2)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    # every 2 steps (2, 4, 6, 8; 10 ends an epoch) and at epoch ends (5, 10): 3 newest stay
    assert names == ["ckpt-e0001-s00000006.safetensors", "ckpt-e0001-s00000008.safetensors",
                     "ckpt-e0002-s00000010.safetensors"]


def test_checkpoint_holds_everything(tmp_path):
    learner, _ = fit(tmp_path, epochs=1)
    state = train.checkpoint.load(tmp_path / "checkpoints")
    assert {"model", "optim", "epoch", "batch", "step", "rng", "metrics", "history",
            "seconds"} <= set(state)
    assert state["optim"]["lr"]["last_epoch"] == 5  # the scheduler's count
    assert state["rng"]["bit_generator"] == "PCG64"
    with pytest.raises(train.CheckpointError, match="does not exist"):
        train.checkpoint.load(tmp_path / "nothing-here")
    (tmp_path / "empty").mkdir()
    with pytest.raises(train.CheckpointError, match="no checkpoint"):
        train.checkpoint.load(tmp_path / "empty")
    record.save_state({"x": 1}, tmp_path / "other.safetensors")
    with pytest.raises(train.CheckpointError, match="not an ember.train checkpoint"):
        train.checkpoint.load(tmp_path / "other.safetensors")


class KillAt(train.Dashboard):
    """Sends this process SIGINT (a real Ctrl-C) at the given steps."""

    def __init__(self, *steps):
        self.steps, self.messages = set(steps), []

    def step(self, learner, split):
        if split == "train" and learner.step in self.steps:
            self.steps.discard(learner.step)
            os.kill(os.getpid(), signal.SIGINT)

    def message(self, text):
        self.messages.append(text)


def test_ctrl_c_finishes_the_step_and_checkpoints(tmp_path):
    dash = KillAt(3)
    learner, _ = fit(tmp_path, epochs=3, dashboard=dash)
    assert learner.interrupted and learner.step == 3
    assert learner.last_checkpoint.name == "ckpt-e0000-s00000003.safetensors"
    assert any("Ctrl-C" in m for m in dash.messages)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


def test_second_ctrl_c_stops_at_once_without_half_files(tmp_path, monkeypatch):
    from ember.record import _safetensors
    real_write, real_chunk = _safetensors.atomic_write, _safetensors.write_chunk
    calls = []

    def atomic_write(path, chunks):
        calls.append(os.path.basename(path))
        return real_write(path, chunks)

    def write_chunk(f, chunk):  # the second Ctrl-C lands while the checkpoint is written
        real_chunk(f, chunk)
        if calls[-1] == "ckpt-e0001-s00000007.safetensors":
            os.kill(os.getpid(), signal.SIGINT)
    monkeypatch.setattr(_safetensors, "atomic_write", atomic_write)
    monkeypatch.setattr(_safetensors, "write_chunk", write_chunk)
    with pytest.raises(KeyboardInterrupt):
        fit(tmp_path, epochs=3, dashboard=KillAt(7))
    assert calls[-1] == "ckpt-e0001-s00000007.safetensors"  # the write had begun
    folder = tmp_path / "checkpoints"
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["ckpt-e0001-s00000005.safetensors"]  # the last complete one, no .tmp
    state = train.checkpoint.load(folder)
    assert state["step"] == 5


def test_plain_dashboard_lines(tmp_path):
    import io
    buf = io.StringIO()
    m = model()
    tl, vl = loaders()
    learner = train.Learner(m, optimizer(), metrics=[train.Accuracy()],
                            dashboard=train.PlainDashboard(file=buf, lines_per_epoch=5))
    learner.fit(tl, vl, epochs=2)
    text = buf.getvalue()
    assert "5 train batches, 2 valid batches per epoch, 2 epochs" in text
    assert "epoch 1/2 train [1/5]" in text and "epoch 2/2 train [5/5]" in text
    assert "epoch 2 done" in text and "valid: Loss" in text and "Accuracy" in text


def test_png_writer_draws(tmp_path):
    learner, _ = fit(tmp_path, epochs=2)
    png = (tmp_path / "curves.png").read_bytes()
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    idat = png[png.index(b"IDAT") + 4:png.index(b"IEND") - 8]
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(height, -1)
    pixels = raw[:, 1:].reshape(height, width, 3)
    assert (width, height) == (1120, 640)  # 3 metrics: 2 columns, 2 rows
    colours = {tuple(c) for c in pixels.reshape(-1, 3)[::7]}
    assert (31, 119, 180) in colours and (255, 127, 14) in colours  # train and valid curves


def test_bad_arguments():
    with pytest.raises(TypeError, match="metrics"):
        train.Learner(model(), optimizer(), metrics=["accuracy"])
    with pytest.raises(ValueError, match="dashboard"):
        train.Learner(model(), optimizer(), dashboard="fancy")
    with pytest.raises(ValueError, match="patience"):
        train.EarlyStopping(patience=0)


def test_sigterm_stops_as_ctrl_c_does(tmp_path):
    class TermAt(KillAt):
        def step(self, learner, split):
            if split == "train" and learner.step in self.steps:
                self.steps.discard(learner.step)
                os.kill(os.getpid(), signal.SIGTERM)
    before = signal.getsignal(signal.SIGTERM)
    dash = TermAt(3)
    learner, _ = fit(tmp_path, epochs=3, dashboard=dash)
    assert learner.interrupted and learner.step == 3
    assert learner.last_checkpoint.name == "ckpt-e0000-s00000003.safetensors"
    assert any(m.startswith("SIGTERM: stopping after this step") for m in dash.messages)
    assert signal.getsignal(signal.SIGTERM) is before  # restored


def test_the_signal_handler_only_flags_and_the_loop_says_it():
    # a handler that prints can interrupt a print and raise "reentrant call" instead of
    # stopping (it failed the page's Stop button once, in Pyodide)
    from ember.train.learner import _Stop
    said = []
    stop = _Stop(said.append)
    stop._handler(signal.SIGINT, None)
    assert stop.requested and said == []
    assert stop.check() and said == ["Ctrl-C"]
    assert stop.check() and said == ["Ctrl-C"]  # said once
    with pytest.raises(KeyboardInterrupt):  # the second one stops at once
        stop._handler(signal.SIGINT, None)


def test_a_non_finite_loss_stops_before_its_update(tmp_path):
    m = model()
    tl, vl = loaders()
    learner = train.Learner(m, optim.Adam(lr=float("inf")), dashboard=None,
                            checkpoint_dir=tmp_path)
    with pytest.raises(FloatingPointError, match=r"loss is nan at step 2 \(epoch 1, batch 2\)"):
        learner.fit(tl, vl, epochs=2)
    assert learner.step == 1  # step 2 never updated anything
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "model.safetensors").exists()


class Poison(train.Dashboard):
    """Turns the weights to NaN after `step` (a bad update that no loss has shown yet), then
    asks for a stop, whose checkpoint must be refused."""

    def __init__(self, step):
        self.at = step

    def step(self, learner, split):
        if split == "train" and learner.step == self.at:
            record.load_state_dict(learner.model, {
                n: np.full_like(a, np.nan) for n, a in record.state_dict(learner.model).items()})
            self.stop_requested = True


def test_no_checkpoint_of_non_finite_weights(tmp_path):
    learner, _ = fit(tmp_path, epochs=1)  # 5 steps: a good checkpoint
    (good,) = train.checkpoint.list_checkpoints(tmp_path / "checkpoints")
    before = good.read_bytes()
    again = train.Learner(model(), optimizer(), dashboard=Poison(7), checkpoint_dir=tmp_path)
    again.resume()
    tl, vl = loaders()
    with pytest.raises(FloatingPointError, match=r"not finite after step 7.*" + good.name):
        again.fit(tl, vl, epochs=3)
    assert train.checkpoint.list_checkpoints(tmp_path / "checkpoints") == [good]
    assert good.read_bytes() == before


def test_a_checkpoint_that_cannot_be_written_keeps_the_earlier_one(tmp_path, monkeypatch):
    import errno

    from ember.record import _safetensors
    real = _safetensors.atomic_write

    def atomic_write(path, chunks):
        if "s00000010" in os.fspath(path):  # the disk is full at the second epoch's end
            raise OSError(errno.ENOSPC, "No space left on device", os.fspath(path))
        return real(path, chunks)
    monkeypatch.setattr(_safetensors, "atomic_write", atomic_write)
    with pytest.raises(train.CheckpointError, match=r"checkpoint of step 10 .*No space left.*"
                                                    r"ckpt-e0001-s00000005.safetensors, is kept"):
        fit(tmp_path, epochs=3)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["ckpt-e0001-s00000005.safetensors"]
    assert train.checkpoint.load(tmp_path / "checkpoints")["step"] == 5


# ---- data parallel on threads: Learner(devices=[...]) -----------------------------------------
@pytest.mark.parametrize("strategy", ["ddp", "multi"])
@pytest.mark.parametrize("n_devices", [2, 4])
def test_virtual_devices_train_as_one_device_with_the_same_global_batch(n_devices, strategy):
    from ember.backend import NdArray
    runs = {}
    for devices in (None, [NdArray() for _ in range(n_devices)]):
        m = model(seed=3, dropout=0.0)  # (dropout's masks are drawn per replica)
        # SGD, not Adam: its step is proportional to the gradient, so a wrong weighting of
        # the shards' gradients shows
        learner = train.Learner(m, optim.SGD(lr=0.1, momentum=0.9), dashboard=None,
                                devices=devices, strategy=strategy)
        train_loader, _ = loaders(batch_size=10)
        learner.fit(train_loader, epochs=5)  # 4 batches of 10 an epoch: 20 steps
        runs["one" if devices is None else "many"] = (weights(learner.model),
                                                       learner.validate(loaders()[1]))
    (w1, v1), (wn, vn) = runs["one"], runs["many"]
    for name in w1:
        np.testing.assert_allclose(wn[name], w1[name], rtol=2e-5, atol=2e-6, err_msg=name)
    assert vn["Loss"] == pytest.approx(v1["Loss"], rel=1e-5)


def test_devices_run_their_shards_on_their_own_threads(monkeypatch):
    import threading

    from ember.backend import NdArray
    seen = set()
    real = NdArray.execute

    def spying(self, *args):
        seen.add((id(self), threading.get_ident()))
        return real(self, *args)
    monkeypatch.setattr(NdArray, "execute", spying)
    devices = [NdArray(), NdArray()]
    learner = train.Learner(model(dropout=0.0), optimizer(), dashboard=None, devices=devices)
    train_loader, _ = loaders(batch_size=10)
    learner.fit(train_loader, epochs=1)
    threads = {t for d, t in seen if d == id(devices[1])}
    assert threads and threading.get_ident() not in threads  # replica 1 ran off the main one


def test_devices_and_backend_together_are_refused():
    from ember.backend import NdArray
    with pytest.raises(ValueError, match="backend= or devices="):
        train.Learner(model(), optimizer(), dashboard=None, backend=NdArray(),
                      devices=[NdArray(), NdArray()])


def _devices_fit(tmp_path, strategy, dashboard=None, overlap=True, resume=False, **kw):
    from ember.backend import NdArray
    learner = train.Learner(model(seed=3, dropout=0.0), optimizer(), dashboard=dashboard,
                            checkpoint_dir=tmp_path, devices=[NdArray(), NdArray(), NdArray()],
                            strategy=strategy, **kw)
    learner._overlap = overlap
    if resume:
        learner.resume()
    return learner, learner.fit(loaders(batch_size=10)[0], epochs=4)


def test_ddp_replicas_keep_equal_weights_and_optimizer_states(tmp_path):
    learner, m = _devices_fit(tmp_path, "ddp")
    (m0, o0, _), *others = learner._replicas
    assert m0 is m and o0 is learner.optimizer
    for mi, oi, _ in others:
        for name, value in weights(m).items():
            np.testing.assert_array_equal(weights(mi)[name], value, err_msg=name)
        assert oi.step_count == o0.step_count == 16
        assert oi.scheduler.last_epoch == o0.scheduler.last_epoch == 16


def test_ddp_overlap_changes_nothing_but_the_time(tmp_path):
    _, overlapped = _devices_fit(tmp_path / "a", "ddp")
    _, after = _devices_fit(tmp_path / "b", "ddp", overlap=False)
    for name, value in weights(after).items():  # the same sums, in other buckets
        np.testing.assert_array_equal(weights(overlapped)[name], value, err_msg=name)


@pytest.mark.parametrize("strategy", ["ddp", "multi"])
def test_devices_resume_continues_bit_for_bit(tmp_path, strategy):
    _, full = _devices_fit(tmp_path / "full", strategy)
    learner, _ = _devices_fit(tmp_path / "cut", strategy, dashboard=StopAt(6))
    assert learner.interrupted and learner.step == 6
    _, resumed = _devices_fit(tmp_path / "cut", strategy, resume=True)
    for name, value in weights(full).items():
        np.testing.assert_array_equal(weights(resumed)[name], value, err_msg=name)


def test_unknown_strategy_is_refused():
    from ember.backend import NdArray
    with pytest.raises(ValueError, match="strategy must be 'ddp' or 'multi'"):
        train.Learner(model(), optimizer(), dashboard=None, devices=[NdArray(), NdArray()],
                      strategy="fsdp")


@pytest.mark.parametrize("strategy", ["ddp", "multi"])
def test_two_virtual_wgpu_devices_train_as_one(strategy):
    pytest.importorskip("wgpu")
    from ember.backend import Wgpu
    runs = {}
    for devices in (None, [Wgpu(), Wgpu()]):  # two instances on one adapter
        m = model(seed=3, dropout=0.0)
        if devices is None:
            m.to(Wgpu())
        learner = train.Learner(m, optim.SGD(lr=0.1, momentum=0.9), dashboard=None,
                                devices=devices, strategy=strategy)
        learner.fit(loaders(batch_size=10)[0], epochs=5)  # 20 steps
        losses = learner.history.epoch_values("Loss", "train")
        runs["many" if devices else "one"] = weights(learner.model), losses
    (w1, l1), (wn, ln) = runs["one"], runs["many"]
    for name in w1:
        np.testing.assert_allclose(wn[name], w1[name], rtol=2e-5, atol=2e-6, err_msg=name)
    assert ln == pytest.approx(l1, rel=1e-5)


def test_a_recorded_step_trains_as_the_eager_one(tmp_path):
    # jit=True: forward, backward and Adam's scheduled update captured once and replayed
    # (dropout drawing its mask per replay where eager training draws it): the same run
    eager, m_eager = fit(tmp_path / "eager", epochs=3)
    jitted, m_jit = fit(tmp_path / "jit", epochs=3, jit=True)
    for split in ("train", "valid"):
        for name in ("Loss", "Accuracy"):
            assert jitted.history.epoch_values(name, split) == \
                eager.history.epoch_values(name, split), (name, split)
    assert "1 captured" in repr(jitted._jit_step) and jitted.step == eager.step == 15
    for name, value in weights(m_eager).items():
        np.testing.assert_array_equal(weights(m_jit)[name], value, err_msg=name)


def test_a_recorded_step_is_for_one_device():
    with pytest.raises(ValueError, match="jit=True records the step of one device"):
        train.Learner(model(), optimizer(), dashboard=None, jit=True,
                      devices=[NdArray(), NdArray()])


@pytest.mark.parametrize("jit", [False, True])
def test_a_non_finite_loss_stops_the_run_saying_whether_its_update_ran(jit):
    learner = train.Learner(model(dropout=0.0), optimizer(), dashboard=None, jit=jit,
                            loss=lambda logits, y: logits.sum() * float("nan"))
    said = "the recorded step .* applied its update" if jit else "stopped before that step's"
    with pytest.raises(FloatingPointError, match=f"loss is nan at step 1 .*diverged.*{said}"):
        learner.fit(loaders(batch_size=10)[0], epochs=1)
