"""ember.train: Burn's burn-train for ember: a Learner with metrics, live dashboards,
checkpoints that survive Ctrl-C, and resume.

    learner = train.Learner(model, optim.Adam(lr=1e-3), loss=nn.CrossEntropyLoss(),
                            metrics=[train.Accuracy(), train.Loss()],
                            dashboard="tui" | "plain" | None, checkpoint_dir="runs/mnist")
    model = learner.fit(train_loader, valid_loader, epochs=3)

`ember train mnist | fashion-mnist` is this loop on ember.models' ConvNet.
"""

from . import checkpoint
from .checkpoint import CheckpointError
from .dashboard import Dashboard, JsonDashboard, NoDashboard, PlainDashboard, make_dashboard
from .history import History
from .learner import EarlyStopping, Learner
from .metrics import (
    Accuracy,
    CpuUse,
    LearningRate,
    Loss,
    MemoryUse,
    Metric,
    StepOutput,
    TopKAccuracy,
)
from .plot import write_curves_png

__all__ = [
    "Accuracy", "CheckpointError", "CpuUse", "Dashboard", "EarlyStopping", "History",
    "JsonDashboard", "LearningRate", "Learner", "Loss", "MemoryUse", "Metric", "NoDashboard",
    "PlainDashboard", "StepOutput", "TopKAccuracy", "checkpoint", "make_dashboard",
    "write_curves_png",
]
