"""sosext inside GDB: real .NET processes and their cores, driven as a user drives GDB.

A tiny C# program keeps 1,234 instances of GdbItem alive and prints its pid and
typeof(GdbItem).TypeHandle.Value. GDB attaches to it or loads createdump cores of it
(with-heap and full, with and without the executable), and runs sosext's commands. The
output of `dumpheap -stat` must be the same text in GDB, LLDB and the CLI.
"""
from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
PYTHON = "/usr/bin/python3"
GDB = shutil.which("gdb")
LLDB = shutil.which("lldb-16")
DOTNET = shutil.which("dotnet")
GDBINIT = REPO / "gdbinit" / "sosext.py"
MARK = "@@SOSEXT-GDB-MARK@@"
ITEM_COUNT = 1234

if not GDB:
    pytest.skip("gdb is not installed", allow_module_level=True)
if not DOTNET:
    pytest.skip("dotnet is not on PATH: these tests build a C# debuggee", allow_module_level=True)

PROGRAM = """\
using System;
public sealed class GdbItem { public int Value; public GdbItem(int v) { Value = v; } }
public static class Program {
    static GdbItem[] s_items;
    public static void Main() {
        s_items = new GdbItem[1234];
        for (int i = 0; i < s_items.Length; i++) s_items[i] = new GdbItem(i);
        GC.Collect();
        Console.WriteLine("{\\"pid\\": " + Environment.ProcessId + ", \\"mt\\": \\"0x"
                          + typeof(GdbItem).TypeHandle.Value.ToString("x") + "\\"}");
        Console.Out.Flush();
        Console.ReadLine();
        GC.KeepAlive(s_items);
    }
}
"""

PROJECT = """\
<Project Sdk="Microsoft.NET.Sdk">
  <PropertyGroup>
    <OutputType>Exe</OutputType>
    <TargetFramework>net{major}.0</TargetFramework>
    <Nullable>disable</Nullable>
    <ImplicitUsings>disable</ImplicitUsings>
    <InvariantGlobalization>true</InvariantGlobalization>
  </PropertyGroup>
</Project>
"""

DOTNET_ENV = {"DOTNET_CLI_TELEMETRY_OPTOUT": "1", "DOTNET_NOLOGO": "1",
              "DOTNET_SKIP_FIRST_TIME_EXPERIENCE": "1"}


# -- the debuggee ----------------------------------------------------------------------------

@dataclass
class Debuggee:
    pid: int
    mt: int
    proc: subprocess.Popen

    @property
    def runtime_dir(self) -> Path:
        with open(f"/proc/{self.pid}/maps") as f:
            for line in f:
                if line.rstrip().endswith("/libcoreclr.so"):
                    return Path(line.split(None, 5)[5].strip()).parent
        raise AssertionError("libcoreclr.so is not mapped in the debuggee")

    def write_core(self, path: Path, kind: str) -> Path:
        createdump = self.runtime_dir / "createdump"
        subprocess.run([str(createdump), "-f", str(path), f"--{kind}", str(self.pid)], check=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        assert path.stat().st_size > 0
        return path


def _runtime_major() -> str:
    out = subprocess.run([DOTNET, "--list-runtimes"], stdout=subprocess.PIPE, text=True, check=True).stdout
    majors = re.findall(r"Microsoft\.NETCore\.App (\d+)\.", out)
    assert majors, f"no .NET runtime installed: {out}"
    return max(majors, key=int)


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("gdbitem")
    (src / "gdbitem.csproj").write_text(PROJECT.format(major=_runtime_major()))
    (src / "Program.cs").write_text(PROGRAM)
    build = subprocess.run([DOTNET, "build", "-c", "Release", "-o", str(src / "out")], cwd=src,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300,
                           env={**os.environ, **DOTNET_ENV})
    assert build.returncode == 0, build.stdout[-4000:]
    return src / "out" / "gdbitem.dll"


@contextmanager
def started(program: Path) -> Iterator[Debuggee]:
    """The program running and waiting on stdin; killed (by pid) on the way out."""
    # No tiered compilation: its background worker thread comes and goes after start-up, and the
    # live tests compare clrthreads between two attaches made seconds apart.
    proc = subprocess.Popen([DOTNET, str(program)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **DOTNET_ENV, "DOTNET_TieredCompilation": "0"})
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        truth = json.loads(line)
        assert truth["pid"] == proc.pid
        yield Debuggee(pid=proc.pid, mt=int(truth["mt"], 16), proc=proc)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def debuggee(program: Path) -> Iterator[Debuggee]:
    with started(program) as d:
        yield d


@pytest.fixture(scope="module")
def cores(debuggee: Debuggee, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A with-heap and a full core, written before any debugger attaches in this module."""
    d = tmp_path_factory.mktemp("cores")
    return {kind: debuggee.write_core(d / f"core.{kind}", kind) for kind in ("withheap", "full")}


# -- driving the hosts ------------------------------------------------------------------------

def run_gdb(commands: list[str], *, pid: int | None = None, core: Path | None = None,
            exe: str | None = None, timeout: float = 60, env: dict | None = None,
            head: list[str] | None = None) -> list[str]:
    """Each command's output (stdout and stderr as GDB interleaves them), in batch mode."""
    args = [GDB, "-nx", "-q", "-batch"]
    if pid is not None:
        args += ["-p", str(pid)]
    elif exe is not None:
        args += [exe] + ([str(core)] if core else [])
    elif core is not None:
        args += ["-ex", f"core-file {core}"]
    args += ["-ex", "set confirm off", "-ex", f"source {GDBINIT}", "-ex", f"echo {MARK}\\n"]
    for c in commands:
        args += ["-ex", c, "-ex", f"echo {MARK}\\n"]
    proc = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})
    if head is not None:
        head.append(proc.stdout.split(MARK + "\n", 1)[0])  # what loading printed
    return _split(proc.stdout, len(commands))


