"""Gradient clipping, as an optimizer option (`optim.SGD(0.1, grad_clip=ClipNorm(1.0))`) or
by hand on GradientsParams (`gp.clip_norm(1.0)`, `gp.clip_value(0.5)`).

ClipNorm is global, as torch.nn.utils.clip_grad_norm_: one norm over all the gradients
being applied, and every gradient scaled by min(1, max_norm / (norm + 1e-6)). (Burn's
GradientClipping::Norm clips each tensor on its own; PyTorch users expect the global one.)
"""

from .grads import GradientsParams

__all__ = ["ClipNorm", "ClipValue", "clip_grad_norm", "clip_grad_value"]


class ClipNorm:
    """Scale the gradients so their total norm is at most max_norm."""

    def __init__(self, max_norm, norm_type=2.0):
        if not max_norm >= 0:
            raise ValueError(f"ClipNorm: max_norm must be >= 0, got {max_norm}")
        self.max_norm, self.norm_type = float(max_norm), float(norm_type)

    def __call__(self, grads):
        return grads.clip_norm(self.max_norm, self.norm_type)

    def __repr__(self):
        return f"ClipNorm({self.max_norm}, norm_type={self.norm_type})"


class ClipValue:
    """Clamp every gradient element to [-clip_value, clip_value]."""

    def __init__(self, clip_value):
        if not clip_value >= 0:
            raise ValueError(f"ClipValue: clip_value must be >= 0, got {clip_value}")
        self.clip_value = float(clip_value)

    def __call__(self, grads):
        return grads.clip_value(self.clip_value)

    def __repr__(self):
        return f"ClipValue({self.clip_value})"


def clip_grad_norm(grads, max_norm, norm_type=2.0):
    """(clipped GradientsParams, total norm before clipping as a 0-d Tensor): the functional
    twin of torch.nn.utils.clip_grad_norm_, which returns the norm too."""
    _check(grads, "clip_grad_norm")
    return grads.clip_norm(max_norm, norm_type), grads.norm(norm_type)


def clip_grad_value(grads, clip_value):
    """The clipped GradientsParams (torch.nn.utils.clip_grad_value_)."""
    _check(grads, "clip_grad_value")
    return grads.clip_value(clip_value)


def _check(grads, who):
    if not isinstance(grads, GradientsParams):
        raise TypeError(f"{who}: expected GradientsParams, got {type(grads).__name__}")
