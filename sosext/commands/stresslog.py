"""The runtime's stress log: dumplog, and the GC history SOS rebuilds from it (hist*).

The log exists only in a process started with ``DOTNET_StressLog=1``; the decoding, the
format strings and the GC records are the model's (``clr/threads/stresslog.py``). These commands
choose what to print and where.
"""
from __future__ import annotations

import os
import weakref
from datetime import datetime

from ..clr.threads.stresslog import (TASK_SWITCH, GcRecord, RuntimeNames, StressLog, facility_name, format_message,
                             stress_log)
from ..errors import SosError, UsageError
from ..files import write_new
from ..render.output import Address
from ..render.table import Column, Table, Text
from ..render.text import safe_line as escape
from .base import Command, Option, Parsed, Positional, address_or, parse_address, register
from .context import CommandContext

NO_LOG = "----- No thread logs in the image: The stress log was probably not initialized correctly. -----"
HOW_TO = ("The stress log is written only by a process started with DOTNET_StressLog=1 "
          "(DOTNET_LogFacility, DOTNET_LogLevel and DOTNET_StressLogSize choose what and how much).")


def _log(ctx: CommandContext, address: int | None = None) -> StressLog | None:
    """The runtime's stress log, or the one at ``address`` (only memory reads: no DAC call)."""
    try:
        log = stress_log(ctx.runtime) if address is None else StressLog(_reader(ctx), address)
    except ValueError as e:
        raise SosError(str(e)) from None
    return log if log is not None and log.present else None


def _reader(ctx: CommandContext):  # type: ignore[no-untyped-def]
    target = ctx.runtime.target
    return lambda a, n: bytes(target.read_partial(a, n))


def header_lines(log: StressLog, threads: int, elapsed: float) -> list[str]:
    """SOS's "STRESS LOG:" block (dumplog's file and histinit)."""
    h = log.header
    start = h.start_time
    last = start and start.timestamp() + elapsed

    def clock(t: float | None) -> str:
        return datetime.fromtimestamp(t).strftime("%H:%M:%S") if t is not None else "BAD TIME"
    return [
        "STRESS LOG:",
        f"    facilitiesToLog  = 0x{h.facilities:x}",
        f"    levelToLog       = {h.level}",
        f"    MaxLogSizePerThread = 0x{h.max_size_per_thread:x} ({h.max_size_per_thread})",
        f"    MaxTotalLogSize = 0x{h.max_size_total:x} ({h.max_size_total})",
        f"    CurrentTotalLogChunk = {h.total_chunks}",
        f"    ThreadsWithLogs  = {threads}",
        f"    Clock frequency  = {h.tick_frequency / 1e9:5.3f} GHz",
        f"    Start time         {clock(start.timestamp() if start else None)}",
        f"    Last message time  {clock(last or None)}",
        f"    Total elapsed time {elapsed:5.3f} sec",
    ]


