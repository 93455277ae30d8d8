"""Where a command's text goes: lines handed to the host's writer as they are made.

Every line passes through :func:`~sosext.render.text.safe_text` here, the one place all
command output goes through, so no target-derived control character reaches a terminal.

A listing of millions of objects must start at once and must not be held in memory, so
lines leave in chunks: every ``chunk`` lines, or as soon as a line comes ``interval``
seconds after the previous chunk left (hosts differ in per-call cost, so not line by
line). Before a chunk leaves, the command's Ctrl-C and process-state checks run: every
printing loop can be interrupted without asking for it. What was handed over stays
printed when the command then fails; the host prints the one error line after it.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Callable, Iterable

from ..clr.progress import check_interrupt

from .text import safe_text


class Output:
    def __init__(self, write: Callable[[str], None], color: bool = False, chunk: int = 2000,
                 interval: float = 0.2) -> None:
        self._write = write
        self.color = color
        self._lines: list[str] = []
        self._chunk = chunk
        self._interval = interval
        self._due = time.monotonic() + interval

    def line(self, text: str = "") -> None:
        lines = self._lines
        lines.append(safe_text(text))
        if len(lines) >= self._chunk or time.monotonic() >= self._due:
            self._pass_on()

    def lines(self, texts: Iterable[str]) -> None:
        held = self._lines
        chunk = self._chunk
        for t in texts:
            held.append(safe_text(t))
            if len(held) >= chunk:
                self._pass_on()
                held = self._lines
        if held and time.monotonic() >= self._due:
            self._pass_on()

    def _pass_on(self) -> None:
        check_interrupt()  # raises with the chunk still held: the failure path prints it
        self.flush()

    def json(self, obj: Any) -> None:
        self.line(json.dumps(obj, indent=2, sort_keys=False))

    def discard(self) -> None:
        self._lines = []

    def flush(self) -> None:
        """Hand every held line to the host now (no checks: also used on the way out of a failure)."""
        if self._lines:
            lines, self._lines = self._lines, []
            self._write("\n".join(lines))
        self._due = time.monotonic() + self._interval


def hint(out: Output, text: str) -> None:
    """A next-step suggestion after a command that starts a hunt, for a person at a terminal
    only: never in a pipe, a test or --json (callers skip it there). SOSEXT_HINTS=1 forces
    it on, SOSEXT_HINTS=0 off."""
    forced = os.environ.get("SOSEXT_HINTS", "")
    if forced == "0" or (forced == "" and not os.isatty(1)):
        return
    out.line()
    out.line(f"Next: {text}")
