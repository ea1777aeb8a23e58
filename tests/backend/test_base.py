"""ember.backend: the default backend, EMBER_BACKEND, names, and backend values."""

import asyncio

import numpy as np
import pytest

import ember
import ember.backend.base as backend_module
from ember import BackendError, Tensor
from ember.backend import NdArray
from ember.backend.base import Backend, default_backend, from_name, set_default_backend


@pytest.fixture(autouse=True)
def _fresh_default(monkeypatch):
    """Each test starts with no default chosen yet; monkeypatch restores the module's _default."""
    monkeypatch.setattr(backend_module, "_default", None)
    monkeypatch.delenv("EMBER_BACKEND", raising=False)


def test_default_backend_is_ndarray():
    b = default_backend()
    assert isinstance(b, NdArray)
    assert default_backend() is b  # chosen once
    assert ember.default_backend() is b


def test_tensors_without_backend_use_the_default():
    assert Tensor.zeros([2]).backend == NdArray()
    assert isinstance(Tensor.from_data([1.0]).backend, NdArray)


def test_set_default_backend():
    mine = NdArray(inplace=False)
    ember.set_default_backend(mine)
    assert ember.default_backend() is mine
    assert Tensor.ones([2]).backend is mine
    assert Tensor.from_data([1, 2]).backend is mine
    assert Tensor.random([2]).backend is mine


@pytest.mark.parametrize("bad", ["ndarray", NdArray, None, 3])
def test_set_default_backend_needs_a_backend_value(bad):
    with pytest.raises(BackendError, match="NdArray()"):
        set_default_backend(bad)


@pytest.mark.parametrize("name", ["ndarray", "NdArray", " NDARRAY "])
def test_ember_backend_env(monkeypatch, name):
    monkeypatch.setenv("EMBER_BACKEND", name)
    assert isinstance(default_backend(), NdArray)


def test_empty_ember_backend_env_means_ndarray(monkeypatch):
    monkeypatch.setenv("EMBER_BACKEND", "")
    assert isinstance(default_backend(), NdArray)


def test_ember_backend_env_with_unknown_name(monkeypatch):
    monkeypatch.setenv("EMBER_BACKEND", "tpu")
    with pytest.raises(BackendError, match="'tpu'.*ndarray"):
        default_backend()


def test_set_default_backend_wins_over_env(monkeypatch):
    monkeypatch.setenv("EMBER_BACKEND", "nonsense")
    mine = NdArray()
    set_default_backend(mine)
    assert default_backend() is mine


# ---- names -------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", ["ndarray", "NdArray", "  ndarray  "])
def test_from_name(spec):
    assert isinstance(from_name(spec), NdArray)


@pytest.mark.parametrize("spec, unknown", [("tpu", "tpu"), ("nope(ndarray)", "nope"),
                                           ("ndarray(tpu)", "tpu")])
def test_from_name_unknown_lists_known_backends(spec, unknown):
    with pytest.raises(BackendError) as info:
        from_name(spec)
    msg = str(info.value)
    assert f"unknown backend {unknown!r}" in msg
    assert "known backends:" in msg and "ndarray" in msg


def test_from_name_unbalanced_parentheses():
    with pytest.raises(BackendError, match="parentheses"):
        from_name("autodiff(ndarray")


class _Wrap(Backend):
    """A do-nothing decorator: it only delegates, to check that names compose."""

    def __init__(self, inner):
        self.inner = inner

    def __str__(self):
        return f"Wrap<{self.inner}>"

    def execute(self, op, inputs, attrs, *result):
        return self.inner.execute(op, inputs, attrs, *result)

    def from_numpy(self, array):
        return self.inner.from_numpy(array)

    def to_numpy(self, prim):
        return self.inner.to_numpy(prim)


def test_registered_decorators_compose_by_name(monkeypatch):
    monkeypatch.setitem(backend_module._REGISTRY, "wrap", _Wrap)
    b = from_name("Wrap(Wrap(ndarray))")
    assert str(b) == "Wrap<Wrap<NdArray<cpu>>>"
    assert b == _Wrap(_Wrap(NdArray()))
    assert b != _Wrap(NdArray())
    x = Tensor.from_data([1.0, 2.0], backend=b)
    assert ((x + 1) * 2).tolist() == [4.0, 6.0]


# ---- backends are values -----------------------------------------------------------------
def test_backend_equality_and_hash():
    assert NdArray() == NdArray()
    assert hash(NdArray()) == hash(NdArray())
    assert len({NdArray(), NdArray()}) == 1
    assert NdArray() != "ndarray"
    assert NdArray() != _Wrap(NdArray())


def test_backend_names():
    assert str(NdArray()) == "NdArray<cpu>"
    assert repr(NdArray()) == "NdArray<cpu>"
    assert str(NdArray(inplace=False)) == "NdArray<cpu>"


def test_tensors_of_equal_backends_mix():
    a = Tensor.ones([2], backend=NdArray())
    b = Tensor.ones([2], backend=NdArray())
    assert (a + b).tolist() == [2.0, 2.0]


def test_base_backend_protocol():
    b = Backend()
    for call in (lambda: b.from_numpy(np.zeros(1)), lambda: b.to_numpy(None)):
        with pytest.raises(NotImplementedError):
            call()
    assert b.sync() is None
    assert b.inner is None


def test_to_numpy_async_defaults_to_to_numpy():
    b = NdArray()
    prim = b.from_numpy(np.arange(3.0))
    out = asyncio.run(b.to_numpy_async(prim))
    np.testing.assert_array_equal(out, [0.0, 1.0, 2.0])


def test_public_names():
    import ember.backend
    assert {"Autodiff", "Backend", "NdArray", "Torch", "Wgpu", "default_backend",
            "set_default_backend"} <= set(ember.backend.__all__)
    assert ember.backend.NdArray is NdArray and ember.backend.Backend is Backend
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        ember.backend.Nope  # noqa: B018

