"""Message framing of the .NET diagnostics IPC protocol (pure; no sockets here).

Every message, request or reply, is a 20-byte little-endian header followed by a
command-specific payload::

    struct IpcHeader {
        uint8_t  magic[14];    // "DOTNET_IPC_V1\\0"
        uint16_t size;         // header + payload
        uint8_t  command_set;  // 0x01 Dump, 0x02 EventPipe, 0x03 Profiler, 0x04 Process, 0xFF Server
        uint8_t  command_id;
        uint16_t reserved;     // 0
    };

Payload encoding: ``uint`` = u32, ``ulong`` = u64, ``string`` = u32 count of UTF-16 code
units *including* the terminating NUL, then that many UTF-16LE code units (or a count of 0
for an absent string), ``array<T>`` = u32 count then the items.

Replies carry command set 0xFF (Server): id 0x00 (OK) with a command-specific payload, or
id 0xFF (Error) with an ``int32`` HRESULT (GenerateCoreDump3 adds an error-message string).

Sources: dotnet/diagnostics ``documentation/design-docs/ipc-protocol.md``; dotnet/runtime
``src/native/eventpipe/ds-protocol.c``, ``ds-process-protocol.c``, ``ds-dump-protocol.c``.

Every decoding failure raises :class:`IpcError` and nothing else, whatever the bytes.
"""

from __future__ import annotations

import enum
import struct
import uuid
from dataclasses import dataclass

from sosext.errors import SosError

__all__ = [
    "MAGIC",
    "HEADER_SIZE",
    "MAX_MESSAGE_SIZE",
    "CommandSet",
    "ServerResponseId",
    "DumpCommandId",
    "ProcessCommandId",
    "DumpType",
    "WriteDumpFlags",
    "HResult",
    "IpcError",
    "UnknownCommandError",
    "IpcHeader",
    "IpcMessage",
    "ProcessInfo",
    "DumpResult",
    "PayloadReader",
    "encode_message",
    "encode_string",
    "encode_uint32",
    "encode_uint64",
    "encode_array",
    "decode_header",
    "decode_message",
    "decode_string",
    "hresult_text",
    "check_reply",
    "parse_process_info",
    "parse_process_info2",
    "parse_dump_reply",
    "process_info_request",
    "process_info2_request",
    "dump_request",
]

MAGIC = b"DOTNET_IPC_V1\x00"
_HEADER = struct.Struct("<14sHBBH")
HEADER_SIZE = _HEADER.size  # 20
MAX_MESSAGE_SIZE = 0xFFFF  # the header's size field is a u16
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U64 = struct.Struct("<Q")


class CommandSet(enum.IntEnum):
    DUMP = 0x01
    EVENTPIPE = 0x02
    PROFILER = 0x03
    PROCESS = 0x04
    SERVER = 0xFF


class ServerResponseId(enum.IntEnum):
    OK = 0x00
    ERROR = 0xFF


class DumpCommandId(enum.IntEnum):
    GENERATE_CORE_DUMP = 0x01
    GENERATE_CORE_DUMP2 = 0x02  # flags instead of a diagnostics bool (.NET 6+)
    GENERATE_CORE_DUMP3 = 0x03  # error replies carry a message string (.NET 7+)


class ProcessCommandId(enum.IntEnum):
    PROCESS_INFO = 0x00
    RESUME_RUNTIME = 0x01
    PROCESS_ENVIRONMENT = 0x02
    PROCESS_INFO2 = 0x04


class DumpType(enum.IntEnum):
    """The dump kinds createdump knows (``-n``, ``-h``, ``-t``, ``-u``)."""

    NORMAL = 1
    WITH_HEAP = 2
    TRIAGE = 3
    FULL = 4


class WriteDumpFlags(enum.IntFlag):
    NONE = 0x0
    LOGGING_ENABLED = 0x1  # createdump's diagnostics go to the *target's* console
    VERBOSE_LOGGING_ENABLED = 0x2
    CRASH_REPORT_ENABLED = 0x4


