"""sosext counters: System.Runtime counters over EventPipe, checked against what the debuggee
says about itself (GC.GetGCMemoryInfo, GC.CollectionCount, GC.GetTotalAllocatedBytes) while it
is idle after a GC; the nettrace reader on a stream recorded here, and fuzzed.
"""
from __future__ import annotations

import io
import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sosext.errors import SosError
from sosext.ipc.eventpipe import EventPipeSession, Provider
from sosext.ipc.nettrace import NettraceError, NettraceReader

pytestmark = pytest.mark.slow  # every test here talks to a live debuggee (or a stream recorded from one)

REPO = Path(__file__).resolve().parents[1]
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
GENS = ("gen0", "gen1", "gen2", "loh", "poh")  # GCMemoryInfo.GenerationInfo order


def sosext(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-m", "sosext", *args], cwd=REPO, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)


def start_sosext(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([PYTHON, "-m", "sosext", *args], cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def read_line(proc: subprocess.Popen[str], timeout: float = 30) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "sosext counters printed nothing in time"
    return proc.stdout.readline()


def runtime_state(d, command: str = "gc") -> dict:  # type: ignore[no-untyped-def]
    """Have the debuggee GC and describe itself; it stays idle afterwards."""
    reply = d.command(command)
    assert reply.startswith("SOSEXT-COUNTERS "), reply
    return json.loads(reply.removeprefix("SOSEXT-COUNTERS "))


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode != 0, proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


@pytest.fixture
def counters_debuggee(debuggee_factory):  # type: ignore[no-untyped-def]
    return debuggee_factory("counters")


def runtime_major(pid: int) -> int:
    from sosext.ipc import get_process_info
    return int((get_process_info(pid).clr_product_version or "0").split(".")[0])


def needs_meter(pid: int) -> None:
    if runtime_major(pid) < 9:
        pytest.skip("the runtime's System.Runtime meter exists from .NET 9 on")


def intervals_json(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def values(interval: dict) -> dict[tuple[str, str], float]:
    return {(c["name"], c["tags"]): c["value"] for c in interval["counters"]}


# --------------------------------------------------------------------------- against the truth


def check_metrics(v: dict[tuple[str, str], float], truth: dict) -> None:
    for i, gen in enumerate(GENS):
        tag = f"gc.heap.generation={gen}"
        assert v[("dotnet.gc.last_collection.heap.size", tag)] == truth["generations"][i]["sizeAfterBytes"], gen
        assert (v[("dotnet.gc.last_collection.heap.fragmentation.size", tag)]
                == truth["generations"][i]["fragmentationAfterBytes"]), gen
    # dotnet.gc.collections counts GCs *of* each generation; GC.CollectionCount(n) those of n or older.
    per_gen = [v[("dotnet.gc.collections", f"gc.heap.generation=gen{g}")] for g in range(3)]
    assert [sum(per_gen[g:]) for g in range(3)] == truth["collectionCount"]
    assert v[("dotnet.gc.last_collection.memory.committed_size", "")] == truth["totalCommittedBytes"]
    # The session itself allocates in the target (the meter's aggregation), a few KB per interval.
    allocated = v[("dotnet.gc.heap.total_allocated", "")]
    assert truth["totalAllocatedBytes"] <= allocated < truth["totalAllocatedBytes"] + (4 << 20)
    assert v[("dotnet.thread_pool.queue.length", "")] == 0


def test_metrics_equal_runtime_truth(counters_debuggee) -> None:  # type: ignore[no-untyped-def]
    d = counters_debuggee
    needs_meter(d.pid)
    truth = runtime_state(d)
    proc = sosext("counters", str(d.pid), "--duration", "2.5", "--format", "json", "--source", "auto")
    assert proc.returncode == 0, proc.stderr
    got = intervals_json(proc.stdout)
    assert got and all(iv["source"] == "metrics" and iv["pid"] == d.pid for iv in got)
    check_metrics(values(got[-1]), truth)

    # The heap grows by 20,000 kept blocks: the next reading follows the runtime again.
    assert d.command("grow 20000").startswith("SOSEXT-GROWN")
    truth2 = runtime_state(d)
    assert truth2["generations"][2]["sizeAfterBytes"] > truth["generations"][2]["sizeAfterBytes"] + 20000 * 1024
    proc = sosext("counters", str(d.pid), "--duration", "2.5", "--format", "json", "--interval", "0.5")
    assert proc.returncode == 0, proc.stderr
    got = intervals_json(proc.stdout)
    assert len(got) >= 2  # 0.5 s intervals in 2.5 s
    check_metrics(values(got[-1]), truth2)


def test_eventcounters_equal_runtime_truth(counters_debuggee) -> None:  # type: ignore[no-untyped-def]
    d = counters_debuggee
    truth = runtime_state(d)
    proc = start_sosext("counters", str(d.pid), "--duration", "5", "--format", "json", "--source", "eventcounters")
    try:
        first = json.loads(read_line(proc))
        # Two more full GCs while the session runs: the gen-2 increments must add up to exactly 2.
        truth2 = runtime_state(d)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    got = [first, *intervals_json(out)]
    assert all(iv["source"] == "eventcounters" for iv in got)
    v = values(first)
    names = {"gen-0-size": 0, "gen-1-size": 1, "gen-2-size": 2, "loh-size": 3, "poh-size": 4}
    for name, i in names.items():
        assert v[(name, "")] == truth["generations"][i]["sizeAfterBytes"], name
    # gc-heap-size is GC.GetTotalMemory(false) in MB, read while the session allocates a little.
    assert truth["totalMemory"] / 1e6 <= v[("gc-heap-size", "")] < truth["totalMemory"] / 1e6 + 4
    last = values(got[-1])
    for name, i in names.items():
        assert last[(name, "")] == truth2["generations"][i]["sizeAfterBytes"], name
    grew = [sum(values(iv)[(f"gen-{g}-gc-count", "")] for iv in got) for g in range(3)]
    expected = [truth2["collectionCount"][g] - truth["collectionCount"][g] for g in range(3)]
    assert expected[2] == 2 and grew == expected


def test_pipe_gets_one_line_per_reading_and_csv(counters_debuggee) -> None:  # type: ignore[no-untyped-def]
    d = counters_debuggee
    needs_meter(d.pid)
    truth = runtime_state(d)
    proc = sosext("counters", str(d.pid), "--duration", "1.8")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    lines = proc.stdout.splitlines()
    assert "\x1b" not in proc.stdout  # no in-place refresh in a pipe
    pattern = re.compile(r"^\d\d:\d\d:\d\d  (\S+)( \[[^\]]*\])?  (-|[-\d,.]+)( [a-z%][a-z %]*)?(  \(.*\))?$")
    assert lines and all(pattern.match(line) for line in lines), lines[:5]
    gen2 = [line for line in lines if "heap.size [gc.heap.generation=gen2]" in line and "fragmentation" not in line]
    assert gen2 and f"  {truth['generations'][2]['sizeAfterBytes']:,} bytes" in gen2[-1]  # the meter's "By"

    proc = sosext("counters", str(d.pid), "--duration", "1.8", "--format", "csv", "--source", "eventcounters")
    assert proc.returncode == 0, proc.stderr
    rows = proc.stdout.splitlines()
    assert rows[0] == "timestamp,source,name,tags,unit,value,rate"
    gen2 = [r.split(",") for r in rows[1:] if ",gen-2-size," in r]
    assert gen2 and int(gen2[-1][5]) == truth["generations"][2]["sizeAfterBytes"]


def test_ctrl_c_stops_the_session(counters_debuggee) -> None:  # type: ignore[no-untyped-def]
    d = counters_debuggee
    proc = start_sosext("counters", str(d.pid), "--format", "json")
    try:
        read_line(proc)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0 and err == "", err
    # The System.Runtime meter takes one session at a time: a new one works only if the
    # first was stopped (an open one would refuse it with MultipleSessionsNotSupportedError).
    again = sosext("counters", str(d.pid), "--duration", "1.5", "--format", "json")
    assert again.returncode == 0 and again.stderr == "", again.stderr
    assert intervals_json(again.stdout)


def test_auto_picks_eventcounters_before_net9_and_metrics_says_why(counters_debuggee) -> None:  # type: ignore[no-untyped-def]
    d = counters_debuggee
    if runtime_major(d.pid) >= 9:
        pytest.skip("needs a runtime older than .NET 9 (run with --tfm net8.0)")
    proc = sosext("counters", str(d.pid), "--duration", "1.5", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert {iv["source"] for iv in intervals_json(proc.stdout)} == {"eventcounters"}
    line = one_line_error(sosext("counters", str(d.pid), "--duration", "3", "--source", "metrics"))
    assert line == (f"error: process {d.pid} publishes no System.Runtime metrics (the meter came with .NET 9; "
                    "before, the metrics event source may not even exist): use --source eventcounters")


# --------------------------------------------------------------------------- bad input


def test_not_a_dotnet_process() -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        line = one_line_error(sosext("counters", str(sleeper.pid), "--duration", "1"))
        assert line == (f"error: process {sleeper.pid} has no diagnostics socket (not a .NET process, "
                        "or diagnostics disabled with DOTNET_EnableDiagnostics=0)")
    finally:
        sleeper.kill()
        sleeper.wait()


def test_no_such_process() -> None:
    # Beyond pid_max: collect's words (tests/test_first_hour.py compares the three commands).
    assert one_line_error(sosext("counters", "999999999", "--duration", "1")).startswith(
        "error: invalid process id: 999999999 (1 to ")


def test_bad_interval(counters_debuggee) -> None:  # type: ignore[no-untyped-def]
    line = one_line_error(sosext("counters", str(counters_debuggee.pid), "--interval", "0"))
    assert line == "error: invalid interval 0.0 (seconds, > 0)"


@pytest.mark.parametrize("source", ["metrics", "eventcounters"])
def test_process_exits_mid_session(counters_debuggee, source: str) -> None:  # type: ignore[no-untyped-def]
    d = counters_debuggee
    if source == "metrics":
        needs_meter(d.pid)
    proc = start_sosext("counters", str(d.pid), "--format", "json", "--source", source)
    try:
        read_line(proc)
        d.send("exit")
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1
    assert err.strip().splitlines() == [f"error: process {d.pid} exited during the session"]


def test_process_killed_mid_session(counters_debuggee) -> None:  # type: ignore[no-untyped-def]
    d = counters_debuggee
    proc = start_sosext("counters", str(d.pid), "--format", "json")
    try:
        read_line(proc)
        os.kill(d.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1
    assert err.strip().splitlines() == [f"error: process {d.pid} exited during the session"]


def test_refused_session(counters_debuggee) -> None:  # type: ignore[no-untyped-def]
    d = counters_debuggee
    needs_meter(d.pid)
    first = start_sosext("counters", str(d.pid), "--format", "json", "--duration", "6")
    try:
        read_line(first)
        second = sosext("counters", str(d.pid), "--duration", "3", "--source", "metrics")
        assert one_line_error(second) == (
            f"error: process {d.pid} refused the metrics session: another tool (dotnet-counters, dotnet-monitor, "
            "an OpenTelemetry agent…) already has one; try --source eventcounters")
        out, err = first.communicate(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0 and err == ""  # the first session was not disturbed
    assert len(intervals_json(out)) >= 3


# --------------------------------------------------------------------------- the nettrace reader

_recorded: dict[str, bytes] = {}


@pytest.fixture
def recorded_stream(request) -> bytes:  # type: ignore[no-untyped-def]
    """The raw nettrace bytes of a 2-second EventCounters session (recorded once per run)."""
    if "data" not in _recorded:
        d = request.getfixturevalue("counters_debuggee")
        buf = io.BytesIO()
        providers = [Provider("System.Runtime", 0xFFFFFFFF, 4, "EventCounterIntervalSec=0.5")]
        with EventPipeSession(d.pid, providers) as s:
            threading.Timer(2.0, s.stop).start()
            events = list(s.events(tee=buf))
        assert s.reader is not None and s.reader.ended
        assert any(e.name == "EventCounters" for e in events)
        _recorded["data"] = buf.getvalue()
        _recorded["count"] = str(len(events)).encode()
    return _recorded["data"]


def test_reader_replays_the_recording(recorded_stream: bytes) -> None:
    reader = NettraceReader(io.BytesIO(recorded_stream))
    events = list(reader.events())
    assert reader.ended and reader.info is not None and reader.info.version in (4, 5)
    assert len(events) == int(_recorded["count"])
    names = set()
    for e in events:
        if e.name == "EventCounters":
            payload = e.decode()
            names.add(next(iter(payload.values()))["Payload"]["Name"])
    assert {"gc-heap-size", "gen-0-gc-count", "gen-2-size", "threadpool-thread-count", "exception-count"} <= names


FUZZ = settings(max_examples=200, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _parse_everything(data: bytes) -> None:
    for e in NettraceReader(io.BytesIO(data)).events():
        e.decode()


@FUZZ
@given(cut=st.floats(0, 1, exclude_max=True))
def test_truncated_recording_is_one_line_error(recorded_stream: bytes, cut: float) -> None:
    data = recorded_stream[: int(len(recorded_stream) * cut)]
    with pytest.raises(NettraceError) as info:
        _parse_everything(data)
    assert "\n" not in str(info.value)


@FUZZ
@given(st.data())
def test_corrupted_recording_never_crashes(recorded_stream: bytes, data) -> None:  # type: ignore[no-untyped-def]
    raw = bytearray(recorded_stream)
    for _ in range(data.draw(st.integers(1, 8))):
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw[pos] = data.draw(st.integers(0, 255))
    try:
        _parse_everything(bytes(raw))
    except SosError as exc:
        assert "\n" not in str(exc)


def test_terminal_gets_a_table_redrawn_in_place(counters_debuggee) -> None:  # type: ignore[no-untyped-def]
    import pty

    import drivers
    d = counters_debuggee
    truth = runtime_state(d)
    master, slave = pty.openpty()
    proc = subprocess.Popen([PYTHON, "-m", "sosext", "counters", str(d.pid), "--source", "eventcounters"],
                            cwd=REPO, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    try:
        text = drivers.read_pty_until(master, "\x1b[H", timeout=30)
        text += drivers.read_pty_until(master, "\x1b[H", timeout=30)  # a second frame starts
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    frame = text.split("\x1b[H\x1b[J")[1]
    lines = frame.replace("\r", "").splitlines()
    assert lines[0].startswith(f"sosext counters: process {d.pid}, source eventcounters, every 1 s, ")
    assert lines[2].split() == ["Counter", "Value", "Change", "Unit"]
    row = next(line for line in lines if line.startswith("gen-2-size "))
    assert row.split() == ["gen-2-size", f"{truth['generations'][2]['sizeAfterBytes']:,}", "bytes"]


# --------------------------------------------------------------------------- .NET 8 and 9

@pytest.fixture(params=["net8.0", "net9.0"])
def other_runtime(request, debuggee_factory):  # type: ignore[no-untyped-def]
    """The counters debuggee on .NET 8 or 9 (self-contained, its runtime pack from NuGet)."""
    from harness import DebuggeeError, build_debuggee
    try:
        dll = build_debuggee(request.param)
    except DebuggeeError as e:
        pytest.skip(f"{request.param} runtime pack could not be restored from NuGet: {str(e).splitlines()[0]}")
    return request.param, debuggee_factory("counters", tfm=request.param, dll=dll)


@pytest.mark.slow
def test_counters_and_gcdump_on_net8_and_net9(other_runtime, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The same exactness on the older runtimes: EventCounters (and, from .NET 9, the meter) equal
    what the process says of itself, `auto` picks the right source, and a gcdump snapshot counts
    the debuggee's kept blocks exactly."""
    tfm, d = other_runtime
    major = runtime_major(d.pid)
    assert tfm == f"net{major}.0"   # the runtime the process reports is the one it was built for
    test_eventcounters_equal_runtime_truth(d)
    if major >= 9:
        test_metrics_equal_runtime_truth(d)
    else:
        test_auto_picks_eventcounters_before_net9_and_metrics_says_why(d)
    snap = tmp_path / f"net{major}.gcdump.npz"
    proc = sosext("gcdump", str(d.pid), "-o", str(snap))
    assert proc.returncode == 0, proc.stderr
    from sosext.clr.snapshots.gcdumpsnap import GcDump
    kept = runtime_state(d)["kept"]   # the debuggee's own count of the blocks it keeps
    blocks = next(s for s in GcDump.load(str(snap)).stats() if s.name == "DebuggeeHost.CounterBlock")
    assert blocks.count == kept


@pytest.mark.slow
def test_counters_under_server_gc(debuggee_factory) -> None:  # type: ignore[no-untyped-def]
    """Server GC (a heap per core): the same figures, per generation summed over the heaps."""
    d = debuggee_factory("counters", gc="svr")
    test_eventcounters_equal_runtime_truth(d)
    test_metrics_equal_runtime_truth(d)
