"""ember's benchmark runner: finds the benchmark modules next to this file, times them, prints
one aligned table and optionally writes JSON.

A benchmark module is any `bench/*.py` (other than this one and `_private.py` files) that
defines `BENCHMARKS = {name: function}`; each function takes the run's `Context` and returns
(or yields) rows made with `ctx.time_row(...)` or `ctx.row(...)`. It may also define
`summarize(rows) -> list[str]`: lines printed under the table.

Timing: the callables of one case are measured side by side in this process, their repeats
interleaved (and the order rotated each repeat), so that a noisy neighbour on a shared machine
slows all of them alike. Each sample runs the callable `number` times, picked so that a sample
lasts about `target` seconds, with the garbage collector off, as timeit does. It follows as
many untimed calls, so that what the other callable left is not charged to this one: its
allocator and cache state, and its threads: PyTorch's OpenMP workers spin ~10 ms after each
parallel region, taking a core from whatever runs next, and are asleep when PyTorch's turn
comes back. On 2 cores the first MLP step after a switch took 4x a steady one (ember's) and
2.3x (PyTorch's); both were steady again after ~10 ms (bench/README.md, session 13). A row
reports the median sample and the minimum. Nothing here asserts on time: ratios are printed.
"""

import datetime
import gc
import importlib.util
import json
import math
import os
import platform
import statistics
import sys
import time
import tracemalloc
from pathlib import Path


class UnknownBenchmark(LookupError):
    """A NAME given to `ember bench` matches no benchmark module or function."""


class Stats:
    """Seconds per call of one callable: every sample, the median and the minimum."""

    def __init__(self, samples, number):
        self.samples, self.number = samples, number
        self.median, self.min = statistics.median(samples), min(samples)


class Context:
    """What a benchmark function gets: the run's settings and the measuring helpers."""

    def __init__(self, repeat, quick):
        self.repeat, self.quick = repeat, quick
        self.target = 0.002 if quick else 0.02  # seconds per sample
        self.cache = {}  # benchmarks of one module may share measurements within a run

    def measure(self, *fns):
        """Time the callables side by side; one Stats per callable, in order."""
        for fn in fns:
            fn()  # first calls: imports, caches, allocator
        single = [min(_clock(fn, 1) for _ in range(2)) for fn in fns]
        number = max(1, min(1_000_000, math.ceil(self.target / max(max(single), 1e-9))))
        for fn in fns:
            _clock(fn, number)  # warm-up sample, not recorded
        samples = [[] for _ in fns]
        order = list(range(len(fns)))
        for _ in range(self.repeat):
            for i in order:
                _clock(fns[i], number)  # untimed (the module's docstring says why)
                samples[i].append(_clock(fns[i], number) / number)
            order = order[1:] + order[:1]
        return [Stats(s, number) for s in samples]

    @staticmethod
    def peak_bytes(fn):
        """Peak bytes allocated while `fn()` runs (its result included), by tracemalloc;
        NumPy reports its buffers to tracemalloc. Memory held before the call is not counted."""
        gc.collect()
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            result = fn()
            peak = tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
        del result
        return peak

    def time_row(self, case, ember, reference):
        """A row from two Stats (ember's, the reference's); microseconds or milliseconds."""
        scale, unit = (1e6, "us") if max(ember.median, reference.median) < 1e-3 else (1e3, "ms")
        return self.row(case, ember.median * scale, reference.median * scale, unit,
                         ember_min=ember.min * scale, reference_min=reference.min * scale,
                         number=ember.number, repeat=len(ember.samples),
                         samples_s={"ember": ember.samples, "reference": reference.samples})

    def row(self, case, ember, reference, unit, **extra):
        """Any measured row; `reference` may be None (then no ratio)."""
        row = {"case": case, "ember": ember, "reference": reference, "unit": unit,
               "ratio": _ratio(ember, reference)}
        if "ember_min" in extra:
            extra["min_ratio"] = _ratio(extra["ember_min"], extra["reference_min"])
        return {**row, **extra}


def _clock(fn, number):
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(number):
            fn()
        return time.perf_counter() - start
    finally:
        if was_enabled:
            gc.enable()


def _ratio(a, b):
    return a / b if a is not None and b else None


# ---- discovery and selection ----------------------------------------------------------------
def discover(bench_dir):
    """Names of the benchmark modules in `bench_dir`."""
    return sorted(p.stem for p in Path(bench_dir).glob("*.py")
                  if not p.stem.startswith("_") and p.stem != "runner")


def load(bench_dir, name):
    if str(bench_dir) not in sys.path:  # their shared _helpers.py, as `python bench/x.py` has it
        sys.path.append(str(bench_dir))
    path = Path(bench_dir) / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"ember_bench.{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    if not isinstance(getattr(module, "BENCHMARKS", None), dict):
        raise UnknownBenchmark(f"{path} defines no BENCHMARKS dict")
    return module


