"""Tests of the debuggee and its harness: the truth they print must hold without any help from sosext.

The strongest check reads the live process's memory through /proc/<pid>/mem: the word at each recorded
object address must be the recorded MethodTable, string contents must match, the root chain's
references must be where the truth says.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

import pytest

from harness import Debuggee, DebuggeeError, DebuggeeFactory, build_debuggee, is_elf_core, source_hash

pytestmark = pytest.mark.slow

FROZEN_GENERATION = 2**31 - 1  # GC.GetGeneration of an object on the frozen (NonGC) heap
STRING_BASE_SIZE = 22          # x64 String MethodTable: header 8 + MT 8 + length 4 + terminator 2

# Expected live (and dead) instance counts of the `heap` scenario, by Type.ToString().
HEAP_COUNTS: dict[str, tuple[int, int]] = {
    "SosextDebuggee.HeapItemA": (1000, 0),
    "SosextDebuggee.HeapItemB": (3333, 0),
    "SosextDebuggee.HeapItemC": (100, 0),
    "SosextDebuggee.HeapItemD": (7, 0),
    "SosextDebuggee.HeapItemE": (1, 0),
    "SosextDebuggee.UniqueKey": (100, 0),
    "SosextDebuggee.UniqueStruct": (5, 0),           # boxes
    "SosextDebuggee.EmptyElem": (0, 0),
    "SosextDebuggee.FinalizableItem": (9, 0),
    "SosextDebuggee.Gen2Item": (11, 0),
    "SosextDebuggee.Gen1Item": (13, 0),
    "SosextDebuggee.Gen0Item": (17, 0),
    "SosextDebuggee.GarbageItem": (0, 25),
    "SosextDebuggee.StackHeldItem": (3, 0),
    "SosextDebuggee.StackOnlyItem": (3, 0),
    "SosextDebuggee.ChainHead": (1, 0),
    "SosextDebuggee.ChainLink": (2, 0),
    "SosextDebuggee.ChainTail": (1, 0),
    "SosextDebuggee.HeapItemA[]": (5, 0),            # 1000 items, 3 jagged rows, LOH 20,000
    "SosextDebuggee.HeapItemA[][]": (1, 0),
    "SosextDebuggee.HeapItemB[]": (2, 0),            # List's backing array + List<T>'s static empty array
    "SosextDebuggee.UniqueStruct[]": (2, 0),         # SOH + POH
    "SosextDebuggee.UniqueStruct[,]": (1, 0),
    "SosextDebuggee.RefStruct[]": (1, 0),
    "SosextDebuggee.EmptyElem[]": (1, 0),
    "System.Collections.Generic.List`1[SosextDebuggee.HeapItemB]": (1, 0),
    "System.Collections.Generic.Dictionary`2[SosextDebuggee.UniqueKey,SosextDebuggee.HeapItemC]": (1, 0),
    "System.Collections.Generic.HashSet`1[SosextDebuggee.HeapItemD]": (1, 0),
}


def align8(n: int) -> int:
    return (n + 7) & ~7


def hex_int(s: str) -> int:
    assert s.startswith("0x"), s
    return int(s, 16)


def read_u64(d: Debuggee, address: int) -> int:
    return struct.unpack("<Q", d.read_memory(address, 8))[0]


def check_types_consistent(truth: dict[str, Any]) -> None:
    """Every type entry: counts match address lists, sizes are plausible, addresses aligned and unique."""
    seen: set[int] = set()
    for name, t in truth["types"].items():
        assert t["name"] == name
        assert hex_int(t["mt"]) % 8 == 0 and hex_int(t["mt"]) != 0, name
        assert t["count"] == len(t["addresses"]) == len(t["generations"]), name
        assert t["deadCount"] == len(t["deadAddresses"]), name
        assert sum(t["gens"].values()) == t["count"], name
        assert t["size"] % 8 == 0 and t["size"] >= 24 * t["count"], name
        assert t["unalignedSize"] <= t["size"], name
        if t["componentSize"] == 0:   # fixed-size type: every instance is BaseSize
            assert t["size"] == t["unalignedSize"] == t["count"] * max(t["baseSize"], 24), name
            assert t["deadSize"] == t["deadCount"] * max(t["baseSize"], 24), name
        for a in t["addresses"] + t["deadAddresses"]:
            address = hex_int(a)
            assert address % 8 == 0, (name, a)
            assert address not in seen, (name, a)
            seen.add(address)


def check_memory(d: Debuggee) -> int:
    """Reads the live process: each recorded address holds its type's MethodTable. Returns objects checked."""
    truth = d.truth
    checked = 0
    for name, t in truth["types"].items():
        mt = hex_int(t["mt"])
        for a in t["addresses"] + t["deadAddresses"]:
            assert read_u64(d, hex_int(a)) == mt, (name, a)
            checked += 1
    for role, o in truth["objects"].items():
        address = hex_int(o["address"])
        assert read_u64(d, address) == hex_int(o["mt"]), role
        if "length" in o:
            assert struct.unpack("<I", d.read_memory(address + 8, 4))[0] == o["rawLength" if "rawLength" in o else "length"], role
        if o["type"] == "System.String":
            raw = d.read_memory(address + 12, 2 * o["length"])
            assert raw.decode("utf-16-le") == o["value"], role
        checked += 1
    return checked


