"""One object's health and its neighbours: verifyobj, listnearobj.

Both answer from the heap walk (the index knows where every object starts and how large it is)
and from the object's reference slots, as verifyheap does for the whole heap.
"""
from __future__ import annotations

import numpy as np

from ..clr.heap.heap import ClrHeap
from ..clr.heap.objects import ClrObject
from ..errors import SosError
from ..render.table import fmt_pointer
from ..render.text import safe_line as escape
from .base import Command, Parsed, Positional, parse_address, register
from .context import CommandContext


def _address(text: str | None) -> int:
    if text is None:
        raise SosError("Missing object address")
    return parse_address(text)


@register
class VerifyObj(Command):
    names = ("verifyobj", "VerifyObj")
    summary = "Check one object: its MethodTable, its size within its segment, and every reference it holds."
    usage = "verifyobj <object address>"
    details = """\
`object 0x… is a valid object` when its header is a MethodTable the runtime recognises and
every non-null reference it holds points at the start of a heap object; otherwise one row per
problem (offset, issue, description) and the count. An address that is not an object start
gets one line saying what it is (inside another object, outside the GC heap).

Example:
  verifyobj 7f3a14005678"""
    positionals = (Positional("address", "the object"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        address = _address(args.address)
        heap = ctx.heap
        ix = heap.index(ctx.progress)
        for e in ix.errors:
            if e.address == address:
                raise SosError(f"object 0x{address:x} does not have valid method table ({e.method_table:#x})")
        i = ix.find(address)
        if i is None:
            raise SosError(heap.explain_non_object(address))
        bad = [(off, value) for off, value in ClrObject(heap, address).reference_slots() if ix.find(value) is None]
        if not bad:
            ctx.out.line(f"object 0x{address:x} is a valid object")
            return
        width = max(len(f"0x{off:x}") for off, _v in bad)
        ctx.out.line(f"{'Offset':<{width}} {'Issue':<22} Description")
        for off, value in sorted(bad):
            ctx.out.line(f"{f'0x{off:x}':<{width}} {'InvalidObjectReference':<22} "
                         f"Object {address:x} has a bad member at offset {off:x}: {value:x}")
        ctx.out.line()
        ctx.out.line(f"{len(bad):,} error{'' if len(bad) == 1 else 's'}  detected.")


def _size_text(size: int) -> str:
    return f"{size:,} (0x{size:x})"


@register
class ListNearObj(Command):
    names = ("listnearobj", "lno", "ListNearObj")
    summary = "The objects before and after an address on its segment, and whether they line up."
    usage = "listnearobj <address>"
    details = """\
As SOS: the object before the address (`Before:`), the object at it (`Current:`, when the
address is an object start), the next one (`Next:`), and any allocation context between them
(`Gap:`). The heap is locally consistent when each object ends (aligned) where the next one,
or an allocation context, begins. The address may be anywhere in a segment.

Example:
  listnearobj 7f3a14005678"""
    positionals = (Positional("address", "an address in the GC heap"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        address = _address(args.address)
        heap = ctx.heap
        seg = heap.segment_of(address)
        if seg is None:
            raise SosError(f"Failed to find the segment of the managed heap where the object {address:x} resides")
        ix = heap.index(ctx.progress)
        sl = next((s for s in ix.slices if s.segment.start == seg.start), None)
        if sl is None or sl.first == sl.stop:
            ctx.out.line(f"Segment {seg.address:x} has no objects.")
            return
        # As SOS, the address column widens to the widest allocation context range of the segment.
        width = max([16, *(len(f"{p:x}-{lim:x}") for p, lim in heap.alloc_contexts if seg.start <= p < seg.end)])
        rows: list[tuple[str, int, int]] = []   # (which, position, -) in address order
        at = ix.containing(address)
        exact = at is not None and int(ix.addresses[at]) == address
        after = int(np.searchsorted(ix.addresses[sl.first:sl.stop], np.uint64(address), side="right")) + sl.first
        before = after - 1 - (1 if exact else 0)
        if before >= sl.first:
            rows.append(("Before:", before, 0))
        elif exact:
            ctx.out.line(f"Address {address:x} is the first object on the segment.")
        else:
            ctx.out.line(f"Address {address:x} is before the first object on the segment.")
        if exact:
            rows.append(("Current:", at, 0))
        if after < sl.stop:
            rows.append(("Next:", after, 0))
        consistent = True
        printed_end: int | None = None
        for which, pos, _ in rows:
            start = int(ix.addresses[pos])
            if printed_end is not None and start != printed_end:
                gap = self._gap(heap, printed_end, start)
                if gap is not None:
                    self._row(ctx, width, "Gap:", f"{gap[0]:x}-{gap[1]:x}", _size_text(gap[1] - gap[0]),
                              "GC Allocation Context (expected gap in the heap)")
                else:
                    consistent = False
                    ctx.out.line(f"Expected to find next object at {printed_end:x}, instead found it at {start:x}.")
            size = ix.size_of(pos)
            self._row(ctx, width, which, fmt_pointer(start), _size_text(size), heap.csharp_type_name_at(pos))
            printed_end = start + ((size + 7) & ~7)
        if rows and rows[-1][0] != "Next:":
            last = int(ix.addresses[rows[-1][1]])
            ctx.out.line(f"{last:x} is the last object on the segment")
        ctx.out.line("Heap local consistency confirmed." if consistent else "Heap local consistency not confirmed.")

    @staticmethod
    def _gap(heap: ClrHeap, end: int, start: int) -> tuple[int, int] | None:
        """The allocation context between an object's end and the next object, if one explains it."""
        for ptr, limit in heap.alloc_contexts:
            if end <= ptr < start:
                return ptr, limit
        return None

    @staticmethod
    def _row(ctx: CommandContext, width: int, which: str, where: str, size: str, name: str) -> None:
        # SOS's columns: kind (9, left), address (right), size text (32, left), type name.
        ctx.out.line(escape(f"{which:<9} {where:>{width}} {size:<32} {name}"))
