"""SOS's leak-hunting commands: dumpgen, sizestats, timerinfo, syncblk, dumpconcurrentdictionary.

Each command gathers rows from the model, then prints them in SOS's layout or, with
--json, as one document.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..clr.features.concurrent import DICTIONARY_PREFIXES, ClrValue, read_concurrent_dictionary
from ..clr.heap.heap import ClrHeap
from ..formats.metadata.signatures import ElementType as ET
from ..clr.heap.objects import method_table_of
from ..clr.heap.instances import MissingField
from ..clr.progress import polled
from ..clr.heap.segments import Generation, SegmentKind
from ..clr.heap.syncblocks import ORPHANED, sync_block_table
from ..clr.features.timers import INFINITE, ClrTimer, read_timers
from ..clr.typesystem.typenames import csharp_name
from ..clr.heap.values import round_trip
from ..errors import SosError, UsageError
from ..render.json import emit_json
from ..render.table import Integer, Table
from ..render.text import safe_line as escape
from .base import Command, Option, Parsed, Positional, parse_address, register
from .context import CommandContext

# -- dumpgen ----------------------------------------------------------------------------------

_DUMPGEN_GENERATIONS = {
    "gen0": Generation.GEN0, "0": Generation.GEN0, "gen1": Generation.GEN1, "1": Generation.GEN1,
    "gen2": Generation.GEN2, "2": Generation.GEN2, "loh": Generation.LOH, "poh": Generation.POH,
    "foh": Generation.FROZEN,
}


@dataclass(frozen=True, slots=True)
class GenTypeRow:
    method_table: int
    count: int
    total_size: int
    name: str
    csharp_name: str  # ClrMD's form, which SOS's managed dumpgen prints


@register
class DumpGen(Command):
    names = ("dumpgen", "dg", "DumpGen")
    summary = "Display the objects of one generation: statistics per type, or the instances of one MethodTable."
    usage = "dumpgen <gen0|gen1|gen2|loh|poh|foh> [-type <partial name>] [-mt <MT>] [--json]"
    details = """\
Like dumpheap -stat restricted to one generation (types sorted by total size), or, with -mt,
like dumpheap -mt there. -type matches a part of the type name, ignoring case. The
generation of each object is the one the GC's regions or segments give it.

Examples:
  dumpgen gen0
  dumpgen gen2 -type Cache
  dumpgen loh -mt 00007f3a1c2d4e80"""
    options = (
        Option("-type", "only types whose name contains this text (any case)", str, "partial name"),
        Option("-mt", "list the objects of this MethodTable", str, "MT"),
        Option("-stat", "statistics per type (the default without -mt)"),
        Option("--json", "print the result as JSON", dest="json"),
    )
    positionals = (Positional("generation", "gen0, gen1, gen2, loh, poh or foh"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        if not args.generation:
            raise UsageError("Generation argument is missing")
        gen = _DUMPGEN_GENERATIONS.get(args.generation.lower())
        if gen is None:
            raise UsageError(f"{args.generation} is not a supported generation (gen0, gen1, gen2, loh, poh, foh)")
        mt = None
        if args.mt is not None:
            try:
                mt = parse_address(args.mt)
            except UsageError:
                raise UsageError("Hexadecimal address expected for -mt option") from None
        heap = ctx.heap
        ix = heap.index(ctx.progress)
        mask = ix.mask_generation(gen)
        if mt is not None:
            self._instances(ctx, heap, ix, mask & ix.mask_method_tables([mt]), mt, args)
            return
        if args.type is not None:
            wanted = args.type.lower()
            ids = [i for i, m in enumerate(ix.method_tables.tolist())
                   if wanted in heap.types.name_of(m).lower() or wanted in heap.types.csharp_name_of(m).lower()]
            mask &= ix.mask_type_ids(ids)
        rows = gen_stats(heap, ix, mask)
        if args.json:
            emit_json(ctx.out, {"command": "dumpgen", "generation": gen.name.lower(),
                                "types": [{"mt": f"0x{r.method_table:x}", "count": r.count,
                                           "total_size": r.total_size, "name": r.name,
                                           "csharp_name": r.csharp_name} for r in rows],
                                "total_objects": sum(r.count for r in rows)})
            return
        out = ctx.out
        out.line("Statistics:")
        out.line("              MT    Count    TotalSize Class Name")
        for r in rows:
            out.line(f"{r.method_table:016x} {r.count:8} {r.total_size:12} {escape(r.csharp_name)}")
        out.line(f"Total {sum(r.count for r in rows)} objects")
        out.line()

    @staticmethod
    def _instances(ctx: CommandContext, heap: ClrHeap, ix, mask: np.ndarray, mt: int, args: Parsed) -> None:
        pos = np.flatnonzero(mask)
        addrs = ix.addresses[pos].tolist()
        sizes = ix.sizes_at(pos)
        if args.json:
            emit_json(ctx.out, {"command": "dumpgen", "mt": f"0x{mt:x}",
                                "objects": [{"address": f"0x{a:x}", "size": s} for a, s in zip(addrs, sizes)],
                                "total_objects": len(addrs)})
            return
        out = ctx.out
        out.line("         Address               MT     Size")
        out.lines([f"{a:016x} {mt:016x} {s:8}" for a, s in zip(addrs, sizes)])
        out.line(f"Total {len(addrs)} objects")
        out.line()


def gen_stats(heap: ClrHeap, ix, mask: np.ndarray) -> list[GenTypeRow]:
    """Per type (count, total size), ascending by total size, ties in heap order (as SOS)."""
    counts, totals, first = ix.type_totals(mask)
    present = np.flatnonzero(counts)
    order = sorted(present.tolist(), key=lambda i: (int(totals[i]), int(first[i])))
    mts = [int(ix.method_tables[i]) for i in order]
    return [GenTypeRow(mt, int(counts[i]), int(totals[i]), heap.types.name_of(mt), heap.types.csharp_name_of(mt))
            for i, mt in zip(order, mts)]


# -- sizestats --------------------------------------------------------------------------------

_SIZESTAT_NAMES = {Generation.GEN0: "generation0", Generation.GEN1: "generation1", Generation.GEN2: "generation2",
                   Generation.LOH: "large", Generation.POH: "pinned", Generation.FROZEN: "frozen"}


@dataclass(frozen=True, slots=True)
class SizeStatSection:
    generation: Generation
    free: bool
    rows: tuple[tuple[int, int], ...]  # (aligned size, count), ascending by size

    @property
    def title(self) -> str:
        return f"Size Statistics for {_SIZESTAT_NAMES[self.generation]} {'free ' if self.free else ''}objects"


def size_stats(heap: ClrHeap, ix) -> list[SizeStatSection]:
    """SOS's sections: live-or-dead objects per generation, then Free blocks per generation;
    POH sections only when the heap has a POH, frozen objects only with a NonGC heap."""
    has_pinned = any(s.kind is SegmentKind.POH for s in heap.segments)
    has_frozen = any(s.kind is SegmentKind.FROZEN for s in heap.segments)
    gens = [Generation.GEN0, Generation.GEN1, Generation.GEN2, Generation.LOH]
    plan = [(g, False) for g in gens + ([Generation.POH] if has_pinned else []) +
            ([Generation.FROZEN] if has_frozen else [])]
    plan += [(g, True) for g in gens + ([Generation.POH] if has_pinned else [])]
    free_id = ix.type_id(heap.free_mt)
    is_free = ix.type_ids == free_id if free_id is not None else np.zeros(len(ix), dtype=bool)
    aligned = ix.aligned_sizes
    out = []
    for gen, free in plan:
        mask = ix.mask_generation(gen) & (is_free if free else ~is_free)
        sizes, counts = np.unique(aligned[mask], return_counts=True)
        out.append(SizeStatSection(gen, free, tuple(zip(sizes.tolist(), counts.tolist()))))
    return out


@register
class SizeStats(Command):
    names = ("sizestats", "SizeStats")
    summary = "Size statistics for the GC heap: how many objects of each size, per generation, live and free."
    usage = "sizestats [--json]"
    details = """\
