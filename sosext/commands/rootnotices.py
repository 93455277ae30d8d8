"""SOS's once-per-session notices about its root and live-object caches.

SOS (dotnet-dump, and SOS's managed commands in LLDB) caches the GC roots and the set of live
objects the first time a command needs them, and says so then, once: "Caching GC roots, this
may take a while." before the first root enumeration (gcroot, dumpheap -live/-dead,
dumpexceptions -live/-dead, finalizequeue -allready, traverseheap ...), "Caching GC stack
roots ..." before a first walk of stacks alone, and "Calculating live objects ..." around the
first computation of the live set (not under -short). sosext caches the same things, so it
prints the same lines at the same moments; the memory of what was said is per target state
(a live process that ran has new roots, and SOS then says it again).
"""
from __future__ import annotations

from ..render.numbers import count as fmt_count
from .context import CommandContext

_KEY = "sos-root-notices"


def _said(ctx: CommandContext) -> set[str]:
    said: set[str] = ctx.runtime.cache(_KEY, set)
    return said


def announce_roots(ctx: CommandContext) -> None:
    """Before a command's first enumeration of every root (handles, finalizer queue, stacks)."""
    said = _said(ctx)
    if "roots" not in said and not ctx.out.structured:
        ctx.out.lines(["Caching GC roots, this may take a while.",
                       "Subsequent runs of this command will be faster.", ""])
    said.update(("roots", "stacks"))


def announce_stack_roots(ctx: CommandContext) -> None:
    """Before a first walk of the threads' stacks alone (without the other roots)."""
    said = _said(ctx)
    if "stacks" not in said and not ctx.out.structured:
        ctx.out.lines(["Caching GC stack roots, this may take a while.",
                       "Subsequent runs of this command will be faster.", ""])
    said.add("stacks")


def live_objects(ctx: CommandContext, quiet: bool = False):  # type: ignore[no-untyped-def]
    """The heap's live mask; the first time (per target state) with SOS's lines around it,
    unless ``quiet`` (dumpheap -short), and the root-cache notice either way."""
    heap = ctx.heap
    said = _said(ctx)
    first = "live" not in said
    said.add("live")
    loud = first and not quiet and not ctx.out.structured
    if loud:
        ctx.out.line("Calculating live objects, this may take a while...")
    if first:
        announce_roots(ctx)
    live = heap.live(ctx.progress)
    if loud:
        ctx.out.line(f"Calculating live objects complete: {fmt_count(int(live.sum()))} objects from "
                     f"{fmt_count(len(heap.roots().roots))} roots")
    return live
