"""The op conformance suite: every primitive of ember.ops.OPS on every backend in BACKENDS,
against independent NumPy/Python references (cases.py), plus hypothesis properties over random
shapes and dtypes for the elementwise kinds and the reductions.

A result must match its reference in values, and its Tensor's shape and dtype (which come from
the op table's rules, never from the data) must match both the reference and the data the
backend actually holds.
"""

import functools
import math
import operator
import types
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ember import ShapeError, Tensor
from ember.backend import NdArray
from ember.ops import OPS

from . import backends
from .cases import (
    BINARY,
    BOOL,
    CASES,
    CATEGORY,
    COMPARE,
    F32,
    F64,
    I32,
    I64,
    UNARY,
    A,
    arg_reference,
    arithmetic_dtype,
    elementwise_reference,
    ember_dtype,
)

backend = backends.backend  # the fixture: every test that takes it runs on each backend
supported = backends.supported  # runs a test's body, or expects the backend to refuse a dtype

CASE_PARAMS = [pytest.param(op, case, id=f"{op}-{case.id}")
               for op, cases in CASES.items() for case in cases]
VALUE_PARAMS = [p for p in CASE_PARAMS if p.values[1].raises is None]


def check_result(got, want, rtol=0.0, atol=0.0):
    """`got` (a Tensor) against the reference array `want`, metadata first; `atol` may be an
    array (one bound per element)."""
    assert isinstance(got, Tensor), f"expected a Tensor, got {type(got).__name__}"
    assert type(got.shape) is tuple and all(type(s) is int for s in got.shape), \
        f"shape {got.shape!r} is not a tuple of ints"
    assert got.shape == want.shape, f"Tensor.shape {got.shape} != reference {want.shape}"
    assert got.dtype == ember_dtype(want), \
        f"Tensor.dtype {got.dtype} != reference {ember_dtype(want)}"
    data = got.to_numpy()
    assert isinstance(data, np.ndarray), f"to_numpy() gave a {type(data).__name__}"
    assert data.shape == got.shape, \
        f"the backend holds shape {data.shape}, the op's shape rule says {got.shape}"
    assert data.dtype.name == got.dtype, \
        f"the backend holds {data.dtype.name}, the op's dtype rule says {got.dtype}"
    if CATEGORY[got.dtype] == 2:
        close = np.isclose(data, want, rtol=rtol, atol=atol, equal_nan=True)
        if not close.all():
            at = tuple(int(i) for i in np.argwhere(~close)[0])
            raise AssertionError(f"{int((~close).sum())} of {close.size} values differ; at "
                                 f"{at}: got {data[at]!r}, reference {want[at]!r}")
    else:
        np.testing.assert_array_equal(data, want)


# ---- every op, every case, every backend ----------------------------------------------------
def test_every_op_has_a_case():
    missing = sorted(set(OPS) - set(CASES))
    unknown = sorted(set(CASES) - set(OPS))
    errors_only = sorted(op for op, cases in CASES.items() if all(c.raises for c in cases))
    assert not (missing or unknown or errors_only), (
        f"ops with no case in tests/ops/cases.py: {missing}; "
        f"cases for ops that do not exist: {unknown}; ops with error cases only: {errors_only}")


@pytest.mark.parametrize(("op", "case"), CASE_PARAMS)
def test_op_matches_reference(op, case, backend):
    values = case.inputs()
    want = case.expected(values) if case.raises is None else None
    with supported(backend, *_dtypes(values, want)):
        args = case.tensors(values, backend)
        if case.raises is not None:
            with pytest.raises(case.raises, match=case.match):
                case.call(*args)
            return
        check_result(case.call(*args), want, *case.tolerance(ember_dtype(want)))


def _dtypes(values, want=None):
    """The dtypes of a case's arrays (and of its expected result)."""
    arrays = [v for v in values if isinstance(v, np.ndarray)]
    return [ember_dtype(a) for a in arrays + ([want] if want is not None else [])]


