"""Object commands: dumpobj (do), dumparray (da), dumpvc; and the field table they share
with dumpclass.

These are SOS's native-engine commands: label lines padded to 13 characters, pointers as
16 hex digits (lowercase where SOS builds them with its DML helpers, uppercase where it
uses a raw %p), the field table in SOS's printf layout, byte for byte by default. With
-notes sosext adds, after a field's name, a readable rendering in parentheses where the SOS
value column says little: a char's character, decimal, DateTime, TimeSpan and Guid values,
enum member names, floats that %f rounds away, and statics whose class constructor has not run.
"""
from __future__ import annotations

from typing import Any

from ..clr.addresses import AddressKind, classifier
from ..clr.typesystem.enums import enum_info
from ..clr.typesystem.fields import ClrField
from ..formats.metadata import MetadataError
from ..clr.heap.objects import (ARRAY_DATA_OFFSET, method_table_of, string_length, string_text, thin_lock,
                           type_desc_of)
from ..formats.metadata.signatures import ElementType as ET
from ..clr.runtime import ClrRuntime, ObjectData
from ..clr.heap.values import (c_fixed, decode_primitive, fixed_loses_information, round_trip, well_known_size,
                          well_known_text)
from ..errors import SosAnswer, SosError, UsageError
from ..render.json import emit_json
from ..render.numbers import P16, p16
from ..render.output import Address
from ..render.table import Cells, Column, Table, fmt_pointer
from .base import Command, Option, Parsed, Positional, address_or, parse_address, parse_count, register
from .context import CommandContext

OBJ_STRING, OBJ_FREE, OBJ_OBJECT, OBJ_ARRAY = 0, 1, 2, 3
_MAX_STRING = 0x200000  # SOS refuses to print longer strings
_CONTENT_LIMIT = 128

# CorElementType short names as SOS prints them ("Array: ... Type Int32"); GENERICINST has none
# (cortypeinfo.h names it NULL), so a field of a generic instantiation SOS cannot resolve shows a blank type.
ELEMENT_TYPE_NAMES = {
    ET.VOID: "Void", ET.BOOLEAN: "Boolean", ET.CHAR: "Char", ET.I1: "SByte", ET.U1: "Byte", ET.I2: "Int16",
    ET.U2: "UInt16", ET.I4: "Int32", ET.U4: "UInt32", ET.I8: "Int64", ET.U8: "UInt64", ET.R4: "Single",
    ET.R8: "Double", ET.STRING: "String", ET.PTR: "PTR", ET.BYREF: "BYREF", ET.VALUETYPE: "VALUETYPE",
    ET.CLASS: "CLASS", ET.VAR: "VAR", ET.ARRAY: "ARRAY",
    ET.TYPEDBYREF: "TypedReference", ET.I: "IntPtr", ET.U: "UIntPtr", ET.FNPTR: "FNPTR", ET.OBJECT: "Object",
    ET.SZARRAY: "SZARRAY", ET.MVAR: "MVAR",
}
_IN_SYSTEM = {ET.VOID, ET.BOOLEAN, ET.CHAR, ET.I1, ET.U1, ET.I2, ET.U2, ET.I4, ET.U4, ET.I8, ET.U8, ET.R4, ET.R8,
              ET.STRING, ET.TYPEDBYREF, ET.I, ET.U, ET.OBJECT}


def _field_table(header: bool = False) -> Table:
    """SOS's DisplayFields columns; the Value title is right-aligned in 16, the values
    themselves are printed as they come (numbers aligned by the value formatter, floats not)."""
    value = Column(16, True, str) if header else Column(-1, False, str)
    return Table(Column(16, True, p16), Column(8, True, lambda v: f"{v:08x}"), Column(8, True, lambda v: f"{v:x}"),
                 Column(20, True, str), Column(4, True, str), Column(8, True, str), value, Column(-1, False, str))


FIELD_HEADER = _field_table(True).header("MT", "Field", "Offset", "Type", "VT", "Attr", "Value", "Name")
_FIELD_ROW = _field_table()


def element_type_name(et: int) -> str:
    return ELEMENT_TYPE_NAMES.get(et, "")


