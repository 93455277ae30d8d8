"""Heap commands: dumpheap, eeheap, gcheapstat, gcwhere."""
from __future__ import annotations

import os
import shutil
import unicodedata
from typing import Iterable, Iterator

import numpy as np

from ..clr.addresses import AddressKind, classifier
from ..clr.heap.heap import ClrHeap
from ..clr.heap.heapstats import HeapStatistics
from ..clr.heap.index import HeapIndex
from ..clr.code.loaderheaps import SOS_HEAP_KINDS, NativeHeapBlock, code_heaps, domain_heaps, domain_loader_allocator
from ..clr.heap.objects import string_text, thin_lock
from ..clr.progress import polled
from ..clr.heap.segments import GENERATION_NAMES, ClrSegment, Generation, SegmentKind
from ..errors import SosAnswer, SosError, UsageError
from ..render.json import emit_json
from ..render.output import Address, Output, TableWriter, hint
from ..render.numbers import count as fmt_count
from .rootnotices import live_objects
from ..render.numbers import hex_and_dec, p16
from ..render.table import Column, Integer, Pointer, Table, Text, TypeName, fmt_pointer
from .base import Command, Option, Parsed, Positional, add_length, parse_address, parse_count, parse_mt, register
from .context import CommandContext



# gen3/gen4 are the GC's internal numbers of LOH and POH; SOS does not take them and a
# user who types them means a fourth generation that does not exist.
_NOT_GENERATIONS = ("gen3", "gen4", "3", "4")


def parse_generation(text: str) -> Generation:
    g = GENERATION_NAMES.get(text.lower()) if text.lower() not in _NOT_GENERATIONS else None
    if g is None:
        raise UsageError(f"Unknown generation: {text}. Only gen0, gen1, gen2, loh (large), "
                         "poh (pinned) and foh (frozen) are supported")
    return g


def parse_range(start: str | None, end: str | None) -> tuple[int | None, int | None]:
    """dumpheap/eeheap's [start [end]]: hex addresses; ``end`` may be ``L<length>``."""
    if start is None:
        return None, None
    try:
        lo = parse_address(start)
    except UsageError:
        raise UsageError(f"Invalid start address: {start}") from None
    if end is None:
        return lo, None
    try:
        length = parse_address(end[1:]) if end[:1] in ("L", "l") else None
        hi = parse_address(end) if length is None else None
    except UsageError:
        raise UsageError(f"Invalid end address: {end.lstrip('Ll')}") from None
    if hi is None:
        hi = add_length(lo, length, end[1:])
    if hi <= lo:
        raise UsageError(f"Start address must be before end address: '{start}' < '{end}'")
    return lo, hi


def segment_matches(seg: ClrSegment, value: int) -> bool:
    return seg.address == value or committed_start(seg) <= value < seg.committed


def committed_start(seg: ClrSegment) -> int:
    """Where the segment's committed memory begins (SOS shows committed length from here): a
    segment of the segments GC holds its heap_segment header at its start, so from there; a
    region from the page its objects start in."""
    if seg.kind is SegmentKind.FROZEN:
        return seg.start - 8
    if seg.address <= seg.start and seg.start - seg.address <= 0x10000:
        return seg.address
    return seg.start & ~0xFFF


def select_objects(heap: ClrHeap, ix: HeapIndex, *, heap_no: int | None = None, segment: int | None = None,
                   start: int | None = None, end: int | None = None, gen: Generation | None = None,
                   min_size: int | None = None, max_size: int | None = None,
                   mt: int | None = None, type_substring: str | None = None) -> np.ndarray:
    """The objects dumpheap's filters keep, as a mask over the index."""
    mask = ix.all()
    if heap_no is not None:
        if not any(sh.index == heap_no for sh in heap.subheaps):
            raise SosError(f"No GC heap with index of {heap_no}")
        mask &= ix.mask_slices(lambda s: s.heap == heap_no)
    if segment:
        mask &= ix.mask_slices(lambda s: segment_matches(s, segment))
    if start is not None:
        if not any(committed_start(s) < (end or 1 << 64) and s.committed > start for s in heap.segments):
            raise SosError(f"No segments or objects in range [{start:x},{(end or (1 << 64) - 1):x})")
        mask &= ix.mask_range(start, end)
    if gen is not None:
        mask &= ix.mask_generation(gen)
    if min_size or max_size:
        mask &= ix.mask_size(min_size or None, max_size or None)
    if type_substring is not None:
        # SOS's managed dumpheap matches C#-shaped generic names (ConcurrentDictionary<System.Int32, ...>);
        # the runtime's own form (ConcurrentDictionary`2[[System.Int32, ...]]) matches too.
        ids = [i for i, m in enumerate(ix.method_tables.tolist())
               if type_substring in heap.types.name_of(m) or type_substring in heap.types.csharp_name_of(m)]
        mask &= ix.mask_type_ids(ids)
    if mt is not None:
        mask &= ix.mask_method_tables([mt])
    return mask


def type_stats(heap: ClrHeap, ix: HeapIndex, mask: np.ndarray, by_count: bool = False) -> list[tuple[int, int, int]]:
    """(MethodTable, count, total size) sorted as SOS does: ascending, ties in walk order."""
    counts, totals, first = ix.type_totals(mask)
    present = np.nonzero(counts)[0]
    if not len(present):
        return []
    key = counts[present] if by_count else totals[present]
    order = np.lexsort((first[present], key))
    return [(int(ix.method_tables[present[i]]), int(counts[present[i]]), int(totals[present[i]]))
            for i in order]