One table per generation (gen0, gen1, gen2, large, then pinned and frozen when the heap has
them) of objects, then one per generation of free blocks. Sizes are what an object takes on
the heap (rounded up to 8 bytes). As in SOS, each row's cumulative columns count the rows
above it, not the row itself.

Example:
  sizestats"""
    options = (Option("--json", "print the result as JSON", dest="json"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        heap = ctx.heap
        sections = size_stats(heap, heap.index(ctx.progress))
        if args.json:
            emit_json(ctx.out, {"command": "sizestats", "sections": [
                {"generation": _SIZESTAT_NAMES[s.generation], "free": s.free,
                 "sizes": [{"size": size, "count": count} for size, count in s.rows]} for s in sections]})
            return
        out = ctx.out
        for s in sections:
            out.line(s.title)
            out.line()
            if not s.rows:
                out.line("(none)")
            else:
                t = Table(Integer(), Integer(), Integer(), Integer())
                out.line(t.header("Size", "Count", "Cumulative Size", "Cumulative Count"))
                cum_size = cum_count = 0
                for size, count in s.rows:
                    out.line(t.row(size, count, cum_size, cum_count))
                    cum_size += size * count
                    cum_count += count
            out.line()


# -- timerinfo --------------------------------------------------------------------------------


def _period_text(period: int) -> str:
    return "  ------" if period == INFINITE else str(period)


def timer_line(t: ClrTimer) -> str:
    kind = "" if t.is_short is None else f"({'S' if t.is_short else 'L'}) "
    return (f"{kind}0x{t.address:016X} @{t.due_time:>8} ms every {_period_text(t.period):>8} ms |  "
            f"{t.state:016X} ({escape(csharp_name(t.state_type))}) -> {escape(t.callback)}")


def timer_key(t: ClrTimer) -> str:
    kind = "" if t.is_short is None else f"({'S' if t.is_short else 'L'}) "
    return (f"{kind}@{t.due_time:>8} ms every {_period_text(t.period):>8} ms | "
            f"{t.state:016X} ({escape(csharp_name(t.state_type))}) -> {escape(t.callback)}")


@register
class TimerInfo(Command):
    names = ("timerinfo", "ti", "TimerInfo")
    summary = "Display the running System.Threading timers: due time, period, state and callback."
    usage = "timerinfo [--json]"
    details = """\
Every TimerQueueTimer on the runtime's timer queues, sorted by period: (S)hort or (L)ong
list, address, due time and period in ms ("------" for a one-shot timer), the state object
and its type, and the callback as Type.Method (the type of the delegate's target when it
has one). Then a summary counting identical lines.

