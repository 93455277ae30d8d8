"""Thread, stack and exception commands: clrthreads, clrstack, pe, threadpool, setthread, threadstate.

These are SOS's native-era commands: their tables are fixed-width (TableOutput), pointers in
table cells print as 16 UPPERCASE hex digits and pointers inside text as 16 lowercase ones.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..clr.addresses import classifier
from ..clr.threads.frames import FrameVariables, as_icordebug_finds, frame_variables, inspection_frame
from ..clr.threads.exceptions import (ClrExceptionInfo, InvalidExceptionObject, NotAnException, StackTraceState,
                                      read_exception)
from ..clr.threads.nativeframes import NativeFrame, native_frames
from ..clr.heap.objects import method_table_of, string_text
from ..clr.threads.gcrefs import StackGcReference, stack_gc_references
from ..clr.threads.rawstack import RawFrame
from ..clr.code.sourcelines import PdbLookup, SourceLines, source_lines
from ..clr.threads.stacks import ClrStack, ClrStackFrame, FrameValue, NotManagedThread, module_file_name, walk_stack
from ..clr.features.threadpool import ClrThreadPool, read_threadpool_or_reason
from ..clr.threads.threads import ClrThread, clr_threads, faulting_thread, thread_by_os_id, thread_store
from ..errors import SosError, UsageError
from ..render.text import safe_line
from ..targets.base import ThreadInfo
from ..render.numbers import P16 as _p, count, dotnet_fixed2, os_thread_column, os_thread_id, p16, printf_d
from ..render.numbers import p16 as _lp
from ..render.output import Address, hint
from ..render.table import Cells
from .base import Command, Option, Parsed, Positional, parse_address, parse_count, register
from .context import CommandContext
from .icordebug import NOT_IN_TRIAGE_DUMP, write_icordebug_stack

CURRENT_THREAD = "current_thread"  # Session.settings key: the CLI's selected OS thread id


# -- the current thread -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CurrentThread:
    tid: int
    index: int  # the debugger's thread number (ThreadInfo.index; -1 when unknown)


def debugger_selected_tid(ctx: CommandContext) -> int | None:
    """The thread the debugger has selected; None for targets without a selection (the CLI)."""
    pick = getattr(ctx.session.target(), "selected_tid", None)
    return pick() if callable(pick) else None


def current_thread(ctx: CommandContext) -> CurrentThread | None:
    """The thread SOS-style commands act on: the one the user chose (the debugger's selected
    thread, or setthread's in the CLI); until the user chooses, in a crash dump the thread that
    took the signal, in every host (LLDB selects it on opening the core, GDB selects the core's
    first thread); else the debugger's selection, else the target's first thread."""
    target = ctx.session.target()
    threads = target.threads()
    tid = debugger_selected_tid(ctx)
    chosen = tid is not None and getattr(target, "selection_chosen", lambda: True)()
    if tid is None:
        tid = ctx.session.settings.get(CURRENT_THREAD)
        chosen = tid is not None
    if not chosen and target.core_file() is not None:
        try:
            fault = faulting_thread(ctx.runtime)
        except SosError:
            fault = None
        if fault is not None and any(t.tid == fault[0] for t in threads):
            tid = fault[0]
    if tid is None:
        if not threads:
            return None
        tid = threads[0].tid
    return CurrentThread(tid, next((t.index for t in threads if t.tid == tid), -1))


# -- clrthreads ---------------------------------------------------------------------------------

_THREAD_WIDTHS = (4, 4, 8, 16, 8, 11, 33, 16, 5, 3)
_THREAD_RIGHT = (True, True, True, False, True, False, False, False, False, False)


@register
class ClrThreads(Command):
    names = ("clrthreads", "ClrThreads")
    summary = "List the managed threads: ids, state, GC mode, allocation context, last exception."
    usage = "clrthreads [-live] [-special] [-managedexception]"
    details = """\
One row per thread the runtime knows (running, unstarted and dead ones). DBG is the
debugger's thread number (XXXX: the OS thread is gone), ID the managed thread id, OSID the
OS thread id in hex, ThreadOBJ the runtime's Thread object, State its state bits (see
threadstate), Lock Count the monitors it holds. The Exception column names special threads
((Finalizer), (GC), (Threadpool Worker)) and the last exception the thread threw.

With -managedexception, no table: the first thread with a managed exception becomes the
current thread (the debugger's selection in LLDB and GDB, setthread's in the CLI), ready for
pe and clrstack.

