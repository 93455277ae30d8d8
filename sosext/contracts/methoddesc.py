"""MethodDescs through the RuntimeTypeSystem contract: their MethodTable, metadata token and the
name the DAC's GetMethodDescName gives (``Namespace.Type.Method(ArgType, ArgType)``), which
clrstack prints for each frame.

A MethodDesc lives in a MethodDescChunk: ``ChunkIndex`` counts MethodDescAlignment units from
the chunk's first MethodDesc, which follows the chunk header; the chunk holds the MethodTable
and the high bits of the token (``FlagsAndTokenRange``), the MethodDesc the low
``MethodDescTokenRemainderBitCount`` bits (``Flags3AndTokenRemainder``). The classification is
the low 3 bits of ``Flags`` (IL, FCall, P/Invoke, EEImpl, array, instantiated, COM, dynamic).

The name is TypeString::AppendMethodInternal's with FormatSignature|FormatNamespace|
FormatFullInst: the type's full name (the type-name builder), ``.``, the method's metadata
name, then SigFormat's parameter list: the runtime's short names for primitives (Int32,
Boolean …), System.Object and System.String, a class or struct as its TypeDef's namespace and
name (a nested type's own name only), ``List`1<System.String>`` for an instantiation, ``[]``,
``[,]``, `` ByRef`` and ``*`` for arrays, byrefs and pointers; a type variable stands for the
method's class or method instantiation (``System.__Canon`` in shared code). Dynamic methods (IL
stubs, LCG), array methods and generic method instantiations are not named here yet (None).
"""
from __future__ import annotations

from ..errors import ContractError, SosError
from .typeanswers import TypeAnswers

_CLASSIFICATION_MASK = 0x7
MC_ARRAY, MC_INSTANTIATED, MC_DYNAMIC = 4, 5, 7
# SigFormat::AddType's names of the primitive element types.
_PRIMITIVES = {0x01: "Void", 0x02: "Boolean", 0x03: "Char", 0x04: "SByte", 0x05: "Byte", 0x06: "Int16",
               0x07: "UInt16", 0x08: "Int32", 0x09: "UInt32", 0x0A: "Int64", 0x0B: "UInt64", 0x0C: "Single",
               0x0D: "Double", 0x18: "IntPtr", 0x19: "UIntPtr", 0x0E: "System.String", 0x1C: "System.Object",
               0x16: "TypedReference"}
# A System type whose MethodTable is a primitive: its signature element type prints the short name.
_SYSTEM_PRIMITIVES = {"Boolean", "Char", "SByte", "Byte", "Int16", "UInt16", "Int32", "UInt32", "Int64",
                      "UInt64", "Single", "Double", "IntPtr", "UIntPtr"}
ELEMENT_TYPE_PTR, ELEMENT_TYPE_BYREF, ELEMENT_TYPE_VALUETYPE, ELEMENT_TYPE_CLASS = 0x0F, 0x10, 0x11, 0x12
ELEMENT_TYPE_VAR, ELEMENT_TYPE_ARRAY, ELEMENT_TYPE_GENERICINST = 0x13, 0x14, 0x15
ELEMENT_TYPE_SZARRAY, ELEMENT_TYPE_MVAR = 0x1D, 0x1E
_MAX_DEPTH = 32


