"""A module's loaded image rebuilt from its file: for pages a dump left out.

A heap dump (createdump --withheap) keeps the memory the DAC asks for, not a library's
``.data``/``.rodata`` pages, and the runtime's contract descriptor lives there. Those pages are
the file's bytes plus the dynamic loader's relocations; in a position-independent library
almost all of them are RELATIVE relocations (value = load base + addend), which this module
applies. Other relocation kinds (symbol addresses) are left as the file has them: the bytes
that need them (GOT entries, vtables of imported classes) are not what sosext reads here.

The file sits where a core says and may be hostile: sizes are capped, offsets checked, and
any parse failure means "no image" (None).
"""
from __future__ import annotations

import bisect
import os
import struct
from functools import lru_cache

from .elfsections import read_section, sections

_ELF64_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_ELF64_SEGMENT = struct.Struct("<IIQQQQQQ")
_RELA = struct.Struct("<QQq")
_PT_LOAD = 1
_SHT_RELA = 4
_MAX_SEGMENTS = 256
_RELATIVE = {62: 8, 183: 1027}  # e_machine -> R_X86_64_RELATIVE, R_AARCH64_RELATIVE


class FileImage:
    """The file's PT_LOAD segments and RELATIVE relocations, read once."""

    def __init__(self, path: str, loads: list[tuple[int, int, int, int]], offsets: list[int],
                 addends: list[int]) -> None:
        self.path = path
        self.loads = loads  # (p_vaddr, p_offset, p_filesz, p_memsz)
        self.link_base = min(v for v, _o, _f, _m in loads) & ~0xFFF
        self._offsets = offsets  # sorted r_offset of every RELATIVE relocation
        self._addends = addends

    def read(self, base: int, address: int, size: int) -> bytes | None:
        """``size`` bytes at target ``address`` of the image loaded at ``base``, relocated; None
        when the range is not inside one loaded segment."""
        vaddr = address - base + self.link_base
        for p_vaddr, p_offset, p_filesz, p_memsz in self.loads:
            if p_vaddr <= vaddr and vaddr + size <= p_vaddr + p_memsz:
                break
        else:
            return None
        start = vaddr - p_vaddr
        data = bytearray(size)
        if start < p_filesz:
            n = min(size, p_filesz - start)
            try:
                with open(self.path, "rb") as f:
                    f.seek(p_offset + start)
                    chunk = f.read(n)
            except OSError:
                return None
            data[:len(chunk)] = chunk
        # Apply the relocations that land in [vaddr, vaddr + size).
        i = bisect.bisect_left(self._offsets, vaddr - 7)
        while i < len(self._offsets) and self._offsets[i] < vaddr + size:
            at = self._offsets[i] - vaddr
            value = (base - self.link_base + self._addends[i]) & ((1 << 64) - 1)
            word = value.to_bytes(8, "little")
            lo, hi = max(at, 0), min(at + 8, size)
            data[lo:hi] = word[lo - at:hi - at]
            i += 1
        return bytes(data)


@lru_cache(maxsize=8)
def _load(path: str, size: int, mtime: float) -> FileImage | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        head = os.pread(fd, _ELF64_HEADER.size, 0)
        (ident, _type, machine, _v, _e, phoff, _sh, _fl, _eh, phentsize, phnum, *_rest) = _ELF64_HEADER.unpack(head)
        if ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1 or machine not in _RELATIVE:
            return None
        if phentsize != _ELF64_SEGMENT.size or not 0 < phnum <= _MAX_SEGMENTS:
            return None
        table = os.pread(fd, phnum * phentsize, phoff)
        loads = [(vaddr, offset, filesz, memsz) for ptype, _f, offset, vaddr, _pa, filesz, memsz, _al
                 in _ELF64_SEGMENT.iter_unpack(table) if ptype == _PT_LOAD and filesz <= memsz]
        if not loads or any(o + f > size for _v, o, f, _m in loads):
            return None
        relative = _RELATIVE[machine]
        pairs: list[tuple[int, int]] = []
        for section in sections(fd) or ():
            if section.type != _SHT_RELA or section.entsize != _RELA.size:
                continue
            raw = read_section(fd, section)
            if raw is None:
                continue
            raw = raw[:len(raw) - len(raw) % _RELA.size]
            pairs.extend((off, add) for off, info, add in _RELA.iter_unpack(raw) if info & 0xFFFFFFFF == relative)
        pairs.sort()
        return FileImage(path, loads, [p[0] for p in pairs], [p[1] for p in pairs])
    except (OSError, struct.error, ValueError):
        return None
    finally:
        os.close(fd)


def file_image(path: str) -> FileImage | None:
    """The image of the ELF file at ``path`` (cached per path, size and mtime)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _load(path, st.st_size, st.st_mtime)
