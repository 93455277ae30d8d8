"""EventPipe sessions over the diagnostics socket (command set 0x02), in pure Python.

    with EventPipeSession(pid, [Provider("System.Runtime", level=4,
                                         arguments="EventCounterIntervalSec=1")]) as s:
        for event in s.events():       # sosext.ipc.nettrace.TraceEvent
            ...                        # s.stop() (from anywhere) ends the stream cleanly

CollectTracing2 (0x02/0x03): ``u32 circularBufferMB, u32 format (1 = nettrace),
u8 requestRundown, array<{u64 keywords, u32 level, string provider, string arguments}>``;
the reply is OK + ``u64 session id`` and the nettrace stream follows on the same
connection. StopTracing (0x02/0x01, ``u64 session id``) goes over a new connection; the
runtime then flushes, writes the end-of-stream tag and closes the stream. Runtimes that do
not know CollectTracing2 (before .NET 5) get CollectTracing (0x02/0x02, no rundown flag).

Facts: dotnet/diagnostics ``documentation/design-docs/ipc-protocol.md``.
"""
from __future__ import annotations

import socket
import struct
import threading
import time
from dataclasses import dataclass
from typing import Any, BinaryIO, Iterator, Sequence

from sosext.ipc.client import DiagnosticsClient, NoSuchProcessError, find_socket, pid_exists
from sosext.ipc.nettrace import NettraceError, NettraceReader, TraceEvent
from sosext.ipc.protocol import (
    HEADER_SIZE,
    CommandSet,
    IpcError,
    IpcMessage,
    UnknownCommandError,
    check_reply,
    decode_header,
    encode_array,
    encode_message,
    encode_string,
)

__all__ = ["Provider", "EventPipeSession", "EventPipeCommandId", "stop_tracing"]


class EventPipeCommandId:
    STOP_TRACING = 0x01
    COLLECT_TRACING = 0x02
    COLLECT_TRACING2 = 0x03


FORMAT_NETTRACE = 1


@dataclass(frozen=True, slots=True)
class Provider:
    """One provider of a session: ``keywords`` mask, ``level`` (1 critical … 5 verbose),
    ``arguments`` the ``key=value;…`` filter string the provider interprets."""

    name: str
    keywords: int = 0xFFFFFFFFFFFFFFFF
    level: int = 4
    arguments: str | None = None

    def encode(self) -> bytes:
        return (struct.pack("<QI", self.keywords & 0xFFFFFFFFFFFFFFFF, self.level)
                + encode_string(self.name) + encode_string(self.arguments))


def collect_tracing_request(providers: Sequence[Provider], buffer_mb: int = 16, rundown: bool = False,
                            command_id: int = EventPipeCommandId.COLLECT_TRACING2) -> bytes:
    payload = struct.pack("<II", buffer_mb, FORMAT_NETTRACE)
    if command_id == EventPipeCommandId.COLLECT_TRACING2:
        payload += struct.pack("<B", 1 if rundown else 0)
    payload += encode_array([p.encode() for p in providers])
    return encode_message(CommandSet.EVENTPIPE, command_id, payload)


def stop_tracing(pid: int, session_id: int, *, socket_path: str | None = None, timeout: float = 10.0) -> None:
    """StopTracing for ``session_id``; silent when the process is already gone."""
    if not pid_exists(pid):
        return
    client = DiagnosticsClient(pid, socket_path=socket_path, timeout=timeout)
    msg = encode_message(CommandSet.EVENTPIPE, EventPipeCommandId.STOP_TRACING, struct.pack("<Q", session_id))
    try:
        reply = client.request(msg, "StopTracing")
    except NoSuchProcessError:
        return
    check_reply(reply, f"StopTracing for process {pid}")


