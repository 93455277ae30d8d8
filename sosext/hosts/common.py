"""Running a registered command for any host: parse, run, turn failures into one line."""
from __future__ import annotations

import os
import sys
import traceback
from typing import Callable

from ..clr.progress import Progress
from ..commands import load_all
from ..commands.base import lookup, split_words
from ..commands.context import CommandContext
from ..errors import SosError
from ..render.output import Output
from ..session import Session

Writer = Callable[[str], None]


def debug_enabled() -> bool:
    return os.environ.get("SOSEXT_DEBUG", "") not in ("", "0")


def execute(session: Session, name: str, line: str, write: Writer, error: Writer, *,
            color: bool = False, progress_stream=sys.stderr) -> bool:
    """Run command ``name`` with argument string ``line``. Returns False on failure."""
    load_all()
    cls = lookup(name)
    if cls is None:
        error(f"error: unknown command: {name}")
        return False
    out = Output(write, color=color)
    try:
        args = cls.parse(split_words(line))
        ctx = CommandContext(session, out, Progress(progress_stream))
        cls().run(ctx, args)
        out.flush()
        return True
    except SosError as e:
        out.flush()
        error(f"error: {e}")
    except KeyboardInterrupt:
        out.flush()
        error("error: interrupted")
    except Exception as e:  # noqa: BLE001 - the debugger must survive any bug of ours
        out.flush()
        if debug_enabled():
            error(traceback.format_exc())
        error(f"error: internal error in {name}: {type(e).__name__}: {e} (SOSEXT_DEBUG=1 shows a traceback)")
    return False
