"""Table schemas, coded indexes and the table stream (#~ or #-) layout.

ECMA-335 II.22 defines 45 tables (0x00-0x2C). Even the ones sosext never reads must be
described exactly: rows are fixed-size and tables are stored back to back, so one wrong
column width shifts every table after it. Column widths depend on the stream header
(heap-size flags) and on row counts (2-byte indexes while a table is small enough).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Iterator

from .errors import MetadataError


class TableIndex(IntEnum):
    """Metadata table numbers; also the high byte of a token."""

    MODULE = 0x00
    TYPE_REF = 0x01
    TYPE_DEF = 0x02
    FIELD_PTR = 0x03
    FIELD = 0x04
    METHOD_PTR = 0x05
    METHOD_DEF = 0x06
    PARAM_PTR = 0x07
    PARAM = 0x08
    INTERFACE_IMPL = 0x09
    MEMBER_REF = 0x0A
    CONSTANT = 0x0B
    CUSTOM_ATTRIBUTE = 0x0C
    FIELD_MARSHAL = 0x0D
    DECL_SECURITY = 0x0E
    CLASS_LAYOUT = 0x0F
    FIELD_LAYOUT = 0x10
    STAND_ALONE_SIG = 0x11
    EVENT_MAP = 0x12
    EVENT_PTR = 0x13
    EVENT = 0x14
    PROPERTY_MAP = 0x15
    PROPERTY_PTR = 0x16
    PROPERTY = 0x17
    METHOD_SEMANTICS = 0x18
    METHOD_IMPL = 0x19
    MODULE_REF = 0x1A
    TYPE_SPEC = 0x1B
    IMPL_MAP = 0x1C
    FIELD_RVA = 0x1D
    ENC_LOG = 0x1E
    ENC_MAP = 0x1F
    ASSEMBLY = 0x20
    ASSEMBLY_PROCESSOR = 0x21
    ASSEMBLY_OS = 0x22
    ASSEMBLY_REF = 0x23
    ASSEMBLY_REF_PROCESSOR = 0x24
    ASSEMBLY_REF_OS = 0x25
    FILE = 0x26
    EXPORTED_TYPE = 0x27
    MANIFEST_RESOURCE = 0x28
    NESTED_CLASS = 0x29
    GENERIC_PARAM = 0x2A
    METHOD_SPEC = 0x2B
    GENERIC_PARAM_CONSTRAINT = 0x2C


# Token types that live in heaps rather than tables.
TOKEN_USER_STRING = 0x70
TOKEN_STRING = 0x71  # never in metadata; listed so callers can recognise it

T = TableIndex


@dataclass(frozen=True, slots=True)
class CodedIndex:
    """A column that can point into one of several tables; the low ``bits`` select which."""

    name: str
    bits: int
    tables: tuple[TableIndex | None, ...]  # None marks a tag value that is not used

    def decode(self, value: int) -> int:
        """Turn a stored value into a token; 0 (a null reference) stays 0."""
        rid = value >> self.bits
        if rid == 0:
            return 0
        tag = value & ((1 << self.bits) - 1)
        table = self.tables[tag] if tag < len(self.tables) else None
        if table is None:
            raise MetadataError(f"bad {self.name} coded index tag {tag}")
        return (table << 24) | rid


# II.24.2.6, tag order matters: it is the stored tag value.
TYPE_DEF_OR_REF = CodedIndex("TypeDefOrRef", 2, (T.TYPE_DEF, T.TYPE_REF, T.TYPE_SPEC))
HAS_CONSTANT = CodedIndex("HasConstant", 2, (T.FIELD, T.PARAM, T.PROPERTY))
HAS_CUSTOM_ATTRIBUTE = CodedIndex(
    "HasCustomAttribute",
    5,
    (
        T.METHOD_DEF, T.FIELD, T.TYPE_REF, T.TYPE_DEF, T.PARAM, T.INTERFACE_IMPL,
        T.MEMBER_REF, T.MODULE, T.DECL_SECURITY, T.PROPERTY, T.EVENT, T.STAND_ALONE_SIG,
        T.MODULE_REF, T.TYPE_SPEC, T.ASSEMBLY, T.ASSEMBLY_REF, T.FILE, T.EXPORTED_TYPE,
        T.MANIFEST_RESOURCE, T.GENERIC_PARAM, T.GENERIC_PARAM_CONSTRAINT, T.METHOD_SPEC,
    ),
)  # fmt: skip
HAS_FIELD_MARSHAL = CodedIndex("HasFieldMarshal", 1, (T.FIELD, T.PARAM))
HAS_DECL_SECURITY = CodedIndex("HasDeclSecurity", 2, (T.TYPE_DEF, T.METHOD_DEF, T.ASSEMBLY))
MEMBER_REF_PARENT = CodedIndex(
    "MemberRefParent", 3, (T.TYPE_DEF, T.TYPE_REF, T.MODULE_REF, T.METHOD_DEF, T.TYPE_SPEC)
)
HAS_SEMANTICS = CodedIndex("HasSemantics", 1, (T.EVENT, T.PROPERTY))
METHOD_DEF_OR_REF = CodedIndex("MethodDefOrRef", 1, (T.METHOD_DEF, T.MEMBER_REF))
MEMBER_FORWARDED = CodedIndex("MemberForwarded", 1, (T.FIELD, T.METHOD_DEF))
IMPLEMENTATION = CodedIndex("Implementation", 2, (T.FILE, T.ASSEMBLY_REF, T.EXPORTED_TYPE))
# Tags 0, 1 and 4 are reserved; only 2 (MethodDef) and 3 (MemberRef) occur, but the
# width is still 3 bits.
CUSTOM_ATTRIBUTE_TYPE = CodedIndex(
    "CustomAttributeType", 3, (None, None, T.METHOD_DEF, T.MEMBER_REF, None)
)
RESOLUTION_SCOPE = CodedIndex(
    "ResolutionScope", 2, (T.MODULE, T.MODULE_REF, T.ASSEMBLY_REF, T.TYPE_REF)
)
TYPE_OR_METHOD_DEF = CodedIndex("TypeOrMethodDef", 1, (T.TYPE_DEF, T.METHOD_DEF))


class Heap(IntEnum):
    """Which heap a column indexes; the value is its bit in the HeapSizes byte."""

    STRING = 0x01
    GUID = 0x02
    BLOB = 0x04


# A column kind is one of: an int (fixed width in bytes), a Heap, a TableIndex
# (simple index) or a CodedIndex.
ColumnKind = int | Heap | TableIndex | CodedIndex
U1, U2, U4 = 1, 2, 4
S, G, B = Heap.STRING, Heap.GUID, Heap.BLOB

# II.22, column order as stored. Names follow the spec.
SCHEMA: dict[TableIndex, tuple[tuple[str, ColumnKind], ...]] = {
    T.MODULE: (("Generation", U2), ("Name", S), ("Mvid", G), ("EncId", G), ("EncBaseId", G)),
    T.TYPE_REF: (("ResolutionScope", RESOLUTION_SCOPE), ("TypeName", S), ("TypeNamespace", S)),
    T.TYPE_DEF: (
        ("Flags", U4), ("TypeName", S), ("TypeNamespace", S), ("Extends", TYPE_DEF_OR_REF),
        ("FieldList", T.FIELD), ("MethodList", T.METHOD_DEF),
    ),
    T.FIELD_PTR: (("Field", T.FIELD),),
    T.FIELD: (("Flags", U2), ("Name", S), ("Signature", B)),
    T.METHOD_PTR: (("Method", T.METHOD_DEF),),
    T.METHOD_DEF: (
        ("RVA", U4), ("ImplFlags", U2), ("Flags", U2), ("Name", S), ("Signature", B),
        ("ParamList", T.PARAM),
    ),
    T.PARAM_PTR: (("Param", T.PARAM),),
    T.PARAM: (("Flags", U2), ("Sequence", U2), ("Name", S)),
    T.INTERFACE_IMPL: (("Class", T.TYPE_DEF), ("Interface", TYPE_DEF_OR_REF)),
    T.MEMBER_REF: (("Class", MEMBER_REF_PARENT), ("Name", S), ("Signature", B)),
    T.CONSTANT: (("Type", U1), ("Padding", U1), ("Parent", HAS_CONSTANT), ("Value", B)),
    T.CUSTOM_ATTRIBUTE: (
        ("Parent", HAS_CUSTOM_ATTRIBUTE), ("Type", CUSTOM_ATTRIBUTE_TYPE), ("Value", B),
    ),
    T.FIELD_MARSHAL: (("Parent", HAS_FIELD_MARSHAL), ("NativeType", B)),
    T.DECL_SECURITY: (("Action", U2), ("Parent", HAS_DECL_SECURITY), ("PermissionSet", B)),
    T.CLASS_LAYOUT: (("PackingSize", U2), ("ClassSize", U4), ("Parent", T.TYPE_DEF)),
    T.FIELD_LAYOUT: (("Offset", U4), ("Field", T.FIELD)),
    T.STAND_ALONE_SIG: (("Signature", B),),
    T.EVENT_MAP: (("Parent", T.TYPE_DEF), ("EventList", T.EVENT)),
    T.EVENT_PTR: (("Event", T.EVENT),),
    T.EVENT: (("EventFlags", U2), ("Name", S), ("EventType", TYPE_DEF_OR_REF)),
    T.PROPERTY_MAP: (("Parent", T.TYPE_DEF), ("PropertyList", T.PROPERTY)),
    T.PROPERTY_PTR: (("Property", T.PROPERTY),),
    T.PROPERTY: (("Flags", U2), ("Name", S), ("Type", B)),
    T.METHOD_SEMANTICS: (
        ("Semantics", U2), ("Method", T.METHOD_DEF), ("Association", HAS_SEMANTICS),
    ),
    T.METHOD_IMPL: (
        ("Class", T.TYPE_DEF), ("MethodBody", METHOD_DEF_OR_REF),
        ("MethodDeclaration", METHOD_DEF_OR_REF),
    ),
    T.MODULE_REF: (("Name", S),),
    T.TYPE_SPEC: (("Signature", B),),
    T.IMPL_MAP: (
        ("MappingFlags", U2), ("MemberForwarded", MEMBER_FORWARDED), ("ImportName", S),
        ("ImportScope", T.MODULE_REF),
    ),
    T.FIELD_RVA: (("RVA", U4), ("Field", T.FIELD)),
    T.ENC_LOG: (("Token", U4), ("FuncCode", U4)),
    T.ENC_MAP: (("Token", U4),),
    T.ASSEMBLY: (
        ("HashAlgId", U4), ("MajorVersion", U2), ("MinorVersion", U2), ("BuildNumber", U2),
        ("RevisionNumber", U2), ("Flags", U4), ("PublicKey", B), ("Name", S), ("Culture", S),
    ),
    T.ASSEMBLY_PROCESSOR: (("Processor", U4),),
    T.ASSEMBLY_OS: (("OSPlatformID", U4), ("OSMajorVersion", U4), ("OSMinorVersion", U4)),
    T.ASSEMBLY_REF: (
        ("MajorVersion", U2), ("MinorVersion", U2), ("BuildNumber", U2), ("RevisionNumber", U2),
        ("Flags", U4), ("PublicKeyOrToken", B), ("Name", S), ("Culture", S), ("HashValue", B),
    ),
    T.ASSEMBLY_REF_PROCESSOR: (("Processor", U4), ("AssemblyRef", T.ASSEMBLY_REF)),
    T.ASSEMBLY_REF_OS: (
        ("OSPlatformId", U4), ("OSMajorVersion", U4), ("OSMinorVersion", U4),
        ("AssemblyRef", T.ASSEMBLY_REF),
    ),
    T.FILE: (("Flags", U4), ("Name", S), ("HashValue", B)),
    T.EXPORTED_TYPE: (
        ("Flags", U4), ("TypeDefId", U4), ("TypeName", S), ("TypeNamespace", S),
        ("Implementation", IMPLEMENTATION),
    ),
    T.MANIFEST_RESOURCE: (
        ("Offset", U4), ("Flags", U4), ("Name", S), ("Implementation", IMPLEMENTATION),
    ),
    T.NESTED_CLASS: (("NestedClass", T.TYPE_DEF), ("EnclosingClass", T.TYPE_DEF)),
    T.GENERIC_PARAM: (
        ("Number", U2), ("Flags", U2), ("Owner", TYPE_OR_METHOD_DEF), ("Name", S),
    ),
    T.METHOD_SPEC: (("Method", METHOD_DEF_OR_REF), ("Instantiation", B)),
    T.GENERIC_PARAM_CONSTRAINT: (("Owner", T.GENERIC_PARAM), ("Constraint", TYPE_DEF_OR_REF)),
}  # fmt: skip

# Column positions by name, so callers say row[COL[T.FIELD]["Name"]] rather than row[1].
COL: dict[TableIndex, dict[str, int]] = {
    t: {name: i for i, (name, _) in enumerate(cols)} for t, cols in SCHEMA.items()
}

# Tables reached through an indirection table in unoptimised (#-) metadata.
PTR_TABLE = {
    T.FIELD: T.FIELD_PTR,
    T.METHOD_DEF: T.METHOD_PTR,
    T.PARAM: T.PARAM_PTR,
    T.EVENT: T.EVENT_PTR,
    T.PROPERTY: T.PROPERTY_PTR,
}

# HeapSizes flag bits (II.24.2.6) beyond the three heap bits; the CLR's own names.
HEAP_EXTRA_DATA = 0x40  # four extra bytes follow the row counts


def _index_width(rows: int) -> int:
    return 2 if rows < 0x10000 else 4


@dataclass(slots=True)
class Table:
    """One table's place in the stream and a decoder for its fixed-size rows."""

    index: TableIndex
    rows: int
    row_size: int
    offset: int  # absolute offset of row 1 in the metadata bytes
    struct: struct.Struct

    def row(self, data: bytes, rid: int) -> tuple[int, ...]:
        """Raw column values of 1-based row ``rid`` (heap offsets, coded values as stored)."""
        if not 0 < rid <= self.rows:
            raise MetadataError(
                f"row {rid} out of range for table {self.index.name} ({self.rows} rows)"
            )
        return self.struct.unpack_from(data, self.offset + (rid - 1) * self.row_size)

    def all_rows(self, data: bytes) -> Iterator[tuple[int, ...]]:
        """Every row in order; one C-level loop instead of ``rows`` Python calls."""
        end = self.offset + self.rows * self.row_size
        return self.struct.iter_unpack(data[self.offset : end])


