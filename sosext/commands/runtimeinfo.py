"""What runtime is there and what sosext uses for it: eeversion, runtimes, sosstatus, sosflush.

SOS prints these from the runtime module's version resource and its own state; sosext has
the same facts in the model (the runtime's ``@(#)Version`` marker, the mapped libcoreclr.so,
the DAC it chose and why) and in its settings (symbol directories, the index cache).
"""
from __future__ import annotations

import os
import sys

from ..version import VERSION as __version__
from ..clr.code.sourcelines import symbol_directories
from .threads import MODULES_WITHOUT_PDB
from ..render.json import emit_json
from ..errors import SosError
from ..render.text import safe_line as escape
from ..targets.elfcore import host_arch
from .base import Command, Option, Parsed, register
from .context import CommandContext


def _gc_mode(ctx: CommandContext) -> str:
    heap = ctx.heap
    if heap.is_server:
        return f"Server mode with {len(heap.subheaps)} gc heaps"
    return "Workstation mode"


@register
class EEVersion(Command):
    names = ("eeversion", "EEVersion")
    summary = "The runtime's version, its GC mode, and sosext's version."
    usage = "eeversion [-reader] [--json]"
    details = """\
As SOS: the runtime's file version (x.y.z.w: the build number is the patch release times 100
plus a revision), the version text its build embeds (with the source commit), the GC mode
(`Workstation mode` or `Server mode with N gc heaps`, then the server GC's DATAS mode as
`DATAS <n>`: 1 when it adapts the heap count to the application), "In plan phase of garbage
collection" when the process was stopped during a GC (its heap cannot be walked then) and the
extension's version.
-reader adds which runtime reader answers and why (the DAC, or the contracts reader:
docs/readers.md), a line SOS does not print (sosstatus shows it too).

Examples:
  eeversion
  eeversion -reader"""
    options = (Option("-reader", "a last line naming the runtime reader that answers and why (SOS prints none)"),
               Option("--json", "print the result as JSON", dest="json"))

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        rt = ctx.runtime
        info = rt.info
        marker = rt.version_marker()
        mode = _gc_mode(ctx)
        if args.json:
            emit_json(ctx.out, {"command": "eeversion", "version": info.version, "marker": marker,
                                "server_gc": ctx.heap.is_server, "gc_heaps": len(ctx.heap.subheaps),
                                "gc_in_progress": not ctx.heap.can_walk,
                                "sosext_version": __version__, "reader": rt.reader_name,
                                "reader_reason": rt.reader_reason})
            return
        ctx.out.line(info.version)
        if marker:
            ctx.out.line(escape(marker))
        ctx.out.line(mode)
        if ctx.heap.is_server:
            datas = rt.gc_dynamic_adaptation_mode()
            # SOS's line, its trailing space included; a GC without DATAS (the standalone
            # segments GC, libclrgc.so) reports -1 with S_FALSE, and SOS prints nothing.
            if datas is not None and datas >= 0:
                ctx.out.line(f"DATAS {datas} ")
        if not ctx.heap.can_walk:  # dumped during a GC: the heap cannot be walked now
            ctx.out.line("In plan phase of garbage collection")
        ctx.out.line(f"SOS Version: sosext {__version__} (Python {sys.version.split()[0]})")
        if args.reader:
            ctx.out.line(escape(f"Reader: {rt.reader_reason}"))


@register
class Runtimes(Command):
    names = ("runtimes",)
    summary = "The .NET runtimes in the target, and the DAC sosext loaded for each."
    usage = "runtimes [--json]"
    details = """\
One runtime per process on Linux (sosext reads .NET Core 8 and later): its number, kind,
version, where libcoreclr.so is mapped and how large, its build id, its path, and the DAC
sosext uses with the reason it trusts that file (its location, or your setclrpath).
`-netfx`/`-netcore` (switching between a desktop and a .NET Core runtime) apply only to
Windows targets.

Example:
  runtimes"""
    options = (Option("--json", "print the result as JSON", dest="json"),
               Option("-netfx", "(Windows only: the desktop runtime)"),
               Option("-netcore", "(Windows only: switch back to .NET Core)"))

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        from ..errors import SosError
        if args.netfx:
            raise SosError("-netfx: a Linux process has no desktop .NET Framework runtime")
        rt = ctx.runtime
        module = rt.location.runtime
        build_id = module.build_id.hex() if module.build_id else None
        if args.json:
            emit_json(ctx.out, {"command": "runtimes", "runtimes": [{
                "id": 0, "kind": ".NET Core", "version": rt.info.version, "base": f"0x{module.base:x}",
                "size": module.size, "build_id": build_id, "path": module.path, "dac": rt.location.dac_path or None,
                "dac_trusted_by": rt.location.trusted_by or None, "reader": rt.reader_name}]})
            return
        index = f" index {build_id}" if build_id else ""
        ctx.out.line(f"#0 .NET Core runtime {rt.info.version} at {module.base:016X} size {module.size:08X}{index}")
        ctx.out.line(escape(f"    Runtime module path: {module.path}"))
        ctx.out.line(escape(f"    Runtime module directory: {os.path.dirname(module.path)}"))
        if not rt.location.dac_path:
            ctx.out.line(escape(f"    DAC: none loaded ({rt.reader_reason})"))
            return
        why = "your setclrpath" if rt.location.trusted_by == "setclrpath" else "its location"
        ctx.out.line(escape(f"    DAC: {rt.location.dac_path} (trusted by {why})"))


