"""SOS's code-inspection commands against the `code` debuggee: clru (u), dumpil, ehinfo,
gcinfo, dumpsig, dumpsigelem; and the session commands logopen/logclose, logging, dbgout,
loadsymbols.

The debuggee compiles one method of known IL (a typed catch, a filter and a finally around a
call to a known callee) and prints what reflection knows of it: its MethodDesc, its IL bytes
decoded with reflection's own opcode table (System.Reflection.Emit.OpCodes), its IL
exception clauses, its entry point, and where its signature blob lies in the module's
metadata in memory. Each host (LLDB and GDB live and on a core, the CLI on the core) runs
one batch, and the outputs are compared with that truth.
"""
from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

import drivers
from harness import Debuggee, build_debuggee
from test_parity import HOSTS, Case, h

pytestmark = pytest.mark.slow

# ECMA-335 element type names, as SOS's dumpsig writes them
ELEMENT = {"System.String": "String", "System.Int32": "I4", "System.Int64": "I8", "System.Object": "Object",
           "System.Boolean": "Boolean", "System.Void": "Void"}
CLAUSE_KINDS = {"Clause": {"TYPED"}, "Filter": {"FILTER"}, "Fault": {"FAULT"},
                # the JIT clones a finally into the normal path and keeps the original as a fault
                "Finally": {"FINALLY", "FAULT"}}
INSN = re.compile(r"^(>>> )?(?:([0-9a-f]{4}) )?([0-9a-f]{16}) ([0-9a-f]+) +(\S.*)$")
BEGIN = re.compile(r"^Begin ([0-9A-F]{16}), size ([0-9a-f]+)$", re.M)


def _sos(host: str, command: str) -> str:
    """GDB keeps its own `u`: sosext's is `sos u` there."""
    return f"sos {command}" if host.startswith("gdb") and command.startswith("u ") else command


def commands_for(t: dict, host: str, first: dict) -> list[str]:
    c = t["code"]
    md, entry, sig = c["methodDesc"], c["entry"], c["signature"]["address"]
    module, start = first["module"], first["code"]
    return [
        f"dumpmd {md}",
        f"dumpil {md}", f"dumpil {md} --json", f"dumpil /i {first['il']}",
        f"dumpil {c['dynamic']['address']}", f"dumpil {c['dynamic']['address']} --json",
        f"ehinfo {md}", f"ehinfo {md} --json",
        f"clru {md}", f"clru -n -o -ehinfo {md}", f"clru {entry}", _sos(host, f"u -n {start:x}"), f"clru {md} --json",
        f"gcinfo {md}", f"gcinfo {start:x}", f"gcinfo {md} --json",
        f"gcinfo {c['caller']['methodDesc']} --json", f"clru -n {c['caller']['methodDesc']}", f"gcinfo {c['caller']['methodDesc']}",
        f"clru -n -o -gcinfo {c['caller']['methodDesc']}", f"clru -n -gcinfo {md}", f"clru -n -il {md}", f"clru -n -map {md}",
        f"dumpsig {sig} {module}", f"dumpsigelem {h(sig) + 3:x} {module}", f"dumpsig {sig}",
        # bad input: one line each, the debugger still answers
        "clru 0", "clru", "dumpil 10", f"dumpil {module}", f"ehinfo {module}", "gcinfo zz",
        f"dumpil /i {md}", "dumpsig 1", f"dumpsig {sig} {md}",
        "dbgout", "dbgout -off", "loadsymbols", "logging", "logclose",
        f"ehinfo {c['catcher']['methodDesc']}",
    ]


def first_batch(core: Path, md: str) -> dict:
    """The module, the code's start and the IL address of the method, from the CLI on the core."""
    dumpmd, = drivers.run_in_host("cli-core", [f"dumpmd {md}"], core=core)
    text = dumpmd.text
    module = re.search(r"^Module: +([0-9a-f]{16})$", text, re.M).group(1)
    code = int(re.search(r"^Current CodeAddr: +([0-9a-f]{16})$", text, re.M).group(1), 16)
    il = re.search(r"^  IL Addr: +([0-9a-f]{16})$", text, re.M).group(1)
    return {"module": module, "code": code, "il": il}


