"""What more of SOS's own behavioural scripts check (StackAndOtherTests, DumpAsyncContinuationOrder,
MiniDumpLocalVarLookup, Overflow, and WebApp's commands), asserted against our `sosscripts`
debuggee in LLDB live, LLDB on a with-heap dump and the CLI on that dump, and GDB live and on the
dump when it is installed (triage dumps too, where a script runs on mini dumps).

The `sosscripts` debuggee parks a thread in SymbolsMain(string[]) → Foo1 → Foo2 → Foo4(string)
(SOS's SymbolTestApp shape: a string argument, a RuntimeType local, an int local whose value is
known) and prints that thread's own System.Diagnostics.StackTrace with lines; it keeps a task
awaited by three async methods in a known order and a timer; on the stdin command "overflow" it
dies of a stack overflow. Every check compares our output with those values.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import drivers
from harness import Debuggee, build_debuggee
from sosparse import STACK_ROW
from test_stack_values import I_ROW, addr, crash_dump, run
from test_threads import Case
from test_stacks_scripts import _CONTINUE_TO_ABORT

pytestmark = pytest.mark.slow

HOSTS = ["lldb-live", "lldb-core", "cli-core"]
if drivers.GDB:
    HOSTS += ["gdb-live", "gdb-core"]
TRIAGE_HOSTS = ["cli-triage", "lldb-triage"]

FOO4 = "DebuggeeHost.ScriptsScenario.Foo4"


def first_batch(truth: dict, host: str) -> list[tuple[str, str]]:
    s = truth["scripts"]
    return [
        ("select", drivers.select_thread(host, s["osTid"])),
        ("clrstack", "clrstack"), ("clrstack -f", "clrstack -f"), ("clrstack -a", "clrstack -a"),
        ("clrstack -r", "clrstack -r"), ("clrstack -i", "clrstack -i"), ("clrstack -i -a", "clrstack -i -a"),
        ("clrstack -l", "clrstack -l"), ("clrstack -i -l", "clrstack -i -l"),
        ("dso", "dso"), ("dso -verify", "dso -verify"),
        ("dumpstack", "dumpstack"), ("dumpstack -EE", "dumpstack -EE"), ("eestack", "eestack"),
        ("name2ee", f"name2ee *!{FOO4}"), ("clrthreads", "clrthreads"),
        ("runtimes", "runtimes"), ("eeversion", "eeversion"), ("sosstatus", "sosstatus"),
        ("dumpasync --tasks", "dumpasync --tasks"), ("dumpasync --completed", "dumpasync --completed"),
        ("dumpasync --stats", "dumpasync --stats"), ("dumpasync --coalesce", "dumpasync --coalesce"),
        ("timerinfo", "timerinfo"), ("clrmodules", "clrmodules"), ("pstacks", "parallelstacks"),
        ("clrstack -all", "clrstack -all"), ("dumpheap -stat", "dumpheap -stat"),
        ("pinvoke select", drivers.select_thread(host, s["pinvokeTid"])), ("pinvoke clrstack", "clrstack"),
    ]


def foo4_ip(text: str) -> int:
    row = next(m for m in map(STACK_ROW.match, text.splitlines()) if m and m.group(3).startswith(FOO4 + "("))
    return int(row.group(2), 16)


def stub_ip(text: str) -> int:
    row = next((m for m in map(STACK_ROW.match, text.splitlines()) if m and m.group(3).startswith("ILStubClass.IL_STUB_PInvoke(")), None)
    return int(row.group(2), 16) if row else 0


def second_batch(truth: dict, host: str, ip: int, md: int, mt: int, stub: int) -> list[tuple[str, str]]:
    s = truth["scripts"]
    return [
        ("stub ip2md", f"ip2md {stub - 1:x}"),
        ("select", drivers.select_thread(host, s["osTid"])),
        # clrstack's IP is a return address: one byte back is the call, on the line clrstack shows.
        ("ip2md", f"ip2md {ip - 1:x}"), ("dumpil", f"dumpil {md:x}"),
        ("clru", f"clru {md:x}"), ("clru -n", f"clru -n {md:x}"), ("clru -o", f"clru -o {md:x}"),
        ("dumpasync --methodtable", f"dumpasync --methodtable 0x{mt:x}"), ("dumpmt", f"dumpmt {mt:x}"),
    ]


def triage_batch(truth: dict, host: str) -> list[tuple[str, str]]:
    return [("select", drivers.select_thread(host, truth["scripts"]["osTid"])),
            ("clrstack -l", "clrstack -l"), ("clrstack -i -l", "clrstack -i -l"), ("clrstack", "clrstack")]


def _both(host: str, truth: dict, **kw) -> dict[str, drivers.Output]:  # type: ignore[no-untyped-def]
    """The first batch, then the commands that take what it printed (Foo4's IP, its MethodDesc, a
    MethodTable from dumpasync --stats), as SOS's scripts chain them with <POUT>."""
    first = run(host, first_batch(truth, host), **kw)
    ip = foo4_ip(first["clrstack"].text)
    m = re.search(r"^MethodDesc:\s+([0-9a-f]+)$", first["name2ee"].text, re.M)
    md = int(m.group(1), 16) if m else 0
    rows = [ln.split() for ln in first["dumpasync --stats"].lines[1:] if re.match(r"^[0-9a-f]{16} ", ln)]
    mt = int(rows[0][0], 16) if rows else 0
    stub = stub_ip(first["pinvoke clrstack"].text)
    second = run(host, second_batch(truth, host, ip, md, mt, stub), **kw)
    m = re.search(r"^MethodDesc:\s+([0-9a-f]+)$", second["stub ip2md"].text, re.M)
    stub_md = int(m.group(1), 16) if m else 0
    third = run(host, [("stub clru", f"clru {stub_md:x}"), ("stub clru -il", f"clru -il {stub_md:x}")], **kw)
    return {**first, **second, **third}