def sequence_stats(ix: HeapIndex, positions: np.ndarray) -> list[tuple[int, int, int]]:
    """(MethodTable, count, total size) of the objects at ``positions`` (each once), sorted as
    SOS's statistics of a sequence of objects (objsize's closure, finalizequeue's queue):
    ascending total, ties in the order each type first appears in the sequence."""
    if not len(positions):
        return []
    tids = ix.type_ids[positions]
    sizes = np.array(ix.sizes_at(positions), dtype=np.int64)
    kinds, first = np.unique(tids, return_index=True)
    slot = np.searchsorted(kinds, tids)
    counts = np.bincount(slot, minlength=len(kinds))
    totals = np.zeros(len(kinds), dtype=np.int64)
    np.add.at(totals, slot, sizes)
    order = np.lexsort((first, totals))
    return [(int(ix.method_tables[kinds[i]]), int(counts[i]), int(totals[i])) for i in order]


def write_stats(ctx: CommandContext, heap: ClrHeap, stats: list[tuple[int, int, int]]) -> None:
    """SOS's managed statistics table (dumpheap, dumpgen, objsize, finalizequeue …): names as
    ClrMD gives them; the JSON keeps the runtime's name in "name" and ClrMD's in "csharp_name"."""
    if not stats and not ctx.out.structured:
        return  # SOS prints no statistics (nor totals) when no object matched
    t = Table(Column(16, True, fmt_pointer), Integer(), Integer(), TypeName())
    # An empty table (structured forms only) keeps SOS's 12-wide MT title.
    t.fit(0, (mt for mt, _c, _t in stats), minimum=0 if stats else 12)
    t.fit(1, (c for _m, c, _t in stats)).fit(2, (tt for _m, _c, tt in stats))
    ctx.out.line("Statistics:")
    rows = ctx.out.table("types", t, ("mt", "count", "total_size", "name", "csharp_name"))
    rows.header("MT", "Count", "TotalSize", "Class Name")
    for mt, c, tot in stats:
        shown = heap.types.csharp_name_of(mt)
        rows.row(Address(mt), c, tot, shown, data=(Address(mt), c, tot, heap.types.name_of(mt), shown))
    objects, size = sum(c for _m, c, _t in stats), sum(tt for _m, _c, tt in stats)
    ctx.out.field("total_objects", objects)
    ctx.out.field("total_size", size, f"Total {fmt_count(objects)} objects, {fmt_count(size)} bytes")


def write_retained_stats(ctx: CommandContext, heap: ClrHeap, ix: HeapIndex, mask: np.ndarray, by_count: bool,
                         as_json: bool) -> None:
    """dumpheap -stat -retained: the statistics table with a RetainedSize column."""
    tree = heap.dominators(ctx.progress)
    held = {r.type_id: r.retained for r in tree.retained_by_type(mask)}
    stats = type_stats(heap, ix, mask, by_count)
    if not by_count:
        order = {mt: k for k, (mt, _c, _t) in enumerate(stats)}
        stats.sort(key=lambda s: (held.get(ix.type_id(s[0]), 0), order[s[0]]))
    rows = [(mt, c, tot, held.get(ix.type_id(mt), 0), heap.types.csharp_name_of(mt)) for mt, c, tot in stats]
    if as_json:
        emit_json(ctx.out, {"command": "dumpheap",
                            "types": [{"mt": f"0x{mt:x}", "count": c, "total_size": tot, "retained_size": ret,
                                       "name": heap.types.name_of(mt), "csharp_name": name}
                                      for mt, c, tot, ret, name in rows],
                            "total_objects": sum(r[1] for r in rows), "total_size": sum(r[2] for r in rows)})
        return
    t = Table(Column(16, True, fmt_pointer), Integer(), Integer(), Integer(), TypeName())
    t.fit(0, (r[0] for r in rows), minimum=12)
    ctx.out.line("Statistics:")
    ctx.out.line(t.header("MT", "Count", "TotalSize", "RetainedSize", "Class Name"))
    for r in rows:
        ctx.out.line(t.row(*r))
    ctx.out.line(f"Total {sum(r[1] for r in rows):,} objects, {sum(r[2] for r in rows):,} bytes")
    write_corruption(ctx, ix.errors)


def _whole_heap(args: Parsed) -> bool:
    """No option narrows dumpheap to part of the heap or asks for more than the statistics."""
    narrowing = (args.mt, args.type, args.min, args.max, args.gen, args.heap, args.segment, args.start, args.end)
    return (all(v is None for v in narrowing) and not (args.strings or args.live or args.dead
                                                      or args.thinlock or args.json or args.short or args.retained))


def write_corruption(ctx: CommandContext, errors: list) -> None:
    """Where the walk met memory it could not read as objects: the totals are then partial."""
    if not errors:
        return
    ctx.out.line()
    ctx.out.line(f"Heap corruption: the walk stepped over {fmt_count(len(errors))} place"
                 f"{'' if len(errors) == 1 else 's'} it could not read; the totals above are partial:")
    for e in errors:
        what = f"{e.reason} (MethodTable {e.method_table:x})" if e.method_table else e.reason
        where = f"walk resumed at {e.resumed_at:x}" if e.resumed_at else "walk resumed at the next segment"
        ctx.out.line(f"  {e.address:x}: {what}; {where}")


