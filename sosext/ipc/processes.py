"""Find the .NET processes on this machine, the way ``dotnet-dump ps`` does.

A process is listed when its diagnostics socket accepts a connection; it is described
from ``/proc`` (name, command line) and from the runtime itself (ProcessInfo2: runtime
version, entry assembly).
"""

from __future__ import annotations

from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from sosext.ipc.client import (
    DiagnosticsClient,
    DiagnosticsSocket,
    NoSuchProcessError,
    NotListeningError,
    _select_socket,
    pid_exists,
    published_sockets,
)
from sosext.ipc.protocol import IpcError, ProcessInfo

__all__ = ["DotnetProcess", "list_processes"]

PS_TIMEOUT = 3.0
"""Seconds each runtime gets to answer ProcessInfo; a busy one (e.g. writing a dump) is
still listed, without a runtime version."""


@dataclass(frozen=True, slots=True)
class DotnetProcess:
    """One row of ``sosext ps``."""

    pid: int
    name: str | None  # /proc/<pid>/comm
    command_line: str | None  # /proc/<pid>/cmdline, else the runtime's
    runtime_version: str | None  # ProcessInfo2's clr_product_version
    socket_path: str
    info: ProcessInfo | None  # None when the runtime did not answer in time

    @property
    def managed_entrypoint(self) -> str | None:
        return self.info.managed_entrypoint if self.info else None


def _read_proc(pid: int, name: str) -> bytes | None:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read()
    except OSError:
        return None


def _proc_name(pid: int) -> str | None:
    data = _read_proc(pid, "comm")
    return data.decode("utf-8", "replace").rstrip("\n") if data else None


def _proc_cmdline(pid: int) -> str | None:
    data = _read_proc(pid, "cmdline")
    if not data:
        return None  # unreadable, a zombie, or a kernel thread
    args = data.rstrip(b"\x00").split(b"\x00")
    return " ".join(a.decode("utf-8", "replace") for a in args)


def _describe(sock: DiagnosticsSocket, timeout: float) -> DotnetProcess | None:
    info: ProcessInfo | None
    try:
        info = DiagnosticsClient(sock.pid, timeout=timeout, socket_path=sock.path).process_info()
    except (NotListeningError, NoSuchProcessError):
        return None  # a stale socket, or the process exited meanwhile
    except IpcError:
        info = None  # alive but silent or garbled: still a .NET process
    if not pid_exists(sock.pid):
        return None
    command_line = _proc_cmdline(sock.pid) or (info.command_line if info else None)
    return DotnetProcess(
        pid=sock.pid,
        name=_proc_name(sock.pid),
        command_line=command_line,
        runtime_version=info.clr_product_version if info else None,
        socket_path=sock.path,
        info=info,
    )


def list_processes(tmpdir: str | None = None, *, timeout: float = PS_TIMEOUT) -> list[DotnetProcess]:
    """Every process with a live diagnostics socket in the IPC root, sorted by pid.

    Stale sockets (dead pid, or nobody accepting) are skipped. Processes are queried in
    parallel, so a silent runtime costs ``timeout`` once, not once per process.
    """
    by_pid: dict[int, list[DiagnosticsSocket]] = defaultdict(list)
    for sock in published_sockets(tmpdir):
        if pid_exists(sock.pid):
            by_pid[sock.pid].append(sock)
    chosen = [_select_socket(pid, socks) for pid, socks in by_pid.items()]
    if not chosen:
        return []
    with ThreadPoolExecutor(max_workers=min(8, len(chosen))) as pool:
        rows = list(pool.map(lambda s: _describe(s, timeout), chosen))
    return sorted((r for r in rows if r is not None), key=lambda r: r.pid)
