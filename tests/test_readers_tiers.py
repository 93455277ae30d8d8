"""The tier of a tiered method's first JIT-compiled code under the contracts reader.

The DAC computes it from the runtime's CallCountingManager table and EEConfig, which the .NET 10
descriptor does not describe; the contracts reader answers where the core settles it
(contracts/callcounting.py) and says in one line why not elsewhere. The `threads` debuggee is
run with tiering on (its project turns it off), once as configured by default and once with
``DOTNET_TieredPGO_InstrumentOnlyHotCode=0``, which makes the DAC call every first tier-0 code
instrumented: `dumpmd` of each JIT-compiled method of the debuggee's own classes prints the DAC
reader's bytes or the one-line refusal, never another tier. The environment the harness gave
the process is the truth for what the contracts reader reads of it. (The real-program cores of
test_readers_realapps.py are where methods are reached through call-counting stubs.)
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import drivers
from harness import Debuggee, build_debuggee

pytestmark = pytest.mark.slow

ENV = {"SOSEXT_CLR_PATH": ""}
TIERING = {"DOTNET_TieredCompilation": "1"}
SETTINGS = {"default": {}, "instrument-all": {"DOTNET_TieredPGO_InstrumentOnlyHotCode": "0"}}
STACKS = ["clrstack -all", "clrstack -a -all", "clrstack -i -a -all"]
CLASSES = ("DebuggeeHost.Program", "DebuggeeHost.Json", "DebuggeeHost.ThreadsScenario", "DebuggeeHost.Truth")


@dataclass
class Case:
    setting: str
    core: Path
    commands: list[str]
    outputs: dict[str, list[drivers.Output]]


@pytest.fixture(scope="module", params=sorted(SETTINGS))
def case(request, tmp_path_factory) -> Case:  # type: ignore[no-untyped-def]
    from harness import dotnet_path
    if dotnet_path() is None:
        pytest.skip("dotnet is not on PATH: these tests need the .NET SDK to build the debuggee")
    work = tmp_path_factory.mktemp(request.param)
    with Debuggee("threads", dll=build_debuggee(), core_dir=work, env={**TIERING, **SETTINGS[request.param]}) as d:
        core = d.write_core("heap", work / "threads.core")
    dac = {**ENV, "SOSEXT_READER": "dac"}
    found = drivers.run_cli([f"name2ee SosextDebuggee.dll!{c}" for c in CLASSES], core=core, env=dac)
    mts = sorted({mt for o in found for mt in re.findall(r"^MethodTable:\s+([0-9a-f]+)$", o.text, re.M)})
    tables = drivers.run_cli([f"dumpmt -md {mt}" for mt in mts], core=core, env=dac)
    mds = [m for t in tables for m in re.findall(r"^[0-9A-F]{16} ([0-9A-F]{16})\s+JIT ", t.text, re.M)]
    commands = [f"dumpmd {md}" for md in mds] + STACKS
    outputs = {reader: drivers.run_cli(commands, core=core, timeout=600, env={**ENV, "SOSEXT_READER": reader})
               for reader in ("dac", "contracts")}
    yield Case(request.param, core, commands, outputs)
    core.unlink(missing_ok=True)


def _refusal(dac: drivers.Output, contracts: drivers.Output) -> str | None:
    """The contracts reader's one-line refusal after the DAC reader's text up to the question."""
    lines = contracts.text.rstrip("\n").splitlines()
    if not lines or not lines[-1].startswith("error: the contracts reader cannot answer") \
            or "--reader dac" not in lines[-1]:
        return None
    before = "".join(line + "\n" for line in lines[:-1])
    return lines[-1] if dac.text.startswith(before) else None


def test_first_jitted_tier_is_the_dacs_or_says_why_not(case: Case) -> None:
    tiers: dict[str, int] = {}
    answered_tier0 = 0
    by_environment = 0
    for command, dac, contracts in zip(case.commands, case.outputs["dac"], case.outputs["contracts"]):
        if command in STACKS:
            continue
        assert not dac.errors, (command, dac.text)
        for tier in re.findall(r"CodeAddr:\s+[0-9a-f]+\s+\((.+)\)$", dac.text, re.M):
            tiers[tier] = tiers.get(tier, 0) + 1
        if dac.text == contracts.text:
            answered_tier0 += "(QuickJitted)" in dac.text
            continue
        line = _refusal(dac, contracts)
        assert line is not None and "first JIT-compiled code: " in line, (command, contracts.text)
        by_environment += "TieredPGO_InstrumentOnlyHotCode is set in the environment" in line
    # Tier-0 code with patchpoints (CommandLoop and the debuggee's other loops) settles it: with
    # the default setting the DAC's QuickJitted is printed; with instrumentation of every first
    # tier-0 code, the same methods say the environment leaves it open.
    if case.setting == "default":
        assert answered_tier0 >= 3 and by_environment == 0, (answered_tier0, by_environment)
    else:
        assert answered_tier0 == 0 and by_environment >= 3, (answered_tier0, by_environment)
    # not an agreement on nothing: tiering was on, and the debuggee's methods began at tier 0
    want = "QuickJitted + Instrumented" if case.setting == "instrument-all" else "QuickJitted"
    assert tiers.get(want, 0) >= 10, tiers
    assert len(case.commands) >= 20


def test_tier0_frames_with_patchpoints_are_the_dacs(case: Case) -> None:
    """With tiering on, the main thread waits in Program.CommandLoop, tier-0 code of a method
    with a loop: the JIT gave it patchpoints (OSR), so its debug info starts with a
    PatchpointInfo. Its source line (clrstack) and its argument and locals (-a, -i -a) are the
    DAC reader's, as is every other frame."""
    for command in STACKS:
        n = case.commands.index(command)
        dac, contracts = case.outputs["dac"][n], case.outputs["contracts"][n]
        assert not dac.errors and contracts.text == dac.text, command
    sys.path.insert(0, str(drivers.REPO))
    from sosext.contracts.debuginfo import jitted_debug_info
    from sosext.contracts.reader import ContractReader
    from sosext.dac.loader import locate_dac
    from sosext.targets.elfcore import CoreTarget
    stacks = case.outputs["dac"][case.commands.index("clrstack -all")].text
    row = re.search(r"^[0-9A-F]{16} ([0-9A-F]{16}) DebuggeeHost\.Program\.CommandLoop\(.*\) \[\S+ @ \d+\]$", stacks, re.M)
    assert row, stacks
    target = CoreTarget(str(case.core))
    walker = ContractReader(target, locate_dac(target).runtime)._stack_walker()
    block = walker.manager.code_block(int(row.group(1), 16))
    flags = walker.data.read(jitted_debug_info(walker.data, block.code_header), 1)[0]
    assert flags & 1, "CommandLoop's debug info carries no patchpoint info"
    a = case.outputs["contracts"][case.commands.index("clrstack -a -all")].text
    frame = a.split(row.group(0).split(" [")[0], 1)[1].split("\n\n", 1)[0]
    assert re.search(r"^\s+scenario \(0x[0-9A-F]+\) = 0x[0-9a-f]+$", frame, re.M), frame


