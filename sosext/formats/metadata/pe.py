"""Finding the metadata root inside a PE image (ECMA-335 II.25).

An image is seen in one of two layouts: as the file on disk (sections at their
PointerToRawData) or as the loader mapped it into a process (sections at their RVA).
The runtime maps IL-only and ReadyToRun images both ways, so a core file may hold
either; the caller says which one it has.
"""
from __future__ import annotations

import struct
from typing import Callable

from .errors import MetadataError
from .root import METADATA_SIGNATURE

_PE32 = 0x10B
_PE32_PLUS = 0x20B
_CLI_HEADER_DIRECTORY = 14  # IMAGE_DIRECTORY_ENTRY_COM_DESCRIPTOR
_SECTION_HEADER_SIZE = 40
_MAX_SECTIONS = 96  # the PE/COFF limit


class _Image:
    """Bounds-checked little-endian reads from an image."""

    __slots__ = ("view",)

    def __init__(self, view: memoryview) -> None:
        self.view = view

    def unpack(self, fmt: str, offset: int) -> tuple[int, ...]:
        size = struct.calcsize(fmt)
        if offset < 0 or offset + size > len(self.view):
            raise MetadataError(f"PE image truncated (need {size} bytes at {offset:#x})")
        return struct.unpack_from(fmt, self.view, offset)


