"""Argument and local values in stacks (clrstack -i/-a/-p/-l), raw stacks (dumpstack, eestack),
merged stacks (pstacks), crash analysis (clrma) and triage dumps.

The `stackvalues` debuggee blocks a thread in ValuesFrame(int, long, bool, double, string,
object, struct) with one local of each kind, parks five threads under ParkOuter (three via
ParkA, two via ParkB), and keeps a thrown StackValuesException current on a third thread. Its
truth prints every value, the objects' addresses and the threads' OS ids.
"""
from __future__ import annotations

import itertools
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

import drivers
from harness import Debuggee, build_debuggee
from sosparse import STACK_ROW, frame_block

pytestmark = pytest.mark.slow

HOSTS = ["lldb-live", "lldb-core", "cli-core"]
if drivers.GDB:
    HOSTS += ["gdb-live", "gdb-core"]
TRIAGE_HOSTS = ["cli-triage", "lldb-triage"]



def batch(truth: dict, host: str) -> list[tuple[str, str]]:
    v = truth["values"]
    return [
        ("select", drivers.select_thread(host, v["osTid"])),
        ("clrstack -i", "clrstack -i -a"),
        ("clrstack -i /d", "clrstack -i -a /d"),
        ("clrstack -i only", "clrstack -i"),
        ("clrstack -i -p", "clrstack -i -p"),
        ("clrstack -i point", "clrstack -i point"),
        ("clrstack -i localItem", "clrstack -i localItem"),
        ("clrstack -i item.Tag", "clrstack -i item.Tag"),
        ("clrstack -i nosuch", "clrstack -i nosuch"),
        ("clrstack -a nosuch", "clrstack -a nosuch"),
        ("clrstack -a", "clrstack -a"),
        ("clrstack -p", "clrstack -p"),
        ("clrstack -l", "clrstack -l"),
        ("clrstack -gc", "clrstack -gc"),
        ("dumpstack", "dumpstack"),
        ("dumpstack -EE", "dumpstack -EE"),
        ("pstacks", "pstacks -a"),
        ("clrma", "clrma"),
        ("eestack", "eestack -EE"),
        ("eestack -short", "eestack -EE -short"),
        ("dso", "dso"),
        ("clrstack", "clrstack"),
        ("clrthreads", "clrthreads"),
        ("clrstack -all", "clrstack -all"),
    ]


def triage_batch(truth: dict, host: str) -> list[tuple[str, str]]:
    return [
        ("clrthreads", "clrthreads"),
        ("select thrower", drivers.select_thread(host, truth["thrower"]["osTid"])),
        ("pe", "pe"),
        ("clrstack thrower", "clrstack"),
        ("select values", drivers.select_thread(host, truth["values"]["osTid"])),
        ("clrstack", "clrstack"),
        ("dumpheap", "dumpheap -stat"),
        ("dso", "dso"),
        ("gcroot", f"gcroot {truth['values']['item']}"),
        ("pstacks", "pstacks -a"),
    ]


def run(host: str, pairs: list[tuple[str, str]], **kw) -> dict[str, drivers.Output]:  # type: ignore[no-untyped-def]
    outs = drivers.run_in_host(host, [c for _k, c in pairs], **kw)
    return {k: o for (k, _c), o in zip(pairs, outs)}


@dataclass
class Case:
    truth: dict
    triage_truth: dict
    outputs: dict[str, dict[str, drivers.Output]] = field(default_factory=dict)

    def out(self, host: str, key: str) -> drivers.Output:
        return self.outputs[host][key]


Batch = Callable[[dict, str], list[tuple[str, str]]]


