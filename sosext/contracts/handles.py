"""The GC's handle tables, walked as the DAC walks them (no native code).

Layouts from dotnet/runtime ``src/coreclr/gc/handletablepriv.h``, ``handletableconstants.h``,
``objecthandle.h`` and ``gcinterface.dac.h``; the order from the DAC's handle walker
(``daccess``): the map's buckets, in each the table of every heap slot (server GC: one per
heap), and for each handle type of the DAC's list separately, every segment of that table,
the type's chain of blocks, and the handles of each block that hold an object::

    HandleTableMap     { HandleTableBucket **pBuckets; HandleTableMap *pNext; u32 dwMaxIndex }
    HandleTableBucket  { HandleTable **pTable; u32 HandleTableIndex }
    HandleTable        { u32 rgTypeFlags[T]; TableSegment *pSegmentList; ... }
    TableSegment       64 KB, 64 KB aligned, byte-packed header, then 7680 handles at 0x1000:
        u8  rgGeneration[480]   @0       u8  rgAllocation[120] @480 (next block in a type chain)
        u32 rgFreeMask[240]     @600     u8  rgBlockType[120]  @1560
        u8  rgUserData[120]     @1680    (the block holding a block's extra info, 0xFF: none)
        u8  rgLocks[120]        @1800    u8  rgTail[T]         @1920 (last block of each chain)
        u8  rgHint[T]   u32 rgFreeCount[T]   TableSegment *pNextSegment   HandleTable *pHandleTable

T (HANDLE_MAX_INTERNAL_TYPES) is 12 in older runtimes and 13 in .NET 10; it moves every field
after rgLocks, so it is measured, not assumed: the T for which the table's pSegmentList names
a segment whose pHandleTable names the table back.

A block of 64 handles belongs to one type; a chain is circular (the tail's next is the head).
A dependent handle's secondary object is its extra info, in the block ``rgUserData`` names.
Every count and chain is bounded: a damaged table cannot loop or run away.
"""
from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from ..errors import ContractError
from ..readers import records as rec

if TYPE_CHECKING:
    from .reader import ContractReader

SEGMENT_SIZE = 0x10000
HEADER_SIZE = 0x1000
HANDLES_PER_BLOCK = 64
BLOCKS_PER_SEGMENT = 120
TYPE_COUNTS = (13, 12, 14, 15, 16)  # candidate HANDLE_MAX_INTERNAL_TYPES, likeliest first
BLOCK_INVALID = 0xFF
INITIAL_HANDLE_TABLE_ARRAY_SIZE = 10

_ALLOCATION, _BLOCK_TYPE, _USER_DATA, _TAIL = 480, 1560, 1680, 1920
_HEADER_READ = _TAIL + 6 * max(TYPE_COUNTS) + 16


def _layout(type_count: int, pointer_size: int) -> tuple[int, int]:
    """(pSegmentList in HandleTable, pNextSegment in the segment header) for T types."""
    segment_list = (4 * type_count + pointer_size - 1) & ~(pointer_size - 1)
    return segment_list, _TAIL + 6 * type_count

# HNDTYPE_* (gcinterface.h) in the order the DAC's GetHandleEnum walks them on Linux
# (FEATURE_COMWRAPPERS: ref-counted handles; no COM interop, no Objective-C marshalling).
WEAK_SHORT, WEAK_LONG, STRONG, PINNED, VARIABLE, REFCOUNTED, DEPENDENT, ASYNC_PINNED, SIZEDREF = range(9)
WEAK_INTERIOR_POINTER, CROSS_REFERENCE = 10, 11
DAC_TYPE_ORDER = (WEAK_SHORT, WEAK_LONG, STRONG, PINNED, DEPENDENT, SIZEDREF, REFCOUNTED, WEAK_INTERIOR_POINTER,
                  CROSS_REFERENCE)
ALWAYS_STRONG = frozenset({STRONG, PINNED, ASYNC_PINNED, SIZEDREF})

_MAX_MAP_NODES = 64
_MAX_SEGMENTS = 100_000  # 6.5 GB of handle segments per table