class EventPipeSession:
    """An open EventPipe session on process ``pid``. Use as a context manager: leaving it
    always sends StopTracing (if the process lives) and closes the connection."""

    def __init__(self, pid: int, providers: Sequence[Provider], *, buffer_mb: int = 16,
                 rundown: bool = False, timeout: float = 10.0, tmpdir: str | None = None) -> None:
        if not providers:
            raise IpcError("an EventPipe session needs at least one provider")
        self.pid = pid
        self.providers = list(providers)
        self.timeout = timeout
        self.socket_path = find_socket(pid, tmpdir)
        self.session_id: int | None = None
        self._sock: socket.socket | None = None
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()
        self.reader: NettraceReader | None = None
        self._start(buffer_mb, rundown)

    def _start(self, buffer_mb: int, rundown: bool) -> None:
        for command_id in (EventPipeCommandId.COLLECT_TRACING2, EventPipeCommandId.COLLECT_TRACING):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(self.timeout)
                try:
                    sock.connect(self.socket_path)
                except (FileNotFoundError, ConnectionRefusedError):
                    if not pid_exists(self.pid):
                        raise NoSuchProcessError(self.pid) from None
                    raise IpcError(f"process {self.pid} does not accept diagnostics connections (stale socket?)") from None
                except PermissionError:
                    raise IpcError(f"permission denied connecting to process {self.pid}'s diagnostics socket") from None
                except socket.timeout:
                    raise IpcError(f"timed out connecting to process {self.pid}") from None
                sock.sendall(collect_tracing_request(self.providers, buffer_mb, rundown, command_id))
                reply = self._reply(sock)
                try:
                    payload = check_reply(reply, f"starting an EventPipe session in process {self.pid}")
                except UnknownCommandError:
                    sock.close()
                    continue
                if len(payload) < 8:
                    raise IpcError(f"malformed CollectTracing reply from process {self.pid}")
                self.session_id = struct.unpack_from("<Q", payload)[0]
                sock.settimeout(None)  # the stream may stay quiet for long
                self._sock = sock
                return
            except BaseException:
                sock.close()
                raise
        raise IpcError(f"process {self.pid}'s runtime does not support EventPipe sessions")

    def _reply(self, sock: socket.socket) -> IpcMessage:
        def recv(n: int) -> bytes:
            out = b""
            while len(out) < n:
                try:
                    chunk = sock.recv(n - len(out))
                except socket.timeout:
                    raise IpcError(f"timed out waiting for process {self.pid} to start an EventPipe session") from None
                except OSError as exc:
                    raise IpcError(f"diagnostics connection to process {self.pid} failed: {exc.strerror or exc}") from None
                if not chunk:
                    raise IpcError(f"process {self.pid} closed the diagnostics connection without starting a session")
                out += chunk
            return out
        header = decode_header(recv(HEADER_SIZE))
        return IpcMessage(header, recv(header.size - HEADER_SIZE))

    def events(self, tee: BinaryIO | None = None) -> Iterator[TraceEvent]:
        """The session's events until the runtime ends the stream (after :meth:`stop`, or
        when the process exits). A process that dies mid-stream raises :class:`IpcError`.
        ``tee`` receives a copy of the raw nettrace bytes (to keep a recording)."""
        assert self._sock is not None
        stream: Any = self._sock.makefile("rb", buffering=65536)
        if tee is not None:
            stream = _Tee(stream, tee)
        self.reader = NettraceReader(stream)
        try:
            yield from self.reader.events()
        except NettraceError as exc:
            if self._stopped.is_set() and "ended" in str(exc):
                return  # we stopped and closed it ourselves
            if process_gone(self.pid):
                raise IpcError(f"process {self.pid} exited during the session") from None
            raise
        finally:
            stream.close()

    def stop(self) -> None:
        """Send StopTracing once; the stream then ends by itself. Safe from another thread."""
        with self._stop_lock:
            if self._stopped.is_set() or self.session_id is None:
                return
            self._stopped.set()
        try:
            stop_tracing(self.pid, self.session_id, socket_path=self.socket_path, timeout=self.timeout)
        except IpcError:
            if pid_exists(self.pid) and not _is_zombie(self.pid):
                raise

    def close(self) -> None:
        try:
            self.stop()
        finally:
            if self._sock is not None:
                try:
                    self._sock.close()
                except OSError:
                    pass
                self._sock = None

    def __enter__(self) -> "EventPipeSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Tee:
    def __init__(self, inner: Any, copy: BinaryIO) -> None:
        self.inner, self.copy = inner, copy

    def read(self, n: int) -> bytes:
        data = self.inner.read(n)
        self.copy.write(data)
        return data

    def close(self) -> None:
        self.inner.close()


def process_gone(pid: int, wait: float = 2.0) -> bool:
    """Whether ``pid`` has exited (or is a zombie), waiting up to ``wait`` seconds: a dying
    process closes its sockets before it disappears from the process table."""
    end = time.monotonic() + wait
    while True:
        if not pid_exists(pid) or _is_zombie(pid):
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(0.05)


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return True
    rest = data[data.rfind(b")") + 2:]
    return rest[:1] in (b"Z", b"X")
