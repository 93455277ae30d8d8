"""Commands that configure sosext itself: setclrpath."""
from __future__ import annotations

import os

from ..dac.loader import clr_path_override, set_clr_path
from .base import Command, Parsed, Positional, register
from .context import CommandContext


@register
class SetClrPath(Command):
    names = ("setclrpath",)
    summary = "Set (or show) the directory to load the DAC (libmscordaccore.so) from."
    usage = "setclrpath [<directory>]"
    details = ("By default the DAC is loaded from the directory of the target's libcoreclr.so.\n"
               "Use this for a core from another machine: point it at a copy of that runtime.\n"
               "Example:\n  setclrpath /opt/dotnet-8.0.11/shared/Microsoft.NETCore.App/8.0.11")
    positionals = (Positional("directory", "a directory holding libmscordaccore.so"),)
    needs_runtime = False

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        if args.directory is None:
            current = clr_path_override()
            ctx.out.line(f"Load path for DAC/DBI: '{current}'" if current else
                         "Load path for DAC/DBI: <none> (the target's runtime directory is used)")
            return
        path = os.path.abspath(os.path.expanduser(args.directory))
        set_clr_path(path)
        ctx.session.forget()
        ctx.out.line(f"Set load path for DAC/DBI to '{path}'")
