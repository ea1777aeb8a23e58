"""Losses, as modules (`nn.CrossEntropyLoss()(logits, labels)`) and as functions of the same
names in snake case. Composites of tensor ops, with PyTorch's arguments, defaults and
reductions ("mean" | "sum" | "none"; KlDivLoss also "batchmean")."""

from ..errors import DTypeError, ShapeError
from ..tensor import Tensor, capturing
from .module import Module

_REDUCTIONS = ("mean", "sum", "none")


def _reduce(loss, reduction):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"loss: reduction must be one of {_REDUCTIONS}, got {reduction!r}")


def _like(t, x):
    """`t` (a Tensor or array-like) on x's backend."""
    if not isinstance(t, Tensor):
        return Tensor.from_data(t, x.backend)
    return t if t.backend == x.backend else t.to(x.backend)


def _float_like(t, x):
    t = _like(t, x)
    return t if t.dtype == x.dtype else t.cast(x.dtype)


def _same_shape(name, input, target):
    if tuple(input.shape) != tuple(target.shape):
        raise ShapeError(f"{name}: input of shape {list(input.shape)} and target of shape "
                         f"{list(target.shape)} must have the same shape")


def _log1p(u):
    """log(1 + u) accurate for small u (ember has no log1p primitive): the classic
    log(w) * u / (w - 1) with w = 1 + u, and u itself where w rounds to 1."""
    w = u + 1
    tiny = w == 1
    return (w.log() * u / (w - 1).mask_fill(tiny, 1.0)).mask_where(tiny, u)


# ---- classification ------------------------------------------------------------------------
def _class_view(t, n_dims):
    """Reshape a per-class vector [C] to broadcast over [N, C, d1, ...]."""
    return t.reshape((1, -1) + (1,) * (n_dims - 2))


def cross_entropy(input, target, weight=None, ignore_index=-100, reduction="mean",
                  label_smoothing=0.0):
    """input: logits [N, C], [N, C, d1, ...] or [C]; target: class indices (int32/int64) of
    shape [N] / [N, d1, ...] / [], or class probabilities of input's shape (float)."""
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must lie in [0, 1], got "
                         f"{label_smoothing}")
    logp = input.log_softmax(0 if input.ndim == 1 else 1)
    return _nll(logp, target, weight, ignore_index, reduction, label_smoothing, "cross_entropy")


def nll_loss(input, target, weight=None, ignore_index=-100, reduction="mean"):
    """input: log-probabilities [N, C, ...]; target: class indices."""
    target = _like(target, input)
    if target.dtype not in ("int32", "int64"):
        raise DTypeError(f"nll_loss: target must hold class indices (int32/int64), got "
                         f"{target.dtype}")
    return _nll(input, target, weight, ignore_index, reduction, 0.0, "nll_loss")


def _nll(logp, target, weight, ignore_index, reduction, smoothing, name):
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{name}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    if logp.ndim == 1:  # unbatched
        logp = logp.unsqueeze(0)
        target = _like(target, logp)
        target = target.unsqueeze(0)
        out = _nll(logp, target, weight, ignore_index, reduction, smoothing, name)
        return out.squeeze(0) if reduction == "none" else out
    C = logp.shape[1]
    target = _like(target, logp)
    w = None if weight is None else _float_like(weight, logp)
    if w is not None and tuple(w.shape) != (C,):
        raise ShapeError(f"{name}: weight of shape {list(w.shape)}, expected [{C}]")
    if target.dtype in ("float32", "float64"):
        return _soft_targets(logp, target.cast(logp.dtype), w, reduction, smoothing, name)
    if target.dtype not in ("int32", "int64"):
        raise DTypeError(f"{name}: target must hold class indices (int32/int64) or class "
                         f"probabilities (float), got {target.dtype}")
    want = (logp.shape[0],) + tuple(logp.shape[2:])
    if tuple(target.shape) != want:
        raise ShapeError(f"{name}: target of shape {list(target.shape)}, expected {list(want)} "
                         f"for input of shape {list(logp.shape)}")
    # one-hot by comparison: no gather, so ignore_index may be any value
    classes = _class_view(Tensor.arange(C, backend=logp.backend, dtype=target.dtype), logp.ndim)
    miss = target.unsqueeze(1) != classes
    kept = target != ignore_index
    outside = _outside_classes(target, kept, C, ignore_index, name)
    valid = kept.cast(logp.dtype)
    # per-sample weight w[target] (zero where ignored)
    sample_w = valid if w is None else _class_view(w, logp.ndim).mask_fill(miss, 0.0) \
        .sum_dim(1).squeeze(1) * valid
    # mask, not multiply by a one-hot: logits of -inf (masked classes) must not give 0 * inf
    nll = -logp.mask_fill(miss, 0.0).sum_dim(1).squeeze(1) * sample_w
    if outside is not None:
        nll = nll.mask_fill(outside, float("nan"))
    total = sample_w.sum() if reduction == "mean" else None
    loss = nll.sum() / total if reduction == "mean" else _reduce(nll, reduction)
    if not smoothing:
        return loss
    # PyTorch: (1 - eps) * nll + eps / C * (-sum_c w_c logp_c), with nll's normaliser
    per_class = logp if w is None else logp * _class_view(w, logp.ndim)
    smooth = -per_class.sum_dim(1).squeeze(1) * valid
    smooth = smooth.sum() / total if reduction == "mean" else _reduce(smooth, reduction)
    return loss * (1 - smoothing) + smooth * (smoothing / C)


