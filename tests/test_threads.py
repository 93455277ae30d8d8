"""Acceptance of the thread, stack and exception commands: clrthreads, clrstack, pe, threadpool.

The `threads` debuggee runs a named thread blocked three calls deep (Level1(42, text) →
Level2(item) → Level3() holding a local), a thread blocked inside the catch block of a
TestException with an inner exception, and a blocked thread-pool work item. Each host runs
one batch (LLDB live and on a heap core, the CLI on the core, GDB when installed) and the
outputs are compared with the debuggee's truth.

Threads are selected the way each host does it: LLDB and GDB select the debugger's thread
(by OS thread id, through their scripting), the CLI uses sosext's setthread.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import drivers
from harness import Debuggee, build_debuggee
from sosparse import STACK_ROW, frame_block

pytestmark = pytest.mark.slow

HOSTS = ["lldb-live", "lldb-core", "cli-core"]
if drivers.GDB:
    HOSTS += ["gdb-live", "gdb-core"]


def select_index(host: str, index: int) -> str:
    if host.startswith("lldb"):
        # Not `thread select`: LLDB prints its stop description asynchronously, and the text can
        # land in the next command's output.
        return f"script lldb.debugger.GetSelectedTarget().GetProcess().SetSelectedThreadByIndexID({index})"
    if host.startswith("gdb"):
        return f"thread {index}"
    return f"setthread {index}"


def batch(truth: dict, host: str) -> list[tuple[str, str]]:
    """(key, command) pairs; keys name outputs independently of the host's selection commands."""
    named = truth["threads"]["named"]["osTid"]
    thrower = truth["threads"]["thrower"]["osTid"]
    exc = truth["exception"]
    return [
        ("clrthreads", "clrthreads"),
        ("select-named", drivers.select_thread(host, named)),
        ("clrstack", "clrstack"),
        ("clrstack -a", "clrstack -a"),
        ("clrstack -f", "clrstack -f -native -c 60"),
        ("registers", "registers"),
        ("clrstack -i", "clrstack -i"),
        *([("lldb registers", "register read r8 r9 rflags rip rsp")] if host == "lldb-core" else []),
        ("select-thrower", drivers.select_thread(host, thrower)),
        ("pe", "pe"),
        ("pe exc", f"pe {exc['address']}"),
        ("pe inner", f"pe {exc['inner']['address']}"),
        ("pe notexc", f"pe {truth['notException']['address']}"),
        ("pe bad", "pe 0x10"),
        ("pe zzz", "pe zzz"),
        ("clrstack -opt", "clrstack -zzz"),
        ("clrstack -c", "clrstack -c 3"),
        ("clrstack -all", "clrstack -all"),
        ("threadpool", "threadpool"),
        ("threadpool -ti", "threadpool -ti"),
        ("threadstate", "threadstate 3021220"),
        # Thread 2 is a runtime-internal native thread (the PAL's synchronization manager).
        ("select-2", select_index(host, 2)),
        ("clrstack native", "clrstack"),
        ("pe native", "pe"),
        ("setthread", "setthread"),
        ("setthread 99", "setthread 99"),
    ]


@dataclass
class Case:
    truth: dict
    outputs: dict[str, dict[str, drivers.Output]] = field(default_factory=dict)

    def out(self, host: str, key: str) -> drivers.Output:
        return self.outputs[host][key]


def run(host: str, truth: dict, **kw) -> dict[str, drivers.Output]:  # type: ignore[no-untyped-def]
    pairs = batch(truth, host)
    cmds = [c for _k, c in pairs]
    outs = drivers.run_in_host(host, cmds, **kw)
    return {k: o for (k, _c), o in zip(pairs, outs)}


