"""Every command that takes an address, given every kind of address: no crash, no silence.

The DAC runs inside the debugger's process; handed a MethodTable as an AppDomain or asked
for a Free object's class name it can take LLDB, GDB or the CLI down with SIGSEGV (and a
live process attached to LLDB with it). sosext classifies each address first
(sosext/clr/addresses.py); this suite throws the cross product of address-taking commands
and address kinds at each host in ONE debugger session per host and target, then checks:

- the host process exited normally (no signal), and every command's output arrived;
- every command printed either output or exactly one ``error:`` line, never an internal error;
- the same session still answers ``dumpheap -stat`` exactly as the debuggee's truth says;
- live: the debuggee still answers and is alive after the debugger detached.

Concrete addresses come from the `heap` debuggee's truth (objects, strings, arrays,
MethodTables) and, for runtime structures the debuggee cannot print (modules, domains,
assemblies, a MethodDesc, a Free object, a stack address), from sosext's model on the core.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import pytest

import drivers
import sosparse as sp
from harness import Debuggee, build_debuggee
from harness.debuggee import runtime_pack_env, runtime_pack_named

pytestmark = pytest.mark.slow

CONFIGS = [("wks", "regions"), ("svr", "segments")]
HOSTS = ["cli-heap", "lldb-heap", "lldb-live"] + (["gdb-heap", "gdb-live"] if drivers.GDB else [])
FATAL = {128 + signal.SIGSEGV, 128 + signal.SIGBUS, 128 + signal.SIGABRT, 128 + signal.SIGILL}

# {a} is the address under test, {mt} a valid MethodTable.
COMMANDS = [
    "dumpobj {a}", "dumpobj --json {a}", "dumpobj -refs {a}", "dumparray {a}", "dumparray -details {a}",
    "dumpvc {mt} {a}", "dumpvc {a} {a}", "dumpmt {a}", "dumpmt -md {a}", "dumpclass {a}", "dumpmd {a}",
    "dumpmodule {a}", "dumpmodule -mt {a}", "dumpdomain {a}", "dumpassembly {a}", "gcroot {a}", "objsize {a}",
    "objsize -mt {a}", "gcwhere {a}", "verifyheap -segment {a}", "dumpheap -mt {a}", "dumpheap -segment {a} -stat",
    "eeheap -gc -segment {a}", "fq -mt {a} -stat", "threadstate {a}", "pe {a}", "dso {a}",
    "name2ee {a} System.String", "token2ee {a} 02000002", "setthread -t {a}", "dumpheap -stat {a}",
    "dcd {a}", "dcq {a}", "dumpasync --address {a} --stats",
    "retained {a}", "retained --json {a}",
    "dumpdelegate {a}", "dumpobjgcrefs {a}", "dumpalc {a}", "findappdomain {a}", "pathto {a} {a}",
    "notreachableinrange {a} L40",
    "clru {a}", "clru -ehinfo {a}", "dumpil {a}", "dumpil /i {a}", "ehinfo {a}", "gcinfo {a}", "dumpsig {a}",
    "dumpsig {a} {a}", "dumpsigelem {a}",
    "verifyobj {a}", "listnearobj {a}", "gcroot -gcgen 2 {a}", "ip2md {a}", "histobj {a}", "histobjfind {a}",
    "histroot {a}", "bpmd -md {a}", "tks {a}",
    # options this session added to commands above
    "gcroot -shortest {a}", "dumpobj -notes {a}", "dumpvc -notes {mt} {a}", "dumpclass -notes {a}",
    "dumpalc -notes {a}", "dumparray -details -notes {a}",
]


@dataclass
class Case:
    truth: dict
    places: dict[str, int]
    commands: list[str]
    outputs: dict[str, list[drivers.Output]] = field(default_factory=dict)
    returncodes: dict[str, int] = field(default_factory=dict)
    after_detach: tuple[bool, str] = (False, "")


def h(text: str) -> int:
    return int(text, 16)


def find_places(core: Path, truth: dict) -> dict[str, int]:
    """One address of every kind. Runtime structures are read with sosext's model from the
    core (only as arguments: the expected answers come from the truth or are just 'no crash')."""
    sys.path.insert(0, str(drivers.REPO))
    import numpy as np
    from sosext.clr.runtime import ClrRuntime
    from sosext.targets.elfcore import CoreTarget
    rt = ClrRuntime(CoreTarget(core))
    heap = rt.heap
    ix = heap.index()
    objs = truth["objects"]
    item_mt = h(truth["types"]["SosextDebuggee.HeapItemA"]["mt"])
    free_id = int(np.searchsorted(ix.method_tables, np.uint64(heap.free_mt)))
    frees = np.nonzero(ix.type_ids == free_id)[0]
    mod = rt.catalog.find("SosextDebuggee.dll")[0]
    domain = next(d for d in rt.app_domains() if any(a.address == mod.assembly for a in d.assemblies))
    md = next(s.method_desc for s in rt.methods.slots(item_mt) if s.method_desc)
    stack = 0
    for addr, t in rt.reader.threads():
        lim = rt.reader.stack_limits(addr)
        regs = rt.target.registers(t.os_thread_id) if t.os_thread_id else {}
        sp_ = regs.get("rsp", regs.get("sp"))
        if lim and sp_ and min(lim) <= sp_ < max(lim):  # the DAC answers (base, limit)
            stack = sp_ + 8
            break
    unmapped = 0x10000000
    assert not rt.target.read_partial(unmapped, 8), "the chosen unmapped address is mapped in the core"
    string = h(objs["strAscii"]["address"])
    # Before .NET 9 a MethodTable's class is a separate EEClass; since then it is the MT itself.
    eeclass = heap.types.get(item_mt).canonical
    extra = {"eeclass": eeclass} if eeclass != item_mt else {}
    code = rt.location.runtime.base + 0x1008  # readable, and nothing the runtime describes
    assert rt.target.read_partial(code, 8), "libcoreclr's first pages are not readable in the core"
    return extra | {
        "freemt": heap.free_mt, "stringmt": heap.string_mt, "code": code,
        "zero": 0, "one": 1, "unaligned": string + 3, "inside": h(objs["list"]["address"]) + 8, "mt": item_mt,
        "free": int(ix.addresses[frees[0]]), "stringdata": string + 12, "string": string,
        "array": h(objs["ints"]["address"]), "module": mod.address, "domain": domain.address,
        "assembly": mod.assembly, "methoddesc": md, "stack": stack, "unmapped": unmapped,
        "high": 0xffffffffffffff00, "sign": 0x8000000000000000,
    }


def empty_type(truth: dict) -> dict:
    """A test type the runtime loaded but that has no instance on the heap."""
    return next(v for v in truth["types"].values() if v["count"] + v["deadCount"] == 0)


def misuse(truth: dict, places: dict[str, int]) -> list[tuple[str, list[str]]]:
    """(command, its exact output lines): misused options and empty results (which print nothing, as SOS)."""
    p = places
    mt = h(truth["types"]["SosextDebuggee.HeapItemA"]["mt"])
    # An empty result prints nothing, as SOS (dotnet-dump 10): no header, no statistics, no totals.
    empty: list[str] = []
    listing: list[str] = []
    return [
        ("dumpheap -type NoSuchType", listing + empty),
        ("dumpheap -type NoSuchType -stat", empty),
        (f"dumpheap -mt {empty_type(truth)['mt']}", listing + empty),
        (f"objsize -stat -mt {empty_type(truth)['mt']}",
         [f"Objects which ({empty_type(truth)['name']}) transitively keep alive:"] + empty),
        ("dumpheap -live -dead", ["error: -live and -dead exclude each other: give one of them"]),
        ("dumpheap -gen gen3", ["error: Unknown generation: gen3. Only gen0, gen1, gen2, loh (large), poh (pinned) "
                                "and foh (frozen) are supported"]),
        (f"gcroot -limit 0 {p['string']:x}", ["error: -limit must be at least 1: 0"]),
        (f"objsize -mt {mt:x} {p['string']:x}", ["error: objsize takes an object address or -mt <MT>, not both"]),
        ("threadstate zzz", ["error: invalid thread state: zzz (a hex number, the State column of clrthreads)"]),
        ("threadstate -1", ["error: invalid thread state: -1 (a hex number, the State column of clrthreads)"]),
        (f"dumpdomain {p['string']:x}", [f"error: {p['string']:016X} is not an AppDomain: it is an object "
                                         f"(System.String) (try dumpobj {p['string']:x})"]),
        (f"verifyheap -segment {mt:x}", [f"error: {mt:#x} is not a segment of the GC heap (see eeheap -gc): it is a "
                                         f"MethodTable (SosextDebuggee.HeapItemA) (try dumpmt {mt:x})"]),
    ]


def commands_for(truth: dict, places: dict[str, int]) -> list[str]:
    mt = truth["types"]["SosextDebuggee.HeapItemA"]["mt"]
    cmds = [c.format(a=f"{addr:x}", mt=mt) for addr in places.values() for c in COMMANDS]
    return cmds + [c for c, _want in misuse(truth, places)] + ["dumpheap -stat"]


def run_recording(host: str, debuggee: Debuggee, commands: list[str], core: Path) -> tuple[list[drivers.Output], int]:
    """drivers' batch for one host, and the exit status of the debugger process it ran."""
    codes: list[int] = []
    real = subprocess.run

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        proc = real(*args, **kwargs)
        codes.append(proc.returncode)
        return proc

    debugger, target = host.split("-", 1)
    run = drivers.run_lldb if debugger == "lldb" else drivers.run_gdb
    with mock.patch.object(drivers.subprocess, "run", spy):
        try:
            if debugger == "cli":
                outs = drivers.run_cli(commands, core=core)
            elif target == "live":
                outs = run(commands, pid=debuggee.pid)
            else:
                outs = run(commands, core=core, exe=str(debuggee.executable))
        except AssertionError:
            outs = []  # the output stopped early: the host died, which the exit status tells
    return outs, codes[-1]