def collect(request, tmp_path_factory, scenario: str, batch: Batch, triage_batch: Batch | None) -> Case:  # type: ignore[no-untyped-def]
    """Run ``batch`` in every host on one run of ``scenario`` (live, then its with-heap dump) and
    ``triage_batch`` (unless None) on a triage dump of a second run (createdump --triage: no GC heap)."""
    drivers.require_dotnet_and_lldb()
    tfm = request.config.getoption("--tfm")
    work = tmp_path_factory.mktemp(scenario)
    dll = build_debuggee(tfm)
    with Debuggee(scenario, tfm=tfm, dll=dll, core_dir=work) as d:
        core = d.write_core("heap", work / f"{scenario}.core")
        c = Case(d.truth, d.truth)
        c.outputs["lldb-live"] = run("lldb-live", batch(d.truth, "lldb-live"), pid=d.pid)
        if "gdb-live" in HOSTS:
            c.outputs["gdb-live"] = run("gdb-live", batch(d.truth, "gdb-live"), pid=d.pid)
        exe = str(d.executable)
    c.outputs["cli-core"] = run("cli-core", batch(c.truth, "cli-core"), core=core)
    c.outputs["lldb-core"] = run("lldb-core", batch(c.truth, "lldb-core"), core=core, exe=exe)
    if "gdb-core" in HOSTS:
        c.outputs["gdb-core"] = run("gdb-core", batch(c.truth, "gdb-core"), core=core, exe=exe)
    core.unlink(missing_ok=True)
    if triage_batch is None:
        return c
    with Debuggee(scenario, tfm=tfm, dll=dll, core_dir=work) as d:
        triage = d.write_core("triage", work / f"{scenario}.triage.core")
        c.triage_truth = d.truth
        exe = str(d.executable)
    c.outputs["cli-triage"] = run("cli-triage", triage_batch(c.triage_truth, "cli-triage"), core=triage)
    c.outputs["lldb-triage"] = run("lldb-triage", triage_batch(c.triage_truth, "lldb-triage"), core=triage, exe=exe)
    triage.unlink(missing_ok=True)
    return c


@pytest.fixture(scope="module")
def case(request, tmp_path_factory) -> Case:
    return collect(request, tmp_path_factory, "stackvalues", batch, triage_batch)


@pytest.fixture(params=HOSTS)
def host(request) -> str:
    return request.param


@pytest.fixture(params=TRIAGE_HOSTS)
def triage_host(request) -> str:
    return request.param


def addr(text_hex: str) -> int:
    return int(text_hex, 16)


# -- clrstack -i -------------------------------------------------------------------------------


I_ROW = re.compile(r"^[0-9A-F]{16} (?:[0-9a-f]{16}|\(null\)) ")


def i_frame_block(text: str, method: str) -> list[str]:
    """clrstack -i: the lines after the row of ``method`` (a full name), up to the next row."""
    lines = text.splitlines()
    for i, ln in enumerate(lines):
        if I_ROW.match(ln) and f" {method}(" in ln:
            block = []
            for nxt in lines[i + 1:]:
                if I_ROW.match(nxt) or nxt.startswith("====") or nxt == "Stack walk complete.":
                    break
                block.append(nxt)
            return block
    raise AssertionError(f"no frame of {method} in:\n{text}")


def test_clrstack_i_rows_are_sos_icordebug_rows(case: Case, host: str) -> None:
    v = case.truth["values"]
    lines = case.out(host, "clrstack -i only").lines
    # SOS's walk starts with three empty lines where clrstack names the thread (dotnet-dump, LLDB).
    assert lines[:6] == ["", "", "", "Dumping managed stack and managed variables using ICorDebug.", "=" * 77,
                         "Child SP         IP               Call Site"], lines[:7]
    assert lines[-2:] == ["Stack walk complete.", "=" * 77], lines[-3:]
    # The thread waits in native code: the walk starts there, then (in stack order, as SOS) the
    # P/Invoke's managed frame and its transition, listed once (the DAC's walk stops twice at it).
    assert re.fullmatch(r"[0-9A-F]{16} [0-9a-f]{16} \[NativeStackFrame\]", lines[6]), lines[6]
    assert lines[7].endswith(")") and "transition" not in lines[7], lines[6:10]
    assert re.fullmatch(r"[0-9A-F]{16} \(null\) \[Managed to Unmanaged transition: [0-9A-F]{16}\]", lines[8]), lines[8]
    assert sum("Managed to Unmanaged transition" in ln for ln in lines) == 1, lines
    row = next(ln for ln in lines if f" {v['method']}(" in ln)
    assert re.fullmatch(rf"[0-9A-F]{{16}} [0-9a-f]{{16}} \[DEFAULT\] Void {re.escape(v['method'])}"
                        rf"\(I4,I8,Boolean,R8,String,Class {re.escape(v['itemType'])},"
                        rf"ValueType {re.escape(v['pointType'])}\) \(/\S+/SosextDebuggee\.dll\)", row), row