Examples:
  clrthreads
  clrthreads -live
  clrthreads -managedexception
    Found managed exception on thread 2ee2"""
    options = (
        Option("-live", "only threads the debugger knows (running OS threads)"),
        Option("-special", "special runtime threads (not supported off Windows)"),
        Option("-managedexception", "make the (first) thread with a managed exception the current thread"),
    )

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        if args.managedexception:
            select_exception_thread(ctx)
            return
        runtime = ctx.runtime
        store = thread_store(runtime)
        out = ctx.out
        host = "no" if not store.host_config & 0x7FFFFFFF else f"yes (0x{store.host_config:x})"
        for label, value in (("ThreadCount:", store.thread_count), ("UnstartedThread:", store.unstarted),
                             ("BackgroundThread:", store.background), ("PendingThread:", store.pending),
                             ("DeadThread:", store.dead), ("Hosted Runtime:", host)):
            out.record_line(f"{label:<17} {value}")
        out.line(" " * 108 + "Lock  ")
        table = Cells(_THREAD_WIDTHS, _THREAD_RIGHT, cut=(0, 5, 9))
        rows = out.table("threads", table, ("dbg", "id", "os_thread_id", "thread", "state", "gc_mode",
                                            "alloc_context", "domain", "lock_count", "apartment", "exception"))
        out.line(table.row("DBG", "ID", "OSID", "ThreadOBJ", "State", "GC Mode", "GC Alloc Context", "Domain",
                           "Count", "Apt", "Exception"))
        known = {t.tid: t for t in ctx.session.target().threads()}
        for t in clr_threads(runtime):
            info = known.get(t.os_id) if t.os_id else None
            if info is None and args.live:
                continue
            cells = self._row(ctx, t, info)
            rows.row(*cells, data=(info.index if info is not None else None, t.managed_id, t.os_id,
                                   Address(t.address), t.state, cells[5], cells[6], Address(t.domain),
                                   t.lock_count, t.apartment, cells[10]))
        if args.special:
            out.line()
            out.line("-special not supported.")

    @staticmethod
    def _row(ctx: CommandContext, t: ClrThread, info: ThreadInfo | None) -> list[str]:
        dbg = str(info.index) if info is not None else "XXXX "
        return [
            dbg, str(t.managed_id), os_thread_column(t.os_id), _p(t.address), f"{t.state:x}",
            "Cooperative" if t.cooperative else "Preemptive",
            f"{_p(t.alloc_context[0])}:{_p(t.alloc_context[1])}", _p(t.domain), _lock_count(t.lock_count),
            t.apartment, exception_column(ctx, t)]


def select_exception_thread(ctx: CommandContext) -> None:
    """clrthreads -managedexception: select the first live thread whose last thrown exception is
    still held (as the Exception column shows it), the way setthread or the debugger would."""
    target = ctx.session.target()
    known = {t.tid: t for t in target.threads()}
    for t in clr_threads(ctx.runtime):
        info = known.get(t.os_id) if t.os_id else None
        if info is None or not t.last_exception:
            continue
        select = getattr(target, "select_tid", None)
        if debugger_selected_tid(ctx) is not None:
            if not callable(select) or not select(t.os_id):
                raise SosError(f"the debugger cannot select thread {info.index} (OS thread id {os_thread_id(t.os_id)})")
        else:
            ctx.session.settings[CURRENT_THREAD] = t.os_id
        ctx.out.line(f"Found managed exception on thread {t.os_id:x}")  # SOS's words
        return
    raise SosError("no thread has a managed exception")


def _lock_count(n: int) -> str:
    """SOS's Decimal() column of the DWORD lock count: printf's %*.*d of the value as a signed
    int, 5 wide, its precision the digit count of the unsigned value clamped to the width.
    .NET 9+ no longer counts locks and reports 0xFFFFFFFF, which SOS prints as -00001 (in
    dotnet-dump and in LLDB alike)."""
    raw = n & 0xFFFFFFFF
    precision = min(max(len(str(raw)), 1), _THREAD_WIDTHS[8])
    signed = raw - (1 << 32) if raw & 0x80000000 else raw
    return ("-" if signed < 0 else "") + f"{abs(signed):0{precision}d}"


def exception_column(ctx: CommandContext, t: ClrThread) -> str:
    text = ""
    if t.is_finalizer:
        text += "(Finalizer) "
    if t.is_gc:
        text += "(GC) "
    if t.is_threadpool_worker:
        text += "(Threadpool Worker) "
    elif t.is_completion_port:
        text += "(Threadpool Completion Port) "
    if t.last_exception:
        types = ctx.runtime.types
        mt = method_table_of(ctx.runtime.target, t.last_exception)
        if mt is not None:
            name = types.name_of(mt) if types.get(mt) is not None else None
            text += f"{name} {_lp(t.last_exception)}" if name else f"<Invalid Object> ({_p(t.last_exception)})"
            if t.first_nested_exception:
                text += " (nested exceptions)"
    return text


# -- threadstate -------------------------------------------------------------------------------

THREAD_STATE_NAMES = (
    (0x1, "Abort Requested"), (0x2, "GC Suspend Pending"), (0x4, "User Suspend Pending"),
    (0x8, "Debug Suspend Pending"), (0x10, "GC On Transitions"), (0x20, "Legal to Join"),
    (0x40, "Yield Requested"), (0x80, "Hijacked by the GC"), (0x100, "Blocking GC for Stack Overflow"),
    (0x200, "Background"), (0x400, "Unstarted"), (0x800, "Dead"), (0x1000, "CLR Owns"),
    (0x2000, "CoInitialized"), (0x4000, "In Single Threaded Apartment"),
    (0x8000, "In Multi Threaded Apartment"), (0x10000, "Reported Dead"), (0x20000, "Fully initialized"),
    (0x40000, "Task Reset"), (0x80000, "Sync Suspended"), (0x100000, "Debug Will Sync"),
    (0x200000, "Stack Crawl Needed"), (0x400000, "Suspend Unstarted"), (0x800000, "Aborted"),
    (0x1000000, "Thread Pool Worker Thread"), (0x2000000, "Interruptible"), (0x4000000, "Interrupted"),
    (0x8000000, "Completion Port Thread"), (0x10000000, "Abort Initiated"), (0x20000000, "Finalized"),
    (0x40000000, "Failed to Start"), (0x80000000, "Detached"),
)


@register
class ThreadStateCommand(Command):
    names = ("threadstate", "ThreadState")
    summary = "Name the bits of a thread's State value (the State column of clrthreads)."
    usage = "threadstate <state>"
    details = """\
The value is hex (with or without 0x) and 32-bit; anything else is an error. A value with
no known bit prints "No thread states for '<value>'".

Example:
  threadstate 21220"""
    positionals = (Positional("state", "the State value, hex", str, required=True),)
    needs_runtime = False

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        try:
            state = parse_address(args.state)
        except UsageError:
            raise UsageError(f"invalid thread state: {args.state} (a hex number, the State column of clrthreads)") \
                from None
        if state >= 1 << 32:
            raise UsageError(f"invalid thread state: {args.state} (thread states are 32-bit values)")
        names = [name for bit, name in THREAD_STATE_NAMES if state & bit]
        if not names:
            ctx.out.line(f"    No thread states for '{args.state}'")
        rows = ctx.out.table("states", Cells((), ()), ("name",))
        for n in names:
            rows.row(f"    {n}", data=(n,))


# -- setthread ---------------------------------------------------------------------------------


@register
class SetThread(Command):
    names = ("threads", "setthread")
    summary = "List the target's threads (-v: with IP, SP and FP), or choose the thread clrstack and pe use (CLI)."
    usage = "threads [-v] [-t] [<thread>]"
    details = """\
