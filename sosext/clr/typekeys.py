"""One spelling for a type's name whether the DAC or the runtime's EventPipe events wrote it.

A core's type names come from the DAC (``Dictionary`2+Entry[[System.Int32, System.Private.CoreLib],
[SosextDebuggee.CacheEntry, SosextDebuggee]][]``); a gcdump snapshot's from the GC's BulkType
events (``Entry[System.Int32,SosextDebuggee.CacheEntry][]``): generic arguments without their
assemblies and in single brackets, and a nested type without the types enclosing it. ``key``
maps both to the events' spelling, so a core can be compared with a snapshot. Two nested types
of the same simple name and arguments under different outer types share a key (the events
cannot tell them apart either).
"""
from __future__ import annotations

import re

# ", AssemblyName" closing a generic argument: `[System.Int32, System.Private.CoreLib]`.
_ASSEMBLY = re.compile(r", [^\[\],]+\]")


def key(name: str) -> str:
    """The events' spelling of ``name`` (already in that spelling: unchanged)."""
    k = _ASSEMBLY.sub("]", name)
    if "[[" in k:
        # [[A],[B]] -> [A,B]: each argument lost its own brackets with its assembly.
        k = k.replace("],[", ",").replace("[[", "[").replace("]]", "]")
    bracket = k.find("[")
    head = k if bracket < 0 else k[:bracket]
    plus = head.rfind("+")
    if plus >= 0:
        k = k[plus + 1:]   # the events name a nested type by its own name only
    return k
