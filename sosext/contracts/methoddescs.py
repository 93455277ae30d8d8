"""RuntimeTypeSystem's MethodDescs: chunks, tokens, slots and method names.

dotnet/runtime ``docs/design/datacontracts/RuntimeTypeSystem.md`` (MethodDesc, version 1).
MethodDescs live in ``MethodDescChunk``s (a header, then MethodDescs of varying size); a
MethodDesc's ``ChunkIndex`` says how many ``MethodDescAlignment`` units after its chunk's
header it starts. A chunk names its MethodTable and holds the high bits of its methods'
MethodDef RIDs (``FlagsAndTokenRange``); each MethodDesc the low
``MethodDescTokenRemainderBitCount`` bits (``Flags3AndTokenRemainder``). A MethodDesc's size
is its classification's base size (``MethodDesc``, ``FCallMethodDesc`` ... in the descriptor)
plus optional pointers its flags announce (a non-vtable slot, a MethodImpl, a native code
slot). A class's chunks chain from its EEClass's ``MethodDescChunk``.

A MethodTable's slots: the first ``NumVirtuals`` sit in chunks of eight pointers that the
pointers after the MethodTable point to; the canonical MethodTable's non-virtual slots sit in
an array just before its auxiliary data's ``OffsetToNonVirtualSlots``. ``SOSMethodData`` rows
are built as the DAC's ISOSDacInterface15 enumerator builds them: every vtable slot (its
MethodDesc is the one the most derived class declares for that slot number), then the
introduced methods whose slot lies beyond the vtable.

Method names are ``TypeString::AppendMethodInternal`` with FormatSignature | FormatNamespace
| FormatFullInst: the type's full name, ``.``, the metadata name (or DynamicClass/ILStubClass
for methods without metadata), a generic method's instantiation, and the parameters as the
runtime's ``SigFormat`` prints them (``Int32``, ``System.String``, ``Int32 ByRef``,
``System.Span`1<Char>``).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..formats.metadata import MetadataError, TableIndex
from ..errors import ContractError, ReaderUnsupported
from ..readers.records import MethodDescData, MethodSlotData, ReJitData, ReJitData2, TieredVersionData
from .callcounting import compiled_with_patchpoints, counts_calls, instruments_first_tier0
from .ecmametadata import EcmaMetadata
from .loader import Loader
from .runtimetypesystem import RuntimeTypeSystem
from .typename import FORMAT_FULL_INST, FORMAT_NAMESPACE, TypeNames

# MethodDesc.Flags
CLASSIFICATION_MASK = 0x7
MC_IL, MC_FCALL, MC_PINVOKE, MC_EEIMPL, MC_ARRAY, MC_INSTANTIATED, MC_COMINTEROP, MC_DYNAMIC = range(8)
HAS_NON_VTABLE_SLOT, HAS_METHOD_IMPL, HAS_NATIVE_CODE_SLOT = 0x0008, 0x0010, 0x0020
# InstantiatedMethodDesc.Flags2
IMD_KIND_MASK, IMD_GENERIC_METHOD_DEFINITION = 0x7, 0x1
# StoredSigMethodDesc.ExtendedFlags of a DynamicMethodDesc
DYNAMIC_IS_LCG, DYNAMIC_IS_IL_STUB = 0x00004000, 0x00008000
BASE_SIZES = {MC_IL: "MethodDesc", MC_FCALL: "FCallMethodDesc", MC_PINVOKE: "PInvokeMethodDesc",
              MC_EEIMPL: "EEImplMethodDesc", MC_ARRAY: "ArrayMethodDesc",
              MC_INSTANTIATED: "InstantiatedMethodDesc", MC_DYNAMIC: "DynamicMethodDesc"}
# MethodDesc.Flags3AndTokenRemainder (high bits)
HAS_STABLE_ENTRY_POINT, HAS_PRECODE, ELIGIBLE_FOR_TIERING = 0x1000, 0x2000, 0x8000
# Code versioning (codeversion.h): the default native version is the active one / a node is.
DEFAULT_VERSION_IS_ACTIVE_CHILD, NODE_IS_ACTIVE_CHILD = 0x4, 0x1
REJIT_ACTIVE = 2  # DacpReJitData: kActive
# DacpTieredVersionData::OptimizationTier
TIER_MIN_OPT_JITTED, TIER_OPTIMIZED, TIER_READY_TO_RUN = 1, 2, 5
# NativeCodeVersion::OptimizationTier (Tier0, Tier1, Tier1OSR, Optimized, Tier0Instrumented,
# Tier1Instrumented) -> DacpTieredVersionData's, as the DAC's GetTieredVersions maps them.
_NODE_TIERS = {0: 3, 1: 4, 2: 6, 3: 2, 4: 7, 5: 8}
NODE_TIER0, NODE_TIER0_INSTRUMENTED = 0, 4  # NativeCodeVersion::OptimizationTier
MODULE_ALLOW_JIT_OPTS = 0x00000800  # Module flags: DEBUGGER_ALLOW_JIT_OPTS_PRIV
METHOD_IMPL_NO_OPTIMIZATION = 0x0040  # MethodImplAttributes.NoOptimization
MAX_VERSION_NODES = 10_000
NO_CODE = (1 << 64) - 1  # the DAC's NativeCodeAddr when a method has no code
NO_SLOT = 0xFFFF
VTABLE_SLOTS_PER_CHUNK = 8
MAX_CHUNKS = 100_000
MAX_SLOTS = 1 << 16
MAX_GENERIC_ARGS = 1024
MAX_SIG = 1 << 16
SHORT_NAMES = {0x01: "Void", 0x02: "Boolean", 0x03: "Char", 0x04: "SByte", 0x05: "Byte", 0x06: "Int16",
               0x07: "UInt16", 0x08: "Int32", 0x09: "UInt32", 0x0A: "Int64", 0x0B: "UInt64", 0x0C: "Single",
               0x0D: "Double", 0x18: "IntPtr", 0x19: "UIntPtr", 0x1C: "System.Object", 0x0E: "System.String",
               0x16: "TypedReference"}
ARRAY_METHOD_NAMES = ("Get", "Set", "Address", ".ctor")


@dataclass(frozen=True, slots=True)
class MethodDesc:
    address: int
    chunk: int
    method_table: int
    flags: int
    flags3: int
    slot: int
    token: int

    @property
    def classification(self) -> int:
        return self.flags & CLASSIFICATION_MASK


class MethodDescs:
    def __init__(self, rts: RuntimeTypeSystem, loader: Loader, metadata: EcmaMetadata, names: TypeNames) -> None:
        self.rts = rts
        self.data = rts.data
        self.loader = loader
        self.metadata = metadata
        self.names = names
        d = self.data
        self.alignment = d.global_value("MethodDescAlignment")
        remainder_bits = d.global_value("MethodDescTokenRemainderBitCount")
        self.remainder_mask = (1 << remainder_bits) - 1
        self.range_shift = remainder_bits
        self.range_mask = (1 << (24 - remainder_bits)) - 1
        self._mds: dict[int, MethodDesc] = {}
        self._first_tier0_instrumented: tuple[bool | None] | None = None  # (answer,) once read

    # -- one MethodDesc -----------------------------------------------------------------------

    def method_desc(self, address: int) -> MethodDesc:
        md = self._mds.get(address)
        if md is not None:
            return md
        d = self.data
        if not address or address % self.alignment:
            raise ContractError(f"{address:#x} is not a MethodDesc")
        index = d.field_u8(address, "MethodDesc", "ChunkIndex")
        chunk = address - index * self.alignment - d.size("MethodDescChunk")
        mt = d.field_pointer(chunk, "MethodDescChunk", "MethodTable")
        size = (d.field_u8(chunk, "MethodDescChunk", "Size") + 1) * self.alignment
        if index * self.alignment >= size or not self.rts.is_valid(mt):
            raise ContractError(f"{address:#x} is not a MethodDesc (its chunk names no MethodTable)")
        flags3 = d.field_u16(address, "MethodDesc", "Flags3AndTokenRemainder")
        token_range = d.field_u16(chunk, "MethodDescChunk", "FlagsAndTokenRange") & self.range_mask
        rid = (token_range << self.range_shift) | (flags3 & self.remainder_mask)
        md = MethodDesc(address, chunk, mt, d.field_u16(address, "MethodDesc", "Flags"), flags3,
                        d.field_u16(address, "MethodDesc", "Slot"), 0x06000000 | rid)
        if len(self._mds) < 1_000_000:
            self._mds[address] = md
        return md

    def base_size(self, md: MethodDesc) -> int:
        name = BASE_SIZES.get(md.classification)
        if name is None:
            raise ContractError(f"MethodDesc {md.address:#x} of classification {md.classification}")
        return self.data.size(name)

    def size(self, md: MethodDesc) -> int:
        size = self.base_size(md)
        d = self.data
        if md.flags & HAS_NON_VTABLE_SLOT:
            size += d.size("NonVtableSlot")
        if md.flags & HAS_METHOD_IMPL:
            size += d.size("MethodImpl")
        if md.flags & HAS_NATIVE_CODE_SLOT:
            size += d.size("NativeCodeSlot")
        return size

    def module(self, md: MethodDesc) -> int:
        return self.rts.method_table(md.method_table).module

    def entry_point_if_exists(self, md: MethodDesc) -> int:
        """``MethodDesc::GetMethodEntryPointIfExists``: its own slot, else its MethodTable's."""
        if md.flags & HAS_NON_VTABLE_SLOT:
            return self.data.pointer(md.address + self.base_size(md))
        if md.slot == NO_SLOT:
            return 0
        return self.slot_value(md.method_table, md.slot)

    def native_code_slot_address(self, md: MethodDesc) -> int:
        """Where the native code slot is: after the MethodDesc's base, its non-vtable slot and
        MethodImpl, in that order; 0 without one."""
        if not md.flags & HAS_NATIVE_CODE_SLOT:
            return 0
        d = self.data
        at = md.address + self.base_size(md)
        if md.flags & HAS_NON_VTABLE_SLOT:
            at += d.size("NonVtableSlot")
        if md.flags & HAS_METHOD_IMPL:
            at += d.size("MethodImpl")
        return at

    def default_native_code(self, md: MethodDesc) -> int:
        """``MethodDesc::GetNativeCode``: the native code slot, else a stable entry point that
        is not a precode."""
        slot = self.native_code_slot_address(md)
        if slot:
            return self.data.pointer(slot)
        if not md.flags3 & HAS_STABLE_ENTRY_POINT or md.flags3 & HAS_PRECODE:
            return 0
        return self.entry_point_if_exists(md)

    def active_native_code(self, md: MethodDesc) -> int:
        """The code of the default IL version's active native code version: a tiered method's
        versioning state may name a NativeCodeVersionNode (tier 1, OSR ...) as active."""
        d = self.data
        if not md.flags3 & ELIGIBLE_FOR_TIERING:
            return self.default_native_code(md)
        code_data = d.field_pointer(md.address, "MethodDesc", "CodeData")
        state = d.field_pointer(code_data, "MethodDescCodeData", "VersioningState") if code_data else 0
        if not state or d.field_u8(state, "MethodDescVersioningState", "Flags") & DEFAULT_VERSION_IS_ACTIVE_CHILD:
            return self.default_native_code(md)
        node = d.field_pointer(state, "MethodDescVersioningState", "NativeCodeVersionNode")
        for _ in range(MAX_VERSION_NODES):
            if not node:
                return self.default_native_code(md)
            if d.field_pointer(node, "NativeCodeVersionNode", "MethodDesc") == md.address and \
                    d.field_pointer(node, "NativeCodeVersionNode", "ILVersionId") == 0 and \
                    d.field_u32(node, "NativeCodeVersionNode", "Flags") & NODE_IS_ACTIVE_CHILD:
                return d.field_pointer(node, "NativeCodeVersionNode", "NativeCode")
            node = d.field_pointer(node, "NativeCodeVersionNode", "Next")
        raise ContractError(f"MethodDesc {md.address:#x}: its code version list does not end")

    def _default_il_version_only(self, md: MethodDesc, rejit_id: int) -> None:
        """Code-version questions are answered for a method that has only its default IL
        version (no rejit: no ILCodeVersioningState); the rest need the DAC reader."""
        if rejit_id != 0 or (self.data.has("Module", "MethodDefToILCodeVersioningStateMap") and md.token & 0xFFFFFF
                             and self.loader.lookup(self.module(md), "MethodDefToILCodeVersioningStateMap",
                                                    md.token & 0xFFFFFF)):
            raise ReaderUnsupported("the contracts reader cannot answer a rejitted method's code versions yet; "
                                    "--reader dac (or setreader dac) does")

    def il_header(self, md: MethodDesc) -> int:
        """Where the method's IL header is in the target (0: no IL)."""
        if not md.token & 0xFFFFFF or md.classification not in (MC_IL, MC_INSTANTIATED):
            return 0
        module = self.module(md)
        reader = self.metadata.metadata(module)
        if reader is None:
            raise ContractError(f"MethodDesc {md.address:#x}: its module has no readable metadata")
        try:
            rva = reader.raw_row(TableIndex.METHOD_DEF, md.token & 0xFFFFFF)[0]
        except (MetadataError, ValueError) as e:
            raise ContractError(f"MethodDesc {md.address:#x}: {e}") from None
        return self.metadata.rva_to_address(module, rva) if rva else 0

    def rejit_information(self, address: int, rejit_id: int) -> ReJitData2:
        md = self.method_desc(address)
        self._default_il_version_only(md, rejit_id)
        return ReJitData2(0, REJIT_ACTIVE, self.il_header(md), 0)

    def tiered_versions(self, address: int, rejit_id: int) -> list[TieredVersionData]:
        """The native code versions of the default IL version, for a method the runtime does
        not tier (a tiered method's versions carry tiers the .NET 10 descriptor does not publish)."""
        md = self.method_desc(address)
        self._default_il_version_only(md, rejit_id)
        code = self.default_native_code(md)
        tier = self._tier(md, code)
        if not md.flags3 & ELIGIBLE_FOR_TIERING:
            return [TieredVersionData(code, tier, 0)]
        nodes = self._version_nodes(md)
        if tier != TIER_READY_TO_RUN:
            # The first JIT-compiled code's tier is TieredCompilationManager::GetInitialOptimizationTier:
            # optimized where the method's call counting was disabled, else tier 0, instrumented
            # or not by EEConfig (callcounting.py says what a .NET 10 core shows of both). One
            # more case is certain: the runtime gives a JIT-compiled method an instrumented
            # tier-0 version (AsyncPromoteToTier1) only when its current code is tier 0 with
            # TieredPGO and InstrumentOnlyHotCode on, so call counting ran on tier-0 code.
            if not any(self._node_optimization_tier(node) == NODE_TIER0_INSTRUMENTED for node in nodes):
                self._first_code_is_tier0(md, code, promoted=bool(nodes))
            tier = _NODE_TIERS[NODE_TIER0]
        # The DAC's order: the method's own (implicit) version, then its NativeCodeVersionNodes.
        out = [TieredVersionData(code, tier, 0)]
        for node in nodes:
            node_code = self.data.field_pointer(node, "NativeCodeVersionNode", "NativeCode")
            node_tier = self._tier(md, node_code) if node_code else 0
            if node_tier != TIER_READY_TO_RUN:
                node_tier = _NODE_TIERS.get(self._node_optimization_tier(node), 0)
            out.append(TieredVersionData(node_code, node_tier, node))
        return out

    def _first_code_is_tier0(self, md: MethodDesc, code: int, promoted: bool) -> None:
        """Raise unless the core shows that a tiered method's first JIT-compiled code is tier 0
        (not instrumented): it was not final (the method has later native code versions — the
        runtime makes them only from code that is not final: call counting's promotion, OSR —
        its calls are being counted now, or the code has patchpoints), and the environment leaves the first tier-0 code
        uninstrumented (callcounting.py)."""
        if not promoted and not counts_calls(self.data, self.entry_point_if_exists(md), code) \
                and not compiled_with_patchpoints(self.data, code):
            seen = "is not seen to lead" if self.data.target.arch == "x86_64" else \
                f"is not read on {self.data.target.arch} (call-counting stubs are recognised on x86-64 only) to see if it leads"
            raise ReaderUnsupported(
                "the contracts reader cannot answer the tier of a tiered method's first JIT-compiled code: its "
                f"entry point {seen} through a call-counting stub to it, it has no patchpoints and no later "
                "version, so it is "
                "tier 0 before its call "
                "counting began or optimized with call counting disabled, which only the loader allocator's "
                "CallCountingManager table tells (this runtime's data descriptor does not describe it); "
                "--reader dac (or setreader dac) does")
        if self._first_tier0_instrumented is None:  # the process's setting: read once
            self._first_tier0_instrumented = (instruments_first_tier0(self.data),)
        if self._first_tier0_instrumented[0] is not False:
            raise ReaderUnsupported(
                "the contracts reader cannot answer the tier of a tiered method's first JIT-compiled code: "
                "TieredPGO_InstrumentOnlyHotCode is set in the environment (or the environment is unreadable), "
                "and EEConfig, which says whether that code is instrumented, is not in this runtime's data "
                "descriptor; --reader dac (or setreader dac) does")

    def _version_nodes(self, md: MethodDesc) -> list[int]:
        """The explicit native code versions (tier 1, OSR …) of ``md``'s default IL version, in
        the versioning state's list order."""
        d = self.data
        code_data = d.field_pointer(md.address, "MethodDesc", "CodeData")
        state = d.field_pointer(code_data, "MethodDescCodeData", "VersioningState") if code_data else 0
        node = d.field_pointer(state, "MethodDescVersioningState", "NativeCodeVersionNode") if state else 0
        out = []
        for _ in range(MAX_VERSION_NODES):
            if not node:
                return out
            if d.field_pointer(node, "NativeCodeVersionNode", "MethodDesc") == md.address and \
                    d.field_pointer(node, "NativeCodeVersionNode", "ILVersionId") == 0:
                out.append(node)
            node = d.field_pointer(node, "NativeCodeVersionNode", "Next")
        raise ContractError(f"MethodDesc {md.address:#x}: its code version list does not end")

    def _node_optimization_tier(self, node: int) -> int:
        """NativeCodeVersionNode::m_optTier, which the .NET 10 descriptor does not list: in
        codeversion.h it follows Next (a pointer) and the 32-bit version id; the descriptor's
        Flags offset must be where that layout (with OSR's patchpoint info and IL offset, without
        GC coverage) puts it, else the layout is another and the tier is not read."""
        d = self.data
        ptr = d.pointer_size
        tier_at = d.offset("NativeCodeVersionNode", "Next") + ptr + 4
        flags_expected = ((tier_at + 4 + ptr - 1) // ptr) * ptr + ptr + 4
        if d.offset("NativeCodeVersionNode", "Flags") != flags_expected:
            raise ReaderUnsupported("the contracts reader cannot answer a tiered method's JIT-compiled code versions "
                                    "(this runtime's NativeCodeVersionNode layout is not the one it knows); "
                                    "--reader dac (or setreader dac) does")
        return d.u32(node + tier_at)

    def _tier(self, md: MethodDesc, code: int) -> int:
        d = self.data
        module = self.module(md)
        if code and d.field_pointer(module, "Module", "ReadyToRunInfo"):
            base, size = self.metadata.image_range(module)
            if base <= code < base + size:
                return TIER_READY_TO_RUN
        # Optimizations off for the whole module (a debuggable build) or by [MethodImpl]; the
        # runtime's own switches (DOTNET_JitMinOpts ...) are not in the target's contracts.
        if not self.loader.module_flags(module) & MODULE_ALLOW_JIT_OPTS:
            return TIER_MIN_OPT_JITTED
        reader = self.metadata.metadata(module)
        if reader is not None and md.token & 0xFFFFFF and md.classification != MC_DYNAMIC:
            try:
                if reader.raw_row(TableIndex.METHOD_DEF, md.token & 0xFFFFFF)[1] & METHOD_IMPL_NO_OPTIMIZATION:
                    return TIER_MIN_OPT_JITTED
            except (MetadataError, ValueError):
                pass
        return TIER_OPTIMIZED

    def data_of(self, address: int) -> MethodDescData:
        """``GetMethodDescData`` with no IP, for methods of the default IL code version."""
        md = self.method_desc(address)
        d = self.data
        dynamic = md.classification == MC_DYNAMIC and \
            d.field_u32(md.address, "StoredSigMethodDesc", "ExtendedFlags") & DYNAMIC_IS_LCG
        # A dynamic method's DynamicMethod object (behind its resolver, which the descriptor does
        # not describe) stays 0 here: only dumpil needs it, and asks dynamic_method_object().
        if d.has("Module", "MethodDefToILCodeVersioningStateMap") and md.token & 0xFFFFFF and \
                self.loader.lookup(self.module(md), "MethodDefToILCodeVersioningStateMap", md.token & 0xFFFFFF):
            raise ReaderUnsupported("the contracts reader cannot answer a rejitted method's data (its IL "
                                    "code versions) yet; --reader dac (or setreader dac) does")
        code = self.active_native_code(md)
        return MethodDescData(
            has_native_code=int(bool(code)), is_dynamic=int(bool(dynamic)), slot_number=md.slot,
            native_code_addr=code or NO_CODE, address_of_native_code_slot=self.native_code_slot_address(md),
            method_desc_ptr=address, method_table_ptr=md.method_table, module_ptr=self.module(md),
            token=md.token, gc_info=0, gc_stress_code_copy=0, managed_dynamic_method_object=0, requested_ip=0,
            rejit_data_current=ReJitData(0, REJIT_ACTIVE, code), rejit_data_requested=ReJitData(0, 0, 0),
            jitted_rejit_versions=1)

    # -- chunks and slots ---------------------------------------------------------------------

    def introduced(self, mt: int) -> list[MethodDesc]:
        """The MethodDescs ``mt``'s class declares, chunk by chunk."""
        d = self.data
        table = self.rts.checked(mt)
        chunk = d.field_pointer(self.rts.eeclass(table), "EEClass", "MethodDescChunk")
        out: list[MethodDesc] = []
        for _ in range(MAX_CHUNKS):
            if not chunk:
                return out
            count = d.field_u8(chunk, "MethodDescChunk", "Count") + 1
            size = (d.field_u8(chunk, "MethodDescChunk", "Size") + 1) * self.alignment
            addr = chunk + d.size("MethodDescChunk")
            end = addr + size
            for _ in range(count):
                if addr >= end:
                    break
                md = self.method_desc(addr)
                out.append(md)
                addr += self.size(md)
            chunk = d.field_pointer(chunk, "MethodDescChunk", "Next")
        raise ContractError(f"MethodTable {mt:#x}: its MethodDescChunk chain does not end")

    def num_vtable_slots(self, mt: int) -> int:
        table = self.rts.checked(mt)
        canonical = not table.eeclass_or_canon & 1
        extra = self.data.field_u16(self.rts.eeclass(table), "EEClass", "NumNonVirtualSlots") if canonical else 0
        return table.num_virtuals + extra

    def slot_value(self, mt: int, slot: int) -> int:
        """What a MethodTable's slot holds (an entry point; 0: none assigned yet)."""
        d = self.data
        table = self.rts.checked(mt)
        if slot < table.num_virtuals:
            chunk = d.pointer(mt + d.size("MethodTable") + (slot // VTABLE_SLOTS_PER_CHUNK) * d.pointer_size)
            return d.pointer(chunk + (slot % VTABLE_SLOTS_PER_CHUNK) * d.pointer_size) if chunk else 0
        aux = table.auxiliary_data
        if not aux or slot >= self.num_vtable_slots(mt):
            raise ContractError(f"MethodTable {mt:#x} has no slot {slot}")
        offset = d.u16(aux + d.offset("MethodTableAuxiliaryData", "OffsetToNonVirtualSlots"))
        offset -= 0x10000 if offset & 0x8000 else 0
        array = aux + offset
        return d.pointer(array - (1 + slot - table.num_virtuals) * d.pointer_size)

    def slot_owners(self, mt: int) -> dict[int, MethodDesc]:
        """Slot number -> the MethodDesc the most derived class of ``mt``'s chain declares for it."""
        owners: dict[int, MethodDesc] = {}
        cur, seen = mt, set()
        while cur and cur not in seen and len(seen) < 1024:
            seen.add(cur)
            for md in self.introduced(cur):
                owners.setdefault(md.slot, md)
            cur = self.rts.method_table(cur).parent
        return owners

    def slots(self, mt: int) -> list[MethodSlotData]:
        n = self.num_vtable_slots(mt)
        if n > MAX_SLOTS:
            raise ContractError(f"MethodTable {mt:#x} claims {n} slots")
        out: list[MethodSlotData] = []
        owners = self.slot_owners(mt)
        for slot in range(n):
            md = owners.get(slot)
            if md is None:
                raise ContractError(f"MethodTable {mt:#x}: no method for slot {slot}")
            out.append(MethodSlotData(md.address, self.slot_value(mt, slot), md.method_table, self.module(md),
                                      md.token, slot))
        for md in self.introduced(mt):
            if md.slot >= n:
                out.append(MethodSlotData(md.address, self.entry_point_if_exists(md), md.method_table,
                                          self.module(md), md.token, 0xFFFFFFFF if md.slot == NO_SLOT else md.slot))
        return out

    def from_token(self, module: int, token: int) -> int:
        kind, rid = token >> 24, token & 0xFFFFFF
        field = {0x06: "MethodDefToDescMap", 0x04: "FieldDefToDescMap", 0x02: "TypeDefToMethodTableMap",
                 0x01: "TypeRefToMethodTableMap"}.get(kind)
        if field is None:
            raise ContractError(f"token {token:#x} names no MethodDesc")
        return self.loader.lookup(module, field, rid)

    # -- names --------------------------------------------------------------------------------

    def _instantiation(self, md: MethodDesc) -> list[int]:
        if md.classification != MC_INSTANTIATED:
            return []
        d = self.data
        count = d.field_u16(md.address, "InstantiatedMethodDesc", "NumGenericArgs")
        if count > MAX_GENERIC_ARGS:
            raise ContractError(f"MethodDesc {md.address:#x} claims {count} generic arguments")
        args = d.field_pointer(md.address, "InstantiatedMethodDesc", "PerInstInfo")
        return [d.pointer(args + i * d.pointer_size) for i in range(count)] if args and count else []

    def method_instantiation(self, md: MethodDesc) -> list[int]:
        """The type arguments of a generic method's instantiation ([] for any other method)."""
        return self._instantiation(md)

    def _is_generic_definition(self, md: MethodDesc) -> bool:
        return md.classification == MC_INSTANTIATED and \
            self.data.field_u16(md.address, "InstantiatedMethodDesc", "Flags2") & IMD_KIND_MASK == \
            IMD_GENERIC_METHOD_DEFINITION

    def name(self, address: int) -> str:
        md = self.method_desc(address)
        d = self.data
        out: list[str] = []
        signature: bytes | None = None
        md_reader = None
        type_args: list[int] = []
        if md.classification == MC_DYNAMIC:
            ext = d.field_u32(md.address, "StoredSigMethodDesc", "ExtendedFlags")
            out.append("DynamicClass" if ext & DYNAMIC_IS_LCG else "ILStubClass" if ext & DYNAMIC_IS_IL_STUB else "")
            out.append(".")
            name_ptr = d.field_pointer(md.address, "DynamicMethodDesc", "MethodName")
            out.append(self._utf8z(name_ptr) if name_ptr else "")
            signature = self._stored_sig(md)
        else:
            out.append(self.names.name(md.method_table, FORMAT_NAMESPACE | FORMAT_FULL_INST))
            out.append(".")
            type_args = self.rts.instantiation(md.method_table)
            if not type_args and self.rts.method_table(md.method_table).is_array:
                type_args = [self.rts.type_param(md.method_table)]
            if md.classification == MC_ARRAY:
                out.append(ARRAY_METHOD_NAMES[min(md.slot - self.rts.method_table(md.method_table).num_virtuals, 3)]
                           if md.slot >= self.rts.method_table(md.method_table).num_virtuals else "")
                signature = self._stored_sig(md)
            elif md.token & 0xFFFFFF:
                md_reader = self.metadata.metadata(self.module(md))
                if md_reader is None:
                    raise ContractError(f"MethodDesc {address:#x}: its module has no readable metadata")
                try:
                    _, _, _, name_index, sig_index, _ = md_reader.raw_row(TableIndex.METHOD_DEF, md.token & 0xFFFFFF)
                    out.append(md_reader.strings.get(name_index))
                    signature = bytes(md_reader.blobs.get(sig_index))
                except (MetadataError, ValueError) as e:
                    raise ContractError(f"MethodDesc {address:#x}: {e}") from None
        method_args = self._instantiation(md)
        if self._is_generic_definition(md):
            method_args = []  # measured: the DAC writes a generic definition's own parameters !!n
        elif method_args:
            out.append(self.names.instantiation_text(method_args, FORMAT_NAMESPACE | FORMAT_FULL_INST))
        if signature is not None:
            out.append(SigText(self, md_reader, type_args, method_args).parameters(signature))
        return "".join(out)

    def stored_signature(self, md: MethodDesc) -> bytes | None:
        """The signature a stub or dynamic method keeps with it (StoredSigMethodDesc)."""
        return self._stored_sig(md)

    def _stored_sig(self, md: MethodDesc) -> bytes | None:
        d = self.data
        sig = d.field_pointer(md.address, "StoredSigMethodDesc", "Sig")
        size = d.field_u32(md.address, "StoredSigMethodDesc", "cSig")
        if not sig or not size:
            return None
        if size > MAX_SIG:
            raise ContractError(f"MethodDesc {md.address:#x}: a signature of {size} bytes")
        return d.read(sig, size)

    def _utf8z(self, address: int, limit: int = 1024) -> str:
        raw = bytes(self.data.target.read_partial(address, limit))
        end = raw.find(b"\0")
        return raw[: end if end >= 0 else len(raw)].decode("utf-8", "replace")


class SigText:
    """A method signature's parameter list as the runtime's ``SigFormat`` prints it."""

    def __init__(self, mds: MethodDescs, md_reader, type_args: list[int], method_args: list[int]) -> None:  # type: ignore[no-untyped-def]
        self.mds = mds
        self.rts = mds.rts
        self.md = md_reader
        self.type_args = type_args
        self.method_args = method_args
        self.blob = b""
        self.pos = 0

    def _byte(self) -> int:
        if self.pos >= len(self.blob):
            raise ContractError("a method signature ends early")
        b = self.blob[self.pos]
        self.pos += 1
        return b

    def _compressed(self) -> int:
        b = self._byte()
        if b & 0x80 == 0:
            return b
        if b & 0xC0 == 0x80:
            return ((b & 0x3F) << 8) | self._byte()
        return ((b & 0x1F) << 24) | (self._byte() << 16) | (self._byte() << 8) | self._byte()

    def parameters(self, blob: bytes) -> str:
        self.blob, self.pos = blob, 0
        conv = self._byte()
        if conv & 0x10:
            self._compressed()  # generic parameter count
        count = self._compressed()
        if count > MAX_SLOTS:
            raise ContractError(f"a method signature of {count} parameters")
        self._type(0)  # the return type: parsed, not printed
        parts = [self._type(0) for _ in range(count)]
        text = ", ".join(parts)
        if conv & 0x0F == 0x05:  # varargs
            text += ", ..." if count else "..."
        return f"({text})"

    def _type(self, depth: int) -> str:
        if depth > 64:
            raise ContractError("a method signature nests too deeply")
        while True:
            et = self._byte()
            if et in SHORT_NAMES:
                return SHORT_NAMES[et]
            if et in (0x11, 0x12):  # VALUETYPE, CLASS
                return self._token_name(self._compressed())
            if et == 0x10:
                return self._type(depth + 1) + " ByRef"
            if et == 0x0F:
                return self._type(depth + 1) + "*"
            if et in (0x13, 0x1E):  # VAR, MVAR
                index = self._compressed()
                args = self.type_args if et == 0x13 else self.method_args
                return self._handle_text(args[index], depth) if index < len(args) else f"!!{index}"
            if et == 0x15:  # GENERICINST
                head = self._type(depth + 1)
                n = self._compressed()
                return head + "<" + ",".join(self._type(depth + 1) for _ in range(min(n, MAX_GENERIC_ARGS))) + ">"
            if et == 0x1D:
                return self._type(depth + 1) + "[]"
            if et == 0x14:
                head = self._type(depth + 1)
                rank = self._compressed()
                for _ in range(min(self._compressed(), 64)):
                    self._compressed()
                for _ in range(min(self._compressed(), 64)):
                    self._compressed()
                return head + "[" + "," * max(rank - 1, 0) + "]"
            if et == 0x1B:  # FNPTR
                conv = self._byte()
                n = self._compressed()
                ret = self._type(depth + 1)
                args = ", ".join(self._type(depth + 1) for _ in range(min(n, MAX_SLOTS)))
                if conv & 0x0F == 0x05:
                    args += ", ..." if n else "..."
                return f"{ret} ({args})"
            if et in (0x1F, 0x20):  # custom modifiers: skipped
                self._compressed()
                continue
            if et == 0x41:  # SENTINEL
                continue
            if et == 0x21:  # INTERNAL: a TypeHandle inline (a dynamic method's stored signature)
                size = self.mds.data.pointer_size
                raw = self.blob[self.pos:self.pos + size]
                if len(raw) != size:
                    raise ContractError("a method signature ends early")
                self.pos += size
                return self._handle_text(int.from_bytes(raw, "little"), depth + 1)
            return "**UNKNOWN TYPE**"

    def _token_name(self, coded: int) -> str:
        table, rid = coded & 3, coded >> 2
        if self.md is None or table == 2:
            return ""
        try:
            if table == 0:
                t = self.md.type_def(0x02000000 | rid)
            else:
                t = self.md.type_ref(0x01000000 | rid)
        except MetadataError as e:
            raise ContractError(f"a method signature names a bad type: {e}") from None
        return f"{t.namespace}.{t.name}" if t.namespace else t.name

    def _handle_text(self, th: int, depth: int) -> str:
        """``SigFormat::AddType``: a loaded type handle written the signature's way."""
        rts = self.rts
        if depth > 64:
            raise ContractError("a type nests too deeply")
        if not th:
            return "**UNKNOWN TYPE**"
        kind = rts.signature_element_type(th)
        if kind in SHORT_NAMES:
            return SHORT_NAMES[kind]
        if kind == 0x11 and rts.has_type_param(th):
            th = rts.type_param(th)
            kind = rts.signature_element_type(th)
        if kind in (0x11, 0x12):
            mt = rts.method_table(th)
            md = self.mds.metadata.metadata(mt.module)
            if md is None:
                raise ContractError(f"module {mt.module:#x} has no readable metadata")
            try:
                t = md.type_def(mt.typedef_token)
            except MetadataError as e:
                raise ContractError(f"type {th:#x}: {e}") from None
            text = f"{t.namespace}.{t.name}" if t.namespace else t.name
            inst = rts.instantiation(th)
            if inst:
                text += "<" + ",".join(self._handle_text(a, depth + 1) for a in inst) + ">"
            return text
        if kind == 0x10:
            return self._handle_text(rts.type_param(th), depth + 1) + " ByRef"
        if kind == 0x0F:
            return self._handle_text(rts.type_param(th), depth + 1) + "*"
        if kind in (0x13, 0x1E):
            var = rts.generic_variable(th)
            md = self.mds.metadata.metadata(var[0]) if var else None
            if md is None:
                return "**UNKNOWN TYPE**"
            try:
                return md.strings.get(md.raw_row(TableIndex.GENERIC_PARAM, var[1] & 0xFFFFFF)[3])
            except (MetadataError, IndexError) as e:
                raise ContractError(f"generic parameter: {e}") from None
        if kind == 0x1D:
            return self._handle_text(rts.type_param(th), depth + 1) + "[]"
        if kind == 0x14:
            return self._handle_text(rts.type_param(th), depth + 1) + "[" + "," * max(rts.array_rank(th) - 1, 0) + "]"
        return "**UNKNOWN TYPE**"