@pytest.fixture(scope="module")
def case(request, tmp_path_factory) -> Case:
    drivers.require_dotnet_and_lldb()
    tfm = request.config.getoption("--tfm")
    work = tmp_path_factory.mktemp("sosscripts")
    with Debuggee("sosscripts", tfm=tfm, dll=build_debuggee(tfm), core_dir=work) as d:
        core = d.write_core("heap", work / "sosscripts.core")
        triage = d.write_core("triage", work / "sosscripts.triage.core")
        c = Case(d.truth)
        c.outputs["lldb-live"] = _both("lldb-live", d.truth, pid=d.pid)
        if "gdb-live" in HOSTS:
            c.outputs["gdb-live"] = _both("gdb-live", d.truth, pid=d.pid)
        exe = str(d.executable)
    c.outputs["cli-core"] = _both("cli-core", c.truth, core=core)
    c.outputs["lldb-core"] = _both("lldb-core", c.truth, core=core, exe=exe)
    if "gdb-core" in HOSTS:
        c.outputs["gdb-core"] = _both("gdb-core", c.truth, core=core, exe=exe)
    c.outputs["cli-triage"] = run("cli-triage", triage_batch(c.truth, "cli-triage"), core=triage)
    c.outputs["lldb-triage"] = run("lldb-triage", triage_batch(c.truth, "lldb-triage"), core=triage, exe=exe)
    core.unlink(missing_ok=True)
    triage.unlink(missing_ok=True)
    return c


@pytest.fixture(params=HOSTS)
def host(request) -> str:
    return request.param


@pytest.fixture(params=TRIAGE_HOSTS)
def triage_host(request) -> str:
    return request.param


# -- reading our output -----------------------------------------------------------------------------

SOURCE = re.compile(r" \[(.+) @ (\d+)\]$")


def chain(truth: dict) -> list[tuple[str, int]]:
    """(method, line) of Foo4, Foo2, Foo1 and SymbolsMain, as the debuggee's own StackTrace saw them."""
    frames = truth["scripts"]["frames"]
    i = next(i for i, f in enumerate(frames) if f["method"] == FOO4)
    return [(f["method"], f["line"]) for f in frames[i:i + 4]]


def sites(text: str) -> list[tuple[str, int | None, str]]:
    """(call site without its source, line, file) of every clrstack row."""
    out = []
    for ln in text.splitlines():
        m = STACK_ROW.match(ln)
        if m:
            site = m.group(3).rstrip()
            s = SOURCE.search(site)
            out.append((site[: s.start()] if s else site, int(s.group(2)) if s else None, s.group(1) if s else ""))
    return out


