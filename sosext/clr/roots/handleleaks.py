"""GC handle leaks: strong and pinned handles whose address nothing in the process holds.

A GCHandle's value is the address of its slot in the runtime's handle table. Code that
allocates one keeps that value somewhere (a GCHandle field, a native struct) to free it
later; a handle whose value appears nowhere in committed memory can never be freed, and
its target stays alive for good. The scan reads every readable mapping of the target and
looks for each handle value (low bit ignored, as the runtime tags some handles with it),
as SOS's gchandleleaks does. It finds false positives (stale copies), never false leaks
of values stored plainly.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import numpy as np

from ...targets.regions import target_regions
from ..progress import check_interrupt
from .roots import read_handles

if TYPE_CHECKING:
    from ..heap.heap import ClrHeap

_CHUNK = 1 << 22
# Pseudo-mappings the kernel serves specially: reading them fails or means nothing.
_SKIP = ("[vvar]", "[vvar_vclock]", "[vsyscall]")


@dataclass
class HandleScan:
    handles: list[int]  # strong and pinned handle values, in handle-table order, low bit cleared
    hits: list[tuple[int, int]] = field(default_factory=list)  # (handle, where its value was found)
    scanned: int = 0  # bytes read

    @property
    def found(self) -> set[int]:
        return {h for h, _w in self.hits}

    @property
    def not_found(self) -> list[int]:
        f = self.found
        return [h for h in self.handles if h not in f]


def strong_handles(heap: "ClrHeap") -> list[int]:
    out: list[int] = []
    seen: set[int] = set()
    for h in read_handles(heap):
        if h.is_strong or h.handle_type in (3, 7):  # pinned and async pinned count even when strong says no
            a = h.address & ~1
            if a not in seen:
                seen.add(a)
                out.append(a)
    return out


def scan_for_handles(heap: "ClrHeap", on_hit: Callable[[int, int], None] | None = None) -> HandleScan:
    """Every place in the target's readable memory that holds a strong handle's value, until
    each handle has been seen once."""
    scan = HandleScan(strong_handles(heap))
    if not scan.handles:
        return scan
    target = heap.runtime.target
    wanted = np.array(sorted(scan.handles), dtype=np.uint64)
    found: set[int] = set()
    mask = np.uint64(~1 & 0xFFFFFFFFFFFFFFFF)
    for region in target_regions(target):
        if not region.readable or region.path in _SKIP:
            continue
        pos = region.start
        while pos < region.end:
            check_interrupt()
            n = min(_CHUNK, region.end - pos)
            data = target.read_partial(pos, n)
            got = len(data) & ~7
            if got == 0:
                # Unreadable here (a core's omitted pages): skip the rest of this page.
                pos = (pos | 0xFFF) + 1
                continue
            scan.scanned += got
            words = np.frombuffer(data, dtype=np.uint64, count=got // 8) & mask
            hits = np.flatnonzero(np.isin(words, wanted, assume_unique=False))
            for i in hits.tolist():
                value = int(words[i])
                scan.hits.append((value, pos + 8 * i))
                if on_hit is not None:
                    on_hit(value, pos + 8 * i)
                found.add(value)
                if len(found) == len(wanted):
                    return scan
            pos += got
    return scan
