"""Random distributions and the global seed.

Sampling runs on the host with NumPy's PCG64 generator, so a seed gives the same numbers on
every backend and in Pyodide; backends receive the sampled array.
"""

from dataclasses import dataclass

import numpy as np

from .errors import DTypeError

# created on first use: importing numpy.random is a noticeable part of `import ember` in the
# browser, and a page that only runs a trained model never draws a random number
_rng = None


def seed(value):
    """Seed every random draw ember makes (tensors, dropout masks, shuffles)."""
    global _rng
    _rng = np.random.default_rng(int(value))


def rng():
    """The global generator (seeded with 0 unless ember.seed said otherwise)."""
    global _rng
    if _rng is None:
        _rng = np.random.default_rng(0)
    return _rng


@dataclass(frozen=True)
class Distribution:
    """What Tensor.random samples: Default (uniform in [0, 1)), Uniform(low, high),
    Normal(mean, std) or Bernoulli(p)."""

    kind: str
    a: float = 0.0
    b: float = 1.0

    @staticmethod
    def Uniform(low=0.0, high=1.0):  # noqa: N802  (Burn's spelling)
        if not high >= low:
            raise ValueError(f"Distribution.Uniform: high ({high}) must be >= low ({low})")
        return Distribution("uniform", float(low), float(high))

    @staticmethod
    def Normal(mean=0.0, std=1.0):  # noqa: N802
        if not std >= 0:
            raise ValueError(f"Distribution.Normal: std must be >= 0, got {std}")
        return Distribution("normal", float(mean), float(std))

    @staticmethod
    def Bernoulli(p=0.5):  # noqa: N802
        if not 0 <= p <= 1:
            raise ValueError(f"Distribution.Bernoulli: p must lie in [0, 1], got {p}")
        return Distribution("bernoulli", float(p))

    def sample(self, shape, dtype):
        """A NumPy array of `shape` and ember `dtype` drawn from the global generator."""
        g = rng()
        if self.kind in ("default", "uniform"):
            if dtype == "bool":
                raise DTypeError("random: a uniform bool is meaningless; use Bernoulli(p)")
            if dtype in ("int32", "int64"):
                # integers in [low, high), as torch.randint
                return g.integers(int(self.a), int(self.b), size=shape, dtype=dtype)
            out = g.random(size=shape, dtype=dtype)
            if (self.a, self.b) != (0.0, 1.0):
                out = (out * (self.b - self.a) + self.a).astype(dtype)
            return out
        if self.kind == "normal":
            if dtype not in ("float32", "float64"):
                raise DTypeError(f"random: Normal needs a float dtype, got {dtype}")
            return g.standard_normal(size=shape, dtype=dtype) * self.b + self.a
        return (g.random(size=shape) < self.a).astype(dtype)


Distribution.Default = Distribution("default")
