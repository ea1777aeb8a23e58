"""ember.jit (core/ember/capture.py): a replay computes what the function computes, captures
once per signature, notices a changed module, and refuses what it could not repeat."""

import sys
import threading

import numpy as np
import pytest

import ember
from ember import JitError, Tensor, nn, record
from ember.backend import Autodiff, NdArray


def _x(seed, shape=(2, 1, 28, 28), backend=None):
    rng = np.random.default_rng(seed)
    return Tensor.from_data(rng.random(shape, dtype=np.float32), backend=backend)


class Counted(nn.Module):
    """The MNIST ConvNet, counting how often its Python forward runs."""

    def __init__(self):
        self.net = ember.models.ConvNet(channels=(4, 8), hidden=16)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.net(x)


def test_module_replays_what_it_computes_on_new_inputs():
    model = Counted().eval()
    fast = ember.jit(model)
    for seed in range(5):
        x = _x(seed)
        want = model.net(x).to_numpy()
        # BatchNorm is folded into the convolutions: rounded differently, to float32 precision
        np.testing.assert_allclose(fast(x).to_numpy(), want, rtol=1e-5, atol=1e-6)
    # call 1 runs, call 2 runs and captures, calls 3-5 replay without the Python forward
    assert model.calls == 2
    assert "1 captured" in repr(fast)


