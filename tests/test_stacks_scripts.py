"""What SOS's own behavioural scripts check about stacks and exceptions (StackTests, DivZero,
SimpleThrow / StackTraceSoftwareExceptionFrame, NestedExceptionTest, TaskNestedException,
AsyncMain, ClrStackWithNumberOfFrames), asserted against our own `crash` debuggee.

The `crash` debuggee parks one thread per situation (a caught divide by zero, a simple throw,
two nested exceptions in flight, a task's AggregateException with nested inner exceptions, an
async method, a deep recursion) and prints each thread's own System.Diagnostics.StackTrace and
each exception's type, message, HResult and stack trace with source lines. Every check compares
our output with those values, in LLDB and GDB (live and on a with-heap dump), the CLI, on
triage dumps, on the crash dump the runtime writes when an unhandled division by zero kills
the process, and in LLDB stopped live at that crash.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

import drivers
from harness import Debuggee, build_debuggee
from test_stack_values import I_ROW, STACK_ROW, Case, addr, collect, crash_dump
from test_stack_values import host, triage_host  # noqa: F401 - the same host fixtures

pytestmark = pytest.mark.slow

KEYS = ("divzero", "simple", "nested", "task", "async", "deep")


def _exc_chain(e: dict | None) -> list[dict]:
    out = []
    while e:
        out.append(e)
        e = e["inner"]
    return out


def batch(truth: dict, host: str) -> list[tuple[str, str]]:
    c = truth["crash"]
    pairs: list[tuple[str, str]] = [("managedexception", "clrthreads -managedexception"),
                                    ("first exception", "pe")]
    for key in KEYS:
        pairs += [(f"{key} select", drivers.select_thread(host, c[key]["osTid"])),
                  (f"{key} clrstack", "clrstack"), (f"{key} pe", "pe")]
    pairs += [("divzero select again", drivers.select_thread(host, c["divzero"]["osTid"])),
              ("divzero clrstack -f", "clrstack -f -native"), ("divzero clrstack -f as SOS", "clrstack -f"),
              ("divzero pe -lines", "pe -lines"),
              ("divzero dumpstack", "dumpstack"), ("divzero dumpstack -EE", "dumpstack -EE"),
              ("nested select again", drivers.select_thread(host, c["nested"]["osTid"])),
              ("nested pe -nested", "pe -nested"), ("nested pe -lines", "pe -lines")]
    task = _exc_chain(c["task"]["exception"])
    pairs += [("task inner", f"pe -lines {addr(task[1]['address']):x}"),
              ("task innermost", f"pe -lines {addr(task[2]['address']):x}"),
              ("async select again", drivers.select_thread(host, c["async"]["osTid"])),
              ("async clrstack /d", "clrstack /d"), ("async clrstack -i", "clrstack -i"),
              ("deep select again", drivers.select_thread(host, c["deep"]["osTid"]))]
    pairs += [(f"deep -c {n}", f"clrstack -c {n}") for n in (1, 2, 3, 4)]
    pairs += [(f"deep -i -c {n}", f"clrstack -i -c {n}") for n in (1, 3)]
    pairs += [("deep -i", "clrstack -i"), ("deep -i -p 10", "clrstack -i -p 10"),
              ("deep -i depth 12", "clrstack -i depth 12")]
    pairs += [("clrstack -all", "clrstack -all"), ("clrthreads", "clrthreads"), ("pstacks", "pstacks -a")]
    return pairs


def triage_batch(truth: dict, host: str) -> list[tuple[str, str]]:
    c = truth["crash"]
    pairs: list[tuple[str, str]] = []
    for key in ("divzero", "nested", "deep"):
        pairs += [(f"{key} select", drivers.select_thread(host, c[key]["osTid"])),
                  (f"{key} clrstack", "clrstack"), (f"{key} pe", "pe")]
    return pairs


@pytest.fixture(scope="module")
def case(request, tmp_path_factory) -> Case:
    return collect(request, tmp_path_factory, "crash", batch, triage_batch)


# -- reading our output -------------------------------------------------------------------------

SOURCE = re.compile(r" \[(.+) @ (\d+)\]$")


@dataclass(frozen=True)
class Row:
    site: str          # the Call Site without its source suffix
    line: int | None   # the source line, when shown


def stack_rows(text: str) -> list[Row]:
    rows = []
    for ln in text.splitlines():
        m = STACK_ROW.match(ln)
        if not m:
            continue
        site = m.group(3).rstrip()
        s = SOURCE.search(site)
        rows.append(Row(site[: s.start()] if s else site, int(s.group(2)) if s else None))
    return rows


def named(row: Row, method: str) -> bool:
    """The row's call site is ``method`` (a full name as the debuggee prints it), with any
    arguments or generic instantiation, and with clrstack -f's module! before it."""
    site = re.sub(r"^[\w.]+\.dll!", "", row.site)
    return site.startswith(method + "(") or site.startswith(method + "[")


