"""ember.autotune on Wgpu: each kernel tuned against its default (untuned), on a GPU side by
side with PyTorch (CUDA, fp32, TF32 off).

    ember bench autotune                 # the runner's table: tuned / untuned on a small product
    python bench/autotune.py --gpu       # the GPU run: ms of ember tuned, untuned and torch for
                                         # 7 matmul and 3 reduction shapes; torch / ember; the
                                         # geometric mean of untuned / tuned; the first call's
                                         # tuning time; the cost of a cached choice
    python bench/autotune.py --gpu --each     # also every matmul candidate's time, forced,
                                              # and the fastest three a shape
    python bench/autotune.py --gpu --epilogue # relu(x @ w + b) against the bare product

Shapes are MxNxK (C[M, N] = A[M, K] @ B[K, N]). A row first checks ember's result against
NumPy's (matmuls on the first rows). Times are per call, calls queued back to back with one
sync, best of 3 (each of about 0.1 s), torch's the same way (torch.cuda.synchronize): "eager"
is ember's whole call (Python's cost included: ~0.08 ms or more, so short products are
host-bound there), "kernels" its kernels alone: one call's dispatches recorded, then
dispatched again over the same buffers (_kernel_time: serialized on the GPU as torch's calls
are on its stream; ~5 us of Python a dispatch, off the GPU's path). torch's queued calls are
its kernels too (its launch costs less than its shortest kernel here). The first-call column
is one synced call of a fresh key (tuning included, the kernels' compiling too) and the cached
column one synced call after the in-process memory is cleared (the choice read from the JSON
file), both less one steady call. "choice": what the tuner kept.

Measured 2026-12-02 on one NVIDIA H200 (Vulkan, wgpu-py 0.32.0; torch 2.11, TF32 off),
`python3 bench/autotune.py --gpu` on branch s4-mm (commit d7fc7ab), ms per call:

                                 eager (whole calls)            | kernels alone
    case                         tuned untuned torch  /tuned gain | tuned untuned /tuned gain
    (/tuned: torch's time over ember's tuned one; gain: untuned over tuned)
    matmul 1024^3                0.128  0.234  0.056  0.44x 1.83x |  0.071  0.114  0.79x 1.60x
    matmul 2048^3                0.475  0.485  0.341  0.72x 1.02x |  0.413  0.411  0.82x 0.99x
    matmul 4096^3                3.078  3.215  2.684  0.87x 1.04x |  3.013  3.173  0.89x 1.05x
    matmul 1000^3                0.117  0.162  0.051  0.43x 1.39x |  0.071  0.118  0.71x 1.67x
    matmul 4096x4096x64          0.115  0.111  0.069  0.60x 0.97x |  0.078  0.082  0.89x 1.06x
    matmul 64x4096x4096          0.192  0.451  0.057  0.29x 2.35x |  0.074  0.431  0.77x 5.84x
    matmul 256^3 batch 32        0.101  0.094  0.029  0.28x 0.93x |  0.041  0.042  0.69x 1.02x
    matmul 4096x64x4096 (extra)  0.166  0.469  0.061  0.37x 2.83x |  0.098  0.415  0.62x 4.22x
    sum of 4096x4096             0.139  0.241  0.023  0.16x 1.73x |  0.054  0.135  0.43x 2.52x
    column sums 4096x4096        0.157  0.163  0.028  0.18x 1.04x |  0.095  0.136  0.29x 1.42x
    row max of 64x262144         0.143  0.142  0.029  0.20x 1.00x |  0.069  0.077  0.42x 1.12x
    geometric mean gain over the 10 shapes (not the extra): eager 1.26x, kernels 1.53x
    choices: t64x128k16, tiled, t64x128k16, p64x128k16, t128x128k8, t64x128k16/s8,
    d128x128k8, t64x64k16/s8; g2048, c32, g32
    first calls (tuning, compiling included) 0.19 - 6.6 s (the first shape compiles ~40
    kernels); a cached choice read from the file 0.3 - 0.9 ms (one 4.7 ms outlier)

The same run's eager columns are host-bound below ~0.1 ms (the dispatch path, not the
kernels). The earlier "kernels" column (8 products in one ember.jit replay) let the GPU overlap
independent products: it gave 1024^3 0.97x cuBLAS where its kernel alone is 0.79x here. An
earlier run of the same branch with every candidate forced (--each: 2048^3 best tiled 0.424,
t128x256k16 0.430; 4096^3 best t64x128k16 3.112, t128x256k16 3.186; batch 32 best t128x128k16
0.038) found no tile shape that reaches 0.9x at 2048^3 or batch 32. relu(x @ w + b) at 4096
(--epilogue, measured before this branch): 0.97x the bare product.

Tried on branch s6-mm (616011d, reverted): "r" tiles, A staged row-major in workgroup memory
(vec4 stores, no transposing scalar ones) with the inner loop reading a vec4 along k per row of
A, six shapes. In the tuner's table of one H200 run (us a call, the winner first) none won:
4096^3 p64x128k16 3306, tiled 3467, r128x128k32 3600, r64x128k16 3658; 2048^3 tiled 457,
r128x128k32 483; 1024^3 p64x128k16 72, r64x128k16 80; batch 32 of 256^3 t64x128k16 38,
r128x128k32 42; 8 x 16 outputs an invocation on 128 invocations (r128x128k32w8) 1.8-2x the
others. The transposing stores are not what holds the big products back.

Tried on branch s7-mm (two H200 calls, `--each`, forced times in ms, tiled = 128x128 BK=32,
call 1 / call 2 where both ran it), only w64x128k16 kept:
- "w" (a warp's lanes 8 columns x 4 rows of the invocations, not 16 x 2: fewer distinct vec4s
  a workgroup-memory read): w64x128k16 against t64x128k16 at 1024^3 0.067 / 0.067 against
  0.068 / 0.070, 1000^3 0.071 / 0.065 against 0.071 / 0.069, 4096^3 3.048 / 3.059 against
  3.044 / 3.049; w128x128k32 against tiled 4096^3 3.182 / 3.181 against 3.206 / 3.213, 2048^3
  0.414 / 0.416 against 0.418 / 0.418, batch 32 of 256^3 0.038 / 0.038 against 0.044 / 0.043,
  where p128x128k32 and p64x128k16 were as fast (0.037-0.039): it added nothing.
- "g" (workgroups in bands of 8 tile rows, for L2): g128x128k32 3.225 and 0.424 at 4096^3 and
  2048^3; fp32 at these sizes is compute-bound (an estimate, not measured: 4096^3 reads ~0.3 GB
  from DRAM, ~70 us of its 3 ms).
- "n" (the next step loaded after the multiply-adds, its registers not held through them):
  n128x128k32 3.230 and 0.424.
- 48 KiB of workgroup memory (the H200's Vulkan limit): dw128x256k16 3.168 / 0.416, 128x256
  and 256x128 at BK=32 3.42 / 3.73; 64x128 at BK=32 on 128 invocations (12 staged vec4s
  each) 6.5-6.7, twice t64x128k16.
- "h" (two halves of the workgroup, each half of every k step, their sums added through
  workgroup memory: twice the warps a tile for the small products): slower everywhere, e.g.
  1024^3 dh64x128k16 0.071, h64x128k16 0.080; 4096^3 3.519 and 5.874; batch 32 0.046-0.065.
- split-k by 16 (64x4096x4096, 4096x64x4096): never the fastest (s8 and s4 are).
The final call (branch 6685b47, whose other new candidates, reverted after it, none of its
processes chose; main; the branch again; one process each; kernels alone,
torch / ember) gave 1024^3 0.84x / 0.90x (main) / 0.88x, 2048^3 0.84x all three, 4096^3 0.90x
/ 0.90x / 0.89x, 1000^3 0.78x / 0.81x / 0.80x, 4096x4096x64 0.96x / 0.97x / 1.01x,
64x4096x4096 0.81x / 0.68x / 0.88x, batch 32 of 256^3 0.78x / 0.78x / 0.80x: the branch is
main within the noise (the tuner's pick among candidates within 5% of each other changes from
process to process). The open clause stays open: at 1000^3 and batch 32 (~20% short) no tile
shape tried so far comes near.
"""