def test_clrstack_i_names_types_and_values_of_the_arguments(case: Case, host: str) -> None:
    v = case.truth["values"]
    block = i_frame_block(case.out(host, "clrstack -i").text, v["method"])
    params = block[: block.index("LOCALS:") - 1]
    assert params[:2] == ["", "PARAMETERS:"]
    assert params[2:] == [
        f"  + int count  = {v['count']}",
        f"  + long big  = {v['big']}",
        f"  + bool flag  = {'true' if v['flag'] else 'false'}",
        f"  + double ratio  = {v['ratio']:f}",
        f"  + string text = \"{v['text']}\"",
        f"  + {v['itemType']} item @ 0x{addr(v['item']):x}",
        params[8],
    ], params
    # No variable named on the command line: as SOS, no fields under any of them.
    assert re.fullmatch(rf"  \+ {re.escape(v['pointType'])} point @ 0x[0-9a-f]+", params[8]), params


def test_clrstack_i_names_locals_from_the_pdb(case: Case, host: str) -> None:
    v = case.truth["values"]
    block = i_frame_block(case.out(host, "clrstack -i").text, v["method"])
    local_lines = block[block.index("LOCALS:") + 1:]
    assert f"  + int localCount  = {v['localCount']}" in local_lines, local_lines
    assert f"  + long localBig  = {v['localBig']}" in local_lines, local_lines
    assert f"  + {v['itemType']} localItem @ 0x{addr(v['localItem']):x}" in local_lines, local_lines
    assert any(ln.startswith(f"  + {v['pointType']} localPoint @ 0x") for ln in local_lines), local_lines
    assert not any(" |- " in ln for ln in case.out(host, "clrstack -i").lines)
    # The caller's locals, string included, are read from its own frame.
    outer = i_frame_block(case.out(host, "clrstack -i").text, "DebuggeeHost.StackValuesScenario.ValuesThreadMain")
    assert f"  + string text = \"{v['text']}\"" in outer, outer
    assert f"  + {v['itemType']} item @ 0x{addr(v['item']):x}" in outer, outer


def test_clrstack_i_alone_lists_frames_and_p_only_parameters(case: Case, host: str) -> None:
    v = case.truth["values"]
    only = case.out(host, "clrstack -i only").lines
    assert "PARAMETERS:" not in only and "LOCALS:" not in only
    assert i_frame_block(case.out(host, "clrstack -i only").text, v["method"]) == []
    p = i_frame_block(case.out(host, "clrstack -i -p").text, v["method"])
    a = i_frame_block(case.out(host, "clrstack -i").text, v["method"])
    assert p == a[: a.index("LOCALS:") - 1] + [""], p


def expanded(text: str, var: str) -> dict[str, list[str]]:
    """clrstack -i <name>: per frame (its method, as named on its row), the lines of each
    variable called ``var``: its "  + <type> var" line and the field lines under it."""
    out: dict[str, list[str]] = {}
    method = ""
    lines = text.splitlines()
    for i, ln in enumerate(lines):
        if I_ROW.match(ln):
            method = ln.split(") ", 1)[0]
        elif re.match(rf"  \+ \S+ {re.escape(var)}( |$)", ln):
            block = [ln]
            block += [f for f in itertools.takewhile(lambda f: f.startswith("     |- ") or f.startswith("         |- "),
                                                      lines[i + 1:])]
            out.setdefault(method, []).extend(block)
    return out


