"""ember.fusion: chains of elementwise ops run as one kernel, counted with ember.fusion.trace()
in the tinygrad style (each graph with its expected kernel count), with results equal to the
unfused backend's. The whole op suite also runs on the fused stacks (tests/ops/backends.py)."""

import importlib.util
import math

import numpy as np
import pytest

import ember
from ember import DTypeError, Tensor
from ember.backend import Autodiff, Fusion, NdArray
from ember.fusion import Lazy

SQRT_2 = math.sqrt(2)


def gelu_custom(x):
    x = x * ((x / SQRT_2).erf() + 1)
    return x / 2


def _wgpu():
    from ember import BackendError
    from ember.backend import Wgpu
    try:
        return Wgpu()
    except BackendError as e:
        pytest.skip(f"Wgpu: {e}")


INNERS = {"ndarray": NdArray}
if importlib.util.find_spec("wgpu") is not None:
    INNERS["wgpu"] = _wgpu


@pytest.fixture(params=sorted(INNERS))
def inner(request):
    made = INNERS[request.param]()
    made.label = request.param
    return made


def _t(data, backend, dtype=np.float32):
    return Tensor.from_data(np.asarray(data, dtype=dtype), backend=backend)


def _rand(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _counted(fn):
    """(fn's result read back, the names of each kernel launched)."""
    with ember.fusion.trace() as t:
        out = fn()
        values = [o.to_numpy() for o in out] if isinstance(out, tuple) else out.to_numpy()
    return values, [k.ops for k in t.kernels], t


# graph -> (function of the inputs, input shapes, expected kernels on a fused stack: one number,
# or {inner: number} where Wgpu also fuses the chain into the reduction that reads it)
GRAPHS = {
    "one-op": (lambda a: a.exp(), [(4, 5)], 1),
    "chain": (lambda a: ((a * 2 + 1).exp() - 3).abs(), [(4, 5)], 1),
    "gelu_custom": (gelu_custom, [(64, 64)], 1),
    "two-inputs": (lambda a, b: (a * b + a).tanh(), [(3, 4), (3, 4)], 1),
    "broadcast": (lambda a, b: (a + b).exp() * 2, [(3, 1), (1, 4)], 1),
    "broadcast-row": (lambda a, b: (a - b) / (b + 3), [(5, 6), (6,)], 1),
    "scalar-only": (lambda a: a * 0.5 + 0.25, [(7,)], 1),
    "compare-select": (lambda a, b: a.mask_where(a > b, b) * 2, [(4, 4), (4, 4)], 1),
    "relu-chain": (lambda a: (a.relu() * 3).sqrt(), [(8, 8)], 1),
    "cast-in-chain": (lambda a: (a * 10).cast("int32").cast("float32") / 10, [(5,)], 1),
    "int-chain": (lambda a: (a.cast("int32") * 3 + 1).cast("float32"), [(5,)], 1),
    # Wgpu: a reduction and what reads it back in its row run as one row kernel
    "softmax-parts": (lambda a: (a - a.max_dim(1)).exp(), [(4, 6)], {"ndarray": 2, "wgpu": 1}),
    "softmax": (lambda a: a.softmax(1), [(4, 6)], {"ndarray": 4, "wgpu": 1}),
    "reduce-after": (lambda a, b: (a * b).sum_dim(1), [(4, 6), (4, 6)], {"ndarray": 2, "wgpu": 1}),
    "reduce-before": (lambda a: a.sum_dim(1) * 2 + 1, [(4, 6)], 2),
    "max-of-chain": (lambda a: (a * 3).exp().max_dim(0), [(5, 7)], {"ndarray": 2, "wgpu": 1}),
    "argmax-of-chain": (lambda a: (a - 1).abs().argmax(1), [(5, 7)], {"ndarray": 2, "wgpu": 1}),
    "sum-all-of-chain": (lambda a, b: ((a - b) * (a - b)).sum(), [(9, 9), (9, 9)],
                         {"ndarray": 2, "wgpu": 1}),
    "mse": (lambda a, b: ((a - b) * (a - b)).mean(), [(6, 6), (6, 6)],
            {"ndarray": 3, "wgpu": 2}),
    # Wgpu: elementwise work after a matmul runs in its epilogue
    "matmul-epilogue": (lambda a, w, b: (a @ w + b).relu(), [(4, 5), (5, 3), (3,)],
                        {"ndarray": 2, "wgpu": 1}),
    # NdArray: sum, mean's division on its own (a local holds the [4, 1] mean: written, and a
    # [4, 8] kernel cannot write it), the centred x (held too) with its square, sum, the rest;
    # Wgpu: one row kernel (two passes over each row for the sums, one that writes)
    "layer-norm": (lambda a: _layer_norm(a), [(4, 8)], {"ndarray": 5, "wgpu": 1}),
    "nine-inputs": (lambda *xs: _sum_all(xs).exp(), [(3,)] * 9, 2),  # over 8 buffers: split
    "permuted": (lambda a: (a.permute(1, 0) * 2).exp(), [(3, 5)], 1),
    "sliced": (lambda a: (a[1:, ::2] + 1).sin(), [(4, 6)], 1),
    "expanded": (lambda a: (a.expand(3, 4) * 2) + 1, [(1, 4)], 1),
    # matmul epilogues: any elementwise chain whose other inputs broadcast to the product
    "matmul-alone": (lambda a, w: a @ w, [(4, 5), (5, 3)], 1),
    "matmul-gelu": (lambda a, w, b: gelu_custom(a @ w + b), [(6, 8), (8, 12), (12,)],
                    {"ndarray": 2, "wgpu": 1}),
    "matmul-residual": (lambda a, w, c: ((a @ w) + c) * 0.5, [(5, 4), (4, 6), (5, 6)],
                        {"ndarray": 2, "wgpu": 1}),
    "matmul-batched": (lambda a, w, b: (a @ w - b).tanh(), [(2, 3, 4), (4, 5), (2, 1, 5)],
                       {"ndarray": 2, "wgpu": 1}),
    "matmul-chain": (lambda a, w, v: (a @ w).relu() @ v + 1, [(4, 5), (5, 6), (6, 3)],
                     {"ndarray": 4, "wgpu": 2}),
    "two-matmuls-added": (lambda a, w, v: (a @ w) + (a @ v), [(4, 5), (5, 3), (5, 3)],
                          {"ndarray": 3, "wgpu": 2}),  # one epilogue holds one product
    "matmul-sum": (lambda a, w: (a @ w + 1).sum_dim(1), [(4, 5), (5, 3)],
                   {"ndarray": 3, "wgpu": 2}),  # the epilogue writes, the sum reads
    # row kernels: softmax, log_softmax, layer_norm, cross-entropy
    "softmax-dim0": (lambda a: a.softmax(0), [(6, 4)], {"ndarray": 4, "wgpu": 1}),
    "softmax-3d-middle": (lambda a: a.softmax(1), [(3, 5, 4)], {"ndarray": 4, "wgpu": 1}),
    "softmax-long-rows": (lambda a: a.softmax(-1), [(3, 700)], {"ndarray": 4, "wgpu": 1}),
    "log-softmax": (lambda a: a.log_softmax(1), [(5, 7)], {"ndarray": 4, "wgpu": 1}),
    "layer-norm-affine": (lambda a, w, b: _layer_norm(a * 1.5) * w + b, [(4, 300), (300,), (300,)],
                          {"ndarray": 6, "wgpu": 1}),
    "norm-two-dims": (lambda a: _layer_norm(a, (1, 2)), [(2, 3, 5)], {"ndarray": 5, "wgpu": 1}),
    "cross-entropy": (lambda a: _cross_entropy(a), [(6, 10)], {"ndarray": 13, "wgpu": 6}),
    "sum-then-broadcast": (lambda a: a / a.sum_dim(0), [(5, 3)], {"ndarray": 2, "wgpu": 1}),
    # a leaf and nodes constant along each row: read and computed once a row
    "row-constants": (lambda a, m: (a - m.exp()) * (a.sum_dim(1).abs() + m.exp()).sqrt(),
                      [(4, 6), (4, 1)],
                      {"ndarray": 2, "wgpu": 1}),
    "mean-all": (lambda a: (a * a).mean(), [(7, 7)], {"ndarray": 3, "wgpu": 2}),
    "sixteen-inputs": (lambda *xs: _sum_all(xs) * 2, [(4,)] * 16, 3),  # 7 leaves a kernel
}

# multiple outputs (a tuple): one kernel writes every result the caller reads
MULTI_OUTPUT_GRAPHS = {
    "two-outputs": (lambda a: _two_outputs(a), [(4, 4)], 1),
    "exp-and-max": (lambda a: _exp_and_max(a), [(3, 9)],
                    {"ndarray": 2, "wgpu": 1}),  # a row output written once a row
}


def _exp_and_max(a):
    m = a.max_dim(1)
    return (a - m).exp(), m


def _two_outputs(a):
    h = (a * 2).exp()
    return (h + 1).log(), h  # (read first, the last result writes h too)


def _sum_all(xs):
    out = xs[0]
    for x in xs[1:]:
        out = out + x
    return out


def _layer_norm(a, dims=1):
    mean = a.mean_dim(dims)
    xc = a - mean
    var = (xc * xc).mean_dim(dims)
    return xc / (var + 1e-5).sqrt()


def _cross_entropy(logits):
    from ember import nn
    target = Tensor.from_data(np.arange(logits.shape[0], dtype=np.int32) % logits.shape[1],
                              backend=logits.backend)
    return nn.CrossEntropyLoss()(logits, target)


@pytest.mark.parametrize("name", sorted(GRAPHS) + sorted(MULTI_OUTPUT_GRAPHS))
def test_kernel_counts_and_results(inner, name):
    fn, shapes, expected = GRAPHS.get(name) or MULTI_OUTPUT_GRAPHS[name]
    arrays = [_rand(s, seed) for seed, s in enumerate(shapes)]
    want = fn(*(_t(a, NdArray()) for a in arrays))
    want = [w.to_numpy() for w in want] if isinstance(want, tuple) else want.to_numpy()
    B = Fusion(inner)
    tensors = [_t(a, B) for a in arrays]
    got, kernels, _ = _counted(lambda: fn(*tensors))
    for g, w in zip(*((x if isinstance(x, list) else [x]) for x in (got, want))):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    _expect(kernels, expected, inner)


def _expect(kernels, expected, inner):
    if isinstance(expected, dict):
        expected = expected[inner.label]
    assert len(kernels) == expected, kernels


# forward and backward on Autodiff(Fusion(inner)): graph -> (loss of the inputs, input shapes,
# kernels of the forward and the gradients of every input, {inner: number})
GRAD_GRAPHS = {
    # the forward chain inside its sum (on NdArray: then the sum), the seed (ones), the whole
    # backward chain
    "gelu_custom": (lambda a: gelu_custom(a).sum(), [(16, 16)], {"ndarray": 4, "wgpu": 3}),
    "softmax": (lambda a, c: (a.softmax(1) * c).sum(), [(4, 9), (4, 9)],
                {"ndarray": 10, "wgpu": 6}),
    # Wgpu: each layer_norm one row kernel that also writes what the backward keeps
    "layer-norm": (lambda a: (_layer_norm(a) * _layer_norm(a)).sum(), [(4, 12)],
                   {"ndarray": 29, "wgpu": 18}),
    # Wgpu: the forward in the matmul's epilogue (writing relu's input, kept for the backward)
    "linear-relu": (lambda a, w, b: (a @ w + b).relu().sum(), [(6, 5), (5, 4), (4,)],
                    {"ndarray": 8, "wgpu": 7}),
    # Wgpu: its backward's chains bind more than 7 buffers (8 per stage in browsers, one of
    # them the info words), so one is cut in two
    "cross-entropy": (lambda a: _cross_entropy(a), [(6, 10)], {"ndarray": 19, "wgpu": 14}),
}


@pytest.mark.parametrize("name", sorted(GRAD_GRAPHS))
def test_kernel_counts_and_gradients(inner, name):
    fn, shapes, expected = GRAD_GRAPHS[name]
    arrays = [_rand(s, seed) for seed, s in enumerate(shapes)]
    ref = [_t(a, Autodiff(NdArray())).require_grad() for a in arrays]
    grads = fn(*ref).backward()
    want = [x.grad(grads).to_numpy() for x in ref]
    B = Autodiff(Fusion(inner))
    xs = [_t(a, B).require_grad() for a in arrays]
    with ember.fusion.trace() as t:
        grads = fn(*xs).backward()
        got = [x.grad(grads).to_numpy() for x in xs]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    _expect([k.ops for k in t.kernels], expected, inner)


@pytest.mark.parametrize("name", ["chain", "gelu_custom", "broadcast"])
def test_unfused_backends_launch_a_kernel_per_op(name):
    fn, shapes, _ = GRAPHS[name]
    tensors = [_t(_rand(s, i), NdArray()) for i, s in enumerate(shapes)]
    _, kernels, _ = _counted(lambda: fn(*tensors))
    assert all(len(k) == 1 for k in kernels) and len(kernels) >= 3, kernels


def test_gelu_custom_is_one_kernel_and_its_gradient_one_more(inner):
    x = _t(_rand((32, 32)), Autodiff(Fusion(inner))).require_grad()
    (y,), kernels, _ = _counted(lambda: (gelu_custom(x),))
    assert kernels == [("div", "erf", "add", "mul", "div")]
    with ember.fusion.trace() as t:
        g = x.grad(gelu_custom(x).sum().backward()).to_numpy()
    chains = [k.ops for k in t.kernels if len(k.ops) > 1]
    # the forward chain (on Wgpu inside the sum) and the whole backward chain; besides them
    # only the backward's seed (ones), and on NdArray the sum
    assert len(chains) == 2 and len(t.kernels) == {"ndarray": 4, "wgpu": 3}[inner.label], \
        t.kernels
    ref = _t(x.to_numpy(), Autodiff(NdArray())).require_grad()
    want = ref.grad(gelu_custom(ref).sum().backward()).to_numpy()
    np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)


