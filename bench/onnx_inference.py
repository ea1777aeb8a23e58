"""ember.onnx against onnxruntime CPU: ResNet-18 and SqueezeNet 1.1 (torchvision's layouts,
written out here with random weights, exported by torch.onnx) at batch 1, 224x224, inference.

ember runs the imported module on NdArray; onnxruntime runs the same file with one thread (and
NumPy's BLAS should be given one too: OPENBLAS_NUM_THREADS=1). Both are checked to give the
same outputs first. A second row per model gives both one thread (NdArray(threads=1)) and
compares CPU time, which a busy shared machine disturbs far less than wall time (eager, and
replayed by ember.jit). torch, onnx
and onnxruntime are references only: without them nothing is measured.
"""

import io
import statistics
import time

import numpy as np

import ember
from ember import Tensor
from ember import onnx as eonnx
from ember.backend import NdArray


def _models(torch):
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.a = nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
                                   nn.BatchNorm2d(cout), nn.ReLU(),
                                   nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
            self.down = nn.Identity() if stride == 1 and cin == cout else nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            return (self.a(x) + self.down(x)).relu()

    def resnet18():
        layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                  nn.MaxPool2d(3, 2, 1)]
        for cin, cout, stride in ((64, 64, 1), (64, 128, 2), (128, 256, 2), (256, 512, 2)):
            layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
        return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000))

    class Fire(nn.Module):
        def __init__(self, cin, s, e):
            super().__init__()
            self.s, self.e1, self.e3 = nn.Conv2d(cin, s, 1), nn.Conv2d(s, e, 1), \
                nn.Conv2d(s, e, 3, padding=1)

        def forward(self, x):
            x = self.s(x).relu()
            return torch.cat([self.e1(x).relu(), self.e3(x).relu()], 1)

    def squeezenet11():
        pool = nn.MaxPool2d(3, 2, ceil_mode=True)
        return nn.Sequential(
            nn.Conv2d(3, 64, 3, 2), nn.ReLU(), pool, Fire(64, 16, 64), Fire(128, 16, 64), pool,
            Fire(128, 32, 128), Fire(256, 32, 128), pool, Fire(256, 48, 192),
            Fire(384, 48, 192), Fire(384, 64, 256), Fire(512, 64, 256), nn.Dropout(0.5),
            nn.Conv2d(512, 1000, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())

    return {"ResNet-18": resnet18, "SqueezeNet 1.1": squeezenet11}


def inference(ctx):
    try:
        import onnxruntime as ort
        import torch
    except ImportError:
        yield ctx.row("onnx inference: torch and onnxruntime not installed", float("nan"),
                      float("nan"), "ms")
        return
    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    for name, make in _models(torch).items():
        f = io.BytesIO()
        torch.onnx.export(make().eval(), (torch.tensor(x),), f, input_names=["x"], dynamo=False)
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        session = ort.InferenceSession(f.getvalue(), options, providers=["CPUExecutionProvider"])
        model = eonnx.load(f.getvalue(), backend=NdArray())
        def ours(model=model):
            return model(x).to_numpy()

        def theirs(session=session):
            return session.run(None, {"x": x})[0]

        np.testing.assert_allclose(ours(), theirs(), rtol=1e-3, atol=1e-4)
        yield ctx.time_row(f"{name} batch 1 224x224, NdArray vs onnxruntime (1 thread)",
                           *ctx.measure(ours, theirs))
        one = eonnx.load(f.getvalue(), backend=NdArray(threads=1))
        fast = ember.jit(eonnx.load(f.getvalue(), backend=one._backend))
        xt = Tensor.from_data(x, one._backend)  # (ember.jit takes Tensors)
        eager, jitted, ref = _cpu_ms([lambda one=one: one(x).to_numpy(),
                                      lambda fast=fast, xt=xt: fast(xt).to_numpy(), theirs],
                                     ctx.repeat)
        yield ctx.row(f"{name}, NdArray(threads=1) vs onnxruntime (1 thread), CPU time",
                      eager, ref, "ms")
        yield ctx.row(f"{name}, the same under ember.jit, CPU time", jitted, ref, "ms")


def _cpu_ms(fns, repeat):
    """The median CPU time of a call of each fn (ms), interleaved: one thread each, so what a
    call costs whatever else a shared machine runs, where wall time counts the waits."""
    samples = [[] for _ in fns]
    for fn in fns * 2:
        fn()
    for _ in range(repeat):
        for fn, out in zip(fns, samples):
            start = time.process_time()
            fn()
            out.append((time.process_time() - start) * 1e3)
    return [statistics.median(s) for s in samples]


BENCHMARKS = {"inference": inference}