SOS's managed `threads` command (alias setthread), as dotnet-dump and `sos threads` in LLDB
run it. Without an argument, lists the threads (* marks the current one) as index, OS thread
id in hex and in decimal; -v adds each thread's instruction, stack and frame pointers, and
its TEB, which Linux threads do not have (0, as SOS prints there). With an argument, makes
that thread current for clrstack, pe and dso: <thread> is the thread's index, or its OS
thread id with -t (hex with 0x, or decimal). In LLDB and GDB select threads with the
debugger instead (thread select <n> / thread <n>); sosext follows it.

In WinDbg, `!threads` is SOS's older name of clrthreads; on Linux (dotnet-dump, LLDB's
`sos threads`) it is this command, so sosext follows Linux.

Examples:
  threads
  threads -v
  setthread 8
  setthread -t 0x7eb5"""
    options = (Option("-t", "the argument is an OS thread id", aliases=("--tid",), dest="tid"),
               Option("-v", "also each thread's IP, SP, FP and TEB", aliases=("--verbose",), dest="verbose"))
    positionals = (Positional("thread", "thread index, or OS thread id with -t"),)
    needs_runtime = False

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        target = ctx.session.target()
        threads = target.threads()
        if args.thread is None:
            cur = current_thread(ctx)
            # dotnet-dump's listing: the OS thread id in hex, then (as it does) in decimal.
            keys = ("index", "os_thread_id", "current") + (("ip", "sp", "fp", "teb") if args.verbose else ())
            rows = ctx.out.table("threads", Cells((), ()), keys)
            for t in threads:
                mark = "*" if cur is not None and t.tid == cur.tid else " "
                line = f"{mark}{t.index} 0x{t.tid:04X} ({t.tid})"
                if not args.verbose:
                    rows.row(line, data=(t.index, t.tid, mark == "*"))
                    continue
                ip, sp, fp = thread_pointers(target.registers(t.tid))
                line += "".join(f"\n    {label} 0x{value:016X}"
                                for label, value in (("IP ", ip), ("SP ", sp), ("FP ", fp), ("TEB", 0)))
                rows.row(line, data=(t.index, t.tid, mark == "*", Address(ip), Address(sp), Address(fp),
                                     Address(0)))
            return
        if debugger_selected_tid(ctx) is not None:
            raise SosError("the debugger chooses the current thread here: use its own command "
                           "(LLDB: thread select <n>, GDB: thread <n>)")
        n = parse_count(args.thread)
        found = next((t for t in threads if (t.tid if args.tid else t.index) == n), None)
        if found is None:
            raise SosError(f"no thread with OS id {args.thread} in the target" if args.tid
                           else f"Invalid thread index: {args.thread}")  # dotnet-dump's words
        # Silent, as dotnet-dump's setthread: `threads` shows the selection.
        ctx.session.settings[CURRENT_THREAD] = found.tid


# The instruction, stack and frame pointers under each architecture's register names.
_POINTER_REGISTERS = (("rip", "pc"), ("rsp", "sp"), ("rbp", "fp", "x29"))


def thread_pointers(regs: dict[str, int]) -> tuple[int, int, int]:
    """A thread's (IP, SP, FP) from its registers; 0 for one the host did not give."""
    return tuple(next((regs[n] for n in names if n in regs), 0) for names in _POINTER_REGISTERS)  # type: ignore[return-value]


# -- clrstack ----------------------------------------------------------------------------------

_STACK_WIDTHS = (16, 16)
_STACK_RIGHT = (True, True)


