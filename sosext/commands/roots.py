"""Who keeps it alive: gcroot, objsize, gchandles, finalizequeue, dumpstackobjects, verifyheap."""
from __future__ import annotations

from typing import Iterator

import numpy as np

from ..clr.addresses import AddressKind, classifier
from ..clr.roots.gcroot import (RootChain, chain_static, chain_static_of, iter_root_chains, retained_set, sos_order,
                                root_method_name, roots_holding)
from ..clr.heap.heap import ClrHeap
from ..clr.progress import Progress, polled
from ..clr.roots.roots import DEPENDENT, HANDLE_KIND_TEXT, HANDLE_TYPE_WORD, REFCOUNTED, ClrRoot, RootKind, finalizable_ranges, \
    finalizer_queue_ranges, read_handles, read_pointer_array
from ..clr.code.sourcelines import source_lines
from ..clr.threads.stacks import walk_stack
from ..clr.threads.stackscan import stack_scan_ranges
from ..errors import SosError, UsageError
from ..render.json import emit_json
from ..render.numbers import P16, os_thread_column, os_thread_id, p16
from ..render.numbers import count as fmt_count
from ..render.output import Address
from ..render.table import Cells, Column, Pointer, Table, Text, TypeName, fmt_pointer
from .base import (Command, Option, Parsed, Positional, address_or, parse_address, parse_count, parse_mt,
                   parse_thread_id, register)
from .context import CommandContext
from .rootnotices import announce_roots, live_objects
from .heap import (DumpHeap, check_heap_arguments, chunks_of, select_objects, sequence_stats, type_stats,
                   write_addresses, write_stats)

HANDLE_STAT_LABEL = [
    (2, "Strong Handles:"), (3, "Pinned Handles:"), (7, "Async Pinned Handles:"), (5, "Ref Count Handles:"),
    (1, "Weak Long Handles:"), (0, "Weak Short Handles:"), (9, "Weak WinRT Handles:"),
    (10, "Weak Interior Pointer Handles:"), (4, "Variable Handles:"), (8, "SizedRef Handles:"),
    (6, "Dependent Handles:"),
]


def parse_object_address(text: str | None) -> int:
    return address_or(text, f"Could not parse target object address: {text}",
                      "Could not parse target object address: 0")


def method_name_at(heap: ClrHeap, ip: int) -> str:
    return heap.runtime.method_name_at(ip) or "UnknownType.UnknownMethod()"


def root_header_lines(heap: ClrHeap, root: ClrRoot, state: dict) -> list[str]:
    """The section/thread/frame lines SOS prints before a root's chain, given what was printed before."""
    lines: list[str] = []
    if root.kind is RootKind.HANDLE:
        if state.get("section") != "handle":
            lines.append("HandleTable:")
        kind = HANDLE_KIND_TEXT.get(root.handle.handle_type, "handle")
        if root.handle.handle_type == REFCOUNTED:
            kind += f" RefCount: {fmt_count(root.handle.ref_count)}"
        lines.append(f"    {p16(root.address)} ({kind})")
        state["section"] = "handle"
    elif root.kind is RootKind.FINALIZER:
        if state.get("section") != "finalizer":
            lines.append("Finalizer Queue:")
        lines.append(f"    {p16(root.address)} (finalizer root)")
        state["section"] = "finalizer"
    else:
        if state.get("section") != "stack" or state.get("thread") != root.thread_os_id:
            lines.append(f"Thread {os_thread_column(root.thread_os_id)}:")
            state["frame"] = None
        state["section"] = "stack"
        state["thread"] = root.thread_os_id
        frame_key = (root.frame_sp, root.source)
        explicit = None if root.source_is_frame else _frame_at_root(heap, root, state)
        if explicit is not None:
            frame_key = ("frame", explicit.sp, explicit.ip)
        if state.get("frame") != frame_key and explicit is not None:
            # SOS's (ClrMD's) line of a runtime Frame: its address, IP, [kind] and (method).
            method = heap.runtime.frame_method_name(explicit.sp)
            lines.append(f"    {explicit.sp:x} {explicit.ip:x} [{explicit.frame_name}] " + (f" ({method})" if method else ""))
            state["frame"] = frame_key
        elif state.get("frame") != frame_key:
            if root.source_is_frame:
                method = root_method_name(heap.runtime, root)
                site = f"[{heap.runtime.frame_name(root.source)}: {p16(root.source)}]"
                lines.append(f"    {root.frame_sp:x} {site}" + (f"  ({method})" if method else " "))
            else:
                site = method_name_at(heap, root.source)
                # As SOS: the frame's source line when its module's PDB is found (see clrstack).
                loc = source_lines(heap.runtime).location(root.source) if root.source else None
                if loc is not None:
                    site += f" [{loc.path} @ {loc.line}]"
                lines.append(f"    {root.frame_sp:x} {root.source:x} {site}")
            state["frame"] = frame_key
        # As SOS: "reg[+-offset]:" when a register says where, then the stack slot's address
        # when there is one (a value held in a register itself has none).
        line = "        "
        if root.register or root.offset:
            off = f"+{root.offset:x}" if root.offset > 0 else (f"-{-root.offset:x}" if root.offset < 0 else "")
            line += f"{root.register or '???'}{off}:"
        if root.address:
            line += f" {p16(root.address)}"
        lines.append(line)
    return lines