def test_an_intermediate_still_held_is_written_once_by_the_same_kernel(inner):
    B = Fusion(inner)
    a = _t(_rand((4, 4)), B)
    h = (a * 2).exp()             # held by a name: the chain writes it too
    z = (h + 1).log()
    with ember.fusion.trace() as t:
        z_np = z.to_numpy()
    assert [k.ops for k in t.kernels] == [("mul", "exp", "add", "log")]
    assert type(h._prim) is Lazy and h._prim.node is None  # realized by that kernel
    with ember.fusion.trace() as t:
        h_np = h.to_numpy()
    assert t.kernels == []
    ref = np.exp(a.to_numpy() * 2)
    np.testing.assert_allclose(h_np, ref, rtol=1e-5)
    np.testing.assert_allclose(z_np, np.log(ref + 1), rtol=1e-5)


def test_intermediates_nobody_holds_are_not_kept(inner):
    B = Fusion(inner)
    a = _t(_rand((4, 4)), B)
    z = (((a * 2).exp() + 1) * 3).to_numpy()
    assert z.shape == (4, 4)


def test_an_intermediate_of_another_shape_is_its_own_kernel(inner):
    B = Fusion(inner)
    row, col = _t(_rand((1, 5)), B), _t(_rand((3, 1), 1), B)
    h = row * 2                   # [1, 5], held: it cannot be written by a [3, 5] kernel
    z = (h + col).exp()
    got, kernels, _ = _counted(lambda: z)
    assert kernels == [("mul",), ("add", "exp")]
    np.testing.assert_allclose(got, np.exp(row.to_numpy() * 2 + col.to_numpy()), rtol=1e-5)