def handle_table_handles(reader: "ContractReader") -> list[rec.HandleData]:
    """Every handle that holds an object, in the DAC's enumeration order."""
    gc = reader.gc
    target = reader.target
    ps = target.pointer_size
    domain = reader._global_pointer("AppDomain")
    slots = len(gc.server_heaps()) if reader.is_server else 1
    out: list[rec.HandleData] = []
    node = gc.var("handle_table_map")
    if not node:
        raise ContractError("the GC publishes no handle table map")
    nodes = 0
    while node and nodes < _MAX_MAP_NODES:
        nodes += 1
        buckets = gc.read_pointer(node, "handle table map")
        bucket_ptrs = _pointers(reader, buckets, INITIAL_HANDLE_TABLE_ARRAY_SIZE, "handle table buckets")
        for bucket in bucket_ptrs:
            if not bucket:
                continue
            tables = _pointers(reader, gc.read_pointer(bucket, "handle table bucket"), slots, "handle tables")
            for table in tables:
                if table:
                    _walk_table(reader, table, domain, out)
        node = gc.read_pointer(node + ps, "handle table map")
    return out


def _pointers(reader: "ContractReader", address: int, count: int, what: str) -> tuple[int, ...]:
    ps = reader.target.pointer_size
    raw = reader.gc_bytes(address, count * ps, what)
    return struct.unpack(f"<{count}{'Q' if ps == 8 else 'I'}", raw)


def _measure(reader: "ContractReader", table: int) -> tuple[int, int] | None:
    """(first segment, pNextSegment offset) for this runtime's T; None for a table without segments."""
    ps = reader.target.pointer_size
    for count in TYPE_COUNTS:
        list_at, next_at = _layout(count, ps)
        first = reader.gc.read_pointer(table + list_at, "handle table")
        if not first or first % SEGMENT_SIZE:
            continue
        header = reader.gc_bytes(first, next_at + 2 * ps, "handle table segment")
        if int.from_bytes(header[next_at + ps:next_at + 2 * ps], "little") == table:
            return first, next_at
    raise ContractError(f"handle table {table:#x}: no known layout (HANDLE_MAX_INTERNAL_TYPES)")


def _walk_table(reader: "ContractReader", table: int, domain: int, out: list[rec.HandleData]) -> None:
    measured = _measure(reader, table)
    if measured is None:
        return
    seg, next_at = measured
    segments = []
    seen: set[int] = set()
    while seg and seg not in seen and len(segments) < _MAX_SEGMENTS:
        if seg % SEGMENT_SIZE:
            raise ContractError(f"handle table segment {seg:#x} is not {SEGMENT_SIZE:#x}-aligned")
        seen.add(seg)
        header = reader.gc_bytes(seg, _HEADER_READ, "handle table segment")
        segments.append((seg, header))
        seg = int.from_bytes(header[next_at:next_at + 8], "little")
    for handle_type in DAC_TYPE_ORDER:
        for seg, header in segments:
            _walk_chain(reader, seg, header, handle_type, domain, out)


def _walk_chain(reader: "ContractReader", seg: int, header: bytes, handle_type: int, domain: int,
                out: list[rec.HandleData]) -> None:
    tail = header[_TAIL + handle_type]
    if tail >= BLOCKS_PER_SEGMENT:
        return  # BLOCK_INVALID: no block of this type here
    head = header[_ALLOCATION + tail]
    block, steps = head, 0
    while steps < BLOCKS_PER_SEGMENT:
        steps += 1
        if block >= BLOCKS_PER_SEGMENT:
            raise ContractError(f"handle table segment {seg:#x}: a damaged block chain")
        if header[_BLOCK_TYPE + block] == handle_type:
            _block_handles(reader, header, seg, block, handle_type, domain, out)
        if block == tail:
            break
        block = header[_ALLOCATION + block]


def _block_values(reader: "ContractReader", seg: int, block: int) -> tuple[int, ...]:
    # One block at a time: a segment is committed only up to the blocks in use.
    raw = reader.gc_bytes(seg + HEADER_SIZE + block * HANDLES_PER_BLOCK * 8, HANDLES_PER_BLOCK * 8, "handle block")
    return struct.unpack(f"<{HANDLES_PER_BLOCK}Q", raw)


def _block_handles(reader: "ContractReader", header: bytes, seg: int, block: int, handle_type: int, domain: int,
                   out: list[rec.HandleData]) -> None:
    first = block * HANDLES_PER_BLOCK
    objects = _block_values(reader, seg, block)
    user_block = header[_USER_DATA + block]
    extra = None
    if handle_type == DEPENDENT and user_block < BLOCKS_PER_SEGMENT:
        extra = _block_values(reader, seg, user_block)
    strong = int(handle_type in ALWAYS_STRONG)
    for i, obj in enumerate(objects):
        if not obj:
            continue
        handle = seg + HEADER_SIZE + (first + i) * 8
        secondary = extra[i] if extra is not None else 0
        out.append(rec.HandleData(domain, handle, secondary, handle_type, strong, 0, 0, 0))