def composed_type_name(et: int) -> str:
    """SOS's name for a field whose type it knows only by element type (System.Int32, PTR)."""
    name = element_type_name(et)
    return f"System.{name}" if et in _IN_SYSTEM else name


def clip_type_name(name: str, width: int = 20) -> str:
    """SOS's FormatTypeName: a long name keeps its end, behind three dots."""
    return name if len(name) <= width else "..." + name[-(width - 3):]


def size_text(size: int) -> str:
    return f"{size}(0x{size:x}) bytes"


def parse_object_address(text: str) -> int:
    """An object address argument; 0 or garbage is SOS's "Invalid parameter"."""
    value = address_or(text, f"Invalid parameter {text}")
    if value == 0:
        raise UsageError(f"Invalid parameter {text}")
    return value


def prefers_canonical_mt(rt: ClrRuntime, klass: int) -> tuple[bool, int]:
    """(.NET 9+ reports a canonical MethodTable where older runtimes gave the EEClass, that MT)."""
    canon = rt.canonical_method_table(klass) if klass else None
    return (canon is not None and canon == klass), (canon or 0)


def module_file(rt: ClrRuntime, module: int) -> str:
    mod = rt.catalog.module(module) if module else None
    return mod.shown_name if mod is not None and mod.shown_name else "Unknown Module"


def checked_object(ctx: CommandContext, address: int) -> ObjectData:
    """The DAC's view of the object at ``address``, or one line saying what the address is
    instead. The address is classified first: the DAC never sees one that is not an
    object start."""
    classifier(ctx.runtime).require_object(address)
    data = ctx.runtime.object_data(address)
    if data is None or (data.object_type != OBJ_FREE and ctx.heap.types.get(data.method_table) is None):
        raise SosError(f"{address:#x} is not a valid object")
    return data


def object_data_or_none(ctx: CommandContext, address: int) -> ObjectData | None:
    """The DAC's view of a value read from target memory, only if it is an object start."""
    if classifier(ctx.runtime).object_or_none(address) is None:
        return None
    return ctx.runtime.object_data(address)


# -- the field table ----------------------------------------------------------------------

NOTES_HELP = ("after a field's name, in parentheses, what its value means where SOS's number says little: "
              "a char's character, enum members, decimal/DateTime/TimeSpan/Guid values, floats %f rounds away, "
              "(not initialized) for a static whose class constructor has not run (SOS prints none of these)")