@pytest.fixture(scope="module", params=["wks", "svr"])
def case(request, tmp_path_factory) -> Case:
    drivers.require_dotnet_and_lldb()
    tfm = request.config.getoption("--tfm")
    cores = tmp_path_factory.mktemp(f"cores-threads-{request.param}")
    with Debuggee("threads", gc=request.param, tfm=tfm, dll=build_debuggee(tfm), core_dir=cores) as d:
        c = Case(d.truth)
        core = d.write_core("heap", cores / "threads.core")
        exe = str(d.executable)
        c.outputs["lldb-live"] = run("lldb-live", d.truth, pid=d.pid)
        if "gdb-live" in HOSTS:
            c.outputs["gdb-live"] = run("gdb-live", d.truth, pid=d.pid)
    c.outputs["lldb-core"] = run("lldb-core", c.truth, core=core, exe=exe)
    c.outputs["cli-core"] = run("cli-core", c.truth, core=core)
    if "gdb-core" in HOSTS:
        c.outputs["gdb-core"] = run("gdb-core", c.truth, core=core, exe=exe)
    Path(core).unlink(missing_ok=True)
    return c


@pytest.fixture(params=HOSTS)
def host(request) -> str:
    return request.param


# -- parsing ------------------------------------------------------------------------------------

THREAD_ROW = re.compile(r"^\s*(\S+)\s+(\d+)\s+([0-9a-f]+) ([0-9A-F]{16}) +([0-9a-f]+) (Preemptive|Cooperative) "
                        r"+([0-9A-F]{16}):([0-9A-F]{16}) ([0-9A-F]{16}) (\S+) +Ukn (.*)$")


@dataclass
class ThreadRow:
    dbg: str
    managed_id: int
    os_id: int
    exception: str


def thread_rows(text: str) -> dict[int, ThreadRow]:
    rows = {}
    for ln in text.splitlines():
        m = THREAD_ROW.match(ln)
        if m:
            rows[int(m.group(3), 16)] = ThreadRow(m.group(1), int(m.group(2)), int(m.group(3), 16), m.group(11))
    return rows


SOURCE_SUFFIX = re.compile(r" \[[^\[\]]+ @ \d+\]$")  # " [/path/File.cs @ 42]" (test_stacks_source.py checks them)


def call_sites(text: str) -> list[str]:
    """The Call Site column without source lines."""
    return [SOURCE_SUFFIX.sub("", m.group(3)) for m in map(STACK_ROW.match, text.splitlines()) if m]


def in_order(names: list[str], sites: list[str]) -> bool:
    """Each name starts some call site (as Name(...)), in this order."""
    i = 0
    for s in sites:
        if i < len(names) and s.startswith(names[i] + "("):
            i += 1
    return i == len(names)


def field_of(text: str, label: str) -> str:
    m = re.search(rf"^{re.escape(label)}\s*(.*)$", text, re.M)
    assert m, f"no {label} line in:\n{text}"
    return m.group(1)


# -- clrthreads --------------------------------------------------------------------------------


def test_clrthreads_lists_the_named_threads(case: Case, host: str) -> None:
    text = case.out(host, "clrthreads").text
    rows = thread_rows(text)
    for role in ("named", "thrower", "pool", "main"):
        t = case.truth["threads"][role]
        row = rows.get(t["osTid"])
        assert row is not None, f"{role} thread {t['osTid']:#x} missing:\n{text}"
        assert row.managed_id == t["managedId"], role
        assert row.dbg.isdigit(), role  # every thread here is alive and known to the debugger
    assert "(Threadpool Worker)" in rows[case.truth["threads"]["pool"]["osTid"]].exception
    assert sum("(Finalizer)" in r.exception for r in rows.values()) == 1
    # The store's counters agree with the rows.
    assert int(field_of(text, "ThreadCount:")) == len(rows)
    assert int(field_of(text, "DeadThread:")) == 0
    background = sum(1 for t in case.truth["threads"].values() if t["isBackground"])
    assert int(field_of(text, "BackgroundThread:")) >= background
    assert field_of(text, "Hosted Runtime:") == "no"


def test_clrthreads_numbers_threads_as_the_hosts_sos_does(case: Case, host: str) -> None:
    """DBG is the debugger's thread number: SOS in LLDB prints LLDB's (from 1, as GDB's), dotnet-dump
    counts the core's threads from 0 and sosext's CLI follows it. The main thread is the process's
    first. Lock Count: .NET 9+ reports 0xFFFFFFFF, which SOS prints with printf's %*.*d, 5 wide,
    the precision clamped to the width: -00001 (seen in dotnet-dump and in SOS in LLDB alike)."""
    text = case.out(host, "clrthreads").text
    main = thread_rows(text)[case.truth["threads"]["main"]["osTid"]]
    assert main.dbg == ("0" if host.startswith("cli") else "1"), text
    row = next(ln for ln in text.splitlines() if THREAD_ROW.match(ln)
               and int(THREAD_ROW.match(ln).group(3), 16) == main.os_id)
    if int(case.truth["runtime"]["version"].split(".")[0]) >= 9:
        assert " -00001 " in row, row


