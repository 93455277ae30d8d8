"""The AArch64 unwinder (sosext/contracts/unwind_arm64.py) inside prologs and epilogs, and
packed .pdata.

Packed unwind data: the runtime's unwinder (dotnet/runtime src/coreclr/unwinder/arm64/
unwinder.cpp) documents the codes of one packed entry byte by byte; the expansion here must be
those bytes.

Prologs and epilogs: for the methods on the stacks of the arm64 test core (the JIT's and
crossgen's own code and unwind info), a small AArch64 interpreter below runs each method's
real prolog instructions from a chosen entry state on a scratch stack, and at every
instruction boundary of the prolog and of every epilog (found from the machine code: the
stores/loads of callee-saved registers and stack adjustments before a `ret`) the unwinder must
give back that entry state: the caller's sp, pc (the entry lr), fp and callee-saved registers.
The instructions, not the unwind codes, are the truth here.
"""
from __future__ import annotations

import struct

import pytest

from harness import dotnet_path
from harness.arm64core import Arm64Unavailable, arm64_core

MASK = 0xFFFFFFFFFFFFFFFF
RET = 0xD65F03C0


def packed(flag: int, length: int, reg_f: int, reg_i: int, homes: int, cr: int, frame_size: int) -> int:
    """A packed .pdata word (Microsoft's "ARM64 exception handling" layout)."""
    return flag | length << 2 | reg_f << 13 | reg_i << 16 | homes << 20 | cr << 21 | frame_size << 23


