"""NdArray, the reference backend, and Burn's ownership optimisation.

An elementwise result may be written into an input's buffer when nothing else can see that
buffer (a temporary of the expression being evaluated). These tests check both sides:
results stay right whenever a tensor is shared in any way a Python program can share it,
and the reuse really happens for temporaries.

The donation decision depends on reference counts, which depend on how a method is entered
(an operator or a call), so the sharing matrix below is written as source and compiled, the
way a user's code would be, rather than hidden behind helper calls.
"""

import _thread
import functools
import gc
import itertools
import operator
import sys
import textwrap
import time
import tracemalloc
import types

import numpy as np
import pytest

import ember
from ember import Distribution, ShapeError, Tensor
from ember.backend import Fusion, NdArray
from ember.backends import native

BACKENDS = [NdArray(), NdArray(inplace=False)]
IDS = ["inplace", "copying"]


def data(i=0):
    """Distinct small values in (0, 1], so every op below is finite."""
    return (np.arange(1, 7, dtype=np.float32).reshape(2, 3) + 10 * i) / 64


def address(t):
    return t.to_numpy().__array_interface__["data"][0]


# ---- the protocol ------------------------------------------------------------------------
def test_name_and_equality():
    assert str(NdArray()) == "NdArray<cpu>"
    assert NdArray() == NdArray(inplace=False)
    assert NdArray().inplace and not NdArray(inplace=False).inplace


@pytest.mark.parametrize("kernels", ["auto", "numpy"])
def test_ops_are_silent_and_leave_the_callers_numpy_state_alone(kernels):
    import threading
    import warnings

    from ember.ops import kernels as kernel_sets
    x = Tensor.from_data(np.array([1e38, 0.0, -1.0], np.float32), backend=NdArray(kernels))
    seen = []

    def run():  # the caller asks NumPy to raise; ember's ops still give inf and nan, quietly
        with np.errstate(all="raise"), warnings.catch_warnings():
            warnings.simplefilter("error")
            seen.append([(x * x).tolist(), (x / 0).tolist(), x.log().exp().tolist()])
            seen.append((np.geterr()["over"], kernel_sets.active()))
    run()
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    inf, nan = float("inf"), float("nan")
    want = [[inf, 0.0, 1.0], [inf, nan, -inf], [1e38, 0.0, nan]]
    for got, state in (seen[0:2], seen[2:4]):
        np.testing.assert_allclose(np.array(got, np.float64), want, rtol=1e-5)
        assert state == ("raise", kernel_sets.NUMPY)  # as it was, after the ops
    assert np.geterr()["over"] == "warn" and len(seen) == 4


def test_from_numpy_and_to_numpy():
    b = NdArray()
    a = np.arange(4.0, dtype=np.float32)
    prim = b.from_numpy(a)
    out = b.to_numpy(prim)
    np.testing.assert_array_equal(out, a)
    assert not out.flags.writeable
    assert a.flags.writeable  # the backend's own array stays usable


def test_tensors_to_numpy_is_a_read_only_view_of_no_copy():
    x = Tensor.from_data(np.zeros((256, 256), np.float32))
    assert address(x) == address(x)  # reading back costs no copy on the CPU


@pytest.mark.parametrize("backend", BACKENDS, ids=IDS)
def test_0d_results_read_back(backend):
    x = Tensor.from_data(2.0, backend=backend)
    for y in (x + 1, (x * 1) + 1, x.exp(), x == 2, Tensor.ones([3], backend=backend).mean()):
        assert y.shape == ()
        assert np.asarray(y.to_numpy()).shape == ()


# ---- results are right when inputs are shared ---------------------------------------------
def test_named_tensor_used_twice():
    x = Tensor.from_data(data())
    y = x * 2
    z = y + 1
    w = y.exp()
    v = 1 - y
    np.testing.assert_allclose(y.to_numpy(), data() * 2)
    np.testing.assert_allclose(z.to_numpy(), data() * 2 + 1)
    np.testing.assert_allclose(w.to_numpy(), np.exp(data() * 2), rtol=1e-6)
    np.testing.assert_allclose(v.to_numpy(), 1 - data() * 2)
    np.testing.assert_array_equal(x.to_numpy(), data())


