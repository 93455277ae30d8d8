"""crashinfo: the crash a dump was written for, in SOS's layout."""
from __future__ import annotations

from ..clr.threads.crashinfo import CrashException, crash_info
from ..render.text import safe_line as escape
from .base import Command, Parsed, register
from .context import CommandContext

RULE = "-----------------------------------------------"


@register
class CrashInfo(Command):
    names = ("crashinfo",)
    summary = "The crash a dump was written for: reason, thread, runtime, and the exception."
    usage = "crashinfo"
    details = """\
SOS's layout: CrashReason, ThreadId, HResult, RuntimeType, RuntimeBaseAddress,
RuntimeVersion, Message, then the current exception, the crashing thread's exception and the
nested exceptions with their stack traces. A NativeAOT runtime leaves a triage JSON for this
(found through createdump's DIAGINFOHEADER exception record, as SOS does); a CoreCLR crash
dump (DOTNET_DbgEnableMiniDump) has none, so the record is built from the thread that took
the signal and its unhandled exception. A live process, or a dump not written at a crash,
has no crash info: the command says so in one line, as SOS does.

Example:
  crashinfo"""

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        info = crash_info(ctx.runtime)
        if info is None:
            ctx.out.line("No crash info to display")  # an answer, not an error: SOS prints it so
            return
        out = ctx.out
        out.field("crash_reason", info.reason_name, f"CrashReason:        {info.reason_name}")
        out.field("thread_id", info.thread_id, f"ThreadId:           {info.thread_id:04X}")
        out.field("hresult", info.hresult, f"HResult:            {info.hresult:04X}")
        out.field("runtime_type", info.runtime_type_name, f"RuntimeType:        {info.runtime_type_name}")
        out.field("runtime_base_address", f"0x{info.runtime_base:x}", f"RuntimeBaseAddress: {info.runtime_base:016X}")
        out.field("runtime_version", info.runtime_version, f"RuntimeVersion:     {escape(info.runtime_version)}")
        out.field("message", info.message, escape(f"Message:            {info.message}"))
        out.field("source", info.source)
        sections = (("** Current Exception **", [info.exception] if info.exception else []),
                    (f"** Thread {info.thread_id} Exception **", [info.exception] if info.exception else []),
                    ("** Nested Exceptions **", info.nested()))
        if out.structured:
            out.field("exception", _as_json(info.exception) if info.exception else None)
            return
        for title, exceptions in sections:
            out.line()
            out.line(title)
            out.line()
            for e in exceptions:
                out.line(RULE)
                _print(ctx, e, "")


def _print(ctx: CommandContext, e: CrashException, indent: str) -> None:
    out = ctx.out
    out.line(f"{indent}Exception object:   {e.address:016X}")
    out.line(escape(f"{indent}Exception type:     {e.type_name}"))
    out.line(f"{indent}HResult:            {e.hresult:08X}")
    out.line(escape(f"{indent}Message:            {e.message}"))
    if e.frames:
        out.line(f"{indent}StackTrace:")
        out.line(f"{indent}    IP               Function")
        for f in e.frames:
            out.line(escape(f"{indent}    {f.ip:016X} {f.module or '<unknown_module>'}!{f.method or '<unknown>'}"
                            f" + 0x{f.offset:X}"))
    if e.inner:
        out.line(f"{indent}InnerExceptions:")
        for i in e.inner:
            out.line(f"{indent}{RULE}")
            _print(ctx, i, indent + "    ")


def _as_json(e: CrashException) -> dict:
    return {"address": f"0x{e.address:x}", "type": e.type_name, "hresult": e.hresult, "message": e.message,
            "stack": [{"ip": f"0x{f.ip:x}", "module": f.module, "method": f.method, "offset": f.offset}
                      for f in e.frames],
            "inner": [_as_json(i) for i in e.inner]}
