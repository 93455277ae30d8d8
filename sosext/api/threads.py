"""Managed threads and their call stacks."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..clr.threads.stacks import ClrStackFrame, FrameKind, walk_stack
from ..clr.threads.threads import ClrThread
from ..errors import SosError

if TYPE_CHECKING:
    from ..clr.runtime import ClrRuntime


@dataclass(frozen=True, slots=True)
class Frame:
    """One stop of a managed stack walk, innermost first.

    ``kind`` is "managed" (a managed method's frame) or "runtime" (one of the runtime's
    transition Frames, e.g. an InlinedCallFrame around a P/Invoke; ``frame_name`` names it).
    ``method`` is "Namespace.Type.Method(ArgTypes)"; for a runtime Frame without a method,
    its name in brackets ("[InlinedCallFrame]"); "" when unknown.
    """

    kind: str
    sp: int  # the frame's stack pointer (a runtime Frame: its address)
    ip: int
    method: str
    method_desc: int  # 0 when unknown
    frame_name: str = ""


class Thread:
    """A thread the runtime knows: running, or not started yet, or finished."""

    __slots__ = ("_runtime", "_clr", "_frames", "_has_registers")

    def __init__(self, runtime: "ClrRuntime", clr: ClrThread, *, has_registers: bool = True) -> None:
        self._runtime = runtime
        self._has_registers = has_registers
        self._clr = clr
        self._frames: list[Frame] | None = None

    def __repr__(self) -> str:
        return f"<Thread managed_id={self.managed_id} os_id={self.os_id:#x}>"

    @property
    def os_id(self) -> int:
        """The OS thread id (LWP); 0 while the thread does not run on one."""
        return self._clr.os_id

    @property
    def managed_id(self) -> int:
        """Thread.ManagedThreadId."""
        return self._clr.managed_id

    @property
    def address(self) -> int:
        """The runtime's Thread object."""
        return self._clr.address

    @property
    def is_alive(self) -> bool:
        """Running on an OS thread: started and not finished."""
        return bool(self._clr.os_id) and not self._clr.is_dead and not self._clr.is_unstarted

    @property
    def is_background(self) -> bool:
        """Thread.IsBackground: it does not keep the process running."""
        return self._clr.is_background

    @property
    def is_finalizer(self) -> bool:
        """The runtime's finalizer thread."""
        return self._clr.is_finalizer

    @property
    def is_threadpool_worker(self) -> bool:
        """A worker thread of the managed thread pool."""
        return self._clr.is_threadpool_worker

    @property
    def last_exception(self) -> int:
        """Address of the exception object the thread threw last, 0 if none."""
        return self._clr.last_exception

    @property
    def frames(self) -> list[Frame]:
        """Its managed call stack, innermost frame first (walked once, on first use).

        Empty for a thread that runs on no OS thread. Needs the thread's registers: a core or
        a debugger has them; a process opened with ``sosext.open(pid=...)`` does not, and
        this raises SosError there."""
        if self._frames is None:
            if not self.is_alive:
                self._frames = []
            elif not self._has_registers:
                raise SosError("call stacks need thread registers: open a core, use "
                               "sosext.open(pid=..., snapshot=True), or sosext.current() in a debugger")
            else:
                stack = walk_stack(self._runtime, self._clr.os_id)
                self._frames = [_frame(f) for f in stack.frames]
        return self._frames


def _frame(f: ClrStackFrame) -> Frame:
    if f.kind is FrameKind.MANAGED:
        return Frame("managed", f.sp, f.ip, f.method_name, f.method_desc)
    return Frame("runtime", f.sp, f.ip, f.method_name or f"[{f.frame_name}]", f.method_desc, f.frame_name)