def run(host: str, truth: dict, first: dict, **kw) -> dict[str, drivers.Output]:  # type: ignore[no-untyped-def]
    cmds = commands_for(truth, host, first)
    return dict(zip(cmds, drivers.run_in_host(host, cmds, **kw)))


@pytest.fixture(scope="module")
def case(request, tmp_path_factory) -> Case:
    drivers.require_dotnet_and_lldb()
    tfm = request.config.getoption("--tfm")
    cores = tmp_path_factory.mktemp("cores-code")
    with Debuggee("code", tfm=tfm, dll=build_debuggee(tfm), core_dir=cores) as d:
        c = Case(d.truth)
        core = d.write_core("heap", cores / "code.core")
        exe = str(d.executable)
        first = first_batch(core, d.truth["code"]["methodDesc"])
        c.truth = {**d.truth, "first": first}
        c.outputs["lldb-live"] = run("lldb-live", d.truth, first, pid=d.pid)
        if "gdb-live" in HOSTS:
            c.outputs["gdb-live"] = run("gdb-live", d.truth, first, pid=d.pid)
    c.outputs["lldb-core"] = run("lldb-core", c.truth, first, core=core, exe=exe)
    c.outputs["cli-core"] = run("cli-core", c.truth, first, core=core)
    if "gdb-core" in HOSTS:
        c.outputs["gdb-core"] = run("gdb-core", c.truth, first, core=core, exe=exe)
    c.truth["core"] = str(core)
    return c


@pytest.fixture(params=HOSTS)
def host(request) -> str:
    return request.param


def cmd(case: Case, host: str, name: str) -> str:
    """The output of the batch's command that starts with ``name`` (formats filled in)."""
    for command, out in case.outputs[host].items():
        if command == name or command.startswith(name + " ") or command == f"sos {name}" \
                or command.startswith(f"sos {name} "):
            return out.text
    raise KeyError(name)


def by_command(case: Case, host: str, command: str) -> str:
    return case.outputs[host][command].text


def json_of(text: str) -> dict:
    import json
    return json.loads(text)


# -- dumpil -----------------------------------------------------------------------------------

def test_dumpil_decodes_the_il_reflection_decodes(case: Case, host: str) -> None:
    c = case.truth["code"]
    doc = json_of(by_command(case, host, f"dumpil {c['methodDesc']} --json"))
    assert [(i["offset"], i["opcode"]) for i in doc["instructions"]] == \
        [(i["offset"], i["opcode"]) for i in c["instructions"]]
    assert h(doc["il_address"]) == h(case.truth["first"]["il"])
    # the call to the callee, named in ildasm's words
    callee_type, callee_name = c["callee"]["method"].rsplit(".", 1)
    calls = [i for i in doc["instructions"] if i["opcode"] == "call"]
    assert [i["operand"] for i in calls] == [f"int32 {callee_type}::{callee_name}(int32)"]


def test_dumpil_text_lists_every_instruction_with_blocks(case: Case, host: str) -> None:
    c = case.truth["code"]
    text = by_command(case, host, f"dumpil {c['methodDesc']}")
    lines = text.splitlines()
    il = case.truth['first']['il'].upper()  # SOS prints it in upper case
    assert lines[:2] == [f"ilAddr is {il}", f"ilAddr = {il}"], text
    listed = [re.match(r"^ *IL_([0-9a-f]{4}): (\S+)", ln) for ln in lines]
    assert [(int(m.group(1), 16), m.group(2)) for m in listed if m] == \
        [(i["offset"], i["opcode"]) for i in c["instructions"]]
    # one .try per distinct protected range, one handler block per clause, balanced
    ranges = {(k["tryOffset"], k["tryLength"]) for k in c["clauses"]}
    assert sum(ln.strip() == ".try" for ln in lines) == len(ranges)
    assert sum(ln.strip() in (".catch", ".finally") for ln in lines) == len(c["clauses"])
    assert sum(ln.strip() == "{" for ln in lines) == sum(ln.strip().startswith("} // end ") for ln in lines)


