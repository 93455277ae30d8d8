"""The type-system half of the contracts reader on synthetic target memory.

Structures are laid out at the offsets of a .NET 10 x64 descriptor (a subset written here),
then read back; damaged and hostile memory (cycles, huge counts, garbage headers, random
bytes) must give a one-line SosError or a bounded answer, never a hang or another exception.
tests/test_readers_types.py holds the same code to the DAC on real cores.
"""
from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sosext.contracts.descriptor import ContractDescriptor
from sosext.contracts.ecmametadata import EcmaMetadata
from sosext.contracts.loader import Loader
from sosext.contracts.objects import Objects
from sosext.contracts.runtimetypesystem import RuntimeTypeSystem
from sosext.contracts.targetdata import TargetData
from sosext.contracts.threadstatics import ThreadStatics
from sosext.contracts.typename import TypeNames, _Builder
from sosext.errors import ContractError, MemoryReadError, SosError

TYPES = {
    "MethodTable": (64, {"MTFlags": 0, "BaseSize": 4, "MTFlags2": 8, "NumVirtuals": 12, "NumInterfaces": 14,
                         "ParentMethodTable": 16, "Module": 24, "AuxiliaryData": 32, "EEClassOrCanonMT": 40,
                         "PerInstInfo": 48}),
    "EEClass": (None, {"MethodTable": 16, "FieldDescList": 24, "CorTypeAttr": 40, "InternalCorElementType": 48,
                       "NumInstanceFields": 50, "NumMethods": 52, "NumStaticFields": 54,
                       "NumThreadStaticFields": 58}),
    "Object": (None, {"m_pMethTab": 0}),
    "String": (None, {"m_FirstChar": 12, "m_StringLength": 8}),
    "Array": (16, {"m_NumComponents": 8}),
    "Module": (None, {"Base": 224, "PEAssembly": 216, "DynamicMetadata": 840, "Flags": 232,
                      "TypeDefToMethodTableMap": 416, "AvailableTypeParams": 600, "Path": 200}),
    "ModuleLookupMap": (None, {"Next": 0, "TableData": 8, "Count": 16, "SupportedFlagsMask": 24}),
    "AppDomain": (None, {"DomainAssemblyList": 576}),
    "ArrayListBase": (None, {"Count": 0, "FirstBlock": 8}),
    "ArrayListBlock": (None, {"Next": 0, "Size": 8, "ArrayStart": 16}),
    "Assembly": (None, {"Module": 16, "Level": 52}),
    "EETypeHashTable": (None, {"Buckets": 16, "Count": 24, "VolatileEntryValue": 0, "VolatileEntryNextEntry": 8}),
    "Thread": (None, {"ThreadLocalDataPtr": 568}),
    "ThreadLocalData": (None, {"NonCollectibleTlsDataCount": 0, "CollectibleTlsDataCount": 4,
                               "NonCollectibleTlsArrayData": 8, "CollectibleTlsArrayData": 16, "InFlightData": 32}),
    "InFlightTLSData": (None, {"Next": 0, "TlsIndex": 8, "TLSData": 16}),
    "TLSIndex": (None, {"TLSIndexRawIndex": 0}),
    "PEAssembly": (None, {"PEImage": 8}),
    "PEImage": (None, {"LoadedImageLayout": 128}),
    "PEImageLayout": (None, {"Flags": 20}),
}
FREE_MT_VAR, STRING_MT_VAR, OBJECT_MT_VAR, SYSTEM_DOMAIN_VAR = 0x1000, 0x1008, 0x1010, 0x1018


class Memory:
    """A sparse little-endian address space; unwritten bytes cannot be read."""

    pointer_size = 8

    def __init__(self) -> None:
        self.bytes: dict[int, int] = {}

    def put(self, address: int, data: bytes) -> None:
        for i, b in enumerate(data):
            self.bytes[address + i] = b

    def ptr(self, address: int, value: int) -> None:
        self.put(address, struct.pack("<Q", value))

    def u32(self, address: int, value: int) -> None:
        self.put(address, struct.pack("<I", value))

    def u16(self, address: int, value: int) -> None:
        self.put(address, struct.pack("<H", value))

    def read(self, address: int, size: int) -> bytes:
        try:
            return bytes(self.bytes[address + i] for i in range(size))
        except KeyError:
            raise MemoryReadError(address, size) from None

    def read_partial(self, address: int, size: int) -> bytes:
        out = bytearray()
        for i in range(size):
            if address + i not in self.bytes:
                break
            out.append(self.bytes[address + i])
        return bytes(out)