def run_lldb(commands: list[str], *, pid: int | None = None, core: Path | None = None,
             timeout: float = 60, env: dict | None = None, head: list[str] | None = None) -> list[str]:
    assert LLDB
    args = [LLDB, "--no-lldbinit"] + (["-p", str(pid)] if pid is not None else
                                      ["--core", str(core), os.path.realpath(DOTNET)] if core else [])
    script = ["settings set auto-confirm true", f"command script import {REPO / 'lldbinit' / 'sosext.py'}",
              f"script print('{MARK}')"]
    for c in commands:
        script += [c, f"script print('{MARK}')"]
    script += (["process detach"] if pid is not None else []) + ["quit"]
    proc = subprocess.run(args, input="\n".join(script) + "\n", stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout, env={**os.environ, **(env or {})})
    if head is not None:
        head.append(proc.stdout.split(MARK + "\n", 1)[0])
    return _split(proc.stdout, len(commands))


def run_cli(command: str, core: Path, timeout: float = 60) -> str:
    proc = subprocess.run([PYTHON, "-m", "sosext", "analyze", str(core), "-c", command], cwd=REPO,
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout)
    return proc.stdout


def run_cli_each(commands: list[str], core: Path, timeout: float = 120) -> list[str]:
    """Each command's output from one CLI run; an unknown command separates them."""
    separator = "soshelp @@no-such-command@@"
    args = [PYTHON, "-m", "sosext", "analyze", str(core)]
    for c in commands:
        args += ["-c", c, "-c", separator]
    proc = subprocess.run(args, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    parts = re.split(r"^error: unknown command: @@no-such-command@@\n", proc.stdout, flags=re.M)
    assert len(parts) >= len(commands), proc.stdout[-4000:]
    return parts[:len(commands)]


def strip_lldb(text: str) -> str:
    """LLDB's echo of each command ("(lldb) dumpheap") is not the command's output."""
    return "".join(ln for ln in text.splitlines(keepends=True) if not ln.startswith("(lldb) "))


def _split(raw: str, count: int) -> list[str]:
    parts = raw.split(MARK + "\n")
    assert len(parts) >= count + 1, f"expected {count} command outputs; raw output:\n{raw[-4000:]}"
    return parts[1:count + 1]


def stat_block(text: str) -> list[str]:
    """dumpheap -stat's lines from "Statistics:" to "Total ...", nothing of the debugger's."""
    lines = [ln.rstrip() for ln in text.splitlines()]
    start = next((i for i, ln in enumerate(lines) if ln.endswith("Statistics:")), None)
    assert start is not None, f"no statistics in:\n{text[-3000:]}"
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("Total "))
    return ["Statistics:"] + lines[start + 1:end + 1]


def item_row(text: str) -> list[str]:
    rows = [ln.split() for ln in stat_block(text) if ln.split()[-1:] == ["GdbItem"]]
    assert len(rows) == 1, f"expected one GdbItem row in:\n{text[-3000:]}"
    return rows[0]


def assert_items(text: str, mt: int) -> None:
    row = item_row(text)
    assert row[0] == f"{mt:012x}", row
    assert row[1] == f"{ITEM_COUNT:,}", row


def errors_in(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith("error:")]


# -- tests ------------------------------------------------------------------------------------

def test_dumpheap_stat_live(debuggee: Debuggee) -> None:
    out, = run_gdb(["dumpheap -stat"], pid=debuggee.pid)
    assert_items(out, debuggee.mt)
    assert not errors_in(out), out[-2000:]


@pytest.mark.parametrize("kind", ["withheap", "full"])
def test_dumpheap_stat_core(cores: dict[str, Path], debuggee: Debuggee, kind: str) -> None:
    out, = run_gdb(["dumpheap -stat"], exe=os.path.realpath(DOTNET), core=cores[kind])
    assert_items(out, debuggee.mt)


