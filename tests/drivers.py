"""Run sosext commands in each host and get each command's output back.

Every host is driven the way a user would drive it: LLDB and GDB read commands on
stdin (LLDB's -b would stop at the first failing command, and bad input is part of what
we test), the CLI gets -c options. Each command's text is delimited by marker lines so a
test can take command N's output exactly.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTHON = "/usr/bin/python3"
LLDB = shutil.which("lldb-16") or shutil.which("lldb")
GDB = shutil.which("gdb")
GDB_MULTIARCH = shutil.which("gdb-multiarch")  # opens arm64 cores on x86-64 (tests/test_arm64.py)
MARK = "@@SOSEXT-MARK@@"
DOTNET_HOST = shutil.which("dotnet") and os.path.realpath(shutil.which("dotnet"))
# No banner lines and no progress lines in command output: progress shows after 2 s of a walk,
# so under load it made texts that hosts must print alike differ (a test passes env to see them).
QUIET = {"SOSEXT_QUIET": "1", "SOSEXT_PROGRESS_INTERVAL": "1e9"}


@dataclass
class Output:
    text: str  # everything the command printed (stdout and stderr), prompts removed

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()

    @property
    def errors(self) -> list[str]:
        return [ln for ln in self.lines if ln.startswith("error:")]

    def __contains__(self, item: str) -> bool:
        return item in self.text


def _split(raw: str, count: int) -> list[Output]:
    parts = raw.split(MARK + "\n")
    # parts[0] is the debugger's banner and set-up; then one part per command.
    outs = [Output(p) for p in parts[1:count + 1]]
    if len(outs) != count:
        raise AssertionError(f"expected {count} command outputs, got {len(outs)}; raw output:\n{raw[-4000:]}")
    return outs


def _clean_lldb(text: str) -> str:
    keep = [ln for ln in text.splitlines() if not ln.startswith("(lldb) ")]
    return "\n".join(keep) + ("\n" if keep else "")


def run_lldb(commands: list[str], *, pid: int | None = None, core: Path | None = None,
             exe: str | None = None, timeout: float = 600, env: dict | None = None) -> list[Output]:
    assert LLDB, "lldb-16 is not installed"
    args = [LLDB, "--no-lldbinit"]
    if pid is not None:
        args += ["-p", str(pid)]
    elif core is not None:
        args += ["--core", str(core)]
        args.append(exe or DOTNET_HOST)
    script = ["settings set auto-confirm true",
              f"command script import {REPO / 'lldbinit' / 'sosext.py'}",
              f"script print('{MARK}')"]
    for c in commands:
        script += [c, f"script print('{MARK}')"]
    if pid is not None:
        script.append("process detach")
    script.append("quit")
    proc = subprocess.run(args, input="\n".join(script) + "\n", stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout,
                          env={**os.environ, **QUIET, **(env or {})})
    return [Output(_clean_lldb(o.text)) for o in _split(proc.stdout, len(commands))]


def run_gdb(commands: list[str], *, pid: int | None = None, core: Path | None = None,
            exe: str | None = None, timeout: float = 600, env: dict | None = None,
            gdb: str | None = None) -> list[Output]:
    """``gdb``: another GDB binary (gdb-multiarch for arm64 cores)."""
    assert gdb or GDB, "gdb is not installed"
    args = [gdb or GDB, "-nx", "-q", "-batch"]
    pre = ["set pagination off", "set confirm off", f"source {REPO / 'gdbinit' / 'sosext.py'}"]
    if pid is not None:
        args += ["-p", str(pid)]
    elif core is not None:
        args += [exe or DOTNET_HOST, str(core)]
    for p in pre:
        args += ["-ex", p]
    args += ["-ex", f"echo {MARK}\\n"]
    for c in commands:
        args += ["-ex", c, "-ex", f"echo {MARK}\\n"]
    if pid is not None:
        args += ["-ex", "detach"]
    proc = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout, env={**os.environ, **QUIET, **(env or {})})
    return _split(proc.stdout, len(commands))


def run_lldb_launch(commands: list[str], argv: list[str], *, env: dict[str, str] | None = None,
                    stdout: Path, timeout: float = 600) -> list[Output]:
    """One batch in LLDB on a process it launches stopped at its first instruction, as SOS's
    test runner does (`process launch -s`): the runtime is not loaded yet when the commands
    start. ``argv[0]`` is the executable; the process's stdout goes to ``stdout``, its stdin is
    /dev/null; commands run synchronously (`continue` returns at the next stop). The process is
    killed at the end (by LLDB, then by its pid if it is still there)."""
    assert LLDB, "lldb-16 is not installed"
    script = ["settings set auto-confirm true", "script lldb.debugger.SetAsync(False)",
              f"target create {argv[0]}"]
    if env:
        script.append("settings set target.env-vars " + " ".join(f"{k}={v}" for k, v in env.items()))
    script += [f"process launch -s -i /dev/null -o {stdout} -- {' '.join(argv[1:])}",
               "script print('SOSEXT-PID', lldb.debugger.GetSelectedTarget().GetProcess().GetProcessID())",
               f"command script import {REPO / 'lldbinit' / 'sosext.py'}",
               f"script print('{MARK}')"]
    for c in commands:
        script += [c, f"script print('{MARK}')"]
    script += ["process kill", "quit"]
    proc = subprocess.run([LLDB, "--no-lldbinit"], input="\n".join(script) + "\n", stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout, env={**os.environ, **QUIET})
    _kill_launched(proc.stdout)
    return [Output(_clean_lldb(o.text)) for o in _split(proc.stdout, len(commands))]


def run_gdb_launch(commands: list[str], argv: list[str], *, env: dict[str, str] | None = None,
                   stdout: Path, timeout: float = 600) -> list[Output]:
    """As run_lldb_launch, in GDB: `starti` stops the process at its first instruction."""
    assert GDB, "gdb is not installed"
    args = [GDB, "-nx", "-q", "-batch"]
    pre = ["set pagination off", "set confirm off", f"file {argv[0]}",
           *[f"set environment {k}={v}" for k, v in (env or {}).items()],
           f"starti {' '.join(argv[1:])} < /dev/null > {stdout}",
           "python print('SOSEXT-PID', gdb.selected_inferior().pid)",
           f"source {REPO / 'gdbinit' / 'sosext.py'}", f"echo {MARK}\\n"]
    for c in pre:
        args += ["-ex", c]
    for c in commands:
        args += ["-ex", c, "-ex", f"echo {MARK}\\n"]
    args += ["-ex", "kill"]
    proc = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout, env={**os.environ, **QUIET})
    _kill_launched(proc.stdout)
    return _split(proc.stdout, len(commands))


def run_launch(host: str, commands: list[str], argv: list[str], **kw) -> list[Output]:
    """A launch batch in the debugger a host name starts with ("lldb…" or "gdb…")."""
    return (run_lldb_launch if host.startswith("lldb") else run_gdb_launch)(commands, argv, **kw)


def _kill_launched(text: str) -> None:
    import signal
    for line in text.splitlines():
        if line.startswith("SOSEXT-PID "):
            try:
                os.kill(int(line.split()[1]), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass  # LLDB's `process kill` ended it, as it should


def run_cli(commands: list[str], *, core: Path, timeout: float = 600, env: dict | None = None) -> list[Output]:
    args = [PYTHON, "-m", "sosext", "analyze", str(core), "--separator", MARK]
    for c in commands:
        args += ["-c", c]
    proc = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout, cwd=REPO, env={**os.environ, **QUIET, **(env or {})})
    return _split(MARK + "\n" + proc.stdout, len(commands))


def select_thread(host: str, tid: int) -> str:
    """The command that makes OS thread ``tid`` current in that host (for clrstack, dso …)."""
    if host.startswith("lldb"):
        return f"script lldb.debugger.GetSelectedTarget().GetProcess().SetSelectedThreadByID({tid})"
    if host.startswith("gdb"):
        return ("python [t.switch() for t in gdb.selected_inferior().threads() "
                f"if (t.ptid[1] or t.ptid[0]) == {tid}]")
    return f"setthread -t {tid}"


def run_in_host(host: str, commands: list[str], **kw) -> list[Output]:
    """One batch in the debugger a host name starts with ("lldb…", "gdb…", else the CLI)."""
    if host.startswith("lldb"):
        return run_lldb(commands, **kw)
    if host.startswith("gdb"):
        return run_gdb(commands, **kw)
    return run_cli(commands, **kw)


def run_in_hosts(debuggee, commands: list[str], hosts: list[str], core_dir: Path,
                 cores: dict[str, Path] | None = None) -> dict[str, list[Output]]:
    """Run one batch of commands in every host named "<debugger>-<target>": debugger lldb, gdb or
    cli, target live, heap (a with-heap core) or full (a full core). Cores are written once
    (or taken from ``cores``) and deleted afterwards unless they were given."""
    given = dict(cores or {})
    made: dict[str, Path] = {}

    def core(kind: str) -> Path:
        if kind in given:
            return given[kind]
        if kind not in made:
            made[kind] = debuggee.write_core(kind, core_dir / f"{kind}.core")
        return made[kind]

    # Dumps first: attaching a debugger stops and resumes the process, which should not
    # matter, but the cores then surely show the heap the truth describes.
    for host in hosts:
        if not host.endswith("-live"):
            core(host.split("-", 1)[1])
    exe = str(debuggee.executable)
    runners = {"lldb": run_lldb, "gdb": run_gdb}
    out: dict[str, list[Output]] = {}
    for host in hosts:
        debugger, target = host.split("-", 1)
        if target == "live":
            out[host] = runners[debugger](commands, pid=debuggee.pid)
        elif debugger == "cli":
            out[host] = run_cli(commands, core=core(target))
        else:
            out[host] = runners[debugger](commands, core=core(target), exe=exe)
    for path in made.values():
        path.unlink(missing_ok=True)
    return out


def read_pty_until(fd: int, token: str, timeout: float = 60) -> str:
    """Read a pty's output until ``token`` shows up (or ``timeout``); everything read, decoded."""
    import select
    import time
    buf = b""
    end = time.monotonic() + timeout
    while time.monotonic() < end and token.encode() not in buf:
        if select.select([fd], [], [], 0.2)[0]:
            try:
                buf += os.read(fd, 65536)
            except OSError:
                break
    return buf.decode(errors="replace")