def test_same_tensor_on_both_sides():
    x = Tensor.from_data(data())
    np.testing.assert_allclose((x + x).to_numpy(), 2 * data())
    np.testing.assert_allclose((x * x).to_numpy(), data() ** 2)
    t = x * 3
    np.testing.assert_allclose((t - t).to_numpy(), 0 * data())
    np.testing.assert_allclose(((x * 3) / (x * 3)).to_numpy(), np.ones((2, 3)))
    np.testing.assert_array_equal(x.to_numpy(), data())


# How a program may hold the tensor (setup, the expression that reads it), inside a function
# so that locals are fast locals and closures are cells. `make()` builds a fresh tensor.
HOLDERS = {
    "local": ("t = make()", "t"),
    "list": ("held = [make()]", "held[0]"),
    "dict": ("held = {'k': make()}", "held['k']"),
    "tuple": ("held = (make(), 0)", "held[0]"),
    "set": ("held = {make()}", "next(iter(held))"),
    "attribute": ("held = types.SimpleNamespace(t=make())", "held.t"),
    "nested": ("held = {'a': [types.SimpleNamespace(t=make())]}", "held['a'][0].t"),
    "closure": ("t = make()\n    get = lambda: t", "get()"),
    "cell": ("t = make()\n    def peek():\n        return t", "t"),
    "generator frame": ("def gen(v):\n        while True:\n            yield v\n"
                        "    g = gen(make())", "next(g)"),
    "itertools.repeat": ("g = itertools.repeat(make())", "next(g)"),
    "default argument": ("def get(t=make()):\n        return t", "get()"),
    "method result": ("t = make()", "t.detach()"),
    "same reshape": ("t = make()", "t.reshape(2, 3)"),
    "identity permute": ("t = make()", "t.permute(0, 1)"),
    "to same backend": ("t = make()", "t.to(t.backend)"),
    "same cast": ("t = make()", "t.cast('float32')"),
}

# Expressions over the held tensor `{0}`: operators and calls (the two donation paths),
# dunders called by name, composites, and ops that donate their first input.
EXPRESSIONS = {
    "add": "{0} + 1",
    "radd": "1 + {0}",
    "rsub": "2 - {0}",
    "neg": "-{0}",
    "mul self": "{0} * {0}",
    "chain": "(({0} * 2) + 1).exp()",
    "exp": "{0}.exp()",
    "method add": "{0}.add(1)",
    "dunder add": "{0}.__add__(1)",
    "dunder radd": "{0}.__radd__(1)",
    "class call": "Tensor.exp({0})",
    "pow": "{0} ** 2",
    "erf": "{0}.erf()",
    "sigmoid": "{0}.sigmoid()",
    "gelu": "{0}.gelu()",
    "relu": "{0}.relu()",
    "softmax": "{0}.softmax(-1)",
    "clamp": "{0}.clamp(0.02, 0.05)",
    "mask_where": "{0}.mask_where(mask, 0.0)",
    "mask_fill": "{0}.mask_fill(mask, 1.0)",
    "slice_assign": "{0}.slice_assign((0, slice(None)), 0.0)",
    "scatter": "{0}.scatter(1, idx, {0})",
    "cast": "{0}.cast('float64') + 1",
}

TEMPLATE = """
def scenario(make, mask, idx):
    {setup}
    before = ({access}).to_numpy().copy()
    result = {expr}
    after = ({access}).to_numpy().copy()
    return before, after, result.to_numpy().copy()
"""


def run_scenario(setup, access, expr, backend):
    source = TEMPLATE.format(setup=setup, access=access, expr=expr.format(access))
    namespace = {"Tensor": Tensor, "types": types, "itertools": itertools}
    exec(compile(textwrap.dedent(source), f"<{expr}>", "exec"), namespace)  # noqa: S102
    make = lambda: Tensor.from_data(data(), backend=backend)
    mask = Tensor.from_data(data() > 0.05, backend=backend)
    idx = Tensor.from_data(np.array([[0, 0, 2], [1, 2, 1]]), backend=backend)
    return namespace["scenario"](make, mask, idx)