import argparse
import math
import os
import tempfile
import time

import numpy as np

from ember import Tensor, autotune
from ember.backend import Fusion, Wgpu

MATMULS = [(1024, 1024, 1024, 1), (2048, 2048, 2048, 1), (4096, 4096, 4096, 1),
           (1000, 1000, 1000, 1), (4096, 4096, 64, 1), (64, 4096, 4096, 1), (256, 256, 256, 32)]
EXTRA = [(4096, 64, 4096, 1)]  # not in the geometric mean: N small, K long


def _queued(fn, sync, target=0.1, repeat=3):
    fn()
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    calls = max(2, min(2000, int(target / max(time.perf_counter() - t0, 1e-6))))
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def _synced_once(fn, sync):
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


def _with(env, fn):
    """fn() under the environment variables `env` (None: unset)."""
    old = {k: os.environ.get(k) for k in env}
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        return fn()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _kernel_time(be, fn, env, target=0.1):
    """Seconds per call of fn's kernels alone: one call's dispatches recorded (as ember.jit
    records a plan), then dispatched again and again over the same buffers, queued with one
    wait. Each repeat writes the buffers the last one wrote, so the GPU runs them one after
    another, as CUDA runs torch's calls on one stream; the Python left is ~5 us a dispatch,
    off the GPU's path (a jit replay of 8 independent products in one submission, this
    column's earlier form, let the GPU overlap them and flattered short products)."""
    from ember.backends.wgpu.plan import Recording
    dev = be.device
    be.sync()
    dev.recording = rec = Recording()
    try:
        out = _with(env, fn)  # (the choice is already made: tuning would refuse to record)
    finally:
        dev.recording = None

    def replay():
        for command in rec.commands:
            dev.dispatch(*command)
    t = _queued(replay, be.sync, target=target)
    del out
    return t


