"""Live processes, Ctrl-C and long listings.

- A live process is read only while it is stopped: a running one gets one error line; after
  it ran (``process continue``, more allocations, ``process interrupt``) the answers are new,
  not cached; a process killed while a command reads it ends the command with one line
  saying the output is incomplete.
- Ctrl-C stops every long command within a second or two in LLDB, GDB and the CLI, and the
  same session then answers correctly.
- Listings stream: their extra memory over ``-stat`` stays small.

The truth comes from the debuggee: the bigheap scenario's counts, and its `alloc N` command,
which answers with the MethodTable and the exact number of AllocItem instances alive.
"""
from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

import drivers
import sosparse
from harness import Debuggee, dotnet_path

pytestmark = pytest.mark.slow

needs_dotnet = pytest.mark.skipif(dotnet_path() is None, reason="dotnet is not on PATH: no debuggee can be built")
needs_lldb = pytest.mark.skipif(drivers.LLDB is None, reason="lldb-16 is not installed")
needs_gdb = pytest.mark.skipif(drivers.GDB is None, reason="gdb is not installed")

RUNNING = "error: the process is running; interrupt it first"
EXITED_DURING = "error: the process exited during the command; output above is incomplete"
BIG = 5_000_000  # objects: verifyheap and a full dumpheap listing take several seconds on it


def allocated(reply: str) -> tuple[int, int]:
    """(MethodTable, count alive) from the debuggee's `SOSEXT-ALLOCATED {...}` answer."""
    assert reply.startswith("SOSEXT-ALLOCATED "), reply
    doc = json.loads(reply.split(" ", 1)[1])
    return int(doc["mt"], 16), doc["count"]


def count_of(text: str, mt: int) -> int | None:
    row = sosparse.stat_rows(text).get(mt)
    return row.count if row else None


def error_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith("error:")]


# -- a debugger driven line by line through pipes ------------------------------------------------

class Piped:
    """A debugger reading commands from a pipe; each command's output ends at a marker."""

    def __init__(self, args: list[str], setup: list[str], mark_command: str) -> None:
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.mark_command = mark_command  # format with the marker text
        self.buf = b""
        self.n = 0
        for line in setup:
            self.run(line)

    def send(self, line: str) -> None:
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def read_until(self, token: bytes, timeout: float) -> bytes:
        end = time.monotonic() + timeout
        while token not in self.buf and time.monotonic() < end:
            if select.select([self.proc.stdout], [], [], 0.1)[0]:
                self.buf += self.proc.stdout.read() or b""
        head, found, self.buf = self.buf.partition(token)
        assert found, f"no {token!r} within {timeout} s; output:\n{head[-3000:].decode(errors='replace')}"
        return head

    def run(self, command: str, timeout: float = 300) -> str:
        self.n += 1
        mark = f"@@LIVE-{self.n}@@"
        self.send(command)
        self.send(self.mark_command.format(mark))
        text = strip_prompts(self.read_until(mark.encode() + b"\n", timeout).decode(errors="replace"))
        # LLDB echoes the lines it reads: drop them, keep what the command printed.
        echoed = {command, self.mark_command.format(mark)}
        return "\n".join(ln for ln in text.splitlines() if ln not in echoed)

    def close(self, last: list[str]) -> None:
        try:
            for line in last:
                self.send(line)
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            pass
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def piped_lldb(pid: int) -> Piped:
    return Piped([drivers.LLDB, "--no-lldbinit", "-p", str(pid)],
                 ["settings set auto-confirm true",
                  f"command script import {drivers.REPO / 'lldbinit' / 'sosext.py'}"],
                 "script print('{}')")


def piped_gdb(pid: int) -> Piped:
    return Piped([drivers.GDB, "-nx", "-q", "-p", str(pid)],
                 ["set pagination off", "set confirm off", f"source {drivers.REPO / 'gdbinit' / 'sosext.py'}"],
                 "echo {}\\n")


def strip_prompts(text: str) -> str:
    return "\n".join(re.sub(r"^(\((lldb|gdb)\) ?)+", "", ln) for ln in text.splitlines())


# -- stale caches and running processes ------------------------------------------------------------

