"""A Session ties a host to the runtimes of its targets.

Hosts create one Session and hand it a function that returns the current Target (the
debugger's selected process or core, or the CLI's core file). The session keeps one
ClrRuntime per target, so a second command on the same target reuses the DAC instance,
the heap model and its index.
"""
from __future__ import annotations

import sys
from typing import Any, Callable

from .clr.heap.indexcache import default_dir
from .clr.runtime import ClrRuntime
from .errors import SosError
from .targets.base import Target


class Session:
    def __init__(self, current_target: Callable[[], Target]) -> None:
        self._current_target = current_target
        self._runtimes: dict[Any, ClrRuntime] = {}
        self.settings: dict[str, Any] = {}

    def target(self) -> Target:
        return self._current_target()

    def runtime(self) -> ClrRuntime:
        return self.runtime_for(self.target())

    def runtime_for(self, target: Target) -> ClrRuntime:
        """The runtime of ``target`` (a breakpoint callback has its target; GDB's current one is
        'running' while a breakpoint decides whether to stop)."""
        key = getattr(target, "key", None) or id(target)
        rt = self._runtimes.get(key)
        if rt is None:
            _check_core(target)
            rt = ClrRuntime(target)
            if rt.reader_fallback:
                # An automatic change from the DAC reader: say once which reader answers and why.
                print(f"note: {rt.reader_reason}", file=sys.stderr)
            rt.workers = int(self.settings.get("workers", 1))
            rt.index_dir = self.settings.get("index_dir", default_dir())
            self._runtimes[key] = rt
        else:
            # The host may hand us a fresh wrapper object for the same process each time:
            # keep the runtime, but read through the newest wrapper.
            rt.rebind(target)
        return rt

    def built_runtimes(self) -> list[ClrRuntime]:
        """The runtimes already built (for a banner: asking never loads a DAC)."""
        return list(self._runtimes.values())

    def forget(self) -> None:
        """Drop every runtime (after setclrpath, or when targets went away)."""
        self._runtimes.clear()


def _check_core(target: Target) -> None:
    """A core that cannot hold a readable runtime (cut short, another architecture) says so
    here; the DAC's own failure would blame missing data or a bad module instead."""
    for core in (target, getattr(target, "core", None)):
        unusable = getattr(core, "unusable", None)
        if callable(unusable):
            problem = unusable()
            if problem:
                raise SosError(problem)
            return
