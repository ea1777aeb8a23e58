"""Data parallel training for the Learner: gradients summed across replicas in buckets.

A replica's backward hands each parameter's gradient over as soon as it is final (the
on_final hook of Autodiff.backward); the gradients are packed, in that order, into flat
buckets of about BUCKET_BYTES, and each full bucket starts its all-reduce at once, so the
reduction of the last layers overlaps the backward of the first. Two groups reduce:

- ThreadGroup: the replicas of one process, one thread each. The last replica to hand in
  bucket k sums everyone's bucket k on the host, in replica order (so every replica gets
  bitwise the same sum).
- TorchGroup: one replica per process under torchrun, through torch.distributed: gloo on
  host copies (NdArray, Wgpu, Torch on the CPU), NCCL on the GPU's own memory (Torch CUDA).
  torch is imported only here, only then.
"""

import atexit
import os
import threading
from math import prod

import numpy as np

from ..autodiff import no_grad
from ..tensor import Tensor

BUCKET_BYTES = 1 << 20  # small enough that a small model has a few buckets to overlap


class Reducer:
    """One replica's side of one step: on_final() is Autodiff.backward's hook, finish() the
    summed gradients (GradientsParams on the replica's inner backend). Each gradient is
    multiplied by `weight` (its shard's share of the global batch) before the sum."""

    def __init__(self, group, rank, model, weight):
        self.group, self.rank, self.weight, self.model = group, rank, weight, model
        self.ids = {p._prim.node.id: p.param_id for _, p in model.named_params()
                    if getattr(p._prim, "node", None) is not None}
        self.bucket, self.size, self.handles, self.sent = [], 0, [], {}

    def on_final(self, leaf_id, grad):
        pid = self.ids.get(leaf_id)
        if pid is not None:
            self.sent[pid] = grad
            self._add(pid, grad)

    def _add(self, pid, grad):
        if self.bucket and self.bucket[0][1].dtype != grad.dtype:
            self._flush()  # a bucket is one flat array: one dtype
        self.bucket.append((pid, grad))
        self.size += prod(grad.shape) * np.dtype(grad.dtype).itemsize
        if self.size >= BUCKET_BYTES:
            self._flush()

    def _flush(self):
        if not self.bucket:
            return
        with no_grad():
            flat = Tensor.cat([(g * self.weight).reshape([-1]) for _, g in self.bucket])
        meta = [(pid, g.shape) for pid, g in self.bucket]
        self.handles.append((self.group.start(self.rank, len(self.handles), flat), meta))
        self.bucket, self.size = [], 0

    def finish(self, grads):
        """Send what the hook did not (all of it without the hook; a gradient that grew
        after its hook, from a checkpoint's rule: the difference), then wait for the sums."""
        from ..optim import GradientsParams
        with no_grad():
            for pid, g in GradientsParams.from_grads(grads, self.model).items():
                sent = self.sent.get(pid)
                if sent is not g:
                    self._add(pid, g if sent is None else g - sent)
            self._flush()
            out = {}
            for handle, meta in self.handles:
                flat, start = handle.wait(), 0
                for pid, shape in meta:
                    part = flat[start:start + prod(shape)].reshape(shape)
                    start += prod(shape)
                    out[pid] = out[pid] + part if pid in out else part
        return GradientsParams(out)


class ThreadGroup:
    """The sum of each bucket over `size` replicas on threads of this process."""

    def __init__(self, size):
        self.size, self.cond, self.slots, self.error = size, threading.Condition(), {}, None

    def start(self, rank, index, flat):
        array = flat.to_numpy()
        with self.cond:
            slot = self.slots.setdefault(index, [None] * self.size)
            slot[rank] = array
            if all(a is not None for a in slot):
                if len({a.shape for a in slot}) != 1:
                    self.abort(RuntimeError(
                        f"data parallel: the replicas' gradient bucket {index} has sizes "
                        f"{[a.size for a in slot]}; every replica must compute the same "
                        "gradients (the same model and loss)"))
                else:
                    total = slot[0].copy()
                    for a in slot[1:]:
                        total += a
                    self.slots[index] = total
                    self.cond.notify_all()
        return _Waiting(self, index, flat.backend)

    def abort(self, error):
        """A replica failed: wake the others, who raise it too."""
        with self.cond:
            self.error = self.error or error
            self.cond.notify_all()


class _Waiting:
    def __init__(self, group, index, backend):
        self.group, self.index, self.backend = group, index, backend

    def wait(self):
        g = self.group
        with g.cond:
            g.cond.wait_for(lambda: g.error is not None or
                            isinstance(g.slots.get(self.index), np.ndarray))
            if g.error is not None:
                raise RuntimeError("data parallel: another replica failed") from g.error
            return Tensor.from_data(g.slots[self.index], backend=self.backend)


def environment():
    """(rank, world size) when started by torchrun with more than one process, else None."""
    if not all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR")):
        return None
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    return (rank, world) if world > 1 else None


def _close_group(dist):
    if dist.is_initialized():
        dist.destroy_process_group()


class TorchGroup:
    """All-reduce across the processes of a torchrun job (torch.distributed)."""

    def __init__(self, backend):
        try:
            import torch
            import torch.distributed as dist
        except ImportError:
            raise ImportError("ember.train: this process runs under torchrun (RANK, WORLD_SIZE "
                              "and MASTER_ADDR are set), and training across processes goes "
                              "through torch.distributed, but torch is not installed: pip "
                              "install torch (or ember[torch])") from None
        from ..backends.torch import Torch
        self.torch, self.dist = torch, dist
        cuda = isinstance(backend, Torch) and backend.device.type == "cuda"
        self.native = isinstance(backend, Torch)  # its prims are torch tensors already
        self.device = backend.device if cuda else torch.device("cpu")
        if not dist.is_initialized():
            if cuda:
                torch.cuda.set_device(self.device)
            dist.init_process_group("nccl" if cuda else "gloo")
            # the group this made is closed before the interpreter tears down: left open, a
            # rank was seen to abort at exit ("terminate called without an active exception")
            atexit.register(_close_group, dist)
        self.rank, self.size = dist.get_rank(), dist.get_world_size()

    def _torch(self, flat):
        if self.native and flat.backend.device == self.device:
            return flat._prim.contiguous()
        return self.torch.from_numpy(np.array(flat.to_numpy())).to(self.device)

    def start(self, rank, index, flat):
        t = self._torch(flat)
        return _Pending(self, self.dist.all_reduce(t, async_op=True), t, flat)

    def sum(self, values):
        """Python floats summed over the processes (blocking)."""
        t = self.torch.tensor(values, dtype=self.torch.float64, device=self.device)
        self.dist.all_reduce(t)
        return t.tolist()

    def broadcast(self, arrays):
        """Rank 0's NumPy arrays, on every process."""
        out = {}
        for name, a in arrays.items():
            t = self.torch.from_numpy(np.array(a)).to(self.device)
            self.dist.broadcast(t, 0)
            out[name] = t.cpu().numpy()
        return out


class _Pending:
    def __init__(self, group, work, t, flat):
        self.group, self.work, self.t, self.flat = group, work, t, flat

    def wait(self):
        self.work.wait()
        f = self.flat
        if self.group.native and f.backend.device == self.t.device:
            return Tensor(self.t, f.backend, f.shape, f.dtype)
        return Tensor.from_data(self.t.cpu().numpy(), backend=f.backend)
