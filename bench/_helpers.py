"""What several benchmark modules share. A `_` module, so the runner does not take it for a
benchmark; `python bench/x.py` has bench/ on sys.path and `ember bench` puts it there
(runner.load), so `from _helpers import synced` works both ways."""

import os


def cpus():
    """The CPUs this process may run on (its affinity: `taskset -c 0,1` gives 2 on a 16-core
    host), the thread count both sides of a CPU benchmark get."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def synced(backend, fn):
    """fn followed by backend.sync(): the time of a lazy or GPU backend's call includes running
    what it queued."""
    def run():
        out = fn()
        backend.sync()
        return out
    return run