@pytest.mark.parametrize("expr", EXPRESSIONS.values(), ids=EXPRESSIONS.keys())
@pytest.mark.parametrize("holder", HOLDERS.values(), ids=HOLDERS.keys())
def test_held_tensors_are_never_overwritten(holder, expr):
    setup, access = holder
    before, after, result = run_scenario(setup, access, expr, NdArray())
    np.testing.assert_array_equal(after, before)
    np.testing.assert_array_equal(before, data())
    _, _, reference = run_scenario(setup, access, expr, NdArray(inplace=False))
    np.testing.assert_array_equal(result, reference)


def test_module_level_names():
    namespace = {"Tensor": Tensor, "data": data}
    exec(compile("x = Tensor.from_data(data())\ny = x + 1\nz = x.exp()\nw = -x\n",
                 "<module>", "exec"), namespace)  # noqa: S102
    np.testing.assert_array_equal(namespace["x"].to_numpy(), data())
    np.testing.assert_allclose(namespace["y"].to_numpy(), data() + 1)


class Model:
    def __init__(self):
        self.weight = Tensor.from_data(data())

    def forward(self, x):
        return (x * self.weight + 1).exp() * self.weight


def test_attributes_used_in_a_forward_pass():
    m = Model()
    x = Tensor.from_data(data(1))
    for _ in range(3):
        out = m.forward(x)
    np.testing.assert_array_equal(m.weight.to_numpy(), data())
    np.testing.assert_array_equal(x.to_numpy(), data(1))
    expected = np.exp(data(1) * data() + 1) * data()
    np.testing.assert_allclose(out.to_numpy(), expected, rtol=1e-6)


def test_closures_over_a_tensor():
    w = Tensor.from_data(data())

    def scale(x):
        return x * w

    def shift():
        return w + 1

    outs = [scale(Tensor.ones([2, 3])), shift(), shift().exp(), -shift()]
    np.testing.assert_array_equal(w.to_numpy(), data())
    np.testing.assert_allclose(outs[0].to_numpy(), data())
    np.testing.assert_allclose(outs[3].to_numpy(), -(data() + 1))


VIEWS = {
    "row": lambda t: t[0],
    "slice": lambda t: t[:, 1:],
    "reversed": lambda t: t[::-1],
    "reshape": lambda t: t.reshape(-1),
    "permute": lambda t: t.permute(1, 0),
    "transpose": lambda t: t.transpose(),
    "expand": lambda t: t.unsqueeze(0).expand(2, 2, 3),
    "unsqueeze": lambda t: t.unsqueeze(1),
    "flatten": lambda t: t.flatten(),
    "none index": lambda t: t[None],
}


@pytest.mark.parametrize("view", VIEWS.values(), ids=VIEWS.keys())
def test_ops_on_a_temporary_view_leave_the_base_unchanged(view):
    x = Tensor.from_data(data())
    outs = [view(x).exp(), view(x) + 1, 1 - view(x), -view(x), view(x).mask_fill(view(x) > 0, 2.0)]
    np.testing.assert_array_equal(x.to_numpy(), data())
    a = view(Tensor.from_data(data())).to_numpy()
    np.testing.assert_allclose(outs[0].to_numpy(), np.exp(a), rtol=1e-6)
    np.testing.assert_allclose(outs[1].to_numpy(), a + 1)
    np.testing.assert_allclose(outs[4].to_numpy(), np.full_like(a, 2.0))


@pytest.mark.parametrize("view", VIEWS.values(), ids=VIEWS.keys())
def test_views_of_a_temporary_are_not_overwritten(view):
    # the tensor itself is a temporary, but a view of its buffer is held: no reuse
    x = Tensor.from_data(data())
    views = []

    def keep(t):
        views.append(view(t))
        return t

    out = (keep(x * 2) + 1).exp()
    out2 = -keep(x * 3)
    expected = view(Tensor.from_data(data() * 2)).to_numpy()
    np.testing.assert_array_equal(views[0].to_numpy(), expected)
    expected = view(Tensor.from_data(data() * 3)).to_numpy()
    np.testing.assert_array_equal(views[1].to_numpy(), expected)
    np.testing.assert_allclose(out.to_numpy(), np.exp(data() * 2 + 1), rtol=1e-6)
    np.testing.assert_allclose(out2.to_numpy(), -data() * 3)