def test_clrstack_i_variable_lists_only_its_fields(case: Case, host: str) -> None:
    """SOS's clrstack -i <variable>: the variables of every frame (as -a), and the fields of the
    variable so named only: a struct's at its location, an object's at its address."""
    v = case.truth["values"]
    point = case.out(host, "clrstack -i point")
    assert not point.errors, point.text
    blocks = expanded(point.text, "point")
    frame = next(b for m, b in blocks.items() if f" {v['method']}(" in m)
    assert re.fullmatch(rf"  \+ {re.escape(v['pointType'])} point @ 0x[0-9a-f]+", frame[0]), frame
    assert frame[1:] == [f"     |- int X  = {v['pointX']}", f"     |- long Y  = {v['pointY']}"], frame
    # The caller's own local called point holds the same value; localPoint is not expanded.
    outer = next(b for m, b in blocks.items() if " DebuggeeHost.StackValuesScenario.ValuesThreadMain(" in m)
    assert outer[1:] == frame[1:], outer
    assert all(len(b) == 1 for b in expanded(point.text, "localPoint").values()), point.text
    assert sum(" |- " in ln for ln in point.lines) == 4, point.text
    item = case.out(host, "clrstack -i localItem").text
    block = next(b for m, b in expanded(item, "localItem").items() if f" {v['method']}(" in m)
    assert block == [f"  + {v['itemType']} localItem @ 0x{addr(v['localItem']):x}",
                     f"     |- int Tag  = {v['localItemTag']}"], block
    assert sum(" |- " in ln for ln in item.splitlines()) == 1, item
    # name.field: the path down to the field expands every step (here the object, whose field is a primitive).
    tag = case.out(host, "clrstack -i item.Tag").text
    blocks = expanded(tag, "item")
    assert set(map(tuple, blocks.values())) == {(f"  + {v['itemType']} item @ 0x{addr(v['item']):x}",
                                                 f"     |- int Tag  = {v['itemTag']}")}, blocks
    assert len(blocks) == 2, blocks  # ValuesFrame's argument and its caller's local
    # A name no frame has: the variables, no fields; SOS's positional arguments belong to -i.
    nosuch = case.out(host, "clrstack -i nosuch")
    assert nosuch.lines == [ln for ln in case.out(host, "clrstack -i").lines], nosuch.text
    assert case.out(host, "clrstack -a nosuch").errors == [
        "error: a variable name or frame number goes with -i: clrstack -i [<variable>] [<frame>]"]


def test_clrstack_i_unreadable_variables_say_so_as_sos_does(case: Case, host: str) -> None:
    """A variable the runtime cannot give (a framework frame's register-held argument, once its
    frame is not the leaf) is SOS's "(Error 0x… retrieving parameter '<name>')" line."""
    lines = case.out(host, "clrstack -i").lines
    assert not any("<unable to retrieve data>" in ln for ln in lines)
    errors = [ln for ln in lines if ln.startswith("  + (Error ")]
    assert errors, lines
    for ln in errors:
        # 0x80004005: a local of a module with a PDB, which SOS asks for by its PDB name (a slot the
        # PDB leaves unnamed, or a named one without a value, fails in that lookup).
        assert re.fullmatch(r"  \+ \(Error 0x80131(304|c49) retrieving (parameter|local variable) '[^']+'\)", ln) \
            or re.fullmatch(r"  \+ \(Error 0x80004005 retrieving local variable '[^']+'\)", ln), ln


def test_clrstack_i_accepts_slash_d(case: Case, host: str) -> None:
    assert not case.out(host, "clrstack -i /d").errors
    assert case.out(host, "clrstack -i /d").lines == case.out(host, "clrstack -i").lines


# -- clrstack -a/-p/-l (SOS's untyped form) -----------------------------------------------------


def test_clrstack_a_shows_raw_values_as_sos_does(case: Case, host: str) -> None:
    v = case.truth["values"]
    block = frame_block(case.out(host, "clrstack -a").text, v["method"])
    slot = r"\(0x[0-9A-F]{16}\)"
    want = {
        "count": v["count"], "big": v["big"], "flag": int(v["flag"]),
        "text": addr(v["textAddress"]), "item": addr(v["item"]),
    }
    for name, value in want.items():
        assert any(re.fullmatch(rf"        {name} {slot} = 0x{value:016x}", ln) for ln in block), (name, block)
    locals_ = block[block.index("    LOCALS:") + 1:]
    values = {int(m.group(1), 16) for m in (re.fullmatch(r"        0x[0-9A-F]{16} = 0x([0-9a-f]{16})", ln)
                                             for ln in locals_) if m}
    assert {v["localCount"], v["localBig"], addr(v["localItem"])} <= values, locals_


