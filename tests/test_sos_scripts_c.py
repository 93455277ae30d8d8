"""SOS's Reflection and LineNums scripts, and the host-command lines of WebApp and
OtherCommands (`threads -v`, `modules -v`, `registers`, `clrmodules -v`), asserted against our
own `reflectlines` debuggee.

The debuggee keeps two exceptions caught on their threads: a TargetInvocationException from a
method invoked through reflection (its InnerException the method's own System.Exception), and
an exception thrown inside `while (true)` in LineBar, called by LineFoo twice in a row (SOS's
LineNums corner cases). It prints each exception's type, message, HResult and its
`new StackTrace(e, true)` frames with lines. SOS's scripts run EXTCOMMAND lines as `sos <cmd>`
in LLDB (and GDB here) and as the bare command in dotnet-dump (our CLI); so does this batch.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import drivers
from harness import Debuggee, build_debuggee
from test_stack_values import Case, addr, collect, crash_dump
from test_stack_values import host  # noqa: F401 - the same host fixture (LLDB/GDB live and core, CLI core)
from test_stacks_scripts import check_exception, lldb_live_until_abort, named, stack_rows

pytestmark = pytest.mark.slow

# SOS.UnitTests' placeholders (SOSRunner.cs): a hex number (maybe with a ` in the middle), a decimal one.
HEXVAL = r"[A-Fa-f0-9]+(`[A-Fa-f0-9]+)?"
DECVAL = r"[,0-9]+(\.[0-9]+)?"


def _sos(host: str, command: str) -> str:
    """EXTCOMMAND as SOSRunner plays it: `sos <cmd>` in a debugger, the bare command in dotnet-dump."""
    return command if host.startswith("cli") else f"sos {command}"


def batch(truth: dict, host: str) -> list[tuple[str, str]]:
    t = truth["reflectlines"]
    inner = addr(t["reflection"]["exception"]["inner"]["address"])
    pairs: list[tuple[str, str]] = []
    for key in ("reflection", "linenums"):
        pairs += [(f"{key} select", drivers.select_thread(host, t[key]["osTid"])), (f"{key} pe", "pe"),
                  (f"{key} pe -lines", "pe -lines"), (f"{key} clrstack", "clrstack")]
        pairs += [(f"{key} threads -v", _sos(host, "threads -v")), (f"{key} registers", _sos(host, "registers"))]
    pairs += [("inner pe", f"pe {inner:x}"), ("threads", _sos(host, "threads")),
              ("modules -v", _sos(host, "modules -v")), ("clrmodules -v", _sos(host, "clrmodules -v"))]
    return pairs


@pytest.fixture(scope="module")
def case(request, tmp_path_factory) -> Case:
    return collect(request, tmp_path_factory, "reflectlines", batch, None)


def _verify(text: str, pattern: str) -> None:
    """A script's VERIFY: the pattern, its placeholders expanded, found in the output."""
    regex = pattern.replace("<HEXVAL>", HEXVAL).replace("<DECVAL>", DECVAL)
    assert re.search(regex, text, re.MULTILINE), (pattern, text)


# -- Reflection.script -------------------------------------------------------------------------------


def test_pe_shows_the_target_invocation_exception_and_names_its_inner_one(case: Case, host: str) -> None:
    """Reflection.script 5): TargetInvocationException, HResult 80131604, the inner exception's
    `System.Exception, Use printexception <addr> to see more.`, frames from the debuggee's trace."""
    e = case.truth["reflectlines"]["reflection"]["exception"]
    assert e["type"] == "System.Reflection.TargetInvocationException" and e["hresult"] == 0x80131604
    text = case.out(host, "reflection pe").text
    check_exception(text.splitlines(), e)
    _verify(text, r"InnerException:\s+System\.Exception, Use !?printexception <HEXVAL> to see more.\s+")
    _verify(text, r"<HEXVAL>\s+<HEXVAL>\s+SosextDebuggee.*!DebuggeeHost\.ReflectLinesScenario\.ReflectMain(\(Boolean\))?\+0x<HEXVAL>")
    _verify(text, r"HResult:\s+80131604")