def check_chain(text: str, truth: dict, full: bool = False) -> None:
    """StackAndOtherTests: Foo4(System.String), Foo2, Foo1, Main in order with their files and lines
    (with -f as module!method + offset)."""
    want = chain(truth)
    rows = [r for r in sites(text) if not r[0].startswith("[")]
    names = [re.sub(r" \+ \d+$", "", re.sub(r"^\S+\.dll!", "", r[0])) for r in rows]
    i = next(i for i, n in enumerate(names) if n.startswith(FOO4 + "("))
    assert names[i] == f"{FOO4}(System.String)", names[i]
    for (site, line, path), (method, want_line), name in zip(rows[i:i + 4], want, names[i:i + 4]):
        assert name.startswith(method + "("), (name, method)
        assert line == want_line and path.endswith("/ScriptsScenario.cs"), (site, line, path, want_line)
        if full:
            assert re.fullmatch(rf"SosextDebuggee\.dll!{re.escape(method)}\(.*\) \+ \d+", site), site
    assert len(rows) >= i + 4, rows


# -- StackAndOtherTests.script: clrstack and its options --------------------------------------------


def test_clrstack_names_the_chain_with_lines(case: Case, host: str) -> None:
    s = case.truth["scripts"]
    lines = case.out(host, "clrstack").lines
    assert re.fullmatch(rf"OS Thread Id: 0x{s['osTid']:x} \(\d+\)", lines[0]), lines[:2]
    assert re.fullmatch(r" +Child SP +IP Call Site", lines[1]), lines[1]
    check_chain(case.out(host, "clrstack").text, case.truth)


def test_clrstack_f_names_module_and_offset(case: Case, host: str) -> None:
    check_chain(case.out(host, "clrstack -f").text, case.truth, full=True)


def test_clrstack_a_shows_the_string_argument_and_locals(case: Case, host: str) -> None:
    """PARAMETERS: `dllPath (0x<slot>) = 0x<string>`, then LOCALS: `0x<slot> = 0x<value>` rows."""
    text = case.out(host, "clrstack -a").text
    check_chain(text, case.truth)
    lines = text.splitlines()
    i = next(i for i, ln in enumerate(lines) if (m := STACK_ROW.match(ln)) and m.group(3).startswith(FOO4 + "("))
    block = []
    for ln in lines[i + 1:]:
        if STACK_ROW.match(ln):
            break
        block.append(ln)
    assert block[0] == "    PARAMETERS:", block
    assert re.fullmatch(r"        dllPath \(0x[0-9A-F]{16}\) = 0x[0-9a-f]{16}", block[1]), block
    j = block.index("    LOCALS:")
    values = [int(m.group(1), 16) for m in (re.fullmatch(r"        0x[0-9A-F]{16} = 0x([0-9a-f]{16})", ln)
                                            for ln in block[j + 1:]) if m]
    s = case.truth["scripts"]
    assert addr(s["dllType"]) in values and s["length"] in values, (values, block)


def test_clrstack_r_shows_each_frames_registers(case: Case, host: str) -> None:
    """Under every managed frame: rsp/rbp/rip, then rax/rbx/rcx … (x64)."""
    text = case.out(host, "clrstack -r").text
    check_chain(text, case.truth)
    lines = text.splitlines()
    for method, _line in chain(case.truth):
        i = next(i for i, ln in enumerate(lines) if (m := STACK_ROW.match(ln)) and m.group(3).startswith(method + "("))
        block = lines[i + 1:i + 8]
        assert any(re.fullmatch(r"\s+rsp=[0-9a-f]{16}\s+rbp=[0-9a-f]{16}\s+rip=[0-9a-f]{16}\s*", ln) for ln in block), block
        assert any(re.fullmatch(r"\s+rax=[0-9a-f]{16}\s+rbx=[0-9a-f]{16}\s+rcx=[0-9a-f]{16}\s*", ln) for ln in block), block
        rip = next(re.search(r"rip=([0-9a-f]{16})", ln).group(1) for ln in block if "rip=" in ln)
        assert int(rip, 16) == int(STACK_ROW.match(lines[i]).group(2), 16), (lines[i], block)


def i_rows(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if I_ROW.match(ln)]


