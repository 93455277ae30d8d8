"""Progress of long work on stderr, and the checks that let a long command stop early.

Whether the user pressed Ctrl-C is asked of :mod:`sosext.interrupts` (one place for every
host); for a live process, hosts install a ``state`` callable that says
when the process stopped being readable (it exited, or ran). Long loops call
:func:`check_interrupt` every few thousand items, or :meth:`Progress.update`, which also
prints a line such as ``Scanning heap: 120 MB / 512 MB (23%)...`` at most every
``interval`` seconds. Either raises :class:`~sosext.errors.Interrupted` when the user asked
to stop, and :class:`~sosext.errors.TargetChanged` when the process went away under the
command. The interrupt flag is cheap and read on every call; the process state costs a
/proc read, so it is asked at most every ``STATE_INTERVAL`` seconds.

Rule for loops: poll at least every ~0.1 s of work. A loop doing Python work per object
polls every 4096 objects (``for i in polled(range(n))`` or ``if k & 4095 == 0``).
"""
from __future__ import annotations

import os
import sys
import threading
import time
from typing import Callable, Iterable, Iterator, TextIO, TypeVar

from .. import interrupts
from ..errors import Interrupted, TargetChanged

T = TypeVar("T")

_state_source: Callable[[], str | None] = lambda: None
_state_due = 0.0
STATE_INTERVAL = 0.25  # seconds between two questions about the process's state
POLL_EVERY = 4096  # items of per-object Python work between two checks
_thread = threading.local()  # .cancelled: set in a background thread (run_in_background)


def set_state_source(fn: Callable[[], str | None] | None) -> None:
    """``fn`` returns None while the target can be read, else why not (one line). None: no checks."""
    global _state_source, _state_due
    _state_source = fn if fn is not None else (lambda: None)
    _state_due = 0.0


def run_in_background(cancelled: threading.Event) -> None:
    """This thread does background work (clr/roots/background.py): it stops when ``cancelled`` is
    set, and never polls the host, whose API may belong to the main thread alone."""
    _thread.cancelled = cancelled


def check_interrupt() -> None:
    """Raise Interrupted after a Ctrl-C, TargetChanged when the live process went away."""
    global _state_due
    cancelled = getattr(_thread, "cancelled", None)
    if cancelled is not None:
        if cancelled.is_set():
            raise Interrupted()
        return
    if interrupts.requested():
        raise Interrupted()
    now = time.monotonic()
    if now >= _state_due:
        _state_due = now + STATE_INTERVAL
        try:
            problem = _state_source()
        except Exception:  # noqa: BLE001 - asking must not break the work; the end-of-command check decides
            problem = None
        if problem:
            raise TargetChanged(problem)


def polled(items: Iterable[T], every: int = POLL_EVERY) -> Iterator[T]:
    """``items``, with :func:`check_interrupt` before the first and every ``every`` items."""
    for k, item in enumerate(items):
        if k % every == 0:
            check_interrupt()
        yield item


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
