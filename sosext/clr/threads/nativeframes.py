"""Native frames of a thread, for clrstack -f: the frames the runtime's walk does not show
(native code above the first managed frame, the runtime's code between managed frames).

The runtime's stack walker knows only managed code; SOS asks the debugger's native unwinder.
Here native code is unwound with its modules' call frame information (targets.cfi, .eh_frame):
from the thread's registers while the code is native, and again from each managed frame the
runtime's walk reports (its registers), one frame-pointer step out of it — JIT-compiled code
keeps rbp frames (fp/lr pairs on AArch64) — when that lands in native code just after a call.
Unwinding stops at managed code, at a function without rules, or where the stack pointer would
not rise within the thread's stack. x86_64 and AArch64.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import SosError
from ...targets.base import normalize_registers
from ...targets.cfi import unwind_step
from .rawstack import RawFrame, describe_address, is_call_before, native_module, stack_top

if TYPE_CHECKING:
    from ..runtime import ClrRuntime

_MAX_STEPS = 512
# (instruction pointer, stack pointer, frame pointer) under the Target protocol's names.
_NAMES = {"x86_64": ("rip", "rsp", "rbp"), "aarch64": ("pc", "sp", "x29")}


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
    names = _NAMES.get(target.arch)
    if names is None:
        return []
    ip_name, sp_name, fp_name = names
    regs = dict(target.registers(os_tid))
    if not regs.get(sp_name):
        return []
    low = regs[sp_name]
    top = stack_top(runtime, os_tid, low)
    modules = target.modules()
    found: dict[int, NativeFrame] = {}

    def read(address: int) -> int:
        if not low <= address < top:
            raise SosError("outside the stack")
        return target.read_pointer(address)

    def unwind(regs: dict[str, int], leaf: bool) -> None:
        for _ in range(_MAX_STEPS):
            ip, sp = regs[ip_name], regs[sp_name]
            code = describe_address(runtime, ip, modules=modules)
            module = native_module(modules, ip)
            if code is None or code.is_managed or module is None or sp in found:
                return
            found[sp] = NativeFrame(sp, ip, code)
            try:
                step = unwind_step(module, regs, read, leaf, target.arch)
            except SosError:
                return
            if step is None or not sp < step.sp < top or not _after_call(runtime, step.ip):
                return
            regs, leaf = step.regs, False

    unwind(regs, True)
    for ctx in map(lambda c: normalize_registers(target.arch, c), managed_registers):
        # The frame pointer of JIT-compiled code points at the saved (frame pointer, return
        # address) pair on both architectures.
        fp, sp = ctx.get(fp_name, 0), ctx.get(sp_name, 0)
        if not low <= sp <= fp < top - 16:
            continue
        try:
            ret, caller_fp = read(fp + 8), read(fp)
        except SosError:
            continue
        caller = describe_address(runtime, ret, modules=modules)
        if caller is not None and not caller.is_managed and _after_call(runtime, ret):
            unwind({**ctx, ip_name: ret, sp_name: fp + 16, fp_name: caller_fp}, False)
    return [found[sp] for sp in sorted(found)]


def _after_call(runtime: "ClrRuntime", address: int) -> bool:
    try:
        code = bytes(runtime.target.read(address - 8, 8))
    except SosError:
        return False
    return is_call_before(code, runtime.target.arch)