def select(bench_dir, names):
    """[(module name, module, [benchmark names])] for NAMEs such as `ownership` or
    `ndarray_vs_numpy.matmul`; every name is checked before anything runs."""
    available = discover(bench_dir)
    wanted = {}  # module name -> benchmark names (None: all), in the order given
    for name in names or available:
        mod, _, fn = name.partition(".")
        if mod not in available:
            raise UnknownBenchmark(
                f"unknown benchmark {name!r}; available: {', '.join(available)} "
                f"(or MODULE.NAME for one benchmark of a module)")
        if mod not in wanted or not fn:
            wanted[mod] = None if not fn else [fn]
        elif wanted[mod] is not None and fn not in wanted[mod]:
            wanted[mod].append(fn)
    chosen = []
    for mod, fns in wanted.items():
        module = load(bench_dir, mod)
        for fn in fns or ():
            if fn not in module.BENCHMARKS:
                raise UnknownBenchmark(f"unknown benchmark '{mod}.{fn}'; {mod} has: "
                                       f"{', '.join(module.BENCHMARKS)}")
        chosen.append((mod, module, fns or list(module.BENCHMARKS)))
    return chosen


# ---- output ---------------------------------------------------------------------------------
COLUMNS = [("benchmark", "benchmark"), ("case", "case"), ("ember", "ember"),
           ("reference", "reference"), ("ratio", "ratio (ember/ref)"),
           ("min_ratio", "ratio of mins"), ("unit", "unit")]


def _cell(key, value):
    if value is None:
        return "-"
    if key in ("ratio", "min_ratio"):
        return f"{value:.2f}x"
    if isinstance(value, float):
        return f"{value:.1f}" if abs(value) >= 100 else f"{value:.2f}" if abs(value) >= 1 \
            else f"{value:.3f}"
    return str(value)


def table(rows):
    cells = [[title for _, title in COLUMNS]]
    cells += [[_cell(key, row.get(key)) for key, _ in COLUMNS] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(COLUMNS))]
    numeric = {"ember", "reference", "ratio", "min_ratio"}

    def line(r):
        return " | ".join(c.rjust(w) if key in numeric else c.ljust(w)
                          for (key, _), c, w in zip(COLUMNS, r, widths)).rstrip()
    rule = "-+-".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule] + [line(r) for r in cells[1:]])


def machine_info():
    import numpy as np

    import ember
    info = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "numpy": np.__version__,
        "ember": ember.__version__,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
    }
    try:
        info["blas"] = np.show_config(mode="dicts")["Build Dependencies"]["blas"]["name"]
    except Exception:  # older NumPy or an unusual build: the BLAS name is only a nicety
        info["blas"] = None
    try:  # whether NdArray's C kernels computed (compiled on first use: after the runs)
        from ember.backends import native
        info["native"] = native.status()
    except ImportError:  # Pyodide: no native kernels
        info["native"] = None
    return info


# ---- the run --------------------------------------------------------------------------------
def main(bench_dir, names=(), json_path=None, repeat=None, quick=False, out=None):
    """Run the selected benchmarks; print the table to `out` (stdout). Returns 0."""
    out = out or sys.stdout
    chosen = select(bench_dir, names)
    ctx = Context(repeat or (3 if quick else 15), quick)
    rows, notes = [], []
    for mod, module, fns in chosen:
        mod_rows = []
        for fn in fns:
            label = f"{mod}.{fn}"
            print(f"running {label} ...", file=sys.stderr, flush=True)
            start = time.perf_counter()
            for row in module.BENCHMARKS[fn](ctx):
                mod_rows.append({"benchmark": label, **row})
            print(f"  {label}: {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
        rows += mod_rows
        if hasattr(module, "summarize"):
            notes += [f"{mod}: {line}" for line in module.summarize(mod_rows)]
    info = machine_info()
    print(f"python {info['python']}, numpy {info['numpy']} ({info['blas']}), ember "
          f"{info['ember']}, {info['cpus_usable']} CPUs, {info['date']}", file=out)
    if info.get("native"):
        print(f"NdArray's native kernels: {info['native']}", file=out)
    print(file=out)
    print(table(rows), file=out)
    print(f"\nember, reference: medians of {ctx.repeat} interleaved samples (each the mean of "
          "`number` calls); ratio of mins: the fastest samples' ratio.\nRatios are measured "
          "and printed, never asserted.", file=out)
    for line in notes:
        print(line, file=out)
    if json_path:
        report = {"machine": info,
                  "settings": {"repeat": ctx.repeat, "quick": quick, "target_s": ctx.target,
                               "names": list(names or [])},
                  "rows": rows, "notes": notes}
        Path(json_path).write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {json_path}", file=sys.stderr)
    return 0
