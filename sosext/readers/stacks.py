"""What a reader's stack walk answers: a thread's stops, innermost first (``stack_frames``).

Both readers give these: the DAC reader from IXCLRDataTask::CreateStackWalk (dac/stackwalk.py),
the contracts reader from its own walk (contracts/stackwalk.py). Each stop is either a managed
method's frame (a stack pointer, an instruction pointer and the method there) or one of the
runtime's explicit Frames (clr!Frame objects on the stack: InlinedCallFrame for a P/Invoke,
PrestubMethodFrame …) that mark transitions between managed and native code.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from ..errors import SosError


class NotManagedThread(SosError):
    """The OS thread has no managed (runtime) thread, or the runtime cannot start walking it
    (``is_managed`` True: e.g. the debugger cannot give the thread's registers)."""

    def __init__(self, os_tid: int, hr: int = 0, is_managed: bool = False) -> None:
        self.os_tid = os_tid
        self.hr = hr
        self.is_managed = is_managed
        what = "cannot be walked" if is_managed else "is not a managed thread"
        super().__init__(f"thread {os_tid:#x} {what}")


class FrameKind(enum.Enum):
    MANAGED = "managed"  # a managed method's frame
    RUNTIME = "runtime"  # an explicit runtime Frame (clr!Frame)


@dataclass(frozen=True, slots=True)
class FrameValue:
    """An argument or local of a managed frame, as far as the runtime can tell."""

    name: str  # "" when unknown (the runtime keeps no local names)
    location: int | None  # its stack address when it lives in memory
    in_register: bool  # it lives in a register (SOS prints <CLR reg>)
    data: bytes | None  # its raw bytes; None when the runtime has none
    read_failed: bool = False  # the runtime knows where it is but could not read it

    @property
    def value(self) -> int | None:
        """The bytes as an unsigned integer (sizes 1, 2, 4, 8), 0 for other sizes; None without data."""
        if self.data is None:
            return None
        if len(self.data) in (1, 2, 4, 8):
            return int.from_bytes(self.data, "little")
        return 0


@dataclass(frozen=True, slots=True)
class ClrStackFrame:
    """One stop of the walk. For a runtime Frame, ``sp`` is the Frame's address (as SOS shows it)."""

    kind: FrameKind
    sp: int
    ip: int
    method_desc: int  # 0 when unknown
    method_name: str  # "Namespace.Type.Method(ArgTypes)", "" when unknown
    frame_address: int = 0  # runtime Frames: the clr!Frame
    frame_name: str = ""  # runtime Frames: "InlinedCallFrame", ...
    arguments: tuple[FrameValue, ...] | None = None  # None: not asked for, or not available
    locals: tuple[FrameValue, ...] | None = None
    registers: dict[str, int] | None = None  # the walk's (unwound) registers here, when asked for
    # A managed frame's frame register (rbp, x29) as the walk restored it, 0 when unknown: with
    # ``sp``, the base of the stack slots its GC info names (the generic context's, genericcontext.py).
    frame_pointer: int = 0
    # A managed frame's caller's stack pointer (the SP it returns to), as the walk found it when it
    # stepped to the next stop; 0 for the walk's last stop. Runtimes before .NET 10 measure the
    # generic context slot from it (genericcontext.py).
    caller_sp: int = 0

    @property
    def is_managed(self) -> bool:
        return self.kind is FrameKind.MANAGED


@dataclass(frozen=True, slots=True)
class ClrStack:
    os_thread_id: int
    frames: tuple[ClrStackFrame, ...]
    complete: bool  # False when the walk failed before the end (the frames so far are valid)
    interrupted: bool = False
    truncated: bool = False  # stopped at max_frames before the end


# A walk that never ends means a corrupt stack; real stacks are far shorter.
MAX_FRAMES = 100_000

# The registers of an x86-64 CONTEXT that a walk reports (-r), in the CONTEXT's order.
CONTEXT_REGISTERS_X64 = ("rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12",
                         "r13", "r14", "r15", "rip", "eflags")
