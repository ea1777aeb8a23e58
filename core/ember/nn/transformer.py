"""TransformerEncoderLayer and TransformerEncoder, as PyTorch's (same attribute names, so the
same state-dict keys). Batch first by default (see attention.py)."""

from .activation import Gelu, Relu
from .attention import MultiHeadAttention
from .dropout import Dropout
from .linear import Linear
from .module import Module, Param
from .norm import LayerNorm


def _activation(activation):
    if activation == "relu":
        return Relu()
    if activation == "gelu":
        return Gelu()
    if isinstance(activation, Module) or callable(activation):
        return activation
    raise ValueError(f"TransformerEncoderLayer: activation must be 'relu', 'gelu' or a "
                     f"callable, got {activation!r}")


class TransformerEncoderLayer(Module):
    """Self-attention then a feed-forward block, each with a residual connection and a
    LayerNorm after it (norm_first=False) or before it (norm_first=True, pre-LN)."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, batch_first=True, norm_first=False, bias=True,
                 backend=None, dtype=None):
        super().__init__()
        kw = dict(backend=backend, dtype=dtype)
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, **kw)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.activation = _activation(activation)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff_block(x))
        return x

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           need_weights=False, is_causal=is_causal)[0]
        return self.dropout1(x)

    def _ff_block(self, x):
        x = self.linear2(self.dropout(self.activation(self.linear1(x))))
        return self.dropout2(x)


def _fresh_copy(module):
    """A deep copy whose parameters get new ids (separate parameters, equal values)."""
    return module.clone().map_params(lambda n, p: Param(p.value(), p.trainable))


class TransformerEncoder(Module):
    """num_layers copies of encoder_layer (equal initial weights, as PyTorch's deep copies;
    each copy has its own parameters), then an optional norm."""

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True,
                 mask_check=True):
        super().__init__()
        self.layers = [_fresh_copy(encoder_layer) for _ in range(num_layers)]
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                      is_causal=bool(is_causal))
        return self.norm(x) if self.norm is not None else x
