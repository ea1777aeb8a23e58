"""Training on Fashion-MNIST: ember (Autodiff(NdArray)) against PyTorch CPU eager, side by
side, with the same model, batch size, optimizer and batches.

The model is ember.models.ConvNet (the shipped models' architecture: conv 32 + BatchNorm +
ReLU + max-pool, conv 64 + BatchNorm + ReLU + max-pool, Linear 3136 -> 128, ReLU, Dropout,
Linear 128 -> 10), batch 128, Adam(lr=1e-3), cross-entropy; both sides start from the same
weights (ember's state dict loaded into torch) and read the same shuffled batches of the
official training set from ember.data.DataLoader.

One epoch is 469 batches; the benchmark times a subset (BATCHES, 10 with --quick) in chunks
of CHUNK batches, alternating ember and PyTorch chunks so that background load hits both
alike, and extrapolates the epoch from the median chunk. Data loading is inside the timed loop
for both (the same loader). PyTorch runs with as many threads as the machine has CPUs.
Without PyTorch or without the data set, it says so and measures nothing.
"""

import time

import numpy as np
from _helpers import cpus

BATCH, LR, BATCHES, CHUNK, EPOCH_BATCHES = 128, 1e-3, 100, 10, 469


def _ember_side(dataset):
    from ember import Tensor, data, nn, optim
    from ember.backend import Autodiff, NdArray
    from ember.models import ConvNet
    backend = Autodiff(NdArray())
    model = ConvNet(backend=backend)
    opt = optim.Adam(lr=LR)
    loss_fn = nn.CrossEntropyLoss()
    loader = data.DataLoader(dataset, batch_size=BATCH, shuffle=True, seed=0, numpy=True)
    state = {"model": model, "batches": loader.batches(0)}

    def step():
        x, y = next(state["batches"])
        x, y = Tensor.from_data(x, backend=backend), Tensor.from_data(y.astype(np.int32),
                                                                      backend=backend)
        loss = loss_fn(state["model"](x), y)
        state["model"] = opt.step(state["model"], loss.backward())
        return float(loss.item())
    return model, step


def _torch_side(torch, ember_model, dataset):
    from ember import data, record
    tnn = torch.nn
    cfg = ember_model.config
    c1, c2 = cfg["channels"]

    class TConvNet(tnn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.bn1 = tnn.Conv2d(1, c1, 3, padding=1), tnn.BatchNorm2d(c1)
            self.conv2, self.bn2 = tnn.Conv2d(c1, c2, 3, padding=1), tnn.BatchNorm2d(c2)
            self.fc1, self.fc2 = tnn.Linear(c2 * 49, cfg["hidden"]), tnn.Linear(cfg["hidden"], 10)
            self.dropout = tnn.Dropout(cfg["dropout"])

        def forward(self, x):
            x = torch.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
            x = torch.max_pool2d(torch.relu(self.bn2(self.conv2(x))), 2)
            return self.fc2(self.dropout(torch.relu(self.fc1(x.flatten(1)))))

    model = TConvNet()
    model.load_state_dict({k: torch.from_numpy(np.array(v))
                           for k, v in record.state_dict(ember_model).items()})
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    loader = data.DataLoader(dataset, batch_size=BATCH, shuffle=True, seed=0, numpy=True)
    batches = loader.batches(0)

    def step():
        x, y = next(batches)
        x, y = torch.from_numpy(x), torch.from_numpy(y)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return float(loss.item())
    return step


def epoch(ctx):
    try:
        import torch
    except ImportError:
        yield ctx.row("Fashion-MNIST ConvNet training: PyTorch not installed "
                      "(pip install torch==2.13.0)", float("nan"), float("nan"), "ms")
        return
    from ember import data
    try:
        dataset = data.FashionMNIST("train")
    except data.DataError as e:
        yield ctx.row(f"Fashion-MNIST ConvNet training: {e}", float("nan"), float("nan"), "ms")
        return
    torch.set_num_threads(cpus())
    torch.manual_seed(0)
    ember_model, ours = _ember_side(dataset)
    theirs = _torch_side(torch, ember_model, dataset)
    ours(), theirs()  # first steps: allocations, caches (not timed)
    batches = 10 if ctx.quick else BATCHES
    chunk = min(CHUNK, batches)
    samples = {"ember": [], "torch": []}
    losses = {"ember": [], "torch": []}
    for k in range(batches // chunk):
        order = [("ember", ours), ("torch", theirs)]
        for name, fn in order if k % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            for _ in range(chunk):
                losses[name].append(fn())
            samples[name].append((time.perf_counter() - start) / chunk)
    ours_ms, theirs_ms = (float(np.median(samples[n])) * 1e3 for n in ("ember", "torch"))
    mins = {n: min(samples[n]) * 1e3 for n in samples}
    yield ctx.row(f"Fashion-MNIST ConvNet train step, batch {BATCH} (Adam; median of "
                  f"{len(samples['ember'])} chunks of {chunk} batches)", ours_ms, theirs_ms,
                  "ms", ember_min=mins["ember"], reference_min=mins["torch"],
                  batches=len(losses["ember"]),
                  samples_s={n: samples[n] for n in samples})
    yield ctx.row(f"one epoch (469 batches of {BATCH}), extrapolated from {batches} batches",
                  ours_ms * EPOCH_BATCHES / 1e3, theirs_ms * EPOCH_BATCHES / 1e3, "s",
                  ember_loss_last=float(np.mean(losses["ember"][-chunk:])),
                  torch_loss_last=float(np.mean(losses["torch"][-chunk:])))


def summarize(rows):
    lines = []
    for row in rows:
        if "ember_loss_last" in row:
            lines.append(f"mean loss over the last timed chunk: ember "
                         f"{row['ember_loss_last']:.3f}, PyTorch {row['torch_loss_last']:.3f} "
                         "(same start, same batches: they should be close)")
    return lines


BENCHMARKS = {"epoch": epoch}
