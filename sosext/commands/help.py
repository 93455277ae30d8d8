"""soshelp: the list of commands, and help for one."""
from __future__ import annotations

from ..render.table import Cells
from .base import Command, Parsed, Positional, lookup, primary_commands, register
from .context import CommandContext


@register
class SosHelp(Command):
    names = ("soshelp",)
    summary = "List sosext's commands, or show the help of one command."
    usage = "soshelp [command]"
    details = "Example:\n  soshelp dumpheap"
    positionals = (Positional("command", "a command name"),)
    needs_runtime = False

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        from . import load_all
        load_all()  # a one-shot run imports only the family it needs (load_for)
        if args.command:
            cls = lookup(args.command)
            if cls is None:
                from ..errors import UsageError
                raise UsageError(f"unknown command: {args.command}")
            ctx.out.lines(cls.help_text().splitlines())
            return
        ctx.out.line("sosext commands (soshelp <command> for details):")
        cmds = primary_commands()
        width = max(len(", ".join(c.names)) for c in cmds)
        rows = ctx.out.table("commands", Cells((), ()), ("name", "aliases", "summary"))
        for c in cmds:
            rows.row(f"  {', '.join(c.names).ljust(width)}  {c.summary}", data=(c.names[0], list(c.names[1:]), c.summary))
        ctx.out.line()
        ctx.out.line("Every command also takes --json, --format csv|markdown and --no-color.")
