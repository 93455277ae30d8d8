"""The target's address space, each mapping named by what uses it, as SOS's maddress does.

The mappings come from the target (targets/regions.py). The runtime's own ranges are laid
over them, splitting a mapping where one begins or ends: the GC heap's committed segment or
region memory ("GCHeap") and its reserved tail ("[GCHeapReserve]"), and the handle table's
pages ("HandleTable"). A mapping holding a thread's stack pointer is "Stack"; a file that
is a loaded module is "Image". The rest is named by its protection in Windows' words
(PAGE_READWRITE ...), with MAPPED instead of PAGE for other files, as SOS names them.
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import SosError
from ..targets.regions import Region, target_regions

if TYPE_CHECKING:
    from .runtime import ClrRuntime

PAGE = 0x1000
_PROTECTIONS = {"---": "PAGE_NOACCESS", "r--": "PAGE_READONLY", "rw-": "PAGE_READWRITE", "-w-": "PAGE_READWRITE",
                "r-x": "PAGE_EXECUTE_READ", "--x": "PAGE_EXECUTE", "rwx": "PAGE_EXECUTE_READWRITE",
                "-wx": "PAGE_EXECUTE_READWRITE"}


@dataclass(frozen=True, slots=True)
class DescribedRegion:
    start: int
    end: int  # exclusive
    name: str  # the memory kind SOS groups by
    type: str  # MEM_IMAGE, MEM_MAPPED or MEM_PRIVATE
    state: str  # MEM_COMMIT or MEM_RESERVE
    protection: str  # PAGE_...
    image: str  # the file behind an image or mapped file, "" otherwise

    @property
    def size(self) -> int:
        return self.end - self.start


def _clr_ranges(runtime: "ClrRuntime") -> list[tuple[int, int, str]]:
    """(start, end, kind) of the runtime's own memory that the mappings do not tell apart."""
    heap = runtime.heap
    out: list[tuple[int, int, str]] = []
    for seg in heap.segments:
        lo = seg.start & ~(PAGE - 1)
        if seg.committed > lo:
            out.append((lo, seg.committed, "GCHeap"))
        if seg.reserved > seg.committed:
            out.append((seg.committed, seg.reserved, "[GCHeapReserve]"))
    from .roots.roots import read_handles
    pages = sorted({h.address & ~(PAGE - 1) for h in read_handles(heap)})
    for p in pages:
        out.append((p, p + PAGE, "HandleTable"))
    return out


def _stack_pointers(runtime: "ClrRuntime") -> list[int]:
    target = runtime.target
    sps = []
    for t in target.threads():
        try:
            regs = target.registers(t.tid)
        except SosError:
            continue
        sp = regs.get("rsp") or regs.get("sp")
        if sp:
            sps.append(sp)
    return sorted(sps)


def address_map(runtime: "ClrRuntime", include_reserve: bool = False) -> list[DescribedRegion]:
    target = runtime.target
    regions = target_regions(target)
    modules = {m.path for m in target.modules()}
    clr = sorted(_clr_ranges(runtime))
    sps = _stack_pointers(runtime)
    out: list[DescribedRegion] = []
    for r in regions:
        for start, end, kind in _split(r, clr):
            state = "MEM_RESERVE" if r.perms == "---" else "MEM_COMMIT"
            if state == "MEM_RESERVE" and not include_reserve:
                continue
            file = r.path if r.path and not r.path.startswith("[") else ""
            mtype = "MEM_IMAGE" if file in modules and file else "MEM_MAPPED" if file else "MEM_PRIVATE"
            prot = _PROTECTIONS.get(r.perms, "PAGE_NOACCESS")
            name = kind
            if not name:
                i = bisect_right(sps, end - 1) - 1
                if i >= 0 and start <= sps[i] < end or r.path == "[stack]":
                    name = "Stack"
                elif state == "MEM_RESERVE":
                    name = "[RESERVED]"
                elif mtype == "MEM_IMAGE":
                    name = "Image"
                elif mtype == "MEM_MAPPED":
                    name = prot.replace("PAGE", "MAPPED")
                else:
                    name = prot
            elif kind == "[GCHeapReserve]":
                state = "MEM_RESERVE"
                if not include_reserve:
                    continue
            out.append(DescribedRegion(start, end, name, mtype, state, prot, file))
    return out


def _split(r: Region, clr: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """``r`` cut where the runtime's ranges begin and end: (start, end, kind or "")."""
    pieces: list[tuple[int, int, str]] = []
    pos = r.start
    for s, e, kind in clr:
        if e <= pos or s >= r.end:
            continue
        s, e = max(s, pos), min(e, r.end)
        if s > pos:
            pieces.append((pos, s, ""))
        pieces.append((s, e, kind))
        pos = e
    if pos < r.end:
        pieces.append((pos, r.end, ""))
    return pieces
