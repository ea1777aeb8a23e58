"""ember.train.checkpoint: a damaged newest checkpoint falls back to the newest one that can be
read (saying so), a damaged file given by name is a CheckpointError, and the temporary files of
interrupted writes are deleted by the next save (ember's only)."""

import pytest

from ember import train
from ember.train import checkpoint

STATE = {"model": {}, "step": 0}


def two_checkpoints(folder):
    old = checkpoint.save(dict(STATE, step=5), folder, 1, 5)
    new = checkpoint.save(dict(STATE, step=10), folder, 2, 10)
    return old, new


@pytest.mark.parametrize("damage", [
    lambda b: b[: len(b) // 2], lambda b: b"", lambda b: b"\xff" * 64,
    lambda b: b[:8] + b"[" + b[9:],  # the header's JSON broken
], ids=["truncated", "empty", "garbage", "bad-header"])
def test_a_damaged_newest_checkpoint_falls_back_to_the_older_one(tmp_path, capsys, damage):
    old, new = two_checkpoints(tmp_path)
    new.write_bytes(damage(new.read_bytes()))
    state = checkpoint.load(tmp_path)
    assert state["step"] == 5 and state["path"] == str(old)
    err = capsys.readouterr().err
    assert f"skipping checkpoint {new} cannot be read" in err
    assert f"using {old}, the newest checkpoint that can be read" in err
    with pytest.raises(train.CheckpointError, match=f"checkpoint {new} cannot be read"):
        checkpoint.load(new)  # by name: that file or an error, never another one


def test_no_readable_checkpoint_names_every_one(tmp_path):
    old, new = two_checkpoints(tmp_path)
    for p in (old, new):
        p.write_bytes(b"")
    with pytest.raises(train.CheckpointError, match=f"can be read: .*{new.name}.*{old.name}"):
        checkpoint.load(tmp_path)


def test_save_deletes_what_interrupted_writes_left(tmp_path):
    name = checkpoint.checkpoint_name(1, 5)
    leftovers = [tmp_path / f".{name}.0123456789ab.tmp", tmp_path / f".{name}.ffffff.tmp"]
    for p in leftovers:
        p.write_bytes(b"half a checkpoint")
    mine = [tmp_path / "notes.tmp", tmp_path / ".model.safetensors.0123.tmp",
            tmp_path / f".{name}.not-hex.tmp"]
    for p in mine:
        p.write_text("not ember's checkpoint")
    checkpoint.save(STATE, tmp_path, 2, 10)
    assert not any(p.exists() for p in leftovers)
    assert all(p.read_text() == "not ember's checkpoint" for p in mine)