def make_target(mem: Memory | None = None) -> tuple[Memory, TargetData]:
    mem = mem or Memory()
    desc = ContractDescriptor(pointer_size=8, types=dict(TYPES), globals={
        "FreeObjectMethodTable": FREE_MT_VAR, "StringMethodTable": STRING_MT_VAR,
        "ObjectMethodTable": OBJECT_MT_VAR, "SystemDomain": SYSTEM_DOMAIN_VAR, "ObjectHeaderSize": 8, "ObjectToMethodTableUnmask": 7,
        "NumberOfTlsOffsetsNotUsedInNoncollectibleArray": 2, "PtrArrayOffsetToDataArray": 16})
    for var in (FREE_MT_VAR, STRING_MT_VAR, OBJECT_MT_VAR, SYSTEM_DOMAIN_VAR):
        mem.ptr(var, 0)
    return mem, TargetData(mem, desc)  # type: ignore[arg-type]


def method_table(mem: Memory, mt: int, eeclass: int, flags: int = 0, flags2: int = 0x1A00, base_size: int = 24,
                 back: int | None = None) -> None:
    mem.put(mt, bytes(64))
    mem.u32(mt, flags)
    mem.u32(mt + 4, base_size)
    mem.u32(mt + 8, flags2)
    mem.ptr(mt + 24, 0x9000)  # module
    mem.ptr(mt + 40, eeclass)
    mem.put(eeclass, bytes(64))
    mem.ptr(eeclass + 16, mt if back is None else back)
    mem.u16(eeclass + 52, 5)
    mem.u32(eeclass + 40, 0x100101)


def test_method_table_data_and_validation() -> None:
    mem, data = make_target()
    method_table(mem, 0x10000, 0x20000, flags=0x01000000)
    rts = RuntimeTypeSystem(data, EcmaMetadata(data))
    d = rts.method_table_data(0x10000)
    assert (d.token, d.num_methods, d.attr_class, d.contains_pointers, d.klass) == (0x0200001A, 5, 0x100101, 1, 0x10000)
    assert d.num_vtable_slots == d.num_virtuals == 0  # the DAC's .NET 9+ answer
    # An EEClass that points elsewhere: not a MethodTable; unreadable or misaligned: neither.
    method_table(mem, 0x30000, 0x40000, back=0x50000)
    assert not rts.is_valid(0x30000)
    assert not rts.is_valid(0x30004) and not rts.is_valid(0x70000)
    with pytest.raises(ContractError):
        rts.method_table_data(0x30000)


def test_field_desc_bits() -> None:
    mem, data = make_target()
    method_table(mem, 0x10000, 0x20000)
    rts = RuntimeTypeSystem(data, EcmaMetadata(data))
    fd = 0x60000
    mem.ptr(fd, 0x10000)
    # mb 0x12345 with a name hash in the high bits (packed), static, thread-local; offset 0x40, type I4.
    mem.u32(fd + 8, 0xFE12345 & 0xFFFFFF | 1 << 24 | 1 << 25)
    mem.u32(fd + 12, 0x40 | 8 << 27)
    r = rts.field_desc_data(fd, lambda *_: (8, 0, 0x9000, 0x02000000))
    assert (r.token, r.is_static, r.is_thread_local, r.offset, r.type, r.next_field) == (
        0x04000000 | 0x12345 & 0x1FFFF, 1, 1, 0x40, 8, fd + 16)
    mem.u32(fd + 8, 0x345678 | 1 << 30)  # requiresFullMbValue: all 24 bits
    assert rts.field_desc_data(fd, lambda *_: (8, 0, 0, 0)).token == 0x04345678


def test_type_name_builder() -> None:
    b = _Builder()
    b.add_name("List`1", "System.Collections.Generic")
    b.open_args()
    b.open_arg()
    b.add_name("Inner,Odd[]", "N")
    b.add_assembly("lib]x")
    b.close_arg()
    b.open_arg()
    b.add_name("T")  # a generic variable: no assembly, its bracket goes
    b.close_arg()
    b.close_args()
    b.add_qualifier(0x1D, 1)
    assert b.text() == "System.Collections.Generic.List`1[[N.Inner\\,Odd\\[\\], lib\\]x],T][]"
    # Out of order: an error state that adds nothing more.
    b2 = _Builder()
    b2.close_args()
    b2.add_name("X")
    assert b2.text() == ""


@given(st.lists(st.tuples(st.sampled_from(["name", "open", "arg", "close_arg", "close", "asm", "q"]),
                          st.text(max_size=5)), max_size=40))
def test_type_name_builder_never_fails(ops: list[tuple[str, str]]) -> None:
    b = _Builder()
    for op, text in ops:
        {"name": lambda: b.add_name(text, text), "open": b.open_args, "arg": b.open_arg,
         "close_arg": lambda: b.close_arg() if b.arg_starts else None, "close": b.close_args,
         "asm": lambda: b.add_assembly(text), "q": lambda: b.add_qualifier(0x14, len(text))}[op]()
    assert isinstance(b.text(), str)


