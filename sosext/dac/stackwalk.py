"""The DAC reader's stack walk (``SosDac.stack_frames``): IXCLRDataTask::CreateStackWalk.

The walk needs the thread's registers from the host (the data target's GetThreadContext).
Each stop's method comes from its instruction pointer, a runtime Frame's from the Frame; a
managed stop's caller's stack pointer from the next stop's context (the walk has none after its
last stop, so that one has none); with
``arguments``/``local_variables`` each managed stop's values come from IXCLRDataFrame, which
reads the JIT's native variable info.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Callable

from .. import interrupts
from ..errors import SosError
from ..readers.stacks import MAX_FRAMES, ClrStack, ClrStackFrame, FrameKind, FrameValue, NotManagedThread
from .xclrdata import (VLOC_REGISTER, StackWalk, Value, context_frame_pointer, context_registers, context_sp_ip,
                       task_by_os_thread_id)

if TYPE_CHECKING:
    from .sos import SosDac


def stack_frames(dac: "SosDac", os_tid: int, *, arguments: bool = False, local_variables: bool = False,
                 registers: bool = False, max_frames: int = 0) -> ClrStack:
    hr, task = task_by_os_thread_id(dac, os_tid)
    if task is None:
        raise NotManagedThread(os_tid, hr)
    with task:
        hr, walk = task.create_stack_walk()
        if walk is None:
            raise NotManagedThread(os_tid, hr, is_managed=True)
        with walk:
            return _walk(dac, os_tid, walk, arguments, local_variables, registers, max_frames)


def _walk(dac: "SosDac", os_tid: int, walk: StackWalk, want_args: bool, want_locals: bool,
          want_registers: bool, max_frames: int) -> ClrStack:
    arch = dac.data_target.target.arch
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
        if frames and frames[-1].is_managed:
            # The walk stepped here by unwinding that frame: this stop's registers are its caller's
            # (a runtime Frame is reported with the registers the walk has when it reaches it).
            frames[-1] = replace(frames[-1], caller_sp=sp)
        frame_addr = walk.frame_address()
        if frame_addr:
            frame = _runtime_frame(dac, walk, frame_addr, ip)
        else:
            frame = _managed_frame(dac, walk, sp, ip, context_frame_pointer(arch, ctx), want_args, want_locals)
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


def _runtime_frame(dac: "SosDac", walk: StackWalk, frame_addr: int, ip: int) -> ClrStackFrame:
    try:
        vtable = dac.data_target.target.read_pointer(frame_addr)
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


def _managed_frame(dac: "SosDac", walk: StackWalk, sp: int, ip: int, fp: int, want_args: bool,
                   want_locals: bool) -> ClrStackFrame:
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
    return ClrStackFrame(FrameKind.MANAGED, sp, ip, md, name, arguments=args, locals=local_values, frame_pointer=fp)


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
