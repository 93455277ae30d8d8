"""The four metadata heaps (#Strings, #US, #Blob, #GUID) and compressed integers.

Each heap is a window [start, end) into one ``bytes`` object holding the whole metadata
blob; indexes are byte offsets from ``start`` (1-based entry numbers for #GUID). Every
lookup checks its bounds so that a wild index from a corrupt row raises MetadataError.
"""
from __future__ import annotations

import uuid

from .errors import MetadataError


def read_compressed_uint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """Decode an ECMA-335 II.23.2 compressed unsigned integer; return (value, next_pos)."""
    if pos >= end:
        raise MetadataError("truncated compressed integer")
    b0 = data[pos]
    if b0 < 0x80:
        return b0, pos + 1
    if b0 < 0xC0:
        if pos + 2 > end:
            raise MetadataError("truncated compressed integer")
        return ((b0 & 0x3F) << 8) | data[pos + 1], pos + 2
    if b0 < 0xE0:
        if pos + 4 > end:
            raise MetadataError("truncated compressed integer")
        return (
            ((b0 & 0x1F) << 24) | (data[pos + 1] << 16) | (data[pos + 2] << 8) | data[pos + 3],
            pos + 4,
        )
    raise MetadataError(f"bad compressed integer lead byte {b0:#04x}")


# Payload bits of a compressed integer by its encoded length in bytes.
_SIGNED_WIDTH = {1: 7, 2: 14, 4: 29}


def read_compressed_int(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """Decode a compressed signed integer (array lower bounds).

    The encoder rotates the two's-complement value left by one within 7, 14 or 29 bits, so
    the sign lands in bit 0; undo the rotation and sign-extend from that width.
    """
    first = pos
    raw, pos = read_compressed_uint(data, pos, end)
    width = _SIGNED_WIDTH[pos - first]
    value = raw >> 1
    if raw & 1:
        value -= 1 << (width - 1)
    return value, pos


class _Heap:
    """A metadata heap: the bytes [start, start + size) of the metadata blob."""

    __slots__ = ("_data", "_start", "_end")

    def __init__(self, data: bytes, start: int, size: int) -> None:
        self._data = data
        self._start = start
        self._end = start + size

    @property
    def size(self) -> int:
        return self._end - self._start


class StringsHeap(_Heap):
    """#Strings: UTF-8, NUL-terminated identifiers."""

    __slots__ = ("_cache",)

    def __init__(self, data: bytes, start: int, size: int) -> None:
        super().__init__(data, start, size)
        self._cache: dict[int, str] = {}

    def get(self, index: int) -> str:
        s = self._cache.get(index)
        if s is not None:
            return s
        if index == 0:
            return ""
        pos = self._start + index
        if index < 0 or pos >= self._end:
            raise MetadataError(
                f"#Strings index {index:#x} out of range (heap size {self.size:#x})"
            )
        stop = self._data.find(b"\0", pos, self._end)
        if stop < 0:
            raise MetadataError(f"unterminated string at #Strings offset {index:#x}")
        # Names are shown to a user; a corrupt byte should not hide the rest of the name.
        s = self._data[pos:stop].decode("utf-8", "replace")
        self._cache[index] = s
        return s


class BlobHeap(_Heap):
    """#Blob: length-prefixed byte strings (signatures, public keys, constants)."""

    __slots__ = ()

    def get(self, index: int) -> bytes:
        if index == 0:
            return b""  # index 0 is the empty blob by definition, even in an empty heap
        pos = self._start + index
        if index < 0 or pos >= self._end:
            raise MetadataError(f"#Blob index {index:#x} out of range (heap size {self.size:#x})")
        length, pos = read_compressed_uint(self._data, pos, self._end)
        if pos + length > self._end:
            raise MetadataError(f"blob at #Blob offset {index:#x} runs past the heap")
        return self._data[pos : pos + length]


class UserStringHeap(_Heap):
    """#US: string literals (ldstr), UTF-16LE with a length prefix and a trailing flag byte."""

    __slots__ = ()

    def get(self, index: int) -> str:
        if index == 0:
            return ""
        pos = self._start + index
        if index < 0 or pos >= self._end:
            raise MetadataError(f"#US index {index:#x} out of range (heap size {self.size:#x})")
        length, pos = read_compressed_uint(self._data, pos, self._end)
        if pos + length > self._end:
            raise MetadataError(f"user string at #US offset {index:#x} runs past the heap")
        # The odd last byte is a "has special characters" flag, not text.
        raw = self._data[pos : pos + (length & ~1)]
        return raw.decode("utf-16-le", "replace")


class GuidHeap(_Heap):
    """#GUID: 16-byte GUIDs addressed by a 1-based entry number."""

    __slots__ = ()

    @property
    def count(self) -> int:
        return (self._end - self._start) // 16

    def get(self, index: int) -> uuid.UUID | None:
        if index == 0:
            return None
        if index < 0 or index > self.count:
            raise MetadataError(f"#GUID index {index} out of range ({self.count} entries)")
        pos = self._start + (index - 1) * 16
        return uuid.UUID(bytes_le=self._data[pos : pos + 16])
