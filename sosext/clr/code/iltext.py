"""IL as text, the way SOS's dumpil writes it: ``IL_0004: call int32 Ns.Type::M(string)``.

SOS's IL listing descends from ildasm: operands that are types are written in ildasm's
style (``class [System.Runtime]System.Object``, ``int32``, ``!0``, ``uint8[]``), a method
token as ``<return type> <declaring type>::<name>(<parameter types, comma-separated>)``,
a field as ``<declaring type>::<name>``, a string in quotes with anything outside printable
ASCII as '.', and ``.try { … } .catch/.finally { … }`` around the protected ranges.
"""
from __future__ import annotations

from typing import Callable, Iterator

from .il import CLAUSE_FINALLY, ILClause, Instruction, Operand
from ...formats.metadata import MetadataError, MetadataReader, MethodSig, SigType
from ...formats.metadata.tables import TableIndex as T

# ildasm's names of the primitive element types
ILDASM_PRIMITIVES = {
    0x01: "void", 0x02: "bool", 0x03: "char", 0x04: "int8", 0x05: "uint8", 0x06: "int16", 0x07: "uint16",
    0x08: "int32", 0x09: "uint32", 0x0A: "int64", 0x0B: "uint64", 0x0C: "float32", 0x0D: "float64",
    0x0E: "string", 0x16: "typedref", 0x18: "native int", 0x19: "native uint", 0x1C: "object",
}
MAX_STRING = 79  # SOS shows this many characters of a string literal, then "..."
MAX_DEPTH = 64


class ILDasmNames:
    """ildasm-style names of a module's types and members (SOS's PrettyPrintType/Class)."""

    def __init__(self, md: MetadataReader) -> None:
        self.md = md

    # -- types ------------------------------------------------------------------------

    def type_sig(self, t: SigType, depth: int = 0) -> str:
        if depth > MAX_DEPTH:
            raise MetadataError("signature nested too deeply")
        et = t.element_type
        if et in ILDASM_PRIMITIVES:
            text = ILDASM_PRIMITIVES[et]
        elif et in (0x11, 0x12):
            text = ("valuetype " if et == 0x11 else "class ") + self.class_name(t.token or 0, depth + 1)
        elif et == 0x1D:
            text = self.type_sig(t.element, depth + 1) + "[]"  # type: ignore[arg-type]
        elif et == 0x14:
            text = self.type_sig(t.element, depth + 1) + _array_shape(t)  # type: ignore[arg-type]
        elif et == 0x0F:
            text = self.type_sig(t.element, depth + 1) + "*"  # type: ignore[arg-type]
        elif et == 0x10:
            text = self.type_sig(t.element, depth + 1) + "&"  # type: ignore[arg-type]
        elif et == 0x13:
            text = f"!{t.index}"
        elif et == 0x1E:
            text = f"!!{t.index}"
        elif et == 0x15:
            kw = "valuetype " if t.value_type else "class "
            args = ",".join(self.type_sig(a, depth + 1) for a in t.args)
            text = f"{kw}{self.class_name(t.token or 0, depth + 1)}<{args}>"
        elif et == 0x1B:
            text = "method METHOD"
        else:
            text = f"/* UNKNOWN TYPE (0x{et:X})*/"
        for m in t.modifiers:
            text = f"{text} {'mod req' if m.required else 'mod opt'} {self.class_name(m.token, depth + 1)}"
        return text + (" pinned" if t.pinned else "")

    def class_name(self, token: int, depth: int = 0) -> str:
        """``[Assembly]Namespace.Outer/Inner`` for a TypeRef, ``[*]Namespace.Type`` for a
        TypeDef of this module (ildasm's "somewhere here"), a TypeSpec as its signature."""
        if depth > MAX_DEPTH:
            raise MetadataError("types nested too deeply")
        md = self.md
        kind = token >> 24
        try:
            if kind == T.TYPE_REF:
                ref = md.type_ref(token)
                scope = ref.resolution_scope
                prefix = ""
                if scope is not None and scope >> 24 == T.TYPE_REF:
                    prefix = self.class_name(scope, depth + 1) + "/"
                elif scope is not None and scope >> 24 == T.ASSEMBLY_REF:
                    prefix = f"[{md.assembly_ref(scope).name}]"
                return prefix + _dotted(ref.namespace, ref.name)
            if kind == T.TYPE_DEF:
                td = md.type_def(token)
                if td.enclosing is not None:
                    return self.class_name(td.enclosing, depth + 1) + "/" + _dotted(td.namespace, td.name)
                return "[*]" + _dotted(td.namespace, td.name)
            if kind == T.TYPE_SPEC:
                return self.type_sig(md.type_spec(token).signature, depth + 1)
        except MetadataError:
            return f" [ERROR: INVALID TOKEN 0x{token:08X}] "
        return f" [ERROR: INVALID TOKEN TYPE 0x{token:08X}] "

    # -- members (SOS's DisassembleToken) ---------------------------------------------

    def method_text(self, owner: str, name: str, sig: MethodSig) -> str:
        ret = self.type_sig(sig.return_type)
        params = ",".join(self.type_sig(p) for p in sig.params)
        return f"{ret} {owner}::{name}({params})"

    def token_text(self, token: int) -> str:
        md = self.md
        kind = token >> 24
        try:
            if kind == T.TYPE_DEF:
                td = md.type_def(token)
                return _dotted(td.namespace, td.name)
            if kind == T.TYPE_REF:
                ref = md.type_ref(token)
                return _dotted(ref.namespace, ref.name)
            if kind == T.FIELD:
                f = md.field(token)
                owner = md.declaring_type(token)
                return f"{self._typedef_name(owner)}::{f.name}"
            if kind == T.METHOD_DEF:
                m = md.method(token)
                return self.method_text(self._typedef_name(md.declaring_type(token)), m.name, m.signature)
            if kind == T.MEMBER_REF:
                ref = md.member_ref(token)
                owner = self._parent_name(ref.parent)
                if isinstance(ref.signature, MethodSig):
                    return self.method_text(owner, ref.name, ref.signature)
                return f"{self.type_sig(ref.signature)} {owner}::{ref.name}"
            if kind == 0x70:
                return _string_literal(md.user_string(token))
        except MetadataError:
            if kind == 0x70:
                return f"STRING {token:x}"
            return f"<invalid token {token:08x}>"
        return f"<unknown token type {token & 0xFF000000:08x}>"

    def _typedef_name(self, token: int | None) -> str:
        if token is None:
            return "<unknown type def>"
        td = self.md.type_def(token)
        return _dotted(td.namespace, td.name)

    def _parent_name(self, token: int | None) -> str:
        if token is None:
            return "<unknown type token>"
        kind = token >> 24
        if kind == T.TYPE_REF:
            ref = self.md.type_ref(token)
            return _dotted(ref.namespace, ref.name)
        if kind == T.TYPE_DEF:
            return self._typedef_name(token)
        if kind == T.TYPE_SPEC:
            return self.type_sig(self.md.type_spec(token).signature)
        return "<unknown type token>"


