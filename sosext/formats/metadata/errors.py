"""The single error type of the metadata reader.

Metadata comes out of a debuggee's memory or a core file, so any byte may be garbage.
Every decoding failure becomes a MetadataError with a one-line message; an IndexError,
struct.error or RecursionError escaping from here would be a bug.
"""
from __future__ import annotations

from ...errors import SosError


class MetadataError(SosError):
    """The metadata (or the PE image around it) is malformed or truncated."""
