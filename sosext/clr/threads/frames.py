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
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ...errors import SosError
from ...formats.metadata.errors import MetadataError
from ...formats.metadata.signatures import ElementType as ET
from ...formats.metadata.signatures import SigType
from ..addresses import classifier
from ..typesystem.debuggernames import debugger_type_name, generic_text
from ..typesystem.enums import enum_info
from ..typesystem.fields import OBJECT_HEADER
from ..heap.objects import method_table_of
from ..code.sourcelines import source_lines
from .framegenerics import NONE, FrameGenerics, frame_generics
from .funclets import code_and_funclet
from .stacks import ClrStackFrame, FrameValue
from ..heap.values import ELEMENT_SIZES, decode_primitive

if TYPE_CHECKING:
    from .framegenerics import GenericArgument
    from ..typesystem.fields import ClrField
    from ...formats.metadata.reader import MetadataReader
    from ..runtime import ClrRuntime

# The names SOS's clrstack -i gives the primitive element types (its GetTypeOfValue).
KEYWORDS = {ET.BOOLEAN: "bool", ET.CHAR: "char", ET.I1: "signed byte", ET.U1: "byte", ET.I2: "short",
            ET.U2: "unsigned short", ET.I4: "int", ET.U4: "unsigned int", ET.I8: "long", ET.U8: "unsigned long",
            ET.R4: "float", ET.R8: "double", ET.I: "IntPtr", ET.U: "UIntPtr", ET.STRING: "string",
            ET.OBJECT: "object"}
_REFERENCES = frozenset({ET.STRING, ET.CLASS, ET.OBJECT, ET.SZARRAY, ET.ARRAY})
_MAX_STRING = 1024  # characters of a string value shown
_MAX_FIELDS = 64


@dataclass(frozen=True, slots=True)
class FieldValue:
    """A field of an expanded value. ``kind``: primitive, string, reference, struct, pointer or
    unknown (the field could not be read)."""

    name: str
    type_name: str
    kind: str
    value: "int | float | bool | str | None" = None  # a primitive's value, a string's text
    address: int | None = None  # a reference's target (0: null); an embedded struct's location
    mt: int = 0  # a struct's MethodTable (0: not loaded); an object's is read when it is expanded

    @property
    def has_data(self) -> bool:
        return self.kind != "unknown"


@dataclass(frozen=True, slots=True)
class FieldExpansion:
    """What SOS lists under an expanded value: the fields its class declares (not inherited
    ones) and, unless it derives straight from System.Object or System.ValueType, its base
    class, whose own fields expand in turn as ``<name>.[basetype]``."""

    base_type: str  # "" when SOS shows no [basetype] line
    base_mt: int
    fields: tuple[FieldValue, ...]
    address: int  # where the value is (its base class's fields are read there too)
    value_class: bool  # a struct's data, not an object


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
    mt: int = 0  # a struct's MethodTable (0: not loaded); an object's is read when it is expanded
    # With the module's PDB, SOS asks for a local by its name: a slot the PDB does not name, or a
    # named one without a value, fails there (E_FAIL) instead of in the debugger API.
    by_name_failed: bool = False

    @property
    def has_data(self) -> bool:
        return self.raw.data is not None and not self.raw.read_failed and not self.by_name_failed


@dataclass(frozen=True, slots=True)
class FrameVariables:
    arguments: tuple[FrameVariable, ...]
    locals: tuple[FrameVariable, ...]
    local_names_known: bool  # the module's PDB named the locals


