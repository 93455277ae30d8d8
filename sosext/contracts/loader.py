"""Contract Loader: the AppDomain, its assemblies, their modules and the modules' lookup maps.

dotnet/runtime ``docs/design/datacontracts/Loader.md`` (version 1, .NET 9/10). CoreCLR has
one AppDomain (global ``AppDomain``) beside the SystemDomain (global ``SystemDomain``). The
AppDomain's ``DomainAssemblyList`` is an ``ArrayListBase``: a count and a chain of
``ArrayListBlock``s, each an inline array of pointers to a DomainAssembly whose first field
is the Assembly. An Assembly has one Module; an assembly is loaded once its ``Level`` reaches
FILE_LOAD_DELIVER_EVENTS (4). A module's ``*Map`` fields are ``ModuleLookupMap``s: a chain of
tables indexed by RID, whose entries carry flag bits (``SupportedFlagsMask``) below the pointer.

Records are filled as the runtime's DAC fills them: since .NET 9 a "PEFile" is the Module
itself, module IDs and indexes are 0, and there is no shared domain.
"""
from __future__ import annotations

from collections.abc import Iterator

from ..errors import ContractError, SosError
from ..readers.records import AppDomainData, AppDomainStoreData, AssemblyData, GetModuleData, ModuleData
from .ecmametadata import EcmaMetadata
from .targetdata import TargetData

ASSEMBLY_LEVEL_LOADED = 4
MODULE_REFLECTION_EMIT = 0x40
# PEImageLayout flags: the image is mapped section by section / the layout holds the file's bytes.
# A layout with contents that is not mapped is the file as it lies on disk (SOS: IsFileLayout).
LAYOUT_MAPPED = 0x1
LAYOUT_CONTENTS = 0x2
MAX_ASSEMBLIES = 100_000
MAX_MAP_SEGMENTS = 4096
MAX_MAP_ENTRIES = 1 << 24  # a RID has 24 bits
MAX_TYPE_PARAMS = 1 << 21  # loaded constructed types of one module
# DacpAppDomainDataStage STAGE_OPEN: the SystemDomain's fixed answer, and the AppDomain's from
# startup's end to shutdown (its m_Stage is not in the descriptor: a core of a process that
# is starting or exiting is reported open too).
STAGE_OPEN = 3

# Which of the module's maps TraverseModuleMap walks (TYPEDEFTOMETHODTABLE, TYPEREFTOMETHODTABLE).
MODULE_MAPS = {0: "TypeDefToMethodTableMap", 1: "TypeRefToMethodTableMap"}