class FieldTable:
    """SOS's DisplayFields: one row per field, inherited ones first."""

    def __init__(self, ctx: CommandContext, indent: int = 0, *, notes: bool = False) -> None:
        self.ctx = ctx
        # -notes: sosext's readings after a field's name, which SOS does not print.
        self.notes = notes
        self.rt = ctx.runtime
        self.target = self.rt.target
        self.indent = " " * (4 * indent)

    def type_name(self, f: ClrField) -> str:
        if f.element_type in (ET.VALUETYPE, ET.CLASS) and f.type_mt:
            return self.ctx.heap.types.name_of(f.type_mt)
        if f.element_type == ET.CLASS and f.type_token & 0xFFFFFF:
            md = self.rt.catalog.metadata(f.module)
            if md is not None:
                try:
                    return md.type_name(0x02000000 | (f.type_token & 0xFFFFFF))
                except MetadataError:
                    pass
        return composed_type_name(f.sig_type if f.sig_type != f.element_type else f.element_type)

    def _collect(self, mt: int, start: int | None, value_class: bool) -> None:
        """The structured forms' rows of "fields": mt, token, offset, type, vt, attr, value
        (as SOS shows it), name."""
        out = self.ctx.out
        rows = out.table("fields", None, ("mt", "token", "offset", "type", "vt", "attr", "value", "name"))
        for f in self.rt.fields.all_fields(mt) or []:
            line = self.row(f, mt, start, value_class)[0]
            offset = f.offset + (0 if value_class or f.is_thread_static or f.is_context_static else 8)
            attr = line[61:69].strip()
            value = line[70:86].strip() if attr in ("static", "instance") else None
            rows.row(data=(Address(f.type_mt), f.token, offset, self.type_name(f), bool(f.is_value_type), attr,
                           value, f.name))

    def lines(self, mt: int, start: int | None, value_class: bool) -> list[str]:
        """The header and rows for the fields of ``mt``; instance values read at ``start``
        (an object, or with ``value_class`` a struct's first byte), blank without one."""
        fields = self.rt.fields.all_fields(mt)
        if fields is None:
            return [self.indent + "Unable to display fields"]
        if self.ctx.out.structured:
            self._collect(mt, start, value_class)
        out = [self.indent + FIELD_HEADER]
        for f in fields:
            out.extend(self.indent + ln for ln in self.row(f, mt, start, value_class))
        return out

    def row(self, f: ClrField, mt: int, start: int | None, value_class: bool) -> list[str]:
        # SOS adds the MethodTable pointer to every offset but thread statics' (statics too).
        offset = f.offset + (0 if value_class or f.is_thread_static or f.is_context_static else 8)
        cells = (f.type_mt, f.token, offset, clip_type_name(self.type_name(f)), "Yes" if f.is_value_type else "No")
        row = _FIELD_ROW.row
        if f.is_thread_static or f.is_context_static:
            return self._thread_static_rows(f, mt, cells)
        if f.is_static:
            addr = self.rt.fields.static_address(f.owner_mt, f)
            if addr is None:
                return [row(*cells, "static", "", "<no information>")]
            bases = self.rt.fields.static_bases(f.owner_mt)
            note = "not initialized" if bases is not None and bases.initialized is False else None
            value, extra = self.value(f, addr, align=True, static=True) if addr else (" " * 16, None)
            return [row(*cells, "static", value, f"{f.name}{self._note(note or extra)}")]
        if start is None:
            return [row(*cells, "instance", " " * 16, f.name)]
        value, extra = self.value(f, f.address_in(start, value_class), align=True)
        return [row(*cells, "instance", value, f"{f.name}{self._note(extra)}")]

    def _note(self, text: str | None) -> str:
        return f" ({text})" if text and self.notes else ""

    def _thread_static_rows(self, f: ClrField, mt: int, cells: tuple) -> list[str]:
        attr = "TLstatic" if f.is_thread_static else "CLstatic"
        rows = [_FIELD_ROW.row(*cells, attr, "", f.name)]
        if f.is_context_static:
            return rows + ["", "Display of context static variables is not implemented"]
        places = self.rt.fields.thread_static_addresses(f.owner_mt, f)
        if places is None:
            return rows + [" <no information>"]
        rows.append("    Thread static values (Thread:Value)")
        for tid, addr in places:
            value, extra = self.value(f, addr, align=False, static=True)
            rows.append(f"        {tid:x}:{value}{self._note(extra)}")
        rows.append("")
        return rows

    def value(self, f: ClrField, addr: int, *, align: bool, static: bool = False) -> tuple[str, str | None]:
        """(SOS's value cell, sosext's readable note or None) for the field stored at ``addr``."""
        et = f.element_type
        if et == ET.VALUETYPE:
            data = addr
            if static:
                # A struct static's storage holds its box: SOS shows the storage's address (0 while
                # no box is there); the readable note (-notes) reads the boxed data.
                raw = self.target.read_partial(addr, 8)
                box = int.from_bytes(raw, "little") if len(raw) == 8 else 0
                if not box:
                    return p16(0), None
                return p16(addr), self._struct_note(f, box + 8)
            return p16(data), self._struct_note(f, data)
        size = f.size or 8
        raw = self.target.read_partial(addr, size)
        if len(raw) < size:
            return "", None  # as SOS, which prints nothing where its read fails
        v = decode_primitive(et, bytes(raw))
        w = 16 if align else 0
        if et in (ET.I1, ET.I2, ET.I4, ET.I8):
            return f"{v:>{w}d}", self._enum_note(f, v)
        if et in (ET.U1, ET.U2, ET.U4, ET.U8, ET.BOOLEAN):
            return f"{int(v):>{w}d}", self._enum_note(f, int(v))
        if et == ET.CHAR:
            return f"{v:>{w}x}", _char_note(v)
        if et in (ET.I, ET.U):
            return P16(v), None
        if et in (ET.R4, ET.R8):
            single = et == ET.R4
            return c_fixed(v), (round_trip(v, single) if fixed_loses_information(v, single) else None)
        return p16(v), None

    def _struct_note(self, f: ClrField, data: int) -> str | None:
        if not f.type_mt:
            return None
        name = self.ctx.heap.types.name_of(f.type_mt)
        size = well_known_size(name)
        if size is None:
            return None
        raw = self.target.read_partial(data, size)
        return well_known_text(name, bytes(raw)) if len(raw) == size else None

    def _enum_note(self, f: ClrField, value: int) -> str | None:
        if not f.type_mt or f.type_mt == f.enclosing_mt:
            return None
        info = enum_info(self.rt, f.type_mt)
        return info.text(value) if info is not None else None


