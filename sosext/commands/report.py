"""report: the heap as a picture (one self-contained HTML file) or as folded stacks."""
from __future__ import annotations

import json
import os

from ..errors import SosError, UsageError
from ..files import write_new
from ..report.data import folded_lines, heap_report
from .base import Command, Option, Parsed, register
from .context import CommandContext

FORMATS = ("html", "folded", "json")


@register
class Report(Command):
    names = ("report",)
    summary = "Write a heap report: an HTML page (icicle of what keeps the memory, treemap, tables) or folded stacks."
    usage = "report [-o <file>] [--baseline <older core>] [--format html|folded|json] [--force]"
    details = """\
The HTML page is one self-contained file (plotly.js and the data embedded, nothing
fetched): a summary, an icicle (flame graph) of bytes along dominator paths grouped by
type (root kind -> type -> type ...), a treemap by type, the largest holders with their
chains and a sortable type table. With --baseline, both pictures are coloured by growth
and the holders of the growth are listed as leaks names them. --format folded writes Brendan Gregg's folded
stacks ("root kind;Type;Type;... bytes" per line) for flamegraph.pl or speedscope;
--format json the data behind the page. -o - writes to the output instead of a file.
An existing file is only replaced with --force. From the shell: sosext report CORE.

Examples:
  report -o /tmp/heap.html
  report -o /tmp/growth.html --baseline /tmp/core.before
  report --format folded -o /tmp/heap.folded"""
    options = (
        Option("-o", "the file to write (default report.html; for folded and json: the output)", str, "file",
               dest="output"),
        Option("--baseline", "an older core of the same program: colour by growth", str, "core"),
        Option("--format", "html (default), folded or json", str, "format", dest="format"),
        Option("--force", "replace an existing file"),
    )

    @classmethod
    def output_format(cls, args: Parsed) -> str:
        # --format here picks the report's form (html, folded, json), written as it is: the
        # command's own output is text (a status line, or the document itself with -o -).
        return "text"

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        fmt = (args.format or ("json" if args.json else "html")).lower()
        if fmt not in FORMATS:
            raise UsageError(f"unknown format {args.format} (html, folded or json)")
        if args.baseline and fmt == "folded":
            raise UsageError("--baseline colours the HTML report; folded stacks have no baseline")
        output = args.output or ("report.html" if fmt == "html" else "-")
        if output != "-" and os.path.lexists(output) and not args.force:
            raise SosError(f"{output} exists; choose another name or add --force")
        heap = ctx.heap
        heap.check_walkable()
        heap.index(ctx.progress)
        if fmt == "folded":
            self._emit(ctx, output, "\n".join(folded_lines(heap, ctx.progress)) + "\n", args.force)
            return
        source = ctx.runtime.target.describe()
        if args.baseline:
            from ..clr.snapshots.gcdumpsnap import is_gcdump
            from ..report.baseline import BaselineReport
            job = BaselineReport(args.baseline)
            try:
                if is_gcdump(args.baseline):
                    # A snapshot's names are the runtime events' spelling: this report takes it too.
                    from ..report.data import add_growth
                    from ..report.snapshot import with_event_names
                    doc = with_event_names(heap_report(heap, source, progress=ctx.progress))
                    add_growth(doc, job.result())
                else:
                    doc = heap_report(heap, source, job.result, ctx.progress)  # overlaps the child's work
            finally:
                job.cancel()
        else:
            doc = heap_report(heap, source, progress=ctx.progress)
        if fmt == "json":
            self._emit(ctx, output, json.dumps(doc, separators=(",", ":")) + "\n", args.force)
            return
        from ..report.html import render_html
        self._emit(ctx, output, render_html(doc), args.force)
        ctx.out.line(f"Wrote {output}: {doc['summary']['objects']:,} objects, {len(doc['paths']):,} paths, "
                     f"{len(doc['types']):,} types")

    @staticmethod
    def _emit(ctx: CommandContext, output: str, text: str, force: bool) -> None:
        if output == "-":
            for line in text.rstrip("\n").split("\n"):
                ctx.out.line(line)
            return
        write_new(output, text, force)
