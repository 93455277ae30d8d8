"""Running a registered command for any host: parse, run, turn failures into one line."""
from __future__ import annotations

import os
import sys
import traceback
from typing import Callable

from .. import interrupts
from ..clr.roots import background
from ..clr.progress import Progress, set_state_source
from ..commands import load_for
from ..commands.base import lookup, split_words
from ..commands.context import CommandContext
from ..commands.sessionlog import console_tee
from ..errors import SosAnswer, SosError, TargetError
from ..render.color import color_wanted
from ..render.output import Output
from ..render.text import safe_line
from ..session import Session
from ..targets.base import CHANGED_ERRORS, ProcessState, Target

Writer = Callable[[str], None]


def debug_enabled() -> bool:
    return os.environ.get("SOSEXT_DEBUG", "") not in ("", "0")


def quiet() -> bool:
    """SOSEXT_QUIET=1: no banner lines (at load or on the first command)."""
    return os.environ.get("SOSEXT_QUIET", "") not in ("", "0")


def load_banner(host: str) -> str | None:
    """The one line printed when the debugger loads sosext (no target is touched)."""
    if quiet():
        return None
    from .. import __version__
    return (f"sosext {__version__} loaded in {host}: SOS-style .NET commands; "
            "type soshelp (SOSEXT_QUIET=1 hides this)")


_announced: set[int] = set()


def runtime_banner(session: Session) -> str | None:
    """Once per runtime, after the first command that built it: its version and GC mode.

    Only facts already read are used (the runtime's file version; the GC mode when the
    command built the heap), so the banner never adds a DAC load or a heap read. Said to a
    person at a terminal (or when SOSEXT_QUIET=0 asks for it), never into a pipe."""
    if quiet() or (os.environ.get("SOSEXT_QUIET") != "0" and not os.isatty(1)):
        return None
    for rt in session.built_runtimes():
        if id(rt) in _announced:
            continue
        heap = rt.built_heap()
        if heap is None:
            continue  # said when a command has read the heap
        _announced.add(id(rt))
        try:
            version = rt.info.version
        except Exception:  # noqa: BLE001 - a banner must never fail a command
            version = "?"
        gc = "server" if heap.is_server else "workstation"
        layout = "regions" if heap.uses_regions else "segments"
        return f"sosext: .NET runtime {version}, {gc} GC ({layout})"
    return None


def _flush_quietly(out: Output) -> None:
    """Hand over what was printed before a failure; the writer itself may be what failed
    (a pager the user quit), so a second failure only drops the rest."""
    try:
        out.flush()
    except BaseException:  # noqa: BLE001
        out.discard()


class TargetWatch:
    """The live process a command reads: it must be stopped when the command starts, and
    the command's answer only stands if it is still stopped at the same stop when it ends.

    Long loops ask :meth:`changed` a few times a second (through the progress checks), so a
    process that exits mid-command ends the command at once; after the command, whatever
    it printed, the answer is confirmed once more (a read that failed because the process
    died may have looked like the end of a segment)."""

    def __init__(self, target: Target) -> None:
        self.target = target
        problem = target.state_error() if hasattr(target, "state_error") else None
        if problem:
            raise TargetError(problem)
        self.generation = target.generation

    def changed(self) -> str | None:
        """Why what the command read may not hold any more; None while it does."""
        state = self.target.state() if hasattr(self.target, "state") else ProcessState.STOPPED
        if state is not ProcessState.STOPPED:
            return CHANGED_ERRORS[state]
        if self.target.generation != self.generation:
            return CHANGED_ERRORS[ProcessState.RUNNING]
        return None


def _watch(session: Session) -> TargetWatch | None:
    target = session.target()
    if not getattr(target, "is_live", False):
        return None  # a core holds still
    watch = TargetWatch(target)
    set_state_source(watch.changed)
    return watch


def execute(session: Session, name: str, line: str, write: Writer, error: Writer, *,
            color: bool = False, progress_stream=sys.stderr, announce: bool = False) -> bool:
    """Run command ``name`` with argument string ``line``. Returns False on failure.

    ``color``: the host's output is a terminal that takes colour (the command's --no-color
    and NO_COLOR still turn it off). ``announce``: a debugger's session, which says once per
    runtime what it found."""
    if name.lower() in ("sos", "ext"):
        # SOS's prefix (dotnet-dump's too): `sos <command> [arguments]` runs that command.
        inner, _, rest = line.strip().partition(" ")
        return execute(session, inner.lstrip("!") or "soshelp", rest, write, error, color=color,
                       progress_stream=progress_stream, announce=announce)
    load_for(name)
    write, error = console_tee(session.settings, write), console_tee(session.settings, error)
    cls = lookup(name)
    if cls is None:
        error(safe_line(f"error: unknown command: {name}"))
        return False
    out = Output(write, command=cls.names[0])
    interrupts.clear()  # a Ctrl-C of an earlier command is not this one's
    watch: TargetWatch | None = None

    def process_changed() -> str | None:
        try:
            return watch.changed() if watch is not None else None
        except Exception:  # noqa: BLE001 - the debugger's answer itself failed: keep the first error
            return None

    try:
        args = cls.parse(split_words(line))
        out.configure(cls.output_format(args), color_wanted(color, args.no_color))
        if cls.needs_runtime:
            watch = _watch(session)
        ctx = CommandContext(session, out, Progress(progress_stream))
        cls().run(ctx, args)
        out.finish()
        problem = process_changed()
        if problem:
            error(f"error: {problem}")
            return False
        note = runtime_banner(session) if announce else None
        if note is not None:
            progress_stream.write(note + "\n")
            progress_stream.flush()
        return True
    except SosAnswer as e:
        # SOS's answer to what the command cannot take: output, not a failure.
        out.field("message", str(e), safe_line(str(e)))
        out.finish()
        return True
    except SosError as e:
        _flush_quietly(out)
        # A process that went away explains any failure after it; a Ctrl-C inside a DAC
        # callback surfaces as the DAC call failing: say what happened.
        problem = process_changed()
        error(f"error: {problem}" if problem else "error: interrupted" if interrupts.recorded()
              else safe_line(f"error: {e}"))
    except KeyboardInterrupt:
        _flush_quietly(out)
        problem = process_changed()
        error(f"error: {problem}" if problem else "error: interrupted")
    except BrokenPipeError:
        return False  # the reader of the output went away (`| head`): nobody to tell
    except Exception as e:  # noqa: BLE001 - the debugger must survive any bug of ours
        _flush_quietly(out)
        problem = process_changed()
        if problem:
            error(f"error: {problem}")
            return False
        if debug_enabled():
            error(traceback.format_exc())
        error(safe_line(f"error: internal error in {name}: {type(e).__name__}: {e} "
                        "(SOSEXT_DEBUG=1 shows a traceback)"))
    finally:
        set_state_source(None)
        background.start_pending()  # work planned by the command, now that it has answered
    return False
