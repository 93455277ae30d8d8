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

Only frames stopped in a method's body are unwound here: that is every frame a stack walk
reaches through a return address. A thread stopped inside a managed prolog or epilog (its own
registers, not a return address) is refused with one line.
"""
from __future__ import annotations

from typing import Callable

from ..errors import ContractError

_MAX_CODE_WORDS = 255


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


def _prolog_instructions(codes: bytes) -> int:
    """Instructions the prolog's unwind codes describe (custom frames describe none)."""
    pos = count = 0
    while pos < len(codes):
        c = codes[pos]
        if c in (0xE4, 0xE5):
            break
        count += 0 if 0xE8 <= c <= 0xEF or 0xF0 <= c <= 0xF7 else 1
        pos += _code_size(c)
    return count


def unwind_frame(regs: dict[str, int], image_base: int, runtime_function: int,
                 read: Callable[[int, int], bytes], restored: set[str] | None = None) -> dict[str, int]:
    """The caller's registers (x0-x30, sp, pc names) of the managed frame ``regs`` describes,
    whose RUNTIME_FUNCTION is at ``runtime_function`` (offsets relative to ``image_base``).
    ``restored`` collects the names of the registers read back from the stack."""
    begin, unwind_data = (int.from_bytes(read(runtime_function + i, 4), "little") for i in (0, 4))
    if unwind_data & 3:
        # Packed (compact) unwind data: the JIT and crossgen write full .xdata.
        raise ContractError(f"packed ARM64 unwind data at {runtime_function:#x} is not supported")
    xdata = image_base + unwind_data
    header = int.from_bytes(read(xdata, 4), "little")
    if (header >> 18) & 3:
        raise ContractError(f"ARM64 unwind info version {(header >> 18) & 3} is not supported")
    pos = xdata + 4
    code_words, epilogs = (header >> 27) & 31, (header >> 22) & 31
    if not code_words and not epilogs:
        extension = int.from_bytes(read(pos, 4), "little")
        pos += 4
        code_words, epilogs = (extension >> 16) & 0xFF, extension & 0xFFFF
    if header & (1 << 21):
        epilogs = 0  # E: the single epilog's codes start at the index in the epilog field
    if code_words > _MAX_CODE_WORDS:
        raise ContractError(f"ARM64 unwind info at {xdata:#x} claims {code_words} code words")
    codes = read(pos + 4 * epilogs, 4 * code_words)
    offset = (regs["pc"] - image_base - begin) // 4
    if offset < 4 * code_words and offset < _prolog_instructions(codes):
        raise ContractError(f"pc {regs['pc']:#x} is inside a prolog: not unwound from there")

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
        elif code in (0xE3, 0xE5, 0xFC):                   # nop, end_c, pac_sign_lr
            pass
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
