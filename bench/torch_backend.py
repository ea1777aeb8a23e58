"""The Torch backend (ember/backends/torch.py) against plain PyTorch eager, side by side in one
process, on the same torch, device, threads, weights and data:

- mnist_step: Burn's MNIST model of nn_mnist.py, batch 64, forward + backward + Adam step,
  Autodiff(Torch) against torch.autograd + torch.optim.Adam.
- convnet_step: the shipped ConvNet (ember.models, `ember train`'s model), batch 128, likewise.
- matmul: one float32 product (4096^3 on CUDA, 512^3 on the CPU), ember's `a @ b` against
  torch.matmul on the same tensors; on CUDA also with tf32=True against torch's TF32 rate.

EMBER_BENCH_TORCH_DEVICE=cuda (or cuda:N) runs it on a GPU; both sides then wait for the GPU
at the end of each call. Both sides compute the same logits before timing. On CUDA, plain
PyTorch's convolutions use TF32 by default (cuDNN's setting) and ember's Torch asks for IEEE
float32 unless tf32=True: the training steps here run both in IEEE float32. Without PyTorch
the benchmark says so and measures nothing.
"""

import importlib.util
import os
from pathlib import Path

import numpy as np
from _helpers import cpus

import ember
from ember import Tensor, nn, optim
from ember.backend import Autodiff
from ember.models import ConvNet

DEVICE = os.environ.get("EMBER_BENCH_TORCH_DEVICE", "cpu")


def _torch():
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(cpus())
    return torch


def _nn_mnist():
    """nn_mnist.py's two models (ember's and PyTorch's), loaded as the runner loads modules."""
    spec = importlib.util.spec_from_file_location("ember_bench.nn_mnist_models",
                                                  Path(__file__).with_name("nn_mnist.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _torch_convnet(torch):
    tnn = torch.nn

    class TConvNet(tnn.Module):  # ember.models.ConvNet's layers, PyTorch's names
        def __init__(self):
            super().__init__()
            self.conv1, self.bn1 = tnn.Conv2d(1, 32, 3, padding=1), tnn.BatchNorm2d(32)
            self.conv2, self.bn2 = tnn.Conv2d(32, 64, 3, padding=1), tnn.BatchNorm2d(64)
            self.pool, self.relu, self.dropout = tnn.MaxPool2d(2), tnn.ReLU(), tnn.Dropout(0.25)
            self.fc1, self.fc2 = tnn.Linear(64 * 7 * 7, 128), tnn.Linear(128, 10)

        def forward(self, x):
            x = self.pool(self.relu(self.bn1(self.conv1(x))))
            x = self.pool(self.relu(self.bn2(self.conv2(x))))
            return self.fc2(self.dropout(self.relu(self.fc1(x.flatten(1)))))

    return TConvNet()


def _step_row(ctx, torch, case, ours, theirs, batch, jit=False):
    """Time one training step of each model (the same weights), after checking the logits;
    jit: ember's whole step (forward, backward, Adam) replayed by ember.jit."""
    from ember.backend import Torch
    device = torch.device(DEVICE)
    B = Autodiff(Torch(DEVICE))
    ours = ours.to(B)
    theirs = theirs.to(device)
    mm, conv = torch.backends.cuda.matmul, torch.backends.cudnn.conv
    precision = mm.fp32_precision, conv.fp32_precision
    mm.fp32_precision = conv.fp32_precision = "ieee"  # (what Torch(tf32=False) asks for)
    try:
        rng = np.random.default_rng(0)
        x = rng.random((batch, 1, 28, 28), dtype=np.float32)
        y = rng.integers(0, 10, batch)
        ex, ey = Tensor.from_data(x, backend=B), Tensor.from_data(y.astype(np.int32), backend=B)
        tx, ty = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
        ours.eval(), theirs.eval()
        np.testing.assert_allclose(ours(ex).to_numpy(), theirs(tx).detach().cpu().numpy(),
                                   rtol=1e-3, atol=1e-4)
        ours.train(), theirs.train()
        loss_fn, t_loss = nn.CrossEntropyLoss(), torch.nn.CrossEntropyLoss()
        opt, t_opt = optim.Adam(lr=1e-3), torch.optim.Adam(theirs.parameters(), lr=1e-3)
        state = {"model": ours}

        def train_step(model, x, y):
            loss = loss_fn(model(x), y)
            return opt.step(model, optim.GradientsParams.from_grads(loss.backward(), model)), loss
        step = ember.jit(train_step) if jit else train_step

        def ember_step():
            state["model"], _ = step(state["model"], ex, ey)
            B.sync()

        def torch_step():
            t_opt.zero_grad()
            t_loss(theirs(tx), ty).backward()
            t_opt.step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)

        a, b = ctx.measure(ember_step, torch_step)
    finally:
        mm.fp32_precision, conv.fp32_precision = precision
    how = "ember.jit of " if jit else ""
    return ctx.time_row(f"{case} batch {batch} train step (fwd+bwd+Adam), "
                        f"{how}Autodiff(Torch({DEVICE!r})) vs PyTorch", a, b)


def _missing(ctx):
    return ctx.row("Torch backend: PyTorch not installed", float("nan"), float("nan"), "ms")


def mnist_step(ctx):
    torch = _torch()
    if torch is None:
        yield _missing(ctx)
        return
    models = _nn_mnist()
    torch.manual_seed(0)
    theirs = models._torch_model(torch)
    ours = models.Model()
    ember.record.load_state_dict(ours, {k: v.detach().numpy()
                                        for k, v in theirs.state_dict().items()})
    yield _step_row(ctx, torch, "MNIST model", ours, theirs, 64)


def convnet_step(ctx):
    torch = _torch()
    if torch is None:
        yield _missing(ctx)
        return
    for jit in (False, True):  # each from the same fresh weights (a step trains torch's model)
        torch.manual_seed(0)
        theirs = _torch_convnet(torch)
        ours = ConvNet()
        ember.record.load_state_dict(ours, {k: v.detach().numpy()
                                            for k, v in theirs.state_dict().items()})
        yield _step_row(ctx, torch, "ConvNet", ours, theirs, 128, jit=jit)


def matmul(ctx):
    torch = _torch()
    if torch is None:
        yield _missing(ctx)
        return
    from ember.backend import Torch
    device = torch.device(DEVICE)
    n = 4096 if device.type == "cuda" else 512
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    mm = torch.backends.cuda.matmul
    for tf32 in (False, True) if device.type == "cuda" else (False,):
        B = Torch(DEVICE, tf32=tf32)
        ea, eb = Tensor.from_data(a, backend=B), Tensor.from_data(b, backend=B)
        ta, tb = ea._prim, eb._prim  # the very same tensors

        def ember_fn(B=B, ea=ea, eb=eb):
            ea @ eb
            B.sync()

        def torch_fn(tf32=tf32, ta=ta, tb=tb):
            before = mm.fp32_precision
            mm.fp32_precision = "tf32" if tf32 else "ieee"
            try:
                torch.matmul(ta, tb)
            finally:
                mm.fp32_precision = before
            if device.type == "cuda":
                torch.cuda.synchronize(device)

        e, t = ctx.measure(ember_fn, torch_fn)
        flops = 2 * n ** 3
        yield ctx.time_row(f"matmul {n}^3 float32{' tf32' if tf32 else ''}: Torch({DEVICE!r}) "
                           f"{flops / e.median / 1e12:.1f} vs torch.matmul "
                           f"{flops / t.median / 1e12:.1f} TFLOP/s", e, t)


BENCHMARKS = {"mnist_step": mnist_step, "convnet_step": convnet_step, "matmul": matmul}
