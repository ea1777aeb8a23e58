"""Learner: Burn's training loop in Python (the example: ember.train's docstring).

Each training step: forward, loss, backward, `opt.step(model, grads)` (the LR scheduler, if the
optimizer has one, advances once per step). Validation runs on `model.valid()` (the same
weights on the inner backend, eval mode, no tape). A model on a backend without Autodiff is
moved onto Autodiff(that backend) for training (no copy).

Stopping: Ctrl-C (SIGINT), SIGTERM or the dashboard's `q` lets the current step finish, writes
a checkpoint (atomically), prints how to resume and returns the model, with
`learner.interrupted` set. A second signal raises KeyboardInterrupt at once; a checkpoint
being written then is either complete or absent, never half written. A non-finite training
loss raises FloatingPointError before its step updates the weights, and no checkpoint is ever
written of non-finite weights; a checkpoint that cannot be written (a full disk) raises
CheckpointError, the earlier checkpoints intact.

Checkpoints (checkpoint_dir/checkpoints/): at every epoch end, every `checkpoint_every`
steps and on interruption; the `keep_last` newest are kept. `best_metric=("valid",
"Accuracy")` also keeps the best weights in checkpoint_dir/best.safetensors. At the end:
checkpoint_dir/model.safetensors (the last weights), history.json (epoch values) and
curves.png (every metric's train and valid curves). `learner.resume(path or folder)` restores
model, optimizer (and its scheduler), epoch and batch, RNG state, metric sums and curves; a
DataLoader then continues at the very batch the run stopped before.

Data parallel: `devices=[B1, B2, ...]` (a replica per device, each on its thread; strategy "ddp"
or "multi") or torchrun (a replica per process): _ddp_step and parallel.py.
"""

import contextlib
import copy
import json
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from pathlib import Path

import numpy as np

from .. import capture, record
from ..autodiff import Autodiff, no_grad
from ..distribution import rng as ember_rng
from ..tensor import Tensor
from . import checkpoint as ckpt
from . import parallel
from .dashboard import Dashboard, make_dashboard
from .history import History
from .metrics import Loss, Metric, StepOutput

__all__ = ["EarlyStopping", "Learner"]


class EarlyStopping:
    """Stop when `metric` on `split` has not improved by more than min_delta for `patience`
    epochs. The direction comes from the metric (Loss: lower is better)."""

    def __init__(self, metric="Loss", split="valid", patience=3, min_delta=0.0):
        if patience < 1:
            raise ValueError(f"EarlyStopping: patience must be >= 1, got {patience}")
        self.metric, self.split, self.patience, self.min_delta = metric, split, patience, min_delta
        self.best, self.bad_epochs = None, 0

    def update(self, value, higher_is_better):
        """Record an epoch's value; True when training should stop."""
        if value is None:
            return False
        better = self.best is None or (
            value > self.best + self.min_delta if higher_is_better
            else value < self.best - self.min_delta)
        if better:
            self.best, self.bad_epochs = value, 0
        else:
            self.bad_epochs += 1
        return self.bad_epochs >= self.patience

    def state_dict(self):
        return {"best": self.best, "bad_epochs": self.bad_epochs}

    def load_state_dict(self, state):
        self.best = None if state["best"] is None else float(state["best"])
        self.bad_epochs = int(state["bad_epochs"])

    def __repr__(self):
        return (f"EarlyStopping(metric={self.metric!r}, split={self.split!r}, "
                f"patience={self.patience}, min_delta={self.min_delta})")


