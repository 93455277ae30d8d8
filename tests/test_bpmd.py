"""bpmd in LLDB and GDB on a live process: a method already JIT-compiled and one compiled
only when the debuggee runs it after a stdin command; the process stops in each, and
clrstack's top frame is that method. Plus -list/-clear, the one line on a core, and the one
line where the runtime's W^X mapping keeps the debugger from planting a breakpoint.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import drivers
from harness import Debuggee, build_debuggee

pytestmark = pytest.mark.slow

LIVE = ["lldb-live"] + (["gdb-live"] if drivers.GDB else [])
JITTED = "DebuggeeHost.BpmdTargets.Jitted"
FRESH = "DebuggeeHost.BpmdTargets.Fresh"
# JIT code is mapped twice by default (W^X) and a debugger cannot write its trap there.
NO_WX = {"DOTNET_EnableWriteXorExecute": "0"}


def _feed(host: str, pid: int, line: str) -> str:
    """A debugger command that writes a line to the debuggee's stdin (read when it runs)."""
    return f"{'script' if host.startswith('lldb') else 'python'} open('/proc/{pid}/fd/0', 'w').write('{line}\\n')"


def _sync(host: str) -> str:
    # LLDB reading commands from a pipe runs `continue` asynchronously; the test needs it to wait.
    return "script lldb.debugger.SetAsync(False)" if host.startswith("lldb") else "echo"


@pytest.fixture(params=LIVE)
def host(request) -> str:
    return request.param


def test_bpmd_stops_in_jitted_and_pending_methods(host: str, request, tmp_path: Path) -> None:
    drivers.require_dotnet_and_lldb()
    tfm = request.config.getoption("--tfm")
    with Debuggee("stresslog", env=NO_WX, tfm=tfm, dll=build_debuggee(tfm), core_dir=tmp_path) as d:
        calls = d.truth["bpmd"]["calls"]
        truth_md = {k: d.truth["bpmd"][k] for k in ("jittedMd", "freshMd")}
        cmds = [_sync(host), f"bpmd SosextDebuggee.dll {JITTED}", f"bpmd SosextDebuggee {FRESH}", "bpmd -list",
                _feed(host, d.pid, "bpmd-jitted"), "continue", "clrstack",
                _feed(host, d.pid, "bpmd-fresh"), "continue", "clrstack", "bpmd -list",
                "bpmd -clear 1", "bpmd -clear 7", "bpmd -list", "bpmd -clearall", "bpmd -list",
                f"bpmd SosextDebuggee {FRESH}.NoSuch", "bpmd -nofuturemodule NoSuchModule.dll A.B", "bpmd -md 1234", "bpmd",
                f"bpmd -md {d.truth['bpmd']['jittedMd']}", "bpmd -list", "bpmd NoSuchModule.dll A.B", "bpmd -list"]
        out = [o.text for o in drivers.run_in_host(host, cmds, pid=d.pid, timeout=300)]
        # Detached, the debuggee ran both methods once each: their results come back.
        assert d.read_line(60) == f"SOSEXT-BPMD {7 * 3 + calls + 1}"
        assert d.read_line(60) == f"SOSEXT-BPMD {7 * 5 + calls + 2}"
    lines = [t.splitlines() for t in out]
    jitted, fresh = lines[1], lines[2]
    md = {k: int(v, 16) for k, v in truth_md.items()}
    assert jitted[-2] == f"MethodDesc = {md['jittedMd']:016x}" and fresh[-2] == f"MethodDesc = {md['freshMd']:016x}"
    assert re.fullmatch(r"Found 1 methods in module [0-9a-f]{16}\.\.\.", jitted[-3]), jitted
    assert re.fullmatch(rf"Setting breakpoint: breakpoint set --address 0x[0-9A-F]{{16}} \[{JITTED}\(Int32\)\]",
                        jitted[-1]), jitted
    assert fresh[-1] == "Adding pending breakpoints...", fresh
    listed = lines[3][-2:]
    assert listed[0].startswith(f"1 - SosextDebuggee.dll!{JITTED}(Int32), 0x") and not listed[0].endswith("pending")
    assert listed[1].startswith(f"2 - SosextDebuggee.dll!{FRESH}(Int32), 0x") and listed[1].endswith(", pending")
    for stack in (lines[6], lines[9]):
        assert stack[1].split() == ["Child", "SP", "IP", "Call", "Site"], stack
    assert f" {JITTED}(Int32) " in lines[6][2] and f" {FRESH}(Int32) " in lines[9][2]
    # The stop is at the methods' code start, which -list now shows for both.
    code = {ln.split(" - ")[0]: ln.rsplit(", ", 1)[1] for ln in lines[10][2:]}
    assert int(code["1"], 16) == int(lines[6][2].split()[1], 16)
    assert int(code["2"], 16) == int(lines[9][2].split()[1], 16)
    assert lines[11] == [f"Cleared breakpoint 1 ({JITTED}(Int32))"]
    assert lines[12] == ["error: Invalid pending breakpoint index 7"]
    assert [ln.split(" - ")[0] for ln in lines[13][2:]] == ["2"]
    assert lines[14] == ["All pending breakpoints cleared."]
    assert len(lines[15]) == 2
    assert lines[16] == [f"error: No method '{FRESH}.NoSuch' in SosextDebuggee"]
    assert lines[17] == ["error: Failed to find module matching 'NoSuchModule.dll'."]
    assert lines[18] == ["error: 0x1234 is not a MethodDesc"]
    assert lines[19][0].startswith("error: usage: bpmd [-nofuturemodule] <module name>")
    # -md finds the same method and breaks at the same code as the name did.
    assert lines[20][-2:] == [f"MethodDesc = {md['jittedMd']:016x}", lines[1][-1]]
    assert lines[21][-1].startswith(f"3 - SosextDebuggee.dll!{JITTED}(Int32), 0x{md['jittedMd']:x}, ")
    assert lines[21][-1].rsplit(", ", 1)[1] == code["1"]
    # A module not loaded (yet): pending, matched by name if it loads and the JIT compiles the method.
    assert lines[22][-1] == "Adding pending breakpoints..." and not [ln for ln in lines[22] if ln.startswith("error")]
    assert lines[23][-1] == "4 - NoSuchModule.dll!A.B+0, pending"


