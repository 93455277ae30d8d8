"""Native unwinding with a module's call frame information (.eh_frame), x86_64.

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

# DWARF register numbers of x86_64 (System V psABI) and the return-address column.
_X64 = {0: "rax", 1: "rdx", 2: "rcx", 3: "rbx", 4: "rsi", 5: "rdi", 6: "rbp", 7: "rsp",
        8: "r8", 9: "r9", 10: "r10", 11: "r11", 12: "r12", 13: "r13", 14: "r14", 15: "r15"}
_RA = 16
_CALLEE_SAVED = ("rbx", "rbp", "r12", "r13", "r14", "r15")
_DATAREL_SDATA4 = 0x3B


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
                leaf: bool) -> Step | None:
    """The caller's registers, from the CFI of the function at regs["rip"] in ``module``; None
    where the rules are missing or use DWARF expressions. ``leaf``: rip is the current
    instruction (not a return address, which would be looked up one byte back)."""
    found = cfi_for(module)
    if found is None:
        return None
    cfi, link_base = found
    ip = regs["rip"]
    row = cfi.row(ip - (0 if leaf else 1) - module.base + link_base)
    if row is None:
        return None
    rule = row["cfa"]
    if rule.expr is not None or rule.reg not in _X64 or _X64[rule.reg] not in regs:
        return None
    cfa = regs[_X64[rule.reg]] + rule.offset
    ra_rule = row.get(_RA)
    if ra_rule is None or ra_rule.type != "OFFSET":
        return None
    caller = dict(regs)
    caller["rip"] = read_pointer(cfa + ra_rule.arg)
    caller["rsp"] = cfa
    for number, name in _X64.items():
        if name in _CALLEE_SAVED and number in row and row[number].type == "OFFSET":
            caller[name] = read_pointer(cfa + row[number].arg)
    return Step(cfa, caller["rip"], caller)
