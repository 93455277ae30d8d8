"""GCDesc: where a type's object references lie, as the GC itself finds them.

A MethodTable of a type that contains pointers is preceded in memory by its GCDesc:
the pointer-size word just below the MethodTable holds a series count ``n``.

* ``n > 0``: ``n`` series of two words (size, offset) lie below that count. A series
  covers ``[offset, offset + size + object_size)`` — the stored size has the base size
  subtracted, so for arrays of references it stretches over the elements.
* ``n < 0``: an array of value types whose elements contain references. One offset word
  gives the first element's first pointer; below it ``|n|`` pairs of half-words
  (pointer count, bytes to skip) repeat element after element to the object's end.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from ...errors import SosError

_MAX_SERIES = 1 << 16  # a sanity bound: a real type has far fewer
HEADER_SIZE = 8  # the object header (sync block index) that precedes every object


@dataclass(frozen=True, slots=True)
class GCDesc:
    series: tuple[tuple[int, int], ...] = ()  # (offset, size adjusted by -base size)
    repeat_start: int = 0  # value-type arrays: offset of the first pointer
    repeat: tuple[tuple[int, int], ...] = ()  # value-type arrays: (pointer count, skip bytes)

    @property
    def is_repeating(self) -> bool:
        return bool(self.repeat)

    def offsets(self, object_size: int) -> list[int]:
        """Byte offsets (from the object's start) of every reference slot.

        ``object_size`` is the unaligned size: base size + components * component size.
        """
        out: list[int] = []
        if not self.repeat:
            for offset, size in self.series:
                stop = offset + size + object_size
                out.extend(range(offset, stop, 8))
            return out
        pos = self.repeat_start
        stop = object_size - HEADER_SIZE
        per_element = sum(n * 8 + skip for n, skip in self.repeat)
        if per_element <= 0:
            return out
        while pos < stop:
            for nptrs, skip in self.repeat:
                end = pos + nptrs * 8
                out.extend(range(pos, min(end, stop), 8))
                pos = end + skip
        return out


def parse_gcdesc(read, mt: int) -> GCDesc:
    """Read the GCDesc that precedes MethodTable ``mt``; ``read(addr, size)`` -> bytes."""
    n = struct.unpack("<q", bytes(read(mt - 8, 8)))[0]
    if n == 0 or abs(n) > _MAX_SERIES:
        raise SosError(f"invalid GCDesc series count {n} for MethodTable {mt:#x}")
    if n > 0:
        raw = bytes(read(mt - 8 - 16 * n, 16 * n))
        vals = struct.unpack(f"<{2 * n}Q", raw)
        # Lowest series first in memory; the GC walks highest to lowest — order does not
        # matter for the set of slots, so keep them ascending by offset.
        series = sorted((vals[2 * i + 1], _signed(vals[2 * i])) for i in range(n))
        return GCDesc(series=tuple(series))
    count = -n
    # Highest series: its offset word sits just below the count, and its first
    # (count, skip) item in the word below that; further items go downwards.
    start = struct.unpack("<Q", bytes(read(mt - 16, 8)))[0]
    raw = bytes(read(mt - 16 - 8 * count, 8 * count))
    items = []
    for i in range(count):
        off = 8 * (count - 1 - i)  # item i lies i words below the first one
        nptrs, skip = struct.unpack_from("<II", raw, off)
        items.append((nptrs, skip))
    return GCDesc(repeat_start=start, repeat=tuple(items))


def _signed(v: int) -> int:
    return v - (1 << 64) if v & (1 << 63) else v