def require_dotnet_and_lldb() -> None:
    """Skip, naming what is missing, unless a debuggee can be built and LLDB run on it."""
    import pytest
    from harness import dotnet_path
    if dotnet_path() is None:
        pytest.skip("dotnet is not on PATH: these tests need the .NET SDK to build the debuggee")
    if LLDB is None:
        pytest.skip("lldb-16 is not installed (apt-get install lldb-16 python3-lldb-16)")


def link_front_door(home: Path) -> dict[str, str]:
    """What the README's set-up does for a user who is not root, into a private ``home``: the
    ``sosext`` command in home/.local/bin and the .pth that lets /usr/bin/python3 import this
    checkout from anywhere (scripts/link_checkout.py --user). Returns the environment of that
    user: that HOME, that bin first on PATH, no PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONUSERBASE", "PYTHONNOUSERSITE")}
    bin_dir = home / ".local" / "bin"
    dotnet_dir = os.path.dirname(DOTNET_HOST or "/usr/bin/dotnet")
    env.update(HOME=str(home), PATH=f"{bin_dir}:/usr/bin:/bin:{dotnet_dir}")
    subprocess.run([PYTHON, str(REPO / "scripts" / "link_checkout.py"), "--user"], env=env, check=True,
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    return env


def runtime_dir(core: Path) -> str:
    """The directory the core's libcoreclr.so was loaded from. Tests that build a runtime inside
    the checkout (.NET 8/9 packs, the arm64 runtime) name it with SOSEXT_CLR_PATH, trusting it
    by that choice: a checkout cloned under /tmp, as CI clones it, is world-writable on the way
    and sosext rightly refuses a DAC found there by itself."""
    import sys
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from sosext.readers.location import find_runtime
    from sosext.targets.elfcore import CoreTarget
    return os.path.dirname(find_runtime(CoreTarget(str(core))).path)
