"""The GDB host: every sosext command as a ``gdb.Command``.

Loaded by gdbinit/sosext.py. One gdb.Command subclass per command name is generated at
load time, its docstring made of the command's summary and help text, so ``help dumpheap``
and ``apropos heap`` show sosext's own help. Every SOS name is registered (sos_names.py).
Names GDB already uses stay GDB's, listed in one line at load, with two wrappers that keep
GDB's meaning: ``!`` (a sosext or SOS command goes to sosext, anything else to the shell)
and ``do`` (an address goes to dumpobj, nothing or a count to ``down``). Every command also
runs as ``sos <command> [arguments]``.

GDB 13 facts this relies on (verified on Debian's gdb 13.1):
- Ctrl-C while Python runs arrives as a KeyboardInterrupt raised in the Python code (GDB's
  SIGINT handler calls PyErr_SetInterrupt).
- gdb.write honours ``set pagination`` / ``set height``; when the user answers ``q`` at the
  pager prompt, gdb.write raises KeyboardInterrupt("Quit"), and later writes work again.
- gdb.GdbError raised from ``invoke`` prints its message (no traceback) and makes the
  command fail as a GDB command fails (a sourced script stops; the next ``-ex`` still runs).
"""
from __future__ import annotations

import os
import sys
from typing import Any, Callable

import gdb  # type: ignore[import-not-found]

from .. import interrupts
from ..commands import load_all
from ..commands.base import Command, lookup, primary_commands
from ..commands.hostcmds import CORE_PATH  # also registers `sosext core`
from ..errors import SosError, TargetError
from ..render.text import safe_line
from ..session import Session
from ..targets.gdb import NO_PROCESS, GdbTarget, connection_type, core_file_of_gdb
from ..commands.complete import option_names, value_completions
from ..commands.sos_names import all_names
from .common import execute, load_banner, quiet

_session: Session | None = None
_targets: dict[tuple, GdbTarget] = {}
_registered: dict[str, "gdb.Command"] = {}  # name -> our command object
_shadowed: list[str] = []  # sosext names GDB already had: run them as `sos <name>`


# -- the target and the session ------------------------------------------------------------

def _identity(inferior: "gdb.Inferior", override: str | None) -> tuple:
    kind = connection_type(inferior)
    core = core_file_of_gdb() if kind == "core" else None
    return (inferior.num, inferior.pid, kind, getattr(inferior, "connection_num", None), core,
            override if kind == "core" else None)


def current_target() -> GdbTarget:
    """The target for GDB's selected inferior, built once per process or core."""
    inferior = gdb.selected_inferior()
    if inferior is None or inferior.pid == 0:
        raise TargetError(NO_PROCESS)
    override = session().settings.get(CORE_PATH)
    ident = _identity(inferior, override)
    target = _targets.get(ident)
    if target is None or not target.is_current(inferior):
        if target is not None and target.is_live:
            target.close()  # its /proc file; a core's mapping may still back cached views
        target = GdbTarget(inferior, core_path=override)
        _targets[ident] = target
    target.check_usable()
    target.selection_chosen()  # notice a `thread N` typed since the last command
    return target


def session() -> Session:
    global _session
    if _session is None:
        _session = Session(current_target)
    return _session


# -- output ------------------------------------------------------------------------------

class _Stdout:
    """Writes through GDB's pager, a chunk at a time as the command makes it; remembers
    when the user quit the pager."""

    def __init__(self) -> None:
        self.pager_quit = False

    def __call__(self, text: str) -> None:
        if self.pager_quit:
            return  # the user asked for no more output from this command
        try:
            gdb.write(text + "\n")
            gdb.flush()
        except (KeyboardInterrupt, gdb.error):
            # GDB raises the same "Quit" for `q` at the pager and for Ctrl-C while it
            # writes: without a pager it can only have been Ctrl-C.
            if _pager_on():
                self.pager_quit = True
            else:
                interrupts.request()
            raise KeyboardInterrupt from None  # stop the command; execute() reports it


def _use_color() -> bool:
    """GDB's own styling setting (``set style enabled off``) and a terminal on its output."""
    try:
        return bool(gdb.parameter("style enabled")) and os.isatty(1)  # the process's own terminal, not a wrapper's
    except (gdb.error, RuntimeError, AttributeError, ValueError):
        return False


def _pager_on() -> bool:
    try:
        return bool(gdb.parameter("pagination")) and gdb.parameter("height") not in (None, 0)
    except (gdb.error, RuntimeError):
        return True


class _Stderr:
    """A text stream on GDB's stderr, for progress lines (never paged)."""

    def write(self, text: str) -> int:
        gdb.write(text, gdb.STDERR)
        return len(text)

    def flush(self) -> None:
        gdb.flush(gdb.STDERR)