def outputs(case: Case, host: str) -> list[drivers.Output]:
    outs = case.outputs[host]
    assert len(outs) == len(case.commands), f"{host} died (exit status {case.returncodes[host]}) mid-batch"
    return outs


@pytest.fixture(scope="module", params=CONFIGS, ids=lambda c: f"{c[0]}-{c[1]}")
def case(request, tmp_path_factory) -> Case:
    drivers.require_dotnet_and_lldb()
    gc, flavor = request.param
    tfm = request.config.getoption("--tfm")
    cores = tmp_path_factory.mktemp(f"cores-fuzz-{gc}-{flavor}")
    with Debuggee("heap", gc=gc, gc_flavor=flavor, tfm=tfm, dll=build_debuggee(tfm), core_dir=cores) as d:
        core = d.write_core("heap", cores / "heap.core")
        places = find_places(core, d.truth)
        c = Case(d.truth, places, commands_for(d.truth, places))
        for host in HOSTS:
            c.outputs[host], c.returncodes[host] = run_recording(host, d, c.commands, core)
        time.sleep(1)  # a runtime hurt by the debugger dies soon after the detach, not at once
        try:
            pong = d.command("ping", timeout=30)
        except Exception as e:  # noqa: BLE001 - the debuggee died: that is the finding
            pong = f"{type(e).__name__}: {e}"
        c.after_detach = (d.alive, pong)
    core.unlink(missing_ok=True)
    return c


