"""The runtime's native heaps, as SOS's eeheap lists them: each domain's LoaderAllocator heaps
(LowFrequencyHeap, HighFrequencyHeap, StubHeap …) and each JIT manager's code heaps.

A loader heap is a list of reserved blocks; the DAC walks it. A block's "actual" size is the
part of it that can be read, page by page from its start (SOS's measure: a dump may hold only
part of a block, and a live block is committed as it fills); what is reserved past that in a
block the heap has left behind is "wasted".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...dac.sos import LOADER_HEAP_EXPLICIT_CONTROL, LOADER_HEAP_NORMAL

if TYPE_CHECKING:
    from ..typesystem.modules import ClrAppDomain
    from ..runtime import ClrRuntime

PAGE = 0x1000
CODE_HEAP_LOADER, CODE_HEAP_HOST = 0, 1
# SOS's order for a domain's heaps (by SOS's names); other names follow in the runtime's order.
_ORDER = ("LowFrequencyHeap", "HighFrequencyHeap", "StubHeap", "ExecutableHeap", "FixupPrecodeHeap",
          "NewStubPrecodeHeap", "IndirectionCellHeap", "LookupHeap", "ResolveHeap", "DispatchHeap",
          "CacheEntryHeap", "VtableHeap")
# The loader heap kinds SOS knows (ClrMD's NativeHeapKind); SOS calls any other "Unknown".
SOS_HEAP_KINDS = frozenset(_ORDER)
# SOS's names for the runtime's heap names where they differ.
_SOS_NAMES = {"IndcellHeap": "IndirectionCellHeap"}


@dataclass(frozen=True, slots=True)
class NativeHeapBlock:
    address: int
    size: int | None  # reserved size; None when the runtime does not say
    actual: int  # readable bytes from the start, in whole pages
    current: bool  # the block the heap allocates from now

    @property
    def wasted(self) -> int:
        return self.size - self.actual if self.size and self.actual < self.size and not self.current else 0


@dataclass(frozen=True, slots=True)
class NativeHeap:
    kind: str  # SOS's NativeHeapKind name: LowFrequencyHeap, LoaderCodeHeap, HostCodeHeap …
    address: int  # the LoaderHeap (or host code heap) itself
    blocks: tuple[NativeHeapBlock, ...]

    @property
    def size(self) -> int:
        return sum(b.actual for b in self.blocks)

    @property
    def wasted(self) -> int:
        return sum(b.wasted for b in self.blocks)


@dataclass(frozen=True, slots=True)
class JitManagerHeaps:
    address: int
    heaps: tuple[NativeHeap, ...]


def _actual_size(runtime: "ClrRuntime", address: int, size: int) -> int:
    readable = 0
    while readable < size and len(runtime.target.read_partial(address + readable, 1)) == 1:
        readable += PAGE
    return min(readable, size)


def _blocks(runtime: "ClrRuntime", heap: int, kind: int) -> tuple[NativeHeapBlock, ...]:
    if not heap:
        return ()
    found = runtime.reader.traverse_loader_heap(heap, kind)
    if not found:
        return ()
    out = []
    for address, size, current in found:
        sane = size if 0 <= size <= 0x7FFFFFFF else None
        out.append(NativeHeapBlock(address, sane, _actual_size(runtime, address, sane or 0), current))
    return tuple(out)


def domain_loader_allocator(runtime: "ClrRuntime", domain: "ClrAppDomain") -> int | None:
    return runtime.reader.domain_loader_allocator(domain.address)


def domain_heaps(runtime: "ClrRuntime", domain: "ClrAppDomain") -> list[NativeHeap]:
    """A domain's loader heaps in SOS's order: its LoaderAllocator's (.NET 8+), else the three
    heaps the domain record names."""
    la = domain_loader_allocator(runtime, domain)
    named = runtime.reader.loader_allocator_heaps(la) if la else None
    if named is None:
        d = domain.data
        named = [("LowFrequencyHeap", d.low_frequency_heap, LOADER_HEAP_NORMAL),
                 ("HighFrequencyHeap", d.high_frequency_heap, LOADER_HEAP_NORMAL),
                 ("StubHeap", d.stub_heap, LOADER_HEAP_NORMAL)]
    heaps = [NativeHeap(_SOS_NAMES.get(n, n), a, _blocks(runtime, a, k)) for n, a, k in named if a]

    def order(h: NativeHeap) -> int:
        return _ORDER.index(h.kind) if h.kind in _ORDER else len(_ORDER)
    return sorted(heaps, key=order)


def code_heaps(runtime: "ClrRuntime") -> list[JitManagerHeaps]:
    """Every JIT manager with its code heaps: a LoaderCodeHeap is walked as the explicit-control
    loader heap it is; a HostCodeHeap (dynamic methods) is one range up to its current end."""
    out = []
    for m in runtime.reader.jit_managers():
        heaps = []
        for c in runtime.reader.code_heaps(m.manager_addr):
            if c.code_heap_type == CODE_HEAP_LOADER:
                heaps.append(NativeHeap("LoaderCodeHeap", c.base,
                                        _blocks(runtime, c.base, LOADER_HEAP_EXPLICIT_CONTROL)))
            elif c.code_heap_type == CODE_HEAP_HOST and c.current >= c.base:
                size = c.current - c.base
                block = NativeHeapBlock(c.base, size, _actual_size(runtime, c.base, size), True)
                heaps.append(NativeHeap("HostCodeHeap", c.base, (block,)))
        kinds = {"LoaderCodeHeap": 0, "HostCodeHeap": 1}
        heaps.sort(key=lambda h: (kinds[h.kind], h.address))
        out.append(JitManagerHeaps(m.manager_addr, tuple(heaps)))
    return out
