"""Native unwinding with a module's call frame information (.eh_frame), x86_64 and AArch64.

Every function of a native library compiled for Linux carries unwind rules in .eh_frame: for
each instruction, how to compute the frame's canonical frame address (CFA: the stack pointer
before the call) from a register, and where the return address and the saved callee-saved
registers lie relative to it. .eh_frame_hdr holds a table of (function start, FDE address)
sorted by start, so finding the rules for one address is a binary search and the parse of a
single FDE (pyelftools). That is what a debugger's native unwinder does, without needing frame
pointers. Files are read on this machine by the path the target mapped them from, only when
their build-id matches the module's, and cached per file.
"""
from __future__ import annotations

import bisect
import io
import os
import struct
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

from .base import Module
from .symbols import symbol_table

_DATAREL_SDATA4 = 0x3B


@dataclass(frozen=True, slots=True)
class _Abi:
    """What unwinding needs of an architecture's DWARF register numbering (its psABI)."""

    registers: dict[int, str]  # DWARF number -> the Target protocol's register name
    ra_column: int             # the return-address column of its CIEs
    ip: str
    sp: str
    callee_saved: tuple[str, ...]
    ra_is_register: bool       # AArch64: the return address is x30 itself (kept when not saved)


_ABIS = {
    # System V x86-64 psABI: rax rdx rcx rbx rsi rdi rbp rsp r8-r15, return address column 16.
    "x86_64": _Abi({0: "rax", 1: "rdx", 2: "rcx", 3: "rbx", 4: "rsi", 5: "rdi", 6: "rbp", 7: "rsp",
                    8: "r8", 9: "r9", 10: "r10", 11: "r11", 12: "r12", 13: "r13", 14: "r14", 15: "r15"},
                   16, "rip", "rsp", ("rbx", "rbp", "r12", "r13", "r14", "r15"), False),
    # AArch64 DWARF: x0-x30 are 0-30, sp 31; the CIEs name x30 (the link register) as the
    # return-address column; x19-x29 are callee-saved (AAPCS64).
    "aarch64": _Abi({**{i: f"x{i}" for i in range(31)}, 31: "sp"},
                    30, "pc", "sp", tuple(f"x{i}" for i in range(19, 31)), True),
}


class _Cfi:
    """The .eh_frame of one file: its search table and FDEs, parsed on demand."""

    def __init__(self, path: str) -> None:
        from elftools.dwarf.callframe import FDE, CallFrameInfo
        from elftools.elf.elffile import ELFFile

        self._fde_type = FDE
        with open(path, "rb") as f:
            self._load(ELFFile(f), CallFrameInfo)

    def _load(self, elf, CallFrameInfo) -> None:  # type: ignore[no-untyped-def]  # noqa: N803
        hdr = elf.get_section_by_name(".eh_frame_hdr")
        eh = elf.get_section_by_name(".eh_frame")
        if hdr is None or eh is None:
            raise ValueError("no .eh_frame_hdr")
        data = hdr.data()
        version, _ptr_enc, count_enc, table_enc = data[:4]
        if version != 1 or count_enc != 0x03 or table_enc != _DATAREL_SDATA4:
            raise ValueError("unsupported .eh_frame_hdr encoding")
        (count,) = struct.unpack_from("<I", data, 8)
        pairs = struct.unpack_from(f"<{2 * count}i", data, 12)
        base = hdr["sh_addr"]
        self.starts = [base + pairs[2 * i] for i in range(count)]
        self.fdes = [base + pairs[2 * i + 1] for i in range(count)]
        self._eh_addr = eh["sh_addr"]
        dwarf = elf.get_dwarf_info(follow_links=False)
        # pyelftools reads entries at offsets into the section's own bytes.
        self._cfi = CallFrameInfo(io.BytesIO(eh.data()), eh["sh_size"], eh["sh_addr"], dwarf.structs,
                                  for_eh_frame=True)
        self._rows: dict[int, list] = {}

    def row(self, vaddr: int):  # type: ignore[no-untyped-def]
        """The decoded CFI row that applies at ``vaddr``, or None."""
        i = bisect.bisect_right(self.starts, vaddr) - 1
        if i < 0:
            return None
        fde_addr = self.fdes[i]
        table = self._rows.get(fde_addr)
        if table is None:
            entry = self._cfi._parse_entry_at(fde_addr - self._eh_addr)
            if not isinstance(entry, self._fde_type):
                return None
            start = entry.header["initial_location"]
            end = start + entry.header["address_range"]
            table = [start, end, entry.get_decoded().table]
            self._rows[fde_addr] = table
        start, end, rows = table
        if not start <= vaddr < end:
            return None
        best = None
        for r in rows:
            if r["pc"] <= vaddr:
                best = r
            else:
                break
        return best