@pytest.fixture(params=HOSTS)
def host(request) -> str:
    return request.param


def test_the_host_process_exits_normally(case: Case, host: str) -> None:
    rc = case.returncodes[host]
    assert rc >= 0 and rc not in FATAL, f"{host} ended with {rc} (negative: killed by signal {-rc})"
    outputs(case, host)


def test_every_command_prints_output_or_exactly_one_error(case: Case, host: str) -> None:
    # A search that matches nothing prints nothing, as SOS does (test_misuse_prints_exact_output).
    silent = {cmd for cmd, want in misuse(case.truth, case.places) if not want}
    bad = []
    for cmd, out in zip(case.commands, outputs(case, host)):
        lines = [ln for ln in out.lines if ln.strip()]
        if "internal error" in out.text or "Traceback" in out.text:
            bad.append((cmd, out.text[-300:]))
        elif out.errors and lines != out.errors[:1]:
            bad.append((cmd, out.text[-300:]))
        elif not lines and cmd not in silent:
            bad.append((cmd, "<nothing printed>"))
    assert not bad, "\n".join(f"{c}: {t}" for c, t in bad[:20])


def test_the_session_still_answers_dumpheap_stat_as_the_truth_says(case: Case, host: str) -> None:
    rows = sp.stat_rows(outputs(case, host)[-1].text)
    populated = {k: v for k, v in case.truth["types"].items() if v["count"] + v["deadCount"] > 0}
    assert populated
    for name, t in populated.items():
        row = rows.get(h(t["mt"]))
        assert row is not None, f"{name} missing from dumpheap -stat"
        assert (row.count, row.total) == (t["count"] + t["deadCount"],
                                          t["unalignedSize"] + t["deadUnalignedSize"]), name


