"""The LLDB host: registers every sosext command with ``command script add -c``.

Loaded by lldbinit/sosext.py. One class per command is generated at load time so that
LLDB's ``help <command>`` shows sosext's own help text.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any

import lldb  # type: ignore[import-not-found]

from .. import interrupts
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


def _use_color(debugger: "lldb.SBDebugger") -> bool:
    """LLDB's own colour setting (off with --no-use-colors) and a terminal on its output."""
    try:
        return bool(debugger.GetUseColor()) and os.isatty(1)  # the process's own terminal, not a wrapper's
    except Exception:  # noqa: BLE001 - no colour is always a safe answer
        return False


class _Writer:
    """Where a command's text goes in LLDB.

    Short output goes into the command's result object, as LLDB expects (a script that runs
    the command with HandleCommand finds it there). Output that keeps coming (more than
    ``HOLD_BYTES``, or still coming ``HOLD_SECONDS`` after its first line) is written
    straight to the debugger's output file from then on: a listing of millions of objects
    shows its first lines at once and is never held in memory, neither here nor in LLDB.
    (A script that needs a long listing's text uses --json or sosext's Python API.)"""

    HOLD_BYTES = 64 * 1024
    HOLD_SECONDS = 0.5

    def __init__(self, debugger: "lldb.SBDebugger") -> None:
        self.debugger = debugger
        self.held: list[str] = []
        self.size = 0
        self.first = 0.0  # when the first text came
        self.file: Any = None  # the debugger's output SBFile once streaming

    def __call__(self, text: str) -> None:
        if self.file is None:
            now = time.monotonic()
            if not self.held:
                self.first = now
            self.held.append(text)
            self.size += len(text)
            if self.size < self.HOLD_BYTES and now - self.first < self.HOLD_SECONDS:
                return
            out = self.debugger.GetOutputFile()
            if out is None or not out.IsValid():
                return  # nowhere to stream to: everything goes into the result
            self.file = out
            text, self.held, self.size = "\n".join(self.held), [], 0
        self.file.Write((text + "\n").encode("utf-8", "replace"))
        self.file.Flush()

    def finish(self, result: "lldb.SBCommandReturnObject") -> None:
        if self.held:
            # Print keeps the text as is; AppendMessage would trim trailing blanks that
            # SOS's tables contain.
            result.Print("\n".join(self.held) + "\n")
            self.held = []


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
        interrupts.set_poll(interp.WasInterrupted)
        out = _Writer(debugger)
        err: list[str] = []
        try:
            ok = execute(session(debugger), self.sos_name, command, out, err.append,
                         color=_use_color(debugger), progress_stream=sys.stderr)
        except SosError as e:  # target construction failed before the command ran
            ok = False
            err.append(safe_line(f"error: {e}"))
        out.finish(result)
        if err and interp.WasInterrupted():
            # LLDB prints no result of an interrupted command (only "... Interrupted."):
            # say in sosext's one line what happened, straight to the debugger's error file.
            errfile = debugger.GetErrorFile()
            if errfile is not None and errfile.IsValid():
                errfile.Write(("\n".join(err) + "\n").encode("utf-8", "replace"))
                errfile.Flush()
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
