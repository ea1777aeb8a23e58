"""A tiny model written twice, in ember and in torch, from the same weights, and loops that
train each with an optimizer and record the parameters after every step."""

import numpy as np
import torch

from ember import Tensor, nn, optim
from ember.backend import Autodiff, NdArray

B = Autodiff(NdArray())
TRAINABLE = ("w1", "b1", "w2", "b2", "unused")
NAMES = TRAINABLE + ("scale",)


def weights(seed=0):
    rng = np.random.default_rng(seed)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    return {"w1": f(4, 8) * 0.5, "b1": f(8) * 0.1, "w2": f(8, 3) * 0.5, "b2": f(3) * 0.1,
            "unused": f(2, 2), "scale": np.array([1.5, -0.5, 2.0], np.float32)}


def batches(n=4, size=6, seed=1):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((size, 4)).astype(np.float32),
             rng.standard_normal((size, 3)).astype(np.float32)) for _ in range(n)]


class MLP(nn.Module):
    """tanh MLP; `scale` is frozen (trainable=False) but used; `unused` never gets a grad."""

    def __init__(self, w, backend=B):
        for name in NAMES:
            t = Tensor.from_data(w[name], backend=backend)
            setattr(self, name, nn.Param(t, trainable=name != "scale"))

    def forward(self, x):
        h = (x @ self.w1 + self.b1).tanh()
        return (h @ self.w2 + self.b2) * self.scale


def loss_of(model, x, y):
    b = model.w1.backend
    d = model(Tensor.from_data(x, backend=b)) - Tensor.from_data(y, backend=b)
    return (d * d).mean()


def snapshot(model):
    return {n: p.to_numpy().copy() for n, p in model.named_params()}


def ember_run(opt, steps, w=None, data=None, model=None, start=0):
    model = MLP(w or weights()) if model is None else model
    data = data or batches()
    out = []
    for i in range(start, start + steps):
        x, y = data[i % len(data)]
        gp = optim.GradientsParams.from_grads(loss_of(model, x, y).backward(), model)
        model = opt.step(model, gp)
        out.append(snapshot(model))
    return out, model


class TorchMLP:
    def __init__(self, w):
        self.p = {n: torch.tensor(w[n], requires_grad=n != "scale") for n in NAMES}

    def loss(self, x, y):
        p = self.p
        h = torch.tanh(torch.from_numpy(x) @ p["w1"] + p["b1"])
        d = (h @ p["w2"] + p["b2"]) * p["scale"] - torch.from_numpy(y)
        return (d * d).mean()

    def trainable(self):
        return [self.p[n] for n in TRAINABLE]


def torch_run(make_opt, steps, w=None, data=None, make_sched=None, clip=None):
    m = TorchMLP(w or weights())
    opt = make_opt(m.trainable())
    sched = make_sched(opt) if make_sched else None
    data = data or batches()
    out = []
    for i in range(steps):
        x, y = data[i % len(data)]
        opt.zero_grad(set_to_none=True)
        m.loss(x, y).backward()
        if clip:
            clip(m.trainable())
        opt.step()
        if sched:
            sched.step()
        out.append({n: t.detach().numpy().copy() for n, t in m.p.items()})
    return out


def assert_same_trajectory(ours, theirs, rtol=1e-5, atol=1e-6):
    assert len(ours) == len(theirs)
    for step, (a, b) in enumerate(zip(ours, theirs)):
        for n in NAMES:
            np.testing.assert_allclose(a[n], b[n], rtol=rtol, atol=atol,
                                       err_msg=f"{n} after step {step + 1}")