def test_the_environment_says_whether_first_tier0_code_is_instrumented(case: Case) -> None:
    """What the contracts reader reads of the process environment is what the harness set."""
    sys.path.insert(0, str(drivers.REPO))
    from sosext.contracts.callcounting import instruments_first_tier0
    from sosext.contracts.reader import ContractReader
    from sosext.dac.loader import locate_dac
    from sosext.targets.elfcore import CoreTarget
    target = CoreTarget(str(case.core))
    reader = ContractReader(target, locate_dac(target).runtime)
    # default: the setting is left alone (tier 0, not instrumented); "0": not answered
    assert instruments_first_tier0(reader.types.data) is (None if case.setting == "instrument-all" else False)


# -- PatchpointInfo sizing, on synthetic debug info --------------------------------------------------

def _debug_info(count_at: int, fixed: int, count: int, frame: int = 64) -> bytes:
    """A JIT debug info blob: the patchpoint flag, a PatchpointInfo of the layout (count_at,
    fixed) with ``count`` locals, then empty bounds and vars (nibble header: 2 bytes of bounds,
    0 of vars; the bounds: no entry, 1-bit fields)."""
    import struct
    info = bytearray(fixed)
    struct.pack_into("<Ii4i", info, count_at, count, frame, -1, -1, -1, -1)
    info += b"".join(struct.pack("<i", -16 * (i + 1)) for i in range(count))
    return b"\x01" + bytes(info) + b"\x02" + b"\x00\x00"


@pytest.mark.parametrize("layout", [(8, 32), (16, 40)], ids=["header", "net10"])
def test_patchpoint_info_is_sized_by_the_one_layout_that_fits(layout: tuple[int, int]) -> None:
    sys.path.insert(0, str(drivers.REPO))
    from sosext.contracts.debuginfo import jitted_bounds, jitted_vars
    blob = _debug_info(*layout, count=3)
    read = lambda at, n: blob[at:at + n]  # noqa: E731
    assert jitted_bounds(read, 0, 3) == [] and jitted_vars(read, 0, 3) == []
    assert jitted_vars(read, 0, 2) == []       # a hidden argument or two beyond the IL ones
    assert jitted_vars(read, 0, 10) is None    # more IL variables than the count covers: no layout fits
    bad = _debug_info(*layout, count=3, frame=0)
    assert jitted_vars(lambda at, n: bad[at:at + n], 0, 3) is None  # no frame: not a PatchpointInfo
