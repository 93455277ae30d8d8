"""SOS's remaining commands about the runtime around the heap: threadpoolqueue (tpq),
dumpgcdata, analyzeoom, clrmodules (assemblies), dumpalc, findappdomain, findroots and
traverseheap."""
from __future__ import annotations

import os
import re
from typing import TextIO

import numpy as np

from ..clr.addresses import classifier
from ..clr.heap.gcdata import (BIT_MECHANISMS, COMPACT_MANDATORY, COMPACT_REASONS, DATA_POINTS, EXPAND_MECHANISMS,
                          GLOBAL_MECHANISMS, GCCounters, counters_withheld, gc_counters, gc_global_mechanisms, out_of_memory)
from ..formats.metadata.pdb import CodeViewInfo
from ..formats.metadata.pe import file_version_of
from ..formats.metadata import MetadataError
from ..clr.roots.roots import RootKind
from ..clr.code.sourcelines import source_lines
from ..clr.features.workitems import WorkItemKind, queued_work_items
from ..errors import SosError, UsageError
from ..files import create_private
from ..render.numbers import P16, p16
from ..render.output import Address
from ..render.text import safe_line
from .base import Command, Option, Parsed, Positional, parse_address, register
from .context import CommandContext
from .objects import OBJ_FREE, object_lines

# -- threadpoolqueue -----------------------------------------------------------------------------


@register
class ThreadPoolQueue(Command):
    names = ("threadpoolqueue", "tpq", "ThreadPoolQueue")
    summary = "List the work items queued to the thread pool and not yet run, with a summary by method."
    usage = "threadpoolqueue"
    details = """\
As SOS: the global queue first, then each worker thread's local queue. A
System.Threading.Tasks.Task prints `Task | Type.Method` (what its delegate will call, and its
scheduler when it is not the thread pool's), a ThreadPool.QueueUserWorkItem callback
`Work | Type.Method`, any other work item (a Task<T>, an async state machine box, the callback
of QueueUserWorkItem<TState> …) its type, in C# form. Then a count per method, tasks first, each list ending with its total.
Queued items that never run are a sign of thread-pool starvation (see `threadpool`).

Example:
  tpq"""

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        items = queued_work_items(ctx.runtime)
        rows = ctx.out.table("items", None, ("address", "kind", "type", "method", "local"))
        for local, title in ((False, "global work item queue________________________________"),
                             (True, "local per thread work items_____________________________________")):
            ctx.out.line(title)
            for it in items:
                if it.is_local != local:
                    continue
                rows.row(data=(Address(it.address), it.kind.value, it.type_name, it.method, it.is_local))
                if it.kind is WorkItemKind.TASK:
                    ctx.out.line(f"0x{it.address:016X} Task | {it.method}")
                elif it.kind is WorkItemKind.WORK:
                    ctx.out.line(f"0x{it.address:016X} Work | {it.method}")
                else:
                    ctx.out.line(f"0x{it.address:016X} {it.method}")
            ctx.out.line()
        for kind, label in ((WorkItemKind.TASK, "Task"), (WorkItemKind.WORK, "Work")):
            counts: dict[str, int] = {}
            for it in items:
                if it.kind is kind:
                    counts[it.method] = counts.get(it.method, 0) + 1
            if not counts:
                continue
            for method, n in sorted(counts.items(), key=lambda kv: kv[1]):  # stable: first seen first
                ctx.out.line(f" {n:4} {label}  {method}")
            ctx.out.line(" ----")
            ctx.out.line(f" {sum(counts.values()):4}")
            ctx.out.line()
        ctx.out.line()


# -- dumpgcdata, analyzeoom ----------------------------------------------------------------------


def _counter_lines(c: GCCounters) -> list[str]:
    out = ["Interesting data points"]
    out += [f"{name:>20}: {v}" for name, v in zip(DATA_POINTS, c.data_points)]
    out += ["", "Compacting reasons"]
    out += [f"[{'M' if m else 'W'}]{name:>35}: {v}" for name, m, v in zip(COMPACT_REASONS, COMPACT_MANDATORY,
                                                                        c.compact_reasons)]
    out += ["", "Expansion mechanisms"]
    out += [f"{name:>30}: {v}" for name, v in zip(EXPAND_MECHANISMS, c.expand_mechanisms)]
    out += ["", "Other mechanisms enabled"]
    out += [f"{name:>20}: {v}" for name, v in zip(BIT_MECHANISMS, c.bit_mechanisms)]
    return out


