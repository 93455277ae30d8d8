"""Stacks of every kind: dumpstack, eestack (raw stacks), parallelstacks/pstacks (a merged call
tree across threads) and clrma (crash analysis of the thread with the managed exception)."""
from __future__ import annotations

from ..clr.threads.exceptions import read_exception
from ..clr.threads.parallelstacks import CallNode, parallel_stacks
from ..interrupts import requested as interrupted
from ..clr.threads.rawstack import RawFrame, raw_stack
from ..clr.code.sourcelines import PdbLookup, source_lines
from ..clr.threads.stacks import NotManagedThread, walk_stack
from ..clr.threads.threads import ClrThread, clr_threads, faulting_thread, thread_by_os_id
from ..clr.typesystem.typenames import csharp_name
from ..errors import SosError
from ..render.output import Address
from ..render.table import Cells
from .base import Command, Option, Parsed, register
from .context import CommandContext
from .threads import current_thread, report_missing_pdbs, write_exception


def _where(f: RawFrame) -> str:
    if f.is_managed:
        return f"(MethodDesc {f.method_desc:016x} +{f.offset:#x} {f.name})"
    return f.where


def _thread_index(ctx: CommandContext, tid: int) -> int:
    return next((t.index for t in ctx.session.target().threads() if t.tid == tid), -1)


_RAW_TABLE = Cells((16, 16), (False, False))
_RAW_KEYS = ("os_thread_id", "slot", "return_address", "method_desc", "name", "offset", "callee")


def write_raw_stack(ctx: CommandContext, tid: int, managed_only: bool) -> None:
    out = ctx.out
    stack = raw_stack(ctx.runtime, tid)
    if stack.current is not None:
        out.line(f"Current frame: {_where(stack.current)}")
    rows = out.table("frames", _RAW_TABLE, _RAW_KEYS)
    if not out.structured:
        out.line("Child-SP         RetAddr          Caller, Callee")
    for f in stack.frames:
        if managed_only and not f.is_managed:
            continue
        calling = f", calling {_where(f.callee)}" if f.callee is not None else ""
        rows.row(f"{f.slot:016X}", f"{f.address:016x}", f"{_where(f)}{calling}",
                 data=(tid, Address(f.slot), Address(f.address), Address(f.method_desc) if f.method_desc else None,
                       f.name, f.offset, _where(f.callee) if f.callee is not None else None))


@register
class DumpStack(Command):
    names = ("dumpstack", "DumpStack")
    summary = "Show the raw stack of the current thread: every return address on it, managed and native."
    usage = "dumpstack [-EE] [-n]"
    details = """\
From the thread's stack pointer to the top of its stack, every slot that holds a return
address (a word pointing just past a call instruction, in a native module or in managed code)
is listed innermost first: the slot (Child-SP), the address, and either
(MethodDesc <md> +<offset> <method>) for managed code or <module> + <offset> for native code.
Stale return addresses of calls that already returned appear too, as in SOS: use clrstack for
the managed frames the runtime walks. -EE keeps only managed code; -n is accepted (no source
lines are shown here).

Example:
  dumpstack
    OS Thread Id: 0x2ee1 (8)
    Current frame: libc.so.6 + 0x98d36
    Child-SP         RetAddr          Caller, Callee
    00007FA9B25FDA10 00007fb5acc94ece (MethodDesc 00007fb5acd4a6d8 +0x3e System.Threading.Monitor.Wait(...))"""
    options = (
        Option("-EE", "only managed frames", dest="ee"),
        Option("-n", "no source lines (accepted; dumpstack shows none)"),
    )

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        cur = current_thread(ctx)
        if cur is None:
            raise SosError("the target has no threads")
        ctx.out.line(f"OS Thread Id: 0x{cur.tid:x} ({cur.index})")
        write_raw_stack(ctx, cur.tid, args.ee)


