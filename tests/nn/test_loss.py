"""Every loss against PyTorch's: values for each reduction and gradients of the input."""

import numpy as np
import pytest
import torch

import ember
from ember import DTypeError, ShapeError, Tensor, nn

from .twins import AD, close, compare, randn

REDUCTIONS = ["mean", "sum", "none"]


def _labels(shape, classes, seed=0, dtype=np.int64):
    return np.random.default_rng(seed).integers(0, classes, size=shape).astype(dtype)


def _loss(ours, twin, *inputs, grad_inputs=(0,), **kw):
    return compare(ours, twin, *inputs, grad_inputs=grad_inputs, load=False, **kw)


# ---- cross entropy --------------------------------------------------------------------------
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_cross_entropy_indices(reduction, dtype):
    x, y = randn(6, 5) * 2, _labels(6, 5, dtype=dtype)
    ours, twin = nn.CrossEntropyLoss(reduction=reduction), torch.nn.CrossEntropyLoss(
        reduction=reduction)
    # torch wants int64 labels; ember takes int32 or int64 as they are
    tcall = lambda m, a, b: m(a, b.long())
    _loss(ours, twin, x, y, tcall=tcall)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_options(reduction, smoothing, weighted):
    # [N, C, d1, d2] logits, an ignored label, class weights and label smoothing together
    x, y = randn(3, 4, 2, 5), _labels((3, 2, 5), 4, seed=1)
    y[0, 1, 2] = y[2, 0, 0] = -1
    w = np.array([0.5, 2.0, 1.0, 0.25], np.float32)
    kw = dict(ignore_index=-1, reduction=reduction, label_smoothing=smoothing)
    ours = nn.CrossEntropyLoss(weight=Tensor.from_data(w, AD) if weighted else None, **kw)
    twin = torch.nn.CrossEntropyLoss(weight=torch.tensor(w) if weighted else None, **kw)
    _loss(ours, twin, x, y)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_probabilities(smoothing, weighted):
    x = randn(4, 3, 2)
    p = torch.softmax(torch.tensor(randn(4, 3, 2, seed=2)), 1).numpy()
    w = np.array([0.5, 2.0, 1.0], np.float32)
    ours = nn.CrossEntropyLoss(weight=w if weighted else None, label_smoothing=smoothing)
    twin = torch.nn.CrossEntropyLoss(weight=torch.tensor(w) if weighted else None,
                                     label_smoothing=smoothing)
    _loss(ours, twin, x, p, grad_inputs=(0, 1))


def test_cross_entropy_unbatched_and_extreme_logits():
    ours, twin = nn.CrossEntropyLoss(), torch.nn.CrossEntropyLoss()
    _loss(ours, twin, randn(5), np.array(3))
    x = np.array([[1000.0, -1000.0, 0.0], [-50.0, 60.0, 70.0]], np.float32)
    _loss(ours, twin, x, np.array([1, 0]))


def test_cross_entropy_with_masked_logits():
    x = randn(3, 4)
    x[0, 2] = x[1, 0] = -np.inf  # classes ruled out, as in constrained decoding
    _loss(nn.CrossEntropyLoss(), torch.nn.CrossEntropyLoss(), x, np.array([1, 3, 2]))


def test_cross_entropy_checks_shapes_and_dtypes():
    loss = nn.CrossEntropyLoss()
    x = Tensor.from_data(randn(4, 3))
    with pytest.raises(ShapeError):
        loss(x, Tensor.from_data(np.zeros(3, np.int64)))
    with pytest.raises(DTypeError):
        loss(x, Tensor.from_data(np.zeros(4, bool)))
    with pytest.raises(ValueError):
        nn.CrossEntropyLoss(reduction="avg")


_STACKS = {"ndarray": lambda: ember.backend.NdArray(), "autodiff": lambda: AD,
           "wgpu": lambda: _wgpu_or_skip()}


def _wgpu_or_skip():
    from tests.ops.backends import BACKENDS
    make = dict(BACKENDS).get("wgpu")
    if make is None:
        pytest.skip("wgpu-py is not installed")
    return make()


@pytest.mark.parametrize("stack", sorted(_STACKS))
@pytest.mark.parametrize("loss", ["cross_entropy", "nll_loss"])
@pytest.mark.parametrize("labels, bad", [([0, 1, 3, 2], 3), ([0, -1, 2, 1], -1),
                                         ([7, 1, 2, 0], 7), ([0, 2, -5, -5], -5)])
