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
from ..commands.base import lookup, primary_commands
from ..commands.sos_names import all_names
from ..errors import SosError
from ..render.text import safe_line
from ..session import Session
from ..targets.base import Target
from .common import execute, load_banner

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
        return lldb_help(self.sos_class)

    def __call__(self, debugger, command, exe_ctx, result) -> None:  # type: ignore[no-untyped-def]
        interp = debugger.GetCommandInterpreter()
        interrupts.set_poll(interp.WasInterrupted)
        out = _Writer(debugger)
        err: list[str] = []
        try:
            ok = execute(session(debugger), self.sos_name, command, out, err.append,
                         color=_use_color(debugger), progress_stream=sys.stderr, announce=True)
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


HELP_WIDTH = 78


def lldb_help(cls: Any) -> str:
    """The command's help laid out for LLDB's ``help``.

    LLDB prints the short help and "Syntax: <name>" itself, then the long help, re-wrapping
    every line longer than the terminal (80 columns when not a terminal) without keeping
    indentation. So: the usage line is labelled, the paragraphs of the details are joined
    and wrapped here, and option lines wrap under their own description column."""
    import textwrap
    text = cls.help_text().split("\n")
    lines = [f"Usage: {text[0]}"] + text[3:]  # the summary is LLDB's first line already
    out: list[str] = []
    para: list[str] = []

    def end_para() -> None:
        if para:
            out.extend(textwrap.wrap(" ".join(para), HELP_WIDTH) or [""])
            para.clear()

    for ln in lines:
        if not ln.strip():
            end_para()
            out.append("")
        elif ln[0].isspace() or ln.endswith(":") or ln.startswith(("Usage:", "Aliases:")):
            end_para()
            if len(ln) <= HELP_WIDTH:
                out.append(ln)
                continue
            indent = len(ln) - len(ln.lstrip())
            cut = ln.find("  ", indent)  # an option line: wrap under its description
            hang = len(ln) - len(ln[cut:].lstrip()) if cut > 0 else indent + 2
            out.extend(textwrap.wrap(ln, HELP_WIDTH, initial_indent="", subsequent_indent=" " * hang,
                                     drop_whitespace=True) if cut < 0 else
                       [ln[:hang] + w if i == 0 else " " * hang + w for i, w in
                        enumerate(textwrap.wrap(ln[hang:], HELP_WIDTH - hang))])
        else:
            para.append(ln.strip())
    end_para()
    return "\n".join(out).strip("\n")


class _SosPrefix:
    """``sos <command> [arguments]`` (and SOS's ``ext``): run any sosext or SOS command by name."""

    def __init__(self, debugger: "lldb.SBDebugger", internal_dict: dict) -> None:
        self.debugger = debugger

    def get_short_help(self) -> str:
        return "Run a sosext command by name: sos <command> [arguments] (as SOS's sos command)."

    def get_long_help(self) -> str:
        return ("Run a sosext command by name, as SOS's own `sos` prefix does.\n"
                "Example:\n  sos dumpheap -stat")

    def __call__(self, debugger, command, exe_ctx, result) -> None:  # type: ignore[no-untyped-def]
        name, _, rest = command.strip().partition(" ")
        name = name.lstrip("!") or "soshelp"
        cls = lookup(name)
        if cls is None:
            result.SetError(safe_line(f"unknown command: {name} (soshelp lists sosext's commands)"))
            result.SetStatus(lldb.eReturnStatusFailed)
            return
        cmd = _command_class(name, cls)(debugger, {})
        cmd(debugger, rest, exe_ctx, result)


def _command_class(name: str, cls: Any) -> type:
    cmd_cls = getattr(sys.modules[__name__], f"Cmd_{name}", None)
    if cmd_cls is None:
        cmd_cls = type(f"Cmd_{name}", (_LldbCommand,), {"sos_name": name, "sos_class": cls})
        setattr(sys.modules[__name__], cmd_cls.__name__, cmd_cls)
    return cmd_cls


def lldb_init(debugger: "lldb.SBDebugger", module_path: str) -> None:
    """Register every command, and every SOS name (so LLDB's prefix matching never runs a
    command other than the one typed); ``module_path`` is where LLDB can find this module."""
    load_all()
    names = {name: cls for cls in primary_commands() for name in cls.names}
    for name in all_names():
        if name not in names:
            found = lookup(name)
            if found is not None:
                names[name] = found  # an SOS alias of a sosext command, or a placeholder
    for name, cls in names.items():
        cmd_cls = _command_class(name, cls)
        debugger.HandleCommand(f"command script add -o -c {module_path}.{cmd_cls.__name__} {name}")
    for name in ("sos", "ext"):
        debugger.HandleCommand(f"command script add -o -c {module_path}._SosPrefix {name}")
    banner = load_banner("LLDB")
    if banner is not None:
        out = debugger.GetOutputFile()
        if out is not None and out.IsValid():
            out.Write((banner + "\n").encode())
            out.Flush()
