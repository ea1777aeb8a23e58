"""Autodiff as a backend decorator: the tape, Gradients as values, errors, no_grad,
checkpointing, and what the tape keeps alive."""

import queue
import threading

import numpy as np
import pytest

import ember
from ember import Tensor
from ember.autodiff import ADPrim, checkpoint, no_grad
from ember.backend import Autodiff, NdArray

B = Autodiff(NdArray())


def t(data, dtype="float64", grad=True):
    x = Tensor.from_data(np.asarray(data), backend=B, dtype=dtype)
    return x.require_grad() if grad else x


def test_seed_example_matches_the_analytic_gradient():
    x = Tensor.random([32, 32], backend=B)
    y = Tensor.random([32, 32], backend=B).require_grad()
    grads = ((x + y).matmul(x).exp()).backward()
    gy = y.grad(grads)
    assert gy.backend == NdArray() and gy.shape == (32, 32) and gy.dtype == "float32"
    X, Y = (v.to_numpy().astype(np.float64) for v in (x, y))
    E = np.exp((X + Y) @ X)
    np.testing.assert_allclose(gy.to_numpy(), E @ X.T, rtol=2e-5)
    assert x.grad(grads) is None  # x never asked for a gradient


def test_str_names_the_stack():
    assert str(B) == "Autodiff<NdArray<cpu>>"
    assert ember.backend.from_name("autodiff(ndarray)") == B


def test_backward_without_autodiff_says_how_to_fix():
    x = Tensor.random([3])
    with pytest.raises(ember.BackendError, match=r"Autodiff\("):
        x.backward()
    with pytest.raises(ember.BackendError, match=r"Autodiff\("):
        x.require_grad()


def test_backward_twice_through_a_freed_graph_is_a_clear_error():
    x = t([1.0, 2.0])
    loss = (x.exp() * 2).sum()
    loss.backward()
    with pytest.raises(ember.BackendError, match="freed by an earlier backward"):
        loss.backward()


def test_retain_graph_allows_a_second_backward():
    x = t([1.0, 2.0])
    loss = (x.exp() * 2).sum()
    g1 = x.grad(loss.backward(retain_graph=True)).to_numpy()
    g2 = x.grad(loss.backward()).to_numpy()
    np.testing.assert_allclose(g1, g2)


def test_non_scalar_backward_is_seeded_with_ones():
    x = t([[1.0, 2.0], [3.0, 4.0]])
    g = x.grad((x * x).backward())
    np.testing.assert_allclose(g.to_numpy(), 2 * x.to_numpy())


def test_broadcast_gradients_are_summed_to_the_input_shape():
    a, b = t(np.ones((3, 1))), t(np.arange(4.0))
    grads = (a * b).backward()
    np.testing.assert_allclose(a.grad(grads).to_numpy(), np.full((3, 1), 6.0))
    np.testing.assert_allclose(b.grad(grads).to_numpy(), np.full(4, 3.0))


def test_a_tensor_used_twice_accumulates():
    x = t([1.0, 2.0, 3.0])
    g = x.grad((x * x + x.sin() + x).sum().backward())
    X = x.to_numpy()
    np.testing.assert_allclose(g.to_numpy(), 2 * X + np.cos(X) + 1)


def test_require_grad_only_on_floats():
    with pytest.raises(ember.DTypeError, match="float"):
        Tensor.from_data([1, 2], backend=B).require_grad()


def test_detach_and_no_grad_stop_tracking():
    x = t([1.0, 2.0])
    assert x.is_require_grad() and not x.detach().is_require_grad()
    assert (x.detach() * 2).is_require_grad() is False
    with no_grad():
        assert not (x * 2).is_require_grad()
    assert (x * 2).is_require_grad()
    # integer and bool results are never tracked
    assert not (x > 1).is_require_grad()


def test_no_grad_is_per_thread():
    x = t([1.0])
    seen = []
    with no_grad():
        th = threading.Thread(target=lambda: seen.append((x * 2).is_require_grad()))
        th.start()
        th.join()
    assert seen == [True]


