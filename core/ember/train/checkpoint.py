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
can leave the previous checkpoint or the new one, never half of one (and the temporary file
of the interrupted write, which the next save deletes). `load(folder)` takes the newest
checkpoint that can be read, saying on stderr which newer ones it skipped (a damaged disk).
"""

import os
import re
import sys
from pathlib import Path

from .. import record

__all__ = ["CheckpointError", "checkpoint_name", "latest", "list_checkpoints", "load", "save"]

FORMAT = "ember.train.checkpoint/1"
_NAME = re.compile(r"^ckpt-e(\d+)-s(\d+)\.safetensors$")
# the temporary file of a checkpoint being written (ember.record's atomic_write names it so)
_TMP = re.compile(r"^\.ckpt-e\d+-s\d+\.safetensors\.[0-9a-f]+\.tmp$")


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
    `folder`, then delete all but the `keep_last` newest and what interrupted writes left.
    Returns the path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / checkpoint_name(epoch, step)
    record.save_state({"format": FORMAT, **state}, path)
    old = list_checkpoints(folder)[:-keep_last] if keep_last is not None and keep_last > 0 else []
    for p in old + [p for p in folder.iterdir() if _TMP.match(p.name)]:
        if p != path:
            try:
                os.unlink(p)
            except OSError:
                pass
    return path


def load(path):
    """The state a checkpoint holds (NumPy arrays and plain values): of the file `path`, or of
    the newest checkpoint of the folder `path` that can be read."""
    path = Path(path)
    if not path.is_dir():
        return _load_file(path)
    found = list_checkpoints(path)
    if not found:
        raise CheckpointError(f"no checkpoint (ckpt-*.safetensors) in {path}")
    failed = []
    for p in reversed(found):
        try:
            state = _load_file(p)
        except CheckpointError as e:
            failed.append(str(e))
            print(f"ember.train: skipping {e}", file=sys.stderr)
            continue
        if failed:
            print(f"ember.train: using {p}, the newest checkpoint that can be read",
                  file=sys.stderr)
        return state
    raise CheckpointError(f"no checkpoint in {path} can be read: {'; '.join(failed)}")


def _load_file(path):
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        state = record.load_state(path)
    except (ValueError, OSError) as e:  # record's errors are ValueErrors
        raise CheckpointError(f"checkpoint {path} cannot be read: {e}") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not an ember.train checkpoint (format "
                              f"{state.get('format') if isinstance(state, dict) else None!r})")
    state["path"] = str(path)
    return state