def test_clrstack_gc_lists_the_frames_references_as_sos_does(case: Case, host: str) -> None:
    """clrstack -gc: under the frame, each reference the runtime reports, as SOS prints it
    ("rbp-30: <slot> -> <object> - <type>", a string with its text). The debuggee's arguments and
    locals are there: the item and text arguments in the slots clrstack -a names for them, the
    local item and text by their objects."""
    v = case.truth["values"]
    block = frame_block(case.out(host, "clrstack -gc").text, v["method"])
    assert block and all(ln.startswith(" " * 34) for ln in block), block
    refs = [re.fullmatch(r" {34}(?:(\w+)([+-][0-9a-f]+)?: )?(?:([0-9a-f]{16}) -> )?([0-9a-f]{16})"
                         r"((?: \(pinned\))?(?: \(interior\))?)(?: - (.+))?", ln) for ln in block]
    assert all(refs), block
    held = {int(m.group(4), 16): m for m in refs if m}
    slots = {m.group(1): int(m.group(2), 16) for m in (re.fullmatch(r"        (\w+) \((0x[0-9A-F]{16})\) = .*", ln)
                                                       for ln in frame_block(case.out(host, "clrstack -a").text, v["method"]))
             if m}
    item, local_item = held[addr(v["item"])], held[addr(v["localItem"])]
    assert item.group(6) == local_item.group(6) == v["itemType"], block
    assert int(item.group(3), 16) == slots["item"], (block, slots)
    text = held[addr(v["textAddress"])]
    assert text.group(6) == f'System.String: "{v["text"][:31]}"' and int(text.group(3), 16) == slots["text"], block


def test_clrstack_p_and_l_show_only_their_half(case: Case, host: str) -> None:
    method = case.truth["values"]["method"]
    p = frame_block(case.out(host, "clrstack -p").text, method)
    l_ = frame_block(case.out(host, "clrstack -l").text, method)
    assert p[0] == "    PARAMETERS:" and "    LOCALS:" not in p, p
    assert l_[0] == "    LOCALS:" and "    PARAMETERS:" not in l_, l_
    a = frame_block(case.out(host, "clrstack -a").text, method)
    assert a == p + l_


# -- dumpstack / eestack -------------------------------------------------------------------------


def test_dumpstack_lists_managed_and_native_return_addresses(case: Case, host: str) -> None:
    v = case.truth["values"]
    lines = case.out(host, "dumpstack").lines
    assert re.fullmatch(rf"OS Thread Id: 0x{v['osTid']:x} \(\d+\)", lines[0]), lines[:3]
    assert lines[1].startswith("Current frame: ")
    assert lines[2] == "Child-SP         RetAddr          Caller, Callee"
    rows = [re.fullmatch(r"([0-9A-F]{16}) ([0-9a-f]{16}) (.*)", ln) for ln in lines[3:]]
    assert all(rows), lines
    slots = [int(m.group(1), 16) for m in rows]
    assert slots == sorted(slots)
    managed = [m.group(3) for m in rows if m.group(3).startswith("(MethodDesc ")]
    assert any(f" {v['method']}(" in s for s in managed), managed
    assert any(re.match(r"libcoreclr\.so \+ 0x[0-9a-f]+(, calling |$)", m.group(3)) for m in rows), lines
    # The managed frames appear in clrstack's order (innermost first).
    order = ["System.Threading.ManualResetEventSlim.Wait()", v["method"] + "(",
             "DebuggeeHost.StackValuesScenario.ValuesThreadMain()"]
    pos = [next(i for i, s in enumerate(managed) if o in s) for o in order]
    assert pos == sorted(pos), managed
    ee = case.out(host, "dumpstack -EE").lines
    assert all(ln.startswith("(MethodDesc ", 34) for ln in ee[3:]), ee


def test_eestack_runs_dumpstack_on_every_thread(case: Case, host: str) -> None:
    text = case.out(host, "eestack").text
    tids = {int(m, 16) for m in re.findall(r"^OS Thread Id: 0x([0-9a-f]+) ", text, re.M)}
    want = {case.truth["values"]["osTid"], case.truth["thrower"]["osTid"],
            *case.truth["parked"]["a"]["osTids"], *case.truth["parked"]["b"]["osTids"]}
    assert want <= tids, (want, tids)
    assert text.count("---------------------------------------------") == len(tids)
    # -short: only threads with managed code; the runtime's native helper threads drop out.
    short = case.out(host, "eestack -short").text
    short_tids = {int(m, 16) for m in re.findall(r"^OS Thread Id: 0x([0-9a-f]+) ", short, re.M)}
    assert want <= short_tids < tids, (want, short_tids, tids)


# -- pstacks -------------------------------------------------------------------------------------


def _pstacks_node(lines: list[str], method: str) -> tuple[int, int, int]:
    """(line index, indent, count) of the first line naming ``method(``."""
    for i, ln in enumerate(lines):
        m = re.fullmatch(r"( *)(\d+) (.*)", ln)
        if m and m.group(3).startswith(method + "("):
            return i, len(m.group(1)), int(m.group(2))
    raise AssertionError(f"{method} not in:\n" + "\n".join(lines))