@register
class DumpLog(Command):
    names = ("dumplog", "DumpLog")
    summary = "Write the runtime's in-memory stress log to a file, newest message first."
    usage = "dumplog [-addr <StressLog address>] [--force] [-f <file>] [<file>]"
    details = f"""\
The stress log is a per-thread circular log the runtime keeps in memory. dumplog merges the
threads' messages by time (newest first, as SOS), formats each with its format string read
from the runtime's image (%pT prints the type of a MethodTable, %pM the method of a
MethodDesc) and writes `THREAD TIMESTAMP FACILITY MESSAGE` rows after SOS's "STRESS LOG:"
header. The file (default StressLog.txt in the current directory) is created 0600, never
through a symlink, and an existing one is replaced only with --force. {HOW_TO}

Example:
  dumplog -f /tmp/stress.txt"""
    options = (Option("-f", "the file to write (default StressLog.txt)", str, "file", dest="file"),
               Option("--force", "replace the file if it exists (never what a symlink points to)", dest="force"),
               Option("-addr", "a StressLog other than the runtime's own (its address)", parse_address, "address",
                      dest="addr"))
    positionals = (Positional("filename", "the file to write (as SOS: dumplog <file>)"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        if args.file and args.filename:
            raise UsageError("give the file once: dumplog -f <file> or dumplog <file>")
        path = args.file or args.filename or "StressLog.txt"
        # SOS says where it is going first, whether or not there is a log to write.
        ctx.out.line(f"Attempting to dump Stress log to file '{escape(path)}'")
        log = _log(ctx, args.addr)
        if log is None:
            ctx.out.line(NO_LOG)
            ctx.out.line("No Stress log in the image, no file written")
            return
        names = RuntimeNames(ctx.runtime)
        rows: list[tuple[str, str, str, str]] = []  # (thread, seconds, facility, text); a TaskSwitch: text only
        elapsed = 0.0
        for fmt, m in log.messages():
            seconds = log.header.seconds(m.timestamp)
            elapsed = max(elapsed, seconds)
            if fmt == TASK_SWITCH:
                rows.append(("", "", "", f"Task was switched from {m.args[0] if m.args else 0:x}"))
                continue
            text = "Could not read address of format string" if fmt is None else format_message(fmt, m.args, names)
            rows.append((f"{m.thread_id:x}", f"{seconds:.9f}", facility_name(m.facility),
                         escape(text.rstrip("\r\n"))))
        tw = max([6] + [len(r[0]) for r in rows])
        sw = max([9] + [len(r[1]) for r in rows])
        fw = max([8] + [len(r[2]) for r in rows])
        lines = header_lines(log, len(log.threads), elapsed)  # SOS counts the thread logs
        lines += ["", f"{'THREAD':<{tw}} {'TIMESTAMP':>{sw}} {'FACILITY':<{fw}} MESSAGE"]
        for t, s, f, text in rows:
            lines.append(text if not t else f"{t:<{tw}} {s:>{sw}} {f:<{fw}} {text}")
        lines.append(f"---------------------------- {len(rows)} total entries ------------------------------------")
        write_new(os.path.expanduser(path), "\n".join(lines) + "\n", bool(args.force))
        ctx.out.line("SUCCESS: Stress log dumped")


# The GC history histinit builds lives until histclear or the next histinit, as in SOS.
_HISTORY: "weakref.WeakKeyDictionary[object, list[GcRecord]]" = weakref.WeakKeyDictionary()
NOT_INITIALIZED = "Run !histinit to initialize the GC history from the stress log."


HINT_HELP = ("when histinit has read no history, say so (as SOS's later, managed hist* commands do) "
             "instead of printing SOS 10's empty table")


# What the hist* queries print before histinit (their help text says it).
BEFORE = ("before it the table is empty, as SOS 10's is;\n-notes prints the line SOS's later versions print "
          "instead.")


def _history(ctx: CommandContext, hint: bool) -> list[GcRecord] | None:
    """histinit's GC history. Without one SOS 10's native hist* print their header and no row
    (an empty history), which is the default; with ``hint`` the line saying why, and None."""
    records = _HISTORY.get(ctx.runtime)
    if records is None and hint:
        ctx.out.line(NOT_INITIALIZED)
        return None
    return records or []


def _pointer_arg(text: str | None, usage: str) -> int:
    return address_or(text, f"Usage: {usage}", f"Usage: {usage}")


@register
class HistInit(Command):
    names = ("histinit", "HistInit")
    summary = "Read the stress log's GC messages into the history the other hist* commands show."
    usage = "histinit"
    details = f"""\
Keeps, for each GC the stress log still holds (newest first, at most 500), its index from the
BEGINGC message, and the plug relocations, root relocations and root promotions logged
during it. {HOW_TO} The history stays until histclear or the next histinit.

Example:
  histinit"""

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        _HISTORY.pop(ctx.runtime, None)
        ctx.out.line("Attempting to read Stress log")
        log = _log(ctx)
        if log is None:
            ctx.out.line(NO_LOG)
            ctx.out.line("No Stress log in the image, GCHist commands unavailable")
            return
        records = log.gc_history()
        last = _newest(log)
        for ln in header_lines(log, len(log.threads), log.header.seconds(last or log.header.start_timestamp)):
            ctx.out.line(ln)
        _HISTORY[ctx.runtime] = records
        ctx.out.field("gc_records", len(records), "SUCCESS: GCHist structures initialized")


def _newest(log: StressLog) -> int | None:
    for _fmt, m in log.messages():
        return m.timestamp
    return None


@register
class HistClear(Command):
    names = ("histclear", "HistClear")
    summary = "Forget the GC history histinit read."
    usage = "histclear"
    details = """\
Drops the GC history histinit built from the stress log; the hist* commands then need
histinit again.

Example:
  histclear"""

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        _HISTORY.pop(ctx.runtime, None)
        ctx.out.line("Completed successfully.")


@register
class HistStats(Command):
    names = ("histstats", "HistStats")
    summary = "Per GC in the history: how many root promotions and relocations were logged."
    usage = "histstats"
    details = """\
One row per GC (newest first), then a line for each root promoted or relocated more than
once in one GC, or "No duplicate promote or relocate messages found in the log.". Run
histinit first (before it, as in SOS, the history is empty).

Example:
  histstats"""

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        # Before histinit SOS shows an empty history, not a hint (dotnet-dump's histstats).
        records = _HISTORY.get(ctx.runtime, [])
        rows = ctx.out.table("gcs", Table(Column(8, True, str), Column(8, True, str), Column(8, True, str)),
                             ("gc_count", "promotes", "relocs"))
        rows.header("GCCount", "Promotes", "Relocs")
        if not ctx.out.structured:
            ctx.out.line("-----------------------------------")
        for r in records:
            rows.row(r.gc_count, len(r.promotes), len(r.relocs))
        found = False
        for r in records:
            for what, roots in (("promoted", [p[0] for p in r.promotes]), ("relocated", [x[0] for x in r.relocs])):
                seen: set[int] = set()
                for root in roots:
                    if root in seen:
                        ctx.out.line(f"Root {root:016x} {what} multiple times in gc {r.gc_count}")
                        found = True
                    seen.add(root)
        if not found:
            ctx.out.line("No duplicate promote or relocate messages found in the log.")


def _dashes(ctx: CommandContext) -> None:
    if not ctx.out.structured:
        ctx.out.line("---------------------------------------------------------")


class _HistQuery(Command):
    """A hist* command about one address: needs histinit's history, then shows it."""

    options = (Option("-notes", HINT_HELP),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        records = _history(ctx, bool(args.notes))
        if records is None:
            return
        name = self.positionals[0].name
        # SOS's usage line, which has no -notes.
        self.show(ctx, records, _pointer_arg(args.values.get(name), self.usage.replace(" [-notes]", "")))

    def show(self, ctx: CommandContext, records: list[GcRecord], address: int) -> None:
        raise NotImplementedError


def _object_rows(ctx: CommandContext, key: str, last_key: str, last_title: str):  # type: ignore[no-untyped-def]
    """SOS's `GCCount Object <last>` table of histobj and histobjfind."""
    rows = ctx.out.table(key, Table(Column(8, True, str), Column(16, True, str), Text()),
                         ("gc_count", "object", last_key))
    rows.header("GCCount", "Object", f"{last_title:>40}")  # SOS's %40s
    _dashes(ctx)
    return rows


@register
class HistRoot(_HistQuery):
    names = ("histroot", "HistRoot")
    summary = "A root's relocations and promotions through the GCs in the history."
    usage = "histroot [-notes] <root>"
    details = f"""\
For each GC (newest first) where the root (a stack slot or handle address, as histobjfind
shows it) was relocated: the value it was given, the MethodTable, whether the GC also logged
its promotion, and a note when promote and relocate records disagree. Runs of GCs without
the root print "...". Run histinit first: {BEFORE}

Example:
  histroot 7ffc1234a5b8"""
    positionals = (Positional("root", "the root's address"),)

    def show(self, ctx: CommandContext, records: list[GcRecord], root: int) -> None:
        rows = ctx.out.table("relocations", Table(Column(8, True, str), Column(16, True, str),
                                                  Column(16, True, str), Column(9, True, str), Text()),
                             ("gc_count", "value", "method_table", "promoted", "notes"))
        rows.header("GCCount", "Value", "MT", "Promoted?", f"{'Notes':>20}")  # SOS's %20s
        _dashes(ctx)
        boring = False
        for r in records:
            promotes = [p for p in r.promotes if p[0] == root]
            relocs = [x for x in r.relocs if x[0] == root]
            if relocs:
                boring = False
                rel = relocs[0]
                notes = ""
                if promotes:
                    p = promotes[0]
                    if p[1] != rel[1] or p[2] != rel[3]:
                        notes += "promote/reloc records in error "
                    if len(promotes) > 1 or len(relocs) > 1:
                        notes += "Duplicate promote/relocs"
                rows.row(r.gc_count, f"{rel[2]:016x}", f"{rel[3]:016x}", "yes" if promotes else "no", notes,
                         data=(r.gc_count, Address(rel[2]), Address(rel[3]), bool(promotes), notes.strip()))
            elif promotes:
                ctx.out.line(f"Error: There is a promote record for root {root:016x}, but no relocation record")
            elif not boring:
                ctx.out.line("...")
                boring = True


@register
class HistObjFind(_HistQuery):
    names = ("histobjfind", "HistObjFind", "hof")
    summary = "Every promotion and relocation in the history that names an object address."
    usage = "histobjfind [-notes] <object address>"
    details = f"""\
For each GC (newest first): the promotions whose value is the address and the relocations
that moved an object to or from it, with the root that held it. Run histinit first:
{BEFORE}

Example:
  histobjfind 7f3a14005678"""
    positionals = (Positional("object", "the object's address"),)

    def show(self, ctx: CommandContext, records: list[GcRecord], obj: int) -> None:
        rows = _object_rows(ctx, "records", "message", "Message")
        boring = False
        for r in records:
            for root, value, mt in r.promotes:
                if value == obj:
                    boring = False
                    rows.row(r.gc_count, f"{obj:016x}", f"Promotion for root {root:016x} (MT = {mt:016x})",
                             data=(r.gc_count, Address(obj), f"Promotion for root {root:x} (MT = {mt:x})"))
            for root, prev, new, _mt in r.relocs:
                if obj in (prev, new):
                    boring = False
                    which = "NEWVALUE" if new == obj else "PREVVALUE"
                    rows.row(r.gc_count, f"{obj:016x}", f"Relocation {which} for root {root:016x}",
                             data=(r.gc_count, Address(obj), f"Relocation {which} for root {root:x}"))
            if not boring:
                ctx.out.line("...")
                boring = True


@register
class HistObj(_HistQuery):
    names = ("histobj", "HistObj")
    summary = "Follow an object's address back through the GCs' relocations in the history."
    usage = "histobj [-notes] <object address>"
    details = f"""\
From the newest GC back: the object's address before that GC and the roots that were
relocated to it; the address becomes the one those roots held before the GC. Run histinit
first: {BEFORE}

Example:
  histobj 7f3a14005678"""
    positionals = (Positional("object", "the object's address"),)

    def show(self, ctx: CommandContext, records: list[GcRecord], cur: int) -> None:
        rows = _object_rows(ctx, "relocations", "roots", "Roots")
        for r in records:
            if cur == 0:
                break
            roots: list[int] = []
            candidate = cur
            note = ""
            for root, prev, new, _mt in r.relocs:
                if new == cur:
                    if not roots:
                        candidate = prev
                    elif candidate != prev:
                        note = "differing reloc values for this object!"
                    roots.append(root)
            text = "".join(f"{x:016x}, " for x in roots) + note
            rows.row(r.gc_count, f"{cur:016x}", text,
                     data=(r.gc_count, Address(cur), [f"0x{x:x}" for x in roots]))
            cur = candidate
