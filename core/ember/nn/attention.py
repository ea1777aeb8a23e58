"""MultiHeadAttention with PyTorch's nn.MultiheadAttention parameters (in_proj_weight [3E, E],
in_proj_bias [3E], out_proj.weight/bias; q/k/v_proj_weight when kdim or vdim differ from E).

ember is batch first: batch_first=True is the default here (PyTorch's default is False), so
inputs are [B, L, E]; pass batch_first=False for [L, B, E]. Unbatched [L, E] inputs work too.
"""

import math

from ..errors import ShapeError
from ..tensor import Tensor
from . import init
from .dropout import dropout
from .linear import Linear
from .module import Module, Param


def _mask_to_additive(mask, like, name):
    """A mask as something to add to the scores: bool masks (True = masked out, as PyTorch)
    become -inf where True; float masks are added as they are."""
    if mask is None:
        return None
    if not isinstance(mask, Tensor):
        mask = Tensor.from_data(mask, like.backend)
    elif mask.backend != like.backend:
        mask = mask.to(like.backend)
    if mask.dtype == "bool":
        return Tensor.zeros(mask.shape, like.backend, like.dtype).mask_fill(mask, float("-inf"))
    if mask.dtype not in ("float32", "float64"):
        raise ShapeError(f"MultiHeadAttention: {name} must be bool or float, got {mask.dtype}")
    return mask.cast(like.dtype)


def scaled_dot_product_attention(q, k, v, bias=None, dropout_p=0.0, training=False):
    """softmax(q k^T / sqrt(d) + bias) v over [..., L, d] x [..., S, d]; also the weights."""
    scores = (q * (1 / math.sqrt(q.shape[-1]))).matmul(k.transpose())
    if bias is not None:
        scores = scores + bias
    weights = scores.softmax(-1)
    if dropout_p > 0 and training:
        weights = dropout(weights, dropout_p, True)
    return weights.matmul(v), weights


class MultiHeadAttention(Module):
    """forward(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
    average_attn_weights=True, is_causal=False) -> (output, weights or None), as PyTorch's.

    key_padding_mask [B, S] and attn_mask [L, S] or [B*num_heads, L, S]: bool (True = not
    attended) or float (added to the scores). is_causal=True without attn_mask builds the
    causal mask (PyTorch requires the mask as well). A query row with every key masked out
    gives NaN, as in PyTorch."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, batch_first=True, backend=None,
                 dtype=None):
        super().__init__()
        if add_bias_kv or add_zero_attn:
            raise NotImplementedError("MultiHeadAttention: add_bias_kv and add_zero_attn are "
                                      "not supported")
        if embed_dim % num_heads:
            raise ShapeError(f"MultiHeadAttention: embed_dim ({embed_dim}) must be divisible by "
                             f"num_heads ({num_heads})")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self.dropout, self.batch_first = dropout, batch_first
        E = embed_dim
        kw = dict(backend=backend, dtype=dtype)
        if self.kdim == E and self.vdim == E:
            self.in_proj_weight = Param(init.xavier_uniform([3 * E, E], **kw))
            self.q_proj_weight = self.k_proj_weight = self.v_proj_weight = None
        else:
            self.in_proj_weight = None
            self.q_proj_weight = Param(init.xavier_uniform([E, E], **kw))
            self.k_proj_weight = Param(init.xavier_uniform([E, self.kdim], **kw))
            self.v_proj_weight = Param(init.xavier_uniform([E, self.vdim], **kw))
        self.in_proj_bias = Param(init.zeros([3 * E], **kw)) if bias else None
        self.out_proj = Linear(E, E, bias=bias, **kw)
        if bias:
            self.out_proj.bias = self.out_proj.bias.with_value(init.zeros([E], **kw))

    def _project(self, x, i):
        E = self.embed_dim
        if self.in_proj_weight is not None:
            w = self.in_proj_weight[i * E:(i + 1) * E]
        else:
            w = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)[i]
        y = x.matmul(w.transpose())
        if self.in_proj_bias is not None:
            y = y + self.in_proj_bias[i * E:(i + 1) * E]
        return y

    def _heads(self, x):
        B, T, _ = x.shape
        return x.reshape((B, T, self.num_heads, self.head_dim)).swap_dims(1, 2)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True, is_causal=False):
        unbatched = query.ndim == 2
        if unbatched:
            query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif not self.batch_first:
            query, key, value = (t.swap_dims(0, 1) for t in (query, key, value))
        if query.ndim != 3 or key.ndim != 3 or value.ndim != 3:
            raise ShapeError(f"MultiHeadAttention: expected [B, L, E] inputs, got shapes "
                             f"{list(query.shape)}, {list(key.shape)}, {list(value.shape)}")
        B, L, _ = query.shape
        S = key.shape[1]
        H = self.num_heads
        q = self._heads(self._project(query, 0))
        k = self._heads(self._project(key, 1))
        v = self._heads(self._project(value, 2))

        if attn_mask is None and is_causal:
            causal = Tensor.arange(S, backend=query.backend).reshape((1, S)) > \
                Tensor.arange(L, backend=query.backend).reshape((L, 1))
            attn_mask = causal
        bias = None
        mask = _mask_to_additive(attn_mask, q, "attn_mask")
        if mask is not None:
            if mask.ndim == 2:
                if tuple(mask.shape) != (L, S):
                    raise ShapeError(f"MultiHeadAttention: attn_mask of shape "
                                     f"{list(mask.shape)}, expected [{L}, {S}]")
            elif tuple(mask.shape) == (B * H, L, S):
                mask = mask.reshape((B, H, L, S))
            else:
                raise ShapeError(f"MultiHeadAttention: attn_mask of shape {list(mask.shape)}, "
                                 f"expected [{L}, {S}] or [{B * H}, {L}, {S}]")
            bias = mask
        pad = _mask_to_additive(key_padding_mask, q, "key_padding_mask")
        if pad is not None:
            if tuple(pad.shape) != (B, S):
                raise ShapeError(f"MultiHeadAttention: key_padding_mask of shape "
                                 f"{list(pad.shape)}, expected [{B}, {S}]")
            pad = pad.reshape((B, 1, 1, S))
            bias = pad if bias is None else bias + pad

        out, weights = scaled_dot_product_attention(q, k, v, bias, self.dropout, self.training)
        out = out.swap_dims(1, 2).reshape((B, L, self.embed_dim))
        out = self.out_proj(out)
        if unbatched:
            out = out.squeeze(0)
        elif not self.batch_first:
            out = out.swap_dims(0, 1)
        if not need_weights:
            return out, None
        if average_attn_weights:
            weights = weights.mean_dim(1).squeeze(1)
        if unbatched:
            weights = weights.squeeze(0)
        return out, weights

    def extra_repr(self):
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
                f"dropout={self.dropout}, batch_first={self.batch_first}")
