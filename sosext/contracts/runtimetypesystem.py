"""Contract RuntimeTypeSystem: MethodTables, EEClasses, TypeDescs and FieldDescs.

dotnet/runtime ``docs/design/datacontracts/RuntimeTypeSystem.md`` (version 1, .NET 9/10).
A type handle is a MethodTable address, or a TypeDesc address with bit 1 set. A MethodTable
holds two flag words: ``MTFlags`` (high 16 bits: category, GC pointers, component size
present; low 16 bits: the component size of strings and arrays, or generic flags) and
``MTFlags2`` (bit 1: dynamic statics; bits 8..31: the TypeDef RID). ``EEClassOrCanonMT`` is
the EEClass, or with bit 0 set the canonical MethodTable whose field is the EEClass.

What the SOS DAC answers about a MethodTable (``GetMethodTableData``) is built here from
these fields as the runtime's DAC builds it: since .NET 9 the vtable-slot and virtual counts
are reported as 0, ``klass`` is the canonical MethodTable, and a string's base size excludes
its terminating NUL. A MethodTable is accepted only when its EEClass points back to it (or,
for generic instantiations and arrays, to a MethodTable with the same EEClass).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ContractError, SosError
from ..readers.records import FieldDescData, MethodTableCollectibleData, MethodTableData, MethodTableFieldData
from .ecmametadata import EcmaMetadata
from .targetdata import TargetData

# MTFlags, high half
CATEGORY_MASK = 0x000F0000
CATEGORY_ARRAY_MASK = 0x000C0000
CATEGORY_ARRAY = 0x00080000
CATEGORY_IF_ARRAY_THEN_SZARRAY = 0x00020000
CATEGORY_VALUETYPE = 0x00040000
CATEGORY_NULLABLE = 0x00050000
CATEGORY_PRIMITIVE = 0x00060000
CATEGORY_TRUE_PRIMITIVE = 0x00070000
COLLECTIBLE = 0x00200000
CONTAINS_GC_POINTERS = 0x01000000
HAS_COMPONENT_SIZE = 0x80000000
# MTFlags, low half (when there is no component size)
GENERICS_MASK = 0x00000030
GENERICS_TYPICAL = 0x00000030
# MTFlags2
DYNAMIC_STATICS = 0x0002

# CorElementType values the type system hands out
ELEMENT_TYPE_PTR = 0x0F
ELEMENT_TYPE_BYREF = 0x10
ELEMENT_TYPE_VALUETYPE = 0x11
ELEMENT_TYPE_CLASS = 0x12
ELEMENT_TYPE_VAR = 0x13
ELEMENT_TYPE_ARRAY = 0x14
ELEMENT_TYPE_GENERICINST = 0x15
ELEMENT_TYPE_FNPTR = 0x1B
ELEMENT_TYPE_SZARRAY = 0x1D
ELEMENT_TYPE_MVAR = 0x1E

TYPE_DESC_BIT = 2
MAX_TYPE_ARGS = 1024
MAX_FNPTR_ARGS = 1024

# FieldDesc is not in the .NET 9/10 descriptor; its layout has been stable since .NET Core 1
# (src/coreclr/vm/field.h): the enclosing MethodTable pointer, then two bit-field words.
#   dword1: mb:24 | isStatic:1 | isThreadLocal:1 | isRVA:1 | prot:3 | requiresFullMbValue:1
#   dword2: offset:27 | type:5
FIELD_DESC_MB_BITS = 0xFFFFFF
FIELD_DESC_PACKED_MB_MASK = 0x01FFFF  # the low RID bits when the name hash shares the field
FIELD_DESC_OFFSET_BITS = 0x7FFFFFF
FIELD_DESC_OFFSET_BIG_RVA = 0x7FFFFFA  # the offset lives in the RVA field map instead


@dataclass(frozen=True, slots=True)
class MethodTable:
    """The MethodTable fields the contract reads, as raw numbers."""

    address: int
    flags: int
    flags2: int
    base_size: int
    eeclass_or_canon: int
    module: int
    parent: int
    num_interfaces: int
    num_virtuals: int
    per_inst_info: int
    auxiliary_data: int

    @property
    def has_component_size(self) -> bool:
        return bool(self.flags & HAS_COMPONENT_SIZE)

    @property
    def component_size(self) -> int:
        return self.flags & 0xFFFF if self.has_component_size else 0

    @property
    def category(self) -> int:
        return self.flags & CATEGORY_MASK

    @property
    def is_array(self) -> bool:
        return self.flags & CATEGORY_ARRAY_MASK == CATEGORY_ARRAY

    @property
    def is_string(self) -> bool:
        return self.has_component_size and not self.is_array and self.component_size == 2

    def _generics(self) -> int:
        return 0 if self.has_component_size else self.flags & GENERICS_MASK

    @property
    def has_instantiation(self) -> bool:
        return self._generics() != 0

    @property
    def is_generic_type_definition(self) -> bool:
        return self._generics() == GENERICS_TYPICAL

    @property
    def typedef_token(self) -> int:
        return 0x02000000 | (self.flags2 >> 8)


class RuntimeTypeSystem:
    def __init__(self, data: TargetData, metadata: EcmaMetadata) -> None:
        self.data = data
        self.metadata = metadata
        self._mts: dict[int, MethodTable] = {}
        self._valid: dict[int, bool] = {}
        self._names: dict[tuple[int, int], str] = {}
        self.free_mt = self._global_mt("FreeObjectMethodTable")
        self.string_mt = self._global_mt("StringMethodTable")
        self.object_mt = self._global_mt("ObjectMethodTable")
        # Array base size (MethodTable + length + padding, and the object header): the
        # multi-dimensional arrays' base size adds 8 bytes per dimension after it.
        self.array_base_size = data.size("Array") + data.global_value("ObjectHeaderSize")

    def _global_mt(self, name: str) -> int:
        try:
            return self.data.global_pointer(name)
        except SosError:
            return 0

    # -- reading ----------------------------------------------------------------------------

    def method_table(self, address: int) -> MethodTable:
        """The MethodTable at ``address``, not validated."""
        mt = self._mts.get(address)
        if mt is not None:
            return mt
        if not address or address & (self.data.pointer_size - 1):
            raise ContractError(f"{address:#x} is not a MethodTable")
        d = self.data
        mt = MethodTable(
            address=address,
            flags=d.field_u32(address, "MethodTable", "MTFlags"),
            flags2=d.field_u32(address, "MethodTable", "MTFlags2"),
            base_size=d.field_u32(address, "MethodTable", "BaseSize"),
            eeclass_or_canon=d.field_pointer(address, "MethodTable", "EEClassOrCanonMT"),
            module=d.field_pointer(address, "MethodTable", "Module"),
            parent=d.field_pointer(address, "MethodTable", "ParentMethodTable"),
            num_interfaces=d.field_u16(address, "MethodTable", "NumInterfaces"),
            num_virtuals=d.field_u16(address, "MethodTable", "NumVirtuals"),
            per_inst_info=d.field_pointer(address, "MethodTable", "PerInstInfo"),
            auxiliary_data=d.field_pointer(address, "MethodTable", "AuxiliaryData"),
        )
        if len(self._mts) < 1_000_000:
            self._mts[address] = mt
        return mt

    def eeclass(self, mt: MethodTable) -> int:
        """The EEClass of ``mt``, following a canonical MethodTable once."""
        ptr = mt.eeclass_or_canon
        if ptr & 1:
            ptr = self.data.field_pointer(ptr & ~1, "MethodTable", "EEClassOrCanonMT")
            if ptr & 1:
                raise ContractError(f"MethodTable {mt.address:#x}: its canonical MethodTable is not canonical")
        if not ptr:
            raise ContractError(f"MethodTable {mt.address:#x} has no EEClass")
        return ptr

    def is_valid(self, address: int) -> bool:
        """Whether ``address`` holds something shaped like a MethodTable (as the DAC checks)."""
        ok = self._valid.get(address)
        if ok is None:
            try:
                ok = self._validate(address)
            except SosError:
                ok = False
            if len(self._valid) < 1_000_000:
                self._valid[address] = ok
        return ok

    def _validate(self, address: int) -> bool:
        if address and address == self.free_mt:
            return True
        mt = self.method_table(address)
        eeclass = self.eeclass(mt)
        back = self.data.field_pointer(eeclass, "EEClass", "MethodTable")
        if back == address:
            return True
        if mt.has_instantiation or mt.is_array:
            return self.eeclass(self.method_table(back)) == eeclass
        return False

    def checked(self, address: int) -> MethodTable:
        if not self.is_valid(address):
            raise ContractError(f"{address:#x} is not a valid MethodTable")
        return self.method_table(address)

    # -- TypeHandle queries -----------------------------------------------------------------

    @staticmethod
    def is_type_desc(th: int) -> bool:
        return bool(th & TYPE_DESC_BIT)

    def type_desc_kind(self, th: int) -> int:
        return self.data.field_u32(th & ~TYPE_DESC_BIT & ~1, "TypeDesc", "TypeAndFlags") & 0xFF

    def signature_element_type(self, th: int) -> int:
        if self.is_type_desc(th):
            return self.type_desc_kind(th)
        mt = self.method_table(th)
        cat = mt.category
        if cat == CATEGORY_ARRAY:
            return ELEMENT_TYPE_ARRAY
        if cat == CATEGORY_ARRAY | CATEGORY_IF_ARRAY_THEN_SZARRAY:
            return ELEMENT_TYPE_SZARRAY
        if cat in (CATEGORY_VALUETYPE, CATEGORY_NULLABLE, CATEGORY_PRIMITIVE):
            return ELEMENT_TYPE_VALUETYPE
        if cat == CATEGORY_TRUE_PRIMITIVE:
            return self.data.field_u8(self.eeclass(mt), "EEClass", "InternalCorElementType")
        return ELEMENT_TYPE_CLASS

    def has_type_param(self, th: int) -> bool:
        if self.is_type_desc(th):
            return self.type_desc_kind(th) in (ELEMENT_TYPE_VALUETYPE, ELEMENT_TYPE_BYREF, ELEMENT_TYPE_PTR)
        return self.method_table(th).is_array

    def type_param(self, th: int) -> int:
        """The element type of an array, or the target of a pointer/byref TypeDesc."""
        if self.is_type_desc(th):
            return self.data.field_pointer(th & ~TYPE_DESC_BIT, "ParamTypeDesc", "TypeArg")
        mt = self.method_table(th)
        if not mt.is_array:
            raise ContractError(f"{th:#x} is not an array type")
        return mt.per_inst_info

    def array_rank(self, th: int) -> int:
        if self.is_type_desc(th):
            return 0
        mt = self.method_table(th)
        if mt.category == CATEGORY_ARRAY:
            return max(mt.base_size - self.array_base_size, 0) // 8
        if mt.category == CATEGORY_ARRAY | CATEGORY_IF_ARRAY_THEN_SZARRAY:
            return 1
        return 0

    def generic_variable(self, th: int) -> tuple[int, int] | None:
        """(module, GenericParam token) of a type variable (T, !!0); None for other types."""
        if not self.is_type_desc(th) or self.type_desc_kind(th) not in (ELEMENT_TYPE_VAR, ELEMENT_TYPE_MVAR):
            return None
        addr = th & ~TYPE_DESC_BIT
        return (self.data.field_pointer(addr, "TypeVarTypeDesc", "Module"),
                self.data.field_u32(addr, "TypeVarTypeDesc", "Token"))

    def function_pointer(self, th: int) -> tuple[list[int], int] | None:
        """(return and argument type handles, calling convention) of a function pointer type."""
        if not self.is_type_desc(th) or self.type_desc_kind(th) != ELEMENT_TYPE_FNPTR:
            return None
        d, addr = self.data, th & ~TYPE_DESC_BIT
        n = d.field_u32(addr, "FnPtrTypeDesc", "NumArgs")
        if n > MAX_FNPTR_ARGS:
            raise ContractError(f"function pointer type {addr:#x} claims {n} arguments")
        conv = d.field_u32(addr, "FnPtrTypeDesc", "CallConv") & 0xFF
        first = addr + d.offset("FnPtrTypeDesc", "RetAndArgTypes")
        return [d.pointer(first + i * d.pointer_size) for i in range(n + 1)], conv

    def instantiation(self, th: int) -> list[int]:
        """The type arguments of a generic MethodTable ([] for anything else)."""
        if self.is_type_desc(th):
            return []
        mt = self.method_table(th)
        if not mt.has_instantiation or not mt.per_inst_info:
            return []
        d = self.data
        info = mt.per_inst_info - d.pointer_size  # GenericsDictInfo sits just before the array
        num_dicts = d.field_u16(info, "GenericsDictInfo", "NumDicts")
        num_args = d.field_u16(info, "GenericsDictInfo", "NumTypeArgs")
        if not 1 <= num_dicts <= MAX_TYPE_ARGS or num_args > MAX_TYPE_ARGS:
            raise ContractError(f"MethodTable {mt.address:#x}: {num_dicts} dictionaries of {num_args} arguments")
        # This type's own dictionary is the last one; its first entries are the arguments.
        dictionary = d.pointer(mt.per_inst_info + (num_dicts - 1) * d.pointer_size)
        raw = d.read(dictionary, num_args * d.pointer_size)
        step = d.pointer_size
        return [int.from_bytes(raw[i:i + step], "little") for i in range(0, len(raw), step)]

    def module_of(self, th: int) -> int:
        if not self.is_type_desc(th):
            return self.method_table(th).module
        if self.has_type_param(th):
            return self.module_of(self.type_param(th))
        var = self.generic_variable(th)
        return var[0] if var else 0

    def num_instance_fields(self, mt: MethodTable) -> int:
        return self.data.field_u16(self.eeclass(mt), "EEClass", "NumInstanceFields")

    def num_thread_static_fields(self, mt: MethodTable) -> int:
        return self.data.field_u16(self.eeclass(mt), "EEClass", "NumThreadStaticFields")

    # -- SOS DAC records --------------------------------------------------------------------

    def method_table_data(self, address: int) -> MethodTableData:
        mt = self.checked(address)
        base_size = mt.base_size - (2 if mt.is_string else 0)
        if address == self.free_mt:
            return MethodTableData(1, 0, 0, 0, 0, 0, 0, 0, base_size, mt.component_size, 0, 0, 0, 0, 0)
        d = self.data
        eeclass = self.eeclass(mt)
        return MethodTableData(
            is_free=0,
            module=mt.module,
            klass=d.field_pointer(eeclass, "EEClass", "MethodTable"),
            parent_method_table=mt.parent,
            num_interfaces=mt.num_interfaces,
            num_methods=d.field_u16(eeclass, "EEClass", "NumMethods"),
            num_vtable_slots=0,
            num_virtuals=0,
            base_size=base_size,
            component_size=mt.component_size,
            token=mt.typedef_token,
            attr_class=d.field_u32(eeclass, "EEClass", "CorTypeAttr"),
            is_shared=0,
            is_dynamic=int(bool(mt.flags2 & DYNAMIC_STATICS)),
            contains_pointers=int(bool(mt.flags & CONTAINS_GC_POINTERS)),
        )

    def method_table_field_data(self, address: int) -> MethodTableFieldData:
        mt = self.checked(address)
        if address == self.free_mt:
            raise ContractError("the free MethodTable has no fields")
        d = self.data
        eeclass = self.eeclass(mt)
        return MethodTableFieldData(
            num_instance_fields=d.field_u16(eeclass, "EEClass", "NumInstanceFields"),
            num_static_fields=d.field_u16(eeclass, "EEClass", "NumStaticFields"),
            num_thread_static_fields=d.field_u16(eeclass, "EEClass", "NumThreadStaticFields"),
            first_field=d.field_pointer(eeclass, "EEClass", "FieldDescList"),
            context_static_offset=0,
            context_statics_size=0,
        )

    def method_table_for_eeclass(self, eeclass_or_canon: int) -> int:
        """Since .NET 9 the DAC's "EEClass" is the canonical MethodTable: it is its own answer."""
        self.checked(eeclass_or_canon)
        return eeclass_or_canon

    def collectible_data(self, address: int) -> MethodTableCollectibleData:
        mt = self.checked(address)
        if not mt.flags & COLLECTIBLE:
            return MethodTableCollectibleData(0, 0)
        raise ContractError("collectible types need the LoaderAllocator contract, which the contracts reader lacks")

    def field_desc_data(self, address: int, type_of_field) -> FieldDescData:  # type: ignore[no-untyped-def]
        """FieldDescData of the FieldDesc at ``address``; ``type_of_field(fd, enclosing, token,
        element type)`` answers (sig type, MethodTable, module, token) of the field's type."""
        d = self.data
        enclosing = d.pointer(address)
        raw = d.read(address + d.pointer_size, 8)
        dword1 = int.from_bytes(raw[:4], "little")
        dword2 = int.from_bytes(raw[4:], "little")
        mb = dword1 & FIELD_DESC_MB_BITS
        if not (dword1 >> 30) & 1:  # a packed value: the high bits of mb hold a name hash
            mb &= FIELD_DESC_PACKED_MB_MASK
        element_type = dword2 >> 27
        offset = dword2 & FIELD_DESC_OFFSET_BITS
        if not self.is_valid(enclosing):
            raise ContractError(f"FieldDesc {address:#x} has no valid enclosing MethodTable")
        token = 0x04000000 | mb
        sig_type, type_mt, type_module, type_token = type_of_field(address, enclosing, token, element_type)
        return FieldDescData(
            type=element_type,
            sig_type=sig_type,
            mt_of_type=type_mt,
            module_of_type=type_module,
            token_of_type=type_token,
            token=token,
            mt_of_enclosing_class=enclosing,
            offset=offset,
            is_thread_local=(dword1 >> 25) & 1,
            is_context_local=0,
            is_static=(dword1 >> 24) & 1,
            next_field=address + d.pointer_size + 8,
        )
