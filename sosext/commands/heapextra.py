"""SOS's remaining heap-analysis commands that look at objects: dumpexceptions, dumpdelegate,
dumpobjgcrefs, dumpruntimetypes, pathto, notreachableinrange, and the card-table pair
findreferencestoephemeral (ephrefs) and findephemeralreferencestoloh (ephtoloh).

Each asks the model (the heap index, the reference graph, roots) and prints SOS's table;
``--json`` gives the same rows.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..clr.addresses import classifier
from ..clr.features.delegates import delegate_calls, is_delegate
from ..clr.threads.exceptions import read_exception
from ..clr.roots.gcroot import PathFinder
from ..clr.heap.heapqueries import (cross_generation_references, exception_positions, live_without_finalizer_queue,
                               pointers_in, references_to_ephemeral, runtime_type_objects)
from ..clr.heap.segments import GENERATION_NAMES, Generation
from ..clr.typesystem.typenames import csharp_name
from ..errors import SosAnswer, SosError, UsageError
from ..render.bordered import BorderedTable
from ..render.numbers import p16
from ..render.output import Address
from ..render.table import Column, Integer, Pointer, Table, TypeName
from .base import Command, Option, Parsed, Positional, add_length, parse_address, register
from .context import CommandContext
from .heap import sequence_stats, write_addresses, write_listing, write_stats
from .objects import OBJ_FREE, gc_ref_lines, gc_ref_rows, referenced_type
from .rootnotices import announce_roots, live_objects
from .roots import object_chain_lines

GENERATION_ERROR = ("Unknown generation: {}. Only gen0, gen1, gen2, loh (large), poh (pinned) and foh (frozen) "
                    "are supported")


def _generation(text: str) -> Generation:
    gen = GENERATION_NAMES.get(text.lower())
    if gen is None:
        raise UsageError(GENERATION_ERROR.format(text))
    return gen


def _object_position(ctx: CommandContext, address: int, invalid: str = "") -> int | None:
    """The heap index position of the object at ``address``; when it is not one, None, or
    the error ``invalid`` if given. The address is classified first, so nothing else is
    asked about a wild pointer."""
    i = None
    if classifier(ctx.runtime).object_or_none(address) is not None:
        i = ctx.heap.index(ctx.progress).find(address)
    if i is None and invalid:
        raise SosAnswer(invalid)  # SOS's line, not a failure there
    return i


# -- dumpexceptions ----------------------------------------------------------------------------


@register
class DumpExceptions(Command):
    names = ("dumpexceptions", "DumpExceptions")
    summary = "List every exception object on the heap with its type, message and top stack frame."
    usage = "dumpexceptions [-live] [-dead] [-gen <generation>] [-type <substring>]"
    details = """\
As SOS: every object of System.Exception or a type derived from it, in heap order, with its
MethodTable and type, then its message (`<null>` when none) and, for an exception that was
thrown, the first frame of the stack trace it recorded. `-live` keeps the ones reachable
from a root, `-dead` the others (both: all); `-type` keeps types whose name contains the
text (any case); `-gen` one generation (gen0, gen1, gen2, loh, poh, foh).

