"""docs/quickstart.py is the README's promise: it must run and match NumPy."""

import re
import runpy
from pathlib import Path

QUICKSTART = Path(__file__).resolve().parents[1] / "docs" / "quickstart.py"


def test_quickstart_runs_and_matches_numpy(capsys):
    runpy.run_path(str(QUICKSTART), run_name="__main__")
    out = capsys.readouterr().out
    match = re.search(r"max abs difference vs NumPy reference: (\S+)", out)
    assert match, f"quickstart did not print its max difference:\n{out}"
    assert float(match.group(1)) < 1e-5, out