def _forget():
    """Drop this process's memory of choices (the file stays): the next call reads it."""
    autotune._memory.clear()
    autotune._fast.clear()
    autotune._file = None


def _cases(be, torch):
    """(name, ember fn, torch fn or None, check) per shape."""
    rng = np.random.default_rng(0)
    out = []
    for m, n, k, nb in MATMULS + EXTRA:
        a = rng.standard_normal((nb, m, k) if nb > 1 else (m, k), dtype=np.float32)
        b = rng.standard_normal((nb, k, n) if nb > 1 else (k, n), dtype=np.float32)
        x, y = Tensor.from_data(a, backend=be), Tensor.from_data(b, backend=be)
        tx, ty = (torch.from_numpy(v).cuda() for v in (a, b)) if torch else (None, None)
        name = f"matmul {m}x{n}x{k}" + (f" batch {nb}" if nb > 1 else "")

        def check(x=x, y=y, a=a, b=b):
            got = (x @ y).to_numpy()
            want = a[..., :64, :] @ b
            err = float(np.abs(got[..., :64, :] - want).max() / max(np.abs(want).max(), 1))
            assert err < 1e-4, f"relative error {err}"
        out.append((name, lambda x=x, y=y: x @ y,
                    (lambda u=tx, v=ty: u @ v) if torch else None, check, (m, n, k, nb)))
    for name, shape, fn, tfn, nfn in [
            ("sum of 4096x4096", (4096, 4096), lambda t: t.sum(), lambda t: t.sum(),
             lambda v: v.sum()),
            ("column sums of 4096x4096", (4096, 4096), lambda t: t.sum_dim(0),
             lambda t: t.sum(0, keepdim=True), lambda v: v.sum(0, keepdims=True)),
            ("row max of 64x262144", (64, 262144), lambda t: t.max_dim(1),
             lambda t: t.amax(1, keepdim=True), lambda v: v.max(1, keepdims=True))]:
        v = rng.standard_normal(shape, dtype=np.float32)
        x = Tensor.from_data(v, backend=be)
        tv = torch.from_numpy(v).cuda() if torch else None

        def check(fn=fn, x=x, nfn=nfn, v=v):
            np.testing.assert_allclose(fn(x).to_numpy(), nfn(v.astype(np.float64)),
                                       rtol=1e-4, atol=1e-2)
        out.append((name, lambda fn=fn, x=x: fn(x), (lambda f=tfn, t=tv: f(t)) if torch
                    else None, check, None))
    return out


