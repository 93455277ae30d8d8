"""One step out of a managed x86-64 frame, from the unwind info the JIT (or crossgen) wrote.

Managed code has no DWARF: each method's RUNTIME_FUNCTION (BeginAddress, EndAddress,
UnwindData, offsets from the code heap or image base) points to a Windows x64 UNWIND_INFO,
which the runtime uses on Linux too (dotnet/runtime src/coreclr/inc/win64unwind.h; the
runtime's own reader is src/coreclr/unwinder/amd64/unwinder.cpp, RtlVirtualUnwind's port):

    byte 0   Version (bits 0-2) | Flags (bits 3-7: 1 EHANDLER, 2 UHANDLER, 4 CHAININFO)
    byte 1   SizeOfProlog
    byte 2   CountOfUnwindCodes (16-bit slots)
    byte 3   FrameRegister (bits 0-3, 0: none) | FrameOffset (bits 4-7, scaled by 16)
    slots    UNWIND_CODE: CodeOffset (the prolog offset just past the instruction), then
             UnwindOp (bits 0-3) | OpInfo (bits 4-7); some ops take 1 or 2 more slots
    chained  with CHAININFO, after the slots (padded to an even count): the parent's
             RUNTIME_FUNCTION, whose codes are undone next.

The codes list the prolog backwards (last instruction first). Unwinding a frame in its body
undoes each of them; a pc inside the prolog undoes only those whose CodeOffset it has
passed. A pc inside an epilog is recognised the way the runtime does: version 1 by reading
the instructions at the pc (``add rsp``/``lea rsp`` then ``pop``s then ``ret`` or a jump out),
version 2 by its UWOP_EPILOG codes; the rest of the epilog is then emulated forward.

Registers use the names of the Target protocol: rax … r15, rip, rsp.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..errors import ContractError

# UNWIND_OP_CODES (win64unwind.h); SET_FPREG_LARGE is the runtime's Unix-only extension.
UWOP_PUSH_NONVOL, UWOP_ALLOC_LARGE, UWOP_ALLOC_SMALL, UWOP_SET_FPREG = 0, 1, 2, 3
UWOP_SAVE_NONVOL, UWOP_SAVE_NONVOL_FAR, UWOP_EPILOG, UWOP_SPARE_CODE = 4, 5, 6, 7
UWOP_SAVE_XMM128, UWOP_SAVE_XMM128_FAR, UWOP_PUSH_MACHFRAME, UWOP_SET_FPREG_LARGE = 8, 9, 10, 11
_EXTRA_SLOTS = (0, 1, 0, 0, 1, 2, 1, 2, 1, 2, 0, 2)  # UnwindOpExtraSlotTable
UNW_FLAG_CHAININFO = 0x4
_CHAIN_LIMIT = 32  # UNWIND_CHAIN_LIMIT
# The CONTEXT's integer register order, which OpInfo and FrameRegister number.
REGISTERS = ("rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi",
             "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15")

Read = Callable[[int, int], bytes]


@dataclass(frozen=True, slots=True)
class UnwindInfo:
    """A decoded UNWIND_INFO: its header, its code slots, and the chained parent entry."""

    version: int
    flags: int
    prolog_size: int
    frame_register: int
    frame_offset: int          # scaled by 16 on use
    slots: tuple[tuple[int, int, int], ...]   # (CodeOffset, UnwindOp, OpInfo) per 16-bit slot
    raw: tuple[int, ...]       # each slot as the 16-bit FrameOffset union member
    chained: tuple[int, int, int] | None      # (BeginAddress, EndAddress, UnwindData)

    @property
    def size(self) -> int:
        """Bytes of the header and code slots (what GetUnwindDataBlob counts, without the
        personality routine)."""
        return 4 + 2 * len(self.slots)


def op_slots(op: int, info: int) -> int:
    """Slots an unwind code takes (UnwindOpSlots): ALLOC_LARGE with OpInfo 1 takes 3."""
    if op == UWOP_ALLOC_LARGE and info:
        return 3
    return 1 + (_EXTRA_SLOTS[op] if op < len(_EXTRA_SLOTS) else 0)


def parse_unwind_info(data: bytes) -> UnwindInfo:
    """Decode an UNWIND_INFO from ``data`` (at least its header, slots and chained entry)."""
    if len(data) < 4:
        raise ContractError("an x64 UNWIND_INFO is cut short")
    version, flags = data[0] & 7, data[0] >> 3
    if version not in (1, 2):
        raise ContractError(f"x64 unwind info version {version} is not supported")
    count = data[2]
    if len(data) < 4 + 2 * count:
        raise ContractError("x64 unwind codes run past their unwind info")
    slots = tuple((data[4 + 2 * i], data[5 + 2 * i] & 0xF, data[5 + 2 * i] >> 4) for i in range(count))
    raw = tuple(int.from_bytes(data[4 + 2 * i: 6 + 2 * i], "little") for i in range(count))
    chained = None
    if flags & UNW_FLAG_CHAININFO:
        at = 4 + 2 * (count + (count & 1))
        if len(data) < at + 12:
            raise ContractError("a chained x64 unwind info is cut short")
        chained = tuple(int.from_bytes(data[at + 4 * i: at + 4 * i + 4], "little") for i in range(3))  # type: ignore[assignment]
    return UnwindInfo(version, flags, data[1], data[3] & 0xF, data[3] >> 4, slots, raw, chained)


def read_unwind_info(read: Read, address: int) -> UnwindInfo:
    header = read(address, 4)
    count, flags = header[2], header[0] >> 3
    size = 4 + 2 * count
    if flags & UNW_FLAG_CHAININFO:
        size += 2 * (count & 1) + 12
    return parse_unwind_info(read(address, size))


def _large_offset(info: UnwindInfo, index: int) -> int:
    """The 32-bit operand in the two slots after ``index``."""
    if index + 2 >= len(info.raw):
        raise ContractError("an x64 unwind code's operand runs past its unwind info")
    return info.raw[index + 1] | info.raw[index + 2] << 16


def _operand(info: UnwindInfo, index: int) -> int:
    if index + 1 >= len(info.raw):
        raise ContractError("an x64 unwind code's operand runs past its unwind info")
    return info.raw[index + 1]


def _frame_offset(info: UnwindInfo) -> int:
    """FrameOffset, or SET_FPREG_LARGE's 32-bit offset when FrameOffset is 15 and one is there."""
    if info.frame_offset == 15:
        i = 0
        while i < len(info.slots):
            _at, op, opinfo = info.slots[i]
            if op == UWOP_SET_FPREG_LARGE:
                return _large_offset(info, i)
            i += op_slots(op, opinfo)
    return info.frame_offset