def _headers(img: _Image) -> tuple[int, int, list[tuple[int, int, int]]]:
    """(number of data directories present, offset of the first, sections as (RVA, raw size,
    raw offset)) of a PE image."""
    (mz,) = img.unpack("<H", 0)
    if mz != 0x5A4D:
        raise MetadataError("not a PE image (no MZ header)")
    (pe_offset,) = img.unpack("<I", 0x3C)
    (pe_sig,) = img.unpack("<I", pe_offset)
    if pe_sig != 0x00004550:
        raise MetadataError("not a PE image (no PE signature)")
    _, n_sections, _, _, _, opt_size, _ = img.unpack("<HHIIIHH", pe_offset + 4)
    opt = pe_offset + 24
    (magic,) = img.unpack("<H", opt)
    if magic == _PE32:
        count_at, dirs_at = 92, 96
    elif magic == _PE32_PLUS:
        count_at, dirs_at = 108, 112
    else:
        raise MetadataError(f"unknown PE optional header magic {magic:#06x}")
    (n_dirs,) = img.unpack("<I", opt + count_at)
    n_dirs = min(n_dirs, max(0, (opt_size - dirs_at) // 8))  # only those the optional header holds
    if n_sections > _MAX_SECTIONS:
        raise MetadataError(f"PE image claims {n_sections} sections")
    sections = []
    first = opt + opt_size
    for i in range(n_sections):
        _, _, va, raw_size, raw_ptr = img.unpack("<8sIIII", first + i * _SECTION_HEADER_SIZE)
        sections.append((va, raw_size, raw_ptr))
    return n_dirs, opt + dirs_at, sections


def _offset(img: _Image, sections: list[tuple[int, int, int]], mapped: bool, rva: int, size: int) -> int:
    """Where ``size`` bytes at ``rva`` are in the image (an RVA is an offset when ``mapped``)."""
    if mapped:
        offset = rva
    else:
        for va, raw_size, raw_ptr in sections:
            # Bytes past SizeOfRawData are zero-fill that the file does not hold.
            if va <= rva and rva - va + size <= raw_size:
                offset = raw_ptr + (rva - va)
                break
        else:
            raise MetadataError(f"RVA {rva:#x} (+{size:#x}) is in no section of the PE file")
    if offset + size > len(img.view):
        raise MetadataError(f"RVA {rva:#x} (+{size:#x}) lies past the end of the PE image")
    return offset


COMIMAGE_FLAGS_IL_LIBRARY = 0x4  # set in a ReadyToRun image's CLI header (precompiled code)


def _cli_header(image: bytes | bytearray | memoryview, mapped: bool) -> tuple[_Image, int, Callable[[int, int], int]]:
    """The image, the offset of its CLI header (IMAGE_COR20_HEADER) and RVA -> offset."""
    view = memoryview(image)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    img = _Image(view)
    n_dirs, dirs, sections = _headers(img)
    if n_dirs <= _CLI_HEADER_DIRECTORY:
        raise MetadataError("PE image has no CLI header directory (not a .NET assembly)")
    cli_rva, cli_size = img.unpack("<II", dirs + _CLI_HEADER_DIRECTORY * 8)
    if cli_rva == 0 or cli_size < 20:
        raise MetadataError("PE image has no CLI header (not a .NET assembly)")

    def to_offset(rva: int, size: int) -> int:
        return _offset(img, sections, mapped, rva, size)

    return img, to_offset(cli_rva, 20), to_offset


def cli_flags(image: bytes | bytearray | memoryview, mapped: bool) -> int:
    """The CLI header's Flags (COMIMAGE_FLAGS_*)."""
    img, cli, _ = _cli_header(image, mapped)
    return img.unpack("<I", cli + 16)[0]


def metadata_from_pe(image: bytes | bytearray | memoryview, mapped: bool) -> memoryview:
    """Return a view of the metadata root (starting with "BSJB") inside ``image``.

    ``mapped`` is True for an image laid out as loaded (an offset is an RVA) and False for
    the file layout (RVAs are translated through the section table).
    """
    img, cli, to_offset = _cli_header(image, mapped)
    md_rva, md_size = img.unpack("<II", cli + 8)
    if md_rva == 0 or md_size < 16:
        raise MetadataError("CLI header has no metadata directory")
    md = to_offset(md_rva, md_size)
    (signature,) = img.unpack("<I", md)
    if signature != METADATA_SIGNATURE:
        raise MetadataError(f"bad metadata signature {signature:#010x} in PE image")
    return img.view[md : md + md_size]


def image_size(read_partial, base: int) -> int | None:  # type: ignore[no-untyped-def]
    """SizeOfImage of the PE image loaded at ``base`` (the optional header's field, the same
    offset in PE32 and PE32+), read through ``read_partial(address, size)``; None when the
    headers are not there or make no sense."""
    head = bytes(read_partial(base, 0x400))
    if len(head) < 0x40 or head[:2] != b"MZ":
        return None
    pe_offset = int.from_bytes(head[0x3C:0x40], "little")
    at = pe_offset + 24 + 56
    if pe_offset > 0x400 - 4 or head[pe_offset:pe_offset + 4] != b"PE\0\0" or at + 4 > len(head):
        return None
    size = int.from_bytes(head[at:at + 4], "little")
    return size or None


_RESOURCE_DIRECTORY = 2  # IMAGE_DIRECTORY_ENTRY_RESOURCE
_RT_VERSION = 16
_FIXED_FILE_INFO_SIGNATURE = 0xFEEF04BD
_MAX_RESOURCE_ENTRIES = 4096


def file_version(image: bytes | bytearray | memoryview, mapped: bool = False) -> str | None:
    """The file version ("10.0.1226.42308") from the PE image's version resource
    (VS_FIXEDFILEINFO's dwFileVersionMS/LS), or None when it has none."""
    img = _Image(memoryview(image).cast("B") if memoryview(image).format != "B" else memoryview(image))
    try:
        n_dirs, dirs, sections = _headers(img)
        if n_dirs <= _RESOURCE_DIRECTORY:
            return None
        rsrc_rva, rsrc_size = img.unpack("<II", dirs + _RESOURCE_DIRECTORY * 8)
        if not rsrc_rva or rsrc_size < 16:
            return None
        root = _offset(img, sections, mapped, rsrc_rva, 16)
        # Three levels (type, name, language): the RT_VERSION type, then the first entry of each.
        entry = _resource_entry(img, root, root, _RT_VERSION)
        for _level in range(2):
            if entry is None or not entry & 0x80000000:
                return None
            entry = _resource_entry(img, root, root + (entry & 0x7FFFFFFF), None)
        if entry is None or entry & 0x80000000:
            return None
        data_rva, data_size = img.unpack("<II", root + entry)
        data = _offset(img, sections, mapped, data_rva, data_size)
        blob = bytes(img.view[data:data + data_size])
        at = blob.find(_FIXED_FILE_INFO_SIGNATURE.to_bytes(4, "little"))
        if at < 0 or at + 16 > len(blob):
            return None
        ms, ls = struct.unpack_from("<II", blob, at + 8)
        return f"{ms >> 16}.{ms & 0xFFFF}.{ls >> 16}.{ls & 0xFFFF}"
    except MetadataError:
        return None


def _resource_entry(img: _Image, root: int, directory: int, want_id: int | None) -> int | None:
    """The offset-or-subdirectory word of the entry with id ``want_id`` (None: the first
    entry) in the resource directory at ``directory``."""
    _, _, _, _, n_named, n_ids = img.unpack("<IIHHHH", directory)
    for i in range(min(n_named + n_ids, _MAX_RESOURCE_ENTRIES)):
        name, target = img.unpack("<II", directory + 16 + 8 * i)
        if want_id is None or (not name & 0x80000000 and name == want_id):
            return target
    return None


_MAX_IMAGE_FILE = 256 << 20


def file_version_of(path: str) -> str | None:
    """The file version of the PE file at ``path`` (a module's path as the target names it:
    only a regular file, read up to 256 MiB), or None."""
    import os
    import stat
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO must not block us
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_IMAGE_FILE:
            return None
        return file_version(f.read())
