"""Fusion (ember.fusion) against the same backend unfused, and on a GPU against PyTorch: the
seed's gelu_custom (five elementwise ops) as one generated kernel.

    ember bench fusion               # the runner's table: Fusion(B) / B for NdArray and Wgpu
    python bench/fusion.py --cpu     # the CPU run: gelu_custom on 4M float32 and a longer
                                     # chain: NdArray(), Fusion(NdArray()) (one generated C
                                     # kernel, backends/native/fused.py) and NumPy, best of 7
    python bench/fusion.py --gpu     # the GPU run against PyTorch (CUDA): gelu_custom on 256M
                                     # float32 (TB/s of Fusion(Wgpu()), Wgpu(), F.gelu), relu(x @
                                     # w + b) at 4096 against the bare matmul, LayerNorm,
                                     # softmax and log_softmax over [8192, 4096] against
                                     # torch's (host: the time a call until the last returned)
    python bench/fusion.py --host    # the Python host time (CPU seconds) of one eager call of
                                     # LayerNorm, softmax, log_softmax on Fusion(Wgpu()) and of
                                     # an ember.jit replay, on a small shape (any adapter,
                                     # lavapipe too: the host cost does not depend on the size)

Effective bandwidth counts what the function must move: its input read once and its result
written once (8 bytes an element), whatever the kernels move in between. Every timing ends
with the backend's sync() (Fusion's runs what is still pending, then waits for the GPU).
"""

import argparse
import math
import statistics
import time

import numpy as np
from _helpers import synced as _synced

import ember
from ember import Tensor
from ember.backend import Fusion, NdArray

SQRT_2 = math.sqrt(2)


def gelu_custom(x):
    x = x * ((x / SQRT_2).erf() + 1)
    return x / 2


def _case(ctx, name, inner, n):
    data = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    fused = Fusion(inner)
    x, xf = Tensor.from_data(data, backend=inner), Tensor.from_data(data, backend=fused)
    np.testing.assert_allclose(gelu_custom(xf).to_numpy(), gelu_custom(x).to_numpy(),
                               rtol=1e-6, atol=1e-6)
    ours, ref = ctx.measure(_synced(fused, lambda: gelu_custom(xf)),
                            _synced(inner, lambda: gelu_custom(x)))
    return ctx.time_row(f"gelu_custom {n} float32, Fusion({name}) vs {name}", ours, ref)


def long_chain(x, b):
    """12 elementwise ops, a [1024] bias broadcast over the rows: scale and shift, leaky ReLU,
    a square, softsign, a residual."""
    h = x * 1.5 + b
    h = h.maximum(h * 0.1)
    h = h * h * 0.25 - h
    h = h / (h.abs() + 1)
    return h * 2 + x


def _numpy_long_chain(x, b):
    h = x * np.float32(1.5) + b
    h = np.maximum(h, h * np.float32(0.1))
    h = h * h * np.float32(0.25) - h
    h = h / (np.abs(h) + np.float32(1))
    return h * np.float32(2) + x


def _numpy_gelu_custom(x):  # NumPy has no erf: ember's NumPy one (ops/numerics.py)
    from ember.ops import numerics
    y = x * (numerics.erf(x / np.float32(SQRT_2)) + np.float32(1))
    return y / np.float32(2)