def frame_variables(runtime: "ClrRuntime", frame: ClrStackFrame, *, leaf: bool = False) -> FrameVariables:
    """Name and type ``frame``'s arguments and locals (the frame must come from walk_stack with
    arguments/locals asked for). ``leaf``: the frame is the thread's active one (its IP is not a
    return address); locals are named by slot across the method's scopes, as SOS does."""
    reader = None
    method = None
    module = 0
    dac = runtime.reader
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
    has_this = method is not None and method.signature.has_this
    gen = _safe(lambda: frame_generics(runtime, mdd, frame, has_this=has_this), NONE)
    if method is not None and reader is not None:
        if method.signature.has_this:
            owner = reader.declaring_type(method.token)
            this_type = _safe(lambda: reader.type_name(owner)) if owner else ""
            arg_types.append(None)
            arg_names.append("this")
        arg_types.extend(method.signature.params)
        arg_names.extend(_safe(lambda: reader.param_names(method.token), []))
    args = tuple(_variable(runtime, reader, module, i, v, arg_names[i] if i < len(arg_names) else "",
                           arg_types[i] if i < len(arg_types) else None, this_type if i == 0 else "", gen)
                 for i, v in enumerate(frame.arguments or ()))
    local_types = _local_types(runtime, reader, module, method.rva if method is not None else 0)
    names, known = _local_names(runtime, mdd.token if mdd is not None else 0, module)
    local_values = tuple(_variable(runtime, reader, module, i, v, names.get(i, f"local_{i}"),
                                   local_types[i] if i < len(local_types) else None, "", gen)
                         for i, v in enumerate(frame.locals or ()))
    if known:
        local_values = tuple(lv if lv.index in names and lv.has_data else replace(lv, by_name_failed=True)
                             for lv in local_values)
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
    address = runtime.reader.il_address(module, rva)
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


def _local_names(runtime: "ClrRuntime", token: int, module: int) -> tuple[dict[int, str], bool]:
    """(slot -> name, whether the module's PDB was found), named as SOS's symbol service names
    them: by slot across the method's scopes, not by the scopes at the frame's IL offset."""
    if not token:
        return {}, False
    pdb = source_lines(runtime).pdb(module).pdb
    if pdb is None:
        return {}, False
    try:
        return pdb.local_names_by_slot(token), True
    except MetadataError:
        return {}, False


def _type_name(reader: "MetadataReader | None", sig: SigType | None, gen: FrameGenerics = NONE) -> str:
    """A declared type as SOS's GetTypeOfValue names it: keywords for primitives, string and
    object; an array, byref or pointer as its element's name with [] ([,] …), & or *; a class
    by its metadata name, a generic one with its arguments in <…>; a generic parameter (!0, !!0)
    by the argument the frame's instantiation gives it."""
    if sig is None:
        return ""
    et = sig.element_type
    arg = gen.argument(sig)
    if arg is not None:
        return arg.name
    keyword = KEYWORDS.get(et)
    if keyword is not None:
        return keyword
    if reader is None:
        return ""
    if et in (ET.SZARRAY, ET.ARRAY, ET.BYREF, ET.PTR) and sig.element is not None:
        inner = _type_name(reader, sig.element, gen) or "<unknown>"
        if et == ET.SZARRAY:
            return inner + "[]"
        if et == ET.ARRAY:
            return inner + "[" + "," * max(sig.rank - 1, 0) + "]"
        return inner + ("&" if et == ET.BYREF else "*")
    if et in (ET.CLASS, ET.VALUETYPE) and sig.token:
        return _safe(lambda: reader.type_name(sig.token))
    if et == ET.GENERICINST and sig.token:
        return generic_text(_safe(lambda: reader.type_name(sig.token)), [_type_name(reader, a, gen) for a in sig.args])
    return _safe(lambda: reader.format_sig(sig))


def _variable(runtime: "ClrRuntime", reader: "MetadataReader | None", module: int, index: int, raw: FrameValue,
              name: str, sig: SigType | None, this_type: str, gen: FrameGenerics = NONE) -> FrameVariable:
    name = name or raw.name
    data = raw.data if not raw.read_failed else None
    if sig is None and this_type and gen.this_is_struct and gen.this_type:
        # A struct's `this` is a byref to the struct: the debugger API types it "<exact type>&"
        # and SOS prints where the struct is.
        if data is None:
            return FrameVariable(index, name, gen.this_type + "&", "unknown", raw)
        return FrameVariable(index, name, gen.this_type + "&", "struct", raw, address=_pointer(data))
    if sig is None and this_type:  # `this` of a class
        return _exact(runtime, _reference(runtime, index, name, this_type, raw))
    arg = gen.argument(sig)
    if arg is not None:
        return _generic_variable(runtime, reader, module, index, raw, name, arg, gen)
    type_name = _type_name(reader, sig, gen)
    et = sig.element_type if sig is not None else None
    if et is None or data is None:
        return FrameVariable(index, name, type_name, "unknown", raw)
    if et == ET.STRING:
        return _reference(runtime, index, name, type_name, raw, string=True)
    if et in _REFERENCES or (et == ET.GENERICINST and not sig.value_type):
        return _exact(runtime, _reference(runtime, index, name, type_name, raw))
    if et == ET.BYREF and sig.element is not None:
        return _by_reference(runtime, module, index, name, type_name, raw, sig.element, _pointer(data), gen)
    if et in (ET.PTR, ET.BYREF, ET.FNPTR):
        return FrameVariable(index, name, type_name, "pointer", raw, address=_pointer(data))
    if et in KEYWORDS:
        size = ELEMENT_SIZES[et]
        if len(data) < size:
            return FrameVariable(index, name, type_name, "unknown", raw)
        return FrameVariable(index, name, type_name, "primitive", raw, value=decode_primitive(et, data[:size]))
    if et == ET.VALUETYPE or (et == ET.GENERICINST and sig.value_type):
        mt = _struct_method_table(runtime, module, sig)
        enum = _enum_text(runtime, mt, data) if et == ET.VALUETYPE else None
        if enum is not None:
            return FrameVariable(index, name, type_name, "enum", raw, value=enum)
        return FrameVariable(index, name, type_name, "struct", raw, address=raw.location,
                             mt=mt if raw.location is not None else 0)
    return FrameVariable(index, name, type_name, "unknown", raw)