def test_clrthreads_shows_the_last_thrown_exception(case: Case, host: str) -> None:
    rows = thread_rows(case.out(host, "clrthreads").text)
    exc = case.truth["exception"]
    thrower = rows[case.truth["threads"]["thrower"]["osTid"]]
    assert thrower.exception == f"{exc['type']} {int(exc['address'], 16):016x}"
    assert rows[case.truth["threads"]["named"]["osTid"]].exception == ""


def test_clrthreads_header_layout(case: Case, host: str) -> None:
    lines = case.out(host, "clrthreads").lines
    i = next(i for i, ln in enumerate(lines) if ln.strip() == "Lock")
    assert lines[i] == " " * 108 + "Lock  "
    assert lines[i + 1] == (" DBG   ID     OSID ThreadOBJ           State GC Mode     GC Alloc Context  "
                            "                Domain           Count Apt Exception")


# -- clrstack ----------------------------------------------------------------------------------


def test_clrstack_shows_the_named_threads_methods_in_order(case: Case, host: str) -> None:
    text = case.out(host, "clrstack").text
    named = case.truth["threads"]["named"]["osTid"]
    first = text.splitlines()[0]
    m = re.match(r"^OS Thread Id: 0x([0-9a-f]+) \((\d+)\)$", first)
    assert m and int(m.group(1), 16) == named, first
    # The index is the debugger's thread number, the DBG column of clrthreads.
    assert thread_rows(case.out(host, "clrthreads").text)[named].dbg == m.group(2)
    assert text.splitlines()[1] == "        Child SP               IP Call Site"
    sites = call_sites(text)
    assert in_order(case.truth["named"]["frames"], sites), "\n".join(sites)
    assert "DebuggeeHost.ThreadsScenario.Level1(Int32, System.String)" in sites
    assert "DebuggeeHost.ThreadsScenario.Level2(System.Object)" in sites
    # The thread blocks in a P/Invoke: the runtime's transition frame is listed.
    assert any(re.match(r"^\[InlinedCallFrame: [0-9a-f]{16}\] $", s) for s in sites)
    # SOS prints a runtime Frame's IP in lower case, a method's in upper case (dotnet-dump's clrstack).
    frames = [m for m in map(STACK_ROW.match, text.splitlines()) if m]
    assert all(m.group(2) == (m.group(2).lower() if m.group(3).startswith("[") else m.group(2).upper())
               for m in frames), text


def test_clrstack_a_shows_arguments_and_locals(case: Case, host: str) -> None:
    text = case.out(host, "clrstack -a").text
    n = case.truth["named"]
    level1 = frame_block(text, "DebuggeeHost.ThreadsScenario.Level1")
    assert level1[0] == "    PARAMETERS:"
    assert re.fullmatch(rf"        count \(0x[0-9A-F]{{16}}\) = 0x{n['count']:016x}", level1[1]), level1
    assert re.fullmatch(rf"        text \(0x[0-9A-F]{{16}}\) = 0x{int(n['text'], 16):016x}", level1[2]), level1
    level2 = frame_block(text, "DebuggeeHost.ThreadsScenario.Level2")
    assert re.fullmatch(rf"        item \(0x[0-9A-F]{{16}}\) = 0x{int(n['item'], 16):016x}", level2[1]), level2
    # Level3 has no parameters; its locals have no names (the runtime keeps none) but live in
    # stack slots with known values: the ThreadsLocalItem and the round counter.
    level3 = frame_block(text, "DebuggeeHost.ThreadsScenario.Level3")
    assert level3[0] == "    LOCALS:"
    values = [re.fullmatch(r"        0x([0-9A-F]{16}) = 0x([0-9a-f]{16})", ln) for ln in level3[1:]]
    assert all(values), level3
    assert {int(v.group(2), 16) for v in values} == {int(n["local"], 16), n["level3Rounds"]}
    # Each managed frame's block ends with an empty line.
    lines = text.splitlines()
    i = next(i for i, ln in enumerate(lines) if "ThreadsScenario.Level2(" in ln)
    assert lines[i + 3] == ""