Examples:
  dumpexceptions
  dumpexceptions -live -type InvalidOperation"""
    options = (Option("-live", "only exceptions reachable from a root"),
               Option("-dead", "only exceptions no root reaches"),
               Option("-gen", "only this generation (gen0, gen1, gen2, loh, poh, foh)", _generation, "generation"),
               Option("-type", "only types whose name contains this (any case)", str, "substring"))

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        heap = ctx.heap
        ix = heap.index(ctx.progress)
        mask = ix.mask_generation(args.gen) if args.gen is not None else None
        positions = exception_positions(heap, mask)
        if args.type:
            want = args.type.lower()
            positions = np.array([p for p in positions.tolist() if want in heap.type_name_at(p).lower()
                                  or want in heap.csharp_type_name_at(p).lower()],
                                 dtype=np.int64)
        if args.live != args.dead and len(positions):
            live = heap.live(ctx.progress)[positions]
            positions = positions[live if args.live else ~live]
        t = Table(Pointer(), Pointer(), TypeName())
        rows = ctx.out.table("exceptions", None, ("address", "mt", "type", "message", "stack_frame", "csharp_type"))
        if not ctx.out.structured:
            ctx.out.line(t.header("Address", "MethodTable", "Message", "Name"))
        for p in positions.tolist():
            address = int(ix.addresses[p])
            try:
                info = read_exception(ctx.runtime, address)
                mt, name, message = info.method_table, info.type_name, info.message
                frame = info.frames[0].method_name if info.frames else None
            except SosError as e:  # a damaged exception object: its row says so, the list goes on
                mt, name, message, frame = ix.method_table_at(p), heap.type_name_at(p), f"<{e}>", None
            shown = csharp_name(name)  # SOS's managed dumpexceptions prints ClrMD's names
            rows.row(data=(Address(address), Address(mt), name, message, frame, shown))
            if not ctx.out.structured:
                ctx.out.line(t.row(address, mt, shown))
                ctx.out.line(f"        Message: {message if message is not None else '<null>'}")
                if frame is not None:
                    ctx.out.line(f"        StackFrame: {frame}")
        ctx.out.line()
        ctx.out.field("total", len(positions), f"    Total: {len(positions)} objects")


# -- dumpdelegate ------------------------------------------------------------------------------


@register
class DumpDelegate(Command):
    names = ("dumpdelegate", "DumpDelegate")
    summary = "Show the target object and method of a delegate, and of each delegate it multicasts to."
    usage = "dumpdelegate <delegate address>"
    details = """\
One row per method the delegate calls: the target object (`_target`: the instance, or the
delegate itself for a static method), the method's MethodDesc and its name. A multicast
delegate shows one row per entry of its invocation list, in invocation order (SOS prints
them last first). A method whose code the runtime cannot map prints `(unknown)`.

Example:
  dumpdelegate 7f3a14005678"""
    positionals = (Positional("address", "the delegate object"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        if args.address is None:
            raise UsageError("Usage: dumpdelegate <delegate object address>")
        address = parse_address(args.address)
        _object_position(ctx, address, "Invalid object.")
        rt = ctx.runtime
        data = rt.object_data(address)
        if data is None or data.object_type == OBJ_FREE or not is_delegate(rt, data.method_table):
            name = ctx.heap.types.name_of(data.method_table) if data is not None else "?"
            # SOS's answer for an object of another type: a line, no failure.
            ctx.out.field("message", f"Object of type '{name}' is not a delegate.",
                          f"Object of type '{name}' is not a delegate.")
            return
        rows = ctx.out.table("calls", Table(Column(16, False, p16), Column(16, False, p16), TypeName()),
                             ("target", "method_desc", "name", "delegate"))
        rows.header("Target", "Method", "Name")
        for c in delegate_calls(rt, address):
            name = c.method_name or "(unknown)"
            if c.method_desc:
                rows.row(c.target, c.method_desc, name,
                         data=(Address(c.target), Address(c.method_desc), name, Address(c.delegate)))
            elif not ctx.out.structured:
                ctx.out.line(f"{p16(c.target)} (unknown)")
            else:
                rows.row(data=(Address(c.target), None, None, Address(c.delegate)))


# -- dumpobjgcrefs -----------------------------------------------------------------------------


@register
class DumpObjGCRefs(Command):
    names = ("dumpobjgcrefs", "DumpObjGCRefs")
    summary = "List the objects one object references, with the field that holds each (dumpobj -refs)."
    usage = "dumpobjgcrefs <object address>"
    details = """\
SOS's helper of `dumpobj -refs`: one row per non-null reference the object holds, with the
field's name (a dotted path through embedded structs; empty for array elements), its
offset, the object referenced and its type; `GC Refs: none` when there is none.