def test_pstacks_merges_the_parked_threads(case: Case, host: str) -> None:
    p = case.truth["parked"]
    lines = case.out(host, "pstacks").lines
    _i, outer_indent, outer = _pstacks_node(lines, p["outer"])
    assert outer == len(p["a"]["osTids"]) + len(p["b"]["osTids"])
    for key in ("a", "b"):
        i, indent, count = _pstacks_node(lines, p[key]["method"])
        assert indent > outer_indent and count == len(p[key]["osTids"]), lines
        # The branch's innermost frames come first, under the ids of exactly its threads.
        ids = next(ln for ln in reversed(lines[:i]) if ln.strip().startswith("~~~~"))
        assert {int(t, 16) for t in ids.split()[1].split(",")} == set(p[key]["osTids"]), ids
    assert re.fullmatch(r"==> \d+ threads with \d+ roots", next(ln for ln in lines if ln.startswith("==>")))


# -- clrma ---------------------------------------------------------------------------------------


def test_clrma_analyses_the_thread_with_the_exception(case: Case, host: str) -> None:
    t = case.truth["thrower"]
    out = case.out(host, "clrma")
    assert not out.errors, out.text
    lines = out.lines
    assert re.fullmatch(rf"Thread: +\d+ \(OS thread id 0x{t['osTid']:x}\)", lines[0]), lines[:3]
    assert f"Exception object: {addr(t['exception']):016x}" in lines
    assert f"Exception type:   {t['type']}" in lines
    assert f"Message:          {t['message']}" in lines
    assert f"HResult: {t['hresult']:x}" in lines
    managed = lines[lines.index("Managed frames:") + 1: lines.index("Native frames:")]
    for m in t["frames"]:
        assert any(f" {m}()" in ln for ln in managed), (m, managed)
    native = lines[lines.index("Native frames:") + 1:]
    assert any(" libcoreclr.so + 0x" in ln for ln in native), native


# -- thread numbering ----------------------------------------------------------------------------


def test_dso_and_clrstack_number_the_thread_alike(case: Case, host: str) -> None:
    first = case.out(host, "clrstack").lines[0]
    assert re.fullmatch(rf"OS Thread Id: 0x{case.truth['values']['osTid']:x} \(\d+\)", first), first
    assert case.out(host, "dso").lines[0] == first
    assert case.out(host, "dumpstack").lines[0] == first


def test_a_runtime_thread_without_managed_frames_lists_its_frames_only(case: Case, host: str) -> None:
    # The finalizer thread waits in native code: the runtime knows it, but it has no managed frame.
    row = next(ln for ln in case.out(host, "clrthreads").lines if "(Finalizer)" in ln)
    tid = int(row.split()[2], 16)
    lines = case.out(host, "clrstack -all").lines
    i = lines.index(f"OS Thread Id: 0x{tid:x}")
    end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("OS Thread Id: ")), len(lines))
    section = lines[i + 1:end]
    # Its runtime transition frames (if any) as SOS lists them, and nothing more (dotnet-dump's
    # clrstack -all on such a thread).
    assert section[0] == "        Child SP               IP Call Site", section
    assert all(STACK_ROW.match(ln) for ln in section[1:]), section
    assert not any(STACK_ROW.match(ln) and not STACK_ROW.match(ln).group(3).startswith("[") for ln in section)
    assert "Stack Walk failed" not in case.out(host, "clrstack -all").text


# -- triage dumps --------------------------------------------------------------------------------


