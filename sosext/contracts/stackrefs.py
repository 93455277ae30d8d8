"""A thread's stack references on AArch64 without the DAC: for each managed frame of the walk
(stackwalk.py), the GC info of its method (clr/gcinfo.py decodes the arm64 encoding) says
which registers and stack slots hold references at the frame's code offset; their values are
read from the unwound registers and the stack. The records are the DAC's StackRefData, so the
model's root search (clr/roots.py) takes them unchanged.

What is reported, as the runtime's GC stack walk does for a stopped thread:
* untracked stack slots, always;
* tracked slots live at the offset: the live set recorded at a safe point (the return address
  of a call, which every frame but a thread's interrupted leaf is at), or, in a fully
  interruptible range, the state after replaying each slot's transitions up to the offset;
* register slots only where the walk knows the register's value (after resuming at an
  InlinedCallFrame the callee-saved registers are not recorded, and the JIT keeps no references
  in them across a P/Invoke).
"""
from __future__ import annotations

from ..clr.gcinfo import ENCODINGS, SLOT_INTERIOR, SLOT_PINNED, GcInfo, decode_gcinfo
from ..readers.records import StackRefData
from .stackwalk import StackWalker

_GC_INFO_BYTES = 1 << 16  # more than any method's GC info
_SP_REGISTER = 31         # "Sp" in the arm64 GC register numbering
_SOURCE_IP = 0            # SOS_StackSourceIP: a managed frame


def register_name(number: int) -> str | None:
    """The DAC's name of an arm64 GC register number (X0-X28, Fp, Lr, Sp)."""
    names = ENCODINGS["aarch64"].registers
    return names[number] if 0 <= number < len(names) else None


def _live_tracked(info: GcInfo, offset: int) -> list[int]:
    if offset in info.safe_points:
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
    return []


def stack_references(walker: StackWalker, os_tid: int, first_frame: int) -> list[StackRefData]:
    """Every reference the GC would find on thread ``os_tid``'s managed frames."""
    target = walker.target
    out: list[StackRefData] = []
    infos: dict[int, GcInfo] = {}
    for frame, regs, caller, known in walker.steps(os_tid, first_frame):
        if not frame.method_desc:
            continue
        block = walker.manager.code_block(frame.ip)
        if block is None or not block.gc_info:
            continue
        info = infos.get(block.gc_info)
        if info is None:
            info = infos[block.gc_info] = decode_gcinfo(bytes(target.read_partial(block.gc_info, _GC_INFO_BYTES)),
                                                        "aarch64", 4)
        tracked = [s for s in info.slots if not s.untracked]
        live = [tracked[i] for i in _live_tracked(info, block.relative_offset) if i < len(tracked)]
        for slot in live + [s for s in info.slots if s.untracked]:
            flags = (1 if slot.flags & SLOT_INTERIOR else 0) | (2 if slot.flags & SLOT_PINNED else 0)
            if slot.register is not None:
                name = f"x{slot.register}"
                if slot.register > 30 or name not in known:
                    continue
                out.append(StackRefData(1, slot.register, 0, 0, regs[name], flags, _SOURCE_IP, frame.ip, frame.sp))
                continue
            if slot.stack_base == 0:      # caller.sp
                base, register = caller["sp"], _SP_REGISTER
            elif slot.stack_base == 1:    # sp
                base, register = regs["sp"], _SP_REGISTER
            else:                         # the frame register (fp)
                number = info.frame_register if info.frame_register is not None else 29
                base, register = regs.get(f"x{number}", 0), number
            address = base + slot.offset
            value = int.from_bytes(bytes(target.read_partial(address, 8)), "little")
            out.append(StackRefData(1, register, slot.offset, address, value, flags, _SOURCE_IP, frame.ip, frame.sp))
    return out