def _dotted(namespace: str, name: str) -> str:
    return f"{namespace}.{name}" if namespace else name


def _array_shape(t: SigType) -> str:
    """ildasm's general array bounds: ``[...]`` for rank 1 without sizes, else per dimension."""
    rank = max(t.rank, 0)
    if rank == 0:
        return "[BAD: RANK == 0!]"
    if rank == 1 and not t.sizes and not t.lower_bounds:
        return "[...]"
    dims = []
    for i in range(min(rank, 32)):
        low = t.lower_bounds[i] if i < len(t.lower_bounds) else 0
        if i < len(t.sizes) and low == 0:
            dims.append(str(t.sizes[i]))
        elif i < len(t.lower_bounds):
            dims.append(f"{low}..." + (str(low + t.sizes[i] - 1) if i < len(t.sizes) else ""))
        else:
            dims.append("")
    return "[" + ",".join(dims) + "]"


def _string_literal(s: str) -> str:
    if len(s) > MAX_STRING:
        s = s[:MAX_STRING] + "..."
    return '"' + "".join(c if 0x20 <= ord(c) < 0x80 else "." for c in s) + '"'


def operand_text(ins: Instruction, token_text: Callable[[int], str]) -> str:
    """The text after the opcode name."""
    op, v = ins.operand, ins.value
    if op is Operand.NONE:
        return ""
    if op in (Operand.VAR8, Operand.VAR16):
        return f"VAR OR ARG {v}"
    if op in (Operand.BR8, Operand.BR32):
        return f"IL_{int(v or 0) & 0xFFFFFFFF:04x}"
    if op is Operand.SWITCH:
        return "(" + ", ".join(f"IL_{t & 0xFFFFFFFF:04x}" for t in ins.targets) + ")"
    if op is Operand.TOKEN:
        return token_text(int(v or 0))
    if op in (Operand.R32, Operand.R64):
        return f"{v:f}"
    return str(v)


def il_lines(instructions: list[Instruction], clauses: tuple[ILClause, ...],
             token_text: Callable[[int], str]) -> Iterator[str]:
    """SOS's listing: each instruction as ``IL_xxxx: name operand``, indented two spaces per
    open ``.try``/handler, with the block lines before the instruction that opens or closes one.

    Clauses that protect the same range (a try with two catches) open and close one
    ``.try`` block, where SOS would print one per clause."""
    indent = 0
    # (start, end, word): each distinct protected range once, and each handler
    blocks = {(c.try_offset, c.try_offset + c.try_length, ".try") for c in clauses}
    blocks |= {(c.handler_offset, c.handler_offset + c.handler_length, _handler_word(c)) for c in clauses}
    for ins in instructions:
        pos = ins.offset
        # innermost (latest started) closes first; outermost (latest ending) opens first
        for _start, _end, word in sorted((b for b in blocks if b[1] == pos), key=lambda b: -b[0]):
            indent = max(indent - 2, 0)
            yield f"{'':{indent}}}} // end {word}"
        for _start, _end, word in sorted((b for b in blocks if b[0] == pos), key=lambda b: -b[1]):
            yield f"{'':{indent}}{word}"
            yield f"{'':{indent}}{{"
            indent += 2
        text = operand_text(ins, token_text)
        yield f"{'':{indent}}IL_{pos:04x}: {ins.name}" + (f" {text}" if text else "")


def _handler_word(c: ILClause) -> str:
    return ".finally" if c.flags == CLAUSE_FINALLY else ".catch"