@register
class EEStack(Command):
    names = ("eestack", "EEStack")
    summary = "Run dumpstack on every thread of the target."
    usage = "eestack [-EE] [-short]"
    details = """\
One dumpstack per thread, each under a "Thread <n>" header (the debugger's thread number).
-EE keeps only managed frames; -short keeps only the threads with managed code on their stack
(a managed frame, or a runtime Thread object that is in cooperative mode).

Example:
  eestack -EE"""
    options = (
        Option("-EE", "only managed frames", dest="ee"),
        Option("-short", "only threads running or holding managed code"),
    )

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        out = ctx.out
        managed = {t.os_id: t for t in clr_threads(ctx.runtime) if t.os_id}
        for info in ctx.session.target().threads():
            if interrupted():
                out.line("<interrupted>")
                return
            if args.short:
                t = managed.get(info.tid)
                if t is None:
                    continue
                try:
                    if not any(f.is_managed for f in walk_stack(ctx.runtime, info.tid).frames) and not t.cooperative:
                        continue
                except SosError:
                    continue
            out.line("---------------------------------------------")
            out.line(f"Thread {info.index:3d}")
            out.line(f"OS Thread Id: 0x{info.tid:x} ({info.index})")
            try:
                write_raw_stack(ctx, info.tid, args.ee)
            except SosError as e:
                out.line(f"Unable to read the stack: {e}")


_PAD = 5  # dotnet-dump's count width and indent step


def pstacks_frame_text(method: str, declaring: str = "") -> str:
    """A frame as dotnet-dump's parallelstacks names it: the declaring type as ClrMD names it
    (`Task<System.__Canon>`), the method's name, each parameter's type without its namespace and
    generic arity (`System.Span`1<Byte>` -> `Span<Byte>`, `System.String[]` -> `String[]`), a
    ByRef kept. An explicit interface implementation keeps its interface in a plain type
    (`IOQueue.System.Threading.IThreadPoolWorkItem.Execute()`) and loses it in a generic one
    (`KestrelConnection<System.__Canon>.Execute()`), as dotnet-dump prints them; so does a
    generic method's (`TransportConnection.Get()` for `…IFeatureCollection.Get<TFeature>`), which
    ``declaring``, the declaring type's name, tells apart from the interface's."""
    cut = method.find("(")
    if cut < 0 or not method.endswith(")"):
        return method
    inner = method[cut + 1:-1]
    params = [] if not inner else [_short_parameter(p) for p in inner.split(", ")]
    head, depth, dot = method[:cut], 0, -1
    for i, c in enumerate(head):  # the last '.' outside an instantiation's [[...]] ends the type
        depth += (c == "[") - (c == "]")
        if c == "." and depth == 0:
            dot = i
    if dot > 0 and head[dot - 1] == ".":
        dot -= 1  # a constructor's name has its own dot (".ctor", ".cctor")
    name = head[dot + 1:]
    if name.endswith("]]"):
        # As ClrMD's parallelstacks takes a generic method's name: the name before the first
        # "[[" of the whole signature (which, in a generic type, is the type's own name).
        first = method.find("[[")
        name = method[method.rfind(".", 0, first) + 1:first]
        if declaring and head.startswith(declaring + "."):
            dot = len(declaring)
    # A dynamic method's (LCG's) type has no metadata: ClrMD names it nothing, and dotnet-dump
    # prints the method alone (`lambda_method1(Closure, Object, HttpContext)`).
    owner = _pstacks_owner(head[:dot]) if dot > 0 and head[:dot] != "DynamicClass" else ""
    return f"{owner}.{name}({', '.join(params)})" if owner else f"{name}({', '.join(params)})"


def _pstacks_owner(text: str) -> str:
    # A generic type's instantiation ends the type: what follows it ("].System.IDisposable")
    # is an explicit implementation's interface, which dotnet-dump's name leaves out.
    depth = 0
    for i, c in enumerate(text):
        depth += (c == "[") - (c == "]")
        if c == "]" and depth == 0 and i + 1 < len(text) and text[i + 1] == ".":
            return csharp_name(text[:i + 1])
    return csharp_name(text)


def _short_parameter(text: str) -> str:
    byref = text.endswith(" ByRef")
    if byref:
        text = text[:-len(" ByRef")]
    return _next_type(text, 0, len(text))[0] + (" ByRef" if byref else "")


def _without_namespace(text: str) -> str:
    return text[text.rfind(".") + 1:]