def test_scalars_are_operands_not_part_of_the_kernel():
    B = Fusion(_wgpu())
    x = _t(_rand((16,)), B)
    with ember.fusion.trace() as t:
        for s in np.linspace(-2, 2, 100):
            (x * float(s) + 1).exp().to_numpy()
    assert len(t.kernels) == 100 and t.compiled <= 1, t  # one pipeline for 100 scalars


def test_one_pipeline_per_chain_not_per_shape():
    B = Fusion(_wgpu())
    with ember.fusion.trace() as t:
        for n in (3, 17, 256, 1000):
            gelu_custom(_t(_rand((n,)), B)).to_numpy()
    assert t.compiled <= 2, t  # (the flat and the strided entry at most)


def test_long_chains_are_cut_at_max_ops(inner):
    B = Fusion(inner, max_ops=4)
    x = _t(_rand((6,)), B)

    def chain():
        y = x
        for _ in range(10):
            y = y * 1.01 + 0.1
        return y
    got, kernels, _ = _counted(chain)
    assert kernels == [("mul", "add", "mul", "add")] * 5
    want = x.to_numpy()
    for _ in range(10):
        want = want * np.float32(1.01) + np.float32(0.1)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_a_dtype_inner_cannot_hold_is_refused_at_once():
    B = Fusion(_wgpu())
    x = _t(_rand((3,)), B)
    with pytest.raises(DTypeError, match="float64"):
        x.cast("float64")