def test_clrstack_f_adds_modules_and_offsets(case: Case, host: str) -> None:
    sites = call_sites(case.out(host, "clrstack -f").text)
    # -f -native interleaves native frames (module!symbol + off, or module + 0xoff) with the managed
    # ones (module.dll!Method + IL offset); -c counts both, as SOS's does. The thread waits in native code.
    first_managed = next(i for i, s in enumerate(sites) if ".dll!" in s)
    assert first_managed > 0, sites
    native = [s for s in sites[:first_managed] if not s.startswith("[")]  # "[…Frame: …]" rows are the runtime's
    assert native and all(re.fullmatch(r"\S+\.so[.\d]*(!\S+ \+ \d+| \+ 0x[0-9a-f]+)", s) for s in native), sites
    assert len(sites) <= 60
    assert any(re.fullmatch(r"SosextDebuggee\.dll!DebuggeeHost\.ThreadsScenario\.Level3\(\) \+ \d+", s)
               for s in sites), sites
    assert any(s.startswith("System.Private.CoreLib.dll!System.Threading.") for s in sites), sites


def test_clrstack_all_walks_every_thread(case: Case, host: str) -> None:
    text = case.out(host, "clrstack -all").text
    parts = re.split(r"^OS Thread Id: 0x([0-9a-f]+)$", text, flags=re.M)
    stacks = {int(parts[i], 16): parts[i + 1] for i in range(1, len(parts), 2)}
    t = case.truth
    assert in_order(t["named"]["frames"], call_sites(stacks[t["threads"]["named"]["osTid"]]))
    thrower_sites = call_sites(stacks[t["threads"]["thrower"]["osTid"]])
    assert in_order(["DebuggeeHost.ThreadsScenario.ThrowerThreadMain"], thrower_sites)
    assert in_order(["DebuggeeHost.ThreadsScenario.PoolWorkItem"],
                    call_sites(stacks[t["threads"]["pool"]["osTid"]]))
    assert in_order(["DebuggeeHost.Program.Main"], call_sites(stacks[t["threads"]["main"]["osTid"]]))


def test_clrstack_c_limits_frames(case: Case, host: str) -> None:
    assert len(call_sites(case.out(host, "clrstack -c").text)) == 3


# -- pe ----------------------------------------------------------------------------------------


def _check_exception_text(case: Case, text: str) -> None:
    exc = case.truth["exception"]
    assert field_of(text, "Exception object:") == f"{int(exc['address'], 16):016x}"
    assert field_of(text, "Exception type:") == exc["type"]
    assert field_of(text, "Message:") == exc["message"]
    inner = int(exc["inner"]["address"], 16)
    assert field_of(text, "InnerException:") == \
        f"{exc['inner']['type']}, Use printexception {inner:016X} to see more."
    assert field_of(text, "HResult:") == exc["hresult"][2:]
    assert field_of(text, "StackTraceString:") == "<none>"
    lines = text.splitlines()
    i = lines.index("StackTrace (generated):")
    assert lines[i + 1] == "    SP               IP               Function"
    frames = []
    for ln in lines[i + 2:]:
        if not ln:
            break
        m = re.fullmatch(r"    [0-9A-F]{16} [0-9A-F]{16} SosextDebuggee\.dll!(\S+)\(\)(\+0x[0-9a-f]+)?", ln)
        assert m, ln
        frames.append(m.group(1))
    assert frames == exc["stackTrace"]


def test_pe_shows_the_exception(case: Case, host: str) -> None:
    _check_exception_text(case, case.out(host, "pe exc").text)


def test_pe_without_address_shows_the_current_threads_exception(case: Case, host: str) -> None:
    assert case.out(host, "pe").text == case.out(host, "pe exc").text