def test_clrstack_i_lists_the_chain_as_icordebug_does(case: Case, host: str) -> None:
    text = case.out(host, "clrstack -i").text
    assert "Dumping managed stack and managed variables using ICorDebug." in text
    assert text.splitlines()[-2] == "Stack walk complete.", text
    rows = i_rows(text)
    assert any(r.endswith("[NativeStackFrame]") for r in rows), rows
    sig = {FOO4: r"Void {}\(String\)", "DebuggeeHost.ScriptsScenario.Foo2": r"I4 {}\(I4,String\)",
           "DebuggeeHost.ScriptsScenario.Foo1": r"I4 {}\(I4\)", "DebuggeeHost.ScriptsScenario.SymbolsMain": r"Void {}\(.*\)"}
    order = []
    for method, _line in chain(case.truth):
        want = r"\[DEFAULT\] " + sig[method].format(re.escape(method))
        k = next((k for k, r in enumerate(rows) if re.search(f" {want} \\(", r)), None)
        assert k is not None, (want, rows)
        assert re.fullmatch(rf"[0-9A-F]{{16}} [0-9a-f]{{16}} {want} \(/\S+/SosextDebuggee\.dll\)", rows[k]), rows[k]
        order.append(k)
    assert order == sorted(order), order


def test_clrstack_i_a_names_the_string_argument_and_runtimetype_local(case: Case, host: str) -> None:
    s = case.truth["scripts"]
    lines = case.out(host, "clrstack -i -a").lines
    i = next(i for i, ln in enumerate(lines) if I_ROW.match(ln) and f" {FOO4}(" in ln)
    block = []
    for ln in lines[i + 1:]:
        if I_ROW.match(ln) or ln == "Stack walk complete.":
            break
        block.append(ln)
    assert block[:3] == ["", "PARAMETERS:", f"  + string dllPath = \"{s['dllPath']}\""], block
    local = block[block.index("LOCALS:") + 1:]
    assert f"  + {s['dllTypeType']} dllType @ 0x{addr(s['dllType']):x}" in local, local
    assert f"  + int length  = {s['length']}" in local, local


# -- MiniDumpLocalVarLookup.script: clrstack -i -l names an int local, on a triage dump too -----------------


def _local_length(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if re.fullmatch(r"  \+ int length  = -?\d+", ln)]


def test_clrstack_i_l_names_the_int_local(case: Case, host: str) -> None:
    s = case.truth["scripts"]
    assert s["length"] == len(s["dllPath"]) == 13
    assert _local_length(case.out(host, "clrstack -i -l").text) == [f"  + int length  = {s['length']}"]
    assert "PARAMETERS:" not in case.out(host, "clrstack -i -l").text


def test_triage_dump_walks_the_chain_but_holds_no_variable_values(case: Case, triage_host: str) -> None:
    """MiniDumpLocalVarLookup runs on Windows mini dumps only. A Linux triage dump (createdump
    --triage) does not hold the JIT's variable locations: clrstack names the frames with their
    lines, and -l / -i -l print their headers with no value, without an error."""
    out = case.outputs[triage_host]
    check_chain(out["clrstack"].text, case.truth)
    for key in ("clrstack -l", "clrstack -i -l"):
        assert not out[key].errors, out[key].text
    assert "Stack walk complete." in out["clrstack -i -l"].text
    assert _local_length(out["clrstack -i -l"].text) == []
    # It says so instead of "(none)", which would claim the frames have no locals.
    assert "LOCALS: (not in this dump: a triage dump does not hold what locates arguments and locals)" \
        in out["clrstack -i -l"].lines
    assert "LOCALS: (none)" not in out["clrstack -i -l"].lines
    assert "    (not in this dump: a triage dump does not hold what locates arguments and locals)" \
        in out["clrstack -l"].lines


# -- dso ------------------------------------------------------------------------------------------------


def test_dso_lists_the_string_and_string_array_on_the_stack(case: Case, host: str) -> None:
    s = case.truth["scripts"]
    for key in ("dso", "dso -verify"):
        lines = case.out(host, key).lines
        assert re.fullmatch(rf"OS Thread Id: 0x{s['osTid']:x} \(\d+\)", lines[0]), lines[:2]
        assert re.fullmatch(r"\s*SP/REG\s+Object\s+Name", lines[1]), lines[1]
        rows = {int(m.group(1), 16): m.group(2) for m in (re.fullmatch(r"\s*[0-9a-z]+\s+([0-9a-f]+) (\S+).*", ln)
                                                          for ln in lines[2:]) if m}
        assert rows.get(addr(s["args"])) == "System.String[]", (key, lines)
        assert rows.get(addr(s["dllType"])) == s["dllTypeType"], (key, lines)
        assert "System.String" in rows.values()


# -- dumpstack / eestack: the chain's MethodDescs --------------------------------------------------------


