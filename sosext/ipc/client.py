"""Talk to a .NET process over its diagnostics socket: process info and core dumps.

One connection per command (the runtime closes it after answering), a deadline on every
socket operation, and nothing sent but the documented commands. This is what
``dotnet-dump collect`` does, without needing any .NET tool on the machine.
"""

from __future__ import annotations

import errno
import glob
import os
import re
import socket
import stat
import tempfile
import time
from dataclasses import dataclass
from typing import Callable

from sosext.ipc.protocol import (
    HEADER_SIZE,
    DumpCommandId,
    DumpResult,
    DumpType,
    IpcError,
    IpcMessage,
    ProcessInfo,
    UnknownCommandError,
    WriteDumpFlags,
    check_reply,
    decode_header,
    dump_request,
    hresult_text,
    parse_dump_reply,
    parse_process_info,
    parse_process_info2,
    process_info2_request,
    process_info_request,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "DiagnosticsSocket",
    "DiagnosticsClient",
    "NotListeningError",
    "NoSuchProcessError",
    "NoDiagnosticsSocketError",
    "ipc_root",
    "published_sockets",
    "find_socket",
    "get_process_info",
    "collect_dump",
    "process_start_time",
    "pid_exists",
]

_POLL = 1.0  # seconds between checks of the process while waiting for a reply

DEFAULT_TIMEOUT = 10.0
"""Seconds to wait for a runtime to accept and answer a quick command (process info)."""

_SOCKET_NAME = re.compile(r"^dotnet-diagnostic-(\d+)-(\d+)-socket$")


class NoSuchProcessError(IpcError):
    """The pid does not exist (or exited while we talked to it)."""

    def __init__(self, pid: int) -> None:
        super().__init__(f"no such process: {pid}")
        self.pid = pid


class NoDiagnosticsSocketError(IpcError):
    """The process exists but publishes no diagnostics socket."""

    def __init__(self, pid: int) -> None:
        super().__init__(
            f"process {pid} has no diagnostics socket (not a .NET process, "
            "or diagnostics disabled with DOTNET_EnableDiagnostics=0)"
        )
        self.pid = pid


class NotListeningError(IpcError):
    """The socket file exists but nobody accepts connections on it (a stale socket)."""


@dataclass(frozen=True, slots=True)
class DiagnosticsSocket:
    """``$TMPDIR/dotnet-diagnostic-{pid}-{key}-socket``; on Linux ``key`` is the process
    start time in clock ticks since boot (field 22 of ``/proc/<pid>/stat``)."""

    pid: int
    key: int
    path: str


def ipc_root(tmpdir: str | None = None) -> str:
    """Where runtimes put their sockets: ``tmpdir``, else ``$TMPDIR``, else ``/tmp``."""
    return tmpdir or os.environ.get("TMPDIR") or "/tmp"


def published_sockets(tmpdir: str | None = None) -> list[DiagnosticsSocket]:
    """Every ``dotnet-diagnostic-*-socket`` in the IPC root, live or stale, sorted by (pid, key)."""
    root = ipc_root(tmpdir)
    found: list[DiagnosticsSocket] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    for entry in entries:
        m = _SOCKET_NAME.match(entry.name)
        if not m:
            continue
        try:
            if not stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode):
                continue
        except OSError:
            continue
        found.append(DiagnosticsSocket(int(m.group(1)), int(m.group(2)), entry.path))
    found.sort(key=lambda s: (s.pid, s.key))
    return found


