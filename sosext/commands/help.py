"""soshelp: the commands grouped by family, as SOS's help groups them; and the help of one."""
from __future__ import annotations

from ..render.table import Cells
from .base import Command, Option, Parsed, Positional, lookup, primary_commands, register
from .context import CommandContext

WIDTH = 80       # the list fits a default terminal
LONG_WIDTH = 100  # soshelp -v: one line per command, its summary cut to fit
COLUMN = 26       # three names a row; a longer name takes two columns

# Each command's family, by its main name; tests/unit/test_soshelp.py checks that every
# command is in exactly one. The order is SOS's: inspect the heap and objects first.
FAMILIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Heap", ("dumpheap", "eeheap", "gcheapstat", "gcwhere", "dumpgen", "sizestats", "verifyheap", "verifyobj",
              "listnearobj", "maddress", "dumpgcdata", "analyzeoom", "findephemeralreferencestoloh",
              "findreferencestoephemeral", "notreachableinrange", "findpointersin", "traverseheap")),
    ("Objects", ("dumpobj", "dumparray", "dumpvc", "dumpdelegate", "dumpexceptions", "pe", "dumpobjgcrefs",
                 "objsize", "dumpconcurrentdictionary", "dumpconcurrentqueue", "dumpruntimetypes", "dumpasync",
                 "taskstate", "dumphttp", "dumprequests", "timerinfo")),
    ("Types, modules and domains", ("dumpmt", "dumpclass", "dumpmd", "name2ee", "token2ee", "dumpmodule",
                                    "dumpassembly", "dumpdomain", "clrmodules", "dumpalc", "findappdomain")),
    ("Roots", ("gcroot", "pathto", "findroots", "gchandles", "gchandleleaks", "finalizequeue",
               "dumpstackobjects", "gctonative")),
    ("Threads and stacks", ("clrthreads", "threads", "clrstack", "dumpstack", "eestack", "parallelstacks",
                            "threadstate", "threadpool", "threadpoolqueue", "syncblk", "registers")),
    ("Code", ("clru", "ip2md", "dumpil", "gcinfo", "ehinfo", "dumpsig", "dumpsigelem", "bpmd")),
    ("Diagnostics and set-up", ("eeversion", "runtimes", "sosstatus", "sosflush", "modules", "crashinfo", "clrma",
                                "dumplog", "histinit", "histroot", "histobj", "histobjfind", "histstats",
                                "histclear", "setclrpath", "setreader", "setsymbolserver", "loadsymbols",
                                "logging", "logopen", "logclose", "dbgout", "soshelp")),
    ("sosext's own (not in SOS)", ("heapdiff", "leaks", "retained", "dominators", "report", "heapsnapshot",
                                   "sosext")),
)


def _label(cls: type[Command]) -> str:
    """``dumpobj (do, da)``: the main name and the aliases that are not just its capitalisation."""
    main = cls.names[0]
    others: list[str] = []
    for n in cls.names[1:]:
        if n.lower() != main.lower() and n.lower() not in (o.lower() for o in others):
            others.append(n)
    return f"{main} ({', '.join(others)})" if others else main


def _columns(labels: list[str], width: int = WIDTH, column: int = COLUMN, indent: int = 2) -> list[str]:
    """Labels in columns of ``column`` characters, a long one taking as many as it needs."""
    lines, cur = [], ""
    for label in labels:
        cells = -(-(len(label) + 2) // column)
        text = label.ljust(cells * column)
        if cur and indent + len(cur) + len(text.rstrip()) > width:
            lines.append(" " * indent + cur.rstrip())
            cur = ""
        cur += text
    if cur:
        lines.append(" " * indent + cur.rstrip())
    return lines


def grouped() -> list[tuple[str, list[type[Command]]]]:
    """(family, commands) in FAMILIES' order; a command FAMILIES does not know goes to "Other"."""
    by_name = {c.names[0]: c for c in primary_commands()}
    out, placed = [], set()
    for family, names in FAMILIES:
        cmds = [by_name[n] for n in names if n in by_name]
        placed.update(n for n in names if n in by_name)
        if cmds:
            out.append((family, cmds))
    rest = [c for n, c in sorted(by_name.items()) if n not in placed]
    if rest:
        out.append(("Other", rest))
    return out


@register
class SosHelp(Command):
    names = ("soshelp",)
    summary = "List sosext's commands by family, or show the help of one command."
    usage = "soshelp [-v] [command]"
    details = """\
The commands grouped as SOS's help groups them (heap, objects, types, roots, threads and
stacks, code, diagnostics), then sosext's own; -v adds each one's summary.
In GDB a name GDB already has (u) runs as: sos <name>.

Examples:
  soshelp
  soshelp -v
  soshelp dumpheap"""
    options = (Option("-v", "each command with its summary"),)
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
        out = ctx.out
        out.line("sosext commands (soshelp <command> for details, soshelp -v for summaries):")
        rows = out.table("commands", Cells((), ()), ("name", "aliases", "family", "summary"))
        for family, cmds in grouped():
            out.line()
            out.line(f"{family}:")
            if args.v:
                width = min(max(len(_label(c)) for c in cmds), 24)  # a longer name pushes its summary
                for c in cmds:
                    line = f"  {_label(c).ljust(width)}  {c.summary}"
                    if len(line) > LONG_WIDTH:
                        line = line[:LONG_WIDTH - 1] + "…"
                    rows.row(line, data=(c.names[0], list(c.names[1:]), family, c.summary))
                continue
            if out.structured:   # --json and the other formats: one record per command
                for c in cmds:
                    rows.row(None, data=(c.names[0], list(c.names[1:]), family, c.summary))
            out.lines(_columns([_label(c) for c in cmds]))
        out.line()
        out.line("Every command also takes --json, --format csv|markdown and --no-color.")
        out.line("SOS's habits work: !dumpheap, do <address>, sos <command>; in GDB a name GDB")
        out.line("already has (u) runs as: sos <name>.")