@register
class DumpHeap(Command):
    names = ("dumpheap", "DumpHeap")
    summary = "Display the objects on the managed heap, or statistics of them."
    usage = "dumpheap [options] [start [end | L<length>]]"
    details = """\
Walks the GC heap (every subheap, segment or region, LOH, POH and the NonGC/frozen heap)
and lists each object's address, MethodTable and size, then per-type statistics sorted
by total size. Filters combine. The walk is done once per stop of the process and reused.
-mt must be a MethodTable and -segment a segment (or an address inside one): anything else
is one error line saying what the address is. A filter that matches nothing prints the
header and "Total 0 objects, 0 bytes".

Examples:
  dumpheap -stat
  dumpheap -type CacheEntry
  dumpheap -mt 00007f3a1c2d4e80 -min 1000
  dumpheap -gen loh -stat
  dumpheap -strings
  dumpheap -dead -stat
  dumpheap -stat --json
  dumpheap -stat -retained

-retained adds RetainedSize: per type, the bytes its reachable objects retain (their own
size and everything only they keep alive), counting an object only when its immediate
dominator is of another type, so that a list's nodes are not counted once per node.
Rows are then sorted by it (-bycount still sorts by count)."""
    options = (
        Option("-stat", "show only the statistics table"),
        Option("-strings", "statistics of string values (or list strings without -stat)"),
        Option("-short", "print only the addresses, one per line"),
        Option("-mt", "only objects with this MethodTable", parse_mt, "MT"),
        Option("-type", "only objects whose type name contains this (case-sensitive) text, also in C#'s shape "
               "(List<System.String>)", str, "partial name"),
        Option("-min", "only objects of at least this many bytes", parse_count, "size"),
        Option("-max", "only objects of at most this many bytes", parse_count, "size"),
        Option("-gen", "only objects in gen0, gen1, gen2, loh (large), poh (pinned) or foh (frozen)", str, "generation"),
        Option("-heap", "only objects of GC heap number n", parse_count, "n"),
        Option("-segment", "only objects of the segment at (or containing) this address", parse_address, "address"),
        Option("-live", "only objects reachable from a root (not with -dead)"),
        Option("-dead", "only objects no root reaches (not with -live); Free and frozen objects included"),
        Option("-thinlock", "list objects that hold a thin lock"),
        Option("-bycount", "sort the statistics by count instead of total size"),
        Option("-retained", "with -stat: add each type's retained bytes and sort by them"),
        Option("-ignoreGCState", "walk even if the GC says the heap is not walkable now"),
        Option("-noprogress", "do not print progress of long walks"),
        Option("--json", "print the result as JSON", dest="json"),
    )
    positionals = (Positional("start", "hex address to start at"), Positional("end", "hex end address or L<length>"))

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        gen = parse_generation(args.gen) if args.gen is not None else None
        start, end = parse_range(args.start, args.end)
        if args.live and args.dead:
            raise UsageError("-live and -dead exclude each other: give one of them")
        if args.strings and args.mt is not None:
            raise UsageError("-strings selects System.String: it cannot be combined with -mt")
        heap = ctx.heap
        heap.check_walkable(args.ignoregcstate)
        check_heap_arguments(heap, args.mt, args.segment)
        progress = ctx.progress if not args.noprogress else None
        if args.stat and _whole_heap(args):
            # The whole heap's statistics need no index: streamed when there is none to reuse.
            self._statistics(ctx, heap, heap.statistics(progress), args.bycount, next_step=True)
            return
        ix = heap.index(progress)
        mt = heap.string_mt if args.strings else args.mt
        mask = select_objects(heap, ix, heap_no=args.heap, segment=args.segment, start=start, end=end, gen=gen,
                              min_size=args.min, max_size=args.max, mt=mt, type_substring=args.type)
        if args.live != args.dead:
            live = live_objects(ctx, quiet=args.short)
            mask &= live if args.live else ~live
        if args.thinlock:
            # A Free object's "header" is whatever the memory held before: never a lock.
            free_id = ix.type_id(heap.free_mt)
            self._thinlocks(ctx, heap, ix, mask & (ix.type_ids != free_id) if free_id is not None else mask)
            return
        if args.retained:
            if not args.stat or args.strings:
                raise UsageError("-retained goes with -stat (and not -strings)")
            write_retained_stats(ctx, heap, ix, mask, args.bycount, args.json)
            return
        if args.json:
            self._json(ctx, heap, ix, mask, args)
            return
        if args.stat and not args.strings:
            # Statistics only: no per-object selection array, two passes of compiled kernels.
            self._statistics(ctx, heap, HeapStatistics.of_index(heap, ix, mask), args.bycount,
                             next_step=args.mt is None)
            return
        if args.short:
            write_addresses(ctx, ix, chunks_of_mask(mask))
            return
        if not args.stat:
            if write_listing(ctx, heap, ix, chunks_of_mask(mask)):
                ctx.out.line()
        sel = np.nonzero(mask)[0]
        if args.strings:
            self._string_stats(ctx, heap, ix, sel)
            return
        self._statistics(ctx, heap, HeapStatistics.of_index(heap, ix, mask), args.bycount)

    @staticmethod
    def _list(ctx: CommandContext, heap: ClrHeap, ix: HeapIndex, sel: np.ndarray) -> bool:
        """The Address/MT/Size listing of the index positions ``sel``, in that order (False: none)."""
        return write_listing(ctx, heap, ix, chunks_of(sel))

    @staticmethod
    def _statistics(ctx: CommandContext, heap: ClrHeap, stats: HeapStatistics, by_count: bool,
                    next_step: bool = False) -> None:
        rows = stats.rows(by_count)
        write_stats(ctx, heap, rows)
        if stats.free_blocks:
            ctx.out.line()
            ctx.out.line("Fragmented blocks larger than 0.5 MB:")
            t = ctx.out.table("fragmented", Table(Pointer(), Integer(), Pointer(), TypeName()),
                              ("address", "size", "next", "next_type", "next_csharp_type"))
            t.header("Address", "Size", "Followed By")
            for b in stats.free_blocks:
                name = heap.types.csharp_name_of(b.next_method_table)
                t.row(b.address, b.size, b.next_address, name,
                      data=(Address(b.address), b.size, Address(b.next_address),
                            heap.types.name_of(b.next_method_table), name))
        write_corruption(ctx, stats.errors)
        biggest = [mt for mt, _c, _t in rows if mt != heap.free_mt]
        if next_step and biggest:  # SOS's way on: the objects of the top type, then a root chain
            hint(ctx.out, f"dumpheap -mt {biggest[-1]:x} lists the {'commonest' if by_count else 'biggest'} "
                          "type's objects; gcroot <address> shows what holds one")

    @staticmethod
    def _string_stats(ctx: CommandContext, heap: ClrHeap, ix: HeapIndex, sel: np.ndarray) -> None:
        target = heap.runtime.target
        groups: dict[tuple[str, int], int] = {}
        for a, size in polled(zip(ix.addresses[sel].tolist(), ix.sizes[sel].tolist())):
            text = string_text(target, a, 1024)
            key = (text, size)
            groups[key] = groups.get(key, 0) + 1
        rows = sorted(((c * size, i, c, text) for i, ((text, size), c) in enumerate(groups.items())))
        if not rows and not ctx.out.structured:
            return  # as SOS: no strings, no statistics
        ctx.out.line("Statistics:")
        limit = _string_width(max(groups.values(), default=0))
        t = ctx.out.table("strings", Table(Integer(), Integer(), Text()), ("count", "total_size", "text"))
        for total, _i, c, text in rows:
            t.row(c, total, _string_cell(text, limit), data=(c, total, text))

    @staticmethod
    def _thinlocks(ctx: CommandContext, heap: ClrHeap, ix: HeapIndex, mask: np.ndarray) -> None:
        target = heap.runtime.target
        t = ctx.out.table("locks", Table(Pointer(), Pointer(), Column(18, True, lambda v: f"0x{int(v):02x}"),
                                         Integer()), ("object", "thread", "os_thread_id", "recursion"))
        # As SOS: the header comes with the first lock; no lock, no output.
        header = False
        for a in polled(ix.addresses[mask].tolist()):
            lock = thin_lock(target, a)
            if lock is None:
                continue  # a hash code or sync block index, or no owner
            if not header:
                t.header("Object", "Thread", "OSId", "Recursion")
                header = True
            recursion = lock.recursion
            thread = heap.runtime.thread_with_lock_id(lock.owner_id)
            t.row(a, thread[0] if thread else None, thread[1] if thread else 0, recursion,
                  data=(Address(a), Address(thread[0]) if thread else None, thread[1] if thread else None, recursion))

    @staticmethod
    def _json(ctx: CommandContext, heap: ClrHeap, ix: HeapIndex, mask: np.ndarray, args: Parsed) -> None:
        stats = type_stats(heap, ix, mask, args.bycount)
        doc = {
            "command": "dumpheap",
            "types": [{"mt": f"0x{mt:x}", "count": c, "total_size": tot, "name": heap.types.name_of(mt),
                       "csharp_name": heap.types.csharp_name_of(mt)} for mt, c, tot in stats],
            "total_objects": sum(c for _m, c, _t in stats),
            "total_size": sum(tot for _m, _c, tot in stats),
        }
        if args.stat or not mask.any():
            if not args.stat:
                doc["objects"] = []
            emit_json(ctx.out, doc)
            return
        # The objects stream a chunk at a time, as the text listing does, and read exactly as
        # json.dumps(indent=2) would print the whole document: "objects" is its last member.
        lines: list[str] = []
        whole = Output(lines.append, chunk=1 << 30)
        emit_json(whole, {**doc, "objects": []})
        whole.flush()
        head = "\n".join(lines)
        tail = '\n  "objects": []\n}'
        if not head.endswith(tail):  # emit_json's layout changed: build the whole document instead
            sel = np.nonzero(mask)[0]
            doc["objects"] = [{"address": f"0x{a:x}", "mt": f"0x{int(ix.method_tables[t]):x}", "size": s}
                              for a, t, s in zip(ix.addresses[sel].tolist(), ix.type_ids[sel].tolist(),
                                                 ix.sizes[sel].tolist())]
            emit_json(ctx.out, doc)
            return
        ctx.out.raw(head[:-len(tail)] + '\n  "objects": [')
        mts = ix.method_tables.tolist()
        pending: str | None = None  # a chunk waits for the next one to know whether a comma follows
        for part in chunks_of_mask(mask):
            rows = [f'    {{\n      "address": "0x{a:x}",\n      "mt": "0x{mts[t]:x}",\n      "size": {n}\n    }}'
                    for a, t, n in zip(ix.addresses[part].tolist(), ix.type_ids[part].tolist(),
                                       ix.sizes[part].tolist())]
            if pending is not None:
                ctx.out.raw(pending + ",")
            pending = ",\n".join(rows)
        ctx.out.raw(f"{pending}\n  ]\n}}")


