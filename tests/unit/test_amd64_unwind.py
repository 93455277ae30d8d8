"""Synthetic checks of the x86-64 unwinder of the contracts reader (contracts/unwind_amd64.py)
with the UNWIND_INFO layout of win64unwind.h: prolog codes undone in the body and partly in
the prolog, frame-pointer frames, SAVE_NONVOL(_FAR), SET_FPREG_LARGE, machine frames, chained
infos, and epilogs found by the instructions (version 1) or by UWOP_EPILOG codes (version 2).
hypothesis feeds the decoder and the unwinder garbage, which must end in one SosError, never
another exception or a hang. The real-core checks are tests/test_readers.py."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sosext.contracts import unwind_amd64 as u
from sosext.contracts.unwind_amd64 import parse_unwind_info, unwind_frame
from sosext.errors import SosError

BASE = 0x10000          # image base: RUNTIME_FUNCTION offsets are relative to it
INFO = 0x200            # the UNWIND_INFO, relative to BASE
FUNC, END = 0x1000, 0x1100
STACK = 0x7000_0000
RBX, RBP, RSI, R12, R15 = 3, 5, 6, 12, 15


class Memory:
    def __init__(self) -> None:
        self.bytes: dict[int, int] = {}

    def put(self, address: int, data: bytes) -> None:
        for i, b in enumerate(data):
            self.bytes[address + i] = b

    def q(self, address: int, value: int) -> None:
        self.put(address, struct.pack("<Q", value))

    def read(self, address: int, size: int) -> bytes:
        if size > 1 << 16:
            raise SosError("read too large")
        return bytes(self.bytes.get(address + i, 0) for i in range(size))


def code(offset: int, op: int, info: int = 0) -> bytes:
    return bytes([offset, op | info << 4])


def operand(value: int) -> bytes:
    return struct.pack("<H", value)


def info(codes: bytes, prolog: int, frame_register: int = 0, frame_offset: int = 0, version: int = 1,
         flags: int = 0, chained: tuple[int, int, int] | None = None) -> bytes:
    count = len(codes) // 2
    out = bytes([version | flags << 3, prolog, count, frame_register | frame_offset << 4]) + codes
    if chained is not None:
        out += b"\0\0" * (count & 1) + struct.pack("<III", *chained)
    return out


def regs(rip: int, rsp: int, **more: int) -> dict[str, int]:
    out = {name: 0x1000 + i for i, name in enumerate(u.REGISTERS)}
    out.update(rip=rip, rsp=rsp, **more)
    return out


# push rbp; push rbx; sub rsp, 0x28; lea rbp, [rsp+0x20]  (prolog 1, 2, 6, 11 bytes in)
FP_PROLOG = code(11, u.UWOP_SET_FPREG) + code(6, u.UWOP_ALLOC_SMALL, 4) + \
    code(2, u.UWOP_PUSH_NONVOL, RBX) + code(1, u.UWOP_PUSH_NONVOL, RBP)


def fp_frame(m: Memory) -> int:
    """The stack of a body pc of FP_PROLOG's method; returns rsp."""
    rsp = STACK
    m.q(rsp + 0x28, 0xBB)          # saved rbx
    m.q(rsp + 0x30, 0xB0)          # saved rbp
    m.q(rsp + 0x38, 0xCA11)        # return address
    return rsp


def test_frame_pointer_frame_in_its_body() -> None:
    m = Memory()
    m.put(BASE + INFO, info(FP_PROLOG, 11, RBP, 2))
    rsp = fp_frame(m)
    restored: set[str] = set()
    out = unwind_frame(regs(BASE + FUNC + 0x40, rsp, rbp=rsp + 0x20), BASE, (FUNC, END, INFO), m.read, restored,
                       leaf=False)
    assert (out["rip"], out["rsp"], out["rbp"], out["rbx"]) == (0xCA11, rsp + 0x40, 0xB0, 0xBB)
    assert restored == {"rbx", "rbp"} and out["r12"] == 0x1000 + R12  # untouched registers stay


def test_frame_register_gives_rsp_even_after_stack_moves() -> None:
    """SET_FPREG restores rsp from rbp - 16*FrameOffset: a frame whose rsp moved (localloc)."""
    m = Memory()
    m.put(BASE + INFO, info(FP_PROLOG, 11, RBP, 2))
    rsp = fp_frame(m)
    out = unwind_frame(regs(BASE + FUNC + 0x40, rsp - 0x400, rbp=rsp + 0x20), BASE, (FUNC, END, INFO), m.read)
    assert (out["rip"], out["rsp"]) == (0xCA11, rsp + 0x40)


