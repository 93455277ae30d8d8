"""The reference graph built by compiled kernels (``kernels/refs.py``).

``ObjectLookup`` turns addresses into index positions (a start bitmap per segment),
``TypeLayouts`` flattens every type's GCDesc into arrays a kernel can read, and
``build_graph`` scans each segment's bytes once, writing the graph in compressed sparse
rows with 32-bit object ids: 8 bytes of row offset per object and 4 per reference.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..heap import memory
from ..kernels import refs
from ..progress import Progress
from ..heap.segments import SegmentKind

if TYPE_CHECKING:
    from ..parts import HeapParts
    from ..heap.index import HeapIndex


class ObjectLookup:
    """Address → index position, for every object of the index."""

    def __init__(self, index: "HeapIndex") -> None:
        slices = [sl for sl in index.slices if sl.stop > sl.first]
        self.seg_lo = np.array([sl.segment.start for sl in slices], dtype=np.uint64)
        self.seg_hi = np.array([sl.segment.end for sl in slices], dtype=np.uint64)
        blocks = [((sl.segment.end - sl.segment.start) // 8 + 63) // 64 for sl in slices]
        self.seg_block = np.zeros(len(slices) + 1, dtype=np.int64)
        np.cumsum(blocks, out=self.seg_block[1:])
        first = np.array([sl.first for sl in slices], dtype=np.int64)
        stop = np.array([sl.stop for sl in slices], dtype=np.int64)
        total = int(self.seg_block[-1])
        self.bitmap = memory.zeros(total, np.uint64)
        self.rank = memory.zeros(total, np.int64)
        refs.build_lookup(index.addresses, self.seg_lo, self.seg_block, first, stop, self.bitmap, self.rank)

    def find(self, address: int) -> int:
        return int(refs.find_object(np.uint64(address), self.seg_lo, self.seg_hi, self.seg_block,
                                    self.bitmap, self.rank))

    @property
    def arrays(self) -> tuple:
        return self.seg_lo, self.seg_hi, self.seg_block, self.bitmap, self.rank


class TypeLayouts:
    """Every type id's reference slots (GCDesc) and size facts as flat arrays; ``extend``
    adds the types a search learns as it meets them."""

    _COLUMNS = ("base_sizes", "component_sizes", "gc_kind", "series_first", "series_count",
                "repeat_start", "repeat_first", "repeat_items")

    def __init__(self, heap: "HeapParts", method_tables: np.ndarray | list[int]) -> None:
        self._heap = heap
        self.count = 0
        for name in self._COLUMNS:
            setattr(self, name, np.zeros(0, dtype=np.int8 if name == "gc_kind" else np.int64))
        self._s_off: list[int] = []
        self._s_size: list[int] = []
        self._r_count: list[int] = []
        self._r_skip: list[int] = []
        self._flat: tuple | None = None
        self.extend(method_tables)

    def extend(self, method_tables: np.ndarray | list[int]) -> None:
        """Lay out type ids ``count`` .. len(method_tables) - 1."""
        n = len(method_tables)
        if n <= self.count:
            return
        if n > len(self.base_sizes):
            room = max(n, 2 * len(self.base_sizes))
            for name in self._COLUMNS:
                old = getattr(self, name)
                grown = np.zeros(room, dtype=old.dtype)
                grown[:len(old)] = old
                setattr(self, name, grown)
        for tid in range(self.count, n):
            self._lay_out(tid, int(method_tables[tid]))
        self.count = n
        self._flat = None

    def _lay_out(self, tid: int, mt: int) -> None:
        heap = self._heap
        t = heap.types.get(mt)
        if t is None:
            return
        self.base_sizes[tid], self.component_sizes[tid] = t.base_size, t.component_size
        if not t.contains_pointers:
            return
        desc = heap.gcdesc(mt)
        if desc is None:
            return
        if desc.is_repeating:
            if t.component_size == 0 or sum(8 * c + s for c, s in desc.repeat) <= 0:
                return
            self.gc_kind[tid] = 2
            self.repeat_start[tid] = desc.repeat_start
            self.repeat_first[tid] = len(self._r_count)
            self.repeat_items[tid] = len(desc.repeat)
            for c, s in desc.repeat:
                self._r_count.append(c)
                self._r_skip.append(s)
        elif desc.series:
            self.gc_kind[tid] = 1
            self.series_first[tid] = len(self._s_off)
            self.series_count[tid] = len(desc.series)
            for off, size in desc.series:
                self._s_off.append(off)
                self._s_size.append(size)

    @property
    def arrays(self) -> tuple:
        if self._flat is None:
            self.series_offset = np.array(self._s_off, dtype=np.int64)
            self.series_size = np.array(self._s_size, dtype=np.int64)
            self.repeat_count = np.array(self._r_count, dtype=np.int64)
            self.repeat_skip = np.array(self._r_skip, dtype=np.int64)
            self._flat = (self.base_sizes, self.component_sizes, self.gc_kind, self.series_first,
                          self.series_count, self.series_offset, self.series_size, self.repeat_start,
                          self.repeat_first, self.repeat_items, self.repeat_count, self.repeat_skip)
        return self._flat


def build_graph(heap: "HeapParts", index: "HeapIndex", lookup: ObjectLookup,
                progress: Progress) -> tuple[np.ndarray, np.ndarray]:
    """(offsets int64[n + 1], targets uint32[edges]) of the whole heap."""
    n = len(index)
    layouts = TypeLayouts(heap, index.method_tables)
    offsets = memory.zeros(n + 1, np.int64)
    targets = memory.reserve(max(n + n // 2, 1024), np.uint32)
    e = 0
    target = heap.runtime.target
    total = sum(sl.segment.length for sl in index.slices)
    progress.start("Building reference graph", total)
    done = 0

    def run(words: np.ndarray, lo: int, first: int, stop: int) -> None:
        nonlocal e, targets
        memory.populate(targets, e, e + 2 * (stop - first) + 1024)  # the usual references, mapped at once
        p = first
        while p < stop:
            p, e, status = refs.scan(words, np.uint64(lo), p, stop, index.addresses, index.type_ids,
                                     *layouts.arrays, *lookup.arrays, offsets, targets, e)
            if status == refs.FULL:
                grown = memory.reserve(2 * len(targets), np.uint32)
                memory.populate(grown, 0, len(targets) + 2 * (stop - p) + 1024)
                grown[:len(targets)] = targets
                targets = grown

    for sl in index.slices:
        seg = sl.segment
        done += seg.length
        if sl.stop == sl.first:
            continue
        if seg.kind is SegmentKind.LOH:
            # Large objects one by one, and only those with references (not byte[] payloads).
            for p in range(sl.first, sl.stop):
                if layouts.gc_kind[index.type_ids[p]] == 0:
                    offsets[p + 1] = e
                    continue
                addr = int(index.addresses[p])
                data = target.read_partial(addr, index.size_of(p))
                words = np.frombuffer(data, dtype=np.uint64, count=len(data) // 8)
                run(words, addr, p, p + 1)
        else:
            buf = heap.scratch(seg.end - seg.start)  # read_into: see fastwalk._walk_bulk
            data = buf[:target.read_into(seg.start, buf)]
            words = np.frombuffer(data, dtype=np.uint64, count=len(data) // 8)
            run(words, seg.start, sl.first, sl.stop)
        progress.update(done)
    progress.finish()
    # Positions between slices (none: slices tile the index) and an empty heap keep offsets 0.
    return offsets, targets[:e]