@register
class ClrStackCommand(Command):
    names = ("clrstack", "ClrStack")
    summary = "Show the managed call stack of the current thread (or of every thread with -all)."
    usage = "clrstack [-a] [-p] [-l] [-i [<variable>] [<frame>]] [-n] [-f [-native]] [-r] [-gc] [-all] [-c <count>]"
    details = """\
One row per frame, innermost first: the frame's stack pointer, instruction pointer and
method (Namespace.Type.Method(ArgTypes)). Runtime transition frames appear as
[FrameName: address]. A managed frame ends with its source file and line,
[/src/app/Program.cs @ 42], when the module's portable PDB is found (embedded in the
assembly, beside it, or in a directory named with setsymbolserver -directory); sosstatus names
the modules whose frames had none. The current thread is the debugger's selected thread (in the
CLI the one chosen with setthread, else the first); on a crash dump, until a thread is chosen,
the thread that took the signal, in every host.

-i lists the stack as SOS's ICorDebug walk does, with -a/-p/-l the arguments and locals named
and typed. `clrstack -i <variable> [<frame>]` also lists the fields of that variable (a struct,
or the object a reference points to; name.field goes deeper, name.[basetype] into the base
class) and implies -a; <frame> (decimal) limits the variables to that frame. A number alone,
`clrstack -i -a <frame>`, is read as SOS reads it, in hex. Frames are numbered as SOS numbers
them: each row of the -i listing from 0, the runtime's transition frames not counted. A frame
of code shared between generic instantiations is typed by the instantiation its generic context
(the slot its GC info names) holds, as the debugger API types it; System.__Canon where it holds none.

-f adds module names and code offsets; in LLDB and GDB also the native frames between managed
ones (unwound by sosext from the modules' .eh_frame), as SOS in LLDB shows them. The CLI shows
what dotnet-dump shows, managed frames and runtime Frames, unless -native asks for them too.

Examples:
  clrstack
    OS Thread Id: 0x2ee1 (8)
            Child SP               IP Call Site
    ...
    00007FA9B25FDBD0 00007FB5ACC94ECE DebuggeeHost.SourceScenario.SourceInner(Int32) [/src/SourceScenario.cs @ 74]
  clrstack -a
  clrstack -i point 2
  clrstack -all
  clrstack -f -c 5"""
    options = (
        Option("-a", "show parameters and locals"),
        Option("-p", "show parameters"),
        Option("-l", "show locals (unnamed as in SOS; with -i named from the PDB)"),
        Option("-n", "no source file and line numbers"),
        Option("-f", "full: module names and code offsets; native frames too in LLDB and GDB"),
        Option("-native", "with -f: native frames in every host (in the CLI too, where dotnet-dump shows none)"),
        Option("-r", "show the registers of every frame"),
        Option("-all", "every managed thread"),
        Option("-c", "at most this many frames", parse_count, "count"),
        Option("-i", "arguments and locals with their names, types and values (names of locals from the PDB)"),
        Option("-gc", "the GC references of each frame (the runtime's live slots and registers)"),
    )
    positionals = (Positional("variable", "with -i: the variable whose fields to list (name.field… goes deeper)"),
                   Positional("frame", "with -i: the frame whose variables to show (decimal)"))

    @classmethod
    def parse(cls, words: list[str]) -> Parsed:
        # SOS's /d asks for DML links; plain text here, so it is accepted and ignored.
        return super().parse([w for w in words if w.lower() != "/d"])

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        params = args.a or args.p
        local_vars = args.a or args.l
        if icordebug_arguments(args)[0]:
            params = local_vars = True  # as SOS: naming a variable shows the variables
        runtime = ctx.runtime
        if args.all:
            for t in clr_threads(runtime):
                if not t.os_id:
                    continue
                ctx.out.line(f"OS Thread Id: {os_thread_id(t.os_id)}")
                self._thread(ctx, t.os_id, params, local_vars, args)
            return
        cur = current_thread(ctx)
        if cur is None:
            raise SosError("the target has no threads")
        if args.i:
            # SOS's ICorDebug walk starts with three empty lines where the others name the thread.
            ctx.out.lines(["", "", ""])
        else:
            ctx.out.line(f"OS Thread Id: {os_thread_id(cur.tid)} ({cur.index})")
        self._thread(ctx, cur.tid, params, local_vars, args)

    def _thread(self, ctx: CommandContext, tid: int, params: bool, local_vars: bool, args: Parsed) -> None:
        out = ctx.out
        try:
            # -i needs each Frame's context: where it returns into native code is a row there.
            stack = walk_stack(ctx.runtime, tid, arguments=params, local_variables=local_vars,
                               registers=args.r or args.f or args.i, max_frames=args.c or 0)
        except NotManagedThread as e:
            if not e.is_managed:
                out.line("Unable to walk the managed stack. The current thread is likely not a ")
                out.line("managed thread. You can run clrthreads to get a list of managed threads in")
                out.line("the process")
            out.line(f"Failed to start stack walk: {e.hr:x}")
            return
        if args.i:
            self._icordebug(ctx, tid, stack, params, local_vars, args.c or 0, *icordebug_arguments(args))
            return
        if not any(f.is_managed for f in stack.frames) and (not stack.complete or not stack.frames):
            # A thread the runtime knows that has not run (or no longer runs) managed code: the
            # walk has nothing to stand on, which is no failure; SOS prints the header alone.
            out.line(Cells(_STACK_WIDTHS, _STACK_RIGHT).row("Child SP", "IP", "Call Site"))
            return
        lines = None if args.n else source_lines(ctx.runtime)
        leaf_ip = _thread_ip(ctx, tid) if lines is not None else None
        missing: list[PdbLookup] = []
        table = Cells(_STACK_WIDTHS, _STACK_RIGHT)
        rows = out.table("frames", table, ("os_thread_id", "sp", "ip", "call_site", "method_desc", "managed"))
        out.line(table.row("Child SP", "IP", "Call Site"))
        # SOS shows native frames where its debugger unwinds them (LLDB), not in dotnet-dump.
        with_native = args.f and (args.native or getattr(ctx.session.target(), "debugger_unwinds_native", False))
        native = _native_rows(ctx, tid, stack) if with_native else []
        refs = stack_gc_references(ctx.runtime, tid) if args.gc and not out.structured else []
        printed = 0

        def room() -> bool:
            return not args.c or printed < args.c

        def native_up_to(limit: int | None) -> None:
            nonlocal printed
            # SOS prints the native frames below (leafward of) each managed row first.
            while native and room() and (limit is None or native[0].sp <= limit):
                nf = native.pop(0)
                if nf.sp == limit:
                    continue
                printed += 1
                rows.row(_p(nf.sp), _p(nf.ip), _native_site(nf.code),
                         data=(tid, Address(nf.sp), Address(nf.ip), _native_site(nf.code), None, False))

        for i, f in enumerate(stack.frames):
            native_up_to(f.sp)
            if not room():
                break
            printed += 1
            # SOS prints a runtime Frame's IP in lower case, and with -f leaves it blank (it
            # means little there).
            ip = _p(f.ip) if f.is_managed else "" if args.f else _lp(f.ip)
            site = call_site(ctx, f, args.f)
            if lines is not None and f.is_managed and f.method_desc:
                # Only an active leaf frame stands on its instruction; the others hold return addresses.
                active = i == 0 and f.ip == leaf_ip
                loc = lines.location(f.ip, f.method_desc, return_address=not active, missing=missing.append)
                if loc is not None:
                    site += f" [{loc.path} @ {loc.line}]"
            rows.row(_p(f.sp), ip, site,
                     data=(tid, Address(f.sp), Address(f.ip), site, Address(f.method_desc), bool(f.is_managed)))
            for r in refs:
                # SOS matches a managed frame's references by its IP and SP, a Frame's by its address.
                if (r.source == f.ip and r.stack_pointer == f.sp) if f.is_managed else r.source == f.frame_address:
                    out.line(" " * 34 + _gc_ref_text(ctx, r))
            if f.is_managed and (params or local_vars):
                _args_and_locals(ctx, f, params, local_vars)
            if f.registers is not None and args.r:
                _registers(ctx, f.registers, ctx.runtime.target.arch)
        if stack.complete and not stack.truncated:
            native_up_to(None)
        if stack.interrupted:
            out.line("<interrupted>")
        elif not stack.complete:
            out.line("<failed>")
            out.line("Stack Walk failed. Reported stack incomplete.")
        # A walk of runtime Frames only ends with them, as SOS's does: no note.
        if lines is not None:
            report_missing_pdbs(ctx, lines, missing)


    def _icordebug(self, ctx: CommandContext, tid: int, stack: ClrStack, params: bool, local_vars: bool,
                   max_rows: int, wanted: str | None, only_frame: int | None) -> None:
        sp, ip = _thread_sp_ip(ctx, tid)
        first = stack.frames[0] if stack.frames else None
        in_managed = first is not None and first.is_managed and first.ip == ip
        base = None
        last = stack.frames[-1] if stack.frames else None
        if last is not None and last.is_managed and stack.complete and not stack.truncated:
            # The debugger API ends with the native code the outermost managed frame returns to.
            base = next(((n.sp, n.ip) for n in _native_rows(ctx, tid, stack) if n.sp > last.sp), None)
        write_icordebug_stack(
            ctx, tid, stack, sp, ip, in_managed, params, local_vars, max_rows,
            lambda f, i: _inspected_variables(ctx, stack, i, ip),
            wanted, only_frame, base)


