"""The ONNX backend node tests through ember.onnx's op table, one test per case.

A case ember cannot run (an op it lacks, a dtype it does not have, sequence values) is skipped
with ember's own reason ("unsupported: X"); `python tests/onnx/node_cases.py -v` prints the
pass count by op family and every reason.
"""

import pytest

pytest.importorskip("onnx")

import node_cases  # noqa: E402  (no __init__.py here: a package would hide onnx)

from ember.backend import Autodiff, NdArray  # noqa: E402

CASES = node_cases.cases()


@pytest.mark.parametrize("name", sorted(CASES))
def test_node_case(name):
    status, detail = node_cases.run(CASES[name])
    if status == "unsupported":
        pytest.skip(detail)
    assert status == "pass", detail


@pytest.mark.parametrize("name", sorted(CASES)[::10])
def test_node_case_under_autodiff(name):
    """Every tenth case again on Autodiff(NdArray()): the table's compositions are the same
    there (`python tests/onnx/node_cases.py --autodiff` runs them all: the same count)."""
    status, detail = node_cases.run(CASES[name], backend=Autodiff(NdArray()))
    if status == "unsupported":
        pytest.skip(detail)
    assert status == "pass", detail


@pytest.mark.parametrize("name", sorted(CASES)[5::20])
def test_node_case_on_wgpu(name):
    """Every twentieth case on Wgpu (`node_cases.py --wgpu` runs them all): int64 held as
    int32 there, float64 unsupported."""
    pytest.importorskip("wgpu")
    from ember.backend import Wgpu

    status, detail = node_cases.run(CASES[name], backend=Wgpu())
    if status == "unsupported":
        pytest.skip(detail)
    assert status == "pass", detail
