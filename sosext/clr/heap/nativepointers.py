"""Pointers between the GC heap and the rest of the address space (gctonative, findpointersin).

Both read memory a word at a time, in large chunks, and look every pointer-aligned value up
among the address map's regions (addressmap.py: each mapping named by what uses it) with one
binary search per chunk (numpy): the GC heap's words that point into native memory of a
given kind, or a kind of memory's words that point into the GC heap or elsewhere. A word
that happens to look like an address counts as a pointer, as in SOS: this is a heuristic.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator

import numpy as np

from ..addressmap import DescribedRegion, address_map
from ..progress import check_interrupt
from ..roots.roots import RootKind
from .segments import Generation

if TYPE_CHECKING:
    from .heap import ClrHeap

GC_HEAP = "GCHeap"
PINNED_HANDLES = (3, 7)  # pinned, async pinned
_CHUNK = 16 << 20


class RegionIndex:
    """Which region (if any) each of many addresses falls in."""

    def __init__(self, regions: list[DescribedRegion]) -> None:
        self.regions = sorted(regions, key=lambda r: r.start)
        self.starts = np.array([r.start for r in self.regions], dtype=np.uint64)
        self.ends = np.array([r.end for r in self.regions], dtype=np.uint64)

    def lookup(self, values: np.ndarray) -> np.ndarray:
        """The region index of each value, -1 where none holds it."""
        i = np.searchsorted(self.starts, values, side="right").astype(np.int64) - 1
        ok = i >= 0
        ok[ok] = values[ok] < self.ends[i[ok]]
        i[~ok] = -1
        return i


def regions_named(heap: "ClrHeap", kinds: list[str]) -> list[DescribedRegion]:
    """The address map's regions of the given kinds (SOS's names, any case)."""
    want = {k.lower() for k in kinds}
    return [r for r in address_map(heap.runtime) if r.name.lower() in want]  # type: ignore[arg-type]


def _words(heap: "ClrHeap", start: int, end: int) -> Iterator[tuple[int, np.ndarray]]:
    """(address of the first word, words) of [start, end) in chunks; unreadable parts skipped."""
    target = heap.runtime.target
    at = start & ~7
    while at < end:
        check_interrupt()
        size = min(_CHUNK, end - at)
        raw = bytes(target.read_partial(at, size))
        n = len(raw) & ~7
        if n:
            yield at, np.frombuffer(raw[:n], dtype=np.uint64)
        # A short read stops at memory the target lacks: go on from the next page.
        at = at + size if n == size else ((at + n) | 0xFFF) + 1


@dataclass(frozen=True, slots=True)
class HeapPointer:
    slot: int  # where in the GC heap the pointer is
    pointer: int  # what it points to
    region: DescribedRegion
    position: int  # the index position of the object holding it


def heap_pointers_into(heap: "ClrHeap", targets: list[DescribedRegion]) -> list[HeapPointer]:
    """Every word inside a (non-free) heap object that points into one of ``targets``."""
    ix = heap.index()
    index = RegionIndex(targets)
    free_id = ix.type_id(heap.free_mt)
    out: list[HeapPointer] = []
    for sl in ix.slices:
        if sl.first == sl.stop:
            continue
        seg = sl.segment
        for base, words in _words(heap, seg.start, seg.end):
            where = index.lookup(words)
            hits = np.flatnonzero(where >= 0)
            slots = np.uint64(base) + np.uint64(8) * hits.astype(np.uint64)
            pos = np.searchsorted(ix.addresses, slots, side="right").astype(np.int64) - 1
            # Keep words inside a live object, past its MethodTable: not between objects, not
            # in free space (a stale copy), and not the MethodTable every object starts with.
            keep = pos >= 0
            keep[keep] = (slots[keep] > ix.addresses[pos[keep]]) & (ix.type_ids[pos[keep]] != free_id)
            for k, slot, p in zip(hits[keep].tolist(), slots[keep].tolist(), pos[keep].tolist()):
                if slot < int(ix.addresses[p]) + ix.size_of(p):
                    out.append(HeapPointer(slot, int(words[k]), index.regions[int(where[k])], p))
    return out


def pinned_positions(heap: "ClrHeap") -> set[int]:
    """Objects the GC may not move: the pinned object heap's, and those pinned handles or
    pinned stack slots hold."""
    ix = heap.index()
    out = set(np.flatnonzero(ix.generations == np.uint8(Generation.POH)).tolist())
    for r in heap.roots().roots:
        pinned = r.pinned or (r.kind is RootKind.HANDLE and r.handle is not None
                              and r.handle.handle_type in PINNED_HANDLES)
        if pinned:
            i = ix.find(r.object)
            if i is not None:
                out.add(i)
    return out


@dataclass
class RegionPointers:
    """What one region's (or a kind's) words point to."""

    gc_objects: list[int] = field(default_factory=list)  # index positions (pinned ones unless all)
    gc_other: list[int] = field(default_factory=list)  # pointers to objects that are not pinned
    other: dict[str, list[int]] = field(default_factory=dict)  # image file or region kind -> pointers

    @property
    def gc_pointers(self) -> int:
        return len(self.gc_objects) + len(self.gc_other)

    def add(self, other: "RegionPointers") -> None:
        self.gc_objects += other.gc_objects
        self.gc_other += other.gc_other
        for k, v in other.other.items():
            self.other.setdefault(k, []).extend(v)


def region_pointers(heap: "ClrHeap", region: DescribedRegion, everything: RegionIndex, pinned: set[int] | None
                    ) -> RegionPointers:
    """The pointers in ``region`` to any region of the map: GC heap objects (only pinned
    ones by object when ``pinned`` is given), else grouped by image or kind."""
    ix = heap.index()
    out = RegionPointers()
    for _base, words in _words(heap, region.start, region.end):
        where = everything.lookup(words)
        for k in np.flatnonzero(where >= 0).tolist():
            r = everything.regions[int(where[k])]
            value = int(words[k])
            if r.name == GC_HEAP:
                pos = ix.containing(value)
                if pos is None:
                    continue
                if pinned is None or pos in pinned:
                    out.gc_objects.append(pos)
                else:
                    out.gc_other.append(value)
            else:
                out.other.setdefault(r.image or r.name, []).append(value)
    return out


def most_common(values: list[int]) -> int:
    """The value seen most often (the first of those when tied): SOS's "RndPtr"."""
    counts: dict[int, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return max(counts, key=lambda v: counts[v]) if counts else 0
