"""The ONNX backend node tests (onnx.backend.test.case.node), run through ember.onnx.

Each case is a one-node model (or its function body, "_expanded") with inputs and expected
outputs, generated in memory by the onnx package (a test-only dependency). A case passes when
every output has the expected dtype and shape and its values match within rtol 1e-3, atol 1e-5
(NaN matching NaN); it is "unsupported: X" when ember refuses the model saying what it lacks.
On a backend without 64-bit integers (Wgpu), ONNX's int64 values are held as int32 (ember.onnx
does so, range-checked, as onnxruntime-web does): an int32 output stands for an int64 one, and
a case that needs float64 there is unsupported (WGSL has no 64-bit floats).

    python tests/onnx/node_cases.py [-v] [--autodiff | --wgpu]
        the pass count by op family (-v: every skip reason and failure), on NdArray (or
        Autodiff(NdArray()), or Wgpu: it holds no int64 or float64, which fail there)
"""

import collections
import re
import sys
import warnings

import numpy as np

from ember import DTypeError
from ember import onnx as eonnx
from ember.backend import Autodiff, NdArray
from ember.onnx.model import holds_int64

RTOL, ATOL = 1e-3, 1e-5


def cases():
    """The node test cases, by name (generating them takes ~10 s)."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = collect_testcases(None)
    return {c.name: c for c in found}


def family(case, all_cases):
    """The op a case tests: its one node's op (an "_expanded" case: its plain twin's), else the
    op its name starts with."""
    twin = all_cases.get(re.sub(r"_expanded.*$", "", case.name), case)
    if len(twin.model.graph.node) == 1:
        return twin.model.graph.node[0].op_type
    name, best = case.name[len("test_"):], None
    for op in {n.op_type for c in all_cases.values() for n in c.model.graph.node}:
        snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", op).lower()
        if name.startswith(snake) and (best is None or len(snake) > len(best[0])):
            best = (snake, op)
    return best[1] if best else name.split("_")[0]


def run(case, backend=None):
    """("pass" | "fail" | "unsupported", detail) for one case."""
    data = case.model.SerializeToString()
    backend = backend or NdArray()
    narrow = not holds_int64(backend)
    try:
        model = eonnx.load(data, backend=backend)
    except eonnx.OnnxError as e:
        if "unsupported" in str(e):
            return "unsupported", _reason(e)
        return "fail", f"load: {e}"
    for inputs, expected in case.data_sets:
        inputs, expected = [_array(x) for x in inputs], [_array(x) for x in expected]
        if any(x is None for x in inputs + expected):
            return "unsupported", "unsupported: sequence or optional values"
        try:
            with np.errstate(all="ignore"):
                got = model(*inputs)
        except eonnx.OnnxError as e:
            if "unsupported" in str(e):
                return "unsupported", _reason(e)
            if narrow and "64-bit" in str(e) and "float64" in str(e):
                return "unsupported", "unsupported: dtype float64 on this backend"
            return "fail", f"run: {e}"
        except DTypeError as e:  # Wgpu refusing float64 data
            if narrow and "float64" in str(e):
                return "unsupported", "unsupported: dtype float64 on this backend"
            return "fail", f"run: {type(e).__name__}: {e}"
        except Exception as e:  # a bug: reported as a failure with its type
            return "fail", f"run: {type(e).__name__}: {e}"
        got = got if isinstance(got, tuple) else (got,)
        if len(got) != len(expected):
            return "fail", f"{len(got)} outputs, expected {len(expected)}"
        for i, (g, want) in enumerate(zip(got, expected)):
            g = g.to_numpy()
            if narrow and g.dtype == np.int32 and want.dtype == np.int64:
                g = g.astype(np.int64)
            if g.dtype != want.dtype or g.shape != want.shape:
                return "fail", f"output {i}: {g.dtype}{list(g.shape)}, expected " \
                               f"{want.dtype}{list(want.shape)}"
            try:
                np.testing.assert_allclose(g, want, rtol=RTOL, atol=ATOL, equal_nan=True)
            except AssertionError as e:
                return "fail", f"output {i}: " + " ".join(str(e).split("\n")[3:5])
    return "pass", ""


def _array(x):
    """x as a NumPy array (cases hold NumPy scalars and TensorProtos too), None for sequences."""
    from onnx import TensorProto, numpy_helper

    if isinstance(x, TensorProto):
        try:
            return numpy_helper.to_array(x)
        except Exception:  # a dtype NumPy lacks (float8, int4): the model is refused anyway
            return np.zeros(0)
    return np.asarray(x) if isinstance(x, (np.ndarray, np.generic)) else None


def _reason(e):
    found = re.findall(r"unsupported: ([^)]*)\)", str(e))
    return "unsupported: " + (found[0] if found else str(e))


def main():
    all_cases = cases()
    backend = Autodiff(NdArray()) if "--autodiff" in sys.argv else NdArray()
    if "--wgpu" in sys.argv:
        from ember.backend import Wgpu
        backend = Wgpu()
    by_family = collections.defaultdict(collections.Counter)
    reasons, failures = collections.Counter(), []
    for name, case in sorted(all_cases.items()):
        status, detail = run(case, backend)
        by_family[family(case, all_cases)][status] += 1
        if status == "unsupported":
            reasons[detail] += 1
        elif status == "fail":
            failures.append(f"{name}: {detail}"[:200])
    total = collections.Counter()
    for fam, counts in sorted(by_family.items()):
        total.update(counts)
        print(f"{fam:32s} {counts['pass']:4d} / {sum(counts.values()):4d}"
              + (f"   ({counts['fail']} fail)" if counts["fail"] else ""))
    print(f"\n{backend}: PASS {total['pass']} / {sum(total.values())}   fail {total['fail']}   "
          f"unsupported {total['unsupported']}   (ops in the table: {len(eonnx.OPS)})")
    if "-v" in sys.argv:
        print("\nunsupported:")
        for r, n in reasons.most_common():
            print(f"  {n:4d}  {r}")
        print("\nfailures:")
        print("\n".join("  " + f for f in failures))


if __name__ == "__main__":
    main()