@needs_dotnet
@needs_lldb
def test_lldb_running_process_and_new_allocations(debuggee_factory) -> None:
    d = debuggee_factory("bigheap", 100_000)
    mt, before = allocated(d.command("alloc 100"))
    lldb = piped_lldb(d.pid)
    try:
        first = strip_prompts(lldb.run("dumpheap -stat -type AllocItem"))
        assert count_of(first, mt) == before == 100, first
        lldb.run("script lldb.debugger.SetAsync(True)")
        lldb.run("process continue")
        running = strip_prompts(lldb.run("dumpheap -stat -type AllocItem"))
        # One line, and none of the cached table from the stop before.
        assert error_lines(running) == [RUNNING], running
        assert "Statistics:" not in running and "AllocItem" not in running, running
        _mt, after = allocated(d.command("alloc 5000"))
        assert after == 5100
        lldb.run("process interrupt")
        lldb.run("script import time\nscript while lldb.debugger.GetSelectedTarget().GetProcess().GetState() "
                 "!= lldb.eStateStopped: time.sleep(0.05)")
        lldb.run("script lldb.debugger.SetAsync(False)")
        second = strip_prompts(lldb.run("dumpheap -stat -type AllocItem"))
        assert count_of(second, mt) == after, second
        assert error_lines(second) == []
    finally:
        lldb.close(["process detach", "quit"])


@needs_dotnet
@needs_gdb
def test_gdb_running_process_and_new_allocations(debuggee_factory) -> None:
    d = debuggee_factory("bigheap", 100_000)
    mt, before = allocated(d.command("alloc 100"))
    gdb = piped_gdb(d.pid)
    try:
        first = strip_prompts(gdb.run("dumpheap -stat -type AllocItem"))
        assert count_of(first, mt) == before == 100, first
        gdb.run("continue &")
        running = strip_prompts(gdb.run("dumpheap -stat -type AllocItem"))
        assert error_lines(running) == [RUNNING], running
        assert "Statistics:" not in running, running
        _mt, after = allocated(d.command("alloc 5000"))
        gdb.send("interrupt")
        gdb.read_until(b"received signal SIGINT", 60)
        second = strip_prompts(gdb.run("dumpheap -stat -type AllocItem"))
        assert count_of(second, mt) == after == 5100, second
        assert error_lines(second) == []
    finally:
        gdb.close(["detach", "quit"])


@needs_dotnet
@needs_lldb
def test_lldb_process_killed_mid_command(debuggee_factory) -> None:
    """SIGKILL while dumpheap prints: what was printed stays, one line says it is incomplete,
    and no statistics are printed as if the listing were whole."""
    d = debuggee_factory("bigheap", 2_000_000)
    lldb = piped_lldb(d.pid)
    try:
        lldb.run("dumpheap -stat")  # the index exists: what follows is the listing itself
        lldb.send("dumpheap")
        lldb.send("script print('@@KILLED@@')")
        head = lldb.read_until(b"Address", 120)
        os.kill(d.pid, signal.SIGKILL)
        rest = strip_prompts((head + b"Address" + lldb.read_until(b"@@KILLED@@\n", 120)).decode(errors="replace"))
        lines = [ln for ln in rest.splitlines() if ln and not ln.startswith(("script print(", "dumpheap"))]
        assert error_lines(rest) == [EXITED_DURING], rest[-2000:]
        assert lines[-1] == EXITED_DURING, rest[-2000:]
        assert sosparse.object_rows(rest), rest[:2000]  # the rows printed before the kill stay
        assert "Statistics:" not in rest and "Total " not in rest
        after = strip_prompts(lldb.run("dumpheap -stat"))
        assert len(error_lines(after)) == 1 and "Statistics:" not in after, after
    finally:
        lldb.close(["quit"])


@needs_dotnet
@needs_gdb
def test_gdb_process_killed_mid_command(debuggee_factory) -> None:
    d = debuggee_factory("bigheap", 2_000_000)
    gdb = piped_gdb(d.pid)
    try:
        gdb.run("dumpheap -stat")
        gdb.send("dumpheap")
        gdb.send("echo @@KILLED@@\\n")
        head = gdb.read_until(b"Address", 120)
        os.kill(d.pid, signal.SIGKILL)
        rest = strip_prompts((head + b"Address" + gdb.read_until(b"@@KILLED@@\n", 120)).decode(errors="replace"))
        assert error_lines(rest) == [EXITED_DURING], rest[-2000:]
        assert "Statistics:" not in rest and "Total " not in rest
    finally:
        gdb.close(["kill", "quit"])


# -- Ctrl-C ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def big_core(tmp_path_factory):
    """A with-heap core of BIG objects, its executable and its truth."""
    if dotnet_path() is None:
        pytest.skip("dotnet is not on PATH: no debuggee can be built")
    from harness import build_debuggee
    tmp = tmp_path_factory.mktemp("bigcore")
    with Debuggee("bigheap", BIG, dll=build_debuggee(), core_dir=tmp) as d:
        core = d.write_core("heap", tmp / "big.core")
        yield core, str(d.executable), d.truth
    core.unlink(missing_ok=True)


