"""Embedding: a lookup table [num_embeddings, embedding_dim], initialised N(0, 1) as PyTorch's."""

from ..errors import ShapeError
from ..tensor import Tensor
from . import functional as F
from . import init
from .module import Module, Param


class Embedding(Module):
    """indices (int32/int64, any shape) -> [*indices.shape, embedding_dim].

    padding_idx: that row starts at zero and receives no gradient (as PyTorch)."""

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None,
                 norm_type=2.0, scale_grad_by_freq=False, sparse=False, _weight=None,
                 _freeze=False, backend=None, dtype=None):
        super().__init__()
        if max_norm is not None or scale_grad_by_freq or sparse:
            raise NotImplementedError("Embedding: max_norm, scale_grad_by_freq and sparse are "
                                      "not supported")
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ShapeError(f"Embedding: padding_idx {padding_idx} is out of range for "
                                 f"{num_embeddings} embeddings")
            padding_idx %= num_embeddings
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = padding_idx
        if _weight is None:
            w = init.normal([num_embeddings, embedding_dim], backend=backend, dtype=dtype)
            if padding_idx is not None:
                w = w.slice_assign((padding_idx,), 0.0)
        else:
            w = _weight
            if tuple(w.shape) != (num_embeddings, embedding_dim):
                raise ShapeError(f"Embedding: _weight of shape {list(w.shape)} does not match "
                                 f"[{num_embeddings}, {embedding_dim}]")
        self.weight = Param(w, trainable=not _freeze)

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, padding_idx=None, backend=None):
        """An Embedding holding `embeddings` (a Tensor or array [n, dim]); frozen by default."""
        if not isinstance(embeddings, Tensor):
            embeddings = Tensor.from_data(embeddings, backend)
        elif backend is not None:
            embeddings = embeddings.to(backend)
        n, dim = embeddings.shape
        return cls(n, dim, padding_idx=padding_idx, _weight=embeddings, _freeze=freeze)

    def forward(self, indices):
        weight = self.weight
        if self.padding_idx is not None and weight.is_require_grad():
            # the padding row keeps its value but takes no gradient
            rows = Tensor.arange(self.num_embeddings, backend=weight.backend).reshape((-1, 1))
            weight = weight.mask_where(rows == self.padding_idx, weight.detach())
        return F.embedding(indices, weight)

    def extra_repr(self):
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        return s + (f", padding_idx={self.padding_idx}" if self.padding_idx is not None else "")
