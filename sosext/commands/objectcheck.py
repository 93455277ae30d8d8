"""One object's health and its neighbours: verifyobj, listnearobj.

Both answer from the heap walk (the index knows where every object starts and how large it is)
and from the object's reference slots, as verifyheap does for the whole heap.
"""
from __future__ import annotations

import numpy as np

from ..clr.addresses import classifier
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
    address = parse_address(text)
    if not address:
        raise SosError(f"Invalid object address: '{text}'")  # SOS fails there too
    return address


@register
class VerifyObj(Command):
    names = ("verifyobj", "VerifyObj")
    summary = "Check one object: its MethodTable, its size within its segment, and every reference it holds."
    usage = "verifyobj <object address>"
    details = """\
`object 0x… is a valid object` when its header is a MethodTable the runtime recognises and
every non-null reference it holds points at the start of a heap object; otherwise one row per
problem (offset, issue, description) and the count. An address that is not an object start
gets SOS's row for it (ObjectNotPointerAligned, ObjectNotOnTheHeap, or InvalidMethodTable with
the word found where a header would be), as SOS reports it: no failure.

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
            row = _not_an_object_row(heap, address)
            if row is None:
                raise SosError(heap.explain_non_object(address))
            # SOS (ClrMD's FullyVerifyObject) reports such an address in its table as the
            # corruption it finds there, and does not call it a failure.
            _corruption_table(ctx, [row])
            return
        bad = [(off, value) for off, value in ClrObject(heap, address).reference_slots() if ix.find(value) is None]
        if not bad:
            ctx.out.line(f"object 0x{address:x} is a valid object")
            return
        _corruption_table(ctx, [(off, "InvalidObjectReference",
                                 f"Object {address:x} has a bad member at offset {off:x}: {value:x}")
                                for off, value in sorted(bad)])


def _not_an_object_row(heap: ClrHeap, address: int) -> tuple[int, str, str] | None:
    """SOS's corruption row for an address that starts no object: not pointer aligned, outside
    every segment, or on one with no MethodTable where its header would be (None otherwise)."""
    if address % 8:
        return 0, "ObjectNotPointerAligned", f"Object {address:x} is not pointer aligned"
    if heap.segment_of(address) is None:
        return 0, "ObjectNotOnTheHeap", f"Tried to validate {address:x} but its address was not on any segment."
    raw = bytes(heap.runtime.target.read_partial(address, 8))
    if len(raw) < 8:
        return None
    value = int.from_bytes(raw, "little")
    if classifier(heap.runtime).method_table_or_none(value & ~1) is not None:
        return None  # a stale header: SOS would verify it as an object
    return 0, "InvalidMethodTable", f"Object {address:x} has an invalid method table {value:x}"


# SOS sizes the Issue column for the longest ObjectCorruptionKind name, ObjectReferenceNotPointerAligned.
_ISSUE_WIDTH = 32


def _corruption_table(ctx: CommandContext, rows: list[tuple[int, str, str]]) -> None:
    """SOS's verifyobj table: offset (0x and two digits at least, the column as wide as its
    widest cell or its title), issue, description; then the count."""
    cells = [f"0x{off:02x}" for off, _k, _d in rows]
    width = max(len("Offset"), *(len(c) for c in cells))
    ctx.out.line(f"{'Offset':<{width}} {'Issue':<{_ISSUE_WIDTH}} Description")
    for cell, (_off, kind, text) in zip(cells, rows):
        ctx.out.line(f"{cell:<{width}} {kind:<{_ISSUE_WIDTH}} {text}")
    ctx.out.line()
    ctx.out.line(f"{len(rows):,} error{'' if len(rows) == 1 else 's'}  detected.")


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
        address = _address(args.address) & ~7  # SOS aligns the address down to a pointer
        heap = ctx.heap
        seg = heap.segment_of(address)
        if seg is None:
            # SOS's answer, no failure.
            line = f"Failed to find the segment of the managed heap where the object {address:x} resides"
            ctx.out.field("message", line, line)
            return
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