def test_non_elementwise_ops_run_eagerly_through_inner(inner):
    B = Fusion(inner)
    a, w = _t(_rand((4, 5)), B), _t(_rand((5, 3), 1), B)
    y = (a * 2) @ w  # the chain realized as matmul's input, matmul through inner.execute
    np.testing.assert_allclose(y.to_numpy(), (a.to_numpy() * 2) @ w.to_numpy(), rtol=1e-5,
                               atol=1e-5)


def test_fusion_names_its_stack_and_composes():
    assert str(Fusion(NdArray())) == "Fusion<NdArray<cpu>>"
    assert str(Autodiff(Fusion(NdArray()))) == "Autodiff<Fusion<NdArray<cpu>>>"
    assert ember.backend.from_name("autodiff(fusion(ndarray))") == Autodiff(Fusion(NdArray()))
    with pytest.raises(TypeError, match="expected a backend"):
        Fusion("wgpu")
    with pytest.raises(TypeError, match="fused already"):
        Fusion(Fusion(NdArray()))


def test_jit_captures_and_replays_a_fused_stack(inner):
    B = Fusion(inner)
    fast = ember.jit(gelu_custom)
    for seed in range(4):
        x = _t(_rand((8, 8), seed), B)
        np.testing.assert_allclose(fast(x).to_numpy(), gelu_custom(
            _t(x.to_numpy(), NdArray())).to_numpy(), rtol=1e-5, atol=1e-6)