@pytest.mark.parametrize(("op", "case"), CASE_PARAMS)
def test_op_leaves_its_inputs_unchanged(op, case, backend):
    """The NdArray backend writes results into unshared input buffers: tensors that anyone
    still holds (here: this test) must keep their values, also after an error."""
    values = case.inputs()
    want = case.expected(values) if case.raises is None else None
    if backends.unsupported(backend, *_dtypes(values, want)):
        return  # test_op_matches_reference checks the refusal
    args = case.tensors(values, backend)
    held = [(t, t.to_numpy().copy()) for t in args if isinstance(t, Tensor)]
    try:
        case.call(*args)
    except Exception as e:
        if case.raises is None or not isinstance(e, case.raises):
            raise
    for t, before in held:
        assert t._prim is not None, "the input lost its buffer"
        now = t.to_numpy()
        assert now.shape == before.shape and now.dtype == before.dtype
        np.testing.assert_array_equal(now, before)


class _Recording(NdArray):
    """NdArray that notes the name of every op it runs."""

    def __init__(self):
        super().__init__()
        self.ran = []

    def execute(self, op, *args, **kwargs):
        self.ran.append(op.name)
        return super().execute(op, *args, **kwargs)


@pytest.mark.parametrize(("op", "case"), VALUE_PARAMS)
def test_case_reaches_its_op(op, case):
    """A case must run the op it is filed under (x.reshape(x.shape) would run nothing)."""
    recording = _Recording()
    case.call(*case.tensors(case.inputs(), recording))
    assert op in recording.ran, f"case ran {recording.ran}, never {op}"


SPECIAL_PARAMS = [p for p in VALUE_PARAMS if p.values[1].id.startswith("special")]


@pytest.mark.parametrize(("op", "case"), SPECIAL_PARAMS)
def test_special_values_are_silent(op, case, backend):
    """inf and nan come back as values, without NumPy warnings (as every GPU backend does)."""
    values = case.inputs()
    if backends.unsupported(backend, *_dtypes(values, case.expected(values))):
        return  # test_op_matches_reference checks the refusal
    args = case.tensors(values, backend)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        case.call(*args).to_numpy()


# ---- the seed's custom GELU ------------------------------------------------------------------
SQRT_2 = math.sqrt(2)


def gelu_custom(x):
    x = x * ((x / SQRT_2).erf() + 1)
    return x / 2


def gelu_reference(a):
    a = a.astype(np.float64)
    return a * (np.vectorize(math.erf, otypes=[float])(a / SQRT_2) + 1) / 2


@pytest.mark.parametrize("dtype", [F32, F64])
def test_gelu_custom_matches_erf_gelu(dtype, backend):
    a = np.concatenate([np.linspace(-6, 6, 95), np.random.default_rng(0).normal(0, 3, 64),
                        [0.0, -0.0, 1e-6, -1e-6, 10.0, -10.0]]).astype(dtype).reshape(5, 3, 11)
    with supported(backend, dtype):
        x = Tensor.from_data(a, backend=backend)
        got = gelu_custom(x)
        rtol, atol = (1e-5, 1e-6) if dtype == F32 else (1e-12, 1e-14)
        check_result(got, gelu_reference(a).astype(dtype), rtol, atol)
        np.testing.assert_array_equal(x.to_numpy(), a)  # the caller's x is untouched


# ---- tensors held in every way survive buffer reuse -------------------------------------------
# Each template binds a tensor to one holder, runs an expression on it, and hands the holder's
# tensor back: however a tensor is referred to, an op must not reuse its buffer.
HOLDERS = {
    "local": ("x = make()", "x"),
    "closure": ("x = make()\n    keep = lambda: x", "x"),
    "global": ("global G\n    G = make()", "G"),
    "list": ("h = [make()]", "h[0]"),
    "dict": ("h = {'t': make()}", "h['t']"),
    "tuple": ("h = (make(),)", "h[0]"),
    "attribute": ("h = types.SimpleNamespace(t=make())", "h.t"),
}

