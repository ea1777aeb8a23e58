"""The backends the op suite runs on: every op case and property runs once per entry.

A new backend joins the suite by adding one line here; nothing else in tests/ops names one.
A backend that holds only some dtypes says which in a `dtypes` attribute (Wgpu: no 64-bit
types); wherever a test needs another dtype, it must raise a DTypeError naming it instead
(`supported` below).
"""

import contextlib
import importlib.util
import os
import sys

import pytest

from ember import DTypeError
from ember.backend import Autodiff, Fusion, NdArray

BACKENDS = [
    ("ndarray", NdArray),
    # NumPy alone (no compiled kernels): every case gives what the default instance gives
    ("ndarray-numpy", lambda: NdArray(kernels="numpy")),
    # the ownership optimisation off: results must not depend on buffer reuse
    ("ndarray-copy", lambda: NdArray(inplace=False)),
    # the decorator must not change any result (gradients are checked in tests/autodiff)
    ("autodiff-ndarray", lambda: Autodiff(NdArray())),
    # elementwise chains fused into one pass (ember.fusion): the same results as op by op
    ("fusion-ndarray", lambda: Fusion(NdArray())),
    ("autodiff-fusion-ndarray", lambda: Autodiff(Fusion(NdArray()))),
]


def _wgpu():
    from ember import BackendError
    from ember.backend import Wgpu
    try:
        return Wgpu()
    except BackendError as e:  # wgpu-py without a Vulkan/Metal/DX12 driver: say so once a test
        pytest.skip(f"Wgpu: {e}")


def _wgpu_here():
    """WebGPU through wgpu-py (lavapipe on machines without a GPU), or inside Pyodide in a
    browser once the page has requested its device (bridge_browser.request_device())."""
    if sys.platform == "emscripten":
        from ember.backends.wgpu import bridge_browser
        return bool(bridge_browser._STATE)
    return importlib.util.find_spec("wgpu") is not None


if _wgpu_here():  # float32, int32 and bool
    BACKENDS += [("wgpu", _wgpu), ("fusion-wgpu", lambda: Fusion(_wgpu())),
                 ("autodiff-fusion-wgpu", lambda: Autodiff(Fusion(_wgpu())))]

# PyTorch's kernels where torch is installed (CI installs it); on a GPU machine
# EMBER_TEST_TORCH_DEVICE=cuda runs the same stacks on Torch("cuda")
TORCH_DEVICE = os.environ.get("EMBER_TEST_TORCH_DEVICE", "cpu")


def _torch(**kw):
    from ember.backend import Torch
    return Torch(TORCH_DEVICE, **kw)


if importlib.util.find_spec("torch") is not None:
    BACKENDS += [
        ("torch", _torch),
        ("torch-copy", lambda: _torch(inplace=False)),
        ("autodiff-torch", lambda: Autodiff(_torch())),
    ]

# the Autodiff stacks the gradient checks (tests/autodiff/test_gradcheck.py) run on: finite
# differences need float64, which Wgpu does not hold (tests/fusion checks its gradients against
# NdArray's)
AUTODIFF = [(name, make) for name, make in BACKENDS
            if name.startswith("autodiff-") and "wgpu" not in name]


@pytest.fixture(params=[make for _, make in BACKENDS], ids=[name for name, _ in BACKENDS])
def backend(request):
    """A fresh instance of each backend in BACKENDS."""
    return request.param()


def unsupported(backend, *dtypes):
    """The dtypes (strings) among `dtypes` that `backend` cannot hold; other values (Python
    scalars, None) are ignored."""
    held = getattr(backend, "dtypes", None)
    if held is None:
        return []
    return sorted({d for d in dtypes if isinstance(d, str) and d not in held})


@contextlib.contextmanager
def supported(backend, *dtypes):
    """Run the body as is where the backend holds every dtype in `dtypes`; elsewhere the body
    must raise a DTypeError that names one of the missing dtypes (never narrow silently)."""
    missing = unsupported(backend, *dtypes)
    if not missing:
        yield
        return
    with pytest.raises(DTypeError, match="|".join(missing)):
        yield
