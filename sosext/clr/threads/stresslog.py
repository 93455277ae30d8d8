"""The runtime's stress log: an in-memory, per-thread circular log of printf-style messages.

Layout (64-bit Linux CoreCLR, .NET 8+; `src/coreclr/inc/stresslog.h` and the StressLog data
contract). The DAC gives the address of ``StressLog::theLog``:

    StressLog       +0  u32 facilitiesToLog   +4 u32 levelToLog   +8 u32 MaxSizePerThread
                    +12 u32 MaxSizeTotal      +16 i32 totalChunk  +24 ThreadStressLog* logs
                    +48 u64 tickFrequency     +56 u64 startTimeStamp  +64 FILETIME startTime
                    +72 moduleOffset (base of libcoreclr)  +80 ModuleDesc modules[5] {base, size}
    ThreadStressLog +0 next  +8 u64 threadId  +18 u8 writeHasWrapped  +24 StressMsg* curPtr
                    +40 chunkListHead  +48 chunkListTail  +64 curWriteChunk
    StressLogChunk  +0 prev  +8 next  +16 char buf[32 KiB]  then u32 dwSig1, dwSig2 (0xCFCFCFCF)
    StressMsg       u64 facility:32 | numberOfArgs:6 | formatOffsetLow:26,
                    u64 formatOffsetHigh:13 | timeStamp:51, then numberOfArgs pointer-size args

A thread writes downwards from the end of a chunk (its newest message at ``curPtr``) and
moves to ``prev`` when a chunk is full, so reading upwards from ``curPtr`` and then on to
``next`` goes from new to old; the unused start of a chunk is zero. The format offset is
cumulative over the module table (libcoreclr first, then e.g. the standalone GC), so the
format string is read from the runtime's own image. Timestamps are ticks of
``tickFrequency`` since ``startTimeStamp``.

The decoder is pure Python over a ``read(address, size) -> bytes`` callable: every loop is
bounded by the bytes it has, so a corrupt log ends early and never hangs.
"""
from __future__ import annotations

import heapq
import struct
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Callable, Iterable, Iterator, Protocol

# Up to ``size`` bytes from ``address`` (fewer where the target's memory ends); may raise.
Reader = Callable[[int, int], bytes]

CHUNK_SIZE = 32 * 1024  # STRESSLOG_CHUNK_SIZE on 64-bit hosts
CHUNK_BUF = 16  # buf follows prev and next
CHUNK_BYTES = CHUNK_BUF + CHUNK_SIZE + 8
CHUNK_SIG = 0xCFCFCFCF
MSG_HEADER = 16
MAX_ARGS = 63
MAX_MSG = MSG_HEADER + MAX_ARGS * 8  # StressMsg::maxMsgSize(): the most one message can span
MAX_MODULES = 5
MAX_FORMAT = 256  # SOS reads at most this much of a format string
MAX_THREADS = 4096
MAX_CHUNKS = 1 << 16  # 2 GiB of log: far beyond any StressLogSize; bounds a corrupt list
FORMAT_OFFSET_MAX = 1 << 39

# The messages the GC writes with fixed format strings (ThreadStressLog::gc*Msg): the hist*
# commands recognise them by their text, as SOS does.
GC_START = "{ =========== BEGINGC %d, (requested generation = %lu, collect_classes = %lu) ==========\n"
GC_END = "========== ENDGC %d (gen = %lu, collect_classes = %lu) ===========}\n"
GC_ROOT = "    GC Root %p RELOCATED %p -> %p  MT = %pT\n"
GC_ROOT_PROMOTE = "    IGCHeap::Promote: Promote GC Root *%p = %p MT = %pT\n"
GC_PLUG_MOVE = "GC_HEAP RELOCATING Objects in heap within range [%p %p) by -0x%x bytes\n"
TASK_SWITCH = "StressLog TaskSwitch Marker\n"

# Facility bits, in order (coreclr/inc/loglf.h); a message's facility prints as `A`B`.
FACILITIES = (
    "GC", "GCINFO", "STUBS", "JIT", "LOADER", "METADATA", "SYNC", "EEMEM", "GCALLOC", "CORDB",
    "CLASSLOADER", "CORPROF", "DIAGNOSTICS_PORT", "DBGALLOC", "EH", "ENC", "ASSERT", "VERIFIER",
    "THREADPOOL", "GCROOTS", "INTEROP", "MARSHALER", "TIEREDCOMPILATION", "ZAP", "STARTUP",
    "APPDOMAIN", "CODESHARING", "STORE", "SECURITY", "LOCKS", "BCL", "ALWAYS",
)


