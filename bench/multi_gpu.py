"""Data-parallel training on 1 and 2 GPUs (issue 27): samples per second, the scaling factor,
and the losses of the 2-GPU run checked against a 1-GPU run at the same global batch.

    python bench/multi_gpu.py --gpu          # a machine with 2 GPUs (nvidia-h200-x2)
    python bench/multi_gpu.py --cpu          # the same runs, small, on the CPU: a check
    python bench/multi_gpu.py --gpu --model resnet18 --kind torch --steps 40
    python bench/multi_gpu.py --one-gpu      # full sizes, every process on GPU 0: a check of
                                             # the command on a machine with one GPU

Models: the shipped ConvNet (MNIST shapes, dropout off so that runs can be compared) and a
ResNet-18 (CIFAR layout: 3x3 stem, [2, 2, 2, 2] basic blocks of 64-512 channels, 32x32
inputs, 11.2M parameters), at 256 images per GPU (--cpu: small widths and batches). Kinds:

- torch: Autodiff(Torch("cuda:i")), one process per GPU under torchrun, gradients
  all-reduced by NCCL in the GPUs' memory (--cpu: Torch("cpu") and gloo);
- wgpu: Autodiff(Wgpu()) on adapter i, one process per GPU under torchrun, gradients
  all-reduced by gloo through host memory (--cpu: lavapipe in each process).

Each case runs four workers, each in its own process(es): the 2-GPU run (torchrun, global batch
2 x per-GPU), the same with the all-reduce after backward instead of overlapping it (the
overlap's gain), the 1-GPU run at the per-GPU batch (the throughput reference), and a 1-GPU run
at the global batch on two virtual devices of that GPU (Learner(devices=[B, B])), whose
losses both 2-GPU runs must match: the same shards, so BatchNorm normalizes each half of the
batch by its own statistics in both, as DDP without SyncBatchNorm does. Steps: the first
--warmup are not timed; samples/s = the global batch / the median step time of process 0
(every step reads its loss back, so the GPUs' queues are drained at each). NCCL_NVLS_ENABLE=0
keeps NVLink multicast off, as the device machines require.

--one-gpu runs the same cases at the same sizes with every process on the first GPU (two
processes sharing it: its "scaling" column measures sharing one GPU, not a second one). NCCL
refuses two ranks on one GPU ("Duplicate GPU detected"), so the torch kind's 2-process runs
are left out there: its rows have the 1-GPU run and the 2-virtual-device losses only.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.abspath(__file__)
PER_GPU = {"gpu": {"convnet": 256, "resnet18": 256}, "cpu": {"convnet": 16, "resnet18": 8}}


# ---- the models -----------------------------------------------------------------------------
def _resnet18(width, image, backend=None):
    from ember import nn

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False,
                                   backend=backend)
            self.bn1 = nn.BatchNorm2d(cout, backend=backend)
            self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False, backend=backend)
            self.bn2 = nn.BatchNorm2d(cout, backend=backend)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(
                    nn.Conv2d(cin, cout, 1, stride=stride, bias=False, backend=backend),
                    nn.BatchNorm2d(cout, backend=backend))

        def forward(self, x):
            y = self.bn1(self.conv1(x)).relu()
            y = self.bn2(self.conv2(y))
            return (y + (x if self.down is None else self.down(x))).relu()

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, width, 3, padding=1, bias=False, backend=backend)
            self.bn = nn.BatchNorm2d(width, backend=backend)
            blocks, cin = [], width
            for i, cout in enumerate([width, width * 2, width * 4, width * 8]):
                blocks += [Block(cin, cout, 1 if i == 0 else 2), Block(cout, cout, 1)]
                cin = cout
            self.blocks = nn.Sequential(*blocks)
            self.fc = nn.Linear(cin, 10, backend=backend)

        def forward(self, x):
            x = self.blocks(self.bn(self.stem(x)).relu())
            return self.fc(x.mean_dim((2, 3)).flatten(1))

    return ResNet18(), (3, image, image)


def _model(name, size):
    from ember.models import ConvNet
    if name == "convnet":
        return ConvNet(dropout=0.0), (1, 28, 28)
    return _resnet18(64, 32) if size == "gpu" else _resnet18(8, 16)


# ---- one worker: a training run, its step times and losses ---------------------------------
def _wgpu(index, size):
    """Wgpu() on the index-th GPU adapter: ember picks one adapter per process (by
    EMBER_WGPU_ADAPTER's text, and two H200s read alike), so pick by position here."""
    from ember.backend import Wgpu
    from ember.backends.wgpu import bridge_native

    def pick(wgpu):
        adapters = [a for a in wgpu.gpu.enumerate_adapters_sync()
                    if (a.info.get("adapter_type", "").lower() == "cpu") == (size == "cpu")
                    and a.info.get("backend_type", "").lower() == "vulkan"]
        i = 0 if size == "cpu" else index  # (--cpu: every process on the one lavapipe)
        if i >= len(adapters):
            raise SystemExit(f"multi_gpu: no Vulkan adapter {i} (found {len(adapters)})")
        return adapters[i]
    bridge_native._pick_adapter = pick  # (this process's device is made by the first Wgpu())
    return Wgpu()


def _backend(kind, size, index):
    if kind == "torch":
        from ember.backend import Torch
        return Torch("cpu" if size == "cpu" else f"cuda:{index}")
    return _wgpu(index, size)


def worker(job):
    import ember
    from ember import data, optim, train

    a = argparse.Namespace(**json.loads(job))
    local = 0 if a.one_gpu else int(os.environ.get("LOCAL_RANK", "0"))
    backend = _backend(a.kind, a.size, local)
    devices = [backend] + [_backend(a.kind, a.size, local) for _ in range(a.virtual - 1)]
    ember.seed(0)
    model, shape = _model(a.model, a.size)
    n = a.batch * a.steps  # (two generators: the first n items are the same for any n)
    images = np.random.default_rng(0).random((n, *shape), dtype=np.float32)
    labels = np.random.default_rng(1).integers(0, 10, n).astype(np.int32)
    loader = data.DataLoader(data.InMemoryDataset(images, labels), batch_size=a.batch)

    class Timer(train.Dashboard):
        def __init__(self):
            self.times, self.losses = [], []

        def step(self, learner, split):
            if split == "train":
                self.times.append(time.perf_counter())
                self.losses.append(next(m.last for m in learner.metrics["train"]
                                        if m.name == "Loss"))

    timer = Timer()
    learner = train.Learner(model, optim.SGD(lr=0.01, momentum=0.9), dashboard=timer,
                            devices=devices if len(devices) > 1 else None,
                            backend=backend if len(devices) == 1 else None)
    learner._overlap = a.overlap  # (the switch measured here; not an API)
    start = time.perf_counter()
    learner.fit(loader, epochs=1)
    if learner.rank == 0:
        with open(a.out, "w") as f:
            json.dump({"times": [start, *timer.times], "losses": timer.losses,
                       "batch": a.batch, "backend": str(backend)}, f)


# ---- the driver ------------------------------------------------------------------------------
def _run(args, kind, model, batch, steps, virtual=1, processes=1, overlap=True):
    out = tempfile.NamedTemporaryFile(suffix=".json", delete=False).name
    job = {"kind": kind, "model": model, "batch": batch, "steps": steps, "virtual": virtual,
           "out": out, "size": "cpu" if args.cpu else "gpu", "overlap": overlap,
           "one_gpu": args.one_gpu}
    cmd = [HERE, "--worker", json.dumps(job)]  # (one argument: torchrun reads options too)
    env = dict(os.environ, NCCL_NVLS_ENABLE="0")
    if args.cpu:  # every run one core per process (torchrun's default), the 1-GPU run too
        env["OMP_NUM_THREADS"] = "1"
    if processes > 1:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cmd = ["-m", "torch.distributed.run", "--nproc-per-node", str(processes),
               "--master-addr", "127.0.0.1", "--master-port", str(port), *cmd]
    else:
        for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "LOCAL_RANK"):
            env.pop(k, None)
    proc = subprocess.run([sys.executable, *cmd], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"multi_gpu: worker failed ({' '.join(cmd)}):\n{proc.stdout}\n"
                         f"{proc.stderr[-4000:]}")
    with open(out) as f:
        result = json.load(f)
    os.unlink(out)
    steps = np.diff(result["times"])[args.warmup:]
    if len(steps):  # (the reference run's few steps are for its losses alone)
        result["samples_s"] = result["batch"] / statistics.median(steps)
    return result


