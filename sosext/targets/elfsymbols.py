"""Exported (dynamic) symbols of an ELF64 file, read without reading the whole file.

Both readers need exports of the target's runtime module: the DAC reader its
``DotNetRuntimeInfo``, the contracts reader its ``DotNetRuntimeContractDescriptor`` and
``g_dacTable``, and breakpoints the JIT's ``getJit``. The file sits where a core says, so it
may be hostile: every offset is bounds-checked and any parse failure means "not found".
"""
from __future__ import annotations

import os
import struct

from .elfsections import read_section, sections

_ELF64_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_ELF64_SEGMENT = struct.Struct("<IIQQQQQQ")
_ELF64_SYMBOL = struct.Struct("<IBBHQQ")
_SHT_DYNSYM = 11
_PT_LOAD = 1
_SHN_UNDEF = 0
_MAX_SEGMENTS = 256


def exported_symbol(image_path: str, name: str) -> tuple[int, int] | None:
    """(st_value, lowest PT_LOAD p_vaddr) of a defined dynamic symbol in an ELF64 file, or None.

    The file may be hostile (it sits where a core says): every offset is bounds-checked and any
    parse failure means "not found". Reads only the headers, ``.dynsym`` and its string table
    (elfsections.py), and looks for the name in the string table first: most runtimes do not
    export it. Reading the whole 7 MB runtime cost ~30 ms, a pyelftools parse ~75 ms."""
    try:
        fd = os.open(image_path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return _find_dynamic_symbol(fd, name.encode())
    except (OSError, struct.error, ValueError, IndexError, OverflowError):  # offsets from a hostile file
        return None
    finally:
        os.close(fd)


def image_extent(image_path: str) -> int | None:
    """Bytes from the lowest PT_LOAD's page to the end of the highest one's memory image
    (``.bss`` included, which a module's file mappings do not cover); None if unreadable."""
    try:
        fd = os.open(image_path, os.O_RDONLY)
    except OSError:
        return None
    try:
        loads = _loads(fd)
    except (OSError, struct.error, ValueError):
        return None
    finally:
        os.close(fd)
    if not loads:
        return None
    low = min(v for v, _ in loads) & ~0xFFF
    return max(v + m for v, m in loads) - low


def _loads(fd: int) -> list[tuple[int, int]] | None:
    """(p_vaddr, p_memsz) of every PT_LOAD, None unless a little-endian ELF64."""
    head = os.pread(fd, _ELF64_HEADER.size, 0)
    (ident, _type, _machine, _version, _entry, phoff, _shoff, _flags, _ehsize, phentsize, phnum,
     _shentsize, _shnum, _shstrndx) = _ELF64_HEADER.unpack(head)
    if ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1:
        return None
    if phentsize != _ELF64_SEGMENT.size or not 0 < phnum <= _MAX_SEGMENTS:
        return None
    table = os.pread(fd, phnum * phentsize, phoff)
    return [(vaddr, memsz) for ptype, _fl, _off, vaddr, _pa, _filesz, memsz, _al in _ELF64_SEGMENT.iter_unpack(table)
            if ptype == _PT_LOAD]


def _lowest_load(fd: int) -> int | None:
    head = os.pread(fd, _ELF64_HEADER.size, 0)
    (ident, _type, _machine, _version, _entry, phoff, _shoff, _flags, _ehsize, phentsize, phnum,
     _shentsize, _shnum, _shstrndx) = _ELF64_HEADER.unpack(head)
    if ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1:
        return None  # only little-endian ELF64, the hosts sosext runs on
    if phentsize != _ELF64_SEGMENT.size or not 0 < phnum <= _MAX_SEGMENTS:
        return None
    table = os.pread(fd, phnum * phentsize, phoff)
    loads = [vaddr for ptype, _fl, _off, vaddr, *_rest in _ELF64_SEGMENT.iter_unpack(table) if ptype == _PT_LOAD]
    return min(loads) if loads else None


def _find_dynamic_symbol(fd: int, name: bytes) -> tuple[int, int] | None:
    first_load = _lowest_load(fd)
    found = sections(fd) if first_load is not None else None
    if found is None:
        return None
    for dynsym in found:
        if dynsym.type != _SHT_DYNSYM or dynsym.entsize != _ELF64_SYMBOL.size or not 0 <= dynsym.link < len(found):
            continue
        strtab = read_section(fd, found[dynsym.link])
        if strtab is None:
            return None
        # A linker may share a name's bytes with the tail of a longer one ("__libc_malloc"
        # holds "malloc"), so every place the name ends a string is a candidate.
        wanted, at = set(), strtab.find(name + b"\0")
        while at >= 0:
            wanted.add(at)
            at = strtab.find(name + b"\0", at + 1)
        if not wanted:
            return None
        table = read_section(fd, dynsym)
        if table is None:
            return None
        table = table[:(len(table) // _ELF64_SYMBOL.size) * _ELF64_SYMBOL.size]
        for st_name, _info_, _other, shndx, value, _size in _ELF64_SYMBOL.iter_unpack(table):
            if st_name in wanted and shndx != _SHN_UNDEF and value:
                return value, first_load
        return None
    return None


def elf_build_id(data: bytes | memoryview) -> bytes | None:
    """The GNU build id from an ELF image's program headers (file or memory layout)."""
    mv = memoryview(data)
    if len(mv) < 64 or bytes(mv[:4]) != b"\x7fELF" or mv[4] != 2:
        return None
    phoff, = struct.unpack_from("<Q", mv, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", mv, 0x36)
    for i in range(phnum):
        off = phoff + i * phentsize
        if off + 56 > len(mv):
            return None
        p_type, _flags, p_offset, p_vaddr, _pa, p_filesz = struct.unpack_from("<IIQQQQ", mv, off)
        if p_type != 4:  # PT_NOTE
            continue
        # In a file p_offset locates the notes; in memory it is p_vaddr (relative to base for PIC).
        for start in (p_offset, p_vaddr):
            bid = _scan_notes(mv, start, p_filesz)
            if bid:
                return bid
    return None


def _scan_notes(mv: memoryview, start: int, size: int) -> bytes | None:
    pos, end = start, min(start + size, len(mv))
    while pos + 12 <= end:
        namesz, descsz, ntype = struct.unpack_from("<III", mv, pos)
        name_end = pos + 12 + ((namesz + 3) & ~3)
        desc_end = name_end + ((descsz + 3) & ~3)
        if desc_end > len(mv) or namesz > 256 or descsz > 4096:
            return None
        if ntype == 3 and bytes(mv[pos + 12:pos + 12 + namesz]).rstrip(b"\0") == b"GNU":
            return bytes(mv[name_end:name_end + descsz])
        pos = desc_end
    return None


def file_build_id(path: str) -> bytes | None:
    """The GNU build id of an ELF file (its first 64 KB), None if it has none."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
    except OSError:
        return None
    return elf_build_id(head)
