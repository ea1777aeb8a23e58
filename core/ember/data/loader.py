"""DataLoader: batches of a dataset as ember Tensors, shuffled from a seed, optionally
augmented, with the next batches prepared by a background thread.

Every random choice is a pure function of (seed, epoch, batch index): epoch e visits the items
in the order `default_rng([seed, e]).permutation(n)`, and the transform of batch b draws from
`default_rng([seed, e, b])`. So a run resumed at (epoch, batch) sees exactly the batches the
interrupted run would have seen, whatever happened before, and no generator state needs saving.

The prefetch thread only slices NumPy arrays (which releases the GIL for the copies); Tensors
are made on the consuming thread, since a backend need not be thread-safe. Where threads are
unavailable (Pyodide) or prefetch=0, batches are made in line, with the same results.
"""

import queue
import sys
import threading

import numpy as np

from .dataset import _batch

__all__ = ["DataLoader", "threads_available"]


def threads_available():
    """Whether this Python can start threads (not in Pyodide / WebAssembly)."""
    if sys.platform in ("emscripten", "wasi"):
        return False
    return True


class DataLoader:
    """Iterate `dataset` in batches.

    batch_size: items per batch; drop_last drops a last, smaller batch.
    shuffle: a new seeded order every epoch (else the dataset's order).
    seed: the seed of the shuffles and of the transform's random choices.
    transform: an ember.data.transforms transform (or any fn(batch, rng)) applied to the
        first field of every batch (the images).
    backend: where the Tensors are made (default: ember's default backend); numpy=True
        yields NumPy arrays instead. Integer fields (labels) become int32 Tensors, ember's
        default integer type (WebGPU has no int64).
    prefetch: how many batches the background thread prepares ahead (0: none, no thread).

    Iterating runs epoch `loader.epoch` and counts it up once the epoch is complete (so each
    `for batch in loader` is a new shuffle); `loader.batches(epoch, start)` runs any epoch
    from any batch, which is how a resumed training run continues mid-epoch.
    """

    def __init__(self, dataset, batch_size=64, shuffle=False, seed=0, drop_last=False,
                 transform=None, backend=None, numpy=False, prefetch=2):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"DataLoader: batch_size must be a positive int, got {batch_size!r}")
        if transform is not None and not callable(transform):
            raise TypeError("DataLoader: transform must be callable (an ember.data.transforms "
                            "transform)")
        self.dataset, self.batch_size = dataset, batch_size
        self.shuffle, self.seed, self.drop_last = shuffle, int(seed), drop_last
        self.transform, self.backend, self.numpy = transform, backend, numpy
        self.prefetch = max(0, int(prefetch))
        self.epoch = 0

    def __len__(self):
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def order(self, epoch):
        """The item indices epoch `epoch` visits, in order."""
        n = len(self.dataset)
        if not self.shuffle:
            return np.arange(n)
        return np.random.default_rng([self.seed, int(epoch)]).permutation(n)

    def __iter__(self):
        epoch = self.epoch
        yield from self.batches(epoch)
        self.epoch = epoch + 1

    def batches(self, epoch, start=0, shard=None):
        """The batches of `epoch` from batch number `start` on (a generator). shard=(i, n):
        only part i of n of each batch (rows [k*i//n, k*(i+1)//n) of a batch of k), the
        items of one process in data parallel training; the transform's random choices of
        part i are drawn from default_rng([seed, epoch, batch, i])."""
        order = self.order(epoch)
        count = len(self)
        jobs = []
        for b in range(start, count):
            rows, key = order[b * self.batch_size:(b + 1) * self.batch_size], (epoch, b)
            if shard is not None:
                i, n = shard
                rows, key = rows[len(rows) * i // n:len(rows) * (i + 1) // n], (epoch, b, i)
            jobs.append((key, rows))
        if self.prefetch and threads_available() and len(jobs) > 1:
            produced = self._threaded(jobs)
        else:
            produced = (self._arrays(*job) for job in jobs)
        try:
            for arrays in produced:
                yield arrays if self.numpy else self._tensors(arrays)
        finally:
            close = getattr(produced, "close", None)
            if close is not None:
                close()

    # ---- making one batch ----------------------------------------------------------------
    def _arrays(self, key, indices):
        arrays = list(_batch(self.dataset, indices))
        if self.transform is not None:
            rng = np.random.default_rng([self.seed, *map(int, key)])
            arrays[0] = self.transform(arrays[0], rng)
        return tuple(arrays)

    def _tensors(self, arrays):
        from ..tensor import Tensor
        out = []
        for a in arrays:
            a = np.asarray(a)
            if a.dtype.kind in "iu":
                a = a.astype(np.int32)
            elif a.dtype == np.float64:
                a = a.astype(np.float32)
            out.append(Tensor.from_data(a, backend=self.backend))
        return tuple(out)

    def _threaded(self, jobs):
        """Yield the arrays of each job, made by a daemon thread `prefetch` batches ahead."""
        ready = queue.Queue(maxsize=self.prefetch)
        stop = threading.Event()
        done = object()

        def produce():
            try:
                for job in jobs:
                    if stop.is_set():
                        return
                    item = self._arrays(*job)
                    while not stop.is_set():
                        try:
                            ready.put(item, timeout=0.1)
                            break
                        except queue.Full:
                            continue
                ready.put(done)
            except BaseException as e:  # handed to the consumer, raised there
                ready.put(_Failure(e))

        thread = threading.Thread(target=produce, name="ember-data-prefetch", daemon=True)
        thread.start()
        try:
            while True:
                item = ready.get()
                if item is done:
                    return
                if isinstance(item, _Failure):
                    raise item.error
                yield item
        finally:
            stop.set()
            while thread.is_alive():  # unblock a producer waiting on a full queue
                try:
                    ready.get(timeout=0.05)
                except queue.Empty:
                    pass
            thread.join()

    def __repr__(self):
        return (f"DataLoader({len(self.dataset)} items, batch_size={self.batch_size}, "
                f"shuffle={self.shuffle}, seed={self.seed}, batches={len(self)})")


class _Failure:
    def __init__(self, error):
        self.error = error