def test_dumpstack_and_eestack_hold_foo4_and_foo2(case: Case, host: str) -> None:
    pat = [rf"\(MethodDesc [0-9a-f]{{16}} \+0x[0-9a-f]+ {re.escape(FOO4)}\(System\.String\)\)",
           r"\(MethodDesc [0-9a-f]{16} \+0x[0-9a-f]+ DebuggeeHost\.ScriptsScenario\.Foo2\(Int32, System\.String\)\)"]
    for key in ("dumpstack", "dumpstack -EE", "eestack"):
        text = case.out(host, key).text
        assert "Child-SP         RetAddr          Caller, Callee" in text, key
        for p in pat:
            assert re.search(rf"^[0-9A-F]{{16}} [0-9a-f]{{16}} {p}", text, re.M), (key, p, text[-3000:])


# -- ip2md, dumpil, clru on Foo4 --------------------------------------------------------------------------


def test_ip2md_of_foo4s_ip_names_it_with_its_source_line(case: Case, host: str) -> None:
    s = case.truth["scripts"]
    text = case.out(host, "ip2md").text
    assert re.search(rf"^Method Name:\s+{re.escape(FOO4)}\(System\.String\)$", text, re.M), text
    m = re.search(r"^Source file:\s+(\S+) @ (\d+)$", text, re.M)
    assert m and m.group(1).endswith("/ScriptsScenario.cs") and int(m.group(2)) == s["parkLine"], text


def test_dumpil_shows_foo4s_callvirts(case: Case, host: str) -> None:
    text = case.out(host, "dumpil").text
    assert not case.out(host, "dumpil").errors, text
    assert re.search(r"^IL_[0-9a-f]{4}: callvirt .*System\.IO\.Stream::CopyTo\(class \[System\.Runtime\]System\.IO\.Stream\)$",
                     text, re.M), text
    assert re.search(r"^IL_[0-9a-f]{4}: callvirt class \[System\.Runtime\]System\.Reflection\.Assembly "
                     r"System\.Type::get_Assembly\(\)$", text, re.M), text


def test_clru_of_foo4(case: Case, host: str) -> None:
    s = case.truth["scripts"]
    for key in ("clru", "clru -n", "clru -o"):
        out = case.out(host, key)
        assert not out.errors, out.text
        lines = [ln.strip() for ln in out.lines]
        assert "Normal JIT generated code" in lines, (key, lines[:6])
        assert f"{FOO4}(System.String)" in lines, (key, lines[:6])
        assert any(re.fullmatch(r"Begin [0-9A-F]{16}, size [0-9a-f]+", ln) for ln in lines), (key, lines[:8])
        has_lines = any(re.fullmatch(rf"\S+/ScriptsScenario\.cs @ {s['parkLine']}:", ln) for ln in lines)
        assert has_lines == (key != "clru -n"), (key, [ln for ln in lines if " @ " in ln])


# -- name2ee, clrthreads, runtimes, eeversion, sosstatus --------------------------------------------------


def test_name2ee_with_a_wildcard_module(case: Case, host: str) -> None:
    text = case.out(host, "name2ee").text
    assert re.search(r"^Module:\s+[0-9a-f]{16}$", text, re.M), text
    assert re.search(r"^Assembly:\s+SosextDebuggee\.dll$", text, re.M), text
    assert re.search(rf"^Name:\s+{re.escape(FOO4)}\(System\.String\)$", text, re.M), text
    assert re.search(r"^JITTED Code Address:\s+[0-9a-f]{16}$", text, re.M), text


def test_clrthreads_header(case: Case, host: str) -> None:
    s = case.truth["scripts"]
    lines = case.out(host, "clrthreads").lines
    for label in ("ThreadCount:", "UnstartedThread:", "BackgroundThread:", "PendingThread:", "DeadThread:"):
        assert any(re.fullmatch(rf"\s*{label}\s+\d+", ln) for ln in lines), (label, lines[:8])
    assert any(re.fullmatch(r"\s*Hosted Runtime:\s+no", ln) for ln in lines), lines[:8]
    assert any(re.search(r"\s+ID\s+OSID\s+ThreadOBJ\s+State", ln) for ln in lines), lines[:10]
    assert any(re.match(rf"\s*\d+\s+\d+\s+{s['osTid']:x}\s+[0-9A-F]{{16}}\s+", ln) for ln in lines), lines