Example:
  timerinfo"""
    options = (Option("--json", "print the result as JSON", dest="json"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        timers = sorted(read_timers(ctx.runtime), key=lambda t: t.period)  # stable: heap order within a period
        if args.json:
            emit_json(ctx.out, {"command": "timerinfo", "timers": [
                {"address": f"0x{t.address:x}", "due_time": t.due_time,
                 "period": None if t.period == INFINITE else t.period, "canceled": t.canceled,
                 "state": f"0x{t.state:x}", "state_type": t.state_type, "callback": t.callback,
                 "short": t.is_short} for t in timers]})
            return
        out = ctx.out
        counts: dict[str, int] = {}
        for t in timers:
            out.line(timer_line(t))
            key = timer_key(t)
            counts[key] = counts.get(key, 0) + 1
        out.line()
        out.line(f"   {len(timers)} timers")
        out.line("-----------------------------------------------")
        for key, n in sorted(counts.items(), key=lambda kv: kv[1]):
            out.line(f"{n:4} | {key}")


# -- syncblk ----------------------------------------------------------------------------------


@register
class SyncBlk(Command):
    names = ("syncblk", "SyncBlk")
    summary = "Display the sync block table: Monitor locks held, their owning thread and recursion."
    usage = "syncblk [-all | <index>] [--json]"
    details = """\
By default only sync blocks whose Monitor is held; -all shows every entry, an index shows
that one. Columns: index, SyncBlock, MonitorHeld (1 while owned, plus 2 for each waiting
thread), recursion, the owning runtime Thread with its OS thread id and debugger thread
number, and the object the lock belongs to. A Monitor taken without contention on an object
without a hash code is a thin lock in the object header instead: see dumpheap -thinlock.

Examples:
  syncblk
  syncblk -all"""
    options = (Option("-all", "every sync block, not only the held ones"),
               Option("--json", "print the result as JSON", dest="json"))
    positionals = (Positional("index", "one sync block number", str),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        only = 0
        if args.index is not None:
            try:
                only = int(args.index, 0)
            except ValueError:
                raise UsageError(f"invalid sync block number: {args.index}") from None
            if only <= 0:
                raise UsageError(f"invalid sync block number: {args.index} (they start at 1)")
        table = sync_block_table(ctx.runtime, only)
        heap = ctx.heap
        dbg = {t.tid: t.index for t in ctx.session.target().threads()}
        shown = [e for e in table.entries if e is not None and (args.all or e.index == only or e.is_held)]
        free = sum(1 for e in table.entries if e is not None and e.free)
        if args.json:
            emit_json(ctx.out, {"command": "syncblk", "total": table.count, "free": free, "entries": [
                {"index": e.index, "sync_block": f"0x{e.address:x}", "free": e.free, "monitor_held": e.monitor_held,
                 "recursion": e.recursion, "thread": f"0x{e.holding_thread:x}",
                 "os_thread_id": e.holding_os_id or None, "object": f"0x{e.object:x}",
                 "type": "" if e.free else heap.types.name_of(_object_mt(ctx, e.object))} for e in shown]})
            return
        out = ctx.out
        out.line("Index         SyncBlock MonitorHeld Recursion Owning Thread Info          SyncBlock Owner")
        if only and only <= len(table.entries) and table.entries[only - 1] is None:
            out.line(f"SyncBlock {only} is invalid")
        for e in polled(shown):
            line = f"{e.index:5} "
            if not e.free or e.index != only:
                # SOS's %p: the SyncBlock and the owning Thread in upper case, the object in lower.
                line += f"{e.address:016X}  {e.monitor_held:11} {e.recursion:9} {e.holding_thread:016X} "
                if e.holding_thread == ORPHANED:
                    line += " orphaned "
                elif e.holding_thread:
                    n = dbg.get(e.holding_os_id)
                    line += f"{e.holding_os_id:x}" + (f"{n:4} " if n is not None and n >= 0 else " XXX ")
                else:
                    line += "    none  "
                if e.free:
                    line += f"  {0:8}"
                else:
                    line += f"  {e.object:016x} {escape(heap.types.name_of(_object_mt(ctx, e.object)))}"
            if e.free:
                line += " Free"
            out.line(line)
        out.line("-----------------------------")
        out.line(f"Total           {table.count}")
        out.line(f"Free            {free}")


def _object_mt(ctx: CommandContext, obj: int) -> int:
    try:
        return (method_table_of(ctx.runtime.target, obj) or 0) if obj else 0
    except SosError:
        return 0


# -- dumpconcurrentdictionary -----------------------------------------------------------------


def _truncate(text: str, limit: int = 100) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def value_text(v: ClrValue) -> str:
    """An item as SOS shows it: numbers, True/False and quoted strings inline; for other
    values the command that would dump them."""
    if v.kind == "null":
        return "null"
    if v.kind == "string":
        return f'"{v.value}"'
    if v.kind == "array":
        return f"dumparray {v.address:016x}"
    if v.kind == "object":
        return f"dumpobj {v.address:016x}"
    if v.kind == "struct":
        return f"dumpvc {v.method_table:016x} {v.address:016x}"
    et, x = v.element_type, v.value
    if et == ET.BOOLEAN:
        return "True" if x else "False"
    if et == ET.CHAR:
        return f"'{chr(int(x))}'"
    if et in (ET.I, ET.U):
        return "null" if not x else f"0x{int(x) & ((1 << 64) - 1):x}"
    if et in (ET.R4, ET.R8):
        return round_trip(float(x), single=et == ET.R4)  # .NET's default ToString is round-trip
    return str(x)


@register
class DumpConcurrentDictionary(Command):
    names = ("dumpconcurrentdictionary", "dcd", "DumpConcurrentDictionary")
    summary = "Display the keys and values of a System.Collections.Concurrent.ConcurrentDictionary."
    usage = "dumpconcurrentdictionary <address> [--json]"
    details = """\
