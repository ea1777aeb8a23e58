"""Every differentiable primitive of the op table against central finite differences in
float64, and double backward on a few. The table below must name every op that has a grad
rule: a new op cannot skip the check (test_every_differentiable_op_is_checked)."""

import numpy as np
import pytest
from ops.backends import AUTODIFF  # (tests/ops/backends.py: every backend the suites run on)

import ember
from ember import Tensor
from ember.backend import Autodiff, NdArray
from ember.nn import functional as F
from ember.ops import OPS
from ember.tensor import _apply

B = Autodiff(NdArray())  # the stack under test: the `stack` fixture sets it


@pytest.fixture(params=[make for _, make in AUTODIFF], ids=[name for name, _ in AUTODIFF])
def stack(request):
    """Each Autodiff stack in turn (Autodiff(NdArray()), Autodiff(Torch()) where torch is
    installed) as the module's B, which the checks and their helpers read."""
    global B
    B = request.param()
    yield B
    B = Autodiff(NdArray())


def _idx(x, data):
    return Tensor.from_data(np.array(data, dtype=np.int32), backend=x.backend)


def _mask(x, data):
    return Tensor.from_data(np.array(data, dtype=bool), backend=x.backend)


# op -> (input shapes, domain, function of the inputs). domain: "any" normal values, "pos"
# values in [0.5, 2), "away" |values| in [0.5, 2) with random signs (abs has a kink at 0).
CHECKS = {
    "exp": ([(3, 4)], "any", lambda x: x.exp()),
    "log": ([(3, 4)], "pos", lambda x: x.log()),
    "sqrt": ([(3, 4)], "pos", lambda x: x.sqrt()),
    "erf": ([(3, 4)], "any", lambda x: x.erf()),
    "gelu": ([(3, 4)], "any", lambda x: x.gelu()),
    "tanh": ([(3, 4)], "any", lambda x: x.tanh()),
    "sin": ([(3, 4)], "any", lambda x: x.sin()),
    "cos": ([(3, 4)], "any", lambda x: x.cos()),
    "neg": ([(3, 4)], "any", lambda x: -x),
    "abs": ([(3, 4)], "away", lambda x: x.abs()),
    "relu": ([(3, 4)], "away", lambda x: x.relu()),
    # GELU's gradient op, differentiated itself (in g and in x; y stands for gelu(x))
    "gelu_grad": ([(3, 4), (3, 4)], "any",
                  lambda g, x: _apply(OPS["gelu_grad"], g, x, x.gelu())),
    "add": ([(3, 1, 4), (2, 1)], "any", lambda a, b: a + b),
    "sub": ([(3, 4), (4,)], "any", lambda a, b: a - b),
    "mul": ([(2, 3), (3, 2, 1)], "any", lambda a, b: a * b * 3.0),
    "div": ([(3, 4), (3, 4)], "pos", lambda a, b: a / b + 2.0 / b),
    "pow": ([(3, 4), (3, 4)], "pos", lambda a, b: a ** b + a ** 2.5 + 1.5 ** b),
    "maximum": ([(3, 4), (4,)], "any", lambda a, b: a.maximum(b) + a.maximum(0.1)),
    "minimum": ([(3, 4), (4,)], "any", lambda a, b: a.minimum(b) + a.minimum(0.1)),
    "cast": ([(3, 4)], "any", lambda x: x.cast("float32").cast("float64") * x),
    "sum": ([(2, 3, 4)], "any", lambda x: x.sum_dim((0, 2)) + x.sum()),
    "max": ([(2, 3, 4)], "any", lambda x: x.max_dim(1) + x.max()),
    "min": ([(2, 3, 4)], "any", lambda x: x.min_dim(-1) + x.min()),
    "reshape": ([(3, 4)], "any", lambda x: x.reshape(2, -1) * _w((2, 6))),
    "permute": ([(2, 3, 4)], "any", lambda x: x.permute(2, 0, 1) * _w((4, 2, 3))),
    "expand": ([(3, 1)], "any", lambda x: x.expand(2, 3, 4) * _w((2, 3, 4))),
    "slice": ([(4, 5)], "any", lambda x: x[1:4, ::-2] * _w((3, 3))),
    "cat": ([(2, 3), (2, 2)], "any", lambda a, b: Tensor.cat([a, b, a], 1) * _w((2, 8))),
    "slice_assign": ([(3, 4), (2, 2)], "any",
                     lambda x, v: x.slice_assign((slice(0, 2), slice(1, 3)), v * 2) * _w((3, 4))),
    "gather": ([(3, 4)], "any", lambda x: x.gather(1, _idx(x, [[0, 0], [3, 1], [2, 2]]))),
    "scatter": ([(3, 4), (3, 2)], "any",
                lambda x, v: x.scatter(1, _idx(x, [[0, 0], [3, 1], [2, 2]]), v) * _w((3, 4))),
    "select": ([(4, 3)], "any", lambda x: x.select(0, [2, 0, 2]) * _w((3, 3))),
    "mask_where": ([(3, 4), (4,)], "any",
                   lambda x, v: x.mask_where(_mask(x, [True, False, False, True]), v)
                   .mask_fill(_mask(x, [False, True, False, False]), 7.0) * _w((3, 4))),
    "matmul": ([(2, 3, 4), (4, 5)], "any", lambda a, b: a @ b),
    # stride 2 over 8 rows leaves the last row unread: the input gradient crops (pads < 0)
    "conv2d": ([(2, 4, 8, 6), (4, 2, 3, 2), (4,)], "any",
               lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=(0, 1), dilation=(1, 2),
                                        groups=2)),
    "batch_norm": ([(4, 3, 2, 2), (3,), (3,)], "any",
                   lambda x, w, b: _bn(x, w, b) * _w((4, 3, 2, 2))),
    # overlapping windows (stride < kernel) and padding: one input can be several maxima
    "max_pool2d": ([(2, 3, 5, 6)], "any",
                   lambda x: F.max_pool2d(x, 3, 2, 1) * _w((2, 3, 3, 3))),
    "conv_transpose2d": ([(2, 4, 3, 3), (4, 2, 3, 2)], "any",
                         lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1,
                                                         output_padding=(1, 0), groups=2,
                                                         dilation=(1, 2))),
    "conv2d_weight": ([(2, 4, 7, 6), (2, 4, 3, 3)], "any",
                      lambda x, g: _apply(OPS["conv2d_weight"], x, g, kernel=(2, 2),
                                          stride=(2, 2), padding=((0, 0), (1, 0)),
                                          dilation=(1, 2), groups=2)),
}

