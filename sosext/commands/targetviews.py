"""dotnet-dump's host commands about the target itself: ``modules`` (the native and managed
files mapped into it) and ``registers`` (the current thread's registers).

In LLDB and GDB the debugger's own commands show the same (image list, register read;
info sharedlibrary, info registers); these exist so SOS's scripts and habits work in the
CLI, and under ``sos <command>`` in the debuggers.
"""
from __future__ import annotations

from typing import Any

from ..errors import SosError
from ..render.output import Address
from ..render.table import Cells
from ..render.text import safe_line
from ..targets.base import Module
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
    usage = "modules [-v] [-mappings]"
    details = """\
As dotnet-dump lists them: one row per file the target maps (native libraries and managed
assemblies), at the address of its first image (the first mapping of the file's start), in
upper-case hex, with a PE file's SizeOfImage or an ELF file's span up to the end of its last
mapping (cut at the next file's address where they overlap), then "Total image size:" in
bytes. The dynamic loader and /dev files are left out, as dotnet-dump does. -mappings lists
instead every image of each file (the runtime maps a managed assembly twice: flat, and as a
loaded image) with the span of its mappings; -v adds each file's GNU build id.

Examples:
  modules
  modules -v
  modules -mappings"""
    options = (Option("-v", "also the build id of each file", aliases=("--verbose",), dest="verbose"),
               Option("-mappings", "every image of each file, in lower case (sosext's listing; dotnet-dump "
                                   "has none)", dest="mappings"))
    needs_runtime = False

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        target = ctx.session.target()
        mods = sorted(target.modules(), key=lambda m: m.base)
        rows = ctx.out.table("modules", Cells((), ()), ("base", "size", "path", "build_id"))
        if args.mappings:
            for m in mods:
                self._row(ctx, rows, f"{m.base:016x} {m.size:08x}", m, m.size, args.verbose)
            return
        files = _files(target, mods)
        sizes = [_image_size(target, m) for m in files]
        total = 0
        for i, (m, size) in enumerate(zip(files, sizes)):
            if not size:
                continue  # dotnet-dump counts no file without a size
            if i + 1 < len(files) and m.base + size > files[i + 1].base:
                size = files[i + 1].base - m.base  # as dotnet-dump cuts an image that overlaps the next
            total += size
            self._row(ctx, rows, f"{m.base:016X} {size:08X}", m, size, args.verbose)
        ctx.out.line(f"Total image size: {total}")

    @staticmethod
    def _row(ctx: CommandContext, rows: Any, cells: str, m: Module, size: int, verbose: bool) -> None:
        build_id = m.build_id.hex() if m.build_id else None
        rows.row(f"{cells} {safe_line(m.path)}", data=(Address(m.base), size, m.path, build_id))
        if verbose:
            ctx.out.line(f"    BuildId: {build_id or '<none>'}")


# The auxiliary vector's entry for the dynamic loader's base address.
_AT_BASE = 7


def _files(target: Any, mods: list[Module]) -> list[Module]:
    """One Module per file as dotnet-dump (ClrMD's core reader) counts them, by address: at the
    file's first image (its first mapping of file offset 0), spanning to the end of its last
    mapping; without the dynamic loader (the image at the auxiliary vector's AT_BASE, or a
    ld-linux file where the target has no auxiliary vector) and /dev files, whose mappings
    overlap real modules'. A core's NT_FILE also names the assemblies the runtime loaded from
    bytes (createdump writes their bare file names), which dotnet-dump lists too."""
    core = getattr(target, "core", None)
    interpreter = dict(getattr(core, "auxv", None) or ()).get(_AT_BASE)
    mappings = getattr(core, "file_mappings", None)
    spans = ([(f.start, f.end, f.path, f.offset) for f in mappings] if mappings is not None
             else [(m.base, m.base + m.size, m.path, 0) for m in mods])
    base: dict[str, int] = {}
    low: dict[str, int] = {}
    ends: dict[str, int] = {}
    for start, end, path, offset in sorted(spans):
        path = path.removesuffix(" (deleted)")
        if offset == 0:
            base.setdefault(path, start)
        low.setdefault(path, start)
        ends[path] = max(ends.get(path, 0), end)
    by_path = {m.path: m for m in mods}
    out = []
    for path, lowest in low.items():
        start = base.get(path, lowest)
        name = path.rsplit("/", 1)[-1]
        if path.startswith("/dev") or start == interpreter or (interpreter is None and name.startswith("ld-linux")):
            continue
        known = by_path.get(path)
        out.append(Module(name=name, path=path, base=start, size=ends[path] - start,
                          build_id=known.build_id if known is not None else None))
    return sorted(out, key=lambda m: m.base)


def _image_size(target: Any, m: Module) -> int:
    """As ClrMD sizes an image: an ELF file's span of mappings, a PE image's SizeOfImage (its
    optional header, read at the image's base); 0 for any other file (a shared-memory file),
    which dotnet-dump then leaves out."""
    head = bytes(target.read_partial(m.base, 0x40))
    if head[:4] == b"\x7fELF":
        return m.size
    if len(head) < 0x40 or head[:2] != b"MZ":
        return 0
    pe = m.base + int.from_bytes(head[0x3C:0x40], "little")
    # "PE\0\0", the 20-byte file header, then the optional header: SizeOfImage at +56.
    nt = bytes(target.read_partial(pe, 24 + 60))
    if len(nt) < 24 + 60 or nt[:4] != b"PE\0\0":
        return 0
    return int.from_bytes(nt[24 + 56:24 + 60], "little")


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