def _inspected_variables(ctx: CommandContext, stack: ClrStack, i: int, thread_ip: int | None) -> FrameVariables:
    """Frame i's variables as the debugger API shows them (a funclet's are its parent's)."""
    j = inspection_frame(ctx.runtime, stack.frames, i)
    f = stack.frames[j]
    return as_icordebug_finds(ctx.runtime, f, frame_variables(ctx.runtime, f, leaf=j == 0 and f.ip == thread_ip))


def icordebug_arguments(args: Parsed) -> tuple[str | None, int | None]:
    """(variable to expand, frame number) from clrstack -i's arguments, read as SOS reads them:
    a lone all-digit argument is a frame number, in hex as SOS's expression evaluator takes it;
    otherwise the first names the variable and the second is a decimal frame number."""
    first, second = args.variable, args.frame
    if first is None:
        return None, None
    if not args.i:
        raise UsageError("a variable name or frame number goes with -i: clrstack -i [<variable>] [<frame>]")
    if second is None and first and all(c in "0123456789" for c in first):
        return None, parse_count("0x" + first)
    if second is None:
        return first, None
    return first, parse_count(second)


def _gc_ref_text(ctx: CommandContext, r: StackGcReference) -> str:
    """One reference as SOS's clrstack -gc prints it: ``rbp-30: <slot> -> <object> - <type>``,
    ``rbx: <object> - <type>`` for a register, ``(pinned)``/``(interior)`` after it."""
    text = ""
    if r.register is not None:
        text = r.register
        if r.offset:
            text += f"{'+' if r.offset > 0 else '-'}{abs(r.offset):x}"
        text += ": "
    if r.address:
        text += f"{r.address:016x} -> "
    text += f"{r.object:016x}"
    if r.pinned:
        text += " (pinned)"
    if r.interior:
        text += " (interior)"
    if r.object and not r.interior:
        text += " - " + _type_with_extra_info(ctx, r.object)
    return text


def _type_with_extra_info(ctx: CommandContext, address: int) -> str:
    """SOS's name of the object a reference holds (its ``BuildTypeName``): its type, a string's
    first 31 characters after it; cut to 127 characters, as SOS's buffer cuts it. A value that is
    no object fails at SOS's first step it fails: misaligned, unreadable, a zero MethodTable (each
    quoted as SOS's exception text), or a MethodTable the runtime cannot name (``<error>``)."""
    runtime = ctx.runtime
    if address & 7:
        return f"<invalid object: 'Object {_p(address)} is misaligned.'>"
    try:
        mt = method_table_of(runtime.target, address)
        if mt is None:
            return f"<invalid object: 'Failed to read memory at Object {address:016x}.'>"
        if mt == 0:
            return f"<invalid object: 'Object {address:016x} has a corrupt method table.'>"
        data = runtime.method_table_data(mt)
        if data is None:
            return "<error>"
        name = runtime.types.name_of(mt)
        if mt == runtime.types.string_mt:
            return safe_line(f'{name}: "{string_text(runtime.target, address, 31)}"')[:127]
        if data.component_size and name.endswith("]"):
            name = re.sub(r"\[,*\]$", "[]", name)
        return safe_line(name)[:127]
    except SosError as e:
        return f"<invalid object: '{safe_line(str(e))}'>"


def _native_rows(ctx: CommandContext, tid: int, stack: ClrStack) -> list[NativeFrame]:
    """clrstack -f's native frames (unwound from the thread and out of its managed frames)."""
    contexts = [f.registers for f in stack.frames if f.is_managed and f.registers]
    try:
        return native_frames(ctx.runtime, tid, contexts)
    except (SosError, OSError):
        return []


def _native_site(code: RawFrame) -> str:
    """A native frame as SOS's clrstack -f names it: module!symbol + displacement (decimal)."""
    if code.symbol:
        return f"{code.name}!{code.symbol} + {code.symbol_offset}" if code.symbol_offset else f"{code.name}!{code.symbol}"
    return f"{code.name} + {code.offset:#x}"


def _thread_sp_ip(ctx: CommandContext, tid: int) -> tuple[int | None, int | None]:
    try:
        regs = ctx.runtime.target.registers(tid)
    except (SosError, OSError):
        return None, None
    return regs.get("rsp", regs.get("sp")), regs.get("rip", regs.get("pc"))