def test_replay_leaves_arguments_and_weights_unchanged():
    # a replay frees intermediates at their last use so ops may write into their inputs'
    # buffers: never into an argument's or a weight's
    model = ember.models.ConvNet(channels=(4, 8), hidden=16).eval()
    fast = ember.jit(lambda x: (model(x) * 2 + 1).relu())
    weights = {n: p.to_numpy().copy() for n, p in model.named_params()}
    x = _x(0)
    before = x.to_numpy().copy()
    outs = [fast(x).to_numpy() for _ in range(5)]
    for out in outs[3:]:  # replays: the same every time, and what the calls that ran computed
        np.testing.assert_array_equal(out, outs[2])
    np.testing.assert_allclose(outs[2], outs[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(x.to_numpy(), before)
    for n, p in model.named_params():
        np.testing.assert_array_equal(p.to_numpy(), weights[n], err_msg=n)


def _names(fast):
    (plan,) = fast._plans.values()
    return [step[1].name for step in plan.steps]


def test_batchnorm_and_other_per_channel_constants_fold_into_the_convolution():
    model = ember.models.ConvNet(channels=(4, 8), hidden=16).eval()
    fast = ember.jit(model)
    for seed in range(3):
        fast(_x(seed))
    assert _names(fast) == ["conv2d", "relu", "max_pool2d", "conv2d", "relu", "max_pool2d",
                            "reshape", "matmul", "add", "relu", "matmul", "add"]
    w = Tensor.from_data(np.random.default_rng(0).standard_normal((6, 2, 3, 3)))
    w = w.cast("float32")
    scale = Tensor.from_data(np.linspace(-2, 2, 6, dtype=np.float32).reshape(1, 6, 1, 1))
    shift = Tensor.from_data(np.arange(6, dtype=np.float32).reshape(6, 1, 1))
    columns = Tensor.from_data(np.linspace(1, 2, 7, dtype=np.float32))
    cases = {  # function -> the ops its replay runs
        "no bias, scalars": (lambda x: (nn.functional.conv2d(x, w) * 0.5 + 2) - 1,
                             ["conv2d", "sub"]),
        "per channel": (lambda x: shift + scale * nn.functional.conv2d(x, w, padding=1),
                        ["conv2d"]),
        "also read elsewhere": (lambda x: (lambda y: (y * scale, y.exp()))(
            nn.functional.conv2d(x, w)), ["conv2d", "mul", "exp"]),
        "a result": (lambda x: (lambda y: (y, y + shift))(nn.functional.conv2d(x, w)),
                     ["conv2d", "add"]),
        "per column": (lambda x: nn.functional.conv2d(x, w) * columns, ["conv2d", "mul"]),
    }
    for name, (f, ops) in cases.items():
        fast = ember.jit(f)
        for seed in range(4):
            x = _x(seed, (2, 2, 9, 9))
            got, want = fast(x), f(x)
            for g, v in zip(*(o if isinstance(o, tuple) else (o,) for o in (got, want))):
                np.testing.assert_allclose(g.to_numpy(), v.to_numpy(), rtol=1e-5, atol=1e-5,
                                           err_msg=name)
        assert _names(fast) == ops, name


def test_a_new_signature_captures_again():
    calls = []

    def f(x, scale, offset=0.0):
        calls.append(x.shape)
        return x * scale + offset

    fast = ember.jit(f)
    for shape, scale, offset in [((2, 3), 2.0, 0.0), ((4,), 2.0, 0.0), ((2, 3), 3.0, 0.0),
                                 ((2, 3), 3.0, 1.0)] * 3:
        x = _x(1, shape)
        got = fast(x, scale, offset=offset).to_numpy()
        np.testing.assert_allclose(got, x.to_numpy() * scale + offset, rtol=1e-6)
    assert len(fast._plans) == 4 and len(calls) == 8
    # another dtype is another signature too
    xi = Tensor.from_data(np.arange(6, dtype=np.int32).reshape(2, 3))
    for _ in range(3):
        assert fast(xi, 2).to_numpy().tolist() == [[0, 2, 4], [6, 8, 10]]


def test_the_same_tensor_twice_is_its_own_signature():
    fast = ember.jit(lambda a, b: a - b)
    x, y = _x(0, (3,)), _x(1, (3,))
    for _ in range(3):
        np.testing.assert_array_equal(fast(x, x).to_numpy(), np.zeros(3, np.float32))
    for _ in range(3):
        np.testing.assert_array_equal(fast(x, y).to_numpy(), x.to_numpy() - y.to_numpy())


def test_structures_of_results_and_constants():
    const = Tensor.from_data([1.0, 2.0, 3.0])

    def f(x):
        return {"sum": x + const, "pair": (x * 2, const), "made": Tensor.from_data([7.0])}

    fast = ember.jit(f)
    for seed in range(4):
        x = _x(seed, (3,))
        out = fast(x)
        np.testing.assert_array_equal(out["sum"].to_numpy(), x.to_numpy() + const.to_numpy())
        assert isinstance(out["pair"], tuple)
        np.testing.assert_array_equal(out["pair"][0].to_numpy(), x.to_numpy() * 2)
        np.testing.assert_array_equal(out["pair"][1].to_numpy(), [1, 2, 3])
        np.testing.assert_array_equal(out["made"].to_numpy(), [7])


def test_a_temporary_constant_keeps_its_value():
    # x * 2 + c: the add could write its result into c's buffer (nothing else holds that
    # temporary), which a replay reads again as the constant
    def f(x):
        return x * 2 + Tensor.from_data(np.ones(3, np.float32))

    fast = ember.jit(f)
    for i in range(5):
        x = Tensor.from_data(np.full(3, float(i), np.float32))
        np.testing.assert_array_equal(fast(x).to_numpy(), np.full(3, 2 * i + 1.0))


def test_a_rebound_parameter_or_a_mode_switch_captures_again(tmp_path):
    model = ember.models.ConvNet(channels=(4, 8), hidden=16).eval()
    fast = ember.jit(model)
    x = _x(3)
    for _ in range(3):
        fast(x)
    other = ember.models.ConvNet(channels=(4, 8), hidden=16).eval()
    record.save(other, tmp_path / "other.safetensors")
    record.load(model, tmp_path / "other.safetensors")  # rebinds every Param of `model`
    want = other(x).to_numpy()
    for _ in range(3):
        np.testing.assert_allclose(fast(x).to_numpy(), want, rtol=1e-6, atol=1e-6)
    model.train()  # BatchNorm now updates its running statistics: no replay can do that
    model.dropout.p = 0.0  # (Dropout in training draws random numbers: refused below)
    fast(x)
    with pytest.raises(JitError, match="rebinds its own parameters"):
        fast(x)
    model.eval()
    for _ in range(3):
        np.testing.assert_allclose(fast(x).to_numpy(), model(x).to_numpy(), rtol=1e-6,
                                   atol=1e-6)


def test_reading_values_or_drawing_random_numbers_is_refused():
    def branchy(x):
        return x * 2 if x.sum().item() > 0 else x

    fast = ember.jit(branchy)
    x = _x(0, (3,))
    fast(x)  # the first call runs as written
    with pytest.raises(JitError, match=r"branchy.*reading a tensor's values"):
        fast(x)
    fast = ember.jit(lambda x: x + Tensor.random(x.shape))  # (dropout's masks are replayed)
    fast(x)
    with pytest.raises(JitError, match="random numbers"):
        fast(x)
    with pytest.raises(JitError, match="neither a Tensor, a Module nor hashable"):
        ember.jit(lambda x, opts: x)(x, [1, 2])
    with pytest.raises(JitError, match="it must return Tensors"):
        f = ember.jit(lambda x: x.shape)
        f(x)
        f(x)


def test_gradients_flow_through_a_replay():
    backend = Autodiff(NdArray())
    model = ember.models.ConvNet(channels=(4, 8), hidden=16, backend=backend).eval()
    fast = ember.jit(lambda x: model(x).sum())
    for seed in range(4):
        x = _x(seed, backend=backend).require_grad()
        grads = fast(x).backward()
        x2 = _x(seed, backend=backend).require_grad()
        want = model(x2).sum().backward()
        np.testing.assert_allclose(x.grad(grads).to_numpy(), x2.grad(want).to_numpy(),
                                   rtol=1e-5, atol=1e-7)
        w = model.conv1.weight
        np.testing.assert_allclose(w.grad(grads).to_numpy(), w.grad(want).to_numpy(),
                                   rtol=1e-5, atol=1e-6)
    with ember.no_grad():  # recording or not is part of the signature
        for _ in range(3):
            assert not fast(_x(0, backend=backend)).is_require_grad()


def test_a_jit_inside_a_capture_is_part_of_it():
    inner = ember.jit(lambda x: x.exp())
    outer = ember.jit(lambda x: inner(x) + 1)
    for seed in range(4):
        x = _x(seed, (5,))
        np.testing.assert_allclose(outer(x).to_numpy(), np.exp(x.to_numpy()) + 1, rtol=1e-6)


def test_ops_of_other_threads_are_not_captured():
    go, done, during = threading.Event(), threading.Event(), []

    def other():
        go.wait(5)
        for _ in range(50):
            _x(9, (4,)).exp()
        done.set()

    def f(x):
        if during:  # the capturing call: the other thread runs its ops meanwhile
            go.set()
            done.wait(5)
        return x + 1

    fast = ember.jit(f)
    x = _x(0, (4,))
    fast(x)
    thread = threading.Thread(target=other)
    thread.start()
    during.append(True)
    fast(x)
    thread.join()
    assert done.is_set()
    assert len(next(iter(fast._plans.values())).steps) == 1
    np.testing.assert_allclose(fast(x).to_numpy(), x.to_numpy() + 1)


def test_eager_ops_in_another_thread_survive_captures_ending():
    # The attack of issue 17: one thread captures new shapes in a loop (each capture starts and
    # ends), another runs plain eager ops. A recorder slot shared by threads made the eager
    # thread read it between a capture's end and its own next op (AttributeError on None).
    stop, errors = threading.Event(), []

    def eager():
        a = _x(3, (8, 8))
        try:
            while not stop.is_set():
                (a * 2 + 1).exp().sum().item()
        except Exception as e:  # noqa: BLE001 (the test reports whatever escaped)
            errors.append(e)

    thread = threading.Thread(target=eager)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: the race shows at once
    thread.start()
    try:
        for n in range(1, 31):
            fast = ember.jit(ember.models.ConvNet(channels=(4, 8), hidden=16).eval())
            x = _x(n, (n % 4 + 1, 1, 28, 28))
            for _ in range(3):
                fast(x)
            if errors:
                break
        np.testing.assert_allclose(fast(x).to_numpy(), fast.fn(x).to_numpy(), rtol=1e-5)
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(interval)
    assert errors == []


def test_two_threads_capture_at_once_each_its_own_ops():
    barrier, plans = threading.Barrier(2, timeout=10), {}

    def capture(name, fn, data):
        fast = ember.jit(fn)
        x = _x(data, (6,))
        fast(x)
        barrier.wait()  # both captures run at the same time
        fast(x)
        np.testing.assert_allclose(fast(x).to_numpy(), fn(x).to_numpy(), rtol=1e-6)
        plans[name] = [step[1].name for step in next(iter(fast._plans.values())).steps]

    threads = [threading.Thread(target=capture, args=("exp", lambda x: x.exp() * 2, 1)),
               threading.Thread(target=capture, args=("neg", lambda x: (-x).abs(), 2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert plans == {"exp": ["exp", "mul"], "neg": ["neg", "abs"]}


def _wgpu():
    """Wgpu(): wgpu-py's natively, the page's WebGPU inside Pyodide (e2e/test_wgpu_browser.py
    runs these tests there); a skip where there is none."""
    from ember.backend import Wgpu
    try:
        return Wgpu()
    except Exception as e:  # noqa: BLE001  (no adapter, or no wgpu-py, on this machine)
        pytest.skip(f"no WebGPU adapter: {e}")


def test_wgpu_replays_too():
    backend = _wgpu()
    model = ember.models.ConvNet(channels=(4, 8), hidden=16, backend=backend).eval()
    fast = ember.jit(model)
    for seed in range(4):
        x = _x(seed, backend=backend)
        np.testing.assert_allclose(fast(x).to_numpy(), model(x).to_numpy(), rtol=1e-5,
                                   atol=1e-6)


# ---- whole training steps ---------------------------------------------------------------------
def _train(backend, jit, steps, optimizer, batch=8):
    """Losses, model and optimizer of `steps` training steps of a small ConvNet (BatchNorm in
    training, dropout 0.25) from seed 0, the step run eagerly or under ember.jit."""
    ember.seed(0)
    model = ember.models.ConvNet(channels=(4, 8), hidden=16, backend=backend)
    opt, calls = optimizer(), []
    model.ids = [p.param_id for _, p in model.named_params()]  # (kept by every update)

    def train_step(model, x, y):  # the form of API.md
        calls.append(1)
        loss = nn.loss.cross_entropy(model(x), y)
        gp = ember.optim.GradientsParams.from_grads(loss.backward(), model)
        return opt.step(model, gp), loss

    step = ember.jit(train_step) if jit else train_step
    rng = np.random.default_rng(1)
    losses = []
    for _ in range(steps):
        x = Tensor.from_data(rng.random((batch, 1, 28, 28), dtype=np.float32), backend=backend)
        y = Tensor.from_data(rng.integers(0, 10, batch).astype(np.int32), backend=backend)
        model, loss = step(model, x, y)
        losses.append(loss)  # kept: a later replay must not overwrite it
    return [loss.item() for loss in losses], model, opt, len(calls)


def _same_training(backend, steps, optimizer):
    want, eager_model, eager_opt, _ = _train(backend, False, steps, optimizer)
    got, model, opt, calls = _train(backend, True, steps, optimizer)
    np.testing.assert_array_equal(got, want)  # bit for bit: the same kernels on the same data
    assert calls == 2  # call 1 ran, call 2 captured, the rest replayed
    params = dict(eager_model.named_params())
    for name, p in model.named_params():  # BatchNorm's running statistics included
        np.testing.assert_array_equal(p.to_numpy(), params[name].to_numpy(), err_msg=name)
        assert p.is_require_grad() == p.trainable
    assert [p.param_id for _, p in model.named_params()] == model.ids
    a, b = opt.state_dict(model), eager_opt.state_dict(eager_model)
    assert a["step_count"] == b["step_count"] == steps
    for name, entry in b["state"].items():
        for key, value in entry.items():
            np.testing.assert_array_equal(a["state"][name][key], value, err_msg=f"{name} {key}")
    return model


@pytest.mark.parametrize("optimizer", [lambda: ember.optim.Adam(1e-2),
                                       lambda: ember.optim.SGD(0.05, momentum=0.9),
                                       lambda: ember.optim.AdamW(1e-2),
                                       lambda: ember.optim.Adam(ember.optim.lr.LinearWarmup(
                                           ember.optim.lr.Cosine(1e-2, T_max=60),
                                           warmup_steps=30))],
                         ids=["Adam", "SGD-momentum", "AdamW", "Adam-scheduled"])
def test_a_training_step_replays_as_eager_training(optimizer):
    # forward, backward and the update replayed, the optimizer's state carried along, a new
    # dropout mask drawn per replay from ember's generator, where eager training draws it
    _same_training(Autodiff(NdArray()), 100, optimizer)


def _one_submission(inner, backend, model, warm):
    """A replay of a training step on Autodiff(...inner) submits once and reads nothing."""
    opt = ember.optim.Adam(1e-2)

    def step(model, x, y):
        loss = nn.loss.cross_entropy(model(x), y)
        return opt.step(model, loss.backward()), loss

    fast = ember.jit(step)
    x = _x(0, (8, 1, 28, 28), backend)
    y = Tensor.from_data(np.arange(8, dtype=np.int32), backend=backend)
    for _ in range(warm):
        model, loss = fast(model, x, y)
    before = inner.stats()
    model, loss = fast(model, x, y)
    after = inner.stats()
    assert after["submits"] - before["submits"] == 1 and after["reads"] == before["reads"]
    assert np.isfinite(loss.item())


def test_a_training_step_replays_on_wgpu_as_one_submission():
    inner = _wgpu()
    backend = Autodiff(inner)
    model = _same_training(backend, 20, lambda: ember.optim.Adam(1e-2))
    _one_submission(inner, backend, model, warm=2)


def test_dropout_draws_new_bits_per_replay():
    drop = nn.Dropout(0.5)
    fast = ember.jit(drop)
    x = Tensor.from_data(np.ones((4, 64), np.float32))
    ember.seed(3)
    want = [drop(x).to_numpy() for _ in range(5)]
    ember.seed(3)
    got = [fast(x).to_numpy() for _ in range(5)]
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    assert len({a.tobytes() for a in got}) == 5
    assert "1 captured" in repr(fast)


def test_what_a_training_replay_could_not_repeat_is_refused():
    backend = Autodiff(NdArray())
    model = ember.models.ConvNet(channels=(4, 8), hidden=16, backend=backend)
    x = _x(0, (4, 1, 28, 28), backend)
    y = Tensor.from_data(np.arange(4, dtype=np.int32), backend=backend)
    # (Adam's rate reaches its fused step only through live scalars: its schedules replay,
    # test_a_training_step_replays_as_eager_training; SGD's rate is a captured constant)
    for opt, what in [(ember.optim.SGD(ember.optim.lr.Step(1e-2, 10)), "learning-rate"),
                      (ember.optim.Adam(1e-2, amsgrad=True), "amsgrad")]:
        def step(model, x, y, opt=opt):
            loss = nn.loss.cross_entropy(model(x), y)
            return opt.step(model, loss.backward()), loss

        fast = ember.jit(step)
        fast(model, x, y)
        with pytest.raises(JitError, match=what):
            fast(model, x, y)


def test_a_training_step_replays_on_fused_wgpu_as_one_submission():
    # Fusion.compile: Wgpu records the fused kernels of one run of the lowered step
    from ember.backend import Fusion

    inner = _wgpu()
    backend = Autodiff(Fusion(inner))
    want, _, _, _ = _train(backend, False, 6, lambda: ember.optim.Adam(1e-2))
    got, model, _, calls = _train(backend, True, 6, lambda: ember.optim.Adam(1e-2))
    np.testing.assert_allclose(got, want, rtol=1e-4)  # (fused blocks may round differently)
    assert calls == 2
    # (the first replay also runs what the capture's own run left queued)
    _one_submission(inner, backend, model, warm=3)