def _next_type(text: str, start: int, end: int) -> tuple[str, int]:
    """The short name of the type at text[start:end] up to its ',' (a generic's next argument),
    and where the next one starts. The closing '>'s stay on the last argument, as in SOS."""
    tick, comma = text.find("`", start, end), text.find(",", start, end)
    if tick < 0 and comma < 0:
        return _without_namespace(text[start:end]), end
    if comma < 0 or 0 <= tick < comma:
        name = _without_namespace(text[start:tick]) + "<"
        i = text.find("<", tick, end) + 1 or end
        while i < end:
            arg, i = _next_type(text, i, end)
            name += arg + ("," if i < end else "")
        return name, end
    return _without_namespace(text[start:comma]), comma + 1


def _render_tree(node: CallNode, depth: int, limit: int, emit) -> None:  # type: ignore[no-untyped-def]
    """dotnet-dump's parallelstacks layout: a branch's deeper frames first (innermost at the top),
    its thread ids on a ~~~~ line above the frame where they stop, each frame as its thread count
    right-aligned in 5 columns; a child indents one step only when fewer threads go through it."""
    align = " " * (_PAD * depth)

    def ids(tids: list[int]) -> str:
        shown = [f"{t:x}" for t in (tids if limit < 0 else tids[:limit])]
        return ",".join(shown) + ("..." if 0 <= limit < len(tids) else "")

    # As dotnet-dump: the threads that stop at a frame are named there only when it has at most
    # one callee; under a frame with several callees they are counted but not named.
    if node.stopped and len(node.children) <= 1:
        emit(f"{align} ~~~~ {ids(node.stopped)}", None)
    for child in sorted(node.children, key=lambda c: len(c.threads)):
        _render_tree(child, depth if len(child.threads) == len(node.threads) else depth + 1, limit, emit)
    emit(f"{align}{len(node.threads):{_PAD}d} {pstacks_frame_text(node.method, node.owner)}", (depth, node))