Example:
  dumpobjgcrefs 7f3a14005678"""
    positionals = (Positional("address", "the object"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        text = args.address or ""
        try:
            address = parse_address(text)
        except UsageError:
            raise UsageError(f"Invalid object address: '{text}'") from None
        if not address:  # SOS fails on 0; any other address that holds no object is answered
            raise SosError(f"Invalid object address: '{text}'")
        _object_position(ctx, address, "Unable to walk object references, invalid object.")
        data = ctx.runtime.object_data(address)
        if data is None or data.object_type == OBJ_FREE:
            raise SosAnswer("Unable to walk object references, invalid object.")
        if ctx.out.structured:
            rows = ctx.out.table("refs", None, ("field", "offset", "object", "type", "csharp_type"))
            for name, off, ref in gc_ref_rows(ctx, address, data):
                rows.row(data=(name, off, Address(ref), referenced_type(ctx, ref), referenced_type(ctx, ref, csharp=True)))
            return
        ctx.out.lines(gc_ref_lines(ctx, address, data))


# -- dumpruntimetypes --------------------------------------------------------------------------


@register
class DumpRuntimeTypes(Command):
    names = ("dumpruntimetypes", "DumpRuntimeTypes")
    summary = "List every System.RuntimeType object and the type it stands for."
    usage = "dumpruntimetypes"
    details = """\
One row per System.RuntimeType (what typeof(T) and GetType() return) on the heap: its
address, the AppDomain of the type's module, the type handle it holds (`m_handle`, a
MethodTable) and the type's name. A handle that is a TypeDesc (pointer, byref or function
pointer types) is shown as SOS shows it.

Example:
  dumpruntimetypes"""

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        heap = ctx.heap
        heap.index(ctx.progress)
        found = runtime_type_objects(heap)
        if not found:
            ctx.out.line("No System.RuntimeType objects found.")
            return
        domains = _module_domains(ctx)
        rows = ctx.out.table("runtime_types", Table(Pointer(), Pointer(), Pointer(), TypeName()),
                             ("address", "domain", "mt", "name", "csharp_name"))
        rows.header("Address", "Domain", "MT", "Type Name")
        for r in found:
            if r.method_table:
                name, shown = heap.types.name_of(r.method_table), heap.types.csharp_name_of(r.method_table)
            else:
                name = shown = f"typehandle: {r.handle:x} (SOS does not support resolving typehandle names.)"
            domain = domains.get(r.module) if r.module else None
            rows.row(r.address, domain, r.handle, shown,
                     data=(Address(r.address), Address(domain) if domain else None, Address(r.handle), name, shown))


def _module_domains(ctx: CommandContext) -> dict[int, int]:
    """Module → the AppDomain that loaded it (the system domain only for what no other has)."""
    out: dict[int, int] = {}
    for d in ctx.runtime.app_domains():
        for a in d.assemblies:
            for m in a.modules:
                if d.kind == "domain" or m.address not in out:
                    out[m.address] = d.address
    return out


# -- pathto ------------------------------------------------------------------------------------


@register
class PathTo(Command):
    names = ("pathto", "PathTo")
    summary = "Show a shortest chain of references from one object to another."
    usage = "pathto <source> <target>"
    details = """\
