"""Every optimizer, over 10 steps of a small MLP, follows torch.optim from the same weights."""

import numpy as np
import pytest
import torch

from ember import optim

from ._models import assert_same_trajectory, ember_run, torch_run, weights

T = torch.optim
STEPS = 10

# (id, ember optimizer factory, torch optimizer factory over a param list)
CASES = [
    ("sgd", lambda: optim.SGD(lr=0.1), lambda p: T.SGD(p, lr=0.1)),
    ("sgd-default-lr", lambda: optim.SGD(), lambda p: T.SGD(p)),
    ("sgd-momentum", lambda: optim.SGD(0.05, momentum=0.9), lambda p: T.SGD(p, 0.05, momentum=0.9)),
    ("sgd-nesterov", lambda: optim.SGD(0.05, momentum=0.9, nesterov=True),
     lambda p: T.SGD(p, 0.05, momentum=0.9, nesterov=True)),
    ("sgd-weight-decay", lambda: optim.SGD(0.1, weight_decay=0.1),
     lambda p: T.SGD(p, 0.1, weight_decay=0.1)),
    ("sgd-dampening", lambda: optim.SGD(0.05, momentum=0.8, dampening=0.3, weight_decay=0.01),
     lambda p: T.SGD(p, 0.05, momentum=0.8, dampening=0.3, weight_decay=0.01)),
    ("sgd-maximize", lambda: optim.SGD(0.01, momentum=0.5, maximize=True),
     lambda p: T.SGD(p, 0.01, momentum=0.5, maximize=True)),
    ("adam", lambda: optim.Adam(lr=0.01), lambda p: T.Adam(p, lr=0.01)),
    ("adam-default", lambda: optim.Adam(), lambda p: T.Adam(p)),
    ("adam-weight-decay", lambda: optim.Adam(0.02, betas=(0.8, 0.99), weight_decay=0.1),
     lambda p: T.Adam(p, 0.02, betas=(0.8, 0.99), weight_decay=0.1)),
    ("adam-amsgrad", lambda: optim.Adam(0.02, amsgrad=True, eps=1e-6),
     lambda p: T.Adam(p, 0.02, amsgrad=True, eps=1e-6)),
    ("adam-beta1-high-weight", lambda: optim.Adam(0.01, betas=(0.3, 0.9)),
     lambda p: T.Adam(p, 0.01, betas=(0.3, 0.9))),
    ("adamw", lambda: optim.AdamW(lr=0.01), lambda p: T.AdamW(p, lr=0.01)),
    ("adamw-strong-decay", lambda: optim.AdamW(0.05, weight_decay=0.5, amsgrad=True),
     lambda p: T.AdamW(p, 0.05, weight_decay=0.5, amsgrad=True)),
    ("rmsprop", lambda: optim.RMSProp(lr=0.01), lambda p: T.RMSprop(p, lr=0.01)),
    ("rmsprop-centered", lambda: optim.RMSProp(0.01, centered=True),
     lambda p: T.RMSprop(p, 0.01, centered=True)),
    ("rmsprop-momentum", lambda: optim.RMSProp(0.005, alpha=0.9, momentum=0.9),
     lambda p: T.RMSprop(p, 0.005, alpha=0.9, momentum=0.9)),
    ("rmsprop-centered-momentum-decay",
     lambda: optim.RMSProp(0.005, centered=True, momentum=0.5, weight_decay=0.1, eps=1e-6),
     lambda p: T.RMSprop(p, 0.005, centered=True, momentum=0.5, weight_decay=0.1, eps=1e-6)),
    ("adagrad", lambda: optim.AdaGrad(lr=0.1), lambda p: T.Adagrad(p, lr=0.1)),
    ("adagrad-options",
     lambda: optim.AdaGrad(0.1, lr_decay=0.05, weight_decay=0.1, initial_accumulator_value=0.3),
     lambda p: T.Adagrad(p, 0.1, lr_decay=0.05, weight_decay=0.1,
                         initial_accumulator_value=0.3)),
]


@pytest.mark.parametrize("make_ours,make_theirs", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_trajectory_matches_torch(make_ours, make_theirs):
    ours, model = ember_run(make_ours(), STEPS)
    theirs = torch_run(make_theirs, STEPS)
    assert_same_trajectory(ours, theirs)
    start = weights()
    np.testing.assert_array_equal(ours[-1]["unused"], start["unused"])  # no gradient: untouched
    np.testing.assert_array_equal(ours[-1]["scale"], start["scale"])    # frozen
    assert not np.allclose(ours[-1]["w1"], start["w1"])


def test_defaults_are_torchs():
    cases = [(optim.SGD(), T.SGD), (optim.Adam(), T.Adam), (optim.AdamW(), T.AdamW),
             (optim.RMSProp(), T.RMSprop), (optim.AdaGrad(), T.Adagrad)]
    p = [torch.zeros(1, requires_grad=True)]
    for ours, theirs in cases:
        d = theirs(p).defaults
        assert ours.lr == d["lr"]
        for k, v in vars(ours).items():
            if k in d:
                assert v == (tuple(d[k]) if isinstance(d[k], tuple | list) else d[k]), (ours, k)


@pytest.mark.parametrize("kind", ["step", "cosine"])
def test_scheduler_drives_the_optimizer_like_torch(kind):
    if kind == "step":
        ours = optim.Adam(lr=optim.lr.Step(0.05, step_size=3, gamma=0.5))
        sched = lambda o: T.lr_scheduler.StepLR(o, step_size=3, gamma=0.5)
    else:
        ours = optim.SGD(lr=optim.lr.Cosine(0.2, T_max=6, eta_min=0.01), momentum=0.9)
        sched = lambda o: T.lr_scheduler.CosineAnnealingLR(o, T_max=6, eta_min=0.01)
    make = (lambda p: T.Adam(p, lr=0.05)) if kind == "step" else (
        lambda p: T.SGD(p, lr=0.2, momentum=0.9))
    got, _ = ember_run(ours, STEPS)
    assert_same_trajectory(got, torch_run(make, STEPS, make_sched=sched))
    assert ours.scheduler.last_epoch == STEPS  # one scheduler step per optimizer step


@pytest.mark.parametrize("clip", ["norm", "value"])
def test_grad_clip_option_matches_torch(clip):
    if clip == "norm":
        ours = optim.SGD(0.1, momentum=0.9, grad_clip=optim.ClipNorm(0.3))
        theirs = lambda ps: torch.nn.utils.clip_grad_norm_(ps, 0.3)
    else:
        ours = optim.Adam(0.01, grad_clip=optim.ClipValue(0.05))
        theirs = lambda ps: torch.nn.utils.clip_grad_value_(ps, 0.05)
    make = (lambda p: T.SGD(p, 0.1, momentum=0.9)) if clip == "norm" else (
        lambda p: T.Adam(p, 0.01))
    got, _ = ember_run(ours, STEPS)
    assert_same_trajectory(got, torch_run(make, STEPS, clip=theirs))
