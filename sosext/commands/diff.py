"""Heap growth between two dumps: heapdiff (which types grew) and leaks (what holds the growth)."""
from __future__ import annotations

import shlex

from ..clr.snapshots import growth
from ..clr.snapshots.growth import HolderReport, grown_types, heap_snapshot
from ..clr.snapshots.snapshot import HeapSnapshot, TypeDelta, diff_snapshots, filter_deltas, swapped_note
from ..render.json import emit_json
from ..render.output import hint
from ..render.numbers import count as fmt_count
from ..render.numbers import counted
from ..render.table import Column, Integer, Table, TypeName
from .base import Command, Option, Parsed, Positional, parse_count, register
from .context import CommandContext


def typed(name: str) -> str:
    """A type name as one argument of a typed command: quoted when it holds a blank (C#'s
    generic arguments, ``Dictionary<System.String, X>``)."""
    return shlex.quote(name) if any(c.isspace() for c in name) else name


def _signed(v: object) -> str:
    return "" if v is None else f"{int(v):+,}"


def current_snapshot(ctx: CommandContext, live_only: bool = False) -> HeapSnapshot:
    return heap_snapshot(ctx.heap, ctx.progress, live_only=live_only)


def growth_holders(ctx: CommandContext, grown: list[TypeDelta], limit: int,
                   every: list[TypeDelta]) -> list[HolderReport]:
    return growth.growth_holders(ctx.heap, grown, limit, every, ctx.progress)


def holders_json(holders: list[HolderReport]) -> list[dict]:
    return [{"address": f"0x{h.address:x}", "name": h.name, "instances": h.instances, "retained": h.retained,
             "retained_delta": h.retained_delta, "objects": h.objects, "size": h.size, "chain": h.chain,
             "held_by": [{"kind": k, "root": lab} for k, lab in h.held_by],
             "types": [{"name": n, "count": c, "size": b} for n, c, b in h.types]} for h in holders]


def write_holders(ctx: CommandContext, holders: list[HolderReport]) -> None:
    out = ctx.out
    out.line()
    out.line("Holders of the growth, by retained growth:")
    if not holders:
        out.line("  none (no reachable object of a growing type)")
        return
    for h in holders:
        grew = "" if h.retained_delta is None else f" ({h.retained_delta:+,} since the baseline)"
        who = f"{h.name} {h.address:x}" if h.instances == 1 else f"{h.instances:,} x {h.name} (e.g. {h.address:x})"
        out.line(f"  {who}: retain{'s' if h.instances == 1 else ''} {h.retained:,} bytes{grew}")
        parts = ", ".join(f"{n} {c:,} ({b:,} bytes)" for n, c, b in h.types[:3])
        more = f", {counted(len(h.types) - 3, 'more type')}" if len(h.types) > 3 else ""
        out.line(f"      hold{'s' if h.instances == 1 else ''} {counted(h.objects, 'growing object')}, "
                 f"{counted(h.size, 'byte')}: "
                 f"{parts}{more}")
        if len(h.chain) > 1:
            out.line(f"      dominated by {' <- '.join(h.chain[1:])}")
        roots = "; ".join(label for _k, label in h.held_by) or "no root found"
        out.line(f"      held by {roots}")


def baseline_and_current(ctx: CommandContext, baseline: str) -> tuple[HeapSnapshot, HeapSnapshot]:
    """Walk the current heap here while a child process walks the baseline core. A gcdump
    snapshot as the baseline is read instead, and compared with the live objects here."""
    return growth.baseline_and_current(ctx.heap, baseline, ctx.progress)