class _Stop:
    """SIGINT and SIGTERM handling while fitting: the first signal asks for a clean stop, the
    second raises KeyboardInterrupt. Installed only on the main thread (signals need it).
    deferred (under torchrun): a request is only `wanted` until the processes agree() in a
    training step, so that all of them stop after the same step."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, announce, deferred=False):
        self.requested, self.count, self.reason, self.wanted = False, 0, None, None
        self._announce, self._old, self.deferred = announce, {}, deferred
        self._unannounced = None

    def request(self, reason):
        """Only flags: the signal handler calls it, and a handler must not print (a print it
        interrupts raises "reentrant call inside BufferedWriter"); check() tells the user."""
        if self.wanted is None:
            self.wanted = self._unannounced = reason
        if not self.deferred:
            self.agree(reason)

    def check(self):
        """The loop's point of stopping: says a request made since, then whether to stop."""
        if self._unannounced is not None:
            reason, self._unannounced = self._unannounced, None
            self._announce(reason)
        return self.requested

    def agree(self, reason):
        if not self.requested:
            self.requested, self.reason = True, reason

    def _handler(self, signum, frame):
        self.count += 1
        if self.count > 1:
            raise KeyboardInterrupt
        self.request("Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name)

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                with contextlib.suppress(ValueError, OSError, AttributeError):
                    self._old[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old = {}


class Learner:
    """Trains `model` with `optimizer` on batches (x, y): see the module docstring.

    loss: a loss module or function (default nn.CrossEntropyLoss()).
    metrics: Metric instances (a Loss() is added when missing).
    dashboard: "tui", "plain", None, "auto" (tui on a terminal where Rich is installed, plain
        otherwise) or a Dashboard instance.
    checkpoint_dir: where checkpoints, the final weights, history.json and curves.png go
        (None: nowhere, and an interruption just returns).
    keep_last: checkpoints kept; checkpoint_every: also checkpoint every N steps.
    best_metric: (split, metric name) whose best epoch is kept as best.safetensors.
    early_stopping: an EarlyStopping.
    backend: train on Autodiff(backend) (default: the model's backend).
    extra_state: a dict stored in every checkpoint (`ember train` keeps its settings there).
    resume_hint: what to print after an interruption (default: learner.resume(...)).
    title: the dashboard's title.
    devices: backends to train on in data parallel (one replica and thread each); the first
        holds the model, and validation, metrics and checkpoints.
    jit: record the training step once with ember.jit (forward, backward and the update) and
        replay it (on Wgpu one submission per step); single device only.
    strategy: with devices, "ddp" (every replica keeps its weights and optimizer; gradients
        all-reduced in buckets during backward, the same update on each: _ddp_step) or
        "multi" (the replicas cloned from the model at every step, one optimizer, one
        update on the first device: _ddp_step(multi=True)).

    Under torchrun (RANK, WORLD_SIZE, MASTER_ADDR set; torch needed) every process trains a
    replica on its shard of each batch, gradients all-reduced through torch.distributed;
    process 0 (learner.rank) alone has the dashboard and writes checkpoints and outputs.
    """

    def __init__(self, model, optimizer, loss=None, metrics=None, dashboard="auto",
                 checkpoint_dir=None, keep_last=2, checkpoint_every=None, best_metric=None,
                 early_stopping=None, backend=None, extra_state=None, resume_hint=None,
                 title="ember train", devices=None, strategy="ddp", jit=False):
        from .. import nn
        self.optimizer = optimizer
        self.loss_fn = loss if loss is not None else nn.CrossEntropyLoss()
        metrics = list(metrics) if metrics is not None else []
        for m in metrics:
            if not isinstance(m, Metric):
                raise TypeError(f"Learner: metrics must be ember.train metrics, got {m!r}")
        if not any(isinstance(m, Loss) for m in metrics):
            metrics.insert(0, Loss())
        self.metric_types = metrics
        # one instance per split, so train and valid sums never mix
        self.metrics = {split: [_fresh(m) for m in metrics if split in m.splits]
                        for split in ("train", "valid")}
        self.dashboard = make_dashboard(dashboard)
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None
        self.keep_last, self.checkpoint_every = keep_last, checkpoint_every
        self.best_metric, self.early_stopping = best_metric, early_stopping
        self.extra_state = dict(extra_state or {})
        self.resume_hint, self.title = resume_hint, title
        self.devices = [_autodiff(b) for b in devices] if devices else None
        if self.devices:
            if backend is not None:
                raise ValueError("Learner: give backend= or devices=, not both (the model "
                                 "trains on the first device)")
            backend = self.devices[0]
        self.model = _on_autodiff(model, backend)
        if strategy not in ("ddp", "multi"):
            raise ValueError(f"Learner: strategy must be 'ddp' or 'multi', got {strategy!r}")
        self.strategy, self._overlap, self._replicas, self._stop = strategy, True, None, None
        self.jit, self._jit_step = bool(jit), None
        self._dist, self.rank = None, 0
        if parallel.environment() is not None:
            if self.devices and len(self.devices) > 1:
                raise ValueError("Learner: under torchrun each process trains on one device; "
                                 "give each process its own (devices=None, or one device)")
            self._dist = parallel.TorchGroup(self._backend().inner)
            self.rank = self._dist.rank
            if self.rank != 0:  # process 0 reports (also how to resume) and writes
                self.dashboard = Dashboard()
        if self.jit and ((self.devices and len(self.devices) > 1) or self._dist is not None):
            raise ValueError("Learner: jit=True records the step of one device; data-parallel "
                             "training (devices=, torchrun) runs eagerly: drop jit=True")
        self.history = History()
        self.epoch, self.batch, self.step, self.epochs = 0, 0, 0, None
        self.best = None            # (value, epoch) of best_metric
        self.interrupted = False    # stopped by Ctrl-C or the dashboard
        self.stopped_early = False  # stopped by early_stopping
        self.last_checkpoint = None
        self._timing = {"train": None, "valid": None}  # seconds per batch (moving average)
        self._started = None        # perf_counter() when this fit() began
        self._seconds_before = 0.0  # training seconds of earlier runs (resumed from)
        self._progress = {"split": "train", "batch": 0, "batches": 0}
        self._loaders = None

    # ---- the loop ----------------------------------------------------------------------------
    def fit(self, train_loader, valid_loader=None, epochs=1):
        """Train until epoch `epochs` (counted from the first run, also after a resume) is
        done; returns the model (also learner.model)."""
        self.epochs = int(epochs)
        self._loaders = (train_loader, valid_loader)
        self.interrupted = self.stopped_early = False
        if self.dashboard.stop_requested:  # a `q` of an earlier fit() is spent
            self.dashboard.stop_requested = False
        self._started = time.perf_counter()
        self._replicas = None  # made again from self.model: it may have changed since
        self._jit_step = None  # captured again: a resume may have replaced the optimizer state
        stop = self._stop = _Stop(self._announce_stop, deferred=self._dist is not None)
        self.dashboard.start(self)
        try:
            with stop:
                while self.epoch < self.epochs and not stop.requested:
                    if self.batch == 0:
                        for m in self.metrics["train"]:
                            m.reset()
                    self._train_epoch(train_loader, stop)
                    if stop.requested:
                        break
                    summary = {"train": self._values("train")}
                    if valid_loader is not None:
                        summary["valid"] = self._validate_epoch(valid_loader, stop)
                        if summary["valid"] is None:  # interrupted during validation
                            break
                    self._end_epoch(summary)
                if stop.check():
                    self.interrupted = True
                    self._checkpoint(reason=stop.reason)
                    self._tell_resume()
        finally:
            self._seconds_before, self._started = self.seconds, None
            self.dashboard.close()
        self._write_outputs()
        return self.model

    @property
    def seconds(self):
        """Seconds spent training this run, earlier runs it resumed from included."""
        running = time.perf_counter() - self._started if self._started is not None else 0.0
        return self._seconds_before + running

    def _announce_stop(self, reason):
        again = f" ({reason} again stops at once)" if reason in ("Ctrl-C", "SIGTERM") else ""
        self.dashboard.message(f"{reason}: stopping after this step and writing a "
                               f"checkpoint{again}")

    def _batches(self, loader, epoch, start, shard=False):
        """The batches from `start` on; shard: under torchrun, this process's part of each."""
        from ..data import DataLoader
        part = (self.rank, self._dist.size) if shard and self._dist is not None else None
        if isinstance(loader, DataLoader):
            return loader.batches(epoch, start, shard=part)
        batches = (loader.batches(epoch, start) if hasattr(loader, "batches")
                   else islice(iter(loader), start, None))
        if part is None:
            return batches
        return ((_numpy(x)[slice(*_cut(len(x), *part))], _numpy(y)[slice(*_cut(len(y), *part))])
                for x, y in batches)

    def _train_epoch(self, loader, stop):
        n = _length(loader)
        if n is not None and self.batch >= n:
            return  # this epoch's training is done: validation was interrupted
        self.model.train()
        needs_output = any(m.needs_output for m in self.metrics["train"])
        tick = time.perf_counter()
        for batch in self._batches(loader, self.epoch, self.batch, shard=True):
            out = self._train_step(batch, needs_output)
            self.batch += 1
            self.step += 1
            tick = self._time("train", tick)
            self._record("train", out, n)
            if self.checkpoint_every and self.step % self.checkpoint_every == 0 and \
                    self.batch != n:  # an epoch's last batch: its end checkpoints
                self._checkpoint()
            if self.dashboard.stop_requested:
                stop.request("q")
            if stop.check():
                return
        if n is None:
            n = self.batch
        self._progress["batches"] = n

    def _train_step(self, batch, needs_output):
        if self._dist is not None or (self.devices and len(self.devices) > 1):
            multi = self.strategy == "multi" and self._dist is None
            return self._ddp_step(batch, needs_output, multi)
        x, y = self._inputs(batch, self._backend())
        lr = self.optimizer.lr
        if self.jit:
            return self._recorded_step(x, y, needs_output, lr)
        logits = self.model(x)
        loss = self.loss_fn(logits, y)
        value = self._finite(float(loss.item()))
        grads = loss.backward()
        self.model = self.optimizer.step(self.model, grads)
        return StepOutput("train", value,
                          logits.to_numpy() if needs_output else None,
                          _numpy(y), int(x.shape[0]), lr)

    def _recorded_step(self, x, y, needs_output, lr):
        """jit=True: forward, backward and the update as one ember.jit capture, replayed from
        the third step of each batch shape on (Wgpu: one submission); the loss is read after
        the update, so a non-finite loss stops the run with that update applied (in memory
        only: no checkpoint is written of it)."""
        if self._jit_step is None:
            def step(model, x, y, needs_output):
                logits = model(x)
                loss = self.loss_fn(logits, y)
                model = self.optimizer.step(model, loss.backward())
                return (model, loss, logits) if needs_output else (model, loss)
            self._jit_step = capture.jit(step)
        self.model, loss, *logits = self._jit_step(self.model, x, y, needs_output)
        value = self._finite(float(loss.item()), applied=True)
        return StepOutput("train", value, logits[0].to_numpy() if needs_output else None,
                          _numpy(y), int(x.shape[0]), lr)

    def _finite(self, value, applied=False):
        if not np.isfinite(value):
            raise FloatingPointError(
                f"the training loss is {value} at step {self.step + 1} (epoch {self.epoch + 1}, "
                f"batch {self.batch + 1}): training diverged (a lower learning rate?); " + (
                    "the recorded step (jit=True) applied its update already: the last "
                    "checkpoint holds the weights before it" if applied else
                    "stopped before that step's update"))
        return value

    def _ddp_step(self, batch, needs_output, multi=False):
        """Burn's DDP: one replica per device (replica 0 is self.model with self.optimizer;
        the others clones with the same param ids and copies of the optimizer, made at the
        first step of a fit), each on its thread with its shard of the batch (ember's
        gradients are values: nothing is shared). Each gradient, weighted by its shard's share
        of the batch, goes to a parallel.Reducer as soon as backward has finished it; the
        buckets' sums are the gradients of the whole batch's mean loss (the loss a mean over
        the batch, as the default is), and every replica applies the same update to its
        weights. Under torchrun the replicas are the processes. Buffers (BatchNorm's running
        statistics) are each replica's own; replica 0's are saved.

        multi=True is Burn's multi-device strategy: the replicas are fresh clones of the
        model (on their devices) at every step, gradients summed the same way, and the one
        optimizer updates the first replica, the model, alone."""
        x, y = _pair(batch)
        if multi:
            reps = [(self.model, self.optimizer, self.devices[0])] + [
                (_replica(self.model, d), None, d) for d in self.devices[1:]]
        else:
            self._replicas = reps = self._replicas or self._make_replicas()
        n, dist = len(x), self._dist
        active = _shards(x, y, len(reps))
        group = dist or parallel.ThreadGroup(len(active))

        def work(k):
            i, xs, ys = active[k]
            model, _, device = reps[i]
            try:
                logits = model(_tensor(xs, device))
                loss = self.loss_fn(logits, _tensor(ys, device))
                value, total = float(loss.item()) * len(xs), n
                if dist is not None:  # the global batch, and whether a process wants to stop
                    wanted = self._stop is not None and self._stop.wanted is not None
                    total, value, stops = dist.sum([n, value, float(wanted)])
                    if stops:
                        self._stop.agree(self._stop.wanted or "stop (another process)")
                reducer = parallel.Reducer(group, k, model, len(xs) / total)
                grads = loss.backend.backward(
                    loss, on_final=reducer.on_final if self._overlap else None)
                return (value / total, reducer.finish(grads),
                        logits.to_numpy() if needs_output else None)
            except BaseException as e:
                if dist is None:
                    group.abort(e)
                raise

        def update(i):
            model, opt, device = reps[i]
            mine = grads[i] if i in grads else grads[active[0][0]].to(device.inner)
            model = opt.step(model, mine)
            return model

        parts = self._on_threads(work, len(active))
        value = self._finite(sum(p[0] for p in parts) if dist is None else parts[0][0])
        grads = {i: p[1] for (i, _, _), p in zip(active, parts)}
        lr = self.optimizer.lr
        self.model = self._on_threads(update, 1 if multi else len(reps))[0]
        logits = np.concatenate([p[2] for p in parts]) if needs_output else None
        return StepOutput("train", value, logits, y, n, lr)

    def _on_threads(self, fn, n):
        if n == 1:
            return [fn(0)]
        with ThreadPoolExecutor(n, thread_name_prefix="ember-replica") as pool:
            return list(pool.map(fn, range(n)))

    def _make_replicas(self):
        """[(model, optimizer, device)] for _ddp_step; under torchrun every process starts
        from process 0's weights."""
        if self._dist is not None:
            record.load_state_dict(self.model, self._dist.broadcast(
                record.state_dict(self.model)))
            return [(self.model, self.optimizer, self._backend())]
        reps, saved = [(self.model, self.optimizer, self.devices[0])], None
        for device in self.devices[1:]:
            model = _replica(self.model, device)
            opt = copy.copy(self.optimizer)
            opt.state, opt.scheduler = {}, copy.deepcopy(self.optimizer.scheduler)
            saved = saved or self.optimizer.state_dict(self.model)
            opt.load_state_dict(saved, model)
            reps.append((model, opt, device))
        return reps

    def _validate_epoch(self, loader, stop):
        metrics = self.metrics["valid"]
        for m in metrics:
            m.reset()
        valid = self.model.valid()
        backend = valid.backend()
        n = _length(loader)
        needs_output = any(m.needs_output for m in metrics)
        tick = time.perf_counter()
        with no_grad():
            for b, batch in enumerate(self._batches(loader, self.epoch, 0)):
                x, y = self._inputs(batch, backend)
                logits = valid(x)
                loss = self.loss_fn(logits, y)
                out = StepOutput("valid", float(loss.item()),
                                 logits.to_numpy() if needs_output else None, _numpy(y),
                                 int(x.shape[0]))
                tick = self._time("valid", tick)
                self._record("valid", out, n, b + 1)
                if self.dashboard.stop_requested:
                    stop.request("q")
                if stop.check():
                    return None
        return self._values("valid")

    def _end_epoch(self, summary):
        epoch = self.epoch
        for split, values in summary.items():
            for name, value in values.items():
                if value is not None:
                    self.history.add_epoch(name, split, epoch, value)
        self.epoch, self.batch = epoch + 1, 0
        improved = False
        if self.best_metric is not None:
            split, name = self.best_metric
            value = summary.get(split, {}).get(name)
            higher = self._higher_is_better(name)
            if value is not None and (self.best is None or (
                    value > self.best[0] if higher else value < self.best[0])):
                self.best, improved = (value, epoch), True
        stop_early = False
        if self.early_stopping is not None:
            es = self.early_stopping
            stop_early = es.update(summary.get(es.split, {}).get(es.metric),
                                   self._higher_is_better(es.metric))
        self.dashboard.epoch_end(epoch, summary, self.seconds)
        self._checkpoint()
        if improved and self.checkpoint_dir is not None and self.rank == 0:
            record.save(self.model, self.checkpoint_dir / "best.safetensors",
                        metadata={"epoch": str(epoch), "metric": "/".join(self.best_metric),
                                  "value": repr(self.best[0])})
        if stop_early:
            self.stopped_early = True
            self.dashboard.message(f"early stopping: {self.early_stopping.metric} "
                                   f"({self.early_stopping.split}) has not improved for "
                                   f"{self.early_stopping.patience} epochs")
            self.epochs = self.epoch

    def validate(self, loader):
        """{metric name: value} of the model on `loader` (no training, no dashboard)."""
        stop = _Stop(lambda reason: None)
        return self._validate_epoch(loader, stop)

    # ---- bookkeeping -------------------------------------------------------------------------
    def _backend(self):
        return self.model.backend()

    def _inputs(self, batch, backend):
        if not isinstance(batch, tuple | list) or len(batch) != 2:
            raise ValueError("Learner: each batch must be a pair (inputs, targets), got "
                             f"{type(batch).__name__}")
        x, y = (_tensor(v, backend) for v in batch)
        return x, y

    def _record(self, split, out, batches, batch=None):
        for m in self.metrics[split]:
            m.update(out)
        batch = self.batch if batch is None else batch
        if batches:
            x = self.epoch + batch / batches
        else:
            x = self.epoch + 1 - 1 / (batch + 1)
        for m in self.metrics[split]:
            if m.last is not None:
                self.history.add_point(m.name, split, x, m.last)
        self._progress.update(split=split, batch=batch, batches=batches or 0)
        self.dashboard.step(self, split)

    def _values(self, split):
        return {m.name: m.value() for m in self.metrics[split]}

    def _higher_is_better(self, name):
        for m in self.metric_types:
            if m.name == name:
                return m.higher_is_better
        raise ValueError(f"Learner: no metric named {name!r} (have "
                         f"{[m.name for m in self.metric_types]})")

    def _time(self, split, tick):
        now = time.perf_counter()
        dt, avg = now - tick, self._timing[split]
        self._timing[split] = dt if avg is None else 0.9 * avg + 0.1 * dt
        return now

    def progress(self):
        """Where training stands: epoch (0-based), epochs, split, batch, batches, elapsed
        seconds and the estimated seconds left in this epoch and in the run (None before a
        few steps ran)."""
        p = dict(self._progress, epoch=self.epoch, epochs=self.epochs, step=self.step,
                 elapsed=self.seconds)
        train_n = _length(self._loaders[0]) if self._loaders else None
        valid_n = _length(self._loaders[1]) if self._loaders and self._loaders[1] else 0
        t_train, t_valid = self._timing["train"], self._timing["valid"]
        eta_epoch = eta_total = None
        if t_train is not None and train_n is not None and self.epochs is not None:
            t_valid = t_valid if t_valid is not None else t_train / 3
            if p["split"] == "train":
                left_train, left_valid = train_n - self.batch, valid_n
            else:
                left_train, left_valid = 0, valid_n - p["batch"]
            eta_epoch = left_train * t_train + left_valid * t_valid
            later = max(self.epochs - self.epoch - 1, 0)
            eta_total = eta_epoch + later * (train_n * t_train + valid_n * t_valid)
        p.update(eta_epoch=eta_epoch, eta_total=eta_total, train_batches=train_n,
                 valid_batches=valid_n)
        return p

    # ---- checkpoints -------------------------------------------------------------------------
    def state_dict(self):
        """Everything a checkpoint holds (plain values and NumPy arrays)."""
        return {
            "model": record.state_dict(self.model),
            "optim": self.optimizer.state_dict(self.model),
            "epoch": self.epoch, "batch": self.batch, "step": self.step,
            "epochs": self.epochs, "seconds": self.seconds,
            "rng": ember_rng().bit_generator.state,
            "metrics": {split: {m.name: m.state_dict() for m in ms}
                        for split, ms in self.metrics.items()},
            "history": self.history.state_dict(),
            "best": None if self.best is None else [self.best[0], self.best[1]],
            "early_stopping": None if self.early_stopping is None
            else self.early_stopping.state_dict(),
            "extra": self.extra_state,
        }

    def _checkpoint(self, reason=None):
        if self.checkpoint_dir is None or self.rank != 0:
            return None
        state = self.state_dict()
        kept = f"the newest checkpoint, {self.last_checkpoint}, is kept" \
            if self.last_checkpoint else "no checkpoint was written yet"
        if not all(np.isfinite(a).all() for a in state["model"].values()):
            raise FloatingPointError(f"the weights are not finite after step {self.step}: "
                                     f"training diverged (a lower learning rate?); {kept}")
        try:
            path = ckpt.save(state, self.checkpoint_dir / "checkpoints", self.epoch, self.step,
                             keep_last=self.keep_last)
        except OSError as e:
            raise ckpt.CheckpointError(f"could not write the checkpoint of step {self.step} in "
                                       f"{self.checkpoint_dir / 'checkpoints'} ({e}); {kept}") \
                from None
        self.last_checkpoint = path
        if reason is not None:
            self.dashboard.message(f"checkpoint written: {path}")
        return path

    def resume(self, path=None):
        """Restore a checkpoint: a file, or the newest in a folder (default: this learner's
        checkpoint_dir). Returns the checkpoint's `extra` dict."""
        if path is None:
            if self.checkpoint_dir is None:
                raise ckpt.CheckpointError("Learner.resume: no path and no checkpoint_dir")
            path = self.checkpoint_dir / "checkpoints"
        state = ckpt.load(path)
        record.load_state_dict(self.model, state["model"])
        self.optimizer.load_state_dict(state["optim"], self.model)
        self.epoch, self.batch, self.step = (int(state["epoch"]), int(state["batch"]),
                                             int(state["step"]))
        if state.get("epochs") is not None:
            self.epochs = int(state["epochs"])
        self._seconds_before = float(state.get("seconds", 0.0))
        ember_rng().bit_generator.state = _plain(state["rng"])
        for split, ms in self.metrics.items():
            saved = state["metrics"].get(split, {})
            for m in ms:
                if m.name in saved:
                    m.load_state_dict(saved[m.name])
        self.history.load_state_dict(state["history"])
        self.best = None if state.get("best") is None else (float(state["best"][0]),
                                                            int(state["best"][1]))
        if self.early_stopping is not None and state.get("early_stopping") is not None:
            self.early_stopping.load_state_dict(state["early_stopping"])
        self.last_checkpoint = Path(state["path"])
        self._replicas = None  # (made again from the restored weights)
        return state.get("extra", {})

    def _tell_resume(self):
        where = self.last_checkpoint
        if where is None:
            self.dashboard.message("stopped (no checkpoint_dir: nothing was saved)")
            return
        hint = self.resume_hint or f"learner.resume({str(where)!r}) then learner.fit(...)"
        n = _length(self._loaders[0]) if self._loaders else None
        where = (f"after the training of epoch {self.epoch + 1}, before its validation"
                 if n is not None and self.batch >= n else
                 f"at epoch {self.epoch + 1}, batch {self.batch}")
        self.dashboard.message(f"stopped {where} (step {self.step}); to resume: {hint}")

    def _write_outputs(self):
        if self.checkpoint_dir is None or self.rank != 0:
            return
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        record.save(self.model, self.checkpoint_dir / "model.safetensors",
                    metadata={"epoch": str(self.epoch), "step": str(self.step)})
        epochs = {name: {split: {str(e): v for e, v in self.history.epoch_values(name,
                                                                                 split).items()}
                         for split in ("train", "valid")}
                  for name in self.history.names()}
        text = json.dumps({"epochs_done": self.epoch, "step": self.step, "metrics": epochs},
                          indent=1)
        (self.checkpoint_dir / "history.json").write_text(text + "\n")
        from .plot import write_curves_png
        try:
            write_curves_png(self.history, self.checkpoint_dir / "curves.png",
                             metrics=self.metric_types, title=self.title)
        except Exception as e:  # a picture must never cost the run
            print(f"ember.train: could not write curves.png: {e}", file=sys.stderr)


def _fresh(metric):
    import copy
    m = copy.copy(metric)
    m.reset()
    return m


def _length(loader):
    try:
        return len(loader)
    except TypeError:
        return None


def _autodiff(backend):
    return backend if isinstance(backend, Autodiff) else Autodiff(backend)


def _on_autodiff(model, backend):
    current = model.backend()
    if backend is None:
        backend = current
    backend = _autodiff(backend)
    if current != backend:
        model.to(backend)
    return model


def _tensor(value, backend):
    if isinstance(value, Tensor):
        return value if value.backend == backend else value.to(backend)
    array = np.asarray(value)
    if array.dtype.kind in "iu":
        array = array.astype(np.int32)
    elif array.dtype == np.float64:
        array = array.astype(np.float32)
    return Tensor.from_data(array, backend=backend)


def _replica(model, device):
    """model on `device` with the same param ids and its own gradient leaves; the data is
    shared where device holds the same kind (values are never changed in place while another
    refers to them), else copied. (Module.clone deep-copies, which GPU buffers refuse.)"""
    from ..nn.module import Param, _copy_tree
    out = _copy_tree(model)
    out.map_params(lambda n, p: Param(p.value().to(device), p.trainable, p.param_id))
    return out


def _cut(n, part, parts):
    """Rows [a, b) of part `part` of `parts` of n rows (the same cut everywhere)."""
    return n * part // parts, n * (part + 1) // parts


def _shards(x, y, parts):
    """[(i, x's rows, y's rows)] of each part i of `parts` that has rows."""
    cut = [_cut(len(x), i, parts) for i in range(parts)]
    return [(i, x[a:b], y[a:b]) for i, (a, b) in enumerate(cut) if b > a]


def _pair(batch):
    if not isinstance(batch, tuple | list) or len(batch) != 2:
        raise ValueError("Learner: each batch must be a pair (inputs, targets), got "
                         f"{type(batch).__name__}")
    return tuple(_numpy(v) for v in batch)


def _numpy(t):
    return t.to_numpy() if isinstance(t, Tensor) else np.asarray(t)


def _plain(value):
    """A generator state read back from a checkpoint: NumPy scalars as Python numbers."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, np.generic):
        return value.item()
    return value
