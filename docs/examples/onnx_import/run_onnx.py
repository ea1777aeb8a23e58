"""ONNX import and inference: a small ResNet exported from PyTorch, run by ember.onnx, checked
against onnxruntime on the same inputs, and timed against it.

    python docs/examples/onnx_import/run_onnx.py                  # 64x64 images, 20 runs
    python docs/examples/onnx_import/run_onnx.py --size 32 --runs 2   # the CI-sized run

PyTorch only makes the file (torch.onnx, with the onnx package); onnxruntime is the reference.
ember reads the file itself (no onnx package at run time), as it does in Pyodide.
"""

import argparse
import os
import tempfile
import time

import numpy as np

import ember
from ember import Tensor, onnx
from ember.backend import NdArray


def export_resnet(path, size, seed=0):
    import torch
    from torch import nn

    class Block(nn.Module):  # ResNet's basic block
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None if stride == 1 and cin == cout else nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = self.bn2(self.conv2(self.bn1(self.conv1(x)).relu()))
            return (y + (x if self.down is None else self.down(x))).relu()

    torch.manual_seed(seed)
    net = nn.Sequential(
        nn.Conv2d(3, 16, 7, 2, 3, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
        Block(16, 16, 1), Block(16, 32, 2), Block(32, 64, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)).eval()
    for m in net.modules():  # non-trivial BatchNorm statistics, as after training
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    torch.onnx.export(net, (torch.randn(1, 3, size, size),), path, input_names=["image"],
                      output_names=["logits"], dynamic_axes={"image": {0: "batch"}},
                      dynamo=False)


def median_ms(fn, runs):
    fn()  # warm-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e3


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=64, help="image height and width")
    p.add_argument("--runs", type=int, default=20, help="timed runs of each")
    args = p.parse_args(argv)

    import onnxruntime

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "resnet.onnx")
        export_resnet(path, args.size)
        missing = onnx.unsupported(path)
        assert missing == [], f"ember cannot run: {missing}"
        model = onnx.load(path, backend=NdArray())
        fast = ember.jit(model)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    rng = np.random.default_rng(0)
    worst = 0.0
    for batch in (1, 3):
        x = rng.standard_normal((batch, 3, args.size, args.size)).astype(np.float32)
        want = session.run(None, {"image": x})[0]
        for name, f in (("eager", model), ("ember.jit", fast)):
            for _ in range(3):  # the jit's third call is a replay
                got = f(Tensor.from_data(x)).to_numpy()
            err = float(np.abs(got - want).max())
            assert err < 1e-3, f"{name}, batch {batch}: ember and onnxruntime differ by {err}"
            worst = max(worst, err)
    x = rng.standard_normal((1, 3, args.size, args.size)).astype(np.float32)
    t = Tensor.from_data(x)
    ours = median_ms(lambda: fast(t).to_numpy(), args.runs)
    eager = median_ms(lambda: model(t).to_numpy(), args.runs)
    ref = median_ms(lambda: session.run(None, {"image": x}), args.runs)
    print(f"onnx_import: ResNet ({model.num_params():,} parameters) at {args.size}x{args.size}: "
          f"ember matches onnxruntime (max abs difference {worst:.1e}); batch 1, median of "
          f"{args.runs}: ember.jit {ours:.2f} ms, eager {eager:.2f} ms, onnxruntime (1 thread) "
          f"{ref:.2f} ms")


if __name__ == "__main__":
    main()
