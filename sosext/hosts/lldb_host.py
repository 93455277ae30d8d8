"""The LLDB host: registers every sosext command with ``command script add -c``.

Loaded by lldbinit/sosext.py. One class per command is generated at load time so that
LLDB's ``help <command>`` shows sosext's own help text.
"""
from __future__ import annotations

import sys
from typing import Any

import lldb  # type: ignore[import-not-found]

from ..clr.progress import set_interrupt_source
from ..commands import load_all
from ..commands.base import primary_commands
from ..errors import SosError
from ..render.text import safe_line
from ..session import Session
from ..targets.base import Target
from .common import execute

_session: Session | None = None
_targets: dict[tuple, Target] = {}


def current_target(debugger: "lldb.SBDebugger") -> Target:
    from ..commands.hostcmds import CORE_PATH
    from ..targets.lldb import LldbTarget
    sbt = debugger.GetSelectedTarget()
    proc = sbt.GetProcess() if sbt and sbt.IsValid() else None
    key = (sbt.GetProcess().GetUniqueID() if proc and proc.IsValid() else None,
           proc.GetProcessID() if proc and proc.IsValid() else None)
    t = _targets.get(key)
    if t is None or getattr(t, "process", None) is None or not t.process.IsValid():
        core_path = _session.settings.get(CORE_PATH) if _session is not None else None
        t = LldbTarget(debugger, core_path=core_path)
        _targets[key] = t
    return t


def session(debugger: "lldb.SBDebugger") -> Session:
    global _session
    if _session is None:
        _session = Session(lambda: current_target(debugger))
    return _session


def current_session() -> Session:
    """The session of the debugger LLDB's script interpreter runs in (``lldb.debugger``):
    what ``sosext.current()`` reads, the same one the commands use."""
    debugger = getattr(lldb, "debugger", None)
    if debugger is None or not debugger.IsValid():
        raise SosError("no LLDB debugger: sosext.current() works in LLDB's script interpreter")
    return session(debugger)


class _LldbCommand:
    """Base for the generated command classes (LLDB's class-command protocol)."""

    sos_name = ""
    sos_class: Any = None

    def __init__(self, debugger: "lldb.SBDebugger", internal_dict: dict) -> None:
        self.debugger = debugger

    def get_short_help(self) -> str:
        return self.sos_class.summary

    def get_long_help(self) -> str:
        return self.sos_class.help_text()

    def __call__(self, debugger, command, exe_ctx, result) -> None:  # type: ignore[no-untyped-def]
        interp = debugger.GetCommandInterpreter()
        set_interrupt_source(interp.WasInterrupted)
        out: list[str] = []
        err: list[str] = []
        try:
            ok = execute(session(debugger), self.sos_name, command, out.append, err.append,
                         color=False, progress_stream=sys.stderr)
        except SosError as e:  # target construction failed before the command ran
            ok = False
            err.append(safe_line(f"error: {e}"))
        if out:
            # Print keeps the text as is; AppendMessage would trim trailing blanks that
            # SOS's tables contain.
            result.Print("\n".join(out) + "\n")
        if err:
            result.SetError("\n".join(e[7:] if e.startswith("error: ") else e for e in err))
        result.SetStatus(lldb.eReturnStatusSuccessFinishResult if ok else lldb.eReturnStatusFailed)


def lldb_init(debugger: "lldb.SBDebugger", module_path: str) -> None:
    """Register every command; ``module_path`` is where LLDB can find this module."""
    load_all()
    mod = sys.modules[__name__]
    for cls in primary_commands():
        for name in cls.names:
            cmd_cls = type(f"Cmd_{name}", (_LldbCommand,), {"sos_name": name, "sos_class": cls})
            setattr(mod, cmd_cls.__name__, cmd_cls)
            debugger.HandleCommand(f"command script add -o -c {module_path}.{cmd_cls.__name__} {name}")