# ops whose results carry no gradient (bools, indices, constants)
NOT_DIFFERENTIABLE = {"eq", "ne", "lt", "le", "gt", "ge", "argmax", "argmin", "full", "adam",
                      "max_pool2d_indices"}


def _bn(x, w=None, b=None):
    """Training-mode batch norm as BatchNorm does it: x's statistics without a gradient, then
    the batch_norm op (whose gradient goes through them)."""
    c = x.shape[1]
    if w is None:
        w = Tensor.from_data(np.linspace(0.5, 1.5, c), backend=x.backend, dtype=x.dtype)
    if b is None:
        b = Tensor.from_data(np.linspace(-0.2, 0.3, c), backend=x.backend, dtype=x.dtype)
    shape, dims = (1, c) + (1,) * (x.ndim - 2), (0,) + tuple(range(2, x.ndim))
    with ember.no_grad():
        mean = x.mean_dim(dims)
        xc = x - mean
        var = (xc * xc).mean_dim(dims)
    return _apply(OPS["batch_norm"], x, mean, var, w.reshape(shape), b.reshape(shape), eps=1e-3)


def _w(shape):
    """Fixed weights that make every output element matter differently."""
    return Tensor.from_data(np.linspace(0.5, 1.5, int(np.prod(shape))).reshape(shape),
                            backend=B, dtype="float64")


def _inputs(shapes, domain, rng):
    out = []
    for s in shapes:
        v = rng.standard_normal(s)
        if domain == "pos":
            v = np.abs(v) % 1.5 + 0.5
        elif domain == "away":
            v = np.sign(v + 1e-9) * (np.abs(v) % 1.5 + 0.5)
        out.append(v)
    return out


def _scalar_fn(fn, arrays, weights):
    """sum(fn(inputs) * weights) as a float, evaluated without gradients."""
    ts = [Tensor.from_data(a, backend=B, dtype="float64") for a in arrays]
    w = Tensor.from_data(weights, backend=B)
    return float((fn(*ts).cast("float64") * w).sum().item())


