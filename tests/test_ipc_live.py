"""Diagnostics IPC against real .NET processes: process info, ps, dumps, and the errors a
user meets (not .NET, dead, bad directory, unwritable directory).

Builds tests/unit/ipc_debuggee once per session (in a temporary directory, so no obj/ lands
in the tree); every process started here is killed by pid in a fixture teardown.
"""

from __future__ import annotations

import json
import os
import platform
import re
import select
import shutil
import signal
import stat
import struct
import subprocess
import time
from pathlib import Path

import pytest

from sosext.ipc import (
    DiagnosticsClient,
    DumpType,
    IpcError,
    UnknownCommandError,
    collect_dump,
    find_socket,
    get_process_info,
    list_processes,
)
from sosext.ipc import protocol as p
from sosext.ipc.client import process_start_time

pytestmark = pytest.mark.slow

DEBUGGEE_SRC = Path(__file__).parent / "unit" / "ipc_debuggee"
DLL = "IpcDebuggee.dll"
DOTNET = shutil.which("dotnet")


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def debuggee_dll(tmp_path_factory) -> Path:
    if DOTNET is None:
        pytest.skip("dotnet is not installed")
    work = tmp_path_factory.mktemp("ipc_debuggee")
    src = work / "src"
    src.mkdir()
    for name in ("Program.cs", "IpcDebuggee.csproj"):
        shutil.copy(DEBUGGEE_SRC / name, src / name)
    out = work / "out"
    build = subprocess.run(
        [DOTNET, "build", "-c", "Release", "-o", str(out), str(src / "IpcDebuggee.csproj")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, f"dotnet build failed:\n{build.stdout[-3000:]}\n{build.stderr[-3000:]}"
    return out / DLL


@pytest.fixture(scope="session")
def runtime_versions(debuggee_dll) -> list[str]:  # after the build: it skips without dotnet
    out = subprocess.run([DOTNET, "--list-runtimes"], capture_output=True, text=True, timeout=60).stdout
    return re.findall(r"^Microsoft\.NETCore\.App (\S+) ", out, re.M)


class Debuggee:
    def __init__(self, dll: Path) -> None:
        self.proc = subprocess.Popen(
            [DOTNET, str(dll)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        ready, _, _ = select.select([self.proc.stdout], [], [], 60)
        line = self.proc.stdout.readline() if ready else b""
        if not line:
            self.stop()
            raise AssertionError(f"debuggee did not print its pid: {self.proc.stderr.read()!r}")
        self.pid: int = json.loads(line)["pid"]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        """Close stdin (a clean exit removes the socket), else kill; remove a leftover socket."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(10)
        _remove_stale_sockets(self.proc.pid)


def _remove_stale_sockets(pid: int) -> None:
    root = os.environ.get("TMPDIR") or "/tmp"
    for name in os.listdir(root):
        if name.startswith(f"dotnet-diagnostic-{pid}-") and name.endswith("-socket"):
            try:
                os.unlink(os.path.join(root, name))
            except OSError:
                pass


@pytest.fixture(scope="module")
def debuggee(debuggee_dll):
    d = Debuggee(debuggee_dll)
    try:
        yield d
    finally:
        d.stop()


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(["/bin/sleep", "30"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait(10)


def assert_still_alive(d: Debuggee) -> None:
    assert d.alive(), "the debuggee died"
    assert get_process_info(d.pid).pid == d.pid  # and still answers


def elf_core_type(path: str) -> int:
    with open(path, "rb") as f:
        ident = f.read(64)
    assert ident[:4] == b"\x7fELF", f"{path} is not an ELF file"
    assert ident[4] == 2, "not ELFCLASS64"
    return struct.unpack_from("<H", ident, 16)[0]


# --------------------------------------------------------------------------- info and ps


def test_process_info(debuggee, runtime_versions):
    info = get_process_info(debuggee.pid)
    assert info.pid == debuggee.pid == debuggee.proc.pid
    assert DLL in info.command_line
    assert info.os == "Linux"
    assert info.arch == {"x86_64": "x64", "aarch64": "arm64"}.get(platform.machine(), info.arch)
    assert info.managed_entrypoint == "IpcDebuggee"
    # The runtime the debuggee loaded is one that dotnet --list-runtimes reports.
    maps = Path(f"/proc/{debuggee.pid}/maps").read_text()
    loaded = re.search(r"/Microsoft\.NETCore\.App/([^/]+)/libcoreclr\.so", maps).group(1)
    assert loaded in runtime_versions
    assert info.clr_product_version.startswith(loaded), (info.clr_product_version, loaded)
    assert info.runtime_cookie.int != 0
    assert get_process_info(debuggee.pid).runtime_cookie == info.runtime_cookie  # stable


def test_process_info_v1_layout_on_this_runtime(debuggee):
    client = DiagnosticsClient(debuggee.pid)
    v1 = p.parse_process_info(p.check_reply(client.request(p.process_info_request(), "ProcessInfo"), "ProcessInfo"))
    v2 = client.process_info()
    assert (v1.pid, v1.runtime_cookie, v1.command_line, v1.os, v1.arch) == (
        v2.pid,
        v2.runtime_cookie,
        v2.command_line,
        v2.os,
        v2.arch,
    )
    assert v1.clr_product_version is None and v2.clr_product_version is not None
    # An unknown command in a known command set is an error reply, not a hang or a close.
    with pytest.raises(UnknownCommandError):
        p.check_reply(client.request(p.encode_message(0x04, 0x7F), "unknown"), "unknown")


def test_socket_key_is_the_process_start_time(debuggee):
    path = find_socket(debuggee.pid)
    assert os.path.basename(path) == f"dotnet-diagnostic-{debuggee.pid}-{process_start_time(debuggee.pid)}-socket"
    assert stat.S_ISSOCK(os.stat(path).st_mode)


def test_list_processes_includes_debuggee(debuggee):
    rows = list_processes()
    assert [r.pid for r in rows] == sorted(r.pid for r in rows)
    mine = [r for r in rows if r.pid == debuggee.pid]
    assert len(mine) == 1
    row = mine[0]
    assert row.name == "dotnet"
    assert DLL in row.command_line
    assert row.runtime_version == get_process_info(debuggee.pid).clr_product_version
    assert row.managed_entrypoint == "IpcDebuggee"


# --------------------------------------------------------------------------- dumps


def test_collect_dumps_with_heap_and_full(debuggee, tmp_path):
    t0 = time.monotonic()
    heap = collect_dump(debuggee.pid, tmp_path / "core.%d", DumpType.WITH_HEAP)
    t_heap = time.monotonic() - t0
    assert heap == str(tmp_path / f"core.{debuggee.pid}")
    assert elf_core_type(heap) == 4  # ET_CORE
    heap_size = os.path.getsize(heap)

    t0 = time.monotonic()
    rel = os.path.relpath(tmp_path / "full.%p")  # relative paths are made absolute here
    full = collect_dump(debuggee.pid, rel, DumpType.FULL)
    t_full = time.monotonic() - t0
    assert full == str(tmp_path / f"full.{debuggee.pid}")
    assert elf_core_type(full) == 4
    full_size = os.path.getsize(full)
    assert 0 < heap_size < full_size
    print(
        f"\nwith-heap dump {heap_size / 2**20:.1f} MiB in {t_heap:.2f} s;"
        f" full {full_size / 2**20:.1f} MiB in {t_full:.2f} s"
    )
    os.unlink(heap)
    os.unlink(full)
    assert_still_alive(debuggee)


def test_runtime_answers_every_dump_command_id(debuggee, tmp_path):
    """GenerateCoreDump 1, 2 and 3 are all known (they fail on a missing directory, which is
    cheap); only id 3 carries createdump's message. Id 4 is unknown."""
    client = DiagnosticsClient(debuggee.pid)
    bad = str(tmp_path / "missing" / "core")
    for command_id in (1, 2, 3):
        result = p.parse_dump_reply(client.request(p.dump_request(command_id, bad, 2, 0), "dump", 60), command_id)
        assert result.hresult == p.HResult.E_FAIL
        if command_id == 3:
            assert "Could not create output file" in result.message and bad in result.message
        else:
            assert result.message is None
    with pytest.raises(UnknownCommandError):
        p.parse_dump_reply(client.request(p.dump_request(4, bad, 2, 0), "dump", 60), 4)
    assert_still_alive(debuggee)


def test_runtime_error_message_reaches_the_user(debuggee, tmp_path):
    # Without our pre-checks (write_dump), the runtime's own failure comes back as one line.
    bad = str(tmp_path / "missing" / "core")
    with pytest.raises(IpcError) as exc:
        DiagnosticsClient(debuggee.pid).write_dump(bad, DumpType.WITH_HEAP, timeout=60)
    msg = str(exc.value)
    assert "\n" not in msg and exc.value.hresult == 0x80004005
    assert msg.startswith(
        f"dump of process {debuggee.pid} failed with HRESULT 0x80004005 (E_FAIL): "
        f"Could not create output file '{bad}'"
    )
    assert_still_alive(debuggee)


# --------------------------------------------------------------------------- errors


def test_not_a_dotnet_process(sleeper, tmp_path, debuggee):
    expected = (
        f"^process {sleeper} has no diagnostics socket "
        r"\(not a .NET process, or diagnostics disabled with DOTNET_EnableDiagnostics=0\)$"
    )
    with pytest.raises(IpcError, match=expected):
        find_socket(sleeper)
    with pytest.raises(IpcError, match=expected):
        get_process_info(sleeper)
    with pytest.raises(IpcError, match=expected):
        collect_dump(sleeper, tmp_path / "core")
    assert sleeper not in [r.pid for r in list_processes()]
    assert_still_alive(debuggee)


def test_dead_pid(tmp_path, debuggee):
    proc = subprocess.Popen(["/bin/true"])
    proc.wait(10)  # reaped: the pid is free
    for call in (
        lambda: get_process_info(proc.pid),
        lambda: collect_dump(proc.pid, tmp_path / "core"),
    ):
        with pytest.raises(IpcError, match=f"^no such process: {proc.pid}$"):
            call()
    assert_still_alive(debuggee)


def test_killed_runtime_leaves_a_stale_socket(debuggee_dll, debuggee):
    victim = Debuggee(debuggee_dll)
    try:
        sock = find_socket(victim.pid)
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(10)
        assert os.path.exists(sock), "SIGKILL leaves the socket file behind"
        with pytest.raises(IpcError, match=f"^no such process: {victim.pid}$"):
            get_process_info(victim.pid)
        assert victim.pid not in [r.pid for r in list_processes()]
    finally:
        victim.stop()
    assert_still_alive(debuggee)


def test_missing_directory(debuggee, tmp_path):
    with pytest.raises(IpcError, match=f"^dump directory does not exist: {re.escape(str(tmp_path))}/nope$"):
        collect_dump(debuggee.pid, tmp_path / "nope" / "core.%p")
    assert_still_alive(debuggee)


def test_unwritable_directory_under_proc(debuggee):
    # /proc refuses new files even to root, although access(2) says W_OK to root.
    with pytest.raises(IpcError, match=r"^dump directory is not writable: /proc \("):
        collect_dump(debuggee.pid, "/proc/core.%p")
    assert_still_alive(debuggee)


def test_unwritable_directory(debuggee, tmp_path):
    """A read-only directory: chmod 0o500 stops a normal user but not root (CAP_DAC_OVERRIDE),
    so as root the directory is made immutable (chattr +i), which stops root too."""
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() != 0:
        ro.chmod(0o500)
        undo = lambda: ro.chmod(0o700)  # noqa: E731
    else:
        chattr = shutil.which("chattr")
        if chattr is None or subprocess.run([chattr, "+i", str(ro)], capture_output=True).returncode != 0:
            pytest.skip("running as root and chattr +i is unavailable here; /proc is covered above")
        undo = lambda: subprocess.run([chattr, "-i", str(ro)], check=True)  # noqa: E731
    try:
        with pytest.raises(IpcError, match=f"^dump directory is not writable: {re.escape(str(ro))}"):
            collect_dump(debuggee.pid, ro / "core.%p")
        # What the runtime says when asked anyway (createdump runs as the target's user).
        runtime_says = f"failed with HRESULT 0x80004005 \\(E_FAIL\\): Could not create output file '{re.escape(str(ro))}/core"
        with pytest.raises(IpcError, match=runtime_says):
            DiagnosticsClient(debuggee.pid).write_dump(str(ro / "core.%p"), timeout=60)
        assert os.listdir(ro) == []
    finally:
        undo()
    assert_still_alive(debuggee)