def _generic_variable(runtime: "ClrRuntime", reader: "MetadataReader | None", module: int, index: int,
                      raw: FrameValue, name: str, arg: "GenericArgument", gen: FrameGenerics) -> FrameVariable:
    """A variable typed !n or !!n, read as the type the frame's instantiation gives it."""
    keyword = arg.as_sig()
    if keyword is not None:
        return _variable(runtime, reader, module, index, raw, name, keyword, "", gen)
    data = raw.data if not raw.read_failed else None
    if data is None or arg.value_type is None:
        return FrameVariable(index, name, arg.name, "unknown", raw)
    if not arg.value_type:
        return _exact(runtime, _reference(runtime, index, name, arg.name, raw))
    enum = _enum_text(runtime, arg.mt, data) if arg.mt else None
    if enum is not None:
        return FrameVariable(index, name, arg.name, "enum", raw, value=enum)
    return FrameVariable(index, name, arg.name, "struct", raw, address=raw.location,
                         mt=arg.mt if raw.location is not None else 0)


def _by_reference(runtime: "ClrRuntime", module: int, index: int, name: str, type_name: str, raw: FrameValue,
                  element: SigType, target: int, gen: FrameGenerics = NONE) -> FrameVariable:
    """A byref argument or local as SOS's PrintValue shows it: the debugger API dereferences it
    (and a reference it then holds, once more) and prints what it reaches: an object by its
    address. A null reference reached that way is no value PrintValue can print: SOS then
    prints an error (E_NOINTERFACE)."""
    arg = gen.argument(element)
    if arg is not None:
        keyword = arg.as_sig()
        if keyword is not None:
            element = keyword
        elif arg.value_type:
            enum = _enum_text(runtime, arg.mt, bytes(runtime.target.read_partial(target, 8))) \
                if arg.mt and target else None
            if enum is not None:
                return FrameVariable(index, name, type_name, "enum", raw, value=enum)
            return FrameVariable(index, name, type_name, "struct", raw, address=target, mt=arg.mt)
        elif arg.value_type is None:
            return FrameVariable(index, name, type_name, "unknown", raw)
        else:
            element = SigType(ET.CLASS)
    et = element.element_type
    if not target:
        return FrameVariable(index, name, type_name, "reference", raw, address=0)
    try:
        if et in KEYWORDS and et not in (ET.STRING, ET.OBJECT):
            size = ELEMENT_SIZES[et]
            value = decode_primitive(et, bytes(runtime.target.read(target, size)))
            return FrameVariable(index, name, type_name, "primitive", raw, value=value)
        if et == ET.VALUETYPE or (et == ET.GENERICINST and element.value_type):
            mt = _struct_method_table(runtime, module, element)
            enum = None
            if mt and et == ET.VALUETYPE:
                enum = _enum_text(runtime, mt, bytes(runtime.target.read_partial(target, 8)))
            if enum is not None:
                return FrameVariable(index, name, type_name, "enum", raw, value=enum)
            return FrameVariable(index, name, type_name, "struct", raw, address=target, mt=mt)
        if et in (ET.PTR, ET.FNPTR, ET.BYREF):
            return FrameVariable(index, name, type_name, "pointer", raw, address=target)
        inner = runtime.target.read_pointer(target)
    except SosError:
        return FrameVariable(index, name, type_name, "print_error", raw, value=CORDBG_E_READVIRTUAL_FAILURE)
    if inner:
        kind, text = _object(runtime, inner, True)
        if kind == "string":
            return FrameVariable(index, name, type_name, "string", raw, value=text, address=inner)
        count = _array_length(runtime, inner) if et == ET.SZARRAY else None
        if count is not None:
            return FrameVariable(index, name, type_name, "array", raw, value=count, address=inner)
        return FrameVariable(index, name, type_name, "reference", raw, address=inner)
    return FrameVariable(index, name, type_name, "print_error", raw, value=E_NOINTERFACE)


