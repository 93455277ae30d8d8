"""The two runtime readers agree on real programs, not only on the test debuggee.

Over the full cores of three real programs (tests/harness/realapps.py: an ASP.NET webapi app
under load, a dotnet build with MSBuild, the Roslyn compiler server), the commands of
test_readers.py's TEMPLATES that make sense without a debuggee's truth run once under each
reader in the CLI and must print byte-identical text.

The arguments (types, objects, modules, an exception) are picked from a first DAC-reader run
of `dumpheap -stat`, `dumpdomain` and a few `-short` listings: what the program happens to hold,
so the commands exercise the types, generics, arrays and modules a real program has.
A command the contracts reader cannot answer prints the DAC reader's text up to the question
and one line naming the DAC reader: listed in a warning, not a failure. Any other difference
fails. (MSBuild's stacks hold generic method instantiations, which only the type half's
MethodDescs name: without them clrstack and gcroot differ there.)
"""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import drivers

pytestmark = pytest.mark.slow

APPS = ("webapi", "msbuild", "vbcscompiler")
ENV = {"SOSEXT_CLR_PATH": ""}

# Types looked for in `dumpheap -stat` (the first present of each group is taken).
TYPE_GROUPS = [
    ("System.String",),
    ("System.Object[]",),
    ("System.Collections.Generic.Dictionary<System.String, System.Object>",
     "System.Collections.Generic.Dictionary<System.String, System.String>"),
    ("System.RuntimeType",),
    ("System.Threading.Thread",),
    ("System.Byte[]",),
]
_STAT_ROW = re.compile(r"^([0-9a-f]{8,16})\s+([\d,]+)\s+([\d,]+)\s+(.+)$")
_ADDR = re.compile(r"^([0-9a-f]{8,16})\s*$")


@dataclass
class Plan:
    """The commands to compare on one core, picked from the DAC reader's answers."""
    commands: list[str] = field(default_factory=list)


def _stat(text: str) -> dict[str, tuple[str, int]]:
    rows: dict[str, tuple[str, int]] = {}
    for line in text.splitlines():
        m = _STAT_ROW.match(line)
        if m:
            rows[m.group(4)] = (m.group(1), int(m.group(2).replace(",", "")))
    return rows


def _short(text: str) -> list[str]:
    return [m.group(1) for m in map(_ADDR.match, text.splitlines()) if m]


def plan(core: Path) -> list[str]:
    """Every command to compare on ``core``."""
    first = drivers.run_cli(["dumpheap -stat", "dumpdomain", "dumpheap -type Exception -stat", "clrstack -n -all"],
                            core=core, env={**ENV, "SOSEXT_READER": "dac"})
    stat = _stat(first[0].text)
    types: list[tuple[str, str]] = []  # (name, mt)
    for group in TYPE_GROUPS:
        name = next((n for n in group if n in stat), None)
        if name:
            types.append((name, stat[name][0]))
    # the most numerous type of the program's own (not System.*) namespaces
    own = sorted(((c, n, mt) for n, (mt, c) in stat.items() if not n.startswith(("System.", "Free"))),
                 reverse=True)
    if own:
        types.append((own[0][1], own[0][2]))
    exceptions = [(n, mt) for n, (mt, _c) in _stat(first[2].text).items() if n.endswith("Exception")]
    modules = re.findall(r"^\s+Module\s*\n\s+([0-9a-f]+)\s", first[1].text, re.M)
    listing = drivers.run_cli([f"dumpheap -mt {mt} -short" for _n, mt in types + exceptions[:1]],
                              core=core, env={**ENV, "SOSEXT_READER": "dac"})
    objects = {n: _short(o.text)[:2] for (n, _mt), o in zip(types + exceptions[:1], listing)}

    commands = ["dumpheap -stat", "dumpheap -strings", "dumpheap -short", "dumpheap -live -stat",
                "dumpheap -dead -stat", "dumpheap -gen loh -short", "dumpheap -gen gen2 -stat",
                "dumpheap -type System.Collections. -stat", "dumpheap -mt {string_mt} -min 1000 -short",
                "eeheap -gc", "dumpdomain", "gchandles", "gchandles -stat", "finalizequeue", "verifyheap",
                "syncblk", "clrthreads", "clrstack -all", "clrstack -gc -all", "clrstack -a -all", "clrstack -i -a -all",
                "dso", "gcheapstat", "sizestats",
                "name2ee *!System.String", "name2ee System.Private.CoreLib.dll!System.Collections.Generic.List`1",
                "dominators -top 5", "heapdiff {core}", "leaks {core}", "report --format folded -o -"]
    string_mt = next((mt for n, mt in types if n == "System.String"), None)
    if string_mt is None:
        commands = [c for c in commands if "{string_mt}" not in c]
    commands = [c.format(string_mt=string_mt, core=core) for c in commands]
    for name, mt in types:
        commands += [f"dumpheap -mt {mt}", f"dumpheap -type {name} -stat", f"dumpmt {mt}", f"dumpmt -md {mt}",
                     f"dumpclass {mt}"]
        for obj in objects.get(name, [])[:1]:
            commands += [f"dumpobj {obj}", f"gcwhere {obj}", f"gcroot {obj}", f"objsize {obj}",
                         f"retained {obj}"]
            if name.endswith("[]"):
                commands.append(f"dumparray {obj}")
    for module in modules[:3]:
        commands.append(f"dumpmodule {module}")
    # the code versions of methods on the stacks (tiered, ReadyToRun, jitted): ip2md
    ips = list(dict.fromkeys(re.findall(r"^[0-9A-F]{16} ([0-9A-F]{16}) \w", first[3].text, re.M)))
    commands += [f"ip2md {ip}" for ip in ips[:30]]
    for name, _mt in exceptions[:1]:
        commands += [f"pe {obj}" for obj in objects.get(name, [])[:1]]
    return commands