def test_source_hash_is_stable() -> None:
    assert source_hash() == source_hash()


def test_build_is_cached(debuggee_dll: Path, tfm: str) -> None:
    assert debuggee_dll.name == "SosextDebuggee.dll" and debuggee_dll.exists()
    assert build_debuggee(tfm) == debuggee_dll
    assert (debuggee_dll.parent.parent / "build.ok").exists()


@pytest.mark.parametrize(("gc", "flavor"), [("wks", "regions"), ("svr", "segments")])
def test_heap_truth(debuggee_factory: DebuggeeFactory, gc: str, flavor: str) -> None:
    d = debuggee_factory("heap", gc=gc, gc_flavor=flavor)
    truth = d.truth
    runtime = truth["runtime"]
    assert truth["schema"] == 1 and truth["scenario"] == "heap"
    assert runtime["pid"] == d.pid and runtime["pointerSize"] == 8
    assert Path(runtime["runtimeDir"]) == d.runtime_dir
    assert runtime["serverGC"] is (gc == "svr")
    assert runtime["env"]["DOTNET_gcServer"] == ("1" if gc == "svr" else None)
    if flavor == "segments":
        assert runtime["gcConfig"]["GCName"] == "libclrgc.so"
        assert runtime["env"]["DOTNET_GCName"] == "libclrgc.so"
    else:
        assert runtime["gcConfig"]["GCRegionRange"] > 0
    if gc == "svr":
        assert runtime["gcConfig"]["HeapCount"] == runtime["processorCount"]

    check_types_consistent(truth)
    for name, (live, dead) in HEAP_COUNTS.items():
        t = truth["types"][name]
        assert (t["count"], t["deadCount"]) == (live, dead), name
    assert truth["testTypeTotals"]["count"] == sum(t["count"] for t in truth["types"].values())

    # Generations as designed (the debuggee re-settles until they are).
    types = truth["types"]
    assert set(types["SosextDebuggee.Gen2Item"]["generations"]) == {2}
    assert set(types["SosextDebuggee.Gen1Item"]["generations"]) == {1}
    assert set(types["SosextDebuggee.Gen0Item"]["generations"]) == {0}
    objects = truth["objects"]
    assert objects["garbage0"]["generation"] == 0
    for role in ("lohBytes", "lohItems", "strLong", "pohBytes", "pohLongs", "pohStructs"):
        assert objects[role]["generation"] == 2, role  # GetGeneration says 2 for LOH and POH
    assert objects["strFrozenLiteral"]["generation"] == FROZEN_GENERATION
    assert objects["strEmpty"]["generation"] == FROZEN_GENERATION  # "" is the frozen string.Empty

    # Sizes: the MethodTable formula agrees with what the allocator charged.
    assert truth["stringMethodTable"]["baseSize"] == STRING_BASE_SIZE
    assert truth["stringMethodTable"]["componentSize"] == 2
    for check in truth["sizeChecks"]:
        assert check["mtSize"] == check["allocatedBytes"], check
    for role in ("strAscii", "strNonAscii", "strLong", "strFrozenLiteral", "strEmpty"):
        o = objects[role]
        assert o["size"] == align8(STRING_BASE_SIZE + 2 * o["length"]), role
        assert o["unalignedSize"] == max(STRING_BASE_SIZE + 2 * o["length"], 24), role
    assert objects["strNonAscii"]["value"] == "h\u00e9llo w\u00f6rld \u2713 \u65e5\u672c\u8a9e"
    assert objects["strFrozenLiteral"]["value"] == "SOSEXT_FROZEN_LITERAL_7f3a"
    assert objects["strEmpty"]["length"] == 0 and objects["strLong"]["length"] == 50_000
    assert objects["lohItems"]["size"] == 24 + 8 * 20_000
    assert objects["intCube"]["dims"] == [2, 3, 4] and objects["intCube"]["rank"] == 3
    assert objects["structMatrix"]["dims"] == [4, 5]
    assert objects["emptyArray"]["length"] == 0 and objects["emptyArray"]["size"] == 24

    assert check_memory(d) > 4500

    # Threads: named OS threads exist and their items sit where the truth says.
    held_root = hex_int(objects["staticRoot"]["address"]) + 16 + 8 * truth["staticRootSlots"]["StackHeld"]
    held_array = read_u64(d, held_root)
    for i, th in enumerate(truth["threads"]):
        assert th["name"] == f"sosext-stack-{i + 1}"
        comm = Path(f"/proc/{d.pid}/task/{th['osTid']}/comm").read_text().strip()
        assert comm == th["name"]
        for role in ("held", "stackOnly"):
            assert read_u64(d, hex_int(th[role]["address"])) == hex_int(th[role]["mt"])
        assert read_u64(d, held_array + 16 + 8 * i) == hex_int(th["held"]["address"])

    # The root chain is made of the references the truth says.
    path = truth["rootChain"]["path"]
    for prev, step in zip(path, path[1:]):
        via = step["via"]
        offset = 16 + 8 * int(via[1:-1]) if via.startswith("[") else 8  # first (only) reference field
        assert read_u64(d, hex_int(prev["address"]) + offset) == hex_int(step["address"]), step

    # HeapItemE's fields hold their values at the recorded offsets.
    item_e = hex_int(truth["itemE"]["address"])
    formats = {"System.Boolean": "<?", "System.Byte": "<B", "System.Int16": "<h", "System.Int32": "<i",
               "System.Int64": "<q", "System.Single": "<f", "System.Double": "<d", "System.IntPtr": "<q"}
    for f in truth["itemE"]["fields"]:
        if f["type"] in formats:
            fmt = formats[f["type"]]
            value = struct.unpack(fmt, d.read_memory(item_e + f["offset"], struct.calcsize(fmt)))[0]
            assert value == f["value"], f
        elif f["type"] in ("System.String", "System.Object"):
            assert read_u64(d, item_e + f["offset"]) == hex_int(f["value"]), f


