"""Typed, named arguments and locals of a managed frame (what SOS's ``clrstack -i`` shows).

The runtime's stack walker (stacks.walk_stack) gives each argument's and local's location and
raw bytes, in the order of the method's signature and of its IL local slots. What those bytes
mean comes from metadata: the MethodDef's signature types the arguments (``this`` first for
instance methods) and the Param table names them; the method body's header names the
LocalVarSig that types the locals, and the module's portable PDB (LocalScope/LocalVariable)
names the locals in scope at the frame's IL offset. Without a PDB locals are ``local_<slot>``.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import SosError
from .metadata.errors import MetadataError
from .metadata.signatures import ElementType as ET
from .metadata.signatures import SigType
from .sourcelines import source_lines
from .stacks import ClrStackFrame, FrameValue
from .values import ELEMENT_SIZES, decode_primitive

if TYPE_CHECKING:
    from .metadata.reader import MetadataReader
    from .runtime import ClrRuntime

# C# keywords for the primitive element types (as a debugger's locals window names them).
KEYWORDS = {ET.BOOLEAN: "bool", ET.CHAR: "char", ET.I1: "sbyte", ET.U1: "byte", ET.I2: "short",
            ET.U2: "ushort", ET.I4: "int", ET.U4: "uint", ET.I8: "long", ET.U8: "ulong", ET.R4: "float",
            ET.R8: "double", ET.I: "nint", ET.U: "nuint", ET.STRING: "string", ET.OBJECT: "object"}
_REFERENCES = frozenset({ET.STRING, ET.CLASS, ET.OBJECT, ET.SZARRAY, ET.ARRAY})
_MAX_STRING = 1024  # characters of a string value shown
_MAX_FIELDS = 64


@dataclass(frozen=True, slots=True)
class StructField:
    name: str
    type_name: str
    value: "int | float | bool | None"  # primitives; references: the address; None: unreadable/nested


@dataclass(frozen=True, slots=True)
class FrameVariable:
    """One argument or local. ``kind``: primitive, string, reference, struct, pointer or unknown."""

    index: int  # argument position (this = 0) or IL local slot
    name: str
    type_name: str  # "" when metadata cannot tell
    kind: str
    raw: FrameValue
    value: "int | float | bool | str | None" = None  # primitive value, or a string's text
    address: int | None = None  # an object reference's target (0 = null); a struct's location
    fields: tuple[StructField, ...] = ()

    @property
    def has_data(self) -> bool:
        return self.raw.data is not None and not self.raw.read_failed


@dataclass(frozen=True, slots=True)
class FrameVariables:
    arguments: tuple[FrameVariable, ...]
    locals: tuple[FrameVariable, ...]
    local_names_known: bool  # the module's PDB named the locals


def frame_variables(runtime: "ClrRuntime", frame: ClrStackFrame, *, leaf: bool = False) -> FrameVariables:
    """Name and type ``frame``'s arguments and locals (the frame must come from walk_stack with
    arguments/locals asked for). ``leaf``: the frame is the thread's active one (its IP is not a
    return address), which decides the IL offset whose local scopes apply."""
    reader = None
    method = None
    module = 0
    dac = runtime.dac
    mdd = dac.method_desc_data(frame.method_desc) if frame.method_desc else None
    if mdd is not None:
        module = mdd.module_ptr
        reader = runtime.catalog.metadata(module)
        if reader is not None:
            try:
                method = reader.method(mdd.token)
            except MetadataError:
                method = None
    arg_types: list[SigType | None] = []
    arg_names: list[str] = []
    this_type = ""
    if method is not None and reader is not None:
        if method.signature.has_this:
            owner = reader.declaring_type(method.token)
            this_type = _safe(lambda: reader.type_name(owner)) if owner else ""
            arg_types.append(None)
            arg_names.append("this")
        arg_types.extend(method.signature.params)
        arg_names.extend(_safe(lambda: reader.param_names(method.token), []))
    args = tuple(_variable(runtime, reader, module, i, v, arg_names[i] if i < len(arg_names) else "",
                           arg_types[i] if i < len(arg_types) else None, this_type if i == 0 else "")
                 for i, v in enumerate(frame.arguments or ()))
    local_types = _local_types(runtime, reader, module, method.rva if method is not None else 0)
    names, known = _local_names(runtime, frame, mdd.token if mdd is not None else 0, module, leaf)
    local_values = tuple(_variable(runtime, reader, module, i, v, names.get(i, f"local_{i}"),
                                   local_types[i] if i < len(local_types) else None, "")
                         for i, v in enumerate(frame.locals or ()))
    return FrameVariables(args, local_values, known)


def _safe(get, default=""):  # type: ignore[no-untyped-def]
    try:
        return get()
    except (MetadataError, SosError):
        return default


def _local_types(runtime: "ClrRuntime", reader: "MetadataReader | None", module: int, rva: int) -> tuple[SigType, ...]:
    """The LocalVarSig of the method body at ``rva``: a fat IL header's LocalVarSigTok."""
    if reader is None or not rva:
        return ()
    address = runtime.dac.il_address(module, rva)
    if not address:
        return ()
    try:
        header = bytes(runtime.target.read(address, 12))
    except SosError:
        return ()
    if header[0] & 0x3 != 0x3:  # a tiny header: no locals
        return ()
    (token,) = struct.unpack_from("<I", header, 8)
    if token >> 24 != 0x11:
        return ()
    sig = _safe(lambda: reader.stand_alone_sig(token), ())
    return sig if isinstance(sig, tuple) else ()


