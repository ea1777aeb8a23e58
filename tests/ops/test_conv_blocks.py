"""The NumPy convolutions' fast paths (ember/ops/nn.py) against the loop references of
cases_nn.py: conv2d_weight and stride-1 conv_transpose2d run over the batch in blocks of
images (forced here to one image per block, where the conformance suite's small batches fit
one block); at stride 1 conv2d and conv2d_weight read their windows as runs of the padded
input's flattened planes (_grid), and conv_transpose2d sums the kernel's columns in its GEMM
over planes widened by zeros; a weight that is not finite takes the general path."""

import numpy as np
import pytest

from ember.ops import nn as N

from .cases_nn import conv2d_ref, conv2d_weight_ref, conv_transpose2d_ref

GEOMETRIES = [  # kernel, padding ((top, bottom), (left, right)), dilation
    ((3, 3), ((0, 0), (0, 0)), (1, 1)),
    ((2, 3), ((1, 0), (2, 1)), (1, 2)),
    ((3, 1), ((2, 2), (0, 0)), (2, 1)),
]


@pytest.fixture(params=["one block", "one image per block"])
def blocks(request, monkeypatch):
    if request.param != "one block":
        monkeypatch.setattr(N, "_BLOCK_BYTES", 1)


@pytest.mark.parametrize("kernel, pads, dilation", GEOMETRIES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_transpose2d_stride1(blocks, kernel, pads, dilation, dtype):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 3, 6, 7)).astype(dtype)
    w = rng.standard_normal((3, 4) + kernel).astype(dtype)
    attrs = dict(stride=(1, 1), padding=pads, dilation=dilation, groups=1)
    got = N._conv_transpose2d_np(x, w, **attrs)
    want = conv_transpose2d_ref((1, 1), pads, dilation, 1)(x, w)
    assert got.shape == want.shape and got.dtype == dtype and got.flags.c_contiguous
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kernel, pads, dilation", GEOMETRIES)
@pytest.mark.parametrize("groups", [1, 3])
def test_conv2d_grid(blocks, kernel, pads, dilation, groups):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 6, 8, 7)).astype(np.float32)[:, :, 1:, ::-1]  # not contiguous
    w = rng.standard_normal((9, 6 // groups) + kernel).astype(np.float32)
    b = rng.standard_normal(9).astype(np.float32)
    attrs = dict(stride=(1, 1), padding=pads, dilation=dilation, groups=groups)
    got = N._conv2d_np(x, w, b, **attrs)
    want = conv2d_ref((1, 1), pads, dilation, groups)(x, w) + b.reshape(1, 9, 1, 1)
    assert got.shape == want.shape and got.flags.c_contiguous
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kernel, pads, dilation", GEOMETRIES)
def test_conv2d_weight_blocks(blocks, kernel, pads, dilation):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 3, 8, 7)).astype(np.float32)
    oh, ow = N._window_out("t", (8, 7), kernel, (1, 1), pads, dilation, x.shape)
    g = rng.standard_normal((5, 4, oh, ow)).astype(np.float32)
    attrs = dict(stride=(1, 1), padding=pads, dilation=dilation, groups=1)
    got = N._conv2d_weight_np(x, g, kernel, **attrs)
    want = conv2d_weight_ref(kernel, (1, 1), pads, dilation, 1)(x, g)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_conv_transpose2d_infinite_weight_stays_local():
    """The zero columns the flat path adds would turn an infinite weight's products into
    NaN beside the true infinities: such weights take the general path."""
    x = np.ones((1, 1, 3, 3), np.float32)
    w = np.zeros((1, 1, 2, 2), np.float32)
    w[0, 0, 0, 0] = np.inf
    got = N._conv_transpose2d_np(x, w, stride=(1, 1), padding=((0, 0), (0, 0)),
                                 dilation=(1, 1), groups=1)
    want = np.zeros((1, 1, 4, 4), np.float32)
    want[0, 0, :3, :3] = np.inf
    np.testing.assert_array_equal(got, want)
