"""GradientsParams: building, arithmetic, accumulation, threads, clipping against torch."""

import math
import pickle
import threading

import numpy as np
import pytest
import torch

from ember import Tensor, nn, optim
from ember.backend import NdArray
from ember.errors import BackendError, ShapeError

from ._models import MLP, TRAINABLE, B, assert_same_trajectory, batches, loss_of, weights


def grads_of(model, x, y):
    return optim.GradientsParams.from_grads(loss_of(model, x, y).backward(), model)


def as_numpy(model, gp):
    return {n: gp[p].to_numpy() for n, p in model.named_parameters() if p in gp}


def test_from_grads_keys_values_and_backend():
    model = MLP(weights())
    x, y = batches()[0]
    grads = loss_of(model, x, y).backward()
    gp = optim.GradientsParams.from_grads(grads, model)
    ids = {p.param_id for n, p in model.named_parameters() if n != "unused"}
    assert set(gp.ids()) == ids and len(gp) == 4  # frozen `scale` and `unused` have none
    assert model.scale not in gp and gp.get(model.unused) is None
    for n, p in model.named_parameters():
        if n != "unused":
            assert gp[p.param_id].backend == NdArray()  # the inner backend, no graph
            np.testing.assert_array_equal(gp[p].to_numpy(), p.grad(grads).to_numpy())


def test_sum_average_and_scale():
    model = MLP(weights())
    data = batches()
    gps = [grads_of(model, x, y) for x, y in data[:3]]
    total = gps[0] + gps[1] + gps[2]
    assert sum(gps) is not None and set(sum(gps).ids()) == set(total.ids())
    mean = optim.GradientsParams.average(gps)
    for k in total.ids():
        parts = [g[k].to_numpy() for g in gps]
        np.testing.assert_allclose(total[k].to_numpy(), parts[0] + parts[1] + parts[2],
                                   rtol=1e-6)
        np.testing.assert_allclose(mean[k].to_numpy(), (total / 3)[k].to_numpy(), rtol=1e-6)
        np.testing.assert_allclose((total * 0.5)[k].to_numpy(), (0.5 * total)[k].to_numpy())
    # a param present in one only counts as zero in the other
    partial = optim.GradientsParams({model.w1.param_id: gps[0][model.w1]})
    both = partial + optim.GradientsParams({model.b1.param_id: gps[0][model.b1]})
    assert set(both.ids()) == {model.w1.param_id, model.b1.param_id}
    with pytest.raises(ShapeError, match="shapes"):
        partial + optim.GradientsParams({model.w1.param_id: gps[0][model.b1]})


def test_accumulation_equals_one_big_batch():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 4)).astype(np.float32)
    y = rng.standard_normal((8, 3)).astype(np.float32)
    model = MLP(weights())
    big = grads_of(model, x, y)
    acc = optim.GradientsAccumulator()
    for i in range(0, 8, 2):  # the loss is a mean: the mean of 4 equal micro-batches
        acc.accumulate(loss_of(model, x[i:i + 2], y[i:i + 2]).backward(), model)
    assert len(acc) == 4
    small = acc.grads()
    assert len(acc) == 0
    for k in big.ids():
        np.testing.assert_allclose(small[k].to_numpy(), big[k].to_numpy(), rtol=1e-5, atol=1e-7)
    # and the steps they drive agree
    a = optim.Adam(0.01).step(model.clone(), big)  # clone: same param ids
    b = optim.Adam(0.01).step(model.clone(), small)
    for (n, p), (_, q) in zip(a.named_params(), b.named_params()):
        np.testing.assert_allclose(p.to_numpy(), q.to_numpy(), rtol=1e-5, atol=1e-7, err_msg=n)
    with pytest.raises(ValueError, match="nothing was accumulated"):
        acc.grads()