@register
class SOSStatus(Command):
    names = ("sosstatus", "SOSStatus")
    summary = "sosext's state: the target, its runtime and DAC, symbol directories, caches, kernels."
    usage = "sosstatus [-reset]"
    details = """\
What sosext is working with: the target, the runtime and the DAC (as `runtimes` shows them),
the directories searched for PDBs (`setsymbolserver -directory`) and the modules whose stack
frames had no source lines for want of one (clrstack, ip2md, pe), where heap indexes of cores
are cached, whether the heap kernels are compiled, whether the reference graph that later
gcroots answer from is built, and the Python running sosext.
`-reset` forgets everything read from the target (as `sosflush`).

Example:
  sosstatus"""
    options = (Option("-reset", "forget the cached state (as sosflush)"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        from ..clr import kernels
        if args.reset:
            ctx.runtime.flush()
            ctx.out.line("Internal cached state reset")
            return
        target = ctx.session.target()
        ctx.out.line(escape(f"Target: {target.describe()}"))
        arch, here = getattr(target, "arch", "x86_64"), host_arch()
        if arch != here:
            ctx.out.line(f"Architecture: {arch} (this machine: {here})")
        try:
            rt = ctx.runtime
        except SosError as e:
            # What needs no runtime reader still works (modules, threads, registers): say why
            # the runtime is not read, instead of failing the status command itself.
            ctx.out.line(escape(f"Runtime: not read: {e}"))
            ctx.out.line(f"Python: {sys.version.split()[0]} ({os.path.dirname(os.__file__)}); sosext {__version__}")
            return
        Runtimes.run(self, ctx, Runtimes.parse([]))  # type: ignore[arg-type]
        ctx.out.line(escape(f"Reader: {rt.reader_reason}"))
        dirs = symbol_directories()
        ctx.out.line(escape("Symbol directories: " + (", ".join(dirs) if dirs else "none (setsymbolserver -directory adds one)")))
        missing = ctx.session.settings.get(MODULES_WITHOUT_PDB)
        if missing:
            ctx.out.line(escape("No source lines for " + ", ".join(sorted(set(missing.values()))) +
                                ": no matching portable PDB found (setsymbolserver -directory <dir> adds a place to look)"))
        ctx.out.line(escape(f"Heap index cache: {rt.index_dir or 'off'}"))
        ctx.out.line(f"Heap kernels: {kernels.mode()}")
        ctx.out.line(f"Reference graph: {graph_state(rt.built_heap())}")
        ctx.out.line(f"Root forest: {forest_state(rt.built_heap())}")
        # The standard library's directory names the interpreter alike in every host (LLDB and GDB
        # embed it, so sys.executable there is whatever python3 PATH finds first).
        stdlib = os.path.dirname(os.__file__)
        ctx.out.line(escape(f"Python: {sys.version.split()[0]} ({stdlib}); sosext {__version__}"))


def graph_state(heap) -> str:  # type: ignore[no-untyped-def]
    """Whether gcroot answers from the graph (milliseconds) or searches (clr/roots/background.py)."""
    build = heap.background if heap is not None else None
    if build is None and heap is not None and heap.forest_build is not None and heap.forest_build.then_graph:
        build = heap.forest_build  # the graph follows the root forest in its thread
    if build is not None and build.running:
        return "being built in the background"
    if heap is not None and heap.has_graph:
        return "built in the background after a gcroot" if build is not None else "built"
    if build is not None and build.failed is not None:
        return escape(f"not built (the background build stopped: {build.failed})")
    return "not built"


def forest_state(heap) -> str:  # type: ignore[no-untyped-def]
    """Whether later gcroots in SOS's order answer from the root forest (clr/roots/forest.py)."""
    build = heap.forest_build if heap is not None else None
    if build is not None and build.running:
        return "being built in the background"
    if heap is not None and heap.root_forest is not None:
        return f"built after a gcroot ({heap.root_forest.count:,} objects)"
    if build is not None and build.failed is not None:
        return escape(f"not built (the background build stopped: {build.failed})")
    return "not built"


@register
class SOSFlush(Command):
    names = ("sosflush",)
    summary = "Forget everything sosext read from the target (it is read again when needed)."
    usage = "sosflush"
    details = "Example:\n  sosflush"

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        ctx.runtime.flush()
        ctx.out.line("Internal cached state reset")
