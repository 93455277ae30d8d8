"""Type names exactly as the runtime's DAC prints them (``TypeString::AppendType``).

``GetMethodTableName`` and ``GetObjectClassName`` format with FormatNamespace | FormatFullInst: namespace and nested
names from metadata (``Outer+Inner``), generic arguments in brackets, each argument
assembly-qualified with its module's simple assembly name and bracketed again
(``List`1[[System.String, System.Private.CoreLib]]``), arrays as ``[]`` / ``[,]``, pointers
``*``, byrefs ``&``, type variables by name. ``GetObjectClassName`` formats with
the same flags (measured: .NET 10's DAC qualifies an object's generic arguments too). Characters that
are part of the grammar (``,[]&*+\\``) are escaped with a backslash inside names.

The runtime builds names through a small state machine (dotnet/runtime
``src/coreclr/vm/typestring.cpp``, mirrored by the cDAC's ``TypeNameBuilder``): a step that
is out of order puts it in an error state where later steps add nothing. This builder keeps
the same states so that odd types (an assembly spec after a generic variable, an empty
function pointer name) come out the same, truncation included.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..formats.metadata import MetadataError, TableIndex
from ..errors import ContractError

if TYPE_CHECKING:
    from .ecmametadata import EcmaMetadata
    from .runtimetypesystem import RuntimeTypeSystem

FORMAT_NAMESPACE = 1
FORMAT_FULL_INST = 2
FORMAT_ANGLE_BRACKETS = 4
FORMAT_ASSEMBLY = 8

_START, _NAME, _GEN_ARGS, _PTR_ARR, _BYREF, _ASSEM_SPEC, _ERROR = 1, 2, 4, 8, 16, 32, 64
_RESERVED = frozenset(",[]&*+\\")
_NESTED_PUBLIC = 2  # TypeAttributes visibility values from here on are nested types
MAX_DEPTH = 64  # nesting of generic arguments / element types before we call it damage
MAX_NAME = 1 << 16


def _escape(text: str) -> str:
    return "".join("\\" + c if c in _RESERVED else c for c in text)


class _Builder:
    def __init__(self, angle: bool = False, state: int = _START) -> None:
        self.out: list[str] = []
        self.angle = angle
        self.state = state
        self.nested = False
        self.has_assembly = False
        self.first_arg = False
        self.inst_nesting = 0
        self.arg_starts: list[int] = []

    def _ok(self, states: int) -> bool:
        if self.state != _ERROR and self.state & states:
            return True
        self.state = _ERROR
        return False

    def _len(self) -> int:
        return sum(len(s) for s in self.out)

    def text(self) -> str:
        return "".join(self.out)

    def add_name(self, name: str, namespace: str | None = None, escape: bool = True) -> None:
        if not self._ok(_START | _NAME):
            return
        self.state = _NAME
        if self.nested:
            self.out.append("+")
        self.nested = True
        if namespace:
            self.out.append(_escape(namespace) + ".")
        self.out.append(_escape(name) if escape else name)

    def open_args(self) -> None:
        if not self._ok(_NAME):
            return
        self.state = _START
        self.inst_nesting += 1
        self.first_arg = True
        self.out.append("<" if self.angle else "[")

    def open_arg(self) -> None:
        if not self._ok(_START) or self.inst_nesting == 0:
            self.state = _ERROR
            return
        self.nested = False
        if not self.first_arg:
            self.out.append(",")
        self.first_arg = False
        self.out.append("<" if self.angle else "[")
        self.arg_starts.append(len(self.out))

    def close_arg(self) -> None:
        if not self._ok(_NAME | _GEN_ARGS | _PTR_ARR | _BYREF | _ASSEM_SPEC) or self.inst_nesting == 0:
            self.state = _ERROR
            return
        self.state = _START
        if self.has_assembly:
            self.out.append(">" if self.angle else "]")
        start = self.arg_starts.pop()
        if not self.has_assembly:
            del self.out[start - 1]  # the argument's own bracket is only for qualified names
        self.has_assembly = False

    def close_args(self) -> None:
        if self.inst_nesting == 0:
            self.state = _ERROR
            return
        self._ok(_START)
        if self.state == _ERROR:
            return
        self.state = _GEN_ARGS
        self.inst_nesting -= 1
        if self.first_arg:
            if self.out:
                self.out[-1] = self.out[-1][:-1]
        else:
            self.out.append(">" if self.angle else "]")

    def add_assembly(self, name: str) -> None:
        if not self._ok(_NAME | _GEN_ARGS | _PTR_ARR | _BYREF):
            return
        self.state = _ASSEM_SPEC
        if name:
            self.out.append(", ")
            self.out.append(name.replace("]", "\\]") if self.inst_nesting > 0 else name)
            self.has_assembly = True

    def add_qualifier(self, element_type: int, rank: int) -> None:
        from .runtimetypesystem import (ELEMENT_TYPE_ARRAY, ELEMENT_TYPE_BYREF, ELEMENT_TYPE_PTR,
                                        ELEMENT_TYPE_SZARRAY)
        if element_type not in (ELEMENT_TYPE_BYREF, ELEMENT_TYPE_PTR, ELEMENT_TYPE_SZARRAY, ELEMENT_TYPE_ARRAY):
            return
        if not self._ok(_NAME | _GEN_ARGS | _PTR_ARR):
            return
        if element_type == ELEMENT_TYPE_BYREF:
            self.state = _BYREF
            self.out.append("&")
            return
        self.state = _PTR_ARR
        if element_type == ELEMENT_TYPE_PTR:
            self.out.append("*")
        elif element_type == ELEMENT_TYPE_SZARRAY:
            self.out.append("[]")
        elif rank == 1:
            self.out.append("[*]")
        elif rank > 64:
            self.out.append(f"[{rank}]")
        elif rank:
            self.out.append("[" + "," * (rank - 1) + "]")


class TypeNames:
    """Formats type handles of one runtime (through its type system and metadata)."""

    def __init__(self, rts: "RuntimeTypeSystem", metadata: "EcmaMetadata") -> None:
        self.rts = rts
        self.metadata = metadata

    def method_table_name(self, mt: int) -> str:
        """``GetMethodTableName``: "Free" for the GC's filler, else the full name."""
        self.rts.checked(mt)
        return "Free" if mt == self.rts.free_mt else self.name(mt)

    def name(self, th: int, fmt: int = FORMAT_NAMESPACE | FORMAT_FULL_INST) -> str:
        b = _Builder(angle=bool(fmt & FORMAT_ANGLE_BRACKETS))
        self._append(b, th, fmt, 0)
        return b.text()

    def instantiation_text(self, args: list[int], fmt: int = FORMAT_NAMESPACE | FORMAT_FULL_INST) -> str:
        """A generic method's instantiation, as the runtime appends it after the method's name."""
        b = _Builder(angle=bool(fmt & FORMAT_ANGLE_BRACKETS), state=_NAME)
        self._append_inst(b, args, fmt, 0)
        return b.text()

    def _md(self, module: int):  # type: ignore[no-untyped-def]
        md = self.metadata.metadata(module)
        if md is None:
            raise ContractError(f"module {module:#x} has no readable metadata")
        return md

    def _append(self, b: _Builder, th: int, fmt: int, depth: int) -> None:
        if depth > MAX_DEPTH or b._len() > MAX_NAME:
            raise ContractError(f"type {th:#x} nests too deeply to be real")
        rts = self.rts
        from .runtimetypesystem import ELEMENT_TYPE_VALUETYPE
        to_string = bool(fmt & FORMAT_NAMESPACE) and not fmt & (FORMAT_FULL_INST | FORMAT_ASSEMBLY)
        if not th:
            b.add_name("(null)")
        elif rts.has_type_param(th):
            kind = rts.signature_element_type(th)
            if kind != ELEMENT_TYPE_VALUETYPE:
                rank = rts.array_rank(th)
                self._append(b, rts.type_param(th), fmt & ~FORMAT_ASSEMBLY, depth + 1)
                b.add_qualifier(kind, rank)
            else:
                b.out.append("VALUETYPE")
                self._append(b, rts.type_param(th), fmt & ~FORMAT_ASSEMBLY, depth + 1)
        elif (var := rts.generic_variable(th)) is not None:
            module, token = var
            md = self._md(module)
            try:
                row = md.raw_row(TableIndex.GENERIC_PARAM, token & 0xFFFFFF)
                name = md.strings.get(row[3])
            except (MetadataError, IndexError) as e:
                raise ContractError(f"generic parameter {token:#x}: {e}") from None
            b.add_name(name)
            fmt &= ~FORMAT_ASSEMBLY
        elif (fnptr := rts.function_pointer(th)) is not None:
            if fmt & FORMAT_NAMESPACE:
                types, conv = fnptr
                parts = [self.name(types[0], fmt), "("]
                parts.append(", ".join(self.name(t, fmt) for t in types[1:]))
                if conv & 0x7 == 0x5:  # varargs
                    parts.append(", ..." if len(types) > 2 else "...")
                parts.append(")")
                b.add_name("".join(parts), escape=False)
            else:
                b.add_name("", escape=False)
        else:
            mt = rts.method_table(th)
            token = mt.typedef_token
            module = mt.module
            if token & 0xFFFFFF == 0:
                b.add_name("(dynamicClass)")
            else:
                self._append_typedef(b, self._md(module), token, fmt)
            if fmt & (FORMAT_NAMESPACE | FORMAT_ASSEMBLY):
                inst = rts.instantiation(th)
                if inst and (not mt.is_generic_type_definition or to_string):
                    self._append_inst(b, inst, fmt, depth)
        if fmt & FORMAT_ASSEMBLY and th:
            md = self._md(rts.module_of(th))
            asm = md.assembly()
            b.add_assembly(asm.name if asm is not None else "")

    def _append_typedef(self, b: _Builder, md, token: int, fmt: int) -> None:  # type: ignore[no-untyped-def]
        try:
            td = md.type_def(token)
            chain = [td]
            if td.flags & 0x7 >= _NESTED_PUBLIC:
                cur = td
                while cur.enclosing and len(chain) < MAX_DEPTH:
                    cur = md.type_def(cur.enclosing)
                    chain.append(cur)
        except MetadataError as e:
            raise ContractError(f"type {token:#x}: {e}") from None
        for t in reversed(chain):
            b.add_name(t.name, t.namespace if fmt & FORMAT_NAMESPACE else None)

    def _append_inst(self, b: _Builder, inst: list[int], fmt: int, depth: int) -> None:
        b.open_args()
        for arg in inst:
            b.open_arg()
            if fmt & FORMAT_FULL_INST and self.rts.generic_variable(arg) is None:
                self._append(b, arg, fmt | FORMAT_NAMESPACE | FORMAT_ASSEMBLY, depth + 1)
            else:
                self._append(b, arg, fmt & (FORMAT_NAMESPACE | FORMAT_ANGLE_BRACKETS), depth + 1)
            b.close_arg()
        b.close_args()
