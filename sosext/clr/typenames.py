"""Generic type names in C#'s shape, as ClrMD (and SOS's managed commands) print them.

The runtime names a generic instantiation with arities and assembly-qualified arguments:
``System.Collections.Generic.List`1[[System.String, System.Private.CoreLib]]``; a nested type
of a generic type takes its outer type's arguments first:
``AsyncTaskMethodBuilder`1+AsyncStateMachineBox`1[[System.Int32, ...],[C+<M>d__0, app]]``.
SOS's managed commands print ``System.Collections.Generic.List<System.String>`` and
``AsyncTaskMethodBuilder<System.Int32>+AsyncStateMachineBox<C+<M>d__0>``, and match type
names in that shape.
"""
from __future__ import annotations

import re

_ARITY = re.compile(r"`(\d+)$")


def csharp_name(name: str) -> str:
    """``name`` with generic arguments written C#-style; other names unchanged."""
    try:
        return _convert(name)
    except (ValueError, IndexError):
        return name


def _convert(name: str) -> str:
    start = name.find("[[")
    if start < 0:
        return name
    base = name[:start]
    args, end = _args(name, start)
    suffix = name[end:]  # array ranks of the instantiation itself, e.g. "[]"
    parts = base.split("+")
    out = []
    pos = 0
    for part in parts:
        m = _ARITY.search(part)
        if m is None:
            out.append(part)
            continue
        n = int(m.group(1))
        mine = args[pos:pos + n]
        pos += n
        out.append(f"{part[:m.start()]}<{', '.join(mine)}>")
    if pos != len(args):
        raise ValueError("arity does not match the arguments")
    return "+".join(out) + suffix


def _args(name: str, start: int) -> tuple[list[str], int]:
    """The converted arguments of ``[[a, asm],[b, asm]]`` starting at ``start``, and the index
    just past its closing bracket."""
    assert name[start] == "["
    i = start + 1
    args: list[str] = []
    while name[i] == "[":
        depth = 0
        j = i
        comma = -1
        while True:
            c = name[j]
            if c == "[":
                depth += 1
            elif c == "]":
                depth -= 1
                if depth == 0:
                    break
            elif c == "," and depth == 1 and comma < 0:
                comma = j
            j += 1
        inner = name[i + 1:comma if comma >= 0 else j]
        args.append(_convert(inner.strip()))
        i = j + 1
        if name[i] == ",":
            i += 1
    if name[i] != "]":
        raise ValueError("unterminated argument list")
    return args, i + 1
