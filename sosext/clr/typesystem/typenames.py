"""Type names in C#'s shape, as ClrMD's ``ClrType.Name`` (and so SOS's managed commands) print them.

The runtime names a generic instantiation with arities and assembly-qualified arguments:
``System.Collections.Generic.List`1[[System.String, System.Private.CoreLib]]``; a nested type
of a generic type takes its outer type's arguments first:
``AsyncTaskMethodBuilder`1+AsyncStateMachineBox`1[[System.Int32, ...],[C+<M>d__0, app]]``.
ClrMD (microsoft/clrmd, ``DacNameParser``) rewrites these to
``System.Collections.Generic.List<System.String>`` and
``AsyncTaskMethodBuilder<System.Int32>+AsyncStateMachineBox<C+<M>d__0>``:

- each ```N`` arity suffix is dropped and the segment takes the next N arguments, ``<A, B>``;
- an argument keeps its own array ranks and pointers (``Foo<System.Int32[], A*>``); the
  instantiation's ranks follow the closing ``>`` (``List<A>[]``, ``Dictionary<K, V>+Entry[]``);
- arguments may be bare (``Foo`2[T,U]``, as reflection-only and F# names have them): ``Foo<T, U>``,
  and a bracketed list after a name with no arity (F#, obfuscators) is an argument list too;
- arguments the name lacks become ``T1``, ``T2`` … of their segment (``Foo`2`` → ``Foo<T1, T2>``),
  but only where the innermost segment is itself generic and nothing follows it;
- a name it cannot read (a pointer or byref after an instantiation, too many arguments, a
  stray bracket) is left exactly as it is, as ClrMD leaves it; so is one where an array of an
  instantiation is itself an argument and that instantiation's last, assembly-qualified
  argument ends in array ranks, directly or through its own last argument
  (``Lazy`1[[KeyValuePair`2[[Int32, a],[Framework[], b]][], c]]``): ClrMD's parser loses its
  place there.

tests/test_typenames.py holds this to ClrMD's own parse and to ClrMD's names on real cores.
"""
from __future__ import annotations

import re

_ARITY = re.compile(r"`(\d+)$")
_RANK = re.compile(r"\[,*\]")
# Array ranks ([], [,], [,,] …) repeated: the only text ClrMD accepts after an argument list.
_RANKS = re.compile(r"(?:\[,*\])*")


class _Unreadable(ValueError):
    """A name outside what the parser understands: the caller keeps the original."""


def csharp_name(name: str) -> str:
    """``name`` written as ClrMD writes it (``List<System.String>``); names it cannot read unchanged."""
    if "`" not in name and "[" not in name:
        return name  # the common case: nothing generic
    try:
        text, end, _ = _type(name, 0, in_args=False)
    except (_Unreadable, IndexError, ValueError):
        return name
    return text if end == len(name) else name


def _type(s: str, i: int, in_args: bool) -> tuple[str, int, bool]:
    """One type name starting at ``s[i]``: its C# text, the index just past it, and whether it
    ends in array ranks (its own, or through its last argument's). Inside an argument list the
    name stops at ``,`` or ``]``; ranks and pointers stay with the argument."""
    j = i
    while j < len(s) and s[j] not in "[],":
        j += 1
    base = s[i:j]
    if not base:
        raise _Unreadable(s)
    segments = base.split("+")
    marks = [_ARITY.search(seg) for seg in segments]
    arities = [int(m.group(1)) if m else 0 for m in marks]
    args: list[str] | None = None
    last_ranked = False  # the last argument, assembly-qualified, ends in array ranks
    if j < len(s) and s[j] == "[" and j + 1 < len(s) and s[j + 1] not in "],":
        args, j, last_ranked = _arguments(s, j)
        if not any(marks):  # F#'s and obfuscators' generics carry no arity: the list is the arity
            arities[-1] = len(args)
    suffix_end = _RANKS.match(s, j).end()
    suffix = s[j:suffix_end]
    if args is not None or in_args:
        ranks = _RANK.findall(suffix)
        if len(ranks) > 1:  # ClrMD writes a jagged array's every rank as "[]"
            suffix = "[]" * len(ranks)
    j = suffix_end
    if in_args and args is not None and suffix and last_ranked:
        raise _Unreadable(s)  # ClrMD's parser loses its place here and keeps the whole name
    if not in_args and j != len(s):
        raise _Unreadable(s)  # e.g. "List`1[[A, a]]*": ClrMD gives up there too
    if args is None:
        if not arities[-1] or suffix:
            return base + suffix, j, bool(suffix)
        args = []
    if len(args) > sum(arities):
        raise _Unreadable(s)
    out = []
    pos = 0
    for seg, mark, n in zip(segments, marks, arities):
        stem = seg[:mark.start()] if mark else seg
        if n == 0:
            out.append(stem)
            continue
        mine = args[pos:pos + n]
        mine += [f"T{k + 1}" for k in range(len(mine), n)]
        pos += n
        out.append(f"{stem}<{', '.join(mine)}>")
    return "+".join(out) + suffix, j, bool(suffix) or last_ranked


def _arguments(s: str, i: int) -> tuple[list[str], int, bool]:
    """The arguments of ``[[A, asm],[B, asm]]`` or ``[A,B]`` at ``s[i]``, converted, the
    index just past the closing bracket, and whether the last is assembly-qualified and ends
    in array ranks."""
    i += 1  # the list's '['
    args: list[str] = []
    while True:
        if s[i] == "[":  # assembly-qualified: [type, assembly]
            text, i, ranked = _type(s, i + 1, in_args=True)
            if s[i] == ",":
                i = _assembly_end(s, i)
            if s[i] != "]":
                raise _Unreadable(s)
            i += 1
        else:
            text, i, _ = _type(s, i, in_args=True)
            ranked = False
        args.append(text)
        if s[i] == "]":
            return args, i + 1, ranked
        if s[i] != ",":
            raise _Unreadable(s)
        i += 1
        if s[i] == " ":
            i += 1


def _assembly_end(s: str, i: int) -> int:
    """Index of the ``]`` closing an argument whose assembly name starts at ``s[i]`` (a comma)."""
    while s[i] != "]":
        if s[i] == "[":
            raise _Unreadable(s)
        i += 1
    return i


# A generic arity just before an argument list the DAC already wrote in angle brackets:
# the parameters of a method name, ``Read(System.Span`1<Byte>)``.
_ARITY_BEFORE_ARGS = re.compile(r"`\d+(?=<)")


def csharp_member_name(text: str) -> str:
    """A method's or static field's name as the DAC gives it (``Type.Method(parameters)``,
    ``Type.s_field``) with its declaring type in C#'s spelling and no generic arity left in the
    parameters: ``System.ConsolePal.Read(System.Span<Byte>)``. What sosext's own commands (leaks,
    retained, dominators, report) print; gcroot and clrstack keep SOS's text."""
    paren = text.find("(")
    head, params = (text, "") if paren < 0 else (text[:paren], text[paren:])
    depth, cut = 0, -1
    for i, c in enumerate(head):  # the member's name follows the last '.' outside brackets
        if c in "[<":
            depth += 1
        elif c in "]>":
            depth -= 1
        elif c == "." and depth == 0:
            cut = i
    if cut > 0 and head[cut - 1] == ".":  # .ctor, .cctor
        cut -= 1
    if cut > 0:
        head = csharp_name(head[:cut]) + head[cut:]
    return _ARITY_BEFORE_ARGS.sub("", head + params)
