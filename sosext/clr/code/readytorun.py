"""Where a method's precompiled code is in a ReadyToRun image, from its MethodDef token.

A ReadyToRun image is a PE file whose CLI header's ManagedNativeHeader points to a
READYTORUN_HEADER: signature "RTR\\0", version, flags, then a count of sections, each
(type, RVA, size). Two sections matter here (the runtime's ReadyToRunInfo::GetEntryPoint
reads them the same way):

- MethodDefEntryPoints (type 103): a NativeFormat array indexed by MethodDef row - 1. The
  array starts with an unsigned (count << 2 | size of the block offsets); a table of one
  offset per block of 16 elements follows, each the root of a small binary tree whose nodes
  are unsigneds: bit 0 "a left child follows", bit 1 "a right child is value >> 2 bytes
  ahead", both clear "a leaf for element value >> 2 of the block". An element is the offset
  of an unsigned id: bit 0 set means fixups come first (bit 1 then: their blob is an
  unsigned's distance back), and the id is then shifted right by 2, else by 1. It indexes:
- RuntimeFunctions (type 102): x64 RUNTIME_FUNCTION rows (begin RVA, end RVA, unwind RVA).

Offsets are RVAs: the runtime maps a ReadyToRun image section by section, so the bytes are
read from the target at the image base plus the RVA. Anything that does not parse is None:
the caller then waits for the JIT instead.
"""
from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from ...errors import SosError

if TYPE_CHECKING:
    from ...targets.base import Target

READYTORUN_SIGNATURE = 0x00525452
SECTION_RUNTIME_FUNCTIONS = 102
SECTION_METHODDEF_ENTRYPOINTS = 103
_BLOCK_SIZE = 16
_RUNTIME_FUNCTION_SIZE = 12  # x64
_CLI_HEADER_DIRECTORY = 14
_MAX_SECTIONS = 256


class _Image:
    """Reads of a mapped image in the target, by RVA."""

    def __init__(self, target: "Target", base: int) -> None:
        self.target = target
        self.base = base

    def bytes(self, rva: int, size: int) -> bytes:
        return bytes(self.target.read(self.base + rva, size))

    def unpack(self, fmt: str, rva: int) -> tuple[int, ...]:
        return struct.unpack(fmt, self.bytes(rva, struct.calcsize(fmt)))

    def unsigned(self, rva: int) -> tuple[int, int]:
        """A NativeFormat unsigned at ``rva``: (value, RVA after it)."""
        head = self.bytes(rva, 5)
        b = head[0]
        if not b & 1:
            return b >> 1, rva + 1
        if not b & 2:
            return (b >> 2) | head[1] << 6, rva + 2
        if not b & 4:
            return (b >> 3) | head[1] << 5 | head[2] << 13, rva + 3
        if not b & 8:
            return (b >> 4) | head[1] << 4 | head[2] << 12 | head[3] << 20, rva + 4
        if not b & 16:
            return struct.unpack_from("<I", head, 1)[0], rva + 5
        raise ValueError("bad NativeFormat unsigned")


def _sections(image: _Image) -> dict[int, tuple[int, int]] | None:
    """The READYTORUN_HEADER's sections by type, or None when the image is not ReadyToRun."""
    if image.unpack("<H", 0)[0] != 0x5A4D:
        return None
    pe = image.unpack("<I", 0x3C)[0]
    if image.unpack("<I", pe)[0] != 0x00004550:
        return None
    opt = pe + 24
    magic = image.unpack("<H", opt)[0]
    dirs = opt + {0x10B: 96, 0x20B: 112}.get(magic, -opt - 1)
    if dirs < opt:
        return None
    cli_rva, _size = image.unpack("<II", dirs + 8 * _CLI_HEADER_DIRECTORY)
    if not cli_rva:
        return None
    native_rva, _size = image.unpack("<II", cli_rva + 64)  # IMAGE_COR20_HEADER.ManagedNativeHeader
    if not native_rva:
        return None
    signature, _major, _minor, _flags, count = image.unpack("<IHHII", native_rva)
    if signature != READYTORUN_SIGNATURE or count > _MAX_SECTIONS:
        return None
    raw = image.bytes(native_rva + 16, 12 * count)
    return {t: (rva, size) for t, rva, size in struct.iter_unpack("<III", raw)}


def _array_element(image: _Image, array_rva: int, index: int) -> int | None:
    """The offset (an RVA) that NativeFormat array element ``index`` holds, or None."""
    header, base = image.unsigned(array_rva)
    count, width = header >> 2, header & 3
    if index >= count or width > 2:
        return None
    fmt = ("<B", "<H", "<I")[width]
    offset = base + image.unpack(fmt, base + (index // _BLOCK_SIZE) * (1 << width))[0]
    bit = _BLOCK_SIZE >> 1
    while bit:
        value, after = image.unsigned(offset)
        if index & bit:
            if value & 2:
                offset += value >> 2
                bit >>= 1
                continue
        elif value & 1:
            offset = after
            bit >>= 1
            continue
        if value & 3 == 0 and value >> 2 == index & (_BLOCK_SIZE - 1):
            return after
        return None
    return offset


def precompiled_code(target: "Target", image_base: int, method_token: int) -> int | None:
    """The start of the ReadyToRun code of MethodDef ``method_token`` in the image mapped at
    ``image_base``; None when the image has none for it (or is not ReadyToRun)."""
    if target.arch != "x86_64" or not image_base or method_token >> 24 != 0x06:
        return None
    image = _Image(target, image_base)
    try:
        sections = _sections(image)
        if not sections or SECTION_METHODDEF_ENTRYPOINTS not in sections or SECTION_RUNTIME_FUNCTIONS not in sections:
            return None
        entry = _array_element(image, sections[SECTION_METHODDEF_ENTRYPOINTS][0], (method_token & 0xFFFFFF) - 1)
        if entry is None:
            return None
        ident, _after = image.unsigned(entry)
        index = ident >> 2 if ident & 1 else ident >> 1
        functions_rva, functions_size = sections[SECTION_RUNTIME_FUNCTIONS]
        if (index + 1) * _RUNTIME_FUNCTION_SIZE > functions_size:
            return None
        begin = image.unpack("<I", functions_rva + index * _RUNTIME_FUNCTION_SIZE)[0]
    except (SosError, ValueError, struct.error):
        return None
    return image_base + begin
