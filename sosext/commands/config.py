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
            current = clr_path_override()
            ctx.out.line(f"Load path for DAC/DBI: '{current}'" if current else
                         "Load path for DAC/DBI: <none> (the target's runtime directory is used)")
            return
        path = os.path.abspath(os.path.expanduser(args.directory))
        set_clr_path(path)
        ctx.session.forget()
        ctx.out.line(f"Set load path for DAC/DBI to '{path}'")
