"""Heap growth between two dumps: heapdiff (which types grew) and leaks (what holds the growth)."""
from __future__ import annotations

import numpy as np

from ..clr.retention import RetentionTree
from ..clr.snapshot import BaselineJob, HeapSnapshot, TypeDelta, diff_snapshots, filter_deltas
from ..render.json import emit_json
from ..render.numbers import count as fmt_count
from ..render.table import Column, Integer, Table, TypeName
from .base import Command, Option, Parsed, Positional, parse_count, register
from .context import CommandContext


def _signed(v: object) -> str:
    return "" if v is None else f"{int(v):+,}"


def current_snapshot(ctx: CommandContext) -> HeapSnapshot:
    heap = ctx.heap
    heap.index(ctx.progress)
    return HeapSnapshot.of_heap(heap, ctx.runtime.target.describe())


def baseline_and_current(ctx: CommandContext, baseline: str) -> tuple[HeapSnapshot, HeapSnapshot]:
    """Walk the current heap here while a child process walks the baseline core."""
    job = BaselineJob(baseline)
    try:
        new = current_snapshot(ctx)
        old = job.result()
    finally:
        job.cancel()
    return old, new


def write_deltas(ctx: CommandContext, old: HeapSnapshot, new: HeapSnapshot, rows: list[TypeDelta]) -> None:
    out = ctx.out
    out.line(f"Heap growth from {old.source} to {new.source}:")
    signed = lambda: Column(14, True, _signed)  # noqa: E731
    t = out.table("types", Table(Integer(), Integer(), signed(), Integer(), Integer(), signed(), TypeName()),
                  ("old_count", "new_count", "count_delta", "old_size", "new_size", "size_delta", "name"))
    # No match still shows the header and the totals, as SOS's tables do.
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
    return {"name": r.name, "old_count": r.old_count, "new_count": r.new_count, "count_delta": r.count_delta,
            "old_size": r.old_size, "new_size": r.new_size, "size_delta": r.size_delta}


@register
class HeapDiff(Command):
    names = ("heapdiff",)
    summary = "Compare the current heap with a baseline core: which types grew, by count and bytes."
    usage = "heapdiff <baseline-core> [-top <n>] [-type <partial name>] [-min-delta <bytes>] [--json]"
    details = """\
Types are matched by name (MethodTables differ between processes). Rows are sorted by bytes
grown; the baseline is walked by a child process while this one walks the current heap.
From the shell: sosext diff OLD NEW (the same options).

Examples:
  heapdiff /tmp/core.before
  heapdiff /tmp/core.before -top 10 -min-delta 100000"""
    options = (Option("-top", "only the n types that grew most", parse_count, "n"),
               Option("-type", "only types whose name contains this text", str, "partial name"),
               Option("-min-delta", "only types that grew by at least this many bytes", int, "bytes",
                      dest="min_delta"),
               Option("--json", "print the result as JSON", dest="json"))
    positionals = (Positional("baseline", "the older core file", required=True),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        old, new = baseline_and_current(ctx, args.baseline)
        rows = filter_deltas(diff_snapshots(old, new), type_substring=args.type, min_delta=args.min_delta,
                             top=args.top)
        if args.json:
            emit_json(ctx.out, {"command": "heapdiff", "old": old.source, "new": new.source,
                                "types": [deltas_json(r) for r in rows],
                                "old_total": {"count": old.total_count, "size": old.total_size},
                                "new_total": {"count": new.total_count, "size": new.total_size}})
            return
        write_deltas(ctx, old, new, rows)


@register
class Leaks(Command):
    names = ("leaks",)
    summary = "Growth report: the types that grew since a baseline core, and the retention paths holding them."
    usage = "leaks <baseline-core> [-top <n>] [-type <partial name>] [-groups <n>] [--json]"
    details = """\
For each of the top growing types (by bytes), every instance in the current heap is traced
back to a root along a shortest path; instances whose paths have the same root kind and the
same sequence of types are one group, with its instance count and bytes. Runs of one type
(a linked list) are shown once, marked (repeated).
From the shell: sosext leaks OLD NEW.

Examples:
  leaks /tmp/core.before
  leaks /tmp/core.before -top 1 --json"""
    options = (Option("-top", "how many growing types to explain (default 3)", parse_count, "n"),
               Option("-type", "only types whose name contains this text", str, "partial name"),
               Option("-groups", "retention groups shown per type (default 5)", parse_count, "n"),
               Option("--json", "print the result as JSON", dest="json"))
    positionals = (Positional("baseline", "the older core file", required=True),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        old, new = baseline_and_current(ctx, args.baseline)
        grown = [r for r in filter_deltas(diff_snapshots(old, new), type_substring=args.type)
                 if r.size_delta > 0 and r.count_delta > 0][: args.top or 3]
        heap = ctx.heap
        ix = heap.index()
        tree = RetentionTree(heap) if grown else None
        report = []
        for r in grown:
            ids = [i for i, mt in enumerate(ix.method_tables.tolist()) if heap.types.name_of(mt) == r.name]
            instances = np.nonzero(ix.mask_type_ids(ids))[0]
            groups = tree.groups(instances)
            unreached = len(instances) - sum(g.count for g in groups)
            report.append((r, groups[: args.groups or 5], len(groups), unreached))
        if args.json:
            emit_json(ctx.out, {"command": "leaks", "old": old.source, "new": new.source, "types": [
                {**deltas_json(r), "unreachable_instances": unreached, "group_count": ngroups,
                 "groups": [{"root": g.root, "path": list(g.types), "repeated": list(g.repeated),
                             "count": g.count, "size": g.size, "example": f"0x{g.example:x}"} for g in groups]}
                for r, groups, ngroups, unreached in report]})
            return
        out = ctx.out
        out.line(f"Growth from {old.source} to {new.source}:")
        if not grown:
            out.line("No type grew.")
            return
        for r, groups, ngroups, unreached in report:
            out.line()
            out.line(f"{r.name}: {r.count_delta:+,} objects, {r.size_delta:+,} bytes "
                     f"(now {fmt_count(r.new_count)} objects, {fmt_count(r.new_size)} bytes)")
            for g in groups:
                out.line(f"  {fmt_count(g.count)} objects, {fmt_count(g.size)} bytes, held by {g.root}:")
                for k, (name, rep) in enumerate(zip(g.types, g.repeated)):
                    mark = " (repeated)" if rep else ""
                    out.line(f"      {'   ' if k == 0 else '-> '}{name}{mark}")
                out.line(f"      e.g. {g.example:x} (gcroot {g.example:x} shows its full chain)")
            if ngroups > len(groups):
                out.line(f"  ... {fmt_count(ngroups - len(groups))} more groups (-groups <n> shows more)")
            if unreached:
                out.line(f"  {fmt_count(unreached)} objects no root reaches (garbage not yet collected)")


@register
class Snapshot(Command):
    names = ("heapsnapshot",)
    summary = "Print per-type statistics of the heap as JSON (the baseline format of heapdiff)."
    usage = "heapsnapshot"
    details = "Example:\n  heapsnapshot"

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        import json
        ctx.out.raw(json.dumps(current_snapshot(ctx).to_json()))  # JSON in every format: it is the snapshot file
