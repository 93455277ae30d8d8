"""Reading single sections of an ELF64 file without reading the file.

Finding the DAC reads two facts from native runtime files: the ``@(#)Version`` marker (a
variable in ``.data``) and the ``DotNetRuntimeInfo`` export (``.dynsym``). Reading and
searching the whole 7 MB libcoreclr.so for them cost ~60 ms of every start; the sections
hold them in ~150 KB. The files sit where a core says, so they may be hostile: every offset
is bounds-checked against the file's size, sizes are capped, and any parse failure means
"not found" (callers then fall back to reading the whole file).
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass

_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_SECTION = struct.Struct("<IIQQQQIIQQ")
_MAX_SECTIONS = 4096
_MAX_SECTION_SIZE = 64 << 20
_SHT_NOBITS = 8


@dataclass(frozen=True, slots=True)
class Section:
    name: str
    type: int
    offset: int
    size: int
    link: int
    entsize: int


def sections(fd: int) -> list[Section] | None:
    """The section headers of the ELF64 little-endian file open at ``fd``, or None."""
    try:
        size = os.fstat(fd).st_size
        head = os.pread(fd, _HEADER.size, 0)
        if len(head) < _HEADER.size:
            return None
        (ident, _t, _m, _v, _e, _phoff, shoff, _f, _eh, _phes, _phn,
         shentsize, shnum, shstrndx) = _HEADER.unpack(head)
        if ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1:
            return None
        if shentsize != _SECTION.size or not 0 < shnum <= _MAX_SECTIONS or shstrndx >= shnum:
            return None
        if shoff + shnum * shentsize > size:
            return None
        table = os.pread(fd, shnum * shentsize, shoff)
        raw = [_SECTION.unpack_from(table, i * shentsize) for i in range(shnum)]
        names = _section_bytes(fd, size, raw[shstrndx][1], raw[shstrndx][4], raw[shstrndx][5])
        if names is None:
            return None
        out = []
        for name_at, sh_type, _fl, _addr, offset, sh_size, link, _info, _align, entsize in raw:
            end = names.find(b"\0", name_at) if name_at < len(names) else -1
            name = names[name_at:end].decode("ascii", "replace") if end >= 0 else ""
            out.append(Section(name, sh_type, offset, sh_size, link, entsize))
        return out
    except (OSError, struct.error, ValueError, OverflowError):
        return None


def _section_bytes(fd: int, file_size: int, sh_type: int, offset: int, size: int) -> bytes | None:
    if sh_type == _SHT_NOBITS or size > _MAX_SECTION_SIZE or offset + size > file_size:
        return None
    data = os.pread(fd, size, offset)
    return data if len(data) == size else None


def read_section(fd: int, section: Section) -> bytes | None:
    """The file contents of ``section`` (None: no contents, too large, or beyond the file)."""
    try:
        return _section_bytes(fd, os.fstat(fd).st_size, section.type, section.offset, section.size)
    except (OSError, OverflowError):
        return None
