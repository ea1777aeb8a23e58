"""ember quickstart: the README's first snippet as a script (`make demo`)."""

import math

import numpy as np

import ember
from ember import Distribution, Tensor
from ember.backend import Autodiff, NdArray

SQRT_2 = math.sqrt(2)


def gelu_custom(x):
    x = x * ((x / SQRT_2).erf() + 1)
    return x / 2


def gelu_reference(a):
    """erf-GELU in float64 NumPy, independent of ember."""
    a = np.asarray(a, dtype=np.float64)
    return a * (np.vectorize(math.erf)(a / SQRT_2) + 1) / 2


ember.seed(0)
print("default backend:", str(ember.default_backend()))

x = Tensor.random([4, 4], Distribution.Default)
small = Tensor.from_data([[-2.0, -0.5, 0.0], [0.5, 1.0, 3.0]])

max_diff = 0.0
for t in (x, small):
    y = gelu_custom(t)
    print(f"x = {t!r}")
    print(f"gelu_custom(x) = {y!r}")
    max_diff = max(max_diff, float(np.abs(y.to_numpy() - gelu_reference(t.to_numpy())).max()))
print(f"max abs difference vs NumPy reference: {max_diff:.3e}")

print("matmul [2, 3] @ [3, 2]:", repr(small @ Tensor.ones([3, 2])))
print("sum_dim(1) keeps the dim:", repr(small.sum_dim(1)))
print("sum():", repr(small.sum()))
print("2 * small + 1:", repr(2 * small + 1))
print("row broadcast [2, 3] + [3]:", repr(small + Tensor.from_data([10.0, 20.0, 30.0])))

# The seed's autodiff example: wrap the backend, ask for gradients.
B = Autodiff(NdArray())
x = Tensor.random([32, 32], Distribution.Default, backend=B)
y = Tensor.random([32, 32], Distribution.Default, backend=B).require_grad()
grads = ((x + y).matmul(x).exp()).backward()
gy = y.grad(grads)
X, Y = x.to_numpy().astype(np.float64), y.to_numpy().astype(np.float64)
analytic = np.exp((X + Y) @ X) @ X.T
print(f"backend {B}: y.grad(grads) is {gy.shape} on {gy.backend}, max relative error vs the "
      f"analytic gradient {float(np.abs(gy.to_numpy() / analytic - 1).max()):.1e}")