def _local_names(runtime: "ClrRuntime", frame: ClrStackFrame, token: int, module: int,
                 leaf: bool) -> tuple[dict[int, str], bool]:
    if not token:
        return {}, False
    lines = source_lines(runtime)
    pdb = lines.pdb(module).pdb
    if pdb is None:
        return {}, False
    il = lines.il_offset(frame.ip, return_address=not leaf)
    try:
        return pdb.local_names(token, il), True
    except MetadataError:
        return {}, False


def _type_name(reader: "MetadataReader | None", sig: SigType | None) -> str:
    if sig is None:
        return ""
    keyword = KEYWORDS.get(sig.element_type)
    if keyword is not None:
        return keyword
    if reader is None:
        return ""
    return _safe(lambda: reader.format_sig(sig))


def _variable(runtime: "ClrRuntime", reader: "MetadataReader | None", module: int, index: int, raw: FrameValue,
              name: str, sig: SigType | None, this_type: str) -> FrameVariable:
    name = name or raw.name
    if sig is None and this_type:  # `this` of a class (a struct's `this` is a byref: shown as a pointer)
        return _reference(runtime, index, name, this_type, raw)
    type_name = _type_name(reader, sig)
    et = sig.element_type if sig is not None else None
    data = raw.data if not raw.read_failed else None
    if et is None or data is None:
        return FrameVariable(index, name, type_name, "unknown", raw)
    if et == ET.STRING:
        return _reference(runtime, index, name, type_name, raw, string=True)
    if et in _REFERENCES or (et == ET.GENERICINST and not sig.value_type):
        return _reference(runtime, index, name, type_name, raw)
    if et in (ET.PTR, ET.BYREF, ET.FNPTR):
        return FrameVariable(index, name, type_name, "pointer", raw, address=_pointer(data))
    if et in KEYWORDS:
        size = ELEMENT_SIZES[et]
        if len(data) < size:
            return FrameVariable(index, name, type_name, "unknown", raw)
        return FrameVariable(index, name, type_name, "primitive", raw, value=decode_primitive(et, data[:size]))
    if et == ET.VALUETYPE or (et == ET.GENERICINST and sig.value_type):
        return FrameVariable(index, name, type_name, "struct", raw, address=raw.location,
                             fields=_struct_fields(runtime, module, sig, raw))
    return FrameVariable(index, name, type_name, "unknown", raw)


def _pointer(data: bytes) -> int:
    return int.from_bytes(data[:8].ljust(8, b"\0"), "little")


def _reference(runtime: "ClrRuntime", index: int, name: str, type_name: str, raw: FrameValue,
               string: bool = False) -> FrameVariable:
    data = raw.data if not raw.read_failed else None
    if data is None:
        return FrameVariable(index, name, type_name, "unknown", raw)
    address = _pointer(data)
    if string and address:
        text = runtime.dac.object_string(address)
        if text is not None:
            return FrameVariable(index, name, type_name, "string", raw, value=text[:_MAX_STRING], address=address)
    return FrameVariable(index, name, type_name, "reference", raw, address=address)


def _struct_fields(runtime: "ClrRuntime", module: int, sig: SigType, raw: FrameValue) -> tuple[StructField, ...]:
    """The instance fields of a struct living at the value's stack location."""
    if raw.location is None or sig.token is None:
        return ()
    catalog = runtime.catalog
    try:
        table = catalog.type_def_map(module) if sig.token >> 24 == 0x02 else catalog.type_ref_map(module)
    except SosError:
        return ()  # the module's maps are not in the dump (a triage dump)
    mt = table.get(sig.token)
    if not mt:
        return ()
    out = []
    for f in runtime.fields.instance_fields(mt)[:_MAX_FIELDS]:
        at = f.address_in(raw.location, value_class=True)
        tname = KEYWORDS.get(f.element_type) or ""
        if f.is_struct:
            out.append(StructField(f.name, tname, None))
            continue
        try:
            value = runtime.fields.read(f, at)
        except SosError:
            value = None
        out.append(StructField(f.name, tname, value))
    return tuple(out)


def icordebug_method(runtime: "ClrRuntime", method_desc: int) -> tuple[str, str]:
    """(``[DEFAULT] Void Ns.Type.Method(I4)``, the module's path): a managed frame's method as an
    ICorDebug stack walk names it (SOS's clrstack -i); ("", "") when metadata cannot tell."""
    from .metadata.ilasm import ilasm_method
    from .stacks import module_path

    mdd = runtime.dac.method_desc_data(method_desc) if method_desc else None
    if mdd is None:
        return "", ""
    reader = runtime.catalog.metadata(mdd.module_ptr)
    text = _safe(lambda: ilasm_method(reader, mdd.token)) if reader is not None else ""
    return text, module_path(runtime, mdd.module_ptr)
