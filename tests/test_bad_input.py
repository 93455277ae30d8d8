"""Bad input is a test case: every failure is one clear line and the debugger keeps working.

No process; a non-.NET process and its core; a truncated core; a missing or mismatched DAC;
and, on the good path, progress lines for long walks, Ctrl-C in LLDB, and `sosext install`.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

import drivers
from harness import Debuggee, build_debuggee, dotnet_path

pytestmark = pytest.mark.slow

needs_lldb = pytest.mark.skipif(drivers.LLDB is None, reason="lldb-16 is not installed")
needs_dotnet = pytest.mark.skipif(dotnet_path() is None, reason="dotnet is not on PATH: no debuggee can be built")


def lldb_raw(args: list[str], commands: list[str], timeout: float = 120) -> str:
    script = [f"command script import {drivers.REPO / 'lldbinit' / 'sosext.py'}", *commands, "quit"]
    return subprocess.run([drivers.LLDB, "--no-lldbinit", *args], input="\n".join(script) + "\n", text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout).stdout


def errors(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith("error:")]


@pytest.fixture(scope="module")
def sleeper(tmp_path_factory):
    """/bin/sleep, live, and a core of it written by gdb's gcore."""
    tmp = tmp_path_factory.mktemp("sleeper")
    proc = subprocess.Popen(["/bin/sleep", "600"])
    core = tmp / "sleep.core"
    try:
        if drivers.GDB:
            subprocess.run([drivers.GDB, "-nx", "-batch", "-p", str(proc.pid), "-ex", f"gcore {core}"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
        yield proc.pid, core if core.exists() else None
    finally:
        proc.kill()
        proc.wait()


@needs_lldb
def test_no_process_in_lldb() -> None:
    out = lldb_raw([], ["dumpheap -stat", "soshelp", "script print('STILL-ALIVE')"])
    assert errors(out) == ["error: no target: attach to a process (process attach -p PID) or load a core "
                           "(target create -c CORE; an arm64 core on x86-64 needs its executable too: "
                           "target create --core CORE EXE, or sosext core CORE)"]
    assert "sosext commands" in out and "STILL-ALIVE" in out


@needs_lldb
def test_non_dotnet_process_live_and_core(sleeper) -> None:
    pid, core = sleeper
    out = lldb_raw(["-p", str(pid)], ["dumpheap -stat", "script print('STILL-ALIVE')", "process detach"])
    assert errors(out) == [f"error: no .NET runtime (libcoreclr.so) is loaded in process {pid}"]
    assert "STILL-ALIVE" in out
    if core is None:
        pytest.skip("gdb is not installed: no core of /bin/sleep could be written")
    out = lldb_raw(["--core", str(core), "/bin/sleep"], ["dumpheap -stat", "script print('STILL-ALIVE')"])
    assert errors(out) == [f"error: no .NET runtime (libcoreclr.so) is loaded in core file {core}"]
    assert "STILL-ALIVE" in out
    cli = subprocess.run([drivers.PYTHON, "-m", "sosext", "analyze", str(core), "-c", "dumpheap -stat"],
                         cwd=drivers.REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert cli.returncode == 1 and cli.stderr.splitlines() == [
        f"error: no .NET runtime (libcoreclr.so) is loaded in core file {core}"]


@pytest.fixture(scope="module")
def dotnet_core(tmp_path_factory):
    if dotnet_path() is None:
        pytest.skip("dotnet is not on PATH: no debuggee can be built")
    tmp = tmp_path_factory.mktemp("badcore")
    with Debuggee("heap", dll=build_debuggee(), core_dir=tmp) as d:
        core = d.write_core("heap", tmp / "heap.core")
        exe = str(d.executable)
    return core, exe


def test_truncated_core(dotnet_core, tmp_path) -> None:
    core, exe = dotnet_core
    cut = tmp_path / "cut.core"
    with open(core, "rb") as src, open(cut, "wb") as dst:
        dst.write(src.read(os.path.getsize(core) // 3))
    cli = subprocess.run([drivers.PYTHON, "-m", "sosext", "analyze", str(cut), "-c", "dumpheap -stat", "-c", "soshelp"],
                         cwd=drivers.REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert cli.returncode == 1
    lines = cli.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "sosext commands" in cli.stdout  # the next command still ran
    tiny = tmp_path / "tiny.core"
    tiny.write_bytes(Path(core).read_bytes()[:40])
    cli = subprocess.run([drivers.PYTHON, "-m", "sosext", "analyze", str(tiny), "-c", "dumpheap -stat"],
                         cwd=drivers.REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert cli.returncode == 1 and cli.stderr.splitlines() == [f"error: truncated core file: {tiny} (ELF header)"] or \
        (len(cli.stderr.splitlines()) == 1 and "core file" in cli.stderr)


def test_missing_and_mismatched_dac(dotnet_core, tmp_path) -> None:
    core, exe = dotnet_core
    empty = tmp_path / "no-dac"
    empty.mkdir()
    cmds = [f"setclrpath {empty}", "dumpheap -stat"]
    out = drivers.run_cli(cmds, core=core)
    assert out[1].errors == [f"error: DAC not found: {empty / 'libmscordaccore.so'}"]
    try:
        other = build_debuggee("net8.0").parent
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"no other runtime to mismatch with: {e}")
    out = drivers.run_cli([f"setclrpath {other}", "dumpheap -stat"], core=core)
    assert len(out[1].errors) == 1 and out[1].errors[0].startswith("error: DAC mismatch: the target's libcoreclr.so "
                                                                    "has build id ")
    if drivers.LLDB:
        out = drivers.run_lldb([f"setclrpath {other}", "dumpheap -stat", "setclrpath", "soshelp"], core=core, exe=exe)
        assert len(out[1].errors) == 1 and "DAC mismatch" in out[1].errors[0]
        assert "sosext commands" in out[3].text


def test_progress_lines_on_stderr(dotnet_core) -> None:
    core, _exe = dotnet_core
    cli = subprocess.run([drivers.PYTHON, "-m", "sosext", "analyze", str(core), "-c", "dumpheap -stat"],
                         cwd=drivers.REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "SOSEXT_PROGRESS_INTERVAL": "0"})
    assert cli.returncode == 0
    progress = [ln for ln in cli.stderr.splitlines() if ln.startswith("Scanning heap: ")]
    assert progress and progress[-1].startswith("Scanning heap: done in ")
    assert "Scanning heap" not in cli.stdout
    quiet = subprocess.run([drivers.PYTHON, "-m", "sosext", "analyze", str(core), "-c", "dumpheap -stat -noprogress"],
                           cwd=drivers.REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env={**os.environ, "SOSEXT_PROGRESS_INTERVAL": "0"})
    assert "Scanning heap" not in quiet.stderr


@needs_lldb
def test_ctrl_c_in_lldb_stops_the_walk(dotnet_core) -> None:
    """A user at LLDB's prompt presses Ctrl-C during a slow walk (LLDB only delivers it to a
    running command when it reads a terminal, so this drives it through a pty)."""
    import pty
    core, exe = dotnet_core
    pid, fd = pty.fork()
    if pid == 0:  # the child: LLDB on the terminal side of the pty
        os.environ["SOSEXT_PROGRESS_INTERVAL"] = "0"
        os.environ["SOSEXT_NO_INDEX_CACHE"] = "1"  # walk, do not read an index an earlier test cached
        os.execvp(drivers.LLDB, [drivers.LLDB, "--no-lldbinit", "--core", str(core), exe])

    def read_until(token: str, timeout: float = 60) -> str:
        return drivers.read_pty_until(fd, token, timeout)

    try:
        read_until("(lldb)")
        os.write(fd, f"command script import {drivers.REPO / 'lldbinit' / 'sosext.py'}\n".encode())
        read_until("(lldb)")
        # Every segment's walk now takes a quarter of a second more: the walk runs for several
        # seconds (the compiled walk's segment loop, and the numpy one's when numba is missing).
        os.write(fd, b"script import time, sosext.clr.heap.heap as h, sosext.clr.heap.fastwalk as fw; "
                     b"f = h.ClrHeap._walk_bulk; h.ClrHeap._walk_bulk = lambda *a: (time.sleep(0.25), f(*a))[1]; "
                     b"g = fw._walk_bulk; fw._walk_bulk = lambda *a: (time.sleep(0.25), g(*a))[1]\n")
        read_until("(lldb)")
        os.write(fd, b"dumpheap -stat\n")
        before = read_until("Scanning heap:")
        assert "Scanning heap:" in before, before[-2000:]
        os.write(fd, b"\x03")
        after = read_until("(lldb)", 60)
        os.write(fd, b"soshelp\n")
        alive = read_until("sosext commands", 30)
        os.write(fd, b"quit\n")
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
        os.close(fd)
    assert "Total " not in after, after[-2000:]
    assert "error: interrupted" in after or "Interrupted" in after, after[-2000:]
    assert "sosext commands" in alive


def test_install_and_uninstall(tmp_path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gdbinit").write_text("set history save on\n")
    env = {**os.environ, "HOME": str(home)}
    run = lambda *a: subprocess.run([drivers.PYTHON, "-m", "sosext", *a], cwd=drivers.REPO, env=env,  # noqa: E731
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=True)
    run("install")
    run("install")  # idempotent
    lldbinit = (home / ".lldbinit").read_text().splitlines()
    gdbinit = (home / ".gdbinit").read_text().splitlines()
    from sosext.install import BEGIN, CREATED, END
    assert lldbinit == [BEGIN, CREATED, f'command script import "{drivers.REPO / "lldbinit" / "sosext.py"}"', END]
    assert gdbinit == ["set history save on", BEGIN, f"source {drivers.REPO / 'gdbinit' / 'sosext.py'}", END]
    if drivers.LLDB:
        out = subprocess.run([drivers.LLDB, "-b", "-o", "soshelp"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=60).stdout
        assert "sosext commands" in out
    if drivers.GDB:
        out = subprocess.run([drivers.GDB, "-batch", "-ex", "soshelp"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=60).stdout
        assert "sosext commands" in out
    run("uninstall")
    assert not (home / ".lldbinit").exists()  # install created it and nothing else is in it
    assert (home / ".gdbinit").read_text().splitlines() == ["set history save on"]
    shutil.rmtree(home)
