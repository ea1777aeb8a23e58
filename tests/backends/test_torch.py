"""Torch: PyTorch's kernels as an ember backend (ember/backends/torch.py).

The op suite (tests/ops) and the gradient checks (tests/autodiff/test_gradcheck.py) run on
Torch and Autodiff(Torch) already; this file checks what is Torch's own: the lazy import and
the error without torch, the one kernel table, views, zero-copy data on the CPU, writing into
unshared inputs, device strings, tf32's scope, moving tensors between backends, and a
training step that matches NdArray's. EMBER_TEST_TORCH_DEVICE=cuda runs it on Torch("cuda").
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # an optional extra: CI installs it

import ember  # noqa: E402
from ember import BackendError, Tensor, nn, optim  # noqa: E402
from ember.backend import Autodiff, NdArray, Torch, from_name  # noqa: E402
from ember.backends import torch as torch_backend  # noqa: E402
from ember.models import ConvNet  # noqa: E402
from ember.ops import OPS, Op  # noqa: E402

DEVICE = os.environ.get("EMBER_TEST_TORCH_DEVICE", "cpu")
CPU = DEVICE == "cpu"


@pytest.fixture
def B():
    return Torch(DEVICE)


def data(shape=(2, 3)):
    return np.arange(1, np.prod(shape) + 1, dtype=np.float32).reshape(shape) / 8


# ---- import -----------------------------------------------------------------------------------
def test_ember_imports_without_torch():
    """Importing ember and naming Torch never imports torch; only making a Torch() does."""
    code = ("import sys; import ember; from ember.backend import Torch; "
            "assert 'torch' not in sys.modules, 'ember imported torch'; "
            "Torch(); assert 'torch' in sys.modules; print('ok')")
    env = {**os.environ, "PYTHONPATH": str(Path(ember.__file__).parents[1])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_a_missing_torch_names_the_extra(monkeypatch):
    monkeypatch.setattr(torch_backend, "torch", None)  # as if never loaded
    monkeypatch.setitem(sys.modules, "torch", None)  # and `import torch` fails
    with pytest.raises(BackendError, match=r"pip install 'ember\[torch\]'"):
        Torch()


def test_names_and_equality():
    assert str(Torch()) == "Torch<cpu>" and Torch() == Torch("cpu")
    assert str(Torch("cpu", tf32=True)) == "Torch<cpu, tf32>"
    assert Torch(tf32=True) == Torch()  # the same data: tensors are shared freely
    assert Torch() != NdArray()
    assert isinstance(from_name("torch"), Torch)
    assert from_name("autodiff(torch)") == Autodiff(Torch())


@pytest.mark.parametrize("device", ["gpu", "cuda:", "cuda:x", "CPU", "cuda:99", 0, None])
def test_bad_devices_are_refused(device):
    with pytest.raises(BackendError, match="Torch"):
        Torch(device)


def test_a_missing_gpu_is_refused_with_the_count():
    with pytest.raises(BackendError, match=r"sees \d+ CUDA GPU"):
        Torch("cuda:99")


# ---- the kernel table -------------------------------------------------------------------------
def test_every_op_has_a_kernel(B):  # (B: the table is filled by the first Torch())
    assert sorted(op.name for op in OPS.values() if op not in torch_backend.KERNELS) == []


def test_an_op_without_a_kernel_is_refused(B):
    op = Op("made_up", "unary", np.negative)
    with pytest.raises(BackendError, match="no kernel for op 'made_up'"):
        B.execute(op, [B.from_numpy(data())], {}, (2, 3), "float32")


def test_no_op_runs_through_numpy(B, monkeypatch):
    """A training step and the ops it does not use run with every NumPy implementation of the
    op table broken: everything goes through torch."""
    def numpy_ran(*args, **kwargs):
        raise AssertionError("an op ran its NumPy implementation")
    for op in OPS.values():
        monkeypatch.setitem(vars(op), "np", numpy_ran)
    losses = _train(Autodiff(B), steps=1)[0]
    assert np.isfinite(losses).all()
    x = Tensor.from_data(data((2, 3, 4, 4)), backend=B)
    y = (x[:, :, ::-1].gelu().erf().argmax(1).cast("float32") + x.sin().min_dim(0)).sum()
    assert np.isfinite(y.item())


# ---- views, data, ownership -------------------------------------------------------------------
def _storage(t):
    return t._prim.untyped_storage().data_ptr()


def test_movement_ops_are_views(B):
    x = Tensor.from_data(data((2, 3, 4)), backend=B)
    for y in (x.reshape(6, 4), x.permute(2, 0, 1), x[:, None].expand(2, 5, 3, 4),
              x[1:, ::2, 1:3]):
        assert _storage(y) == _storage(x)
    np.testing.assert_array_equal(x[:, ::2, 1:3].to_numpy(), data((2, 3, 4))[:, ::2, 1:3])


def test_negative_steps_flip(B):
    a = data((3, 5))
    x = Tensor.from_data(a, backend=B)
    np.testing.assert_array_equal(x[::-1, 3:0:-2].to_numpy(), a[::-1, 3:0:-2])
    np.testing.assert_array_equal(x.slice_assign((slice(None), slice(None, None, -2)), x[:, :3])
                                  .to_numpy(), _assigned(a))


def _assigned(a):
    out = a.copy()
    out[:, ::-2] = a[:, :3]
    return out


@pytest.mark.skipif(not CPU, reason="zero-copy is the CPU's: CUDA data crosses the bus")
def test_cpu_data_is_not_copied():
    B = Torch()
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    prim = B.from_numpy(a)
    assert prim.data_ptr() == a.ctypes.data  # torch.from_numpy: the same buffer
    view = B.to_numpy(prim)
    assert view.ctypes.data == a.ctypes.data and not view.flags.writeable
    x = Tensor.from_data(a, backend=B)  # (from_data copies the caller's array, once)
    assert x.to_numpy().ctypes.data == x._prim.data_ptr()


def test_read_only_and_reversed_arrays_are_copied(B):
    a = np.arange(6, dtype=np.float32)
    a.flags.writeable = False
    prim = B.from_numpy(a)
    np.testing.assert_array_equal(B.to_numpy(prim), a)
    np.testing.assert_array_equal(B.to_numpy(B.from_numpy(np.arange(6)[::-1])), [5, 4, 3, 2, 1, 0])


def test_unshared_inputs_are_written_into(B):
    exp = OPS["exp"]
    inputs = [B.from_numpy(data())]  # the list alone refers to the prim: it may be reused
    before = inputs[0].data_ptr()
    assert B.execute(exp, inputs, {}, (2, 3), "float32").data_ptr() == before
    held = B.from_numpy(data())
    assert B.execute(exp, [held], {}, (2, 3), "float32").data_ptr() != held.data_ptr()
    base = B.from_numpy(data())
    inputs = [base.view(3, 2).view(2, 3)]  # a view: its base's data is seen elsewhere
    assert B.execute(exp, inputs, {}, (2, 3), "float32").data_ptr() != base.data_ptr()
    inputs = [B.from_numpy(data())]
    before = inputs[0].data_ptr()
    assert Torch(DEVICE, inplace=False).execute(exp, inputs, {}, (2, 3), "float32") \
        .data_ptr() != before
    np.testing.assert_allclose(B.to_numpy(base), data())  # nothing was overwritten


def test_temporaries_are_reused_and_held_tensors_kept(B):
    x = Tensor.from_data(data(), backend=B)
    y = (x * 2).exp() + 1  # x * 2 and its exp are temporaries
    np.testing.assert_allclose(y.to_numpy(), np.exp(data() * 2) + 1, rtol=1e-6)
    np.testing.assert_array_equal(x.to_numpy(), data())
    view = x.to_numpy()  # an array of x's buffer refers to x: x must not be written into
    z = x.exp()
    np.testing.assert_array_equal(view, data())
    assert z._prim.data_ptr() != x._prim.data_ptr()


# ---- dtypes -----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["bool", "int32", "int64", "float32", "float64"])
def test_every_dtype_round_trips(B, dtype):
    a = (np.arange(6).reshape(2, 3) % 3).astype(dtype)
    x = Tensor.from_data(a, backend=B)
    assert x.dtype == dtype and x._prim.dtype == getattr(torch, dtype)
    np.testing.assert_array_equal(x.to_numpy(), a)
    np.testing.assert_array_equal((x == x).to_numpy(), np.ones((2, 3), bool))


# ---- tf32 -------------------------------------------------------------------------------------
def test_tf32_applies_to_this_backends_matmuls_only(monkeypatch):
    """Inside a matmul of Torch(device, tf32=True) CUDA asks for TF32, and torch's own setting
    is back after it; on the CPU nothing is changed."""
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    seen = []
    Torch(DEVICE)  # (the first Torch() fills KERNELS: this test may run first)
    real = torch_backend.KERNELS[OPS["matmul"]]

    def spy(a, b):
        seen.append(matmul.fp32_precision)
        return real(a, b)
    monkeypatch.setitem(torch_backend.KERNELS, OPS["matmul"], spy)
    for tf32 in (True, False):
        B = Torch(DEVICE, tf32=tf32)
        x = Tensor.from_data(data((4, 4)), backend=B)
        np.testing.assert_allclose((x @ x).to_numpy(), data((4, 4)) @ data((4, 4)), rtol=1e-2)
        assert matmul.fp32_precision == before
    assert seen == ([before, before] if CPU else ["tf32", "ieee"])


# ---- moving between backends ------------------------------------------------------------------
def test_tensors_move_between_backends(B):
    a = data()
    n = Tensor.from_data(a)
    t = n.to(B)
    assert t.backend == B and isinstance(t._prim, torch.Tensor)
    np.testing.assert_array_equal(t.to_numpy(), a)
    back = (t * 2).to(NdArray())
    assert back.backend == NdArray() and isinstance(back._prim, np.ndarray)
    np.testing.assert_array_equal(back.to_numpy(), a * 2)
    ad = t.to(Autodiff(B))  # into the decorator: the same prim, wrapped
    assert ad._prim.prim is t._prim
    assert ad.to(B)._prim is t._prim
    with pytest.raises(BackendError, match="different backends"):
        t + n


def test_records_save_and_load_through_torch(B, tmp_path):
    ember.seed(1)
    model = ConvNet(channels=(4, 8), hidden=16, backend=B)
    ember.record.save(model, tmp_path / "m.safetensors")
    other = ConvNet(channels=(4, 8), hidden=16, backend=NdArray())
    ember.record.load(other, tmp_path / "m.safetensors")
    for (name, p), (_, q) in zip(model.named_params(), other.named_params()):
        np.testing.assert_array_equal(p.to_numpy(), q.to_numpy(), err_msg=name)


# ---- training ---------------------------------------------------------------------------------
def _train(backend, steps, batch=16, jit=False):
    """Losses of `steps` Adam steps of a small MNIST ConvNet, the same weights, data and
    dropout masks on any backend, and the trained model; jit: the whole step under ember.jit."""
    ember.seed(0)
    model = ConvNet(channels=(8, 16), hidden=32, backend=backend)
    rng = np.random.default_rng(0)
    x = Tensor.from_data(rng.random((batch, 1, 28, 28), dtype=np.float32), backend=backend)
    y = Tensor.from_data(rng.integers(0, 10, batch).astype(np.int32), backend=backend)
    loss_fn, opt = nn.CrossEntropyLoss(), optim.Adam(lr=1e-2)

    def step(model, x, y):
        loss = loss_fn(model(x), y)
        return opt.step(model, optim.GradientsParams.from_grads(loss.backward(), model)), loss
    fast = ember.jit(step) if jit else step
    losses = []
    for _ in range(steps):
        model, loss = fast(model, x, y)
        losses.append(loss.item())
    return np.array(losses), model, fast


def test_training_matches_ndarray(B):
    ours, reference = _train(Autodiff(B), 4)[0], _train(Autodiff(NdArray()), 4)[0]
    assert ours[-1] < ours[0]  # it learns
    np.testing.assert_allclose(ours, reference, rtol=2e-4)


def test_a_jit_training_step_equals_eager(B):
    """The whole step (forward, backward, Adam) under ember.jit: op by op on the CPU, the very
    same numbers; one CUDA graph on CUDA, equal to rounding (a CUDA graph's Adam takes its
    step's scalars as tensors). The convolutions' biases, which batch norm cancels, train on
    rounding noise alone: only the losses and the weights are compared."""
    (eager, want, _), (jitted, got, _) = (_train(Autodiff(B), 5, jit=j) for j in (False, True))
    tol = dict(rtol=0) if CPU else dict(rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(jitted, eager, **tol)
    for (name, p), (_, q) in zip(got.named_params(), want.named_params()):
        if CPU or name.endswith("weight"):
            np.testing.assert_allclose(p.to_numpy(), q.to_numpy(), **tol, err_msg=name)


def _gather_step():
    """A jit step whose loss gathers the labels (an argument) with an index op."""
    opt = optim.Adam(lr=1e-2)

    def step(model, x, y):
        loss = -model(x).gather(1, y.reshape(y.shape[0], 1)).mean()
        return opt.step(model, optim.GradientsParams.from_grads(loss.backward(), model)), loss
    return ember.jit(step)


@pytest.fixture
def plans(monkeypatch):
    """The plans ember.jit hands Torch.compile, as (steps, table, inputs), and its answers."""
    seen, compile = [], Torch.compile

    def spy(self, steps, table, inputs, outputs):
        runner = compile(self, steps, table, inputs, outputs)
        seen.append((steps, table, inputs, runner))
        return runner
    monkeypatch.setattr(Torch, "compile", spy)
    return seen


def test_index_checks_move_out_of_the_plan(B, plans):
    """Which plans may skip their index ops' host checks: max pooling's gradient scatters to
    indices in range by construction (no check left); a gather of the labels checks the
    labels' bounds before the replay; an index computed otherwise keeps the checks."""
    _train(Autodiff(B), 3, jit=True)
    (steps, table, inputs, _), = plans
    assert any(s.op is OPS["scatter"] for s in steps)
    assert torch_backend._index_limits(steps, table, inputs) == {}
    del plans[:]
    model = nn.Linear(4, 3, backend=Autodiff(B))
    x = Tensor.from_data(data((5, 4)), backend=Autodiff(B))
    y = Tensor.from_data(np.array([0, 1, 2, 1, 0], np.int32), backend=Autodiff(B))
    fast = _gather_step()
    for _ in range(3):
        model, _ = fast(model, x, y)
    (steps, table, inputs, _), = plans
    y_slot = next(i for i, p in enumerate(inputs) if p is y._prim.prim)
    assert torch_backend._index_limits(steps, table, inputs) == {y_slot: 3}
    del plans[:]
    shifted = ember.jit(lambda x, y: x.gather(1, (y + 1).reshape(5, 1)))
    for _ in range(3):
        shifted(x, y - 1)
    (steps, table, inputs, runner), = plans
    assert torch_backend._index_limits(steps, table, inputs) is None and runner is None
    del plans[:]
    fixed = ember.jit(lambda x: x.gather(1, (y + 0).reshape(5, 1)))  # a constant: its bounds
    for _ in range(3):
        fixed(x)
    (steps, table, inputs, _), = plans
    assert torch_backend._index_limits(steps, table, inputs) == {}


def test_out_of_range_labels_raise_embers_error_under_jit(B, plans):
    """After the plan is compiled (a CUDA graph on CUDA), labels out of range are found
    before the replay: the op-by-op replay raises ember's error, never a device assert;
    the next good labels replay the graph again."""
    AB = Autodiff(B)
    model = nn.Linear(4, 3, backend=AB)
    x = Tensor.from_data(data((5, 4)), backend=AB)
    good = Tensor.from_data(np.array([0, 1, 2, 1, 0], np.int32), backend=AB)
    fast = _gather_step()
    losses = []
    for _ in range(4):
        model, loss = fast(model, x, good)
        losses.append(loss.item())
    for labels in ([0, 1, 3, 1, 0], [0, -1, 2, 1, 0]):
        bad = Tensor.from_data(np.array(labels, np.int32), backend=AB)
        with pytest.raises(ember.ShapeError, match=r"gather: index -?\d+ is out of range for "
                           r"dim 1 of size 3; indices must lie in \[0, 3\)"):
            fast(model, x, bad)
    model, loss = fast(model, x, good)
    assert loss.item() < losses[-1]  # it still trains
    if not CPU:
        assert plans[0][3].__self__.graph is not None


def test_jit_replays_on_torch(B):
    """ember.jit captures a model's primitives on Torch and replays them (op by op)."""
    ember.seed(2)
    model = ConvNet(channels=(4, 8), hidden=16, backend=B).eval()
    fast = ember.jit(model)
    x = Tensor.from_data(np.random.default_rng(3).random((2, 1, 28, 28), dtype=np.float32),
                         backend=B)
    want = model(x).to_numpy()
    for _ in range(4):  # captured from the third call on
        np.testing.assert_allclose(fast(x).to_numpy(), want, rtol=1e-6, atol=1e-7)


def test_trace_counts_torch_kernels(B):
    """ember.fusion.trace() sees what Torch launched (views launch nothing), also under
    Fusion(Torch()), which has no fused kernels for Torch and runs each op as it comes."""
    from ember.backend import Fusion
    for backend in (B, Fusion(B)):
        x = Tensor.from_data(data((3, 4)), backend=backend)
        with ember.fusion.trace() as t:
            y = (x * 0.5 + 1).reshape(12).sum()
            backend.sync()
        assert [k.ops for k in t.kernels] == [("mul",), ("add",), ("sum",)], t
        np.testing.assert_allclose(y.to_numpy(), (data((3, 4)) * 0.5 + 1).sum(), rtol=1e-6)


def test_jit_on_cuda_replays_one_cuda_graph(B):
    if B.device.type != "cuda":
        pytest.skip("CUDA graphs need Torch('cuda'): EMBER_TEST_TORCH_DEVICE=cuda runs this")
    ember.seed(2)
    model = ConvNet(channels=(4, 8), hidden=16, backend=B).eval()
    fast = ember.jit(model)
    rng = np.random.default_rng(3)
    xs = [Tensor.from_data(rng.random((2, 1, 28, 28), dtype=np.float32), backend=B)
          for _ in range(5)]
    outs = [fast(x) for x in xs]  # calls 3 to 5 replay the graph, each with its own input
    (plan,) = fast._plans.values()
    assert plan.runner is not None and plan.runner[0].__self__.graph is not None
    for x, out in zip(xs, outs):  # each result its own copy, not the graph's next output
        np.testing.assert_allclose(out.to_numpy(), model(x).to_numpy(), rtol=1e-5, atol=1e-6)


def test_a_jit_training_step_on_cuda_is_one_cuda_graph(B):
    """Forward, backward (max pooling's scatters included) and Adam: one launch per step."""
    if B.device.type != "cuda":
        pytest.skip("CUDA graphs need Torch('cuda'): EMBER_TEST_TORCH_DEVICE=cuda runs this")
    _, model, fast = _train(Autodiff(B), 3, jit=True)
    (plan,) = fast._plans.values()
    assert plan.runner is not None and plan.runner[0].__self__.graph is not None
    rng = np.random.default_rng(1)
    x = Tensor.from_data(rng.random((16, 1, 28, 28), dtype=np.float32), backend=Autodiff(B))
    y = Tensor.from_data(rng.integers(0, 10, 16).astype(np.int32), backend=Autodiff(B))
    with ember.fusion.trace() as t:
        fast(model, x, y)
    graphs = [k for k in t.kernels if "adam" in k.ops]  # (the others: dropout's new mask)
    assert len(graphs) == 1 and {"conv2d", "scatter", "conv2d_weight"} <= set(graphs[0].ops)
