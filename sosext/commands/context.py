"""What a running command sees: the session, its output, progress and options."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..clr.progress import Progress
from ..render.output import Output

if TYPE_CHECKING:
    from ..clr.heap.heap import ClrHeap
    from ..clr.runtime import ClrRuntime
    from ..session import Session


class CommandContext:
    def __init__(self, session: "Session", out: Output, progress: Progress) -> None:
        self.session = session
        self.out = out
        self.progress = progress

    @property
    def runtime(self) -> "ClrRuntime":
        return self.session.runtime()

    @property
    def heap(self) -> "ClrHeap":
        return self.runtime.heap
