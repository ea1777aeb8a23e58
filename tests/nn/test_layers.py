"""Every layer against its PyTorch twin with the same weights: outputs and gradients with
respect to inputs and every parameter, in float32."""

import math

import numpy as np
import pytest
import torch

import ember
from ember import ShapeError, Tensor, nn
from ember.backend import NdArray

from .twins import AD, close, compare, load_torch_weights, randn

torch.manual_seed(0)


# ---- linear ---------------------------------------------------------------------------------
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(5, 3), (2, 4, 3), (3,)])
def test_linear(bias, shape):
    compare(nn.Linear(3, 4, bias=bias), torch.nn.Linear(3, 4, bias=bias), randn(*shape))


def test_linear_default_init_bounds():
    ember.seed(1)
    m = nn.Linear(16, 300)
    w, b = m.weight.to_numpy(), m.bias.to_numpy()
    assert w.shape == (300, 16) and b.shape == (300,)
    assert np.abs(w).max() <= 1 / 4 and np.abs(w).max() > 0.24  # U(+-1/sqrt(16)) as PyTorch
    assert np.abs(b).max() <= 1 / 4
    assert abs(w.std() - (1 / 4) / math.sqrt(3)) < 0.01


# ---- activations ----------------------------------------------------------------------------
@pytest.mark.parametrize("ours, theirs", [
    (nn.Relu(), torch.nn.ReLU()),
    (nn.LeakyRelu(), torch.nn.LeakyReLU()),
    (nn.LeakyRelu(0.2), torch.nn.LeakyReLU(0.2)),
    (nn.Gelu(), torch.nn.GELU()),
    (nn.Gelu(approximate="tanh"), torch.nn.GELU(approximate="tanh")),
    (nn.Sigmoid(), torch.nn.Sigmoid()),
    (nn.Tanh(), torch.nn.Tanh()),
    (nn.Silu(), torch.nn.SiLU()),
    (nn.Softmax(dim=1), torch.nn.Softmax(dim=1)),
    (nn.Softmax(), torch.nn.Softmax(dim=-1)),
    (nn.LogSoftmax(dim=1), torch.nn.LogSoftmax(dim=1)),
], ids=lambda m: repr(m))
def test_activation(ours, theirs):
    x = randn(3, 5, 4) * 3
    compare(ours, theirs, x)


def test_gelu_rejects_unknown_approximation():
    with pytest.raises(ValueError):
        nn.Gelu(approximate="fast")


def test_activation_aliases():
    assert nn.ReLU is nn.Relu and nn.GELU is nn.Gelu and nn.MultiheadAttention is \
        nn.MultiHeadAttention and nn.LSTM is nn.Lstm