def test_core_without_executable(cores: dict[str, Path], debuggee: Debuggee) -> None:
    # GDB finds no libraries (no executable, and createdump's NT_FILE puzzles it), but
    # sosext reads the core and its NT_FILE itself.
    probe = ("python import sosext.hosts.gdb_host as h; t = h.current_target(); "
             "print('REGS', all(t.gdb_registers(x.tid)[k] == v for x in t.threads() "
             "for k, v in t.core.registers(x.tid).items() if k in t.gdb_registers(x.tid)), len(t.threads()))")
    out, regs = run_gdb(["dumpheap -stat", probe], core=cores["withheap"])
    assert_items(out, debuggee.mt)
    assert re.search(r"^REGS True [1-9]", regs, re.M), regs  # GDB's frame-0 registers = NT_PRSTATUS


def test_same_text_in_gdb_lldb_and_cli(cores: dict[str, Path], debuggee: Debuggee) -> None:
    core = cores["withheap"]
    gdb_core, = run_gdb(["dumpheap -stat"], exe=os.path.realpath(DOTNET), core=core)
    cli_core = run_cli("dumpheap -stat", core)
    gdb_live, = run_gdb(["dumpheap -stat"], pid=debuggee.pid)
    assert stat_block(gdb_core) == stat_block(cli_core)
    if LLDB:
        lldb_core, = run_lldb(["dumpheap -stat"], core=core)
        lldb_live, = run_lldb(["dumpheap -stat"], pid=debuggee.pid)
        assert stat_block(gdb_core) == stat_block(lldb_core)
        # The idle debuggee's heap does not change between two attaches.
        assert stat_block(gdb_live) == stat_block(lldb_live)
    assert item_row(gdb_live) == item_row(gdb_core)


def every_command(debuggee: Debuggee, obj: int) -> list[str]:
    """Each registered command once without arguments (usage errors must match too), plus
    invocations with an object of the debuggee for the commands that take one."""
    from sosext.commands import load_all
    from sosext.commands.base import primary_commands
    load_all()
    names = sorted(c.names[0] for c in primary_commands())
    with_object = {"dumpheap": [f"dumpheap -mt {debuggee.mt:x}", "dumpheap -stat --json"],
                   "gcwhere": [f"gcwhere {obj:x}"], "gcroot": [f"gcroot {obj:x}"],
                   "objsize": [f"objsize {obj:x}"], "dumpobj": [f"dumpobj {obj:x}"],
                   "dumpmt": [f"dumpmt {debuggee.mt:x}"]}
    # `report` and `dumplog` write files (report.html, StressLog.txt): test_report and test_parity_log
    # run them in each host.
    writes_files = {"sosext", "report", "dumplog"}
    return [n for n in names if n not in writes_files] + [c for n in names for c in with_object.get(n, [])]


def comparable(command: str, gdb_text: str) -> str:
    """GDB's text as the other hosts print it.

    The GDB host registers `sosext core` (sosext/commands/hostcmds.py) itself as long as
    load_all() does not: then only GDB's soshelp lists it."""
    from sosext.commands import FAMILIES
    if command != "soshelp" or "hostcmds" in FAMILIES:
        return gdb_text
    return "".join(ln for ln in gdb_text.splitlines(keepends=True) if not ln.startswith("  sosext "))


# The CLI numbers threads from 0, as dotnet-dump does; GDB and LLDB by their own thread numbers,
# from 1 (docs/sos-users.md). Those numbers, and only those, are moved up by one to compare.
_CLI_THREAD_NUMBERS = [
    re.compile(r"^(Thread:\s+)(\d+)( \(OS thread id )", re.M),                 # clrma
    re.compile(r"(OS Thread Id: 0x[0-9a-f]+ \()(\d+)(\))"),                     # clrstack, dso, dumpstack, eestack
    re.compile(r"^(Thread\s+)(\d+)($)", re.M),                                    # eestack
    re.compile(r"^(\s*)(\d+)(\s+\d+\s+[0-9a-f]+ [0-9A-F]{16} )", re.M),          # clrthreads' DBG column
    re.compile(r"^([ *])(\d+)( 0x[0-9A-F]+ \(\d+\))", re.M),                       # threads
]


def cli_as_gdb(text: str) -> str:
    for pattern in _CLI_THREAD_NUMBERS:
        text = pattern.sub(lambda m: f"{m.group(1)}{int(m.group(2)) + 1}{m.group(3)}", text)
    return text


def without_time_taken(text: str) -> str:
    """heapsnapshot's JSON records when it was taken: two runs differ there alone."""
    return re.sub(r'"taken": [0-9.]+', '"taken": T', text)


def an_item(text: str) -> int:
    return int(text.split()[0], 16)