def check_heap_arguments(heap: ClrHeap, mt: int | None, segment: int | None) -> None:
    """-mt must name a MethodTable and -segment a segment, or the filter silently matches
    nothing: one error line says what the value is instead."""
    if mt is not None:
        classifier(heap.runtime).require(mt, AddressKind.METHOD_TABLE, "a MethodTable")
    if segment is not None and not any(segment_matches(s, segment) for s in heap.segments):
        c = classifier(heap.runtime).classify(segment)
        desc = c.description()
        raise SosError(f"{segment:#x} is not a segment of the GC heap (see eeheap -gc)" +
                       (f": {desc}{c.hint()}" if desc and c.kind is not AddressKind.HEAP_GAP else ""))


# -- listings: streamed a chunk of index positions at a time ------------------------------------
# A listing of millions of objects must print its first line at once and hold no more than a
# chunk's rows: positions are taken from the mask a chunk at a time, formatted, and handed to
# ctx.out, which passes them on (and checks for Ctrl-C) every couple of thousand lines.

LIST_CHUNK = 1 << 16  # index positions per chunk


def chunks_of_mask(mask: np.ndarray, size: int = LIST_CHUNK) -> Iterator[np.ndarray]:
    """The positions where ``mask`` is True, in order, ``size`` index entries at a time."""
    for lo in range(0, len(mask), size):
        part = np.flatnonzero(mask[lo:lo + size])
        if len(part):
            yield part + lo


def chunks_of(positions: np.ndarray, size: int = LIST_CHUNK) -> Iterator[np.ndarray]:
    for lo in range(0, len(positions), size):
        yield positions[lo:lo + size]


