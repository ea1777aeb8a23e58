"""The Torch backend's conformance on CUDA (issue 23): tests/backends/test_torch.py and every
op case of tests/ops on `Torch("cuda")`, run as N pytest processes over interleaved slices of
the collected cases (the ~6,000 cases take too long for one process within a device call).

    EMBER_TEST_TORCH_DEVICE=cuda python3 bench/torch_cuda_tests.py 8

Prints each slice's summary and the exit codes; exits non-zero when any slice failed.
"""

import subprocess
import sys
import tempfile
from pathlib import Path

SELECT = ["tests/backends/test_torch.py", "tests/ops", "-k", "torch"]


def main(n):
    listed = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                             "-p", "no:cacheprovider", *SELECT], capture_output=True, text=True)
    ids = [line for line in listed.stdout.splitlines() if "::" in line]
    logs = Path(tempfile.mkdtemp(prefix="ember-torch-cuda-"))
    procs = [subprocess.Popen([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                               "-rfEs", *ids[k::n]], stdout=open(logs / f"{k}.log", "w"),
                              stderr=subprocess.STDOUT) for k in range(n)]
    codes = [p.wait() for p in procs]
    for k in range(n):
        print(f"--- slice {k}:", (logs / f"{k}.log").read_text()[-600:])
    print(f"{len(ids)} cases in {n} slices; exit codes {codes}")
    return max(codes, default=1) if ids else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 8))