def _outside_classes(target, kept, C, ignore_index, name):
    """Class indices outside [0, C) (ignore_index aside) raise, as in PyTorch: the one-hot by
    comparison would give such a sample zero loss and gradient while the mean still counted it.
    Inside an ember.jit capture values cannot be read, so those samples' losses become NaN
    instead (the mask is returned), which the replay carries into the loss and its gradient."""
    outside = ((target < 0) | (target >= C)) & kept
    if capturing.tracer is not None:
        return outside
    if outside.any().item():
        at = outside.to_numpy()
        where = [int(i[0]) for i in at.nonzero()]
        raise ShapeError(f"{name}: target holds class index {int(target.to_numpy()[at][0])} at "
                         f"{where} ({int(at.sum())} of {at.size} out of range), but the input "
                         f"has {C} classes: indices must lie in [0, {C}) or equal "
                         f"ignore_index ({ignore_index})")
    return None


def _soft_targets(logp, target, w, reduction, smoothing, name):
    _same_shape(name, logp, target)
    C = logp.shape[1]
    if smoothing:
        target = target * (1 - smoothing) + smoothing / C
    per_class = logp if w is None else logp * _class_view(w, logp.ndim)
    loss = -(per_class * target).sum_dim(1).squeeze(1)
    return _reduce(loss, reduction)  # "mean" averages over samples, unweighted, as PyTorch


def binary_cross_entropy(input, target, weight=None, reduction="mean"):
    """input: probabilities in [0, 1]; logs are clamped at -100, as PyTorch's."""
    target = _float_like(target, input)
    _same_shape("binary_cross_entropy", input, target)
    loss = -(target * input.log().clamp_min(-100.0)
             + (1 - target) * (1 - input).log().clamp_min(-100.0))
    if weight is not None:
        loss = loss * _float_like(weight, input)
    return _reduce(loss, reduction)


def binary_cross_entropy_with_logits(input, target, weight=None, reduction="mean",
                                     pos_weight=None):
    """input: logits; stable for any magnitude (no exp of a positive number)."""
    target = _float_like(target, input)
    _same_shape("binary_cross_entropy_with_logits", input, target)
    # softplus(-x) = log(1 + exp(-|x|)) + max(-x, 0)
    softplus_neg = _log1p((-input.abs()).exp()) + (-input).clamp_min(0.0)
    if pos_weight is not None:
        log_weight = (_float_like(pos_weight, input) - 1) * target + 1
        loss = (1 - target) * input + log_weight * softplus_neg
    else:
        loss = (1 - target) * input + softplus_neg
    if weight is not None:
        loss = loss * _float_like(weight, input)
    return _reduce(loss, reduction)


# ---- regression ----------------------------------------------------------------------------
def mse_loss(input, target, reduction="mean"):
    target = _float_like(target, input)
    d = input - target
    return _reduce(d * d, reduction)


def l1_loss(input, target, reduction="mean"):
    return _reduce((input - _float_like(target, input)).abs(), reduction)


def huber_loss(input, target, reduction="mean", delta=1.0):
    """0.5 d² where |d| < delta, delta (|d| - delta / 2) elsewhere."""
    d = input - _float_like(target, input)
    a = d.abs()
    loss = (d * d * 0.5).mask_where(a >= delta, (a - delta / 2) * delta)
    return _reduce(loss, reduction)


def smooth_l1_loss(input, target, reduction="mean", beta=1.0):
    """Huber divided by beta (0.5 d² / beta where |d| < beta, |d| - beta / 2 elsewhere)."""
    if beta == 0:
        return l1_loss(input, target, reduction)
    d = input - _float_like(target, input)
    a = d.abs()
    loss = (d * d * (0.5 / beta)).mask_where(a >= beta, a - beta / 2)
    return _reduce(loss, reduction)