def write_addresses(ctx: CommandContext, ix: HeapIndex, chunks: Iterable[np.ndarray]) -> None:
    """-short: one address per line."""
    out = ctx.out
    if out.structured:
        rows = out.table("objects", Table(Pointer()), ("address",))
        for part in chunks:
            for a in ix.addresses[part].tolist():
                rows.row(Address(a))
        return
    for part in chunks:
        out.lines([f"{a:012x}" for a in ix.addresses[part].tolist()])


def write_listing(ctx: CommandContext, heap: ClrHeap, ix: HeapIndex, chunks: Iterable[np.ndarray]) -> bool:
    """SOS's ``Address MT Size`` table; whether it listed anything (SOS prints no header, and no
    blank line after it, when nothing matched). Its columns have fixed widths (16, 16, 14, then
    the unbounded "Free" mark), so rows are formatted straight to what Table.row would make."""
    t = Table(Pointer(), Pointer(), Integer(), Text())
    out = ctx.out
    free_id = ix.type_id(heap.free_mt)
    if out.structured:
        rows = out.table("objects", t, ("address", "mt", "size", "free"))
        mts = ix.method_tables.tolist()
        for part in chunks:
            for a, tid, size in zip(ix.addresses[part].tolist(), ix.type_ids[part].tolist(), ix.sizes_at(part)):
                rows.row(Address(a), Address(mts[tid]), size, tid == free_id)
        return True
    mt_cells = [t.columns[1].render(m) for m in ix.method_tables.tolist()]
    listed = False
    for part in chunks:
        if not len(part):
            continue
        if not listed:
            out.line(t.header("Address", "MT", "Size"))
            listed = True
        rows = [f"{f'{a:012x}':>16} {mt_cells[tid]} {f'{size:,}':>14} {'Free' if tid == free_id else ''}"
                for a, tid, size in zip(ix.addresses[part].tolist(), ix.type_ids[part].tolist(),
                                        ix.sizes_at(part))]
        out.lines(rows)
    return listed


def _string_width(max_count: int) -> int:
    """How much of a string -strings shows, as SOS sizes it: what the console's width leaves
    after the Count and TotalSize columns (SOS counts the count's width twice), at most 128;
    128 when that leaves 16 or less. A console that is not a terminal is 80 wide, as .NET's."""
    width = shutil.get_terminal_size((80, 24)).columns if os.isatty(1) else 80
    count_len = max(len(f"{max_count:,}"), len("Count"))
    size_len = max(count_len, len("TotalSize"))
    possible = width - count_len - size_len - 2
    return min(possible, 128) if possible > 16 else 128


def _letter_or_digit(c: str) -> bool:
    """.NET's char.IsLetterOrDigit: a letter (L*) or a decimal digit (Nd)."""
    cat = unicodedata.category(c)
    return cat[0] == "L" or cat == "Nd"


def _string_cell(text: str, limit: int = 128) -> str:
    """SOS shows strings of letters and digits only whole; others cut to ``limit`` characters,
    with what is not a letter, digit, punctuation or space replaced by '.'."""
    if all(_letter_or_digit(c) for c in text):
        return text
    out = []
    for c in text[:limit]:
        if _letter_or_digit(c) or c == " " or unicodedata.category(c)[0] == "P":
            out.append(c)
        else:
            out.append(".")
    return "".join(out)


# -- eeheap ----------------------------------------------------------------------------------