def pid_exists(pid: int) -> bool:
    if not 0 < pid < 1 << 31:  # os.kill would overflow (or signal a group)
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def process_start_time(pid: int) -> int | None:
    """Field 22 of ``/proc/<pid>/stat`` (what the runtime uses as the socket key), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])  # fields[0] is field 3 (state)
    except (IndexError, ValueError):
        return None


def _select_socket(pid: int, candidates: list[DiagnosticsSocket]) -> DiagnosticsSocket:
    """The socket of the running process: the key that equals its start time, else the newest."""
    start = process_start_time(pid)
    for s in candidates:
        if s.key == start:
            return s
    return max(candidates, key=lambda s: s.key)


def find_socket(pid: int, tmpdir: str | None = None) -> str:
    """Path of the diagnostics socket of ``pid``; :class:`IpcError` when there is none."""
    if not pid_exists(pid):
        raise NoSuchProcessError(pid)
    candidates = [s for s in published_sockets(tmpdir) if s.pid == pid]
    start = process_start_time(pid)
    if start is not None and candidates and all(0 < s.key < start for s in candidates):
        # Keys are start times: every socket is older than the process, left by an earlier
        # process that had its pid (pids are reused), not this one's.
        candidates = []
    if not candidates:
        raise NoDiagnosticsSocketError(pid)
    return _select_socket(pid, candidates).path


class DiagnosticsClient:
    """Commands to one process. Each call opens its own connection.

    ``socket_path`` overrides the lookup (e.g. a path found by :func:`published_sockets`).
    """

    def __init__(
        self,
        pid: int,
        *,
        tmpdir: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        socket_path: str | None = None,
    ) -> None:
        self.pid = pid
        self.tmpdir = tmpdir
        self.timeout = timeout
        self._socket_path = socket_path

    @property
    def socket_path(self) -> str:
        if self._socket_path is None:
            self._socket_path = find_socket(self.pid, self.tmpdir)
        return self._socket_path

    # ------------------------------------------------------------------ transport

    def request(self, message: bytes, operation: str, timeout: float | None = None) -> IpcMessage:
        """Send one encoded message and read one reply within ``timeout`` seconds overall."""
        timeout = self.timeout if timeout is None else timeout
        if not timeout > 0:
            raise IpcError(f"invalid timeout {timeout!r} (seconds, > 0)")
        path = self.socket_path
        deadline = time.monotonic() + timeout

        def timed_out() -> IpcError:
            return IpcError(f"timed out after {timeout:g} s waiting for process {self.pid} to answer {operation}: "
                            f"{_busy_reason(self.pid)}")

        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            try:
                sock.connect(path)
            except socket.timeout:
                raise timed_out() from None
            except (FileNotFoundError, ConnectionRefusedError):
                if not pid_exists(self.pid):
                    raise NoSuchProcessError(self.pid) from None
                raise NotListeningError(
                    f"process {self.pid} does not accept diagnostics connections on {path} (stale socket?)"
                ) from None
            except PermissionError:
                raise IpcError(
                    f"permission denied connecting to {path} (the process runs as another user; "
                    "run as that user or root)"
                ) from None
            except OSError as exc:
                raise IpcError(f"cannot connect to process {self.pid}: {exc.strerror or exc}") from None
            try:
                sock.sendall(message)
                header = decode_header(self._recv_exact(sock, HEADER_SIZE, deadline, operation, first=True))
                payload = self._recv_exact(sock, header.size - HEADER_SIZE, deadline, operation, first=False)
            except socket.timeout:
                raise timed_out() from None
            except (BrokenPipeError, ConnectionResetError):
                raise IpcError(
                    f"process {self.pid} closed the diagnostics connection during {operation}"
                ) from None
            except OSError as exc:
                raise IpcError(f"diagnostics connection to process {self.pid} failed: {exc.strerror or exc}") from None
        return IpcMessage(header, payload)

    def _recv_exact(self, sock: socket.socket, n: int, deadline: float, operation: str, *, first: bool) -> bytes:
        chunks: list[bytes] = []
        got = 0
        while got < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout()
            # Wake up every second to notice a process that stopped or died meanwhile,
            # rather than waiting out the whole deadline in silence.
            sock.settimeout(min(remaining, _POLL))
            try:
                chunk = sock.recv(min(n - got, 65536))
            except socket.timeout:
                if process_state(self.pid) in ("T", "Z", "X", None):
                    check_not_stopped(self.pid, traced_too=False)
                    if process_state(self.pid) is None:
                        raise NoSuchProcessError(self.pid) from None
                continue
            if not chunk:
                what = "without replying" if first and got == 0 else "in the middle of its reply"
                raise IpcError(f"process {self.pid} closed the diagnostics connection {what} ({operation})")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    # ------------------------------------------------------------------ commands

    def process_info(self) -> ProcessInfo:
        """ProcessInfo2 (0x04/0x04), falling back to ProcessInfo (0x04/0x00) on older runtimes."""
        reply = self.request(process_info2_request(), "ProcessInfo2")
        try:
            return parse_process_info2(check_reply(reply, f"ProcessInfo2 for process {self.pid}"))
        except UnknownCommandError:
            pass
        reply = self.request(process_info_request(), "ProcessInfo")
        return parse_process_info(check_reply(reply, f"ProcessInfo for process {self.pid}"))

    def write_dump(
        self,
        path: str,
        dump_type: DumpType = DumpType.WITH_HEAP,
        flags: WriteDumpFlags = WriteDumpFlags.NONE,
        timeout: float = 120.0,
    ) -> DumpCommandId:
        """Ask the runtime to run createdump on itself; return the command id it answered.

        ``path`` is sent verbatim (it is resolved in the target's filesystem, ``%p`` etc.
        expanded by createdump). Tries GenerateCoreDump3, then 2, then 1 on "unknown
        command", like ``DiagnosticsClient.WriteDump``. Raises :class:`IpcError` with the
        HRESULT and the runtime's message on failure. No pre-checks: see :func:`collect_dump`.
        """
        flags = WriteDumpFlags(flags)
        for command_id in (
            DumpCommandId.GENERATE_CORE_DUMP3,
            DumpCommandId.GENERATE_CORE_DUMP2,
            DumpCommandId.GENERATE_CORE_DUMP,
        ):
            if command_id == DumpCommandId.GENERATE_CORE_DUMP:
                if flags & ~WriteDumpFlags.LOGGING_ENABLED:
                    raise IpcError(f"process {self.pid}'s runtime only supports the logging dump flag")
                wire_flags = 1 if flags & WriteDumpFlags.LOGGING_ENABLED else 0  # the diagnostics bool
            else:
                wire_flags = int(flags)
            request = dump_request(command_id, path, int(dump_type), wire_flags)
            reply = self.request(request, f"GenerateCoreDump{command_id if command_id > 1 else ''}", timeout)
            try:
                result = parse_dump_reply(reply, command_id)
            except UnknownCommandError:
                continue
            if not result.ok:
                raise _dump_failure(self.pid, result)
            return command_id
        raise IpcError(f"process {self.pid}'s runtime does not support dump commands")


def _dump_failure(pid: int, result: DumpResult) -> IpcError:
    text = f"dump of process {pid} failed with HRESULT {hresult_text(result.hresult)}"
    if result.message:
        # createdump's lines look like "[createdump] Could not create output file '…': …";
        # keep them, in order, on one line.
        lines = [line.strip().removeprefix("[createdump]").strip() for line in result.message.splitlines()]
        text += ": " + "; ".join(line for line in lines if line)
    return IpcError(text, hresult=result.hresult)


def get_process_info(pid: int, *, tmpdir: str | None = None, timeout: float = DEFAULT_TIMEOUT) -> ProcessInfo:
    """What the runtime of ``pid`` says about itself (ProcessInfo2, else ProcessInfo)."""
    return DiagnosticsClient(pid, tmpdir=tmpdir, timeout=timeout).process_info()


# --------------------------------------------------------------------------- dump paths

_DUMP_SPECIFIERS = frozenset("%dpeht")


def _dump_name_tokens(pattern: str) -> list[tuple[bool, str]]:
    """Split a createdump name pattern into (is_specifier, text) tokens.

    Rejects what createdump's FormatDumpName rejects (unknown specifiers), before
    bothering the target. A trailing lone ``%`` ends the name, as in createdump.
    """
    tokens: list[tuple[bool, str]] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c != "%":
            tokens.append((False, c))
            i += 1
            continue
        if i + 1 >= len(pattern):
            break
        spec = pattern[i + 1]
        if spec not in _DUMP_SPECIFIERS:
            raise IpcError(f"unsupported %{spec} in dump path {pattern} (createdump knows %p %d %e %h %t %%)")
        tokens.append((True, spec))
        i += 2
    return tokens


def _expand_dump_name(pattern: str, pid: int) -> tuple[str, bool]:
    """Expand what we can know (%% %d %p %h); %e (process name) and %t (time) become ``*``.

    Returns (text, is_glob); when is_glob the literal parts are glob-escaped.
    """
    tokens = _dump_name_tokens(pattern)
    wild = any(is_spec and text in "et" for is_spec, text in tokens)
    lit = glob.escape if wild else (lambda text: text)
    out: list[str] = []
    for is_spec, text in tokens:
        if not is_spec:
            out.append(lit(text))
        elif text == "%":
            out.append(lit("%"))
        elif text in "dp":
            out.append(str(pid))
        elif text == "h":
            out.append(lit(socket.gethostname()))
        else:
            out.append("*")
    return "".join(out), wild


def _check_dump_directory(directory: str) -> None:
    if not os.path.exists(directory):
        raise IpcError(f"dump directory does not exist: {directory}")
    if not os.path.isdir(directory):
        raise IpcError(f"not a directory: {directory}")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise IpcError(f"dump directory is not writable: {directory}")
    # access() says yes to root everywhere (even /proc); creating a file is the real test.
    try:
        fd, probe = tempfile.mkstemp(prefix=".sosext-probe-", dir=directory)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if exc.errno == errno.EROFS:
            reason = "read-only file system"
        raise IpcError(f"dump directory is not writable: {directory} ({reason})") from None
    os.close(fd)
    try:
        os.unlink(probe)
    except OSError:
        pass


PID_MAX_LIMIT = 1 << 22  # the kernel's ceiling for /proc/sys/kernel/pid_max on 64-bit


def pid_max() -> int:
    try:
        with open("/proc/sys/kernel/pid_max") as f:
            return int(f.read())
    except (OSError, ValueError):
        return PID_MAX_LIMIT


def parse_pid(text: str | int) -> int:
    """A process id as a user types it; :class:`IpcError` (one line) for anything else."""
    try:
        pid = int(str(text).strip(), 10)
    except ValueError:
        raise IpcError(f"invalid process id: {text} (a decimal number)") from None
    limit = pid_max()
    if not 0 < pid < limit:
        raise IpcError(f"invalid process id: {text} (1 to {limit - 1})")
    return pid


def process_state(pid: int) -> str | None:
    """Field 3 of ``/proc/<pid>/stat``: R, S, D, T (stopped), t (tracing stop), Z ...; None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2:].split()
    return fields[0].decode("ascii", "replace") if fields else None


