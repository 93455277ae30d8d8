"""A reader for the nettrace stream an EventPipe session sends (format versions 4 and 5).

Layout (facts from microsoft/perfview ``src/TraceEvent/EventPipe/NetTraceFormat_v5.md``)::

    "Nettrace"  u32 20  "!FastSerialization.1"
    object*     tag 5 (BeginPrivateObject)
                  type: tag 5, tag 1 (NullReference), i32 version, i32 minReaderVersion,
                        u32 length + UTF-8 name, tag 6 (EndObject)
                  payload (depends on the name), tag 6
    tag 1       end of stream

The first object is ``Trace`` (sync time, QPC frequency, pointer size, pid …). Then any of
``MetadataBlock`` and ``EventBlock`` (i32 block size, zero padding to a 4-byte stream
offset, a header that starts with its own size and flags, then event blobs), ``StackBlock``
and ``SPBlock`` (size-prefixed the same way; skipped here: we ask for no stacks).

With block flag 1 every event blob has a compressed header: a flags byte saying which fields
follow (varints, deltas from the previous blob of the same block), then the payload. A
metadata blob's payload describes one event: provider, id, name, and its fields (TypeCodes,
nested for structs, a V2 field list for arrays). Event payloads are then decoded from that.

Any malformed or truncated input raises :class:`NettraceError` (one line), never another
exception, so a cut connection or a garbled stream ends a session with a message.
"""
from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Iterator

from sosext.errors import SosError

__all__ = ["NettraceError", "EventMetadata", "TraceEvent", "TraceInfo", "NettraceReader", "FieldDesc", "Cursor"]

MAGIC = b"Nettrace"
SERIALIZER = b"!FastSerialization.1"
TAG_NULL, TAG_BEGIN_PRIVATE, TAG_END = 1, 5, 6
MAX_BLOCK = 256 << 20  # a sanity bound; the runtime writes blocks of ~100 KB

# System.TypeCode as EventPipe metadata uses it, plus 19 = array (V2 field lists only).
TC_OBJECT, TC_BOOLEAN, TC_CHAR, TC_STRING, TC_ARRAY = 1, 3, 4, 18, 19
_FIXED: dict[int, struct.Struct] = {
    3: struct.Struct("<i"),   # Boolean: a 4-byte Win32 BOOL
    4: struct.Struct("<H"),   # Char
    5: struct.Struct("<b"), 6: struct.Struct("<B"),
    7: struct.Struct("<h"), 8: struct.Struct("<H"),
    9: struct.Struct("<i"), 10: struct.Struct("<I"),
    11: struct.Struct("<q"), 12: struct.Struct("<Q"),
    13: struct.Struct("<f"), 14: struct.Struct("<d"),
    16: struct.Struct("<Q"),  # DateTime (FILETIME ticks)
}
_I16, _I32, _I64, _U16 = struct.Struct("<h"), struct.Struct("<i"), struct.Struct("<q"), struct.Struct("<H")


class NettraceError(SosError):
    """The nettrace stream is malformed, truncated, or of a version we cannot read."""


@dataclass(frozen=True, slots=True)
class FieldDesc:
    name: str
    type_code: int
    fields: tuple["FieldDesc", ...] = ()   # for TC_OBJECT
    element: "FieldDesc | None" = None     # for TC_ARRAY


@dataclass(frozen=True, slots=True)
class EventMetadata:
    metadata_id: int
    provider: str
    event_id: int
    name: str
    keywords: int
    version: int
    level: int
    fields: tuple[FieldDesc, ...]
    opcode: int | None = None


@dataclass(slots=True)
class TraceEvent:
    """One event: its metadata and its raw payload; :meth:`decode` gives the fields as a dict."""

    metadata: EventMetadata
    thread_id: int
    timestamp: int
    payload: bytes
    sequence: int = 0

    @property
    def provider(self) -> str:
        return self.metadata.provider

    @property
    def name(self) -> str:
        return self.metadata.name

    def decode(self) -> dict[str, Any]:
        """The payload as {field name: value}; nested structs become dicts."""
        return decode_payload(self.metadata.fields, self.payload)


