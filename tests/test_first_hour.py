"""What a new user meets in the first hour, each a one-line answer (issue 27).

On a heap core of the test debuggee: `eeheap -segment 0` is its error alone; `dumpasync` with
nothing to show says so; `threadpool -why` says why it has no data; `sosext diff NEW OLD` notices
the swap; a directory is "a directory" to `diff` as to `analyze`; `analyze <pid>` hints at
`collect`; a bad pid is worded alike by collect, counters and gcdump, and gcdump checks it
before announcing a collection.
"""
from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

import drivers
from harness import Debuggee, build_debuggee, dotnet_path

slow = pytest.mark.slow  # these write two heap cores of a debuggee


def sosext(*args: str, timeout: float = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([drivers.PYTHON, "-m", "sosext", *args], cwd=drivers.REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=timeout,
                          env={**os.environ, **drivers.QUIET, **(env or {})})


@pytest.fixture(scope="module")
def cores(tmp_path_factory, request) -> tuple[Path, Path, dict]:
    """Two heap cores of one debuggee, the second written (and so dated) later."""
    if dotnet_path() is None:
        pytest.skip("dotnet is not on PATH: no debuggee can be built")
    tfm = request.config.getoption("--tfm")
    tmp = tmp_path_factory.mktemp("first-hour")
    with Debuggee("heap", tfm=tfm, dll=build_debuggee(tfm), core_dir=tmp) as d:
        older = d.write_core("heap", tmp / "older.core")
        time.sleep(1.5)
        newer = d.write_core("heap", tmp / "newer.core")
        return older, newer, d.truth


@slow
def test_eeheap_segment_zero_is_the_error_alone(cores) -> None:
    res = sosext("analyze", str(cores[1]), "-c", "eeheap -segment 0")
    assert res.stdout == ""
    assert res.stderr.splitlines() == ["error: 0x0 is not a segment of the GC heap (see eeheap -gc)"]


@slow
def test_dumpasync_with_nothing_to_show_says_so(cores) -> None:
    # The heap scenario runs no async method: SOS prints nothing at all here (dotnet-dump 10.0.750501).
    res = sosext("analyze", str(cores[1]), "-c", "dumpasync", "-c", "dumpasync --tasks --completed --type NoSuchType")
    assert res.stdout.splitlines() == [
        "No async stacks on the heap (--tasks adds chains of tasks alone; --completed adds completed tasks).",
        "No async or task stacks match the filter."], res.stdout + res.stderr


@slow
def test_threadpool_says_why_it_has_no_data(cores) -> None:
    # SOS's one line by default; -why adds the reason.
    plain = sosext("analyze", str(cores[1]), "-c", "threadpool").stdout.splitlines()
    lines = sosext("analyze", str(cores[1]), "-c", "threadpool -why").stdout.splitlines()
    if lines[0].startswith("Using the "):
        pytest.skip("this debuggee's thread pool exists: nothing to explain")
    assert plain == ["Failed to obtain ThreadPool data."]
    assert lines[0] == "Failed to obtain ThreadPool data."
    assert lines[1].startswith("Why: System.Threading.PortableThreadPool ") and lines[1].endswith(".")
    assert "the DAC gives no native thread-pool data" in lines[1] and len(lines) == 2
    # At a terminal (SOSEXT_HINTS=1 stands for one) the bare command points to -why.
    hinted = sosext("analyze", str(cores[1]), "-c", "threadpool", env={"SOSEXT_HINTS": "1"}).stdout.splitlines()
    assert hinted == [plain[0], "", "Next: threadpool -why says why the thread pool could not be read"]


@slow
def test_diff_notices_swapped_arguments(cores) -> None:
    older, newer, _ = cores
    swapped = sosext("diff", str(newer), str(older), "-top", "1")
    assert swapped.returncode == 0, swapped.stderr
    notes = [ln for ln in swapped.stdout.splitlines() if "swapped" in ln]
    note = (f"Note: the baseline core file {newer} was written after core file {older}: are OLD and NEW swapped? "
            "(name the older dump first: sosext diff|leaks OLD NEW; in a debugger on the newer one, heapdiff|leaks OLD)")
    assert notes == [note], swapped.stdout
    right = sosext("diff", str(older), str(newer), "-top", "1")
    assert right.returncode == 0 and "swapped" not in right.stdout, right.stdout
    # leaks notices it too, and says so in the same words (they name both commands)
    leaks = sosext("leaks", str(newer), str(older), "-top", "1")
    assert leaks.returncode == 0 and [ln for ln in leaks.stdout.splitlines() if "swapped" in ln] == [note]


@slow
def test_a_directory_is_a_directory_to_diff_as_to_analyze(cores, tmp_path) -> None:
    said = {sosext("analyze", str(tmp_path), "-c", "dumpheap -stat").stderr.strip(),
            sosext("diff", str(tmp_path), str(cores[1])).stderr.strip(),
            sosext("leaks", str(tmp_path), str(cores[1])).stderr.strip()}
    assert said == {f"error: not a core file: {tmp_path} is a directory"}


def test_analyze_of_a_pid_hints_at_collect(tmp_path) -> None:
    pid = os.getpid()
    res = subprocess.run([drivers.PYTHON, "-m", "sosext", "analyze", str(pid)], cwd=tmp_path, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(drivers.REPO)})
    assert res.returncode == 1
    assert res.stderr.splitlines() == [
        f"error: cannot open core file {pid}: No such file or directory; {pid} is a running process: analyze "
        f"takes a core file: write one with 'sosext collect {pid}', or attach a debugger (lldb-16 -p {pid}, "
        f"gdb -p {pid})"]
    # diff, leaks and report read gcdump snapshots too; snapshot only cores: each says so
    core = str(tmp_path / "some.core")
    for argv, way in ((["diff", str(pid), core], f"diff takes core files or gcdump snapshots: write one with "
                       f"'sosext collect {pid}' or 'sosext gcdump {pid}'"),
                      (["leaks", core, str(pid)], f"leaks takes core files or gcdump snapshots: write one with "
                       f"'sosext collect {pid}' or 'sosext gcdump {pid}'"),
                      (["report", str(pid)], f"report takes core files or gcdump snapshots: write one with "
                       f"'sosext collect {pid}' or 'sosext gcdump {pid}'"),
                      (["snapshot", str(pid)], f"snapshot takes a core file: write one with 'sosext collect {pid}'"),
                      (["gcdump-stat", str(pid)], f"gcdump-stat takes a gcdump snapshot: write one with "
                       f"'sosext gcdump {pid}'")):
        res = subprocess.run([drivers.PYTHON, "-m", "sosext", *argv], cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, timeout=120,
                             env={**os.environ, "PYTHONPATH": str(drivers.REPO)})
        cannot = "cannot read" if argv[0] == "gcdump-stat" else "cannot open core file"
        assert res.returncode == 1 and res.stderr.splitlines() == [
            f"error: {cannot} {pid}: No such file or directory; {pid} is a running process: {way}"], argv


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("pid", ["999999999", "abc", "0", "dead"])
def test_a_bad_pid_is_one_line_alike_in_collect_counters_and_gcdump(pid: str, tmp_path) -> None:
    dead = pid == "dead"
    pid = str(_dead_pid()) if dead else pid
    said = []
    for argv in (["collect", pid, "-o", str(tmp_path / "core")], ["counters", pid, "--duration", "1"],
                 ["gcdump", pid, "-o", str(tmp_path / "x.gcdump.npz")]):
        res = sosext(*argv, timeout=120)
        assert res.returncode == 1 and res.stdout == "", (argv, res.stdout)
        said.append(res.stderr.splitlines())  # one line: gcdump announces nothing before it
    assert said[0] == said[1] == said[2] and len(said[0]) == 1, said
    if dead:
        assert said[0] == [f"error: no such process: {pid}"]
    else:
        assert said[0][0].startswith(f"error: invalid process id: {pid} (")