def test_held_to_numpy_results_are_not_overwritten():
    x = Tensor.from_data(data())
    held = []

    def grab(t):
        held.append(t.to_numpy())
        return t

    out = (grab(x * 2) + 1).exp()
    np.testing.assert_array_equal(held[0], data() * 2)
    np.testing.assert_allclose(out.to_numpy(), np.exp(data() * 2 + 1), rtol=1e-6)
    a = x.to_numpy()
    y = x.exp()
    np.testing.assert_array_equal(a, data())
    n = np.asarray(x * 2)
    (x * 2).exp()
    np.testing.assert_array_equal(n, data() * 2)
    assert y.shape == (2, 3)


def test_detach():
    x = Tensor.from_data(data())
    d = x.detach()
    y = d + 1
    z = x.detach().exp()
    np.testing.assert_array_equal(x.to_numpy(), data())
    np.testing.assert_array_equal(d.to_numpy(), data())
    np.testing.assert_allclose(y.to_numpy(), data() + 1)
    np.testing.assert_allclose(z.to_numpy(), np.exp(data()), rtol=1e-6)


def make_list(n=3):
    return [Tensor.from_data(data(i)) for i in range(n)]


def expected_sum(n=3):
    return sum(data(i) for i in range(n))


@pytest.mark.parametrize("combine", [
    lambda ts: sum(ts),
    lambda ts: sum(t for t in ts),
    lambda ts: sum(ts, Tensor.zeros([2, 3])),
    lambda ts: functools.reduce(operator.add, ts),
    lambda ts: functools.reduce(lambda a, b: a + b, ts),
    lambda ts: functools.reduce(Tensor.add, ts),
    lambda ts: functools.reduce(operator.iadd, ts),
    lambda ts: list(itertools.accumulate(ts))[-1],
], ids=["sum", "sum-gen", "sum-start", "reduce-operator", "reduce-lambda", "reduce-method",
        "reduce-iadd", "accumulate"])
def test_c_level_reductions(combine):
    ts = make_list()
    out = combine(ts)
    np.testing.assert_allclose(out.to_numpy(), expected_sum(), rtol=1e-6)
    for i, t in enumerate(ts):
        np.testing.assert_array_equal(t.to_numpy(), data(i))


def test_sum_with_a_named_start():
    ts = make_list()
    start = Tensor.ones([2, 3])
    out = sum(ts, start)
    np.testing.assert_array_equal(start.to_numpy(), np.ones((2, 3)))
    np.testing.assert_allclose(out.to_numpy(), expected_sum() + 1, rtol=1e-6)


@pytest.mark.parametrize("apply", [
    lambda ts: list(map(Tensor.exp, ts)),
    lambda ts: list(map(operator.neg, ts)),
    lambda ts: list(map(lambda t: t.exp(), ts)),
    lambda ts: list(map(operator.mul, ts, ts)),
    lambda ts: list(map(operator.add, ts, [1.0] * len(ts))),
    lambda ts: list(itertools.starmap(Tensor.add, zip(ts, ts))),
    lambda ts: [t.exp() for t in ts],
    lambda ts: list(t + 1 for t in ts),
    lambda ts: sorted(ts, key=lambda t: float(t.sum()))[0:1] + [ts[0].__neg__()],
], ids=["map-method", "map-operator", "map-lambda", "map-two", "map-scalar", "starmap",
        "comprehension", "generator", "sorted"])
def test_tensors_reached_through_c_iteration(apply):
    ts = make_list()
    outs = apply(ts)
    assert len(outs) >= 1
    for i, t in enumerate(ts):
        np.testing.assert_array_equal(t.to_numpy(), data(i))


