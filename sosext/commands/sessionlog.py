"""Session commands: logopen/logclose (the console copied to a file), logging (sosext's own
diagnostic log), dbgout (tracebacks of internal errors), loadsymbols (what the host does).

Files are created with O_CREAT|O_EXCL|O_NOFOLLOW and mode 0600, so a symlink planted at the
path is refused instead of followed. logopen replaces an existing regular file, as SOS's does,
and says so (the design's Trust section forbids silent overwrites, not announced ones); the
diagnostic log of `logging <path>` refuses one.
"""
from __future__ import annotations

import logging
import os
from typing import TextIO

from ..errors import SosError
from ..files import create_private
from .base import Command, Option, Parsed, Positional, register
from .context import CommandContext

CONSOLE_LOG = "console_log"  # session.settings: the open file the console is copied to
CONSOLE_LOG_PATH = "console_log_path"
DIAG_LOG = "diagnostic_log"  # session.settings: the logging handler of `logging <path>`
_LOGGER = "sosext"


def create_log(path: str, replace: bool = False) -> tuple[TextIO, str]:
    """A new file at ``path``, 0600, for writing, and its absolute path. A symlink, or
    anything but a regular file, at the path is an error; so is a regular file unless
    ``replace`` (then it is removed and created anew, never written through)."""
    path = os.path.abspath(os.path.expanduser(path))
    if os.path.islink(path):
        raise SosError(f"{path} is a symbolic link: sosext neither follows nor replaces one (choose another name)")
    if replace and os.path.lexists(path) and not os.path.isfile(path):
        raise SosError(f"{path} exists and is not a regular file")
    f = create_private(path, force=replace,
                       exists=f"{path} exists: sosext does not overwrite a file (remove it or choose another name)")
    return f, path  # type: ignore[return-value]


def console_tee(settings: dict, write):  # type: ignore[no-untyped-def]
    """``write``, also copying every line to the console log while one is open (hosts wrap
    their writers with this)."""
    def tee(text: str) -> None:
        write(text)
        log = settings.get(CONSOLE_LOG)
        if log is not None:
            try:
                log.write(text if text.endswith("\n") else text + "\n")
                log.flush()
            except (OSError, ValueError):
                settings.pop(CONSOLE_LOG, None)  # a full disk or a closed file ends the copy, not the command
    return tee


def _close(settings: dict, key: str) -> None:
    f = settings.pop(key, None)
    if f is not None:
        f.close()


@register
class LogOpen(Command):
    names = ("logopen",)
    summary = "Copy the console (every command's output) to a new file; logclose stops."
    usage = "logopen [<path>] [--disable]"
    details = """\
Without a path, tells where the console is logged. An existing file at the path is replaced,
as SOS does, and logopen says so; the file is created anew (mode 0600), never written
through a symbolic link (a symlink at the path is refused).

Example:
  logopen /tmp/session.log"""
    options = (Option("--disable", "stop logging (what logclose does)"),)
    positionals = (Positional("path", "the log file to create"),)
    needs_runtime = False

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        settings = ctx.session.settings
        if args.disable:
            _close(settings, CONSOLE_LOG)
        elif args.path:
            existed = os.path.lexists(os.path.abspath(os.path.expanduser(args.path)))
            f, path = create_log(args.path, replace=True)
            if existed:
                ctx.out.line(f"Replaced the existing file {path}")
            _close(settings, CONSOLE_LOG)
            settings[CONSOLE_LOG], settings[CONSOLE_LOG_PATH] = f, path
        path = settings.get(CONSOLE_LOG_PATH) if settings.get(CONSOLE_LOG) is not None else None
        ctx.out.line(f"Console is logging to {path}" if path else "Console logging is disabled")


@register
class LogClose(LogOpen):
    names = ("logclose",)
    summary = "Stop copying the console to the file logopen opened."
    usage = "logclose"
    details = "Example:\n  logclose"
    options = ()
    positionals = ()

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        _close(ctx.session.settings, CONSOLE_LOG)
        ctx.out.line("Console logging is disabled")


@register
class Logging(Command):
    names = ("logging",)
    summary = "Turn sosext's own diagnostic log on (to stderr or a new file) or off."
    usage = "logging [<path>] [--enable | --disable]"
    details = """\
The diagnostic log says what sosext does underneath (DAC memory reads that failed, files
looked for). With a path it goes to that new file (0600, never overwritten), else to stderr.

Example:
  logging --enable
  logging /tmp/sosext-diag.log
  logging --disable"""
    options = (Option("--enable", "turn the log on", aliases=("-e", "enable")),
               Option("--disable", "turn the log off", aliases=("-d", "disable")))
    positionals = (Positional("path", "a new file for the log"),)
    needs_runtime = False

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        settings = ctx.session.settings
        logger = logging.getLogger(_LOGGER)
        if args.disable:
            self._drop(settings, logger)
        elif args.enable or args.path:
            handler: logging.Handler
            if args.path:
                stream, path = create_log(args.path)
                handler = logging.StreamHandler(stream)
                handler.set_name(path)
            else:
                handler = logging.StreamHandler()  # stderr
            handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
            self._drop(settings, logger)
            logger.addHandler(handler)
            logger.setLevel(logging.DEBUG)
            settings[DIAG_LOG] = handler
        handler = settings.get(DIAG_LOG)
        ctx.out.line(f"Logging is {'enabled' if handler is not None else 'disabled'}")
        if handler is not None and handler.get_name():
            ctx.out.line(handler.get_name())

    @staticmethod
    def _drop(settings: dict, logger: logging.Logger) -> None:
        handler = settings.pop(DIAG_LOG, None)
        if handler is not None:
            logger.removeHandler(handler)
            if handler.get_name():  # our file, not stderr
                handler.stream.close()
            handler.close()
            logger.setLevel(logging.WARNING)


@register
class DbgOut(Command):
    names = ("dbgout",)
    summary = "Show sosext's internal tracebacks (SOSEXT_DEBUG) from now on; -off stops."
    usage = "dbgout [-off]"
    details = """\
An internal error normally prints one line; with dbgout on, its Python traceback too (the
same as starting the debugger with SOSEXT_DEBUG=1).

Example:
  dbgout
  dbgout -off"""
    options = (Option("-off", "turn it off"),)
    needs_runtime = False

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        if args.off:
            os.environ.pop("SOSEXT_DEBUG", None)
        else:
            os.environ["SOSEXT_DEBUG"] = "1"
        ctx.out.line(f"Debug output logging {'disabled' if args.off else 'enabled'}")


@register
class LoadSymbols(Command):
    names = ("loadsymbols",)
    summary = "On Linux the debugger loads native symbols itself; this says how, and where sosext finds PDBs."
    usage = "loadsymbols"
    details = """\
SOS's loadsymbols downloads native symbol files from a symbol server for the modules of
the target. LLDB and GDB load the native symbols they find themselves (LLDB: target symbols
add; GDB: set debug-file-directory, debuginfod). sosext reads managed portable PDBs from
the assembly's directory, an embedded PDB, or local directories named with
setsymbolserver -directory; it downloads nothing.

Example:
  loadsymbols"""
    needs_runtime = False

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        for text in (
            "sosext downloads no symbols: the debugger loads native symbols itself",
            "  LLDB: target symbols add <file>  (or settings set target.debug-file-search-paths <dir>)",
            "  GDB:  set debug-file-directory <dir>  (or debuginfod)",
            "Managed source lines come from portable PDBs beside the assemblies, embedded, or in the",
            "local directories named with: setsymbolserver -directory <dir>",
        ):
            ctx.out.line(text)