def _thread_ip(ctx: CommandContext, tid: int) -> int | None:
    return _thread_sp_ip(ctx, tid)[1]


MODULES_WITHOUT_PDB = "sourcelines.missing"  # Session.settings key: module -> name, frames without lines


def report_missing_pdbs(ctx: CommandContext, lines: SourceLines, missing: list[PdbLookup]) -> None:
    """Remember the modules whose frames had no source lines for want of a PDB. SOS's commands
    print nothing about them, so neither do ours: sosstatus names them (and setsymbolserver
    -directory is where to point sosext at their PDBs)."""
    known: dict[int, str] = ctx.session.settings.setdefault(MODULES_WITHOUT_PDB, {})
    for m in missing:
        known.setdefault(m.module, m.module_name)


def call_site(ctx: CommandContext, f: ClrStackFrame, full: bool = False) -> str:
    """The Call Site column: a method, or a runtime Frame with its method."""
    runtime = ctx.runtime
    if not f.is_managed:
        text = f"[{f.frame_name}: {_lp(f.frame_address)}] "
        if f.method_name and full and f.method_desc:
            text += _module_prefix(ctx, f.method_desc)
        return text + f.method_name
    if not f.method_desc:
        return "<unknown>"
    if not f.method_name:
        return "<unknown>"
    if not full:
        return f.method_name
    text = _module_prefix(ctx, f.method_desc) + f.method_name
    start = runtime.method_code_start(f.method_desc, f.ip)
    if start is not None and f.ip != start:
        text += f" + {printf_d(f.ip - start)}"
    return text



def _module_prefix(ctx: CommandContext, md: int) -> str:
    module = ctx.runtime.method_module(md)
    name = module_file_name(ctx.runtime, module) if module is not None else ""
    return f"{name}!" if name else ""


def _value_text(v: FrameValue) -> str:
    if v.read_failed:
        return "<unable to retrieve data>"
    n = v.value
    if n is None:
        return "<no data>"
    return f"0x{p16(n)}"


def _args_and_locals(ctx: CommandContext, f: ClrStackFrame, params: bool, local_vars: bool) -> None:
    out = ctx.out
    if f.is_managed and not f.arguments and not f.locals and not ctx.runtime.has_gc_heap:
        out.line(f"    {NOT_IN_TRIAGE_DUMP}")
    if params and f.arguments:
        out.line("    PARAMETERS:")
        printed_location = False  # SOS never resets this between parameters
        for v in f.arguments:
            text = "        "
            if v.name:
                text += f"{v.name} "
            if v.in_register:
                text += "(<CLR reg>) "
                printed_location = True
            elif v.location is not None:
                text += f"(0x{_p(v.location)}) "
                printed_location = True
            if v.name or printed_location:
                text += "= "
            out.line(text + _value_text(v))
    if local_vars and f.locals:
        out.line("    LOCALS:")
        for v in f.locals:
            text = "        "
            if v.in_register:
                text += "<CLR reg> = "
            elif v.location is not None:
                text += f"0x{_p(v.location)} = "
            out.line(text + _value_text(v))
    out.line()


def _registers(ctx: CommandContext, regs: dict[str, int], arch: str) -> None:
    out = ctx.out
    if arch == "x86_64":
        rows = (("rsp", "rbp", "rip"), ("rax", "rbx", "rcx"), ("rdx", "rsi", "rdi"), ("r8", "r9", "r10"),
                ("r11", "r12", "r13"), ("r14", "r15"))
        for row in rows:
            out.line("    " + " ".join(f"{r:>3}={p16(regs.get(r, 0))}" for r in row))
        return
    line = "   "
    for i in range(29):
        line += (" " if i < 10 else "") + f" x{i}={regs.get(f'x{i}', 0):016x}"
        if i % 3 == 2:
            out.line(line)
            line = "   "
    out.line(line + f"  fp={regs.get('fp', 0):016x}")
    out.line(f"     lr={regs.get('lr', 0):016x}  sp={regs.get('sp', 0):016x}  pc={regs.get('pc', 0):016x}")


# -- pe / printexception -----------------------------------------------------------------------