EXPRESSIONS = {
    "operator": "{x} + 1",
    "reflected": "1 - {x}",
    "neg": "-{x}",
    "builtin-abs": "abs({x})",
    "method": "{x}.exp()",
    "method-scalar": "{x}.mul(2)",
    "operator-module": "operator.mul({x}, 2)",
    "same-twice": "{x} * {x}",
    "chain": "(({x} / 1.5).erf() + 1) * {x} / 2",
    "sum-builtin": "sum([{x}, {x}, 1])",
    "map": "list(map(Tensor.exp, [{x}]))[0]",
    "reduce": "functools.reduce(operator.add, [{x}, {x}])",
    "cast-then-op": "{x}.cast('float64') + 1",
    "promote": "{x} + Tensor.ones([3], {x}.backend, 'float64')",
    "composite": "{x}.sigmoid().gelu().relu()",
    "mask-fill": "{x}.mask_fill({x} > 0, 0.0)",
    "slice-assign": "{x}.slice_assign(np.s_[0], 5.0)",
    "scatter": "{x}.scatter(0, Tensor.zeros([1], {x}.backend, 'int32'), {x}[0:1])",
    "setitem-on-view": "_setitem_on_view({x})",
}


def _setitem_on_view(t):
    y = t.unsqueeze(0)  # shares t's buffer on NdArray
    y[0, 0] = 7.0  # rebinds y only
    return y


def _compile(holder, expression):
    bind, ref = HOLDERS[holder]
    source = (f"def run(make):\n    {bind}\n    before = {ref}.to_numpy().copy()\n"
              f"    out = {EXPRESSIONS[expression].format(x=ref)}\n"
              f"    return {ref}, before, out\n")
    namespace = dict(np=np, operator=operator, functools=functools, types=types,
                     Tensor=Tensor, _setitem_on_view=_setitem_on_view)
    exec(compile(source, f"<{holder}/{expression}>", "exec"), namespace)
    return namespace["run"]


@pytest.mark.parametrize("expression", EXPRESSIONS)
@pytest.mark.parametrize("holder", HOLDERS)
def test_held_tensors_survive_buffer_reuse(holder, expression, backend):
    data = np.array([-1.5, 0.25, 2.0], dtype=np.float32)
    run = _compile(holder, expression)
    if backends.unsupported(backend, F64) and "float64" in EXPRESSIONS[expression]:
        with supported(backend, F64):
            run(lambda: Tensor.from_data(data, backend=backend))
        return
    t, before, out = run(lambda: Tensor.from_data(data, backend=backend))
    np.testing.assert_array_equal(before, data)
    assert t._prim is not None, "the held tensor lost its buffer"
    np.testing.assert_array_equal(t.to_numpy(), data)
    assert isinstance(out, Tensor)


# ---- results computed in a reused buffer equal results computed in a fresh one ---------------
# `fresh(t)` is a temporary that only the expression refers to: NdArray may write the result
# into its buffer (the op's `out=` path). The same expression on named tensors cannot reuse
# anything; both must agree in values, shape and dtype, and in what the backend holds.
DONATIONS = {
    "unary": "fresh(x).exp()",
    "erf": "fresh(x).erf()",
    "erf-0d": "fresh(s).erf()",
    "neg-int": "-fresh(i)",
    "binary-left": "fresh(x) - y",
    "binary-right": "x / fresh(y)",
    "both": "fresh(x) * fresh(y)",
    "scalar": "fresh(x) ** 2",
    "reflected-scalar": "2 - fresh(x)",
    "broadcast-into-left": "fresh(x) + row",
    "broadcast-from-smaller": "fresh(row) + x",
    "0d": "fresh(s) + 1",
    "compare": "fresh(x) > y",
    "int": "fresh(i) * i",
    "chain": "((fresh(x) / 1.5).erf() + 1) * x / 2",
    "slice-assign": "fresh(x).slice_assign(np.s_[1:], y[1:])",
    "slice-assign-scalar": "fresh(i).slice_assign(np.s_[:, ::-2], 7)",
    "scatter": "fresh(x).scatter(0, idx, y[:2])",
    "scatter-int": "fresh(i).scatter(0, idx, i[:2])",
    "mask-where": "fresh(x).mask_where(m, y)",
    "mask-where-scalar": "fresh(x).mask_where(m, 0.5)",
    "mask-where-bcast": "fresh(x).mask_where(m[0], row)",
    "mask-where-int": "fresh(i).mask_where(m, -3)",
}