# HRESULTs SOS prints for a value it reached but could not print.
E_NOINTERFACE = 0x80004002
CORDBG_E_READVIRTUAL_FAILURE = 0x80131C49
CORDBG_E_BAD_REFERENCE_VALUE = 0x80131305
_MASK64 = (1 << 64) - 1


def _enum_text(runtime: "ClrRuntime", mt: int, data: bytes | None) -> str | None:
    """SOS's PrintEnumValue of an enum value (None when ``mt`` is no enum): " = A | B", the
    members, in declaration order, whose value equals what is left or whose bits are all set in it
    (each clears its bits); "" when none does."""
    info = enum_info(runtime, mt) if mt and data is not None else None
    if info is None:
        return None
    underlying = next((f.element_type for f in runtime.fields.own_fields(mt) or [] if f.is_instance), ET.I4)
    width, signed = _SOS_ENUM_READS.get(underlying, (0, False))
    size = ELEMENT_SIZES.get(underlying, 4)
    rest = int.from_bytes(data[:size], "little")
    names = []
    for constant, member in info.members:
        value = 0
        if width:
            value = constant & ((1 << width) - 1)
            if signed and value >> (width - 1):
                value -= 1 << width
            value &= _MASK64
        if value == rest or (value and value & rest == value):
            rest &= ~value
            names.append(member)
    return (" = " + " | ".join(names)) if names else ""


# How SOS reads an enum's constants by its underlying type: (bits, signed). Its (U)LONG is 32
# bits on Linux, so a long enum's constants are cut to 32 bits; native ints and floats read 0.
_SOS_ENUM_READS = {ET.CHAR: (8, True), ET.I1: (8, True), ET.U1: (8, False), ET.I2: (16, True), ET.U2: (16, False),
                   ET.I4: (32, True), ET.U4: (32, False), ET.I8: (32, True), ET.U8: (32, False), ET.I: (32, True)}


def _pointer(data: bytes) -> int:
    return int.from_bytes(data[:8].ljust(8, b"\0"), "little")


def _reference(runtime: "ClrRuntime", index: int, name: str, type_name: str, raw: FrameValue,
               string: bool = False) -> FrameVariable:
    data = raw.data if not raw.read_failed else None
    if data is None:
        return FrameVariable(index, name, type_name, "unknown", raw)
    if _bad_reference(runtime, _pointer(data)):
        return FrameVariable(index, name, type_name, "print_error", raw, value=CORDBG_E_BAD_REFERENCE_VALUE)
    kind, value = _object(runtime, _pointer(data), string)
    if kind == "reference" and type_name.endswith("[]"):
        # SOS prints a one-dimensional array by its length: its element count after the header.
        count = _array_length(runtime, _pointer(data))
        if count is not None:
            return FrameVariable(index, name, type_name, "array", raw, value=count, address=_pointer(data))
    return FrameVariable(index, name, type_name, kind, raw, value=value, address=_pointer(data))


def _bad_reference(runtime: "ClrRuntime", address: int) -> bool:
    """The debugger API's test of a reference (DacDbi's CheckRef): one whose object has no
    readable MethodTable cannot be dereferenced, and SOS prints CORDBG_E_BAD_REFERENCE_VALUE
    for it (a stale register of an optimized frame: a webapi core showed `local_0` = 0x3)."""
    if not address:
        return False
    mt = method_table_of(runtime.target, address)
    if mt is None:
        return True
    try:
        return classifier(runtime).method_table_or_none(mt) is None
    except SosError:
        return False  # nothing to check it against (a triage dump)


def _array_length(runtime: "ClrRuntime", address: int) -> int | None:
    try:
        return int.from_bytes(bytes(runtime.target.read(address + runtime.target.pointer_size, 4)), "little")
    except SosError:
        return None


