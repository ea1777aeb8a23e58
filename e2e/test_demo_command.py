"""`ember demo` as a user runs it (`make demo`): builds, prints the URL, serves the site from
127.0.0.1 with the headers workers need, and stops cleanly on Ctrl-C."""

import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ember_demo_builds_serves_and_stops_on_ctrl_c(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "ember.cli", "demo", "--port", "0",
                             "--out", str(tmp_path / "site")], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert "serving" in line and "http://127.0.0.1:" in line, (line, proc.stderr.read())
        url = line[line.index("http://"):].split()[0]
        with urllib.request.urlopen(url + "playground/") as r:
            assert r.status == 200 and b'id="code"' in r.read()
            assert r.headers["Cross-Origin-Opener-Policy"] == "same-origin"
            assert r.headers["Cross-Origin-Embedder-Policy"] == "require-corp"
        with urllib.request.urlopen(url + "pyodide/pyodide.asm.wasm") as r:
            assert r.headers["Content-Type"] == "application/wasm"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
