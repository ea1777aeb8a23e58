"""The step's contract (ids, fresh leaves, frozen params, errors) and checkpoints."""

import copy

import numpy as np
import pytest

from ember import Tensor, nn, optim
from ember.backend import Autodiff, NdArray
from ember.errors import ShapeError
from ember.optim import lr

from ._models import MLP, NAMES, B, assert_same_trajectory, batches, ember_run, loss_of, weights

OPTIMIZERS = {
    "sgd": lambda: optim.SGD(lr.Step(0.05, 3, gamma=0.5)),
    "sgd-momentum": lambda: optim.SGD(0.05, momentum=0.9, nesterov=True),
    "adam": lambda: optim.Adam(lr.LinearWarmup(lr.Cosine(0.02, T_max=8), 3), amsgrad=True),
    "adamw": lambda: optim.AdamW(0.02, grad_clip=optim.ClipNorm(0.5)),
    "rmsprop": lambda: optim.RMSProp(0.01, centered=True, momentum=0.5),
    "adagrad": lambda: optim.AdaGrad(lr.Exponential(0.1, 0.9), lr_decay=0.01),
}


def flatten(tree, prefix=""):
    """What a safetensors file keeps: a flat name -> ndarray map (numbers as 0-d arrays)."""
    out = {}
    for k, v in tree.items():
        key = f"{prefix}/{k}" if prefix else k
        if isinstance(v, dict):
            out.update(flatten(v, key) if v else {key + "/": np.zeros(0)})
        else:
            out[key] = np.asarray(v).copy()
    return out


def unflatten(flat):
    tree = {}
    for key, v in flat.items():
        *path, last = key.split("/")
        node = tree
        for part in path:
            node = node.setdefault(part, {})
        if last:
            node[last] = v
    return tree


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_state_dict_round_trip_continues_the_run(name):
    make = OPTIMIZERS[name]
    uninterrupted, _ = ember_run(make(), 10)
    opt = make()
    first, model = ember_run(opt, 5)
    state = opt.state_dict(model)
    # plain values only: nested dicts of Python numbers and NumPy arrays
    def check(tree):
        for v in tree.values():
            assert isinstance(v, dict | int | float | np.ndarray), type(v)
            if isinstance(v, dict):
                check(v)
    check(state)
    assert state["step_count"] == 5
    assert set(state["state"]) <= set(NAMES) and "scale" not in state["state"]
    # a new process: the same architecture rebuilt (new param ids) from saved weights
    restored = MLP({n: p.to_numpy() for n, p in model.named_params()})
    assert restored.w1.param_id != model.w1.param_id
    opt2 = make()
    opt2.load_state_dict(unflatten(flatten(state)), restored)
    assert opt2.step_count == 5 and opt2.lr == pytest.approx(opt.lr)
    rest, _ = ember_run(opt2, 5, model=restored, start=5)
    assert_same_trajectory(first + rest, uninterrupted, rtol=0, atol=0)


def test_state_dict_contents_for_adam():
    opt = optim.Adam(0.01)
    _, model = ember_run(opt, 3)
    state = opt.state_dict(model)
    assert state["lr"] == {"last_epoch": 3, "lr": 0.01}
    w1 = state["state"]["w1"]
    assert set(w1) == {"step", "exp_avg", "exp_avg_sq"} and w1["step"] == 3
    assert w1["exp_avg"].shape == (4, 8) and w1["exp_avg"].dtype == np.float32
    assert "unused" not in state["state"]  # never had a gradient: no state yet


def test_load_state_dict_errors():
    opt = optim.Adam(0.01)
    _, model = ember_run(opt, 2)
    state = opt.state_dict(model)
    with pytest.raises(optim.OptimError, match="another optimizer or other settings"):
        optim.SGD(0.1, momentum=0.9).load_state_dict(state, model)
    with pytest.raises(optim.OptimError, match="another optimizer or other settings"):
        optim.Adam(0.01, amsgrad=True).load_state_dict(state, model)

    class Other(nn.Module):
        def __init__(self):
            self.w1 = nn.Param(Tensor.zeros([3, 3], backend=B))

    bad = copy.deepcopy(state)
    bad["state"] = {"w1": bad["state"]["w1"]}
    with pytest.raises(ShapeError, match="w1"):
        optim.Adam(0.01).load_state_dict(bad, Other())
    with pytest.raises(optim.OptimError, match="does not"):
        optim.Adam(0.01).load_state_dict(state, Other())
    with pytest.raises(optim.OptimError, match="step_count"):
        optim.Adam(0.01).load_state_dict({"w1": 1}, model)
    with pytest.raises(optim.OptimError, match="not in this"):
        opt.state_dict(Other())
    with pytest.raises(ValueError, match="another kind of scheduler"):
        optim.Adam(lr.Step(0.1, 2)).load_state_dict(state, model)