def test_dumpil_clauses_equal_reflection(case: Case, host: str) -> None:
    c = case.truth["code"]
    doc = json_of(by_command(case, host, f"dumpil {c['methodDesc']} --json"))
    kinds = {"Clause": "TYPED", "Filter": "FILTER", "Finally": "FINALLY", "Fault": "FAULT"}
    assert [(k["kind"], k["try_offset"], k["try_length"], k["handler_offset"], k["handler_length"],
             k["filter_offset"]) for k in doc["clauses"]] == \
        [(kinds[k["flags"]], k["tryOffset"], k["tryLength"], k["handlerOffset"], k["handlerLength"],
          k["filterOffset"] if k["flags"] == "Filter" else None) for k in c["clauses"]]


def test_dumpil_of_an_il_address_names_no_tokens(case: Case, host: str) -> None:
    c = case.truth["code"]
    text = by_command(case, host, f"dumpil /i {case.truth['first']['il']}")
    listed = re.findall(r"^ *IL_([0-9a-f]{4}): (\S+)(.*)$", text, re.M)
    assert [(int(o, 16), n) for o, n, _ in listed] == [(i["offset"], i["opcode"]) for i in c["instructions"]]
    call = next(rest for _o, n, rest in listed if n == "call")
    assert re.fullmatch(r" TOKEN 6[0-9a-f]{6}", call), call


def test_dumpil_of_a_dynamic_method(case: Case, host: str) -> None:
    c = case.truth["code"]
    d = c["dynamic"]
    text = by_command(case, host, f"dumpil {d['address']}")
    assert text.startswith("This is dynamic IL. Exception info is not reported at this time.\n"), text
    doc = json_of(by_command(case, host, f"dumpil {d['address']} --json"))
    assert [i["opcode"] for i in doc["instructions"]] == d["opcodes"]
    operands = [i["operand"] for i in doc["instructions"] if i["operand"] is not None]
    assert re.fullmatch(rf'70[0-9a-f]{{6}} "{re.escape(d["literal"])}"', operands[1]), operands
    assert all(re.fullmatch(r"6[0-9a-f]{6} System\.String\.get_Length\(\)", operands[i]) for i in (0, 2)), operands
    assert re.fullmatch(rf"6[0-9a-f]{{6}} {re.escape(c['callee']['method'])}\(Int32\)", operands[3]), operands


# -- ehinfo -----------------------------------------------------------------------------------

def test_ehinfo_clauses_equal_reflection(case: Case, host: str) -> None:
    c = case.truth["code"]
    doc = json_of(by_command(case, host, f"ehinfo {c['methodDesc']} --json"))
    native = [k for k in doc["clauses"] if not k["duplicate"]]
    assert len(native) == len(c["clauses"])
    for n, r in zip(native, c["clauses"]):
        assert n["kind"] in CLAUSE_KINDS[r["flags"]], (n, r)
        assert n["catch_type"] == r["catchType"], (n, r)
        assert (n["filter"] is not None) == (r["flags"] == "Filter")
    size = int(BEGIN.search(by_command(case, host, f"clru {c['methodDesc']}")).group(2), 16)
    for n in doc["clauses"]:
        assert 0 <= n["try_start"] < n["try_end"] <= size and 0 <= n["handler_start"] < n["handler_end"] <= size, n
    # the clauses sharing one protected range in IL share it in the code
    typed, filtered = native[0], native[1]
    assert (typed["try_start"], typed["try_end"]) == (filtered["try_start"], filtered["try_end"])