@pytest.mark.parametrize("at, done", [(0, 0), (1, 1), (2, 2), (6, 3)])
def test_inside_the_prolog_only_passed_codes_are_undone(at: int, done: int) -> None:
    m = Memory()
    m.put(BASE + INFO, info(FP_PROLOG, 11, RBP, 2))
    rsp = STACK
    # the stack as it is after `done` of push rbp / push rbx / sub rsp,0x28
    below = [0, 8, 16, 16 + 0x28][done]
    m.q(rsp + below, 0xCA11)
    if done >= 1:
        m.q(rsp + below - 8, 0xB0)
    if done >= 2:
        m.q(rsp + below - 16, 0xBB)
    m.put(BASE + FUNC + at, b"\x90")  # not an epilog
    out = unwind_frame(regs(BASE + FUNC + at, rsp, rbp=0x5555), BASE, (FUNC, END, INFO), m.read)
    assert (out["rip"], out["rsp"]) == (0xCA11, rsp + below + 8)
    assert out["rbp"] == (0xB0 if done >= 1 else 0x5555)


def test_alloc_large_save_nonvol_and_far_forms() -> None:
    m = Memory()
    codes = (code(20, u.UWOP_SAVE_NONVOL_FAR, R15) + operand(0x2_0008 & 0xFFFF) + operand(0x2_0008 >> 16)
             + code(16, u.UWOP_SAVE_NONVOL, RSI) + operand(0x10 // 8)
             + code(12, u.UWOP_ALLOC_LARGE, 1) + operand(0x3_0000 & 0xFFFF) + operand(0x3_0000 >> 16)
             + code(5, u.UWOP_ALLOC_LARGE, 0) + operand(0x100 // 8)
             + code(1, u.UWOP_PUSH_NONVOL, R12))
    m.put(BASE + INFO, info(codes, 20))
    rsp = STACK
    m.q(rsp + 0x2_0008, 0xF15)
    m.q(rsp + 0x10, 0x516)
    top = rsp + 0x3_0000 + 0x100
    m.q(top, 0x12)
    m.q(top + 8, 0xCA11)
    out = unwind_frame(regs(BASE + FUNC + 0x30, rsp), BASE, (FUNC, END, INFO), m.read, leaf=False)
    assert (out["rip"], out["rsp"], out["r12"], out["rsi"], out["r15"]) == (0xCA11, top + 16, 0x12, 0x516, 0xF15)


def test_set_fpreg_large() -> None:
    m = Memory()
    offset = 0x1234  # scaled by 16
    codes = code(8, u.UWOP_SET_FPREG_LARGE) + operand(offset & 0xFFFF) + operand(offset >> 16) + \
        code(1, u.UWOP_PUSH_NONVOL, RBP)
    m.put(BASE + INFO, info(codes, 8, RBP, 15))
    rsp = STACK
    m.q(rsp, 0xB0)
    m.q(rsp + 8, 0xCA11)
    out = unwind_frame(regs(BASE + FUNC + 0x40, 0x1, rbp=rsp + 16 * offset), BASE, (FUNC, END, INFO), m.read,
                       leaf=False)
    assert (out["rip"], out["rsp"], out["rbp"]) == (0xCA11, rsp + 16, 0xB0)


@pytest.mark.parametrize("error_code", [0, 1])
def test_machine_frame(error_code: int) -> None:
    m = Memory()
    m.put(BASE + INFO, info(code(1, u.UWOP_PUSH_MACHFRAME, error_code), 1))
    rsp = STACK
    m.q(rsp + 8 * error_code, 0xF00D)
    m.q(rsp + 8 * error_code + 24, 0xABCDE0)
    out = unwind_frame(regs(BASE + FUNC + 4, rsp), BASE, (FUNC, END, INFO), m.read, leaf=False)
    assert (out["rip"], out["rsp"]) == (0xF00D, 0xABCDE0)


def test_chained_info_undoes_the_parents_codes() -> None:
    m = Memory()
    parent = 0x300
    m.put(BASE + parent, info(code(1, u.UWOP_PUSH_NONVOL, RBX), 1))
    m.put(BASE + INFO, info(code(4, u.UWOP_ALLOC_SMALL, 1), 4, flags=u.UNW_FLAG_CHAININFO,
                            chained=(FUNC - 0x80, FUNC, parent)))
    rsp = STACK
    m.q(rsp + 16, 0xBB)
    m.q(rsp + 24, 0xCA11)
    parsed = parse_unwind_info(m.read(BASE + INFO, 32))
    assert parsed.chained == (FUNC - 0x80, FUNC, parent)
    out = unwind_frame(regs(BASE + FUNC + 0x10, rsp), BASE, (FUNC, END, INFO), m.read, leaf=False)
    assert (out["rip"], out["rsp"], out["rbx"]) == (0xCA11, rsp + 32, 0xBB)


def test_version1_epilog_found_from_the_instructions() -> None:
    """A leaf pc at `add rsp, 0x28; pop rbx; pop rbp; ret` emulates the epilog forward."""
    m = Memory()
    m.put(BASE + INFO, info(FP_PROLOG, 11, RBP, 2))
    rsp = fp_frame(m)
    pc = BASE + FUNC + 0x60
    m.put(pc, bytes([0x48, 0x83, 0xC4, 0x28, 0x5B, 0x5D, 0xC3]))
    out = unwind_frame(regs(pc, rsp, rbp=0x9999), BASE, (FUNC, END, INFO), m.read)
    assert (out["rip"], out["rsp"], out["rbx"], out["rbp"]) == (0xCA11, rsp + 0x40, 0xBB, 0xB0)
    # past the add: the pops and ret remain
    out = unwind_frame(regs(pc + 4, rsp + 0x28, rbp=0x9999), BASE, (FUNC, END, INFO), m.read)
    assert (out["rip"], out["rsp"], out["rbx"], out["rbp"]) == (0xCA11, rsp + 0x40, 0xBB, 0xB0)
    # a return address is never in an epilog: the same bytes are not read as one
    body = unwind_frame(regs(pc, rsp, rbp=rsp + 0x20), BASE, (FUNC, END, INFO), m.read, leaf=False)
    assert body["rip"] == 0xCA11


def test_version1_jump_inside_the_method_is_not_an_epilog() -> None:
    m = Memory()
    m.put(BASE + INFO, info(FP_PROLOG, 11, RBP, 2))
    rsp = fp_frame(m)
    pc = BASE + FUNC + 0x60
    m.put(pc, bytes([0x5B, 0xEB, 0x10]))  # pop rbx; jmp +0x10 (inside)
    out = unwind_frame(regs(pc, rsp, rbp=rsp + 0x20), BASE, (FUNC, END, INFO), m.read)
    assert (out["rip"], out["rsp"]) == (0xCA11, rsp + 0x40)  # unwound as the body
    m.put(pc, bytes([0x5B, 0x5D, 0xE9]) + struct.pack("<i", 0x1000))  # pop rbx; pop rbp; jmp far: a tail call
    out = unwind_frame(regs(pc, rsp + 0x28), BASE, (FUNC, END, INFO), m.read)
    assert (out["rip"], out["rsp"], out["rbx"]) == (0xCA11, rsp + 0x40, 0xBB)


def test_version2_epilog_codes() -> None:
    m = Memory()
    # one epilog of 3 bytes at the end (pop rbx; pop rbp; ret), flagged in the first code
    codes = code(3, u.UWOP_EPILOG, 1) + code(0, u.UWOP_EPILOG, 0) + \
        code(2, u.UWOP_PUSH_NONVOL, RBX) + code(1, u.UWOP_PUSH_NONVOL, RBP)
    m.put(BASE + INFO, info(codes, 2, version=2))
    rsp = STACK
    m.q(rsp, 0xB0)           # after pop rbx: rbp is next
    m.q(rsp + 8, 0xCA11)
    out = unwind_frame(regs(BASE + END - 2, rsp, rbx=0x3333), BASE, (FUNC, END, INFO), m.read)
    assert (out["rip"], out["rsp"], out["rbp"], out["rbx"]) == (0xCA11, rsp + 16, 0xB0, 0x3333)


def test_bad_version_and_undefined_codes_are_one_error() -> None:
    m = Memory()
    m.put(BASE + INFO, info(b"", 0, version=3))
    with pytest.raises(SosError):
        unwind_frame(regs(BASE + FUNC, STACK), BASE, (FUNC, END, INFO), m.read)
    m.put(BASE + INFO, info(code(0, 12), 0))
    with pytest.raises(SosError):
        unwind_frame(regs(BASE + FUNC + 8, STACK), BASE, (FUNC, END, INFO), m.read, leaf=False)


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=0, max_size=80), st.integers(0, 0x120), st.booleans())
def test_garbage_unwind_info_ends_in_one_error(blob: bytes, pc: int, leaf: bool) -> None:
    m = Memory()
    m.put(BASE + INFO, blob)
    m.put(BASE + FUNC + pc, blob[:32])
    try:
        out = unwind_frame(regs(BASE + FUNC + pc, STACK), BASE, (FUNC, END, INFO), m.read, leaf=leaf)
    except SosError:
        return
    assert set(out) >= {"rip", "rsp"}


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=4, max_size=64))
def test_parse_is_bounded(blob: bytes) -> None:
    try:
        parsed = parse_unwind_info(blob)
    except SosError:
        return
    assert len(parsed.slots) == blob[2] and 4 + 2 * len(parsed.slots) <= len(blob)