def managed_after_park(rows: list[Row]) -> list[Row]:
    """The rows from the frame that called the debuggee's Park helper outward."""
    i = next(i for i, r in enumerate(rows) if named(r, "DebuggeeHost.CrashScenario.Park"))
    return rows[i + 1:]


def trace_rows(lines: list[str]) -> list[str]:
    return [ln for ln in lines if re.match(r"^    [0-9A-F]{16} [0-9A-F]{16} ", ln)]


def check_exception(lines: list[str], e: dict, with_lines: bool = False) -> None:
    """pe's block for exception ``e``: SOS's fields with the debuggee's values and its stack
    trace, frame by frame (module!method+0xoffset, and [file @ line] with -lines)."""
    assert f"Exception object: {addr(e['address']):016x}" in lines, lines
    assert f"Exception type:   {e['type']}" in lines, lines
    assert f"Message:          {e['rawMessage']}" in lines, lines
    inner = e["inner"]
    want_inner = ("InnerException:   <none>" if inner is None else
                  f"InnerException:   {inner['type']}, Use printexception {addr(inner['address']):016X} to see more.")
    assert want_inner in lines, lines
    assert f"HResult: {e['hresult']:x}" in lines, lines
    trace = trace_rows(lines[lines.index("StackTrace (generated):"):])
    frames = e["frames"]
    assert len(trace) >= len(frames), (trace, frames)
    for ln, f in zip(trace, frames):
        assert re.search(rf" {re.escape(f['module'])}!{re.escape(f['method'])}\(.*\)\+0x[0-9a-f]+", ln), (ln, f)
        if with_lines and f["line"]:
            assert ln.endswith(f" @ {f['line']}]") and f"/{Path(f['file']).name} @ " in ln, (ln, f)


# -- clrstack: frames in order with file:line ------------------------------------------------------


def test_clrstack_of_a_caught_divide_by_zero(case: Case, host: str) -> None:
    """DivZero.script: DivideByZero, F3, F2, Main with their lines; the fault's FaultingExceptionFrame."""
    d = case.truth["crash"]["divzero"]
    rows = managed_after_park(stack_rows(case.out(host, "divzero clrstack").text))
    assert named(rows[0], d["frames"][0]["method"]) and rows[0].line == d["parkLine"], rows[:2]
    assert re.fullmatch(r"\[FaultingExceptionFrame: [0-9a-f]{16}\]", rows[1].site), rows[:3]
    thrown = rows[2:2 + len(d["exception"]["frames"])]
    assert [(r.site.split("(")[0], r.line) for r in thrown] == \
        [(f["method"], f["line"]) for f in d["exception"]["frames"]], rows


