"""Which stack memory a conservative scan (dumpstackobjects) reads, as dotnet-dump decides it.

Linux has no TEB to give a thread's stack base, so dotnet-dump 10 bounds the scan by the
managed walk: from the stack pointer (or the lowest frame, if lower) to 0x2000 bytes past the
highest frame's stack pointer (a runtime Frame counts at its address). That end may lie past
the thread's stack base, in the TLS block that follows it, and slots there are shown too.
When the frames sit far (more than 4 MiB) from the stack pointer, or split in two regions
that far apart, the thread is taken to run on an alternate signal stack: the region around
the stack pointer is scanned (64 KiB when no frame is there) and the frames' region too.
A thread without managed frames gets the 64 KiB after its stack pointer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import SosError
from .stacks import walk_stack

if TYPE_CHECKING:
    from ..runtime import ClrRuntime

_GAP = 0x400000  # frames farther apart than this are on two stacks
_PAST_FRAMES = 0x2000  # read this far past the highest frame
_NO_FRAMES = 0xFFFF  # read this far past the stack pointer when the frames do not tell


@dataclass(frozen=True, slots=True)
class ScanRanges:
    main: tuple[int, int]  # [low, high) around the stack pointer
    other: tuple[int, int] | None  # the normal stack, when the thread seems on an alternate one

    @property
    def scanned(self) -> tuple[tuple[int, int], ...]:
        return (self.main,) if self.other is None else (self.main, self.other)


def _down(a: int) -> int:
    return a & ~7


def _up(a: int) -> int:
    return (a + 7) & ~7


def stack_scan_ranges(runtime: "ClrRuntime", os_tid: int, sp: int) -> ScanRanges:
    """The ranges dumpstackobjects reads for thread ``os_tid`` stopped at ``sp``."""
    around_sp = (_down(sp), _up(sp + _NO_FRAMES))
    try:
        frames = walk_stack(runtime, os_tid).frames
    except SosError:
        frames = ()
    sps = sorted(f.sp for f in frames if f.sp)
    if not sps:
        return ScanRanges(around_sp, None)
    gap, at = max(((sps[i] - sps[i - 1], i) for i in range(1, len(sps))), default=(0, -1))
    if gap > _GAP and at > 0:
        lower = (_down(sps[0]), _up(sps[at - 1] + _PAST_FRAMES))
        upper = (_down(sps[at]), _up(sps[-1] + _PAST_FRAMES))
        if max(sps[0], _GAP) - _GAP <= sp <= sps[at - 1] + _PAST_FRAMES:
            return ScanRanges((_down(min(sp, sps[0])), lower[1]), upper)
        if max(sps[at], _GAP) - _GAP <= sp <= sps[-1] + _PAST_FRAMES:
            return ScanRanges((_down(min(sp, sps[at])), upper[1]), lower)
        bigger = upper if sps[-1] - sps[at] >= sps[at - 1] - sps[0] else lower
        return ScanRanges(around_sp, bigger)
    end = sps[-1] + _PAST_FRAMES
    if sp > end or (sp < sps[0] and sps[0] - sp > _GAP):
        return ScanRanges(around_sp, (_down(sps[0]), _up(end)))
    return ScanRanges((_down(min(sp, sps[0])), _up(end)), None)