def kl_div(input, target, reduction="mean", log_target=False):
    """input: log-probabilities; target: probabilities (log-probabilities with log_target).
    Pointwise target * (log target - input), zero where target is 0, as PyTorch's."""
    target = _float_like(target, input)
    if log_target:
        loss = target.exp() * (target - input)
    else:
        # xlogy(t, t) - t * input, with 0 * log 0 = 0
        loss = target * (target.mask_fill(target == 0, 1.0).log() - input)
    if reduction == "batchmean":
        return loss.sum() / (input.shape[0] if input.ndim else 1)
    return _reduce(loss, reduction)


# ---- modules -------------------------------------------------------------------------------
class _Loss(Module):
    def __init__(self, reduction="mean"):
        super().__init__()
        if reduction not in _REDUCTIONS + (("batchmean",) if self._batchmean else ()):
            raise ValueError(f"{type(self).__name__}: reduction must be one of "
                             f"{_REDUCTIONS}, got {reduction!r}")
        self.reduction = reduction

    _batchmean = False

    def extra_repr(self):
        return f"reduction={self.reduction!r}"


class CrossEntropyLoss(_Loss):
    """forward(logits [N, C, ...], target) with class indices [N, ...] (int32/int64) or class
    probabilities (float, logits' shape); weight [C], ignore_index, label_smoothing."""

    def __init__(self, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        super().__init__(reduction)
        self.weight, self.ignore_index = weight, ignore_index
        self.label_smoothing = label_smoothing

    def forward(self, input, target):
        return cross_entropy(input, target, self.weight, self.ignore_index, self.reduction,
                             self.label_smoothing)


class NllLoss(_Loss):
    """forward(log_probabilities [N, C, ...], class indices [N, ...])."""

    def __init__(self, weight=None, ignore_index=-100, reduction="mean"):
        super().__init__(reduction)
        self.weight, self.ignore_index = weight, ignore_index

    def forward(self, input, target):
        return nll_loss(input, target, self.weight, self.ignore_index, self.reduction)


class MseLoss(_Loss):
    def forward(self, input, target):
        return mse_loss(input, target, self.reduction)


class L1Loss(_Loss):
    def forward(self, input, target):
        return l1_loss(input, target, self.reduction)


class HuberLoss(_Loss):
    def __init__(self, reduction="mean", delta=1.0):
        super().__init__(reduction)
        self.delta = delta

    def forward(self, input, target):
        return huber_loss(input, target, self.reduction, self.delta)


class SmoothL1Loss(_Loss):
    def __init__(self, reduction="mean", beta=1.0):
        super().__init__(reduction)
        self.beta = beta

    def forward(self, input, target):
        return smooth_l1_loss(input, target, self.reduction, self.beta)


class BinaryCrossEntropyLoss(_Loss):
    """forward(probabilities, targets in [0, 1]); with_logits=True takes logits instead
    (the same as BinaryCrossEntropyWithLogitsLoss)."""

    def __init__(self, weight=None, reduction="mean", with_logits=False, pos_weight=None):
        super().__init__(reduction)
        if pos_weight is not None and not with_logits:
            raise ValueError("BinaryCrossEntropyLoss: pos_weight needs with_logits=True")
        self.weight, self.with_logits, self.pos_weight = weight, with_logits, pos_weight

    def forward(self, input, target):
        if self.with_logits:
            return binary_cross_entropy_with_logits(input, target, self.weight,
                                                    self.reduction, self.pos_weight)
        return binary_cross_entropy(input, target, self.weight, self.reduction)

    def extra_repr(self):
        return super().extra_repr() + (", with_logits=True" if self.with_logits else "")


class BinaryCrossEntropyWithLogitsLoss(BinaryCrossEntropyLoss):
    """forward(logits, targets in [0, 1]): numerically stable; pos_weight as PyTorch's."""

    def __init__(self, weight=None, reduction="mean", pos_weight=None):
        super().__init__(weight, reduction, with_logits=True, pos_weight=pos_weight)


class KlDivLoss(_Loss):
    """forward(log-probabilities, target); reduction "batchmean" divides the sum by the batch
    size (the mathematical KL divergence); "mean" averages over every element, as PyTorch."""

    _batchmean = True

    def __init__(self, reduction="mean", log_target=False):
        super().__init__(reduction)
        self.log_target = log_target

    def forward(self, input, target):
        return kl_div(input, target, self.reduction, self.log_target)
