"""ember.nn: modules, layers, losses and initialisers."""

from .module import Module, Param

__all__ = ["Module", "Param"]