def _exact(runtime: "ClrRuntime", v: FrameVariable) -> FrameVariable:
    """A reference typed, as the debugger API types it, by the object it points to (SOS prints
    "System.RuntimeType t" for a `Type t`, a Task subclass for a `Task this`), the declared type
    only when it is null; a string reached through an `object` is printed as a string."""
    if v.kind not in ("reference", "array") or not v.address:
        return v
    try:
        checker = classifier(runtime)
        if checker.object_or_none(v.address) is None:
            return v
        mt = checker.method_table_or_none(method_table_of(runtime.target, v.address) or 0)
    except SosError:
        return v  # no heap to check it against (a triage dump)
    data = runtime.method_table_data(mt) if mt else None
    if data is None or mt == runtime.types.string_mt:
        if data is not None and v.kind == "reference":
            kind, text = _object(runtime, v.address, True)
            return replace(v, type_name="string", kind=kind, value=text)
        return v
    name = runtime.types.name_of(mt)
    if not name or name.startswith("<") or "System.__Canon" in name:
        return v
    if data.component_size and name.endswith("]") and v.kind == "reference":
        count = _array_length(runtime, v.address) if name.endswith("[]") else None
        if count is not None:
            return replace(v, type_name=debugger_type_name(name), kind="array", value=count)
    return replace(v, type_name=debugger_type_name(name))


def _object_type(runtime: "ClrRuntime", address: int) -> tuple[str, int | None] | None:
    """(the debugger API's name of the heap object at ``address``, its length when it is a
    one-dimensional array); None for a string, or when it cannot be checked."""
    try:
        checker = classifier(runtime)
        if checker.object_or_none(address) is None:
            return None
        mt = checker.method_table_or_none(method_table_of(runtime.target, address) or 0)
    except SosError:
        return None
    data = runtime.method_table_data(mt) if mt else None
    if data is None or mt == runtime.types.string_mt:
        return None
    name = runtime.types.name_of(mt)
    if not name or name.startswith("<") or "System.__Canon" in name:
        return None
    length = _array_length(runtime, address) if data.component_size and name.endswith("[]") else None
    return debugger_type_name(name), length


def _object(runtime: "ClrRuntime", address: int, string: bool) -> tuple[str, "str | None"]:
    """(kind, a string's text) of a reference to ``address``."""
    if string and address:
        text = runtime.reader.object_string(address)
        if text is not None:
            return "string", text[:_MAX_STRING]
    return "reference", None


def _expandable_method_table(runtime: "ClrRuntime", address: int) -> int:
    """The MethodTable of the object at ``address`` when SOS would list its fields: a valid heap
    object that is neither a string nor an array (0 otherwise)."""
    try:
        checker = classifier(runtime)
        if not address or checker.object_or_none(address) is None:
            return 0
        mt = checker.method_table_or_none(method_table_of(runtime.target, address) or 0)
    except SosError:
        return 0  # no heap to check it against (a triage dump)
    data = runtime.method_table_data(mt) if mt else None
    return mt if data is not None and not data.component_size else 0


def _struct_method_table(runtime: "ClrRuntime", module: int, sig: SigType) -> int:
    """The loaded MethodTable of a struct type named by a signature (0: not loaded, or the
    module's maps are not in the dump, as in a triage dump)."""
    if sig.token is None:
        return 0
    catalog = runtime.catalog
    try:
        table = catalog.type_def_map(module) if sig.token >> 24 == 0x02 else catalog.type_ref_map(module)
    except SosError:
        return 0
    return table.get(sig.token) or 0


_PLAIN_BASES = ("System.Object", "System.ValueType")


def expand(runtime: "ClrRuntime", value: "FrameVariable | FieldValue") -> FieldExpansion | None:
    """The fields under a variable or field SOS's clrstack -i expands: a struct's, or those of
    the object a reference points to; None for anything else (strings, arrays, null, primitives)."""
    if value.kind == "struct" and value.mt and value.address is not None:
        return expand_fields(runtime, value.mt, value.address, True)
    if value.kind == "reference" and value.address:
        mt = _expandable_method_table(runtime, value.address)
        return expand_fields(runtime, mt, value.address, False) if mt else None
    return None