def test_training_a_model_on_autodiff_fusion_matches_unfused():
    from ember import nn, optim
    losses = {}
    for name, B in (("plain", Autodiff(NdArray())), ("fused", Autodiff(Fusion(NdArray())))):
        ember.seed(3)
        model = nn.Sequential(nn.Linear(6, 8, backend=B), nn.Gelu(), nn.Linear(8, 3, backend=B))
        opt = optim.Adam(lr=1e-2)
        x = _t(_rand((16, 6), 5), B)
        y = Tensor.from_data(np.arange(16) % 3, backend=B)
        run = []
        for _ in range(5):
            loss = nn.CrossEntropyLoss()(model(x), y)
            run.append(loss.item())
            model = opt.step(model, optim.GradientsParams.from_grads(loss.backward(), model))
        losses[name] = run
    np.testing.assert_allclose(losses["fused"], losses["plain"], rtol=1e-5)


def test_an_mnist_training_step_runs_in_fewer_kernels_with_the_same_losses(inner):
    from ember import models, nn, optim
    rng = np.random.default_rng(0)
    x, y = rng.random((8, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, 8)
    runs = {}
    for name, B in (("plain", Autodiff(INNERS[inner.label]())), ("fused", Autodiff(Fusion(inner)))):
        ember.seed(0)
        model, opt = models.ConvNet(backend=B), optim.Adam(lr=1e-3)
        losses = []
        for _ in range(3):
            with ember.fusion.trace() as t:
                loss = nn.CrossEntropyLoss()(model(_t(x, B)), Tensor.from_data(
                    y.astype(np.int32), backend=B))
                model = opt.step(model, optim.GradientsParams.from_grads(loss.backward(), model))
                losses.append(loss.item())
                B.sync()
        runs[name] = (losses, len(t.kernels))
    (plain_losses, plain_kernels), (fused_losses, fused_kernels) = runs["plain"], runs["fused"]
    np.testing.assert_allclose(fused_losses, plain_losses, rtol=1e-5)
    # measured: 152 kernels a step op by op, 90 (NdArray) and 85 (Wgpu) fused
    assert fused_kernels <= 0.65 * plain_kernels, (fused_kernels, plain_kernels)


# ---- Wgpu: matmul epilogues, for each matmul kernel ember.autotune picks from ----------------
@pytest.mark.parametrize("kernel", ["scalar", "vec4", "tiled"])
@pytest.mark.parametrize("case", ["edges", "batched", "held", "mask"])
def test_matmul_epilogues_on_every_matmul_kernel(monkeypatch, kernel, case):
    monkeypatch.setenv("EMBER_WGPU_MATMUL", kernel)
    B = Fusion(_wgpu())
    rng = np.random.default_rng(1)

    def both(*shapes):
        arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        return [_t(a, B) for a in arrays], [_t(a, NdArray()) for a in arrays]

    if case == "edges":  # partial tiles of every kernel (64 and 128 rows), K a multiple of 4
        (x, w, b), ref = both((130, 36), (36, 68), (68,))
        fn = lambda x, w, b: gelu_custom(x @ w + b)  # noqa: E731
    elif case == "batched":  # batch dims broadcast on both sides and in the bias
        (x, w, b), ref = both((2, 3, 8, 12), (3, 12, 20), (2, 1, 1, 20))
        fn = lambda x, w, b: (x @ w) * b - 1  # noqa: E731
    elif case == "held":  # the product and its sum with the bias read later: three outputs
        (x, w, b), ref = both((16, 8), (8, 12), (12,))

        def fn(x, w, b):
            h = x @ w
            z = h + b
            return z.relu(), z, h  # (read first, the last result writes the others too)
    else:  # a bool leaf (mask_where) and a comparison in the chain
        (x, w, b), ref = both((12, 8), (8, 16), (16,))
        fn = lambda x, w, b: (x @ w).mask_where(b > 0, 0.0) * 3  # noqa: E731
    got, kernels, _ = _counted(lambda: fn(x, w, b))
    want = fn(*ref)
    got, want = ([v] if not isinstance(v, (list, tuple)) else v for v in (got, want))
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r.to_numpy(), rtol=1e-4, atol=1e-4)
    assert len(kernels) == 1, kernels


