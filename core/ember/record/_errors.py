"""The exceptions of ember.record."""

from ..errors import EmberError


class RecordError(EmberError, ValueError):
    """A record file that cannot be read (truncated, corrupt, an unknown format), or that does
    not fit the module it is loaded into (the message lists every mismatch)."""


class UnsafePickleError(RecordError):
    """A PyTorch file whose pickle asks for something other than tensors and plain containers.
    Nothing it names was imported or called."""