def expand_fields(runtime: "ClrRuntime", mt: int, address: int, value_class: bool) -> FieldExpansion | None:
    """The fields of the value at ``address`` (an object, or with ``value_class`` a struct's first
    byte) that type ``mt`` declares, as SOS's clrstack -i lists them for a variable it expands;
    None for an enum (SOS lists nothing) or a type the runtime cannot describe."""
    data = runtime.method_table_data(mt) if mt else None
    if data is None:
        return None
    types = runtime.types
    base = data.parent_method_table
    base_name = types.name_of(base) if base else ""
    if base_name == "System.Enum":
        return None
    own = runtime.fields.own_fields(mt)
    if own is None:
        return None
    # Declaration (FieldDef) order, statics among them, as SOS enumerates the metadata; a
    # thread's own statics (thread-static, context-static) are left out.
    shown = sorted((f for f in own if not (f.is_thread_static or f.is_context_static)), key=lambda f: f.token)
    values = tuple(_field_value(runtime, f, _field_location(runtime, f, address, value_class))
                   for f in shown[:_MAX_FIELDS])
    shown_base = "" if base_name in _PLAIN_BASES else debugger_type_name(base_name)
    return FieldExpansion(shown_base, base if shown_base else 0, values, address, value_class)


def _field_location(runtime: "ClrRuntime", f: "ClrField", address: int, value_class: bool) -> int | None:
    """Where a field's value is: in the value at ``address`` for an instance field, in its
    class's statics for a static one (a struct static's storage holds its box); None: unknown."""
    if f.is_instance:
        return f.address_in(address, value_class)
    at = runtime.fields.static_address(f.owner_mt, f)
    if not at:
        return None  # the runtime does not say, or the statics are not allocated yet
    if not f.is_struct:
        return at
    try:
        box = runtime.target.read_pointer(at)
    except SosError:
        return None
    return box + OBJECT_HEADER if box else None


def _field_value(runtime: "ClrRuntime", f: "ClrField", at: int | None) -> FieldValue:
    type_name = _field_type_name(runtime, f)
    if at is None:
        return FieldValue(f.name, type_name, "unknown")
    if f.is_struct:
        mt = f.type_mt if runtime.method_table_data(f.type_mt) is not None else 0
        return FieldValue(f.name, type_name, "struct", address=at, mt=mt)
    try:
        value = runtime.fields.read(f, at)
    except (SosError, ValueError):
        return FieldValue(f.name, type_name, "unknown")
    if f.is_reference:
        kind, text = _object(runtime, int(value), f.sig_type == ET.STRING)
        if kind == "reference" and value:
            # As a variable, a field's object is typed by itself (a field of an interface type
            # holding a Host is "Microsoft.Extensions.Hosting.Internal.Host"); an array by its length.
            exact = _object_type(runtime, int(value))
            if exact is not None and exact[1] is not None:
                return FieldValue(f.name, exact[0], "array", value=exact[1], address=int(value))
            if exact is not None:
                type_name = exact[0]
        return FieldValue(f.name, type_name, kind, value=text, address=int(value))
    if f.element_type in (ET.PTR, ET.FNPTR):
        return FieldValue(f.name, type_name, "pointer", address=int(value))
    # An enum field: the runtime types it by its underlying integer, and names the enum's MethodTable.
    if f.type_mt and f.element_type in _SOS_ENUM_READS and isinstance(value, int) and not isinstance(value, bool):
        enum = _enum_text(runtime, f.type_mt, (value & _MASK64).to_bytes(8, "little"))
        if enum is not None:
            return FieldValue(f.name, debugger_type_name(runtime.types.name_of(f.type_mt)), "enum", value=enum)
    return FieldValue(f.name, type_name, "primitive", value=value)


def _field_type_name(runtime: "ClrRuntime", f: "ClrField") -> str:
    """A field's type as SOS names it: a keyword for primitives, else the loaded type's name,
    else its signature's (metadata), else "class"/"struct" (SOS's fallbacks)."""
    keyword = KEYWORDS.get(f.sig_type) or KEYWORDS.get(f.element_type)
    if keyword is not None:
        return keyword
    if f.type_mt and f.element_type in (ET.CLASS, ET.VALUETYPE):
        return debugger_type_name(runtime.types.name_of(f.type_mt))
    reader = runtime.catalog.metadata(f.module)
    sig = _safe(lambda: reader.field(f.token).signature, None) if reader is not None else None
    name = _type_name(reader, sig) if isinstance(sig, SigType) else ""
    return name or ("struct" if f.element_type == ET.VALUETYPE else "class")


