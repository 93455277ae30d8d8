"""The type-system and loader half of the contracts reader, answering as ``SosDac`` answers.

Each method here has the name, arguments and result of the ``SosDac`` method the model calls
(``dac/sos.py``): a record of ``readers/records.py``, a string, a list of addresses, or None
where the DAC's call fails and ``SosDac`` returns None. Methods ``SosDac`` lets raise (the
AppDomain store) raise a ``ContractError`` here. The answers come from the contracts in this
package: RuntimeTypeSystem (types, fields), Object and Exception (objects), Loader and
EcmaMetadata (domains, assemblies, modules, metadata), and the type-name builder.
"""
from __future__ import annotations

from ..errors import ContractError, ReaderUnsupported, SosError
from ..readers.records import (AppDomainData, AppDomainStoreData, AssemblyData, ExceptionObjectData, GetModuleData,
                               FieldDescData, MethodTableCollectibleData, MethodTableData, MethodTableFieldData,
                               MethodDescData, MethodSlotData, ModuleData, ObjectData, ReJitData2,
                               TieredVersionData)
from ..targets.base import Target
from .descriptor import ContractDescriptor
from .ecmametadata import EcmaMetadata
from .fieldtypes import FieldTypes
from .loader import Loader
from .methoddescs import MethodDescs
from .objects import Objects
from .runtimetypesystem import RuntimeTypeSystem
from .targetdata import TargetData
from .threadstatics import ThreadStatics
from .typename import TypeNames

# MethodTableAuxiliaryData flags (methodtable.h) behind ISOSDacInterface14's answers.
AUX_INITIALIZED = 0x0001
AUX_IS_INIT_ERROR = 0x0100
MT_INITIALIZED, MT_INITIALIZATION_FAILED = 1, 2