def test_clrstack_of_a_simple_throw_shows_its_software_exception_frame(case: Case, host: str) -> None:
    """StackTraceSoftwareExceptionFrame.script: a [SoftwareExceptionFrame] above the throwing frames."""
    s = case.truth["crash"]["simple"]
    rows = managed_after_park(stack_rows(case.out(host, "simple clrstack").text))
    assert named(rows[0], s["frames"][0]["method"]) and rows[0].line == s["parkLine"], rows[:2]
    assert re.fullmatch(r"\[SoftwareExceptionFrame: [0-9a-f]{16}\]", rows[1].site), rows[:3]
    assert [(r.site.split("(")[0], r.line) for r in rows[2:4]] == \
        [(f["method"], f["line"]) for f in s["exception"]["frames"]], rows


NATIVE_SITE = re.compile(r"(lib[\w.+-]*\.so[.\d]*)(?:!(\S+) \+ \d+|!(\S+)| \+ 0x[0-9a-f]+)$")


def test_clrstack_f_names_modules_and_offsets(case: Case, host: str) -> None:
    """StackTests.script 2): module!method + offset [file @ line], native frames between."""
    d = case.truth["crash"]["divzero"]
    all_rows = stack_rows(case.out(host, "divzero clrstack -f").text)
    native = [r for r in all_rows if NATIVE_SITE.fullmatch(r.site)]
    rows = managed_after_park([r for r in all_rows if r not in native])
    plain = managed_after_park(stack_rows(case.out(host, "divzero clrstack").text))
    assert len(rows) == len(plain)
    for full, r in zip(rows, plain):
        if r.site.startswith("["):
            assert full.site == r.site
            continue
        m = re.fullmatch(r"(\S+\.dll)!(.*) \+ (\d+)", full.site)
        assert m and m.group(2) == r.site and full.line == r.line, (full, r)
    frames = d["exception"]["frames"]
    assert rows[2].site.startswith(f"{frames[0]['module']}!{frames[0]['method']}("), rows[2]


def test_clrstack_f_shows_native_frames_where_sos_does(case: Case, host: str) -> None:
    """clrstack -f shows native frames where SOS does: in LLDB (and GDB), which unwind native code,
    not in the CLI, as dotnet-dump shows none; there -native adds them."""
    as_sos = stack_rows(case.out(host, "divzero clrstack -f as SOS").text)
    native = stack_rows(case.out(host, "divzero clrstack -f").text)
    if host.startswith("cli"):
        assert as_sos == [r for r in native if not NATIVE_SITE.fullmatch(r.site)], as_sos
        assert not any(NATIVE_SITE.fullmatch(r.site) for r in as_sos), as_sos
    else:
        assert as_sos == native


def test_clrstack_f_shows_native_frames_named_by_symbol(case: Case, host: str) -> None:
    """With -native, -f interleaves the native frames as SOS in LLDB does: the thread blocks in
    libc's condition wait called by the runtime, below its first managed frame, and the runtime
    started the thread."""
    lines = case.out(host, "divzero clrstack -f").lines
    rows = [(ln, STACK_ROW.match(ln)) for ln in lines]
    rows = [(int(m.group(1), 16), m.group(3).rstrip()) for ln, m in rows if m]
    first_managed = next(i for i, (_sp, site) in enumerate(rows) if ".dll!" in site)
    above = [site for _sp, site in rows[:first_managed] if NATIVE_SITE.fullmatch(site)]
    assert any(re.fullmatch(r"libc\.so\.6!pthread_cond_\w*wait\w* \+ \d+", s) for s in above), above
    assert any(s.startswith("libcoreclr.so") for s in above), above
    last_managed = max(i for i, (_sp, site) in enumerate(rows) if ".dll!" in site)
    assert any(site.startswith("libcoreclr.so") for _sp, site in rows[last_managed + 1:]), rows[last_managed:]
    native_sps = [sp for sp, site in rows if NATIVE_SITE.fullmatch(site)]
    assert native_sps == sorted(set(native_sps)), native_sps