Walks the dictionary's buckets. Numbers, booleans and strings are shown; other values as the
command that dumps them (dumpobj, dumparray, dumpvc). Texts longer than 100 characters are cut.

Example:
  dcd 7f3a1c000040"""
    options = (Option("--json", "print the result as JSON", dest="json"),)
    positionals = (Positional("address", "a ConcurrentDictionary object"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        if not args.address:
            raise UsageError("Missing ConcurrentDictionary address...")
        try:
            addr = parse_address(args.address)
        except UsageError:
            raise UsageError("Hexadecimal address expected...") from None
        heap = ctx.heap
        if heap.index(ctx.progress).find(addr) is None:
            raise SosError(f"{args.address} is not referencing an object...")  # as typed, as SOS does
        mt = method_table_of(ctx.runtime.target, addr) or 0
        name, shown = heap.types.name_of(mt), heap.types.csharp_name_of(mt)  # SOS's dcd prints ClrMD's name
        if not name.startswith(DICTIONARY_PREFIXES):
            raise SosError(f"{args.address} is not a ConcurrentDictionary but an instance of {escape(shown)}...")
        items = [(value_text(i.key), value_text(i.value)) for i in read_concurrent_dictionary(ctx.runtime, addr)]
        if args.json:
            emit_json(ctx.out, {"command": "dumpconcurrentdictionary", "address": f"0x{addr:x}", "type": name,
                                "csharp_type": shown, "items": [{"key": k, "value": v} for k, v in items]})
            return
        out = ctx.out
        out.line(escape(shown))
        for k, v in items:
            out.line("    -----")
            out.line(f"      Key: {escape(_truncate(k))}")
            out.line(f"    Value: {escape(_truncate(v))}")
        out.line("---------------------------------------------")
        out.line(f"{len(items)} items")
        out.line()


# -- gchandleleaks ----------------------------------------------------------------------------

_RULE = "-" * 79
_RULE78 = "-" * 78


def _hex_columns(out, values: list[int]) -> None:  # type: ignore[no-untyped-def]
    """SOS's list of handles: four per line, each followed by a tab."""
    line = ""
    for i, v in enumerate(values):
        line += f"{v:x}\t"
        if (i + 1) % 4 == 0:
            out.line(line.expandtabs())  # Output escapes control characters: tabs become spaces here
            line = ""
    out.line(line.expandtabs())