@register
class ParallelStacksCommand(Command):
    names = ("parallelstacks", "pstacks")
    summary = "Merge the managed stacks of all threads into one call tree, with thread counts."
    usage = "parallelstacks [-a]"
    details = """\
As dotnet-dump's parallelstacks: one block per outermost frame (a root), under a line of
underscores. Within a block the innermost frames come first, as in a stack: each line is a frame
with the number of threads through it, right-aligned in 5 columns; a ~~~~ line names, in hex, the
OS ids of the threads whose innermost managed frame is the frame below it (not under a frame
with two or more callees: there dotnet-dump counts those threads without naming them, and so
does sosext; `--json` lists them as `stopped`). Where fewer threads go
on into a callee than came through the caller, the callee's lines indent by 5. With -a every
thread id is listed; without it at most 4 per line, then "...". Roots come in the order of their
first thread (the runtime's thread list); parameter types are named without their namespace, as
dotnet-dump names them. (--json also counts the threads without managed frames.)

Example:
  pstacks
    ________________________________________________
               ~~~~ 666f,6670
                  2 System.Threading.Monitor.Wait(System.Object, Int32)
                  2 DebuggeeHost.Worker.WaitB()
               ~~~~ 666c,666d,666e
                  3 System.Threading.Monitor.Wait(System.Object, Int32)
                  3 DebuggeeHost.Worker.WaitA()
        5 DebuggeeHost.Worker.Run()
        5 System.Threading.Thread.StartCallback()

    ==> 5 threads with 1 roots"""
    options = (Option("-a", "list every thread id"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        ps = parallel_stacks(ctx.runtime)
        out = ctx.out
        rows = out.table("nodes", Cells((), ()), ("depth", "threads", "method", "os_thread_ids", "stopped"))

        def emit(text: str, frame: "tuple[int, CallNode] | None") -> None:
            if frame is None:
                if not out.structured:
                    out.line(text)
                return
            depth, node = frame
            rows.row(text, data=(depth, len(node.threads), node.method, [f"{t:x}" for t in node.threads],
                                 [f"{t:x}" for t in node.stopped]))

        out.line()
        for root in ps.root.children:
            out.line("________________________________________________")
            _render_tree(root, 0, -1 if args.a else 4, emit)
            out.line()
            out.line()
        out.field("threads", ps.thread_count, f"==> {ps.thread_count} threads with {len(ps.root.children)} roots")
        out.line()
        out.field("without_managed_frames", len(ps.skipped))


@register
class ClrMA(Command):
    names = ("clrma",)
    summary = "Crash analysis: the thread with the managed exception, the exception, its managed and native frames."
    usage = "clrma"
    details = """\
Picks the thread to analyse: in a crash dump the thread that took the signal (named on the
first line); otherwise the current thread when it has a managed exception, else the first
thread that has one. Shows that thread, the exception (type, message, HResult, inner
exception, the stack it was thrown on with source lines), the thread's managed frames now
(clrstack) and the native return addresses on its stack (as dumpstack finds them). With no
managed exception anywhere, says so and analyses the current thread's stacks.

Example:
  clrma
    Thread:       9 (OS thread id 0x666b)
    Exception object: 00007f69d98111f0
    Exception type:   DebuggeeHost.StackValuesException
    ..."""

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        out = ctx.out
        runtime = ctx.runtime
        cur = current_thread(ctx)
        chosen: ClrThread | None = None
        fault = faulting_thread(runtime)
        if fault is not None:
            # A crash dump: the thread that took the signal is the one to analyse.
            tid = fault[0]
            t = thread_by_os_id(runtime, tid)
            chosen = t if t is not None and t.last_exception else None
            out.field("signal", fault[1], f"Signal:       {fault[1]} on OS thread id 0x{tid:x}")
            if chosen is None:
                out.line("No managed exception on the faulting thread.")
        else:
            if cur is not None:
                t = thread_by_os_id(runtime, cur.tid)
                if t is not None and t.last_exception:
                    chosen = t
            if chosen is None:
                chosen = next((t for t in clr_threads(runtime) if t.os_id and t.last_exception), None)
            if chosen is None:
                out.line("No managed exception on any thread.")
                if cur is None:
                    return
                tid = cur.tid
            else:
                tid = chosen.os_id
        out.field("os_thread_id", tid, f"Thread:       {_thread_index(ctx, tid)} (OS thread id 0x{tid:x})")
        missing: list[PdbLookup] = []
        if chosen is not None:
            out.line()
            try:
                write_exception(ctx, read_exception(runtime, chosen.last_exception), lines=True, missing=missing)
            except SosError as e:
                out.line(f"Exception {chosen.last_exception:016x}: {e}")
        out.line()
        out.line("Managed frames:")
        managed = out.table("managed_frames", Cells((20, 16), (False, False)), ("sp", "ip", "method", "source"))
        try:
            stack = walk_stack(runtime, tid)
            lines = source_lines(runtime)
            for f in stack.frames:
                if not f.is_managed:
                    continue
                loc = lines.location(f.ip, f.method_desc, missing=missing.append) if f.method_desc else None
                where = f" [{loc.path} @ {loc.line}]" if loc is not None else ""
                managed.row(f"    {f.sp:016X}", f"{f.ip:016X}", f"{f.method_name or '<unknown>'}{where}",
                            data=(Address(f.sp), Address(f.ip), f.method_name,
                                  f"{loc.path}:{loc.line}" if loc is not None else None))
        except NotManagedThread:
            out.line("    <none: not a managed thread>")
        out.line()
        out.line("Native frames:")
        native_rows = out.table("native_frames", Cells((20, 16), (False, False)),
                                ("slot", "return_address", "module", "offset"))
        try:
            raw = raw_stack(runtime, tid)
            native = ([raw.current] if raw.current is not None and not raw.current.is_managed else []) + \
                [f for f in raw.frames if not f.is_managed]
            for f in native:
                slot = f"{f.slot:016X}" if f.slot else "(current)"
                native_rows.row(f"    {slot}", f"{f.address:016x}", f.where,
                                data=(Address(f.slot) if f.slot else None, Address(f.address), f.name, f.offset))
        except SosError as e:
            out.line(f"    <unreadable: {e}>")
        report_missing_pdbs(ctx, source_lines(runtime), missing)