def test_every_command_same_text_in_gdb_and_cli(cores: dict[str, Path], debuggee: Debuggee) -> None:
    core = cores["withheap"]
    obj = an_item(run_gdb([f"dumpheap -mt {debuggee.mt:x} -short"], core=core)[0])
    commands = every_command(debuggee, obj)
    gdb_outs = run_gdb(commands, exe=os.path.realpath(DOTNET), core=core)
    cli_outs = run_cli_each(commands, core)
    for command, in_gdb, in_cli in zip(commands, gdb_outs, cli_outs):
        assert comparable(command, in_gdb) == cli_as_gdb(in_cli), f"{command}: GDB and CLI differ"
        assert "internal error" not in in_gdb and "Traceback" not in in_gdb, f"{command}: {in_gdb[-2000:]}"


@pytest.mark.skipif(not LLDB, reason="lldb-16 is not installed")
def test_every_command_same_text_in_gdb_and_lldb_live(debuggee: Debuggee) -> None:
    obj = an_item(run_gdb([f"dumpheap -mt {debuggee.mt:x} -short"], pid=debuggee.pid)[0])
    commands = every_command(debuggee, obj)
    gdb_outs = run_gdb(commands, pid=debuggee.pid)
    lldb_outs = [strip_lldb(o) for o in run_lldb(commands, pid=debuggee.pid)]
    for command, in_gdb, in_lldb in zip(commands, gdb_outs, lldb_outs):
        assert without_time_taken(comparable(command, in_gdb)) == without_time_taken(in_lldb), \
            f"{command}: GDB and LLDB differ"
        assert "internal error" not in in_gdb and "Traceback" not in in_gdb, f"{command}: {in_gdb[-2000:]}"


def test_help_and_completion() -> None:
    help_text, complete, complete_sos, soshelp = run_gdb(
        ["help dumpheap", "complete dumpheap -st", "complete sos dumph", "soshelp"])
    lines = help_text.splitlines()
    assert lines[0].startswith("Display") and "-stat" in help_text and "Options:" in help_text
    assert "dumpheap -stat" in complete.splitlines()
    assert all(ln.startswith("dumpheap -st") for ln in complete.splitlines())
    assert "sos dumpheap" in complete_sos.splitlines()
    assert "dumpheap" in soshelp and not errors_in(soshelp)  # needs no process


def test_complete_from_python() -> None:
    out, = run_gdb(["python print(repr(gdb.execute('complete dumpheap -st', to_string=True)))"])
    assert "dumpheap -stat" in out


def test_bad_input_then_next_command_runs(cores: dict[str, Path], debuggee: Debuggee) -> None:
    bad, missing, good = run_gdb(["dumpheap -nosuchoption", "dumpheap -mt", "dumpheap -stat"],
                                 core=cores["withheap"])
    for out in (bad, missing):
        errs = errors_in(out)
        assert len(errs) == 1 and len(out.strip().splitlines()) == 1, out
        assert "Traceback" not in out
    assert "-nosuchoption" in bad
    assert_items(good, debuggee.mt)


def test_no_inferior() -> None:
    out, alive = run_gdb(["dumpheap -stat", "echo ALIVE\\n"])
    assert out.strip() == "error: no process: attach to a process (attach PID) or load a core (gdb EXE CORE)"
    assert alive.strip() == "ALIVE"


def test_running_inferior_is_refused(debuggee: Debuggee) -> None:
    _cont, out = run_gdb(["continue &", "dumpheap -stat"], pid=debuggee.pid)
    errs = errors_in(out)
    assert len(errs) == 1 and "running" in errs[0] and "interrupt" in errs[0], out
    assert debuggee.proc.poll() is None


def test_selection_is_kept_and_generation_moves(debuggee: Debuggee) -> None:
    show = "python print('SEL', gdb.selected_thread().num, gdb.selected_frame().level())"
    gen = "python import sosext.targets.gdb as g; print('GEN', g.generation())"
    regs = ("python import sosext.hosts.gdb_host as h; t = h.current_target(); "
            "r = [t.registers(x.tid) for x in t.threads()]; print('REGS', len(r), all('rip' in x for x in r))")
    outs = run_gdb(["thread 2", "frame 1", show, "dumpheap -stat", regs, show, gen, "detach",
                    "dumpheap -stat", f"attach {debuggee.pid}", gen, "dumpheap -stat"], pid=debuggee.pid)
    assert "SEL 2 1" in outs[2] and "SEL 2 1" in outs[5]
    assert re.search(r"REGS [1-9]\d* True", outs[4]), outs[4]
    assert_items(outs[3], debuggee.mt)
    assert errors_in(outs[8]) == ["error: no process: attach to a process (attach PID) or load a core (gdb EXE CORE)"]
    gen_before, gen_after = (int(re.search(r"GEN (\d+)", outs[i]).group(1)) for i in (6, 10))
    assert gen_after > gen_before
    assert_items(outs[11], debuggee.mt)


