"""The metadata root (II.24.2.1) and its stream headers (II.24.2.2)."""
from __future__ import annotations

import struct
from dataclasses import dataclass

from .errors import MetadataError

METADATA_SIGNATURE = 0x424A5342  # "BSJB"
_MAX_STREAMS = 64  # real metadata has at most 7; more means a corrupt count


@dataclass(frozen=True, slots=True)
class StreamHeader:
    name: str
    offset: int  # from the start of the metadata root
    size: int


@dataclass(frozen=True, slots=True)
class MetadataRoot:
    major: int
    minor: int
    version: str  # the runtime version string, e.g. "v4.0.30319"
    flags: int
    streams: tuple[StreamHeader, ...]

    def stream(self, *names: str) -> StreamHeader | None:
        """The first stream with any of ``names`` (the runtime also takes the first)."""
        for s in self.streams:
            if s.name in names:
                return s
        return None


def parse_root(data: bytes) -> MetadataRoot:
    size = len(data)
    if size < 16:
        raise MetadataError("metadata blob truncated before its version string")
    signature, major, minor, _, vlen = struct.unpack_from("<IHHII", data, 0)
    if signature != METADATA_SIGNATURE:
        raise MetadataError(f"bad metadata signature {signature:#010x} (expected BSJB)")
    pos = 16
    if vlen > size - pos - 4:
        raise MetadataError("metadata version string runs past the blob")
    version = data[pos : pos + vlen].split(b"\0", 1)[0].decode("utf-8", "replace")
    pos += vlen
    flags, count = struct.unpack_from("<HH", data, pos)
    pos += 4
    if count > _MAX_STREAMS:
        raise MetadataError(f"metadata root claims {count} streams")
    streams = []
    for _ in range(count):
        if pos + 8 > size:
            raise MetadataError("metadata stream headers truncated")
        offset, ssize = struct.unpack_from("<II", data, pos)
        pos += 8
        stop = data.find(b"\0", pos, min(pos + 32, size))
        if stop < 0:
            raise MetadataError("unterminated metadata stream name")
        name = data[pos:stop].decode("ascii", "replace")
        pos += (stop - pos + 4) & ~3  # the name, its NUL, padded to 4 bytes
        if offset > size or ssize > size - offset:
            raise MetadataError(f"metadata stream {name!r} out of range")
        streams.append(StreamHeader(name, offset, ssize))
    return MetadataRoot(major, minor, version, flags, tuple(streams))