def check_not_stopped(pid: int, *, traced_too: bool = True) -> None:
    """A stopped process cannot answer on its diagnostics socket: say so instead of waiting."""
    state = process_state(pid)
    if state == "T":
        raise IpcError(f"process {pid} is stopped (state T, e.g. by SIGSTOP, Ctrl-Z or SIGTTIN) and cannot "
                       f"answer; resume it with 'kill -CONT {pid}' and retry")
    if state == "t" and traced_too:
        raise IpcError(f"process {pid} is stopped by a debugger (state t, tracing stop) and cannot answer; "
                       "let it run ('continue') or detach the debugger, and retry")
    if state in ("Z", "X"):
        raise IpcError(f"process {pid} has exited (state {state})")


def _owner(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def collect_dump(
    pid: int,
    path: str | os.PathLike[str],
    dump_type: DumpType = DumpType.WITH_HEAP,
    *,
    diagnostics: bool = False,
    timeout: float = 120.0,
    tmpdir: str | None = None,
    force: bool = False,
    on_start: Callable[[], None] | None = None,
) -> str:
    """Have the runtime of ``pid`` write a core dump to ``path``; return its absolute path.

    ``path`` may use createdump's ``%p``/``%d`` (pid), ``%e``, ``%h``, ``%t``, ``%%`` in its
    file name. It is made absolute here (createdump, spawned by the target, resolves it in the
    target's filesystem and working directory); its directory must exist and be writable by us.
    ``diagnostics`` turns on createdump's log, which goes to the *target's* console.

    A dump holds the process's secrets, and createdump opens its file with O_TRUNC, following
    symlinks, mode 0644. So createdump never sees ``path``: it writes into a private directory
    (0700) made next to it, into a file we created there (O_EXCL, O_NOFOLLOW, 0600); the
    finished file is made 0600 and linked to ``path`` without replacing anything (``force``
    replaces an existing file, or a symlink itself, never what a symlink points to).
    ``on_start`` is called once every check passed, just before the runtime is asked.
    """
    try:
        dump_type = DumpType(dump_type)
    except ValueError:
        raise IpcError(f"invalid dump type {dump_type!r} (1 normal, 2 with heap, 3 triage, 4 full)") from None
    if not isinstance(pid, int) or not 0 < pid < 1 << 31:
        raise IpcError(f"invalid process id: {pid}")
    # No such process / no socket / stopped: say so before looking at the path.
    client = DiagnosticsClient(pid, tmpdir=tmpdir, socket_path=find_socket(pid, tmpdir))
    check_not_stopped(pid)
    pattern = os.path.abspath(os.fspath(path))
    real_dir, is_dir_glob = _expand_dump_name(os.path.dirname(pattern), pid)
    if is_dir_glob:
        raise IpcError(f"%e and %t can only be used in the dump's file name, not in its directory: {pattern}")
    name_pattern = os.path.basename(pattern)
    _check_dump_directory(real_dir)
    name, is_glob = _expand_dump_name(name_pattern, pid)
    if not is_glob:
        _check_destination(os.path.join(real_dir, name), force)

    private = _private_directory(real_dir)
    try:
        owner = _owner(pid)
        handed = owner is not None and owner != os.geteuid() and os.geteuid() == 0
        if handed:
            # createdump runs as the target's user: let that user (only) into the private directory.
            blocked = _blocked_for(pid, owner, real_dir)
            if blocked is not None:
                raise IpcError(f"process {pid} runs as uid {owner}, and its createdump could not reach "
                               f"{real_dir} ({blocked} is not searchable by that user); choose a directory "
                               "that user can enter")
            os.chown(private, owner, -1)
        if not is_glob:
            fd = os.open(os.path.join(private, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                if handed:
                    os.fchown(fd, owner, -1)
            finally:
                os.close(fd)
        flags = WriteDumpFlags.LOGGING_ENABLED if diagnostics else WriteDumpFlags.NONE
        private_pattern = os.path.join(private.replace("%", "%%"), name_pattern)
        if on_start is not None:
            on_start()
        client.write_dump(private_pattern, dump_type, flags, timeout=timeout)
        if handed:
            os.chown(private, os.geteuid(), -1)  # from here on, only we can touch what is inside
        produced, size = _take_private_dump(pid, private)
        final = os.path.join(real_dir, os.path.basename(produced))
        _publish(produced, final, force)
        if size == 0:
            os.unlink(final)
            raise IpcError(f"process {pid} reported a dump written, but it is empty")
        return final
    finally:
        _remove_private_directory(private)


def _busy_reason(pid: int) -> str:
    """Why a process may not have answered, for a timeout's message."""
    children = _children(pid)
    writer = next((c for c in children if c[1] == "createdump"), None)
    if writer is not None:
        return (f"createdump (pid {writer[0]}) is still writing the dump; a big process needs longer "
                "(--timeout SECONDS)")
    state = process_state(pid)
    if state == "t":
        return "it is stopped by a debugger (tracing stop)"
    if state == "D":
        return "it is blocked in the kernel (state D, uninterruptible I/O)"
    return (f"its diagnostics server did not reply (state {state}; a hung or overloaded process, or "
            "DOTNET_DiagnosticPorts with suspend)")


def _children(pid: int) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for task in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            with open(task) as f:
                kids = [int(k) for k in f.read().split()]
        except (OSError, ValueError):
            continue
        for k in kids:
            try:
                with open(f"/proc/{k}/comm") as f:
                    found.append((k, f.read().strip()))
            except OSError:
                pass
    return found


def _groups_of(pid: int) -> set[int]:
    groups: set[int] = set()
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Gid:"):
                    groups.update(int(g) for g in line.split()[1:3])
                elif line.startswith("Groups:"):
                    groups.update(int(g) for g in line.split()[1:])
    except (OSError, ValueError):
        pass
    return groups


def _blocked_for(pid: int, uid: int, directory: str) -> str | None:
    """The first directory on the way to ``directory`` that user ``uid`` (the target's) cannot
    search, by the mode bits (ACLs aside); None when createdump can get there."""
    groups = _groups_of(pid)
    path = "/"
    for part in [""] + [p for p in directory.split("/") if p]:
        path = os.path.join(path, part) if part else "/"
        try:
            st = os.stat(path)
        except OSError:
            return path
        if st.st_uid == uid:
            bit = stat.S_IXUSR
        elif st.st_gid in groups:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return path
    return None


def _check_destination(final: str, force: bool) -> None:
    if os.path.isdir(final) and not os.path.islink(final):
        raise IpcError(f"dump path is a directory: {final}")
    if os.path.lexists(final) and not force:
        kind = "a symlink" if os.path.islink(final) else "a file"
        raise IpcError(f"{final} already exists ({kind}); choose another name or use --force to replace it")


def _private_directory(directory: str) -> str:
    try:
        return tempfile.mkdtemp(prefix=".sosext-dump-", dir=directory)  # mode 0700
    except OSError as exc:
        raise IpcError(f"cannot create a private directory in {directory}: {exc.strerror or exc}") from None


def _take_private_dump(pid: int, private: str) -> tuple[str, int]:
    """The one file createdump left in ``private``, made ours and 0600; (path, size)."""
    names = os.listdir(private)
    if len(names) != 1:
        raise IpcError(f"process {pid} reported a dump written, but it left {len(names)} files in {private}")
    produced = os.path.join(private, names[0])
    try:
        fd = os.open(produced, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise IpcError(f"process {pid} reported a dump written, but {produced} cannot be opened: "
                       f"{exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise IpcError(f"process {pid} reported a dump written, but {produced} is not a regular file")
        if (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()) and os.geteuid() == 0:
            os.fchown(fd, os.geteuid(), os.getegid())
        os.fchmod(fd, 0o600)
        return produced, st.st_size
    finally:
        os.close(fd)


def _publish(produced: str, final: str, force: bool) -> None:
    """Give the dump its name: a hard link never replaces anything (nor follows a symlink)."""
    if force:
        if os.path.isdir(final) and not os.path.islink(final):
            raise IpcError(f"dump path is a directory: {final}")
        os.replace(produced, final)  # replaces a symlink itself, not its target
        return
    try:
        os.link(produced, final, follow_symlinks=False)
    except FileExistsError:
        raise IpcError(f"{final} appeared while the dump was written; not replacing it "
                       "(use --force to replace it)") from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EXDEV, errno.ENOTSUP, errno.EMLINK):
            raise IpcError(f"cannot name the dump {final}: {exc.strerror or exc}") from None
        # A file system without hard links: rename, after checking (a small window remains).
        if os.path.lexists(final):
            raise IpcError(f"{final} appeared while the dump was written; not replacing it") from None
        os.rename(produced, final)
        return
    os.unlink(produced)


def _remove_private_directory(private: str) -> None:
    """Whatever is left (a failed or partial dump holds secrets too) goes, then the directory."""
    try:
        for name in os.listdir(private):
            try:
                os.unlink(os.path.join(private, name))
            except OSError:
                pass
        os.rmdir(private)
    except OSError:
        pass
