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

# The keywords GetTypeOfValue prints for the element types that have one.
KEYWORD_OF = {
    "System.Boolean": "bool", "System.Char": "char", "System.SByte": "signed byte", "System.Byte": "byte",
    "System.Int16": "short", "System.UInt16": "unsigned short", "System.Int32": "int",
    "System.UInt32": "unsigned int", "System.Int64": "long", "System.UInt64": "unsigned long",
    "System.Single": "float", "System.Double": "double", "System.IntPtr": "IntPtr", "System.UIntPtr": "UIntPtr",
    "System.String": "string",
}
# Not System.Object: the runtime gives its type handle the element type CLASS, so an object of
# exactly that type is "System.Object" (a declared `object` that is null is "object").

LT, GT = "&lt;", "&gt;"


def debugger_type_name(runtime_name: str) -> str:
    """``runtime_name`` (the DAC's name of a type) as ICorDebug and SOS's clrstack -i name it;
    a name it cannot read is returned as it is."""
    try:
        text, end = _type(runtime_name, 0)
    except IndexError:
        return runtime_name
    return text if end == len(runtime_name) else runtime_name


def generic_text(name: str, args: list[str]) -> str:
    """``name`` with already named arguments appended the way SOS appends them."""
    return name + (LT + ",".join(args) + GT if args else "")


def _type(s: str, i: int) -> tuple[str, int]:
    start = i
    while i < len(s) and s[i] not in "[],":
        i += 1
    base = s[start:i]
    args: list[str] = []
    if i < len(s) and s[i] == "[" and s[i + 1] not in "],":
        i += 1
        while True:
            if s[i] == "[":          # an assembly-qualified argument: [Name, Assembly]
                text, i = _type(s, i + 1)
                i = _past_bracket(s, i)
            else:                    # a bare one
                text, i = _type(s, i)
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
    named = generic_text(base, args) if args else KEYWORD_OF.get(base, base)
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