def leaf_truth(truth: dict) -> tuple[int, int]:
    leaf = truth["types"]["SosextDebuggee.BigLeaf"]
    return int(leaf["mt"], 16), leaf["count"]


class Terminal:
    """A debugger on a pty, as a user at a terminal runs it (Ctrl-C is a byte it reads)."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.environ.update(env)
            os.execvp(argv[0], argv)
        self.text = ""

    def write(self, data: bytes) -> None:
        os.write(self.fd, data)

    def until(self, pattern: str, timeout: float = 120) -> str:
        """Read until ``pattern`` (a regex) shows up in what came since the last match."""
        end = time.monotonic() + timeout
        rx = re.compile(pattern)
        while time.monotonic() < end:
            m = rx.search(self.text)
            if m:
                seen, self.text = self.text[:m.end()], self.text[m.end():]
                return seen
            if select.select([self.fd], [], [], 0.05)[0]:
                try:
                    self.text += os.read(self.fd, 1 << 20).decode(errors="replace")
                except OSError:
                    break
        raise AssertionError(f"no {pattern!r} within {timeout} s; last output:\n{self.text[-3000:]}")

    def close(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)
        os.close(self.fd)


def interrupt_and_measure(term: Terminal, started: str, what: str) -> float:
    """Wait for ``started``, press Ctrl-C, return the seconds until `error: interrupted`."""
    term.until(started, 300)
    time.sleep(0.5)
    t0 = time.monotonic()
    term.write(b"\x03")
    term.until(r"error: interrupted", 60)
    took = time.monotonic() - t0
    print(f"{what}: Ctrl-C to 'error: interrupted' in {took:.2f} s")
    return took


def check_stat_after(term: Terminal, prompt: str, truth: dict) -> None:
    mt, count = leaf_truth(truth)
    term.until(re.escape(prompt), 60)
    term.write(b"dumpheap -stat -type BigLeaf\n")
    text = term.until(r"Total [\d,]+ objects", 300)
    text = re.sub(r"\x1b\[[?0-9;]*[A-Za-z]", "", text.replace("\r", ""))  # GDB's bracketed-paste toggles
    assert count_of(text, mt) == count, text[-2000:]


@needs_lldb
@pytest.mark.parametrize("command,started", [("verifyheap", r"Verifying objects: [\d,]+"),
                                             ("dumpheap", r"\n\s+[0-9a-f]{12} +[0-9a-f]{12} +\d")],
                         ids=["verifyheap", "dumpheap"])
def test_ctrl_c_in_lldb(big_core, command: str, started: str) -> None:
    core, exe, truth = big_core
    # NO_COLOR: these tests read the listing's lines with a regex; colour is tested in
    # test_output_formats.py.
    term = Terminal([drivers.LLDB, "--no-lldbinit", "--core", str(core), exe],
                    {"SOSEXT_PROGRESS_INTERVAL": "0", "NO_COLOR": "1"})
    try:
        term.until(r"\(lldb\) ")
        term.write(f"command script import {drivers.REPO / 'lldbinit' / 'sosext.py'}\n".encode())
        term.until(r"\(lldb\) ")
        term.write(f"{command}\n".encode())
        took = interrupt_and_measure(term, started, f"lldb {command}")
        assert took < 3, took
        check_stat_after(term, "(lldb) ", truth)
    finally:
        term.close()


@needs_gdb
@pytest.mark.parametrize("command,started", [("verifyheap", r"Verifying objects: [\d,]+"),
                                             ("dumpheap", r"\n\s+[0-9a-f]{12} +[0-9a-f]{12} +\d")],
                         ids=["verifyheap", "dumpheap"])
def test_ctrl_c_in_gdb(big_core, command: str, started: str) -> None:
    core, exe, truth = big_core
    term = Terminal([drivers.GDB, "-nx", "-q", exe, str(core)], {"SOSEXT_PROGRESS_INTERVAL": "0", "NO_COLOR": "1"})
    try:
        term.until(r"\(gdb\) ")
        term.write(b"set pagination off\n")
        term.until(r"\(gdb\) ")
        term.write(f"source {drivers.REPO / 'gdbinit' / 'sosext.py'}\n".encode())
        term.until(r"\(gdb\) ")
        term.write(f"{command}\n".encode())
        took = interrupt_and_measure(term, started, f"gdb {command}")
        assert took < 3, took
        check_stat_after(term, "(gdb) ", truth)
    finally:
        term.close()


@pytest.mark.parametrize("command", ["verifyheap", "dumpheap"])
def test_sigint_in_cli(big_core, command: str) -> None:
    """`sosext analyze -c A -c B`: SIGINT during A ends A with one line, and B still runs."""
    core, _exe, truth = big_core
    mt, count = leaf_truth(truth)
    proc = subprocess.Popen([drivers.PYTHON, "-m", "sosext", "analyze", str(core), "-c", command,
                             "-c", "dumpheap -stat -type BigLeaf", "--separator", drivers.MARK],
                            cwd=drivers.REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "SOSEXT_PROGRESS_INTERVAL": "0"})
    streams = {proc.stdout.fileno(): b"", proc.stderr.fileno(): b""}
    for fd in streams:
        os.set_blocking(fd, False)

    def pump(until, timeout: float) -> None:
        end = time.monotonic() + timeout
        while not until() and time.monotonic() < end:
            for fd in select.select(list(streams), [], [], 0.05)[0]:
                streams[fd] += os.read(fd, 1 << 20)
        assert until(), f"timed out; stderr:\n{streams[proc.stderr.fileno()][-2000:]!r}"

    out, err = proc.stdout.fileno(), proc.stderr.fileno()
    try:
        if command == "verifyheap":
            pump(lambda: b"Verifying objects: " in streams[err], 300)
        else:
            pump(lambda: streams[out].count(b"\n") > 1000, 300)
        time.sleep(0.5)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        pump(lambda: b"error: interrupted" in streams[err], 60)
        took = time.monotonic() - t0
        print(f"cli {command}: SIGINT to 'error: interrupted' in {took:.2f} s")
        proc.wait(timeout=300)
        for fd in streams:  # the rest, up to EOF
            os.set_blocking(fd, True)
            while chunk := os.read(fd, 1 << 20):
                streams[fd] += chunk
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert took < 3, took
    errors = [ln for ln in streams[err].decode().splitlines() if ln.startswith("error:")]
    assert errors == ["error: interrupted"], errors
    parts = streams[out].decode().split(drivers.MARK + "\n")
    assert len(parts) == 3, parts[-1][-2000:]
    assert "Statistics:" not in parts[0]
    assert count_of(parts[1], mt) == count, parts[1]


# -- streaming listings: memory ----------------------------------------------------------------------

def peak_rss_mb(args: list[str]) -> float:
    proc = subprocess.Popen(args, cwd=drivers.REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, proc.stderr.read().decode()[-2000:]
    return usage.ru_maxrss / 1024


def test_listing_memory_stays_flat(big_core) -> None:
    """dumpheap -short and a full dumpheap print millions of lines with little more memory
    than -stat needs (the index), because rows are made and printed a chunk at a time."""
    core, _exe, truth = big_core
    cli = [drivers.PYTHON, "-m", "sosext", "analyze", str(core), "-c"]
    stat = peak_rss_mb(cli + ["dumpheap -stat -noprogress"])
    short = peak_rss_mb(cli + ["dumpheap -short -noprogress"])
    full = peak_rss_mb(cli + ["dumpheap -noprogress"])
    print(f"peak RSS with {truth['requested']:,} objects: -stat {stat:.0f} MB, -short {short:.0f} MB, "
          f"listing {full:.0f} MB")
    assert short - stat < 100, (stat, short)
    assert full - stat < 100, (stat, full)


def test_listing_starts_at_once(big_core) -> None:
    """The first row of a 5-million-row listing comes right after the heap is indexed: the
    `Scanning heap: done` progress line and the first row are close together."""
    core, _exe, _truth = big_core
    proc = subprocess.Popen([drivers.PYTHON, "-m", "sosext", "analyze", str(core), "-c", "dumpheap"],
                            cwd=drivers.REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            # walk (an earlier test cached this core's index): the progress line is the clock
                            env={**os.environ, "SOSEXT_PROGRESS_INTERVAL": "0", "SOSEXT_NO_INDEX_CACHE": "1"})
    try:
        os.set_blocking(proc.stderr.fileno(), False)
        err = b""
        while b"Scanning heap: done" not in err:
            select.select([proc.stderr], [], [], 1)
            err += proc.stderr.read() or b""
            assert proc.poll() is None, err
        indexed = time.monotonic()
        proc.stdout.readline()  # the header
        first_row = proc.stdout.readline()
        took = time.monotonic() - indexed
    finally:
        proc.kill()
        proc.wait()
    print(f"first row {took:.2f} s after the index")
    assert re.match(rb"\s+[0-9a-f]{12} ", first_row), first_row
    assert took < 3, took


# -- the pieces, without a debuggee -------------------------------------------------------------------

def test_listing_rows_are_what_the_table_makes() -> None:
    """write_listing formats rows itself for speed: byte for byte what Table.row makes."""
    import numpy as np
    from types import SimpleNamespace
    from sosext.commands.heap import chunks_of_mask, write_listing
    from sosext.render.output import Output
    from sosext.render.table import Integer, Pointer, Table, Text
    rng = np.random.default_rng(7)
    mts = np.array([0x10, 0x7F3A1C2D4E80, 0xFFFFFFFFFFFFFFF0], dtype=np.uint64)
    n = 5000
    ix = SimpleNamespace(method_tables=mts, type_ids=rng.integers(0, 3, n).astype(np.uint16),
                         addresses=np.sort(rng.integers(0, 1 << 64, n, dtype=np.uint64)),
                         sizes=rng.choice([24, 1 << 40, 123_456_789_012_345], n).astype(np.uint64))
    ix.sizes_at = lambda positions: ix.sizes[positions].tolist()  # HeapIndex's exact sizes
    ix.type_id = lambda mt: {0x10: 0}.get(mt)  # the Free type's id
    heap = SimpleNamespace(free_mt=0x10)
    got: list[str] = []
    ctx = SimpleNamespace(out=Output(got.append))
    mask = rng.random(n) < 0.5
    write_listing(ctx, heap, ix, chunks_of_mask(mask, size=97))
    ctx.out.flush()
    t = Table(Pointer(), Pointer(), Integer(), Text())
    want = [t.header("Address", "MT", "Size")] + [
        t.row(int(ix.addresses[i]), int(mts[ix.type_ids[i]]), int(ix.sizes[i]), "Free" if ix.type_ids[i] == 0 else "")
        for i in np.flatnonzero(mask)]
    assert "\n".join(got).split("\n") == want


def test_output_passes_chunks_on_and_checks_for_ctrl_c() -> None:
    from sosext.clr import progress
    from sosext.errors import Interrupted, TargetChanged
    from sosext.render.output import Output
    chunks: list[str] = []
    out = Output(chunks.append, chunk=10, interval=3600)
    out.lines(str(i) for i in range(25))
    assert [c.count("\n") + 1 for c in chunks] == [10, 10]  # the last 5 wait for the next chunk
    from sosext import interrupts
    hit = {"now": False}
    interrupts.set_poll(lambda: hit["now"])
    try:
        hit["now"] = True
        with pytest.raises(Interrupted):
            out.lines(str(i) for i in range(10))
        hit["now"] = False
        out.flush()  # the failure path still prints what was held
        assert sum(c.count("\n") + 1 for c in chunks) == 30  # 25 + 5 more before the check
        progress.set_state_source(lambda: "the process exited during the command; output above is incomplete")
        with pytest.raises(TargetChanged):
            progress.check_interrupt()
    finally:
        interrupts.set_poll(None)
        progress.set_state_source(None)


def test_process_gone_follows_the_kernel() -> None:
    from sosext.targets.procfs import process_gone
    child = subprocess.Popen(["/bin/sleep", "60"])
    try:
        assert not process_gone(child.pid)
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while not process_gone(child.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert process_gone(child.pid)  # a zombie until we reap it
    finally:
        child.kill()
        child.wait()
    assert process_gone(child.pid)


def test_watch_refuses_and_notices() -> None:
    """hosts/common.TargetWatch: a running target is refused; one that exits or runs during
    the command turns the command's result into the one 'incomplete' line."""
    from sosext.errors import TargetError
    from sosext.hosts.common import TargetWatch
    from sosext.targets.base import ProcessState, TargetBase

    class Fake(TargetBase):
        is_live = True

        def __init__(self) -> None:
            self.now = ProcessState.STOPPED

        def state(self) -> ProcessState:
            return self.now

    t = Fake()
    t.now = ProcessState.RUNNING
    with pytest.raises(TargetError, match="^the process is running; interrupt it first$"):
        TargetWatch(t)
    t.now = ProcessState.STOPPED
    w = TargetWatch(t)
    assert w.changed() is None
    t.now = ProcessState.EXITED
    assert w.changed() == EXITED_DURING.removeprefix("error: ")
    t.now = ProcessState.STOPPED
    t._generation = 1
    assert w.changed() == "the process ran during the command; output above is incomplete"
