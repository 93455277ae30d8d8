"""bpmd as SOS's test scripts use it (StackAndOtherTests.script): set at the process's first
instruction, before the runtime or the app's module is loaded, on the app's Main; the process
stops there. Then, after -clearall, a breakpoint on a source line and one on an IL offset of
methods not compiled yet; the process stops on those lines.

The app (tests/debuggees/BpmdApp, a Debug build as SOS's SymbolTestApp) runs once without a
debugger first: it prints the line each method says it is on (its own StackFrame) and the
sequence points the compiler wrote for it (the framework's PDB reader). Under the debugger the
same app must stop where that truth says, and run to the same end. Last, a method of
System.Private.CoreLib that runs its ReadyToRun code, never JIT-compiled.
"""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

import drivers
from harness import build_bpmd_app

pytestmark = pytest.mark.slow

NO_WX = {"DOTNET_EnableWriteXorExecute": "0"}  # see test_bpmd.py
TRUTH = "BPMDAPP-TRUTH "
SOURCE = Path(__file__).parent / "debuggees" / "BpmdApp" / "Program.cs"
CORELIB, COLUMN = "System.Private.CoreLib.dll", "System.Diagnostics.StackFrame.GetFileColumnNumber"


def _truth(text: str) -> dict:
    line = next((ln for ln in text.splitlines() if ln.startswith(TRUTH)), None)
    assert line is not None, text
    return json.loads(line[len(TRUTH):])


def _top_frame(clrstack: drivers.Output) -> str:
    assert clrstack.lines[1].split() == ["Child", "SP", "IP", "Call", "Site"], clrstack.text
    return clrstack.lines[2]


@pytest.fixture(params=["lldb"] + (["gdb"] if drivers.GDB else []))
def host(request) -> str:
    return request.param