# ---- normalisation --------------------------------------------------------------------------
def _randomize(twin, seed=3):
    """Non-trivial affine parameters (PyTorch initialises them to ones and zeros)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in twin.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5 + 1)
    return twin


@pytest.mark.parametrize("shape, normalized", [((4, 6), 6), ((2, 3, 4, 5), (4, 5))])
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm(shape, normalized, affine):
    twin = _randomize(torch.nn.LayerNorm(normalized, elementwise_affine=affine))
    compare(nn.LayerNorm(normalized, elementwise_affine=affine), twin, randn(*shape) * 2 + 1)


def test_layer_norm_without_bias():
    twin = _randomize(torch.nn.LayerNorm(6, bias=False))
    compare(nn.LayerNorm(6, bias=False), twin, randn(3, 6))


@pytest.mark.parametrize("shape", [(2, 6, 5), (3, 6, 2, 3)])
def test_group_norm(shape):
    twin = _randomize(torch.nn.GroupNorm(3, 6, eps=1e-4))
    compare(nn.GroupNorm(3, 6, eps=1e-4), twin, randn(*shape))


def test_group_norm_checks_divisibility():
    with pytest.raises(ShapeError):
        nn.GroupNorm(4, 6)


@pytest.mark.parametrize("eps", [None, 1e-6])
def test_rms_norm(eps):
    twin = _randomize(torch.nn.RMSNorm([3, 4], eps=eps))
    compare(nn.RMSNorm([3, 4], eps=eps), twin, randn(2, 3, 4))


@pytest.mark.parametrize("cls, tcls, shape", [
    (nn.BatchNorm1d, torch.nn.BatchNorm1d, (6, 3)),
    (nn.BatchNorm1d, torch.nn.BatchNorm1d, (4, 3, 5)),
    (nn.BatchNorm2d, torch.nn.BatchNorm2d, (4, 3, 2, 5)),
])
@pytest.mark.parametrize("momentum", [0.1, None])
def test_batch_norm_train_then_eval(cls, tcls, shape, momentum):
    twin = _randomize(tcls(3, momentum=momentum))
    ours = cls(3, momentum=momentum)
    load_torch_weights(ours, twin)
    # two training steps: outputs, gradients and running statistics follow PyTorch
    for step in range(2):
        x = randn(*shape, seed=step) * 2 + step
        compare(ours, twin, x, load=False)
        for name in ("running_mean", "running_var"):
            close(getattr(ours, name), getattr(twin, name), what=name)
        assert ours.num_batches_tracked.item() == twin.num_batches_tracked.item() == step + 1
        assert ours.num_batches_tracked.dtype == "int32"  # ember keeps int32 (WebGPU has no int64)
        twin.zero_grad()
    # eval uses the running statistics and leaves them alone
    ours.eval()
    twin.eval()
    before = ours.running_mean.to_numpy()
    compare(ours, twin, randn(*shape, seed=9), load=False)
    np.testing.assert_array_equal(ours.running_mean.to_numpy(), before)


def test_batch_norm_names_and_trainable_flags():
    bn = nn.BatchNorm2d(4)
    assert [n for n, _ in bn.named_parameters()] == ["weight", "bias"]
    assert [n for n, _ in bn.named_buffers()] == ["running_mean", "running_var",
                                                   "num_batches_tracked"]
    assert bn.num_params() == 8
    assert bn.running_mean.trainable is False


def test_batch_norm_running_stats_keep_their_ids_and_need_no_grad():
    bn = nn.BatchNorm1d(2).to(AD)
    ids = [p.param_id for _, p in bn.named_params()]
    x = Tensor.from_data(randn(5, 2), AD).require_grad()
    bn(x).sum().backward()
    assert [p.param_id for _, p in bn.named_params()] == ids
    assert not bn.running_mean.is_require_grad()
    with ember.no_grad():  # inference on an Autodiff backend, train mode: still updates
        bn(x)
    assert bn.num_batches_tracked.item() == 2


def test_batch_norm_gradients_with_a_large_mean():
    # a mean of 1000 over a spread of 1 (unnormalised data straight into BatchNorm): outputs and
    # gradients within 1e-3 (the float32 mean itself is off by ~1e-4 of 1000 here, PyTorch's
    # accumulates more precisely); the gradient sums over x - mean, not sum(g x) - mean sum(g)
    twin = _randomize(torch.nn.BatchNorm2d(3))
    ours = nn.BatchNorm2d(3)
    load_torch_weights(ours, twin)
    compare(ours, twin, randn(4, 3, 2, 5) + 1000, load=False, rtol=1e-3, atol=1e-3)


def test_batch_norm_without_running_stats():
    twin = torch.nn.BatchNorm1d(3, track_running_stats=False)
    ours = nn.BatchNorm1d(3, track_running_stats=False)
    ours.eval()
    twin.eval()  # batch statistics in eval as well
    compare(ours, twin, randn(4, 3))
    assert [n for n, _ in ours.named_buffers()] == []


def test_batch_norm_rejects_one_value_per_channel_in_training():
    bn = nn.BatchNorm1d(3)
    with pytest.raises(ShapeError):
        bn(Tensor.from_data(randn(1, 3)))
    with pytest.raises(ShapeError):
        bn(Tensor.from_data(randn(2, 4)))


@pytest.mark.parametrize("backend", [NdArray(), AD], ids=["ndarray", "autodiff"])
def test_kept_eval_values_follow_every_change_of_the_weights(backend):
    # BatchNorm's folded scale/shift and Linear's transposed weight are kept between no-grad
    # forwards: every way of changing a weight or a statistic must show in the next output
    from ember import record
    ember.seed(3)
    model = nn.Sequential(nn.BatchNorm1d(4), nn.Linear(4, 3)).to(backend)
    twin = torch.nn.Sequential(torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 3))
    x = randn(5, 4)

    def check(what):
        twin.load_state_dict({k: torch.from_numpy(np.array(v))
                              for k, v in record.state_dict(model).items()})
        twin[0].eps = bn.eps
        twin.train(model.training)
        with torch.no_grad():
            want = twin(torch.from_numpy(x)).numpy()
        for _ in range(2):  # computed, then kept
            with ember.no_grad():
                got = model(Tensor.from_data(x, backend)).to_numpy()
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=what)

    bn, lin = model[0], model[1]
    model.eval()
    check("initial")
    model.train()
    with ember.no_grad():
        model(Tensor.from_data(x * 3 + 1, backend))  # updates the running statistics
    model.eval()
    check("after a training forward")
    bn.weight[1] = 2.5
    lin.weight[0, 2] = -1.0
    check("after __setitem__")
    bn.bias = bn.bias.with_value(bn.bias + 0.5)
    check("after with_value")
    state = {k: v * 0.5 for k, v in record.state_dict(model).items()
             if v.dtype == "float32"}
    record.load_state_dict(model, state, strict=False)
    check("after loading a record")
    bn.eps = 0.5
    check("after changing eps")


# ---- dropout --------------------------------------------------------------------------------
def test_dropout_train_eval_and_seed():
    d = nn.Dropout(0.25)
    x = Tensor.ones([200, 50])
    ember.seed(5)
    a = d(x).to_numpy()
    ember.seed(5)
    b = d(x).to_numpy()
    np.testing.assert_array_equal(a, b)
    assert set(np.unique(a)) <= {0.0, np.float32(1 / 0.75)}
    assert abs((a == 0).mean() - 0.25) < 0.02
    assert abs(a.mean() - 1) < 0.03
    d.eval()
    np.testing.assert_array_equal(d(x).to_numpy(), x.to_numpy())
    assert nn.Dropout(0.0)(x) is x
    np.testing.assert_array_equal(nn.Dropout(1.0)(x).to_numpy(), 0)
    with pytest.raises(ValueError):
        nn.Dropout(1.5)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9, 1e-6])
def test_dropout_drops_with_probability_p(p):
    x = Tensor.ones([400, 250])
    y = nn.Dropout(p)(x).to_numpy()
    assert set(np.unique(y)) <= {0.0, np.float32(1 / (1 - p))}
    assert abs((y == 0).mean() - p) < 0.005
    if p < 1e-5:
        assert (y != 0).all()


def test_dropout_gradient_follows_the_mask():
    x = Tensor.from_data(randn(10, 10), AD).require_grad()
    y = nn.Dropout(0.5)(x)
    g = x.grad(y.sum().backward()).to_numpy()
    kept = y.to_numpy() != 0
    np.testing.assert_allclose(g, np.where(kept, 2.0, 0.0))


# ---- embedding ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_embedding(dtype):
    idx = np.array([[1, 4, 0], [9, 4, 4]], dtype=dtype)
    compare(nn.Embedding(10, 3), torch.nn.Embedding(10, 3), idx.astype(np.int64),
            call=lambda m, i: m(Tensor.from_data(idx, AD)), tcall=lambda m, i: m(i))


def test_embedding_padding_idx():
    ember.seed(0)
    ours = nn.Embedding(6, 2, padding_idx=2)
    np.testing.assert_array_equal(ours.weight.to_numpy()[2], 0)
    twin = torch.nn.Embedding(6, 2, padding_idx=2)
    with torch.no_grad():
        twin.weight[2] = torch.tensor([0.5, -1.0])  # a loaded padding row keeps its value
    idx = np.array([2, 1, 2, 5])
    compare(ours, twin, idx)


def test_embedding_from_pretrained_is_frozen():
    w = randn(4, 3)
    e = nn.Embedding.from_pretrained(w)
    assert e.num_params() == 0 and [n for n, _ in e.named_params()] == ["weight"]
    e = nn.Embedding.from_pretrained(w, freeze=False)
    assert e.num_params() == 12


def test_embedding_default_init_is_standard_normal():
    w = nn.Embedding(1000, 20).weight.to_numpy()
    assert abs(w.mean()) < 0.02 and abs(w.std() - 1) < 0.02


# ---- attention ------------------------------------------------------------------------------
def _mha_pair(E=8, H=2, **kw):
    return nn.MultiHeadAttention(E, H, **kw), torch.nn.MultiheadAttention(E, H, batch_first=True,
                                                                         **kw)


def _randomize_biases(twin):
    with torch.no_grad():
        for n, p in twin.named_parameters():
            if "bias" in n:
                p.copy_(torch.randn(p.shape) * 0.3)
    return twin


@pytest.mark.parametrize("average", [True, False])
def test_mha_self_attention(average):
    ours, twin = _mha_pair()
    _randomize_biases(twin)
    x = randn(2, 5, 8)
    call = lambda m, q: m(q, q, q, average_attn_weights=average)
    compare(ours, twin, x, call=call)


def test_mha_names_shapes_and_init():
    ours, twin = _mha_pair(E=12, H=3)
    names = [(n, tuple(p.shape)) for n, p in ours.named_params()]
    assert names == [(n, tuple(p.shape)) for n, p in twin.state_dict().items()]
    assert np.all(ours.in_proj_bias.to_numpy() == 0) and np.all(ours.out_proj.bias.to_numpy() == 0)
    bound = math.sqrt(6 / (12 + 36))  # xavier_uniform over [3E, E], as PyTorch
    assert np.abs(ours.in_proj_weight.to_numpy()).max() <= bound


def test_mha_cross_attention_with_kdim_vdim():
    ours = nn.MultiHeadAttention(8, 4, kdim=5, vdim=3)
    twin = _randomize_biases(torch.nn.MultiheadAttention(8, 4, kdim=5, vdim=3, batch_first=True))
    q, k, v = randn(2, 4, 8), randn(2, 6, 5, seed=1), randn(2, 6, 3, seed=2)
    compare(ours, twin, q, k, v, call=lambda m, *a: m(*a))


def test_mha_masks():
    ours, twin = _mha_pair()
    _randomize_biases(twin)
    B, L = 2, 5
    pad = np.zeros((B, L), bool)
    pad[0, 3:] = True
    pad[1, 4] = True
    causal = np.triu(np.ones((L, L), bool), 1)

    def call(m, x):
        kp = Tensor.from_data(pad, AD) if isinstance(x, Tensor) else torch.tensor(pad)
        am = Tensor.from_data(causal, AD) if isinstance(x, Tensor) else torch.tensor(causal)
        return m(x, x, x, key_padding_mask=kp, attn_mask=am)
    out, w = compare(ours, twin, randn(B, L, 8), call=call)
    w = w.to_numpy()
    assert np.all(w[0][:, 3:] == 0) and np.all(w[1][:, 4] == 0)
    assert np.all(w[:, causal] == 0)


def test_mha_float_and_per_head_masks():
    ours, twin = _mha_pair()
    B, H, L = 2, 2, 4
    am = randn(B * H, L, L, seed=4)
    kp = randn(B, L, seed=5)

    def call(m, x, am, kp):
        return m(x, x, x, attn_mask=am, key_padding_mask=kp)
    compare(ours, twin, randn(B, L, 8), am, kp, call=call, grad_inputs=(0,))


def test_mha_is_causal_builds_the_mask():
    ours = nn.MultiHeadAttention(8, 2)
    x = Tensor.from_data(randn(1, 4, 8))
    _, w = ours(x, x, x, is_causal=True)
    assert np.all(np.triu(w.to_numpy()[0], 1) == 0)


def test_mha_sequence_first_and_unbatched():
    ours = nn.MultiHeadAttention(8, 2, batch_first=False)
    twin = _randomize_biases(torch.nn.MultiheadAttention(8, 2))
    compare(ours, twin, randn(5, 2, 8), call=lambda m, x: m(x, x, x))
    ours, twin = _mha_pair()
    compare(ours, twin, randn(5, 8), call=lambda m, x: m(x, x, x))


def test_mha_dropout_only_in_training():
    m = nn.MultiHeadAttention(8, 2, dropout=0.5)
    x = Tensor.from_data(randn(1, 6, 8))
    _, w_train = m(x, x, x)
    assert (w_train.to_numpy() == 0).any()
    m.eval()
    _, w = m(x, x, x, average_attn_weights=False)
    np.testing.assert_allclose(w.to_numpy().sum(-1), 1, rtol=1e-5)


# ---- transformer ----------------------------------------------------------------------------
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_transformer_encoder_layer(norm_first, activation):
    kw = dict(dim_feedforward=16, dropout=0.0, activation=activation, norm_first=norm_first)
    ours = nn.TransformerEncoderLayer(8, 2, **kw)
    twin = _randomize_biases(torch.nn.TransformerEncoderLayer(8, 2, batch_first=True, **kw))
    pad = np.zeros((2, 5), bool)
    pad[1, 3:] = True

    def call(m, x):
        kp = Tensor.from_data(pad, AD) if isinstance(x, Tensor) else torch.tensor(pad)
        return m(x, src_key_padding_mask=kp)
    twin.train()  # PyTorch's fast path (eval) returns zeros at padded positions
    compare(ours, twin, randn(2, 5, 8), call=call)


def test_transformer_encoder_stack():
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=12, dropout=0.0)
    ours = nn.TransformerEncoder(layer, num_layers=2, norm=nn.LayerNorm(8))
    tlayer = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=12, dropout=0.0,
                                              batch_first=True)
    twin = torch.nn.TransformerEncoder(tlayer, 2, norm=torch.nn.LayerNorm(8),
                                       enable_nested_tensor=False)
    twin = _randomize_biases(twin)
    causal = np.triu(np.ones((4, 4), bool), 1)

    def call(m, x):
        mask = Tensor.from_data(causal, AD) if isinstance(x, Tensor) else torch.tensor(causal)
        return m(x, mask=mask)
    compare(ours, twin, randn(3, 4, 8), call=call)
    # the copies are separate parameters with equal initial values
    ids = [p.param_id for p in ours.parameters()]
    assert len(ids) == len(set(ids))
    fresh = nn.TransformerEncoder(layer, 2)
    np.testing.assert_array_equal(fresh.layers[0].linear1.weight.to_numpy(),
                                  fresh.layers[1].linear1.weight.to_numpy())


def test_transformer_dropout_follows_train_eval():
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.5)
    x = Tensor.from_data(randn(2, 3, 8))
    layer.eval()
    a, b = layer(x).to_numpy(), layer(x).to_numpy()
    np.testing.assert_array_equal(a, b)
    layer.train()
    assert not np.array_equal(layer(x).to_numpy(), layer(x).to_numpy())


# ---- position -------------------------------------------------------------------------------
def _tutorial_pe(max_len, d_model):
    """The PyTorch tutorial's PositionalEncoding table."""
    position = torch.arange(max_len).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def test_positional_encoding():
    pe = nn.PositionalEncoding(6, dropout=0.0, max_len=50)
    x = randn(2, 7, 6)
    y = pe(Tensor.from_data(x))
    close(y, x + _tutorial_pe(50, 6)[:7].numpy())
    y = pe(Tensor.from_data(x), start=10)
    close(y, x + _tutorial_pe(50, 6)[10:17].numpy())
    assert pe.num_params() == 0 and list(pe.named_params()) == []
    with pytest.raises(ShapeError):
        pe(Tensor.from_data(randn(1, 51, 6)))