class TypeAnswers:
    """Types, objects, fields, domains, assemblies and modules of one runtime."""

    def __init__(self, target: Target, descriptor: ContractDescriptor) -> None:
        self.data = TargetData(target, descriptor)
        self.metadata = EcmaMetadata(self.data)
        self.rts = RuntimeTypeSystem(self.data, self.metadata)
        self.names = TypeNames(self.rts, self.metadata)
        self.objects = Objects(self.data, self.rts, self.names)
        self.loader = Loader(self.data, self.metadata)
        self.field_types = FieldTypes(self.rts, self.loader, self.metadata)
        self.threads = ThreadStatics(self.data)
        self.methods = MethodDescs(self.rts, self.loader, self.metadata, self.names)

    # -- types ------------------------------------------------------------------------------

    def method_table_data(self, mt: int) -> MethodTableData | None:
        try:
            return self.rts.method_table_data(mt)
        except SosError:
            return None

    def method_table_name(self, mt: int) -> str | None:
        try:
            return self.names.method_table_name(mt)
        except SosError:
            return None

    def method_table_field_data(self, mt: int) -> MethodTableFieldData | None:
        try:
            return self.rts.method_table_field_data(mt)
        except SosError:
            return None

    def method_table_for_eeclass(self, eeclass: int) -> int | None:
        try:
            return self.rts.method_table_for_eeclass(eeclass)
        except SosError:
            return None

    def field_desc_data(self, fd: int) -> FieldDescData | None:
        try:
            return self.rts.field_desc_data(fd, self.field_types.type_of_field)
        except SosError:
            return None

    def method_table_collectible_data(self, mt: int) -> MethodTableCollectibleData | None:
        try:
            return self.rts.collectible_data(mt)
        except SosError:
            return None

    def assembly_load_context(self, mt: int) -> int | None:
        """The AssemblyLoadContext object of ``mt``'s module's binder (0: not created yet)."""
        d = self.data
        try:
            module = self.rts.checked(mt).module
            pe_assembly = d.field_pointer(module, "Module", "PEAssembly")
            binder = d.field_pointer(pe_assembly, "PEAssembly", "AssemblyBinder")
            handle = d.field_pointer(binder, "AssemblyBinder", "AssemblyLoadContext")
            return d.pointer(handle) if handle else 0
        except SosError:
            return None

    def _dynamic_statics(self, mt: int) -> tuple[int, int]:
        """(non-GC, GC) statics bases of a MethodTable with dynamic statics, else (0, 0)."""
        d = self.data
        table = self.rts.checked(mt)
        if not table.flags2 & 0x2 or not table.auxiliary_data:
            return 0, 0
        info = table.auxiliary_data - d.size("DynamicStaticsInfo")
        mask = d.global_value("StaticsPointerMask")
        return (d.field_pointer(info, "DynamicStaticsInfo", "NonGCStatics") & mask,
                d.field_pointer(info, "DynamicStaticsInfo", "GCStatics") & mask)

    def static_base_address(self, mt: int) -> tuple[int, int] | None:
        try:
            return self._dynamic_statics(mt)
        except SosError:
            return None

    def thread_static_base_address(self, mt: int, thread: int) -> tuple[int, int] | None:
        """(non-GC, GC) thread-static bases of ``mt`` on the runtime Thread ``thread``."""
        try:
            table = self.rts.checked(mt)
            if not self.rts.num_thread_static_fields(table) or not table.auxiliary_data:
                return 0, 0
            info = table.auxiliary_data - self.data.size("ThreadStaticsInfo")
            return (self.threads.static_base(thread, info + self.data.offset("ThreadStaticsInfo", "NonGCTlsIndex")),
                    self.threads.static_base(thread, info + self.data.offset("ThreadStaticsInfo", "GCTlsIndex")))
        except SosError:
            return None

    def method_table_initialization_flags(self, mt: int) -> int | None:
        try:
            aux = self.rts.checked(mt).auxiliary_data
            flags = self.data.field_u32(aux, "MethodTableAuxiliaryData", "Flags") if aux else 0
        except SosError:
            return None
        return (MT_INITIALIZED if flags & AUX_INITIALIZED else 0) | \
            (MT_INITIALIZATION_FAILED if flags & AUX_IS_INIT_ERROR else 0)

    # -- methods ------------------------------------------------------------------------------

    def method_table_slots(self, mt: int) -> list[MethodSlotData] | None:
        try:
            return self.methods.slots(mt)
        except SosError:
            return None

    def method_table_slot(self, mt: int, slot: int) -> int | None:
        try:
            if slot < self.methods.num_vtable_slots(mt):
                return self.methods.slot_value(mt, slot)
            for md in self.methods.introduced(mt):
                if md.slot == slot:
                    return self.methods.entry_point_if_exists(md)
        except SosError:
            pass
        return None

    def method_desc_data(self, md: int) -> MethodDescData | None:
        try:
            return self.methods.data_of(md)
        except ReaderUnsupported:
            raise
        except SosError:
            return None

    def rejit_information(self, md: int, rejit_id: int) -> ReJitData2 | None:
        try:
            return self.methods.rejit_information(md, rejit_id)
        except ReaderUnsupported:
            raise
        except SosError:
            return None

    def pending_rejit_id(self, md: int) -> int | None:
        """No rejit is pending for a method with only its default IL version."""
        try:
            self.methods._default_il_version_only(self.methods.method_desc(md), 0)
        except ReaderUnsupported:
            raise
        except SosError:
            pass
        return None

    def tiered_versions(self, md: int, rejit_id: int, limit: int = 10) -> list[TieredVersionData] | None:
        try:
            return self.methods.tiered_versions(md, rejit_id)[:limit]
        except ReaderUnsupported:
            raise
        except SosError:
            return None

    def il_address(self, module: int, rva: int) -> int | None:
        """Where IL at ``rva`` of ``module`` lies in the target (a reflection-emit module's IL is
        the DAC reader's)."""
        try:
            if self.loader.module_flags(module) & 0x40:
                raise ReaderUnsupported("the contracts reader cannot answer a dynamic module's IL yet; "
                                        "--reader dac (or setreader dac) does")
            return self.metadata.rva_to_address(module, rva) or None if rva else None
        except ReaderUnsupported:
            raise
        except SosError:
            return None

    def method_desc_name(self, md: int) -> str | None:
        try:
            return self.methods.name(md)
        except SosError:
            return None

    def method_desc_from_token(self, module: int, token: int) -> int | None:
        try:
            return self.methods.from_token(module, token) or None
        except SosError:
            return None

    # -- objects ----------------------------------------------------------------------------

    def object_data(self, address: int) -> ObjectData | None:
        try:
            return self.objects.object_data(address)
        except SosError:
            return None

    def object_class_name(self, address: int) -> str | None:
        try:
            return self.objects.object_class_name(address)
        except SosError:
            return None

    def object_string(self, address: int) -> str | None:
        try:
            return self.objects.string_value(address)
        except SosError:
            return None

    def exception_object_data(self, address: int) -> ExceptionObjectData | None:
        try:
            return self.objects.exception_data(address)
        except SosError:
            return None

    # -- domains, assemblies, modules -------------------------------------------------------

    def app_domain_store_data(self) -> AppDomainStoreData:
        return self.loader.app_domain_store_data()

    def app_domain_list(self, count: int | None = None) -> list[int]:
        domains = self.loader.app_domain_list()
        return domains if count is None else domains[:max(count, 0)]

    def app_domain_data(self, domain: int) -> AppDomainData | None:
        try:
            return self.loader.app_domain_data(domain)
        except SosError:
            return None

    def app_domain_name(self, domain: int) -> str | None:
        try:
            return self.loader.app_domain_name(domain)
        except SosError:
            return None

    def domain_loader_allocator(self, domain: int) -> int | None:
        try:
            return self.loader.domain_loader_allocator(domain) or None
        except SosError:
            return None

    def assembly_list(self, domain: int, count: int | None = None) -> list[int]:
        try:
            found = self.loader.assembly_list(domain)
        except SosError as e:
            raise ContractError(f"GetAssemblyList({domain:#x}) failed: {e}") from None
        return found if count is None else found[:max(count, 0)]

    def assembly_data(self, domain: int, assembly: int) -> AssemblyData | None:
        try:
            return self.loader.assembly_data(domain, assembly)
        except SosError:
            return None

    def assembly_name(self, assembly: int) -> str | None:
        try:
            return self.loader.assembly_name(assembly)
        except SosError:
            return None

    def assembly_module_list(self, assembly: int, count: int | None = None) -> list[int]:
        try:
            found = self.loader.assembly_module_list(assembly)
        except SosError as e:
            raise ContractError(f"GetAssemblyModuleList({assembly:#x}) failed: {e}") from None
        return found if count is None else found[:max(count, 0)]

    def module_data(self, module: int) -> ModuleData | None:
        try:
            return self.loader.module_data(module)
        except SosError:
            return None

    def module_load_data(self, module: int) -> GetModuleData | None:
        if not self.data.desc.has_type("PEImageLayout") or not self.data.desc.has_type("CGrowableSymbolStream"):
            raise ReaderUnsupported("the contracts reader cannot answer how a module was loaded: this runtime's "
                                    "descriptor does not describe PEImage layouts (.NET 9); --reader dac "
                                    "(or setreader dac) does")
        try:
            return self.loader.module_load_data(module)
        except SosError:
            return None

    def pe_file_name(self, pe: int) -> str | None:
        try:
            return self.loader.pe_file_name(pe)
        except SosError:
            return None

    def pe_file_base(self, pe: int) -> int | None:
        try:
            return self.loader.pe_file_base(pe)
        except SosError:
            return None

    def traverse_module_map(self, module: int, kind: int = 0) -> list[tuple[int, int]]:
        try:
            return self.loader.traverse_module_map(module, kind)
        except SosError as e:
            raise ContractError(f"TraverseModuleMap({module:#x}) failed: {e}") from None