def test_clrstack_of_an_async_method_keeps_angle_brackets(case: Case, host: str) -> None:
    """AsyncMain.script: with /d the state machine's <Method>d__N name is whole; every frame in order."""
    a = case.truth["crash"]["async"]
    rows = [r for r in managed_after_park(stack_rows(case.out(host, "async clrstack /d").text))
            if not r.site.startswith("[")]
    assert len(rows) == len(a["frames"]), (rows, a["frames"])
    for r, f in zip(rows, a["frames"]):
        assert named(r, f["method"]), (r, f)
        assert r.line == (a["parkLine"] if f is a["frames"][0] else (f["line"] or None)), (r, f)
    assert "+<RunAsync>d__" in a["frames"][0]["method"]


def test_clrstack_of_a_deep_recursion(case: Case, host: str) -> None:
    c = case.truth["crash"]
    deep = c["deep"]
    rows = managed_after_park(stack_rows(case.out(host, "deep clrstack").text))
    recursion = [r for r in rows if named(r, "DebuggeeHost.CrashScenario.Recurse")]
    assert len(recursion) == c["recursionDepth"] + 1
    assert [r.line for r in recursion] == [deep["parkLine"]] + [deep["frames"][1]["line"]] * c["recursionDepth"]


def test_clrstack_c_prints_that_many_frames(case: Case, host: str) -> None:
    """ClrStackWithNumberOfFrames.script: -c N prints the first N rows of the stack, with and without -i."""
    full = [ln for ln in case.out(host, "deep clrstack").lines if STACK_ROW.match(ln)]
    for n in (1, 2, 3, 4):
        lines = case.out(host, f"deep -c {n}").lines
        assert lines[1] == "        Child SP               IP Call Site", lines
        assert lines[2:2 + n] == full[:n] and not any(STACK_ROW.match(ln) for ln in lines[2 + n:]), (n, lines)
    for n in (1, 3):
        text = case.out(host, f"deep -i -c {n}").text
        rows = [ln for ln in text.splitlines() if re.match(r"^[0-9A-F]{16} ", ln)]
        assert len(rows) == n, (n, text)
        assert "Stack walk complete." not in text and "No managed frames" not in text, text


def numbered_blocks(text: str) -> dict[int, list[str]]:
    """clrstack -i: the lines under each row, by SOS's frame number (the rows of the debugger
    API's walk from 0, its internal "(null)" frames not counted); rows with nothing under them left out."""
    blocks: dict[int, list[str]] = {}
    n = -1
    current: list[str] | None = None
    for ln in text.splitlines():
        if I_ROW.match(ln):
            current = None
            if " (null) " not in ln:
                n += 1
                current = blocks.setdefault(n, [])
        elif ln.startswith("====") or ln == "Stack walk complete.":
            current = None
        elif current is not None:
            current.append(ln)
    return {k: v for k, v in blocks.items() if v}


def test_clrstack_i_frame_number_shows_that_frames_variables(case: Case, host: str) -> None:
    """SOS's clrstack -i [<variable>] <frame>: the variables of that frame only. A number alone is
    read in hex (SOS's expression evaluator), after a variable name in decimal; naming a variable
    implies -a. Recurse(depth) frames, innermost first, hold depth 0, 1, 2 …"""
    c = case.truth["crash"]
    rows = [ln for ln in case.out(host, "deep -i").lines if I_ROW.match(ln) and " (null) " not in ln]
    recurse = [i for i, ln in enumerate(rows) if " DebuggeeHost.CrashScenario.Recurse(" in ln]
    assert len(recurse) == c["recursionDepth"] + 1, rows
    assert 0x10 in recurse and 12 in recurse, recurse
    hex_frame = numbered_blocks(case.out(host, "deep -i -p 10").text)
    assert hex_frame == {0x10: ["", "PARAMETERS:", f"  + int depth  = {recurse.index(0x10)}", ""]}, hex_frame
    named = numbered_blocks(case.out(host, "deep -i depth 12").text)
    assert list(named) == [12], named
    assert named[12][:4] == ["", "PARAMETERS:", f"  + int depth  = {recurse.index(12)}", ""], named
    assert "LOCALS:" in named[12][4] and named[12][-1] == "", named


