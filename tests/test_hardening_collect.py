"""`sosext collect` writes a file full of secrets: it never overwrites silently, never follows
a symlink, leaves the dump 0600, and says in one line why it cannot (a stopped process, a bad
pid, a timeout), against the real runtime's createdump (tests/unit/ipc_debuggee).
"""
from __future__ import annotations

import os
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest

import drivers
from sosext.ipc import DumpType, IpcError, collect_dump
from sosext.ipc.client import process_state
from test_ipc_live import Debuggee, assert_still_alive, debuggee, debuggee_dll, elf_core_type  # noqa: F401

pytestmark = pytest.mark.slow


def sosext(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([drivers.PYTHON, "-m", "sosext", *args], cwd=drivers.REPO, capture_output=True,
                          text=True, timeout=timeout)


def one_error_line(res: subprocess.CompletedProcess) -> str:
    """The failure is one "error:" line on stderr (stdout has at most the "Writing ..." line)."""
    lines = res.stderr.splitlines()
    assert res.returncode != 0 and len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    assert all(ln.startswith("Writing ") for ln in res.stdout.splitlines()), res.stdout
    return lines[0]


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def wait_for_createdump_to_end(pid: int, timeout: float = 120) -> None:
    """A dump we stopped waiting for still runs in the target; the next test must not see it."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        kids = []
        for task in Path(f"/proc/{pid}/task").glob("*/children"):
            kids += task.read_text().split()
        if not any(Path(f"/proc/{k}/comm").exists() and Path(f"/proc/{k}/comm").read_text().strip() == "createdump"
                   for k in kids) and process_state(pid) not in ("t", "T"):
            return
        time.sleep(0.2)
    raise AssertionError("createdump did not finish")


def test_dump_is_private_even_with_umask_0(debuggee, tmp_path):
    old = os.umask(0)
    try:
        path = collect_dump(debuggee.pid, tmp_path / "core.%p", DumpType.WITH_HEAP)
    finally:
        os.umask(old)
    assert path == str(tmp_path / f"core.{debuggee.pid}")
    assert mode(Path(path)) == 0o600 and elf_core_type(path) == 4
    assert sorted(os.listdir(tmp_path)) == [f"core.{debuggee.pid}"]  # no private directory left
    assert_still_alive(debuggee)


def test_existing_file_is_not_overwritten_without_force(debuggee, tmp_path):
    target = tmp_path / "core"
    target.write_text("precious")
    res = sosext("collect", str(debuggee.pid), "-o", str(target))
    assert one_error_line(res) == f"error: {target} already exists (a file); choose another name or use --force to replace it"
    assert target.read_text() == "precious"
    res = sosext("collect", str(debuggee.pid), "-o", str(target), "--force")
    assert res.returncode == 0, res.stderr
    assert elf_core_type(str(target)) == 4 and mode(target) == 0o600
    assert f"Wrote heap dump to {target}" in res.stdout
    assert sorted(os.listdir(tmp_path)) == ["core"]


def test_symlink_is_never_followed(debuggee, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("do not touch")
    link = tmp_path / "core"
    link.symlink_to(victim)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "would-be-created")
    for path in (link, dangling):
        res = sosext("collect", str(debuggee.pid), "-o", str(path))
        assert one_error_line(res) == (f"error: {path} already exists (a symlink); choose another name "
                                       "or use --force to replace it")
    assert not (tmp_path / "would-be-created").exists()
    # --force replaces the link itself with the dump; what it pointed to stays as it was.
    res = sosext("collect", str(debuggee.pid), "-o", str(link), "--force")
    assert res.returncode == 0, res.stderr
    assert not link.is_symlink() and elf_core_type(str(link)) == 4 and mode(link) == 0o600
    assert victim.read_text() == "do not touch"
    assert_still_alive(debuggee)


def test_name_patterns_still_work(debuggee, tmp_path):
    path = collect_dump(debuggee.pid, tmp_path / "dump.%e.%p.%t", DumpType.NORMAL)
    name = os.path.basename(path)
    assert name.startswith("dump.") and f".{debuggee.pid}." in name and "%" not in name
    assert mode(Path(path)) == 0o600 and os.listdir(tmp_path) == [name]


def test_stopped_process_is_reported_at_once(debuggee, tmp_path):
    os.kill(debuggee.pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 10
        while process_state(debuggee.pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.05)
        t0 = time.monotonic()
        res = sosext("collect", str(debuggee.pid), "-o", str(tmp_path / "core"))
        took = time.monotonic() - t0
    finally:
        os.kill(debuggee.pid, signal.SIGCONT)
    line = one_error_line(res)
    assert line.startswith(f"error: process {debuggee.pid} is stopped (state T") and f"kill -CONT {debuggee.pid}" in line
    assert took < 60  # not the 120 s dump timeout (generous: the machine is shared)
    assert os.listdir(tmp_path) == []
    assert_still_alive(debuggee)


def test_process_stopped_while_waiting(debuggee, tmp_path):
    """SIGSTOP after the request went out: the wait notices within about a second."""
    def stop_soon() -> None:
        os.kill(debuggee.pid, signal.SIGSTOP)
    try:
        with pytest.raises(IpcError, match=f"^process {debuggee.pid} is stopped"):
            # The stop lands before the runtime can start createdump, or createdump finishes
            # first; only the former is this test's case, so retry a few times.
            for _ in range(5):
                os.kill(debuggee.pid, signal.SIGCONT)
                wait_for_createdump_to_end(debuggee.pid)
                collect_dump(debuggee.pid, tmp_path / "core.%t", DumpType.FULL, timeout=60, on_start=stop_soon)
    finally:
        os.kill(debuggee.pid, signal.SIGCONT)
    wait_for_createdump_to_end(debuggee.pid)
    assert_still_alive(debuggee)


def test_timeout_names_the_cause(debuggee, tmp_path):
    res = sosext("collect", str(debuggee.pid), "--type", "full", "--timeout", "0.01", "-o", str(tmp_path / "core"))
    line = one_error_line(res)
    assert line.startswith(f"error: timed out after 0.01 s waiting for process {debuggee.pid} to answer GenerateCoreDump")
    assert "createdump (pid" in line or "did not reply" in line
    wait_for_createdump_to_end(debuggee.pid)
    assert os.listdir(tmp_path) == []  # the partial dump went with the private directory
    assert_still_alive(debuggee)


@pytest.mark.parametrize("pid", ["4294967296", "-1", "0", "abc", "99999999999999999999"])
def test_bad_pid_is_one_line(pid):
    assert one_error_line(sosext("collect", pid)).startswith(f"error: invalid process id: {pid} (")


def test_unwritable_destination_names_the_path(debuggee, tmp_path):
    res = sosext("collect", str(debuggee.pid), "-o", "/proc/self/core")
    assert one_error_line(res).startswith("error: dump directory is not writable: /proc/self")
    res = sosext("collect", str(debuggee.pid), "-o", str(tmp_path), "--force")
    assert one_error_line(res) == f"error: dump path is a directory: {tmp_path}"
    assert os.listdir(tmp_path) == []


@pytest.fixture
def other_users_debuggee(debuggee_dll, tmp_path):  # noqa: F811 - the fixture imported above
    """The IPC debuggee running as user nobody (needs root and setpriv)."""
    import json
    import select
    import shutil
    import tempfile
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv to run a process as another user")
    # A copy nobody can read: pytest's own temporary directories are private to root.
    public = Path(tempfile.mkdtemp(prefix="sosext-nobody-"))
    shutil.copytree(Path(debuggee_dll).parent, public / "out")
    for p in [public, *public.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    proc = subprocess.Popen([setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups", "env", "HOME=/tmp",
                             "DOTNET_CLI_TELEMETRY_OPTOUT=1", str(Path(shutil.which("dotnet")).resolve()),
                             str(public / "out" / Path(debuggee_dll).name)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        line = proc.stdout.readline() if ready else b""
        if not line:
            pytest.skip(f"the debuggee does not start as nobody here: {proc.stderr.read(2000)!r}")
        yield json.loads(line)["pid"]
    finally:
        proc.kill()
        proc.wait(10)
        shutil.rmtree(public, ignore_errors=True)


def test_dump_of_another_users_process(other_users_debuggee, tmp_path):
    """As root, for a process of another user: createdump (running as that user) gets the private
    directory only while it writes; the dump ends up root's and 0600. A directory that user
    cannot enter is refused beforehand, naming it."""
    pid = other_users_debuggee
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    res = sosext("collect", str(pid), "-o", str(closed / "core"))
    line = one_error_line(res)
    assert line.startswith(f"error: process {pid} runs as uid 65534, and its createdump could not reach {closed} (")
    assert line.endswith(" is not searchable by that user); choose a directory that user can enter")
    assert os.listdir(closed) == []
    open_dir = Path(tempfile_public_dir())
    try:
        res = sosext("collect", str(pid), "-o", str(open_dir / "core"))
        assert res.returncode == 0, res.stderr
        st = os.lstat(open_dir / "core")
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o600) and elf_core_type(str(open_dir / "core")) == 4
        assert os.listdir(open_dir) == ["core"]
    finally:
        import shutil
        shutil.rmtree(open_dir, ignore_errors=True)


def tempfile_public_dir() -> str:
    import tempfile
    d = tempfile.mkdtemp(prefix="sosext-dumps-")
    os.chmod(d, 0o755)
    return d