def test_gdb_memory_reads_match_procfs(debuggee: Debuggee) -> None:
    """The remote-target path (no /proc): Inferior.read_memory with partial reads, modules from
    `info proc mappings` and from `info sharedlibrary`; dumpheap through it gives the same text."""
    script = """
import gdb
from sosext.targets.gdb import GdbTarget
from sosext.targets.procfs import read_maps
from sosext.session import Session
from sosext.hosts.common import execute
fast, slow = GdbTarget(), GdbTarget(use_procfs=False)
assert fast.proc_mem is not None and slow.proc_mem is None
assert [(m.path, m.base, m.size) for m in fast.modules()] == [(m.path, m.base, m.size) for m in slow.modules()]
clr = fast.find_module("libcoreclr.so")
assert slow.read_partial(clr.base, 1 << 20) == fast.read_partial(clr.base, 1 << 20)
solib = {m.name: m.base for m in slow._modules_from_solibs()}
assert solib["libcoreclr.so"] == clr.base, (hex(solib["libcoreclr.so"]), hex(clr.base))
maps = read_maps(fast.pid)
gap = next(m for m, n in zip(maps, maps[1:]) if m[1] < n[0] and m[2].startswith("r"))
for start in (gap[1] - 100, gap[1] - 5000, gap[1] - 3 * 4096 - 7):
    got = slow.read_partial(start, 3 * 65536)
    assert len(got) == gap[1] - start and got == fast.read_partial(start, 3 * 65536), (hex(start), len(got))
assert slow.read_partial(gap[1], 16) == b""
out = []
execute(Session(lambda: slow), "dumpheap", "-stat", out.append, out.append)
print("SLOW-BEGIN")
print("\\n".join(out))
print("SLOW-END")
"""
    path = Path(f"/tmp/sosext-gdb-reads-{os.getpid()}.py")
    path.write_text(script)
    try:
        fast_out, slow_out = run_gdb(["dumpheap -stat", f"source {path}"], pid=debuggee.pid)
    finally:
        path.unlink()
    assert "Traceback" not in slow_out and "Error" not in slow_out, slow_out[-3000:]
    slow_text = slow_out.split("SLOW-BEGIN\n", 1)[1].split("SLOW-END", 1)[0]
    assert stat_block(slow_text) == stat_block(fast_out)


def test_sosext_core_names_the_core(cores: dict[str, Path], debuggee: Debuggee, program: Path,
                                    tmp_path: Path) -> None:
    with started(program) as other:
        other_core = other.write_core(tmp_path / "other.core", "withheap")
    shown, bad, notcore, named, out, wrong, wrong_out, cleared, again = run_gdb(
        ["sosext core", "sosext core /no/such/core", f"sosext core {GDBINIT}",
         f"sosext core {cores['full']}", "dumpheap -stat", f"sosext core {other_core}", "dumpheap -stat",
         "sosext core -clear", "dumpheap -stat"], core=cores["withheap"])
    assert not errors_in(shown)
    assert len(errors_in(bad)) == 1 and len(errors_in(notcore)) == 1
    assert str(cores["full"]) in named
    assert_items(out, debuggee.mt)
    assert not errors_in(wrong)  # any core may be named; using one of another process fails
    assert errors_in(wrong_out) == [f"error: core file {other_core} is of process {other.pid}, but GDB's core "
                                    f"is of process {debuggee.pid}; name the right one with: sosext core <path>"]
    assert not errors_in(cleared)
    assert_items(again, debuggee.mt)


# -- Ctrl-C and the pager need a terminal or a signal ---------------------------------------

class Pty:
    """GDB on a pseudo-terminal, so that its pager is active as for a user."""

    def __init__(self, args: list[str]) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: become GDB
            os.environ["TERM"] = "dumb"
            os.execv(args[0], args)
        self.seen = ""

    def expect(self, text: str, timeout: float = 30) -> str:
        """Everything up to and including ``text``; fails after ``timeout`` (a hang)."""
        end = time.monotonic() + timeout
        while text not in self.seen:
            left = end - time.monotonic()
            assert left > 0, f"timed out waiting for {text!r}; got:\n{self.seen[-3000:]}"
            ready, _, _ = select.select([self.fd], [], [], min(left, 0.5))
            if ready:
                try:
                    data = os.read(self.fd, 65536)
                except OSError:
                    data = b""
                assert data, f"GDB ended while waiting for {text!r}; got:\n{self.seen[-3000:]}"
                self.seen += data.decode(errors="replace").replace("\r", "")
        head, _, self.seen = self.seen.partition(text)
        return head + text

    def send(self, line: str) -> None:
        os.write(self.fd, line.encode())

    def close(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)
        os.close(self.fd)


