"""Burn's ownership optimisation, measured: a 16-op elementwise chain on NdArray() (results may
reuse the buffer of a temporary nobody else holds) against NdArray(inplace=False) (every op
allocates) and against the same chain written in plain NumPy. Eager ember donates a temporary
reached through a method call; the chain's operators donate where ownership is known: in
ember.jit's replay (`jit` rows: an intermediate's buffer is free after its last use).

Peak memory comes from tracemalloc (NumPy reports its buffers to it) during one evaluation,
the input excluded and the result included; one array of the case is 4 MiB (1024x1024) or
16 MiB (4096x1024). Idiomatic NumPy reuses temporaries of its operators (`t * 2 + 1`) but not
of its function calls (`np.exp(t)`), so at those its peak is two arrays, as without ownership.
"""

import numpy as np

import ember
from ember import Tensor
from ember.backend import NdArray

SHAPES = {"1024x1024": (1024, 1024), "4096x1024": (4096, 1024)}
OPS = 16
MIB = 2**20


def chain_ember(x):
    return ((((((((x * 2 + 1) * 0.25).exp() - 3) / 4).tanh() * 0.5 + x).abs() + 1)
             .sqrt().log() * 3 - 1).sin())


def chain_numpy(x):
    return np.sin(np.log(np.sqrt(np.abs(np.tanh((np.exp((x * 2 + 1) * 0.25) - 3) / 4) * 0.5 + x)
                             + 1)) * 3 - 1)


def chain(ctx):
    for size, shape in SHAPES.items():
        on = Tensor.from_data(np.random.default_rng(0).random(shape, dtype=np.float32),
                              backend=NdArray())
        off = Tensor.from_data(on, backend=NdArray(inplace=False))
        x = on.to_numpy()  # NumPy reads ember's own buffer (a read-only view): same memory
        jitted = ember.jit(chain_ember)
        fns = {"inplace": lambda on=on: chain_ember(on),
               "inplace=False": lambda off=off: chain_ember(off),
               "numpy": lambda x=x: chain_numpy(x),
               "jit": lambda on=on, jitted=jitted: jitted(on)}
        want = fns["numpy"]()
        for fn in fns.values():  # the same work, or the comparison means nothing
            got = fn()
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)
            del got
        del want
        fns["jit"]()  # its second call captures; peak and time below measure replays

        peak = {k: ctx.peak_bytes(fn) / MIB for k, fn in fns.items()}
        case = f"chain{OPS} {size} float32"
        for ref in ("inplace=False", "numpy"):
            yield ctx.row(f"{case} peak memory, NdArray() vs {ref}", peak["inplace"], peak[ref],
                          "MiB", arrays_of_mib=x.nbytes / MIB)
            yield ctx.row(f"{case} peak memory, jit(NdArray()) vs {ref}", peak["jit"],
                          peak[ref], "MiB", arrays_of_mib=x.nbytes / MIB)
        t_on, t_off, t_np, t_jit = ctx.measure(*fns.values())
        yield ctx.time_row(f"{case} time, jit(NdArray()) vs numpy", t_jit, t_np)
        yield ctx.time_row(f"{case} time, NdArray() vs inplace=False", t_on, t_off)
        yield ctx.time_row(f"{case} time, NdArray() vs numpy", t_on, t_np)
        yield ctx.time_row(f"{case} time, inplace=False vs numpy", t_off, t_np)


BENCHMARKS = {"chain": chain}


def summarize(rows):
    lines = []
    for r in rows:
        if r["case"].endswith("vs inplace=False") and r["unit"] == "MiB":
            case, stack = r["case"].split(" peak memory, ")
            lines.append(f"{case} on {stack.split(' vs')[0]}: peak {r['ember']:.1f} MiB with "
                         f"ownership, {r['reference']:.1f} MiB without (one array: "
                         f"{r['arrays_of_mib']:.0f} MiB)")
    return lines