@register
class EEHeap(Command):
    names = ("eeheap", "EEHeap")
    summary = "Display the runtime's native heaps: loader heaps, JIT code heaps and the GC heap's segments."
    usage = "eeheap [-gc] [-loader] [-names] [-heap <n>] [-segment <addr>] [start [end]]"
    details = """\
Without options, SOS's whole listing: each domain's loader heaps (its LoaderAllocator's
LowFrequencyHeap, HighFrequencyHeap, StubHeap ..., each block as address(reserved:readable)
with the kind's total), each JIT manager's code heaps, then the GC heap, and the bytes the
runtime holds in all. -loader shows only the first two, -gc only the GC heap: per GC heap,
the small object heap's regions by generation (or segments), the NonGC (frozen) heap, the
large and pinned object heaps, with each segment's address, object range, committed end and
sizes; then the allocated and committed totals. A loader heap of a kind SOS does not know
(.NET 10's StaticsHeap) is "Unknown", as SOS prints it; -names shows the runtime's name.

Examples:
  eeheap
  eeheap -loader -names
  eeheap -gc
  eeheap -gc -heap 1"""
    options = (
        Option("-gc", "only the GC heap"),
        Option("-loader", "only the loader and code heaps"),
        Option("-names", "the runtime's name of a loader heap SOS calls Unknown (StaticsHeap)"),
        Option("-heap", "only GC heap number n", parse_count, "n"),
        Option("-segment", "only the segment at (or containing) this address", parse_address, "address"),
    )
    positionals = (Positional("start", "hex start address"), Positional("end", "hex end address or L<length>"))

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        # A GC filter (a heap, a segment, a range) asks about the GC heap only.
        gc_filter = args.heap is not None or args.segment is not None or args.start is not None
        show_loader = args.loader or not (args.gc or gc_filter)
        show_gc = args.gc or not args.loader
        total = _loader_section(ctx, args.names) if show_loader else 0
        if show_gc:
            total += self.gc_section(ctx, args)
        if show_loader and show_gc:
            ctx.out.line()
            ctx.out.field("total_size", total, f"Total bytes consumed by CLR: {_size_text(total) or '0'}")
            ctx.out.line()

    def gc_section(self, ctx: CommandContext, args: Parsed) -> int:
        start, end = parse_range(args.start, args.end)
        heap = ctx.heap
        if args.heap is not None and not any(sh.index == args.heap for sh in heap.subheaps):
            raise SosError(f"No GC heap with index of {args.heap}")
        check_heap_arguments(heap, None, args.segment)
        filtered = args.heap is not None or args.segment is not None or start is not None

        def keep(seg: ClrSegment) -> bool:
            if args.heap is not None and seg.heap != args.heap:
                return False
            if args.segment is not None and not segment_matches(seg, args.segment):
                return False
            if start is not None and not (committed_start(seg) < (end or 1 << 64) and seg.committed > start):
                return False
            return True

        segs = [s for s in heap.segments if keep(s)]
        width = max([len(_size_text(s.committed - committed_start(s))) for s in heap.segments] + [0])
        width = min(max(width, 14), 32)
        out = ctx.out
        out.line()
        datas = heap.runtime.gc_dynamic_adaptation_mode()
        out.field("datas", datas, f"DATAS = {'' if datas is None else datas}")
        out.line("=" * 40)
        out.field("gc_heaps", len(heap.subheaps), f"Number of GC Heaps: {len(heap.subheaps)}")
        rows = out.table("segments", _seg_table(width), ("heap", "kind", "generation", "segment", "begin",
                                                         "allocated", "committed", "allocated_size",
                                                         "committed_size"))
        titles = ("segment", "begin", "allocated", "committed", "allocated size", "committed size")
        out.line("-" * 40)
        total_alloc = total_commit = 0
        for sh in heap.subheaps:
            mine = [s for s in segs if s.heap == sh.index]
            if args.heap is not None and sh.index != args.heap:
                continue
            if heap.is_server:
                out.line(f"Heap {sh.index} ({p16(sh.address)})")
            if not heap.uses_regions:
                for g in range(3):
                    out.line(f"generation {g} starts at {sh.generations[g].allocation_start:x}")
                g0 = sh.generations[0]
                out.line("ephemeral segment allocation context: none" if not g0.alloc_context_ptr else
                         f"ephemeral segment allocation context: (0x{g0.alloc_context_ptr:x}, "
                         f"0x{g0.alloc_context_limit})")
            soh = [s for s in mine if s.kind is SegmentKind.SOH]
            out.line("Small object heap")
            rows.header(*titles)
            for g in (Generation.GEN0, Generation.GEN1, Generation.GEN2, None):
                group = [s for s in soh if s.generation == g]
                if not group:
                    continue
                if heap.uses_regions and g is not None:
                    out.line(f"generation {int(g)}:")
                for s in sorted(group, key=lambda s: s.start):
                    _seg_row(rows, s)
            frozen = [s for s in mine if s.kind is SegmentKind.FROZEN]
            if frozen:
                out.line("NonGC heap")
                rows.header(*titles)
                for s in frozen:
                    _seg_row(rows, s)
            for kind, title, gen_no in ((SegmentKind.LOH, "Large object heap", 3),
                                        (SegmentKind.POH, "Pinned object heap", 4)):
                group = [s for s in mine if s.kind is kind]
                if kind is SegmentKind.POH and not group:
                    continue
                if heap.uses_regions or gen_no >= len(sh.generations):
                    out.line(title)
                else:
                    out.line(f"{title} starts at {sh.generations[gen_no].allocation_start:x}")
                rows.header(*titles)
                for s in group:
                    _seg_row(rows, s)
            alloc = sum(s.length for s in mine)
            commit = sum(s.committed - committed_start(s) for s in mine)
            total_alloc += alloc
            total_commit += commit
            if filtered:
                out.line(f"Partial Allocated Size:              Size: {_size_text(alloc)} bytes.")
                out.line(f"Partial Committed Size:              Size: {_size_text(commit)} bytes.")
            out.line("-" * 30)
        prefix = "Partial " if filtered else ""
        out.field("allocated_size", total_alloc,
                  f"{prefix}GC Allocated Heap Size:    Size: {_size_text(total_alloc)} bytes.")
        out.field("committed_size", total_commit,
                  f"{prefix}GC Committed Heap Size:    Size: {_size_text(total_commit)} bytes.")
        return total_commit


DIVIDER = "-" * 40


def _size_and_wasted(size: int, wasted: int) -> str:
    text = f"Size: {_size_text(size)} bytes total"
    return text + (f", {_size_text(wasted)} bytes wasted" if wasted else "")


def _block_text(b: NativeHeapBlock) -> str:
    return f"{b.address:012x}" + (f"({b.size:x}:{b.actual:x})" if b.size is not None else "")


def _heap_row(out: Output, label: str, value: str) -> None:
    out.line(f"{label:<21} {value}")