def test_built_in_threads_summed_in_main_thread():
    model = MLP(weights())
    data = batches(n=4)
    results = [None] * len(data)

    def work(i):
        results[i] = grads_of(model, *data[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(data))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    together = optim.GradientsParams.average(results)
    serial = optim.GradientsParams.average([grads_of(model, x, y) for x, y in data])
    for k in serial.ids():
        np.testing.assert_allclose(together[k].to_numpy(), serial[k].to_numpy(), rtol=1e-6)
    model = optim.SGD(0.1).step(model, together)  # usable as any other gradients


def test_pickles_for_other_processes():
    model = MLP(weights())
    gp = grads_of(model, *batches()[0])
    back = pickle.loads(pickle.dumps(gp))
    assert set(back.ids()) == set(gp.ids())
    for k in gp.ids():
        np.testing.assert_array_equal(back[k].to_numpy(), gp[k].to_numpy())


@pytest.mark.parametrize("norm_type", [2.0, 1.0, math.inf, 3.0])
@pytest.mark.parametrize("max_norm", [0.05, 100.0])
def test_clip_norm_matches_torch(norm_type, max_norm):
    model = MLP(weights())
    gp = grads_of(model, *batches()[0])
    params = []
    for g in as_numpy(model, gp).values():
        g = torch.from_numpy(g.copy())
        params.append(torch.zeros_like(g, requires_grad=True))
        params[-1].grad = g
    want_norm = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=norm_type)
    clipped, norm = optim.clip_grad_norm(gp, max_norm, norm_type)
    assert norm.item() == pytest.approx(want_norm.item(), rel=1e-6)
    assert gp.norm(norm_type).item() == pytest.approx(want_norm.item(), rel=1e-6)
    for (n, g), p in zip(as_numpy(model, clipped).items(), params):
        np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-6, atol=1e-8, err_msg=n)
    same = optim.ClipNorm(max_norm, norm_type)(gp)
    for k in gp.ids():
        np.testing.assert_array_equal(same[k].to_numpy(), clipped[k].to_numpy())


def test_clip_value_matches_torch():
    model = MLP(weights())
    gp = grads_of(model, *batches()[0])
    clipped = optim.clip_grad_value(gp, 0.02)
    for n, g in as_numpy(model, gp).items():
        t = torch.from_numpy(g.copy())
        p = torch.zeros_like(t, requires_grad=True)
        p.grad = t
        torch.nn.utils.clip_grad_value_([p], 0.02)
        np.testing.assert_array_equal(clipped[getattr(model, n)].to_numpy(), p.grad.numpy())
    assert optim.ClipValue(0.02)(gp)[model.w1].to_numpy().max() <= 0.02


def test_empty_gradients_clip_and_norm():
    empty = optim.GradientsParams()
    assert len(empty.clip_norm(1.0)) == 0 and empty.norm().item() == 0.0


def test_errors():
    model = MLP(weights())
    x, y = batches()[0]
    grads = loss_of(model, x, y).backward()
    with pytest.raises(TypeError, match="nn.Module"):
        optim.GradientsParams.from_grads(grads, [model.w1])
    with pytest.raises(TypeError, match="Gradients"):
        optim.GradientsParams.from_grads({}, model)
    with pytest.raises(optim.OptimError, match="another model"):
        optim.GradientsParams.from_grads(grads, MLP(weights()))
    plain = MLP(weights(), backend=NdArray())
    with pytest.raises(BackendError, match="Autodiff"):
        optim.GradientsParams.from_grads(grads, plain)
    with pytest.raises(TypeError, match="not a Tensor"):
        optim.GradientsParams({1: np.zeros(3)})
    with pytest.raises(TypeError, match="pass the module"):
        optim.GradientsAccumulator().accumulate(grads)


def test_shared_param_counted_once():
    class Tied(nn.Module):
        def __init__(self):
            self.w = nn.Param(Tensor.from_data([[1.0, 2.0], [3.0, 4.0]], backend=B))
            self.pair = [self.w, self.w]

        def forward(self):
            return (self.pair[0] * self.pair[1]).sum()

    model = Tied()
    gp = optim.GradientsParams.from_grads(model().backward(), model)
    assert len(gp) == 1
    model = optim.SGD(0.1).step(model, gp)
    assert model.pair[0] is model.pair[1] is model.w
    np.testing.assert_allclose(model.w.to_numpy(), [[0.8, 1.6], [2.4, 3.2]], rtol=1e-6)


def test_trajectory_of_accumulated_steps_matches_torch():
    """4 micro-batches averaged per step, 3 steps, against torch on the full batches."""
    data = batches(n=12, size=2, seed=5)
    big = [(np.concatenate([x for x, _ in data[i:i + 4]]),
            np.concatenate([y for _, y in data[i:i + 4]])) for i in range(0, 12, 4)]
    model, opt, ours = MLP(weights()), optim.AdamW(0.01), []
    for i in range(3):
        acc = optim.GradientsAccumulator()
        for x, y in data[4 * i:4 * i + 4]:
            acc.accumulate(grads_of(model, x, y))
        model = opt.step(model, acc.grads())
        ours.append({n: p.to_numpy().copy() for n, p in model.named_params()})
    from ._models import torch_run
    theirs = torch_run(lambda p: torch.optim.AdamW(p, 0.01), 3, data=big)
    assert_same_trajectory(ours, theirs)
    assert set(TRAINABLE) <= set(ours[0])