def _bound_method_for_loop():
    add = Tensor.from_data(data()).add  # the tensor lives on only as the method's __self__
    outs = []
    for y in map(add, [1.0, 2.0]):
        outs.append(y)
    return add.__self__, outs


def _bound_method_comprehension():
    add = Tensor.from_data(data()).add
    outs = [y for y in map(add, [1.0, 2.0])]
    return add.__self__, outs


def _bound_method_unpacking():
    add = Tensor.from_data(data()).add
    a, b = map(add, [1.0, 2.0])
    return add.__self__, [a, b]


def _bound_method_star():
    add = Tensor.from_data(data()).add
    outs = [*map(add, [1.0, 2.0])]
    return add.__self__, outs


def _partial_for_loop():
    add = functools.partial(Tensor.add, Tensor.from_data(data()))
    outs = []
    for y in map(add, [1.0, 2.0]):
        outs.append(y)
    return add.args[0], outs


def _starmap_over_held_tuples():
    pairs = [(Tensor.from_data(data()), 1.0), (Tensor.from_data(data()), 2.0)]
    outs = []
    for y in itertools.starmap(Tensor.add, pairs):
        outs.append(y)
    return pairs[0][0], outs


def _map_over_a_list_for_loop():
    ts = [Tensor.from_data(data())]
    outs = []
    for y in map(Tensor.add, ts * 2, [1.0, 2.0]):
        outs.append(y)
    return ts[0], outs


def _lambda_over_a_bound_method():
    add = Tensor.from_data(data()).add
    outs = [y for y in map(lambda v: add(v), [1.0, 2.0])]
    return add.__self__, outs


C_DRIVEN = {
    "bound method, for loop": _bound_method_for_loop,
    "bound method, comprehension": _bound_method_comprehension,
    "bound method, unpacking": _bound_method_unpacking,
    "bound method, star": _bound_method_star,
    "partial, for loop": _partial_for_loop,
    "starmap over held tuples": _starmap_over_held_tuples,
    "map over a list": _map_over_a_list_for_loop,
    "lambda over a bound method": _lambda_over_a_bound_method,
}


@pytest.mark.parametrize("scenario", C_DRIVEN.values(), ids=C_DRIVEN.keys())
def test_tensors_held_by_callables_that_c_code_calls_in_a_loop(scenario):
    # map / starmap / partial / bound methods pass the tensor on with a borrowed reference,
    # while the Python frame stands at FOR_ITER or UNPACK_SEQUENCE rather than at a call
    held, outs = scenario()
    np.testing.assert_array_equal(held.to_numpy(), data())
    np.testing.assert_allclose(outs[0].to_numpy(), data() + 1.0)
    np.testing.assert_allclose(outs[1].to_numpy(), data() + 2.0)


@pytest.mark.parametrize("method, args", [
    (Tensor.exp, ()), (Tensor.__add__, (1.0,)), (Tensor.__neg__, ()),
    (Tensor.mask_fill, (Tensor.from_data([True, False]), 0.0)),
], ids=["exp", "add", "neg", "mask_fill"])
def test_ops_called_with_no_python_caller(monkeypatch, method, args):
    # a method called straight from C (a raw thread running C callables here; a JS callback
    # under Pyodide) has no Python frame below it
    errors, results = [], []
    monkeypatch.setattr(sys, "unraisablehook", lambda e: errors.append(e.exc_value))
    t = Tensor.from_data([1.0, 2.0])
    calls = itertools.starmap(method, [(t, *args)])
    _thread.start_new_thread(results.extend, (calls,))
    deadline = time.monotonic() + 10
    while not (results or errors) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert not errors, errors
    assert len(results) == 1 and results[0].shape == (2,)
    assert t.tolist() == [1.0, 2.0]