def _frame_at_root(heap: ClrHeap, root: ClrRoot, state: dict):  # -> ClrStackFrame | None
    """The runtime Frame SOS names for a stack root the code at an IP reported: ClrMD gives a
    root the first frame of its thread's walk that is a Frame at the root's stack pointer, or
    else the managed frame at its IP and stack pointer; a Frame (an InlinedCallFrame) can lie
    exactly at the SP of the managed frame it is in, and comes first (a webapi core's thread in
    a socket Shutdown P/Invoke showed it). None: the managed frame, as before."""
    walks = state.setdefault("walks", {})
    frames = walks.get(root.thread_os_id)
    if frames is None:
        try:
            frames = walk_stack(heap.runtime, root.thread_os_id).frames
        except SosError:
            frames = ()
        walks[root.thread_os_id] = frames
    for f in frames:
        if f.is_managed:
            if f.ip == root.source and f.sp == root.frame_sp:
                return None
        elif f.sp == root.frame_sp and f.frame_name:
            return f
    return None


def chain_lines(heap: ClrHeap, path: RootChain) -> list[str]:
    return _chain_rows(heap, path.addresses, path.method_tables, path.via_dependent, chain_static_of(heap, path))


def object_chain_lines(heap: ClrHeap, chain: tuple[int, ...], via_dependent: tuple[bool, ...], *,
                       statics: bool = True) -> list[str]:
    """SOS's ``->  address type`` lines of a chain of heap index positions; ``statics=False``
    names no static variable (SOS's pathto passes gcroot's printer no statics)."""
    ix = heap.index()
    return _chain_rows(heap, tuple(int(ix.addresses[i]) for i in chain), tuple(ix.method_table_at(i) for i in chain),
                       via_dependent, chain_static(heap, chain) if statics else None)


def _chain_rows(heap: ClrHeap, addresses: tuple[int, ...], method_tables: tuple[int, ...],
                via_dependent: tuple[bool, ...], static: str | None) -> list[str]:
    t = Table(Text(2), Column(16, False, fmt_pointer), TypeName(), Text(), indent=" " * 10)
    out = []
    for k, (addr, mt) in enumerate(zip(addresses, method_tables)):
        extra = "(dependent handle)" if k > 0 and via_dependent[k - 1] else ""
        if k == 1 and static:
            extra = f"(static variable: {static})"
        # SOS's managed gcroot: ClrMD's names; "Unknown" for no object (no MethodTable)
        out.append(t.row("->", addr, heap.types.csharp_name_of(mt) if mt else "Unknown", extra))
    return out


def require_object(heap: ClrHeap, address: int) -> int:
    """The heap index position of the object at ``address``, or one line saying what the
    address is instead."""
    classifier(heap.runtime).require_object(address)
    i = heap.index().find(address)
    if i is None:
        raise SosError(f"{address:#x} is not a valid object")
    return i


def require_method_table(heap: ClrHeap, mt: int) -> int:
    classifier(heap.runtime).require(mt, AddressKind.METHOD_TABLE, "a MethodTable")
    return mt


def parse_limit(text: str) -> int:
    n = parse_count(text)
    if n < 1:
        raise UsageError(f"-limit must be at least 1: {text}")
    return n