def test_lookup_map_cycle_and_huge_count_are_bounded() -> None:
    mem, data = make_target()
    loader = Loader(data, EcmaMetadata(data))
    module = 0x80000
    seg = module + 416
    mem.put(module, bytes(1024))
    mem.ptr(seg + 0, seg)  # Next: itself
    mem.ptr(seg + 8, 0xA0000)
    mem.u32(seg + 16, 2)
    mem.ptr(seg + 24, 1)
    mem.ptr(0xA0000, 0)
    mem.ptr(0xA0008, 0xBEEF1)  # flag bit masked off
    assert loader.lookup(module, "TypeDefToMethodTableMap", 1) == 0xBEEF0
    with pytest.raises(ContractError):
        loader.lookup(module, "TypeDefToMethodTableMap", 100_000)  # the cycle: at most 4096 segments
    mem.u32(seg + 16, 1 << 30)
    with pytest.raises(ContractError):
        loader.map_entries(module, "TypeDefToMethodTableMap")


def test_assembly_list_and_type_hash_are_bounded() -> None:
    mem, data = make_target()
    loader = Loader(data, EcmaMetadata(data))
    domain = 0xC0000
    mem.put(domain, bytes(1024))
    lst = domain + 576
    mem.u32(lst, 3)
    block = lst + 8
    mem.ptr(block, block)  # Next: itself, one element per block: stops at the count
    mem.u32(block + 8, 1)
    mem.ptr(block + 16, 0xD0000)
    mem.ptr(0xD0000, 0xD1000)  # DomainAssembly -> Assembly
    mem.put(0xD1000, bytes(64))
    mem.u32(0xD1000 + 52, 4)
    assert loader.assembly_list(domain) == [0xD1000] * 3
    mem.u32(lst, 1 << 30)
    with pytest.raises(ContractError):
        loader.assembly_list(domain)
    # A type hash whose chain loops: the limit stops it.
    module = 0xE0000
    mem.put(module, bytes(1024))
    mem.ptr(module + 600, 0xE8000)
    mem.ptr(0xE8000 + 16, 0xE9000)
    mem.ptr(0xE9000, 1)  # one bucket
    mem.ptr(0xE9018, 0xEA000)
    mem.ptr(0xEA000, 0x12345)
    mem.ptr(0xEA008, 0xEA000)
    with pytest.raises(ContractError):
        loader.available_type_params(module, limit=100)


def test_thread_static_index_kinds() -> None:
    mem, data = make_target()
    ts = ThreadStatics(data)
    thread, tld, index = 0x100000, 0x110000, 0x120000
    mem.ptr(thread + 568, tld)
    mem.put(tld, bytes(40))
    mem.u32(tld, 5)  # non-collectible count
    mem.ptr(tld + 8, 0x130000)
    mem.ptr(0x130000 + 16 + 8 * (4 - 2), 0xABC0)
    mem.u32(index, 4)
    assert ts.static_base(thread, index) == 0xABC0
    mem.u32(index, 2 << 24 | 0x30)
    assert ts.static_base(thread, index) == tld + 0x30
    mem.u32(index, 0xFFFFFFFF)
    assert ts.static_base(thread, index) == 0
    mem.u32(index, 9)  # beyond the count, not in flight
    assert ts.static_base(thread, index) == 0
    mem.u32(index, 7 << 24)
    with pytest.raises(ContractError):
        ts.static_base(thread, index)


def test_strings_and_objects() -> None:
    mem, data = make_target()
    method_table(mem, 0x10000, 0x20000, flags=0x80000000 | 2, base_size=22)
    mem.ptr(STRING_MT_VAR, 0x10000)
    objs = Objects(data, RuntimeTypeSystem(data, EcmaMetadata(data)), None)  # type: ignore[arg-type]
    s = 0x200000
    mem.ptr(s, 0x10000)
    mem.u32(s + 8, 2)
    mem.put(s + 12, "hé".encode("utf-16-le"))
    assert objs.string_value(s) == "hé"
    od = objs.object_data(s)
    assert (od.object_type, od.size, od.component_size) == (0, 22 + 4, 2)
    mem.u32(s + 8, 0xFFFFFFFF)
    with pytest.raises(ContractError):
        objs.string_value(s)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(min_size=0, max_size=0x400), st.integers(0, 0xFFFFFFFF))
def test_metadata_location_of_garbage_images(image: bytes, flags: int) -> None:
    mem, data = make_target()
    module = 0x300000
    mem.put(module, bytes(1024))
    mem.ptr(module + 224, 0x400000)
    mem.ptr(module + 216, 0x310000)
    mem.ptr(0x310000 + 8, 0x320000)
    mem.ptr(0x320000 + 128, 0x330000)
    mem.u32(0x330000 + 20, flags)
    mem.put(0x400000, image)
    md = EcmaMetadata(data)
    try:
        start, size = md.read_only_metadata(module)
    except SosError:
        return
    assert size == 0 or 16 <= size
    assert md.metadata(module) is None or start