def test_bpmd_from_process_launch_stops_in_main_then_on_a_line_and_an_il_offset(host: str, request,
                                                                               tmp_path: Path) -> None:
    drivers.require_dotnet_and_lldb()
    dll = build_bpmd_app(request.config.getoption("--tfm"))
    plain = subprocess.run([drivers.DOTNET_HOST, str(dll)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           text=True, timeout=120, env=NO_WX)
    truth = _truth(plain.stdout)
    line = truth["lineSeen"]
    # The line the method says it is on is the one its source marks, and a sequence point's.
    assert f"// bpmd-line" in SOURCE.read_text().splitlines()[line - 1]
    assert line in [ln for _il, ln in truth["byLine"]]
    il = next(il for il, ln in truth["byOffset"] if ln == truth["offsetSeen"])
    assert il > 0
    cmds = ["bpmd -nofuturemodule BpmdApp.dll BpmdApp.Program.Main", "bpmd Program.cs:x", "bpmd Program.cs:0",
            "bpmd BpmdApp.dll BpmdApp.Program.Main", "bpmd -list", "continue", "clrstack", "bpmd -list",
            f"bpmd {CORELIB} System.Diagnostics.StackFrame.GetFileLineNumber", "bpmd -clearall",
            f"bpmd Program.cs:{line}", f"bpmd BpmdApp.dll BpmdApp.Program.ByOffset {il}", "bpmd -list",
            "continue", "clrstack", "continue", "clrstack", "bpmd -list",
            f"bpmd {CORELIB} {COLUMN}", "continue", "clrstack", "bpmd -clearall", "continue"]
    stdout = tmp_path / "app.out"
    out = drivers.run_launch(host, cmds, [drivers.DOTNET_HOST, str(dll)], env=NO_WX, stdout=stdout, timeout=300)
    assert out[0].lines == ["error: No loaded method matches BpmdApp.dll!BpmdApp.Program.Main+0 "
                            "(-nofuturemodule: modules loaded later are not searched)"]
    assert out[1].lines == ["error: Unable to parse line number"]
    assert out[2].lines == ["error: Line number must be positive"]
    # Pending: no runtime yet (GDB also says that its own breakpoint on the JIT is pending).
    assert out[3].lines[-1] == "Adding pending breakpoints..." and not out[3].errors
    assert out[4].lines[2:] == ["1 - BpmdApp.dll!BpmdApp.Program.Main+0, pending"]
    top = _top_frame(out[6])
    assert re.search(r" BpmdApp\.Program\.Main\(System\.String\[\]\) \[.*/Program\.cs @ \d+\]$", top), top
    # Stopped at Main's first instruction: the code address bpmd planted at, now listed.
    listed = out[7].lines[2:]
    assert len(listed) == 1 and listed[0].startswith("1 - BpmdApp.dll!BpmdApp.Program.Main(System.String[]), 0x"), listed
    assert int(listed[0].rsplit(", ", 1)[1], 16) == int(top.split()[1], 16)
    # At Main, StackFrame is not loaded (no MethodDesc): the request finds the method's
    # ReadyToRun code in System.Private.CoreLib, loaded, by token.
    assert re.fullmatch(rf"Setting breakpoint: breakpoint set --address 0x[0-9A-F]{{16}} "
                        rf"\[{CORELIB}!System\.Diagnostics\.StackFrame\.GetFileLineNumber\+0\]", out[8].lines[-2])
    assert out[8].lines[-1] == "Adding pending breakpoints..."
    assert out[9].lines == ["All pending breakpoints cleared."]
    # Main runs: the types are loaded, the methods not compiled yet (pending on the JIT).
    assert out[10].lines[-1] == out[11].lines[-1] == "Adding pending breakpoints..."
    assert [ln.rsplit(", ", 1)[1] for ln in out[12].lines[2:]] == ["pending", "pending"]
    line_il = next(i for i, ln in truth["byLine"] if ln == line)  # the line's IL offset, as the PDB says
    assert out[12].lines[2].startswith(f"3 - BpmdApp.dll!BpmdApp.Program.ByLine(Int32)+{line_il}, 0x")
    assert out[12].lines[3].startswith(f"4 - BpmdApp.dll!BpmdApp.Program.ByOffset(Int32)+{il}, 0x")
    by_line, by_offset = _top_frame(out[14]), _top_frame(out[16])
    assert re.search(rf" BpmdApp\.Program\.ByLine\(Int32\) \[.*/Program\.cs @ {line}\]$", by_line), by_line
    assert re.search(rf" BpmdApp\.Program\.ByOffset\(Int32\) \[.*/Program\.cs @ {truth['offsetSeen']}\]$",
                     by_offset), by_offset
    codes = [int(ln.rsplit(", ", 1)[1], 16) for ln in out[17].lines[2:]]
    assert codes == [int(by_line.split()[1], 16), int(by_offset.split()[1], 16)]
    # A ReadyToRun method never called yet (its type is loaded now): bpmd breaks at its
    # precompiled code (no JIT-compilation will ever tell), and ByOffset's first call stops there.
    set_r2r = out[18].lines
    assert re.fullmatch(r"MethodDesc = [0-9a-f]{16}", set_r2r[-2]), set_r2r
    assert re.fullmatch(rf"Setting breakpoint: breakpoint set --address 0x[0-9A-F]{{16}} \[{COLUMN}\(\)\]",
                        set_r2r[-1]), set_r2r
    frames = out[20].lines[2:4]
    assert frames[0].split()[1:] == [set_r2r[-1].split()[-2][2:], "System.Diagnostics.StackFrame.GetFileColumnNumber()"]
    corelib_line = next(n for n, text in enumerate(SOURCE.read_text().splitlines(), 1) if "// bpmd-corelib" in text)
    assert corelib_line in [ln for _il, ln in truth["byOffset"]]
    assert re.search(rf" BpmdApp\.Program\.ByOffset\(Int32\) \[.*/Program\.cs @ {corelib_line}\]$", frames[1]), frames
    assert out[21].lines == ["All pending breakpoints cleared."]
    # The app ran on to its end and computed what it computes without a debugger.
    assert _truth(stdout.read_text()) == truth


def test_readytorun_entry_points_are_the_code_the_runtime_runs(request, tmp_path: Path) -> None:
    """Where bpmd breaks in a ReadyToRun method not run yet (read from the image's ReadyToRun
    header) is, for every System.Private.CoreLib method that has run its precompiled code,
    the code the runtime itself says it runs (the DAC's code header: JIT type ReadyToRun)."""
    import sosext
    from harness import Debuggee, build_debuggee
    from sosext.clr.code.readytorun import precompiled_code
    drivers.require_dotnet_and_lldb()
    tfm = request.config.getoption("--tfm")
    with Debuggee("stresslog", tfm=tfm, dll=build_debuggee(tfm), core_dir=tmp_path) as d, \
            sosext.open(pid=d.pid) as api:
        rt = api._model
        corelib = next(m for m in rt.catalog.modules() if m.file_name == CORELIB)
        reader = rt.catalog.require_metadata(corelib)
        compared = jitted = 0
        for rid in range(1, reader.row_count(0x06) + 1):
            token = 0x06000000 | rid
            method = rt.methods.from_token(corelib.address, token)
            if method is None or not method.native_code:
                continue
            header = rt.reader.code_header_data(method.native_code)
            if header is None or header.jit_type != 2:  # 2: ReadyToRun
                jitted += 1
                continue
            assert precompiled_code(rt.target, corelib.image_base, token) == method.native_code, method.name
            compared += 1
    assert compared >= 100, (compared, jitted)


def test_a_pending_bpmd_from_launch_under_wx_says_so_in_one_line(host: str, request, tmp_path: Path) -> None:
    """Without DOTNET_EnableWriteXorExecute=0 the JIT's code is mapped twice and no debugger can
    plant there: the watch says so in one line and stops where the JIT returned, in Main's
    prestub; after -clearall the app runs to its end as without a debugger."""
    drivers.require_dotnet_and_lldb()
    dll = build_bpmd_app(request.config.getoption("--tfm"))
    plain = subprocess.run([drivers.DOTNET_HOST, str(dll)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           text=True, timeout=120)
    cmds = ["bpmd BpmdApp.dll BpmdApp.Program.Main", "continue", "clrstack", "bpmd -list", "bpmd -clearall", "continue"]
    stdout = tmp_path / "app.out"
    out = drivers.run_launch(host, cmds, [drivers.DOTNET_HOST, str(dll)], stdout=stdout, timeout=300)
    errors = out[1].errors
    assert len(errors) == 1 and re.fullmatch(
        r"error: sosext breakpoint \d+: TargetError: cannot break at 0x[0-9a-f]+: the runtime maps JIT code twice "
        r"\(W\^X\) and a debugger cannot plant a breakpoint there; start the process with "
        r"DOTNET_EnableWriteXorExecute=0", errors[0]), out[1].text
    assert "[PrestubMethodFrame: " in out[2].lines[2] and out[2].lines[2].endswith(" BpmdApp.Program.Main(System.String[])")
    # Matched by name at the compilation (a MethodDesc now), but no code to break at.
    listed = out[3].lines[2:]
    assert len(listed) == 1 and listed[0].startswith("1 - BpmdApp.dll!BpmdApp.Program.Main(System.String[]), 0x")
    assert listed[0].endswith(", pending"), listed
    assert out[4].lines == ["All pending breakpoints cleared."]
    assert _truth(stdout.read_text()) == _truth(plain.stdout)