def _char_note(code: int) -> str | None:
    return f"'{chr(code)}'" if 32 <= code < 127 else None


# -- dumpobj --------------------------------------------------------------------------------


def object_lines(ctx: CommandContext, address: int, data: ObjectData, *, fields: bool = True,
                 indent: int = 0, notes: bool = False) -> list[str]:
    """SOS's PrintObj for a checked object."""
    rt = ctx.runtime
    heap = ctx.heap
    if data.object_type == OBJ_FREE:
        return ["Free Object", f"Size:        {size_text(data.size)}"]
    mt = data.method_table
    name = rt.object_type_name(address) or heap.types.name_of(mt)
    out = [f"Name:        {name}", f"MethodTable: {p16(mt)}"]
    if data.rcw:
        out.append(f"RCW:         {p16(data.rcw)}")
    if data.ccw:
        out.append(f"CCW:         {p16(data.ccw)}")
    out.append(f"Size:        {size_text(data.size)}")
    if name in ("System.RuntimeType", "System.RuntimeType+RuntimeTypeCache"):
        out.extend(_runtime_type_lines(ctx, address, mt, name))
    if data.object_type == OBJ_ARRAY:
        out.append(f"Array:       Rank {data.rank}, Number of elements {data.num_components}, "
                   f"Type {element_type_name(data.element_type)}")
        if data.element_type in (ET.I1, ET.U1, ET.CHAR):
            out.append("Content:     " + _array_content(rt, address, data))
    else:
        t = heap.types.get(mt)
        out.append(f"File:        {module_file(rt, t.module if t else 0)}")
    if data.object_type == OBJ_STRING:
        out.append(f"String:      {_string_text(rt, address)}")
    if fields:
        out.append("Fields:")
        fdata = rt.field_counts(mt)
        if fdata is not None and fdata.num_instance_fields + fdata.num_static_fields > 0:
            out.extend(FieldTable(ctx, indent, notes=notes).lines(mt, address, False))
        else:
            out.append("None")
    lock = _thin_lock(ctx, address)
    if lock:
        out.append(lock)
    return out


def _string_text(rt: ClrRuntime, address: int) -> str:
    if string_length(rt.target, address) > _MAX_STRING:
        return "<String is invalid or too large to print>"
    return string_text(rt.target, address)


def _array_content(rt: ClrRuntime, address: int, data: ObjectData) -> str:
    n = min(data.num_components, _CONTENT_LIMIT)
    wide = data.element_type == ET.CHAR
    raw = bytes(rt.target.read_partial(address + ARRAY_DATA_OFFSET, n * (2 if wide else 1)))
    codes = [int.from_bytes(raw[i:i + 2], "little") for i in range(0, len(raw) - 1, 2)] if wide else list(raw)
    return "".join(chr(c) if 32 <= c <= 126 else "." for c in codes)


def _thin_lock(ctx: CommandContext, address: int) -> str | None:
    lock = thin_lock(ctx.runtime.target, address)
    thread = ctx.runtime.thread_with_lock_id(lock.owner_id) if lock else None
    if lock is None or thread is None:
        return None
    return f"ThinLock owner {lock.owner_id:x} ({P16(thread[0])}), Recursive {lock.recursion:x}"


