"""The backends the op suite runs on: every op case and property runs once per entry.

A new backend joins the suite by adding one line here; nothing else in tests/ops names one.
"""

import pytest

from ember.backend import Autodiff, NdArray

BACKENDS = [
    ("ndarray", NdArray),
    # the ownership optimisation off: results must not depend on buffer reuse
    ("ndarray-copy", lambda: NdArray(inplace=False)),
    # the decorator must not change any result (gradients are checked in tests/autodiff)
    ("autodiff-ndarray", lambda: Autodiff(NdArray())),
    # later backends get added here, e.g. ("wgpu", Wgpu),
]


@pytest.fixture(params=[make for _, make in BACKENDS], ids=[name for name, _ in BACKENDS])
def backend(request):
    """A fresh instance of each backend in BACKENDS."""
    return request.param()