def test_ehinfo_text_is_sos_shape(case: Case, host: str) -> None:
    c = case.truth["code"]
    text = by_command(case, host, f"ehinfo {c['methodDesc']}")
    assert text.startswith(f"MethodDesc:   {h(c['methodDesc']):016x}\nMethod Name:          {c['method']}("), text
    begin = case.truth["first"]["code"]
    # Addresses as SOS (dotnet-dump and LLDB) prints them here, WinDbg style: 00007f9a`4ae84ddf.
    blocks = re.findall(r"^EHHandler (\d+): (\w+) ?(.*)\nClause:  \[([0-9a-f]{8}`[0-9a-f]{8}), ([0-9a-f]{8}`[0-9a-f]{8})\] "
                        r"\[([0-9a-f]+), ([0-9a-f]+)\]\nHandler: \[([0-9a-f]{8}`[0-9a-f]{8}), ([0-9a-f]{8}`[0-9a-f]{8})\] "
                        r"\[([0-9a-f]+), ([0-9a-f]+)\]$", text, re.M)
    blocks = [tuple(g.replace("`", "") for g in b) for b in blocks]
    assert len(blocks) >= len(c["clauses"]), text
    assert blocks[0][2] == f"catch({c['clauses'][0]['catchType']})"
    for b in blocks:
        assert int(b[3], 16) - begin == int(b[5], 16) and int(b[4], 16) - begin == int(b[6], 16), b
        assert int(b[7], 16) - begin == int(b[9], 16) and int(b[8], 16) - begin == int(b[10], 16), b


def test_ehinfo_names_a_catch_type_of_another_module(case: Case, host: str) -> None:
    """CodeCatcher catches CoreLib's FormatException (a TypeRef): sosext names it where SOS prints
    `catch()` (sos-users.md, "ehinfo names catch types of other modules")."""
    c = case.truth["code"]["catcher"]
    text = by_command(case, host, f"ehinfo {c['methodDesc']}")
    assert re.search(rf"^EHHandler 0: TYPED catch\({re.escape(c['catchType'])}\)$", text, re.M), text


# -- clru -------------------------------------------------------------------------------------

