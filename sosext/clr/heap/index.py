"""The heap index: every object of one heap walk, in compact numpy arrays.

One walk fills it; dumpheap's filters, statistics, generation queries and later root and
diff queries read it without touching target memory again. Objects are stored in address
order, segment by segment. Per object it costs 8 (address) + 4 (type id) + 4 (size) + 1
(generation) = 17 bytes; the arrays may be memory-mapped from the on-disk index cache
(``indexcache.py``), in which case they cost page cache, not process memory.

Sizes are SOS's: base size plus elements times component size, not rounded up to the
8-byte step the object takes on the heap (that is ``aligned_sizes``), and at least 24.
They are kept as u32; the rare object of 4 GiB or more is stored as ``SIZE_OVERFLOW`` and
its true size kept in ``big_sizes``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

import numpy as np

from .segments import ClrSegment, Generation
from .walk import WalkError

SIZE_OVERFLOW = 0xFFFFFFFF

if TYPE_CHECKING:
    from ..parts import HeapParts


@dataclass(frozen=True, slots=True)
class SegmentSlice:
    segment: ClrSegment
    first: int  # index of the segment's first object
    stop: int  # one past its last object


@dataclass(frozen=True, slots=True)
class TypeStat:
    method_table: int
    count: int
    total_size: int


class HeapIndex:
    def __init__(self, heap: "HeapParts", addresses: np.ndarray, type_ids: np.ndarray,
                 method_tables: np.ndarray, sizes: np.ndarray, generations: np.ndarray,
                 slices: list[SegmentSlice], errors: list[WalkError],
                 big_sizes: dict[int, int] | None = None) -> None:
        self.heap = heap
        self.addresses = addresses  # uint64, ascending
        self.type_ids = type_ids  # uint32 index into method_tables
        self.method_tables = method_tables  # uint64, unique, ascending
        self.sizes = sizes  # uint32 bytes (SIZE_OVERFLOW: see big_sizes)
        self.generations = generations  # uint8 Generation values
        self.slices = slices
        self.errors = errors
        self.big_sizes = big_sizes or {}  # position -> size, for sizes >= 4 GiB

    @classmethod
    def build(cls, heap: "HeapParts", addr_parts: list[np.ndarray], mt_parts: list[np.ndarray],
              len_parts: list[np.ndarray], slices: list[SegmentSlice], errors: list[WalkError],
              known_mts: set[int]) -> "HeapIndex":
        """``known_mts`` holds every MethodTable the walk met: mapping each object's MT to
        its position in that short sorted list is much cheaper than np.unique over millions."""
        method_tables = np.array(sorted(known_mts), dtype=np.uint64)
        base = np.zeros(len(method_tables), dtype=np.uint64)
        comp = np.zeros(len(method_tables), dtype=np.uint64)
        for i, mt in enumerate(method_tables.tolist()):
            t = heap.types.get(mt)
            if t is not None:
                base[i], comp[i] = t.base_size, t.component_size
        # Fill the final arrays part by part, dropping each part once copied: the peak is the
        # index plus one segment's worth, not two copies of the whole heap's facts.
        total = sum(len(a) for a in addr_parts)
        addresses = np.empty(total, dtype=np.uint64)
        type_ids = np.empty(total, dtype=np.uint32)
        sizes = np.empty(total, dtype=np.uint32)
        big: dict[int, int] = {}
        pos = 0
        for k in range(len(addr_parts)):
            a, m, n = addr_parts[k], mt_parts[k], len_parts[k]
            addr_parts[k] = mt_parts[k] = len_parts[k] = None  # type: ignore[call-overload]
            end = pos + len(a)
            addresses[pos:end] = a
            tid = np.searchsorted(method_tables, m)
            type_ids[pos:end] = tid
            full = np.maximum(base[tid] + comp[tid] * n, np.uint64(24))
            for k in np.nonzero(full >= np.uint64(SIZE_OVERFLOW))[0].tolist():
                big[pos + k] = int(full[k])
            sizes[pos:end] = np.minimum(full, np.uint64(SIZE_OVERFLOW))
            pos = end
        generations = np.empty(len(addresses), dtype=np.uint8)
        fill_generations(addresses, generations, slices)
        return cls(heap, addresses, type_ids, method_tables, sizes, generations,
                   slices, errors, big)

    @classmethod
    def from_walk(cls, heap: "HeapParts", cols, res, generations: np.ndarray | None = None) -> "HeapIndex":
        """The index over what ``fastwalk.walk_heap`` wrote into ``cols``: type ids are
        renumbered so that ``method_tables`` is ascending (lookups bisect it).
        ``generations``, if given, is where the generation column goes (a cache file)."""
        from ..kernels import heapwalk
        n = res.count
        met = np.array(res.table.method_tables, dtype=np.uint64)
        order = np.argsort(met, kind="stable")
        mapping = np.empty(len(met), dtype=np.uint32)
        mapping[order] = np.arange(len(met), dtype=np.uint32)
        type_ids = cols.type_ids[:n]
        if len(met):
            heapwalk.remap(type_ids, mapping)
        addresses = cols.addresses[:n]
        slices = [SegmentSlice(seg, a, b) for seg, a, b in res.slices]
        from . import memory
        generations = memory.empty(n, np.uint8) if generations is None else generations[:n]
        memory.populate(generations, 0, n)
        fill_generations(addresses, generations, slices)
        return cls(heap, addresses, type_ids, met[order], cols.sizes[:n], generations,
                   slices, res.errors, res.big_sizes)

    def __len__(self) -> int:
        return len(self.addresses)

    def size_of(self, i: int) -> int:
        s = int(self.sizes[i])
        return self.big_sizes.get(i, s) if s == SIZE_OVERFLOW else s

    def sizes_at(self, positions: np.ndarray) -> list[int]:
        """Exact sizes of the objects at ``positions``, as Python ints."""
        out = self.sizes[positions].tolist()
        if self.big_sizes:
            for k, p in enumerate(np.asarray(positions).tolist()):
                if out[k] == SIZE_OVERFLOW:
                    out[k] = self.big_sizes.get(p, out[k])
        return out

    @property
    def aligned_sizes(self) -> np.ndarray:
        """What each object occupies on the heap (its size rounded up to 8 bytes), as uint64."""
        out = (self.sizes.astype(np.uint64) + np.uint64(7)) & np.uint64(~7 & 0xFFFFFFFFFFFFFFFF)
        for p, s in self.big_sizes.items():
            out[p] = (s + 7) & ~7
        return out

    @property
    def total_size(self) -> int:
        return sum(t.total_size for t in self.stats())

    # -- selections: boolean masks over the objects ----------------------------------------

    def all(self) -> np.ndarray:
        return np.ones(len(self.addresses), dtype=bool)

    def mask_method_tables(self, mts: Iterable[int]) -> np.ndarray:
        wanted = np.nonzero(np.isin(self.method_tables, np.fromiter(mts, dtype=np.uint64)))[0]
        return np.isin(self.type_ids, wanted.astype(np.uint32))

    def mask_type_ids(self, ids: Iterable[int]) -> np.ndarray:
        return np.isin(self.type_ids, np.fromiter(ids, dtype=np.uint32))

    def mask_generation(self, gen: Generation) -> np.ndarray:
        return self.generations == np.uint8(gen)

    def mask_size(self, min_size: int | None, max_size: int | None) -> np.ndarray:
        m = self.all()
        if min_size is not None:
            m &= self.sizes >= np.uint64(min_size)
        if max_size is not None:
            m &= self.sizes <= np.uint64(max_size)
        return m

    def mask_range(self, start: int, end: int | None) -> np.ndarray:
        lo = np.searchsorted(self.addresses, np.uint64(start))
        hi = len(self.addresses) if end is None else np.searchsorted(self.addresses, np.uint64(end))
        m = np.zeros(len(self.addresses), dtype=bool)
        m[lo:hi] = True
        return m

    def mask_slices(self, keep) -> np.ndarray:
        m = np.zeros(len(self.addresses), dtype=bool)
        for sl in self.slices:
            if keep(sl.segment):
                m[sl.first:sl.stop] = True
        return m

    # -- answers ------------------------------------------------------------------------------

    def type_totals(self, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(count, total size, first position) per type id over the objects ``mask`` keeps:
        one pass of a compiled kernel, no per-object temporaries."""
        from ..kernels import heapwalk
        keep = np.empty(0, dtype=np.bool_) if mask is None else mask
        counts, totals, first = heapwalk.type_stats(self.type_ids, self.sizes, keep, len(self.method_tables))
        for p, s in self.big_sizes.items():
            if mask is None or mask[p]:
                totals[self.type_ids[p]] += s - SIZE_OVERFLOW
        return counts, totals, first

    def stats(self, mask: np.ndarray | None = None) -> list[TypeStat]:
        counts, totals, _first = self.type_totals(mask)
        return [TypeStat(int(self.method_tables[i]), int(counts[i]), int(totals[i]))
                for i in np.nonzero(counts)[0]]

    def method_table_at(self, position: int) -> int:
        """The MethodTable of the object at ``position``."""
        return int(self.method_tables[self.type_ids[position]])

    def find(self, address: int) -> int | None:
        """Index of the object that starts exactly at ``address``."""
        i = int(np.searchsorted(self.addresses, np.uint64(address)))
        if i < len(self.addresses) and int(self.addresses[i]) == address:
            return i
        return None

    def containing(self, address: int) -> int | None:
        """Index of the object whose bytes include ``address``."""
        i = int(np.searchsorted(self.addresses, np.uint64(address), side="right")) - 1
        if i >= 0 and int(self.addresses[i]) + self.size_of(i) > address:
            return i
        return None

    def type_id(self, mt: int) -> int | None:
        """The type id of MethodTable ``mt``, if any object of it was met."""
        i = int(np.searchsorted(self.method_tables, np.uint64(mt)))
        if i < len(self.method_tables) and int(self.method_tables[i]) == mt:
            return i
        return None


def fill_generations(addresses: np.ndarray, generations: np.ndarray, slices: list[SegmentSlice]) -> None:
    """Each object's generation from its segment's generation ranges."""
    for sl in slices:
        seg = sl.segment
        part = addresses[sl.first:sl.stop]
        if len(seg.ranges) == 1:
            generations[sl.first:sl.stop] = seg.ranges[0].generation
            continue
        gens = generations[sl.first:sl.stop]
        gens[:] = seg.ranges[-1].generation
        for r in seg.ranges:
            lo, hi = np.searchsorted(part, [r.start, r.end])
            gens[lo:hi] = r.generation