gcroot from one object instead of every root: the chain of references that leads from
`source` to `target`, as gcroot prints a chain (dependent handles count as references from
their primary to their secondary). Useful to see how an object you suspect (a cache, a
static's holder) reaches the one that leaks.

Example:
  pathto 7f3a14001000 7f3a14005678"""
    positionals = (Positional("source", "the object the chain starts from"),
                   Positional("target", "the object it should reach"))

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        source = _parse_named(args.source, "source")
        target = _parse_named(args.target, "target")
        s = _object_position(ctx, source, f"Source address {source:x} is not a valid object.")
        # SOS checks the source twice, never the target: an invalid target is a path not found.
        t = _object_position(ctx, target)
        assert s is not None
        heap = ctx.heap
        found = PathFinder(heap, t).chain_from(s) if t is not None else None
        if found is None:
            ctx.out.field("chain", [], f"Could not find a path from {source:x} to {target:x}")
            return
        chain, via = found
        announce_roots(ctx)  # SOS asks its root cache whether each link is a dependent handle's
        ix = heap.index()
        ctx.out.field("chain", [{"address": f"0x{int(ix.addresses[i]):x}", "type": heap.type_name_at(i),
                                 "csharp_type": heap.csharp_type_name_at(i)} for i in chain])
        ctx.out.lines(object_chain_lines(heap, chain, via, statics=False))


def _parse_named(text: str | None, name: str) -> int:
    if not text:
        raise UsageError(f"Missing {name} address (usage: pathto <source> <target>)")
    try:
        return parse_address(text)
    except UsageError:
        raise UsageError(f"Could not parse argument '{name}': {text}") from None


# -- notreachableinrange -----------------------------------------------------------------------


RANGE_MAX = 256 << 20  # 32M pointers: a finalization queue or buffer, not the address space


def _range_end(start: int, text: str) -> int:
    """``end`` or ``L<length>`` (hex, as dumpheap's range takes it)."""
    if text[:1] in ("L", "l"):
        return add_length(start, parse_address(text[1:]), text[1:])
    return parse_address(text)


@register
class NotReachableInRange(Command):
    names = ("notreachableinrange", "NotReachableInRange")
    summary = "List the objects whose addresses are stored in a memory range and that no root reaches."
    usage = "notreachableinrange [-short] [-nofinalizer] <start> <end | L<length>>"
    details = """\
SOS's helper of finalizequeue: reads every pointer in [start, end) (for instance a part of
the finalization queue, or any block of memory holding object addresses), and lists those
objects that nothing roots, dumpheap-style, then their statistics. `-nofinalizer` does
not count the finalizer queue as a root (what only it keeps alive counts as unreachable).
A value that is not an object gets a warning line.

Example:
  notreachableinrange 7f3a10001000 7f3a10001400"""
    options = (Option("-short", "addresses only"),
               Option("-nofinalizer", "the finalizer queue is not a root"))
    positionals = (Positional("start", "first address of the range"),
                   Positional("end", "end of the range (exclusive), or L<length in bytes>"))

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        for name in ("start", "end"):
            if not args.values.get(name):
                raise UsageError(f"Missing {name} address (usage: {self.usage})")
        try:
            start = parse_address(args.start)
        except UsageError:
            raise UsageError(f"Could not parse start address: {args.start or ''}") from None
        try:
            end = _range_end(start, args.end)
        except UsageError:
            raise UsageError(f"Could not parse end address: {args.end or ''}") from None
        if end - start > RANGE_MAX:
            raise UsageError(f"range {start:#x}-{end:#x} is larger than {RANGE_MAX >> 20} MiB")
        heap = ctx.heap
        ix = heap.index(ctx.progress)
        values, found = pointers_in(heap, start, end)
        if end > start and not len(values):
            raise SosError(f"Could not read pointer {start & ~7:x}")
        if (start & ~7) + 8 * len(values) < end - 7:
            ctx.out.line(f"Warning: could not read pointer {(start & ~7) + 8 * len(values):x}: the range stops there")
        ctx.out.lines(f"Warning: {v:x} is not a valid object" for v in values[found < 0].tolist())
        sel = found[found >= 0]
        if len(sel):
            # SOS asks whether each object is live, so its live-object service (which says when
            # it first computes the live set) runs only for a range that holds objects; the
            # -nofinalizer set is its own (stack and handle roots only).
            live = live_without_finalizer_queue(heap) if args.nofinalizer else live_objects(ctx)
            sel = sel[~live[sel]]
        if args.short:
            write_addresses(ctx, ix, [sel])
            return
        if write_listing(ctx, heap, ix, [sel]):
            ctx.out.line()
        # SOS's statistics of the objects in the range's order: ties of total size keep the order
        # in which each type first appears there, and an object in two slots counts twice.
        write_stats(ctx, heap, sequence_stats(ix, sel))


# -- findreferencestoephemeral, findephemeralreferencestoloh -----------------------------------

_GEN_ENUM = {Generation.GEN0: "Generation0", Generation.GEN1: "Generation1", Generation.GEN2: "Generation2",
             Generation.LOH: "Large", Generation.POH: "Pinned", Generation.FROZEN: "Frozen"}


@register
class FindReferencesToEphemeral(Command):
    names = ("findreferencestoephemeral", "ephrefs")
    summary = "List older objects that reference gen0 or gen1 objects (what the card table must cover)."
    usage = "findreferencestoephemeral"
    details = """\
As SOS's ephrefs: every object of gen1 or older that references gen0 objects, and every
object of gen2, LOH or POH that references gen1 objects, grouped by the two generations,
with the number of such references and the size of the objects they point to. Many old
objects pointing at young ones make every gen0 GC scan more (card marking).

Example:
  ephrefs"""

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        heap = ctx.heap
        ix = heap.index(ctx.progress)
        heap.graph(ctx.progress)
        found, young, young_size = references_to_ephemeral(heap)
        t = Table(Pointer(), Pointer(), Integer(), Column(11, False, str), Column(11, False, str), Integer(),
                  Integer(), TypeName())
        rows = ctx.out.table("references", None, ("object", "mt", "size", "generation", "referenced_generation",
                                                  "count", "referenced_size", "type", "csharp_type"))
        last = None
        for r in found:
            key = (r.generation, r.referenced_generation)
            if key != last and not ctx.out.structured:
                if last is not None:
                    ctx.out.line()
                ctx.out.line(f"References from {_GEN_ENUM[r.generation].lower()} to "
                             f"{_GEN_ENUM[r.referenced_generation].lower()}:")
                ctx.out.line()
                ctx.out.line(t.header("Object", "MethodTable", "Size", "Obj Gen", "Ref Gen", "Obj Count", "Obj Size",
                                      "Type"))
            last = key
            address, mt = int(ix.addresses[r.position]), ix.method_table_at(r.position)
            name = heap.types.csharp_name_of(mt)
            cells = (address, mt, ix.size_of(r.position), _GEN_ENUM[r.generation],
                     _GEN_ENUM[r.referenced_generation], r.count, r.size, name)
            rows.row(*cells, data=(Address(address), Address(mt), cells[2], r.generation.label,
                                   r.referenced_generation.label, r.count, r.size, heap.types.name_of(mt), name))
            if not ctx.out.structured:
                ctx.out.line(t.row(*cells))
        ctx.out.line()
        ctx.out.field("objects", len(found))
        ctx.out.field("referenced", young)
        ctx.out.field("referenced_size", young_size,
                      f"{len(found):,} older generation objects referenced {young:,} younger objects "
                      f"({young_size:,} bytes)")


@register
class FindEphemeralReferencesToLOH(Command):
    names = ("findephemeralreferencestoloh", "ephtoloh")
    summary = "List gen0/gen1 objects that reference large objects, and large objects that reference gen0/gen1."
    usage = "findephemeralreferencestoloh"
    details = """\
As SOS's ephtoloh: references from ephemeral (gen0, gen1) objects to objects on the large
object heap, then from large objects to ephemeral ones, then the chains young → large →
young that both lists make.

Example:
  ephtoloh"""

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        heap = ctx.heap
        heap.index(ctx.progress)
        heap.graph(ctx.progress)
        eph = (Generation.GEN0, Generation.GEN1)
        to_loh = cross_generation_references(heap, eph, (Generation.LOH,))
        from_loh = cross_generation_references(heap, (Generation.LOH,), eph)
        self._section(ctx, "ephemeral_to_loh", to_loh, "No Ephemeral objects pointing to the Large objects.",
                      "Ephemeral objects pointing to the Large objects:")
        self._section(ctx, "loh_to_ephemeral", from_loh, "No Large objects pointing to Ephemeral objects.",
                      "Large objects pointing to Ephemeral objects:")
        if to_loh and from_loh:
            onward: dict[int, list[int]] = {}
            for a, b in from_loh:
                onward.setdefault(a, []).append(b)
            chains = [(a, b, c) for a, b in to_loh for c in onward.get(b, [])]
            if not chains:
                ctx.out.line("No Ephemeral objects which point to Large objects which point to Ephemeral objects.")
                return
            ctx.out.line("Ephemeral objects which point to Large objects which point to Ephemeral objects:")
            ctx.out.line()
            t = Table(Pointer(), TypeName(64), Pointer(), TypeName(64), Pointer(), TypeName())
            rows = ctx.out.table("chains", t, ("ephemeral", "large", "ephemeral_end"))
            ix = heap.index()
            for a, b, c in chains:
                cells = []
                for p in (a, b, c):
                    cells += [int(ix.addresses[p]), heap.csharp_type_name_at(p)]
                rows.row(*cells, data=(Address(cells[0]), Address(cells[2]), Address(cells[4])))
            ctx.out.line()

    @staticmethod
    def _section(ctx: CommandContext, key: str, pairs: list[tuple[int, int]], none: str, title: str) -> None:
        rows = ctx.out.table(key, Table(Pointer(), TypeName(64), Pointer(), TypeName()),
                             ("from", "from_type", "to", "to_type", "from_csharp_type", "to_csharp_type"))
        if not pairs:
            ctx.out.line(none)
            return
        heap = ctx.heap
        ix = heap.index()
        ctx.out.line(title)
        ctx.out.line()
        rows.header("Ephemeral", "Ephemeral Type", "Large Object", "Large Object Type")
        for a, b in pairs:
            fa, fb = int(ix.addresses[a]), int(ix.addresses[b])
            ta, tb = heap.csharp_type_name_at(a), heap.csharp_type_name_at(b)
            rows.row(fa, ta, fb, tb, data=(Address(fa), heap.type_name_at(a), Address(fb), heap.type_name_at(b), ta, tb))
        ctx.out.line()



# -- gctonative, findpointersin ----------------------------------------------------------------

WIDTH = 120  # SOS's banner width when the console has none


def _banner(text: str, fill: str = "=") -> str:
    """``text`` centred in a WIDTH-wide rule of ``fill``."""
    left = (WIDTH - len(text)) // 2
    return (fill * max(left, 0) + text).ljust(WIDTH, fill)


def _collapse_generics(name: str) -> str:
    """``Dictionary<K, List<V>>+Entry[]`` → ``Dictionary<...>+Entry[]``: SOS groups generic
    instantiations together; a compiler's ``<>`` (``C+<>c``) stays as it is."""
    out: list[str] = []
    nest = 0
    for i, c in enumerate(name):
        if c == "<":
            if nest == 0:
                out.append("<>" if name[i + 1:i + 2] == ">" else "<...>")
            nest += 1
        elif c == ">":
            nest -= 1
        elif nest <= 0:
            out.append(c)
    return "".join(out)


@register
class GCToNative(Command):
    names = ("gctonative", "GCToNative")
    summary = "Find GC heap objects that hold pointers into native memory of the given kinds."
    usage = "gctonative [-a] <memory kind> [<memory kind> ...]"
    details = """\
As SOS: reads every word of the GC heap's objects and keeps those that point into memory of
the kinds named (maddress's names: PAGE_READWRITE, Stack, Image, HandleTable …), then per
kind a summary by the holding object's type (generic instantiations together) with the most
common pointer; `-a` lists every pointer with its object first. A word that only looks like an
address counts too (a heuristic, as SOS's); SOS's sizes of well-known native buffers
(SafeHandle and friends) are not computed.

Example:
  gctonative PAGE_READWRITE"""
    options = (Option("-a", "list every pointer, not only the summary", aliases=("--all",)),)
    positionals = (Positional("kinds", "memory kinds, as maddress names them", rest=True),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        from ..clr.heap.nativepointers import heap_pointers_into, most_common, regions_named
        if not args.kinds:
            raise UsageError("Must specify at least one memory region type to search for.")
        heap = ctx.heap
        ix = heap.index(ctx.progress)
        targets = regions_named(heap, args.kinds)
        if not targets:
            ctx.out.line("No matching memory ranges.")
            ctx.out.line()
            return
        ctx.out.line("Walking GC heap to find pointers...")
        found = heap_pointers_into(heap, targets)
        ctx.out.line("Resolving object names...")
        rows = ctx.out.table("pointers", None, ("kind", "pointer", "object", "type", "slot", "csharp_type"))
        shown = heap.csharp_type_name_at  # SOS's managed gctonative prints ClrMD's names
        for kind in args.kinds:
            mine = [p for p in found if p.region.name.lower() == kind.lower()]
            ctx.out.line(_banner(f" {kind} Regions "))
            ctx.out.line()
            for p in mine:
                rows.row(data=(p.region.name, Address(p.pointer), Address(int(ix.addresses[p.position])),
                               heap.type_name_at(p.position), Address(p.slot), shown(p.position)))
            if not mine:
                ctx.out.line(f"No GC heap pointers to '{kind}' regions.")
                continue
            if ctx.out.structured:
                continue
            if args.a:
                ctx.out.line("All memory pointers:")
                t = BorderedTable(Pointer(), Pointer(), TypeName(max(len(shown(p.position)) for p in mine)))
                ctx.out.lines(t.header("Pointer", "Object", "Type"))
                ctx.out.lines(t.row(p.pointer, int(ix.addresses[p.position]), shown(p.position))
                              for p in mine)
                ctx.out.line(t.rule())
                ctx.out.line()
            groups: dict[str, list[int]] = {}
            for p in mine:
                groups.setdefault(_collapse_generics(shown(p.position)), []).append(p.pointer)
            ctx.out.line("Other memory pointer summary:")
            order = sorted(groups.items(), key=lambda kv: -len(kv[1]))
            t = BorderedTable(TypeName(max(len(n) for n in groups)), Integer(), Pointer())
            ctx.out.lines(t.header("Type", "Count", "RndPointer"))
            ctx.out.lines(t.row(name, len(ptrs), most_common(ptrs)) for name, ptrs in order)
            ctx.out.line(t.rule())


@register
class FindPointersIn(Command):
    names = ("findpointersin", "FindPointersIn")
    summary = "Find pointers to the GC heap (pinned objects) and to other memory inside memory of the given kinds."
    usage = "findpointersin [-a] <memory kind> [<memory kind> ...]"
    details = """\
As SOS: for each region of the kinds named (maddress's names), the pointers its words hold:
to objects of the GC heap (pinned ones by type, the rest counted together; `-a` names every
object's type) and to other memory (by image file or kind), with a count, the number of
distinct pointers and the most common one; then totals per kind. Native code that keeps an
object's address must pin it: a pointer to a non-pinned object from native memory is a bug
or a stale value. Pointers into images are not resolved to symbols (SOS does with symbols).

Example:
  findpointersin PAGE_READWRITE"""
    options = (Option("-a", "name every object pointed to, pinned or not", aliases=("--all", "--showAllObjects")),)
    positionals = (Positional("kinds", "memory kinds, as maddress names them", rest=True),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        from ..clr.addressmap import address_map
        from ..clr.heap.nativepointers import RegionIndex, RegionPointers, pinned_positions, region_pointers
        if not args.kinds:
            raise UsageError("Must specify at least one memory region type to search for.")
        heap = ctx.heap
        heap.index(ctx.progress)
        regions = address_map(ctx.runtime)
        everything = RegionIndex(regions)
        ctx.out.line("Scanning for pinned objects...")
        pinned = None if args.a else pinned_positions(heap)
        rows = ctx.out.table("pointers", None, ("kind", "region", "to", "name", "unique", "count", "rnd_ptr",
                                                "csharp_name"))
        for kind in args.kinds:
            mine = sorted((r for r in regions if r.name.lower() == kind.lower()), key=lambda r: r.start)
            if not mine:
                ctx.out.line(f"Found not memory regions matching '{kind}'.")
                continue
            totals = RegionPointers()
            for r in mine:
                found = region_pointers(heap, r, everything, pinned)
                ctx.out.line(_banner(f"REGION [{r.start:x}-{r.end:x}] {r.type} {r.state} {r.protection}"))
                ctx.out.line(f"Type:  {r.name}")
                if r.image:
                    ctx.out.line(f"Image: {r.image}")
                self._tables(ctx, rows, kind, f"{r.start:x}-{r.end:x}", found, pinned is not None)
                ctx.out.line()
                ctx.out.line(_banner("END REGION"))
                ctx.out.line()
                totals.add(found)
            if len(mine) > 1:
                ctx.out.line(" TOTALS ".rjust(WIDTH // 2).ljust(WIDTH))
                self._tables(ctx, rows, kind, "total", totals, pinned is not None)
                ctx.out.line("=" * WIDTH)

    @staticmethod
    def _tables(ctx: CommandContext, rows, kind: str, where: str, found, pinned_only: bool) -> None:  # type: ignore[no-untyped-def]
        from ..clr.heap.nativepointers import most_common
        heap = ctx.heap
        ix = heap.index()
        if found.gc_pointers:
            ctx.out.line()
            ctx.out.line("Pointers to GC heap:")
            if not found.gc_objects:
                ctx.out.line(f"{found.gc_pointers:,} pointers to the GC heap, but none pointed to a pinned object.")
            else:
                groups: dict[str, list[int]] = {}
                for pos in found.gc_objects:
                    groups.setdefault(heap.type_name_at(pos), []).append(int(ix.addresses[pos]))
                items = sorted(groups.items(), key=lambda kv: -len(kv[1]))
                if found.gc_other and pinned_only:
                    items.insert(0, ("[Pointers to non-pinned objects]", found.gc_other))
                # grouped by the runtime's name (the JSON's "name"), shown as SOS's managed command shows it
                _pointer_table(ctx, rows, kind, where, "gc", "Type", items, most_common, csharp_name)
        if found.other:
            ctx.out.line()
            ctx.out.line("Other pointers:")
            items = sorted(found.other.items(), key=lambda kv: -len(kv[1]))
            _pointer_table(ctx, rows, kind, where, "other", "Region", items, most_common)


def _pointer_table(ctx: CommandContext, rows, kind: str, where: str, to: str, title: str,  # type: ignore[no-untyped-def]
                   items: list[tuple[str, list[int]]], most_common,
                   shown: Callable[[str], str] = str) -> None:
    t = BorderedTable(TypeName(min(80, max(len(shown(n)) for n, _p in items))), Integer(), Integer(), Pointer())
    if not ctx.out.structured:
        ctx.out.lines(t.header(title, "Unique", "Count", "RndPtr"))
    for name, ptrs in items:
        unique, rnd = len(set(ptrs)), most_common(ptrs)
        rows.row(data=(kind, where, to, name, unique, len(ptrs), Address(rnd), shown(name)))
        if not ctx.out.structured:
            ctx.out.line(t.row(shown(name), unique, len(ptrs), rnd))
    if not ctx.out.structured:
        ctx.out.lines(t.footer("TOTALS", sum(len(set(p)) for _n, p in items), sum(len(p) for _n, p in items), None))
