"""Checkpoints: one safetensors file per checkpoint, written atomically (a temporary file,
fsynced, then renamed: ember.record's writer), holding everything a run needs to go on:

    model      every Param (trainable and not) under its state-dict name
    optim      opt.state_dict(model): moments, step count, the LR scheduler's state
    progress   epoch, batch within the epoch, global step, epochs planned
    rng        ember's random generator (dropout masks, initialisations)
    metrics    the running sums of the epoch in progress; history: the curves so far
    extra      what the caller adds (the `ember train` command stores its settings)

Files are named ckpt-e<epoch>-s<step>.safetensors; `latest(folder)` is the one with the
highest step. Only complete files ever carry that name, so a crash or a second Ctrl-C
can leave the previous checkpoint or the new one, never half of one.
"""

import os
import re
from pathlib import Path

from .. import record

__all__ = ["CheckpointError", "checkpoint_name", "latest", "list_checkpoints", "load", "save"]

FORMAT = "ember.train.checkpoint/1"
_NAME = re.compile(r"^ckpt-e(\d+)-s(\d+)\.safetensors$")


class CheckpointError(RuntimeError):
    """A checkpoint is missing or is not one ember.train wrote."""


def checkpoint_name(epoch, step):
    return f"ckpt-e{epoch:04d}-s{step:08d}.safetensors"


def list_checkpoints(folder):
    """The checkpoint files of `folder`, oldest (lowest step) first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = []
    for p in folder.iterdir():
        m = _NAME.match(p.name)
        if m:
            found.append((int(m.group(2)), int(m.group(1)), p))
    return [p for _, _, p in sorted(found)]


def latest(folder):
    """The newest checkpoint of `folder`, or None."""
    found = list_checkpoints(folder)
    return found[-1] if found else None


def save(state, folder, epoch, step, keep_last=None):
    """Write `state` (a dict for record.save_state) as the checkpoint of (epoch, step) in
    `folder`, then delete all but the `keep_last` newest. Returns the path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / checkpoint_name(epoch, step)
    record.save_state({"format": FORMAT, **state}, path)
    if keep_last is not None and keep_last > 0:
        for old in list_checkpoints(folder)[:-keep_last]:
            if old != path:
                try:
                    os.unlink(old)
                except OSError:
                    pass
    return path


def load(path):
    """The state a checkpoint holds (NumPy arrays and plain values)."""
    path = Path(path)
    if path.is_dir():
        found = latest(path)
        if found is None:
            raise CheckpointError(f"no checkpoint (ckpt-*.safetensors) in {path}")
        path = found
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    state = record.load_state(path)
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not an ember.train checkpoint (format "
                              f"{state.get('format') if isinstance(state, dict) else None!r})")
    state["path"] = str(path)
    return state
