"""sosext.clr.addresses on a synthetic runtime: the order of the checks, fuzzed.

The property that matters is which addresses reach the DAC: a MethodTable query only for
an address whose raw header names a known module, a MethodDesc query only for an address
that is none of heap / domain / assembly / module / stack / MethodTable / EEClass and whose
MethodDescChunk (by its index byte) names a MethodTable, and nothing else at all. A fake runtime (memory, heap, module lists, a DAC that records its calls) lets
hypothesis throw arbitrary addresses at the classifier. The real-process counterpart is
tests/test_fuzz_addresses.py.
"""
from __future__ import annotations

from types import SimpleNamespace as NS

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sosext.clr.addresses import AddressClassifier, AddressKind

MODULE, OTHER_MODULE = 0x7F0000001000, 0x7F0000002000
DOMAIN, ASSEMBLY = 0x550000000000, 0x550000001000
STRING_MT, OBJECT_MT, ITEM_MT, FREE_MT = 0x7F0000010000, 0x7F0000010100, 0x7F0000010200, 0x7F0000010400
LOOKALIKE = 0x7F0000010300  # readable, but its module word is not a module
METHOD_DESC = 0x7F0000020000
SEGMENT = (0x7E0000000000, 0x7E0000000100)
ALLOC_CONTEXT = (0x7E0000000060, 0x7E0000000080)
STACK = (0x7FFD00000000, 0x7FFD00010000)
MODULE_OFFSET = 24  # where the fake MethodTables keep their module, as the real ones do
MTS = {STRING_MT, OBJECT_MT, ITEM_MT, FREE_MT}
# Heap objects: (address, MethodTable, size); the allocation context follows them.
OBJECTS = [(0x7E0000000000, ITEM_MT, 24), (0x7E0000000018, FREE_MT, 40), (0x7E0000000040, ITEM_MT, 32)]


class Memory:
    def __init__(self) -> None:
        self.regions: dict[int, bytearray] = {}

    def map(self, start: int, size: int) -> bytearray:
        self.regions[start] = bytearray(size)
        return self.regions[start]

    def put(self, address: int, value: int) -> None:
        for start, buf in self.regions.items():
            if start <= address < start + len(buf):
                buf[address - start:address - start + 8] = value.to_bytes(8, "little")
                return
        raise AssertionError(f"{address:x} is not mapped")

    def read_partial(self, address: int, size: int) -> bytes:
        for start, buf in self.regions.items():
            if start <= address < start + len(buf):
                return bytes(buf[address - start:address - start + size])
        return b""


class Dac:
    def __init__(self) -> None:
        self.mt_calls: list[int] = []
        self.md_calls: list[int] = []

    def method_table_data(self, mt: int):  # type: ignore[no-untyped-def]
        self.mt_calls.append(mt)
        if mt not in MTS:
            return None
        return NS(module=MODULE, base_size=24, component_size=0)

    def method_desc_data(self, md: int):  # type: ignore[no-untyped-def]
        self.md_calls.append(md)
        return NS(module_ptr=MODULE, method_table_ptr=ITEM_MT) if md == METHOD_DESC else None

    def method_desc_name(self, md: int) -> str:
        return "Item.Run()"

    def threads(self):  # type: ignore[no-untyped-def]
        return [(0x1000, NS(os_thread_id=0x2A))]

    def stack_limits(self, thread: int) -> tuple[int, int]:
        return STACK[1], STACK[0]  # (base, limit), as the DAC answers


class Index:
    addresses = np.array([a for a, _m, _s in OBJECTS], dtype=np.uint64)
    method_tables = np.array(sorted({m for _a, m, _s in OBJECTS}), dtype=np.uint64)
    type_ids = np.searchsorted(method_tables, np.array([m for _a, m, _s in OBJECTS], dtype=np.uint64))
    sizes = np.array([s for _a, _m, s in OBJECTS], dtype=np.uint64)

    def method_table_at(self, i: int) -> int:
        return int(self.method_tables[self.type_ids[i]])

    def containing(self, address: int) -> int | None:
        for i, (a, _m, s) in enumerate(OBJECTS):
            if a <= address < a + s:
                return i
        return None


class Types:
    def get(self, mt: int):  # type: ignore[no-untyped-def]
        return NS(base_size=24, component_size=0, canonical=mt) if mt in MTS else None

    def name_of(self, mt: int) -> str:
        return {ITEM_MT: "Item", FREE_MT: "Free", STRING_MT: "System.String"}.get(mt, "?")


class Heap:
    free_mt, string_mt, object_mt, array_mt, exception_mt = FREE_MT, STRING_MT, OBJECT_MT, 0, 0
    alloc_contexts = [ALLOC_CONTEXT]
    types = Types()

    def segment_of(self, address: int):  # type: ignore[no-untyped-def]
        return NS(start=SEGMENT[0], end=ALLOC_CONTEXT[0]) if SEGMENT[0] <= address < SEGMENT[1] else None

    def index(self) -> Index:
        return Index()