def _donation_inputs(backend):
    rng = np.random.default_rng(1)
    arrays = dict(x=A((3, 4)).make(rng), y=A((3, 4)).make(rng), row=A((4,)).make(rng),
                  s=A(()).make(rng), i=A((3, 4), I32).make(rng), m=A((3, 4), BOOL).make(rng),
                  idx=A((2, 4), I32, 0, 2).make(rng))
    return arrays, {k: Tensor.from_data(v, backend=backend) for k, v in arrays.items()}


@pytest.mark.parametrize("expression", DONATIONS)
def test_reused_buffer_gives_the_same_result(expression, backend):
    code = compile(DONATIONS[expression], f"<{expression}>", "eval")
    arrays, named = _donation_inputs(backend)
    want = eval(code, {"np": np, "fresh": lambda t: t}, named)
    fresh = {"np": np, "fresh": lambda t: Tensor.from_data(t, backend=t.backend)}
    got = eval(code, fresh, named)
    assert (got.shape, got.dtype) == (want.shape, want.dtype)
    check_result(got, np.asarray(want.to_numpy()), 1e-6, 1e-7)
    for name, t in named.items():
        np.testing.assert_array_equal(t.to_numpy(), arrays[name], err_msg=name)


# ---- properties: random shapes, dtypes and scalars against NumPy -----------------------------
PROPERTY = settings(max_examples=50, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
DTYPES = (BOOL, I32, I64, F32, F64)
SCALARS = st.sampled_from([True, False, 0, 3, -2, 0.5, -1.5, 2.0])
SHAPES = hnp.array_shapes(min_dims=0, max_dims=5, min_side=0, max_side=5)
PAIRS = hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=5, min_side=0,
                                         max_side=5)
SEEDS = st.integers(0, 2**32 - 1)
TOL = {F32: (1e-5, 1e-6), F64: (1e-12, 1e-14)}


def _operand(rng, kind, shape, lo, hi, whole=False):
    """A NumPy array of dtype `kind`, or the Python scalar `kind` itself."""
    if not isinstance(kind, str):
        return kind
    return A(shape, kind, lo, hi, whole).make(rng)


def _tensor(value, backend):
    return Tensor.from_data(value, backend=backend) if isinstance(value, np.ndarray) else value


def _refused(backend, *arrays):
    """True, once the refusal is checked, where the backend cannot hold an array's dtype."""
    dtypes = [ember_dtype(a) for a in arrays if isinstance(a, np.ndarray)]
    if not backends.unsupported(backend, *dtypes):
        return False
    with supported(backend, *dtypes):
        [_tensor(a, backend) for a in arrays]
    return True


@pytest.mark.parametrize("name", UNARY)
@PROPERTY
@given(shape=SHAPES, dtype=st.sampled_from(DTYPES), seed=SEEDS)
def test_unary_property(name, backend, shape, dtype, seed):
    spec = UNARY[name]
    a = _operand(np.random.default_rng(seed), dtype, shape, spec.lo, spec.hi)
    want_dtype = arithmetic_dtype([dtype], spec.float_only)
    want = elementwise_reference(spec, [a], want_dtype)
    with supported(backend, dtype, want_dtype):
        check_result(spec.call(_tensor(a, backend)), want, *TOL.get(want_dtype, (0, 0)))


@st.composite
def _operand_kinds(draw, scalar_left=True):
    """Dtypes of two tensor operands, or one of them a Python scalar."""
    lhs, rhs = draw(st.sampled_from(DTYPES)), draw(st.sampled_from(DTYPES))
    side = draw(st.sampled_from(["none", "right", "left"] if scalar_left else ["none", "right"]))
    if side == "right":
        rhs = draw(SCALARS)
    elif side == "left":
        lhs = draw(SCALARS)
    return lhs, rhs