@lru_cache(maxsize=32)
def _cfi(path: str, size: int, mtime: float) -> _Cfi | None:
    try:
        return _Cfi(path)
    except Exception:  # noqa: BLE001 - any malformed file simply has no unwind rules for us
        return None


def cfi_for(module: Module) -> tuple[_Cfi, int] | None:
    """(the module's CFI, its link base) when its file is here and is the module's build."""
    if not module.path.startswith("/"):
        return None
    table = symbol_table(module.path)  # the same file checks: build-id, link base
    if table is None or (module.build_id and table.build_id and module.build_id != table.build_id):
        return None
    try:
        st = os.stat(module.path)
    except OSError:
        return None
    cfi = _cfi(module.path, st.st_size, st.st_mtime)
    return (cfi, table.link_base) if cfi is not None else None


@dataclass(frozen=True, slots=True)
class Step:
    sp: int
    ip: int
    regs: dict[str, int]


def unwind_step(module: Module, regs: dict[str, int], read_pointer: Callable[[int], int],
                leaf: bool, arch: str = "x86_64") -> Step | None:
    """The caller's registers, from the CFI of the function at the instruction pointer (rip,
    or pc on AArch64) in ``module``; None where the rules are missing or use DWARF expressions.
    ``leaf``: the pointer is the current instruction (not a return address, which would be
    looked up one byte back)."""
    abi = _ABIS.get(arch)
    found = cfi_for(module) if abi is not None else None
    if found is None:
        return None
    cfi, link_base = found
    ip = regs[abi.ip]
    row = cfi.row(ip - (0 if leaf else 1) - module.base + link_base)
    if row is None:
        return None
    rule = row["cfa"]
    names = abi.registers
    if rule.expr is not None or rule.reg not in names or names[rule.reg] not in regs:
        return None
    cfa = regs[names[rule.reg]] + rule.offset
    caller = dict(regs)
    for number, name in names.items():
        if (name in abi.callee_saved or number == abi.ra_column) and number in row \
                and row[number].type == "OFFSET":
            caller[name] = read_pointer(cfa + row[number].arg)
    ra_rule = row.get(abi.ra_column)
    if ra_rule is not None and ra_rule.type == "OFFSET":
        return_address = read_pointer(cfa + ra_rule.arg)
    elif abi.ra_is_register and (ra_rule is None or ra_rule.type == "SAME_VALUE"):
        return_address = regs.get(names[abi.ra_column], 0)  # a leaf: lr was never saved
    else:
        return None
    caller[abi.ip] = return_address
    caller[abi.sp] = cfa
    return Step(cfa, return_address, caller)


def unwind_native(modules: list[Module], regs: dict[str, int], read_pointer: Callable[[int], int],
                  arch: str, max_frames: int = 256) -> list[Step]:
    """The thread's native frames from ``regs`` (its leaf frame first) while each lies in a
    module with call frame information and the stack pointer rises; what a debugger's CFI
    unwinder gives for the native part of a stack."""
    abi = _ABIS.get(arch)
    if abi is None or abi.ip not in regs or abi.sp not in regs:
        return []
    by_base = sorted(modules, key=lambda m: m.base)
    bases = [m.base for m in by_base]
    frames = [Step(regs[abi.sp], regs[abi.ip], dict(regs))]
    leaf = True
    while len(frames) < max_frames:
        ip = frames[-1].ip
        i = bisect.bisect_right(bases, ip) - 1
        module = by_base[i] if i >= 0 and ip < by_base[i].base + by_base[i].size else None
        if module is None:
            break
        step = unwind_step(module, frames[-1].regs, read_pointer, leaf, arch)
        if step is None or step.sp < frames[-1].sp or (step.sp == frames[-1].sp and step.ip == ip) or not step.ip:
            break
        frames.append(step)
        leaf = False
    return frames
