"""A thread's stack references without the DAC, on x86-64 and AArch64: for each managed frame
of the walk (stackwalk.py), the GC info of its method (formats/gcinfo.py decodes both encodings)
says which registers and stack slots hold references at the frame's code offset; their values
are read from the unwound registers and the stack. The records are the DAC's StackRefData
(GcInfoDecoder::EnumerateLiveSlots reporting through the DAC's stack reference walker), so
the model's root search (clr/roots/roots.py) takes them unchanged:

* a register slot is reported with its register number, offset and address 0, the
  register's value as the object; a stack slot with its base register (the frame register,
  the stack pointer, or ``-(sp+1)`` for the caller's stack pointer), its offset and address;
* untracked slots always; tracked slots live at the offset: the live set recorded at a safe
  point (the return address of a call, which every frame but a thread's running leaf is
  at), or, in a fully interruptible range, the state after replaying each slot's
  transitions up to the offset; neither: only the untracked slots;
* scratch registers (rax, rcx, rdx, rsi, rdi, r8-r11 on Unix x64; x0-x17 on arm64) and the
  outgoing argument area only for the frame the thread is executing (the runtime's
  reportScratchSlots), and registers only where the walk knows their value.
"""
from __future__ import annotations

from ..formats.gcinfo import ENCODINGS, SLOT_INTERIOR, SLOT_PINNED, GcInfo, decode_gcinfo
from ..readers.records import StackRefData
from .stackwalk import StackWalker

_GC_INFO_BYTES = 1 << 16  # more than any method's GC info
_SOURCE_IP = 0            # SOS_StackSourceIP: a managed frame


class _Abi:
    """An architecture's GC register numbering (the names the walk's registers go by), its
    stack pointer's number and the registers a call preserves."""

    def __init__(self, names: tuple[str, ...], sp_number: int, fp_number: int, preserved: frozenset[int]) -> None:
        self.names, self.sp_number, self.fp_number, self.preserved = names, sp_number, fp_number, preserved

    def register(self, number: int) -> str:
        return self.names[number] if 0 <= number < len(self.names) else ""


_ABIS = {
    # x64's CONTEXT order (rsp is 4); Unix x64 preserves rbx, rbp, r12-r15 across calls.
    "x86_64": _Abi(("rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13",
                    "r14", "r15"), 4, 5, frozenset({3, 5, 12, 13, 14, 15})),
    # arm64: x0-x28, fp (x29), lr (x30), sp (31); x19-x30 are preserved.
    "aarch64": _Abi(tuple(f"x{i}" for i in range(31)) + ("sp",), 31, 29, frozenset(range(19, 32))),
}


def register_name(number: int, arch: str = "aarch64") -> str | None:
    """The DAC's name of a GC register number (GetRegisterName): ``rbx`` / ``X19``, and
    ``caller.`` before a caller-frame register, numbered ``-(reg+1)``."""
    names = ENCODINGS[arch].registers
    caller = number < 0
    if caller:
        number = -number - 1
    if not 0 <= number < len(names):
        return None
    return ("caller." if caller else "") + names[number]


def _live_tracked(info: GcInfo, offset: int, aborted: bool = False) -> list[int] | None:
    """Tracked slots live at ``offset``; None: report nothing of the frame.

    GcInfoDecoder::EnumerateLiveSlots: at an offset that is no safe point (or where execution
    was aborted), a method with fully interruptible ranges reports nothing unless a range holds
    the offset (a prolog, such as a leaf frame stopped on its first instruction); a method
    with none reports its untracked slots alone."""
    if offset in info.safe_points and not aborted:
        return info.live_at_safe_points[info.safe_points.index(offset)]
    for start, end in info.interruptible_ranges:
        if start <= offset < end:
            live: set[int] = set()
            for at, slot, becomes_live in info.lifetimes:
                if at > offset:
                    break
                if becomes_live:
                    live.add(slot)
                else:
                    live.discard(slot)
            return sorted(live)
    return None if info.interruptible_ranges else []


