"""Burn's MNIST example model, ember against PyTorch CPU eager, side by side in one process:
three blocks of Conv2d 3x3 + BatchNorm2d + GELU (8, 16, 24 channels), then
Linear 24*22*22 -> 32 -> GELU -> Dropout(0.5) -> Linear 32 -> 10, cross-entropy.

- train_step: batch 64, forward + backward + Adam step, Autodiff(NdArray) vs torch.
- inference: eval mode, batch 1 and 64, NdArray vs torch under no_grad.
Both sides start from the same weights (PyTorch's state dict loaded into ember with no key
map) and are checked to compute the same logits before timing. PyTorch runs with as many
threads as the machine has CPUs, as does ember's thread pool: its convolutions, GELU and large
GEMMs run in C kernels compiled on first use (ember.backends.native; the table's header says
whether they loaded), its other elementwise NumPy work on one thread.
Without PyTorch the benchmark says so and measures nothing.
"""

import numpy as np
from _helpers import cpus

import ember
from ember import Tensor, nn, optim
from ember.backend import Autodiff, NdArray


class Block(nn.Module):
    def __init__(self, c_in, c_out, backend=None):
        self.conv = nn.Conv2d(c_in, c_out, 3, backend=backend)
        self.norm = nn.BatchNorm2d(c_out, backend=backend)
        self.activation = nn.Gelu()

    def forward(self, x):
        return self.activation(self.norm(self.conv(x)))


class Model(nn.Module):
    """Burn's examples/mnist model, PyTorch's parameter names."""

    def __init__(self, backend=None):
        self.conv1 = Block(1, 8, backend)
        self.conv2 = Block(8, 16, backend)
        self.conv3 = Block(16, 24, backend)
        self.dropout = nn.Dropout(0.5)
        self.fc1 = nn.Linear(24 * 22 * 22, 32, backend=backend)
        self.fc2 = nn.Linear(32, 10, backend=backend)
        self.activation = nn.Gelu()

    def forward(self, x):
        x = self.conv3(self.conv2(self.conv1(x)))
        x = self.dropout(x.flatten(1))
        return self.fc2(self.dropout(self.activation(self.fc1(x))))


def _torch_model(torch):
    tnn = torch.nn

    class TBlock(tnn.Module):
        def __init__(self, c_in, c_out):
            super().__init__()
            self.conv, self.norm, self.activation = (tnn.Conv2d(c_in, c_out, 3),
                                                     tnn.BatchNorm2d(c_out), tnn.GELU())

        def forward(self, x):
            return self.activation(self.norm(self.conv(x)))

    class TModel(tnn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2, self.conv3 = TBlock(1, 8), TBlock(8, 16), TBlock(16, 24)
            self.dropout = tnn.Dropout(0.5)
            self.fc1, self.fc2 = tnn.Linear(24 * 22 * 22, 32), tnn.Linear(32, 10)
            self.activation = tnn.GELU()

        def forward(self, x):
            x = self.dropout(self.conv3(self.conv2(self.conv1(x))).flatten(1))
            return self.fc2(self.dropout(self.activation(self.fc1(x))))

    return TModel()


def _pair(torch, backend):
    torch.manual_seed(0)
    theirs = _torch_model(torch)
    ours = Model(backend)
    state = {k: v.detach().numpy() for k, v in theirs.state_dict().items()}
    ember.record.load_state_dict(ours, state)
    return ours, theirs


def _torch():
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(cpus())
    return torch


def _data(batch):
    rng = np.random.default_rng(0)
    return (rng.random((batch, 1, 28, 28), dtype=np.float32),
            rng.integers(0, 10, batch).astype(np.int64))


def train_step(ctx):
    torch = _torch()
    if torch is None:
        yield ctx.row("MNIST model: PyTorch not installed", float("nan"), float("nan"), "ms")
        return
    B = Autodiff(NdArray())
    ours, theirs = _pair(torch, B)
    ours.eval(), theirs.eval()  # same logits first (dropout off), then train mode for timing
    x, y = _data(64)
    np.testing.assert_allclose(ours(Tensor.from_data(x, backend=B)).to_numpy(),
                               theirs(torch.from_numpy(x)).detach().numpy(), rtol=1e-3,
                               atol=1e-4)
    ours.train(), theirs.train()
    ex, ey = Tensor.from_data(x, backend=B), Tensor.from_data(y.astype(np.int32), backend=B)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    loss_fn, t_loss = nn.CrossEntropyLoss(), torch.nn.CrossEntropyLoss()
    opt, t_opt = optim.Adam(lr=1e-3), torch.optim.Adam(theirs.parameters(), lr=1e-3)
    state = {"model": ours}

    def ember_step():
        model = state["model"]
        grads = loss_fn(model(ex), ey).backward()
        state["model"] = opt.step(model, optim.GradientsParams.from_grads(grads, model))

    def torch_step():
        t_opt.zero_grad()
        t_loss(theirs(tx), ty).backward()
        t_opt.step()

    a, b = ctx.measure(ember_step, torch_step)
    yield ctx.time_row("MNIST model batch 64 train step (fwd+bwd+Adam), Autodiff(NdArray) "
                       "vs PyTorch", a, b)


def inference(ctx):
    torch = _torch()
    if torch is None:
        yield ctx.row("MNIST model: PyTorch not installed", float("nan"), float("nan"), "ms")
        return
    ours, theirs = _pair(torch, NdArray())
    ours.eval(), theirs.eval()
    for batch in (1, 64):
        x, _ = _data(batch)
        ex, tx = Tensor.from_data(x), torch.from_numpy(x)
        np.testing.assert_allclose(ours(ex).to_numpy(), theirs(tx).detach().numpy(),
                                   rtol=1e-3, atol=1e-4)

        def ember_fn(ex=ex):
            with ember.no_grad():
                return ours(ex).to_numpy()

        def torch_fn(tx=tx):
            with torch.no_grad():
                return theirs(tx).numpy()

        a, b = ctx.measure(ember_fn, torch_fn)
        yield ctx.time_row(f"MNIST model inference batch {batch}, NdArray vs PyTorch", a, b)


BENCHMARKS = {"train_step": train_step, "inference": inference}
