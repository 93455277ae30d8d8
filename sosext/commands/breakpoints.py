"""bpmd: breakpoints on managed methods (stoponcatch: see sos_names.WHY_NOT).

The breakpoints are the host debugger's own (LLDB's, GDB's); the model finds where a
method's code is, or watches the JIT for it (clr/code/breakpoints.py).
"""
from __future__ import annotations

from ..clr.code.breakpoints import (BreakRequest, MethodBreakpoint, MethodMatch, bpmd_state, is_ready_to_run, method_by_desc,
                               method_tokens)
from ..errors import SosError, UsageError
from ..render.numbers import p16
from ..render.text import safe_line as escape
from .base import Command, Option, Parsed, Positional, parse_address, parse_count, register
from .context import CommandContext

USAGE = ("bpmd [-nofuturemodule] <module name> <Namespace.Type.Method> [<IL offset>] | bpmd <file>:<line> | "
         "bpmd -md <MethodDesc> | bpmd -list | bpmd -clear <n> | bpmd -clearall")


@register
class Bpmd(Command):
    names = ("bpmd",)
    summary = "Break when a managed method (or source line) runs: now if it is JIT-compiled, else when the JIT compiles it."
    usage = USAGE
    details = """\
Sets a breakpoint of the debugger (LLDB or GDB, live process only) at the start of the
method's native code, or at the code of an IL offset (third argument) or of a source line
(<file>:<line>, through the module's portable PDB and the JIT's IL-to-native map). A method
not JIT-compiled yet is pending: sosext watches the JIT's compileMethod (a breakpoint of its
own that lets the process run on) and sets the method's breakpoint as soon as its code
exists; later versions (tiered compilation) get one too. A module not loaded yet, or a
runtime not loaded yet (at `process launch -s` or GDB's `starti`), is pending too: the
method is matched by name when the JIT compiles it (-nofuturemodule: only modules loaded
now). The process stops with the debugger's breakpoint stop reason; clrstack names the
method. -list shows bpmd's breakpoints, -clear n removes one, -clearall all of them.

Examples:
  bpmd MyApp.dll MyApp.Cache.Evict
  bpmd MyApp.dll MyApp.Cache.Evict 0x1c
  bpmd Cache.cs:42
  bpmd -md 00007f3a14005678
  bpmd -list"""
    options = (Option("-md", "a MethodDesc", parse_address, "MethodDesc", dest="md"),
               Option("-list", "list bpmd's breakpoints", dest="list"),
               Option("-clear", "remove breakpoint n (as -list numbers it)", parse_count, "n", dest="clear"),
               Option("-clearall", "remove every bpmd breakpoint", dest="clearall"),
               Option("-nofuturemodule", "only modules loaded now (no pending breakpoint for modules loaded later)",
                      dest="nofuturemodule"))
    positionals = (Positional("words", "module, method and IL offset, or file:line", rest=True),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        session = ctx.session
        state = bpmd_state(session.target(), session.runtime_for)
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
            ctx.out.line(escape(f"Cleared breakpoint {e.number} ({e.method.name if e.method else e.describe()})"))
            return
        if args.md is not None:
            if args.words:
                raise UsageError(f"usage: {USAGE}")
            for m in [method_by_desc(ctx.runtime, args.md)]:
                self._set(ctx, state, m, 0)
            return
        request = _request(args.words)
        found = self._loaded(ctx, state, request, args.nofuturemodule)
        for m, il in found:
            self._set(ctx, state, m, il)
        if not found:
            e = state.add_request(request)
            state.arm_loaded_precompiled(e)
            for code in e.code:
                ctx.out.line(escape(f"Setting breakpoint: breakpoint set --address 0x{code:016X} [{e.describe()}]"))
            ctx.out.line("Adding pending breakpoints...")
            rt = state.runtime()
            if rt is not None and request.module and e.pending:
                _note_ready_to_run(ctx, [m.address for m in rt.catalog.find(request.module)])

    @staticmethod
    def _loaded(ctx: CommandContext, state, request: BreakRequest,  # type: ignore[no-untyped-def]
                no_future: bool) -> list[tuple[MethodMatch, int]]:
        """What the request names in the modules loaded now; errors where it can never match."""
        rt = state.runtime()
        if rt is not None and request.module:
            mods = rt.catalog.find(request.module)
            if not mods and no_future:
                raise SosError(f"Failed to find module matching '{request.module}'.")
            if mods and not any(method_tokens(rt, m, request.method) for m in mods):
                raise SosError(f"No method '{request.method}' in {request.module}")
        found = state.resolve_loaded(request)
        if not found and no_future:
            raise SosError(f"No loaded method matches {request.describe()} (-nofuturemodule: modules loaded later "
                           f"are not searched)")
        if found and request.module:
            ctx.out.line(f"Found {len(found)} methods in module {p16(found[0][0].module_address)}...")
        return found

    @staticmethod
    def _set(ctx: CommandContext, state, m: MethodMatch, il_offset: int) -> None:  # type: ignore[no-untyped-def]
        out = ctx.out
        out.line(f"MethodDesc = {p16(m.method_desc)}")
        e = state.add(m, il_offset)
        if e.pending:
            out.line("Adding pending breakpoints...")
            _note_ready_to_run(ctx, [m.module_address])
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
            if e.method is None:
                out.line(escape(f"{e.number} - {e.describe()}, {where}"))
                continue
            out.line(escape(f"{e.number} - {e.describe()}, 0x{e.method.method_desc:x}, "
                            f"0x{e.method.token:08x}, {where}"))


def _note_ready_to_run(ctx: CommandContext, modules: list[int]) -> None:
    """A pending breakpoint in a ReadyToRun module may never fire: say why and what helps."""
    for address in modules:
        if is_ready_to_run(ctx.runtime, address):
            name = ctx.runtime.catalog.module(address).file_name
            ctx.out.line(escape(f"note: {name} is a ReadyToRun image: a method it holds precompiled runs without "
                                f"the JIT, and then this breakpoint never fires; start the process with "
                                f"DOTNET_ReadyToRun=0 to have every method JIT-compiled"))
            return


def _request(words: list[str]) -> BreakRequest:
    """``<file>:<line>`` or ``<module> <method> [<IL offset>]``, as SOS's bpmd reads them."""
    if len(words) == 1 and ":" in words[0]:
        source_file, _, line = words[0].rpartition(":")
        try:
            number = int(line, 10)
        except ValueError:
            raise SosError("Unable to parse line number") from None
        if number <= 0:
            raise SosError("Line number must be positive")
        return BreakRequest(source_file=source_file, line=number)
    if len(words) not in (2, 3):
        raise UsageError(f"usage: {USAGE}")
    il_offset = 0
    if len(words) == 3:
        try:
            il_offset = int(words[2], 0)
        except ValueError:
            raise UsageError(f"not an IL offset: {words[2]}") from None
        if not 0 <= il_offset < 1 << 31:
            raise UsageError(f"not an IL offset: {words[2]}")
    module, method = words[:2]
    if "." not in method.strip("."):
        raise SosError(f"'{method}' is not Namespace.Type.Method")
    return BreakRequest(module=module, method=method, il_offset=il_offset)