def test_class_indices_out_of_range_raise(stack, loss, labels, bad):
    # issue 17: these gave a zero loss and gradient for the sample, still counted in the mean
    B = _STACKS[stack]()
    x = Tensor.from_data(randn(4, 3).astype(np.float32), backend=B)
    y = Tensor.from_data(np.array(labels, dtype=np.int32), backend=B)
    fn = getattr(nn.functional, loss, None) or getattr(ember.nn.loss, loss)
    with pytest.raises(ShapeError, match=rf"{loss}: target holds class index {bad} at \[\d\].*"
                                         r"3 classes.*\[0, 3\) or equal ignore_index \(-100\)"):
        fn(x, y)
    with pytest.raises(IndexError):  # torch raises too
        torch.nn.functional.cross_entropy(torch.zeros(4, 3), torch.tensor(labels))


def test_ignore_index_outside_the_classes_is_still_ignored():
    x, y = randn(4, 3), np.array([0, -100, 2, 1])
    ours = nn.CrossEntropyLoss()(Tensor.from_data(x), Tensor.from_data(y)).item()
    np.testing.assert_allclose(ours, torch.nn.functional.cross_entropy(
        torch.from_numpy(x), torch.from_numpy(y)).item(), rtol=1e-6)
    ours = nn.CrossEntropyLoss(ignore_index=5)(Tensor.from_data(x), Tensor.from_data(
        np.array([0, 5, 2, 1]))).item()
    np.testing.assert_allclose(ours, torch.nn.functional.cross_entropy(
        torch.from_numpy(x), torch.tensor([0, 5, 2, 1]), ignore_index=5).item(), rtol=1e-6)


def test_out_of_range_labels_in_a_jit_capture_give_nan_not_zero():
    # a replay cannot raise: the out-of-range sample's loss is NaN, so the mean is NaN too
    B = AD
    x = Tensor.from_data(randn(4, 3).astype(np.float32), backend=B)
    fast = ember.jit(lambda x, y: ember.nn.loss.cross_entropy(x, y))
    good = Tensor.from_data(np.array([0, 1, 2, 1], dtype=np.int32), backend=B)
    for _ in range(3):  # the second call captures, the third replays
        assert np.isfinite(fast(x, good).item())
    bad = Tensor.from_data(np.array([0, 9, 2, 1], dtype=np.int32), backend=B)
    assert np.isnan(fast(x, bad).item())


def test_cross_entropy_labels_from_the_inner_backend():
    # labels made on NdArray work with logits on Autodiff(NdArray)
    x = Tensor.from_data(randn(4, 3), AD).require_grad()
    y = Tensor.from_data(np.array([0, 2, 1, 1]))
    loss = nn.CrossEntropyLoss()(x, y)
    assert x.grad(loss.backward()).shape == (4, 3)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_nll_loss(reduction):
    x = torch.log_softmax(torch.tensor(randn(5, 4)), 1).numpy()
    y = _labels(5, 4, seed=3)
    y[1] = -100
    _loss(nn.NllLoss(reduction=reduction), torch.nn.NLLLoss(reduction=reduction), x, y)


# ---- binary cross entropy -------------------------------------------------------------------
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_binary_cross_entropy(reduction, weighted):
    p = torch.sigmoid(torch.tensor(randn(4, 3) * 3)).numpy()
    t = np.random.default_rng(0).random((4, 3)).astype(np.float32)
    t[0] = [0, 1, 1]
    w = np.array([1.0, 0.5, 2.0], np.float32)
    ours = nn.BinaryCrossEntropyLoss(weight=w if weighted else None, reduction=reduction)
    twin = torch.nn.BCELoss(weight=torch.tensor(w) if weighted else None, reduction=reduction)
    _loss(ours, twin, p, t)


def test_binary_cross_entropy_clamps_log_at_minus_100():
    p = np.array([0.0, 1.0, 0.5], np.float32)
    t = np.array([1.0, 0.0, 1.0], np.float32)
    ours = nn.BinaryCrossEntropyLoss(reduction="none")
    close(ours(Tensor.from_data(p), Tensor.from_data(t)),
          torch.nn.BCELoss(reduction="none")(torch.tensor(p), torch.tensor(t)))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("pos_weight", [None, [2.0, 0.5, 1.0]])
