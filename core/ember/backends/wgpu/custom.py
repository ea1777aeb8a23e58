"""Custom ops: your own primitive, with your own WGSL (and a gradient), used like any other.

A custom op is an entry like those of the op table (ember/ops), built by `custom_op` and kept
out of the global table: it runs its NumPy reference on NdArray, its WGSL on Wgpu, and its
gradient rule under Autodiff, on any stack of backends. Call it like a function.

An elementwise op only needs a WGSL expression; Wgpu generates its kernel (strides,
broadcasting, scalars and buffer reuse included):

    import numpy as np
    from ember.backends.wgpu import custom_op

    swish = custom_op(
        "swish", "unary",
        np=lambda x, out=None: np.divide(x, 1 + np.exp(-x), out=out),
        wgsl="({0} / (1.0 + exp(-{0})))",
        grad=lambda g, y, x: (g * (y + (x.sigmoid() * (1 - y))),), saves=(0, "out"))
    y = swish(x)            # x: a Tensor on NdArray(), Wgpu(), Autodiff(Wgpu()), ...

Any op can instead have a kernel of its own, from `register_kernel(op, runner)`. The runner
receives the Wgpu backend and the op's prims and returns the result's prim; `launch` runs a
WGSL source over dense prims. `fused_softmax` below is the worked example (a softmax over the
last dim in one kernel, shaders/softmax.wgsl, with its gradient written in ember's ops):

    from ember.backends.wgpu.custom import fused_softmax
    probs = fused_softmax(logits)

Kernel conventions (see shaders/views.wgsl and bridge.py): `info`, group 0 binding 0, holds
your parameters as i32 words (`words` in `launch`); group 1 holds the output (binding 0,
read-write) and then each input (read-only) in order.
"""

import numpy as np

from ... import shape as S
from ...ops import BINARY, COMPARE, ELEMENTWISE, REDUCE, UNARY, Op
from .kernels import compile_kernel, source
from .layout import STORAGE, groups_1d


class CustomOp(Op):
    """An op-table entry that is callable: `op(*tensors, **attrs)` -> Tensor."""

    def __call__(self, *args, **attrs):
        from ...tensor import _apply, _elementwise
        if self.kind in ELEMENTWISE and not attrs:
            return _elementwise(self, *args)
        return _apply(self, *args, **attrs)


def _defaults(name, kind):
    same_shape = lambda *s, **a: s[0]  # noqa: E731
    same_dtype = lambda *d, **a: d[0]  # noqa: E731
    broadcast = lambda *s, **a: S.broadcast(name, *s)  # noqa: E731
    return {
        UNARY: dict(shape=same_shape, dtype=same_dtype, donors=(0,)),
        BINARY: dict(shape=broadcast, dtype=same_dtype, donors=(0, 1), scalars=True),
        COMPARE: dict(shape=broadcast, dtype=lambda *d, **a: "bool", scalars=True),
        REDUCE: dict(shape=lambda s, dims, **a: tuple(1 if i in dims else n
                                                      for i, n in enumerate(s)),
                     dtype=same_dtype),
    }.get(kind, dict(shape=same_shape, dtype=same_dtype))


def custom_op(name, kind, np, wgsl=None, grad=None, **rules):
    """An op like those of ember.ops (same fields, same kinds and defaults), callable, and not
    added to the global op table. `wgsl`: an expression template ("exp({0})") for the
    elementwise kinds; any op can instead get a kernel of its own from `register_kernel`."""
    return CustomOp(name, kind, np, wgsl, grad, **{**_defaults(name, kind), **rules})


def register_kernel(op, runner):
    """Run `op` (a custom_op) with `runner(backend, op, inputs, attrs, shape, dtype)`, which
    returns the result's prim (see `launch`)."""
    from . import runners
    if not isinstance(op, Op):
        raise TypeError(f"register_kernel: expected the op (a custom_op), got {op!r}")
    runners.KERNELS[op] = runner
    runners.CACHE.pop(op, None)
    return runner


def launch(backend, wgsl, out, inputs, words, groups, entry="main", fields=None):
    """Dispatch WGSL source `wgsl` (or a file name in shaders/) writing the prim `out`
    (binding 0) and reading the prims `inputs` (bindings 1...), with `words` as `info` on
    `groups` workgroups. `fields` fill ${NAME} marks of the source. The kernel is compiled
    once per (source, fields, entry)."""
    import string
    key = ("custom", wgsl, entry, tuple(sorted((fields or {}).items())))

    def build():
        text = source(wgsl) if wgsl.endswith(".wgsl") and "\n" not in wgsl else wgsl
        if fields:
            text = string.Template(text).substitute(fields)
        return text, entry, ("w",) + ("r",) * len(inputs)

    kernel = compile_kernel(backend.device, key, wgsl if len(wgsl) < 40 else "custom", build)
    buffers = (out.storage.gpu,) + tuple(x.storage.gpu for x in inputs)
    backend.device.dispatch(kernel, buffers, list(words), groups, backend.cache)
    return out


# ---- the worked example: a fused softmax over the last dim ------------------------------------
def _softmax_np(x, out=None):
    shifted = x - np.max(x, axis=-1, keepdims=True)
    e = np.exp(shifted)
    return np.divide(e, np.sum(e, axis=-1, keepdims=True), out=out)


def _softmax_grad(g, y, x):
    # d softmax: y * (g - sum(g * y)) along the last dim
    return (y * (g - (g * y).sum_dim(-1)),)


def _run_softmax(backend, op, inputs, attrs, shape, dtype):
    x = backend.dense(inputs[0])
    out = backend.empty(shape, dtype)
    cols = shape[-1] if shape else 1
    rows = (int(np.prod(shape)) // cols) if cols else 0
    if rows == 0 or cols == 0:
        return out
    return launch(backend, "softmax.wgsl", out, [x], [rows, cols, x.offset], groups_1d(rows, 1),
                  fields={"T": STORAGE[dtype]})


fused_softmax = custom_op("fused_softmax", UNARY, _softmax_np, None, _softmax_grad,
                          saves=("out",), dtypes=("float32", "float64"), float_only=True,
                          donors=())
register_kernel(fused_softmax, _run_softmax)

__all__ = ["CustomOp", "custom_op", "fused_softmax", "launch", "register_kernel"]
