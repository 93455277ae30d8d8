"""A corrupt object header in a core: the walk says where, steps over it, finds the objects
after it again, and the totals say they are partial (as SOS's do) instead of silently
counting less."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import drivers
from sosparse import short_addresses, stat_rows

pytestmark = pytest.mark.slow

ITEM = "SosextDebuggee.HeapItemA"
GARBAGE = 0x4141414141414140


@pytest.fixture(scope="module")
def corrupted(tmp_path_factory):
    drivers.require_dotnet_and_lldb()
    from harness import Debuggee, build_debuggee
    from sosext.targets.elfcore import ElfCore
    tmp = tmp_path_factory.mktemp("corrupt")
    with Debuggee("heap", dll=build_debuggee(), core_dir=tmp) as d:
        clean = d.write_core("heap", tmp / "clean.core")
        truth = d.truth
        exe = str(d.executable)
    item = truth["types"][ITEM]
    addrs = sorted(int(a, 16) for a in item["addresses"])
    victim, after = addrs[10], addrs[11]
    assert after - victim == item["baseSize"]  # allocated in a loop: the next object follows it
    core = tmp / "corrupt.core"
    shutil.copyfile(clean, core)
    with ElfCore(str(clean)) as ec:
        seg = next(s for s in ec.segments if s.start <= victim < s.start + s.filesz)
        offset = seg.offset + victim - seg.start
    with open(core, "r+b") as f:
        f.seek(offset)
        f.write(GARBAGE.to_bytes(8, "little"))
    return core, exe, item, victim, after


@pytest.mark.parametrize("host", ["cli", "lldb"])
def test_walk_reports_the_corruption_and_resumes_after_it(corrupted, host, tmp_path) -> None:
    core, exe, item, victim, after = corrupted
    cmds = ["dumpheap -stat", f"dumpheap -mt {item['mt']} -short", "verifyheap"]
    if host == "cli":
        outs = drivers.run_cli(cmds, core=core, env={"SOSEXT_NO_INDEX_CACHE": "1"})
    else:
        outs = drivers.run_lldb(cmds, core=core, exe=exe)
    stat = outs[0].text
    assert "Heap corruption: the walk stepped over 1 place it could not read; the totals above are partial:" in stat
    assert f"  {victim:x}: invalid object header (MethodTable {GARBAGE:x}); walk resumed at {after:x}" in stat
    assert stat_rows(stat)[int(item["mt"], 16)].count == item["count"] - 1  # only the damaged object is lost
    listed = short_addresses(outs[1].text)
    assert listed == sorted(a for a in (int(x, 16) for x in item["addresses"]) if a != victim)
    assert f"Object {victim:x} has an invalid method table {GARBAGE:x}" in outs[2].text
