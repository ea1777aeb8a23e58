"""ember.nn: modules, layers, losses and initialisers.

Layers take PyTorch's constructor arguments plus `backend=` (and `dtype=`), and hold
parameters under PyTorch's state-dict names, so PyTorch weights load without a key map.
ember is batch first: MultiHeadAttention, TransformerEncoderLayer, Lstm and Gru default to
batch_first=True (PyTorch's default is False).
"""

from . import functional, init
from .activation import Gelu, LeakyRelu, LogSoftmax, Relu, Sigmoid, Silu, Softmax, Tanh
from .attention import MultiHeadAttention
from .container import Sequential
from .conv import Conv1d, Conv2d, ConvTranspose2d
from .dropout import Dropout
from .embedding import Embedding
from .linear import Flatten, Identity, Linear
from .loss import (
    BinaryCrossEntropyLoss,
    BinaryCrossEntropyWithLogitsLoss,
    CrossEntropyLoss,
    HuberLoss,
    KlDivLoss,
    L1Loss,
    MseLoss,
    NllLoss,
    SmoothL1Loss,
)
from .module import Module, Param
from .norm import BatchNorm1d, BatchNorm2d, GroupNorm, LayerNorm, RMSNorm
from .pool import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d
from .position import PositionalEncoding, RoPE, RotaryEncoding
from .rnn import Gru, Lstm
from .transformer import TransformerEncoder, TransformerEncoderLayer

# PyTorch's spellings, for code ported from it (the names above are ember's, after Burn's)
ReLU, LeakyReLU, GELU, SiLU = Relu, LeakyRelu, Gelu, Silu
MultiheadAttention, LSTM, GRU = MultiHeadAttention, Lstm, Gru
MSELoss, NLLLoss, KLDivLoss = MseLoss, NllLoss, KlDivLoss
BCELoss, BCEWithLogitsLoss = BinaryCrossEntropyLoss, BinaryCrossEntropyWithLogitsLoss

__all__ = [
    "AdaptiveAvgPool2d", "AvgPool2d", "BatchNorm1d", "BatchNorm2d", "BinaryCrossEntropyLoss",
    "BinaryCrossEntropyWithLogitsLoss", "Conv1d", "Conv2d", "ConvTranspose2d",
    "CrossEntropyLoss", "Dropout", "Embedding", "Flatten", "Gelu", "GroupNorm", "Gru",
    "HuberLoss", "Identity", "KlDivLoss", "L1Loss", "LayerNorm", "LeakyRelu", "Linear",
    "LogSoftmax", "Lstm", "MaxPool2d", "Module", "MseLoss", "MultiHeadAttention", "NllLoss",
    "Param", "PositionalEncoding", "RMSNorm", "Relu", "RoPE", "RotaryEncoding", "Sequential",
    "Sigmoid", "Silu", "SmoothL1Loss", "Softmax", "Tanh", "TransformerEncoder",
    "TransformerEncoderLayer", "functional", "init",
    # PyTorch spellings
    "BCELoss", "BCEWithLogitsLoss", "GELU", "GRU", "KLDivLoss", "LSTM", "LeakyReLU",
    "MSELoss", "MultiheadAttention", "NLLLoss", "ReLU", "SiLU",
]
