"""What the runtime recorded about the crash a dump was written for (SOS's crashinfo).

Two sources, tried in SOS's order:

* NativeAOT's triage JSON. On a fail-fast the runtime raises STATUS_STACK_BUFFER_OVERRUN
  (0xC0000409) with subcode FAST_FAIL_EXCEPTION_DOTNET_AOT (0x48); createdump copies that
  exception record and the DIAGINFOHEADER page at 0x7ffffff10000 points at it. Its
  ExceptionInformation is (subcode, HRESULT, buffer address, buffer size); the buffer holds
  ``{"version": "1.0.0", "reason", "runtime_type", "runtime_base", "runtime_version",
  "thread", "message", "exception": {"address", "hr", "message", "type", "stack": [{"ip",
  "sp", "module", "offset", "name"}], "inner": [...]}}`` with numbers as "0x…" strings.
* CoreCLR writes no such buffer: its crash dump (DOTNET_DbgEnableMiniDump) records the
  signal in the faulting thread's NT_PRSTATUS note, and the unhandled exception stays the
  thread's last thrown object. From those two we build the same record (UnhandledException
  when the signal is the runtime's SIGABRT and the thread holds an exception).
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import SosError

if TYPE_CHECKING:
    from ..runtime import ClrRuntime

STATUS_STACK_BUFFER_OVERRUN = 0xC0000409
FAST_FAIL_EXCEPTION_DOTNET_AOT = 0x48
MAX_TRIAGE_BUFFER = 8192
EXCEPTION_RECORD_SIZE = 32 + 15 * 8
MAX_DEPTH = 16  # nested inner exceptions kept from a triage buffer
SIGABRT = 6

# SOS's enums, printed by name.
CRASH_REASONS = {0: "Unknown", 1: "UnhandledException", 2: "EnvironmentFailFast", 3: "InternalFailFast"}
RUNTIME_TYPES = {0: "Unknown", 1: "Desktop", 2: "NetCore", 3: "SingleFile", 4: "NativeAOT"}


@dataclass(frozen=True, slots=True)
class CrashFrame:
    ip: int
    module: str  # file name without extension, "" when unknown
    method: str  # "" when unknown
    offset: int


@dataclass(frozen=True, slots=True)
class CrashException:
    address: int
    type_name: str
    hresult: int
    message: str
    frames: tuple[CrashFrame, ...]
    inner: tuple["CrashException", ...]


@dataclass(frozen=True, slots=True)
class CrashInfo:
    reason: int
    thread_id: int
    hresult: int
    runtime_type: int
    runtime_base: int
    runtime_version: str
    message: str
    exception: CrashException | None
    source: str  # "triage buffer" or "core"

    @property
    def reason_name(self) -> str:
        return CRASH_REASONS.get(self.reason, str(self.reason))

    @property
    def runtime_type_name(self) -> str:
        return RUNTIME_TYPES.get(self.runtime_type, str(self.runtime_type))

    def nested(self) -> list[CrashException]:
        """The exception and its inner exceptions, depth first (SOS's Nested Exceptions)."""
        out: list[CrashException] = []

        def add(e: CrashException) -> None:
            out.append(e)
            for i in e.inner:
                add(i)
        if self.exception is not None:
            add(self.exception)
        return out


def _hex(v: Any) -> int:
    if isinstance(v, str) and v.lower().startswith("0x"):
        return int(v[2:], 16)
    raise ValueError(f"not a hex string: {v!r}")


def _ascii_digits(text: str) -> bool:
    """Only the digits 0-9 (str.isdigit() also takes '²', which int() refuses)."""
    return text.isascii() and text.isdigit()


def _num(v: Any) -> int:
    return int(v) if isinstance(v, (int, str)) and _ascii_digits(str(v).strip().lstrip("-")) else 0


def _exception(d: Any, depth: int = 0) -> CrashException | None:
    if not isinstance(d, dict):
        return None
    frames = []
    for f in d.get("stack") or []:
        if isinstance(f, dict):
            frames.append(CrashFrame(_hex(f.get("ip", "0x0")), "", str(f.get("name") or ""),
                                     _hex(f.get("offset", "0x0"))))
    inner = tuple(e for e in (_exception(x, depth + 1) for x in (d.get("inner") or []) if depth < MAX_DEPTH)
                  if e is not None)
    return CrashException(_hex(d.get("address", "0x0")), str(d.get("type") or ""), _hex(d.get("hr", "0x0")),
                          str(d.get("message") or ""), tuple(frames), inner)


def parse_triage_buffer(data: bytes, hresult: int) -> CrashInfo | None:
    """The runtime's triage JSON (None: not JSON, or not version 1 or later)."""
    try:
        doc = json.loads(data.split(b"\0", 1)[0].decode("utf-8"))
        if not isinstance(doc, dict):
            return None
        major = str(doc.get("version", "")).split(".")[0]
        if not _ascii_digits(major) or int(major) < 1:
            return None
        return CrashInfo(_num(doc.get("reason")), _hex(doc.get("thread", "0x0")), hresult,
                         _num(doc.get("runtime_type")), _hex(doc.get("runtime_base", "0x0")),
                         str(doc.get("runtime_version") or ""), str(doc.get("message") or ""),
                         _exception(doc.get("exception")), "triage buffer")
    except (ValueError, TypeError, AttributeError, UnicodeDecodeError, RecursionError, OverflowError):
        return None


def _from_exception_record(runtime: "ClrRuntime", record: int) -> CrashInfo | None:
    try:
        raw = bytes(runtime.target.read_partial(record, EXCEPTION_RECORD_SIZE))
    except SosError:
        return None
    if len(raw) < EXCEPTION_RECORD_SIZE:
        return None
    code, _flags, _rec, _addr, count = struct.unpack_from("<IIQQI", raw)
    info = struct.unpack_from("<15Q", raw, 32)
    if code != STATUS_STACK_BUFFER_OVERRUN or count < 4 or info[0] != FAST_FAIL_EXCEPTION_DOTNET_AOT:
        return None
    size = info[3]
    if not 0 < size <= MAX_TRIAGE_BUFFER:
        return None
    try:
        data = bytes(runtime.target.read_partial(info[2], size))
    except SosError:
        return None
    return parse_triage_buffer(data, info[1] & 0xFFFFFFFF) if len(data) == size else None


def _from_crashed_thread(runtime: "ClrRuntime") -> CrashInfo | None:
    from .exceptions import read_exception
    from .threads import faulting_thread, thread_by_os_id
    fault = faulting_thread(runtime)
    if fault is None:
        return None
    tid = fault[0]
    thread = thread_by_os_id(runtime, tid)
    exc = None
    if thread is not None and thread.last_exception:
        exc = _clr_exception(runtime, thread.last_exception, read_exception)
    info = runtime.info
    diag = _diag_info(runtime)
    # The runtime aborts (SIGABRT) on an unhandled exception; another signal with a last
    # thrown exception on the thread (caught earlier) is not that.
    unhandled = exc is not None and fault[1] == SIGABRT
    return CrashInfo(1 if unhandled else 0, tid, exc.hresult if exc else 0, 2,
                     diag.runtime_base if diag is not None and diag.runtime_base else info.runtime_base,
                     info.version, exc.message if exc else "", exc, "core")


def _clr_exception(runtime: "ClrRuntime", address: int, read, depth: int = 0) -> CrashException | None:  # type: ignore[no-untyped-def]
    try:
        e = read(runtime, address)
    except SosError:
        return None
    frames = tuple(CrashFrame(f.ip, f.module.rsplit(".", 1)[0] if f.module else "", f.method_name, f.offset)
                   for f in e.frames)
    inner = ()
    if e.inner and depth < MAX_DEPTH:
        i = _clr_exception(runtime, e.inner, read, depth + 1)
        inner = (i,) if i is not None else ()
    return CrashException(e.address, e.type_name, e.hresult, e.message or "", frames, inner)


def _diag_info(runtime: "ClrRuntime"):  # type: ignore[no-untyped-def]
    core = runtime.target.core_file()
    return core.diag_info() if core is not None and hasattr(core, "diag_info") else None


def crash_info(runtime: "ClrRuntime") -> CrashInfo | None:
    """What the dump says about its crash; None for live processes and dumps not written at one."""
    diag = _diag_info(runtime)
    if diag is not None and diag.exception_record:
        found = _from_exception_record(runtime, diag.exception_record)
        if found is not None:
            return found
    return _from_crashed_thread(runtime)
