"""A custom op with its own WGSL kernel and its gradient, checked on every backend stack.

    python docs/examples/custom_wgsl_op/swish.py             # 1M elements
    python docs/examples/custom_wgsl_op/swish.py --n 4096    # the CI-sized run

`swish(x) = x * sigmoid(beta * x)` gets a hand-written WGSL kernel (register_kernel) with
`beta` passed in the kernel's `info` words, a NumPy reference (what NdArray runs) and a
gradient rule written in ember's tensor ops (what Autodiff runs, on any backend). The script
checks the values and the gradient against NumPy and finite differences, on NdArray, Wgpu and
Autodiff over both, and prints how many kernels each forward launched.
"""

import argparse

import numpy as np

import ember
from ember import Tensor
from ember.backend import Autodiff, NdArray, Wgpu
from ember.backends.wgpu import custom_op, register_kernel
from ember.backends.wgpu.custom import launch
from ember.backends.wgpu.layout import groups_1d

SWISH_WGSL = """
@group(0) @binding(0) var<storage, read> info: array<i32>;   // n, beta's bits, x's offset
@group(1) @binding(0) var<storage, read_write> out: array<f32>;
@group(1) @binding(1) var<storage, read> x: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = i32(id.x + id.y * nwg.x * 256u);
    if (i >= info[0]) { return; }
    let beta = bitcast<f32>(info[1]);
    let v = x[info[2] + i];
    out[i] = v / (1.0 + exp(-beta * v));
}
"""


def swish_np(x, out=None, beta=1.0):
    return np.divide(x, 1 + np.exp(-np.float32(beta) * x), out=out)


def swish_grad(g, y, x, beta):
    # d/dx x s(bx) = s(bx) + b x s(bx) (1 - s(bx)),  s(bx) = y / x
    s = (x * beta).sigmoid()
    return (g * (s + x * s * (1 - s) * beta),)


def run_swish(backend, op, inputs, attrs, shape, dtype):
    x = backend.dense(inputs[0])
    out = backend.empty(shape, dtype)
    n = int(np.prod(shape))
    if n:
        beta_bits = int(np.float32(attrs["beta"]).view(np.int32))
        launch(backend, SWISH_WGSL, out, [x], [n, beta_bits, x.offset], groups_1d(n))
    return out


# float64 too (NdArray's; the WGSL kernel is f32: Wgpu holds no 64-bit types)
swish = custom_op("swish_beta", "unary", np=swish_np, grad=swish_grad, saves=(0,),
                  dtypes=("float32", "float64"), float_only=True, donors=())
register_kernel(swish, run_swish)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1 << 20, help="elements")
    p.add_argument("--beta", type=float, default=1.5)
    args = p.parse_args(argv)

    a = np.random.default_rng(0).standard_normal(args.n).astype(np.float32) * 3
    s = 1 / (1 + np.exp(-args.beta * a.astype(np.float64)))
    want_y, want_g = a * s, s + args.beta * a * s * (1 - s)

    # the gradient rule itself, against central finite differences in float64
    a64 = a[:64].astype(np.float64)
    h = 1e-6
    fd = (swish_np(a64 + h, beta=args.beta) - swish_np(a64 - h, beta=args.beta)) / (2 * h)
    x64 = Tensor.from_data(a64, backend=Autodiff(NdArray())).require_grad()
    rule = x64.grad(swish(x64, beta=args.beta).sum().backward()).to_numpy()
    assert np.allclose(rule, fd, rtol=1e-6, atol=1e-8), "gradient rule vs finite differences"

    for backend in (NdArray(), Wgpu(), Autodiff(NdArray()), Autodiff(Wgpu())):
        x = Tensor.from_data(a, backend=backend)
        if isinstance(backend, Autodiff):
            x = x.require_grad()
        with ember.fusion.trace() as t:
            y = swish(x, beta=args.beta)
            got_y = y.to_numpy()
        err_y = float(np.abs(got_y - want_y).max())
        assert err_y < 1e-4, (str(backend), err_y)
        line = f"{str(backend)[:34]:34} forward: {len(t.kernels)} kernel, max error {err_y:.1e}"
        if isinstance(backend, Autodiff):
            got_g = x.grad(y.sum().backward()).to_numpy()
            err_g = float(np.abs(got_g - want_g).max())
            assert err_g < 1e-4, (str(backend), err_g)
            line += f"; gradient max error {err_g:.1e}"
        print(line)
    print(f"swish_beta: {args.n} elements, beta={args.beta}: values and gradients match on "
          "NdArray, Wgpu and Autodiff over both")


if __name__ == "__main__":
    main()