def _total_bytes(text: str) -> int:
    m = re.search(r"^Total [\d,]+ objects?, ([\d,]+) bytes?$", text, re.M)
    assert m, text
    return int(m.group(1).replace(",", ""))


@slow
def test_dumpheap_dead_is_free_plus_frozen_plus_gcheapstat_unrooted(cores) -> None:
    """docs/commands.md (gcheapstat) says why the two totals differ; this is the arithmetic."""
    sep = "@@SEP@@"
    res = sosext("analyze", str(cores[1]), "--separator", sep, "-c", "dumpheap -stat -dead", "-c", "gcheapstat -iu",
                 "-c", "eeheap -gc")
    dead, gcheapstat, eeheap = res.stdout.split(sep + "\n")[:3]
    free = next((int(ln.split()[2].replace(",", "")) for ln in dead.splitlines() if ln.endswith(" Free")), 0)
    lines = gcheapstat.splitlines()
    unrooted = lines[lines.index("Unrooted objects:"):]
    unrooted_total = sum(int(x) for x in next(ln for ln in unrooted if ln.startswith("Total")).split()[1:])
    ee = eeheap.splitlines()
    frozen_segments = []
    if "NonGC heap" in ee:
        for ln in ee[ee.index("NonGC heap") + 2:]:
            if not ln.startswith("    "):
                break
            frozen_segments.append(ln.split()[0])
    frozen = 0
    for seg in frozen_segments:
        frozen += _total_bytes(sosext("analyze", str(cores[1]), "-c", f"dumpheap -stat -dead -segment {seg}").stdout)
    assert _total_bytes(dead) == free + frozen + unrooted_total, (free, frozen, unrooted_total, dead[-300:])
    assert free > 0 and unrooted_total >= 0
