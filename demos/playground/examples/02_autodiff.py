# Gradients: wrap the backend in Autodiff, call backward(), read y.grad(grads)
from ember import Distribution, Tensor
from ember.backend import Autodiff, NdArray

B = Autodiff(NdArray())
x = Tensor.random([32, 32], Distribution.Default, backend=B)
y = Tensor.random([32, 32], Distribution.Default, backend=B).require_grad()
grads = ((x + y).matmul(x).exp()).backward()
gy = y.grad(grads)
print(f"backend: {B}")
print(f"y.grad(grads): shape {gy.shape}, dtype {gy.dtype}, on {gy.backend}")
print("first row:", gy.to_numpy()[0, :4])
