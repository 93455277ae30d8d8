"""Ctrl-C, in one place: every layer asks here whether the user wants the command to stop.

A Ctrl-C reaches sosext in three ways, each host's own: LLDB answers a question
(``SBCommandInterpreter.WasInterrupted``, installed with :func:`set_poll`); the CLI's SIGINT
handler and GDB's KeyboardInterrupt call :func:`request`; and a KeyboardInterrupt raised
while the DAC calls back into Python cannot propagate through ctypes, so the data target
calls :func:`request` too and answers the DAC with a failure. The request stands until the
next command starts (:func:`clear`), so every later check of this command sees it.

This module sits below every layer (like ``errors.py``) and imports nothing of sosext.
"""
from __future__ import annotations

from typing import Callable

_requested = False
_poll: Callable[[], bool] = lambda: False


def set_poll(fn: Callable[[], bool] | None) -> None:
    """Install the host's own question "did the user press Ctrl-C?" (None: no question)."""
    global _poll
    _poll = fn if fn is not None else (lambda: False)


def request() -> None:
    """Record a Ctrl-C that arrived where it could not (or should not) be raised."""
    global _requested
    _requested = True


def clear() -> None:
    """A new command starts: an earlier Ctrl-C is not its concern."""
    global _requested
    _requested = False


def recorded() -> bool:
    """Whether :func:`request` was called since the command started."""
    return _requested


def requested() -> bool:
    """Whether the user asked the running command to stop (recorded or polled)."""
    if _requested:
        return True
    try:
        return bool(_poll())
    except Exception:  # noqa: BLE001 - a host API hiccup must not break the work
        return False
