"""The op conformance suite (tests/ops) inside Pyodide: the site's own Pyodide, numpy and ember
wheel, run by pytest in Node (e2e/pyodide_pytest.mjs), against the same suite in CPython. Both
runs happen side by side; every case that passes in CPython must pass in Pyodide too.

The two NumPys differ (Pyodide 0.27.7 ships NumPy 2.0.2 on wasm32, where np.intp is 32 bits),
which is exactly what this test is for.
"""

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from ember import site

ROOT = Path(__file__).resolve().parents[1]
SUITE = "tests/ops"
FILES = ["pyproject.toml", "tests/conftest.py", SUITE]  # what Pyodide's file system gets


def outcomes(junit_xml):
    """{test id: passed | failed | error | skipped} from a JUnit XML report."""
    result = {}
    for case in ET.fromstring(junit_xml).iter("testcase"):
        kinds = {child.tag for child in case} & {"failure", "error", "skipped"}
        outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}.get(
            next(iter(kinds), ""), "passed")
        result[f"{case.get('classname')}::{case.get('name')}"] = outcome
    return result


def counts(result):
    return {k: sum(1 for v in result.values() if v == k)
            for k in ("passed", "failed", "error", "skipped")}


def test_conformance_suite_passes_in_pyodide_as_in_cpython(site_dir, tmp_path, capsys):
    env = {k: v for k, v in os.environ.items() if k == "CI"}
    config = {"pyodide_dir": str(site_dir / "pyodide"), "repo": str(ROOT), "files": FILES,
              "wheels": [str(p) for p in site.test_wheels(ROOT)], "env": env,
              "args": [SUITE, "-q", "-p", "no:randomly"]}
    (tmp_path / "config.json").write_text(json.dumps(config))
    cpython_xml = tmp_path / "cpython.xml"
    # Node has no WebGPU and Pyodide no torch: the CPython side runs the backends
    # Pyodide-in-Node has (the Wgpu cases run in CPython through wgpu-py in tests/, and in the
    # browser in e2e/; the Torch cases in tests/)
    cpython = subprocess.Popen(
        [sys.executable, "-m", "pytest", SUITE, "-q", "-p", "no:cacheprovider", "-k",
         "not wgpu and not torch", "--junitxml", str(cpython_xml)], cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pyodide = subprocess.run(["node", str(ROOT / "e2e" / "pyodide_pytest.mjs"),
                              str(tmp_path / "config.json")], capture_output=True, text=True,
                             timeout=1800)
    cpython_log = cpython.communicate(timeout=1800)[0]
    marker = next((line for line in pyodide.stdout.splitlines()
                   if line.startswith("PYODIDE_PYTEST ")), None)
    assert marker, f"the Pyodide run ended without a report:\n{pyodide.stdout[-4000:]}" \
                   f"{pyodide.stderr[-4000:]}"
    in_pyodide = outcomes(json.loads(marker[len("PYODIDE_PYTEST "):])["junit"])
    in_cpython = outcomes(cpython_xml.read_text())
    c_py, c_cp = counts(in_pyodide), counts(in_cpython)
    with capsys.disabled():
        print(f"\nconformance ({SUITE}): CPython {c_cp['passed']} passed, {c_cp['failed']} "
              f"failed, {c_cp['skipped']} skipped; Pyodide {c_py['passed']} passed, "
              f"{c_py['failed']} failed, {c_py['skipped']} skipped")
    assert c_cp["passed"] > 0 and not c_cp["failed"] + c_cp["error"], cpython_log[-4000:]
    only_cpython = sorted(k for k, v in in_cpython.items()
                          if v == "passed" and in_pyodide.get(k) != "passed")
    log = pyodide.stdout[:pyodide.stdout.find("PYODIDE_PYTEST ")]
    tail = log[log.rfind("short test summary"):][:3000]
    assert not only_cpython, \
        f"{len(only_cpython)} cases pass in CPython but not in Pyodide:\n{tail}"
    assert c_py["passed"] == c_cp["passed"], (c_py, c_cp)
