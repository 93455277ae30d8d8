"""dumpheap -stat's numbers: per-type counts and sizes, fragmentation, walk errors.

From the index when there is one. Without one (a live process, or a core with the index
cache off) building it only to sum it would keep 17 bytes per object for nothing, so the
walk writes into a small window instead and each full window is folded into per-type totals
(``stream``): memory is the window plus one row per type, whatever the heap's size.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from ..kernels import heapwalk
from ..progress import Progress
from .segments import SegmentKind
from .walk import WalkError

if TYPE_CHECKING:
    from .fastwalk import IndexColumns, MethodTableTable
    from ..parts import HeapParts
    from .index import HeapIndex

FRAGMENT_MIN = 512 * 1024  # SOS lists Free blocks above 0.5 MB, with the object after them
_WINDOW = 1 << 20  # objects per window: 16 MiB of columns


@dataclass(frozen=True, slots=True)
class FreeBlock:
    address: int
    size: int
    next_address: int
    next_method_table: int


@dataclass(frozen=True, slots=True)
class HeapStatistics:
    """Per type (aligned arrays): MethodTable, object count, total size, and the walk
    position of its first object (which orders ties as SOS does)."""

    method_tables: np.ndarray  # uint64
    counts: np.ndarray  # int64
    totals: np.ndarray  # int64
    first: np.ndarray  # int64
    free_blocks: list[FreeBlock]
    errors: list[WalkError]

    def rows(self, by_count: bool = False) -> list[tuple[int, int, int]]:
        """(MethodTable, count, total size), ascending by total size (or count); ties in walk order."""
        present = np.nonzero(self.counts)[0]
        if not len(present):
            return []
        key = self.counts[present] if by_count else self.totals[present]
        order = np.lexsort((self.first[present], key))
        return [(int(self.method_tables[present[i]]), int(self.counts[present[i]]), int(self.totals[present[i]]))
                for i in order]

    @classmethod
    def of_index(cls, heap: "HeapParts", ix: "HeapIndex", mask: np.ndarray | None = None) -> "HeapStatistics":
        counts, totals, first = ix.type_totals(mask)
        return cls(ix.method_tables, counts, totals, first, _index_free_blocks(heap, ix, mask), list(ix.errors))


def _index_free_blocks(heap: "HeapParts", ix: "HeapIndex", mask: np.ndarray | None) -> list[FreeBlock]:
    free_id = ix.type_id(heap.free_mt)
    if free_id is None:
        return []
    keep = np.empty(0, dtype=np.bool_) if mask is None else mask
    blocks = []
    for i in heapwalk.free_blocks(ix.addresses, ix.type_ids, ix.sizes, keep, free_id, FRAGMENT_MIN).tolist():
        size = ix.size_of(i)
        nxt = int(ix.addresses[i]) + ((size + 7) & ~7)
        j = ix.find(nxt)
        if j is not None and not _in_large_object_heap(heap, nxt):
            blocks.append(FreeBlock(int(ix.addresses[i]), size, nxt, ix.method_table_at(j)))
    return blocks


def _in_large_object_heap(heap: "HeapParts", address: int) -> bool:
    seg = heap.segment_of(address)
    return seg is not None and seg.kind is SegmentKind.LOH


class _Folder:
    """Folds each window of walked objects into per-type totals (type ids in walk order)."""

    def __init__(self, heap: "HeapParts") -> None:
        self.heap = heap
        self.counts = np.zeros(64, dtype=np.int64)
        self.totals = np.zeros(64, dtype=np.int64)
        self.first = np.full(64, -1, dtype=np.int64)
        self.seen = 0  # objects folded so far: the walk position of the window's first object
        self.blocks: list[FreeBlock] = []
        self.pending: tuple[int, int] | None = None  # a window's last object, a big Free block

    def __call__(self, cols: "IndexColumns", table: "MethodTableTable", big: dict) -> None:
        n = cols.count
        ntypes = len(table.method_tables)
        if ntypes > len(self.counts):
            grow = max(ntypes, 2 * len(self.counts)) - len(self.counts)
            self.counts = np.concatenate([self.counts, np.zeros(grow, np.int64)])
            self.totals = np.concatenate([self.totals, np.zeros(grow, np.int64)])
            self.first = np.concatenate([self.first, np.full(grow, -1, np.int64)])
        ids, sizes = cols.type_ids[:n], cols.sizes[:n]
        counts, totals, first = heapwalk.type_stats(ids, sizes, np.empty(0, dtype=np.bool_), ntypes)
        self.counts[:ntypes] += counts
        self.totals[:ntypes] += totals
        new = (self.first[:ntypes] < 0) & (first >= 0)
        self.first[:ntypes][new] = first[new] + self.seen
        for p, s in big.items():
            self.totals[int(ids[p])] += s - heapwalk.SIZE_OVERFLOW
        big.clear()
        self._free_blocks(cols, table, n)
        self.seen += n
        cols.count = 0

    def _free_blocks(self, cols: "IndexColumns", table: "MethodTableTable", n: int) -> None:
        try:
            free_id = table.method_tables.index(self.heap.free_mt)
        except ValueError:
            self.pending = None
            return
        addresses, ids, sizes = cols.addresses[:n], cols.type_ids[:n], cols.sizes[:n]
        if self.pending is not None and n:
            address, size = self.pending
            nxt = address + ((size + 7) & ~7)
            if int(addresses[0]) == nxt and int(ids[0]) != free_id:
                self._add(address, size, nxt, table.method_tables[int(ids[0])])
        self.pending = None
        found = heapwalk.free_blocks(addresses, ids, sizes, np.empty(0, dtype=np.bool_), free_id, FRAGMENT_MIN)
        for i in found.tolist():
            size = int(sizes[i])
            self._add(int(addresses[i]), size, int(addresses[i + 1]), table.method_tables[int(ids[i + 1])])
        last = n - 1
        if n and int(ids[last]) == free_id and int(sizes[last]) >= FRAGMENT_MIN:
            self.pending = (int(addresses[last]), int(sizes[last]))

    def _add(self, address: int, size: int, nxt: int, mt: int) -> None:
        if not _in_large_object_heap(self.heap, nxt):
            self.blocks.append(FreeBlock(address, size, nxt, mt))


def stream(heap: "HeapParts", progress: Progress, resolve: "Callable[[int], tuple[int, int] | None]") -> HeapStatistics:
    """The statistics from one walk that keeps no per-object column beyond one window."""
    from . import fastwalk
    window = fastwalk.IndexColumns(np.zeros(_WINDOW, np.uint64), np.zeros(_WINDOW, np.uint32),
                                   np.zeros(_WINDOW, np.uint32))
    fold = _Folder(heap)
    res = fastwalk.walk_heap(heap, window, progress, resolve, fold)
    ntypes = len(res.table.method_tables)
    mts = np.array(res.table.method_tables, dtype=np.uint64)
    return HeapStatistics(mts, fold.counts[:ntypes], fold.totals[:ntypes], fold.first[:ntypes],
                          fold.blocks, list(res.errors))