def test_cores(debuggee_factory: DebuggeeFactory) -> None:
    d = debuggee_factory("heap")
    sizes = {}
    for kind in ("heap", "full"):
        core = d.write_core(kind)
        assert is_elf_core(core)
        sizes[kind] = core.stat().st_size
    assert sizes["full"] > sizes["heap"] > 0
    print(f"core sizes: heap {sizes['heap'] >> 20} MiB, full {sizes['full'] >> 20} MiB")
    # The debuggee survives being dumped and still answers.
    assert d.command("ping") == "SOSEXT-PONG"
    assert check_memory(d) > 0


def test_bigheap_quick(debuggee_factory: DebuggeeFactory) -> None:
    d = debuggee_factory("bigheap", 200_000)
    truth = d.truth
    types = truth["types"]
    assert truth["requested"] == 200_000
    assert types["SosextDebuggee.BigNode"]["count"] == 120_000
    assert types["SosextDebuggee.BigLeaf"]["count"] == 60_000
    assert truth["payloads"]["System.Byte[]"]["count"] == 20_000
    assert truth["testTypeTotals"]["count"] == sum(t["count"] for t in types.values())
    for name in ("SosextDebuggee.BigNode", "SosextDebuggee.BigLeaf"):
        t = types[name]
        assert t["size"] == t["count"] * t["baseSize"], name
        assert "addresses" not in t
    for role, o in truth["objects"].items():
        assert read_u64(d, hex_int(o["address"])) == hex_int(o["mt"]), role


def test_commands_and_stop(debuggee_factory: DebuggeeFactory) -> None:
    d = debuggee_factory("bigheap", 1000)
    assert d.command("ping") == "SOSEXT-PONG"
    assert d.command("no-such-command").startswith("SOSEXT-ERROR unknown command")
    pid = d.pid
    assert d.stop() == 0  # a polite "exit" suffices
    assert not d.alive
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_start_failure_reports_output(debuggee_dll: Path, tmp_path: Path) -> None:
    with pytest.raises(DebuggeeError, match="usage: SosextDebuggee"):
        Debuggee("no-such-scenario", dll=debuggee_dll, core_dir=tmp_path).start(timeout=60)


def test_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOTNET_gcServer", "1")
    monkeypatch.setenv("COMPlus_GCName", "libclrgcexp.so")
    env = Debuggee("heap").environment()
    assert "DOTNET_gcServer" not in env and "COMPlus_GCName" not in env
    env = Debuggee("heap", gc="svr", gc_flavor="segments", env={"X_TEST": "1"}).environment()
    assert env["DOTNET_gcServer"] == "1" and env["DOTNET_GCName"] == "libclrgc.so"
    assert env["DOTNET_GCDynamicAdaptationMode"] == "0" and env["X_TEST"] == "1"
    assert Debuggee("heap", gc="svr", datas=True).environment()["DOTNET_GCDynamicAdaptationMode"] == "1"