def test_pe_of_the_inner_exception(case: Case, host: str) -> None:
    """Reflection.script 6): `pe <the address InnerException names>`: System.Exception, its
    message, no inner exception, HResult 80131500, thrown by the invoked method."""
    e = case.truth["reflectlines"]["reflection"]["exception"]["inner"]
    assert e["type"] == "System.Exception" and e["inner"] is None
    text = case.out(host, "inner pe").text
    check_exception(text.splitlines(), e)
    _verify(text, r"\s+<HEXVAL>\s+<HEXVAL>\s+SosextDebuggee.*!DebuggeeHost\.ReflectLinesScenario\+ReflectInvoked"
                  r"\.ExceptionNoHandler(\(\))?\+0x<HEXVAL>")
    _verify(text, r"HResult:\s+80131500")


def test_pe_lines_gives_the_invoking_line(case: Case, host: str) -> None:
    """Reflection.script 7): pe -lines ends the caller's frame with [file @ line] (the line of
    the Invoke call, as the debuggee's StackTrace says)."""
    e = case.truth["reflectlines"]["reflection"]["exception"]
    check_exception(case.out(host, "reflection pe -lines").lines, e, with_lines=True)
    assert any(f["line"] for f in e["frames"])


# -- LineNums.script ---------------------------------------------------------------------------------


def test_pe_and_pe_lines_of_a_throw_inside_while_true(case: Case, host: str) -> None:
    """LineNums.script: Bar, Foo, Main in pe; with -lines, the throw's line in Bar and the first
    of Foo's two calls (a return address that is the next call's first instruction)."""
    e = case.truth["reflectlines"]["linenums"]["exception"]
    assert [f["method"].rsplit(".", 1)[1] for f in e["frames"]] == ["LineBar", "LineFoo", "LineMain"]
    check_exception(case.out(host, "linenums pe").lines, e)
    check_exception(case.out(host, "linenums pe -lines").lines, e, with_lines=True)
    _verify(case.out(host, "linenums pe").text, r"StackTrace\s+\(generated\):\s+\s+SP\s+IP\s+Function\s+")


def test_clrstack_shows_the_throwing_frames_with_their_lines(case: Case, host: str) -> None:
    """LineNums.script's ClrStack: below the catch handler's frames and the exception frame, the
    frames that threw still sit on the stack: Bar, Foo, Main with the same lines as the trace."""
    e = case.truth["reflectlines"]["linenums"]["exception"]
    rows = stack_rows(case.out(host, "linenums clrstack").text)
    i = next(i for i, r in enumerate(rows) if r.site.startswith("[SoftwareExceptionFrame: "))
    thrown = rows[i + 1:i + 1 + len(e["frames"])]
    assert all(named(r, f["method"]) for r, f in zip(thrown, e["frames"])), rows
    assert [r.line for r in thrown] == [f["line"] for f in e["frames"]], rows


# -- the scripts as SOS plays them: the runtime's crash dump of the unhandled exception ----------------


def _crash_hosts(core: Path, exe: str) -> list[tuple[str, dict]]:
    hosts = [("cli-core", {"core": core}), ("lldb-core", {"core": core, "exe": exe})]
    return hosts + ([("gdb-core", {"core": core, "exe": exe})] if drivers.GDB else [])


def _trace_methods(lines: list[str]) -> list[str]:
    """pe's stack trace rows as `module!Method` names, without arguments and offset."""
    return [re.sub(r"\(.*$", "", ln.split()[2]) for ln in lines if re.match(r"^    [0-9A-F]{16} [0-9A-F]{16} ", ln)]