def gpu(each=False, epilogue=False):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    os.environ["EMBER_CACHE_DIR"] = tempfile.mkdtemp(prefix="ember-autotune-bench-")
    be = Wgpu()
    cuda = torch.cuda.synchronize
    print(f"{be} against torch {torch.__version__} on {torch.cuda.get_device_name()}; "
          "ms per call; ratios: torch / ember (>1: ember faster), untuned / tuned", flush=True)
    head = (f"{'case':34s} {'tuned':>8s} {'untuned':>8s} {'torch':>8s} {'tuned/torch':>11s} "
            f"{'untuned/torch':>13s} {'gain':>6s} {'1st call':>9s} {'cached':>8s} | "
            f"{'kernels: tuned':>8s} {'untuned':>8s} {'/torch':>9s} {'gain':>5s} choice")
    print(head)
    gains = []
    for name, fn, tfn, check, shape in _cases(be, torch):
        try:
            _with({"EMBER_AUTOTUNE": "0"}, check)  # the default kernel compiles here
            untuned = _with({"EMBER_AUTOTUNE": "0"}, lambda fn=fn: _queued(fn, be.sync))
            steady = _with({"EMBER_AUTOTUNE": "0"}, lambda fn=fn: min(
                _synced_once(fn, be.sync) for _ in range(3)))
            first = _synced_once(fn, be.sync) - steady  # a fresh key: tuned here
            check()
            tuned = _queued(fn, be.sync)
            _forget()
            cached = _synced_once(fn, be.sync) - min(_synced_once(fn, be.sync)
                                                      for _ in range(3))
            chosen = ",".join(autotune._memory.values())  # (_forget left only this row's)
            k_untuned = _kernel_time(be, fn, {"EMBER_AUTOTUNE": "0"})
            k_tuned = _kernel_time(be, fn, {})
            theirs = _queued(tfn, cuda)
        except Exception as e:  # noqa: BLE001 (a row that fails is shown, the rest still runs)
            print(f"{name:34s} FAILED: {type(e).__name__}: {e}", flush=True)
            continue
        if shape is None or shape[:3] != EXTRA[0][:3]:
            gains.append((untuned / tuned, k_untuned / k_tuned))
        print(f"{name:34s} {tuned * 1e3:8.3f} {untuned * 1e3:8.3f} {theirs * 1e3:8.3f} "
              f"{theirs / tuned:10.2f}x {theirs / untuned:12.2f}x {untuned / tuned:5.2f}x "
              f"{first * 1e3:7.0f}ms {cached * 1e3:6.2f}ms | {k_tuned * 1e3:8.3f} "
              f"{k_untuned * 1e3:8.3f} {theirs / k_tuned:9.2f}x {k_untuned / k_tuned:5.2f}x "
              f"{chosen}", flush=True)
    for i, what in enumerate(("eager", "kernels")):
        if gains:
            geo = math.exp(sum(math.log(g[i]) for g in gains) / len(gains))
            print(f"geometric mean gain, tuned over untuned, {what}, {len(gains)} shapes: "
                  f"{geo:.2f}x")
    if each:
        _each(be, torch)
    if epilogue:
        _epilogue(be, torch)