def test_every_differentiable_op_is_checked():
    has_grad = {name for name, op in OPS.items() if op.grad is not None}
    assert sorted(has_grad - set(CHECKS)) == [], "ops with a grad rule but no gradcheck"
    assert sorted(set(CHECKS) - set(OPS)) == [], "gradchecks for ops that do not exist"
    assert has_grad | NOT_DIFFERENTIABLE == set(OPS)
    assert not has_grad & NOT_DIFFERENTIABLE


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_gradient_matches_finite_differences(name, stack):
    shapes, domain, fn = CHECKS[name]
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    arrays = _inputs(shapes, domain, rng)
    xs = [Tensor.from_data(a, backend=B, dtype="float64").require_grad() for a in arrays]
    out = fn(*xs)
    weights = rng.standard_normal(out.shape)
    loss = (out.cast("float64") * Tensor.from_data(weights, backend=B)).sum()
    grads = loss.backward()
    # cast rounds through float32: a wider step keeps that rounding out of the difference
    eps, tol = (1e-3, 1e-3) if name == "cast" else (1e-6, 1e-6)
    for i, x in enumerate(xs):
        analytic = x.grad(grads)
        assert analytic is not None, f"{name}: no gradient for input {i}"
        assert analytic.shape == x.shape and analytic.dtype == "float64"
        numeric = np.zeros_like(arrays[i])
        for j in np.ndindex(arrays[i].shape):
            hi = [a.copy() for a in arrays]
            lo = [a.copy() for a in arrays]
            hi[i][j] += eps
            lo[i][j] -= eps
            numeric[j] = (_scalar_fn(fn, hi, weights) - _scalar_fn(fn, lo, weights)) / (2 * eps)
        np.testing.assert_allclose(analytic.to_numpy(), numeric, rtol=tol, atol=tol,
                                   err_msg=f"{name}: input {i}")


@pytest.mark.parametrize("name", sorted(NOT_DIFFERENTIABLE - {"full"}))
def test_non_differentiable_results_are_not_tracked(name, stack):
    x = Tensor.from_data([[0.5, -1.0, 2.0]], backend=B, dtype="float64").require_grad()
    calls = {"argmax": lambda: x.argmax(1), "argmin": lambda: x.argmin(1),
             "max_pool2d_indices": lambda: F.max_pool2d(x[None, None], 1, return_indices=True)[1],
             "adam": lambda: _apply(OPS["adam"], x, x, Tensor.stack([x, x, x]), 0.1, 0.999, 1.0,
                                    1e-8, -1e-3)}
    out = calls[name]() if name in calls else getattr(x, name)(0.5)
    assert not out.is_require_grad()
    assert out.dtype in ("bool", "int32") or name == "adam"  # (an update, not a value of x)


DOUBLE = {
    "exp": lambda x: x.exp(),
    "sin": lambda x: x.sin(),
    "tanh": lambda x: x.tanh(),
    "erf": lambda x: x.erf(),
    "mul": lambda x: x * x * x,
    "div": lambda x: 1.0 / (x * x + 1.0),
    "matmul": lambda x: x @ x.transpose(),
    "gelu": lambda x: x.gelu(),
    "log_softmax": lambda x: x.log_softmax(-1),
    # create_graph: the rule recomputes the statistics from x, so they are differentiated too
    "batch_norm": lambda x: (_bn(x.reshape(3, 2)) ** 3).reshape(2, 3),
}


@pytest.mark.parametrize("name", sorted(DOUBLE))
def test_double_backward_matches_finite_differences(name, stack):
    fn = DOUBLE[name]
    rng = np.random.default_rng(7)
    a = rng.standard_normal((2, 3))
    v = rng.standard_normal((2, 3))

    def first_grad(values, create_graph):
        x = Tensor.from_data(values, backend=B, dtype="float64").require_grad()
        (g,) = ember.autodiff.grad(fn(x).sum(), [x], create_graph=create_graph)
        return x, g

    x, g = first_grad(a, True)
    assert g.backend == B and g.is_require_grad()
    h = (g * Tensor.from_data(v, backend=B)).sum()
    second = x.grad(h.backward()).to_numpy()
    eps = 1e-6
    numeric = np.zeros_like(a)
    for j in np.ndindex(a.shape):
        hi, lo = a.copy(), a.copy()
        hi[j] += eps
        lo[j] -= eps
        fh = (first_grad(hi, False)[1].to_numpy() * v).sum()
        fl = (first_grad(lo, False)[1].to_numpy() * v).sum()
        numeric[j] = (fh - fl) / (2 * eps)
    np.testing.assert_allclose(second, numeric, rtol=1e-5, atol=1e-6)
