"""The ExecutionManager contract: which managed method holds a code address, where its code
starts, and where its unwind info (RUNTIME_FUNCTION) and GC info are.

Specified in dotnet/runtime docs/design/datacontracts/ExecutionManager.md (versions 1 and 2
differ only in the nibble map). Three steps, each bounded here:

1. The range section map: a 5-level radix tree over address bits 56..17 (8 bits a level; the
   interior pointers carry a flag in bit 0), whose leaves point to a list of range section
   fragments; the fragment that contains the address names its RangeSection.
2. A RangeSection either belongs to a ReadyToRun image (``R2RModule`` set: the image's sorted
   RUNTIME_FUNCTION table, and a hash map from entry points to MethodDescs) or is a code heap
   of the JIT (flag 2: a nibble map finds the start of the method, preceded by a pointer to
   its RealCodeHeader: MethodDesc, GC info, unwind infos).
3. Unwind infos are relative to the RangeSection's start (the image base or the code heap).

Version 2's nibble map also stores, in each 32-bit unit that a method covers entirely, a
relative pointer to the method's start (the unit's low nibble 9..12), so a lookup reads at
most two units.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ContractError, SosError
from .targetdata import TargetData

_MAP_LEVELS, _BITS_PER_LEVEL, _MAX_SET_BIT = 5, 8, 56
_CODE_HEAP, _RANGE_LIST = 0x02, 0x04
_MAX_FRAGMENTS = 1024           # fragments listed under one 128 KiB chunk
_MAX_RUNTIME_FUNCTIONS = 1 << 24
_HASH_EMPTY, _HASH_DELETED, _HASH_INVALID = 0, 1, 0xFFFFFFFF
_MAX_PROBES = 1024
# Nibble map (NibbleMapHelpers): 32-byte buckets, 8 nibbles in a 32-bit unit, 4-byte aligned code.
_BUCKET, _UNIT_NIBBLES = 32, 8


@dataclass(frozen=True, slots=True)
class CodeBlock:
    """A managed method's code around an address (EECodeInfo's parts that unwinding needs)."""

    start: int              # first instruction of the method (of its hot part)
    method_desc: int
    relative_offset: int    # the address minus ``start``
    unwind_base: int        # what RUNTIME_FUNCTION offsets are relative to
    runtime_function: int   # address of the RUNTIME_FUNCTION covering the address (0: none)
    ready_to_run: bool      # precompiled (R2R image) rather than JIT-compiled
    gc_info: int = 0        # the method's GC info (RealCodeHeader's, or after an R2R unwind info)
    code_header: int = 0    # a JIT-compiled method's RealCodeHeader
    funclet: bool = False   # the address is in a funclet (an EH handler), not the method's main body


class ExecutionManager:
    """Code address → method, through the runtime's range section map (see the module doc)."""

    def __init__(self, data: TargetData) -> None:
        if data.pointer_size != 8:
            raise ContractError("the ExecutionManager contract is read for 64-bit targets only")
        self.data = data
        self.version = data.desc.contract_version("ExecutionManager") or 0
        if self.version not in (1, 2):
            raise ContractError(f"ExecutionManager contract version {self.version} is not supported")
        self.top = data.global_value("ExecutionManagerCodeRangeMapAddress")
        self.stub_code_block_last = data.global_value("StubCodeBlockLast")
        self.rf_size = data.size("RuntimeFunction")
        self._slots = data.global_value("HashMapSlotsPerBucket")
        self._value_mask = data.global_value("HashMapValueMask")

    # -- step 1: the range section -----------------------------------------------------------

    def range_section(self, ip: int) -> int:
        """The RangeSection holding ``ip``; 0 when no managed code is there."""
        d = self.data
        level_map = self.top
        used = ip >> (_MAX_SET_BIT + 1 - _MAP_LEVELS * _BITS_PER_LEVEL)
        for level in range(_MAP_LEVELS, 1, -1):
            index = (used >> ((level - 1) * _BITS_PER_LEVEL)) & 0xFF
            level_map = d.pointer(level_map + 8 * index) & ~1
            if not level_map:
                return 0
        # A fragment pointer (the leaf's and each Next) carries bit 0 when the fragment's section
        # is collectible (RangeSectionFragmentPointer): the host code heap of dynamic methods.
        fragment = d.pointer(level_map + 8 * (used & 0xFF)) & ~1
        for _ in range(_MAX_FRAGMENTS):
            if not fragment:
                return 0
            begin = d.field_pointer(fragment, "RangeSectionFragment", "RangeBegin")
            end = d.field_pointer(fragment, "RangeSectionFragment", "RangeEndOpen")
            if begin <= ip < end:
                section = d.field_pointer(fragment, "RangeSectionFragment", "RangeSection")
                # A section on its way to deletion holds no live code.
                return 0 if d.field_pointer(section, "RangeSection", "NextForDelete") else section
            fragment = d.field_pointer(fragment, "RangeSectionFragment", "Next") & ~1
        raise ContractError(f"the range section list of {ip:#x} does not end")

    # -- step 2: the method ------------------------------------------------------------------

    def code_block(self, ip: int) -> CodeBlock | None:
        """The managed method whose code holds ``ip``; None for native code and stubs."""
        d = self.data
        section = self.range_section(ip)
        if not section:
            return None
        base = d.field_pointer(section, "RangeSection", "RangeBegin")
        if d.field_pointer(section, "RangeSection", "R2RModule"):
            return self._ready_to_run(section, base, ip)
        flags = d.field_i32(section, "RangeSection", "Flags")
        if flags & _CODE_HEAP and not flags & _RANGE_LIST:
            return self._jitted(section, base, ip)
        return None

    def is_code_of_no_method(self, ip: int) -> bool:
        """Whether ``ip`` lies in managed code (a code heap or an R2R image) that names no
        method: R2R code whose entry point the image's map does not hold yet, or whose
        lookup tables the dump left out (a heap dump without the image). The DAC answers
        no MethodDesc for such an entry point rather than looking at the stubs."""
        section = self.range_section(ip)
        if not section:
            return False
        d = self.data
        flags = d.field_i32(section, "RangeSection", "Flags")
        managed = d.field_pointer(section, "RangeSection", "R2RModule") or \
            (flags & _CODE_HEAP and not flags & _RANGE_LIST)
        if not managed:
            return False
        try:
            return self.code_block(ip) is None
        except SosError:  # the image's tables are not in the dump: the DAC finds no method either
            return True

    def _jitted(self, section: int, base: int, ip: int) -> CodeBlock | None:
        d = self.data
        heap = d.field_pointer(section, "RangeSection", "HeapList")
        if not heap or ip < d.field_pointer(heap, "CodeHeapListNode", "StartAddress"):
            return None
        start = self._find_method_code(d.field_pointer(heap, "CodeHeapListNode", "MapBase"),
                                       d.field_pointer(heap, "CodeHeapListNode", "HeaderMap"), ip)
        if not start:
            return None
        header = d.pointer(start - 8)
        if header <= self.stub_code_block_last:
            return None  # a stub's code block, not a method
        md = d.field_pointer(header, "RealCodeHeader", "MethodDesc")
        count = d.field_u32(header, "RealCodeHeader", "NumUnwindInfos")
        table = header + d.offset("RealCodeHeader", "UnwindInfos")
        rf = self._runtime_function(table, count, ip - base)
        return CodeBlock(start, md, ip - start, base, table + rf * self.rf_size if rf is not None else 0, False,
                         d.field_pointer(header, "RealCodeHeader", "GCInfo"), header, bool(rf))

    def _find_method_code(self, map_base: int, map_start: int, ip: int) -> int:
        """The nibble map lookup (linear in version 1, with version 2's relative pointers)."""
        d = self.data
        relative = ip - map_base
        index = relative // _BUCKET
        nibble_here = (relative & (_BUCKET - 1)) // 4 + 1

        def unit(i: int) -> int:
            return d.u32(map_start + (i // _UNIT_NIBBLES) * 4)

        def absolute(i: int, nibble: int) -> int:
            return map_base + i * _BUCKET + (nibble - 1) * 4

        def pointer_in(value: int) -> int | None:
            if self.version >= 2 and value & 0xF > 8:
                return map_base + (value & ~0xF) + (((value & 0xF) - 9) << 2)
            return None

        value = unit(index)
        if (p := pointer_in(value)) is not None:
            return p
        value >>= 28 - (index & (_UNIT_NIBBLES - 1)) * 4
        if value & 0xF and value & 0xF <= nibble_here:
            return absolute(index, value & 0xF)
        value >>= 4
        if value:
            index -= 1
            while not value & 0xF:
                value >>= 4
                index -= 1
            return absolute(index, value & 0xF)
        # The rest of this unit is empty: look in earlier units (version 2 needs only one).
        limit = 1 if self.version >= 2 else 1 << 20
        index = (index & ~(_UNIT_NIBBLES - 1)) - 1
        for _ in range(limit):
            if index < 0:
                return 0
            value = unit(index)
            if value:
                if (p := pointer_in(value)) is not None:
                    return p
                while index and not value & 0xF:
                    value >>= 4
                    index -= 1
                return absolute(index, value & 0xF) if value & 0xF else 0
            index -= _UNIT_NIBBLES
        return 0

    def _ready_to_run(self, section: int, base: int, ip: int) -> CodeBlock | None:
        d = self.data
        module = d.field_pointer(section, "RangeSection", "R2RModule")
        info = d.field_pointer(module, "Module", "ReadyToRunInfo")
        if not info:
            return None
        thunks = d.field_pointer(info, "ReadyToRunInfo", "DelayLoadMethodCallThunks")
        if thunks:
            rva = ip - base
            va = d.field_u32(thunks, "ImageDataDirectory", "VirtualAddress")
            if va <= rva < va + d.field_u32(thunks, "ImageDataDirectory", "Size"):
                return None  # a delay-load thunk
        table = d.field_pointer(info, "ReadyToRunInfo", "RuntimeFunctions")
        count = d.field_u32(info, "ReadyToRunInfo", "NumRuntimeFunctions")
        index = self._runtime_function(table, count, ip - base)
        if index is None:
            return None
        covering = index
        # Funclets have no entry in the map: the method's own entry comes before them.
        # (Hot/cold splitting, which crossgen does not do by default, is not handled.)
        entries = info + d.offset("ReadyToRunInfo", "EntryPointToMethodDescMap")  # a HashMap inside
        for _ in range(4096):
            begin = d.u32(table + index * self.rf_size)
            md = self._hash_lookup(entries, base + begin)
            if md or index == 0:
                break
            index -= 1
        else:
            return None
        if not md:
            return None
        start = base + d.u32(table + index * self.rf_size)
        # An R2R method's GC info follows its unwind info.
        unwind_rva = d.field_u32(table + index * self.rf_size, "RuntimeFunction", "UnwindData")
        gc_info = base + unwind_rva + self.unwind_data_size(base + unwind_rva) if not unwind_rva & 3 else 0
        return CodeBlock(start, md, ip - start, base, table + covering * self.rf_size, True, gc_info,
                         funclet=covering != index)

    def ready_to_run_debug_info(self, block: CodeBlock) -> int:
        """Where an R2R method's debug info is (ReadyToRunInfo::GetDebugInfo): the image's
        DebugInfo section (READYTORUN_HEADER's section list, type 105) is a NativeArray indexed
        by the method's RUNTIME_FUNCTION; an entry is an offset, or a look-back to a shared
        blob. 0 when the image has none for it."""
        d = self.data
        section = self.range_section(block.start)
        module = d.field_pointer(section, "RangeSection", "R2RModule") if section else 0
        info = d.field_pointer(module, "Module", "ReadyToRunInfo") if module else 0
        if not info:
            return 0
        composite = d.field_pointer(info, "ReadyToRunInfo", "CompositeInfo") or info
        header = d.field_pointer(composite, "ReadyToRunInfo", "ReadyToRunHeader")
        base = block.unwind_base
        directory = None
        count = d.u32(header + _R2R_SECTION_COUNT)
        if count > _MAX_R2R_SECTIONS:
            raise ContractError(f"a ReadyToRun header claims {count} sections")
        for i in range(count):
            entry = header + _R2R_SECTIONS + i * _R2R_SECTION_SIZE
            if d.u32(entry) == _R2R_DEBUG_INFO:
                directory = d.u32(entry + 4)
                break
        if directory is None:
            return 0
        table = d.field_pointer(info, "ReadyToRunInfo", "RuntimeFunctions")
        index = self._runtime_function(table, d.field_u32(info, "ReadyToRunInfo", "NumRuntimeFunctions"),
                                       block.start - base)
        if index is None:
            return 0
        offset = _native_array_at(lambda at: d.u8(base + at), directory, index)
        if offset is None:
            return 0
        after, look_back = _decode_unsigned(lambda at: d.u8(base + at), offset)
        return base + (offset - look_back if look_back else after)

    def unwind_data_size(self, xdata: int) -> int:
        """Bytes of a method's unwind data in an R2R image, which its GC info follows
        (GetUnwindDataBlob): on x86-64 the UNWIND_INFO header, its 16-bit code slots and the
        personality routine's 32 bits, rounded up to 4 bytes; on arm64 the .xdata record
        (header, extension word, epilog scopes, unwind code words, the handler word)."""
        d = self.data
        if d.has("RuntimeFunction", "EndAddress"):  # x64's RUNTIME_FUNCTION; arm64's has none
            return (4 + 2 * d.u8(xdata + 2) + 4 + 3) & ~3
        header = d.u32(xdata)
        size = 4
        code_words, epilogs = header >> 27, (header >> 22) & 0x1F
        if not code_words and not epilogs:
            extension = d.u32(xdata + 4)
            size += 4
            code_words, epilogs = (extension >> 16) & 0xFF, extension & 0xFFFF
        if not header & (1 << 21):
            size += 4 * epilogs
        return size + 4 * code_words + 4

    def _runtime_function(self, table: int, count: int, rva: int) -> int | None:
        """Index of the RUNTIME_FUNCTION (sorted by BeginAddress) covering ``rva``, searched
        as the runtime searches (NativeUnwindInfoLookupTable::LookupUnwindInfoForMethod:
        halve the range while it spans more than 10 entries, then scan it). The same entries
        are read: a heap dump holds the table's pages the runtime's own search touched."""
        if not 0 < count <= _MAX_RUNTIME_FUNCTIONS:
            return None

        def begin(i: int) -> int:
            return self.data.u32(table + i * self.rf_size)

        low, high = 0, count - 1
        while high - low > 10:
            middle = low + (high - low) // 2
            if rva < begin(middle):
                high = middle - 1
            else:
                low = middle
        for i in range(low, high + 1):
            if i < count - 1 and rva >= begin(i + 1):
                continue
            return i if rva >= begin(i) else None
        return None

    def _hash_lookup(self, hash_map: int, key: int) -> int:
        """PtrHashMap lookup (vm/hash.h): double hashing over buckets of HashMapSlotsPerBucket
        keys and values; a value's top bit marks a collision; PtrHashMap stores values >> 1."""
        d = self.data
        if key <= _HASH_DELETED:
            key += 100
        buckets = d.field_pointer(hash_map, "HashMap", "Buckets")
        size = d.u32(buckets)  # the first bucket slot holds the bucket count
        if not 1 < size <= 1 << 26:
            return 0
        seed = (key >> 2) & 0xFFFFFFFF
        increment = 1 + (((key >> 5) & 0xFFFFFFFF) + 1) % (size - 1)
        bucket_size = d.size("Bucket")
        keys_at, values_at = d.offset("Bucket", "Keys"), d.offset("Bucket", "Values")
        first = buckets + bucket_size
        for _ in range(min(size, _MAX_PROBES)):  # real probe sequences are short
            bucket = first + bucket_size * (seed % size)
            for slot in range(self._slots):
                if d.pointer(bucket + keys_at + 8 * slot) == key:
                    value = d.pointer(bucket + values_at + 8 * slot) & self._value_mask
                    return 0 if value == _HASH_INVALID else value << 1
            if not d.pointer(bucket + values_at) & ~self._value_mask & 0xFFFFFFFFFFFFFFFF:
                return 0  # no collision: the key is not there
            seed = (seed + increment) & 0xFFFFFFFF
        return 0


# READYTORUN_HEADER: Signature, MajorVersion, MinorVersion, Flags, NumberOfSections, then
# READYTORUN_SECTIONs of (Type, RVA, Size).
_R2R_SECTION_COUNT, _R2R_SECTIONS, _R2R_SECTION_SIZE = 12, 16, 12
_R2R_DEBUG_INFO = 105  # ReadyToRunSectionType::DebugInfo
_MAX_R2R_SECTIONS = 256
_NATIVE_ARRAY_BLOCK = 16  # NativeArray::_blockSize


def _decode_unsigned(u8, offset: int) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """NativeReader::DecodeUnsigned: (the offset after the value, the value); the low bits of
    the first byte tell how many bytes follow."""
    first = u8(offset)
    if not first & 1:
        return offset + 1, first >> 1
    if not first & 2:
        return offset + 2, first >> 2 | u8(offset + 1) << 6
    if not first & 4:
        return offset + 3, first >> 3 | u8(offset + 1) << 5 | u8(offset + 2) << 13
    if not first & 8:
        return offset + 4, first >> 4 | u8(offset + 1) << 4 | u8(offset + 2) << 12 | u8(offset + 3) << 20
    if not first & 16:
        return offset + 5, int.from_bytes(bytes(u8(offset + i) for i in range(1, 5)), "little")
    raise ContractError("a ReadyToRun image holds a malformed number")


def _native_array_at(u8, offset: int, index: int) -> int | None:  # type: ignore[no-untyped-def]
    """NativeArray::TryGetAt: the offset of element ``index`` of the NativeArray at ``offset``
    (a header of base offset, count and index entry size, then per block of 16 a root offset
    into a small tree whose nodes say where the left and right halves are); None if absent."""
    base, header = _decode_unsigned(u8, offset)
    count, entry_size = header >> 2, header & 3
    if index >= count:
        return None
    width = 1 << entry_size if entry_size < 3 else 4
    at = base + width * (index // _NATIVE_ARRAY_BLOCK)
    node = base + int.from_bytes(bytes(u8(at + i) for i in range(width)), "little")
    bit = _NATIVE_ARRAY_BLOCK >> 1
    while bit:
        after, value = _decode_unsigned(u8, node)
        if index & bit:
            if value & 2:
                node += value >> 2
                bit >>= 1
                continue
        elif value & 1:
            node = after
            bit >>= 1
            continue
        if not value & 3 and value >> 2 == index & (_NATIVE_ARRAY_BLOCK - 1):
            return after  # a leaf that names this index
        return None
    return node