def test_gradients_cross_threads_and_add_up():
    rng = np.random.default_rng(0)
    w = t(rng.standard_normal((8, 3)))
    data = Tensor.from_data(rng.standard_normal((16, 8)), backend=B)

    def loss(batch):
        return ((batch @ w).tanh() ** 2).sum()

    single = w.grad(loss(data).backward()).to_numpy()
    out = queue.Queue()

    def worker(i):
        out.put(loss(data[i * 8:(i + 1) * 8]).backward())  # a Gradients value crosses over

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    total = out.get() + out.get()
    np.testing.assert_allclose(w.grad(total).to_numpy(), single, rtol=1e-12)
    assert len(total) == 1


def test_gradients_remove():
    x = t([1.0])
    grads = (x * 3).sum().backward()
    assert grads.remove(x) is not None and x.grad(grads) is None


def _node(tensor):
    prim = tensor._prim
    assert isinstance(prim, ADPrim)
    return prim.node


def test_the_tape_keeps_only_what_rules_read():
    x, y = t([1.0, 2.0]), t([3.0, 4.0])
    assert _node(x + y).saved == {}          # add reads nothing
    assert set(_node(x.exp()).saved) == {"out"}
    assert set(_node(x * y).saved) == {0, 1}
    assert set(_node(x * 2.0).saved) == {0, 1}  # the scalar is kept, it is tiny


def test_saved_activations_are_freed_during_backward():
    x = t([1.0, 2.0])
    y = x.exp()
    z = (y * y).sum()
    z.backward()
    assert _node(y).saved is None and _node(z).saved is None


def test_checkpoint_gives_the_same_gradients_and_keeps_no_activations():
    rng = np.random.default_rng(1)
    w = t(rng.standard_normal((5, 5)))
    x = t(rng.standard_normal((3, 5)))

    def block(h):
        return ((h @ w).tanh() @ w).exp()

    plain = block(x).sum().backward()
    out = checkpoint(block, x)
    node = _node(out)
    assert node.op.name == "checkpoint" and set(node.saved) == {0}  # just the input
    ck = out.sum().backward()
    for p in (x, w):
        np.testing.assert_allclose(p.grad(ck).to_numpy(), p.grad(plain).to_numpy(), rtol=1e-12)


def test_autodiff_results_equal_the_inner_backend():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((4, 5)).astype(np.float32)
    plain = Tensor.from_data(a).gelu().softmax(-1).to_numpy()
    tracked = Tensor.from_data(a, backend=B).require_grad().gelu().softmax(-1).to_numpy()
    np.testing.assert_array_equal(plain, tracked)


def test_buffers_are_reused_through_autodiff_when_nothing_saved_them():
    x = Tensor.from_data(np.ones(1000, np.float32), backend=B)
    y = (x * 2) + 1  # untracked: the temporary's buffer becomes the result
    assert y.to_numpy()[0] == 3.0
    w = t(np.ones(3))
    e = w.exp()
    s = (e * 2).sum()  # e is named and saved by exp's node: its buffer must stay intact
    np.testing.assert_allclose(e.to_numpy(), np.exp(np.ones(3)))
    g = w.grad(s.backward()).to_numpy()
    np.testing.assert_allclose(g, 2 * np.exp(np.ones(3)))


def test_on_final_gets_each_leafs_complete_gradient_during_backward():
    a, b = t(np.arange(6.0).reshape(2, 3)), t([1.0, 2.0, 3.0])
    unused = t([5.0])
    y = ((a * b).exp().sum_dim(1) * (a.sum() + b.sum())).sum()  # several paths to a and b
    seen = []
    grads = y.backend.backward(y, on_final=lambda leaf, g: seen.append((leaf, g)))
    assert len(seen) == 2 == len({leaf for leaf, _ in seen})  # once each; not `unused`
    by_leaf = dict(seen)
    for x in (a, b):
        assert by_leaf[x._prim.node.id] is x.grad(grads)  # already the final value
    assert unused.grad(grads) is None


def test_a_grad_rule_reading_a_value_the_tape_did_not_keep_names_the_op_and_the_fix():
    from ember.ops import Op
    from ember.tensor import _apply

    def rule(g, y, x):
        return (g * x.sum(),)  # reads x, which `saves` leaves out
    op = Op("twice", "custom", lambda x: x * 2, grad=rule, saves=(),
            shape=lambda s: s, dtype=lambda d: d)
    x = t([1.0, 2.0])
    loss = _apply(op, x).sum()
    with pytest.raises(ember.BackendError, match=r"grad rule of twice \(input 0\) reads \.sum.*"
                       r"add it to the op's saves"):
        loss.backward()
