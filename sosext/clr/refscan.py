"""The reference graph built by compiled kernels (``kernels/refs.py``).

``ObjectLookup`` turns addresses into index positions (a start bitmap per segment),
``TypeLayouts`` flattens every type's GCDesc into arrays a kernel can read, and
``build_graph`` scans each segment's bytes once, writing the graph in compressed sparse
rows with 32-bit object ids: 8 bytes of row offset per object and 4 per reference.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from . import memory
from .kernels import refs
from .progress import Progress
from .segments import SegmentKind

if TYPE_CHECKING:
    from .parts import HeapParts
    from .index import HeapIndex


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
    """Every type id's reference slots (GCDesc) and size facts as flat arrays."""

    def __init__(self, heap: "HeapParts", method_tables: np.ndarray) -> None:
        n = len(method_tables)
        self.base_sizes = np.zeros(n, dtype=np.int64)
        self.component_sizes = np.zeros(n, dtype=np.int64)
        self.gc_kind = np.zeros(n, dtype=np.int8)
        self.series_first = np.zeros(n, dtype=np.int64)
        self.series_count = np.zeros(n, dtype=np.int64)
        self.repeat_start = np.zeros(n, dtype=np.int64)
        self.repeat_first = np.zeros(n, dtype=np.int64)
        self.repeat_items = np.zeros(n, dtype=np.int64)
        s_off: list[int] = []
        s_size: list[int] = []
        r_count: list[int] = []
        r_skip: list[int] = []
        for tid, mt in enumerate(method_tables.tolist()):
            t = heap.types.get(mt)
            if t is None:
                continue
            self.base_sizes[tid], self.component_sizes[tid] = t.base_size, t.component_size
            if not t.contains_pointers:
                continue
            desc = heap.gcdesc(mt)
            if desc is None:
                continue
            if desc.is_repeating:
                if t.component_size == 0 or sum(8 * c + s for c, s in desc.repeat) <= 0:
                    continue
                self.gc_kind[tid] = 2
                self.repeat_start[tid] = desc.repeat_start
                self.repeat_first[tid] = len(r_count)
                self.repeat_items[tid] = len(desc.repeat)
                for c, s in desc.repeat:
                    r_count.append(c)
                    r_skip.append(s)
            elif desc.series:
                self.gc_kind[tid] = 1
                self.series_first[tid] = len(s_off)
                self.series_count[tid] = len(desc.series)
                for off, size in desc.series:
                    s_off.append(off)
                    s_size.append(size)
        self.series_offset = np.array(s_off, dtype=np.int64)
        self.series_size = np.array(s_size, dtype=np.int64)
        self.repeat_count = np.array(r_count, dtype=np.int64)
        self.repeat_skip = np.array(r_skip, dtype=np.int64)

    @property
    def arrays(self) -> tuple:
        return (self.base_sizes, self.component_sizes, self.gc_kind, self.series_first, self.series_count,
                self.series_offset, self.series_size, self.repeat_start, self.repeat_first,
                self.repeat_items, self.repeat_count, self.repeat_skip)


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
