"""dotnet-dump's host commands about the target itself: ``modules`` (the native and managed
files mapped into it) and ``registers`` (the current thread's registers).

In LLDB and GDB the debugger's own commands show the same (image list, register read;
info sharedlibrary, info registers); these exist so SOS's scripts and habits work in the
CLI, and under ``sos <command>`` in the debuggers.
"""
from __future__ import annotations

from ..errors import SosError
from ..render.output import Address
from ..render.table import Cells
from ..render.text import safe_line
from .base import Command, Option, Parsed, register
from .context import CommandContext
from .threads import current_thread

# dotnet-dump's x86-64 layout: the segment registers (4 digits) and eflags (8), then the
# general registers in their CONTEXT order and rip (16), upper case. A register the host does not
# give (LLDB names the flags rflags, GDB eflags; only the core notes hold ds..gs) prints as 0.
_X64_LAYOUT = (("cs", 4), ("ds", 4), ("es", 4), ("fs", 4), ("gs", 4), ("ss", 4), ("eflags", 8),
               *((n, 16) for n in ("rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10",
                                   "r11", "r12", "r13", "r14", "r15", "rip")))
_ALIASES = {"rflags": "eflags"}
# AArch64: the kernel's user_pt_regs (what an arm64 core's NT_PRSTATUS holds), x29 and x30
# being the frame pointer and the link register.
_ORDER_AARCH64 = tuple(f"x{i}" for i in range(31)) + ("sp", "pc", "pstate")


@register
class Modules(Command):
    names = ("modules", "lm")
    summary = "List the files mapped into the target: base address, size and path (dotnet-dump's modules)."
    usage = "modules [-v]"
    details = """\
One row per file the target maps (native libraries and managed assemblies): its lowest
address, the span of its mappings and its path. -v adds each file's GNU build id.

Examples:
  modules
  modules -v"""
    options = (Option("-v", "also the build id of each file", aliases=("--verbose",), dest="verbose"),)
    needs_runtime = False

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        rows = ctx.out.table("modules", Cells((), ()), ("base", "size", "path", "build_id"))
        for m in sorted(ctx.session.target().modules(), key=lambda m: m.base):
            build_id = m.build_id.hex() if m.build_id else None
            rows.row(f"{m.base:016x} {m.size:08x} {safe_line(m.path)}",
                     data=(Address(m.base), m.size, m.path, build_id))
            if args.verbose:
                ctx.out.line(f"    BuildId: {build_id or '<none>'}")


@register
class Registers(Command):
    names = ("registers",)
    summary = "Show the current thread's registers (dotnet-dump's registers)."
    usage = "registers"
    details = """\
The registers of the current thread (the debugger's selected thread; in the CLI the one
chosen with setthread), one "name = 0x<value>" line each, as dotnet-dump prints them on x86-64:
cs, ds, es, fs, gs, ss, eflags, then the general-purpose registers in the CPU context's order
and rip, in upper case. (dotnet-dump itself swaps r8 and r9 and shows eflags as 0 on Linux
cores; sosext prints the values the core holds, as LLDB and GDB do.)
On an AArch64 target (an arm64 core): x0-x30 (x29 is the frame pointer, x30 the link
register), sp, pc and pstate, under the same names in every host.

Example:
  registers"""
    needs_runtime = False

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        thread = current_thread(ctx)
        if thread is None:
            raise SosError("the target has no threads")
        target = ctx.session.target()
        regs = {_ALIASES.get(n, n): v for n, v in target.registers(thread.tid).items()}
        rows = ctx.out.table("registers", Cells((), ()), ("name", "value"))
        if getattr(target, "arch", "x86_64") == "aarch64":
            for n in (n for n in _ORDER_AARCH64 if n in regs):
                rows.row(f"{n} = 0x{regs[n]:016x}", data=(n, regs[n]))
            return
        for n, width in _X64_LAYOUT:
            value = regs.get(n, 0)
            rows.row(f"{n} = 0x{value:0{width}X}", data=(n, value))