def test_step_keeps_ids_and_gives_fresh_leaves():
    model = MLP(weights())
    before = {n: (p.param_id, p) for n, p in model.named_params()}
    x, y = batches()[0]
    out = optim.Adam(0.01).step(model, loss_of(model, x, y).backward())  # raw Gradients too
    assert out is model
    for n, p in model.named_params():
        assert p.param_id == before[n][0]
        assert p.trainable == (n != "scale")
        assert p.is_require_grad() == p.trainable
        assert (p is before[n][1]) == (n in ("scale", "unused"))  # untouched ones are kept
    # the next forward/backward works on the updated leaves
    gp = optim.GradientsParams.from_grads(loss_of(model, x, y).backward(), model)
    assert len(gp) == 4


def test_frozen_param_never_changes_even_with_a_gradient_for_it():
    model = MLP(weights())
    x, y = batches()[0]
    gp = optim.GradientsParams.from_grads(loss_of(model, x, y).backward(), model)
    ones = Tensor.ones(model.scale.shape, backend=NdArray())
    gp = gp + optim.GradientsParams({model.scale.param_id: ones})  # made by hand
    opt = optim.SGD(1.0, momentum=0.9, weight_decay=0.5)
    for _ in range(5):
        model = opt.step(model, gp)
    np.testing.assert_array_equal(model.scale.to_numpy(), weights()["scale"])
    assert model.scale.param_id not in opt.state


def test_errors_for_foreign_gradients_and_wrong_types():
    model, other = MLP(weights()), MLP(weights())
    x, y = batches()[0]
    gp_other = optim.GradientsParams.from_grads(loss_of(other, x, y).backward(), other)
    opt = optim.Adam()
    with pytest.raises(optim.OptimError, match="another model"):
        opt.step(model, gp_other)
    with pytest.raises(TypeError, match="nn.Module"):
        opt.step({"w": model.w1}, gp_other)
    with pytest.raises(TypeError, match=r"\(model, grads\)"):
        opt.step(gp_other, model)
    with pytest.raises(TypeError, match="GradientsParams"):
        opt.step(model, {model.w1.param_id: model.w1})
    wrong = optim.GradientsParams({model.w1.param_id: Tensor.zeros([2], backend=NdArray())})
    with pytest.raises(ShapeError, match="w1"):
        opt.step(model, wrong)
    with pytest.raises(TypeError, match="grad_clip"):
        optim.SGD(0.1, grad_clip=1.0)
    with pytest.raises(ValueError, match="Nesterov"):
        optim.SGD(0.1, nesterov=True)
    with pytest.raises(ValueError, match="betas"):
        optim.Adam(betas=(1.0, 0.9))
    assert not opt.state  # nothing was half-applied


def test_plain_backend_model_with_hand_made_gradients():
    model = MLP(weights(), backend=NdArray())
    gp = optim.GradientsParams({model.w1.param_id: Tensor.ones([4, 8], backend=NdArray())})
    model = optim.SGD(0.5).step(model, gp)
    np.testing.assert_allclose(model.w1.to_numpy(), weights()["w1"] - 0.5, rtol=1e-6)
    assert model.w1.backend == NdArray()


def test_state_follows_a_module_moved_between_backends():
    opt = optim.Adam(0.01)
    ref, _ = ember_run(optim.Adam(0.01), 4)
    first, model = ember_run(opt, 2)
    model = model.to(Autodiff(OtherNdArray()))  # same ids; the state follows at the next step
    rest, model = ember_run(opt, 2, model=model, start=2)
    assert_same_trajectory(first + rest, ref, rtol=0, atol=0)
    assert all(t.backend == OtherNdArray() for t in opt.state[model.w1.param_id].values()
               if isinstance(t, Tensor))


class OtherNdArray(NdArray):
    """Another backend as far as ember can tell (its key differs): moves copy data."""


def test_reset_and_repr():
    opt = optim.AdamW(0.01, grad_clip=optim.ClipValue(1.0))
    _, model = ember_run(opt, 2)
    assert opt.step_count == 2 and opt.state
    opt.reset()
    assert opt.step_count == 0 and not opt.state
    assert repr(opt).startswith("AdamW(lr=0.01, betas=(0.9, 0.999)")
    assert "ClipValue(1.0)" in repr(opt)
    assert {n for n, _ in model.named_params()} == set(NAMES)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_step_overwrites_no_buffer_anyone_else_holds(name):
    """Updates run on shared data (p.inner() shares the param's buffer; ops may reuse the
    buffers of temporaries): old params, gradients and saved state must stay as they were."""
    model, opt = MLP(weights()), OPTIMIZERS[name]()
    for i, (x, y) in enumerate(batches() * 2):
        old = {n: (p, p.to_numpy().copy()) for n, p in model.named_params()}
        gp = optim.GradientsParams.from_grads(loss_of(model, x, y).backward(), model)
        grads = {k: g.to_numpy().copy() for k, g in gp.items()}
        state = {k: {s: t.to_numpy().copy() for s, t in st.items() if isinstance(t, Tensor)}
                 for k, st in opt.state.items()}
        held = {k: dict(st) for k, st in opt.state.items()}
        model = opt.step(model, gp)
        for n, (p, value) in old.items():
            np.testing.assert_array_equal(p.to_numpy(), value, err_msg=f"old {n}, step {i}")
        for k, g in gp.items():
            np.testing.assert_array_equal(g.to_numpy(), grads[k])
        for k, st in state.items():
            for s, value in st.items():
                np.testing.assert_array_equal(held[k][s].to_numpy(), value)