def test_pe_of_the_inner_exception(case: Case, host: str) -> None:
    text = case.out(host, "pe inner").text
    inner = case.truth["exception"]["inner"]
    assert field_of(text, "Exception type:") == inner["type"]
    assert field_of(text, "Message:") == inner["message"]
    assert field_of(text, "InnerException:") == "<none>"
    lines = text.splitlines()
    assert lines[lines.index("StackTrace (generated):") + 1] == "<none>"  # never thrown


def test_bad_inputs_give_one_line_and_the_host_keeps_working(case: Case, host: str) -> None:
    # SOS answers these two with a line (dotnet-dump calls neither a failure).
    for cmd, line in (("pe notexc", "Not a valid exception object"),
                      ("pe bad", "Invalid exception object: 0000000000000010")):
        assert not case.out(host, cmd).errors and case.out(host, cmd).lines == [line], cmd
    assert case.out(host, "pe zzz").errors == ["error: Invalid exception object zzz"]
    assert len(case.out(host, "clrstack -opt").errors) == 1
    for key in ("pe notexc", "pe bad", "pe zzz", "clrstack -opt"):
        assert len(case.out(host, key).lines) == 1, key
    # The commands after the bad ones ran normally.
    assert call_sites(case.out(host, "clrstack -c").text)


def test_a_native_thread_is_reported_as_unmanaged(case: Case, host: str) -> None:
    rows = thread_rows(case.out(host, "clrthreads").text)
    if any(r.dbg == "2" for r in rows.values()):
        pytest.skip("thread 2 is a managed thread in this process")
    lines = case.out(host, "clrstack native").lines
    assert re.fullmatch(r"OS Thread Id: 0x[0-9a-f]+ \(2\)", lines[0]), lines
    assert lines[1:4] == ["Unable to walk the managed stack. The current thread is likely not a ",
                          "managed thread. You can run clrthreads to get a list of managed threads in",
                          "the process"]
    assert case.out(host, "pe native").lines == ["The current thread is unmanaged"]


def test_setthread_lists_threads_and_selects_only_in_the_cli(case: Case, host: str) -> None:
    lines = case.out(host, "setthread").lines
    current = [ln for ln in lines if ln.startswith("*")]
    assert len(current) == 1 and re.fullmatch(r"\*2 0x[0-9A-F]{4,} \(\d+\)", current[0]), lines
    named = case.truth["threads"]["named"]["osTid"]
    assert any(ln.endswith(f" 0x{named:04X} ({named})") for ln in lines)
    assert len(lines) == case.truth["osThreadCount"]  # every OS thread of the process
    errors = case.out(host, "setthread 99").errors
    if host.startswith("cli"):
        assert errors == ["error: Invalid thread index: 99"]  # dotnet-dump's words
    else:
        assert len(errors) == 1 and "the debugger chooses the current thread" in errors[0]


# -- threadpool, threadstate -------------------------------------------------------------------


def test_threadpool_counts(case: Case, host: str) -> None:
    text = case.out(host, "threadpool").text
    tp = case.truth["threadPool"]
    assert text.splitlines()[0] == "Using the Portable thread pool."
    assert int(field_of(text, "Workers Total:")) == tp["threadCount"]
    assert int(field_of(text, "Worker Min Limit:")) == tp["minWorkers"]
    assert int(field_of(text, "Worker Max Limit:")) == tp["maxWorkers"]
    running = int(field_of(text, "Workers Running:"))
    assert running >= 1  # the blocked work item
    assert running + int(field_of(text, "Workers Idle:")) == tp["threadCount"]
    assert re.fullmatch(r"\d+%", field_of(text, "CPU utilization:"))


HILL_ROW = re.compile(r"^ {0,9}(-?\d+\.\d\d) (\w+) +([\d,]+) +([\d,]+) (\d+\.\d\d)$")


