# ember on the page's WebGPU: B = await Wgpu.create(), then the same tensor code
import numpy as np

from ember import Tensor
from ember.backend import Autodiff, Wgpu
from ember.errors import BackendError

try:
    G = await Wgpu.create()  # asks the browser for its GPU, once; natively it is Wgpu() at once
except BackendError as e:
    G = None
    print("no WebGPU here:", e)

if G is not None:
    print("backend:", G)
    x = Tensor.random([256, 256], backend=G)
    y = (x @ x.transpose()).gelu().mean()
    print("mean of gelu(x @ x.T):", float(await y.to_numpy_async()))

    B = Autodiff(G)  # gradients on the GPU too
    w = Tensor.from_data([1.0, -2.0, 3.0], backend=B).require_grad()
    grads = (w * w).sum().backward()
    print("d/dw sum(w * w) =", (await w.grad(grads).to_numpy_async()).tolist())  # 2w
    print("on the GPU:", np.allclose(await w.grad(grads).to_numpy_async(), [2.0, -4.0, 6.0]))
