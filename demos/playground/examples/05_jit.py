# ember.jit: a model's ops captured once, then replayed without the Python around each op
import time

import numpy as np

import ember
from ember import Tensor

model = ember.models.load("mnist")  # the shipped ConvNet, in eval mode
fast = ember.jit(model)             # call 1 runs, call 2 runs and captures, then it replays
x = Tensor.from_data(np.random.default_rng(0).random((1, 1, 28, 28), dtype=np.float32))


def ms_per_call(f, n=100):
    f(x), f(x)  # warm-up (and the capture)
    start = time.perf_counter()
    for _ in range(n):
        f(x)
    return (time.perf_counter() - start) / n * 1e3


eager, replayed = ms_per_call(model), ms_per_call(fast)
print(f"eager {eager:.2f} ms, ember.jit {replayed:.2f} ms per forward ({eager / replayed:.1f}x)")
print("same logits:", np.allclose(fast(x).to_numpy(), model(x).to_numpy(), atol=1e-5))
