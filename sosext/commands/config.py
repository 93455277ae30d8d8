"""Commands that configure sosext itself: setclrpath, setreader, setsymbolserver."""
from __future__ import annotations

import os

from ..clr.runtime import clr_path, reader_choice, set_clr_path, set_reader
from .base import Command, Option, Parsed, Positional, register
from .context import CommandContext


@register
class SetClrPath(Command):
    names = ("setclrpath",)
    summary = "Set (or show) the directory to load the DAC (libmscordaccore.so) from."
    usage = "setclrpath [<directory>]"
    details = ("By default the DAC is loaded from the directory of the target's libcoreclr.so, but only\n"
               "if that location is trusted: the file and every directory on its (resolved) path are\n"
               "owned by root or by you and are not group- or world-writable. A core names that\n"
               "directory, so a DAC planted there is refused with one line. A directory you name here\n"
               "is trusted by that choice (the build-id and file checks still apply); use it for a core\n"
               "from another machine or a runtime under /tmp. diff/leaks baseline children use it too.\n"
               "From the shell: sosext analyze CORE --clr-path DIR (or SOSEXT_CLR_PATH=DIR).\n"
               "Example:\n  setclrpath /opt/dotnet-8.0.11/shared/Microsoft.NETCore.App/8.0.11")
    positionals = (Positional("directory", "a directory holding libmscordaccore.so"),)
    needs_runtime = False

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        if args.directory is None:
            current = clr_path()
            ctx.out.record_line(f"Load path for DAC/DBI: '{current}'" if current else
                         "Load path for DAC/DBI: <none> (the target's runtime directory is used)")
            return
        path = os.path.abspath(os.path.expanduser(args.directory))
        set_clr_path(path)
        ctx.session.forget()
        ctx.out.record_line(f"Set load path for DAC/DBI to '{path}'")


@register
class SetReader(Command):
    names = ("setreader",)
    summary = "Choose (or show) how the runtime is read: its DAC, or its data contracts."
    usage = "setreader [dac|contracts|auto]"
    details = ("dac: the runtime's own DAC (libmscordaccore.so), native code for its build and this\n"
               "machine's architecture. contracts: sosext reads the runtime's data contracts (.NET 9 and\n"
               "later) in Python and loads no DAC: for a core of another architecture, a DAC that is\n"
               "missing or untrusted; it answers the heap, type, module and stack commands (clrstack\n"
               "-a too); syncblk, and a tiered method's first JIT-compiled tier where the core does not\n"
               "settle it, say in one line that the DAC answers them (docs/readers.md says which and why).\n"
               "auto (the default): the DAC when it is found and trusted, the contracts reader otherwise.\n"
               "From the shell: sosext analyze CORE --reader contracts (or SOSEXT_READER=contracts).\n"
               "Example:\n  setreader contracts")
    positionals = (Positional("reader", "dac, contracts or auto"),)
    needs_runtime = False

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        if args.reader is None:
            ctx.out.record_line(f"Runtime reader: {reader_choice() or 'auto'}")
            return
        set_reader(args.reader)
        ctx.session.forget()
        ctx.out.record_line(f"Runtime reader set to {reader_choice() or 'auto'}")


@register
class SetSymbolServer(Command):
    names = ("setsymbolserver", "SetSymbolServer")
    summary = "Name local directories to search for portable PDBs (source lines); no servers, no network."
    usage = "setsymbolserver [-directory <dir>]... [-clear]"
    details = ("clrstack, pe -lines and ip2md look for a module's PDB embedded in the assembly, beside\n"
               "the assembly, then in these directories (flat, or in the symbol-server layout\n"
               "name.pdb/<guid><stamp>FFFF/name.pdb). Without options, lists them. sosext never\n"
               "downloads: -ms and URLs are refused. The CLI's --symbols DIR does the same.\n"
               "Example:\n  setsymbolserver -directory /src/app/bin/Release/net8.0")
    options = (
        Option("-directory", "add a local directory", str, "dir", repeat=True),
        Option("-clear", "forget every directory"),
        Option("-ms", "Microsoft's symbol server (refused: sosext reads local files only)"),
    )
    positionals = (Positional("server", "a symbol server URL (refused)"),)
    needs_runtime = False

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        from ..clr.code.sourcelines import add_symbol_directory, set_symbol_directories, symbol_directories
        from ..errors import SosError

        if args.ms or args.server is not None:
            raise SosError("sosext reads symbols from local directories only: use setsymbolserver -directory <dir>")
        if args.clear:
            set_symbol_directories([])
            ctx.out.record_line("Cleared symbol directories")
        for d in args.directory:
            ctx.out.record_line(f"Added symbol directory path: {add_symbol_directory(d)}")
        if not args.directory and not args.clear:
            dirs = symbol_directories()
            if not dirs:
                ctx.out.record_line("No symbol directories (PDBs are looked for in the assemblies and beside them)")
            for d in dirs:
                ctx.out.record_line(f"Symbol directory: {d}")