def test_pagination_quit_and_continue(cores: dict[str, Path]) -> None:
    prompt, pager = "(gdb) ", "--Type <RET> for more, q to quit, c to continue without paging--"
    term = Pty([GDB, "-nx", "-q", "-ex", "set style enabled off", "-ex", f"source {GDBINIT}",
                "-ex", f"core-file {cores['withheap']}"])
    try:
        term.expect(prompt)
        for line in ("set height 10\n", "set pagination on\n"):
            term.send(line)
            term.expect(prompt)
        term.send("dumpheap -stat\n")
        term.expect(pager)
        term.send("q\n")
        after_quit = term.expect(prompt)
        assert "Traceback" not in after_quit and "error" not in after_quit, after_quit
        term.send("dumpheap -stat\n")
        term.expect(pager)
        term.send("c\n")
        rest = term.expect(prompt)
        assert re.search(r"^Total [\d,]+ objects", rest, re.M), rest[-2000:]
        term.send("echo ALIVE\\n\n")
        assert "ALIVE" in term.expect(prompt)
    finally:
        term.close()


def test_pagination_with_piped_stdin_does_not_hang(cores: dict[str, Path]) -> None:
    # Without a terminal GDB's pager takes its answers from the next input lines; it must end.
    script = "set height 10\nset pagination on\ndumpheap -stat\nsoshelp\n\n\nc\necho ALIVE\\n\nquit\n"
    proc = subprocess.run([GDB, "-nx", "-q", "-ex", f"source {GDBINIT}", "-ex", f"core-file {cores['withheap']}"],
                          input=script, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    assert "Traceback" not in proc.stdout and "internal error" not in proc.stdout, proc.stdout[-3000:]
    assert "Statistics:" in proc.stdout


# Where the slowed-down reads (and so the KeyboardInterrupt) happen: inside the GDB target's
# own reads, or around them, in the frames of the DAC's ctypes callbacks and of the heap walk.
SLOWED = {"inside": ("sosext.targets.elfcore", "ElfCore"), "around": ("sosext.targets.gdb", "GdbTarget")}


@pytest.mark.parametrize("where", sorted(SLOWED))
def test_ctrl_c_interrupts_a_command(cores: dict[str, Path], where: str) -> None:
    """SIGINT to GDB while a command runs: `error: interrupted`, and GDB goes on."""
    module, cls = SLOWED[where]
    # Slowed until the Ctrl-C is recorded: after it, the command's remaining reads (it stops at
    # its next check, once the DAC has returned) go at full speed, as they would unslowed.
    slow_reads = (f"python import time, {module} as m, sosext.interrupts as i; f = m.{cls}.read_partial; "
                  f"m.{cls}.read_partial = lambda self, a, n: (time.sleep(0 if i.recorded() else 0.02), "
                  "f(self, a, n))[1]; print('SLOW-READS-ON', flush=True)")
    args = [GDB, "-nx", "-q", "-batch", "-ex", f"core-file {cores['withheap']}", "-ex", f"source {GDBINIT}",
            "-ex", slow_reads, "-ex", "dumpheap -stat", "-ex", "echo ALIVE\\n"]
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        seen = b""
        deadline = time.monotonic() + 30
        while b"SLOW-READS-ON" not in seen:
            assert time.monotonic() < deadline, seen.decode(errors="replace")
            chunk = os.read(proc.stdout.fileno(), 65536)  # type: ignore[union-attr]
            assert chunk, seen.decode(errors="replace")
            seen += chunk
        time.sleep(1.0)  # well inside the slowed-down command
        os.kill(proc.pid, signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    text = (seen + rest).decode(errors="replace")
    after = text.split("SLOW-READS-ON", 1)[1]
    assert "error: interrupted" in after, after[-3000:]
    assert "Traceback" not in after and "Exception ignored" not in after, after[-3000:]
    assert "Total" not in after  # no table from an interrupted walk
    assert "ALIVE" in after.split("error: interrupted", 1)[1]


# -- SOS habits, banners, completion and hints (issue 18, issue 13 point 2) ------------------

def _a_placeholder() -> tuple[str, str]:
    """An SOS name sosext has no command for yet, and the one line it answers with."""
    from sosext.commands import load_all
    from sosext.commands.base import lookup
    from sosext.commands.sos_names import SOS_NAMES, _Placeholder
    load_all()
    for name in sorted(SOS_NAMES):
        cmd = lookup(name)
        if cmd is not None and issubclass(cmd, _Placeholder):
            try:
                cmd().run(None, cmd.parse([]))
            except Exception as e:  # noqa: BLE001 - the placeholder's one line
                return name, f"error: {e}"
    pytest.skip("every SOS name is a sosext command now: no placeholder left to test")


def first_item(cores: dict[str, Path], debuggee: Debuggee) -> int:
    short, = run_gdb([f"dumpheap -mt {debuggee.mt:x} -short"], core=cores["withheap"])
    return int(next(w for w in short.split() if re.fullmatch(r"[0-9a-f]{8,16}", w)), 16)


def test_gdb_bang_do_and_sos_names(cores: dict[str, Path], debuggee: Debuggee) -> None:
    item = first_item(cores, debuggee)
    missing, placeholder = _a_placeholder()
    bang, shell, do_obj, do_down, stack, sos_stack, ext = run_gdb(
        ["!dumpheap -stat", "!echo shell-still-works", f"do {item:x}", "do", missing, f"sos {missing}",
         "ext dumpheap -stat"], exe=os.path.realpath(DOTNET), core=cores["withheap"])
    assert_items(bang, debuggee.mt)  # `!` reaches sosext as in WinDbg
    assert_items(ext, debuggee.mt)
    assert shell.strip() == "shell-still-works"  # anything else after `!` is still the shell
    assert re.search(rf"^MethodTable: 0*{debuggee.mt:x}$", do_obj, re.M), do_obj
    assert re.search(r"^Name: +GdbItem$", do_obj, re.M), do_obj
    assert "MethodTable" not in do_down and not errors_in(do_down)  # plain `do` is GDB's down
    assert stack.strip() == placeholder and sos_stack.strip() == placeholder


def test_gdb_clashes_are_one_line_at_load() -> None:
    head: list[str] = []
    out, = run_gdb(["sos u 0"], env={"SOSEXT_QUIET": "0"}, head=head)
    lines = head[0].splitlines()
    assert lines[1:] == ["sosext: GDB keeps its own u; run sosext's as: sos <name> (e.g. sos u)"], head[0]
    assert lines[0].startswith("sosext ") and "loaded in GDB" in lines[0], head[0]
    quiet: list[str] = []
    run_gdb(["sos u 0"], env={"SOSEXT_QUIET": "1"}, head=quiet)
    assert quiet[0] == "", quiet[0]  # SOSEXT_QUIET=1: not a line at load
    # `sos u` reaches sosext's clru, which needs a process (here there is none)
    assert out.strip() == "error: no process: attach to a process (attach PID) or load a core (gdb EXE CORE)"


def test_gdb_completion_of_bang_do_and_sos() -> None:
    bang, do, sos_names = run_gdb(["complete !dumpheap -st", "complete do -nof", "complete sos dumpst"])
    assert set(bang.split("\n")) - {""} == {"!dumpheap -stat", "!dumpheap -strings"}, bang
    assert do.strip() == "do -nofields", do
    assert sos_names.split() == ["sos", "dumpstack", "sos", "dumpstackobjects"], sos_names


def test_gdb_banner_and_quiet(cores: dict[str, Path]) -> None:
    loud: list[str] = []
    first, second = run_gdb(["dumpheap -stat", "dumpheap -stat"], env={"SOSEXT_QUIET": "0"},
                            exe=os.path.realpath(DOTNET), core=cores["withheap"], head=loud)
    from sosext import __version__
    assert f"sosext {__version__} loaded in GDB: SOS-style .NET commands; type soshelp" in loud[0]
    notes = [ln for ln in first.splitlines() if ln.startswith("sosext: .NET runtime ")]
    assert len(notes) == 1 and re.fullmatch(rf"sosext: \.NET runtime {_runtime_major()}\.\S+, "
                                            r"workstation GC \((regions|segments)\)", notes[0]), first
    assert "sosext: .NET runtime" not in second  # once per runtime
    quiet: list[str] = []
    out, = run_gdb(["dumpheap -stat"], env={"SOSEXT_QUIET": "1"}, exe=os.path.realpath(DOTNET),
                   core=cores["withheap"], head=quiet)
    assert "loaded in GDB" not in quiet[0] and "sosext: .NET" not in out
    piped: list[str] = []
    out, = run_gdb(["dumpheap -stat"], env={"SOSEXT_QUIET": ""}, exe=os.path.realpath(DOTNET),
                   core=cores["withheap"], head=piped)
    assert "loaded in GDB" in piped[0] and "sosext: .NET runtime" not in out  # not a terminal


def test_lldb_sos_names_never_run_another_command(cores: dict[str, Path], debuggee: Debuggee) -> None:
    if not LLDB:
        pytest.skip("lldb-16 is not installed")
    missing, placeholder = _a_placeholder()
    stack, threads, clrthreads, sos, ext, placeholder_u = (strip_lldb(o) for o in run_lldb(
        ["dumpstack", "threads", "clrthreads", "sos dumpheap -stat", f"ext {missing}", "u 0"], core=cores["full"]))
    # LLDB's prefix matching used to run dumpstackobjects for dumpstack: now it is SOS's dumpstack.
    assert "Child-SP" in stack and "SP/REG" not in stack, stack
    # `threads` is SOS's managed command on Linux (as `sos threads`), not WinDbg's clrthreads.
    assert "ThreadCount:" in clrthreads and "ThreadCount:" not in threads
    listed = threads.splitlines()
    assert listed and all(re.fullmatch(r"[* ]\d+ 0x[0-9A-F]{4,} \(\d+\)", ln) for ln in listed), threads
    assert_items(sos, debuggee.mt)
    assert ext.strip() == placeholder
    assert placeholder_u.strip() == "error: 0x0 is not a MethodDesc nor an address in managed code"


def test_lldb_help_reads_well_and_names_complete() -> None:
    if not LLDB:
        pytest.skip("lldb-16 is not installed")
    probe = ("script ci = lldb.debugger.GetCommandInterpreter(); m = lldb.SBStringList(); "
             "ci.HandleCompletion('dumpst', 6, 6, -1, m); "
             "print('NAMES', sorted(m.GetStringAtIndex(i) for i in range(1, m.GetSize())))")
    help_text, names = (strip_lldb(o) for o in run_lldb(["help dumpheap", probe]))
    lines = help_text.splitlines()
    syntax = lines.index("Syntax: dumpheap")
    assert lines[syntax + 1].startswith("Usage: dumpheap [options]"), help_text
    assert all(len(ln) <= 80 for ln in lines), [ln for ln in lines if len(ln) > 80]
    assert "  -stat                 show only the statistics table" in lines
    assert "NAMES ['dumpstack', 'dumpstackobjects']" in names, names


def test_dumpheap_stat_hint_on_a_terminal_only(cores: dict[str, Path], debuggee: Debuggee) -> None:
    hints = {"SOSEXT_HINTS": "1"}  # what a terminal gets; tests read through pipes
    in_gdb, as_json, with_mt = run_gdb(["dumpheap -stat", "dumpheap -stat --json", f"dumpheap -stat -mt {debuggee.mt:x}"],
                                       exe=os.path.realpath(DOTNET), core=cores["withheap"], env=hints)
    cli = subprocess.run([PYTHON, "-m", "sosext", "analyze", str(cores["withheap"]), "-c", "dumpheap -stat"],
                         cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=120, env={**os.environ, **hints}).stdout
    for text in (in_gdb, cli):
        rows = [ln.split() for ln in stat_block(text)[2:-1]]
        biggest = next(r for r in reversed(rows) if r[3:] != ["Free"])
        lines = text.rstrip("\n").splitlines()
        assert lines[-1] == (f"Next: dumpheap -mt {int(biggest[0], 16):x} lists the biggest type's objects; "
                             "gcroot <address> shows what holds one"), lines[-3:]
    assert json.loads(as_json[as_json.index("{"):])["command"] == "dumpheap"  # no hint inside JSON
    assert "Next:" not in with_mt  # the type is already chosen
    piped, = run_gdb(["dumpheap -stat"], exe=os.path.realpath(DOTNET), core=cores["withheap"])
    assert "Next:" not in piped


def test_gdb_completes_type_names_and_mts_already_read(cores: dict[str, Path], debuggee: Debuggee) -> None:
    mt = f"{debuggee.mt:x}"
    built = "python import sosext.hosts.gdb_host as h; print('BUILT', len(h.session().built_runtimes()))"
    before, none_built, _stat, types, mts, name2ee = run_gdb(
        ["complete dumpheap -type GdbI", built, "dumpheap -stat", "complete dumpheap -type GdbI",
         f"complete dumpheap -mt {mt[:-3]}", "complete name2ee gdbitem.dll GdbI"],
        exe=os.path.realpath(DOTNET), core=cores["withheap"])
    assert before.strip() == "" and none_built.strip() == "BUILT 0"  # completing walked nothing
    assert types.splitlines() == ["dumpheap -type GdbItem", "dumpheap -type GdbItem[]"]
    assert f"dumpheap -mt {mt}" in mts.splitlines()
    assert name2ee.splitlines() == ["name2ee gdbitem.dll GdbItem", "name2ee gdbitem.dll GdbItem[]"]


def test_lldb_banner_and_quiet(cores: dict[str, Path]) -> None:
    if not LLDB:
        pytest.skip("lldb-16 is not installed")
    from sosext import __version__
    loud: list[str] = []
    first, second = (strip_lldb(o) for o in run_lldb(["dumpheap -stat", "dumpheap -stat"], core=cores["full"],
                                                      env={"SOSEXT_QUIET": "0"}, head=loud))
    assert f"sosext {__version__} loaded in LLDB: SOS-style .NET commands; type soshelp" in loud[0]
    notes = [ln for ln in first.splitlines() if ln.startswith("sosext: .NET runtime ")]
    assert len(notes) == 1 and re.fullmatch(rf"sosext: \.NET runtime {_runtime_major()}\.\S+, "
                                            r"workstation GC \((regions|segments)\)", notes[0]), first
    assert "sosext: .NET runtime" not in second
    quiet: list[str] = []
    out, = run_lldb(["dumpheap -stat"], core=cores["full"], env={"SOSEXT_QUIET": "1"}, head=quiet)
    assert "loaded in LLDB" not in quiet[0] and "sosext: .NET" not in out