def test_tensor_referenced_only_through_a_generator():
    def stream(t):
        for _ in range(3):
            yield t

    outs = [t.exp() + t for t in stream(Tensor.from_data(data()))]
    expected = np.exp(data()) + data()
    for out in outs:
        np.testing.assert_allclose(out.to_numpy(), expected, rtol=1e-6)

    g = stream(Tensor.from_data(data()))
    first = next(g) * 2
    second = next(g).exp()
    np.testing.assert_allclose(first.to_numpy(), data() * 2)
    np.testing.assert_allclose(second.to_numpy(), np.exp(data()), rtol=1e-6)
    np.testing.assert_array_equal(next(g).to_numpy(), data())


def test_tensor_referenced_only_through_map():
    m = map(lambda t: t, itertools.repeat(Tensor.from_data(data()), 3))
    outs = [next(m).exp(), next(m) + 1]
    np.testing.assert_allclose(outs[0].to_numpy(), np.exp(data()), rtol=1e-6)
    np.testing.assert_allclose(outs[1].to_numpy(), data() + 1)
    np.testing.assert_array_equal(next(m).to_numpy(), data())


def test_direct_dunder_calls():
    t = Tensor.from_data(data())
    outs = [t.__add__(1), t.__radd__(1), t.__mul__(t), t.__neg__(), t.__sub__(1),
            t.__rtruediv__(1), t.__pow__(2), Tensor.__add__(t, 1), t.__abs__()]
    np.testing.assert_array_equal(t.to_numpy(), data())
    expected = [data() + 1, 1 + data(), data() * data(), -data(), data() - 1, 1 / data(),
                data() ** 2, data() + 1, data()]
    for out, e in zip(outs, expected):
        np.testing.assert_allclose(out.to_numpy(), e, rtol=1e-6)
    np.testing.assert_allclose((t * 2).__add__(1).to_numpy(), data() * 2 + 1)


def test_augmented_assignment_rebinds_only_the_name():
    x = Tensor.from_data(data())
    alias = x
    x += 1
    x *= 2
    np.testing.assert_array_equal(alias.to_numpy(), data())
    np.testing.assert_allclose(x.to_numpy(), (data() + 1) * 2)


@pytest.mark.parametrize("row_first", [True, False])
def test_broadcasting_temporaries(row_first):
    # a temporary smaller than the result cannot hold it; one of the result's shape can
    m = Tensor.from_data(data())
    row = Tensor.from_data(data()[0])
    if row_first:
        out = (row * 2) + m
        out2 = (m * 2) + (row * 2)
    else:
        out = m + (row * 2)
        out2 = (row * 2) + (m * 2)
    np.testing.assert_allclose(out.to_numpy(), data()[0] * 2 + data())
    np.testing.assert_allclose(out2.to_numpy(), data() * 2 + data()[0] * 2)
    col = Tensor.from_data(data()[:, :1])
    np.testing.assert_allclose(((col * 2) - (row * 2)).to_numpy(),
                               data()[:, :1] * 2 - data()[0] * 2)


def test_promoting_temporaries():
    i = Tensor.from_data([[1, 2, 3]])
    out = (i * 2) + 0.5
    assert out.dtype == "float32"
    np.testing.assert_allclose(out.to_numpy(), [[2.5, 4.5, 6.5]])
    out = (i * 2) / (i * 2)
    assert out.dtype == "float32" and out.tolist() == [[1.0, 1.0, 1.0]]
    out = (i > 1) + (i > 2)
    assert out.dtype == "int32" and out.tolist() == [[0, 1, 2]]
    out = (i * 2).cast("float64") * Tensor.from_data(data())
    assert out.dtype == "float64"
    np.testing.assert_allclose(out.to_numpy(), [[2, 4, 6]] * data(), rtol=1e-6)
    assert i.tolist() == [[1, 2, 3]]


# ---- a failing op breaks nothing ----------------------------------------------------------
FAILING = {
    "gather out of range": (lambda x: (x * 2).gather(0, Tensor.from_data([[5, 0, 0]])),
                            ShapeError),
    "scatter out of range": (lambda x: (x * 2).scatter(0, Tensor.from_data([[5, 0, 0]]),
                                                       Tensor.ones([1, 3])), ShapeError),
    "select out of range": (lambda x: (x * 2).select(1, [7]), ShapeError),
    "broadcast": (lambda x: (x * 2) + Tensor.ones([4]), ShapeError),
    "broadcast right": (lambda x: Tensor.ones([4]) + (x * 2), ShapeError),
    "scalar too big": (lambda x: (x.cast("int32") * 2) + 2**40, Exception),
    "matmul": (lambda x: (x * 2) @ (x * 2), ShapeError),
    "mask shape": (lambda x: (x * 2).mask_fill(Tensor.from_data([True, False]), 0.0),
                   ShapeError),
}