def test_positional_encoding_moves_with_the_input_and_drops_in_training():
    pe = nn.PositionalEncoding(4, dropout=0.5, max_len=8)
    x = Tensor.from_data(randn(1, 8, 4), AD).require_grad()
    y = pe(x)
    assert y.backend == AD and (y.to_numpy() == 0).any()
    x.grad(y.sum().backward())
    pe.eval()
    close(pe(x), x.to_numpy() + _tutorial_pe(8, 4).numpy())


def _rope_reference(x, theta=10000.0, interleaved=True, start=0):
    """Complex-number RoPE on [..., T, D] (Meta's LLaMA formulation) in torch float64."""
    x = torch.tensor(x, dtype=torch.float64)
    T, D = x.shape[-2:]
    freqs = theta ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    angles = torch.arange(start, start + T, dtype=torch.float64)[:, None] * freqs
    rot = torch.polar(torch.ones_like(angles), angles)
    if interleaved:
        xc = torch.view_as_complex(x.reshape(*x.shape[:-1], D // 2, 2).contiguous())
        return torch.view_as_real(xc * rot).reshape(x.shape)
    xc = torch.complex(x[..., :D // 2], x[..., D // 2:]) * rot
    return torch.cat([xc.real, xc.imag], -1)


@pytest.mark.parametrize("interleaved", [True, False])
def test_rope(interleaved):
    rope = nn.RoPE(8, max_len=32, interleaved=interleaved)
    x = randn(2, 3, 5, 8)  # [B, H, T, D]
    close(rope(Tensor.from_data(x)), _rope_reference(x, interleaved=interleaved).float(),
          atol=1e-5)
    close(rope(Tensor.from_data(x), start=7),
          _rope_reference(x, interleaved=interleaved, start=7).float(), atol=1e-5)
    # rotation keeps norms; position 0 is untouched; gradients flow
    xt = Tensor.from_data(x, AD).require_grad()
    y = rope(xt)
    close(y[:, :, 0], x[:, :, 0])
    g = xt.grad((y * y).sum().backward())
    close(g, 2 * x, atol=1e-5)
    with pytest.raises(ShapeError):
        rope(Tensor.from_data(randn(1, 33, 8)))
    assert nn.RotaryEncoding is nn.RoPE


# ---- recurrent ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("num_layers, bidirectional, bias", [
    (1, False, True), (2, False, True), (2, True, True), (1, False, False)])
def test_rnn(kind, num_layers, bidirectional, bias):
    ours_cls, twin_cls = (nn.Lstm, torch.nn.LSTM) if kind == "lstm" else (nn.Gru, torch.nn.GRU)
    kw = dict(num_layers=num_layers, bidirectional=bidirectional, bias=bias)
    ours, twin = ours_cls(3, 4, **kw), twin_cls(3, 4, batch_first=True, **kw)
    compare(ours, twin, randn(2, 5, 3))


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_rnn_initial_state_sequence_first_and_unbatched(kind):
    D = 2
    if kind == "lstm":
        ours, twin = nn.Lstm(3, 4, num_layers=D, batch_first=False), torch.nn.LSTM(3, 4, D)
        call = lambda m, x, h, c: m(x, (h, c))
        states = (randn(D, 2, 4, seed=1), randn(D, 2, 4, seed=2))
    else:
        ours, twin = nn.Gru(3, 4, num_layers=D, batch_first=False), torch.nn.GRU(3, 4, D)
        call = lambda m, x, h: m(x, h)
        states = (randn(D, 2, 4, seed=1),)
    compare(ours, twin, randn(5, 2, 3), *states, call=call)
    compare(ours, twin, randn(5, 3), *(s[:, 0] for s in states), call=call)


def test_lstm_names_and_result_structure():
    m = nn.Lstm(3, 4, num_layers=2, bidirectional=True)
    twin = torch.nn.LSTM(3, 4, num_layers=2, bidirectional=True)
    assert [(n, tuple(p.shape)) for n, p in m.named_params()] == \
        [(n, tuple(p.shape)) for n, p in twin.state_dict().items()]
    out, (h, c) = m(Tensor.from_data(randn(2, 6, 3)))
    assert out.shape == (2, 6, 8) and h.shape == c.shape == (4, 2, 4)
    bound = 1 / 2  # U(+-1/sqrt(hidden))
    assert all(np.abs(p.to_numpy()).max() <= bound for p in m.parameters())


def test_rnn_dropout_between_layers_only_in_training():
    m = nn.Gru(3, 4, num_layers=2, dropout=0.5)
    x = Tensor.from_data(randn(1, 4, 3))
    m.eval()
    np.testing.assert_array_equal(m(x)[0].to_numpy(), m(x)[0].to_numpy())
    m.train()
    assert not np.array_equal(m(x)[0].to_numpy(), m(x)[0].to_numpy())


# ---- convolution and pooling (through ember.nn.functional) ----------------------------------
@pytest.fixture
def functional():
    from ember.nn import functional
    return functional


@pytest.mark.parametrize("kw", [
    dict(), dict(stride=2, padding=1), dict(dilation=2, padding=2), dict(groups=2, bias=False),
    dict(padding="same"),
])
def test_conv1d(functional, kw):
    compare(nn.Conv1d(4, 6, 3, **kw), torch.nn.Conv1d(4, 6, 3, **kw), randn(2, 4, 9))


@pytest.mark.parametrize("kw", [
    dict(), dict(stride=2, padding=1), dict(stride=(1, 2), padding=(2, 1), dilation=(2, 1)),
    dict(groups=2, bias=False), dict(padding="same"), dict(padding="valid"),
])
def test_conv2d(functional, kw):
    compare(nn.Conv2d(4, 6, 3, **kw), torch.nn.Conv2d(4, 6, 3, **kw), randn(2, 4, 7, 8))


@pytest.mark.parametrize("kw", [
    dict(), dict(stride=2, padding=1, output_padding=1), dict(groups=2, bias=False),
    dict(stride=2, dilation=2),
])
def test_conv_transpose2d(functional, kw):
    compare(nn.ConvTranspose2d(4, 6, 3, **kw), torch.nn.ConvTranspose2d(4, 6, 3, **kw),
            randn(2, 4, 5, 4))


def test_conv_transpose2d_output_size(functional):
    ours = nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1)
    twin = torch.nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1)
    compare(ours, twin, randn(1, 2, 4, 4), call=lambda m, x: m(x, output_size=[8, 8]))