class MethodDescs:
    def __init__(self, types: TypeAnswers) -> None:
        self.types = types
        d = self.data = types.data
        self.align = d.global_value("MethodDescAlignment")
        self.remainder_bits = d.global_value("MethodDescTokenRemainderBitCount")
        self.chunk_size = d.size("MethodDescChunk")

    def chunk(self, md: int) -> int:
        return md - self.data.field_u8(md, "MethodDesc", "ChunkIndex") * self.align - self.chunk_size

    def method_table(self, md: int) -> int:
        return self.data.field_pointer(self.chunk(md), "MethodDescChunk", "MethodTable")

    def token(self, md: int) -> int:
        d = self.data
        remainder = d.field_u16(md, "MethodDesc", "Flags3AndTokenRemainder") & ((1 << self.remainder_bits) - 1)
        high = d.field_u16(self.chunk(md), "MethodDescChunk", "FlagsAndTokenRange") & ((1 << (24 - self.remainder_bits)) - 1)
        return 0x06000000 | high << self.remainder_bits | remainder

    def classification(self, md: int) -> int:
        return self.data.field_u16(md, "MethodDesc", "Flags") & _CLASSIFICATION_MASK

    def name(self, md: int) -> str | None:
        """GetMethodDescName's text; None for the kinds not named here (see the module doc)."""
        kind = self.classification(md)
        if kind in (MC_ARRAY, MC_DYNAMIC):
            return None
        if kind == MC_INSTANTIATED and self.data.field_u16(md, "InstantiatedMethodDesc", "NumGenericArgs"):
            return None  # a generic method: its instantiation text is not built here yet
        rts = self.types.rts
        mt = self.method_table(md)
        table = rts.method_table(mt)
        reader = self.types.metadata.metadata(table.module)
        if reader is None:
            return None
        try:
            method = reader.method(self.token(md))
            params = [self._arg(reader, p, mt, 0) for p in method.signature.params]
        except (SosError, KeyError, IndexError):  # a metadata or contract error: not named
            return None
        text = f"{self.types.names.name(mt)}.{method.name}({', '.join(params)}"
        if method.signature.kind == 5:  # VARARG
            text += ", ..." if params else "..."
        return text + ")"

    # -- SigFormat --------------------------------------------------------------------------

    def _named(self, reader, token: int, value_type: bool) -> str:  # type: ignore[no-untyped-def]
        if token >> 24 == 0x02:
            td = reader.type_def(token)
            namespace, name = ("" if td.enclosing is not None else td.namespace), td.name
        elif token >> 24 == 0x01:
            ref = reader.type_ref(token)
            namespace, name = ref.namespace, ref.name
        else:
            raise ContractError(f"a signature names type token {token:#x}")
        if value_type and namespace == "System" and name in _SYSTEM_PRIMITIVES:
            return name
        return f"{namespace}.{name}" if namespace else name

    def _arg(self, reader, t, mt: int, depth: int) -> str:  # type: ignore[no-untyped-def]
        if depth > _MAX_DEPTH:
            raise ContractError("a signature nests too deeply")
        et = t.element_type
        if et in _PRIMITIVES:
            return _PRIMITIVES[et]
        if et in (ELEMENT_TYPE_CLASS, ELEMENT_TYPE_VALUETYPE):
            return self._named(reader, t.token, et == ELEMENT_TYPE_VALUETYPE)
        if et == ELEMENT_TYPE_GENERICINST:
            args = ",".join(self._arg(reader, a, mt, depth + 1) for a in t.args)
            return f"{self._named(reader, t.token, t.value_type)}<{args}>"
        if et == ELEMENT_TYPE_SZARRAY:
            return self._arg(reader, t.element, mt, depth + 1) + "[]"
        if et == ELEMENT_TYPE_ARRAY:
            return self._arg(reader, t.element, mt, depth + 1) + "[" + "," * max(t.rank - 1, 0) + "]"
        if et == ELEMENT_TYPE_BYREF:
            return self._arg(reader, t.element, mt, depth + 1) + " ByRef"
        if et == ELEMENT_TYPE_PTR:
            return self._arg(reader, t.element, mt, depth + 1) + "*"
        if et == ELEMENT_TYPE_VAR:
            inst = self.types.rts.instantiation(mt)
            if t.index < len(inst):
                return self._handle(inst[t.index], depth + 1)
        raise ContractError(f"signature element {et:#x} is not formatted here")

    def _handle(self, th: int, depth: int) -> str:
        """SigFormat::AddType of a loaded type handle (a type variable's instantiation)."""
        rts = self.types.rts
        if depth > _MAX_DEPTH:
            raise ContractError("a type nests too deeply")
        et = rts.signature_element_type(th)
        if et in _PRIMITIVES:
            return _PRIMITIVES[et]
        if et in (ELEMENT_TYPE_SZARRAY, ELEMENT_TYPE_ARRAY):
            rank = rts.array_rank(th)
            suffix = "[]" if et == ELEMENT_TYPE_SZARRAY else "[" + "," * max(rank - 1, 0) + "]"
            return self._handle(rts.type_param(th), depth + 1) + suffix
        if et in (ELEMENT_TYPE_BYREF, ELEMENT_TYPE_PTR):
            return self._handle(rts.type_param(th), depth + 1) + (" ByRef" if et == ELEMENT_TYPE_BYREF else "*")
        if et in (ELEMENT_TYPE_CLASS, ELEMENT_TYPE_VALUETYPE) and not rts.is_type_desc(th):
            table = rts.method_table(th)
            reader = self.types.metadata.metadata(table.module)
            if reader is None:
                raise ContractError(f"module {table.module:#x} has no readable metadata")
            text = self._named(reader, table.typedef_token, False)
            inst = rts.instantiation(th)
            if inst:
                text += "<" + ",".join(self._handle(a, depth + 1) for a in inst) + ">"
            return text
        raise ContractError(f"type {th:#x} is not formatted here")