def _counter_rows(c: GCCounters) -> list[tuple[str, str, int]]:
    """(group, name, value) of every counter of one GC heap."""
    groups = (("data_points", DATA_POINTS, c.data_points), ("compact_reasons", COMPACT_REASONS, c.compact_reasons),
              ("expand_mechanisms", EXPAND_MECHANISMS, c.expand_mechanisms),
              ("mechanisms", BIT_MECHANISMS, c.bit_mechanisms))
    return [(g, n, v) for g, names, values in groups for n, v in zip(names, values)]


@register
class DumpGCData(Command):
    names = ("dumpgcdata", "DumpGCData")
    summary = "Show the GC's own counters: pins, compaction reasons, expansion and other mechanisms."
    usage = "dumpgcdata"
    details = """\
What the runtime's GC counts about its own work since the process started (its
GC_CONFIG_DRIVEN data, through the DAC): with workstation GC the global mechanisms
(concurrent, compacting, promoting GCs …), then per GC heap the interesting data points
(pinned plugs before and after), the reasons GCs compacted ([M] mandatory, [W] wanted),
how segments were expanded and which mechanisms were used. Under a standalone workstation GC
(libclrgc.so), which publishes no counters, one line says so: the DAC would fault reading them.
On .NET 8 (no data descriptor to check that first) the DAC is not asked on such a GC either.

Example:
  dumpgcdata"""

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        heap = ctx.heap
        withheld = counters_withheld(heap)
        if withheld:
            # An answer, not a failure (SOS's dumpgcdata takes dotnet-dump down on such a GC).
            ctx.out.line(withheld)
            return
        counters = gc_counters(heap)
        if counters is None:
            raise SosError("the runtime's DAC gives no GC counters (ISOSDacInterface3): its GC keeps none")
        glob = gc_global_mechanisms(heap)
        if ctx.out.structured:
            rows = ctx.out.table("counters", None, ("heap", "group", "name", "value"))
            for name, v in zip(GLOBAL_MECHANISMS, glob or ()):
                rows.row(data=(None, "global_mechanisms", name, v))
            for c in counters:
                for group, name, v in _counter_rows(c):
                    rows.row(data=(c.heap, group, name, v))
            return
        if glob is not None:
            ctx.out.lines(f"{name:<30}: {v}" for name, v in zip(GLOBAL_MECHANISMS, glob))
        ctx.out.line()
        ctx.out.line("[info per heap]")
        if not heap.is_server:
            ctx.out.lines(_counter_lines(counters[0]))
            return
        for c in counters:
            ctx.out.line(f"--------info for heap {c.heap}--------")
            ctx.out.lines(_counter_lines(c))
            ctx.out.line()


@register
class AnalyzeOOM(Command):
    names = ("analyzeoom", "AnalyzeOOM")
    summary = "Show why the last allocation on the GC heap failed with OutOfMemory, if one did."
    usage = "analyzeoom"
    details = """\
The GC records its last out-of-memory failure per GC heap: the reason (could not commit,
could not get an LOH segment, low memory …) and, when a reservation or commit failed,
which one, for which heap (SOH or LOH) and how many bytes. Without one: `There was no
managed OOM due to allocations on the GC heap` (an OutOfMemoryException thrown for another
reason — a too large array, code that throws it — leaves no record here; `pe` shows it).

Example:
  analyzeoom"""

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        found = out_of_memory(ctx.heap)
        rows = ctx.out.table("oom", None, ("heap", "reason", "failure", "loh", "failure_size", "allocation_size",
                                           "gc_index", "available_pagefile_mb"))
        for o in found:
            rows.row(data=(o.heap, o.reason_text, o.failure_text, o.is_loh, o.failure_size, o.allocation_size,
                           o.gc_index, o.available_pagefile_mb))
            if ctx.out.structured:
                continue
            ctx.out.line(o.reason_text)
            if o.failure_text is not None:
                ctx.out.line(f"Details: {'LOH' if o.is_loh else 'SOH'} {o.failure_text} {o.failure_size:,} bytes")
                if o.available_pagefile_mb:
                    ctx.out.line(f" - on GC entry available commit space was {o.available_pagefile_mb:,} MB")
        if not found and not ctx.out.structured:
            ctx.out.line("There was no managed OOM due to allocations on the GC heap")