def test_bpmd_says_why_it_cannot_break_in_wx_code(host: str, request, tmp_path: Path) -> None:
    drivers.require_dotnet_and_lldb()
    tfm = request.config.getoption("--tfm")
    with Debuggee("stresslog", tfm=tfm, dll=build_debuggee(tfm), core_dir=tmp_path) as d:
        out = drivers.run_in_host(host, [f"bpmd SosextDebuggee.dll {JITTED}", "bpmd -list"], pid=d.pid)
    errs = out[0].errors
    assert len(errs) == 1 and re.fullmatch(
        r"error: cannot break at 0x[0-9a-f]+: the runtime maps JIT code twice \(W\^X\) and a debugger cannot plant "
        r"a breakpoint there; start the process with DOTNET_EnableWriteXorExecute=0", errs[0]), out[0].text
    assert out[1].lines == ["!bpmd breakpoint list", " Breakpoint index - Location, MethodDesc, Method Token, Code"]


def test_a_pending_bpmd_under_wx_stops_after_the_jit_with_one_line(host: str, request, tmp_path: Path) -> None:
    """The method's code appears in W^X pages: the watch cannot plant there, says so in one line and
    stops where the JIT returned (the process is left as it was: after -clearall it runs on)."""
    drivers.require_dotnet_and_lldb()
    tfm = request.config.getoption("--tfm")
    with Debuggee("stresslog", tfm=tfm, dll=build_debuggee(tfm), core_dir=tmp_path) as d:
        calls = d.truth["bpmd"]["calls"]
        cmds = [_sync(host), f"bpmd SosextDebuggee {FRESH}", _feed(host, d.pid, "bpmd-fresh"), "continue",
                "bpmd -list", "bpmd -clearall"]
        out = drivers.run_in_host(host, cmds, pid=d.pid, timeout=300)
        assert d.read_line(60) == f"SOSEXT-BPMD {7 * 5 + calls + 1}"
    assert out[1].lines[-1] == "Adding pending breakpoints..."
    errs = out[3].errors
    assert len(errs) == 1 and re.fullmatch(r"error: sosext breakpoint \d+: TargetError: cannot break at 0x[0-9a-f]+: "
                                           r"the runtime maps JIT code twice \(W\^X\).*", errs[0]), out[3].text
    assert out[4].lines[-1].endswith(", pending")
    assert out[5].lines == ["All pending breakpoints cleared."]