def test_conv_default_init_and_shapes():
    m = nn.Conv2d(4, 6, (3, 5), groups=2)
    assert m.weight.shape == (6, 2, 3, 5) and m.bias.shape == (6,)
    bound = 1 / math.sqrt(2 * 15)
    assert np.abs(m.weight.to_numpy()).max() <= bound
    assert np.abs(m.bias.to_numpy()).max() <= bound
    t = nn.ConvTranspose2d(4, 6, 3, groups=2)
    assert t.weight.shape == (4, 3, 3, 3)
    assert nn.Conv1d(4, 6, 3).weight.shape == (6, 4, 3)
    with pytest.raises(ShapeError):
        nn.Conv2d(3, 6, 3, groups=2)


@pytest.mark.parametrize("ours, theirs", [
    (nn.MaxPool2d(2), torch.nn.MaxPool2d(2)),
    (nn.MaxPool2d(3, stride=2, padding=1), torch.nn.MaxPool2d(3, stride=2, padding=1)),
    (nn.MaxPool2d(2, ceil_mode=True), torch.nn.MaxPool2d(2, ceil_mode=True)),
    (nn.AvgPool2d(2), torch.nn.AvgPool2d(2)),
    (nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False),
     torch.nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)),
    (nn.AdaptiveAvgPool2d((2, 3)), torch.nn.AdaptiveAvgPool2d((2, 3))),
    (nn.AdaptiveAvgPool2d(1), torch.nn.AdaptiveAvgPool2d(1)),
], ids=lambda m: repr(m))
def test_pool(functional, ours, theirs):
    compare(ours, theirs, randn(2, 3, 7, 7))


# ---- on another backend ---------------------------------------------------------------------
def test_layers_run_on_the_plain_backend():
    x = Tensor.from_data(randn(2, 5, 8), NdArray())
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16).eval()
    assert layer(x).shape == (2, 5, 8)
    out, (h, c) = nn.Lstm(8, 3)(x)
    assert out.shape == (2, 5, 3)
