"""Synthetic checks of the AArch64 stack-walk parts of the contracts reader: the ARM64 unwind
codes (contracts/unwind_arm64.py) and the ExecutionManager's nibble map (both versions), with
the layouts of the formats' own documentation; hypothesis feeds them garbage, which must end in
one SosError, never another exception or a hang. The real-core checks are tests/test_arm64.py."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sosext.contracts.executionmanager import ExecutionManager
from sosext.contracts.unwind_arm64 import unwind_frame
from sosext.errors import SosError

BASE = 0x10000           # image base: RUNTIME_FUNCTION offsets are relative to it
RF = BASE + 0x100        # the RUNTIME_FUNCTION
XDATA = 0x200            # its .xdata, relative to BASE
FUNC = 0x1000            # the function's first instruction, relative to BASE
STACK = 0x7000_0000


class Memory:
    def __init__(self) -> None:
        self.bytes: dict[int, int] = {}

    def put(self, address: int, data: bytes) -> None:
        for i, b in enumerate(data):
            self.bytes[address + i] = b

    def read(self, address: int, size: int) -> bytes:
        if size > 1 << 16:
            raise SosError("read too large")
        return bytes(self.bytes.get(address + i, 0) for i in range(size))


def xdata(codes: bytes, function_words: int = 0x40) -> bytes:
    """A full .xdata record: header (no epilog scopes, E=0), then the codes padded to words."""
    words = (len(codes) + 3) // 4
    header = function_words | (words << 27)
    return struct.pack("<I", header) + codes + bytes(4 * words - len(codes))


def frame_memory(codes: bytes) -> Memory:
    mem = Memory()
    mem.put(RF, struct.pack("<II", FUNC, XDATA))
    mem.put(BASE + XDATA, xdata(codes))
    return mem


def test_a_jit_prolog_is_undone() -> None:
    # stp fp, lr, [sp, #-0x30]!; mov fp, sp; stp x19, x20, [sp, #0x10] — its codes, last
    # instruction first: save_regp x19 at sp+0x10, set_fp, save_fplr_x -0x30, end.
    mem = frame_memory(bytes([0xC8, 0x02, 0xE1, 0x85, 0xE4]))
    sp = STACK
    mem.put(sp, struct.pack("<QQQQ", 0xF00D, 0x1234_5678, 0x19, 0x20))  # fp, lr, x19, x20
    regs = {"pc": BASE + FUNC + 0x80, "sp": sp, "x29": sp, "x30": 0, "x19": 1, "x20": 2}
    restored: set[str] = set()
    caller = unwind_frame(regs, BASE, RF, mem.read, restored)
    assert caller["sp"] == sp + 0x30
    assert (caller["x29"], caller["x30"], caller["pc"]) == (0xF00D, 0x1234_5678, 0x1234_5678)
    assert (caller["x19"], caller["x20"]) == (0x19, 0x20)
    assert restored == {"x19", "x20", "x29", "x30"}


def test_alloc_and_save_next() -> None:
    # Undone in the codes' order: alloc_s 0x20; save_next + save_regp_x x19 -0x20 (x19..x22,
    # pre-indexed); save_fplr at sp+0; end.
    mem = frame_memory(bytes([0x02, 0xE6, 0xCC, 0x03, 0x40, 0xE4]))
    sp = STACK
    mem.put(sp + 0x20, struct.pack("<QQQQ", 19, 20, 21, 22))
    mem.put(sp + 0x40, struct.pack("<QQ", 0xAA, 0xBB))
    regs = {"pc": BASE + FUNC + 0x80, "sp": sp, "x29": 0, "x30": 0}
    caller = unwind_frame(regs, BASE, RF, mem.read)
    assert [caller[f"x{i}"] for i in range(19, 23)] == [19, 20, 21, 22]
    assert (caller["sp"], caller["x29"], caller["pc"]) == (sp + 0x40, 0xAA, 0xBB)


def test_a_frame_stopped_in_its_prolog_undoes_only_what_ran() -> None:
    # The prolog of test_a_jit_prolog_is_undone stopped after its first instruction (stp fp, lr,
    # [sp, #-0x30]!): only that one is undone; x19 was not saved yet and keeps its value.
    mem = frame_memory(bytes([0xC8, 0x02, 0xE1, 0x85, 0xE4]))
    mem.put(STACK, struct.pack("<QQ", 0xF00D, 0x1234_5678))
    regs = {"pc": BASE + FUNC + 4, "sp": STACK, "x29": 0, "x30": 0, "x19": 1}
    caller = unwind_frame(regs, BASE, RF, mem.read)
    assert (caller["sp"], caller["x29"], caller["pc"], caller["x19"]) == (STACK + 0x30, 0xF00D, 0x1234_5678, 1)


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=0, max_size=64), st.integers(0, 0xFFFFFFFF), st.integers(0, 0x400))
def test_garbage_unwind_info_ends_in_one_error(codes: bytes, header: int, pc_offset: int) -> None:
    mem = Memory()
    mem.put(RF, struct.pack("<II", FUNC, XDATA))
    mem.put(BASE + XDATA, struct.pack("<I", header) + codes)
    regs = {"pc": BASE + FUNC + 4 * pc_offset, "sp": STACK, "x29": STACK + 0x100, "x30": 0x42}
    try:
        caller = unwind_frame(regs, BASE, RF, mem.read)
    except SosError:
        return
    assert caller["pc"] == caller["x30"]


# -- the nibble map ----------------------------------------------------------------------------


class FakeData:
    def __init__(self, units: dict[int, int]) -> None:
        self.units = units

    def u32(self, address: int) -> int:
        return self.units.get(address, 0)


def manager(version: int, units: dict[int, int]) -> ExecutionManager:
    em = ExecutionManager.__new__(ExecutionManager)
    em.data = FakeData({4 * i: v for i, v in units.items()})  # type: ignore[assignment]
    em.version = version
    return em


def test_nibble_map_linear_lookup() -> None:
    # ExecutionManager.md's example: code at 304 (0x130): map index 9, nibble 5, in unit 1.
    em = manager(1, {1: 0x05000000})
    assert em._find_method_code(0, 0, 304) == 304
    assert em._find_method_code(0, 0, 306) == 304
    assert em._find_method_code(0, 0, 302) == 0
    assert em._find_method_code(0, 0, 0x1F0) == 304  # later in unit 1's span, behind the start


def test_nibble_map_constant_lookup() -> None:
    # Version 2: a method at 304 of 1024 bytes also writes the relative pointer 304 + 9 into
    # the 256-byte units it covers entirely (0x200-0x4ff: units 2, 3 and 4).
    em = manager(2, {1: 0x05000000, 2: 304 + 9, 3: 304 + 9, 4: 304 + 9})
    assert em._find_method_code(0x5000, 0, 0x5000 + 1300) == 0x5000 + 304  # unit 5 empty, unit 4 a pointer
    assert em._find_method_code(0x5000, 0, 0x5000 + 0x3F0) == 0x5000 + 304
    assert em._find_method_code(0x5000, 0, 0x5000 + 0x700) == 0  # two empty units: no method


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.integers(0, 64), st.integers(0, 0xFFFFFFFF), max_size=16), st.integers(0, 0x4000),
       st.sampled_from([1, 2]))
def test_garbage_nibble_maps_answer_an_address_at_or_before_the_ip(units: dict[int, int], ip: int,
                                                                    version: int) -> None:
    start = manager(version, units)._find_method_code(0, 0, ip)
    assert start == 0 or version == 2 or 0 <= start <= ip + 32