def _runtime_type_lines(ctx: CommandContext, address: int, mt: int, name: str) -> list[str]:
    rt = ctx.runtime
    fields = rt.fields
    if name == "System.RuntimeType+RuntimeTypeCache":
        f = fields.field(mt, "m_runtimeType")
        if f is None:
            return []
        address = fields.read(f, f.address_in(address))
        if not address or classifier(rt).object_or_none(address) is None:
            return []
        mt = method_table_of(rt.target, address)
        if mt is None:
            return []
    f = fields.field(mt, "m_handle")
    if f is None:
        return []
    handle = fields.read(f, f.address_in(address))
    desc = type_desc_of(handle)
    if desc is not None:
        return [f"TypeDesc:    {P16(desc)}"]
    if not classifier(rt).is_method_table(handle):
        return [f"Type MT:     {p16(handle)} (not a MethodTable)"] if handle else []
    return [f"Type Name:   {ctx.heap.types.name_of(handle)}", f"Type MT:     {p16(handle)}"]


def gc_ref_rows(ctx: CommandContext, address: int, data: ObjectData) -> list[tuple[str | None, int, int]]:
    """(field path or None for array elements, offset, referenced object). The offset counts, as
    ClrMD's ClrReference.Offset and so SOS's dumpobjgcrefs, from the data after the MethodTable
    pointer: a class's first field is at 0x00, an array's first element at 0x08 (after its length)."""
    obj = ctx.heap.get_object(address)
    slots = sorted(obj.reference_slots())
    header = ctx.runtime.target.pointer_size
    if data.object_type == OBJ_ARRAY:
        return [(None, off - header, ref) for off, ref in slots]
    fields = ctx.runtime.fields
    instance = sorted(fields.instance_fields(data.method_table), key=lambda f: f.offset)
    return [(_field_path(fields, instance, off - header), off - header, ref) for off, ref in slots]


def _field_path(fields, instance: list[ClrField], offset: int, depth: int = 0) -> str | None:  # type: ignore[no-untyped-def]
    """The dotted field path at ``offset`` (from the data start) through embedded structs."""
    best = None
    for f in instance:
        if f.offset <= offset:
            best = f
        else:
            break
    if best is None:
        return None
    if best.is_struct and best.type_mt and depth < 16:
        inner = sorted(fields.instance_fields(best.type_mt), key=lambda f: f.offset)
        rest = _field_path(fields, inner, offset - best.offset, depth + 1)
        return f"{best.name or '???'}.{rest or '???'}"
    return (best.name or "???") if best.offset == offset else None


def gc_ref_lines(ctx: CommandContext, address: int, data: ObjectData) -> list[str]:
    """The C# dumpobjgcrefs table that ``dumpobj -refs`` appends (so ClrMD's type names)."""
    rows = gc_ref_rows(ctx, address, data)
    if not rows:
        return ["GC Refs: none"]
    names = [r[0] for r in rows]
    t = Table(Column(-1, False, lambda v: "" if v is None else str(v)),
              Column(-1, True, lambda v: f"-0x{-int(v):02x}" if int(v) < 0 else f"0x{int(v):02x}"),
              Column(16, True, fmt_pointer), Column(-1, False, str))
    t.fit(0, names).fit(1, (r[1] for r in rows))
    out = ["GC Refs:", t.header("Field", "Offset", "Object", "Type")]
    for name, off, ref in rows:
        out.append(t.row(name, off, ref, referenced_type(ctx, ref, csharp=True)))
    return out


def referenced_type(ctx: CommandContext, ref: int, csharp: bool = False) -> str:
    """The type name of the object a reference points to ("Unknown" for a wild one): the
    runtime's, or ClrMD's (what SOS's C# dumpobjgcrefs prints)."""
    mt = method_table_of(ctx.runtime.target, ref)
    if mt is None:
        return "Unknown"
    t = ctx.heap.types.get(mt) if classifier(ctx.runtime).is_method_table(mt) else None
    if t is None:
        return "Unknown"
    return ctx.heap.types.csharp_name_of(mt) if csharp else t.name