def test_packed_unwind_data_expands_to_the_runtimes_documented_codes() -> None:
    from sosext.contracts.unwind_arm64 import expand_packed
    # unwinder.cpp's RtlpUnwindFunctionCompact comment: RegF 7, RegI 10, H 1, CR 2 (chained
    # with PAC), FrameSize 8000/16; the full prolog, then the epilog (the prolog without the
    # four nops of the homed parameters)
    prolog = "e1 40 c1 e7 e3 e3 e3 e3 d9 90 d9 0e d8 8c d8 0a ca 08 c9 86 c9 04 c8 82 cc 19 fc e4"
    epilog = "e1 40 c1 e7 d9 90 d9 0e d8 8c d8 0a ca 08 c9 86 c9 04 c8 82 cc 19 fc e4"
    info = expand_packed(packed(1, 100, 7, 10, 1, 2, 8000 // 16))
    codes = bytes.fromhex(prolog + epilog)
    assert info.codes[:len(codes)] == codes and not any(info.codes[len(codes):])
    assert len(info.codes) % 4 == 0
    # the epilog's codes start after the prolog's, past its set_fp
    assert info.single_epilog and info.epilog_index == len(bytes.fromhex(prolog)) + 1
    assert info.function_length == 100


def test_a_packed_fragment_has_no_epilog() -> None:
    from sosext.contracts.unwind_arm64 import expand_packed
    info = expand_packed(packed(2, 10, 0, 2, 0, 3, 2))
    assert not info.single_epilog
    assert info.codes[0] == 0xE5  # end_c first: the fragment's codes end its own scope


# -- the JIT's and crossgen's prologs and epilogs, run instruction by instruction -----------------

class Machine:
    """The AArch64 instructions prologs and epilogs are made of, on a scratch stack."""

    def __init__(self, regs: dict[str, int], memory: dict[int, int]) -> None:
        self.regs, self.memory = dict(regs), memory

    def reg(self, n: int, sp: bool) -> int:
        if n == 31:
            return self.regs["sp"] if sp else 0
        return self.regs[f"x{n}"]

    def set(self, n: int, value: int, sp: bool) -> None:
        if n == 31:
            if sp:
                self.regs["sp"] = value & MASK
            return
        self.regs[f"x{n}"] = value & MASK

    def store(self, at: int, value: int) -> None:
        self.memory[at & MASK] = value & MASK

    def load(self, at: int) -> int:
        return self.memory.get(at & MASK, 0)

    def step(self, word: int) -> bool:
        """Run one instruction; False for one this interpreter does not know."""
        if word == RET:
            self.regs["pc"] = self.regs["x30"]
            return True
        if word & 0x1F800000 == 0x11000000 and word >> 31:          # add/sub (immediate), 64-bit
            sub, shift = word >> 30 & 1, word >> 22 & 1
            if word >> 29 & 1:                                       # adds/subs
                return False
            imm = (word >> 10 & 0xFFF) << (12 * shift)
            rn, rd = word >> 5 & 31, word & 31
            self.set(rd, self.reg(rn, True) + (-imm if sub else imm), True)
            self.regs["pc"] += 4
            return True
        if word & 0x3A000000 == 0x28000000:                          # ldp/stp
            opc, vector, mode, load = word >> 30, word >> 26 & 1, word >> 23 & 3, word >> 22 & 1
            if mode == 0 or (vector and opc != 1) or (not vector and opc != 2):
                return False                                          # only x and d pairs
            imm = ((word >> 15 & 0x7F) ^ 0x40) - 0x40
            rt2, rn, rt = word >> 10 & 31, word >> 5 & 31, word & 31
            base = self.reg(rn, True)
            at = base + 8 * imm if mode in (2, 3) else base          # offset, pre-index: at base+imm
            for i, r in enumerate((rt, rt2)):
                if vector:  # d registers: kept apart, the unwinder does not track them
                    key = f"d{r}"
                    if load:
                        self.regs[key] = self.load(at + 8 * i)
                    else:
                        self.store(at + 8 * i, self.regs.get(key, 0))
                elif load:
                    self.set(r, self.load(at + 8 * i), False)
                else:
                    self.store(at + 8 * i, self.reg(r, False))
            if mode in (1, 3):                                        # post-, pre-index: write back
                self.set(rn, base + 8 * imm, True)
            self.regs["pc"] += 4
            return True
        if word & 0xFFC00000 in (0xF9000000, 0xF9400000):             # str/ldr x (unsigned offset)
            at = self.reg(word >> 5 & 31, True) + 8 * (word >> 10 & 0xFFF)
            if word & 0x00400000:
                self.set(word & 31, self.load(at), False)
            else:
                self.store(at, self.reg(word & 31, False))
            self.regs["pc"] += 4
            return True
        if word & 0xFFE00C00 in (0xF8000C00, 0xF8400400, 0xF8000400, 0xF8400C00):  # str/ldr x pre/post
            imm = ((word >> 12 & 0x1FF) ^ 0x100) - 0x100
            rn, rt, pre = word >> 5 & 31, word & 31, word >> 11 & 1
            base = self.reg(rn, True)
            at = base + imm if pre else base
            if word & 0x00400000:
                self.set(rt, self.load(at), False)
            else:
                self.store(at, self.reg(rt, False))
            self.set(rn, base + imm, True)
            self.regs["pc"] += 4
            return True
        return False


def saves_or_restores(word: int) -> bool:
    """A prolog or epilog instruction: sp adjusted, fp set from sp, or callee-saved x19-x30 /
    d8-d15 stored or loaded relative to sp."""
    if word & 0xFF8003FF in (0xD10003FF, 0x910003FF):                # sub/add sp, sp, #imm
        return True
    if word & 0xFF8003FF == 0x910003FD:                               # add fp, sp, #imm (mov fp, sp)
        return True
    if word & 0x3A000000 == 0x28000000 and word >> 5 & 31 == 31 and word >> 23 & 3:
        rt, rt2, vector = word & 31, word >> 10 & 31, word >> 26 & 1
        if word >> 30 != (1 if vector else 2):
            return False
        keep = range(8, 16) if vector else range(19, 31)
        return rt in keep and rt2 in keep
    if word & 0xFFC00000 in (0xF9000000, 0xF9400000) or word & 0xFFE00C00 in (0xF8000C00, 0xF8400400):
        return word >> 5 & 31 == 31 and 19 <= word & 31 <= 30
    return False


def entry_state() -> dict[str, int]:
    regs = {f"x{i}": 0x1000 + i for i in range(29)}
    regs.update(x29=0xF00D0029, x30=0xC0DE0030, sp=0x7FFF0000, pc=0)
    return regs


def check_unwinds_to(entry: dict[str, int], regs: dict[str, int], memory: dict[int, int], base: int,
                     runtime_function: int, core_read, where: str) -> None:  # type: ignore[no-untyped-def]
    from sosext.contracts.unwind_arm64 import unwind_frame

    def read(at: int, size: int) -> bytes:
        if 0x7FF00000 <= at < 0x7FFF1000:  # the scratch stack
            return b"".join(memory.get(a, 0).to_bytes(8, "little") for a in range(at, at + size, 8))[:size]
        return core_read(at, size)

    caller = unwind_frame({k: v for k, v in regs.items() if not k.startswith("d")}, base, runtime_function, read)
    want = {k: entry[k] for k in ["sp", "x29"] + [f"x{i}" for i in range(19, 29)]}
    got = {k: caller[k] for k in want}
    assert got == want and caller["pc"] == entry["x30"], where


@pytest.fixture(scope="module")
def arm64_methods():  # type: ignore[no-untyped-def]
    """The arm64 heap core; {code start: (ReadyToRun, unwind base, RUNTIME_FUNCTION)} of every
    method with a managed frame on it; (image base, RUNTIME_FUNCTION table, count) of every
    ReadyToRun image."""
    if dotnet_path() is None:
        pytest.skip("dotnet is not on PATH: the arm64 debuggee is published with the .NET SDK")
    try:
        core = arm64_core("heap")
    except Arm64Unavailable as e:
        pytest.skip(str(e))
    from sosext.contracts.descriptor import read_descriptor
    from sosext.contracts.reader import ContractReader
    from sosext.contracts.stackwalk import StackWalker
    from sosext.contracts.targetdata import TargetData
    from sosext.targets.elfcore import CoreTarget
    t = CoreTarget(core.core)
    runtime = t.find_module("libcoreclr.so")
    walker = StackWalker(t, TargetData(t, read_descriptor(t, runtime)))
    methods = {}
    reader = ContractReader(t, runtime)
    for _addr, th in reader.threads():
        for f in walker.managed_frames(th.os_thread_id, th.frame):
            block = walker.manager.code_block(f.ip - 4)
            if block is not None and block.runtime_function and not block.funclet:
                methods[block.start] = (block.ready_to_run, block.unwind_base, block.runtime_function)
    from sosext.contracts.typeanswers import TypeAnswers
    types = TypeAnswers(t, read_descriptor(t, runtime))
    d = types.data
    modules = []
    for module in types.loader.all_modules():
        info = d.field_pointer(module, "Module", "ReadyToRunInfo")
        if info:
            modules.append((types.metadata.image_range(module)[0],
                            d.field_pointer(info, "ReadyToRunInfo", "RuntimeFunctions"),
                            d.field_u32(info, "ReadyToRunInfo", "NumRuntimeFunctions")))
    yield t, methods, modules
    t.close()


def check_method(start: int, base: int, runtime_function: int, read) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """Unwind from every prolog and epilog instruction boundary of the method at ``start``:
    (1, epilogs checked); (0, 0) where the interpreter stopped inside the prolog (its
    boundaries up to there are checked, its epilogs are not)."""
    begin, unwind_data = struct.unpack("<II", read(runtime_function, 8))
    assert base + begin == start and not unwind_data & 3
    header = struct.unpack("<I", read(base + unwind_data, 4))[0]
    words = struct.unpack(f"<{header & 0x3FFFF}I", read(start, 4 * (header & 0x3FFFF)))
    entry = entry_state()
    m = Machine({**entry, "pc": start}, {})
    states = [(dict(m.regs), dict(m.memory))]
    complete = False
    for word in words:
        if not saves_or_restores(word):
            complete = True
            break
        if not m.step(word):
            break
        states.append((dict(m.regs), dict(m.memory)))
    # at each boundary inside the prolog (after 0 … n instructions, the last one the body's first)
    for i, (regs, memory) in enumerate(states):
        check_unwinds_to(entry, regs, memory, base, runtime_function, read, f"{start:#x} prolog +{4 * i:#x}")
    # a prolog the interpreter stopped in (a stack probe first, an instruction it does not
    # know) leaves no known body state for the epilogs
    if not complete or len(states) == 1:
        return 0, 0
    body, body_memory = states[-1]
    epilogs = 0
    for at, word in enumerate(words):
        if word != RET:
            continue
        first = at
        while first > 0 and saves_or_restores(words[first - 1]):
            first -= 1
        if first == 0 or words[first - 1] & 0xDF20001F == 0x8B20001F:
            continue  # a large frame freed by add sp, sp, xN: the epilog starts before it
        m = Machine({**body, "pc": start + 4 * first}, dict(body_memory))
        for k in range(first, at + 1):
            check_unwinds_to(entry, m.regs, m.memory, base, runtime_function, read, f"{start:#x} epilog +{4 * k:#x}")
            assert m.step(words[k]), f"{start:#x}+{4 * k:#x}: {words[k]:#010x}"
        assert m.regs["pc"] == entry["x30"] and m.regs["sp"] == entry["sp"]
        epilogs += 1
    return 1, epilogs


@pytest.mark.slow
def test_unwinding_from_every_prolog_and_epilog_instruction_gives_the_entry_state(arm64_methods) -> None:  # type: ignore[no-untyped-def]
    """The methods on the core's stacks (JIT-compiled and ReadyToRun)."""
    t, methods, _modules = arm64_methods
    prologs = epilogs = 0
    for start, (_r2r, base, rf) in sorted(methods.items()):
        p, e = check_method(start, base, rf, t.read)
        prologs, epilogs = prologs + p, epilogs + e
    assert prologs >= 10 and epilogs >= 10, (prologs, epilogs)


@pytest.mark.slow
def test_unwinding_ready_to_run_prologs_and_epilogs_gives_the_entry_state(arm64_methods) -> None:  # type: ignore[no-untyped-def]
    """Every 25th RUNTIME_FUNCTION (methods and funclets) of every ReadyToRun image the core
    maps (crossgen's code: frames of every size, save_next runs, scoped epilogs); all of them
    are full .xdata: crossgen, like the JIT, writes no packed or chained entries."""
    t, _methods, modules = arm64_methods
    prologs = epilogs = 0
    kinds: set[int] = set()
    for base, table, count in modules:
        raw = t.read(table, 8 * count)
        kinds |= {struct.unpack_from("<I", raw, 8 * i + 4)[0] & 3 for i in range(count)}
        for i in range(0, count, 25):
            begin = struct.unpack_from("<I", raw, 8 * i)[0]
            p, e = check_method(base + begin, base, table + 8 * i, t.read)
            prologs, epilogs = prologs + p, epilogs + e
    assert kinds == {0}
    assert prologs >= 1000 and epilogs >= 1000, (prologs, epilogs)
