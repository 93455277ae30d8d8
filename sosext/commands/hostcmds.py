"""Commands about how sosext reads its target: ``sosext core <path>``.

A debugger host reads a core file with sosext's own reader and has to know the file's path.
GDB names it in ``info target`` and LLDB keeps it open where sosext can find it, but when
that fails (a copied or renamed core, several cores open) the user names it here. The path
is kept in ``session.settings["core_path"]``; hosts use it for the core they open next.
"""
from __future__ import annotations

import os

from ..errors import UsageError
from .base import Command, Option, Parsed, Positional, register
from .context import CommandContext

CORE_PATH = "core_path"  # key in Session.settings


@register
class SosextSettings(Command):
    names = ("sosext",)
    summary = "Name the core file sosext reads when the debugger cannot tell it (sosext core <path>)."
    usage = "sosext core [<path> | -clear]"
    details = ("sosext reads core files itself, so it needs the path of the core the debugger opened.\n"
               "It normally finds it; when it cannot, it says so and asks for this command.\n"
               "Without a path, shows the core file named so far.\n"
               "In LLDB with no target, it also opens the core with the executable the core names\n"
               "(lldb-16 opens an arm64 core on x86-64 only with its executable).\n"
               "Example:\n  sosext core /tmp/core.12345")
    options = (Option("-clear", "forget the named core file and use the one the debugger reports"),)
    positionals = (Positional("action", "what to set: core"),
                   Positional("path", "the core file the debugger has loaded"))
    needs_runtime = False

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        if args.action not in (None, "core"):
            raise UsageError(f"unknown sosext setting: {args.action} (usage: {self.usage})")
        settings = ctx.session.settings
        if args.clear:
            settings.pop(CORE_PATH, None)
            ctx.session.forget()
            ctx.out.line("sosext reads the core file the debugger reports")
            return
        if args.path is None:
            current = settings.get(CORE_PATH)
            ctx.out.line(f"sosext reads core file '{current}'" if current else
                         "No core file named: sosext reads the core file the debugger reports")
            return
        path = os.path.abspath(os.path.expanduser(args.path))
        _check_core(path)
        settings[CORE_PATH] = path
        ctx.session.forget()
        ctx.out.line(f"sosext reads core file '{path}'")


def _check_core(path: str) -> None:
    """Refuse anything that is not a readable ELF core now, not at the next heap command."""
    from ..targets.elfcore import ElfCore
    ElfCore(path).close()  # raises TargetError with the reason