def _establisher_frame(info: UnwindInfo, regs: dict[str, int], prolog_offset: int) -> int:
    """The frame base the SAVE_* codes are relative to (VirtualUnwind's EstablisherFrame)."""
    if info.frame_register == 0:
        return regs["rsp"]
    fp = regs.get(REGISTERS[info.frame_register], 0)
    if prolog_offset >= info.prolog_size or info.flags & UNW_FLAG_CHAININFO:
        return fp - 16 * _frame_offset(info)
    i = 0
    offset = info.frame_offset
    while i < len(info.slots):
        _at, op, opinfo = info.slots[i]
        if op == UWOP_SET_FPREG:
            break
        if op == UWOP_SET_FPREG_LARGE:
            offset = _large_offset(info, i)
            break
        i += op_slots(op, opinfo)
    if i < len(info.slots) and prolog_offset >= info.slots[i][0]:
        return fp - 16 * offset
    return regs["rsp"]


class _Unwinder:
    def __init__(self, read: Read, image_base: int, restored: set[str] | None) -> None:
        self.read, self.base, self.restored = read, image_base, restored

    def u64(self, address: int) -> int:
        return int.from_bytes(self.read(address, 8), "little")

    def restore(self, regs: dict[str, int], number: int, address: int) -> None:
        regs[REGISTERS[number]] = self.u64(address)
        if self.restored is not None:
            self.restored.add(REGISTERS[number])

    def prolog(self, entry: tuple[int, int, int], regs: dict[str, int], control_pc: int, frame_base: int) -> None:
        """UnwindPrologue: undo the codes the pc has passed, then the chained parents'."""
        machine_frame = False
        for _ in range(_CHAIN_LIMIT + 1):
            info = read_unwind_info(self.read, self.base + entry[2])
            prolog_offset = control_pc - (self.base + entry[0])
            i = 0
            while i < len(info.slots):
                at, op, opinfo = info.slots[i]
                if op > UWOP_SET_FPREG_LARGE:
                    raise ContractError(f"x64 unwind code {op} is not defined")
                if prolog_offset < at:
                    i += op_slots(op, opinfo)
                    continue
                if op == UWOP_PUSH_NONVOL:
                    self.restore(regs, opinfo, regs["rsp"])
                    regs["rsp"] += 8
                elif op == UWOP_ALLOC_LARGE:
                    if opinfo:
                        regs["rsp"] += _large_offset(info, i)
                        i += 2
                    else:
                        regs["rsp"] += 8 * _operand(info, i)
                        i += 1
                elif op == UWOP_ALLOC_SMALL:
                    regs["rsp"] += 8 * opinfo + 8
                elif op == UWOP_SET_FPREG:
                    regs["rsp"] = regs.get(REGISTERS[info.frame_register], 0) - 16 * info.frame_offset
                elif op == UWOP_SET_FPREG_LARGE:
                    regs["rsp"] = regs.get(REGISTERS[info.frame_register], 0) - 16 * _large_offset(info, i)
                    i += 2
                elif op == UWOP_SAVE_NONVOL:
                    self.restore(regs, opinfo, frame_base + 8 * _operand(info, i))
                    i += 1
                elif op == UWOP_SAVE_NONVOL_FAR:
                    self.restore(regs, opinfo, frame_base + _large_offset(info, i))
                    i += 2
                elif op in (UWOP_EPILOG, UWOP_SAVE_XMM128):
                    i += 1   # XMM registers are not tracked; an epilog code is not a prolog's
                elif op in (UWOP_SPARE_CODE, UWOP_SAVE_XMM128_FAR):
                    i += 2
                elif op == UWOP_PUSH_MACHFRAME:
                    machine_frame = True
                    at_rsp = regs["rsp"] + (8 if opinfo else 0)
                    regs["rip"] = self.u64(at_rsp)
                    regs["rsp"] = self.u64(at_rsp + 24)
                i += 1
            if info.chained is None:
                if not machine_frame:
                    regs["rip"] = self.u64(regs["rsp"])
                    regs["rsp"] += 8
                return
            entry = info.chained
        raise ContractError("x64 chained unwind infos do not end")

    def epilog_v1(self, code: bytes, regs: dict[str, int], info: UnwindInfo, entry: tuple[int, int, int],
                  control_pc: int) -> bool:
        """Version 1: recognise an epilog from the instructions at the pc; emulate it if so."""
        def at(i: int) -> int:
            return code[i] if i < len(code) else 0
        n = 0
        frame_register = 0
        if at(0) == 0x48 and at(1) == 0x83 and at(2) == 0xC4:
            n = 4                                          # add rsp, imm8
        elif at(0) == 0x48 and at(1) == 0x81 and at(2) == 0xC4:
            n = 7                                          # add rsp, imm32
        elif at(0) & 0xFE == 0x48 and at(1) == 0x8D:       # lea rsp, disp[fp]
            frame_register = ((at(0) & 1) << 3) | (at(2) & 7)
            if frame_register and frame_register == info.frame_register:
                n = 4 if at(2) & 0xF8 == 0x60 else 7 if at(2) & 0xF8 == 0xA0 else 0
        while True:                                        # pop r64
            if at(n) & 0xF8 == 0x58:
                n += 1
            elif at(n) & 0xF0 == 0x40 and at(n + 1) & 0xF8 == 0x58:
                n += 2
            else:
                break
        if at(n) == 0xF2:                                  # repne
            n += 1
        epilog = False
        if at(n) in (0xC3, 0xC2) or (at(n) == 0xF3 and at(n + 1) == 0xC3):
            epilog = True
        elif at(n) in (0xEB, 0xE9):                        # jmp: out of the method is a tail call
            rel = int.from_bytes(bytes([at(n + 1)]), "little", signed=True) + 2 if at(n) == 0xEB else \
                int.from_bytes(bytes(at(n + 1 + k) for k in range(4)), "little", signed=True) + 5
            target = control_pc + n + rel - self.base
            if target < entry[0] or target >= entry[1]:
                epilog = True
            elif target == entry[0] and not info.flags & UNW_FLAG_CHAININFO:
                epilog = True
        elif at(n) == 0xFF and at(n + 1) == 0x25:
            epilog = True                                  # jmp [rip+disp32]
        elif at(n) & 0xF8 == 0x48 and at(n + 1) == 0xFF and at(n + 2) & 0x38 == 0x20:
            epilog = True                                  # rex.w jmp r/m64
        if not epilog:
            return False
        n = 0
        if at(0) & 0xF8 == 0x48:
            if at(1) == 0x83:
                regs["rsp"] += int.from_bytes(bytes([at(3)]), "little", signed=True)
                n = 4
            elif at(1) == 0x81:
                regs["rsp"] += int.from_bytes(bytes(at(3 + k) for k in range(4)), "little", signed=True)
                n = 7
            elif at(1) == 0x8D and at(2) & 0xF8 == 0x60:
                regs["rsp"] = regs.get(REGISTERS[frame_register], 0) + \
                    int.from_bytes(bytes([at(3)]), "little", signed=True)
                n = 4
            elif at(1) == 0x8D and at(2) & 0xF8 == 0xA0:
                regs["rsp"] = regs.get(REGISTERS[frame_register], 0) + \
                    int.from_bytes(bytes(at(3 + k) for k in range(4)), "little", signed=True)
                n = 7
        while True:
            if at(n) & 0xF8 == 0x58:
                self.restore(regs, at(n) & 7, regs["rsp"])
                regs["rsp"] += 8
                n += 1
            elif at(n) & 0xF0 == 0x40 and at(n + 1) & 0xF8 == 0x58:
                self.restore(regs, ((at(n) & 1) << 3) | (at(n + 1) & 7), regs["rsp"])
                regs["rsp"] += 8
                n += 2
            else:
                break
        regs["rip"] = self.u64(regs["rsp"])
        regs["rsp"] += 8
        return True

    def epilog_v2(self, regs: dict[str, int], info: UnwindInfo, entry: tuple[int, int, int],
                  control_pc: int) -> bool:
        """Version 2: the UWOP_EPILOG codes say where the epilogs are; emulate the one the pc
        is in with the prolog's push codes (UnwindEpilogue)."""
        if not info.slots or info.slots[0][1] != UWOP_EPILOG:
            return False
        size, _op, opinfo = info.slots[0]
        relative = control_pc - self.base
        offset = None
        if opinfo & 1 and 0 <= relative - (entry[1] - size) < size:
            offset = relative - (entry[1] - size)
        else:
            for (low, op, high) in info.slots[1:]:
                if op != UWOP_EPILOG:
                    break
                distance = low + 256 * high
                if distance == 0:
                    break
                if 0 <= relative - (entry[1] - distance) < size:
                    offset = relative - (entry[1] - distance)
                    break
        if offset is None:
            return False
        # The pushes are undone from the first push code on (in the first entry of the chain
        # that has one); those the epilog already popped are skipped.
        current = info
        for _ in range(_CHAIN_LIMIT + 1):
            i = 0
            while i < len(current.slots) and current.slots[i][1] not in (UWOP_PUSH_NONVOL, UWOP_PUSH_MACHFRAME):
                i += op_slots(current.slots[i][1], current.slots[i][2])
            if i < len(current.slots) or current.chained is None:
                break
            current = read_unwind_info(self.read, self.base + current.chained[2])
        else:
            raise ContractError("x64 chained unwind infos do not end")
        done = 0
        while i < len(current.slots) and current.slots[i][1] == UWOP_PUSH_NONVOL:
            number = current.slots[i][2]
            if done >= offset:
                self.restore(regs, number, regs["rsp"])
                regs["rsp"] += 8
            done += 2 if number >= 8 else 1
            i += 1
        if i < len(current.slots) and current.slots[i][1] == UWOP_ALLOC_SMALL and current.slots[i][2] == 0:
            if done >= offset:
                regs["rsp"] += 8
            i += 1
        if i < len(current.slots) and current.slots[i][1] == UWOP_PUSH_MACHFRAME:
            rsp = regs["rsp"]
            regs["rip"], regs["rsp"] = self.u64(rsp), self.u64(rsp + 24)
            return True
        regs["rip"] = self.u64(regs["rsp"])
        regs["rsp"] += 8
        return True


def unwind_frame(regs: dict[str, int], image_base: int, entry: tuple[int, int, int], read: Read,
                 restored: set[str] | None = None, leaf: bool = True) -> dict[str, int]:
    """The caller's registers of the managed frame ``regs`` describes (rip inside the method
    whose RUNTIME_FUNCTION is ``entry`` = (BeginAddress, EndAddress, UnwindData), offsets from
    ``image_base``). ``restored`` collects the registers read back from the stack; ``leaf``
    False (a return address) skips epilog detection, which only a thread's own pc can need."""
    u = _Unwinder(read, image_base, restored)
    info = read_unwind_info(read, image_base + entry[2])
    out = dict(regs)
    control_pc = out["rip"]
    frame_base = _establisher_frame(info, out, control_pc - (image_base + entry[0]))
    if leaf:
        if info.version < 2:
            try:
                code = read(control_pc, 32)
            except Exception:  # as the runtime: code that cannot be read is not an epilog
                code = bytes(32)
            if u.epilog_v1(code, out, info, entry, control_pc):
                return out
        elif u.epilog_v2(out, info, entry, control_pc):
            return out
    u.prolog(entry, out, control_pc, frame_base)
    return out
