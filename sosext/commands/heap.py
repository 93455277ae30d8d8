"""Heap commands: dumpheap (draft)."""
from __future__ import annotations

from ..render.numbers import count, hexptr
from .base import Command, Option, Parsed, register
from .context import CommandContext


@register
class DumpHeap(Command):
    names = ("dumpheap",)
    summary = "Display objects on the managed heap, or statistics of them."
    usage = "dumpheap [-stat] [-mt <MT>] [-type <partial name>]"
    options = (Option("-stat", "statistics only"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        heap = ctx.heap
        ix = heap.index(ctx.progress)
        stats = sorted(ix.stats(), key=lambda s: (s.total_size, s.count))
        ctx.out.line("Statistics:")
        for s in stats:
            ctx.out.line(f"{hexptr(s.method_table):>16} {count(s.count):>7} {count(s.total_size):>11} {heap.types.name_of(s.method_table)}")
        ctx.out.line(f"Total {count(len(ix))} objects, {count(ix.total_size)} bytes")
