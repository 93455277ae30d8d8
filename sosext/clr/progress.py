"""Progress of long work on stderr, and the Ctrl-C check that goes with it.

Hosts install an ``interrupt`` callable (LLDB's SBDebugger.InterruptRequested, a SIGINT
flag in the CLI); long loops call :meth:`Progress.update`, which raises
:class:`~sosext.errors.Interrupted` when the user asked to stop and prints a line such as
``Scanning heap: 120 MB / 512 MB (23%)...`` at most every ``interval`` seconds.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Callable, TextIO

from ..errors import Interrupted

_interrupt_source: Callable[[], bool] = lambda: False
_noted = False  # a Ctrl-C that arrived where it could not be raised (inside a DAC callback)


def set_interrupt_source(fn: Callable[[], bool]) -> None:
    global _interrupt_source, _noted
    _interrupt_source = fn
    _noted = False


def note_interrupt() -> None:
    global _noted
    _noted = True


def take_noted_interrupt() -> bool:
    """Whether a Ctrl-C was swallowed by a callback since the command started (and forget it)."""
    global _noted
    hit, _noted = _noted, False
    return hit


def interrupted() -> bool:
    global _noted
    if _noted:
        _noted = False
        return True
    try:
        return bool(_interrupt_source())
    except Exception:  # noqa: BLE001 - a host API hiccup must not break the work
        return False


def check_interrupt() -> None:
    if interrupted():
        raise Interrupted()


class Progress:
    def __init__(self, stream: TextIO | None = sys.stderr, interval: float | None = None, enabled: bool = True) -> None:
        self.stream = stream
        # SOSEXT_PROGRESS_INTERVAL (seconds) exists for tests and for people who want more or less.
        self.interval = interval if interval is not None else float(os.environ.get("SOSEXT_PROGRESS_INTERVAL", "2"))
        self.enabled = enabled and stream is not None
        self.label = ""
        self.total = 0
        self._t0 = 0.0
        self._last = 0.0
        self._shown = False

    @classmethod
    def silent(cls) -> "Progress":
        return cls(stream=None, enabled=False)

    def start(self, label: str, total: int) -> None:
        self.label = label
        self.total = total
        self._t0 = self._last = time.monotonic()
        self._shown = False

    def update(self, done: int) -> None:
        check_interrupt()
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < self.interval:
            return
        self._last = now
        self._shown = True
        if self.total:
            pct = 100.0 * done / self.total
            self.stream.write(f"{self.label}: {done >> 20:,} MB / {self.total >> 20:,} MB ({pct:.0f}%)...\n")
        else:
            self.stream.write(f"{self.label}: {done:,}...\n")
        self.stream.flush()

    def finish(self) -> None:
        if self._shown and self.stream is not None:
            self.stream.write(f"{self.label}: done in {time.monotonic() - self._t0:.1f} s\n")
            self.stream.flush()