# -- pe: exceptions, inner and nested ------------------------------------------------------------


def test_pe_of_each_exception(case: Case, host: str) -> None:
    """DivZero / SimpleThrow / NestedExceptionTest / TaskNestedException: pe's fields and traces."""
    c = case.truth["crash"]
    for key in ("divzero", "simple", "nested", "task"):
        out = case.out(host, f"{key} pe")
        assert not out.errors, out.text
        check_exception(out.lines, c[key]["exception"])
    for key in ("async", "deep"):
        assert "There is no current managed exception on this thread" in case.out(host, f"{key} pe").text


def test_pe_lines_adds_source_lines(case: Case, host: str) -> None:
    c = case.truth["crash"]
    check_exception(case.out(host, "divzero pe -lines").lines, c["divzero"]["exception"], with_lines=True)
    check_exception(case.out(host, "nested pe -lines").lines, c["nested"]["exception"], with_lines=True)


def test_pe_says_there_are_nested_exceptions_and_nested_shows_them(case: Case, host: str) -> None:
    outer = case.truth["crash"]["nested"]["exception"]
    inner = outer["inner"]
    hint = "There are nested exceptions on this thread. Run with -nested for details"
    assert case.out(host, "nested pe").lines[-1] == hint
    lines = case.out(host, "nested pe -nested").lines
    assert hint not in lines
    i = next(i for i, ln in enumerate(lines) if re.fullmatch(r"Nested exception -+", ln))
    check_exception(lines[:i], outer)
    check_exception(lines[i + 1:], inner)
    # The threads with one exception in flight have no nested ones.
    assert hint not in case.out(host, "divzero pe").lines


def test_pe_follows_a_tasks_inner_exceptions(case: Case, host: str) -> None:
    """TaskNestedException.script: AggregateException → FormatException → InvalidOperationException."""
    chain = _exc_chain(case.truth["crash"]["task"]["exception"])
    assert [e["type"] for e in chain] == ["System.AggregateException", "System.FormatException",
                                          "System.InvalidOperationException"]
    check_exception(case.out(host, "task pe").lines, chain[0])
    check_exception(case.out(host, "task inner").lines, chain[1], with_lines=True)
    check_exception(case.out(host, "task innermost").lines, chain[2], with_lines=True)


# -- threads: -managedexception, -all, numbering -------------------------------------------------


def test_clrthreads_managedexception_selects_the_first_thread_with_one(case: Case, host: str) -> None:
    c = case.truth["crash"]
    out = case.out(host, "managedexception")
    assert not out.errors, out.text
    # The debuggee starts its threads in KEYS order: the first one with an exception is divzero.
    check_exception(case.out(host, "first exception").lines, c["divzero"]["exception"])
    rows = [ln for ln in case.out(host, "clrthreads").lines if re.match(r"^ *\d+ +\d+ +[0-9a-f]+ [0-9A-F]{16} ", ln)]
    for key in ("divzero", "simple", "nested", "task"):
        e = c[key]["exception"]
        row = next(r for r in rows if r.split()[2] == f"{c[key]['osTid']:x}")
        assert f"{e['type']} {addr(e['address']):016x}" in row, row


