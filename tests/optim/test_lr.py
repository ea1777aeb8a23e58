"""Schedulers against torch.optim.lr_scheduler over many steps, and their state."""

import copy
import math
import warnings

import pytest
import torch

from ember import optim
from ember.optim import lr

S = torch.optim.lr_scheduler
N = 40


def torch_lrs(base_lr, make, n=N):
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=base_lr)
    sched = make(opt)
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SequentialLR's deprecation chatter
        for _ in range(n):
            out.append(sched.get_last_lr()[0])
            opt.step()
            sched.step()
    return out


def ember_lrs(sched, n=N):
    out = []
    for _ in range(n):
        out.append(sched.get_lr())
        sched.step()
    return out


def noam_lambda(d_model, warmup, factor):
    return lambda t: factor * d_model ** -0.5 * min((t + 1) ** -0.5, (t + 1) * warmup ** -1.5)


CASES = [
    ("step", lr.Step(0.1, step_size=7), 0.1, lambda o: S.StepLR(o, step_size=7)),
    ("step-gamma", lr.Step(0.3, 4, gamma=0.5), 0.3, lambda o: S.StepLR(o, 4, gamma=0.5)),
    ("exponential", lr.Exponential(0.2, gamma=0.9), 0.2, lambda o: S.ExponentialLR(o, 0.9)),
    ("cosine", lr.Cosine(0.1, T_max=15), 0.1, lambda o: S.CosineAnnealingLR(o, 15)),
    ("cosine-eta-min", lr.Cosine(0.5, T_max=10, eta_min=0.05), 0.5,
     lambda o: S.CosineAnnealingLR(o, T_max=10, eta_min=0.05)),
    ("linear", lr.Linear(0.1), 0.1, lambda o: S.LinearLR(o)),
    ("linear-decay", lr.Linear(0.1, 1.0, 0.1, total_iters=20), 0.1,
     lambda o: S.LinearLR(o, 1.0, 0.1, total_iters=20)),
    ("warmup-constant", lr.LinearWarmup(0.01, warmup_steps=8), 0.01,
     lambda o: S.LinearLR(o, start_factor=1 / 8, total_iters=8)),
    ("warmup-cosine", lr.LinearWarmup(lr.Cosine(0.1, T_max=20, eta_min=0.001), 5,
                                      start_factor=0.1), 0.1,
     lambda o: S.SequentialLR(o, [S.LinearLR(o, 0.1, 1.0, 5),
                                  S.CosineAnnealingLR(o, 20, eta_min=0.001)], milestones=[5])),
    ("warmup-step", lr.LinearWarmup(lr.Step(0.1, 6, gamma=0.5), 4), 0.1,
     lambda o: S.SequentialLR(o, [S.LinearLR(o, 0.25, 1.0, 4), S.StepLR(o, 6, gamma=0.5)],
                              milestones=[4])),
    ("noam", lr.Noam(512, warmup_steps=10, factor=2.0), 1.0,
     lambda o: S.LambdaLR(o, noam_lambda(512, 10, 2.0))),
    ("lambda", lr.Lambda(0.1, lambda t: 0.95 ** t), 0.1,
     lambda o: S.LambdaLR(o, lambda t: 0.95 ** t)),
]


@pytest.mark.parametrize("ours,base,make", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_matches_torch(ours, base, make):
    got, want = ember_lrs(copy.deepcopy(ours)), torch_lrs(base, make)
    assert got == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_constant_and_step_return_values():
    c = lr.Constant(0.3)
    assert c.get_lr() == c.step() == 0.3 and c.last_epoch == 1
    s = lr.Step(1.0, step_size=2, gamma=0.5)
    assert [s.step() for _ in range(4)] == [1.0, 0.5, 0.5, 0.25]  # step() returns the new lr


def test_noam_peaks_at_warmup():
    s = lr.Noam(64, warmup_steps=5)
    lrs = ember_lrs(s, 12)
    assert lrs.index(max(lrs)) == 4  # s = warmup_steps
    assert lrs[0] == pytest.approx(64 ** -0.5 * 5 ** -1.5)


def test_warmup_zero_steps_is_the_wrapped_schedule():
    assert ember_lrs(lr.LinearWarmup(lr.Exponential(0.1, 0.5), 0), 5) == ember_lrs(
        lr.Exponential(0.1, 0.5), 5)


def test_state_dict_round_trip_mid_schedule():
    a = lr.LinearWarmup(lr.Cosine(0.1, T_max=10), warmup_steps=3)
    for _ in range(7):
        a.step()
    state = a.state_dict()
    assert state == {"last_epoch": 7, "warmup_steps": 3, "start_factor": 1 / 3,
                     "after": {"last_epoch": 4, "base_lr": 0.1, "T_max": 10, "eta_min": 0.0}}
    b = lr.LinearWarmup(lr.Cosine(0.1, T_max=10), warmup_steps=3)
    b.load_state_dict(copy.deepcopy(state))
    assert ember_lrs(a, 10) == ember_lrs(b, 10)
    with pytest.raises(ValueError, match="another kind of scheduler"):
        lr.Step(0.1, 3).load_state_dict(state)


def test_optimizer_lr_property_and_errors():
    opt = optim.SGD(lr=lr.Exponential(1.0, 0.5))
    assert opt.lr == 1.0
    opt.lr = 0.25
    assert opt.lr == 0.25 and isinstance(opt.scheduler, lr.Constant)
    with pytest.raises(TypeError, match="float or a scheduler"):
        optim.Adam(lr="0.1")
    with pytest.raises(ValueError, match="invalid learning rate"):
        optim.Adam(lr=-1.0)
    with pytest.raises(ValueError, match="step_size"):
        lr.Step(0.1, 0)
    assert math.isclose(lr.Cosine(1.0, 4).step(), (1 + math.cos(math.pi / 4)) / 2)
