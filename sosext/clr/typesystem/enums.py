"""Enum member names from metadata, so an enum field can be shown as ``Blue`` or
``Read, Exec`` next to the number SOS prints.

An enum's members are its literal static fields; their values sit in the Constant table,
and ``[Flags]`` is a custom attribute whose constructor belongs to System.FlagsAttribute.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...formats.metadata import MetadataError, MetadataReader, TableIndex
from ...formats.metadata.records import FIELD_LITERAL
from ...formats.metadata.tables import HAS_CONSTANT

if TYPE_CHECKING:
    from ..runtime import ClrRuntime

_CONSTANT_FORMATS = {0x02: (1, False), 0x03: (2, False), 0x04: (1, True), 0x05: (1, False), 0x06: (2, True),
                     0x07: (2, False), 0x08: (4, True), 0x09: (4, False), 0x0A: (8, True), 0x0B: (8, False)}


@dataclass(frozen=True, slots=True)
class EnumInfo:
    members: tuple[tuple[int, str], ...]  # (value, name) in declaration order
    is_flags: bool

    def text(self, value: int) -> str | None:
        """``Blue``; for [Flags] enums ``Read, Exec`` (.NET's ToString); None if no name fits."""
        for v, name in self.members:
            if v == value:
                return name
        if not self.is_flags or value == 0:
            return None
        rest = value
        picked: list[tuple[int, str]] = []
        for v, name in sorted(self.members, key=lambda m: -m[0]):
            if v and v & rest == v:
                picked.append((v, name))
                rest &= ~v
        if rest or not picked:
            return None
        return ", ".join(name for _v, name in sorted(picked))


def constant_values(md: MetadataReader) -> dict[int, int]:
    """Field token -> integer constant, for every integral constant of the module."""
    out: dict[int, int] = {}
    for rid in range(1, md.row_count(TableIndex.CONSTANT) + 1):
        etype, _pad, parent, value = md.raw_row(TableIndex.CONSTANT, rid)
        fmt = _CONSTANT_FORMATS.get(etype)
        owner = HAS_CONSTANT.decode(parent)
        if fmt is None or not owner or owner >> 24 != TableIndex.FIELD:
            continue
        blob = md.blobs.get(value)
        size, signed = fmt
        if len(blob) >= size:
            out[owner] = int.from_bytes(blob[:size], "little", signed=signed)
    return out


def _is_flags(md: MetadataReader, type_token: int) -> bool:
    for ctor in md.custom_attribute_types(type_token):
        try:
            if ctor >> 24 == TableIndex.MEMBER_REF:
                owner = md.member_ref(ctor).parent
            else:
                owner = md.declaring_type(ctor)
            if owner is not None and owner >> 24 in (TableIndex.TYPE_REF, TableIndex.TYPE_DEF) \
                    and md.type_name(owner) == "System.FlagsAttribute":
                return True
        except MetadataError:
            continue
    return False


def enum_info(runtime: "ClrRuntime", enum_mt: int) -> EnumInfo | None:
    """Members of the enum at ``enum_mt``; None if it is not an enum or metadata is missing."""
    cache: dict[int, EnumInfo | None] = runtime.cache("enums", dict)
    if enum_mt in cache:
        return cache[enum_mt]
    info = None
    data = runtime.reader.method_table_data(enum_mt)
    is_enum = data is not None and data.parent_method_table != 0 and \
        runtime.reader.method_table_name(data.parent_method_table) == "System.Enum"
    md = runtime.catalog.metadata(data.module) if is_enum else None
    if data is not None and md is not None:
        try:
            consts: dict[int, int] = runtime.cache(f"constants:{data.module:x}", lambda: constant_values(md))
            members = tuple((consts[f.token], f.name) for f in md.fields_of(data.token)
                            if f.flags & FIELD_LITERAL and f.token in consts)
            if members:
                info = EnumInfo(members, _is_flags(md, data.token))
        except MetadataError:
            info = None
    cache[enum_mt] = info
    return info