@dataclass(frozen=True, slots=True)
class TraceInfo:
    version: int
    qpc_sync: int
    qpc_frequency: int
    pointer_size: int
    process_id: int
    processors: int


class Cursor:
    """A cursor over bytes; every read past the end raises NettraceError."""

    __slots__ = ("data", "pos", "what")

    def __init__(self, data: bytes, what: str) -> None:
        self.data, self.pos, self.what = data, 0, what

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise NettraceError(f"truncated {self.what} ({n} bytes wanted at offset {self.pos} of {len(self.data)})")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, s: struct.Struct) -> Any:
        if self.pos + s.size > len(self.data):
            raise NettraceError(f"truncated {self.what} ({s.size} bytes wanted at offset {self.pos} of {len(self.data)})")
        v = s.unpack_from(self.data, self.pos)[0]
        self.pos += s.size
        return v

    def i32(self) -> int:
        return self.unpack(_I32)

    def i64(self) -> int:
        return self.unpack(_I64)

    def varint(self, bits: int) -> int:
        value = shift = 0
        while True:
            if self.pos >= len(self.data):
                raise NettraceError(f"truncated {self.what} (varint at offset {self.pos})")
            b = self.data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value & ((1 << bits) - 1)
            shift += 7
            if shift >= bits + 7:
                raise NettraceError(f"malformed {self.what} (varint too long at offset {self.pos})")

    def utf16z(self) -> str:
        """A NUL-terminated UTF-16LE string."""
        end = self.pos
        data = self.data
        while True:
            end = data.find(b"\x00\x00", end)
            if end < 0:
                raise NettraceError(f"truncated {self.what} (unterminated string at offset {self.pos})")
            if (end - self.pos) % 2 == 0:
                break
            end += 1
        text = data[self.pos:end].decode("utf-16-le", errors="replace")
        self.pos = end + 2
        return text

    @property
    def remaining(self) -> int:
        return len(self.data) - self.pos


# --------------------------------------------------------------------------- payloads


def _read_fields(b: Cursor, depth: int = 0) -> tuple[FieldDesc, ...]:
    """A V1 field list: i32 count, then per field i32 TypeCode [nested list if Object], name."""
    if depth > 16:
        raise NettraceError("malformed event metadata (structs nested too deep)")
    count = b.i32()
    if count < 0 or count > b.remaining // 6 + 1:
        raise NettraceError(f"malformed event metadata ({count} fields)")
    out = []
    for _ in range(count):
        tc = b.i32()
        nested = _read_fields(b, depth + 1) if tc == TC_OBJECT else ()
        out.append(FieldDesc(b.utf16z(), tc, nested))
    return tuple(out)


def _read_v2_field(b: Cursor, depth: int) -> FieldDesc:
    start = b.pos
    size = b.i32()
    if size < 4 or size > b.remaining + 4:
        raise NettraceError("malformed V2 field description")
    name = b.utf16z()
    desc = _read_v2_type(b, name, depth)
    b.pos = start + size  # skip padding, trusting the declared size
    if b.pos > len(b.data):
        raise NettraceError("truncated V2 field description")
    return desc


def _read_v2_type(b: Cursor, name: str, depth: int) -> FieldDesc:
    if depth > 16:
        raise NettraceError("malformed event metadata (types nested too deep)")
    tc = b.i32()
    if tc == TC_ARRAY:
        return FieldDesc(name, tc, (), _read_v2_type(b, name, depth + 1))
    if tc == TC_OBJECT:
        count = b.i32()
        if count < 0 or count > b.remaining:
            raise NettraceError("malformed V2 struct description")
        return FieldDesc(name, tc, tuple(_read_v2_field(b, depth + 1) for _ in range(count)))
    return FieldDesc(name, tc)


