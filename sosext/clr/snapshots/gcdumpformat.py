"""Telling a saved GC heap snapshot (gcdumpsnap.GcDump.save) from a core, without loading
the snapshot code: the CLI asks this of every file it opens."""
from __future__ import annotations


def is_gcdump(path: str) -> bool:
    """A cheap check: a zip whose first member is meta.npy (what :meth:`GcDump.save` writes)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError:
        return False
    return head.startswith(b"PK\x03\x04") and b"meta.npy" in head