# -- the JIT's native-to-IL map (contracts/debuginfo.py) ------------------------------------------

from sosext.contracts.debuginfo import OffsetMapping, il_offsets_at, jitted_bounds, parse_bounds  # noqa: E402


def nibbles(*values: int) -> bytes:
    """Nibble-code unsigned values (3 bits a nibble, high first, bit 3 = more), low nibble first."""
    out: list[int] = []
    for v in values:
        groups = []
        while True:
            groups.append(v & 7)
            v >>= 3
            if not v:
                break
        groups.reverse()
        out += [g | (8 if i < len(groups) - 1 else 0) for i, g in enumerate(groups)]
    if len(out) % 2:
        out.append(0)
    return bytes(out[i] | out[i + 1] << 4 for i in range(0, len(out), 2))


@pytest.mark.parametrize("value, encoded", [(0, "00"), (7, "07"), (8, "09"), (63, "7f"), (64, "8900"),
                                            (511, "ff07"), (512, "8908")])
def test_nibble_coding_of_the_format_description(value: int, encoded: str) -> None:
    # the format's bit layout 1DEF1ABC XXXX0GHI for ABCDEFGHI ("X" nibbles are padding: 0 here)
    assert nibbles(value).hex() == encoded


def bounds_blob(entries: list[tuple[int, int, int]], flag: int = 0) -> bytes:
    """A JIT debug info blob with these (native offset, IL offset, source type) bounds."""
    native_bits, il_bits = 8, 12
    packed, shift, last = 0, 0, 0
    for native, il, source in entries:
        packed |= (source | (native - last) << 2 | ((il + 3) & 0xFFF) << (2 + native_bits)) << shift
        shift += 2 + native_bits + il_bits
        last = native
    body = nibbles(len(entries), native_bits - 1, il_bits - 1)
    body += packed.to_bytes((shift + 7) // 8, "little")
    return bytes([flag]) + nibbles(len(body), 0) + body


def test_bounds_round_trip_and_lookup() -> None:
    entries = [(0, -2, 0), (0x10, 0, 2), (0x22, 5, 1), (0x22, 7, 0), (0x40, -3, 0)]
    blob = bounds_blob(entries)
    got = jitted_bounds(lambda a, n: blob[a:a + n], 0)
    assert got == [OffsetMapping(n, il, s) for n, il, s in entries]
    assert il_offsets_at(got, 0x05) == [-2]
    assert il_offsets_at(got, 0x22) == [7]           # an entry with no native bytes covers nothing
    assert il_offsets_at(got, 0x21) == [0]
    assert il_offsets_at(got, 0x1000) == [-3]        # the last range is open


def test_rich_info_is_skipped_and_patchpoints_are_not_read() -> None:
    entries = [(0, 1, 0), (4, 2, 0)]
    plain = bounds_blob(entries)
    rich = bytes([2]) + struct.pack("<I", 3) + b"xyz" + plain[1:]
    assert jitted_bounds(lambda a, n: rich[a:a + n], 0) == [OffsetMapping(n, il, s) for n, il, s in entries]
    patchpoint = bytes([1]) + plain[1:]
    assert jitted_bounds(lambda a, n: patchpoint[a:a + n], 0) is None


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=0, max_size=200))
def test_garbage_debug_info_ends_in_one_error(blob: bytes) -> None:
    try:
        parse_bounds(blob)
        jitted_bounds(lambda a, n: blob[a:a + n], 0)
    except SosError:
        pass