def test_wrong_kinds_name_what_the_address_is(case: Case, host: str) -> None:
    """A few answers pinned exactly: the classification is the point of the validation."""
    p = case.places
    out = dict(zip(case.commands, outputs(case, host)))
    mt = p["mt"]

    def err(cmd: str) -> str:
        e = out[cmd].errors
        assert len(e) == 1, (cmd, out[cmd].text)
        return e[0]

    assert err(f"dumpobj {mt:x}").startswith(f"error: {mt:#x} is not a valid object: it is a MethodTable "
                                             "(SosextDebuggee.HeapItemA) (try dumpmt")
    assert err(f"dumpdomain {mt:x}") == (f"error: {mt:016X} is not an AppDomain: it is a MethodTable "
                                         f"(SosextDebuggee.HeapItemA) (try dumpmt {mt:x})")
    assert err(f"dumpassembly {p['string']:x}") == (
        f"error: {p['string']:016X} is not an Assembly: it is an object (System.String) (try dumpobj {p['string']:x})")
    assert "is a Free object" in err(f"dumpassembly {p['free']:x}")
    assert "is a Free object" in err(f"dumpdomain {p['free']:x}")
    assert err(f"dumpheap -mt {p['string']:x}").startswith(f"error: {p['string']:#x} is not a MethodTable: it is an object")
    assert err(f"dumpmt {p['methoddesc']:x}").startswith(f"error: {p['methoddesc']:016X} is not a MethodTable: "
                                                         "it is a MethodDesc")
    # Where SOS answers with a line of its own (not a failure), sosext prints that line as output.
    assert out[f"dumpmd {p['module']:x}"].lines == [f"{p['module']:016X} is not a MethodDesc"]
    assert out[f"gcinfo {p['module']:x}"].lines == [f"{p['module']:016X} is not a valid MethodDesc"]
    assert out[f"ehinfo {p['module']:x}"].lines == ["0000000000000000 is not a MethodDesc"]
    assert out[f"dumpil {p['module']:x}"].lines == [f"{p['module']:016X} is not a MethodDesc"]
    assert out[f"dumpil {p['string']:x}"].lines == [f"Error gathering dynamic info from object at {p['string']:016x}."]
    assert out[f"dumpvc {p['string']:x} {p['string']:x}"].lines == ["Not a managed object"]
    assert out[f"dumparray {p['string']:x}"].lines == ["Not an array, please use dumpobj instead"]
    assert out[f"gcroot {p['stack']:x}"].lines[0] == f"Warning: {p['stack']:x} is not a valid object"
    assert err(f"verifyheap -segment {mt:x}").startswith(f"error: {mt:#x} is not a segment of the GC heap")
    assert err(f"objsize -mt {p['string']:x}").startswith(f"error: {p['string']:#x} is not a MethodTable")
    inside = p["inside"]
    assert err(f"dumpobj {inside:x}").startswith(f"error: {inside:#x} is not a valid object: it is inside "
                                                 f"{inside - 8:#x} (System.Collections.Generic.List")
    assert err(f"dumpobj {p['unmapped']:x}") == f"error: {p['unmapped']:#x} is not a valid object: it is not readable in the target"
    # The right kinds still answer.
    assert out[f"dumpobj --json {p['free']:x}"].text.count('"name": "Free"') == 1
    assert out[f"dumpdomain {p['domain']:x}"].lines[1].startswith("Domain 1:")
    assert out[f"dumpmodule {p['module']:x}"].lines[0].endswith("SosextDebuggee.dll")
    assert out[f"dumpmd {p['methoddesc']:x}"].lines[0].startswith("Method Name:")


