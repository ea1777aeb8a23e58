"""ember.autotune in the page (the playground's Web Worker, WebGPU in SwiftShader): the choices
live in IndexedDB (web/boot.js mounts ~/.cache/ember from it), so a reload tunes nothing and
gets the same choice."""

import json

from conftest import run_code, wait_ready

CODE = """
import json
import numpy as np
import ember
from ember import Tensor
from ember.backend import Wgpu
B = await Wgpu.create()
a = Tensor.from_data(np.arange(64 * 64, dtype=np.float32).reshape(64, 64) % 7, backend=B)
got = (a @ a).to_numpy()
want = a.to_numpy() @ a.to_numpy()
print("RIGHT", bool(np.allclose(got, want)))
print("STATS", json.dumps(ember.autotune.stats()))
"""


def _stats(out):
    line = next(s for s in out.splitlines() if s.startswith("STATS "))
    return json.loads(line[len("STATS "):])


def test_a_reload_tunes_nothing_and_keeps_the_choice(page):
    assert wait_ready(page) == "ready"
    out = run_code(page, CODE)
    assert page.get_attribute("#output", "data-state") == "ok", out
    assert "RIGHT True" in out
    first = _stats(out)
    assert len(first["tuned"]) == 1 and first["cached"] == [], first
    assert wait_ready(page) == "ready"  # the same context: the same IndexedDB
    out = run_code(page, CODE)
    assert page.get_attribute("#output", "data-state") == "ok", out
    assert "RIGHT True" in out
    second = _stats(out)
    assert second == {"tuned": [], "cached": first["tuned"]}, second
