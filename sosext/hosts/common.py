"""Running a registered command for any host: parse, run, turn failures into one line."""
from __future__ import annotations

import os
import sys
import traceback
from typing import Callable

from ..clr.progress import Progress, take_noted_interrupt
from ..commands import load_all
from ..commands.base import lookup, split_words
from ..commands.context import CommandContext
from ..errors import SosError
from ..render.output import Output
from ..render.text import safe_line
from ..session import Session

Writer = Callable[[str], None]


def debug_enabled() -> bool:
    return os.environ.get("SOSEXT_DEBUG", "") not in ("", "0")


def _flush_quietly(out: Output) -> None:
    """Hand over what was printed before a failure; the writer itself may be what failed
    (a pager the user quit), so a second failure only drops the rest."""
    try:
        out.flush()
    except BaseException:  # noqa: BLE001
        out.discard()


def execute(session: Session, name: str, line: str, write: Writer, error: Writer, *,
            color: bool = False, progress_stream=sys.stderr) -> bool:
    """Run command ``name`` with argument string ``line``. Returns False on failure."""
    load_all()
    cls = lookup(name)
    if cls is None:
        error(safe_line(f"error: unknown command: {name}"))
        return False
    out = Output(write, color=color)
    take_noted_interrupt()  # a stale note from an earlier command must not be reported now
    try:
        args = cls.parse(split_words(line))
        ctx = CommandContext(session, out, Progress(progress_stream))
        cls().run(ctx, args)
        out.flush()
        return True
    except SosError as e:
        _flush_quietly(out)
        # A Ctrl-C inside a DAC callback surfaces as the DAC call failing: say what happened.
        error("error: interrupted" if take_noted_interrupt() else safe_line(f"error: {e}"))
    except KeyboardInterrupt:
        _flush_quietly(out)
        error("error: interrupted")
    except Exception as e:  # noqa: BLE001 - the debugger must survive any bug of ours
        _flush_quietly(out)
        if debug_enabled():
            error(traceback.format_exc())
        error(safe_line(f"error: internal error in {name}: {type(e).__name__}: {e} "
                        "(SOSEXT_DEBUG=1 shows a traceback)"))
    return False