def test_binary_cross_entropy_with_logits(reduction, pos_weight):
    # huge logits stay finite and exact (tiny losses keep their relative precision)
    x = np.array([[0.3, -2.0, 5.0], [40.0, -40.0, 100.0], [-100.0, 20.0, -18.0]], np.float32)
    t = np.array([[1, 0, 1], [1, 0, 0], [1, 1, 0]], np.float32)
    pw = None if pos_weight is None else np.array(pos_weight, np.float32)
    ours = nn.BinaryCrossEntropyWithLogitsLoss(reduction=reduction, pos_weight=pw)
    twin = torch.nn.BCEWithLogitsLoss(reduction=reduction,
                                      pos_weight=None if pw is None else torch.tensor(pw))
    _loss(ours, twin, x, t)
    flag = nn.BinaryCrossEntropyLoss(reduction=reduction, with_logits=True, pos_weight=pw)
    _loss(flag, twin, x, t)


def test_binary_cross_entropy_with_logits_random():
    x, t = randn(5, 4) * 4, (randn(5, 4, seed=1) > 0).astype(np.float32)
    w = np.abs(randn(4, seed=2))
    _loss(nn.BinaryCrossEntropyWithLogitsLoss(weight=w),
          torch.nn.BCEWithLogitsLoss(weight=torch.tensor(w)), x, t)


# ---- regression -----------------------------------------------------------------------------
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("ours, theirs", [
    (nn.MseLoss, torch.nn.MSELoss), (nn.L1Loss, torch.nn.L1Loss),
    (lambda reduction: nn.HuberLoss(reduction, delta=0.7),
     lambda reduction: torch.nn.HuberLoss(reduction, delta=0.7)),
    (lambda reduction: nn.HuberLoss(reduction), lambda reduction: torch.nn.HuberLoss(reduction)),
    (lambda reduction: nn.SmoothL1Loss(reduction, beta=0.5),
     lambda reduction: torch.nn.SmoothL1Loss(reduction=reduction, beta=0.5)),
])
def test_regression(reduction, ours, theirs):
    x, y = randn(4, 5) * 2, randn(4, 5, seed=1)
    _loss(ours(reduction=reduction), theirs(reduction=reduction), x, y, grad_inputs=(0, 1))


# ---- KL divergence --------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides")  # PyTorch's notice
@pytest.mark.parametrize("reduction", REDUCTIONS + ["batchmean"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div(reduction, log_target):
    logp = torch.log_softmax(torch.tensor(randn(3, 4)), -1).numpy()
    q = torch.softmax(torch.tensor(randn(3, 4, seed=1)), -1).numpy()
    if not log_target:
        q[0, 1] = 0.0  # 0 * log 0 counts as 0
    target = np.log(q) if log_target else q
    ours = nn.KlDivLoss(reduction=reduction, log_target=log_target)
    twin = torch.nn.KLDivLoss(reduction=reduction, log_target=log_target)
    _loss(ours, twin, logp, target.astype(np.float32))


def test_kl_div_of_equal_distributions_is_zero():
    q = torch.softmax(torch.tensor(randn(2, 5)), -1).numpy()
    loss = nn.KlDivLoss(reduction="batchmean")(Tensor.from_data(np.log(q)), Tensor.from_data(q))
    assert abs(loss.item()) < 1e-6


# ---- as modules -----------------------------------------------------------------------------
def test_losses_are_modules_without_parameters():
    for loss in (nn.CrossEntropyLoss(weight=np.ones(3, np.float32)), nn.MseLoss(),
                 nn.BinaryCrossEntropyWithLogitsLoss(), nn.KlDivLoss("batchmean"),
                 nn.HuberLoss()):
        assert isinstance(loss, nn.Module) and loss.num_params() == 0
        assert "reduction" in repr(loss)
    assert nn.MSELoss is nn.MseLoss and nn.BCEWithLogitsLoss is nn.BinaryCrossEntropyWithLogitsLoss
    with pytest.raises(ValueError):
        nn.MseLoss(reduction="batchmean")


def test_training_a_classifier_lowers_the_loss():
    ember.seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.Relu(), nn.Linear(16, 3)).to(AD)
    x = Tensor.from_data(randn(32, 4), AD)
    y = Tensor.from_data(np.argmax(randn(32, 4) @ randn(4, 3, seed=1), 1).astype(np.int32), AD)
    loss_fn = nn.CrossEntropyLoss()
    first = None
    for _ in range(30):
        loss = loss_fn(model(x), y)
        first = first if first is not None else loss.item()
        grads = loss.backward()
        model.map_params(lambda n, p, g=grads: p.with_value(p.inner() - p.grad(g) * 0.5))
    assert loss.item() < first * 0.6
