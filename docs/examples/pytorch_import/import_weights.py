"""PyTorch weights into ember: train a small CNN in PyTorch, save its state dict, load it
into the same architecture written with ember.nn (no torch needed for that part), and check
that both give the same logits.

    python docs/examples/pytorch_import/import_weights.py             # 100 PyTorch steps
    python docs/examples/pytorch_import/import_weights.py --steps 5   # the CI-sized run

PyTorch is only used to make the file (pip install torch==2.13.0, the `torch` extra);
`record.load_pytorch` reads it without importing torch and without running pickle code.
"""

import argparse
import os
import tempfile

import numpy as np

from ember import Tensor, nn, record


class Net(nn.Module):
    """The architecture, in ember; attribute names chosen freely (key_map renames)."""

    def __init__(self, backend=None):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1, backend=backend)
        self.norm = nn.BatchNorm2d(8, backend=backend)
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(8 * 4 * 4, 3, backend=backend)

    def forward(self, x):
        return self.head(self.pool(self.norm(self.conv(x)).relu()).flatten(1))


def torch_model_and_file(path, steps, seed=0):
    import torch
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                                torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 4 * 4, 3))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):  # a toy task: which third of the image is brightest
        x = torch.rand(32, 1, 8, 8, generator=g)
        y = torch.stack([x[:, :, :, a:b].mean((1, 2, 3)) for a, b in ((0, 3), (3, 5), (5, 8))],
                        1).argmax(1)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.save({"step": steps, "model": model.state_dict(), "optim": opt.state_dict()}, path)
    return model.eval(), loss.item()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100, help="PyTorch training steps")
    args = p.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "checkpoint.pt")
        tmodel, last_loss = torch_model_and_file(path, args.steps)
        # PyTorch's names are positions in its Sequential: 0 conv, 1 batch norm, 5 linear;
        # key="model" picks the state dict out of the checkpoint dict
        net = record.load_pytorch(path, Net(), key="model", key_map={
            r"^0\.(.*)": r"conv.\1", r"^1\.(.*)": r"norm.\1", r"^5\.(.*)": r"head.\1"})
    net.eval()

    import torch
    x = np.random.default_rng(1).random((16, 1, 8, 8), dtype=np.float32)
    with torch.no_grad():
        want = tmodel(torch.from_numpy(x)).numpy()
    got = net(Tensor.from_data(x)).to_numpy()
    err = float(np.abs(got - want).max())
    assert err < 1e-4, f"ember and PyTorch logits differ by {err}"
    agree = float((got.argmax(1) == want.argmax(1)).mean())
    print(f"pytorch_import: {net.num_params():,} parameters from a {args.steps}-step PyTorch "
          f"run (last loss {last_loss:.3f}); logits max abs difference {err:.1e}, "
          f"predictions agree on {agree:.0%} of 16 inputs")


if __name__ == "__main__":
    main()