class HResult(enum.IntEnum):
    """HRESULTs the diagnostics server sends (``ds-types.h``), as unsigned 32-bit values."""

    S_OK = 0x00000000
    E_FAIL = 0x80004005
    E_INVALIDARG = 0x80070057
    E_INSUFFICIENT_BUFFER = 0x8007007A
    ENVVAR_NOT_FOUND = 0x800000CB
    BAD_ENCODING = 0x80131384
    UNKNOWN_COMMAND = 0x80131385
    UNKNOWN_MAGIC = 0x80131386
    UNKNOWN_ERROR = 0x80131387
    NOT_YET_AVAILABLE = 0x8013135B
    RUNTIME_UNINITIALIZED = 0x80131371
    NOT_SUPPORTED = 0x80131515


class IpcError(SosError):
    """The diagnostics channel failed or the runtime answered with an error (one line)."""

    def __init__(self, message: str, *, hresult: int | None = None) -> None:
        super().__init__(" ".join(message.split()))  # one line, whatever the runtime said
        self.hresult = hresult


class UnknownCommandError(IpcError):
    """The runtime does not know the command (HRESULT 0x80131385); try an older one."""


def hresult_text(hresult: int) -> str:
    """``0x80131385 (UNKNOWN_COMMAND)`` for known codes, else just the hex."""
    hresult &= 0xFFFFFFFF
    try:
        return f"{hresult:#010x} ({HResult(hresult).name})"
    except ValueError:
        return f"{hresult:#010x}"


# --------------------------------------------------------------------------- encoding


def encode_uint32(value: int) -> bytes:
    return _U32.pack(value)


def encode_uint64(value: int) -> bytes:
    return _U64.pack(value)