def test_clrstack_all_and_the_thread_numbers_agree(case: Case, host: str) -> None:
    c = case.truth["crash"]
    text = case.out(host, "clrstack -all").text
    for key in KEYS:
        assert f"OS Thread Id: 0x{c[key]['osTid']:x}" in text, key
    # clrthreads' DBG column, clrstack's and dumpstack's "(n)" and setthread name the same thread.
    rows = {r.split()[2]: r.split()[0] for r in case.out(host, "clrthreads").lines
            if re.match(r"^ *\d+ +\d+ +[0-9a-f]+ [0-9A-F]{16} ", r)}
    for key in KEYS:
        first = case.out(host, f"{key} clrstack").lines[0]
        m = re.fullmatch(rf"OS Thread Id: 0x{c[key]['osTid']:x} \((\d+)\)", first)
        assert m and rows[f"{c[key]['osTid']:x}"] == m.group(1), (first, rows)
    assert case.out(host, "divzero dumpstack").lines[0] == case.out(host, "divzero clrstack").lines[0]


# -- pstacks ------------------------------------------------------------------------------------------


def test_pstacks_lays_out_each_branch_as_dotnet_dump_does(case: Case, host: str) -> None:
    """dotnet-dump's parallelstacks: innermost frames first under a ~~~~ line of thread ids, counts
    right-aligned in 5 columns; the recursion's branch holds every Recurse frame."""
    c = case.truth["crash"]
    lines = case.out(host, "pstacks").lines
    assert lines[0] == "" and lines[1] == "________________________________________________", lines[:3]
    i = next(i for i, ln in enumerate(lines) if ln.strip() == f"~~~~ {c['deep']['osTid']:x}")
    align = len(lines[i]) - len(lines[i].lstrip()) - 1  # " ~~~~" follows the branch's indent
    branch = []
    for ln in lines[i + 1:]:
        m = re.fullmatch(r"( *)(\d+) (.*)", ln)
        if not m or len(m.group(1)) + len(m.group(2)) != align + 5:
            break
        branch.append((int(m.group(2)), m.group(3)))
    recurse = [name for n, name in branch if name.startswith("DebuggeeHost.CrashScenario.Recurse(")]
    assert len(recurse) == c["recursionDepth"] + 1, branch
    assert all(n == 1 for n, _ in branch), branch
    m = re.fullmatch(r"==> (\d+) threads with (\d+) roots", next(ln for ln in lines if ln.startswith("==>")))
    assert m and int(m.group(1)) >= len(KEYS), lines[-3:]


# -- dumpstack -------------------------------------------------------------------------------------


def test_dumpstack_holds_the_throwing_frames_return_addresses(case: Case, host: str) -> None:
    """StackTests.script 9)-10): (MethodDesc … +0x… Method(Args)), calling …; -EE keeps only those."""
    d = case.truth["crash"]["divzero"]
    lines = case.out(host, "divzero dumpstack").lines
    assert lines[2] == "Child-SP         RetAddr          Caller, Callee"
    managed = [ln for ln in lines if "(MethodDesc " in ln.split(" ", 2)[-1][:12]]
    # The faulting frame holds no return address; the callers' stand in order further out (the
    # catch handler, running now, returns into CrashDivMain nearer the top too).
    order = [f["method"] for f in d["exception"]["frames"][1:]]
    pos = next(i for i, ln in enumerate(managed) if f" {order[0]}(" in ln)
    for m in order[1:]:
        pos = next((i for i in range(pos + 1, len(managed)) if f" {m}(" in managed[i]), None)
        assert pos is not None, (m, order, managed)
    # Native return addresses are named by the ELF symbol that holds them: the thread waits in libc.
    assert any(re.search(r" libc\.so\.6!pthread_cond_\w*wait\w*\+0x[0-9a-f]+", ln) for ln in lines), lines
    ee = case.out(host, "divzero dumpstack -EE").lines
    assert all(ln[34:].startswith("(MethodDesc ") for ln in ee[3:]) and len(ee) > 3, ee


# -- triage dumps ------------------------------------------------------------------------------------


