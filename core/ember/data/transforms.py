"""Image transforms on NumPy arrays, for a whole batch at once.

Each transform takes `x` of shape [C, H, W] (one image) or [B, C, H, W] (a batch) and a NumPy
Generator `rng`, and returns a new array of x's dtype. Random transforms draw an independent
choice per image. A DataLoader given `transform=` applies it to the first field of each batch
(the images) with a generator seeded from (seed, epoch, batch index), so augmentation is
reproducible and a resumed run sees the very batches it would have seen.

    t = Compose([RandomCrop(28, padding=2), RandomHorizontalFlip(), Normalize(0.5, 0.5)])
    y = t(x, rng)     # rng defaults to ember's generator (ember.seed seeds it)
"""

import numbers

import numpy as np

__all__ = ["Compose", "Normalize", "RandomCrop", "RandomHorizontalFlip", "RandomShift",
           "Transform"]


def _as_batch(x, who):
    x = np.asarray(x)
    if x.ndim == 3:
        return x[None], True
    if x.ndim != 4:
        raise ValueError(f"{who}: expected an image [C, H, W] or a batch [B, C, H, W], got "
                         f"shape {list(x.shape)}")
    return x, False


def _rng(rng):
    if rng is None:
        from ..distribution import rng as ember_rng
        return ember_rng()
    return rng


class Transform:
    """Base class: subclasses define `apply(batch [B, C, H, W], rng) -> batch`."""

    def __call__(self, x, rng=None):
        batch, single = _as_batch(x, type(self).__name__)
        out = self.apply(batch, _rng(rng))
        return out[0] if single else out

    def apply(self, batch, rng):
        raise NotImplementedError

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class Compose(Transform):
    """Apply transforms in order."""

    def __init__(self, transforms):
        self.transforms = list(transforms)
        for t in self.transforms:
            if not callable(t):
                raise TypeError(f"Compose: {t!r} is not a transform")

    def apply(self, batch, rng):
        for t in self.transforms:
            batch = t.apply(batch, rng) if isinstance(t, Transform) else t(batch, rng)
        return batch

    def __repr__(self):
        return f"Compose({self.transforms!r})"


class Normalize(Transform):
    """(x - mean) / std per channel (numbers, or one per channel)."""

    def __init__(self, mean, std):
        self.mean, self.std = mean, std
        if np.any(np.asarray(std, dtype=np.float64) == 0):
            raise ValueError("Normalize: std must not be 0")

    def apply(self, batch, rng):
        dtype = batch.dtype if batch.dtype.kind == "f" else np.float32
        mean = np.asarray(self.mean, dtype=dtype).reshape(1, -1, 1, 1)
        std = np.asarray(self.std, dtype=dtype).reshape(1, -1, 1, 1)
        if mean.shape[1] not in (1, batch.shape[1]) or std.shape[1] not in (1, batch.shape[1]):
            raise ValueError(f"Normalize: {mean.shape[1]} means / {std.shape[1]} stds for "
                             f"{batch.shape[1]} channels")
        return ((batch - mean) / std).astype(dtype, copy=False)


def _pair(value, who):
    if isinstance(value, numbers.Integral):
        return int(value), int(value)
    h, w = value
    return int(h), int(w)


class RandomCrop(Transform):
    """A random `size` window of each image, after zero `padding` on every side
    (torchvision's RandomCrop). RandomCrop(28, padding=2) on 28x28 images shifts each image by
    up to 2 pixels in each direction."""

    def __init__(self, size, padding=0, fill=0):
        self.size, self.padding, self.fill = _pair(size, "RandomCrop"), int(padding), fill
        if self.padding < 0:
            raise ValueError(f"RandomCrop: padding must be >= 0, got {padding}")

    def apply(self, batch, rng):
        return self._crop(batch, rng, self.size)

    def _crop(self, batch, rng, size):
        b, c, h, w = batch.shape
        p = self.padding
        th, tw = size
        if th > h + 2 * p or tw > w + 2 * p:
            raise ValueError(f"RandomCrop: a {th}x{tw} crop does not fit images of {h}x{w} "
                             f"padded by {p}")
        padded = np.full((b, c, h + 2 * p, w + 2 * p), self.fill, dtype=batch.dtype)
        padded[:, :, p:p + h, p:p + w] = batch
        tops = rng.integers(0, h + 2 * p - th + 1, size=b)
        lefts = rng.integers(0, w + 2 * p - tw + 1, size=b)
        # one gather for the whole batch: row and column indices per image
        rows = tops[:, None] + np.arange(th)[None, :]          # [B, th]
        cols = lefts[:, None] + np.arange(tw)[None, :]         # [B, tw]
        bi = np.arange(b)[:, None, None, None]
        ci = np.arange(c)[None, :, None, None]
        return padded[bi, ci, rows[:, None, :, None], cols[:, None, None, :]]


class RandomShift(RandomCrop):
    """Translate each image by a random whole number of pixels in [-max_shift, max_shift]
    along each axis, filling with zeros (the image keeps its size)."""

    def __init__(self, max_shift=2, fill=0):
        super().__init__(size=1, padding=max_shift, fill=fill)
        self.max_shift = int(max_shift)

    def apply(self, batch, rng):
        return self._crop(batch, rng, batch.shape[2:])

    def __repr__(self):
        return f"RandomShift(max_shift={self.max_shift})"


class RandomHorizontalFlip(Transform):
    """Mirror each image left-right with probability p."""

    def __init__(self, p=0.5):
        if not 0 <= p <= 1:
            raise ValueError(f"RandomHorizontalFlip: p must lie in [0, 1], got {p}")
        self.p = p

    def apply(self, batch, rng):
        flip = rng.random(batch.shape[0]) < self.p
        out = batch.copy()
        out[flip] = batch[flip][..., ::-1]
        return out