def test_threadpool_hill_climbing_log_is_the_pools(case: Case, host: str) -> None:
    """threadpool -ti lists the hill climbing log the debuggee read from its own pool by
    reflection: the same steps, goals and sample counts, oldest first, the same time between them
    (the log may have grown between the truth and the dump, never shrunk)."""
    log = case.truth["threadPool"].get("hillClimbingLog")
    if not log:
        pytest.skip("the debuggee's pool logged no hill climbing step")
    text = case.out(host, "threadpool -ti").text
    assert "Hill Climbing Log:\n      Time Transition            #New Threads       #Samples Throughput\n" in text
    rows = [m.groups() for m in map(HILL_ROW.match, text.partition("Hill Climbing Log:")[2].splitlines()) if m]
    assert len(rows) >= len(log), rows
    assert rows[-1][0] == "0.00"
    for row, entry in zip(rows, log):
        assert (row[1], int(row[2].replace(",", "")), int(row[3].replace(",", ""))) == (
            entry["transition"], entry["newControlSetting"], entry["lastHistoryCount"])
        elapsed = (entry["tickCount"] - log[0]["tickCount"]) / 1000
        assert abs(float(row[0]) - float(rows[0][0]) - elapsed) <= 0.011, (row, entry)


def test_threadstate_names_the_bits(case: Case, host: str) -> None:
    lines = case.out(host, "threadstate").lines
    assert "    Thread Pool Worker Thread" in lines and "    Background" in lines


# -- hosts agree -------------------------------------------------------------------------------


def test_clrstack_i_lists_the_walk_in_stack_order_as_sos(case: Case, host: str) -> None:
    """SOS's ICorDebug listing (dotnet-dump and SOS in LLDB alike): three empty lines, then the
    rows in stack order; native code where the thread stands and where its outermost managed
    frame returns to ([NativeStackFrame]); the P/Invoke's transition once."""
    lines = case.out(host, "clrstack -i").lines
    assert lines[:4] == ["", "", "", "Dumping managed stack and managed variables using ICorDebug."], lines[:5]
    rows = [ln for ln in lines if re.match(r"^[0-9A-F]{16} ", ln)]
    sps = [int(r.split()[0], 16) for r in rows]
    assert sps == sorted(sps), rows
    assert rows[0].endswith("[NativeStackFrame]") and rows[-1].endswith("[NativeStackFrame]"), rows
    assert sum("[Managed to Unmanaged transition:" in r for r in rows) == 1, rows
    assert not any("Unmanaged to Managed transition" in r for r in rows), rows
    assert all(any(f" {m}(" in r for r in rows) for m in case.truth["named"]["frames"]), rows


def test_registers_are_the_cores_as_lldb_reads_them(case: Case) -> None:
    """registers in dotnet-dump's layout (segment registers and eflags first, upper case), with the
    values LLDB reads from the same core's notes (dotnet-dump itself swaps r8 and r9 and shows
    eflags as 0 there)."""
    ours = dict(ln.split(" = ") for ln in case.outputs["cli-core"]["registers"].lines)
    assert list(ours)[:7] == ["cs", "ds", "es", "fs", "gs", "ss", "eflags"], list(ours)
    assert list(ours)[7:] == ["rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11",
                              "r12", "r13", "r14", "r15", "rip"], list(ours)
    assert all(re.fullmatch(r"0x[0-9A-F]+", v) for v in ours.values()), ours
    lldb = {m.group(1): int(m.group(2), 16) for m in
            re.finditer(r"^\s*(\w+) = (0x[0-9a-f]+)", case.outputs["lldb-core"]["lldb registers"].text, re.M)}
    assert set(lldb) == {"r8", "r9", "rflags", "rip", "rsp"}, lldb
    for name in ("r8", "r9", "rip", "rsp"):
        assert int(ours[name], 16) == lldb[name], name
    assert int(ours["eflags"], 16) == lldb["rflags"]


def test_hosts_print_the_same_text_for_the_same_core(case: Case) -> None:
    hosts = [h for h in ("lldb-core", "cli-core", "gdb-core") if h in case.outputs]
    for key in ("pe", "pe exc", "pe inner", "clrstack -a", "clrstack -all", "threadpool"):
        # The first line numbers the thread: from 1 in the debuggers, from 0 in the CLI (as dotnet-dump).
        texts = {h: re.sub(r"^(OS Thread Id: 0x[0-9a-f]+) \(\d+\)", r"\1", case.outputs[h][key].text)
                 for h in hosts}
        for h in hosts[1:]:
            assert texts[h] == texts[hosts[0]], f"{key!r}: {hosts[0]} and {h} differ"