def test_triage_dump_answers_stacks_and_exceptions(case: Case, triage_host: str) -> None:
    c = case.triage_truth["crash"]
    out = case.outputs[triage_host]
    for key in ("divzero", "nested"):
        assert not out[f"{key} pe"].errors, out[f"{key} pe"].text
        lines = out[f"{key} pe"].lines
        e = c[key]["exception"]
        assert f"Exception object: {addr(e['address']):016x}" in lines and f"Exception type:   {e['type']}" in lines
        assert f"HResult: {e['hresult']:x}" in lines
        trace = trace_rows(lines)
        assert [bool(re.search(rf"!{re.escape(f['method'])}\(", ln)) for ln, f in zip(trace, e["frames"])] == \
            [True] * len(e["frames"]), trace
    rows = managed_after_park(stack_rows(out["deep clrstack"].text))
    assert sum(named(r, "DebuggeeHost.CrashScenario.Recurse") for r in rows) == c["recursionDepth"] + 1


# -- the runtime's crash dump of an unhandled divide by zero ----------------------------------------------


def test_crash_dump_of_an_unhandled_divide_by_zero(request, tmp_path: Path) -> None:
    """DivZero.script on a dump written at the crash (DOTNET_DbgEnableMiniDump): the faulting thread,
    its DivideByZeroException with the frames' lines, the faulting thread current without choosing it."""
    drivers.require_dotnet_and_lldb()
    full_truth, exe, tid, core = crash_dump(request, tmp_path, "crash", "divzero")
    truth = full_truth["crash"]
    # The same three throwing frames as the parked divzero thread's, called from CrashDivUnhandled.
    want = [(f["method"], f["line"]) for f in truth["divzero"]["exception"]["frames"][:3]]
    hosts = [("cli-core", {"core": core}), ("lldb-core", {"core": core, "exe": exe})]
    if drivers.GDB:
        hosts.append(("gdb-core", {"core": core, "exe": exe}))
    stacks = {}
    for host, kw in hosts:
        # No thread chosen: the current one is the thread that took the signal, as in SOS's scripts,
        # in every host (LLDB selects it; the CLI takes it from the core's notes; GDB selects the
        # core's first thread, which sosext does not count as a choice).
        pe, clrstack, clrma = drivers.run_in_host(host, ["pe -lines", "clrstack", "clrma"], **kw)
        stacks[host] = clrstack.lines
        assert not pe.errors, (host, pe.text)
        lines = pe.lines
        assert "Exception type:   System.DivideByZeroException" in lines, (host, lines)
        assert f"Message:          {truth['divzero']['exception']['rawMessage']}" in lines
        assert f"HResult: {truth['divzero']['exception']['hresult']:x}" in lines
        trace = trace_rows(lines)
        got = [(re.search(r"!(\S+?)\(", ln).group(1), int(re.search(r" @ (\d+)\]$", ln).group(1))) for ln in trace[:3]]
        assert got == want, (host, trace)
        assert "!DebuggeeHost.CrashScenario.CrashDivUnhandled(" in trace[3], trace
        assert clrstack.lines[0].startswith(f"OS Thread Id: 0x{tid:x} "), (host, clrstack.lines[:2])
        rows = stack_rows(clrstack.text)
        sites = [(r.site.split("(")[0], r.line) for r in rows if not r.site.startswith("[")]
        i = sites.index(want[0])
        assert sites[i:i + 3] == want, (host, sites)
        assert clrma.lines[0] == f"Signal:       6 on OS thread id 0x{tid:x}", (host, clrma.lines[:3])
    # Every host shows the same thread and the same frames; the number in "OS Thread Id: 0x… (n)"
    # is the host's (from 1 in LLDB and GDB, from 0 in the CLI, as dotnet-dump numbers them).
    def unnumbered(lines: list[str]) -> list[str]:
        return [re.sub(r"^(OS Thread Id: 0x[0-9a-f]+) \(\d+\)$", r"\1", ln) for ln in lines]
    first = unnumbered(next(iter(stacks.values())))
    assert all(unnumbered(lines) == first for lines in stacks.values()), stacks
    numbers = {h: int(re.search(r"\((\d+)\)$", lines[0]).group(1)) for h, lines in stacks.items()}
    debugger = {n for h, n in numbers.items() if not h.startswith("cli")}
    assert len(debugger) <= 1, numbers
    for h, n in numbers.items():
        if h.startswith("cli") and debugger:
            assert n + 1 in debugger, numbers  # the core's thread order, counted from 0 and from 1
    core.unlink(missing_ok=True)