@register
class PrintException(Command):
    names = ("pe", "printexception", "PrintException")
    summary = "Show an exception object: type, message, inner exception, stack trace, HResult."
    usage = "pe [-nested] [<exception object>]"
    details = """\
Without an address, shows the last exception the current thread threw. The stack trace is
the one the runtime recorded while the exception propagated: stack pointer, instruction
pointer and module!method+offset per frame.

Examples:
  pe
  pe 00007f3a1c0123d8
  pe -lines
    ...
        00007FA9B1DFCBD0 00007FB5ACC94DB7 SosextDebuggee.dll!DebuggeeHost.SourceScenario.SourceThrowInner()+0x67 [/src/SourceScenario.cs @ 104]
  pe -nested"""
    options = (
        Option("-nested", "also show the current thread's nested exceptions"),
        Option("-lines", "source file and line of each frame, from the modules' portable PDBs",
               aliases=("-l",)),
        Option("-ccw", "the argument is a COM callable wrapper (Windows only; not supported)"),
    )
    positionals = (Positional("object", "address of an exception object"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        if args.ccw:
            raise SosError("pe -ccw is not supported by sosext (COM interop exists only on Windows)")
        self.lines = args.lines
        self.missing: list[PdbLookup] = []
        try:
            self._run(ctx, args)
        finally:
            if self.lines:
                report_missing_pdbs(ctx, source_lines(ctx.runtime), self.missing)

    def _run(self, ctx: CommandContext, args: Parsed) -> None:
        runtime = ctx.runtime
        cur = current_thread(ctx)
        thread = thread_by_os_id(runtime, cur.tid) if cur is not None else None
        if args.object is None:
            if thread is None:
                ctx.out.line("The current thread is unmanaged")
                return
            if not thread.last_exception:
                ctx.out.line("There is no current managed exception on this thread")
            else:
                self._print(ctx, thread.last_exception)
        else:
            try:
                address = parse_address(args.object)
            except UsageError:
                address = 0
            if not address:
                raise SosError(f"Invalid exception object {args.object}")
            c = classifier(runtime).classify(address) if runtime.has_gc_heap else None
            if c is not None and not c.is_object:
                # SOS's answer, a line and no failure; what the address is instead goes to --json.
                line = f"Invalid exception object: {p16(address)}"
                ctx.out.field("message", line, line)
                desc = c.description()
                if desc:
                    ctx.out.field("address_is", f"{desc}{c.hint()}")
                return
            self._print(ctx, address)
        if thread is not None and thread.first_nested_exception:
            if not args.nested:
                ctx.out.line("There are nested exceptions on this thread. Run with -nested for details")
                return
            nested = thread.first_nested_exception
            seen: set[int] = set()
            while nested and nested not in seen:
                seen.add(nested)
                pair = runtime.nested_exception(nested)
                if pair is None:
                    ctx.out.line(f"Error retrieving nested exception info {_p(nested)}")
                    return
                ctx.out.line()
                ctx.out.line("Nested exception " + "-" * 61)
                self._print(ctx, pair[0])
                nested = pair[1]

    def _print(self, ctx: CommandContext, address: int) -> None:
        try:
            info = read_exception(ctx.runtime, address)
        except (NotAnException, InvalidExceptionObject) as e:
            # SOS's answer for an address that holds no exception: a line, no failure.
            ctx.out.field("message", str(e), str(e))
            return
        write_exception(ctx, info, lines=self.lines, missing=self.missing)


def write_exception(ctx: CommandContext, e: ClrExceptionInfo, *, lines: bool = False,
                    missing: list[PdbLookup] | None = None) -> None:
    out = ctx.out
    out.record_line(f"Exception object: {_lp(e.address)}")
    out.record_line(f"Exception type:   {e.type_name or '<Unknown>'}")
    out.record_line(f"Message:          {e.message if e.message is not None else '<none>'}")
    if e.inner:
        if e.inner_type is not None:
            out.record_line(f"InnerException:   {e.inner_type}, Use printexception {_p(e.inner)} to see more.")
        else:
            out.record_line("InnerException:   <invalid MethodTable of inner exception>")
    else:
        out.record_line("InnerException:   <none>")
    out.record_line("StackTrace (generated):")
    if e.stack_trace_state is StackTraceState.NONE:
        out.record_line("<none>")
    elif e.stack_trace_state is StackTraceState.NOT_AVAILABLE:
        out.record_line("<Not Available>")
    elif e.stack_trace_state is StackTraceState.UNDECIPHERABLE:
        out.record_line("Unable to decipher generated stack trace")
    else:
        out.record_line("    SP               IP               Function")
        frames = out.table("stack_trace", Cells((), ()), ("exception", "sp", "ip", "function"))
        for f in e.frames:
            where = f"{f.module or 'UNKNOWN'}!{f.method_name or 'UNKNOWN'}"
            if f.offset:
                where += f"+{f.offset:#x}"
            if lines:
                # Every recorded IP is a return address (or, after a fault, one past the instruction).
                loc = source_lines(ctx.runtime).location(f.ip, f.method_desc, return_address=True,
                                                         missing=None if missing is None else missing.append)
                if loc is not None:
                    where += f" [{loc.path} @ {loc.line}]"
            frames.row(f"    {_p(f.sp)} {_p(f.ip)} {where}",
                       data=(Address(e.address), Address(f.sp), Address(f.ip), where))
        out.record_line()
    if e.stack_trace_string is not None:
        out.record_line(f"StackTraceString: {e.stack_trace_string}")
        out.record_line()
    else:
        out.record_line("StackTraceString: <none>")
    out.record_line(f"HResult: {e.hresult:x}")


# -- threadpool --------------------------------------------------------------------------------


@register
class ThreadPoolCommand(Command):
    names = ("threadpool", "ThreadPool")
    summary = "Show the thread pool: CPU utilization, worker counts and limits."
    usage = "threadpool [-wi] [-stat] [-why]"
    details = """\
Reads the managed thread pool (System.Threading.PortableThreadPool, .NET 6+) the way
SOS does: its CPU utilization, worker thread counts and limits. Older runtimes answer
through the DAC's thread-pool data. -wi lists the queued work items (threadpoolqueue tells
more about each), -stat counts them by type as dumpheap -stat does. -ti (alias -hc) adds
the hill climbing log: each time the pool's thread-count goal moved, oldest first, with the
time in seconds before the last entry, the step (Warmup, ClimbingMove, Starvation …), the new
goal, the samples it rested on and the measured throughput (work items/s); nothing when
the log is empty. Where SOS can only say "Failed to obtain ThreadPool data.", -why adds one
line saying why (SOS prints no such line; at a terminal, a "Next:" line points to -why).

Examples:
  threadpool
  threadpool -ti
    ...
    Hill Climbing Log:
          Time Transition            #New Threads       #Samples Throughput
         -3.80 Initializing                     2              0 0.00
         -3.02 Warmup                           3              0 0.01
  threadpool -why"""
    options = (
        Option("-ti", "the hill climbing log (why the pool changed its thread count)", aliases=("-hc",)),
        Option("-wi", "the queued work items (as threadpoolqueue finds them)"),
        Option("-stat", "statistics of the queued work items, as dumpheap -stat", aliases=("-summary",)),
        Option("-why", "when the pool cannot be read, a line saying why (SOS prints none)"),
    )

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        pool = self._pool(ctx, args.why)
        if args.ti and pool is not None:
            self._hill_climbing(ctx, pool)
        if args.wi or args.stat:
            self._work_items(ctx, args.wi, args.stat)

    @staticmethod
    def _work_items(ctx: CommandContext, listing: bool, stats: bool) -> None:
        """SOS's -wi (Queue, Object, Type per item) and -stat (a dumpheap -stat table of them,
        or "No queued work items.")."""
        from ..clr.features.workitems import queued_work_items
        from .heap import write_stats

        items = queued_work_items(ctx.runtime)
        heap = ctx.heap
        if listing and items:
            rows = ctx.out.table("work_items", Cells((), ()), ("queue", "object", "type"))
            ctx.out.line(f"{'Queue':<17} {'Object':<16} Type")
            for w in items:
                # SOS labels a worker's local queue "[Global]" too.
                rows.row(f"{'[Global]':<17} {w.address:<16x} {w.type_name}",
                         data=("local" if w.is_local else "global", Address(w.address), w.type_name))
        if not stats:
            return
        if not items:
            ctx.out.line("No queued work items.")
            return
        ix = heap.index(ctx.progress)
        per_mt: dict[int, list[int]] = {}
        for w in items:
            i = ix.find(w.address)
            mt = method_table_of(ctx.runtime.target, w.address)
            if i is None or mt is None:
                continue
            entry = per_mt.setdefault(mt, [0, 0])
            entry[0] += 1
            entry[1] += ix.size_of(i)
        order = sorted(per_mt.items(), key=lambda kv: kv[1][1])  # ascending total size, ties in first-seen order
        write_stats(ctx, heap, [(mt, c, t) for mt, (c, t) in order])

    @staticmethod
    def _hill_climbing(ctx: CommandContext, pool: ClrThreadPool) -> None:
        """SOS's "Hill Climbing Log:" table; nothing when the log is empty."""
        from ..clr.features.threadpool import TRANSITIONS, read_hill_climbing_log

        out = ctx.out
        if pool.kind == "Windows":
            out.record_line("Hill Climbing Log is not supported by the Windows thread pool.")
            out.record_line()
            return
        log = read_hill_climbing_log(ctx.runtime)
        if not log:
            return
        width = max(map(len, TRANSITIONS))  # SOS sizes the column to its enum's longest name
        out.record_line("Hill Climbing Log:")
        out.line(f"{'Time':>10} {'Transition':<{width}} {'#New Threads':>14} {'#Samples':>14} Throughput")
        rows = out.table("hill_climbing", Cells((), ()),
                         ("seconds", "transition", "new_threads", "samples", "throughput"))
        end = log[-1].tick_count
        for e in log:
            ms = (e.tick_count - end + 2**31) % 2**32 - 2**31  # an int subtraction, as SOS's wraps
            seconds = dotnet_fixed2(ms / 1000.0)
            throughput = dotnet_fixed2(e.throughput, single=True)
            rows.row(f"{seconds:>10} {e.transition_name:<{width}} {count(e.new_thread_count):>14} "
                     f"{count(e.sample_count):>14} {throughput}",
                     data=(ms / 1000.0, e.transition_name, e.new_thread_count, e.sample_count, e.throughput))
        out.record_line()

    @staticmethod
    def _pool(ctx: CommandContext, why: bool) -> ClrThreadPool | None:
        pool = read_threadpool_or_reason(ctx.runtime)
        out = ctx.out
        if isinstance(pool, str):
            # SOS's line; -why then says why, which a bare failure leaves the user guessing.
            out.record_line("Failed to obtain ThreadPool data.")
            if why:
                out.record_line(f"Why: {pool}.")
            else:  # at a terminal only: piped, the output stays SOS's one line
                hint(out, "threadpool -why says why the thread pool could not be read")
            return None
        out.record_line(f"Using the {pool.kind} thread pool.")
        out.record_line()
        if pool.kind == "Windows":
            out.record_line(f"{'Thread count:':<17} {pool.windows_thread_count}")
        else:
            for label, value in (("CPU utilization:", f"{pool.cpu_utilization}%"),
                                 ("Workers Total:", pool.workers_total), ("Workers Running:", pool.workers_running),
                                 ("Workers Idle:", pool.workers_idle), ("Worker Min Limit:", pool.min_workers),
                                 ("Worker Max Limit:", pool.max_workers)):
                out.record_line(f"{label:<17} {value}")
        out.record_line()
        return pool


# -- ip2md -------------------------------------------------------------------------------------


@register
class IP2MD(Command):
    names = ("ip2md", "IP2MD")
    summary = "Show the method whose code holds an address: its MethodDesc, as dumpmd, and source line."
    usage = "ip2md <code address>"
    details = """\
The address is an instruction address inside JIT-compiled or precompiled code (an IP column
of clrstack or pe). Prints the MethodDesc as dumpmd does, then the source file and line of
that instruction when the module's portable PDB is found ("Current CodeAddr" is where the code
version holding the address starts, as SOS asks the runtime for it). An IP taken from clrstack is a
return address: subtract 1 to name the call's own line.

Example:
  ip2md 7fb5acc94ecd
    MethodDesc:   00007fb5acd4a6d8
    Method Name:          DebuggeeHost.SourceScenario.SourceInner(Int32)
    ...
    Source file:  /src/SourceScenario.cs @ 74"""
    positionals = (Positional("ip", "the code address, hex"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        from .types import DumpMD

        if args.ip is None:
            raise UsageError("Missing IP address (usage: ip2md <code address>)")
        try:
            ip = parse_address(args.ip)
        except UsageError:
            ip = 0
        if not ip:
            raise SosError(f"{args.ip} is not IP")  # SOS's words (a failure there too)
        rt = ctx.runtime
        md = rt.method_desc_at(ip) or 0
        if not md:
            raise SosError("Failed to request MethodData, not in JIT code range")
        ctx.out.record_line(f"MethodDesc:   {p16(md)}")
        DumpMD.show(ctx, md, ip)
        missing: list[PdbLookup] = []
        lines = source_lines(rt)
        loc = lines.location(ip, md, return_address=False, missing=missing.append)
        if loc is not None:
            ctx.out.record_line(f"Source file:  {loc.path} @ {loc.line}")
        report_missing_pdbs(ctx, lines, missing)
