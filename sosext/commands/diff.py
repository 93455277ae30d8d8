"""Heap growth between two dumps: heapdiff (which types grew) and leaks (what holds the growth)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..clr.dominators import GrowthHolder
from ..clr.progress import polled
from ..clr.retention import RetentionTree
from ..clr.roots import RootKind
from ..clr.snapshot import (BaselineJob, HeapSnapshot, TypeDelta, align, diff_snapshots, filter_deltas,
                             swapped_note)
from ..render.json import emit_json
from ..render.output import hint
from ..render.numbers import count as fmt_count
from ..render.numbers import counted
from ..render.table import Column, Integer, Table, TypeName
from .base import Command, Option, Parsed, Positional, parse_count, register
from .context import CommandContext


def _signed(v: object) -> str:
    return "" if v is None else f"{int(v):+,}"


def current_snapshot(ctx: CommandContext, live_only: bool = False) -> HeapSnapshot:
    heap = ctx.heap
    heap.index(ctx.progress)
    return HeapSnapshot.of_heap(heap, ctx.runtime.target.describe(), retained=not live_only, live_only=live_only)


# A collection's internals (a Dictionary's entry array, a List's items) belong to whoever owns
# the collection: a holder is looked for above them, where the code that fills it lives.
PASSED_OVER = ("System.Collections.",)


@dataclass
class HolderReport:
    """Holders of the growth that look alike (same type, dominator chain and roots: the
    wrappers behind a thousand leaked handles) are one report."""

    holder: GrowthHolder  # the first of them
    address: int
    name: str
    retained: int  # what they retain now, together
    retained_delta: int | None  # growth of their type's retained bytes since the baseline
    chain: list[str]  # type names, the holder first, up its dominator chain
    held_by: list[tuple[str, str]]  # (root kind, root label)
    types: list[tuple[str, int, int]]  # growing types under them: (name, objects, bytes)
    instances: int = 1
    objects: int = 0  # growing objects under them, together
    size: int = 0  # their bytes
    rows: set = None  # type: ignore[assignment]  # the holders' rows


def growth_holders(ctx: CommandContext, grown: list[TypeDelta], limit: int,
                   every: list[TypeDelta]) -> list[HolderReport]:
    """The objects holding the growth, ranked by how much their retained bytes grew (known
    when the holder is its type's only instance), else by the growing bytes they hold. A growing
    object's holder is the first object up its dominator chain whose type did not grow and
    is not a collection's internals. ``grown``: the types whose growth is explained;
    ``every``: all types' deltas (a holder's type need not be among ``grown``)."""
    heap = ctx.heap
    ix = heap.index()
    names = [heap.types.name_of(mt) for mt in ix.method_tables.tolist()]
    grown_names = {r.name for r in grown if r.size_delta > 0}
    growing = np.array([n in grown_names for n in names], dtype=bool)
    if not growing.any():
        return []
    passed = np.array([n.startswith(PASSED_OVER) for n in names], dtype=bool)
    tree = heap.dominators(ctx.progress)
    by_name = {r.name: r for r in every}

    def delta(row: int) -> int | None:
        # A growing object can be its own holder (nothing above it did not grow): its type's
        # growth is then not this object's, and it ranks by what it holds.
        if growing[ix.type_ids[row]]:
            return None
        # Snapshots know retained bytes per type: that is this object's growth only when it is
        # its type's one instance in both dumps.
        d = by_name.get(names[ix.type_ids[row]])
        return d.retained_delta if d is not None and d.new_count == 1 and d.old_count <= 1 else None

    roots_of = tree.root_rows()
    groups: dict[tuple, HolderReport] = {}
    below_of: dict[tuple, int | None] = {}
    for g in polled(tree.growth_holders(growing, passed)):
        # A root object holding growth through one of its references (a statics array's
        # slot) is shown as that reference: the object the static refers to.
        row = g.via if g.via >= 0 else g.row
        chain = tree.chain(row)
        under = tree.chain(g.example)
        k = under.index(row) if row in under else 0
        below = under[k - 1] if k > 0 else None
        names_up = [names[ix.type_ids[r]] for r in chain]
        # Alike: same types up the chain and a top held by the same kinds of long-lived roots
        # (a thousand wrappers behind a thousand strong handles); else each holder on its own.
        top_roots = roots_of.get(chain[-1], [])
        kinds = tuple(sorted({(r.kind.value, r.handle.handle_type if r.handle else -1) for r in top_roots}))
        alike = bool(top_roots) and len(chain) == 1 and all(r.kind is not RootKind.STACK for r in top_roots)
        key = (tuple(names_up), kinds if alike else row)
        rep = groups.get(key)
        if rep is None:
            rep = groups[key] = HolderReport(g, int(ix.addresses[row]), names_up[0], 0, delta(row), names_up,
                                             [], [], 0)
            below_of[key] = below
            rep.rows = set()
        if row not in rep.rows:
            rep.rows.add(row)
            rep.instances += 1
            rep.retained += int(tree.retained[row])
        rep.objects += g.objects
        rep.size += g.size
        rep.types.extend((names[t], c, b) for t, c, b in g.types)
    out = list(groups.values())
    out.sort(key=lambda r: (-(r.retained_delta if r.retained_delta is not None else r.size), -r.size, r.address))
    below_by_rep = {id(groups[k]): b for k, b in below_of.items()}
    for rep in out[:limit]:
        merged: dict[str, list[int]] = {}
        for n, c, b in rep.types:
            acc = merged.setdefault(n, [0, 0])
            acc[0] += c
            acc[1] += b
        rep.types = sorted(((n, c, b) for n, (c, b) in merged.items()), key=lambda x: (-x[2], x[0]))
        first = rep.holder.via if rep.holder.via >= 0 else rep.holder.row
        rep.held_by = [(h.kind, h.label) for h in tree.root_of(first, limit=3, below=below_by_rep[id(rep)])]
    return out[:limit]


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
    from ..clr.gcdumpsnap import GcDump, is_gcdump
    if is_gcdump(baseline):
        snap = GcDump.load(baseline).heap_snapshot()
        new, old = align(current_snapshot(ctx, live_only=True), snap)
        return old, new
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
               Option("-type", "only types whose name contains this text", str, "partial name"),
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
            hint(ctx.out, f"dumpheap -type {rows[0].name} -stat, then dumpheap -mt <MT> and gcroot <address> "
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
               Option("-type", "only types whose name contains this text", str, "partial name"),
               Option("-groups", "retention groups shown per type (default 5)", parse_count, "n"),
               Option("-holders", "holders of the growth shown (default 3)", parse_count, "n"),
               Option("--json", "print the result as JSON", dest="json"))
    positionals = (Positional("baseline", "the older core file (or gcdump snapshot)", required=True),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        old, new = baseline_and_current(ctx, args.baseline)
        every = diff_snapshots(old, new)
        matching = filter_deltas(every, type_substring=args.type)
        holders = growth_holders(ctx, matching, args.holders or 3, every)
        grown = [r for r in matching if r.size_delta > 0 and r.count_delta > 0][: args.top or 3]
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
        hint(out, f"dumpheap -type {grown[0].name} -stat gives its MethodTable, dumpheap -mt <MT> "
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