@pytest.mark.parametrize("fail, error", FAILING.values(), ids=FAILING.keys())
def test_a_failing_op_leaves_named_tensors_intact(fail, error):
    x = Tensor.from_data(data())
    with pytest.raises(error):
        fail(x)
    np.testing.assert_array_equal(x.to_numpy(), data())
    np.testing.assert_allclose(((x * 2) + 1).to_numpy(), data() * 2 + 1)


@pytest.mark.parametrize("fail, error", FAILING.values(), ids=FAILING.keys())
def test_a_failing_op_leaves_no_broken_tensor_behind(fail, error):
    # a debugger (pdb.pm(), %debug, sys.last_value) shows the traceback's tensors after an
    # error: every one of them must still read back
    x = Tensor.from_data(data())
    with pytest.raises(error) as info:
        fail(x)
    tb = info.tb.tb_next  # skip this test's own frame
    seen = 0
    while tb is not None:
        for name, value in tb.tb_frame.f_locals.items():
            if isinstance(value, Tensor):
                seen += 1
                try:
                    value.to_numpy()
                except Exception as e:  # noqa: BLE001
                    pytest.fail(f"{name!r} in {tb.tb_frame.f_code.co_name}() is broken: {e!r}")
        tb = tb.tb_next
    assert seen


# ---- reuse does happen -----------------------------------------------------------------
def test_a_chain_of_calls_reuses_the_temporarys_buffer():
    x = Tensor.from_data(data())
    addresses = []

    def tap(t):
        addresses.append(address(t))
        return t

    out = tap(x * 2).exp().sqrt().tanh()
    assert address(out) == addresses[0]
    out = tap(x.exp()).add(1).mul(3)
    assert address(out) == addresses[1]


def test_operators_on_temporaries_do_not_donate_eagerly():
    # a temporary reached through an operator counts as many references as a named tensor
    # reached through a call (`t.__add__(1)`), so eager code cannot tell them apart without
    # reading frames; ember.jit and Fusion reuse those buffers instead (tests below)
    x = Tensor.from_data(data())
    temporary = x * 2
    kept = address(temporary)
    out = (temporary + 1)
    assert address(out) != kept
    np.testing.assert_allclose(temporary.to_numpy(), data() * 2)


def chain(x):
    return ((((((x * 2) + 1).exp().sqrt() - 0.5) * x).tanh() + 2.0).abs() / 3).neg()


def chain_of_calls(x):
    return x.mul(2).add(1).exp().sqrt().sub(0.5).mul(x).tanh().add(2.0).abs().div(3).neg()


def peak_arrays(backend, fn=chain):
    """Peak memory, in arrays of 1024x1024 float32, of evaluating `fn` on `backend`."""
    x = Tensor.random([1024, 1024], Distribution.Uniform(-1, 1), backend=backend)
    fn(x), fn(x)  # ember.jit captures on its second call
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        out = fn(x)
        out.backend.sync()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out.shape == (1024, 1024)
    np.testing.assert_allclose(out.to_numpy(), chain(x).to_numpy(), rtol=1e-5, atol=1e-6)
    return (peak - base) / (1024 * 1024 * 4)


def test_peak_memory_of_a_long_chain():
    # where ownership is known the chain's intermediates reuse one buffer: a chain of calls,
    # ember.jit's replay (each intermediate freed at its last use) and, where a C compiler
    # is, Fusion (the chain is one generated kernel: no intermediate is written at all)
    assert 0.9 < peak_arrays(NdArray(), chain_of_calls) < 1.3
    assert 0.9 < peak_arrays(NdArray(), ember.jit(chain)) < 1.3
    if native.compiler() is not None:
        assert 0.9 < peak_arrays(Fusion(NdArray())) < 1.3
    # eager operators keep two arrays alive, as every op does without ownership
    assert 1.8 < peak_arrays(NdArray()) < 2.3
    assert 1.8 < peak_arrays(NdArray(inplace=False), chain_of_calls) < 2.3