@settings(max_examples=200)
@given(st.binary(min_size=64, max_size=64), st.binary(min_size=64, max_size=64))
def test_type_names_of_random_method_tables(mt_bytes: bytes, class_bytes: bytes) -> None:
    mem, data = make_target()
    mem.put(0x10000, mt_bytes)
    mem.put(0x20000, class_bytes)
    rts = RuntimeTypeSystem(data, EcmaMetadata(data))
    names = TypeNames(rts, rts.metadata)
    for call in (lambda: rts.method_table_data(0x10000), lambda: names.method_table_name(0x10000)):
        try:
            call()
        except SosError:
            pass


def _method_descs(mem: Memory):  # type: ignore[no-untyped-def]
    from sosext.contracts.loader import Loader
    from sosext.contracts.methoddescs import MethodDescs
    _, data = make_target(mem)
    data.desc.types.update({
        "MethodDesc": (16, {"Flags3AndTokenRemainder": 0, "ChunkIndex": 2, "Slot": 4, "Flags": 6, "CodeData": 8}),
        "MethodDescChunk": (24, {"MethodTable": 0, "Next": 8, "Size": 16, "Count": 17, "FlagsAndTokenRange": 18}),
        "NonVtableSlot": (8, {}), "MethodImpl": (16, {}), "NativeCodeSlot": (8, {}),
    })
    data.desc.globals.update({"MethodDescAlignment": 8, "MethodDescTokenRemainderBitCount": 12})
    rts = RuntimeTypeSystem(data, EcmaMetadata(data))
    return MethodDescs(rts, Loader(data, rts.metadata), rts.metadata, TypeNames(rts, rts.metadata))


def test_method_desc_token_slot_and_native_code_slot() -> None:
    mem = Memory()
    method_table(mem, 0x10000, 0x20000)
    chunk = 0x70000
    mem.put(chunk, bytes(24 + 64))
    mem.ptr(chunk, 0x10000)
    mem.put(chunk + 16, bytes([7, 1]))  # 8 units of 8 bytes, two MethodDescs
    mem.u16(chunk + 18, 0x012)  # token range: the RID's high 12 bits
    md = chunk + 24 + 8 * 3  # ChunkIndex 3
    mem.put(md, bytes([0x45, 0x03, 3, 0]))  # remainder 0x345
    mem.u16(md + 4, 7)
    mem.u16(md + 6, 0x0020 | 0x0008)  # IL, a non-vtable slot then a native code slot
    mem.ptr(md + 16, 0xAAA0)  # non-vtable slot
    mem.ptr(md + 24, 0xC0DE)  # native code slot
    mds = _method_descs(mem)
    m = mds.method_desc(md)
    assert (m.token, m.slot, m.method_table) == (0x06012345, 7, 0x10000)
    assert mds.native_code_slot_address(m) == md + 24 and mds.default_native_code(m) == 0xC0DE
    assert mds.entry_point_if_exists(m) == 0xAAA0 and mds.size(m) == 32
    with pytest.raises(ContractError):
        mds.method_desc(md + 4)  # misaligned
    mem.put(md + 2, bytes([9]))  # an index past its chunk
    mds2 = _method_descs(mem)
    with pytest.raises(SosError):  # its "chunk" is elsewhere: unreadable, or names no MethodTable
        mds2.method_desc(md)


def test_signature_text_of_primitives_and_shapes() -> None:
    from sosext.contracts.methoddescs import SigText
    mds = _method_descs(Memory())
    text = SigText(mds, None, [], [])
    # HASTHIS DEFAULT, 5 params, returns void: int32, string&, int32[], int32[,], object*, !!0
    sig = bytes([0x20, 6, 0x01, 0x08, 0x10, 0x0E, 0x1D, 0x08, 0x14, 0x08, 2, 0, 0, 0x0F, 0x1C, 0x1E, 0])
    assert text.parameters(sig) == "(Int32, System.String ByRef, Int32[], Int32[,], System.Object*, !!0)"
    assert text.parameters(bytes([0x05, 1, 0x01, 0x08])) == "(Int32, ...)"  # varargs


@settings(max_examples=300)
@given(st.binary(max_size=64))
def test_signature_text_of_random_bytes(sig: bytes) -> None:
    from sosext.contracts.methoddescs import SigText
    mds = _method_descs(Memory())
    try:
        assert isinstance(SigText(mds, None, [], []).parameters(sig), str)
    except SosError:
        pass