@dataclass
class Case:
    app: str
    commands: list[str]
    outputs: dict[str, list[drivers.Output]]


@pytest.fixture(scope="module", params=APPS)
def case(request) -> Case:
    from harness import realapps
    core = realapps.core(request.param)
    if core is None:
        pytest.skip(f"no {request.param} core: {realapps.why_not(request.param)}")
    commands = plan(core)
    outputs = {reader: drivers.run_cli(commands, core=core, timeout=1800, env={**ENV, "SOSEXT_READER": reader})
               for reader in ("dac", "contracts")}
    return Case(request.param, commands, outputs)


def _unsupported(dac: drivers.Output, contracts: drivers.Output) -> bool:
    """What the contracts reader prints for what it cannot answer: the DAC reader's text up to
    the question, then one line naming the DAC reader."""
    lines = contracts.text.rstrip("\n").splitlines()
    if not lines or not lines[-1].startswith("error: the contracts reader cannot answer") \
            or "--reader dac" not in lines[-1]:
        return False
    before = "".join(line + "\n" for line in lines[:-1])
    return dac.text.startswith(before) and "the contracts reader" not in dac.text


def test_contracts_reader_prints_what_the_dac_reader_prints_on_real_programs(case: Case) -> None:
    differ, unsupported = [], []
    for command, dac, contracts in zip(case.commands, case.outputs["dac"], case.outputs["contracts"]):
        if dac.text != contracts.text:
            (unsupported if _unsupported(dac, contracts) else differ).append(command)
    assert not differ, f"{case.app}: {len(differ)} of {len(case.commands)} commands differ: {differ}"
    # not an agreement on nothing: the heap listing has the program's objects, the stacks its threads
    out = {c: o.text for c, o in zip(case.commands, case.outputs["dac"])}
    assert "System.String" in out["dumpheap -stat"] and len(_stat(out["dumpheap -stat"])) > 100
    assert "OS Thread Id" in out["clrstack -all"]
    if unsupported:
        # the rest printed the same bytes; these say in one line that the DAC reader answers them
        warnings.warn(f"{case.app}: {len(case.commands) - len(unsupported)} commands identical; the contracts reader "
                      f"does not answer {unsupported}")


# -- the code versions of every method on the stacks ----------------------------------------------