def test_the_epilogue_falls_back_where_the_product_cannot_take_it():
    B = Fusion(_wgpu())
    x, w = _t(_rand((4, 0)), B), _t(_rand((0, 3), 1), B)  # K = 0: a fill, no product kernel
    np.testing.assert_allclose(((x @ w) + 1).to_numpy(), np.ones((4, 3), np.float32))
    xi = _t(np.arange(12).reshape(3, 4), B, np.int32)  # int32 products take epilogues too
    got, kernels, _ = _counted(lambda: (xi @ xi.permute(1, 0) + 1) * 2)
    ref = np.arange(12).reshape(3, 4)
    np.testing.assert_array_equal(got, (ref @ ref.T + 1) * 2)
    assert len(kernels) == 1, kernels


def test_a_few_tiles_over_a_long_k_leave_the_epilogue_to_its_own_kernel(monkeypatch):
    """On a GPU, a product of a handful of output tiles over k >= 1024 runs plain (its
    candidates split k) and the rest of the chain as one elementwise kernel; with a shorter k,
    or more tiles, the chain stays in the product's epilogue."""
    monkeypatch.setenv("EMBER_WGPU_MATMUL", "tiled")
    B = Fusion(_wgpu())
    monkeypatch.setattr(B.inner.device.bridge, "is_cpu", False)
    for k, want in ((1024, [("matmul",), ("add", "relu")]), (1020, [("matmul", "add", "relu")])):
        x, w, b = _rand((8, k)), _rand((k, 16), 1), _rand((16,), 2)
        tx, tw, tb = _t(x, B), _t(w, B), _t(b, B)
        got, kernels, _ = _counted(lambda tx=tx, tw=tw, tb=tb: (tx @ tw + tb).relu())
        np.testing.assert_allclose(got, np.maximum(x @ w + b, 0), rtol=1e-4, atol=1e-3)
        assert kernels == want, (k, kernels)