def stack_references(walker: StackWalker, os_tid: int, first_frame: int) -> list[StackRefData]:
    """Every reference the GC would find on thread ``os_tid``'s managed frames."""
    target = walker.target
    abi = _ABIS[target.arch]
    out: list[StackRefData] = []
    infos: dict[int, GcInfo] = {}
    funclet_of = 0   # after a funclet: its method, whose frames up to the parent's are not reported
    steps = list(walker.steps(os_tid, first_frame))
    for n, step in enumerate(steps):
        frame, regs, caller, known, block = step.frame, step.regs, step.caller, step.known, step.block
        if not frame.method_desc or block is None:
            continue
        if funclet_of:
            # Frames between an EH funclet and its method's frame were unwound by the exception
            # it handles; the parent's own frame was reported through the funclet (the runtime's
            # ParentOfFuncletStackFrame: report only the leaf).
            if frame.method_desc == funclet_of and not block.funclet:
                funclet_of = 0
            continue
        a_filter = block.funclet and _called_as_filter(walker, steps, n)
        if block.funclet and not a_filter:
            funclet_of = frame.method_desc
        if not block.gc_info:
            continue
        info = infos.get(block.gc_info)
        if info is None:
            info = infos[block.gc_info] = decode_gcinfo(bytes(target.read_partial(block.gc_info, _GC_INFO_BYTES)),
                                                        target.arch, 4)
        tracked = [s for s in info.slots if not s.untracked]
        indexes = _live_tracked(info, block.relative_offset, step.interrupted)
        if indexes is None:
            continue
        live = [(tracked[i], False) for i in indexes if i < len(tracked)]
        # A filter runs in the first pass: the frames below it, its parent's among them, are
        # live and report themselves; the filter reports its tracked slots only (the untracked
        # ones are the parent's frame's: the runtime's SuppressUntrackedSlots).
        untracked_slots = [] if a_filter else [(s, True) for s in info.slots if s.untracked]
        for slot, untracked in live + untracked_slots:
            flags = (1 if slot.flags & SLOT_INTERIOR else 0) | (2 if slot.flags & SLOT_PINNED else 0)
            scratch_ok = step.active or untracked
            if slot.register is not None:
                name = abi.register(slot.register)
                if not name or name not in known or (not scratch_ok and slot.register not in abi.preserved):
                    continue
                out.append(StackRefData(1, slot.register, 0, 0, regs[name], flags, _SOURCE_IP, frame.ip, frame.sp))
                continue
            if slot.stack_base == 0:      # caller.sp
                base, register = caller[abi.register(abi.sp_number)], -(abi.sp_number + 1)
            elif slot.stack_base == 1:    # sp
                if not scratch_ok and 0 <= slot.offset < info.stack_parameter_area:
                    continue              # the outgoing argument area is the callee's
                base, register = regs[abi.register(abi.sp_number)], abi.sp_number
            else:                         # the frame register (rbp, fp)
                number = info.frame_register if info.frame_register is not None else abi.fp_number
                base, register = regs.get(abi.register(number), 0), number
            address = base + slot.offset
            value = int.from_bytes(bytes(target.read_partial(address, 8)), "little")
            out.append(StackRefData(1, register, slot.offset, address, value, flags, _SOURCE_IP, frame.ip, frame.sp))
    return out


def _called_as_filter(walker: StackWalker, steps: list, n: int) -> bool:
    """Whether the funclet of ``steps[n]`` is a filter: the first runtime Frame after it,
    before any other managed frame, is the InlinedCallFrame the first pass calls filters
    through (stackwalk.py, ``calls_a_filter``)."""
    for step in steps[n + 1:]:
        if step.frame.frame:
            return walker.calls_a_filter(step.frame.frame)
        if step.frame.method_desc:
            return False
    return False