def instructions(text: str) -> list[tuple[int, int, str]]:
    """(address, length, text) of each instruction line."""
    out = []
    for ln in text.splitlines():
        m = INSN.match(ln)
        if m:
            out.append((int(m.group(3), 16), len(m.group(4)) // 2, m.group(5)))
    return out


def test_clru_covers_the_code_exactly(case: Case, host: str) -> None:
    c = case.truth["code"]
    text = by_command(case, host, f"clru {c['methodDesc']}")
    lines = text.splitlines()
    assert lines[0] == "Normal JIT generated code", text
    assert lines[1].startswith(c["method"] + "("), text
    begin, size = (int(g, 16) for g in BEGIN.search(text).groups())
    assert begin == case.truth["first"]["code"]
    ins = instructions(text)
    assert ins[0][0] == begin
    for (a, n, _t), (b, _m, _u) in zip(ins, ins[1:]):
        assert a + n == b, (hex(a), n, hex(b))
    assert ins[-1][0] + ins[-1][1] == begin + size


def test_clru_names_the_callee(case: Case, host: str) -> None:
    c = case.truth["code"]
    callee = c["callee"]
    text = by_command(case, host, f"clru {c['methodDesc']}")
    named = [t for _a, _n, t in instructions(text) if f"({callee['method']}(Int32), mdToken: " in t]
    assert len(named) == 1 and named[0].split()[0] == "call", named
    assert named[0].endswith(f"mdToken: {callee['token']:016x})"), named


def test_clru_of_the_entry_point_and_an_ip(case: Case, host: str) -> None:
    c = case.truth["code"]
    whole = by_command(case, host, f"clru {c['methodDesc']}")
    stub = by_command(case, host, f"clru {c['entry']}")
    assert BEGIN.search(stub).groups() == BEGIN.search(whole).groups()
    start = case.truth["first"]["code"]
    at_ip = cmd(case, host, "u -n")
    assert "@ " not in at_ip  # -n: no source lines
    marked = [ln for ln in at_ip.splitlines() if ln.startswith(">>> ")]
    assert marked == [ln for ln in at_ip.splitlines() if INSN.match(ln) and INSN.match(ln).group(1)]
    assert len(marked) == 1 and int(INSN.match(marked[0]).group(3), 16) == start


def test_clru_offsets_and_eh_marks(case: Case, host: str) -> None:
    c = case.truth["code"]
    text = by_command(case, host, f"clru -n -o -ehinfo {c['methodDesc']}")
    begin = case.truth["first"]["code"]
    for ln in text.splitlines():
        m = INSN.match(ln)
        if m:
            assert int(m.group(2), 16) == int(m.group(3), 16) - begin, ln
    doc = json_of(by_command(case, host, f"ehinfo {c['methodDesc']} --json"))
    for k in doc["clauses"]:
        if not k["duplicate"]:
            assert len(re.findall(rf"^EHHandler {k['index']}: {k['kind']} CLAUSE BEGIN", text, re.M)) == 1, text
            assert len(re.findall(rf"^EHHandler {k['index']}: {k['kind']} HANDLER END", text, re.M)) <= 1


def test_clru_il_puts_the_il_before_the_code_made_of_it(case: Case, host: str) -> None:
    c = case.truth["code"]
    lines = by_command(case, host, f"clru -n -il {c['methodDesc']}").splitlines()
    il = [ln for ln in lines if re.match(r"^IL_[0-9a-f]{4}: ", ln)]
    listing = {ln.strip() for ln in by_command(case, host, f"dumpil {c['methodDesc']}").splitlines()}
    assert il and set(il) <= listing and len(il) == len(set(il)), il  # dumpil's lines, each once
    offsets = [int(ln[3:7], 16) for ln in il]
    assert offsets[0] == 0 and set(offsets) <= {i["offset"] for i in c["instructions"]}
    callee_type, callee_name = c["callee"]["method"].rsplit(".", 1)
    il_call = lines.index(next(ln for ln in il if f"::{callee_name}(" in ln))
    native_call = next(i for i, ln in enumerate(lines) if f"({c['callee']['method']}(Int32), mdToken:" in ln)
    assert il_call < native_call
    # the IL printed last before the native call is the stretch holding the IL call
    last_il = max(i for i in range(native_call) if re.match(r"^IL_", lines[i]))
    group_start = max(i for i in range(last_il + 1) if re.match(r"^IL_", lines[i]) and not re.match(r"^IL_", lines[i - 1]))
    assert group_start <= il_call <= last_il


def test_clru_map_is_the_jits_il_to_native_map(case: Case, host: str) -> None:
    c = case.truth["code"]
    lines = by_command(case, host, f"clru -n -map {c['methodDesc']}").splitlines()
    begin, size = (int(g, 16) for g in BEGIN.search("\n".join(lines)).groups())
    entries = [tuple(int(w, 16) for w in ln.split()) for ln in lines if re.fullmatch(r"[0-9a-f]{8} [0-9a-f]{16} [0-9a-f]{16}", ln)]
    assert entries and entries[0][:2] == (0xFFFFFFFE, begin)  # the prolog first, from the code's start
    il_offsets = {i["offset"] for i in c["instructions"]}
    mapped = [e for e in entries if e[0] < 0xFFFFFFFD]
    assert mapped and all(e[0] in il_offsets and begin <= e[1] <= begin + size for e in mapped), entries
    # the IL call to the callee maps to the stretch holding the native call
    call_il = next(i["offset"] for i in c["instructions"] if i["opcode"] == "call")
    native = [a for a, _n, t in instructions(by_command(case, host, f"clru {c['methodDesc']}"))
              if f"({c['callee']['method']}(Int32)" in t]
    stretch = max((e for e in mapped if e[1] <= native[0]), key=lambda e: e[1])
    assert stretch[0] <= call_il, (stretch, call_il)


def test_clru_json(case: Case, host: str) -> None:
    c = case.truth["code"]
    doc = json_of(by_command(case, host, f"clru {c['methodDesc']} --json"))
    text_ins = instructions(by_command(case, host, f"clru {c['methodDesc']}"))
    assert [h(i["address"]) for i in doc["instructions"]] == [a for a, _n, _t in text_ins]
    assert h(doc["method_desc"]) == h(c["methodDesc"])


# -- gcinfo -----------------------------------------------------------------------------------

def test_gcinfo_header_lines(case: Case, host: str) -> None:
    c = case.truth["code"]
    begin, size = (int(g, 16) for g in BEGIN.search(by_command(case, host, f"clru {c['methodDesc']}")).groups())
    for command in (f"gcinfo {c['methodDesc']}", f"gcinfo {begin:x}"):
        lines = by_command(case, host, command).splitlines()
        # SOS's header (dotnet-dump's gcinfo): upper-case addresses, then "Pointer table:".
        assert lines[0] == f"entry point {begin:016X}"
        assert lines[1] == "Normal JIT generated code"
        assert re.fullmatch(r"GC info [0-9A-F]{16}", lines[2]), lines
        assert lines[3] == "Pointer table:"
        assert f"Code size: {size:x}" in lines  # the GC info's own code length: the header decoded right
        assert "Frame pointer: rbp" in lines  # the code sets up rbp (lea rbp, [rsp+...])


def test_gcinfo_slots_and_ranges_match_the_code(case: Case, host: str) -> None:
    c = case.truth["code"]
    doc = json_of(by_command(case, host, f"gcinfo {c['methodDesc']} --json"))
    clru = by_command(case, host, f"clru {c['methodDesc']}")
    size = int(BEGIN.search(clru).group(2), 16)
    assert doc["code_size"] == size and doc["frame_register"] == "rbp"
    # EH makes the method fully interruptible: ranges inside the code, in order, apart
    ranges = doc["interruptible_ranges"]
    assert ranges and all(0 <= a < b <= size for a, b in ranges)
    assert all(b1 <= a2 for (_a1, b1), (a2, _b2) in zip(ranges, ranges[1:]))
    regs = [s["slot"] for s in doc["slots"] if s["register"]]
    assert set(regs) <= {"rax", "rcx", "rdx", "rbx", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13",
                         "r14", "r15"}
    # the `ref long` argument (an interior pointer) is spilled to the frame: that stack slot is
    # reported as interior, at the offset the code stores it to
    spilled = [s for s in doc["slots"] if not s["register"] and s["interior"]]
    assert spilled, doc["slots"]
    stores = {int(m, 16) for m in re.findall(r"(?i)\[rbp ?- ?0x([0-9a-f]+)\], ?rcx", clru)}
    assert {int(s["slot"].split("-")[1], 16) for s in spilled} & stores, (spilled, stores)


def test_gcinfo_lifetimes_follow_the_code(case: Case, host: str) -> None:
    """In the fully interruptible CodeSubject: a register loaded from the `ref long` spill
    slot becomes live (interior) right after the load; the exception object (rdi) is live
    where the typed handler and the filter start; changes lie inside the ranges."""
    c = case.truth["code"]
    doc = json_of(by_command(case, host, f"gcinfo {c['methodDesc']} --json"))
    text = by_command(case, host, f"clru {c['methodDesc']}")
    begin = int(BEGIN.search(text).group(1), 16)
    changes = {(o, slot, live) for o, slot, live in doc["lifetimes"]}
    ranges = doc["interruptible_ranges"]
    # (a slot still live at a range's end dies at the end, as SOS prints it)
    assert all(any(a <= o <= b for a, b in ranges) for o, _s, _l in changes)
    reloads = [(a - begin + n, m.group(1)) for a, n, t in instructions(text)
               if (m := re.fullmatch(r"(?i)mov\s+(\w+), ?qword ptr \[rbp ?- ?0x20\]", t))]
    assert reloads, text
    for after, reg in reloads:
        assert (after, f"{reg.lower()}(interior)", True) in changes, (after, reg, sorted(changes))
    eh = json_of(by_command(case, host, f"ehinfo {c['methodDesc']} --json"))["clauses"]
    starts = [k["handler_start"] for k in eh if k["kind"] == "TYPED"] + [k["filter"] for k in eh if k["kind"] == "FILTER"]
    assert len(starts) == 2
    for start in starts:
        first = min(a for a, _b in ranges if a >= start)
        assert (first, "rdi", True) in changes, (start, first, sorted(changes))


def test_gcinfo_safe_points_are_the_calls_return_addresses(case: Case, host: str) -> None:
    caller = case.truth["code"]["caller"]["methodDesc"]
    doc = json_of(by_command(case, host, f"gcinfo {caller} --json"))
    text = by_command(case, host, f"clru -n {caller}")
    begin = int(BEGIN.search(text).group(1), 16)
    ins = instructions(text)
    returns = {a + n - begin for a, n, t in ins if t.split()[0] == "call"}
    assert doc["interruptible_ranges"] == []  # no loop, no EH: only its calls are safe points
    assert len(returns) == 3 and set(doc["safe_points"]) == returns, (doc["safe_points"], sorted(returns))


def test_clru_gcinfo_puts_each_line_before_its_instruction(case: Case, host: str) -> None:
    c = case.truth["code"]
    for md in (c["caller"]["methodDesc"], c["methodDesc"]):
        gc_lines = by_command(case, host, f"gcinfo {md}").splitlines()
        body = [ln for ln in gc_lines if re.match(r"^[0-9a-f]{8} ", ln)]
        command = next(k for k in case.outputs[host] if k.startswith("clru -n") and "-gcinfo" in k and k.endswith(md))
        lines = by_command(case, host, command).splitlines()
        assert [ln for ln in lines if re.match(r"^[0-9a-f]{8} ", ln)] == body  # all of them, in order
        begin = int(BEGIN.search("\n".join(lines)).group(1), 16)
        for i, ln in enumerate(lines):
            if re.match(r"^[0-9a-f]{8} ", ln):
                nxt = next((m for m in map(INSN.match, lines[i + 1:]) if m), None)
                offset = int(ln.split()[0], 16)
                assert nxt is None or int(nxt.group(3), 16) - begin >= offset, (ln, nxt and nxt.group(0))
                prev = [m for m in map(INSN.match, lines[:i]) if m]
                assert not prev or int(prev[-1].group(3), 16) - begin < offset, (ln, prev[-1].group(0))


def test_gcinfo_live_slots_at_the_calls_follow_the_source(case: Case, host: str) -> None:
    """CodeCaller(text, keep): CodeCallee(text.Length) returns an int, n.ToString() a string,
    Concat(text, ...) the result; `text` is used up to Concat, `keep` up to GC.KeepAlive after it."""
    caller = case.truth["code"]["caller"]["methodDesc"]
    doc = json_of(by_command(case, host, f"gcinfo {caller} --json"))
    ins = instructions(by_command(case, host, f"clru -n {caller}"))
    homes = {}
    for _a, _n, t in ins:  # the prolog copies the arguments (rdi, rsi) to callee-saved registers
        m = re.fullmatch(r"mov\s+(\w+), ?(rdi|rsi)", t.lower())
        if m and m.group(2) not in homes:
            homes[m.group(2)] = m.group(1)
    text_reg, keep_reg = homes["rdi"], homes["rsi"]
    live = [set(s) for s in doc["live_at_safe_points"]]
    assert len(live) == 3, doc
    assert all(keep_reg in s for s in live), live
    assert text_reg in live[0] and text_reg in live[1] and text_reg not in live[2], live
    assert "rax" not in live[0] and "rax" in live[1] and "rax" in live[2], live  # int, then strings


# -- dumpsig / dumpsigelem ----------------------------------------------------------------------

def sos_element(p: dict) -> str:
    name = ELEMENT.get(p["type"])
    if name is None:
        name = f"Class {p['type']}" + (f"<{','.join(ELEMENT[a] for a in p['typeArguments'])}>"
                                        if p["typeArguments"] else "")
    return ("ByRef " if p["byRef"] else "") + name


def test_dumpsig_names_the_parameter_types(case: Case, host: str) -> None:
    s = case.truth["code"]["signature"]
    module = case.truth["first"]["module"]
    params = ",".join(sos_element(p) for p in s["parameters"])
    expected = f"[DEFAULT] {ELEMENT[s['returnType']]} ({params})"
    assert by_command(case, host, f"dumpsig {s['address']} {module}").strip() == expected
    first = sos_element(s["parameters"][0])
    assert by_command(case, host, f"dumpsigelem {h(s['address']) + 3:x} {module}").strip() == first
    # without the module a type token stays a number
    bare = by_command(case, host, f"dumpsig {s['address']}").strip()
    assert re.fullmatch(r"\[DEFAULT\] I4 \(String,I4,Class 0x01[0-9a-f]{6}<I4>,ByRef I8\)", bare), bare


# -- bad input and session commands ---------------------------------------------------------------

def test_bad_input_is_one_error_line(case: Case, host: str) -> None:
    c = case.truth["code"]
    module = case.truth["first"]["module"]
    for command in ("clru 0", "clru", "gcinfo zz",
                    f"dumpil /i {c['methodDesc']}", "dumpsig 1", f"dumpsig {c['signature']['address']} {c['methodDesc']}"):
        out = case.outputs[host][command]
        assert len(out.errors) == 1 and len(out.lines) == 1, (command, out.text)
        assert "Traceback" not in out.text
    # Where SOS answers with a line of its own (no failure there), that line is the output.
    for command, answer in (("dumpil 10", "0000000000000010 is not a MethodDesc"),
                            (f"dumpil {module}", f"{h(module):016X} is not a MethodDesc"),
                            (f"ehinfo {module}", "0000000000000000 is not a MethodDesc")):
        out = case.outputs[host][command]
        assert not out.errors and out.lines == [answer], (command, out.text)
    # the session goes on: the commands after these answered
    assert by_command(case, host, "loadsymbols").startswith("sosext downloads no symbols")


def test_session_commands_answer(case: Case, host: str) -> None:
    assert by_command(case, host, "dbgout").strip() == "Debug output logging enabled"
    assert by_command(case, host, "dbgout -off").strip() == "Debug output logging disabled"
    assert by_command(case, host, "logging").strip() == "Logging is disabled"
    assert by_command(case, host, "logclose").strip() == "Console logging is disabled"


def test_logopen_copies_the_console_to_a_private_new_file(case: Case, tmp_path: Path) -> None:
    core = Path(case.truth["core"])
    md = case.truth["code"]["methodDesc"]
    log = tmp_path / "console.log"
    link = tmp_path / "link.log"
    link.symlink_to(tmp_path / "elsewhere.log")
    diag = tmp_path / "diag.log"
    outs = drivers.run_cli([f"logopen {log}", "logopen", f"dumpmd {md}", "logclose", "eeversion"], core=core)
    assert outs[0].text.strip() == f"Console is logging to {log}"
    assert outs[1].text.strip() == f"Console is logging to {log}"
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600
    written = log.read_text()
    assert outs[2].text in written and "eeversion" not in written and outs[4].text not in written
    first_dumpmd = outs[2].text
    # An existing file is replaced, as SOS does, and logopen says so; a symlink is refused.
    os.chmod(log, 0o644)
    outs = drivers.run_cli([f"logopen {log}", "eeversion", f"logopen {link}", f"logging {diag}", f"logging {log}",
                            "logging --disable"], core=core)
    assert outs[0].lines == [f"Replaced the existing file {log}", f"Console is logging to {log}"]
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600
    assert outs[2].errors == [f"error: {link} is a symbolic link: sosext neither follows nor replaces one "
                              "(choose another name)"]
    assert not (tmp_path / "elsewhere.log").exists()  # not followed
    assert outs[3].lines == ["Logging is enabled", str(diag)]
    assert stat.S_IMODE(os.stat(diag).st_mode) == 0o600
    assert outs[4].errors == [f"error: {log} exists: sosext does not overwrite a file (remove it or choose another name)"]
    assert outs[5].text.strip() == "Logging is disabled"
    written = log.read_text()
    assert outs[1].text in written and first_dumpmd not in written  # a new file, not appended to