def _chain_case(ctx, inner, n):
    rng = np.random.default_rng(1)
    data = rng.standard_normal((n // 1024, 1024), dtype=np.float32)
    bias = rng.standard_normal(1024, dtype=np.float32)
    fused = Fusion(inner)
    x, b = (Tensor.from_data(v, backend=inner) for v in (data, bias))
    xf, bf = (Tensor.from_data(v, backend=fused) for v in (data, bias))
    np.testing.assert_allclose(long_chain(xf, bf).to_numpy(), long_chain(x, b).to_numpy(),
                               rtol=1e-6, atol=1e-6)
    ours, ref = ctx.measure(_synced(fused, lambda: long_chain(xf, bf)),
                            _synced(inner, lambda: long_chain(x, b)))
    return ctx.time_row(f"12-op chain [{n // 1024}, 1024] float32 + bias, Fusion(NdArray) vs "
                        "NdArray", ours, ref)


def ndarray(ctx):
    yield _case(ctx, "NdArray", NdArray(), 1 << 22)
    yield _chain_case(ctx, NdArray(), 1 << 22)


def _best(fn, repeat):
    """The fastest of `repeat` timed calls (after one untimed): on a shared, noisy machine the
    minimum is the run least disturbed."""
    fn()
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def cpu(n=1 << 22, repeat=7):
    """The CPU run: gelu_custom on n float32 and the 12-op chain on [n / 1024, 1024] (+ a
    bias), each on NdArray(), Fusion(NdArray()) and NumPy in this process; each result read
    back to NumPy (which runs Fusion's pending chain)."""
    from ember.backends.native import fused as native_fused
    rng = np.random.default_rng(0)
    data = rng.standard_normal(n, dtype=np.float32)
    grid, bias = data.reshape(-1, 1024), rng.standard_normal(1024, dtype=np.float32)
    plain, fused = NdArray(), Fusion(NdArray())

    def gelu_on(B):
        x = Tensor.from_data(data, backend=B)
        return lambda: gelu_custom(x).to_numpy()

    def chain_on(B):
        x, b = Tensor.from_data(grid, backend=B), Tensor.from_data(bias, backend=B)
        return lambda: long_chain(x, b).to_numpy()
    cases = {  # name -> (a backend's call, NumPy's)
        f"gelu_custom [{n}]": (gelu_on, lambda: _numpy_gelu_custom(data)),
        f"12-op chain [{n // 1024}, 1024] + bias": (
            chain_on, lambda: _numpy_long_chain(grid, bias)),
    }
    tiles = Fusion(NdArray(kernels="numpy"))  # the fallback: blocks over NumPy tiles
    print(f"Fusion(NdArray()) on the CPU, float32, best of {repeat} (ms); x: NdArray() time / "
          "this one's; tiles: Fusion(NdArray(kernels='numpy')), the path without a compiler")
    print(f"  {'case':34s} {'NdArray()':>10s} {'Fusion':>8s} {'tiles':>8s} {'NumPy':>8s} "
          f"{'Fusion x':>9s} {'tiles x':>8s} {'NumPy x':>8s}")
    for name, (make, numpy_fn) in cases.items():
        runs = {"NdArray()": make(plain), "Fusion": make(fused), "tiles": make(tiles),
                "NumPy": numpy_fn}
        times = {k: _best(fn, repeat) for k, fn in runs.items()}
        t = times["NdArray()"]
        print(f"  {name:34s} {t * 1e3:10.2f} " + " ".join(
            f"{times[k] * 1e3:8.2f}" for k in ("Fusion", "tiles", "NumPy")) + " " + " ".join(
            f"{t / times[k]:8.2f}x" for k in ("Fusion", "tiles", "NumPy")))
    print(f"  generated C kernels: {native_fused.counters} "
          f"(compiled here, loaded, runs; compiled 0: from the cache)")


def wgpu(ctx):
    try:
        from ember.backend import Wgpu
        inner = Wgpu()
    except Exception as e:  # noqa: BLE001 (no wgpu-py, or no adapter: say so)
        yield ctx.row(f"gelu_custom: no Wgpu here ({e})", float("nan"), float("nan"), "ms")
        return
    yield _case(ctx, "Wgpu", inner, 1 << 22)


BENCHMARKS = {"ndarray": ndarray, "wgpu": wgpu}


def _median_time(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _queued(fn, sync, calls=20, repeat=5):
    """Seconds a call with `calls` calls queued before one sync: the kernels' throughput, with
    the read-back that ends a sync paid once (each result freed at once, as in a model)."""
    return _queued_host(fn, sync, calls, repeat)[0]


def _queued_host(fn, sync, calls=20, repeat=5):
    """(_queued's seconds, the host's share: seconds a call until the last call returned)."""
    fn()
    sync()
    times, host = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        host.append((time.perf_counter() - t0) / calls)
        sync()
        times.append((time.perf_counter() - t0) / calls)
    return statistics.median(times), statistics.median(host)


def _alone(inner, fn, calls=20, repeat=100):
    """(GPU seconds of the kernels one call of fn launches, with no Python between them: its
    dispatches recorded once, then dispatched `repeat` times more, submitted 10 at a time;
    host seconds a call, with no wait for the GPU): where a call's time goes."""
    dev = inner.device
    seen, dispatch = [], dev.dispatch
    dev.dispatch = lambda *a: (seen.append(a), dispatch(*a))[1]
    try:
        out = fn()  # (held: the re-dispatches write its buffers)
        inner.sync()
    finally:
        del dev.dispatch
    gpu = []
    for _ in range(3):
        t0 = time.perf_counter()
        for r in range(repeat):
            for a in seen:
                dispatch(*a)
            if r % 10 == 9:
                dev.flush()  # (the GPU runs these while the next ones are recorded)
        inner.sync()
        gpu.append((time.perf_counter() - t0) / repeat)
    del out
    dev.max_in_flight = 1 << 30  # (no wait for the GPU inside the calls)
    try:
        fn()
        inner.sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        host = (time.perf_counter() - t0) / calls
        inner.sync()
    finally:
        del dev.max_in_flight
    return min(gpu), host


def _row(name, seconds, ref, bytes_moved=None, host=None):
    bw = f" {bytes_moved / seconds / 1e12:5.2f} TB/s" if bytes_moved else ""
    spent = f"  (host {host * 1e3:6.3f} ms)" if host is not None else ""
    print(f"  {name:34s} {seconds * 1e3:8.3f} ms{bw}  {ref / seconds:5.2f}x{spent}")


def gpu(n=1 << 28, repeat=20, rows=8192, cols=4096, size=4096, only=None, calls=20):
    """The H200 run, everything queued 20 calls a sync, side by side with PyTorch (CUDA) in
    this process: gelu_custom on n float32 (effective TB/s; also synced per call);
    relu(x @ w + b) at size^3 against ember's bare matmul; LayerNorm and softmax over
    [rows, cols] against torch's. Ratios: the reference's time over the row's. `only`: one
    of "gelu", "matmul", "norms"; `calls`: the norms' calls a sync (more spread a sync's fixed
    cost, the first submission's start and the last read-back, thinner)."""
    from ember.backend import Wgpu
    inner = Wgpu()
    fused = Fusion(inner)
    if only in (None, "gelu"):
        _gpu_gelu(inner, fused, n, repeat)
    if only in (None, "matmul"):
        _gpu_matmul(inner, fused, size)
    if only in (None, "norms"):
        _gpu_norms(inner, fused, rows, cols, calls)


def _gpu_gelu(inner, fused, n, repeat):
    import torch
    cuda = torch.cuda.synchronize
    data = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    x, xf = Tensor.from_data(data, backend=inner), Tensor.from_data(data, backend=fused)
    check = slice(0, 1 << 20)
    np.testing.assert_allclose(gelu_custom(xf).to_numpy()[check],
                               gelu_custom(x).to_numpy()[check], rtol=1e-5, atol=1e-6)
    t = torch.from_numpy(data).cuda()
    cases = {  # name -> (one call that launches its kernels, the sync that waits for them)
        "Fusion(Wgpu())": (lambda: fused.realize(gelu_custom(xf)._prim), inner.sync),
        "Wgpu()": (lambda: gelu_custom(x), inner.sync),
        "Wgpu() gelu op": (lambda: x.gelu(), inner.sync),  # the hand-written primitive
        "Fusion x*2+1": (lambda: fused.realize((xf * 2 + 1)._prim), inner.sync),
        "Wgpu() x+1": (lambda: x + 1, inner.sync),  # one elementwise kernel: the floor
        "torch F.gelu": (lambda: torch.nn.functional.gelu(t), cuda),
    }
    fast = ember.jit(gelu_custom)  # replays: the recorded fused kernel, one submission
    for _ in range(3):
        fused.realize(fast(xf)._prim)
    cases["jit Fusion(Wgpu())"] = (lambda: fused.realize(fast(xf)._prim), inner.sync)
    print(f"gelu_custom on {n} float32 ({inner}; {torch.cuda.get_device_name()}); effective "
          "bandwidth counts 8 bytes an element:")
    times = {}
    for name, (fn, sync) in cases.items():
        each = _median_time(lambda fn=fn, sync=sync: (fn(), sync()), repeat)
        times[name], host = queued, _ = _queued_host(fn, sync)
        print(f"  {name:16s} synced {each * 1e3:7.3f} ms {8 * n / each / 1e12:5.2f} TB/s | "
              f"queued {queued * 1e3:7.3f} ms {8 * n / queued / 1e12:5.2f} TB/s "
              f"(host {host * 1e3:6.3f} ms)")
    gpu, host = _alone(inner, cases["Fusion(Wgpu())"][0], repeat=20)
    print(f"  Fusion(Wgpu()): its kernel alone {gpu * 1e3:7.3f} ms {8 * n / gpu / 1e12:5.2f} TB/s;"
          f" its host time a call {host * 1e3:7.3f} ms")
    f, w, g = times["Fusion(Wgpu())"], times["Wgpu()"], times["torch F.gelu"]
    print(f"  queued: Fusion vs unfused Wgpu {w / f:.2f}x faster; vs F.gelu {g / f:.2f}x its "
          "speed")


def _gpu_matmul(inner, fused, size):
    import torch
    cuda = torch.cuda.synchronize
    rng = np.random.default_rng(1)
    a = rng.standard_normal((size, size), dtype=np.float32)
    wt = rng.standard_normal((size, size), dtype=np.float32) / np.float32(np.sqrt(size))
    b = rng.standard_normal(size, dtype=np.float32)
    A, W = (Tensor.from_data(v, backend=inner) for v in (a, wt))
    Af, Wf, bf = (Tensor.from_data(v, backend=fused) for v in (a, wt, b))
    ta, tw, tb = (torch.from_numpy(v).cuda() for v in (a, wt, b))
    got = (Af @ Wf + bf).relu().to_numpy()[:64]
    np.testing.assert_allclose(got, np.maximum(a[:64] @ wt + b, 0), rtol=1e-3, atol=1e-3)
    bare = _queued(lambda: A @ W, inner.sync, calls=10)
    epi = _queued(lambda: fused.realize((Af @ Wf + bf).relu()._prim), inner.sync, calls=10)
    torch_mm = _queued(lambda: torch.relu(ta @ tw + tb), cuda, calls=10)
    print(f"relu(x @ w + b) at {size}: (ratio: ember's bare matmul time over the row's)")
    _row("Wgpu() x @ w (bare matmul)", bare, bare)
    _row("Fusion(Wgpu()) relu(x @ w + b)", epi, bare)
    _row("torch relu(x @ w + b) (fp32)", torch_mm, bare)


def _gpu_norms(inner, fused, rows, cols, calls=20):
    import torch

    from ember import nn
    cuda = torch.cuda.synchronize
    data = np.random.default_rng(2).standard_normal((rows, cols), dtype=np.float32)
    moved = 8 * rows * cols
    X, Xf = Tensor.from_data(data, backend=inner), Tensor.from_data(data, backend=fused)
    tx = torch.from_numpy(data).cuda()
    norm, norm_f = nn.LayerNorm(cols, backend=inner), nn.LayerNorm(cols, backend=fused)
    tnorm = torch.nn.LayerNorm(cols).cuda()
    np.testing.assert_allclose(norm_f(Xf).to_numpy(), norm(X).to_numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(Xf.softmax(-1).to_numpy(), X.softmax(-1).to_numpy(), rtol=1e-4,
                               atol=1e-7)
    np.testing.assert_allclose(Xf.log_softmax(-1).to_numpy(), X.log_softmax(-1).to_numpy(),
                               rtol=1e-4, atol=1e-4)
    print(f"over [{rows}, {cols}] float32, {calls} calls a sync (ratio: torch's time over the "
          "row's; effective bandwidth counts 8 bytes an element):")
    with torch.no_grad():
        for name, f, unfused, ref in (
                ("LayerNorm", norm_f, lambda: norm(X), lambda: tnorm(tx)),
                ("softmax", lambda x: x.softmax(-1), lambda: X.softmax(-1),
                 lambda: torch.softmax(tx, -1)),
                ("log_softmax", lambda x: x.log_softmax(-1), lambda: X.log_softmax(-1),
                 lambda: torch.log_softmax(tx, -1))):
            def ours(f=f):
                return fused.realize(f(Xf)._prim)

            fast = ember.jit(f)  # replays: the recorded kernel, one submission

            def jitted(fast=fast):
                return fused.realize(fast(Xf)._prim)
            for _ in range(3):  # (call 1 runs, 2 captures, then replays)
                jitted()
            theirs = _queued(ref, cuda, calls)
            _row(f"torch {name}", theirs, theirs, moved)
            seconds, host = _queued_host(ours, inner.sync, calls)
            _row(f"Fusion(Wgpu()) {name}", seconds, theirs, moved, host)
            gpu, host = _alone(inner, ours)
            _row("  its kernel alone (GPU)", gpu, theirs, moved)
            print(f"  {'  its host time a call (Python)':34s} {host * 1e3:8.3f} ms")
            seconds, host = _queued_host(jitted, inner.sync, calls)
            _row("  under ember.jit (a replay)", seconds, theirs, moved, host)
            _row(f"Wgpu() {name}", _queued(unfused, inner.sync, calls), theirs, moved)


def host(rows=64, cols=256, calls=2000, repeat=5):
    """CPU seconds of the calling thread (time.thread_time: lavapipe's own threads excluded) a
    call costs the host: each norm eagerly and as an ember.jit replay on Fusion(Wgpu()),
    realized each call; median of `repeat` runs of `calls` calls, a sync after each run (its
    wait not counted)."""
    from ember import nn
    from ember.backend import Wgpu
    inner = Wgpu()
    fused = Fusion(inner)
    data = np.random.default_rng(2).standard_normal((rows, cols), dtype=np.float32)
    xf = Tensor.from_data(data, backend=fused)
    norm = nn.LayerNorm(cols, backend=fused)
    print(f"host CPU time a call on {fused}, [{rows}, {cols}] float32, median of {repeat} x "
          f"{calls} calls:")
    for name, f in (("LayerNorm", norm), ("softmax", lambda x: x.softmax(-1)),
                    ("log_softmax", lambda x: x.log_softmax(-1))):
        fast = ember.jit(f)
        row = []
        for g in (f, fast):
            def call(g=g):
                return fused.realize(g(xf)._prim)
            for _ in range(3):  # (a jit's call 1 runs, 2 captures, then replays)
                call()
            inner.sync()
            times = []
            for _ in range(repeat):
                t0 = time.thread_time()
                for _ in range(calls):
                    call()
                times.append((time.thread_time() - t0) / calls)
                inner.sync()
            row.append(statistics.median(times))
        print(f"  {name:12s} eager {row[0] * 1e6:7.1f} us   jit replay {row[1] * 1e6:7.1f} us")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--gpu", action="store_true",
                       help="the GPU run (needs torch with CUDA; else: ember bench fusion)")
    which.add_argument("--cpu", action="store_true", help="the CPU run (NdArray)")
    which.add_argument("--host", action="store_true",
                       help="host CPU time a norm call costs on Fusion(Wgpu()) (small shape)")
    parser.add_argument("--elements", type=int, default=None)
    parser.add_argument("--size", type=int, default=4096, help="the GPU run's matmul size")
    parser.add_argument("--rows", type=int, default=8192)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--only", choices=("gelu", "matmul", "norms"), default=None,
                        help="one part of the GPU run")
    parser.add_argument("--calls", type=int, default=20,
                        help="the GPU norms' calls queued before one sync")
    parser.add_argument("--quads", type=int, default=None,
                        help="vec4s a fused elementwise invocation computes (tuning)")
    parser.add_argument("--row-threads", type=int, default=None,
                        help="invocations a vec4 row kernel gives a row at most (tuning)")
    parser.add_argument("--row-quads", type=int, default=None,
                        help="vec4s a row kernel's invocation holds at most, 0: loops (tuning)")
    args = parser.parse_args()
    if args.cpu:
        cpu(args.elements or 1 << 22)
    elif args.host:
        host()
    else:
        if args.quads:
            from ember.backends.wgpu import kernels
            kernels.FUSED_QUADS = args.quads
        from ember.backends.wgpu import runners
        if args.row_threads:
            runners.ROW_THREADS = args.row_threads
        if args.row_quads is not None:
            runners.ROW_QUADS = args.row_quads
        gpu(args.elements or 1 << 28, rows=args.rows, cols=args.cols, size=args.size,
            only=args.only, calls=args.calls)