def test_runtimes_eeversion_sosstatus(case: Case, host: str) -> None:
    version = case.truth["scripts"]["runtimeVersion"]
    assert re.search(r"\.NET Core .*runtime.* at ", case.out(host, "runtimes").text), case.out(host, "runtimes").text
    first = case.out(host, "eeversion").lines[0]
    m = re.match(r"^\s*(\d+)\.(\d+)\.(\d+)\.(\d+)", first)
    # The file version: major.minor, then the patch times 100 plus a build number.
    major, minor, patch = (int(x) for x in version.split(".")[:3])
    assert m and (int(m.group(1)), int(m.group(2)), int(m.group(3)) // 100) == (major, minor, patch), (first, version)
    assert not case.out(host, "sosstatus").errors, case.out(host, "sosstatus").text


# -- DumpAsyncContinuationOrder.script: continuations in the order they were registered ----------------------


def test_dumpasync_keeps_the_continuation_order(case: Case, host: str) -> None:
    s = case.truth["scripts"]
    lines = case.out(host, "dumpasync --tasks").lines
    i = next(i for i, ln in enumerate(lines) if ln.startswith(f"{addr(s['gateTask']):016x} "))
    assert lines[i].endswith(f" {s['gateTaskType']}"), lines[i]
    want = [f"  {addr(c['address']):016x} {addr(c['mt']):016x} (0) " for c in s["continuations"]]
    assert [ln[: len(w)] for ln, w in zip(lines[i + 1:i + 4], want)] == want, lines[i:i + 5]
    for ln, method in zip(lines[i + 1:i + 4], s["continuationMethods"]):
        assert re.search(rf"\+<{method}>d__\d+$", ln), (ln, method)


# -- WebApp.script's commands ------------------------------------------------------------------------------


def test_webapp_dumpasync_forms(case: Case, host: str) -> None:
    """Runtime 10 (< 11): STACK n with rows; --stats' MT Count Type; --methodtable of a row's MT;
    dumpmt of it; --coalesce's STACKS n with [count] rows; no UNKNOWN anywhere."""
    s = case.truth["scripts"]
    assert int(s["runtimeVersion"].split(".")[0]) < 11
    completed = case.out(host, "dumpasync --completed").text
    assert re.search(r"^STACK \d+$", completed, re.M)
    assert re.search(r"^\s*[0-9a-f]{16} [0-9a-f]{16} \((-?\d+)?\) .*", completed, re.M)
    stats = case.out(host, "dumpasync --stats").lines
    assert re.fullmatch(r"MT\s+Count\s+Type", stats[0]) and re.match(r"^[0-9a-f]{16} +\d+ +\S", stats[1]), stats[:3]
    by_mt = case.out(host, "dumpasync --methodtable").text
    assert re.search(r"^STACK \d+$", by_mt, re.M) and re.search(r"^\s*[0-9a-f]{16} [0-9a-f]{16} \((-?\d+)?\) ", by_mt, re.M), by_mt
    mt = int(stats[1].split()[0], 16)
    assert f"{mt:016x}" in by_mt, by_mt
    assert not re.search(r"is not a MethodTable", case.out(host, "dumpmt").text), case.out(host, "dumpmt").text
    co = case.out(host, "dumpasync --coalesce").text
    assert re.search(r"^STACKS \d+$", co, re.M) and re.search(r"^\s*\[\d+\] [0-9a-f]{16} \((-?\d+)?\) ", co, re.M), co
    for key in ("dumpasync --completed", "dumpasync --stats", "dumpasync --methodtable", "dumpasync --coalesce"):
        assert "UNKNOWN" not in case.out(host, key).text, key


def test_webapp_timerinfo_clrmodules_pstacks_dumpheap(case: Case, host: str) -> None:
    s = case.truth["scripts"]
    ti = case.out(host, "timerinfo").text
    m = re.search(r"^\s*(\d+) timers$", ti, re.M)
    assert m and int(m.group(1)) >= 1, ti
    assert f"{s['timerDueMs']}" in ti or f"{addr(s['timer']):x}" in ti.lower(), ti
    mods = case.out(host, "clrmodules").lines
    assert any(re.match(r"^\s*[0-9A-Fa-f]{16} .*/SosextDebuggee\.dll$", ln) for ln in mods), mods
    ps = case.out(host, "pstacks").text
    assert "DebuggeeHost.ScriptsScenario.Foo4(String)" in ps, ps  # parameter types without namespaces, as dotnet-dump
    assert f"OS Thread Id: 0x{s['osTid']:x}" in case.out(host, "clrstack -all").text
    heap = case.out(host, "dumpheap -stat").lines
    assert "Statistics:" in heap and any(re.fullmatch(r"\s*MT\s+Count\s+TotalSize\s+Class Name", ln) for ln in heap), heap[:5]
    assert re.fullmatch(r"Total [\d,]+ objects, [\d,]+ bytes", heap[-1]), heap[-2:]
    assert not any("UNKNOWN" in ln for ln in heap)


# -- VarargPInvokeInteropMD.script's stub checks, on a P/Invoke Linux can make (no varargs) ----------------


def test_pinvoke_stub_frames_and_clru_of_the_stub(case: Case, host: str) -> None:
    """clrstack: [InlinedCallFrame: …] naming the P/Invoke method with its arguments, then the IL
    stub's frame; clru and clru -il of the stub (which has no IL body) work without errors."""
    s = case.truth["scripts"]
    rows = [m.group(3) for m in map(STACK_ROW.match, case.out(host, "pinvoke clrstack").lines) if m]
    want = f"{s['pinvokeMethod']}(IntPtr, UInt64, Int32)"
    k = next((k for k, r in enumerate(rows) if re.fullmatch(rf"\[InlinedCallFrame: [0-9a-f]{{16}}\] {re.escape(want)}", r)), None)
    assert k is not None, rows
    # The DAC's walk stops at the InlinedCallFrame twice (at the native IP, then the stub's), as SOS shows.
    nxt = next(r for r in rows[k:] if not r.startswith("[InlinedCallFrame: "))
    assert nxt == "ILStubClass.IL_STUB_PInvoke(IntPtr, UInt64, Int32)", rows
    assert re.search(r"^Method Name:\s+ILStubClass\.IL_STUB_PInvoke\(", case.out(host, "stub ip2md").text, re.M), \
        case.out(host, "stub ip2md").text
    for key in ("stub clru", "stub clru -il"):
        out = case.out(host, key)
        lines = [ln.strip() for ln in out.lines]
        assert not out.errors and not any("failed" in ln.lower() or "Unknown error" in ln for ln in lines), (key, out.text)
        assert "Normal JIT generated code" in lines, (key, lines[:5])
        assert any(ln.startswith("ILStubClass.IL_STUB_PInvoke(") for ln in lines), (key, lines[:5])
        assert any(re.fullmatch(r"Begin [0-9A-F]{16}, size [0-9a-f]+", ln) for ln in lines), (key, lines[:5])


# -- Overflow.script: the stack overflow's exception, on its crash dump and live -----------------------------


def _check_overflow(pe: drivers.Output) -> None:
    lines = pe.lines
    assert not pe.errors, pe.text
    assert any(re.fullmatch(r"Exception object: [0-9a-f]{16}", ln) for ln in lines), lines
    assert "Exception type:   System.StackOverflowException" in lines, lines
    assert "Message:          <none>" in lines, lines
    assert "InnerException:   <none>" in lines, lines
    assert "StackTrace (generated):" in lines, lines


def test_overflow_crash_dump(request, tmp_path: Path) -> None:
    drivers.require_dotnet_and_lldb()
    truth, exe, tid, core = crash_dump(request, tmp_path, "sosscripts", "overflow")
    for host, kw in (("cli-core", {"core": core}), ("lldb-core", {"core": core, "exe": exe})):
        managed, pe = drivers.run_in_host(host, ["clrthreads -managedexception", "pe"], **kw)
        assert not managed.errors, (host, managed.text)
        _check_overflow(pe)
    core.unlink(missing_ok=True)


def test_overflow_live_in_lldb(request, tmp_path: Path) -> None:
    drivers.require_dotnet_and_lldb()
    tfm = request.config.getoption("--tfm")
    with Debuggee("sosscripts", tfm=tfm, dll=build_debuggee(tfm), core_dir=tmp_path) as d:
        commands = [
            "script lldb.debugger.SetAsync(False)",
            "process handle -p true -s false -n false SIGFPE SIGSEGV SIGILL SIGBUS SIGUSR1 SIGUSR2 SIGPIPE SIGCHLD",
            f"script open('/proc/{d.pid}/fd/0', 'w').write('overflow\\n')",
            _CONTINUE_TO_ABORT,
            "clrthreads -managedexception", "pe",
        ]
        outs = drivers.run_lldb(commands, pid=d.pid, timeout=300)
    _check_overflow(outs[5])