def facility_name(facility: int) -> str:
    if facility == 0xFFFFFFFF:
        return "`ALL`"
    return "`" + "".join(f"{name}`" for bit, name in enumerate(FACILITIES) if facility >> bit & 1)


@dataclass(frozen=True, slots=True)
class StressLogHeader:
    address: int
    facilities: int
    level: int
    max_size_per_thread: int
    max_size_total: int
    total_chunks: int
    logs: int
    tick_frequency: int
    start_timestamp: int
    start_filetime: int
    module_offset: int
    modules: tuple[tuple[int, int], ...]  # (base, size) of each module whose strings are logged

    @property
    def start_time(self) -> datetime | None:
        """Wall-clock time the log started (FILETIME: 100 ns since 1601), None when invalid."""
        try:
            return datetime(1601, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=self.start_filetime // 10)
        except OverflowError:
            return None

    def seconds(self, timestamp: int) -> float:
        """A message's time in seconds since the log started."""
        return (timestamp - self.start_timestamp) / self.tick_frequency if self.tick_frequency else 0.0

    def format_address(self, offset: int) -> int:
        """Where a message's format string is: its offset walks the module table (SOS's
        GetFormatAddr); an implausible table means an old log relative to moduleOffset."""
        mods = self.modules
        if mods and mods[0][0] == self.module_offset and 1 << 20 <= mods[0][1] < FORMAT_OFFSET_MAX:
            start = 0
            for base, size in mods:
                if base == 0:
                    break
                if 0 <= offset - start < size:
                    return base + offset - start
                start += size
        return self.module_offset + offset


@dataclass(frozen=True, slots=True)
class StressMessage:
    thread_id: int
    facility: int
    format_offset: int
    timestamp: int
    args: tuple[int, ...]


@dataclass(slots=True)
class ThreadLog:
    """One thread's chunks, copied out of the target, and where its newest message is."""

    address: int
    thread_id: int
    write_has_wrapped: bool
    cur_ptr: int
    cur_chunk: int  # index into chunks of curWriteChunk
    chunks: list[tuple[int, bytes]] = field(default_factory=list)  # (address, buf) from listHead on


def _u(data: bytes, off: int, size: int = 8) -> int:
    return int.from_bytes(data[off:off + size], "little")


def read_header(read: Reader, address: int) -> StressLogHeader:
    raw = read(address, 80 + MAX_MODULES * 16)
    if len(raw) < 80 + MAX_MODULES * 16:
        raise ValueError(f"the stress log at {address:#x} is not readable")
    mods = tuple((_u(raw, 80 + 16 * i), _u(raw, 88 + 16 * i)) for i in range(MAX_MODULES))
    return StressLogHeader(
        address=address, facilities=_u(raw, 0, 4), level=_u(raw, 4, 4), max_size_per_thread=_u(raw, 8, 4),
        max_size_total=_u(raw, 12, 4), total_chunks=struct.unpack_from("<i", raw, 16)[0], logs=_u(raw, 24),
        tick_frequency=_u(raw, 48), start_timestamp=_u(raw, 56), start_filetime=_u(raw, 64),
        module_offset=_u(raw, 72), modules=mods)


def read_thread_logs(read: Reader, header: StressLogHeader) -> list[ThreadLog]:
    """Every valid thread log in list order (SOS skips, and so do we, a log whose current
    chunk is missing or lacks its signatures). Unreadable memory ends a list, never raises."""
    logs: list[ThreadLog] = []
    seen: set[int] = set()
    addr = header.logs
    budget = [MAX_CHUNKS]  # chunks left to read over all threads: a corrupt list stops here
    while addr and addr not in seen and len(seen) < MAX_THREADS and budget[0] > 0:
        seen.add(addr)
        try:
            raw = read(addr, 80)
        except Exception:  # noqa: BLE001 - a broken link ends the list, as in SOS
            break
        if len(raw) < 80:
            break
        nxt = _u(raw, 0)
        log = _read_thread(read, addr, raw, budget)
        if log is not None:
            logs.append(log)
        addr = nxt
    return logs


def _read_thread(read: Reader, addr: int, raw: bytes, budget: list[int]) -> ThreadLog | None:
    head, cur_write = _u(raw, 40), _u(raw, 64)
    if not head or not cur_write:
        return None
    log = ThreadLog(addr, _u(raw, 8), bool(raw[18]), _u(raw, 24), -1)
    chunk = head
    seen: set[int] = set()
    while chunk not in seen and budget[0] > 0:
        seen.add(chunk)
        budget[0] -= 1
        try:
            data = read(chunk, CHUNK_BYTES)
        except Exception:  # noqa: BLE001
            return None
        if len(data) < CHUNK_BYTES:
            return None
        if _u(data, CHUNK_BUF + CHUNK_SIZE, 4) != CHUNK_SIG or _u(data, CHUNK_BUF + CHUNK_SIZE + 4, 4) != CHUNK_SIG:
            return None
        if chunk == cur_write:
            log.cur_chunk = len(log.chunks)
        log.chunks.append((chunk, data[CHUNK_BUF:CHUNK_BUF + CHUNK_SIZE]))
        chunk = _u(data, 8)
        if chunk == head:
            break
    if log.cur_chunk < 0:
        return None
    start = log.chunks[log.cur_chunk][0] + CHUNK_BUF
    if not start <= log.cur_ptr <= start + CHUNK_SIZE:
        return None
    return log


def thread_messages(log: ThreadLog) -> Iterator[StressMessage]:
    """One thread's messages, newest first (SOS's Activate/AdvanceRead/CompletedDump)."""
    if not log.chunks:
        return
    n = len(log.chunks)
    idx = log.cur_chunk
    buf = log.chunks[idx][1]
    pos = log.cur_ptr - (log.chunks[idx][0] + CHUNK_BUF)
    # The newest write may have overwritten the start of an older record: reading the
    # current chunk again stops a whole message short of where writing is.
    stop = max(pos - MAX_MSG, 0)
    wrapped = False  # has reading passed the list's tail?
    steps = 0
    limit = n * CHUNK_SIZE // MSG_HEADER + 1
    while steps < limit:
        steps += 1
        if pos + MSG_HEADER > CHUNK_SIZE:
            # Past this chunk's end: on to the next (older) chunk.
            if idx == n - 1:
                wrapped = True
                if not log.write_has_wrapped:
                    return
            idx = (idx + 1) % n
            buf = log.chunks[idx][1]
            pos = _first_message(buf)
            if pos is None:
                return
        if wrapped and (not log.write_has_wrapped or (idx == log.cur_chunk and pos >= stop)):
            return
        w0, w1 = struct.unpack_from("<QQ", buf, pos)
        timestamp = w1 >> 13
        if timestamp == 0:
            return
        nargs = (w0 >> 32) & 0x3F
        offset = ((w0 >> 38) & ((1 << 26) - 1)) | ((w1 & ((1 << 13) - 1)) << 26)
        end = pos + MSG_HEADER + 8 * nargs
        if end > CHUNK_SIZE:
            return  # a record cannot span chunks: the log is corrupt here
        if offset:
            args = struct.unpack_from(f"<{nargs}Q", buf, pos + MSG_HEADER)
            yield StressMessage(log.thread_id, w0 & 0xFFFFFFFF, offset, timestamp, args)
        pos = end


def _first_message(buf: bytes) -> int | None:
    """The first non-zero word within a message's length of a chunk's start (SOS's
    AdvReadPastBoundary); None when the chunk holds nothing."""
    for off in range(0, MAX_MSG, 8):
        if _u(buf, off):
            return off
    return None


def merged(logs: Iterable[ThreadLog]) -> Iterator[StressMessage]:
    """All threads' messages, newest first: SOS repeatedly prints the thread whose next
    message is the latest."""
    return heapq.merge(*(thread_messages(t) for t in logs), key=lambda m: -m.timestamp)


# -- formatting ---------------------------------------------------------------------------

class Names(Protocol):
    """What formatting asks of the runtime and the target."""

    def string(self, address: int, wide: bool) -> str | None: ...
    def type_name(self, mt: int) -> str | None: ...
    def method_name(self, md: int) -> str | None: ...


_DIGITS = "0123456789"  # printf's width digits (str.isdigit() takes '²', which int() refuses)
_LENGTHS = ("hh", "h", "ll", "l", "I64", "I32", "z", "j", "t", "L", "q")


def format_message(fmt: str, args: tuple[int, ...], names: Names) -> str:
    """printf over the logged arguments (each a pointer-size value), with the stress log's
    own %p suffixes: %pT a MethodTable's type, %pM a MethodDesc's method, %pV/%pK code."""
    out: list[str] = []
    i, n, argi = 0, len(fmt), 0

    def take() -> int | None:
        nonlocal argi
        argi += 1
        return args[argi - 1] if argi <= len(args) else None

    while i < n:
        c = fmt[i]
        if c != "%":
            j = fmt.find("%", i)
            j = n if j < 0 else j
            out.append(fmt[i:j])
            i = j
            continue
        i += 1
        if i < n and fmt[i] == "%":
            out.append("%")
            i += 1
            continue
        start = i
        while i < n and fmt[i] in "-+ #0":
            i += 1
        flags = fmt[start:i]
        width_s = ""
        while i < n and fmt[i] in _DIGITS:
            width_s += fmt[i]
            i += 1
        prec_s = None
        if i < n and fmt[i] == ".":
            i += 1
            prec_s = ""
            while i < n and fmt[i] in _DIGITS:
                prec_s += fmt[i]
                i += 1
        length = ""
        for ln in _LENGTHS:
            if fmt.startswith(ln, i):
                length = ln
                i += len(ln)
                break
        if i >= n:
            out.append("%" + fmt[start:])
            break
        conv = fmt[i]
        i += 1
        value = take()
        if value is None:
            out.append("<missing>")
            continue
        width = int(width_s) if width_s else 0
        prec = int(prec_s) if prec_s else (0 if prec_s == "" else None)
        text = _convert(conv, length, flags, prec, value, names)
        if conv == "p" and i < n and fmt[i].isalpha():
            text += _special_pointer(fmt[i], value, names)
            i += 1
        out.append(_pad(text, width, flags, conv))
    return "".join(out)


def _pad(text: str, width: int, flags: str, conv: str) -> str:
    if len(text) >= width:
        return text
    if "-" in flags:
        return text.ljust(width)
    if "0" in flags and conv in "diuxXo":
        sign = text[0] if text[:1] in "+- " else ""
        return sign + text[len(sign):].rjust(width - len(sign), "0")
    return text.rjust(width)


def _convert(conv: str, length: str, flags: str, prec: int | None, value: int, names: Names) -> str:
    wide64 = length in ("l", "ll", "I64", "z", "j", "t", "q")
    if conv in "di":
        v = value & (0xFFFFFFFFFFFFFFFF if wide64 else 0xFFFFFFFF)
        bits = 64 if wide64 else 32
        if v >> (bits - 1):
            v -= 1 << bits
        s = str(abs(v))
        if prec is not None:
            s = s.rjust(prec, "0")
        sign = "-" if v < 0 else ("+" if "+" in flags else (" " if " " in flags else ""))
        return sign + s
    if conv in "uxXoc":
        v = value & (0xFFFFFFFFFFFFFFFF if wide64 else 0xFFFFFFFF)
        if conv == "c":
            return chr(v & 0xFF) if 32 <= (v & 0xFF) < 127 else "?"
        s = {"u": str, "x": lambda x: f"{x:x}", "X": lambda x: f"{x:X}", "o": lambda x: f"{x:o}"}[conv](v)
        if prec is not None:
            s = s.rjust(prec, "0")
        if "#" in flags and v and conv in "xX":
            s = ("0x" if conv == "x" else "0X") + s
        return s
    if conv == "p":
        return f"{value:016x}"
    if conv in "sS":
        wide = conv == "S" or length == "l"
        text = names.string(value, wide) if value else "(null)"
        return "(#Could not read address of string#)" if text is None else text[:prec] if prec else text
    if conv in "eEfFgGaA":
        d = struct.unpack("<d", (value & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little"))[0]
        try:
            return f"%{'.' + str(prec) if prec is not None else ''}{conv}" % d
        except (ValueError, OverflowError):
            return repr(d)
    return f"%{conv}"


def _special_pointer(kind: str, value: int, names: Names) -> str:
    if kind == "T":
        mt = value & ~3
        low = " Low Bit(s) Set" if value & 3 else ""
        name = names.type_name(mt) if mt else None
        return low + (f" ({name})" if name else " (BAD MethodTable)")
    if kind == "M":
        if not value:
            return ""
        name = names.method_name(value)
        return f" ({name})" if name else " (BAD Method)"
    if kind in "VK":
        return ""  # native symbols: the pointer itself is printed
    return kind


# -- the GC history the hist* commands read ------------------------------------------------

@dataclass(slots=True)
class GcRecord:
    """What the log says of one GC: its index, plug moves, root relocations and promotions.
    Lists are newest first, as SOS keeps them."""

    gc_count: int = 0
    plugs: list[tuple[int, int, int]] = field(default_factory=list)  # (start, end, delta)
    relocs: list[tuple[int, int, int, int]] = field(default_factory=list)  # (root, prev, new, mt)
    promotes: list[tuple[int, int, int]] = field(default_factory=list)  # (root, value, mt)


MAX_GC_RECORDS = 500  # SOS's MAX_GCRECORDS


def gc_history(messages: Iterable[tuple[str, StressMessage]]) -> list[GcRecord]:
    """GC records from (format, message) pairs read newest first: the messages of one GC
    come before (are newer than) its BEGINGC, which closes the record. Newest GC first."""
    records: list[GcRecord] = []
    cur = GcRecord()
    for fmt, m in messages:
        if len(records) >= MAX_GC_RECORDS:
            break
        a = m.args
        if fmt == GC_PLUG_MOVE and len(a) >= 3:
            cur.plugs.append((a[0], a[1], a[2]))
        elif fmt == GC_ROOT and len(a) >= 4:
            cur.relocs.append((a[0], a[1], a[2], a[3]))
        elif fmt == GC_ROOT_PROMOTE and len(a) >= 3:
            cur.promotes.append((a[0], a[1], a[2]))
        elif fmt == GC_START and len(a) >= 1:
            cur.gc_count = a[0]
            records.append(cur)
            cur = GcRecord()
    return records


class RuntimeNames:
    """Names for %s, %pT and %pM from the target and its runtime, every pointer checked by
    the model's address classifier before the DAC sees it."""

    def __init__(self, runtime) -> None:  # type: ignore[no-untyped-def]
        self.runtime = runtime

    def string(self, address: int, wide: bool) -> str | None:
        try:
            raw = self.runtime.target.read_partial(address, 2 * MAX_FORMAT if wide else MAX_FORMAT)
        except Exception:  # noqa: BLE001
            return None
        if not raw:
            return None
        raw = bytes(raw)
        if wide:
            text = raw[:len(raw) & ~1].decode("utf-16-le", "replace")
        else:
            text = raw.decode("latin-1")
        return text.split("\0", 1)[0]

    def type_name(self, mt: int) -> str | None:
        rt = self.runtime
        return rt.types.name_of(mt) if rt.is_method_table(mt) else None

    def method_name(self, md: int) -> str | None:
        from ..addresses import classifier
        return self.runtime.method_desc_name(md) if classifier(self.runtime).is_method_desc(md) else None


class StressLog:
    """The decoded log of one target: header, thread logs, format strings (cached)."""

    def __init__(self, read: Reader, address: int) -> None:
        self.read = read
        self.header = read_header(read, address)
        self.threads = read_thread_logs(read, self.header) if self.header.logs and self.header.module_offset else []
        self._formats: dict[int, str] = {}

    @property
    def present(self) -> bool:
        """False when the runtime runs without DOTNET_StressLog (no thread logs)."""
        return bool(self.header.logs and self.header.module_offset)

    def format_of(self, offset: int) -> str | None:
        """The format string of a message (None: not readable from the runtime's image)."""
        if offset not in self._formats:
            text = None
            try:
                raw = self.read(self.header.format_address(offset), MAX_FORMAT)
            except Exception:  # noqa: BLE001 - an unreadable image page: SOS prints a placeholder
                raw = b""
            if raw:
                end = raw.find(b"\0")
                text = raw[:end if end >= 0 else len(raw)].decode("latin-1")
            self._formats[offset] = text  # type: ignore[assignment]
        return self._formats[offset]

    def messages(self) -> Iterator[tuple[str | None, StressMessage]]:
        """(format string, message) newest first; Ctrl-C ends the walk (Interrupted)."""
        from ..progress import check_interrupt
        for i, m in enumerate(merged(self.threads)):
            if i & 4095 == 0:
                check_interrupt()
            yield self.format_of(m.format_offset), m

    def gc_history(self) -> list[GcRecord]:
        return gc_history((f, m) for f, m in self.messages() if f is not None)


def stress_log(runtime) -> StressLog | None:  # type: ignore[no-untyped-def]
    """The runtime's stress log (None: the DAC knows of none), decoded once per stop."""
    def load() -> StressLog | None:
        address = runtime.stress_log_address()
        target = runtime.target
        return StressLog(lambda a, n: bytes(target.read_partial(a, n)), address) if address else None
    return runtime.cache("stresslog", load)