@register
class GCRoot(Command):
    names = ("gcroot", "GCRoot")
    summary = "Show the chains of references from GC roots to an object."
    usage = "gcroot [-nostacks] [-limit <n>] [-shortest] [-gcgen <n>] [--json] <address>"
    details = """\
Roots are strong GC handles, the finalizer queue's ready-for-finalization part and the
references on managed threads' stacks and registers, taken in SOS's order. For each root
that reaches the object its chain of objects is printed as soon as it is found, and the last
line counts the roots. On a core the chains are SOS's: ClrMD's depth-first search from each
root in turn, where an object an earlier root's search met is not followed again and one on
a chain already printed ends the search; a live process answers from the reverse reference
graph (each root's shortest chain). After the first gcroot on a core, that search is run once
more on the other core while you read, for no object, and recorded (the root forest): later
gcroots of the stop print the same chains from it in milliseconds.

-limit n stops at the n-th root that reaches the object: the first chain costs what
reaching the object costs, not a search of the whole heap.

-shortest prints each root's shortest chain instead (and every root that reaches the
object, where SOS's search drops some): searched from the roots for the first two, then
from the reverse reference graph, which after the first -shortest gcroot is built on the
other core while you read (LLDB and the CLI), so that later ones take milliseconds.

Examples:
  gcroot 7f3a14005678
  gcroot -nostacks 7f3a14005678
  gcroot --json 7f3a14005678

-gcgen <n> (SOS's helper for findroots): as if generation n were being collected. An
object of an older generation survives it (said in two lines); for n = 2 the roots are
gcroot's. For n = 0 or 1 SOS also walks the GC's internal root array of older-generation
objects, which holds entries only while a GC runs: on a stopped process or a dump sosext
says so in one line.

An address that holds no object gets SOS's "Warning: <address> is not a valid object" and is
searched anyway: the roots holding the address itself are listed (type "Unknown")."""
    options = (Option("-nostacks", "do not consider thread stacks"),
               Option("-limit", "stop after n roots (n >= 1)", parse_limit, "n"),
               Option("-shortest", "each root's shortest chain (later gcroots from the reference graph)"),
               Option("-gcgen", "as findroots: the condemned generation n (0, 1 or 2)", parse_count, "n"),
               Option("--json", "print the result as JSON", dest="json"))
    positionals = (Positional("address", "the object"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        address = parse_object_address(args.address)
        if not address:
            raise SosError(f"Could not parse target object address: {args.address}")  # SOS's words for 0
        heap = ctx.heap
        # SOS warns of an address that is no object and searches anyway: what it finds then
        # are the roots that hold the address itself (a stale stack slot the GC reports).
        is_object = classifier(heap.runtime).object_or_none(address) is not None
        if args.gcgen is not None and self._survives(ctx, heap, address, args.gcgen):
            return
        if not args.json:
            # After -gcgen's answers: dotnet-dump shows SOS's warning only before the search.
            if not is_object:
                ctx.out.line(f"Warning: {address:x} is not a valid object")
            announce_roots(ctx)
        ordered = sos_order(heap.roots(include_stacks=not args.nostacks).roots, stacks=not args.nostacks)
        chains = (iter_root_chains(heap, address, ordered, args.limit, ctx.progress, shortest=args.shortest)
                  if is_object else roots_holding(address, ordered, args.limit))
        if not args.json and not ctx.out.structured:  # each chain as soon as it is known
            state: dict = {}
            n = 0
            for p in chains:
                ctx.out.lines(root_header_lines(heap, p.root, state))
                ctx.out.lines(chain_lines(heap, p))
                ctx.out.line()
                n += 1
            ctx.out.line(f"Found {fmt_count(n)} unique roots.")
            return
        paths = list(chains)
        if args.json:
            emit_json(ctx.out, {"command": "gcroot", "object": f"0x{address:x}", "valid_object": is_object,
                                "roots": [self._json_path(heap, p) for p in paths], "count": len(paths)})
            return
        if ctx.out.structured:  # CSV/Markdown: one row per object of each chain
            rows = ctx.out.table("chain", None, ("root", "root_kind", "root_address", "step", "address", "type"))
            for n, p in enumerate(paths):
                doc = self._json_path(heap, p)
                for k, obj in enumerate(doc["chain"]):
                    rows.row(data=(n, doc["root"]["kind"], doc["root"]["address"], k, obj["address"], obj["type"]))
            ctx.out.field("count", len(paths))

    @staticmethod
    def _survives(ctx: CommandContext, heap: ClrHeap, address: int, condemned: int) -> bool:
        """``-gcgen``: True when the answer is that the object outlives a GC of ``condemned``."""
        gen = heap.generation_of(address)
        if gen is None:
            raise SosError(f"Address {address:x} is not in the managed heap.")
        if condemned < int(gen):
            ctx.out.line(f"Object {address:x} will survive this collection:")
            ctx.out.line(f"    gen({address:x}) = {int(gen)} > {condemned} = condemned generation.")
            return True
        if condemned in (0, 1):
            raise SosError(f"older-generation roots of a gen{condemned} collection come from the GC's internal root "
                           "array, which holds entries only while that GC runs (findroots on a live process); "
                           "gcroot without -gcgen shows every root")
        return False

    @staticmethod
    def _json_path(heap: ClrHeap, p: RootChain) -> dict:
        r = p.root
        root = {"kind": r.kind.value, "address": f"0x{r.address:x}"}
        if r.handle is not None:
            root["handle_type"] = HANDLE_KIND_TEXT.get(r.handle.handle_type, str(r.handle.handle_type))
        if r.kind is RootKind.STACK:
            root.update(thread=os_thread_id(r.thread_os_id), register=r.register or None,
                        method=None if r.source_is_frame else method_name_at(heap, r.source))
        chain = [{"address": f"0x{a:x}", "type": heap.types.name_of(mt) if mt else None,
                  "csharp_type": heap.types.csharp_name_of(mt) if mt else None}
                 for a, mt in zip(p.addresses, p.method_tables)]
        static = chain_static_of(heap, p)
        if static:
            root["static"] = static
        return {"root": root, "chain": chain}


@register
class ObjSize(Command):
    names = ("objsize", "ObjSize")
    summary = "List (or count) the objects an object transitively keeps alive."
    usage = "objsize [-stat] [-short] [-strings] [-mt <MT>] <address>"
    details = """\
Everything reachable from the object through references and dependent handles (a
ConditionalWeakTable key keeps its value), the object itself included,
in breadth-first order, with dumpheap's statistics and total.

Examples:
  objsize 7f3a14005678
  objsize -stat 7f3a14005678"""
    options = (Option("-stat", "statistics only", aliases=("-summary",)),
               Option("-short", "addresses only"),
               Option("-strings", "string statistics of the retained strings"),
               Option("-mt", "start from every object of this MethodTable (instead of an address)", parse_mt, "MT"))
    positionals = (Positional("address", "the object"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        if args.mt is not None and args.address is not None:
            raise UsageError("objsize takes an object address or -mt <MT>, not both")
        heap = ctx.heap
        if args.mt is not None:
            require_method_table(heap, args.mt)
        else:
            address = parse_object_address(args.address)
            if not address:
                raise SosError(f"Could not parse target object address: {args.address}")  # as SOS
            try:
                require_object(heap, address)
            except SosError as e:
                # SOS's answer for an address that holds no object: a line, no failure; what the
                # address is instead goes to --json.
                line = f"{address:x} is not a valid object"
                ctx.out.field("message", line, line)
                ctx.out.field("address_is", str(e))
                return
        ix = heap.index(ctx.progress)
        if args.mt is not None:
            starts = np.nonzero(ix.mask_method_tables([args.mt]))[0]
            t = heap.types.get(args.mt)
            header = (f"Objects which ({heap.types.csharp_name_of(args.mt) if t else '<unknown type>'}) "
                      "transitively keep alive:")
        else:
            address = parse_object_address(args.address)
            i = require_object(heap, address)
            starts = np.array([i])
            header = f"Objects which {address:x} ({heap.csharp_type_name_at(i)}) " \
                     "transitively keep alive:"
        order = retained_set(heap, starts)
        if args.short:
            write_addresses(ctx, ix, chunks_of(order))
            return
        ctx.out.line(header)
        ctx.out.line()
        if not args.stat:
            if DumpHeap._list(ctx, heap, ix, order):
                ctx.out.line()
        if args.strings:
            strings = order[ix.type_ids[order] == np.searchsorted(ix.method_tables, np.uint64(heap.string_mt))]
            DumpHeap._string_stats(ctx, heap, ix, strings)
            return
        write_stats(ctx, heap, sequence_stats(ix, np.asarray(order, dtype=np.int64)))


@register
class GCHandles(Command):
    names = ("gchandles", "GCHandles")
    summary = "List the GC handles with their objects, and statistics of them."
    usage = "gchandles [-type <kind>] [-stat] [-perdomain]"
    details = """\
Kinds: Strong, Pinned, AsyncPinned, RefCounted, WeakShort, WeakLong, Dependent, SizedRef, WeakWinRT, Variable.

Examples:
  gchandles -stat
  gchandles -type Pinned"""
    options = (Option("-type", "only handles of this kind", str, "kind"),
               Option("-stat", "statistics only"),
               Option("-perdomain", "the statistics per AppDomain, as SOS prints them (the System Domain's are empty)"))

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        wanted = None
        if args.type is not None:
            by_word = {w.lower(): k for k, w in HANDLE_TYPE_WORD.items()}
            wanted = by_word.get(args.type.lower())
            if wanted is None:
                raise UsageError(f"Unknown handle type '{args.type}'.")
        heap = ctx.heap
        ix = heap.index(ctx.progress)
        handles = [h for h in read_handles(heap) if wanted is None or h.handle_type == wanted]
        stats: dict[int, list[int]] = {}
        order: list[int] = []
        rows = ctx.out.table("handles", Table(Column(16, True, P16), Column(11, False, str), Column(16, True, P16),
                                              Column(8, True, str), Column(16, True, str), Text()),
                             ("handle", "type", "object", "size", "data", "object_type"))
        if not args.stat:
            rows.header("Handle", "Type", "Object", "Size", "Data", "Type")
        for h in polled(handles):
            i = ix.find(h.object) if h.object else None
            if i is not None:
                mt = ix.method_table_at(i)
                size = int(ix.sizes[i])
                name = heap.types.name_of(mt)
                if mt not in stats:
                    stats[mt] = [0, 0]
                    order.append(mt)
                stats[mt][0] += 1
                stats[mt][1] += size
            else:
                size, name = 0, "<error>" if h.object else "<free>"
            data = ""
            if h.handle_type == REFCOUNTED:
                data = str(h.ref_count)
            elif h.handle_type == DEPENDENT:
                data = f"{P16(h.secondary)}"
            if not args.stat:  # printed as found: the table's widths are fixed
                word = HANDLE_TYPE_WORD.get(h.handle_type, "Unknown")
                rows.row(h.address, word, h.object, size, data, name,
                         data=(Address(h.address), word, Address(h.object), size,
                               Address(h.secondary) if h.handle_type == DEPENDENT else (data or None), name))
        counts: dict[int, int] = {}
        for h in handles:
            counts[h.handle_type] = counts.get(h.handle_type, 0) + 1
        if not args.perdomain or ctx.out.structured:
            if not args.stat:
                ctx.out.line()
            _handle_stats(ctx, stats, order, counts if wanted is None else None)
            return
        # SOS's -perdomain: the statistics once per AppDomain (every handle of .NET Core is the
        # one AppDomain's; the System Domain's are empty), each under a rule and its title.
        for domain in ctx.runtime.app_domains():
            ctx.out.line("-" * 78)
            system = domain.kind == "system"
            ctx.out.line(f"GC Handle Statistics for AppDomain {P16(domain.address)}" + (" (System Domain)" if system else ""))
            if not args.stat:
                ctx.out.line()
            _handle_stats(ctx, {} if system else stats, [] if system else order,
                          None if wanted is not None else ({} if system else counts))


def _handle_stats(ctx: CommandContext, stats: dict[int, list[int]], order: list[int],
                  counts: dict[int, int] | None) -> None:
    """gchandles' statistics: per type (SOS's order), the total, and (``counts``, without
    -type) the number of handles of each kind."""
    heap = ctx.heap
    ctx.out.line("Statistics:")
    types = ctx.out.table("types", Table(Column(16, True, p16), Column(8, True, str), Column(12, True, str), Text()),
                          ("mt", "count", "total_size", "name"))
    types.header("MT", "Count", "TotalSize", "Class Name")
    # Native SOS's HeapStat order: ascending total size, ties by descending MethodTable (its
    # size tree takes a later, higher MethodTable to the left of an equal one).
    for mt in sorted(order, key=lambda m: (stats[m][1], -m)):
        c, tot = stats[mt]
        types.row(mt, c, tot, heap.types.name_of(mt), data=(Address(mt), c, tot, heap.types.name_of(mt)))
    total = sum(c for c, _t in stats.values())
    ctx.out.field("total_objects", total, f"Total {total} objects")
    if counts is not None:
        ctx.out.line()
        ctx.out.line("Handles:")
        kinds = ctx.out.table("handle_counts", Cells((), ()), ("type", "count"))
        for k, label in HANDLE_STAT_LABEL:
            if counts.get(k):
                kinds.row(f"    {label[:21]:<21} {counts[k]}", data=(HANDLE_TYPE_WORD.get(k, str(k)), counts[k]))


@register
class FinalizeQueue(Command):
    names = ("finalizequeue", "fq", "FinalizeQueue")
    summary = "Show the objects registered for finalization and those ready to be finalized."
    usage = "finalizequeue [-stat] [-short] [-allReady] [-mt <MT>]"
    details = """\
Per GC heap, how many finalizable objects each generation has and how many are ready
for finalization (unreachable, waiting for the finalizer thread); then the objects and
their statistics. -allReady keeps only objects that are ready or no longer rooted.

Examples:
  fq -stat
  finalizequeue -allReady"""
    options = (Option("-stat", "statistics only", aliases=("-summary",)),
               Option("-short", "addresses only"),
               Option("-allReady", "only objects that are ready for finalization or unrooted"),
               Option("-detail", "(accepted for compatibility)"),
               Option("-mt", "only objects of this MethodTable", parse_mt, "MT"))

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        if args.short and args.stat:
            raise UsageError("Cannot specify both -short and -stat.")
        heap = ctx.heap
        if args.mt is not None:
            require_method_table(heap, args.mt)
        ix = heap.index(ctx.progress)
        # SOS computes the live set first, so its notices come before anything else.
        live = live_objects(ctx) if args.allready else None
        ready_slots: list[int] = []
        all_objects: list[int] = []
        lines = []
        ready_ranges = {h: (s, e) for h, s, e in finalizer_queue_ranges(heap)}
        for sh in heap.subheaps:
            fill = sh.fill_pointers
            lines.append(f"Heap {sh.index}")
            ngen = len(fill) - 2
            # Generation g's part is [fill[k-1], fill[k]) with k = ngen - g - 1 (oldest first).
            for g in range(3):
                k = ngen - g - 1
                lo = fill[k - 1] if k > 0 else fill[0]
                hi = fill[k]
                lines.append(f"generation {g} has {fmt_count((hi - lo) // 8)} objects ({lo:x}->{hi:x})")
            lo, hi = ready_ranges.get(sh.index, (0, 0))
            lines.append(f"Ready for finalization {fmt_count((hi - lo) // 8)} objects ({lo:x}->{hi:x})")
            lines.append("-" * 30)
            for _slot, obj in read_pointer_array(heap, lo, hi):
                if obj:
                    ready_slots.append(obj)
        for _h, lo, hi in finalizable_ranges(heap):
            all_objects.extend(o for _s, o in read_pointer_array(heap, lo, hi) if o)
        all_objects.extend(ready_slots)
        idx = [ix.find(o) for o in polled(all_objects)]
        idx = [i for i in idx if i is not None]
        if live is not None:
            ready_set = {ix.find(o) for o in ready_slots}
            idx = [i for i in idx if i in ready_set or not live[i]]
        # In the queue's order (the generations' parts, oldest first, then the ready ones), as SOS lists them.
        sel = np.array(list(dict.fromkeys(idx)), dtype=np.int64)
        if args.mt is not None and len(sel):
            sel = sel[ix.mask_method_tables([args.mt])[sel]]
        if args.short:
            write_addresses(ctx, ix, chunks_of(sel))
            return
        for w in ("SyncBlocks to be cleaned up: 0", "Free-Threaded Interfaces to be released: 0",
                  "MTA Interfaces to be released: 0", "STA Interfaces to be released: 0"):
            ctx.out.line(w)
        ctx.out.line("-" * 34)
        ctx.out.line()
        ctx.out.lines(lines)
        ctx.out.line("Statistics for all finalizable objects that are no longer rooted:" if args.allready else
                     "Statistics for all finalizable objects (including all objects ready for finalization):")
        if not args.stat:
            if DumpHeap._list(ctx, heap, ix, sel):
                ctx.out.line()
        write_stats(ctx, heap, sequence_stats(ix, sel))


@register
class DumpStackObjects(Command):
    names = ("dumpstackobjects", "dso", "DumpStackObjects")
    summary = "List the managed objects referenced from the current thread's registers and stack."
    usage = "dumpstackobjects [-verify] [<os thread id>]"
    details = """\
A conservative scan: every register and every stack slot that holds the exact start of a heap
object, over the range dotnet-dump reads: from the stack pointer to 0x2000 bytes past the
outermost managed frame (which may reach past the stack's base into the thread's TLS block);
64 KiB from the stack pointer for a thread without managed frames; and, when the thread seems
to run on an alternate signal stack, its normal stack too (a note line says so).

Examples:
  dso
  dumpstackobjects 0x2f8a"""
    options = (Option("-verify", "(accepted for compatibility: only exact object starts are shown)"),)
    positionals = (Positional("thread", "OS thread id (hex or decimal); default: the current thread"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        heap = ctx.heap
        target = heap.runtime.target
        if args.thread is None:
            # The thread clrstack and pe use (and number) too: the debugger's, or setthread's.
            from .threads import current_thread
            cur = current_thread(ctx)
            tid = cur.tid if cur is not None else _thread_argument(target, None)
        else:
            tid = _thread_argument(target, args.thread)
        ix = heap.index(ctx.progress)
        regs = target.registers(tid)
        sp = regs.get("rsp", regs.get("sp"))
        if sp is None:
            raise SosError(f"Unable to get the stack pointer for thread {tid:x}.")
        index_of = {t.tid: t.index for t in target.threads()}
        # numbered as clrstack does
        ctx.out.field("os_thread_id", tid, f"OS Thread Id: {os_thread_id(tid)} ({index_of.get(tid, -1)})")
        ranges = stack_scan_ranges(heap.runtime, tid, sp)
        if ranges.other is not None:
            ctx.out.line("Note: Thread appears to be on alternate signal stack. Also scanning normal thread "
                         f"stack {ranges.other[0]:x}-{ranges.other[1]:x}.")
        t = ctx.out.table("objects", Table(Column(16, True, lambda v: v if isinstance(v, str) else f"{fmt_pointer(int(v))}"),
                                           Pointer(), TypeName()), ("location", "object", "name", "csharp_name"))
        t.header("SP/REG", "Object", "Name")
        name_of = heap.type_name_at
        shown = heap.csharp_type_name_at  # SOS's managed dumpstackobjects prints ClrMD's names
        for reg in sorted(regs, key=_dso_register_order):
            i = ix.find(regs[reg])
            if i is not None and reg not in ("rip", "pc"):
                t.row(reg, regs[reg], shown(i), data=(reg, Address(regs[reg]), name_of(i), shown(i)))
        found: dict[int, tuple[int, int]] = {}  # slot -> (object, its index); one row per slot
        for low, high in ranges.scanned:
            for slot, obj, i in _objects_in(target, ix, low, high):
                found.setdefault(slot, (obj, i))
        for slot in polled(sorted(found)):
            obj, i = found[slot]
            t.row(slot, obj, shown(i), data=(Address(slot), Address(obj), name_of(i), shown(i)))


# dotnet-dump numbers a thread's registers in the order its CONTEXT structure declares them
# (ClrMD's AMD64Context / Arm64Context) and dso lists register rows by that number.
_CONTEXT_ORDER = {name: i for i, name in enumerate((
    "rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13", "r14",
    "r15", "rip", *(f"x{n}" for n in range(29)), "fp", "x29", "lr", "x30", "sp", "pc"))}


def _dso_register_order(name: str) -> tuple[int, str]:
    return _CONTEXT_ORDER.get(name, len(_CONTEXT_ORDER)), name


def _objects_in(target, ix, low: int, high: int):  # type: ignore[no-untyped-def]
    """(slot, object, index) for each word of [low, high) that holds an object's start."""
    data = target.read_partial(low, high - low) if high > low else b""
    n = len(data) // 8
    words = np.frombuffer(bytes(data[: n * 8]), dtype=np.uint64)
    if not len(words) or not len(ix.addresses):
        return
    pos = np.searchsorted(ix.addresses, words)
    pos[pos >= len(ix.addresses)] = 0
    for k in np.nonzero(ix.addresses[pos] == words)[0]:
        yield low + 8 * int(k), int(words[k]), int(pos[k])


def _thread_argument(target, text: str | None) -> int:  # type: ignore[no-untyped-def]
    if text is not None:
        tid = parse_thread_id(text)
        if not any(t.tid == tid for t in target.threads()):
            raise SosError(f"no thread with OS id {os_thread_id(tid)} in the target (see setthread or clrthreads)")
        return tid
    sel = getattr(target, "selected_tid", None) or getattr(target, "selected_thread_tid", None)
    tid = sel() if sel else None
    if tid is None:
        threads = target.threads()
        if not threads:
            raise SosError("the target has no threads")
        tid = threads[0].tid
    return tid


@register
class VerifyHeap(Command):
    names = ("verifyheap", "VerifyHeap")
    summary = "Check every object's header and references; report corruption."
    usage = "verifyheap [-heap <n>] [-segment <addr>] [-ignoreGCState] [-noprogress] [start [end]]"
    details = """\
Every object must start with a valid MethodTable, lie within its segment, and every
reference it holds must point to the start of a heap object (or be null).

Example:
  verifyheap"""
    options = (Option("-heap", "only GC heap n", parse_count, "n"),
               Option("-segment", "only this segment", parse_address, "address"),
               Option("-ignoreGCState", "verify even if the GC says the heap is not walkable"),
               Option("-noprogress", "no progress lines"))
    positionals = (Positional("start", "hex start address"), Positional("end", "hex end address or L<length>"))

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        from .heap import parse_range
        start, end = parse_range(args.start, args.end)
        heap = ctx.heap
        heap.check_walkable(args.ignoregcstate)
        if args.segment is not None:
            check_heap_arguments(heap, None, args.segment)
        progress = None if args.noprogress else ctx.progress
        ix = heap.index(progress)
        mask = select_objects(heap, ix, heap_no=args.heap, segment=args.segment, start=start, end=end)
        # Errors are printed as they are found (the table's widths are fixed), the header
        # before the first one; the count comes last.
        t = Table(Column(16, False, lambda v: f"{fmt_pointer(int(v))}" if v else "???"),
                  Column(16, False, fmt_pointer), Text(32), Text())
        found = 0
        rows = ctx.out.table("errors", t, ("segment", "object", "failure", "reason"))
        for row in self._errors(heap, ix, mask, progress or Progress.silent()):
            if not found:
                rows.header("Segment", "Object", "Failure", "Reason")
            rows.row(*row, data=(Address(row[0]) if row[0] else None, Address(row[1]), row[2], row[3]))
            found += 1
        if found:
            ctx.out.line()
        n = int(mask.sum())
        ctx.out.field("objects_verified", n)
        ctx.out.field("errors_found", found, f"{fmt_count(n)} objects verified, {fmt_count(found)} error{'' if found == 1 else 's'}.")
        if not found:
            ctx.out.line("No heap corruption detected.")

    @classmethod
    def _errors(cls, heap: ClrHeap, ix, mask: np.ndarray, progress: Progress) -> Iterator[tuple[int, int, str, str]]:
        for e in ix.errors:
            seg = heap.segment_of(e.address)
            yield (seg.address if seg else 0, e.address, "InvalidMethodTable",
                   f"Object {e.address:x} has an invalid method table {e.method_table:x}")
        yield from cls._bad_references(heap, ix, mask, progress)

    @staticmethod
    def _bad_references(heap: ClrHeap, ix, mask: np.ndarray, progress: Progress) -> Iterator[tuple[int, int, str, str]]:
        """References that do not point at an object start: found by re-reading each
        object's reference slots and comparing with the index."""
        from ..clr.heap.objects import ClrObject
        graph = heap.graph(progress)
        counts = np.diff(graph.offsets)
        # Only objects whose type has references need a look: pick them with numpy.
        types = [heap.types.get(int(mt)) for mt in ix.method_tables.tolist()]
        has_refs = np.array([t is not None and t.contains_pointers for t in types], dtype=bool)
        candidates = np.flatnonzero(mask & has_refs[ix.type_ids]) if len(types) else np.empty(0, dtype=np.int64)
        progress.start("Verifying objects", 0)
        for k, i in enumerate(candidates.tolist()):
            if k & 4095 == 0:
                progress.update(k)  # also the Ctrl-C and process checks
            obj = ClrObject(heap, int(ix.addresses[i]))
            slots = obj.reference_slots()
            if len(slots) == counts[i]:
                continue  # every non-null reference became an edge: all valid
            for off, value in slots:
                if ix.find(value) is None:
                    seg = heap.segment_of(int(ix.addresses[i]))
                    yield (seg.address if seg else 0, int(ix.addresses[i]), "ObjectReferenceNotValid",
                           f"Object {int(ix.addresses[i]):x} has a bad member at offset {off:x}: {value:x}")
        progress.finish()