def icordebug_method(runtime: "ClrRuntime", method_desc: int) -> tuple[str, str]:
    """(``[DEFAULT] Void Ns.Type.Method(I4)``, the module's path): a managed frame's method as an
    ICorDebug stack walk names it (SOS's clrstack -i); ("", "") when metadata cannot tell."""
    from ...formats.metadata.ilasm import ilasm_method
    from .stacks import module_path

    mdd = runtime.reader.method_desc_data(method_desc) if method_desc else None
    if mdd is None:
        return "", ""
    reader = runtime.catalog.metadata(mdd.module_ptr)
    text = _safe(lambda: ilasm_method(reader, mdd.token)) if reader is not None else ""
    return text, module_path(runtime, mdd.module_ptr)


def has_il(runtime: "ClrRuntime", method_desc: int) -> bool:
    """Whether the method has an IL body (a MethodDef RVA). The debugger API makes no IL frame for
    one without (a P/Invoke the runtime runs through its stub) nor for a dynamic method (an
    expression tree's lambda_method1: no MethodDef row, its token is the nil 0x06000000): SOS then
    prints the frame's SP and IP alone. True when metadata cannot tell."""
    mdd = runtime.reader.method_desc_data(method_desc) if method_desc else None
    if mdd is not None and mdd.token == 0x06000000:
        return False
    reader = runtime.catalog.metadata(mdd.module_ptr) if mdd is not None else None
    if reader is None or mdd is None or mdd.token >> 24 != 0x06:
        return True
    try:
        return bool(reader.method(mdd.token).rva)
    except MetadataError:
        return True


def inspection_frame(runtime: "ClrRuntime", frames: "tuple[ClrStackFrame, ...]", index: int) -> int:
    """The frame whose variables the debugger API shows for ``frames[index]``: itself, but for a
    funclet (a catch, finally or filter handler the JIT compiled apart) the frame of its parent
    method body, the next one down whose code is the funclet's and that is no funclet.
    ICorDebug looks a funclet's variables up at its parent's IP (CordbNativeFrame::
    GetInspectionIP), where the handler's own IP may find them nowhere."""
    frame = frames[index]
    if not frame.is_managed:
        return index
    here = code_and_funclet(runtime, frame.ip)
    if here is None or not here[1]:
        return index
    for j in range(index + 1, len(frames)):
        f = frames[j]
        if f.is_managed and f.method_desc == frame.method_desc and code_and_funclet(runtime, f.ip) == (here[0], False):
            return j
    return index


def icordebug_finds(ranges: "list", number: int, offset: int) -> bool:
    """Whether the debugger API finds IL variable ``number`` live at native ``offset``
    (FindNativeInfoInILVariableArray): a range holding it with its end excluded, or else the
    variable's last-starting range when that ends exactly there (a return address). The DAC
    includes every range's end, so it can give a value the debugger API does not."""
    last = None
    for v in ranges:
        if v.number != number:
            continue
        if last is None or last.start < v.start:
            last = v
        if v.start <= offset < v.end:
            return True
    return last is not None and last.end == offset


def as_icordebug_finds(runtime: "ClrRuntime", frame: ClrStackFrame, values: FrameVariables) -> FrameVariables:
    """``values`` with each one the debugger API would not find at the frame's IP (see
    icordebug_finds) made unavailable, as SOS's clrstack -i prints it. Unchanged where the
    variable ranges cannot be read (a runtime without a descriptor: .NET 8)."""
    side = runtime.contracts_beside()
    found = side.variable_ranges(frame.ip, len(values.arguments) + len(values.locals)) \
        if side is not None and frame.ip else None
    if not found or not found[1]:
        return values
    start, ranges = found
    offset = frame.ip - start

    def check(v: FrameVariable, number: int) -> FrameVariable:
        if not v.has_data or icordebug_finds(ranges, number, offset):
            return v
        return FrameVariable(v.index, v.name, v.type_name, "unknown", FrameValue(v.raw.name, None, False, None))
    n = len(values.arguments)
    return replace(values, arguments=tuple(check(v, i) for i, v in enumerate(values.arguments)),
                   locals=tuple(check(v, n + i) for i, v in enumerate(values.locals)))