def test_triage_dump_answers_threads_exception_and_stacks(case: Case, triage_host: str) -> None:
    truth = case.triage_truth
    t = truth["thrower"]
    out = case.outputs[triage_host]
    assert not out["clrthreads"].errors, out["clrthreads"].text
    row = next(ln for ln in out["clrthreads"].lines if re.search(rf" {t['osTid']:x} [0-9A-F]{{16}} ", ln))
    assert row.endswith(f"{t['type']} {addr(t['exception']):016x}"), row
    pe = out["pe"]
    assert not pe.errors, pe.text
    assert f"Exception object: {addr(t['exception']):016x}" in pe.lines
    assert f"Exception type:   {t['type']}" in pe.lines
    assert f"HResult: {t['hresult']:x}" in pe.lines
    frames = [ln for ln in pe.lines if re.match(r"^    [0-9A-F]{16} [0-9A-F]{16} ", ln)]
    assert len(frames) == len(t["frames"]), pe.text
    for ln, m in zip(frames, t["frames"]):
        assert f"!{m}()+0x" in ln, (ln, m)
    sites = [m.group(3) for m in map(STACK_ROW.match, out["clrstack thrower"].lines) if m]
    assert any(s.startswith(t["frames"][0] + "()") for s in sites), sites
    sites = [m.group(3) for m in map(STACK_ROW.match, out["clrstack"].lines) if m]
    assert any(s.startswith(truth["values"]["method"] + "(") for s in sites), sites
    p = truth["parked"]
    _i, _indent, count = _pstacks_node(out["pstacks"].lines, p["outer"])
    assert count == len(p["a"]["osTids"]) + len(p["b"]["osTids"])


def test_triage_dump_heap_commands_say_the_heap_is_missing(case: Case, triage_host: str) -> None:
    out = case.outputs[triage_host]
    for key in ("dumpheap", "dso", "gcroot"):
        o = out[key]
        errs = o.errors
        assert len(errs) == 1 and "holds no GC heap" in errs[0], (key, o.text)
        assert "0x80131c49" not in o.text and "GetHeapSegmentData" not in o.text


# -- a crash dump ----------------------------------------------------------------------------------


def crash_dump(request, tmp_path: Path, scenario: str, command: str) -> tuple[dict, str, int, Path]:  # type: ignore[no-untyped-def]
    """Run ``scenario``, send it ``command`` (a thread that throws with no handler and first
    prints SOSEXT-CRASH <tid>), wait for it to die: (truth, executable, tid, the runtime's own
    crash dump, written by DOTNET_DbgEnableMiniDump)."""
    tfm = request.config.getoption("--tfm")
    core = tmp_path / f"{scenario}-{command}.core"
    env = {"DOTNET_DbgEnableMiniDump": "1", "DOTNET_DbgMiniDumpType": "2", "DOTNET_DbgMiniDumpName": str(core)}
    with Debuggee(scenario, tfm=tfm, dll=build_debuggee(tfm), core_dir=tmp_path, env=env) as d:
        truth = d.truth
        exe = str(d.executable)
        d.send(command)
        line = None
        for _ in range(20):
            line = d.read_line(60)
            if line is None or line.startswith("SOSEXT-CRASH "):
                break
        assert line is not None and line.startswith("SOSEXT-CRASH "), line
        tid = int(line.split()[1])
        deadline = time.monotonic() + 300
        while d.alive and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not d.alive, "the debuggee did not die of its unhandled exception"
    assert core.exists(), "the runtime wrote no crash dump"
    return truth, exe, tid, core


def test_clrma_on_a_crash_dump_analyses_the_faulting_thread(request, tmp_path: Path) -> None:
    """The runtime's own crash dump (DOTNET_DbgEnableMiniDump) of an unhandled exception: clrma
    picks the thread that took the signal, not the other thread holding a caught exception."""
    drivers.require_dotnet_and_lldb()
    truth, exe, tid, core = crash_dump(request, tmp_path, "stackvalues", "crash")
    crash = truth["crash"]
    for host, kw in (("cli-core", {"core": core}), ("lldb-core", {"core": core, "exe": exe})):
        out = drivers.run_in_host(host, ["clrma"], **kw)[0]
        assert not out.errors, (host, out.text)
        lines = out.lines
        assert lines[0] == f"Signal:       6 on OS thread id 0x{tid:x}", (host, lines[:3])
        assert re.fullmatch(rf"Thread: +\d+ \(OS thread id 0x{tid:x}\)", lines[1]), (host, lines[:3])
        assert f"Exception type:   {truth['thrower']['type']}" in lines, host
        assert f"Message:          {crash['message']}" in lines, host
        trace = [ln for ln in lines if re.match(r"^    [0-9A-F]{16} [0-9A-F]{16} \S+\.dll!", ln)]
        for m in crash["frames"]:
            assert any(f"!{m}()+0x" in ln for ln in trace), (host, m, trace)
        managed = lines[lines.index("Managed frames:") + 1: lines.index("Native frames:")]
        assert [m for m in crash["frames"] if any(f" {m}()" in ln for ln in managed)] == crash["frames"], managed
    core.unlink(missing_ok=True)
