"""The exceptions of ember.record, and how their messages quote a file's values."""

import reprlib

from ..errors import EmberError

# a file's values can be huge or nested thousands deep (repr would recurse past the limit)
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict = 4, 8, 8, 8
_REPR.maxstring = _REPR.maxother = 100


def short(value):
    """A bounded repr of a value read from a file, for messages."""
    try:
        return _REPR.repr(value)
    except ValueError:  # an int of more than 4300 digits, which Python refuses to print
        return f"<{type(value).__name__} too long to print>"


class RecordError(EmberError, ValueError):
    """A record file that cannot be read (truncated, corrupt, an unknown format), or that does
    not fit the module it is loaded into (the message lists every mismatch)."""


class UnsafePickleError(RecordError):
    """A PyTorch file whose pickle asks for something other than tensors and plain containers.
    Nothing it names was imported or called."""
