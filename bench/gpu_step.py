"""The MNIST ConvNet on the GPU (issue 21), side by side in one process with the same weights:
ember eager on Wgpu, ember.jit's replay on Wgpu (a compiled plan: one submission per call) and
PyTorch eager (CUDA where there is one, fp32 with TF32 off; else the CPU).

- train step, batch 128: forward, backward and Adam (BatchNorm in training, dropout 0.25);
  eager is `Autodiff(Wgpu())` op by op, jit is `ember.jit(train_step)` of API.md's form.
- inference, batch 1 and 256: the model in eval mode, eager and under ember.jit.
- "fused": ember.jit on `Autodiff(Fusion(Wgpu()))`: Fusion.compile has Wgpu record the fused
  kernels (elementwise chains, epilogues, row kernels) of one run, replayed as one submission.
- "jit-ops": ember.jit replaying op by op (the plan's compiled runner dropped), which parts
  the gain of whole-step capture (no Python of modules, autodiff and the optimizer) from the
  gain of the plan encoded once (one submission, no Python per op).

Every call ends waiting for the GPU (B.sync(), torch.cuda.synchronize()). Each case checks
that ember's and PyTorch's logits agree first. Samples of the three are interleaved, their
order rotating; the table shows medians (ms per call) and ratios against PyTorch.

    PYTHONPATH=core python bench/gpu_step.py            # --quick: fewer, shorter samples
    PYTHONPATH=core python bench/gpu_step.py --quick 8,1,8   # a smoke run (train, infer, infer)
    PYTHONPATH=core python bench/gpu_step.py --profile   # + the compiled step's GPU time by kernel

Measured on the H200 (2026-12-02, `python3 bench/gpu_step.py --profile`, ms per call), before
(conv.wgsl's direct kernels, BatchNorm's sums in 1024-element chunks a thread) and after
(conv_gemm.wgsl's implicit GEMMs, autotuned; sums in 4096-element chunks a workgroup):

    case                  jit before  jit after  PyTorch  after/PyTorch
    train step, batch 128   13.735     4.352     2.535      1.72x
    inference, batch 1       0.978     0.842     0.367      2.29x
    inference, batch 256     2.525     1.107     0.546      2.03x

The compiled step's GPU time went from 11.67 to 3.11 ms (sums 4.73 -> 0.36 ms, convolutions
4.29 -> 0.45 ms); its host encode and submit take 1.08 ms for 167 dispatches.

--profile times each dispatch of the compiled plans (inference and training, jit and fused)
alone (repeated in one submission, less one submission's cost) and prints the sums by kernel,
each dispatch, the whole plan's GPU time and the host time of encoding and submitting it, and
the floor: an empty wait, one tiny kernel queued and waited for.
"""

import statistics
import sys
import time

import numpy as np

import ember
from ember import Tensor, nn, optim
from ember.backend import Autodiff, Fusion, Wgpu
from ember.models import ConvNet


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


def op_by_op(jit):
    """ember.jit's replay without the backend's compiled runner."""
    def call(*args):
        for plan in jit._plans.values():
            plan.runner = None
        return jit(*args)
    return call