def parse_metadata(payload: bytes) -> EventMetadata:
    b = Cursor(payload, "event metadata")
    mid = b.i32()
    provider = b.utf16z()
    event_id = b.i32()
    name = b.utf16z()
    keywords = b.i64()
    version = b.i32()
    level = b.i32()
    fields = _read_fields(b)
    opcode: int | None = None
    while b.remaining >= 5:  # V5 tags
        size = b.i32()
        kind = b.take(1)[0]
        body = Cursor(b.take(size), "metadata tag")
        if kind == 1 and size >= 1:
            opcode = body.data[0]
        elif kind == 2:
            count = body.i32()
            if count < 0 or count > body.remaining:
                raise NettraceError("malformed V2 field list")
            fields = tuple(_read_v2_field(body, 0) for _ in range(count))
    return EventMetadata(mid, provider, event_id, name, keywords & 0xFFFFFFFFFFFFFFFF, version, level, fields, opcode)


def _decode_value(f: FieldDesc, b: Cursor, depth: int) -> Any:
    tc = f.type_code
    s = _FIXED.get(tc)
    if s is not None:
        v = b.unpack(s)
        return bool(v) if tc == TC_BOOLEAN else v
    if tc == TC_STRING:
        return b.utf16z()
    if tc == TC_OBJECT:
        return {g.name: _decode_value(g, b, depth + 1) for g in f.fields}
    if tc == 17:
        return uuid.UUID(bytes_le=b.take(16))
    if tc == 15:
        return b.take(16)  # Decimal: raw
    if tc == TC_ARRAY and f.element is not None:
        n = b.unpack(_U16)
        return [_decode_value(f.element, b, depth + 1) for _ in range(n)]
    raise NettraceError(f"cannot decode field {f.name!r} of TypeCode {tc}")


def decode_payload(fields: tuple[FieldDesc, ...], payload: bytes) -> dict[str, Any]:
    b = Cursor(payload, "event payload")
    return {f.name: _decode_value(f, b, 0) for f in fields}


# --------------------------------------------------------------------------- stream


