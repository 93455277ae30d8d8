"""One type, three spellings of its name: matching them, and the key that pairs a core's types with a gcdump's.

- the runtime's, from the DAC: ``System.Collections.Generic.Dictionary`2+Entry[[System.String,
  System.Private.CoreLib],[LeakyService.CacheEntry, LeakyService]][]``;
- a gcdump snapshot's, from the GC's BulkType events: ``Entry[System.String,LeakyService.CacheEntry][]``
  (generic arguments without their assemblies, in single brackets, and a nested type without
  the types enclosing it);
- C#'s, as ClrMD and ``dumpheap`` write it (typenames.py): ``System.Collections.Generic.
  Dictionary<System.String, LeakyService.CacheEntry>+Entry[]``, the one sosext's own commands
  and the API print. A gcdump's names become ``Entry<System.String, LeakyService.CacheEntry>[]``:
  the enclosing types are not in the events.

``key`` maps every spelling to the gcdump's shape written in C#'s (the enclosing types left out,
their generic arguments moved to the nested type), so a core can be compared with a snapshot.
Two nested types of the same simple name and arguments under different outer types share a
key (the events cannot tell them apart either).
"""
from __future__ import annotations

import re

from .typenames import csharp_name

# ", AssemblyName" closing a generic argument: `[System.Int32, System.Private.CoreLib]`.
_ASSEMBLY = re.compile(r", [^\[\],]+\]")


def event_name(name: str) -> str:
    """The events' spelling of a runtime (or events) name: ``Entry[System.String,LeakyService.CacheEntry][]``."""
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


# A generic arity just before a bracketed argument list (not before array ranks).
_ARITY_BEFORE_LIST = re.compile(r"`\d+(?=\[[^\],])")


def shown_name(name: str) -> str:
    """C#'s spelling of a name in any spelling. The events give a nested generic type of a
    generic type every argument but only its own arity (``Inner`1[System.Int32,System.String]``
    for ``Outer`1+Inner`1``), which C#'s parser cannot read: there the arities are dropped and
    the list taken as the arguments (``Inner<System.Int32, System.String>``)."""
    c = csharp_name(name)
    if "`" in c:
        c = csharp_name(_ARITY_BEFORE_LIST.sub("", name))
    return c


def _segments(name: str) -> tuple[list[str], str]:
    """A C# name's nesting segments (split at ``+`` outside ``<>``) and the array ranks after the last."""
    body = name
    suffix = ""
    while body.endswith("]"):
        start = body.rfind("[")
        if start < 0 or body[start + 1:-1].strip(",*"):
            break
        suffix = body[start:] + suffix
        body = body[:start]
    parts, depth, start = [], 0, 0
    for i, c in enumerate(body):
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "+" and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    return parts, suffix


def _split_arguments(segment: str) -> tuple[str, str | None]:
    """(stem, argument text) of ``List<System.String>``; (segment, None) when it is not generic
    (``<>c``, ``<PrivateImplementationDetails>``, ``<M>d__0``: compiler names hold brackets too)."""
    if not segment.endswith(">"):
        return segment, None
    depth = 0
    for i in range(len(segment) - 1, -1, -1):
        c = segment[i]
        if c == ">":
            depth += 1
        elif c == "<":
            depth -= 1
            if depth == 0:
                return (segment[:i], segment[i + 1:-1]) if i > 0 else (segment, None)
    return segment, None


def key(name: str) -> str:
    """The name of a core's type and of a gcdump's type that are the same type, in any spelling."""
    segments, suffix = _segments(shown_name(name))
    arguments = []
    for seg in segments:
        _stem, args = _split_arguments(seg)
        if args is not None:
            arguments.append(args)
    stem, _ = _split_arguments(segments[-1])
    return stem + (f"<{', '.join(arguments)}>" if arguments else "") + suffix


def spellings(name: str) -> tuple[str, ...]:
    """Every spelling of the type a runtime (or gcdump) ``name`` names: C#'s first, then the
    runtime's, then the events'."""
    c = shown_name(name)
    return tuple(dict.fromkeys((c, name, event_name(name))))


def named(text: str, name: str) -> bool:
    """Whether ``text`` is the type ``name`` (runtime or gcdump spelling) in any spelling."""
    return text in spellings(name)


def name_contains(text: str, name: str) -> bool:
    """Whether some spelling of the type ``name`` (runtime or gcdump spelling) contains ``text``."""
    return any(text in s for s in spellings(name))