def write_deltas(ctx: CommandContext, old: HeapSnapshot, new: HeapSnapshot, rows: list[TypeDelta]) -> None:
    out = ctx.out
    out.line(f"Heap growth from {old.source} to {new.source}:")
    for note in (swapped_note(old, new), new.note):
        if note:
            out.line(note)
    signed = lambda: Column(14, True, _signed)  # noqa: E731
    if old.has_retained and new.has_retained:
        t = out.table("types", Table(Integer(), Integer(), signed(), Integer(), Integer(), signed(), signed(),
                                     TypeName()),
                      ("old_count", "new_count", "count_delta", "old_size", "new_size", "size_delta",
                       "retained_delta", "name"))
        # No match still shows the header and the totals, as SOS's tables do.
        t.header("OldCount", "NewCount", "CountDelta", "OldBytes", "NewBytes", "BytesDelta", "RetainedDelta",
                 "Class Name")
        for r in rows:
            t.row(r.old_count, r.new_count, r.count_delta, r.old_size, r.new_size, r.size_delta, r.retained_delta,
                  r.name)
    else:
        t = out.table("types", Table(Integer(), Integer(), signed(), Integer(), Integer(), signed(), TypeName()),
                      ("old_count", "new_count", "count_delta", "old_size", "new_size", "size_delta", "name"))
        t.header("OldCount", "NewCount", "CountDelta", "OldBytes", "NewBytes", "BytesDelta", "Class Name")
        for r in rows:
            t.row(r.old_count, r.new_count, r.count_delta, r.old_size, r.new_size, r.size_delta, r.name)
    out.field("total_objects", new.total_count)
    out.field("total_objects_delta", new.total_count - old.total_count)
    out.field("total_size", new.total_size)
    out.field("total_size_delta", new.total_size - old.total_size,
              f"Total {fmt_count(new.total_count)} objects ({new.total_count - old.total_count:+,}), "
              f"{fmt_count(new.total_size)} bytes ({new.total_size - old.total_size:+,})")


def deltas_json(r: TypeDelta) -> dict:
    doc = {"name": r.name, "old_count": r.old_count, "new_count": r.new_count, "count_delta": r.count_delta,
           "old_size": r.old_size, "new_size": r.new_size, "size_delta": r.size_delta}
    if r.retained_delta is not None:
        doc.update(old_retained=r.old_retained, new_retained=r.new_retained, retained_delta=r.retained_delta)
    return doc


