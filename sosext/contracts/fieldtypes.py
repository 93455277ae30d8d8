"""The type of a field as the DAC's ``GetFieldDescData`` reports it.

The DAC decodes the field's signature from metadata: ``sigType`` is the FieldDesc's element
type, replaced by the signature's first element type when that names no token and no loaded
type; ``TokenOfType`` is the CLASS/VALUETYPE token (else mdTypeDefNil); ``MTOfType`` is
the field type's MethodTable if it is already loaded (``FieldDesc::LookupFieldTypeHandle``
with DontLoadTypes): a primitive's, String's or Object's from CoreLib, a TypeDef's or TypeRef's
from the module's lookup maps. Types the runtime would find only through its loaded-type
hash tables (generic instantiations, arrays) are reported with no MethodTable here.
"""
from __future__ import annotations

from ..formats.metadata import MetadataError, SigType, TableIndex
from ..errors import SosError
from .ecmametadata import EcmaMetadata
from .loader import Loader
from .runtimetypesystem import RuntimeTypeSystem

MD_TYPEDEF_NIL = 0x02000000
ELEMENT_TYPE_CMOD_REQD, ELEMENT_TYPE_CMOD_OPT = 0x1F, 0x20
ELEMENT_TYPE_STRING, ELEMENT_TYPE_OBJECT = 0x0E, 0x1C
ELEMENT_TYPE_CLASS, ELEMENT_TYPE_VALUETYPE = 0x12, 0x11
ELEMENT_TYPE_PTR, ELEMENT_TYPE_BYREF, ELEMENT_TYPE_VAR = 0x0F, 0x10, 0x13
ELEMENT_TYPE_ARRAY, ELEMENT_TYPE_GENERICINST, ELEMENT_TYPE_FNPTR, ELEMENT_TYPE_SZARRAY = 0x14, 0x15, 0x1B, 0x1D
ELEMENT_TYPE_VOID, ELEMENT_TYPE_I, ELEMENT_TYPE_U = 0x01, 0x18, 0x19
AUX_IS_NOT_FULLY_LOADED = 0x0040  # MethodTableAuxiliaryData flag (methodtable.h)
# CorElementType -> the CoreLib type whose MethodTable stands for it.
PRIMITIVES = {
    0x01: "System.Void", 0x02: "System.Boolean", 0x03: "System.Char", 0x04: "System.SByte", 0x05: "System.Byte",
    0x06: "System.Int16", 0x07: "System.UInt16", 0x08: "System.Int32", 0x09: "System.UInt32",
    0x0A: "System.Int64", 0x0B: "System.UInt64", 0x0C: "System.Single", 0x0D: "System.Double",
    0x18: "System.IntPtr", 0x19: "System.UIntPtr",
}


def _compressed(blob: bytes, pos: int) -> tuple[int, int]:
    """An ECMA-335 compressed unsigned integer at ``pos``: (value, next position)."""
    b = blob[pos]
    if b & 0x80 == 0:
        return b, pos + 1
    if b & 0xC0 == 0x80:
        return ((b & 0x3F) << 8) | blob[pos + 1], pos + 2
    return ((b & 0x1F) << 24) | (blob[pos + 1] << 16) | (blob[pos + 2] << 8) | blob[pos + 3], pos + 4


def _type_def_or_ref(coded: int) -> int:
    table = (0x02000000, 0x01000000, 0x1B000000)[coded & 3] if coded & 3 < 3 else 0
    return table | (coded >> 2)