@pytest.mark.parametrize("name", BINARY)
@PROPERTY
@given(shapes=PAIRS, data=st.data(), seed=SEEDS)
def test_binary_property(name, backend, shapes, data, seed):
    spec = BINARY[name]
    lhs, rhs = data.draw(_operand_kinds(spec.reflected), label="operands")
    rng = np.random.default_rng(seed)
    a = _operand(rng, lhs, shapes.input_shapes[0], spec.lo, spec.hi)
    b = _operand(rng, rhs, shapes.input_shapes[1], *spec.rhs)
    want_dtype = arithmetic_dtype([lhs, rhs], spec.float_only)
    want = elementwise_reference(spec, [a, b], want_dtype)
    with supported(backend, lhs, rhs, want_dtype):
        got = spec.call(_tensor(a, backend), _tensor(b, backend))
        check_result(got, want, *TOL.get(want_dtype, (0, 0)))


@pytest.mark.parametrize("name", COMPARE)
@PROPERTY
@given(shapes=PAIRS, operands=_operand_kinds(), seed=SEEDS)
def test_compare_property(name, backend, shapes, operands, seed):
    fn, ref, _ = COMPARE[name]
    lhs, rhs = operands
    rng = np.random.default_rng(seed)
    a = _operand(rng, lhs, shapes.input_shapes[0], -2, 2, whole=True)
    b = _operand(rng, rhs, shapes.input_shapes[1], -2, 2, whole=True)
    with supported(backend, lhs, rhs):
        check_result(fn(_tensor(a, backend), _tensor(b, backend)), np.asarray(ref(a, b)))


@st.composite
def _reduce_dims(draw):
    """A shape and the dims to reduce: None (everything) or distinct dims, some negative."""
    shape = draw(SHAPES)
    if not shape or draw(st.booleans()):
        return shape, None
    dims = draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, unique=True))
    return shape, tuple(d - len(shape) if draw(st.booleans()) else d for d in dims)


@pytest.mark.parametrize("name", ["sum", "max", "min"])
@PROPERTY
@given(shape_dims=_reduce_dims(), dtype=st.sampled_from(DTYPES), seed=SEEDS)
def test_reduce_property(name, backend, shape_dims, dtype, seed):
    shape, dims = shape_dims
    a = _operand(np.random.default_rng(seed), dtype, shape, -1, 1)
    if _refused(backend, a):
        return
    x = Tensor.from_data(a, backend=backend)
    call = (lambda: getattr(x, name)()) if dims is None else (
        lambda: getattr(x, f"{name}_dim")(dims))
    reduced = range(len(shape)) if dims is None else dims
    if name != "sum" and any(shape[d] == 0 for d in reduced):
        with pytest.raises(ShapeError, match=name):
            call()
        return
    want_dtype = arithmetic_dtype([dtype]) if name == "sum" else dtype
    wide = a.astype(np.float64 if CATEGORY[want_dtype] == 2 else np.int64)
    fn = {"sum": np.sum, "max": np.max, "min": np.min}[name]
    want = fn(wide, axis=dims, keepdims=dims is not None).astype(want_dtype)
    rtol, atol = TOL.get(want_dtype, (0, 0))
    if name == "sum" and CATEGORY[want_dtype] == 2:
        # partial sums round at their own size: allow n roundings of the sum of |x|
        n = math.prod(shape[d] for d in reduced)
        atol = atol + n * np.finfo(want_dtype).eps * np.sum(
            np.abs(wide), axis=dims, keepdims=dims is not None)
    check_result(call(), want, rtol, atol)


