"""Managed call stacks: what a thread's frames are, as the runtime's own stack walker sees them.

The walk is the DAC's (IXCLRDataTask::CreateStackWalk), which needs the thread's registers
from the host (the data target's GetThreadContext). Each stop is either a managed method's
frame (a stack pointer, an instruction pointer and the method there) or one of the runtime's
explicit Frames (clr!Frame objects on the stack: InlinedCallFrame for a P/Invoke,
PrestubMethodFrame …) that mark transitions between managed and native code.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable

from ...dac.xclrdata import VLOC_REGISTER, StackWalk, Value, context_registers, context_sp_ip, task_by_os_thread_id
from ... import interrupts
from ...errors import SosError

if TYPE_CHECKING:
    from ..runtime import ClrRuntime

# A walk that never ends means a corrupt stack; real stacks are far shorter.
MAX_FRAMES = 100_000


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


def walk_stack(runtime: "ClrRuntime", os_tid: int, *, arguments: bool = False, local_variables: bool = False,
               registers: bool = False, max_frames: int = 0) -> ClrStack:
    """The managed frames of OS thread ``os_tid``, innermost first.

    ``arguments``/``local_variables`` also collect each managed frame's values where the runtime
    can describe them, ``registers`` each stop's register values (non-volatile ones are exact,
    volatile ones are whatever unwinding left); ``max_frames`` (0: all) stops early. Raises
    NotManagedThread when the runtime has no thread on ``os_tid``."""
    runtime.refresh()
    dac = runtime.reader
    arch = runtime.target.arch
    if getattr(dac, "name", "dac") == "contracts":
        return _contracts_walk(runtime, os_tid, max_frames, registers)
    hr, task = task_by_os_thread_id(dac, os_tid)
    if task is None:
        raise NotManagedThread(os_tid, hr)
    with task:
        hr, walk = task.create_stack_walk()
        if walk is None:
            raise NotManagedThread(os_tid, hr, is_managed=True)
        with walk:
            return _walk(runtime, os_tid, walk, arch, arguments, local_variables, registers, max_frames)


def _walk(runtime: "ClrRuntime", os_tid: int, walk: StackWalk, arch: str, want_args: bool, want_locals: bool,
          want_registers: bool, max_frames: int) -> ClrStack:
    frames: list[ClrStackFrame] = []
    limit = max_frames or MAX_FRAMES
    hr = 0
    while True:
        if interrupts.requested():  # a partial stack is still worth printing
            return ClrStack(os_tid, tuple(frames), complete=True, interrupted=True)
        ctx = walk.context(arch)
        if ctx is None:
            hr = 0x80004005  # no context for this stop: the walk cannot go on sensibly
            break
        sp, ip = context_sp_ip(arch, ctx)
        frame_addr = walk.frame_address()
        if frame_addr:
            frame = _runtime_frame(runtime, walk, frame_addr, ip)
        else:
            frame = _managed_frame(runtime, walk, sp, ip, want_args, want_locals)
        if want_registers:
            frame = replace(frame, registers=context_registers(arch, ctx))
        frames.append(frame)
        if len(frames) >= limit:
            return ClrStack(os_tid, tuple(frames), complete=True, truncated=True)
        hr = walk.next()
        if hr != 0:
            break
    # Next() answers S_FALSE (1) at the normal end; anything with the failure bit is a broken walk.
    return ClrStack(os_tid, tuple(frames), complete=not hr & 0x80000000)


def _contracts_walk(runtime: "ClrRuntime", os_tid: int, max_frames: int, registers: bool = False) -> ClrStack:
    """The walk of the contracts reader (contracts/stackwalk.py: x86-64 and AArch64 targets).
    Arguments and locals are not collected (their locations are in the JIT's debug info);
    registers are the walk's on x86-64 (the integer registers of the DAC's CONTEXT)."""
    reader = runtime.reader
    if not any(t.os_thread_id == os_tid for _a, t in reader.threads()):
        raise NotManagedThread(os_tid)
    frames: list[ClrStackFrame] = []
    want = registers and runtime.target.arch == "x86_64"
    for f in reader.stack_frames(os_tid)[:max_frames or MAX_FRAMES]:
        regs = {name: f.registers.get(name, 0) for name in _CONTEXT_REGISTERS} if want and f.registers else None
        if f.method_desc:
            frames.append(ClrStackFrame(FrameKind.MANAGED, f.sp, f.ip, f.method_desc,
                                        reader.method_desc_name(f.method_desc) or "", registers=regs))
        else:
            # As the DAC's walk: a runtime Frame's stack pointer is the Frame's address.
            md = f.frame_method_desc
            method = (reader.method_desc_name(md) or "<unknown method>") if md else ""
            frames.append(ClrStackFrame(FrameKind.RUNTIME, f.frame, f.ip, md, method, frame_address=f.frame,
                                        frame_name=f.frame_kind, registers=regs))
    return ClrStack(os_tid, tuple(frames), complete=True)


# The registers context_registers reads from an x86-64 CONTEXT, in its order.
_CONTEXT_REGISTERS = ("rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13",
                      "r14", "r15", "rip", "eflags")


def _runtime_frame(runtime: "ClrRuntime", walk: StackWalk, frame_addr: int, ip: int) -> ClrStackFrame:
    dac = runtime.reader
    try:
        vtable = runtime.target.read_pointer(frame_addr)
    except SosError:
        vtable = 0
    name = (dac.frame_name(vtable) if vtable else None) or "Frame"
    md = dac.method_desc_from_frame(frame_addr) or 0
    method = ""
    if md:
        method = dac.method_desc_name(md) or "<unknown method>"
    else:
        # No MethodDesc on the Frame itself: the walk's frame may still know its method.
        frame = walk.frame()
        if frame is not None:
            with frame:
                mi = frame.method_instance()
                if mi is not None:
                    with mi:
                        method = mi.name() or ""
    return ClrStackFrame(FrameKind.RUNTIME, frame_addr, ip, md, method, frame_address=frame_addr, frame_name=name)


def _managed_frame(runtime: "ClrRuntime", walk: StackWalk, sp: int, ip: int, want_args: bool,
                   want_locals: bool) -> ClrStackFrame:
    dac = runtime.reader
    md = dac.method_desc_from_ip(ip) or 0
    name = (dac.method_desc_name(md) or "") if md else ""
    args: tuple[FrameValue, ...] | None = None
    local_values: tuple[FrameValue, ...] | None = None
    if want_args or want_locals:
        frame = walk.frame()
        if frame is not None:
            with frame:
                ok = True
                if want_args:
                    args, ok = _values(frame.num_arguments(), frame.argument)
                # As SOS: once the arguments could not be listed, the locals are not tried.
                if want_locals and ok:
                    local_values, _ok = _values(frame.num_locals(), frame.local)
    return ClrStackFrame(FrameKind.MANAGED, sp, ip, md, name, arguments=args, locals=local_values)


def _values(count: int | None, get: Callable[[int], tuple[Value | None, str]]
            ) -> tuple[tuple[FrameValue, ...] | None, bool]:
    """(values, complete): None and False when the runtime cannot count them."""
    if count is None:
        return None, False
    out = []
    for i in range(count):
        value, name = get(i)
        if value is None:
            return tuple(out), False  # SOS stops at the first value the runtime cannot give
        with value:
            locs = value.locations()
            location, in_reg = None, False
            if locs is not None and len(locs) == 1:
                flags, addr = locs[0]
                in_reg = flags == VLOC_REGISTER
                location = None if in_reg else addr
            data, ok = value.data()
        out.append(FrameValue(name, location, in_reg, data, read_failed=not ok))
    return tuple(out), True


def module_path(runtime: "ClrRuntime", module: int) -> str:
    """Path of a runtime Module's file as the runtime loaded it, "" when unknown; cached per
    target generation."""
    cache: dict[int, str] = runtime.cache("stacks.module_paths", dict)
    path = cache.get(module)
    if path is None:
        dac = runtime.reader
        data = dac.module_data(module) if module else None
        path = (dac.pe_file_name(data.pe_assembly) if data is not None and data.pe_assembly else None) or ""
        cache[module] = path
    return path


def module_file_name(runtime: "ClrRuntime", module: int) -> str:
    """File name (no directory) of a runtime Module, "" when unknown."""
    return module_path(runtime, module).replace("\\", "/").rsplit("/", 1)[-1]
