"""Native frames of a thread, for clrstack -f: the frames the runtime's walk does not show
(native code above the first managed frame, the runtime's code between managed frames).

The runtime's stack walker knows only managed code; SOS asks the debugger's native unwinder.
Here native code is unwound with its modules' call frame information (targets.cfi, .eh_frame):
from the thread's registers while the code is native, and again from each managed frame the
runtime's walk reports (its registers), one frame-pointer step out of it — JIT-compiled code
keeps rbp frames — when that lands in native code just after a call. Unwinding stops at managed
code, at a function without rules, or where the stack pointer would not rise within the
thread's stack. x86_64 only (elsewhere there are no native frames).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import SosError
from ..targets.cfi import unwind_step
from .rawstack import RawFrame, describe_address, is_call_before, native_module, stack_top

if TYPE_CHECKING:
    from .runtime import ClrRuntime

_MAX_STEPS = 512


@dataclass(frozen=True, slots=True)
class NativeFrame:
    sp: int  # the stack pointer in this frame
    ip: int  # the frame's instruction: a return address, but for the thread's leaf frame
    code: RawFrame  # the native module (and symbol) holding ``ip``


def native_frames(runtime: "ClrRuntime", os_tid: int,
                  managed_registers: list[dict[str, int]] = ()) -> list[NativeFrame]:
    """The thread's native frames, innermost first (see the module's description);
    ``managed_registers``: the registers of the managed frames of the runtime's walk."""
    target = runtime.target
    if target.arch != "x86_64":
        return []
    regs = dict(target.registers(os_tid))
    if not regs.get("rsp"):
        return []
    low = regs["rsp"]
    top = stack_top(runtime, os_tid, low)
    modules = target.modules()
    found: dict[int, NativeFrame] = {}

    def read(address: int) -> int:
        if not low <= address < top:
            raise SosError("outside the stack")
        return target.read_pointer(address)

    def unwind(regs: dict[str, int], leaf: bool) -> None:
        for _ in range(_MAX_STEPS):
            ip, sp = regs["rip"], regs["rsp"]
            code = describe_address(runtime, ip, modules=modules)
            module = native_module(modules, ip)
            if code is None or code.is_managed or module is None or sp in found:
                return
            found[sp] = NativeFrame(sp, ip, code)
            try:
                step = unwind_step(module, regs, read, leaf)
            except SosError:
                return
            if step is None or not sp < step.sp < top or not _after_call(runtime, step.ip):
                return
            regs, leaf = step.regs, False

    unwind(regs, True)
    for ctx in managed_registers:
        rbp, rsp = ctx.get("rbp", 0), ctx.get("rsp", 0)
        if not low <= rsp <= rbp < top - 16:
            continue
        try:
            ret, caller_rbp = read(rbp + 8), read(rbp)
        except SosError:
            continue
        caller = describe_address(runtime, ret, modules=modules)
        if caller is not None and not caller.is_managed and _after_call(runtime, ret):
            unwind({**ctx, "rip": ret, "rsp": rbp + 16, "rbp": caller_rbp}, False)
    return [found[sp] for sp in sorted(found)]


def _after_call(runtime: "ClrRuntime", address: int) -> bool:
    try:
        code = bytes(runtime.target.read(address - 8, 8))
    except SosError:
        return False
    return is_call_before(code, runtime.target.arch)