# ---- Wgpu: row kernels --------------------------------------------------------------------------
def test_row_kernels_keep_nan_and_int_sums_and_write_held_statistics():
    B = Fusion(_wgpu())
    a = _rand((5, 300))
    a[2, 7] = np.nan
    x = _t(a, B)
    got, kernels, _ = _counted(lambda: x - x.max_dim(1))
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(got, a - a.max(1, keepdims=True), rtol=1e-6)
    assert np.isnan(got[2]).all() and len(kernels) == 1
    n = _t(np.arange(24).reshape(4, 6) - 7, B, np.int32)
    got, kernels, _ = _counted(lambda: n * 2 - n.sum_dim(1))
    ref = np.arange(24).reshape(4, 6) - 7
    np.testing.assert_array_equal(got, ref * 2 - ref.sum(1, keepdims=True))
    assert len(kernels) == 1
    m = x.mean_dim(1)  # held by a name: the row kernel writes it too, once a row
    y = x - m
    got, kernels, _ = _counted(lambda: y)
    assert len(kernels) == 1 and type(m._prim) is Lazy and m._prim.node is None
    np.testing.assert_allclose(m.to_numpy(), a.mean(1, keepdims=True), rtol=1e-5)


@pytest.mark.parametrize("shape, vec", [
    ((3, 4096), True),     # 256 invocations a row, 4 vec4s each
    ((128, 8192), True),   # 8 vec4s each (fewer rows this long: chunked reductions on a GPU)
    ((300, 64), True),     # 64 rows a workgroup, the last workgroup part empty
    ((37, 12), True),      # 3 vec4s a row: one invocation a row, 256 rows a workgroup
    ((128, 8200), True),   # more than the registers hold: a loop over the row's vec4s
    ((5, 30), False),      # not a multiple of 4: the scalar row kernel
])
@pytest.mark.parametrize("held", [8, 0])  # vec4s an invocation holds at most (0: loops)
def test_vec4_row_kernels_over_row_lengths_and_their_fallbacks(monkeypatch, shape, vec, held):
    from ember.backends.wgpu import runners
    monkeypatch.setattr(runners, "ROW_QUADS", held)
    chosen = []
    original = runners._rows4
    monkeypatch.setattr(runners, "_rows4", lambda *a: chosen.append(original(*a)) or chosen[-1])
    B = Fusion(_wgpu())
    a, w, b = _rand(shape), _rand(shape[-1:], 1), _rand(shape[-1:], 2)
    x, xw, xb = _t(a, B), _t(w, B), _t(b, B)
    mean = a.mean(1, keepdims=True)
    norm = (a - mean) / np.sqrt(((a - mean) ** 2).mean(1, keepdims=True) + 1e-5)
    e = np.exp(a - a.max(1, keepdims=True))
    got, kernels, _ = _counted(lambda: _layer_norm(x) * xw + xb)
    np.testing.assert_allclose(got, norm * w + b, rtol=1e-4, atol=1e-4)
    got, _, _ = _counted(lambda: x.softmax(1))
    np.testing.assert_allclose(got, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    got, _, _ = _counted(lambda: x.log_softmax(1))
    np.testing.assert_allclose(got, np.log(e / e.sum(1, keepdims=True)), rtol=1e-4, atol=1e-4)
    got, _, _ = _counted(lambda: _exp_and_max(x))  # a row output, written once a row
    np.testing.assert_allclose(got[1], a.max(1, keepdims=True), rtol=1e-6)
    n = np.arange(a.size).reshape(shape) % 7 - 3
    xn = _t(n, B, np.int32)
    got, _, _ = _counted(lambda: (xn * 2 - xn.sum_dim(1)).mask_where(xn > 0, 5))
    np.testing.assert_array_equal(got, np.where(n > 0, 5, n * 2 - n.sum(1, keepdims=True)))
    assert {c[0] is not None for c in chosen} == {vec} and len(kernels) == 1
    if vec:  # a view that starts off the 16-byte grid takes the scalar kernel
        chosen.clear()
        got, _, _ = _counted(lambda: x[:, 1:-3].softmax(1))
        e = np.exp(a[:, 1:-3] - a[:, 1:-3].max(1, keepdims=True))
        np.testing.assert_allclose(got, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
        assert [c[0] for c in chosen] == [None]


def test_gradients_through_vec4_row_kernels_match_unfused(monkeypatch):
    from ember.backends.wgpu import runners
    chosen = []
    original = runners._rows4
    monkeypatch.setattr(runners, "_rows4", lambda *a: chosen.append(original(*a)) or chosen[-1])

    def fn(a, w, b, c):  # layer_norm with weight and bias, softmax, log_softmax: 4 rows a group
        h = _layer_norm(a) * w + b
        return ((h.softmax(1) + h.log_softmax(1)) * c).sum()
    arrays = [_rand(s, seed) for seed, s in enumerate([(40, 256), (256,), (256,), (40, 256)])]
    ref = [_t(a, Autodiff(NdArray())).require_grad() for a in arrays]
    grads = fn(*ref).backward()
    want = [x.grad(grads).to_numpy() for x in ref]
    B = Autodiff(Fusion(_wgpu()))
    xs = [_t(a, B).require_grad() for a in arrays]
    grads = fn(*xs).backward()
    for x, w in zip(xs, want):
        np.testing.assert_allclose(x.grad(grads).to_numpy(), w, rtol=1e-4, atol=1e-4)
    assert chosen and all(c[0] == 4 for c in chosen), chosen


def test_a_jit_replay_on_fused_wgpu_submits_the_fused_kernels_once():
    # Fusion.compile: inner (Wgpu) records the fused kernels of one run; each replay submits
    # that recording: gelu_custom, LayerNorm (weight and bias) and softmax a dispatch each
    if "wgpu" not in INNERS:
        pytest.skip("no wgpu")
    inner = _wgpu()
    fused = Fusion(inner)

    norm = ember.nn.LayerNorm(64, backend=fused)

    def f(x):
        return gelu_custom(x), norm(x), x.softmax(1)

    fast = ember.jit(f)
    for k in range(3):
        x = _t(_rand((32, 64), k), fused)
        want = [o.to_numpy() for o in f(x)]
        before = inner.stats()
        got = fast(x)
        after = inner.stats()
        for g, e in zip(got, want):
            np.testing.assert_allclose(g.to_numpy(), e, rtol=1e-5, atol=1e-5)
    assert after["submits"] - before["submits"] == 1
    assert after["dispatches"] - before["dispatches"] <= 3
