"""GC heap segments and regions, and the generations their objects belong to.

With regions (.NET 7+ default) every region belongs to exactly one generation list. With
segments (``DOTNET_GCName=libclrgc.so`` and older runtimes) the small-object segments form
one chain ending in the ephemeral segment, which holds gen2, gen1 and gen0 back to back,
split at the generations' allocation starts.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from ...dac.structs import GcHeapDetails, GenerationData

# heap_segment flags (gcpriv.h), as the DAC reports them.
SEGMENT_FLAG_READONLY = 0x1  # frozen: string literals and other NonGC objects
SEGMENT_FLAG_LOH = 0x8
SEGMENT_FLAG_POH = 0x200


class Generation(enum.IntEnum):
    """Where an object lives, with SOS's names for the non-numbered heaps."""

    GEN0 = 0
    GEN1 = 1
    GEN2 = 2
    LOH = 3
    POH = 4
    FROZEN = 5

    @property
    def label(self) -> str:
        return _LABELS[self]


_LABELS = {Generation.GEN0: "gen0", Generation.GEN1: "gen1", Generation.GEN2: "gen2",
           Generation.LOH: "loh", Generation.POH: "poh", Generation.FROZEN: "foh"}

# Accepted spellings of dumpheap -gen (SOS accepts the long names too).
GENERATION_NAMES = {
    "gen0": Generation.GEN0, "0": Generation.GEN0,
    "gen1": Generation.GEN1, "1": Generation.GEN1,
    "gen2": Generation.GEN2, "2": Generation.GEN2,
    "loh": Generation.LOH, "large": Generation.LOH, "gen3": Generation.LOH,
    "poh": Generation.POH, "pinned": Generation.POH, "gen4": Generation.POH,
    "foh": Generation.FROZEN, "frozen": Generation.FROZEN, "nongc": Generation.FROZEN,
}


class SegmentKind(enum.Enum):
    SOH = "soh"
    LOH = "loh"
    POH = "poh"
    FROZEN = "frozen"


@dataclass(frozen=True, slots=True)
class GenerationRange:
    generation: Generation
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class ClrSegment:
    """One heap_segment (a segment, or a region with regions enabled)."""

    address: int  # the heap_segment structure
    heap: int  # subheap index
    kind: SegmentKind
    start: int  # first object ("mem")
    end: int  # end of objects ("allocated"; alloc_allocated for the ephemeral one)
    committed: int
    reserved: int
    flags: int
    generation: Generation | None  # the region's generation; None for a multi-gen segment
    ranges: tuple[GenerationRange, ...]  # object ranges by generation, in address order

    @property
    def length(self) -> int:
        return self.end - self.start

    @property
    def is_large(self) -> bool:
        return self.kind in (SegmentKind.LOH, SegmentKind.POH)

    def generation_of(self, address: int) -> Generation | None:
        for r in self.ranges:
            if r.start <= address < r.end:
                return r.generation
        if self.start <= address < self.reserved and self.ranges:
            return self.ranges[-1].generation  # past the last object, still this segment
        return None

    def contains(self, address: int) -> bool:
        return self.start <= address < self.end


@dataclass(frozen=True, slots=True)
class ClrSubHeap:
    """One GC heap: the only one with workstation GC, one per core with server GC."""

    index: int
    address: int  # gc_heap* with server GC, 0 with workstation GC
    details: GcHeapDetails
    generations: tuple[GenerationData, ...]  # gen0, gen1, gen2, LOH and (.NET 5+) POH
    fill_pointers: tuple[int, ...]  # the finalization queue's partition
