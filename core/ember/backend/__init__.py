"""The names users import backends by (API.md): the classes load on first use, so that
`import ember` never imports wgpu-py or torch, and the protocol (ember.backend.base) imports none
of its implementations."""

from .base import Backend, default_backend, from_name, register, resolve, set_default_backend

_CLASSES = {"NdArray": "ndarray", "Autodiff": "autodiff", "Fusion": "fusion", "Wgpu": "wgpu",
            "Torch": "torch"}


def __getattr__(name):
    if name in _CLASSES:
        return resolve(_CLASSES[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(__all__)


__all__ = ["Autodiff", "Backend", "Fusion", "NdArray", "Torch", "Wgpu", "default_backend",
           "from_name", "register", "set_default_backend"]
