"""Dashboards of ember.train that have behaviour of their own here: "json" (the training page's
source of curves); "plain" and "tui" are tested in test_learner.py and test_tui.py."""

import io
import json
import math

from ember import train
from ember.train.dashboard import JsonDashboard, make_dashboard

from .helpers import loaders, model, optimizer


def test_json_lines_carry_every_step_and_epoch():
    buf = io.StringIO()
    tl, vl = loaders()
    learner = train.Learner(model(), optimizer(), metrics=[train.Accuracy(), train.Loss()],
                            dashboard=JsonDashboard(file=buf))
    learner.fit(tl, vl, epochs=2)
    events = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert events[0] == {"event": "start", "epochs": 2, "train_batches": 5,
                         "valid_batches": 2, "step": 0}
    steps = [e for e in events if e["event"] == "step"]
    assert [e["step"] for e in steps] == list(range(1, 11))
    assert [(e["epoch"], e["batch"]) for e in steps[4:6]] == [(0, 5), (1, 1)]
    assert all(set(e["metrics"]) == {"Accuracy", "Loss"} for e in steps)
    assert all(math.isfinite(e["metrics"]["Loss"]) for e in steps)
    epochs = [e for e in events if e["event"] == "epoch"]
    assert [e["epoch"] for e in epochs] == [0, 1]
    assert set(epochs[-1]["valid"]) == {"Accuracy", "Loss"}
    assert epochs[-1]["valid"]["Accuracy"] == learner.validate(vl)["Accuracy"]


def test_json_every_n_and_non_finite_values_are_null():
    buf = io.StringIO()
    d = JsonDashboard(file=buf, every=2)
    tl, _ = loaders()
    learner = train.Learner(model(), optimizer(), metrics=[train.Loss()], dashboard=d)
    learner.fit(tl, epochs=1)
    steps = [json.loads(s) for s in buf.getvalue().splitlines() if '"step"' in s[:20]]
    assert [e["batch"] for e in steps] == [2, 4, 5]  # every 2nd, and the epoch's last
    buf.truncate(0)
    buf.seek(0)
    d.epoch_end(3, {"train": {"Loss": float("nan")}}, float("inf"))
    assert json.loads(buf.getvalue()) == {"event": "epoch", "epoch": 3, "seconds": None,
                                          "train": {"Loss": None}}
    assert isinstance(make_dashboard("json"), JsonDashboard)
