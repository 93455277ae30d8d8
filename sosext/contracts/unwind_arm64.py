"""One step out of a managed AArch64 frame, from the unwind info the JIT (or crossgen) wrote.

Managed code has no DWARF: its RUNTIME_FUNCTION entries point to Windows-style ARM64 .xdata
(the "ARM64 exception handling" format, which the runtime uses on Linux too, and which the
cDAC's ARM64Unwinder and the runtime's own unwinder read). The .xdata header word gives the
function length (bits 0-17, in instructions), the version (18-19), X (20: exception data
follows), E (21: one epilog, packed into the header), the epilog count (22-26) and the count of
32-bit words of unwind codes (27-31; both zero: an extension word holds them). Epilog scopes
follow unless E is set, then the unwind codes: one byte-coded operation per prolog
instruction, listed from the last instruction of the prolog to the first. Undoing them in that
order, from the first code to `end`, takes a frame from its body back to its caller's state;
the caller's pc is then lr.

A pc inside the prolog skips the codes of the instructions not executed yet; a pc inside an
epilog (the single one at the end when E is set, else one of the listed epilog scopes: start
instruction in bits 0-17, index of its codes in 22-31) runs the epilog's codes from the
instructions not executed yet, as the runtime's unwinder (unwinder/arm64/unwinder.cpp) does.
Packed .pdata (flag 1 or 2) stands for a canonical prolog given by its fields, which is
expanded here into the codes it stands for. A chained entry (flag 3) unwinds its parent.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..errors import ContractError

_MAX_CODE_WORDS = 255
_MAX_EPILOGS = 0xFFFF
# PAC bits: above bit 55, which the pointer's top bits copy (the runtime strips them so)
_PAC_MASK = ~((1 << 55) - 1) & 0xFFFFFFFFFFFFFFFF


class _Codes:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise ContractError("an ARM64 unwind code runs past its unwind info")
        b = self.data[self.pos]
        self.pos += 1
        return b


def _code_size(code: int) -> int:
    """Bytes of an unwind code by its first byte (the format's size table)."""
    if code < 0xC0:
        return 1
    if code < 0xE0:
        return 2
    return (4, 1, 2, 1, 1, 1, 1, 3, 1, 1, 1, 1, 1, 1, 1, 1,
            1, 1, 1, 1, 1, 1, 1, 1, 2, 3, 4, 5, 1, 1, 1, 1)[code - 0xE0]


# Instructions each code in 0xE0-0xFF stands for: the custom frames (0xE8-0xEF) and the
# reserved 0xF0-0xF7 stand for none.
_INSTRUCTIONS_E0 = (1,) * 8 + (0,) * 16 + (1,) * 8


def _is_end(code: int) -> bool:
    return code & 0xFE == 0xE4  # end, end_c


def _scope_size(codes: bytes, pos: int, epilog: bool) -> int:
    """Instructions of the prolog or epilog whose codes start at ``pos``; an epilog counts its
    final ret too."""
    size = 0
    while pos < len(codes) and not _is_end(codes[pos]):
        size += 1 if codes[pos] < 0xE0 else _INSTRUCTIONS_E0[codes[pos] - 0xE0]
        pos += _code_size(codes[pos])
    return size + epilog


@dataclass(frozen=True)
class UnwindInfo:
    """One function's unwind info, from .xdata or expanded from packed .pdata."""

    function_length: int  # in instructions
    codes: bytes  # 4 * code words bytes
    single_epilog: bool  # E: one epilog at the end, its codes at ``epilog_index``
    epilog_index: int
    scopes: tuple[tuple[int, int], ...]  # (start instruction, code index) per epilog


def read_xdata(at: int, read: Callable[[int, int], bytes]) -> UnwindInfo:
    header = int.from_bytes(read(at, 4), "little")
    if (header >> 18) & 3:
        raise ContractError(f"ARM64 unwind info version {(header >> 18) & 3} is not supported")
    pos = at + 4
    code_words, epilogs = (header >> 27) & 31, (header >> 22) & 31
    if not code_words and not epilogs:
        extension = int.from_bytes(read(pos, 4), "little")
        pos += 4
        code_words, epilogs = (extension >> 16) & 0xFF, extension & 0xFFFF
    single = bool(header & (1 << 21))
    index, scopes = 0, ()
    if single:
        index, epilogs = epilogs, 0  # E: the epilog field is the index of its codes
    elif epilogs:
        if epilogs > _MAX_EPILOGS:
            raise ContractError(f"ARM64 unwind info at {at:#x} claims {epilogs} epilogs")
        raw = read(pos, 4 * epilogs)
        words = (int.from_bytes(raw[i:i + 4], "little") for i in range(0, len(raw), 4))
        scopes = tuple((w & 0x3FFFF, w >> 22) for w in words)
    if code_words > _MAX_CODE_WORDS:
        raise ContractError(f"ARM64 unwind info at {at:#x} claims {code_words} code words")
    return UnwindInfo(header & 0x3FFFF, bytes(read(pos + 4 * epilogs, 4 * code_words)), single, index, scopes)


def expand_packed(unwind_data: int) -> UnwindInfo:
    """The unwind codes packed .pdata stands for (flag 1: a function, 2: a fragment without an
    epilog): the canonical prolog its fields describe (RegF, RegI, H, CR, FrameSize), built in
    prolog order and listed in unwind order, as the runtime's unwinder expands it."""
    flag, length = unwind_data & 3, (unwind_data >> 2) & 0x7FF
    reg_f, reg_i, homes = (unwind_data >> 13) & 7, (unwind_data >> 16) & 15, (unwind_data >> 20) & 1
    cr, frame = (unwind_data >> 21) & 3, (unwind_data >> 23) & 0x1FF
    # sizes in 8-byte slots
    ints = reg_i + (cr == 1)  # CR 1: lr saved without a frame chain
    fps = reg_f + 1 if reg_f else 0
    saved = ints + fps
    if saved:
        saved += 8 * homes  # x0-x7 homed above the saved registers
    saved = (saved + 1) & ~1
    local = 2 * frame - saved

    def two(fixed_shift: int, fixed: int, reg: int, reg_shift: int, z: int) -> bytes:
        return ((fixed << fixed_shift) | (reg << reg_shift) | (z & ((1 << reg_shift) - 1))).to_bytes(2, "big")

    def alloc(size: int) -> bytes:
        if size >= 16384:
            return (0xE0000000 | size // 16).to_bytes(4, "big")
        if size >= 512:
            return (0xC000 | size // 16).to_bytes(2, "big")
        return bytes([size // 16])

    ops: list[bytes] = [b"\xe4"]  # prolog order; the end code comes last once reversed
    if cr == 2:
        ops.append(b"\xfc")  # pac_sign_lr
    slot, decremented, fp_set, before_homes = 0, False, False, None

    def save(pre: bytes, post: bytes, slots: int) -> None:
        nonlocal slot, decremented
        ops.append(post if decremented else pre)
        slot += slots
        decremented = True

    if ints:
        if reg_i == 1 and cr == 1:  # x19 and lr: no pre-decrementing form, allocate first
            ops.append(alloc(8 * saved))
            decremented = True
        reg = 0
        for reg in range(0, reg_i // 2 * 2, 2):
            save(two(10, 0x33, reg, 6, saved - 1), two(10, 0x32, reg, 6, slot), 2)  # save_regp(_x)
        reg = reg_i // 2 * 2
        if reg_i % 2:
            if cr == 1:
                save(b"", two(9, 0x6B, reg // 2, 6, slot), 2)  # save_lrpair
            else:
                save(two(9, 0x6A, reg, 5, saved - 1), two(10, 0x34, reg, 6, slot), 1)  # save_reg(_x)
        elif cr == 1:
            save(two(9, 0x6A, 11, 5, saved - 1), two(10, 0x34, 11, 6, slot), 1)  # lr alone
    if fps:
        reg = 0
        for reg in range(0, fps // 2 * 2, 2):
            save(two(9, 0x6D, reg, 6, saved - 1), two(9, 0x6C, reg, 6, slot), 2)  # save_fregp(_x)
        reg = fps // 2 * 2
        if fps % 2:
            save(two(8, 0xDE, reg, 5, saved - 1), two(9, 0x6E, reg, 6, slot), 1)  # save_freg(_x)
    if homes and decremented:
        before_homes = len(ops)
        ops += [b"\xe3"] * 4  # the stores of x0-x7: nops to the unwinder
    if local > 0:
        if cr in (2, 3):  # chained: fp and lr saved on top, fp set
            if local <= 64:
                ops.append(bytes([0x80 | (local - 1)]))  # save_fplr_x
            else:
                ops += [alloc(8 * local), b"\x40"]  # alloc, save_fplr at sp+0
            ops.append(b"\xe1")  # set_fp
            fp_set = True
        else:
            ops.append(alloc(8 * local))
    if flag == 2:
        ops.append(b"\xe5")  # end_c: a fragment has no epilog
    prolog = b"".join(reversed(ops))
    index = int(fp_set)  # the epilog's codes skip set_fp
    codes = prolog
    if homes and before_homes is not None and flag != 2:
        # the epilog does not reload x0-x7: its codes are the prolog's without the nops
        epilog = b"".join(reversed(ops[:before_homes] + ops[before_homes + 4:]))
        index += len(prolog)
        codes = prolog + epilog
    codes += bytes(-len(codes) % 4)
    return UnwindInfo(length, codes, flag != 2, index, ())


def _start(info: UnwindInfo, offset: int) -> tuple[int, int]:
    """Where unwinding starts at instruction ``offset``: the index of the first code to run and
    how many of its instructions were not executed yet (a prolog) or already were (an epilog)."""
    codes = info.codes
    room = len(codes)  # 4 * code words: no scope can be longer
    if offset < room:
        size = _scope_size(codes, 0, False)
        if offset < size:
            return 0, size - offset
    if info.single_epilog:
        index = info.epilog_index
        if index > len(codes):
            raise ContractError(f"an ARM64 epilog's unwind codes start past them ({index})")
        if offset + (room - index) >= info.function_length:
            begin = info.function_length - _scope_size(codes, index, True)
            if offset >= begin:
                return index, offset - begin
        return 0, 0
    for begin, index in info.scopes:
        if offset < begin:
            break
        if index > len(codes):
            raise ContractError(f"an ARM64 epilog's unwind codes start past them ({index})")
        if offset < begin + (room - index) and offset < begin + _scope_size(codes, index, True):
            return index, offset - begin
    return 0, 0


def unwind_frame(regs: dict[str, int], image_base: int, runtime_function: int,
                 read: Callable[[int, int], bytes], restored: set[str] | None = None) -> dict[str, int]:
    """The caller's registers (x0-x30, sp, pc names) of the managed frame ``regs`` describes,
    whose RUNTIME_FUNCTION is at ``runtime_function`` (offsets relative to ``image_base``).
    ``restored`` collects the names of the registers read back from the stack."""
    begin, unwind_data = (int.from_bytes(read(runtime_function + i, 4), "little") for i in (0, 4))
    rva = regs["pc"] - image_base
    if unwind_data & 3 == 3:
        # a chained entry: the parent's unwind, from the parent's start (as the runtime does)
        if unwind_data & 4:
            raise ContractError(f"ARM64 chained unwind data {unwind_data:#x} at {runtime_function:#x} "
                                "is not supported")
        parent = image_base + unwind_data - 3
        begin, unwind_data = (int.from_bytes(read(parent + i, 4), "little") for i in (0, 4))
        if unwind_data & 3 == 3:
            raise ContractError(f"ARM64 unwind data at {parent:#x} chains twice")
        rva = begin
    info = expand_packed(unwind_data) if unwind_data & 3 else read_xdata(image_base + unwind_data, read)
    codes = info.codes
    pos, skip = _start(info, (rva - begin) // 4 if rva >= begin else 0)
    while pos < len(codes) and skip > 0 and not _is_end(codes[pos]):
        pos += _code_size(codes[pos])
        skip -= 1

    out = dict(regs)

    def restore(sp_offset: int, first: int, count: int) -> None:
        # Registers are read from sp (+ a positive offset); a negative offset is a pre-indexed
        # store whose write-back the unwind undoes after reading.
        at = out["sp"] + (sp_offset if sp_offset >= 0 else 0)
        for r in range(first, first + count):
            value = int.from_bytes(read(at, 8), "little")
            at += 8
            if r <= 30:
                out[f"x{r}"] = value
                if restored is not None:
                    restored.add(f"x{r}")
        if sp_offset < 0:
            out["sp"] -= sp_offset

    def restore_fp(sp_offset: int, count: int) -> None:
        # d8-d15 are not tracked; only their stack effect matters here.
        if sp_offset < 0:
            out["sp"] -= sp_offset

    c = _Codes(codes)
    c.pos = pos
    save_nexts = 0
    while c.pos < len(codes):
        code = c.byte()
        if code <= 0x1F:                                    # alloc_s
            out["sp"] += 16 * (code & 0x1F)
        elif code <= 0x3F:                                  # save_r19r20_x
            restore(-8 * (code & 0x1F), 19, 2 + 2 * save_nexts)
            save_nexts = 0
        elif code <= 0x7F:                                  # save_fplr
            restore(8 * (code & 0x3F), 29, 2)
        elif code <= 0xBF:                                  # save_fplr_x
            restore(-8 * ((code & 0x3F) + 1), 29, 2)
        elif code <= 0xC7:                                  # alloc_m
            out["sp"] += 16 * (((code & 7) << 8) | c.byte())
        elif code <= 0xCB:                                  # save_regp
            nxt = c.byte()
            restore(8 * (nxt & 0x3F), 19 + ((code & 3) << 2) + (nxt >> 6), 2 + 2 * save_nexts)
            save_nexts = 0
        elif code <= 0xCF:                                  # save_regp_x
            nxt = c.byte()
            restore(-8 * ((nxt & 0x3F) + 1), 19 + ((code & 3) << 2) + (nxt >> 6), 2 + 2 * save_nexts)
            save_nexts = 0
        elif code <= 0xD3:                                  # save_reg
            nxt = c.byte()
            restore(8 * (nxt & 0x3F), 19 + ((code & 3) << 2) + (nxt >> 6), 1)
        elif code <= 0xD5:                                  # save_reg_x
            nxt = c.byte()
            restore(-8 * ((nxt & 0x1F) + 1), 19 + ((code & 1) << 3) + (nxt >> 5), 1)
        elif code <= 0xD7:                                  # save_lrpair
            nxt = c.byte()
            restore(8 * (nxt & 0x3F), 19 + 2 * (((code & 1) << 2) + (nxt >> 6)), 1)
            restore(8 * (nxt & 0x3F) + 8, 30, 1)
        elif code <= 0xD9:                                  # save_fregp
            c.byte()
            save_nexts = 0
        elif code <= 0xDB:                                  # save_fregp_x
            restore_fp(-8 * ((c.byte() & 0x3F) + 1), 2 + 2 * save_nexts)
            save_nexts = 0
        elif code <= 0xDD:                                  # save_freg
            c.byte()
        elif code == 0xDE:                                  # save_freg_x
            restore_fp(-8 * ((c.byte() & 0x1F) + 1), 1)
        elif code == 0xE0:                                  # alloc_l
            out["sp"] += 16 * ((c.byte() << 16) | (c.byte() << 8) | c.byte())
        elif code == 0xE1:                                  # set_fp: mov x29, sp
            out["sp"] = out["x29"]
        elif code == 0xE2:                                  # add_fp: add x29, sp, #x*8
            out["sp"] = out["x29"] - 8 * c.byte()
        elif code in (0xE3, 0xE5):                         # nop, end_c
            pass
        elif code == 0xFC:                                  # pac_sign_lr: lr without its PAC
            lr = out["x30"]
            out["x30"] = lr | _PAC_MASK if lr >> 55 & 1 else lr & ~_PAC_MASK & 0xFFFFFFFFFFFFFFFF
        elif code == 0xE4:                                  # end
            break
        elif code == 0xE6:                                  # save_next
            save_nexts += 1
        elif code == 0xE7:                                  # save_any_reg
            b1, b2 = c.byte(), c.byte()
            pair, writeback, reg = (b1 >> 6) & 1, (b1 >> 5) & 1, b1 & 0x1F
            kind, off = b2 >> 6, b2 & 0x3F
            if b1 & 0x80 or kind == 3:
                raise ContractError("an invalid ARM64 save_any_reg unwind code")
            step = off + writeback
            step *= 16 if writeback or kind == 2 or pair else 8
            step = -step if writeback else step
            if kind == 0:
                restore(step, reg, 1 + pair + 2 * save_nexts)
            else:
                restore_fp(step, 1 + pair + 2 * save_nexts)
            save_nexts = 0
        elif code >= 0xF8:                                  # reserved: skipped
            for _ in range(_code_size(code) - 1):
                c.byte()
        else:
            raise ContractError(f"ARM64 unwind code {code:#04x} (a custom frame) is not supported")
    out["pc"] = out["x30"]
    return out