class FieldTypes:
    def __init__(self, rts: RuntimeTypeSystem, loader: Loader, metadata: EcmaMetadata) -> None:
        self.rts = rts
        self.loader = loader
        self.metadata = metadata
        self._primitive_mts: dict[int, int] = {}
        self._constructed: dict[tuple, int] | None = None
        self._by_assembly: dict[str, int] | None = None

    # -- what is loaded ---------------------------------------------------------------------

    def constructed(self) -> dict[tuple, int]:
        """Loaded arrays, pointers and generic instantiations of every module, by shape."""
        if self._constructed is None:
            rts, index = self.rts, {}
            for module in self.loader.all_modules():
                try:
                    handles = self.loader.available_type_params(module)
                except SosError:
                    continue
                for th in handles:
                    try:
                        key = self._shape(th)
                    except SosError:
                        continue
                    if key is not None:
                        index.setdefault(key, th)
            self._constructed = index
        return self._constructed

    def _shape(self, th: int) -> tuple | None:
        rts = self.rts
        if rts.is_type_desc(th):
            if rts.has_type_param(th):
                return ("param", rts.type_desc_kind(th), rts.type_param(th))
            return None
        mt = rts.method_table(th)
        if mt.auxiliary_data and self.rts.data.field_u32(mt.auxiliary_data, "MethodTableAuxiliaryData",
                                                         "Flags") & AUX_IS_NOT_FULLY_LOADED:
            return None  # a lookup that may not load types does not see it yet
        if mt.is_array:
            return ("array", rts.signature_element_type(th), rts.array_rank(th), mt.per_inst_info)
        if mt.has_instantiation and not mt.is_generic_type_definition:
            return ("generic", mt.module, mt.typedef_token, tuple(rts.instantiation(th)))
        return None

    def primitive_mt(self, element_type: int) -> int:
        if element_type == ELEMENT_TYPE_STRING:
            return self.rts.string_mt
        if element_type == ELEMENT_TYPE_OBJECT:
            return self.rts.object_mt
        name = PRIMITIVES.get(element_type)
        if name is None:
            return 0
        if element_type not in self._primitive_mts:
            mt = 0
            try:
                corelib = self.rts.method_table(self.rts.object_mt).module
                md = self.metadata.metadata(corelib)
                token = md.find_type(name) if md is not None else None
                if token:
                    mt = self.loader.lookup(corelib, "TypeDefToMethodTableMap", token & 0xFFFFFF)
            except (SosError, MetadataError):
                mt = 0
            self._primitive_mts[element_type] = mt
        return self._primitive_mts[element_type]

    # -- a signature type to a loaded type handle -------------------------------------------

    def _token_type(self, module: int, token: int) -> int:
        if token >> 24 == 0x02:
            return self.loader.lookup(module, "TypeDefToMethodTableMap", token & 0xFFFFFF)
        if token >> 24 == 0x01:
            found = self.loader.lookup(module, "TypeRefToMethodTableMap", token & 0xFFFFFF)
            return found or self._resolve_type_ref(module, token)
        return 0

    def _modules_by_assembly(self) -> dict[str, int]:
        if self._by_assembly is None:
            found: dict[str, int] = {}
            for module in self.loader.all_modules():
                md = self.metadata.metadata(module)
                asm = md.assembly() if md is not None else None
                if asm is not None:
                    found.setdefault(asm.name.lower(), module)
            self._by_assembly = found
        return self._by_assembly

    def _resolve_type_ref(self, module: int, token: int) -> int:
        """A TypeRef the module's map lacks, as the DAC's no-load lookup answers it: the
        referenced assembly's TypeDef of that name (through type forwarders) if its
        MethodTable is loaded, else -- measured on .NET 10 -- System.Void's MethodTable."""
        md = self.metadata.metadata(module)
        if md is None:
            return 0
        try:
            names: list[str] = []
            ref = md.type_ref(token)
            while ref.resolution_scope and ref.resolution_scope >> 24 == 0x01 and len(names) < 16:
                names.append(ref.name)  # nested: the scope is the enclosing TypeRef
                ref = md.type_ref(ref.resolution_scope)
            full = (f"{ref.namespace}.{ref.name}" if ref.namespace else ref.name) + \
                "".join("+" + n for n in reversed(names))
            scope = ref.resolution_scope or 0
            if scope >> 24 != 0x23:  # only references to other assemblies are followed
                return 0
            target_name = md.assembly_ref(scope).name
            for _ in range(8):  # facades forward to the assembly that defines the type
                target = self._modules_by_assembly().get(target_name.lower())
                tmd = self.metadata.metadata(target) if target else None
                if tmd is None:
                    return 0
                typedef = tmd.find_type(full)
                if typedef:
                    mt = self.loader.lookup(target, "TypeDefToMethodTableMap", typedef & 0xFFFFFF)
                    return mt or self.primitive_mt(ELEMENT_TYPE_VOID)
                forward = next((e for e in tmd.exported_types() if e.name == ref.name
                                and e.namespace == ref.namespace and e.implementation
                                and e.implementation >> 24 == 0x23), None)
                if forward is None:
                    return self.primitive_mt(ELEMENT_TYPE_VOID)
                target_name = tmd.assembly_ref(forward.implementation).name
        except (MetadataError, SosError, IndexError):
            return 0
        return 0

    def resolve(self, sig: SigType, module: int, context: list[int], depth: int = 0) -> int:
        """The loaded type handle ``sig`` names in ``module`` (0: not loaded, or unknown)."""
        if depth > 32:
            return 0
        et = sig.element_type
        if et in (ELEMENT_TYPE_CLASS, ELEMENT_TYPE_VALUETYPE):
            return self._token_type(module, sig.token or 0)
        if et == ELEMENT_TYPE_VAR:
            return context[sig.index] if sig.index < len(context) else 0
        if et == ELEMENT_TYPE_PTR:  # only a pointer type the runtime has made
            elem = self.resolve(sig.element, module, context, depth + 1) if sig.element else 0
            return self.constructed().get(("param", ELEMENT_TYPE_PTR, elem), 0) if elem else 0
        if et == ELEMENT_TYPE_FNPTR:
            return self.primitive_mt(ELEMENT_TYPE_I)
        if et in (ELEMENT_TYPE_SZARRAY, ELEMENT_TYPE_ARRAY):
            elem = self.resolve(sig.element, module, context, depth + 1) if sig.element else 0
            if not elem:
                return 0
            kind, rank = (0x1D, 1) if et == ELEMENT_TYPE_SZARRAY else (0x14, sig.rank)
            return self.constructed().get(("array", kind, rank, elem), 0)
        if et == ELEMENT_TYPE_GENERICINST:
            definition = self._token_type(module, sig.token or 0)
            if not definition:
                return 0
            args = tuple(self.resolve(a, module, context, depth + 1) for a in sig.args)
            if not all(args):
                return 0
            mt = self.rts.method_table(definition)
            return self.constructed().get(("generic", mt.module, mt.typedef_token, args), 0)
        return self.primitive_mt(et)

    def method_table_of(self, th: int) -> int:
        """``TypeHandle::GetMethodTable``: a pointer or function pointer TypeDesc is UIntPtr."""
        if not th or not self.rts.is_type_desc(th):
            return th
        kind = self.rts.type_desc_kind(th)
        if kind == ELEMENT_TYPE_VALUETYPE:
            return self.rts.type_param(th)
        if kind in (ELEMENT_TYPE_PTR, ELEMENT_TYPE_BYREF):
            return self.primitive_mt(ELEMENT_TYPE_U)
        if kind == ELEMENT_TYPE_FNPTR:
            return self.primitive_mt(ELEMENT_TYPE_I)
        return 0

    def type_of_field(self, field_desc: int, enclosing: int, token: int, element_type: int) -> tuple[int, int, int, int]:
        """(sig type, MethodTable of the type, module, token of the type) of a field."""
        module = self.rts.method_table(enclosing).module
        sig_type, type_token, type_mt = element_type, MD_TYPEDEF_NIL, 0
        md = self.metadata.metadata(module)
        if md is None:
            return sig_type, type_mt, module, type_token
        try:
            _, _, blob_index = md.raw_row(TableIndex.FIELD, token & 0xFFFFFF)
            blob = bytes(md.blobs.get(blob_index))
            pos = 1
            while blob[pos] in (ELEMENT_TYPE_CMOD_REQD, ELEMENT_TYPE_CMOD_OPT):  # volatile and friends
                _, pos = _compressed(blob, pos + 1)
            first = blob[pos]
            sig = md.field(token).signature
            if first in (ELEMENT_TYPE_CLASS, ELEMENT_TYPE_VALUETYPE):
                coded, _ = _compressed(blob, pos + 1)
                type_token = _type_def_or_ref(coded)
            context = self.rts.instantiation(enclosing)
            type_mt = self.method_table_of(self.resolve(sig, module, context))
            if first not in (ELEMENT_TYPE_CLASS, ELEMENT_TYPE_VALUETYPE) and not type_mt:
                sig_type = first
        except (IndexError, ValueError, SosError):
            pass
        return sig_type, type_mt, module, type_token