def main(args):
    size = "cpu" if args.cpu else "gpu"
    steps = args.steps or (6 if args.cpu else 30)
    args.warmup = args.warmup if args.warmup is not None else 2 if args.cpu else 5
    check = min(args.check, steps)
    rows = []
    for model in args.model:
        for kind in args.kind:
            per = PER_GPU[size][model]
            print(f"{model}, {kind}: 1 GPU, 2 GPUs, reference losses ...", file=sys.stderr,
                  flush=True)
            one = _run(args, kind, model, per, steps)
            ref = _run(args, kind, model, 2 * per, check, virtual=2)
            if args.one_gpu and kind == "torch":  # (NCCL: one rank per GPU)
                rows.append((model, kind, one["backend"], per, one["samples_s"], None, None,
                             None))
                continue
            two = _run(args, kind, model, 2 * per, steps, processes=2)
            after = _run(args, kind, model, 2 * per, steps, processes=2, overlap=False)
            diff = max(abs(a - b) / max(abs(b), 1e-12)
                       for run in (two, after) for a, b in zip(run["losses"][:check],
                                                               ref["losses"]))
            rows.append((model, kind, two["backend"], per, one["samples_s"], two["samples_s"],
                         after["samples_s"], diff))
    where = ("CPU check (--cpu)" if args.cpu else
             "one GPU shared by both processes (--one-gpu)" if args.one_gpu else "GPU")
    print(f"\ndata parallel, {steps} steps ({args.warmup} untimed), {where}")
    print(f"{'model':<9} {'kind':<6} {'backend':<34} {'batch/GPU':>9} {'1 GPU':>9} "
          f"{'2 GPUs':>9} {'scaling':>8} {'2, after':>9} {'overlap':>8}  losses vs 1 GPU "
          f"(global batch, {check} steps)")
    failed = False
    for model, kind, backend, per, s1, s2, s2after, diff in rows:
        if s2 is None:
            print(f"{model:<9} {kind:<6} {backend[:34]:<34} {per:>9} {s1:>9.0f}  (2 processes "
                  "left out: NCCL takes one rank per GPU)")
            continue
        ok = diff <= args.rtol
        failed |= not ok
        print(f"{model:<9} {kind:<6} {backend[:34]:<34} {per:>9} {s1:>9.0f} {s2:>9.0f} "
              f"{s2 / s1:>7.2f}x {s2after:>9.0f} {s2 / s2after:>7.2f}x  max rel diff "
              f"{diff:.1e} {'ok' if ok else 'DIFFERENT'}")
    print("samples/s; scaling = 2-GPU samples/s / 1-GPU samples/s; '2, after': 2 GPUs with "
          "the all-reduce after backward (not overlapping it); overlap: the gain of overlapping")
    return 1 if failed else 0


def cli():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":  # started by main(), or by torchrun
        return worker(sys.argv[2])
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--gpu", action="store_true", help="full sizes, on 2 GPUs")
    where.add_argument("--cpu", action="store_true", help="small sizes on the CPU (a check)")
    where.add_argument("--one-gpu", action="store_true",
                       help="full sizes, every process on GPU 0 (a check on a 1-GPU machine)")
    p.add_argument("--model", nargs="+", choices=["convnet", "resnet18"],
                   default=["convnet", "resnet18"])
    p.add_argument("--kind", nargs="+", choices=["torch", "wgpu"], default=["torch", "wgpu"])
    p.add_argument("--steps", type=int, default=None, help="steps per run (30; --cpu 6)")
    p.add_argument("--warmup", type=int, default=None, help="untimed first steps (5; --cpu 2)")
    p.add_argument("--check", type=int, default=5, help="steps whose losses are compared")
    p.add_argument("--rtol", type=float, default=1e-4, help="losses' relative tolerance")
    return main(p.parse_args())


BENCHMARKS = {}  # ember bench runs none: this is a driver of its own, of several processes

if __name__ == "__main__":
    sys.exit(cli())