_FORMAT = {1: "B", 2: "H", 4: "I"}


class TableStream:
    """The parsed header of a #~ or #- stream and the location of every present table."""

    def __init__(self, data: bytes, start: int, size: int, *, force_large: bool = False) -> None:
        end = start + size
        if size < 24:
            raise MetadataError("table stream header truncated")
        (_, self.major, self.minor, heap_sizes, _, valid, self.sorted) = struct.unpack_from(
            "<IBBBBQQ", data, start
        )
        self.heap_sizes = heap_sizes
        unknown = valid & ~((1 << (max(TableIndex) + 1)) - 1)
        if unknown:
            raise MetadataError(
                f"table stream lists unknown table {unknown.bit_length() - 1:#04x}"
            )
        present = [t for t in TableIndex if valid >> t & 1]
        pos = start + 24
        if pos + 4 * len(present) > end:
            raise MetadataError("table stream row counts truncated")
        counts = struct.unpack_from(f"<{len(present)}I", data, pos)
        pos += 4 * len(present)
        if heap_sizes & HEAP_EXTRA_DATA:
            pos += 4
            if pos > end:
                raise MetadataError("table stream extra data truncated")
        self.row_counts: dict[TableIndex, int] = dict.fromkeys(TableIndex, 0)
        for t, n in zip(present, counts):
            if n > 0xFFFFFF:  # a token has 24 bits for the row number
                raise MetadataError(f"table {t.name} claims {n} rows")
            self.row_counts[t] = n

        # A minimal delta (#JTD) makes every table index 4 bytes wide. Heap indexes still
        # follow the HeapSizes flags (which delta writers set), as System.Reflection.Metadata
        # reads them.
        def width(kind: ColumnKind) -> int:
            if isinstance(kind, Heap):
                return 4 if heap_sizes & kind else 2
            if isinstance(kind, CodedIndex):
                if force_large:
                    return 4
                most = max(self.row_counts[t] for t in kind.tables if t is not None)
                return 2 if most < (1 << (16 - kind.bits)) else 4
            if isinstance(kind, TableIndex):
                if force_large:
                    return 4
                n = self.row_counts[kind]
                ptr = PTR_TABLE.get(kind)
                if ptr is not None:
                    # A list column points into the Ptr table when one exists.
                    n = max(n, self.row_counts[ptr])
                return _index_width(n)
            return kind  # fixed width

        self.tables: dict[TableIndex, Table] = {}
        for t in TableIndex:
            kinds = [width(kind) for _, kind in SCHEMA[t]]
            row_size = sum(kinds)
            n = self.row_counts[t]
            # Check before anything is sized by the count: a corrupt count must not
            # turn into a huge allocation or a read past the stream.
            if n * row_size > end - pos:
                raise MetadataError(
                    f"table {t.name} ({n} rows of {row_size} bytes) runs past the table stream"
                )
            fmt = "<" + "".join(_FORMAT[k] for k in kinds)
            self.tables[t] = Table(t, n, row_size, pos, struct.Struct(fmt))
            pos += n * row_size
        self.end = pos

    def __getitem__(self, t: TableIndex) -> Table:
        return self.tables[t]
