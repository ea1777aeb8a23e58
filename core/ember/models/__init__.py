"""ember.models: trained models shipped inside the wheel (no network needed, in CPython and
in Pyodide alike).

    model = ember.models.load("mnist")           # or "fashion-mnist"; eval mode
    logits = model(images)                       # [B, 1, 28, 28] float32 in [0, 1] -> [B, 10]

Each model is a ConvNet (ember.models.ConvNet) whose weights sit in
ember/models/weights/<name>.safetensors, with the architecture, the training command, its time
and the test accuracy in the file's metadata (`ember.models.info(name)`). They were trained
with `ember train <name>` (see the README).
"""

import json
from pathlib import Path

from .. import nn, record
from .convnet import ConvNet

__all__ = ["ConvNet", "available", "build", "info", "load", "weights_path"]

_WEIGHTS = Path(__file__).resolve().parent / "weights"
_NAMES = ("mnist", "fashion-mnist")


def available():
    """The names `load` accepts."""
    return list(_NAMES)


def _check(name):
    if name not in _NAMES:
        raise ValueError(f"ember.models: unknown model {name!r}; available: {', '.join(_NAMES)}")


def weights_path(name):
    """Where the shipped weights of `name` are."""
    _check(name)
    return _WEIGHTS / f"{name}.safetensors"


def build(name, backend=None, **config):
    """A fresh (untrained) model of `name`'s architecture; `config` overrides ConvNet's
    arguments."""
    _check(name)
    return ConvNet(backend=backend, **config)


def info(name):
    """The metadata of the shipped weights: config, dataset, test_accuracy, command,
    train_seconds, ... (strings, config as a dict)."""
    path = weights_path(name)
    if not path.is_file():
        raise FileNotFoundError(f"ember.models: {path} is missing (this ember was built without "
                                "trained weights)")
    _, meta = record.read_safetensors(path)
    out = {k: v for k, v in meta.items() if not k.startswith("ember.") and k != "format"}
    if "config" in out:
        out["config"] = json.loads(out["config"])
    return out


def load(name, backend=None):
    """The trained model `name` ("mnist" | "fashion-mnist") in eval mode, on `backend` (default:
    ember's default backend): [B, 1, 28, 28] float32 in [0, 1] (white ink on black) -> logits
    [B, 10]."""
    config = info(name).get("config", {})
    with nn.init.skip():  # (every parameter is loaded next: no random draw to throw away)
        model = ConvNet(backend=backend, **config)
    record.load(model, weights_path(name))
    return model.eval()