def _noting_interrupts(previous: Callable[[Any], None]) -> Callable[[Any], None]:
    """An unraisable-exception hook that records a swallowed Ctrl-C.

    A KeyboardInterrupt raised while the DAC calls back into Python (through ctypes) cannot
    propagate: ctypes reports it as unraisable and the callback returns as if it succeeded.
    Recording it lets the command stop at its next progress check and report the interrupt."""
    def hook(unraisable: Any) -> None:
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt):
            interrupts.request()
            return
        previous(unraisable)
    return hook


def run_command(name: str, arg: str) -> bool:
    """Run sosext command ``name``; a failure raises gdb.GdbError with its one-line message."""
    interrupts.clear()
    interrupts.set_poll(None)  # GDB raises KeyboardInterrupt; that is recorded, not polled
    stdout = _Stdout()
    errors: list[str] = []
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _noting_interrupts(previous_hook)
    try:
        ok = execute(session(), name, arg, stdout, errors.append, color=_use_color(), progress_stream=_Stderr(),
                     announce=True)
    except SosError as e:  # raised before the command ran (e.g. building the session)
        ok, errors = False, [safe_line(f"error: {e}")]
    except KeyboardInterrupt:  # Ctrl-C outside the command proper
        ok, errors = False, ["error: interrupted"]
    finally:
        sys.unraisablehook = previous_hook
    if stdout.pager_quit:
        return False  # the user quit the pager: nothing more to say
    if interrupts.recorded():
        # Ctrl-C cut a read short; whatever failed after it (a DAC call, or nothing at all
        # with partial output) is a consequence: report the cause.
        ok, errors = False, ["error: interrupted"]
    if not ok:
        for line in errors[:-1]:  # a traceback under SOSEXT_DEBUG=1
            gdb.write(line.rstrip("\n") + "\n", gdb.STDERR)
        raise gdb.GdbError(errors[-1] if errors else f"error: {name} failed")
    return True


# -- the commands --------------------------------------------------------------------------

def _last_token(text: str) -> str:
    return "" if not text or text[-1].isspace() else text.split()[-1]


def _previous_word(text: str) -> str:
    """The word before the one being completed ("" for the first)."""
    words = text.split()
    if _last_token(text):
        return words[-2] if len(words) >= 2 else ""
    return words[-1] if words else ""


def option_completions(cls: type[Command], text: str, word: str) -> list[str]:
    """Option names (and aliases) of ``cls`` that complete the last token of ``text``.

    GDB counts '-' as a word break, so for "dumpheap -st" ``word`` is "st": the candidates
    are returned without the part of the token that lies before ``word``."""
    token = _last_token(text)
    cut = max(0, len(token) - len(word))
    values = value_completions(_session, cls, _previous_word(text), token)
    if values is not None:  # -type, -mt, name2ee's type: only names already read
        return [v[cut:] for v in values]
    return [n[cut:] for n in option_names(cls, token)]


def path_completions(word: str) -> list[str]:
    """Files and directories (with a trailing '/') whose path starts with ``word``."""
    head, tail = os.path.split(word)
    try:
        entries = os.listdir(os.path.expanduser(head) or ".")
    except OSError:
        return []
    out = []
    for name in entries:
        if name.startswith(tail) and (tail.startswith(".") or not name.startswith(".")):
            path = os.path.join(head, name)
            out.append(path + "/" if os.path.isdir(os.path.expanduser(path)) else path)
    return sorted(out)


def _takes_path(cls: type[Command]) -> bool:
    return any(p.name in ("path", "directory", "file", "core") for p in cls.positionals)


class _GdbCommand(gdb.Command):
    """Base of the generated command classes; ``sos_name`` is set per subclass."""

    sos_name = ""
    sos_class: Any = None

    def __init__(self) -> None:
        super().__init__(self.sos_name, gdb.COMMAND_USER)

    def invoke(self, arg: str, from_tty: bool) -> None:
        self.dont_repeat()  # Enter on an empty line must not walk the heap again
        run_command(self.sos_name, arg)

    def complete(self, text: str, word: str | None) -> Any:
        token = _last_token(text)
        if token.startswith("-") or _previous_word(text).lower() in ("-type", "-mt") \
                or not _takes_path(self.sos_class):
            return option_completions(self.sos_class, text, word or "")
        if word is None:
            return gdb.COMPLETE_FILENAME  # GDB's first pass: split words as file names
        # GDB 13's own file name completer only completes the first argument.
        return path_completions(word)


class _SosCommand(gdb.Command):
    """Run a sosext command by name: sos <command> [arguments].

For a sosext command whose name GDB already uses, and as SOS's own `sos` prefix.
Example:
  sos dumpheap -stat"""

    def __init__(self, name: str = "sos") -> None:
        super().__init__(name, gdb.COMMAND_USER)

    def invoke(self, arg: str, from_tty: bool) -> None:
        self.dont_repeat()
        name, _, rest = arg.strip().partition(" ")
        run_command(name.lstrip("!") or "soshelp", rest)

    def complete(self, text: str, word: str | None) -> Any:
        word = word or ""
        words = text.split()
        if len(words) == 0 or (len(words) == 1 and not text[-1].isspace()):
            known = {n for c in primary_commands() for n in c.names} | set(all_names())
            return sorted(n for n in known if n.startswith(word))
        cls = lookup(words[0].lstrip("!"))
        return option_completions(cls, text, word) if cls is not None else []