def object_json(ctx: CommandContext, address: int, data: ObjectData) -> dict[str, Any]:
    rt = ctx.runtime
    heap = ctx.heap
    mt = data.method_table
    if data.object_type == OBJ_FREE:
        # The DAC's GetObjectClassName faults on a Free object: never ask it.
        return {"command": "dumpobj", "address": f"0x{address:x}", "mt": f"0x{mt:x}", "name": "Free",
                "size": data.size, "free": True, "fields": []}
    doc: dict[str, Any] = {"command": "dumpobj", "address": f"0x{address:x}", "mt": f"0x{mt:x}",
                           "name": rt.object_type_name(address) or heap.types.name_of(mt),
                           "size": data.size}
    if data.object_type == OBJ_STRING:
        doc["string"] = _string_text(rt, address)
    if data.object_type == OBJ_ARRAY:
        doc["array"] = {"rank": data.rank, "length": data.num_components,
                        "element_type": element_type_name(data.element_type),
                        "element_mt": f"0x{data.element_type_handle:x}"}
    table = FieldTable(ctx)
    fields = []
    for f in rt.fields.all_fields(mt) or ():
        entry: dict[str, Any] = {"name": f.name, "token": f"0x{f.token:08x}", "type": table.type_name(f),
                                 "mt": f"0x{f.type_mt:x}", "offset": f.offset + (0 if f.is_static else 8),
                                 "kind": "threadstatic" if f.is_thread_static else
                                 ("static" if f.is_static else "instance")}
        if f.is_instance:
            where = f.address_in(address)
        elif not f.is_thread_static:
            where = rt.fields.static_address(f.owner_mt, f)
        else:
            where = None
        if where:
            value = rt.fields.read(f, where)
            cell, note = table.value(f, where, align=False, static=f.is_static)
            entry["value"] = value if not isinstance(value, float) else round_trip(value, f.element_type == ET.R4)
            if note:
                entry["text"] = note
        fields.append(entry)
    doc["fields"] = fields
    return doc