@register
class GCHandleLeaks(Command):
    names = ("gchandleleaks", "GCHandleLeaks")
    summary = "Report strong and pinned GC handles whose value is found nowhere in the process's memory."
    usage = "gchandleleaks [--json]"
    details = """\
Lists the strong and pinned handles, then reads every readable mapping of the process (or
every mapping a core holds) looking for each handle's value. A handle nothing refers to
can never be freed: its object is leaked. Stale copies of a value count as references, so
a leak can hide; run it over time and watch the trend. Ctrl-C stops the scan.

Example:
  gchandleleaks"""
    options = (Option("--json", "print the result as JSON", dest="json"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        from ..clr.roots.handleleaks import scan_for_handles, strong_handles
        heap = ctx.heap
        out = ctx.out
        if args.json:
            scan = scan_for_handles(heap)
            emit_json(out, {"command": "gchandleleaks", "handles": [f"0x{v:x}" for v in scan.handles],
                            "found": [{"handle": f"0x{v:x}", "location": f"0x{w:x}"} for v, w in scan.hits],
                            "not_found": [f"0x{v:x}" for v in scan.not_found], "bytes_scanned": scan.scanned})
            return
        out.line(_RULE)
        out.line("GCHandleLeaks will report any GCHandles that couldn't be found in memory.      ")
        out.line("Strong and Pinned GCHandles are reported at this time. You can safely abort the")
        out.line("memory scan with Control-C or Control-Break.                                   ")
        out.line(_RULE)
        handles = strong_handles(heap)
        out.line(f"Found {len(handles)} handles:")
        _hex_columns(out, handles)
        out.line("Searching memory")
        out.line("Failed to read whole or part of stress log, some references may come from stress log")
        scan = scan_for_handles(heap, lambda v, where: out.line(f"Found {v:x} at location {where:x}"))
        missing = scan.not_found
        if missing:
            out.line(_RULE78)
            out.line("Some handles were not found. If the number of not-found handles grows over the")
            out.line("lifetime of your application, you may have a GCHandle leak. This will cause   ")
            out.line("the GC Heap to grow larger as objects are being kept alive, referenced only   ")
            out.line("by the orphaned handle. If the number doesn't grow over time, note that there ")
            out.line("may be some noise in this output, as an unmanaged application may be storing  ")
            out.line("the handle in a non-standard way, perhaps with some bits flipped. The memory  ")
            out.line("scan wouldn't be able to find those.                                          ")
            out.line(_RULE78)
            out.line(f"Didn't find {len(missing)} handles:")
            _hex_columns(out, missing)
        else:
            out.line(_RULE78)
            out.line("All handles found.")
            out.line("A leak may still exist because in a general scan of process memory SOS can't  ")
            out.line("differentiate between garbage and valid structures, so you may have false     ")
            out.line("positives. If you still suspect a leak, use this function over time to        ")
            out.line("identify a possible trend.                                                    ")
            out.line(_RULE78)


# -- dumpasync --------------------------------------------------------------------------------


@register
class DumpAsync(Command):
    names = ("dumpasync", "DumpAsync")
    summary = "Display async \"stacks\": tasks and async state machines on the heap, chained by their continuations."
    usage = "dumpasync [--stats | --coalesce] [--completed] [--tasks] [--fields] [--methodtable <MT>] [--type <name>] [--address <addr>] [--json]"
    details = """\
Finds every task on the heap (async methods' state machine boxes included), links each to
what runs when it completes, and prints one STACK per chain that has an async method in
it: the awaited task first, then each method waiting on it, with its await state (the
state machine's <>1__state) or a task's state flags. When the first frame is a method
waiting on something that is not a task, a "<< Awaiting: ... >>" line names the awaiter.

Examples:
  dumpasync
  dumpasync --stats
  dumpasync --coalesce
  dumpasync --type ReadAsync --completed"""
    options = (
        Option("--address", "only stacks that include the object at this address", str, "address", aliases=("-addr",)),
        Option("--methodtable", "only stacks with an object of this MethodTable", str, "MT", aliases=("-mt",)),
        Option("--type", "only stacks with an object whose type name contains this text", str, "name"),
        Option("--tasks", "also stacks made only of tasks (no async method)", aliases=("-t",)),
        Option("--completed", "include completed tasks", aliases=("-c",)),
        Option("--fields", "show each async method's state machine fields", aliases=("-f",)),
        Option("--stats", "count the frames by type instead of printing stacks"),
        Option("--coalesce", "merge stacks and parts of stacks that are the same"),
        Option("--json", "print the result as JSON", dest="json"),
    )

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        from ..clr.features.asyncstacks import collect_async_objects
        addr = self._address(args.address, "--address")
        mt = self._address(args.methodtable, "--methodtable")
        heap = ctx.heap
        heap.check_walkable()
        heap.index(ctx.progress)
        graph = collect_async_objects(ctx.runtime, include_completed=bool(args.completed),
                                      only_boxes=bool(args.stats and not args.tasks))

        def included(o) -> bool:  # type: ignore[no-untyped-def]
            if addr is not None and o.address != addr:
                return False
            if mt is not None and o.method_table != mt:
                return False
            if args.type is not None and args.type not in o.type_name:
                return False
            return True

        if args.stats:
            self._stats(ctx, graph, included, args)
            return
        tops = [o for o in graph.objects.values() if o.top_level and self._wanted(graph, o, included, args.tasks)]
        if args.coalesce:
            self._coalesced(ctx, graph, tops)
            return
        if args.json:
            emit_json(ctx.out, {"command": "dumpasync", "stacks": [self._stack_json(graph, o) for o in tops]})
            return
        out = ctx.out
        if not tops:
            # SOS prints nothing here; an empty answer reads like a failure, so say what was looked for.
            out.line(self._nothing_found(args))
        for n, top in enumerate(tops, 1):
            out.line(f"STACK {n}")
            depth = 0
            awaiting = self._awaiting(ctx, top)
            if awaiting:
                out.line(awaiting)
                depth = 1
            for o, d in self._frames(graph, top, depth):
                if isinstance(o, int):
                    flags = graph.flags_of.get(o)
                    out.line(f"{'  ' * d}{o:016x} {_mt_of(ctx, o):016x} "
                             f"({_task_flags(flags) if flags is not None else ''}) {escape(graph.names.get(o, ''))}")
                else:
                    state = f"({o.await_state})" if o.is_state_machine else f"({_task_flags(o.flags)})"
                    out.line(f"{'  ' * d}{o.address:016x} {o.method_table:016x} {state} {escape(o.description)}")
                    if args.fields:
                        self._fields(ctx, o, d + 4)
            out.line()

    @staticmethod
    def _nothing_found(args: Parsed) -> str:
        what = "async stacks" if not args.tasks else "async or task stacks"
        filtered = args.address is not None or args.methodtable is not None or args.type is not None
        more = [] if args.tasks else ["--tasks adds chains of tasks alone"]
        more += [] if args.completed else ["--completed adds completed tasks"]
        return (f"No {what}{' match the filter' if filtered else ' on the heap'}"
                + (f" ({'; '.join(more)})." if more else "."))

    @staticmethod
    def _fields(ctx: CommandContext, o, depth: int) -> None:  # type: ignore[no-untyped-def]
        """SOS's field table of a frame: the state machine's fields (or the task's)."""
        rt = ctx.runtime
        if o.state_machine_mt:
            where, mt, value_class = o.state_machine, o.state_machine_mt, o.state_machine_is_struct
        else:
            where, mt, value_class = o.address, o.method_table, False
        tab = " " * (depth * 2)
        out = ctx.out
        out.line(f"{tab}{'Address':>16} {'MT':>16} {'Type':<32} {'Value':>16} Name")
        for f in rt.fields.instance_fields(mt):
            if not f.type_mt:
                continue  # SOS skips fields whose type it cannot load
            at = f.address_in(where, value_class)
            shown = rt.target.read_pointer(at) if f.is_reference else at
            tname = _cut_front(ctx.heap.types.csharp_name_of(f.type_mt), 32)
            value = _cut_front(_field_display(ctx, f, at), 16)
            out.line(f"{tab}{shown:016x} {f.type_mt:016x} {escape(tname):<32} {escape(value):>16} {escape(f.name)}")

    @staticmethod
    def _address(text: str | None, option: str) -> int | None:
        if text is None:
            return None
        try:
            return parse_address(text)
        except UsageError:
            raise UsageError(f"invalid address for {option}: {text}") from None

    @staticmethod
    def _wanted(graph, top, included, include_tasks: bool) -> bool:  # type: ignore[no-untyped-def]
        """SOS's rule: a stack is shown when it has an object the filters keep and (without
        --tasks) an async method."""
        saw_included, saw_machine = False, bool(include_tasks)
        todo, seen = [top], set()
        while todo:
            o = todo.pop()
            if o.address in seen:
                continue
            seen.add(o.address)
            saw_included |= included(o)
            saw_machine |= o.is_state_machine
            if saw_included and saw_machine:
                return True
            todo.extend(graph.objects[c] for c in o.continuations if c in graph.objects)
        return False

    @staticmethod
    def _frames(graph, top, depth: int):  # type: ignore[no-untyped-def]
        """Depth-first, as SOS walks: a frame, then its continuations in the order the task
        holds them (its continuation list's order, which is the order they were registered);
        continuations that are not tasks are printed as leaves (as ints), before the others."""
        stack = [(top, depth)]
        seen: set[int] = set()
        while stack:
            o, d = stack.pop()
            yield o, d
            if o.address in seen:
                continue  # a cycle in a corrupt heap
            seen.add(o.address)
            for c in o.continuations:
                if c not in graph.objects:
                    yield c, d + 1
            # Pushed last first, so that the first continuation is the next one popped.
            stack.extend((graph.objects[c], d + 1) for c in reversed(o.continuations) if c in graph.objects)

    @staticmethod
    def _awaiting(ctx: CommandContext, top) -> str:  # type: ignore[no-untyped-def]
        """The synthesized frame for what a paused top-level async method awaits (the awaiter
        field <>u__1 when the state is 0 or it is the only awaiter field, else the first
        awaiter field holding something), or "" when it cannot tell."""
        from ..clr.features.asyncstacks import is_completed
        from ..clr.heap.instances import ObjectReader
        if not top.is_state_machine or top.await_state < 0 or is_completed(top.flags) or not top.state_machine_mt:
            return ""
        rt = ctx.runtime
        fields = [f for f in rt.fields.instance_fields(top.state_machine_mt) if not f.name or f.name.startswith("<>u__")]
        if top.await_state == 0 or len(fields) == 1:
            fields = [f for f in fields if f.name == "<>u__1"]
        for f in fields:
            where = f.address_in(top.state_machine, top.state_machine_is_struct)
            if f.is_reference:
                obj = rt.target.read_pointer(where)
                if not obj or not ObjectReader(rt).is_object(obj):
                    continue
                omt = method_table_of(rt.target, obj) or 0
                return f"<< Awaiting: {obj:016x} {omt:016x} {escape(ctx.heap.types.csharp_name_of(omt))} >>"
            if f.is_struct and f.type_mt:
                t = ctx.heap.types.get(f.type_mt)
                size = (t.base_size - 16) if t is not None else 0
                if len(fields) > 1 and size > 0 and not any(bytes(rt.target.read_partial(where, size))):
                    continue  # the compiler clears an awaiter field once done with it
                return (f"<< Awaiting: {where:016x} {f.type_mt:016x} "
                        f"{escape(ctx.heap.types.csharp_name_of(f.type_mt))} >>")
        return ""

    @staticmethod
    def _stats(ctx: CommandContext, graph, included, args: Parsed) -> None:  # type: ignore[no-untyped-def]
        counts: dict[str, list[int]] = {}
        for o in graph.objects.values():
            if not included(o):
                continue
            entry = counts.setdefault(o.description, [o.method_table, 0])
            entry[1] += 1
        rows = sorted(counts.items(), key=lambda kv: -kv[1][1])
        if args.json:
            emit_json(ctx.out, {"command": "dumpasync", "stats": [
                {"mt": f"0x{mt:x}", "count": n, "type": desc} for desc, (mt, n) in rows]})
            return
        ctx.out.line(f"{'MT':<16} {'Count':<8} Type")
        for desc, (mt, n) in rows:
            ctx.out.line(f"{mt:016x} {f'{n:,}':<8} {escape(desc)}")

    @staticmethod
    def _coalesced(ctx: CommandContext, graph, tops) -> None:  # type: ignore[no-untyped-def]
        out = ctx.out

        def key(a: int) -> str:
            o = graph.objects.get(a)
            if o is None:
                return graph.names.get(a, "")
            return f"({o.await_state}) {o.description}" if o.is_state_machine else o.description

        def level(frames: list[int], depth: int, counter: list[int]) -> None:
            groups: dict[str, list[int]] = {}
            for a in frames:
                groups.setdefault(key(a), []).append(a)
            for k, members in sorted(groups.items(), key=lambda kv: -len(kv[1])):
                if depth == 0:
                    out.line(f"STACKS {counter[0]}")
                    counter[0] += 1
                first = members[0]
                mt = graph.objects[first].method_table if first in graph.objects else _mt_of(ctx, first)
                out.line(f"{'  ' * depth}[{len(members)}] {mt:016x} {escape(k)}")
                nxt = [c for a in members if a in graph.objects for c in graph.objects[a].continuations]
                if nxt and depth < 1000:
                    level(nxt, depth + 1, counter)
                if depth == 0:
                    out.line()

        if tops:
            level([o.address for o in tops], 0, [1])

    @staticmethod
    def _stack_json(graph, top) -> dict:  # type: ignore[no-untyped-def]
        frames = []
        for o, d in DumpAsync._frames(graph, top, 0):
            if isinstance(o, int):
                frames.append({"depth": d, "address": f"0x{o:x}", "type": graph.names.get(o, "")})
            else:
                frames.append({"depth": d, "address": f"0x{o.address:x}", "mt": f"0x{o.method_table:x}",
                               "type": o.description, "state_machine": o.is_state_machine,
                               "await_state": o.await_state if o.is_state_machine else None,
                               "task_flags": o.flags})
        return {"frames": frames}


def _cut_front(text: str, width: int) -> str:
    return text if len(text) <= width else "..." + text[len(text) - width + 3:]


def _field_display(ctx: CommandContext, f, at: int) -> str:  # type: ignore[no-untyped-def]
    """A field's value as SOS's dumpasync --fields shows it."""
    rt = ctx.runtime
    et = f.sig_type if f.sig_type in (ET.STRING, ET.SZARRAY) else f.element_type
    if f.is_struct:
        return f"{at:016x}"
    v = rt.fields.read(f, at)
    if et == ET.BOOLEAN:
        return "true" if v else "false"
    if et == ET.CHAR:
        return f"'{chr(v)}'" if 32 <= v < 127 else f"'\\u{v:04X}'"
    if et in (ET.R4, ET.R8):
        return round_trip(float(v), single=et == ET.R4)
    if et in (ET.I, ET.U, ET.PTR, ET.FNPTR):
        return f"{int(v) & ((1 << 64) - 1):016x}"
    if f.is_reference:
        if not v:
            return "null"
        mt = method_table_of(rt.target, v) or 0
        if mt == ctx.heap.string_mt:
            from ..clr.heap.instances import ObjectReader
            return f'"{ObjectReader(rt).string(v, 64)}"'
        if et == ET.SZARRAY:
            name = ctx.heap.types.csharp_name_of(mt)
            return f"{name[:-2] if name.endswith('[]') else name}[{rt.target.read_u32(v + 8)}]"
        return f"{v:016x}"
    if isinstance(v, (int, float)):
        return str(v)
    return "(unknown)"


def _task_flags(flags: int) -> str:
    from ..clr.features.asyncstacks import describe_task_flags
    return describe_task_flags(flags)


def _mt_of(ctx: CommandContext, obj: int) -> int:
    try:
        return method_table_of(ctx.runtime.target, obj) or 0
    except SosError:
        return 0


# -- maddress ---------------------------------------------------------------------------------


@register
class MAddress(Command):
    names = ("maddress", "MAddress")
    summary = "Display the address space by kind of memory (GC heap, stacks, images ...) with a summary."
    usage = "maddress [-summary | -stat] [-images] [-reserve] [-orderBySize] [-list <kinds>] [--json]"
    details = """\
Every mapping of the process (a live process's /proc maps; a core's program headers and
its file note), cut and named where the runtime's memory lies: GCHeap (committed segment
and region memory), [GCHeapReserve] (with -reserve), HandleTable; a mapping holding a
thread's stack pointer is Stack, a loaded module's file is Image, the rest is named by its
protection (PAGE_READWRITE ...; MAPPED_... for other files). Then a summary per kind.
Loader, code and stub heaps are not told apart yet: they show as PAGE_* memory.

Examples:
  maddress -summary
  maddress -images
  maddress -list GCHeap,Stack"""
    options = (
        Option("-summary", "only the summary table", aliases=("-stat",)),
        Option("-images", "a table of memory per image"),
        Option("-reserve", "include reserved (inaccessible) memory"),
        Option("-orderBySize", "list the regions by size (largest first), not by address"),
        Option("-list", "list the regions of these kinds (comma separated)", str, "kinds"),
        Option("--json", "print the result as JSON", dest="json"),
    )

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        from ..clr.addressmap import address_map
        from ..render.bordered import BorderedTable, human_size
        from ..render.table import Column, Pointer, Text
        ranges = address_map(ctx.runtime, include_reserve=bool(args.reserve))
        groups: dict[str, list[int]] = {}
        for r in ranges:
            g = groups.setdefault(r.name, [0, 0])
            g[0] += 1
            g[1] += r.size
        summary = sorted(groups.items(), key=lambda kv: -kv[1][1])
        if args.json:
            emit_json(ctx.out, {"command": "maddress", "regions": [
                {"kind": r.name, "start": f"0x{r.start:x}", "end": f"0x{r.end:x}", "size": r.size, "type": r.type,
                 "state": r.state, "protect": r.protection, "image": r.image} for r in ranges],
                "summary": [{"kind": k, "count": c, "size": s} for k, (c, s) in summary]})
            return
        out = ctx.out
        human = Column(12, True, lambda v: human_size(int(v)))
        width = max([len(r.name) for r in ranges] + [0])
        if not args.summary and args.list is None:
            ordered = sorted(ranges, key=lambda r: (-r.size, r.start)) if args.orderbysize else ranges
            t = BorderedTable(Column(width, False, str), Pointer(), Pointer(), human,
                              Column(max([len(r.type) for r in ranges] + [0]), False, str),
                              Column(max([len(r.state) for r in ranges] + [0]), False, str),
                              Column(max([len(r.protection) for r in ranges] + [0]), False, str),
                              Text(max([len(r.image) for r in ranges] + [0])))
            out.lines(t.header("Memory Kind", "StartAddr", "EndAddr-1", "Size", "Type", "State", "Protect", "Image"))
            out.lines([t.row(r.name, r.start, r.end - 1, r.size, r.type, r.state, r.protection, escape(r.image))
                       for r in ordered])
            out.line(t.rule())
        if args.images:
            images: dict[str, list[int]] = {}
            for r in ranges:
                if r.image and r.state != "MEM_RESERVE":
                    g = images.setdefault(r.image, [0, 0])
                    g[0] += 1
                    g[1] += r.size
            t = BorderedTable(Text(min(max([len(i) for i in images] + [5]), 80)), Integer(), human, Integer())
            out.lines(t.header("Image", "Count", "Size", "Size (bytes)"))
            rows = sorted(images.items(), key=lambda kv: -kv[1][1])
            out.lines([t.row(escape(i), c, s, s) for i, (c, s) in rows])
            out.lines(t.footer("[TOTAL]", sum(c for c, _s in images.values()), sum(s for _c, s in images.values()),
                               sum(s for _c, s in images.values())))
            out.line()
        if args.list is not None:
            for kind in [k for k in args.list.replace(",", " ").split() if k]:
                mine = sorted((r for r in ranges if r.name.lower() == kind.lower()), key=lambda r: -r.size)
                if not mine:
                    out.line(f"No memory regions match '{kind}'.")
                    continue
                out.line(f"{kind} Memory Regions:")
                t = Table(Pointer(), Integer(), human, Column(11, False, str), Column(11, False, str), Text())
                out.line(t.header("Base Address", "Size (bytes)", "Size", "Mem State", "Mem Type", "Mem Protect"))
                for r in mine:
                    out.line(t.row(r.start, r.size, r.size, r.state, r.type, r.protection))
                total = sum(r.size for r in mine)
                out.line(f"{total:,} bytes ({human_size(total)}) in {len(mine):,} memory regions")
                out.line()
        if args.list is None or args.summary:
            t = BorderedTable(Column(width, False, str), Integer(), human, Integer())
            out.lines(t.header("Memory Type", "Count", "Size", "Size (bytes)"))
            out.lines([t.row(k, c, s, s) for k, (c, s) in summary])
            out.lines(t.footer("[TOTAL]", sum(c for c, _s in groups.values()), sum(s for _c, s in groups.values()),
                               sum(s for _c, s in groups.values())))


# -- dumpconcurrentqueue ----------------------------------------------------------------------


@register
class DumpConcurrentQueue(Command):
    names = ("dumpconcurrentqueue", "dcq", "DumpConcurrentQueue")
    summary = "Display the items of a System.Collections.Concurrent.ConcurrentQueue."
    usage = "dumpconcurrentqueue <address> [--json]"
    details = """The queue's items, oldest first, numbered. Numbers, booleans and strings are shown; other
values as the command that dumps them (dumpobj, dumparray, dumpvc). Unlike SOS, which prints
every slot of each segment (unused ones too), only the items in the queue are listed.

Example:
  dcq 7f3a1c000040"""
    options = (Option("--json", "print the result as JSON", dest="json"),)
    positionals = (Positional("address", "a ConcurrentQueue object"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        from ..clr.features.concurrent import QUEUE_PREFIXES, read_concurrent_queue
        if not args.address:
            raise UsageError("Missing ConcurrentQueue address...")
        try:
            addr = parse_address(args.address)
        except UsageError:
            raise UsageError("Hexadecimal address expected...") from None
        heap = ctx.heap
        if heap.index(ctx.progress).find(addr) is None:
            raise SosError(f"{args.address} is not referencing an object...")
        mt = method_table_of(ctx.runtime.target, addr) or 0
        name, shown = heap.types.name_of(mt), heap.types.csharp_name_of(mt)  # SOS's dcq prints ClrMD's name
        if not name.startswith(QUEUE_PREFIXES):
            raise SosError(f"{args.address} is not a ConcurrentQueue but an instance of {escape(shown)}...")
        try:
            items = [value_text(v) for v in read_concurrent_queue(ctx.runtime, addr)]
        except MissingField as e:
            if args.json:
                raise
            # A ConcurrentQueue<T>[] (its name starts as a queue's): SOS prints the type, then
            # ClrMD's message about the field the queue should have.
            ctx.out.lines([escape(shown), f"Type '{escape(heap.types.csharp_name_of(e.method_table))}' does not "
                                          f"contain a field named '{e.field}'", ""])
            return
        if args.json:
            emit_json(ctx.out, {"command": "dumpconcurrentqueue", "address": f"0x{addr:x}", "type": name,
                                "csharp_type": shown, "items": items})
            return
        out = ctx.out
        out.line(escape(shown))
        for i, v in enumerate(items, 1):
            out.line(f"{i:4} - {escape(v)}")
        out.line("---------------------------------------------")
        out.line(f"{len(items)} items")
        out.line()
