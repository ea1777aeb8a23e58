# The seed's custom GELU, on the default backend (NdArray: NumPy inside Pyodide)
import math

from ember import Distribution, Tensor

SQRT_2 = math.sqrt(2)


def gelu_custom(x):
    x = x * ((x / SQRT_2).erf() + 1)
    return x / 2


x = Tensor.random([4, 4], Distribution.Default)
print("x =", x)
print("gelu_custom(x) =", gelu_custom(x))
gelu_custom(Tensor.from_data([[-2.0, -0.5, 0.0], [0.5, 1.0, 3.0]]))
