"""Comparing ember layers with their PyTorch twins: same weights, same inputs, then the
outputs and the gradients of every input and parameter must agree."""

import numpy as np
import torch

from ember import Tensor
from ember.backend import Autodiff, NdArray

AD = Autodiff(NdArray())
RTOL, ATOL = 1e-5, 1e-6


def load_torch_weights(module, twin):
    """Copy twin's state dict into module's params; the names must be the same sets."""
    state = {k: v.detach().numpy() for k, v in twin.state_dict().items()}
    names = {n for n, _ in module.named_params()}
    assert names == set(state), f"ember {sorted(names)} vs torch {sorted(state)}"

    def put(name, p):
        value = state[name]
        assert tuple(p.shape) == value.shape, (name, p.shape, value.shape)
        return p.with_value(Tensor.from_data(np.array(value), p.backend, dtype=p.dtype))
    return module.map_params(put)


def close(a, b, rtol=RTOL, atol=ATOL, what=""):
    a = a.to_numpy() if isinstance(a, Tensor) else np.asarray(a)
    b = b.detach().numpy() if isinstance(b, torch.Tensor) else np.asarray(b)
    assert a.shape == b.shape, f"{what}: shape {a.shape} vs {b.shape}"
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=what)


def flat(out):
    """The tensors of a nested (output, (h, c)) result, in order."""
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in flat(o)]
    return [] if out is None else [out]


def compare(module, twin, *inputs, grad_inputs=None, call=None, tcall=None, rtol=RTOL,
            atol=ATOL, grad_rtol=None, grad_atol=None, load=True):
    """Run module and twin on the same float inputs (NumPy arrays; int arrays are passed as
    indices, without gradients); compare every output and, through a random projection of
    them, the gradients of the float inputs and every trainable parameter."""
    twin.zero_grad(set_to_none=True)
    if load:
        load_torch_weights(module, twin)
    module.to(AD)
    call = call or (lambda m, *xs: m(*xs))
    tcall = tcall or call
    ex, tx = [], []
    for a in inputs:
        if a is None:
            ex.append(None)
            tx.append(None)
            continue
        a = np.asarray(a)
        floats = a.dtype.kind == "f" and (grad_inputs is None or len(ex) in grad_inputs)
        e = Tensor.from_data(a, AD)
        t = torch.tensor(a)
        if floats:
            e = e.require_grad()
            t.requires_grad_(True)
        ex.append(e)
        tx.append(t)
    outs, touts = flat(call(module, *ex)), flat(tcall(twin, *tx))
    assert len(outs) == len(touts)
    rng = np.random.default_rng(1)
    loss, tloss = None, None
    for i, (o, t) in enumerate(zip(outs, touts)):
        close(o, t, rtol, atol, f"output {i}")
        if o.dtype.startswith("float") and t.requires_grad:
            r = rng.standard_normal(o.shape).astype(np.float32)
            term, tterm = (o * Tensor.from_data(r, AD)).sum(), (t * torch.tensor(r)).sum()
            loss = term if loss is None else loss + term
            tloss = tterm if tloss is None else tloss + tterm
    if loss is None:
        return outs
    grads = loss.backward()
    tloss.backward()
    grtol = grad_rtol or rtol
    gatol = grad_atol or atol * 10
    for i, (e, t) in enumerate(zip(ex, tx)):
        if e is not None and t.requires_grad:
            close(e.grad(grads), t.grad, grtol, gatol, f"grad of input {i}")
    tparams = dict(twin.named_parameters())
    for name, p in module.named_parameters():
        tg = tparams[name].grad
        g = p.grad(grads)
        if tg is None:
            assert g is None or np.allclose(g.to_numpy(), 0), name
            continue
        assert g is not None, f"no gradient for {name}"
        close(g, tg, grtol, gatol, f"grad of {name}")
    return outs


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