def encode_string(value: str | None) -> bytes:
    """u32 count of UTF-16 code units including the NUL, then UTF-16LE; ``None`` → count 0."""
    if value is None:
        return _U32.pack(0)
    if "\x00" in value:
        raise IpcError("a diagnostics IPC string cannot contain NUL characters")
    try:
        data = value.encode("utf-16-le") + b"\x00\x00"
    except UnicodeEncodeError as exc:  # lone surrogates
        raise IpcError(f"cannot encode string as UTF-16: {exc.reason}") from None
    return _U32.pack(len(data) // 2) + data


def encode_array(items: list[bytes]) -> bytes:
    """``array<T>`` from already encoded items."""
    return _U32.pack(len(items)) + b"".join(items)


@dataclass(frozen=True, slots=True)
class IpcHeader:
    size: int
    command_set: int
    command_id: int
    reserved: int = 0

    def encode(self) -> bytes:
        return _HEADER.pack(MAGIC, self.size, self.command_set, self.command_id, self.reserved)


@dataclass(frozen=True, slots=True)
class IpcMessage:
    header: IpcHeader
    payload: bytes

    @property
    def is_ok(self) -> bool:
        return self.header.command_set == CommandSet.SERVER and self.header.command_id == ServerResponseId.OK

    @property
    def is_error(self) -> bool:
        return self.header.command_set == CommandSet.SERVER and self.header.command_id == ServerResponseId.ERROR


def encode_message(command_set: int, command_id: int, payload: bytes = b"") -> bytes:
    size = HEADER_SIZE + len(payload)
    if size > MAX_MESSAGE_SIZE:
        raise IpcError(f"diagnostics IPC message too large ({size} bytes, at most {MAX_MESSAGE_SIZE})")
    if not (0 <= command_set <= 0xFF and 0 <= command_id <= 0xFF):
        raise IpcError(f"invalid command {command_set:#x}/{command_id:#x}")
    return IpcHeader(size, command_set, command_id).encode() + payload


def process_info_request() -> bytes:
    return encode_message(CommandSet.PROCESS, ProcessCommandId.PROCESS_INFO)


def process_info2_request() -> bytes:
    return encode_message(CommandSet.PROCESS, ProcessCommandId.PROCESS_INFO2)


def dump_request(command_id: int, dump_name: str, dump_type: int, flags: int) -> bytes:
    """GenerateCoreDump{,2,3}: ``string dumpName, uint dumpType, uint flags``.

    For id 1 the last field is the ``diagnostics`` bool (0/1); ids 2 and 3 take
    :class:`WriteDumpFlags`.
    """
    if not dump_name:
        raise IpcError("a dump path is required")
    payload = encode_string(dump_name) + _U32.pack(int(dump_type)) + _U32.pack(int(flags))
    return encode_message(CommandSet.DUMP, command_id, payload)


# --------------------------------------------------------------------------- decoding


def decode_header(data: bytes) -> IpcHeader:
    """Decode and validate the 20-byte header at the start of ``data``."""
    if len(data) < HEADER_SIZE:
        raise IpcError(f"truncated diagnostics IPC header ({len(data)} of {HEADER_SIZE} bytes)")
    magic, size, command_set, command_id, reserved = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise IpcError("not a diagnostics IPC reply (bad magic)")
    if size < HEADER_SIZE:
        raise IpcError(f"malformed diagnostics IPC header (size {size} < {HEADER_SIZE})")
    return IpcHeader(size, command_set, command_id, reserved)


def decode_message(data: bytes) -> IpcMessage:
    """Decode one complete message: exactly ``header.size`` bytes."""
    header = decode_header(data)
    if len(data) < header.size:
        raise IpcError(f"truncated diagnostics IPC message ({len(data)} of {header.size} bytes)")
    if len(data) > header.size:
        raise IpcError(f"{len(data) - header.size} unexpected bytes after a diagnostics IPC message")
    return IpcMessage(header, bytes(data[HEADER_SIZE:]))


class PayloadReader:
    """A cursor over a payload; every read past the end raises :class:`IpcError`."""

    __slots__ = ("_data", "_pos", "_what")

    def __init__(self, data: bytes, what: str = "reply") -> None:
        self._data = bytes(data)
        self._pos = 0
        self._what = what

    @property
    def remaining(self) -> int:
        return len(self._data) - self._pos

    def _take(self, n: int, field: str) -> bytes:
        if n > self.remaining:
            raise IpcError(
                f"truncated {self._what}: {field} needs {n} bytes at offset {self._pos}, {self.remaining} left"
            )
        chunk = self._data[self._pos : self._pos + n]
        self._pos += n
        return chunk

    def u32(self, field: str = "uint") -> int:
        return _U32.unpack(self._take(4, field))[0]

    def i32(self, field: str = "int") -> int:
        return _I32.unpack(self._take(4, field))[0]

    def u64(self, field: str = "ulong") -> int:
        return _U64.unpack(self._take(8, field))[0]

    def guid(self, field: str = "GUID") -> uuid.UUID:
        # A Windows GUID struct (Data1..3 little-endian), as .NET's new Guid(byte[]) reads it.
        return uuid.UUID(bytes_le=self._take(16, field))

    def string(self, field: str = "string") -> str | None:
        count = self.u32(f"{field} length")
        if count == 0:
            return None
        if count > self.remaining // 2:
            raise IpcError(
                f"truncated {self._what}: {field} claims {count} characters, {self.remaining} bytes left"
            )
        return decode_string(self._take(count * 2, field), field, self._what)

    def end(self) -> None:
        if self.remaining:
            raise IpcError(f"malformed {self._what}: {self.remaining} unexpected trailing bytes")


def decode_string(data: bytes, field: str = "string", what: str = "reply") -> str:
    """UTF-16LE code units whose last one must be NUL (the NUL is dropped)."""
    if len(data) < 2 or len(data) % 2 or data[-2:] != b"\x00\x00":
        raise IpcError(f"malformed {what}: {field} is not NUL-terminated UTF-16")
    # Lone surrogates (odd file names) are replaced rather than rejected.
    return data[:-2].decode("utf-16-le", errors="replace")


def _error_hresult(message: IpcMessage) -> int:
    if len(message.payload) < 4:
        raise IpcError(f"malformed error reply ({len(message.payload)}-byte payload, expected an HRESULT)")
    return _U32.unpack_from(message.payload)[0]


def check_reply(message: IpcMessage, operation: str) -> bytes:
    """Return the payload of an OK reply; raise :class:`IpcError` for anything else.

    An Error reply becomes :class:`UnknownCommandError` for 0x80131385, else :class:`IpcError`
    with ``hresult`` set.
    """
    if message.is_ok:
        return message.payload
    if message.is_error:
        hr = _error_hresult(message)
        if hr == HResult.UNKNOWN_COMMAND:
            raise UnknownCommandError(f"{operation}: the runtime does not know this command", hresult=hr)
        raise IpcError(f"{operation} failed: HRESULT {hresult_text(hr)}", hresult=hr)
    h = message.header
    raise IpcError(f"{operation}: unexpected reply {h.command_set:#04x}/{h.command_id:#04x}")


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """What ProcessInfo (0x04/0x00) and ProcessInfo2 (0x04/0x04) report about a process.

    ``pid`` is in the target's PID namespace. ``managed_entrypoint`` (the entry assembly's
    simple name) and ``clr_product_version`` (e.g. ``10.0.12+<commit>``) are ``None`` when the
    runtime only answered the older ProcessInfo.
    """

    pid: int
    runtime_cookie: uuid.UUID
    command_line: str | None
    os: str | None
    arch: str | None
    managed_entrypoint: str | None = None
    clr_product_version: str | None = None


def _parse_process_info_common(r: PayloadReader) -> tuple[int, uuid.UUID, str | None, str | None, str | None]:
    pid = r.u64("processId")
    cookie = r.guid("runtimeCookie")
    command_line = r.string("commandLine")
    os_name = r.string("OS")
    arch = r.string("arch")
    return pid, cookie, command_line, os_name, arch


def parse_process_info(payload: bytes) -> ProcessInfo:
    """ProcessInfo: ``u64 pid, GUID cookie, string commandLine, string OS, string arch``."""
    r = PayloadReader(payload, "ProcessInfo reply")
    info = ProcessInfo(*_parse_process_info_common(r))
    r.end()
    return info


def parse_process_info2(payload: bytes) -> ProcessInfo:
    """ProcessInfo2: ProcessInfo, then ``string managedEntrypointAssemblyName, string clrProductVersion``."""
    r = PayloadReader(payload, "ProcessInfo2 reply")
    common = _parse_process_info_common(r)
    entry = r.string("managedEntrypointAssemblyName")
    version = r.string("clrProductVersion")
    r.end()
    return ProcessInfo(*common, managed_entrypoint=entry, clr_product_version=version)


@dataclass(frozen=True, slots=True)
class DumpResult:
    """The runtime's answer to a GenerateCoreDump command."""

    hresult: int
    message: str | None = None

    @property
    def ok(self) -> bool:
        return self.hresult == 0


def parse_dump_reply(message: IpcMessage, command_id: int) -> DumpResult:
    """Decode a GenerateCoreDump reply.

    Success: OK + ``int32 hresult`` (0). Failure: Error + ``int32 hresult``, and for
    GenerateCoreDump3 also ``string errorMessage`` (possibly empty). An unknown command
    raises :class:`UnknownCommandError` so the caller can fall back to an older id.
    """
    if message.is_ok:
        r = PayloadReader(message.payload, "GenerateCoreDump reply")
        hr = r.u32("hresult")
        return DumpResult(hr)
    if message.is_error:
        hr = _error_hresult(message)
        if hr == HResult.UNKNOWN_COMMAND:
            raise UnknownCommandError(
                f"the runtime does not know GenerateCoreDump{'' if command_id == 1 else command_id}",
                hresult=hr,
            )
        text: str | None = None
        if command_id == DumpCommandId.GENERATE_CORE_DUMP3 and len(message.payload) >= 8:
            r = PayloadReader(message.payload[4:], "GenerateCoreDump3 error reply")
            try:
                text = r.string("errorMessage")
            except IpcError:
                text = None  # a garbled message must not hide the HRESULT
        return DumpResult(hr, (text or "").strip() or None)
    h = message.header
    raise IpcError(f"GenerateCoreDump: unexpected reply {h.command_set:#04x}/{h.command_id:#04x}")