# The debugger stopped at the crash itself (SOS's LIVE runs): continue until the runtime aborts.
_CONTINUE_TO_ABORT = (
    "script exec(\"p = lldb.debugger.GetSelectedTarget().GetProcess()\\n"
    "for _ in range(100):\\n"
    "    p.Continue()\\n"
    "    if p.GetState() != lldb.eStateStopped or any(t.GetStopReason() == lldb.eStopReasonSignal"
    " and t.GetStopReasonDataAtIndex(0) == 6 for t in p):\\n"
    "        break\\n"
    "print('state', p.GetState())\")"
)


def lldb_live_until_abort(d: Debuggee, stdin_command: str, commands: list[str]) -> list[drivers.Output]:
    """LLDB attached to ``d``: send the debuggee ``stdin_command`` (a thread whose exception goes
    unhandled), continue to the runtime's abort, then run ``commands``: their outputs."""
    setup = [
        "script lldb.debugger.SetAsync(False)",
        "process handle -p true -s false -n false SIGFPE SIGSEGV SIGILL SIGBUS SIGUSR1 SIGUSR2 SIGPIPE SIGCHLD",
        # The debuggee reads its commands from a pipe: write into it from here, then run.
        f"script open('/proc/{d.pid}/fd/0', 'w').write('{stdin_command}\\n')",
        _CONTINUE_TO_ABORT,
    ]
    return drivers.run_lldb(setup + commands, pid=d.pid, timeout=300)[len(setup):]


def test_lldb_live_at_an_unhandled_divide_by_zero(request, tmp_path: Path) -> None:
    """DivZero.script live: LLDB attached, the debuggee divides by zero on a new thread with no
    handler, LLDB stops at the runtime's abort; pe and clrstack on the selected (aborting) thread."""
    drivers.require_dotnet_and_lldb()
    tfm = request.config.getoption("--tfm")
    with Debuggee("crash", tfm=tfm, dll=build_debuggee(tfm), core_dir=tmp_path) as d:
        truth = d.truth["crash"]
        pe, clrstack, clrthreads = lldb_live_until_abort(d, "divzero", ["pe -lines", "clrstack", "clrthreads"])
    assert not pe.errors, pe.text
    e = truth["divzero"]["exception"]
    assert "Exception type:   System.DivideByZeroException" in pe.lines, pe.text
    assert f"Message:          {e['rawMessage']}" in pe.lines and f"HResult: {e['hresult']:x}" in pe.lines
    trace = trace_rows(pe.lines)
    want = [(f["method"], f["line"]) for f in e["frames"][:3]]
    got = [(re.search(r"!(\S+?)\(", ln).group(1), int(re.search(r" @ (\d+)\]$", ln).group(1))) for ln in trace[:3]]
    assert got == want and "!DebuggeeHost.CrashScenario.CrashDivUnhandled(" in trace[3], trace
    tid = int(re.fullmatch(r"OS Thread Id: 0x([0-9a-f]+) \(\d+\)", clrstack.lines[0]).group(1), 16)
    sites = [(r.site.split("(")[0], r.line) for r in stack_rows(clrstack.text) if not r.site.startswith("[")]
    assert sites[sites.index(want[0]):sites.index(want[0]) + 3] == want, sites
    row = next(r for r in clrthreads.lines if re.match(rf"^ *\d+ +\d+ +{tid:x} ", r))
    assert "System.DivideByZeroException" in row, row
