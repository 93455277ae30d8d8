"""bpmd: breakpoints on managed methods (stoponcatch: see sos_names.WHY_NOT).

The breakpoints are the host debugger's own (LLDB's, GDB's); the model finds where a
method's code is, or watches the JIT for it (clr/breakpoints.py).
"""
from __future__ import annotations

from ..clr.breakpoints import MethodBreakpoint, MethodMatch, bpmd_state, find_methods, method_by_desc
from ..errors import SosError, UsageError
from ..render.numbers import p16
from ..render.text import safe_line as escape
from .base import Command, Option, Parsed, Positional, parse_address, parse_count, register
from .context import CommandContext

USAGE = "bpmd <module name> <Namespace.Type.Method> | bpmd -md <MethodDesc> | bpmd -list | bpmd -clear <n> | bpmd -clearall"


@register
class Bpmd(Command):
    names = ("bpmd",)
    summary = "Break when a managed method runs: now if it is JIT-compiled, else when the JIT compiles it."
    usage = USAGE
    details = """\
Sets a breakpoint of the debugger (LLDB or GDB, live process only) at the start of the
method's native code. A method not JIT-compiled yet is pending: sosext watches the JIT's
compileMethod (a breakpoint of its own that lets the process run on) and sets the method's
breakpoint as soon as its code exists; later versions (tiered compilation) get one too. The
process stops with the debugger's breakpoint stop reason; clrstack names the method.
-list shows bpmd's breakpoints, -clear n removes one, -clearall all of them.

Examples:
  bpmd MyApp.dll MyApp.Cache.Evict
  bpmd -md 00007f3a14005678
  bpmd -list"""
    options = (Option("-md", "a MethodDesc", parse_address, "MethodDesc", dest="md"),
               Option("-list", "list bpmd's breakpoints", dest="list"),
               Option("-clear", "remove breakpoint n (as -list numbers it)", parse_count, "n", dest="clear"),
               Option("-clearall", "remove every bpmd breakpoint", dest="clearall"),
               Option("-nofuturemodule", "accepted for SOS's habit (modules not loaded yet are not searched)",
                      dest="nofuturemodule"))
    positionals = (Positional("words", "module and method", rest=True),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        state = bpmd_state(ctx.runtime)
        state.host  # noqa: B018 - refuses a core or a host without breakpoints, in one line
        if args.list:
            self._list(ctx, state.entries)
            return
        if args.clearall:
            state.clear_all()
            ctx.out.line("All pending breakpoints cleared.")
            return
        if args.clear is not None:
            e = state.clear(args.clear)
            ctx.out.line(escape(f"Cleared breakpoint {e.number} ({e.method.name})"))
            return
        if args.md is not None:
            if args.words:
                raise UsageError(f"usage: {USAGE}")
            matches = [method_by_desc(ctx.runtime, args.md)]
        else:
            if len(args.words) != 2:
                raise UsageError(f"usage: {USAGE}")
            module, method = args.words
            if not ctx.runtime.catalog.find(module):
                raise SosError(f"Failed to find module matching '{module}'.")
            matches = find_methods(ctx.runtime, module, method)
            if not matches:
                raise SosError(f"No loaded method '{method}' in {module} (its type must be loaded)")
            ctx.out.line(f"Found {len(matches)} methods in module {p16(matches[0].module_address)}...")
        for m in matches:
            self._set(ctx, state, m)

    @staticmethod
    def _set(ctx: CommandContext, state, m: MethodMatch) -> None:  # type: ignore[no-untyped-def]
        out = ctx.out
        out.line(f"MethodDesc = {p16(m.method_desc)}")
        e = state.add(m)
        if e.pending:
            out.line("Adding pending breakpoints...")
            return
        for code in e.code:
            out.line(escape(f"Setting breakpoint: breakpoint set --address 0x{code:016X} [{m.name}]"))

    @staticmethod
    def _list(ctx: CommandContext, entries: list[MethodBreakpoint]) -> None:
        out = ctx.out
        out.line("!bpmd breakpoint list")
        out.line(" Breakpoint index - Location, MethodDesc, Method Token, Code")
        for e in entries:
            where = ", ".join(f"0x{c:x}" for c in e.code) or "pending"
            out.line(escape(f"{e.number} - {e.method.module}!{e.method.name}, 0x{e.method.method_desc:x}, "
                            f"0x{e.method.token:08x}, {where}"))
