"""Native symbol names for code addresses, from a module's ELF file (.symtab, else .dynsym).

A raw stack names native return addresses module!symbol+0xoff where the module's file says
which function holds the address. The file is read on this machine, by the path the target
mapped it from; when the target's module carries a GNU build-id and the file's differs (a core
from another machine, a library updated since), the file is not used. Only function symbols
with a size are trusted: an address past the end of the nearest exported function (a stripped
library's internal code) gets no name rather than a wrong one. Tables are cached per file
(path, size, mtime) for the life of the process.
"""
from __future__ import annotations

import bisect
import os
from dataclasses import dataclass
from functools import lru_cache

from .base import Module

_MAX_FILE = 1 << 30  # a larger "library" is not worth parsing for names


@dataclass(frozen=True, slots=True)
class SymbolTable:
    starts: tuple[int, ...]  # sorted virtual addresses (as linked)
    ends: tuple[int, ...]
    names: tuple[str, ...]
    link_base: int  # the first PT_LOAD's page-aligned virtual address
    build_id: bytes | None

    def lookup(self, vaddr: int) -> tuple[str, int] | None:
        i = bisect.bisect_right(self.starts, vaddr) - 1
        # Symbols may nest or overlap (aliases): look back a little for one that holds vaddr.
        for j in range(i, max(i - 8, -1), -1):
            if self.starts[j] <= vaddr < self.ends[j]:
                return self.names[j], vaddr - self.starts[j]
        return None


def _load(path: str) -> SymbolTable | None:
    try:
        from elftools.elf.elffile import ELFFile
        from elftools.elf.sections import NoteSection, SymbolTableSection
    except ImportError:
        return None
    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            loads = [s["p_vaddr"] for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
            link_base = (min(loads) & ~0xFFF) if loads else 0
            build_id = None
            for sec in elf.iter_sections():
                if isinstance(sec, NoteSection):
                    for note in sec.iter_notes():
                        if note["n_type"] == "NT_GNU_BUILD_ID":
                            build_id = bytes.fromhex(note["n_desc"])
            table = elf.get_section_by_name(".symtab") or elf.get_section_by_name(".dynsym")
            rows: dict[int, tuple[int, str]] = {}
            if isinstance(table, SymbolTableSection):
                for sym in table.iter_symbols():
                    if sym["st_info"]["type"] not in ("STT_FUNC", "STT_GNU_IFUNC"):
                        continue
                    start, size = sym["st_value"], sym["st_size"]
                    if not start or not size or not sym.name:
                        continue
                    # Among aliases keep the shortest name (the public one, not __GI_…).
                    old = rows.get(start)
                    if old is None or len(sym.name) < len(old[1]):
                        rows[start] = (start + size, sym.name)
    except Exception:  # noqa: BLE001 - a file named by a dump may be damaged in any way: then it has no names
        return None
    starts = sorted(rows)
    return SymbolTable(tuple(starts), tuple(rows[s][0] for s in starts), tuple(rows[s][1] for s in starts),
                       link_base, build_id)


@lru_cache(maxsize=64)
def _table(path: str, size: int, mtime: float) -> SymbolTable | None:
    return _load(path)


def symbol_table(path: str) -> SymbolTable | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not os.path.isfile(path) or st.st_size > _MAX_FILE:
        return None
    return _table(path, st.st_size, st.st_mtime)


def native_symbol(module: Module, address: int) -> tuple[str, int] | None:
    """(symbol, offset into it) of ``address`` inside ``module``; None when its file is missing,
    another build, or has no function holding the address."""
    if not module.path.startswith("/"):
        return None
    table = symbol_table(module.path)
    if table is None or not table.starts:
        return None
    if module.build_id and table.build_id and module.build_id != table.build_id:
        return None
    return table.lookup(address - module.base + table.link_base)