@register
class DumpObj(Command):
    names = ("dumpobj", "do", "DumpObj")
    summary = "Display a managed object: its type, size, fields and their values."
    usage = "dumpobj [-nofields] [-refs] [-notes] [--json] <address>"
    details = """\
Shows the object's type name, MethodTable, size and module file; a string's text; an
array's rank, length and element type (and the characters of byte/char arrays); then
every instance and static field (inherited first) with its type's MethodTable, token,
offset, type, value-type flag, attribute, value and name. References print the address
they point to, embedded structs their own address (dumpvc <MT> <address> shows them).
The table is SOS's, byte for byte; with -notes sosext shows after a field's name, in
parentheses, what the value means when SOS's number is not enough: a char's character,
decimal/DateTime/TimeSpan/Guid values, enum members, imprecise floats, and statics whose
class constructor has not run yet.

Examples:
  dumpobj 7f3a1c000040
  do -nofields 7f3a1c000040
  dumpobj -notes 7f3a1c000040
  dumpobj -refs 7f3a1c000040
  dumpobj --json 7f3a1c000040"""
    options = (
        Option("-nofields", "do not list the fields"),
        Option("-refs", "also list the objects this one references (GC Refs)"),
        Option("-notes", NOTES_HELP),
        Option("--json", "print the object and its field values as JSON", dest="json"),
    )
    positionals = (Positional("address", "the object's address (hex)", required=True),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        address = parse_object_address(args.address)
        data = checked_object(ctx, address)
        if args.json:
            emit_json(ctx.out, object_json(ctx, address, data))
            return
        ctx.out.record(object_lines(ctx, address, data, fields=not args.nofields, notes=args.notes))
        if args.refs and data.object_type != OBJ_FREE:
            ctx.out.lines(gc_ref_lines(ctx, address, data))


# -- dumpvc ---------------------------------------------------------------------------------


def valuetype_lines(ctx: CommandContext, mt: int, address: int | None, *, fields: bool = True,
                    indent: int = 0, notes: bool = False) -> list[str]:
    """SOS's PrintVC: a struct of type ``mt`` whose data starts at ``address``."""
    rt = ctx.runtime
    t = ctx.heap.types.get(mt)
    if t is None:
        raise SosError("Not a managed object")
    out = [f"Name:        {ctx.heap.types.name_of(mt)}", f"MethodTable: {p16(mt)}"]
    prefer, canon = prefers_canonical_mt(rt, t.canonical)
    if prefer:
        if canon and canon != mt:
            out.append(f"Canonical: {p16(canon)}")
    else:
        out.append(f"EEClass:     {p16(t.canonical)}")
    # The DAC's BaseSize, as SOS (a String's lacks the terminator the model's size counts).
    out.append(f"Size:        {size_text(rt.method_table_data(mt).base_size)}")
    out.append(f"File:        {module_file(rt, t.module)}")
    if fields:
        out.append("Fields:")
        fdata = rt.field_counts(mt)
        if fdata is not None and fdata.num_instance_fields + fdata.num_static_fields > 0:
            out.extend(FieldTable(ctx, indent, notes=notes).lines(mt, address, True))
    return out


@register
class DumpVC(Command):
    names = ("dumpvc", "DumpVC")
    summary = "Display the fields of a value type (struct) stored at an address."
    usage = "dumpvc [-notes] <MethodTable> <address>"
    details = """\
A struct has no header, so its type must be given: the MethodTable printed next to the
field (dumpobj's MT column) or an array's "Element Methodtable". Offsets are from the
struct's first byte. -notes adds what a field's value means, as dumpobj -notes. As SOS: a
first argument that is no MethodTable gets "Not a managed object"; at 0 the values are
blank, and a value that cannot be read is an empty cell.

Example:
  dumpvc 00007f3a1c2d6fa8 00007f3a1c0108c0"""
    options = (Option("-notes", NOTES_HELP),)
    positionals = (Positional("mt", "the struct's MethodTable"), Positional("address", "the struct's address"))

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        if args.mt is None or args.address is None:
            raise UsageError("Usage: dumpvc <Method Table> <Value object start addr>")
        try:
            mt, address = parse_address(args.mt), parse_address(args.address)
        except UsageError:
            raise UsageError("Usage: dumpvc <Method Table> <Value object start addr>") from None
        if classifier(ctx.runtime).classify(mt).kind is not AddressKind.METHOD_TABLE:
            raise SosAnswer("Not a managed object")  # SOS's answer for any non-MethodTable
        if mt == ctx.heap.free_mt:
            raise SosError("Free MethodTable")
        # At 0 SOS leaves the instance values blank; where the struct is not readable, each
        # value it cannot read is an empty cell.
        ctx.out.record(valuetype_lines(ctx, mt, address or None, notes=args.notes))


# -- dumparray ------------------------------------------------------------------------------


@register
class DumpArray(Command):
    names = ("dumparray", "da", "DumpArray")
    summary = "Display the elements of an array (references, or addresses of struct elements)."
    usage = "dumparray [-start <index>] [-length <n>] [-details] [-nofields] [-notes] <array address>"
    details = """\
Lists each element as [index] followed by the object it references ("null" if none) or,
for value-type elements (primitives included), the element's own address. Multi-dimensional
arrays print every index ([1][2]). -details shows each element with dumpobj's or dumpvc's
layout (-notes as dumpobj -notes); -start and -length select part of a one-dimensional array.
An object that is no array gets SOS's answer "Not an array, please use dumpobj instead".

Examples:
  dumparray 7f3a1c000040
  dumparray -start 10 -length 5 -details 7f3a1c000040"""
    options = (
        Option("-start", "first index to show (one-dimensional arrays)", parse_count, "index"),
        Option("-length", "how many elements to show (one-dimensional arrays)", parse_count, "n"),
        Option("-details", "show each element's fields"),
        Option("-nofields", "with -details, do not list the elements' fields"),
        Option("-notes", "with -details, " + NOTES_HELP),
    )
    positionals = (Positional("address", "the array's address", required=True),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        address = parse_object_address(args.address)
        data = checked_object(ctx, address)
        # SOS's answers (not failures there) for what it will not list.
        if data.object_type != OBJ_ARRAY:
            raise SosAnswer("Not an array, please use dumpobj instead")
        start = args.start or 0
        if data.rank != 1 and (args.length is not None or start != 0):
            raise SosAnswer("For multi-dimension array, length and start index are supported")
        if start > data.num_components:
            raise SosAnswer("Start index out of range")
        out = ctx.out
        if not args.details and args.nofields:
            out.line("-nofields has no effect unless -details is specified")
        rt = ctx.runtime
        heap = ctx.heap
        elem_mt = data.element_type_handle
        out.field("address", Address(address))
        out.field("name", f"{heap.types.name_of(elem_mt)}[{',' * (data.rank - 1)}]",
                  f"Name:        {heap.types.name_of(elem_mt)}[{',' * (data.rank - 1)}]")
        out.field("mt", Address(data.method_table), f"MethodTable: {p16(data.method_table)}")
        t = heap.types.get(data.method_table)
        if t is not None:
            out.field("eeclass", Address(t.canonical), f"EEClass:     {p16(t.canonical)}")
        out.field("size", data.size, f"Size:        {size_text(data.size)}")
        out.field("rank", data.rank)
        out.field("length", data.num_components, f"Array:       Rank {data.rank}, Number of elements "
                  f"{data.num_components}, Type {element_type_name(data.element_type)}")
        out.field("element_type", element_type_name(data.element_type))
        out.field("element_mt", Address(elem_mt), f"Element Methodtable: {p16(elem_mt)}")
        elements = out.table("elements", Cells((), ()), ("index", "value"))
        value_elements = ET.BOOLEAN <= data.element_type <= ET.R8 or data.element_type in (ET.VALUETYPE, ET.I, ET.U)
        for label, where in _array_elements(rt, address, data, start, args.length):
            if value_elements:
                elements.row(f"{label} {p16(where)}", data=(label, Address(where)))
                if args.details:
                    out.lines(valuetype_lines(ctx, elem_mt, where, fields=not args.nofields, indent=1,
                                              notes=args.notes))
                continue
            raw = rt.target.read_partial(where, 8)
            if len(raw) < 8:
                out.line(f"Failed to read element at {label}")
                continue
            ref = int.from_bytes(raw, "little")
            elements.row(f"{label} {p16(ref)}" if ref else f"{label} null", data=(label, Address(ref) if ref else None))
            if args.details and ref:
                rdata = object_data_or_none(ctx, ref)
                if rdata is not None:
                    out.lines(object_lines(ctx, ref, rdata, fields=not args.nofields, indent=1, notes=args.notes))


def _array_elements(rt: ClrRuntime, address: int, data: ObjectData, start: int,  # type: ignore[no-untyped-def]
                    length: int | None):
    """(index label, element address) in storage order."""
    rank = data.rank
    if rank == 1 and data.array_bounds_ptr == address + 8:  # a vector: no bounds of its own
        bounds, lows = [data.num_components], [0]
    else:
        raw_b = bytes(rt.target.read_partial(data.array_bounds_ptr, 4 * rank))
        raw_l = bytes(rt.target.read_partial(data.array_lower_bounds_ptr, 4 * rank))
        if len(raw_b) < 4 * rank or len(raw_l) < 4 * rank:
            raise SosError("Failed to read bounds info from the array")
        bounds = [int.from_bytes(raw_b[4 * i:4 * i + 4], "little") for i in range(rank)]
        lows = [int.from_bytes(raw_l[4 * i:4 * i + 4], "little", signed=True) for i in range(rank)]
    if rank == 1:
        stop = bounds[0] if length is None else min(bounds[0], start + length)
        for i in range(start, stop):
            yield f"[{i + lows[0]}]", data.array_data_ptr + i * data.component_size
        return
    total = 1
    for b in bounds:
        total *= b
    for flat in range(total):
        idx = []
        rest = flat
        for b in reversed(bounds):
            rest, r = divmod(rest, b)
            idx.append(r)
        idx.reverse()
        label = "".join(f"[{i + lo}]" for i, lo in zip(idx, lows))
        yield label, data.array_data_ptr + flat * data.component_size