# -- clrmodules (assemblies) ---------------------------------------------------------------------


@register
class ClrModules(Command):
    names = ("clrmodules", "assemblies")
    summary = "List the managed modules: image base, size and file; -v for their details."
    usage = "clrmodules [-v] [-n <regex>]"
    details = """\
As SOS (its `assemblies`, alias `clrmodules`): one line per loaded managed module, its
image base, image size and path (dynamic ones marked `(Dynamic)`). `-n` keeps modules whose
file name matches the regular expression (any case); `-v` adds the assembly name (the
runtime's: the file's path, as SOS prints it), module
and assembly addresses, the image's layout (Flat: as the file; Mapped: by sections), the
metadata's place, the PDB the image names (GUID, age, path) and the file version.

Examples:
  clrmodules
  clrmodules -v -n ^System.Private"""
    options = (Option("-v", "details of each module", aliases=("--verbose",)),
               Option("-n", "only modules whose file name matches this regular expression", str, "regex",
                      aliases=("--name",)))

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        rt = ctx.runtime
        try:
            regex = re.compile(args.n, re.IGNORECASE) if args.n else None
        except re.error as e:
            raise UsageError(f"invalid regular expression {args.n}: {e}") from None
        names = {a.address: a.name for d in rt.app_domains() for a in d.assemblies}
        lines = source_lines(rt)
        rows = ctx.out.table("modules", None, ("image_base", "size", "path", "dynamic", "address", "assembly"))
        for m in rt.modules():
            path = m.path or _in_memory_name(rt, m)
            if regex is not None and not (path and regex.search(os.path.basename(path))):
                continue
            size = rt.module_image_size(m.address, m.image_base)
            dynamic = "(Dynamic)" if m.is_dynamic else ""
            rows.row(data=(Address(m.image_base), size, path, m.is_dynamic, Address(m.address), Address(m.assembly)))
            if ctx.out.structured:
                continue
            if not args.v:
                ctx.out.line(f"{m.image_base:016X} {size:08X} {path}{dynamic}")
                continue
            md = m.data
            ctx.out.lines([
                f"{path}{dynamic}",
                # The DAC's assembly name, as SOS prints it: the file's path (a bare file name
                # for an assembly loaded from bytes).
                f"    AssemblyName:    {safe_line(names.get(m.assembly) or path)}",
                f"    ImageBase:       {m.image_base:016X}",
                f"    Size:            {size:08X}",
                f"    ModuleAddress:   {m.address:016X}",
                f"    AssemblyAddress: {m.assembly:016X}",
                f"    IsPEFile:        {bool(md.is_pe_file)}",
                f"    Layout:          {rt.module_layout(m.address)}",
                f"    IsDynamic:       {m.is_dynamic}",
                f"    MetadataAddress: {md.metadata_start:016X}",
                f"    MetadataSize:    {md.metadata_size:016X}",
                f"    PdbInfo:         {_pdb_info(lines.codeview(m.address))}",
                f"    Version:         {(file_version_of(m.path) if m.path else None) or '<none>'}",
            ])


def _in_memory_name(rt, module) -> str:  # type: ignore[no-untyped-def]
    """A module loaded from bytes (no file): its metadata's module name (Foo.dll), as SOS shows it."""
    if module.is_dynamic:
        return ""
    reader = rt.catalog.metadata(module.address)
    try:
        return safe_line(reader.module_name()) if reader is not None else ""
    except (MetadataError, SosError):  # a damaged image names nothing; the row still shows
        return ""


def _pdb_info(cv: CodeViewInfo | None) -> str:
    """ClrMD's PdbInfo as SOS prints it: GUID, age (its "revision") and the path it names."""
    return "<none>" if cv is None else safe_line(f"{cv.guid} {cv.age} {cv.path}")


