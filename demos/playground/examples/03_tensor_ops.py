# Broadcasting, matmul, reductions, and a shape error with a clear message
import ember
from ember import Tensor

a = Tensor.from_data([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
print("a + [10, 20, 30] =", a + Tensor.from_data([10.0, 20.0, 30.0]))
print("a @ a.T =", a @ a.swap_dims(0, 1))
print("sum_dim(1) keeps the dim:", a.sum_dim(1).shape, "; mean():", float(a.mean().to_numpy()))
try:
    a @ a
except ember.ShapeError as e:
    print("ShapeError:", e)
a.softmax(-1) if hasattr(a, "softmax") else a.exp() / a.exp().sum_dim(1)