def _loader_section(ctx: CommandContext, names: bool = False) -> int:
    """SOS's "Loader Heap:" part: each domain's LoaderAllocator heaps by kind (a LoaderAllocator
    or heap already shown is not shown again), then each JIT manager's code heaps. Returns the
    readable bytes counted."""
    runtime = ctx.runtime
    out = ctx.out
    rows = out.table("native_heaps", None, ("owner", "kind", "heap", "block", "reserved", "readable", "current"))
    out.line("Loader Heap:")
    out.line(DIVIDER)
    seen: set[int] = set()
    total = 0
    for d in runtime.app_domains():
        title = {"system": "System Domain:", "shared": "Shared Domain:"}.get(d.kind, f"Domain {d.id}:")
        _heap_row(out, title, f"{d.address:012x}")
        la = domain_loader_allocator(runtime, d)
        if la:
            _heap_row(out, "LoaderAllocator:", f"{la:012x}")
            if la in seen:
                continue
            seen.add(la)
        by_kind: dict[str, list[NativeHeapBlock]] = {}
        for h in domain_heaps(runtime, d):
            if h.address in seen:
                continue
            seen.add(h.address)
            # SOS groups the kinds it does not know under "Unknown"; -names keeps the runtime's.
            shown = h.kind if names or h.kind in SOS_HEAP_KINDS else "Unknown"
            for b in h.blocks:
                by_kind.setdefault(shown, []).append(b)
                rows.row(data=(Address(d.address), h.kind, Address(h.address), Address(b.address), b.size,
                               b.actual, b.current))
        size = wasted = 0
        for kind, blocks in by_kind.items():
            k_size, k_wasted = sum(b.actual for b in blocks), sum(b.wasted for b in blocks)
            _heap_row(out, f"{kind}:", " ".join(_block_text(b) for b in blocks) + " "
                      + _size_and_wasted(k_size, k_wasted) + ".")
            size += k_size
            wasted += k_wasted
        if size:
            _heap_row(out, "Total size:", _size_and_wasted(size, wasted) + ".")
        else:
            out.line("No unique loader heaps found.")
        out.line(DIVIDER)
        total += size
    for m in code_heaps(runtime):
        _heap_row(out, "JIT Manager:", f"{m.address:012x}")
        size = wasted = 0
        # As SOS: one row per block, loader code heaps' blocks first, each kind by address.
        blocks = sorted(((h, b) for h in m.heaps for b in h.blocks),
                        key=lambda hb: (hb[0].kind != "LoaderCodeHeap", hb[1].address))
        for h, b in blocks:
            rows.row(data=(Address(m.address), h.kind, Address(h.address), Address(b.address), b.size,
                           b.actual, b.current))
            _heap_row(out, f"{h.kind}:", _block_text(b) + " " + _size_and_wasted(b.actual, b.wasted) + ".")
            size += b.actual
            wasted += b.wasted
        _heap_row(out, "Total size:", _size_and_wasted(size, wasted) + ".")
        out.line(DIVIDER)
        total += size
    return total


def _size_text(n: int) -> str:
    return hex_and_dec(n) if n else ""


def _seg_table(width: int) -> Table:
    return Table(Pointer(), Pointer(), Pointer(), Pointer(), Text(width), Text(width))


def _seg_row(rows: TableWriter, s: ClrSegment) -> None:
    cstart = committed_start(s)
    gen = None if s.generation is None else int(s.generation)
    rows.row(s.address, s.start, s.end, s.committed, _size_text(s.length), _size_text(s.committed - cstart),
             data=(s.heap, s.kind.name.lower(), gen, Address(s.address), Address(s.start), Address(s.end),
                   Address(s.committed), s.length, s.committed - cstart))


# -- gcheapstat -------------------------------------------------------------------------------


