"""A TransformerEncoderLayer training step on the GPU (issue 21), side by side in one process
with PyTorch eager and the same weights: d_model 512, 8 heads, feed-forward 2048, sequence
128, batch 32, dropout 0 (so both compute the same function), a mean-squared loss against a
fixed target, Adam. ember runs `ember.jit(train_step)` on `Autodiff(Wgpu())` (one submission a
replay) and, for the gain of the recorded step, eagerly; PyTorch runs CUDA eager, fp32 with
TF32 off. Every call waits for its GPU; the table shows medians of interleaved samples.

    PYTHONPATH=core python bench/gpu_transformer.py            # --quick: a smoke run
"""

import sys

import numpy as np
from gpu_step import measure  # (bench/ is this script's folder: its first sys.path entry)

import ember
from ember import Tensor, nn, optim
from ember.backend import Autodiff, Wgpu

D_MODEL, HEADS, FF, SEQ, BATCH = 512, 8, 2048, 128, 32


def main(quick=False, batch=BATCH, seq=SEQ):
    import torch
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = False
    sync_torch = torch.cuda.synchronize if cuda else (lambda: None)
    rounds, number = (3, 1) if quick else (11, 5)
    torch.manual_seed(0)
    theirs = torch.nn.TransformerEncoderLayer(D_MODEL, HEADS, FF, dropout=0.0,
                                              batch_first=True).to(device)
    weights = {k: v.detach().cpu().numpy() for k, v in theirs.state_dict().items()}
    W = Wgpu()
    B = Autodiff(W)
    print(f"# TransformerEncoderLayer({D_MODEL}, {HEADS}, {FF}), batch {batch}, seq {seq}: "
          f"{W} vs PyTorch {torch.__version__} on {device}, fp32, TF32 off")

    def ours():
        layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, FF, dropout=0.0)
        ember.record.load_state_dict(layer, weights)
        return layer.to(B).train()

    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, seq, D_MODEL), dtype=np.float32)
    target = rng.standard_normal((batch, seq, D_MODEL), dtype=np.float32)
    ex, et = Tensor.from_data(x, backend=B), Tensor.from_data(target, backend=B)
    tx, tt = torch.from_numpy(x).to(device), torch.from_numpy(target).to(device)
    with torch.no_grad():
        want = theirs(tx).cpu().numpy()
    np.testing.assert_allclose(ours()(ex).to_numpy(), want, rtol=1e-3, atol=1e-3)

    def fresh(jit):
        opt = optim.Adam(lr=1e-4)

        def train_step(layer, x, target, opt=opt):
            loss = ((layer(x) - target) ** 2).mean()
            return opt.step(layer, loss.backward()), loss
        return {"layer": ours(), "step": ember.jit(train_step) if jit else train_step}

    states = {"eager": fresh(False), "jit": fresh(True)}

    def ember_step(name):
        s = states[name]
        s["layer"], s["loss"] = s["step"](s["layer"], ex, et)
        W.sync()

    t_opt = torch.optim.Adam(theirs.parameters(), lr=1e-4)

    def torch_step():
        t_opt.zero_grad()
        ((theirs(tx) - tt) ** 2).mean().backward()
        t_opt.step()
        sync_torch()

    t = measure({"eager": lambda: ember_step("eager"), "jit": lambda: ember_step("jit"),
                 "torch": torch_step}, rounds, number)
    losses = [states[k]["loss"].item() for k in ("eager", "jit")]  # (after as many steps)
    plan = next(iter(states["jit"]["step"]._plans.values()))
    before = W.stats()
    ember_step("jit")
    after = W.stats()
    print(f"{'case':34s} {'eager':>9s} {'jit':>9s} {'torch':>9s} {'eager/torch':>11s} "
          f"{'jit/torch':>9s}")
    print(f"{'train step (fwd+bwd+Adam)':34s} {t['eager']:8.3f}m {t['jit']:8.3f}m "
          f"{t['torch']:8.3f}m {t['eager'] / t['torch']:10.2f}x {t['jit'] / t['torch']:8.2f}x")
    print(f"# (m = ms per call) jit: {'compiled' if plan.runner else 'op by op'}, "
          f"{after['submits'] - before['submits']} submission(s) and "
          f"{after['dispatches'] - before['dispatches']} dispatches a replay; after as many "
          f"steps, losses eager {losses[0]:.6f}, jit {losses[1]:.6f}")


if __name__ == "__main__":
    if "--quick" in sys.argv:
        main(quick=True, batch=2, seq=16)
    else:
        main()