def test_sum_of_everything_is_one_op(backend, monkeypatch):
    """x.sum() is sum alone with keepdim=False (not a sum and a reshape: a tiny sum's time is
    mostly the calls per op), and every stack gives it shape ()."""
    import ember.tensor
    x = Tensor.from_data(np.arange(12, dtype=np.float32).reshape(3, 4), backend=backend)
    ran, execute = [], ember.tensor._execute

    def spy(backend, op, prims, attrs, shape, dtype):  # every op the Tensor layer runs
        ran.append((op, attrs))
        return execute(backend, op, prims, attrs, shape, dtype)

    monkeypatch.setattr(ember.tensor, "_execute", spy)
    y = x.sum()
    assert ran == [(OPS["sum"], {"dims": (0, 1), "keepdim": False})]
    assert y.shape == () and y.to_numpy().shape == () and float(y.to_numpy()) == 66.0


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@PROPERTY
@given(shape=hnp.array_shapes(min_dims=1, max_dims=5, min_side=0, max_side=5),
       dtype=st.sampled_from(DTYPES), data=st.data(), seed=SEEDS)
def test_arg_reduce_property(name, backend, shape, dtype, data, seed):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1), label="dim")
    a = _operand(np.random.default_rng(seed), dtype, shape, -2, 2, whole=True)
    if _refused(backend, a):
        return
    x = Tensor.from_data(a, backend=backend)
    if shape[dim] == 0:
        with pytest.raises(ShapeError, match=name):
            getattr(x, name)(dim)
        return
    want = arg_reference(max if name == "argmax" else min)(a, dim % len(shape))
    check_result(getattr(x, name)(dim), want.astype(I32))


@st.composite
def _indexed(draw, allow_newaxis=True):
    """A shape and a NumPy basic index into it: ints, slices (any bounds and steps), ..."""
    shape = draw(SHAPES)
    key = draw(hnp.basic_indices(shape, allow_newaxis=allow_newaxis, allow_ellipsis=True))
    return shape, key


@PROPERTY
@given(shape_key=_indexed(), dtype=st.sampled_from(DTYPES), seed=SEEDS)
def test_slice_property(backend, shape_key, dtype, seed):
    shape, key = shape_key
    a = _operand(np.random.default_rng(seed), dtype, shape, -3, 3)
    if _refused(backend, a):
        return
    check_result(Tensor.from_data(a, backend=backend)[key], np.asarray(a[key]))


@PROPERTY
@given(shape_key=_indexed(), dtype=st.sampled_from(DTYPES), scalar=st.booleans(),
       seed=SEEDS)
def test_slice_assign_property(backend, shape_key, dtype, scalar, seed):
    shape, key = shape_key
    rng = np.random.default_rng(seed)
    a = _operand(rng, dtype, shape, -3, 3)
    if _refused(backend, a):
        return
    region = np.shape(a[key])
    value = (True if dtype == BOOL else 2) if scalar else _operand(rng, dtype, region, -3, 3)
    want = a.copy()
    want[key] = value
    got = Tensor.from_data(a, backend=backend).slice_assign(key, _tensor(value, backend))
    check_result(got, want)


def test_every_elementwise_and_reduce_op_has_a_property():
    """New unary/binary/compare/reduce primitives must join the property tests' tables."""
    kinds = {"unary": set(UNARY) | {"cast"}, "binary": set(BINARY), "compare": set(COMPARE),
             "reduce": {"sum", "max", "min", "argmax", "argmin"}}
    for kind, covered in kinds.items():
        declared = {name for name, op in OPS.items() if op.kind == kind}
        assert declared == covered, (
            f"{kind} ops without a property: {sorted(declared - covered)}; "
            f"in the tables but not in OPS: {sorted(covered - declared)}")


def test_python_ints_never_narrow_int64(backend):
    """A weak Python int keeps int64 values that int32 cannot hold."""
    a = np.array([2**40, -(2**41)], dtype=np.int64)
    if _refused(backend, a):
        return
    x = Tensor.from_data(a, backend=backend)
    check_result(x + 1, np.array([2**40 + 1, -(2**41) + 1], dtype=np.int64))
    check_result(x * 2, np.array([2**41, -(2**42)], dtype=np.int64))
    check_result(x > 2**40, np.array([False, False]))