@register
class GCHeapStat(Command):
    names = ("gcheapstat", "GCHeapStat")
    summary = "Display per-heap, per-generation allocated, free and committed bytes."
    usage = "gcheapstat [-unreachable | -iu]"
    details = """\
Rows per GC heap and a Total row; columns gen0, gen1, gen2, LOH, POH. Free space counts
the Free objects; with -iu also the bytes of objects no root reaches in the GC heap.
dumpheap -stat -dead's total is larger: it counts Free objects and the frozen (NonGC) heap's
unreferenced objects as well (Free row + frozen segment + this Total).

Examples:
  gcheapstat
  gcheapstat -iu"""
    options = (Option("-unreachable", "also show bytes of unreachable objects", aliases=("-inclUnrooted", "-iu")),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        heap = ctx.heap
        ix = heap.index(ctx.progress)
        nheaps = len(heap.subheaps)
        gens = (Generation.GEN0, Generation.GEN1, Generation.GEN2, Generation.LOH, Generation.POH)
        alloc = np.zeros((nheaps, 5), dtype=np.int64)
        commit = np.zeros((nheaps, 5), dtype=np.int64)
        # The segments GC's ephemeral segment (gen0, gen1 and the young end of gen2 in one): SOS
        # (ClrMD) gives it a column of its own, EPH, with the segment's range and commit, and
        # counts only its live-sized objects (not Free) into the generations' allocated bytes.
        eph_alloc = np.zeros(nheaps, dtype=np.int64)
        eph_commit = np.zeros(nheaps, dtype=np.int64)
        has_frozen = any(s.kind is SegmentKind.FROZEN and s.committed > committed_start(s) for s in heap.segments)
        ephemeral = set()
        for s in heap.segments:
            if s.kind is SegmentKind.FROZEN:
                continue
            if _is_ephemeral_segment(heap, s):
                ephemeral.add(s.start)
                eph_alloc[s.heap] += s.end - s.start
                eph_commit[s.heap] += s.committed - committed_start(s)
                continue
            for r in s.ranges:
                alloc[s.heap, gens.index(r.generation)] += r.end - r.start
            col = gens.index(s.generation) if s.generation is not None else 2
            commit[s.heap, col] += s.committed - committed_start(s)
        heap_of = np.zeros(len(ix), dtype=np.int64)
        in_eph = np.zeros(len(ix), dtype=bool)
        for sl in ix.slices:
            heap_of[sl.first:sl.stop] = sl.segment.heap
            in_eph[sl.first:sl.stop] = sl.segment.start in ephemeral
        free_id = ix.type_id(heap.free_mt)
        is_free = ix.type_ids == free_id if free_id is not None else np.zeros(len(ix), dtype=bool)
        free = self._by_heap_gen(ix, heap_of, is_free, nheaps, gens)
        if ephemeral:
            alloc += self._by_heap_gen(ix, heap_of, in_eph & ~is_free, nheaps, gens)
        eph_free = np.bincount(heap_of[in_eph & is_free], weights=ix.sizes[in_eph & is_free].astype(np.float64),
                               minlength=nheaps).astype(np.int64)
        out = ctx.out
        # SOS learns which objects are live while it gathers the numbers, before the first table.
        live = live_objects(ctx) if args.unreachable else None
        with_eph = bool(eph_commit.any())
        titles = ["Heap", *(["EPH"] if with_eph else []), "Gen0", "Gen1", "Gen2", "LOH", "POH"] + \
                 (["FRZ"] if has_frozen else [])
        # SOS's formats: a heap name, five numbers (six with frozen segments: FRZ has a title but
        # no value), three percentages; an EPH value shifts a row's cells one format on.
        table = Table(Text(8), *[Column(10, False, _plain) for _ in range(5 + has_frozen)],
                      Text(8), Text(8), Text(8))

        keys = ("heap", "gen0", "gen1", "gen2", "loh", "poh") + (("frz",) if has_frozen else ())

        def cells_of(name: str, values: np.ndarray, eph: int | None) -> list:
            # None: no ephemeral segment on this heap; 0 is a value (unrooted bytes there).
            return [name, *([eph] if eph is not None else []), *values.tolist()]

        def section(key: str, values: np.ndarray, ephs: np.ndarray, pct: bool) -> None:
            rows = out.table(key, table, keys)
            rows.header(*titles)
            for h in range(nheaps):
                cells = cells_of(f"Heap{h}", values[h], int(ephs[h]) if eph_commit[h] else None)
                data = tuple([f"Heap{h}", *values[h].tolist()][:len(keys)])
                if pct:
                    cells += _percent_cells(values[h], alloc[h])
                rows.row(*cells, data=data)
            rows.row(*cells_of("Total", values.sum(axis=0), int(ephs.sum()) if eph_commit.sum() else None))

        section("allocated", alloc, eph_alloc, False)
        out.line()
        out.line("Free space:")
        section("free", free, eph_free, True)
        out.line()
        if live is not None:
            dead_mask = ~live & ~is_free
            unrooted = self._by_heap_gen(ix, heap_of, dead_mask, nheaps, gens)
            out.line("Unrooted objects:")
            rows = out.table("unrooted", table, keys)
            rows.header(*titles)
            zero = np.zeros(nheaps, dtype=np.int64)
            for h in range(nheaps):
                rows.row(*cells_of(f"Heap{h}", unrooted[h], 0 if eph_commit[h] else None),
                         *_percent_cells(unrooted[h], alloc[h]), data=(f"Heap{h}", *unrooted[h].tolist()))
            out.line()
            rows.row(*cells_of("Total", unrooted.sum(axis=0), int(zero.sum()) if eph_commit.sum() else None))
            out.line()
        out.line("Committed space:")
        section("committed", commit, eph_commit, False)
        out.line()

    @staticmethod
    def _by_heap_gen(ix: HeapIndex, heap_of: np.ndarray, mask, nheaps: int, gens) -> np.ndarray:
        out = np.zeros((nheaps, 5), dtype=np.int64)
        if mask is None:
            return out
        for gi, g in enumerate(gens):
            m = mask & (ix.generations == np.uint8(g))
            if m.any():
                out[:, gi] = np.bincount(heap_of[m], weights=ix.sizes[m].astype(np.float64), minlength=nheaps)
        return out


def _is_ephemeral_segment(heap: ClrHeap, seg: ClrSegment) -> bool:
    """The segments GC's ephemeral segment: the small-object segment that holds gen0 and gen1."""
    return (not heap.uses_regions and seg.kind is SegmentKind.SOH
            and any(r.generation in (Generation.GEN0, Generation.GEN1) for r in seg.ranges))


def _plain(v) -> str:  # type: ignore[no-untyped-def]
    return str(v) if isinstance(v, str) else f"{int(v)}"


def _percent_cells(values: np.ndarray, alloc: np.ndarray) -> list[str]:
    cells = []
    soh_alloc = int(alloc[:3].sum())
    cells.append(f"SOH:{int(values[:3].sum()) * 100 // soh_alloc}%" if soh_alloc else "")
    cells.append(f"LOH:{int(values[3]) * 100 // int(alloc[3])}%" if alloc[3] else "")
    cells.append(f"POH:{int(values[4]) * 100 // int(alloc[4])}%" if alloc[4] else "")
    return cells


# -- gcwhere -----------------------------------------------------------------------------------


@register
class GCWhere(Command):
    names = ("gcwhere", "GCWhere")
    summary = "Show the GC heap, segment and generation an address belongs to."
    usage = "gcwhere <address>"
    details = "Example:\n  gcwhere 7f3a1c000040"
    positionals = (Positional("address", "an address in the GC heap", str, required=True),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        try:
            addr = parse_address(args.address)
        except UsageError:
            raise SosError(f"Could not parse address: {args.address}") from None
        if not addr:
            raise SosError(f"Could not parse address: {args.address}")  # as SOS, which fails on 0
        heap = ctx.heap
        hits = [s for s in heap.segments
                if s.start <= addr < s.end or committed_start(s) <= addr < s.committed
                or committed_start(s) <= addr < s.reserved]
        if not hits:
            raise SosAnswer(f"Address {addr:x} not found in the managed heap.")  # SOS's answer
        hits.sort(key=lambda s: (s.heap, s.address))
        rng = lambda a, b: f"{a:x}-{b:x}"  # noqa: E731
        rows = []
        for s in hits:
            if s.start <= addr < max(s.end, s.committed):
                g = s.generation_of(addr)
                label = {Generation.LOH: "large", Generation.POH: "pinned", Generation.FROZEN: "frozen"}.get(
                    g, str(int(g)) if g is not None else "???")
            else:
                label = "reserve"
            rows.append((addr, s.heap, s.address, label, rng(s.start, s.end),
                         rng(committed_start(s), s.committed), rng(s.committed, s.reserved)))
        t = Table(Column(16, False, fmt_pointer), Column(6, False, lambda v: f"{int(v)}"),
                  Column(16, False, fmt_pointer), Text(6), Text(), Text(), Text())
        for i in (4, 5, 6):
            t.fit(i, [r[i] for r in rows])
            t.columns[i].right = False
        w = ctx.out.table("segments", t, ("address", "heap", "segment", "generation", "allocated",
                                          "committed", "reserved"))
        w.header("Address", "Heap", "Segment", "Generation", "Allocated", "Committed", "Reserved")
        for r in rows:
            w.row(*r, data=(Address(r[0]), r[1], Address(r[2]), *r[3:]))

