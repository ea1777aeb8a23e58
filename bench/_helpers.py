"""What several benchmark modules share. A `_` module, so the runner does not take it for a
benchmark; `python bench/x.py` has bench/ on sys.path and `ember bench` puts it there
(runner.load), so `from _helpers import synced` works both ways."""


def synced(backend, fn):
    """fn followed by backend.sync(): the time of a lazy or GPU backend's call includes running
    what it queued."""
    def run():
        out = fn()
        backend.sync()
        return out
    return run