def gdb_has_command(name: str) -> bool:
    """Whether GDB itself (or the user's `define`) has a command called exactly ``name``.

    ``help NAME`` also answers for a unique prefix, so it is not enough alone: the name must
    be among the aliases on help's first line ("until, u") or among ``complete NAME``."""
    try:
        text = gdb.execute(f"help {name}", to_string=True)
    except gdb.error:
        return False  # undefined or ambiguous: no command of exactly this name
    first = text.splitlines()[0] if text else ""
    if name in (n.strip() for n in first.split(",")):
        return True
    try:
        completions = gdb.execute(f"complete {name}", to_string=True).split()
    except gdb.error:
        completions = []
    return name in completions


def _command_class(name: str, cls: type[Command]) -> type[_GdbCommand]:
    doc = f"{cls.summary}\n\n{cls.help_text()}"
    return type(f"Gdb_{name}", (_GdbCommand,), {"__doc__": doc, "sos_name": name, "sos_class": cls})


def _as_gdb(command: str, from_tty: bool) -> None:
    """Run GDB's own command; its failure reads as that command's (no Python traceback)."""
    try:
        gdb.execute(command, from_tty)
    except gdb.error as e:
        raise gdb.GdbError(str(e)) from None


class _BangCommand(_SosCommand):
    """WinDbg's habit: !<sosext or SOS command> [arguments] runs it in sosext.

Anything else after '!' runs in the shell, as GDB's own '!' does (so does `shell`).
Example:
  !dumpheap -stat"""

    def __init__(self, name: str = "!") -> None:
        super().__init__(name)

    def invoke(self, arg: str, from_tty: bool) -> None:
        name, _, rest = arg.strip().partition(" ")
        if name and lookup(name) is not None:
            self.dont_repeat()
            run_command(name, rest)
        else:
            _as_gdb(f"shell {arg}", from_tty)


class _DoCommand(gdb.Command):
    """do <address>: SOS's dumpobj; do [n]: GDB's down (select the frame n below).

SOS's alias `do` and GDB's abbreviation of `down` share the name: an address (hex, or any
argument that is not a frame count) goes to sosext's dumpobj, nothing or a count goes to
GDB's down.
Example:
  do 7f3a14005678"""

    def __init__(self) -> None:
        super().__init__("do", gdb.COMMAND_STACK)

    def invoke(self, arg: str, from_tty: bool) -> None:
        text = arg.strip()
        if not text or (text.isascii() and text.isdigit() and int(text) < 100000):
            _as_gdb(f"down {text}", from_tty)
        else:
            self.dont_repeat()
            run_command("dumpobj", arg)

    def complete(self, text: str, word: str | None) -> Any:
        return option_completions(lookup("dumpobj"), text, word or "")


def gdb_init() -> list[str]:
    """Register every sosext command with GDB (again after a second `source`: idempotent).

    Returns the names (main names and aliases) left to GDB because it already had them."""
    load_all()
    newly_shadowed = []
    names = [(name, cls) for cls in primary_commands() for name in cls.names]
    names += [(name, lookup(name)) for name in all_names() if lookup(name) is not None]
    for name, cls in names:
        if name in _registered or name in _shadowed:
            continue
        if name == "do" and not _gdb_user_defined("do"):
            _registered["do"] = _DoCommand()  # dumpobj for an address, GDB's down otherwise
            continue
        if gdb_has_command(name):
            # GDB's own `u` or `frame` stays GDB's: said once, in one line, at load.
            _shadowed.append(name)
            newly_shadowed.append(name)
            continue
        _registered[name] = _command_class(name, cls)()
    for name, make in (("sos", _SosCommand), ("ext", _SosCommand), ("!", _BangCommand)):
        if name not in _registered and (name == "!" or not gdb_has_command(name)):
            _registered[name] = make(name)
    banner = load_banner("GDB")
    if banner is not None:
        gdb.write(banner + "\n")
    if newly_shadowed and not quiet():  # SOSEXT_QUIET=1: nothing at load (soshelp says it too)
        gdb.write("sosext: GDB keeps its own " + ", ".join(sorted(newly_shadowed))
                  + "; run sosext's as: sos <name> (e.g. sos " + sorted(newly_shadowed)[0] + ")\n",
                  gdb.STDERR)
    return list(_shadowed)


def _gdb_user_defined(name: str) -> bool:
    """Whether ``name`` is the user's own `define` (then sosext leaves it alone)."""
    try:
        return "User-defined." in gdb.execute(f"help {name}", to_string=True)
    except gdb.error:
        return False


__all__ = ["current_target", "session", "run_command", "gdb_init", "gdb_has_command",
           "option_completions"]
