"""Pure-Python ECMA-335 metadata reader.

sosext reads a module's metadata blob out of the target (the DAC reports where it is) or
out of a PE file, and asks it for type, field and method names and signatures::

    md = MetadataReader(blob)                 # blob starts with "BSJB"
    md = MetadataReader.from_pe(dll_bytes)    # or find it inside a PE image
    md.type_name(0x02000123)                  # 'System.Collections.Generic.List`1'
    md.find_type("System.Collections.Generic.Dictionary`2+Entry")
    [f.name for f in md.fields_of(token)]

Anything malformed raises MetadataError (a SosError) with a one-line message.
"""
from .errors import MetadataError
from .pe import metadata_from_pe
from .reader import MetadataReader
from .records import (
    AssemblyDef,
    AssemblyRef,
    ExportedType,
    Field,
    MemberRef,
    MethodDef,
    MethodSpec,
    ModuleDef,
    TypeDef,
    TypeRef,
    TypeSpec,
)
from .signatures import (
    FULL_PRIMITIVE_NAMES,
    MAX_SIG_DEPTH,
    SHORT_PRIMITIVE_NAMES,
    CallingConvention,
    CustomModifier,
    ElementType,
    MethodSig,
    SigType,
    angle_brackets,
    decode_field_sig,
    decode_local_sig,
    decode_member_sig,
    decode_method_sig,
    decode_method_spec_sig,
    decode_type_sig,
    format_type_sig,
)
from .tables import CodedIndex, TableIndex

__all__ = [
    "AssemblyDef", "AssemblyRef", "CallingConvention", "CodedIndex", "CustomModifier",
    "ElementType", "ExportedType", "FULL_PRIMITIVE_NAMES", "Field", "MAX_SIG_DEPTH",
    "MemberRef", "MetadataError", "MetadataReader", "MethodDef", "MethodSig", "MethodSpec",
    "ModuleDef", "SHORT_PRIMITIVE_NAMES", "SigType", "TableIndex", "TypeDef", "TypeRef",
    "TypeSpec", "angle_brackets", "decode_field_sig", "decode_local_sig",
    "decode_member_sig", "decode_method_sig", "decode_method_spec_sig", "decode_type_sig",
    "format_type_sig", "metadata_from_pe",
]  # fmt: skip