def _each(be, torch):
    """Every matmul candidate forced, per shape: what the tuner chooses among."""
    from ember.backends.wgpu import runners
    print("\nevery candidate's kernels, ms per call, forced with EMBER_WGPU_MATMUL:")
    for name, fn, _, _, shape in _cases(be, None):
        if shape is None:
            continue
        m, n, k, nb = shape
        cands = runners._matmul_kernels(be, True, m, n, k, nb, None)
        row, times = [], {}
        for c in cands:
            try:
                times[c] = t = _kernel_time(be, fn, {"EMBER_AUTOTUNE": "0",
                                                     "EMBER_WGPU_MATMUL": c}, target=0.03)
                row.append(f"{c} {t * 1e3:.3f}")
            except Exception as e:  # noqa: BLE001
                row.append(f"{c} FAILED ({type(e).__name__})")
        best = sorted(times, key=times.get)[:3]
        print(f"  {name}: " + ", ".join(row) + "\n    fastest: " + ", ".join(
            f"{c} {times[c] * 1e3:.3f}" for c in best), flush=True)


def _epilogue(be, torch, size=4096):
    """relu(x @ w + b) and its parts through Fusion(Wgpu()) against the bare product, tuned
    and with each tile forced; queued and synced per call."""
    from ember.backends.wgpu import runners
    fused = Fusion(be)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((size, size), dtype=np.float32)
    w = rng.standard_normal((size, size), dtype=np.float32) / np.float32(np.sqrt(size))
    b = rng.standard_normal(size, dtype=np.float32)
    A, W = (Tensor.from_data(v, backend=be) for v in (a, w))
    Af, Wf, bf = (Tensor.from_data(v, backend=fused) for v in (a, w, b))
    got = fused.realize((Af @ Wf + bf).relu()._prim)
    np.testing.assert_allclose(be.to_numpy(got)[:64], np.maximum(a[:64] @ w + b, 0),
                               rtol=1e-3, atol=1e-3)
    cases = {"bare x @ w": lambda: A @ W,
             "relu(x @ w + b)": lambda: fused.realize((Af @ Wf + bf).relu()._prim),
             "x @ w + b": lambda: fused.realize((Af @ Wf + bf)._prim),
             "relu(x @ w)": lambda: fused.realize((Af @ Wf).relu()._prim)}
    print(f"\nat {size}: ms per call, queued | synced per call; ratio to the bare product")
    for label, env in [("tuned", {}), *((c, {"EMBER_AUTOTUNE": "0", "EMBER_WGPU_MATMUL": c})
                                        for c in runners.MATMUL_TILES)]:
        times = {}
        for case, fn in cases.items():
            try:
                times[case] = _with(env, lambda fn=fn: (
                    _queued(fn, be.sync), min(_synced_once(fn, be.sync) for _ in range(5))))
            except Exception as e:  # noqa: BLE001
                print(f"  {label} {case}: FAILED {type(e).__name__}: {e}")
        if "bare x @ w" not in times:
            continue
        q0, s0 = times["bare x @ w"]
        print(f"  {label:12s} " + " | ".join(
            f"{case} {q * 1e3:.3f} ({q / q0:.3f}x) {s * 1e3:.3f} ({s / s0:.3f}x)"
            for case, (q, s) in times.items()), flush=True)
    ta, tw, tb = (torch.from_numpy(v).cuda() for v in (a, w, b))
    t = _queued(lambda: torch.relu(ta @ tw + tb), torch.cuda.synchronize)
    print(f"  torch relu(x @ w + b) {t * 1e3:.3f} ms")


# ---- the runner's table (any adapter, lavapipe included) ---------------------------------
def tuned_matmul(ctx):
    be = Wgpu()
    rng = np.random.default_rng(0)
    x, y = (Tensor.from_data(rng.standard_normal((256, 256), dtype=np.float32), backend=be)
            for _ in range(2))

    def run(env):
        def call():
            _with(env, lambda: (x @ y, be.sync()))
        return call
    yield ctx.time_row("matmul 256^3: tuned / untuned", *ctx.measure(
        run({}), run({"EMBER_AUTOTUNE": "0"})))


BENCHMARKS = {"tuned_matmul": tuned_matmul}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", required=True,
                        help="the GPU run (needs torch with CUDA; else: ember bench autotune)")
    parser.add_argument("--each", action="store_true", help="every matmul candidate's time")
    parser.add_argument("--epilogue", action="store_true",
                        help="relu(x @ w + b) against the bare product at 4096")
    args = parser.parse_args()
    gpu(each=args.each, epilogue=args.epilogue)