def measure(fns, rounds, number):
    """Median ms per call of each function, their samples interleaved (order rotating)."""
    for f in fns.values():  # warm: captures, compiles, autotuning, cuDNN's choices
        for _ in range(3):
            f()
    samples = {k: [] for k in fns}
    names = list(fns)
    for r in range(rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            start = time.perf_counter()
            for _ in range(number):
                fns[k]()
            samples[k].append((time.perf_counter() - start) / number * 1e3)
    return {k: statistics.median(v) for k, v in samples.items()}


def _label(key):
    """A kernel key's op or family, and its shader, entry or mode where that is a short name."""
    key = key if type(key) is tuple else (key,)
    head = str(getattr(key[0], "name", key[0]))
    if head == "conv_gemm":  # its mode, tile and vec4s a thread
        tm, tn, ra, rc = key[2]
        return f"conv_gemm/{key[1]}/{tm}x{tn}/{4 * ra}x{4 * rc}"
    return head + (f"/{key[1]}" if len(key) > 1 and type(key[1]) in (str, int) else "")


def floor(W):
    """ms of a wait with nothing queued, and of one tiny kernel submitted and waited for."""
    bridge = W.device.bridge
    x = Tensor.from_data(np.ones(4, np.float32), backend=W)
    W.sync()

    def best(f, n=20):
        t = []
        for _ in range(n):
            start = time.perf_counter()
            f()
            t.append(time.perf_counter() - start)
        return min(t) * 1e3, statistics.median(t) * 1e3
    wait, tiny = best(bridge.wait), best(lambda: ((x + 1), W.sync()))
    print(f"# floor: an empty wait {wait[0]:.3f} ms (median {wait[1]:.3f}), one tiny kernel "
          f"queued and waited for {tiny[0]:.3f} ms (median {tiny[1]:.3f})")


def profile(W, call, title, repeat=20, each=False):
    """The compiled plan's dispatches timed one by one (see the module's doc)."""
    device, bridge = W.device, W.device.bridge
    names = {id(k.pipeline): _label(key) for key, k in device.kernels.items()}
    seen = []
    submit = device.submit_plan
    device.submit_plan = lambda meta, commands: (seen.append((bytes(meta), commands)),
                                                 submit(meta, commands))
    call()
    device.submit_plan = submit
    if not seen:
        print(f"# profile {title}: no compiled plan was submitted")
        return
    meta, commands = seen[-1]

    def timed(cmds, n=5):
        best = float("inf")
        for _ in range(n):
            W.sync()
            start = time.perf_counter()
            bridge.submit(meta, cmds)
            bridge.wait()
            best = min(best, time.perf_counter() - start)
        return best * 1e3

    whole = timed(commands)
    host = []
    for _ in range(20):
        W.sync()
        start = time.perf_counter()
        bridge.submit(meta, commands)
        host.append((time.perf_counter() - start) * 1e3)
    W.sync()
    by, rows = {}, []
    for c in commands:
        one, many = timed([c]), timed([c] * (repeat + 1))
        name = names.get(id(c[0]), "?")
        ms = max(0.0, many - one) / repeat
        count, total = by.get(name, (0, 0.0))
        by[name] = (count + 1, total + ms)
        rows.append((name, c[3], ms))
    total = sum(ms for _, ms in by.values())
    print(f"# profile {title}: whole plan {whole:.3f} ms GPU+submit+wait, encode+submit on the "
          f"host {statistics.median(host):.3f} ms, {len(commands)} dispatches; sum of "
          f"dispatches alone {total:.3f} ms")
    for name, (count, ms) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        print(f"#   {name:40s} {count:4d} x  {ms:8.3f} ms  {100 * ms / total:5.1f}%")
    if each:
        for i, (name, groups, ms) in enumerate(rows):
            print(f"#     {i:3d} {name:40s} {str(tuple(groups)):18s} {ms:8.4f} ms")


def main(quick=False, batches=(128, 1, 256), profiling=False):
    import torch
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    sync_torch = torch.cuda.synchronize if cuda else (lambda: None)
    rounds, number = (3, 2) if quick else (15, 10)

    W = Wgpu()
    B = Autodiff(W)
    FW = Fusion(W)  # "fused": the same jit on Autodiff(Fusion(Wgpu())), Fusion.compile's plan
    FB = Autodiff(FW)
    torch.manual_seed(0)
    theirs = _torch_convnet(torch).to(device)
    weights = {k: v.detach().cpu().numpy() for k, v in theirs.state_dict().items()}

    def ours(backend=B):
        model = ConvNet()
        ember.record.load_state_dict(model, weights)
        return model.to(backend)

    print(f"# {W}  vs  PyTorch {torch.__version__} on {device}"
          f"{' (' + torch.cuda.get_device_name() + ')' if cuda else ''}, fp32, TF32 off")
    rows = []

    # ---- inference --------------------------------------------------------------------------
    theirs.eval()
    model = ours().valid()  # eval mode, on Wgpu itself (no gradient tracking)
    fast, slow = ember.jit(model), op_by_op(ember.jit(model))
    fused = ember.jit(ours(FB).valid())
    for batch in batches[1:]:
        x = np.random.default_rng(batch).random((batch, 1, 28, 28), dtype=np.float32)
        ex, tx = Tensor.from_data(x, backend=W), torch.from_numpy(x).to(device)
        fx = Tensor.from_data(x, backend=FW)
        with torch.no_grad():
            want = theirs(tx).cpu().numpy()
        np.testing.assert_allclose(model(ex).to_numpy(), want, rtol=1e-3, atol=1e-4)
        for _ in range(3):
            got = fast(ex)
        np.testing.assert_allclose(got.to_numpy(), want, rtol=1e-3, atol=1e-4)
        for _ in range(3):
            got = fused(fx)
        np.testing.assert_allclose(got.to_numpy(), want, rtol=1e-3, atol=1e-4)

        def torch_infer(tx=tx):
            with torch.no_grad():
                theirs(tx)
            sync_torch()

        t = measure({"eager": lambda ex=ex: (model(ex), W.sync()),
                     "jit-ops": lambda ex=ex: (slow(ex), W.sync()),
                     "jit": lambda ex=ex: (fast(ex), W.sync()),
                     "fused": lambda fx=fx: (fused(fx), FW.sync()), "torch": torch_infer},
                    rounds, number * (5 if batch == 1 else 1))
        rows.append((f"inference batch {batch}", t))
        if profiling:
            profile(W, lambda ex=ex: fast(ex), f"inference batch {batch}, jit", each=True)
            profile(W, lambda fx=fx: fused(fx), f"inference batch {batch}, fused", each=True)

    # ---- the training step ------------------------------------------------------------------
    batch = batches[0]
    rng = np.random.default_rng(0)
    x = rng.random((batch, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, batch)
    inputs = {b: (Tensor.from_data(x, backend=b), Tensor.from_data(y.astype(np.int32), backend=b))
              for b in (B, FB)}
    tx, ty = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
    theirs.train()

    def ember_step(states, name):
        s = states[name]
        s["model"], s["loss"] = s["step"](s["model"], *inputs[s["backend"]])
        s["backend"].sync()

    t_opt = torch.optim.Adam(theirs.parameters(), lr=1e-3)
    t_loss = torch.nn.CrossEntropyLoss()

    def fresh(name):
        opt = optim.Adam(lr=1e-3)

        def train_step(model, x, y, opt=opt):  # API.md's form
            loss = nn.loss.cross_entropy(model(x), y)
            gp = optim.GradientsParams.from_grads(loss.backward(), model)
            return opt.step(model, gp), loss

        step = train_step if name == "eager" else ember.jit(train_step)
        backend = FB if name == "fused" else B
        return {"model": ours(backend).train(), "backend": backend,
                "step": op_by_op(step) if name == "jit-ops" else step}

    losses = {}
    for name in ("eager", "jit", "fused"):  # the same training eager and replayed: same losses
        ember.seed(0)
        states = {name: fresh(name)}
        for _ in range(6):
            ember_step(states, name)
            losses.setdefault(name, []).append(states[name]["loss"].item())
    same = np.max(np.abs(np.subtract(losses["eager"], losses["jit"])))
    same_fused = np.max(np.abs(np.subtract(losses["eager"], losses["fused"])))
    states = {name: fresh(name) for name in ("eager", "jit-ops", "jit", "fused")}

    def torch_step():
        t_opt.zero_grad()
        t_loss(theirs(tx), ty).backward()
        t_opt.step()
        sync_torch()

    t = measure({"eager": lambda: ember_step(states, "eager"),
                 "jit-ops": lambda: ember_step(states, "jit-ops"),
                 "jit": lambda: ember_step(states, "jit"),
                 "fused": lambda: ember_step(states, "fused"),
                 "torch": torch_step}, rounds, number)
    rows.insert(0, (f"train step batch {batch} (fwd+bwd+Adam)", t))
    plan = next(iter(states["jit"]["step"]._plans.values()))
    runner = plan.runner[0] if plan.runner is not None else None
    before = W.stats()
    ember_step(states, "jit")
    after = W.stats()
    loss = states["jit"]["loss"].item()

    print(f"{'case':38s} {'eager':>9s} {'jit-ops':>9s} {'jit':>9s} {'fused':>9s} {'torch':>9s} "
          f"{'eager/torch':>11s} {'jit/torch':>9s} {'fused/torch':>11s} {'eager/jit':>9s} "
          f"{'ops/jit':>8s}")
    for case, t in rows:
        print(f"{case:38s} {t['eager']:8.3f}m {t['jit-ops']:8.3f}m {t['jit']:8.3f}m "
              f"{t['fused']:8.3f}m {t['torch']:8.3f}m {t['eager'] / t['torch']:10.2f}x "
              f"{t['jit'] / t['torch']:8.2f}x {t['fused'] / t['torch']:10.2f}x "
              f"{t['eager'] / t['jit']:8.2f}x {t['jit-ops'] / t['jit']:7.2f}x")
    print(f"# (m = ms per call) jit train step: {'compiled' if runner else 'op by op'}, "
          f"{len(runner.commands) if runner else '-'} dispatches in "
          f"{after['submits'] - before['submits']} submission(s) per replay, "
          f"{after['reads'] - before['reads']} reads; loss after the runs {loss:.4f}; "
          f"6 steps eager vs jit from one seed: losses differ by at most {same:.3g} "
          f"(fused: {same_fused:.3g})")
    if profiling:
        floor(W)
        profile(W, lambda: ember_step(states, "jit"), f"train step batch {batch}, jit",
                each=True)
        profile(W, lambda: ember_step(states, "fused"), f"train step batch {batch}, fused",
                each=True)


if __name__ == "__main__":
    sizes = [a for a in sys.argv[1:] if not a.startswith("--")]
    main("--quick" in sys.argv, tuple(int(b) for b in sizes[0].split(",")) if sizes else
         (128, 1, 256), "--profile" in sys.argv)