class NettraceReader:
    """Iterate the events of a nettrace stream, reading it incrementally from ``stream``
    (a file, or a socket's ``makefile('rb')``): ``for ev in NettraceReader(f).events(): …``.

    ``info`` is set once the Trace object has been read; ``metadata`` maps ids to
    :class:`EventMetadata` as MetadataBlocks arrive.
    """

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._offset = 0
        self.info: TraceInfo | None = None
        self.metadata: dict[int, EventMetadata] = {}
        self.ended = False  # the closing NullReference tag was seen

    # -- raw stream
    def _read(self, n: int, what: str) -> bytes:
        chunks: list[bytes] = []
        got = 0
        while got < n:
            try:
                chunk = self._stream.read(n - got)
            except OSError as exc:
                raise NettraceError(f"trace stream broke while reading {what}: {exc.strerror or exc}") from None
            if not chunk:
                raise NettraceError(f"trace stream ended in the middle of {what} (offset {self._offset + got})")
            chunks.append(chunk)
            got += len(chunk)
        self._offset += n
        return b"".join(chunks)

    def _i32(self, what: str) -> int:
        return _I32.unpack(self._read(4, what))[0]

    def _tag(self, expected: int, what: str) -> None:
        t = self._read(1, what)[0]
        if t != expected:
            raise NettraceError(f"malformed trace stream: tag {t} where {what} (tag {expected}) was expected "
                                f"at offset {self._offset - 1}")

    def _header(self) -> None:
        if self._read(8, "the stream magic") != MAGIC:
            raise NettraceError("not a nettrace stream (no 'Nettrace' magic)")
        n = self._i32("the serializer name")
        if n != len(SERIALIZER) or self._read(n, "the serializer name") != SERIALIZER:
            raise NettraceError("not a nettrace stream (no '!FastSerialization.1')")

    def _object_type(self) -> tuple[str, int] | None:
        """Begin an object; None at the end-of-stream tag. Returns (type name, version)."""
        t = self._read(1, "an object tag")[0]
        if t == TAG_NULL:
            return None
        if t != TAG_BEGIN_PRIVATE:
            raise NettraceError(f"malformed trace stream: tag {t} where an object was expected (offset {self._offset - 1})")
        self._tag(TAG_BEGIN_PRIVATE, "a type object")
        self._tag(TAG_NULL, "a type's type")
        version = self._i32("a type version")
        self._i32("a type's minimum reader version")
        n = self._i32("a type name")
        if not 0 < n <= 64:
            raise NettraceError(f"malformed trace stream: type name of {n} bytes")
        name = self._read(n, "a type name").decode("ascii", errors="replace")
        self._tag(TAG_END, "the end of a type object")
        return name, version

    def _block(self, what: str) -> bytes:
        size = self._i32(f"the size of a {what}")
        if not 0 <= size <= MAX_BLOCK:
            raise NettraceError(f"malformed trace stream: {what} of {size} bytes")
        pad = -self._offset % 4
        if pad:
            self._read(pad, f"{what} padding")
        return self._read(size, what)

    def _trace(self) -> TraceInfo:
        t = self._object_type()
        if t is None or t[0] != "Trace":
            raise NettraceError("malformed trace stream: it does not start with a Trace object")
        name, version = t
        if version not in (4, 5):
            raise NettraceError(f"nettrace version {version} is not supported (4 and 5 are)")
        b = Cursor(self._read(48, "the Trace object"), "Trace object")
        b.take(16)  # SyncTimeUTC as eight shorts
        qpc, freq = b.i64(), b.i64()
        ptr, pid, ncpu = b.i32(), b.i32(), b.i32()
        self._tag(TAG_END, "the end of the Trace object")
        return TraceInfo(version, qpc, freq, ptr, pid, ncpu)

    # -- blobs
    def _blobs(self, block: bytes, what: str) -> Iterator[tuple[int, int, int, int, bytes]]:
        """(metadata id, sequence, thread id, timestamp, payload) of each blob of a block."""
        b = Cursor(block, what)
        header_size = b.unpack(_I16)
        flags = b.unpack(_I16)
        if header_size < 20:
            raise NettraceError(f"malformed {what} header ({header_size} bytes)")
        b.take(header_size - 4)
        compressed = bool(flags & 1)
        mid = seq = cap_tid = proc = tid = stack = ts = size = 0
        while b.remaining:
            if compressed:
                f = b.take(1)[0]
                if f & 1:
                    mid = b.varint(32)
                if f & 2:
                    seq = (seq + b.varint(32)) & 0xFFFFFFFF
                    cap_tid = b.varint(64)
                    proc = b.varint(32)
                if (mid & 0x7FFFFFFF) != 0:
                    seq = (seq + 1) & 0xFFFFFFFF
                if f & 4:
                    tid = b.varint(64)
                if f & 8:
                    stack = b.varint(32)
                ts = (ts + b.varint(64)) & 0xFFFFFFFFFFFFFFFF
                if f & 16:
                    b.take(16)
                if f & 32:
                    b.take(16)
                if f & 128:
                    size = b.varint(32)
                payload = b.take(size)
            else:
                start = b.pos
                event_size = b.i32()
                mid, seq = b.i32() & 0xFFFFFFFF, b.i32()
                tid, cap_tid = b.i64(), b.i64()
                proc, stack, ts = b.i32(), b.i32(), b.i64()
                b.take(32)
                size = b.i32()
                payload = b.take(size)
                b.pos = start + 4 + event_size
                b.take(-b.pos % 4 if b.remaining else 0)
            yield mid & 0x7FFFFFFF, seq, tid, ts, payload

    def events(self) -> Iterator[TraceEvent]:
        """Every event, in stream order, until the end-of-stream tag."""
        self._header()
        self.info = self._trace()
        while True:
            t = self._object_type()
            if t is None:
                self.ended = True
                return
            name, _version = t
            if name == "MetadataBlock":
                for _mid, _seq, _tid, _ts, payload in self._blobs(self._block(name), name):
                    md = parse_metadata(payload)
                    self.metadata[md.metadata_id] = md
            elif name == "EventBlock":
                for mid, seq, tid, ts, payload in self._blobs(self._block(name), name):
                    md = self.metadata.get(mid)
                    if md is None:
                        raise NettraceError(f"malformed trace stream: event with unknown metadata id {mid}")
                    yield TraceEvent(md, tid, ts, payload, seq)
            elif name in ("StackBlock", "SPBlock"):
                self._block(name)
            else:
                raise NettraceError(f"unknown object {name!r} in the trace stream")
            self._tag(TAG_END, f"the end of a {name}")