@pytest.mark.parametrize("fn", [
    chain,
    lambda x: x.gelu(),
    lambda x: ((x / 2 ** 0.5).erf() + 1) * x / 2,
    lambda x: x.sigmoid() * x,
    lambda x: x.softmax(-1),
    lambda x: x.log_softmax(0),
    lambda x: (x * x).sum_dim(1).sqrt() + x.mean(),
    lambda x: x.clamp(-0.5, 0.5).relu() - x.abs(),
    lambda x: (x * 2).mask_fill(x > 0, 0.0).slice_assign((0,), 1.0).exp(),
    lambda x: (x @ x.transpose()).tanh() + 1,
    lambda x: x.scatter(1, Tensor.from_data([[0] * 8] * 8), x * 2) * 3,
], ids=["chain", "gelu", "gelu-custom", "silu", "softmax", "log_softmax", "norm", "clamp",
        "masks", "matmul", "scatter"])
def test_inplace_and_copying_give_equal_results(fn):
    a = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    x1 = Tensor.from_data(a, backend=NdArray())
    x2 = Tensor.from_data(a, backend=NdArray(inplace=False))
    out1, out2 = fn(x1), fn(x2)
    np.testing.assert_array_equal(out1.to_numpy(), out2.to_numpy())
    np.testing.assert_array_equal(x1.to_numpy(), a)
    np.testing.assert_array_equal(x2.to_numpy(), a)


def test_inplace_and_copying_give_equal_layouts():
    # an SGD step's shape: w - lr * (a gradient made by a transpose, so F-ordered); writing
    # the result into that F-ordered temporary made a transposed w, which BLAS's matmul
    # sums in another order than the C-ordered w a copying run gives (on AVX512 Xeons: an
    # ulp's difference, so ember.jit's replays, freeing more temporaries, left eager training)
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((16, 40)).astype(np.float32)
    g0 = rng.standard_normal((40, 16)).astype(np.float32)
    want = w0 - g0.T * np.float32(0.5)
    sub = ember.ops.OPS["sub"]
    for backend in BACKENDS:
        w, g = (Tensor.from_data(a, backend=backend) for a in (w0, g0))
        out = w.sub(g.transpose() * 0.5)
        # the temporary, held by the list alone, as a replay holds it at its last use
        direct = backend.execute(sub, [w0, np.asfortranarray(g0.T * np.float32(0.5))], {},
                                 w0.shape, "float32")
        for got in (out._prim, direct):
            assert got.strides == want.strides, backend
            np.testing.assert_array_equal(got, want)


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's malloc settings")
@pytest.mark.parametrize("keep", ["1", "0"])
def test_freed_memory_is_kept_for_the_next_step(keep):
    # in a fresh process (the setting is process-wide): a "step" allocates ten 3 MB
    # activations and frees them; under glibc's defaults (thresholds following a 4 MB buffer
    # freed before) the heap's top goes back to the OS and the next step page-faults it in
    import os
    import platform
    import subprocess
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc only")
    script = textwrap.dedent("""
        import resource, numpy as np
        from ember.backend import NdArray
        NdArray()
        def step():
            acts = [np.ones(3 << 18, np.float32) for _ in range(10)]
            del acts
        a = np.ones(1 << 20, np.float32); del a
        step()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        step()
        print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    """)
    env = {**os.environ, "EMBER_KEEP_HEAP": keep}
    faults = int(subprocess.run([sys.executable, "-c", script], env=env, check=True,
                                capture_output=True, text=True).stdout)
    if keep == "1":
        assert faults < 100
    else:  # the behaviour it prevents (EMBER_KEEP_HEAP=0): ~7500 pages faulted in anew
        assert faults > 1000
