"""ember.autotune: a kernel's configuration chosen by measurement on the user's own device, and
remembered for good (Burn's autotune).

A tunable is a family of candidates that compute the same thing (a matmul's shader and tile,
say); the first candidate is the default and the fallback. The first call for a key (the
device's identity and the shape fields that matter, rounded to powers of two so nearby shapes
share a result) runs every candidate on that call's inputs, drops any that fails or disagrees
with the default, and keeps the fastest. The choice is written to a JSON file under
EMBER_CACHE_DIR (default ~/.cache/ember), keyed also by the candidate set, so a second process
tunes nothing and a changed set tunes again. In a page that folder is mounted from IndexedDB
(web/boot.js), so a second visit tunes nothing either.

    EMBER_AUTOTUNE=0        default kernels, nothing measured or written
    EMBER_AUTOTUNE_LOG=1    a line on stderr per key tuned
    ember.autotune.stats()  {"tuned": keys measured in this process, "cached": keys read}
"""

import json
import math
import os
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import numpy as np

__all__ = ["bucket", "choose", "stats"]

_lock = threading.Lock()
_memory = {}  # entry -> winner, this process's
_fast = {}  # (family, *key, *candidates) -> winner, the same choices found faster
_file = None  # what the cache file held when first read: entry -> winner
_tuned, _cached = [], []


def bucket(n):
    """n rounded up to a power of two (0 and 1 stay): the shape field of a key."""
    return n if n <= 1 else 1 << (n - 1).bit_length()


def stats():
    """What was tuned (benchmarked) in this process and what came from the persistent cache."""
    with _lock:
        return {"tuned": list(_tuned), "cached": list(_cached)}


def enabled():
    return os.environ.get("EMBER_AUTOTUNE", "1") != "0"


def cache_path():
    base = os.environ.get("EMBER_CACHE_DIR") or Path.home() / ".cache" / "ember"
    return Path(base) / "autotune.json"


def _read(path):
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as e:
        warnings.warn(f"ember.autotune: cannot read {path} ({e}); tuning again",
                      RuntimeWarning, stacklevel=4)
        return {}
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise ValueError("not a JSON object of strings")
    except ValueError as e:
        warnings.warn(f"ember.autotune: {path} is damaged ({e}); it is ignored and written "
                      "again", RuntimeWarning, stacklevel=4)
        return {}
    return data


def _write(path, entry, winner):
    """Add one entry to the cache file: read it again, merge, write a temporary file beside it
    and rename it into place, so two processes tuning at once never leave a damaged file
    (one of their entries may be lost: it is tuned again next time)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = _read(path)
        data[entry] = winner
        fd, tmp = tempfile.mkstemp(prefix=".autotune-", dir=path.parent)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=0, sort_keys=True)
        os.replace(tmp, path)
    except OSError as e:  # a read-only home, a full disk: the choice holds for this process
        warnings.warn(f"ember.autotune: cannot write {path} ({e})", RuntimeWarning,
                      stacklevel=4)


def _finished():
    pass


def choose(family, key, candidates, run, read=np.asarray, sync=_finished, samples=3,
           repeats=False, measurable=True):
    """The candidate to use for `key`: candidates[0] when tuning is off or there is one; else
    the remembered winner, or the fastest of the candidates that agree with candidates[0] on
    this call's inputs. run(c) launches candidate c and returns its output; read(out) its values
    as an array; sync() waits until what was launched has finished (the defaults: a CPU
    kernel's, whose output is its array once run returns). repeats: run(c, n) launches
    c n times at the cost of n dispatches, so that a sample times the kernels where a call's
    Python would outlast them (a short product: that cost is gone in an ember.jit replay).
    measurable=False (a plan being recorded, which may not read back): a key not tuned yet
    takes candidates[0], remembering nothing."""
    candidates = list(candidates)
    if len(candidates) < 2 or not enabled():
        return candidates[0]
    fast = (family, *key, *candidates)  # a known call, without building its entry
    winner = _fast.get(fast)
    if winner is not None:
        return winner
    # the candidate set, not its order: the default may differ within a bucket (a product of
    # 60 rows and one of 64 share a key, found on the H200)
    entry = f"{family}|{'|'.join(map(str, key))}|{','.join(sorted(map(str, candidates)))}"
    global _file
    with _lock:
        winner = _memory.get(entry)
        if winner is None:
            if _file is None:
                _file = _read(cache_path())
            winner = _file.get(entry)
            if winner in candidates:
                _memory[entry] = winner
                _cached.append(entry)
        if winner in candidates:
            _fast[fast] = winner
            return winner
    if not measurable:
        return candidates[0]
    winner, report = _tune(candidates, run, read, sync, samples, repeats)
    with _lock:
        _memory[entry] = _fast[fast] = winner
        _tuned.append(entry)
    _write(cache_path(), entry, winner)
    if os.environ.get("EMBER_AUTOTUNE_LOG") == "1":
        print(f"ember.autotune: {entry} -> {winner} ({report})", file=sys.stderr)
    return winner


def _tune(candidates, run, read, sync, samples, repeats):
    start = time.perf_counter()

    def launch(c, n):
        if repeats:
            return run(c, n)
        for _ in range(n):
            run(c)
    want = read(run(candidates[0]))
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    times, notes = {}, []
    # launches per sample, the same for every candidate: enough that a sample of the default
    # lasts 3 ms, so that the wait at its end (a read-back, ~0.5 ms on the H200) does not
    # decide which of two short kernels wins
    reps = 1
    while reps < 256:
        t0 = time.perf_counter()
        launch(candidates[0], reps)
        sync()
        if time.perf_counter() - t0 >= 3e-3:
            break
        reps *= 2
    for c in candidates:
        try:
            got = read(run(c))
        except Exception as e:  # noqa: BLE001 (a candidate that cannot run is dropped)
            notes.append(f"{c} failed: {type(e).__name__}: {e}")
            continue
        if got.shape != want.shape or not np.allclose(got, want, rtol=1e-4,
                                                      atol=1e-5 * max(scale, 1.0),
                                                      equal_nan=True):
            notes.append(f"{c} disagrees with {candidates[0]}")
            continue
        best = min(times.values(), default=math.inf)
        # one launch first: one of over 50 ms that outlasts two samples of the best is not
        # sampled (a full sum in one invocation took seconds a sample on the H200)
        t0 = time.perf_counter()
        launch(c, 1)
        sync()
        one = time.perf_counter() - t0
        if one > max(2 * best * reps, 0.05):
            times[c] = one
            continue
        elapsed = []
        for _ in range(samples):
            t0 = time.perf_counter()
            launch(c, reps)
            sync()
            elapsed.append((time.perf_counter() - t0) / reps)
            if elapsed[-1] > 2 * best:  # clearly slower: no need for more samples
                break
        times[c] = min(elapsed)
    if notes:  # a candidate that fails or computes something else is a bug worth seeing
        warnings.warn("ember.autotune: dropped " + "; ".join(notes), RuntimeWarning,
                      stacklevel=4)
    winner = min(times, key=times.get) if times else candidates[0]
    if candidates[0] in times and times[winner] > 0.97 * times[candidates[0]]:
        winner = candidates[0]  # within the noise of the default: the default stays
    spent = time.perf_counter() - start
    shown = ", ".join(f"{c} {t * 1e6:.0f} us" for c, t in times.items())
    return winner, "; ".join([shown, *notes, f"tuning took {spent * 1e3:.0f} ms"])