def test_reflection_script_on_the_crash_dump(request, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Reflection.script as SOS runs it: the TargetInvocationException kills the process; on the
    runtime's crash dump pe (on the thread that took the signal) names it and its inner
    exception, `pe <inner>` shows the invoked method's exception, pe -lines the Invoke call's line."""
    drivers.require_dotnet_and_lldb()
    truth, exe, tid, core = crash_dump(request, tmp_path, "reflectlines", "reflectcrash")
    caught = truth["reflectlines"]["reflection"]["exception"]
    for host, kw in _crash_hosts(core, exe):
        pe, lines_out = drivers.run_in_host(host, ["pe", "pe -lines"], **kw)
        lines = pe.lines
        assert f"Exception type:   {caught['type']}" in lines and f"Message:          {caught['rawMessage']}" in lines, \
            (host, pe.text)
        m = re.search(r"^InnerException:   System\.Exception, Use printexception ([0-9A-F]{16}) to see more\.$",
                      pe.text, re.M)
        assert m, (host, pe.text)
        _verify(pe.text, r"HResult:\s+80131604")
        want = [f"{f['module']}!{f['method']}" for f in caught["frames"]]
        assert _trace_methods(lines)[:len(want)] == want, (host, lines)
        main = next(f for f in caught["frames"] if f["method"].endswith(".ReflectMain"))
        assert any(ln.endswith(f"ReflectLinesScenario.cs @ {main['line']}]") and "!DebuggeeHost.ReflectLinesScenario"
                   ".ReflectMain(Boolean)+0x" in ln for ln in lines_out.lines), (host, lines_out.text)
        inner = drivers.run_in_host(host, [f"pe {m.group(1)}"], **kw)[0]
        want_inner = caught["inner"]
        assert f"Exception type:   {want_inner['type']}" in inner.lines, (host, inner.text)
        assert f"Message:          {want_inner['rawMessage']}" in inner.lines and "InnerException:   <none>" in inner.lines
        _verify(inner.text, r"HResult:\s+80131500")
        assert _trace_methods(inner.lines)[0] == f"{want_inner['frames'][0]['module']}!{want_inner['frames'][0]['method']}"
    core.unlink(missing_ok=True)


def test_linenums_script_on_the_crash_dump(request, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """LineNums.script as SOS runs it: the unhandled exception's pe and pe -lines, and clrstack
    of the crashed thread with Bar's throw line, Foo's first call and Main's call."""
    drivers.require_dotnet_and_lldb()
    truth, exe, tid, core = crash_dump(request, tmp_path, "reflectlines", "linecrash")
    caught = truth["reflectlines"]["linenums"]["exception"]
    want = [(f["method"], f["line"]) for f in caught["frames"]]
    for host, kw in _crash_hosts(core, exe):
        pe, pe_lines, stack = drivers.run_in_host(host, ["pe", "pe -lines", "clrstack"], **kw)
        assert f"Message:          {caught['rawMessage']}" in pe.lines and "InnerException:   <none>" in pe.lines, \
            (host, pe.text)
        _verify(pe.text, r"HResult:\s+80131500")
        assert [m.split("!")[1] for m in _trace_methods(pe.lines)][:3] == [m for m, _ln in want], (host, pe.text)
        rows = [ln for ln in pe_lines.lines if re.match(r"^    [0-9A-F]{16} [0-9A-F]{16} ", ln)][:3]
        assert [int(re.search(r" @ (\d+)\]$", r).group(1)) for r in rows] == [ln for _m, ln in want], (host, rows)
        srows = stack_rows(stack.text)
        i = next(i for i, r in enumerate(srows) if named(r, want[0][0]))
        assert [(r.site.split("(")[0], r.line) for r in srows[i:i + 3]] == want, (host, stack.text)
    core.unlink(missing_ok=True)


@pytest.mark.parametrize("command", ["reflectcrash", "linecrash"])
def test_lldb_live_at_the_unhandled_exception(request, tmp_path: Path, command: str) -> None:  # type: ignore[no-untyped-def]
    """Reflection.script and LineNums.script live: LLDB attached, the exception goes unhandled,
    LLDB stops at the runtime's abort; pe -lines (and for LineNums clrstack) on that thread."""
    drivers.require_dotnet_and_lldb()
    tfm = request.config.getoption("--tfm")
    with Debuggee("reflectlines", tfm=tfm, dll=build_debuggee(tfm), core_dir=tmp_path) as d:
        truth = d.truth["reflectlines"]
        pe, clrstack, threads = lldb_live_until_abort(d, command, ["pe -lines", "clrstack", "sos threads -v"])
    e = truth["reflection" if command == "reflectcrash" else "linenums"]["exception"]
    assert not pe.errors and f"Exception type:   {e['type']}" in pe.lines, pe.text
    assert f"Message:          {e['rawMessage']}" in pe.lines and f"HResult: {e['hresult']:x}" in pe.lines, pe.text
    if e["inner"] is not None:
        assert f"InnerException:   {e['inner']['type']}, Use printexception " in pe.text, pe.text
    rows = [ln for ln in pe.lines if re.match(r"^    [0-9A-F]{16} [0-9A-F]{16} \S+\.dll!DebuggeeHost\.", ln)]
    want = [(f["method"], f["line"]) for f in e["frames"] if f["method"].startswith("DebuggeeHost.")]
    got = [(re.search(r"!(\S+?)\(", ln).group(1), int(re.search(r" @ (\d+)\]$", ln).group(1))) for ln in rows]
    assert got == want, (got, want)
    tid = int(re.fullmatch(r"OS Thread Id: 0x([0-9a-f]+) \(\d+\)", clrstack.lines[0]).group(1), 16)
    assert re.search(rf"^\*\d+ 0x{tid:04X} \({tid}\)$", threads.text, re.M), threads.text  # the aborting thread
    if command == "linecrash":
        sites = [(r.site.split("(")[0], r.line) for r in stack_rows(clrstack.text) if not r.site.startswith("[")]
        assert sites[sites.index(want[0]):sites.index(want[0]) + 3] == want, sites


# -- DumpGCData.script -------------------------------------------------------------------------------


def _pre_and_post_pin(text: str) -> list[int]:
    """dumpgcdata's `pre and post pin: N` of each heap."""
    return [int(m) for m in re.findall(r"^\s+pre and post pin: (\d+)$", text, re.M)]


@pytest.mark.parametrize("gc", ["wks", "svr"])
def test_dumpgcdata_counts_the_pinned_plug_of_one_gc(request, tmp_path: Path, gc: str) -> None:  # type: ignore[no-untyped-def]
    """DumpGCData.script: between its two breaks the debuggee pins one array and collects once,
    and `pre and post pin` goes from 0 to 1. Ours has collected before (its counter need not
    start at 0): the runtime's counters, summed over the heaps, grow by exactly one, and every
    host reads the same values."""
    drivers.require_dotnet_and_lldb()
    tfm = request.config.getoption("--tfm")
    with Debuggee("reflectlines", gc=gc, tfm=tfm, dll=build_debuggee(tfm), core_dir=tmp_path) as d:
        before = _pre_and_post_pin(drivers.run_lldb(["dumpgcdata"], pid=d.pid)[0].text)
        d.send("pin")
        line = d.read_line(60)
        assert line is not None and line.startswith("SOSEXT-PINNED "), line
        after_text = drivers.run_lldb(["sos dumpgcdata"], pid=d.pid)[0].text
        if drivers.GDB:
            assert _pre_and_post_pin(drivers.run_gdb(["dumpgcdata"], pid=d.pid)[0].text) == \
                _pre_and_post_pin(after_text)
        core = d.write_core("heap", tmp_path / "pinned.core")
    after = _pre_and_post_pin(after_text)
    assert len(before) == len(after) >= 1 and sum(after) - sum(before) == 1, (before, after)
    assert _pre_and_post_pin(drivers.run_cli(["dumpgcdata"], core=core)[0].text) == after
    core.unlink(missing_ok=True)


# -- WebApp.script / OtherCommands.script: the host commands --------------------------------------------


def test_threads_lists_every_thread_with_verbose_pointers(case: Case, host: str) -> None:
    """`threads -v`: `<index> 0x<tid> (<tid>)` per thread (the scripts' pattern), then IP, SP, FP
    and TEB; the current thread's IP and SP are its registers' rip and rsp."""
    t = case.truth["reflectlines"]
    for key in ("reflection", "linenums"):
        text = case.out(host, f"{key} threads -v").text
        _verify(text, r"\s*<DECVAL>\s+0x<HEXVAL>\s+\(<DECVAL>\)\s+")
        tid = t[key]["osTid"]
        lines = text.splitlines()
        cur = [i for i, ln in enumerate(lines) if ln.startswith("*")]
        assert len(cur) == 1 and lines[cur[0]].endswith(f" 0x{tid:04X} ({tid})"), lines
        block = lines[cur[0] + 1:cur[0] + 5]
        regs = dict(ln.split(" = ") for ln in case.out(host, f"{key} registers").lines if " = " in ln)
        _verify(case.out(host, f"{key} registers").text, r"([r|e]ip|pc) = 0x<HEXVAL>")
        assert block == [f"    IP  0x{int(regs['rip'], 16):016X}", f"    SP  0x{int(regs['rsp'], 16):016X}",
                         f"    FP  0x{int(regs['rbp'], 16):016X}", "    TEB 0x0000000000000000"], (block, regs)
    plain = case.out(host, "threads").lines
    assert {t[k]["osTid"] for k in ("reflection", "linenums")} <= {int(ln.rsplit("(", 1)[1][:-1]) for ln in plain}
    assert all(re.fullmatch(r"[* ]\d+ 0x[0-9A-F]{4,} \(\d+\)", ln) for ln in plain), plain


def test_modules_and_clrmodules_verbose(case: Case, host: str) -> None:
    """`modules -v` (`<base> <size> path`, the script's pattern) lists the debuggee's assembly;
    `clrmodules -v` gives SOS's lines for each managed module."""
    text = case.out(host, "modules -v").text
    _verify(text, r"\s*<HEXVAL>\s+<HEXVAL>.*")
    # dotnet-dump's rows: upper-case hex, the file's first image and the PE file's SizeOfImage (as
    # the assembly on disk says, unless the next file starts sooner), then the total.
    row = re.search(r"^([0-9A-F]{16}) ([0-9A-F]{8}) (\S*/SosextDebuggee\.dll)$", text, re.M)
    assert row, text
    image = Path(row.group(3)).read_bytes()
    pe = int.from_bytes(image[0x3C:0x40], "little")
    assert int(row.group(2), 16) <= int.from_bytes(image[pe + 24 + 56:pe + 24 + 60], "little")
    rows = re.findall(r"^[0-9A-F]{16} ([0-9A-F]{8}) ", text, re.M)
    assert text.splitlines()[-1] == f"Total image size: {sum(int(s, 16) for s in rows)}"
    verbose = case.out(host, "clrmodules -v").text
    _verify(verbose, r"\s*<HEXVAL>.*")
    blocks = [b for b in re.split(r"^(?=\S)", verbose, flags=re.M) if b.strip()]
    ours = next(b for b in blocks if b.splitlines()[0].endswith("/SosextDebuggee.dll"))
    labels = [ln.split(":")[0].strip() for ln in ours.splitlines()[1:]]
    assert labels == ["AssemblyName", "ImageBase", "Size", "ModuleAddress", "AssemblyAddress", "IsPEFile",
                      "Layout", "IsDynamic", "MetadataAddress", "MetadataSize", "PdbInfo", "Version"], ours
    # The runtime's assembly name, as SOS prints it: the path it was loaded from.
    assert f"    AssemblyName:    {ours.splitlines()[0]}" in ours.splitlines()