@pytest.fixture(scope="module", params=APPS)
def stack_methods(request) -> tuple[str, list[str], dict[str, list[drivers.Output]]]:  # type: ignore[no-untyped-def]
    from harness import realapps
    core = realapps.core(request.param)
    if core is None:
        pytest.skip(f"no {request.param} core: {realapps.why_not(request.param)}")
    (stacks,) = drivers.run_cli(["clrstack -all"], core=core, timeout=1800, env={**ENV, "SOSEXT_READER": "dac"})
    ips = sorted(set(re.findall(r"^[0-9A-F]{16} ([0-9A-F]{16}) \w", stacks.text, re.M)))
    commands = [f"ip2md {ip}" for ip in ips]
    return request.param, commands, {
        reader: drivers.run_cli(commands, core=core, timeout=1800, env={**ENV, "SOSEXT_READER": reader})
        for reader in ("dac", "contracts")}


def test_ip2md_of_every_stack_method_is_the_dacs_or_says_why_not(stack_methods) -> None:  # type: ignore[no-untyped-def]
    """ip2md of every managed IP on the program's stacks: the DAC reader's bytes, or (a tiered
    method whose first code was JIT-compiled, where the core does not settle that code's tier:
    no later version and no call-counting stub leading to it, or the environment sets
    TieredPGO_InstrumentOnlyHotCode) the one line naming the DAC reader and why. A method with a
    later version, or whose calls go through a call-counting stub, is answered: its first code
    was tier 0 (contracts/callcounting.py). On the cores made here all 133 are answered."""
    app, commands, outputs = stack_methods
    refused = []
    for command, dac, contracts in zip(commands, outputs["dac"], outputs["contracts"]):
        if dac.text == contracts.text:
            continue
        assert _unsupported(dac, contracts), f"{app}: {command}"
        assert "first JIT-compiled code: " in contracts.text, f"{app}: {command}"
        assert "call-counting stub" in contracts.text or "TieredPGO_InstrumentOnlyHotCode" in contracts.text
        assert "(QuickJitted + Instrumented)" not in dac.text, f"{app}: {command}"
        refused.append(command)
    assert len(commands) >= 20 and len(refused) < len(commands) // 2, (app, len(commands), refused)
    if refused:
        warnings.warn(f"{app}: ip2md of {len(commands) - len(refused)} of {len(commands)} stack IPs identical; "
                      f"the rest say in one line that the DAC reader answers them")


# -- by-reference arguments -----------------------------------------------------------------------

_FRAME = re.compile(r"^([0-9A-F]{16}) [0-9A-F]{16} (.+)$")
_STATE_MACHINE = re.compile(r"^\s+stateMachine \(0x[0-9A-F]+\) = 0x([0-9a-f]+)$")


def test_async_start_state_machines_point_into_their_callers_frame(case: Case) -> None:
    """A by-reference argument's value under the contracts reader (clrstack -a, byte-identical
    with the DAC's above) is where C# put the referenced variable: the async builders'
    ``Start<TStateMachine>(ref TStateMachine stateMachine)`` get the state machine struct that
    the async method's stub holds as a local, so the pointer lies in the frame of the first
    caller that is not itself a builder's Start (between its stack pointer and its caller's)."""
    text = dict(zip(case.commands, case.outputs["contracts"]))["clrstack -a -all"].text
    checked = 0
    for thread in text.split("OS Thread Id:")[1:]:
        frames: list[tuple[int, str, int | None]] = []  # (sp, call site, stateMachine value)
        for line in thread.splitlines():
            m = _FRAME.match(line)
            if m:
                frames.append((int(m.group(1), 16), m.group(2), None))
                continue
            s = _STATE_MACHINE.match(line)
            if s and frames:
                sp, site, _ = frames[-1]
                frames[-1] = (sp, site, int(s.group(1), 16))
        for i, (sp, site, value) in enumerate(frames):
            if value is None or ".Start[[" not in site or "ByRef)" not in site:
                continue
            owner = next((k for k in range(i + 1, len(frames)) if ".Start[[" not in frames[k][1]), None)
            if owner is None or owner + 1 >= len(frames):
                continue
            assert frames[owner][0] <= value < frames[owner + 1][0], (site, hex(value), frames[owner][1])
            checked += 1
    if case.app == "msbuild":  # MSBuild's build threads wait inside async methods
        assert checked >= 4, checked