def runtime() -> NS:
    mem = Memory()
    for start, size in ((MODULE, 0x100), (OTHER_MODULE, 0x100), (DOMAIN, 0x100), (ASSEMBLY, 0x100),
                        (0x7F0000010000, 0x500), (METHOD_DESC - 0x18, 0x58), (SEGMENT[0], SEGMENT[1] - SEGMENT[0]),
                        (STACK[0], STACK[1] - STACK[0])):
        mem.map(start, size)
    for mt in MTS:
        mem.put(mt + MODULE_OFFSET, MODULE)
    mem.put(LOOKALIKE + MODULE_OFFSET, 0x1234)
    mem.put(METHOD_DESC - 0x18, ITEM_MT)  # its MethodDescChunk's header: the MethodTable, size 1, index 0
    for a, m, _s in OBJECTS:
        mem.put(a, m)
    module = NS(address=MODULE, path="/app/App.dll")
    domain = NS(address=DOMAIN, name="clrhost",
                assemblies=[NS(address=ASSEMBLY, name="/app/App.dll", modules=[module])])
    rt = NS(target=mem, reader=Dac(), heap=Heap(), catalog=NS(app_domains=lambda: [domain]), has_gc_heap=True,
            types=Heap.types, globals=NS(free_method_table=FREE_MT, string_method_table=STRING_MT,
                                         object_method_table=OBJECT_MT, array_method_table=0,
                                         exception_method_table=0))
    rt.cache = lambda key, factory: factory()
    return rt


def kind(address: int) -> AddressKind:
    return AddressClassifier(runtime()).classify(address).kind


def test_each_kind() -> None:
    expected = {
        0: AddressKind.NULL, 0x10: AddressKind.LOW, 1 << 63: AddressKind.NOT_USER, 0x100000000: AddressKind.UNMAPPED,
        OBJECTS[0][0]: AddressKind.OBJECT, OBJECTS[1][0]: AddressKind.FREE, OBJECTS[0][0] + 8: AddressKind.INTERIOR,
        OBJECTS[0][0] + 3: AddressKind.INTERIOR, ALLOC_CONTEXT[0] + 8: AddressKind.ALLOC_CONTEXT,
        SEGMENT[1] - 8: AddressKind.HEAP_GAP, ITEM_MT: AddressKind.METHOD_TABLE, LOOKALIKE: AddressKind.UNKNOWN,
        MODULE: AddressKind.MODULE, DOMAIN: AddressKind.APP_DOMAIN, ASSEMBLY: AddressKind.ASSEMBLY,
        METHOD_DESC: AddressKind.METHOD_DESC, STACK[0] + 0x100: AddressKind.STACK, ITEM_MT + 4: AddressKind.UNALIGNED,
    }
    got = {a: kind(a) for a in expected}
    assert got == expected


def test_inside_names_the_object_and_offset() -> None:
    c = AddressClassifier(runtime()).classify(OBJECTS[2][0] + 0x10)
    assert c.error("a valid object").args[0] == (
        f"{OBJECTS[2][0] + 0x10:#x} is not a valid object: it is inside {OBJECTS[2][0]:#x} (Item, 32 bytes) "
        f"at offset 0x10 (try dumpobj {OBJECTS[2][0]:x})")


interesting = [0, 1, MODULE, DOMAIN, ASSEMBLY, ITEM_MT, LOOKALIKE, METHOD_DESC, SEGMENT[0], STACK[0], FREE_MT]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.integers(0, (1 << 64) - 1),
                 st.builds(lambda base, off: (base + off) % (1 << 64), st.sampled_from(interesting),
                           st.integers(-0x200, 0x600))))
def test_the_dac_only_sees_checked_addresses(address: int) -> None:
    rt = runtime()
    c = AddressClassifier(rt).classify(address)
    mem = rt.target
    for mt in rt.reader.mt_calls:
        raw = mem.read_partial(mt + MODULE_OFFSET, 8)
        assert mt in MTS or int.from_bytes(raw, "little") == MODULE, f"MethodTable query for {mt:x}"
    for md in rt.reader.md_calls:
        assert not (SEGMENT[0] <= md < SEGMENT[1] or STACK[0] <= md < STACK[1]) and md not in (MODULE, DOMAIN, ASSEMBLY)
        assert md not in MTS and not md & 7
        index = mem.read_partial(md + 2, 1)
        chunk_mt = mem.read_partial(md - index[0] * 8 - 0x18, 8) if index else b""
        assert int.from_bytes(chunk_mt, "little") in MTS, f"MethodDesc query for {md:x}: no chunk names a MethodTable"
    if c.kind is AddressKind.METHOD_TABLE:
        assert address in MTS
    if c.kind is AddressKind.METHOD_DESC:
        assert address == METHOD_DESC
    if c.is_object:
        assert address in {a for a, _m, _s in OBJECTS}


class _NoHeap:
    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        raise AssertionError(f"the GC heap was asked for {name} in a dump without one")


def test_a_dump_without_a_gc_heap_checks_method_tables_without_it() -> None:
    # A triage dump: MethodTables and MethodDescs are still recognised, nothing is "in the heap".
    rt = runtime()
    rt.heap = _NoHeap()
    rt.has_gc_heap = False
    c = AddressClassifier(rt)
    assert c.is_method_table(ITEM_MT)
    assert not c.is_method_table(LOOKALIKE)
    assert c.object_or_none(OBJECTS[0][0]) is None