class Loader:
    def __init__(self, data: TargetData, metadata: EcmaMetadata) -> None:
        self.data = data
        self.metadata = metadata

    # -- domains ----------------------------------------------------------------------------

    def app_domain(self) -> int:
        return self.data.global_pointer("AppDomain")

    def system_domain(self) -> int:
        return self.data.global_pointer("SystemDomain")

    def app_domain_store_data(self) -> AppDomainStoreData:
        return AppDomainStoreData(shared_domain=0, system_domain=self.system_domain(),
                                  domain_count=1 if self.app_domain() else 0)

    def app_domain_list(self) -> list[int]:
        domain = self.app_domain()
        return [domain] if domain else []

    def app_domain_data(self, domain: int) -> AppDomainData:
        d = self.data
        if not domain:
            raise ContractError("no AppDomain at 0")
        # Both domains hand out the global LoaderAllocator's heaps.
        allocator = self.system_domain() + d.offset("SystemDomain", "GlobalLoaderAllocator")
        assemblies = 0
        if domain == self.app_domain():
            assemblies = len(self.assembly_list(domain))
        return AppDomainData(
            app_domain_ptr=domain, app_sec_desc=0,
            low_frequency_heap=d.field_pointer(allocator, "LoaderAllocator", "LowFrequencyHeap"),
            high_frequency_heap=d.field_pointer(allocator, "LoaderAllocator", "HighFrequencyHeap"),
            stub_heap=d.field_pointer(allocator, "LoaderAllocator", "StubHeap"),
            domain_local_block=0, domain_local_modules=0,
            id=d.global_value("DefaultADID") if domain == self.app_domain() else 0,
            assembly_count=assemblies, failed_assembly_count=0, stage=STAGE_OPEN)

    def app_domain_name(self, domain: int) -> str:
        if domain != self.app_domain():
            return ""  # the SystemDomain has no name
        d = self.data
        name = d.field_pointer(domain, "AppDomain", "FriendlyName")
        return d.utf16z(name) if name else ""

    def domain_loader_allocator(self, domain: int) -> int:
        return self.system_domain() + self.data.offset("SystemDomain", "GlobalLoaderAllocator")

    # -- assemblies -------------------------------------------------------------------------

    def _domain_assemblies(self, domain: int) -> Iterator[int]:
        """Every Assembly of the domain's list, in list order."""
        d = self.data
        lst = domain + d.offset("AppDomain", "DomainAssemblyList")
        count = d.field_u32(lst, "ArrayListBase", "Count")
        if count > MAX_ASSEMBLIES:
            raise ContractError(f"AppDomain {domain:#x} claims {count} assemblies")
        block = lst + d.offset("ArrayListBase", "FirstBlock")
        done = 0
        blocks = 0
        while block and done < count:
            blocks += 1
            if blocks > MAX_ASSEMBLIES:
                raise ContractError(f"AppDomain {domain:#x}: the assembly list does not end")
            size = d.field_u32(block, "ArrayListBlock", "Size")
            first = block + d.offset("ArrayListBlock", "ArrayStart")
            for i in range(min(size, count - done)):
                domain_assembly = d.pointer(first + i * d.pointer_size)
                done += 1
                if domain_assembly:
                    yield d.pointer(domain_assembly)
            block = d.field_pointer(block, "ArrayListBlock", "Next")

    def assembly_list(self, domain: int) -> list[int]:
        if domain == self.system_domain():
            raise ContractError("the SystemDomain lists no assemblies")
        return [a for a in self._domain_assemblies(domain)
                if self.data.field_u32(a, "Assembly", "Level") >= ASSEMBLY_LEVEL_LOADED]

    def assembly_module(self, assembly: int) -> int:
        return self.data.field_pointer(assembly, "Assembly", "Module")

    def assembly_data(self, domain: int, assembly: int) -> AssemblyData:
        module = self.assembly_module(assembly)
        dynamic = bool(module and self.module_flags(module) & MODULE_REFLECTION_EMIT)
        raise_if_unknown = self.data.desc.has_field("Assembly", "ClassLoader")
        loader = self.data.field_pointer(assembly, "Assembly", "ClassLoader") if raise_if_unknown else 0
        return AssemblyData(assembly_ptr=assembly, class_loader=loader, parent_domain=self.app_domain(),
                            domain_ptr=domain, assembly_sec_desc=0, is_dynamic=int(dynamic),
                            module_count=1 if module else 0, load_context=0, is_domain_neutral=0,
                            location_flags=0)

    def assembly_name(self, assembly: int) -> str:
        """The assembly's file path, as the DAC answers GetAssemblyName."""
        module = self.assembly_module(assembly)
        return self.module_path(module) if module else ""

    def assembly_module_list(self, assembly: int) -> list[int]:
        module = self.assembly_module(assembly)
        return [module] if module else []

    # -- modules ----------------------------------------------------------------------------

    def module_flags(self, module: int) -> int:
        return self.data.field_u32(module, "Module", "Flags")

    def module_path(self, module: int) -> str:
        path = self.data.field_pointer(module, "Module", "Path")
        return self.data.utf16z(path) if path else ""

    def pe_file_name(self, module: int) -> str | None:
        path = self.module_path(module)
        if not path and not self.module_flags(module) & MODULE_REFLECTION_EMIT:
            return None  # loaded from memory: the DAC answers E_NOTIMPL
        return path

    def pe_file_base(self, module: int) -> int:
        if self.module_flags(module) & MODULE_REFLECTION_EMIT:
            return 0
        return self.data.field_pointer(module, "Module", "Base")

    def module_load_data(self, module: int) -> GetModuleData:
        """How the module's image was loaded, as the DAC's IXCLRDataModule private request
        (DacpGetModuleData) reports it: Loader.md's TryGetLoadedImageContents (the PEImage's
        loaded PEImageLayout), IsProbeExtensionResultValid and TryGetSymbolStream."""
        d = self.data
        emit = bool(self.module_flags(module) & MODULE_REFLECTION_EMIT)
        in_memory = is_file_layout = 0
        base = size = 0
        pe_assembly = d.field_pointer(module, "Module", "PEAssembly")
        if pe_assembly:
            image = d.field_pointer(pe_assembly, "PEAssembly", "PEImage")
            # a path-less image, or one an assembly probe extension (a bundle) supplied, is "in memory"
            in_memory = int(emit or self._probe_extension_valid(image) or not self.module_path(module))
            layout = d.field_pointer(image, "PEImage", "LoadedImageLayout") if image else 0
            if layout:
                base = d.field_pointer(layout, "PEImageLayout", "Base")
                size = d.field_u32(layout, "PEImageLayout", "Size")
                flags = d.field_u32(layout, "PEImageLayout", "Flags")
                if not emit:
                    is_file_layout = int(bool(flags & LAYOUT_CONTENTS) and not flags & LAYOUT_MAPPED)
        pdb = pdb_size = 0
        stream = d.field_pointer(module, "Module", "GrowableSymbolStream")
        if stream:
            pdb = d.field_pointer(stream, "CGrowableSymbolStream", "Buffer")
            pdb_size = d.field_u32(stream, "CGrowableSymbolStream", "Size")
        # since .NET 9 the DAC names the Module itself where a PEAssembly was asked for
        return GetModuleData(is_dynamic=int(emit), is_in_memory=in_memory, is_file_layout=is_file_layout,
                             pe_assembly=module, loaded_pe_address=base, loaded_pe_size=size,
                             in_memory_pdb_address=pdb, in_memory_pdb_size=pdb_size)

    def _probe_extension_valid(self, image: int) -> bool:
        if not image:
            return False
        result = image + self.data.offset("PEImage", "ProbeExtensionResult")  # held inline
        return self.data.field_i32(result, "ProbeExtensionResult", "Type") != 0  # 0: no result

    def _map_table(self, module: int, field: str) -> int:
        return self.data.field_pointer(module + self.data.offset("Module", field), "ModuleLookupMap", "TableData")

    def module_data(self, module: int) -> ModuleData:
        d = self.data
        flags = self.module_flags(module)
        emit = bool(flags & MODULE_REFLECTION_EMIT)
        try:
            md_start, md_size = self.metadata.read_only_metadata(module)
        except SosError:
            md_start, md_size = 0, 0
        return ModuleData(
            address=module, pe_assembly=module,
            il_base=d.field_pointer(module, "Module", "Base"),
            metadata_start=md_start, metadata_size=md_size,
            assembly=d.field_pointer(module, "Module", "Assembly"),
            is_reflection=int(emit), is_pe_file=int(not emit),
            base_class_index=0, module_id=0, transient_flags=flags,
            type_def_to_method_table_map=self._map_table(module, "TypeDefToMethodTableMap"),
            type_ref_to_method_table_map=self._map_table(module, "TypeRefToMethodTableMap"),
            method_def_to_desc_map=self._map_table(module, "MethodDefToDescMap"),
            field_def_to_desc_map=self._map_table(module, "FieldDefToDescMap"),
            member_ref_to_desc_map=self._map_table(module, "MemberRefToDescMap"),
            file_references_map=0,
            manifest_module_references_map=self._map_table(module, "ManifestModuleReferencesMap"),
            loader_allocator=d.field_pointer(module, "Module", "LoaderAllocator"),
            thunk_heap=0, module_index=0)

    # -- lookup maps ------------------------------------------------------------------------

    def _segments(self, module: int, field: str) -> Iterator[tuple[int, int, int]]:
        """(table, count, flags mask) of each segment of one of the module's lookup maps."""
        d = self.data
        seg = module + d.offset("Module", field)
        for _ in range(MAX_MAP_SEGMENTS):
            table = d.field_pointer(seg, "ModuleLookupMap", "TableData")
            count = d.field_u32(seg, "ModuleLookupMap", "Count")
            mask = d.field_pointer(seg, "ModuleLookupMap", "SupportedFlagsMask")
            if count > MAX_MAP_ENTRIES:
                raise ContractError(f"module {module:#x}: a {field} segment of {count} entries")
            yield table, count, mask
            seg = d.field_pointer(seg, "ModuleLookupMap", "Next")
            if not seg:
                return
        raise ContractError(f"module {module:#x}: the {field} chain does not end")

    def lookup(self, module: int, field: str, rid: int) -> int:
        """The entry for ``rid`` in the module's map ``field`` (0: none)."""
        d = self.data
        for table, count, mask in self._segments(module, field):
            if rid < count:
                return d.pointer(table + rid * d.pointer_size) & ~mask if table else 0
            rid -= count
        return 0

    def map_entries(self, module: int, field: str) -> list[tuple[int, int]]:
        """(rid, entry) of every non-empty entry of the map, RIDs ascending."""
        d = self.data
        out: list[tuple[int, int]] = []
        rid = 0
        step = d.pointer_size
        for table, count, mask in self._segments(module, field):
            if rid + count > MAX_MAP_ENTRIES:
                raise ContractError(f"module {module:#x}: its {field} holds more than {MAX_MAP_ENTRIES} entries")
            raw = d.read(table, count * step) if table and count else b""
            for i in range(0, len(raw), step):
                value = int.from_bytes(raw[i:i + step], "little") & ~mask
                if value:
                    out.append((rid + i // step, value))
            rid += count
        return out

    def traverse_module_map(self, module: int, kind: int) -> list[tuple[int, int]]:
        field = MODULE_MAPS.get(kind)
        if field is None:
            raise ContractError(f"no module map of kind {kind}")
        return self.map_entries(module, field)

    # -- loaded constructed types -------------------------------------------------------------

    def available_type_params(self, module: int, limit: int = MAX_TYPE_PARAMS) -> list[int]:
        """Type handles in the module's ``AvailableTypeParams`` hash (its generic instantiations,
        arrays, pointers ...): a ``DacEnumerableHash`` whose bucket array starts with three
        reserved slots (the length first), each bucket a chain of entries ending in a pointer
        with bit 0 set; an entry's value keeps a flag in bit 0 too."""
        d = self.data
        table = d.field_pointer(module, "Module", "AvailableTypeParams")
        if not table:
            return []
        buckets = d.field_pointer(table, "EETypeHashTable", "Buckets")
        if not buckets:
            return []
        length = d.pointer(buckets)
        if length > limit:
            raise ContractError(f"module {module:#x}: a type hash of {length} buckets")
        raw = d.read(buckets + 3 * d.pointer_size, length * d.pointer_size)
        step = d.pointer_size
        out: list[int] = []
        value_at = d.offset("EETypeHashTable", "VolatileEntryValue")
        next_at = d.offset("EETypeHashTable", "VolatileEntryNextEntry")
        for i in range(0, len(raw), step):
            entry = int.from_bytes(raw[i:i + step], "little")
            while entry and not entry & 1:
                if len(out) >= limit:
                    raise ContractError(f"module {module:#x}: more than {limit} loaded types")
                out.append(d.pointer(entry + value_at) & ~1)
                entry = d.pointer(entry + next_at)
        return out

    def all_modules(self) -> list[int]:
        domain = self.app_domain()
        if not domain:
            return []
        return [m for a in self._domain_assemblies(domain) if (m := self.assembly_module(a))]