def test_misused_options_and_empty_results(case: Case, host: str) -> None:
    out = dict(zip(case.commands, outputs(case, host)))
    for cmd, want in misuse(case.truth, case.places):
        assert [ln for ln in out[cmd].lines if ln.strip()] == want, cmd


def test_the_live_debuggee_survives_the_debugger(case: Case) -> None:
    if not any(h.endswith("-live") for h in HOSTS):
        pytest.skip("no live host in this run")
    alive, pong = case.after_detach
    assert alive and pong == "SOSEXT-PONG", pong


@pytest.mark.parametrize("tfm", ["net8.0", "net9.0"])
def test_an_older_runtimes_core_takes_every_address_in_the_cli(tfm: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The cross product on .NET 8 and 9 cores (their DACs, not only .NET 10's). On .NET 8,
    whose MethodTables have separate EEClasses, the DAC asked for the MethodDescData of an
    EEClass (dumpclass, dumpmd of one) killed the process with SIGSEGV, so a MethodDesc is now
    checked raw first (its chunk's MethodTable, and not an EEClass), and asked for a Free
    object's fields (dumpil of one) too. The CLI exits normally, every command prints output
    or one error line, and dumpheap -stat is still the debuggee's truth."""
    drivers.require_dotnet_and_lldb()
    dll = build_debuggee(tfm)
    with Debuggee("heap", tfm=tfm, dll=dll, core_dir=tmp_path) as d:
        core = d.write_core("heap", tmp_path / "heap.core")
    with runtime_pack_named(runtime_pack_env(tfm, dll), monkeypatch):
        places = find_places(core, d.truth)
        eeclass = places.get("eeclass", places["mt"])  # a MethodTable is its own class since .NET 9
        assert (eeclass != places["mt"]) == (tfm == "net8.0")
        c = Case(d.truth, places, commands_for(d.truth, places))
        c.outputs["cli-heap"], c.returncodes["cli-heap"] = run_recording("cli-heap", d, c.commands, core)
        test_the_host_process_exits_normally(c, "cli-heap")
        test_every_command_prints_output_or_exactly_one_error(c, "cli-heap")
        test_the_session_still_answers_dumpheap_stat_as_the_truth_says(c, "cli-heap")
        out = dict(zip(c.commands, outputs(c, "cli-heap")))
        if tfm == "net8.0":
            assert out[f"dumpmd {eeclass:x}"].text.strip() == f"{eeclass:016X} is not a MethodDesc"
        assert out[f"dumpclass {eeclass:x}"].text.startswith("Class Name:      SosextDebuggee.HeapItemA\n")


def test_dumpgcdata_on_a_net8_standalone_gc_core(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A .NET 8 workstation heap run by the standalone GC (libclrgc.so: segments): the .NET 8
    DAC asked for its GC_CONFIG_DRIVEN counters killed the process (SIGSEGV), and without a
    contract descriptor its GcDacVars cannot be checked first; dumpgcdata says so in one line
    and the session goes on (dumpheap -stat is the debuggee's truth)."""
    drivers.require_dotnet_and_lldb()
    dll = build_debuggee("net8.0")
    with Debuggee("heap", gc="wks", gc_flavor="segments", tfm="net8.0", dll=dll, core_dir=tmp_path) as d:
        core = d.write_core("heap", tmp_path / "heap.core")
    c = Case(d.truth, {}, ["dumpgcdata", "dumpheap -stat"])
    with runtime_pack_named(runtime_pack_env("net8.0", dll), monkeypatch):
        c.outputs["cli-heap"], c.returncodes["cli-heap"] = run_recording("cli-heap", d, c.commands, core)
    test_the_host_process_exits_normally(c, "cli-heap")
    test_the_session_still_answers_dumpheap_stat_as_the_truth_says(c, "cli-heap")
    assert outputs(c, "cli-heap")[0].text.startswith(
        "The standalone GC in use (libclrgc.so) may publish no GC_CONFIG_DRIVEN counters")
