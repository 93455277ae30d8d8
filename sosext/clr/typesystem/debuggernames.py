"""Type names as the debugger API (ICorDebug) spells them: what SOS's ``clrstack -i`` prints.

SOS's GetTypeOfValue names a type by its metadata name (namespace, nesting with ``+``, arity
suffix kept: ``Dictionary`2``), then the instantiation's arguments, each named the same way,
between ``&lt;`` and ``&gt;`` (SOS writes them HTML-escaped, for its DML output, even in plain
text); a primitive or string argument by its keyword (``int``, ``string``). A
nested type of a generic type lists the outer type's arguments and its own in one bracket, in
the order the runtime's name holds them.

The runtime's own name (the DAC's, ``Dictionary`2[[System.String, System.Private.CoreLib],…]``)
carries the same parts; this module rewrites it.
"""
from __future__ import annotations

from dataclasses import dataclass

# The keywords GetTypeOfValue prints for the element types that have one.
KEYWORD_OF = {
    "System.Boolean": "bool", "System.Char": "char", "System.SByte": "signed byte", "System.Byte": "byte",
    "System.Int16": "short", "System.UInt16": "unsigned short", "System.Int32": "int",
    "System.UInt32": "unsigned int", "System.Int64": "long", "System.UInt64": "unsigned long",
    "System.Single": "float", "System.Double": "double", "System.IntPtr": "IntPtr", "System.UIntPtr": "UIntPtr",
    "System.String": "string",
}
# Not System.Object: the runtime gives its type handle the element type CLASS, so an object of
# exactly that type is "System.Object" (a declared `object` that is null is "object"). As a generic
# argument it is "object" (``ConcurrentQueue`1&lt;object&gt;``): the debugger API types an
# instantiation's arguments by their signature's element type.
ARGUMENT_KEYWORD_OF = {**KEYWORD_OF, "System.Object": "object"}

LT, GT = "&lt;", "&gt;"


def debugger_type_name(runtime_name: str) -> str:
    """``runtime_name`` (the DAC's name of a type) as ICorDebug and SOS's clrstack -i name it;
    a name it cannot read is returned as it is."""
    try:
        text, end = _type(runtime_name, 0)
    except IndexError:
        return runtime_name
    return text if end == len(runtime_name) else runtime_name


@dataclass(frozen=True, slots=True)
class TypeArgument:
    """One argument of an instantiation the runtime names: the debugger API's name of it, and
    the runtime's own (``Ns.Type`` and the assembly's name, "" when the name gives none)."""
    name: str
    runtime_name: str
    assembly: str


def type_arguments(runtime_name: str) -> list[TypeArgument]:
    """The instantiation's arguments of a type the runtime names (a nested type's: the outer
    type's first, as ``!n`` numbers them); [] when it has none or cannot be read."""
    end = _name_end(runtime_name, 0)
    return _arguments(runtime_name, end) if end < len(runtime_name) else []


def method_type_arguments(method_name: str) -> list[TypeArgument]:
    """The method's own instantiation (``!!n``) in the runtime's name of a method desc,
    ``Ns.Type[[…]].Method[[Arg, Assembly],…](params)``; [] for a method that has none."""
    depth = 0
    for i, c in enumerate(method_name):
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
        elif c == "(" and depth == 0:
            head = method_name[:i]
            break
    else:
        head = method_name
    if not head.endswith("]"):
        return []
    depth = 0
    for j in range(len(head) - 1, -1, -1):
        depth += {"]": 1, "[": -1}.get(head[j], 0)
        if depth == 0:
            return _arguments(head, j) if head[j - 1:j] not in ("", ".", "+") else []
    return []


def _name_end(s: str, i: int) -> int:
    while i < len(s) and s[i] not in "[],":
        i += 1
    return i


def _arguments(s: str, i: int) -> list[TypeArgument]:
    """The bracket of arguments that starts at ``s[i]`` ("[[A, asm],[B, asm]]" or "[A,B]")."""
    if s[i:i + 1] != "[" or s[i + 1:i + 2] in ("]", ","):
        return []
    out: list[TypeArgument] = []
    i += 1
    try:
        while True:
            if s[i] == "[":
                start = i + 1
                text, i = _type(s, start, argument=True)
                runtime, assembly = s[start:i], ""
                close = _past_bracket(s, i)
                if s[i] == ",":
                    assembly = s[i + 1:close - 1].split(",")[0].strip()
                i = close
            else:
                start = i
                text, i = _type(s, i, argument=True)
                runtime, assembly = s[start:i], ""
            out.append(TypeArgument(text, runtime, assembly))
            if s[i] == ",":
                i += 1
                continue
            return out if s[i] == "]" else []
    except IndexError:
        return []


def generic_text(name: str, args: list[str]) -> str:
    """``name`` with already named arguments appended the way SOS appends them."""
    return name + (LT + ",".join(args) + GT if args else "")


def _type(s: str, i: int, argument: bool = False) -> tuple[str, int]:
    start = i
    while i < len(s) and s[i] not in "[],":
        i += 1
    base = s[start:i]
    args: list[str] = []
    if i < len(s) and s[i] == "[" and s[i + 1] not in "],":
        i += 1
        while True:
            if s[i] == "[":          # an assembly-qualified argument: [Name, Assembly]
                text, i = _type(s, i + 1, argument=True)
                i = _past_bracket(s, i)
            else:                    # a bare one
                text, i = _type(s, i, argument=True)
            args.append(text)
            if s[i] == ",":
                i += 1
                continue
            if s[i] != "]":
                raise IndexError(i)
            i += 1
            break
    suffix_start = i
    while i < len(s) and s[i] == "[" and s[i + 1] in "],":   # array ranks: [] [,] …
        i = s.index("]", i) + 1
    named = generic_text(base, args) if args else (ARGUMENT_KEYWORD_OF if argument else KEYWORD_OF).get(base, base)
    return named + s[suffix_start:i], i


def _past_bracket(s: str, i: int) -> int:
    """The index after the ``]`` that closes the bracket ``i`` stands in (an argument's assembly
    name is skipped)."""
    depth = 0
    while True:
        c = s[i]
        if c == "[":
            depth += 1
        elif c == "]":
            if depth == 0:
                return i + 1
            depth -= 1
        i += 1