@register
class HeapDiff(Command):
    names = ("heapdiff",)
    summary = "Compare the current heap with a baseline core: which types grew, by count and bytes."
    usage = "heapdiff <baseline-core> [-top <n>] [-type <partial name>] [-min-delta <bytes>] [--json]"
    details = """\
Types are matched by name (MethodTables differ between processes). Rows are sorted by bytes
grown, with RetainedDelta: how much the bytes the type's objects retain grew. Then the holders
of the growth, ranked by retained growth: for each object of a type that grew, the first object
up its dominator chain whose type did not grow (a collection's internals are looked through),
with its root. The baseline is walked by a child process while this one walks the current heap.
From the shell: sosext diff OLD NEW (the same options).

Examples:
  heapdiff /tmp/core.before
  heapdiff /tmp/core.before -top 10 -min-delta 100000"""
    options = (Option("-top", "only the n types that grew most", parse_count, "n"),
               Option("-type", "only types whose name contains this text (C#'s, the runtime's or a gcdump's "
                      "spelling)", str, "partial name"),
               Option("-min-delta", "only types that grew by at least this many bytes", int, "bytes",
                      dest="min_delta"),
               Option("-holders", "holders of the growth shown (default 3)", parse_count, "n"),
               Option("--json", "print the result as JSON", dest="json"))
    positionals = (Positional("baseline", "the older core file (or gcdump snapshot)", required=True),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        old, new = baseline_and_current(ctx, args.baseline)
        every = diff_snapshots(old, new)
        matching = filter_deltas(every, type_substring=args.type, min_delta=args.min_delta)
        rows = filter_deltas(matching, top=args.top)  # -top: never padded with types that did not grow
        holders = growth_holders(ctx, matching, args.holders or 3, every)
        if args.json:
            emit_json(ctx.out, {"command": "heapdiff", "old": old.source, "new": new.source,
                                **({"note": new.note} if new.note else {}),
                                "types": [deltas_json(r) for r in rows],
                                "old_total": {"count": old.total_count, "size": old.total_size},
                                "new_total": {"count": new.total_count, "size": new.total_size},
                                "holders": holders_json(holders)})
            return
        write_deltas(ctx, old, new, rows)
        if rows:
            write_holders(ctx, holders)
        if rows and rows[0].size_delta > 0:
            hint(ctx.out, f"dumpheap -type {typed(rows[0].name)} -stat, then dumpheap -mt <MT> and gcroot <address> "
                          "(leaks traces the top types)")


@register
class Leaks(Command):
    names = ("leaks",)
    summary = "Growth report: the types that grew since a baseline core, and the retention paths holding them."
    usage = "leaks <baseline-core> [-top <n>] [-type <partial name>] [-groups <n>] [-holders <n>] [--json]"
    details = """\
First the holders of the growth, ranked by retained growth: for each object of a type that
grew, the first object up its dominator chain whose type did not grow (a collection's
internals, System.Collections.*, are looked through), with what it retains now, how much its
type's retained bytes grew, what it holds and its root (a static's name where a static holds it).
Then, for each of the top growing types (by bytes), every instance in the current heap is traced
back to a root along a shortest path; instances whose paths have the same root kind and the
same sequence of types are one group, with its instance count and bytes. Runs of one type
(a linked list) are shown once, marked (repeated).
From the shell: sosext leaks OLD NEW.

Examples:
  leaks /tmp/core.before
  leaks /tmp/core.before -top 1 --json"""
    options = (Option("-top", "how many growing types to explain (default 3)", parse_count, "n"),
               Option("-type", "only types whose name contains this text (C#'s, the runtime's or a gcdump's "
                      "spelling)", str, "partial name"),
               Option("-groups", "retention groups shown per type (default 5)", parse_count, "n"),
               Option("-holders", "holders of the growth shown (default 3)", parse_count, "n"),
               Option("--json", "print the result as JSON", dest="json"))
    positionals = (Positional("baseline", "the older core file (or gcdump snapshot)", required=True),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        old, new = baseline_and_current(ctx, args.baseline)
        every = diff_snapshots(old, new)
        matching = filter_deltas(every, type_substring=args.type)
        holders = growth_holders(ctx, matching, args.holders or 3, every)
        report = [(g.delta, list(g.groups), g.group_count, g.unreachable)
                  for g in grown_types(ctx.heap, matching, args.top or 3, args.groups or 5)]
        grown = [r for r, *_ in report]
        if args.json:
            emit_json(ctx.out, {"command": "leaks", "old": old.source, "new": new.source,
                                **({"note": new.note} if new.note else {}),
                                "holders": holders_json(holders), "types": [
                {**deltas_json(r), "unreachable_instances": unreached, "group_count": ngroups,
                 "groups": [{"root": g.root, "path": list(g.types), "repeated": list(g.repeated),
                             "count": g.count, "size": g.size, "example": f"0x{g.example:x}"} for g in groups]}
                for r, groups, ngroups, unreached in report]})
            return
        out = ctx.out
        out.line(f"Growth from {old.source} to {new.source}:")
        for note in (swapped_note(old, new), new.note):
            if note:
                out.line(note)
        if not grown:
            out.line("No type grew.")
            return
        write_holders(ctx, holders)
        for r, groups, ngroups, unreached in report:
            out.line()
            out.line(f"{r.name}: {counted(r.count_delta, 'object', signed=True)}, "
                     f"{counted(r.size_delta, 'byte', signed=True)} "
                     f"(now {counted(r.new_count, 'object')}, {counted(r.new_size, 'byte')})")
            for g in groups:
                out.line(f"  {counted(g.count, 'object')}, {counted(g.size, 'byte')}, held by {g.root}:")
                for k, (name, rep) in enumerate(zip(g.types, g.repeated)):
                    mark = " (repeated)" if rep else ""
                    out.line(f"      {'   ' if k == 0 else '-> '}{name}{mark}")
                out.line(f"      e.g. {g.example:x} (gcroot {g.example:x} shows its full chain)")
            if ngroups > len(groups):
                out.line(f"  ... {counted(ngroups - len(groups), 'more group')} (-groups <n> shows more)")
            if unreached:
                out.line(f"  {counted(unreached, 'object')} no root reaches (garbage not yet collected)")
        hint(out, f"dumpheap -type {typed(grown[0].name)} -stat gives its MethodTable, dumpheap -mt <MT> "
                  "lists every instance, gcroot <address> shows one's full chain")


@register
class Snapshot(Command):
    names = ("heapsnapshot",)
    summary = "Print per-type statistics of the heap as JSON (the baseline format of heapdiff)."
    usage = "heapsnapshot [-live]"
    details = "-live: only the objects a root reaches (as a gcdump snapshot holds them).\n\nExample:\n  heapsnapshot"
    options = (Option("-live", "only objects reachable from a root", aliases=("--live",)),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        import json
        ctx.out.raw(json.dumps(current_snapshot(ctx, live_only=args.live).to_json()))  # JSON in every format: it is the snapshot file