# -- dumpalc, findappdomain ----------------------------------------------------------------------


def _object_address(ctx: CommandContext, text: str | None, missing: str) -> int:
    if not text:
        raise UsageError(missing)
    address = parse_address(text)
    if classifier(ctx.runtime).object_or_none(address) is None:
        raise SosError(f"{P16(address)} is not a valid object")
    return address


@register
class DumpALC(Command):
    names = ("dumpalc", "DumpALC")
    summary = "Show the AssemblyLoadContext an object's type was loaded into."
    usage = "dumpalc [-notes] <object address>"
    details = """\
The AssemblyLoadContext object of the assembly that defines the object's type, shown as
dumpobj shows it (a plugin's objects name the plugin's load context; most name
System.Runtime.Loader.DefaultAssemblyLoadContext). When the default context's managed
object was never created, SOS's two lines say so. -notes adds sosext's readings after the
field names, as dumpobj -notes does (an enum's name: "_state (Alive)").

Example:
  dumpalc 7f3a14005678"""
    options = (Option("-notes", "sosext's readings after the field names (enum names …), as dumpobj -notes"),)
    positionals = (Positional("address", "an object"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        address = _object_address(ctx, args.address, "Invalid parameter")
        rt = ctx.runtime
        data = rt.object_data(address)
        if data is None:
            raise SosError("Invalid object")
        if data.object_type == OBJ_FREE:
            ctx.out.record(["Free Object", f"Size:        {data.size}(0x{data.size:x}) bytes"])
            return
        alc = rt.assembly_load_context(data.method_table)
        if alc is None:
            raise SosError("Failed to get the AssemblyLoadContext")
        ctx.out.field("assembly_load_context", Address(alc) if alc else None)
        if not alc:
            ctx.out.record(["Name:        System.Runtime.Loader.DefaultAssemblyLoadContext",
                            "The managed instance of this context doesn't exist yet"])
            return
        alc_data = rt.object_data(alc) if classifier(rt).object_or_none(alc) is not None else None
        if alc_data is None:
            raise SosError(f"the AssemblyLoadContext {alc:#x} of {address:#x} is not a valid object")
        ctx.out.record(object_lines(ctx, alc, alc_data, notes=args.notes))


@register
class FindAppDomain(Command):
    names = ("findappdomain", "FindAppDomain")
    summary = "Show the AppDomain an object belongs to (.NET Core has one)."
    usage = "findappdomain <object address>"
    details = """\
As SOS: the AppDomain's address, name and id. .NET Core runs one AppDomain (besides the
runtime's system domain), which every object belongs to.

Example:
  findappdomain 7f3a14005678"""
    positionals = (Positional("address", "an object"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        address = _object_address(ctx, args.address, "Missing object address")
        domains = [d for d in ctx.runtime.app_domains() if d.kind == "domain"]
        if not domains:
            raise SosError("Error getting AppDomain information")
        d = domains[0]
        ctx.out.record([f"AppDomain: {p16(d.address)}", f"Name:      {d.name or 'None'}", f"ID:        {d.id}"])


# -- findroots -----------------------------------------------------------------------------------


@register
class FindRoots(Command):
    names = ("findroots", "FindRoots")
    summary = "SOS's GC-time root search: needs a stop inside a GC; gcroot -gcgen answers the same on a stop."
    usage = "findroots -gen <n> | findroots <object address>"
    details = """\
SOS's findroots sets a breakpoint at the next GC of generation n (`-gen n`) and, stopped
there, shows an object's roots as that GC sees them (`findroots <address>`). sosext does not
set breakpoints: on a stopped process or a dump, `gcroot -gcgen <n> <address>` answers what
can be known (whether the object outlives a collection of generation n, and its roots).

Example:
  gcroot -gcgen 0 7f3a14005678"""
    options = (Option("-gen", "SOS: stop at the next GC of this generation (any, 0, 1, 2)", str, "generation"),)
    positionals = (Positional("arguments", "ignored", rest=True),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        raise SosError("findroots works only stopped inside a GC (SOS's GC breakpoint, findroots -gen <n>); "
                       "on this stop use: gcroot -gcgen <n> <object address>")


# -- traverseheap --------------------------------------------------------------------------------


@register
class TraverseHeap(Command):
    names = ("traverseheap", "TraverseHeap")
    summary = "Write the whole heap (roots, objects, references) to a file: CLRProfiler's format or XML."
    usage = "traverseheap [-xml] [--force] <file>"
    details = """\
As SOS: the roots, then every object with its type id, size and the objects it references,
in the text format CLR Profiler reads, or with `-xml` as
`<gcheap><types/><roots/><objects/></gcheap>`. The file is new and private (0600); an
existing file is only replaced with --force, and never through a symbolic link.

Examples:
  traverseheap /tmp/heap.log
  traverseheap -xml /tmp/heap.xml"""
    options = (Option("-xml", "write XML instead of CLR Profiler's text format"),
               Option("--force", "replace the file if it exists"))
    positionals = (Positional("filename", "the file to write"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        if not args.filename or not args.filename.strip():
            raise UsageError("Output filename cannot be empty.")
        heap = ctx.heap
        ix = heap.index(ctx.progress)
        graph = heap.graph(ctx.progress)
        roots = heap.roots().roots
        with create_private(args.filename, force=args.force) as f:
            count = _write_heap(f, heap, ix, graph, roots, args.xml)
        ctx.out.field("objects", count, f"Wrote {count:,} objects to {args.filename}")


def _hex(v: int) -> str:
    return f"0x{v:016x}"


def _write_heap(f: TextIO, heap, ix, graph, roots, xml: bool) -> int:  # type: ignore[no-untyped-def]
    """Types, roots and objects in SOS's order, streamed; returns the number of objects."""
    kinds = {RootKind.STACK: "stack", RootKind.HANDLE: "handle", RootKind.FINALIZER: "finalizer"}
    free_id = ix.type_id(heap.free_mt)
    # Type ids in order of first appearance on the heap, as SOS numbers them while walking.
    present, first = np.unique(ix.type_ids, return_index=True)
    order = [int(t) for t in present[np.argsort(first)].tolist() if t != free_id]
    type_ids = {t: k for k, t in enumerate(order, 1)}
    names = [heap.types.csharp_name_of(int(ix.method_tables[t])) for t in order]  # as SOS's managed traverseheap
    if xml:
        f.write("<gcheap>\n<types>\n")
        f.writelines(f'  <type id="{k}" name="{_xml(n)}" />\n' for k, n in enumerate(names, 1))
        f.write("</types>\n<roots>\n")
        f.writelines(f'  <root kind="{kinds[r.kind]}" address="{_hex(r.address)}" />\n' for r in roots)
        f.write("</roots>\n<objects>\n")
    else:
        f.writelines(f"t {k} 0 {n}\n" for k, n in enumerate(names, 1))
        f.write("\nr" + "".join(f" {_hex(r.address)}" for r in roots) + "\n")
    addresses, offsets, targets = ix.addresses, graph.offsets, graph.targets
    count = 0
    lines: list[str] = []
    for i in range(len(ix)):
        tid = int(ix.type_ids[i])
        if tid == free_id:
            continue
        count += 1
        type_id = type_ids[tid]
        address, size = int(addresses[i]), ix.size_of(i)
        refs = [_hex(int(addresses[t])) for t in targets[offsets[i]:offsets[i + 1]].tolist()]
        if not xml:
            lines += [f"n {count} 1 {type_id} {size}", f"! 1 {_hex(address)} {count}",
                      f"o {_hex(address)} {type_id} {size} " + "".join(f" {r}" for r in refs)]
        elif refs:
            lines.append(f'  <object address="{_hex(address)}" typeid="{type_id}" size="{size}">')
            lines += [f'    <member address="{r}" />' for r in refs]
            lines.append("  </object>")
        else:
            lines.append(f'  <object address="{_hex(address)}" typeid="{type_id}" size="{size}" />')
        if len(lines) >= 30_000:
            f.write("\n".join(lines) + "\n")
            lines.clear()
    if lines:
        f.write("\n".join(lines) + "\n")
    if xml:
        f.write("</objects>\n</gcheap>\n")
    return count


def _xml(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
