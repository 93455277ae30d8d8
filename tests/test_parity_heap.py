"""SOS's remaining heap-analysis commands against the `extraheap` debuggee: dumpexceptions,
dumpdelegate, dumpobjgcrefs, dumpruntimetypes, pathto, threadpoolqueue, dumpgcdata,
analyzeoom, notreachableinrange, clrmodules, dumpalc, findappdomain, findroots, ephrefs,
ephtoloh and traverseheap.

The debuggee builds exceptions, delegates, RuntimeTypes, a chain of nodes, queued thread-pool
work items it never lets run, an object from a second AssemblyLoadContext, objects only a
native block points to, and cross-generation references, and prints all of it as truth.
Every host of test_parity's matrix runs one batch; every value is compared with the truth.
"""
from __future__ import annotations

import json
import os
import re
import stat
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import drivers
from harness import Debuggee, build_debuggee
from test_parity import HOSTS, Case, h, host, kind_at, map_rows  # noqa: F401 - host is a fixture

pytestmark = pytest.mark.slow


def commands_for(t: dict, files: Path) -> list[str]:
    x = t["extraheap"]
    d, n, r, a = x["delegates"], x["nodes"], x["range"], x["alc"]
    return [
        "dumpexceptions", "dumpexceptions -type extraapp -live", "dumpexceptions -dead --json",
        "dumpexceptions -gen bad",
        f"dumpdelegate {d['single']}", f"dumpdelegate {d['static']}", f"dumpdelegate {d['multi']}",
        f"dumpdelegate {d['multi']} --json", f"dumpdelegate {n['a']}", "dumpdelegate 1234", "dumpdelegate",
        f"dumpobjgcrefs {n['a']}", f"dumpobjgcrefs {n['a']} --json", "dumpobjgcrefs 0", "dumpobjgcrefs zz",
        "dumpruntimetypes", "dumpruntimetypes --json",
        f"pathto {n['a']} {n['c']}", f"pathto {n['c']} {n['a']}", f"pathto {n['a']} {n['c']} --json",
        f"pathto 10 {n['a']}", f"pathto {n['a']}", "pathto zz 10",
        "tpq", "threadpoolqueue --json", "threadpool -wi", "threadpool -stat",
        "dumpgcdata", "dumpgcdata --json", "analyzeoom", "analyzeoom --json",
        f"notreachableinrange {r['start']} {r['end']}", f"notreachableinrange -short {r['start']} {r['end']}",
        f"notreachableinrange {r['start']} L{int(r['end'], 16) - int(r['start'], 16):x} --json",
        "notreachableinrange 10 zz",
        f"dumpalc {a['pluginObject']}", f"dumpalc {a['pluginObject']} --json", f"dumpalc {n['a']} --json",
        f"dumpalc {n['a']}", "dumpalc 0",
        f"findappdomain {n['a']}", "findroots", "findroots -gen 0",
        "ephrefs", "ephrefs --json", "ephtoloh", "findephemeralreferencestoloh --json",
        "clrmodules", "clrmodules -v -n ^sosextdebuggee", "clrmodules --json",
        f"traverseheap {files}/heap.log", f"traverseheap -xml {files}/heap.xml", f"TraverseHeap {files}/heap.log",
        f"traverseheap {files}/link.log",
        "maddress", "gctonative -a PAGE_READWRITE", "gctonative PAGE_READWRITE --json", "gctonative",
        "gctonative NoSuchKind", "findpointersin -a PAGE_READWRITE", "findpointersin PAGE_READWRITE",
        "findpointersin NoSuchKind",
    ]


def run(host_: str, truth: dict, files: Path, **kw) -> dict[str, drivers.Output]:  # type: ignore[no-untyped-def]
    files.mkdir(parents=True, exist_ok=True)
    (files / "link.log").unlink(missing_ok=True)
    (files / "link.log").symlink_to(files / "not-there")
    cmds = commands_for(truth, files)
    return dict(zip(cmds, drivers.run_in_host(host_, cmds, **kw)))


class HeapCase(Case):
    files: dict[str, Path]


@pytest.fixture(scope="module", params=[("wks", "regions"), ("svr", "segments")], ids=lambda p: "-".join(p))
def case(request, tmp_path_factory) -> HeapCase:
    drivers.require_dotnet_and_lldb()
    tfm = request.config.getoption("--tfm")
    gc, flavor = request.param
    cores = tmp_path_factory.mktemp(f"cores-extraheap-{gc}-{flavor}")
    files = {hst: cores / hst for hst in HOSTS}
    with Debuggee("extraheap", gc=gc, gc_flavor=flavor, tfm=tfm, dll=build_debuggee(tfm), core_dir=cores) as d:
        c = HeapCase(d.truth)
        c.files = files
        core = d.write_core("heap", cores / "extraheap.core")
        exe = str(d.executable)
        c.outputs["lldb-live"] = run("lldb-live", d.truth, files["lldb-live"], pid=d.pid)
        if "gdb-live" in HOSTS:
            c.outputs["gdb-live"] = run("gdb-live", d.truth, files["gdb-live"], pid=d.pid)
    c.outputs["lldb-core"] = run("lldb-core", c.truth, files["lldb-core"], core=core, exe=exe)
    c.outputs["cli-core"] = run("cli-core", c.truth, files["cli-core"], core=core)
    if "gdb-core" in HOSTS:
        c.outputs["gdb-core"] = run("gdb-core", c.truth, files["gdb-core"], core=core, exe=exe)
    Path(core).unlink(missing_ok=True)
    return c


def x(case: HeapCase) -> dict:
    return case.truth["extraheap"]


# -- dumpexceptions ---------------------------------------------------------------------------

EXC_ROW = re.compile(r"^ +([0-9a-f]{12,16}) +([0-9a-f]{12,16}) (\S+)$")


def exception_rows(text: str) -> dict[int, tuple[int, str, str, str | None]]:
    """address -> (MT, type, message line, first stack frame or None)."""
    lines = text.splitlines()
    assert lines[0] == "         Address      MethodTable Message Name", text
    rows = {}
    for i, ln in enumerate(lines):
        m = EXC_ROW.match(ln)
        if m:
            assert lines[i + 1].startswith("        Message: "), text
            frame = lines[i + 2][len("        StackFrame: "):] if lines[i + 2].startswith("        StackFrame: ") else None
            rows[h(m.group(1))] = (h(m.group(2)), m.group(3), lines[i + 1][len("        Message: "):], frame)
    total = re.search(r"^    Total: (\d+) objects$", text, re.M)
    assert total and int(total.group(1)) == len(rows), text
    return rows


def test_dumpexceptions_lists_each_exception(case: HeapCase, host: str) -> None:
    rows = exception_rows(case.out(host, "dumpexceptions").text)
    for e in x(case)["exceptions"]:
        mt, name, message, frame = rows[h(e["address"])]
        assert (mt, name, message) == (h(e["mt"]), e["type"], e["message"] if e["message"] is not None else "<null>")
        if e["thrown"]:
            assert frame is not None and frame.startswith(x(case)["throwMethod"] + "("), frame
        else:
            assert frame is None
    assert h(x(case)["deadException"]) in rows


def test_dumpexceptions_filters(case: HeapCase, host: str) -> None:
    thrown = [h(e["address"]) for e in x(case)["exceptions"] if e["type"] == "SosextDebuggee.ExtraAppException"]
    assert list(exception_rows(case.out(host, "dumpexceptions -type extraapp -live").text)) == thrown
    dead = json.loads(case.out(host, "dumpexceptions -dead --json").text)
    got = {h(e["address"]) for e in dead["exceptions"]}
    assert h(x(case)["deadException"]) in got
    assert not got & {h(e["address"]) for e in x(case)["exceptions"]}
    assert dead["total"] == len(got)
    assert case.out(host, "dumpexceptions -gen bad").errors == [
        "error: Unknown generation: bad. Only gen0, gen1, gen2, loh (large), poh (pinned) and foh (frozen) are supported"]


# -- dumpdelegate -----------------------------------------------------------------------------


def delegate_rows(text: str) -> list[tuple[int, int, str]]:
    lines = text.splitlines()
    assert lines[0] == "Target           Method           Name", text
    out = []
    for ln in lines[1:]:
        target, md, name = ln.split(" ", 2)
        out.append((h(target), h(md), name))
    return out


def test_dumpdelegate_shows_targets_and_methods(case: HeapCase, host: str) -> None:
    d = x(case)["delegates"]
    for key in ("single", "static", "multi"):
        rows = delegate_rows(case.out(host, f"dumpdelegate {d[key]}").text)
        want = d[key + "Calls"]
        assert [r[0] for r in rows] == [h(c["target"]) for c in want]
        for (_t, md, name), c in zip(rows, want):
            assert md and name.startswith(c["method"] + "("), name
    doc = json.loads(case.out(host, f"dumpdelegate {d['multi']} --json").text)
    assert [h(c["target"]) for c in doc["calls"]] == [h(c["target"]) for c in d["multiCalls"]]


def test_dumpdelegate_bad_input(case: HeapCase, host: str) -> None:
    n = x(case)["nodes"]
    # SOS's answer, not a failure (dotnet-dump calls it none).
    not_delegate = case.out(host, f"dumpdelegate {n['a']}")
    assert not not_delegate.errors and not_delegate.lines == [f"Object of type '{n['type']}' is not a delegate."]
    assert not case.out(host, "dumpdelegate 1234").errors and case.out(host, "dumpdelegate 1234").lines == ["Invalid object."]
    assert case.out(host, "dumpdelegate").errors == ["error: Usage: dumpdelegate <delegate object address>"]


# -- dumpobjgcrefs, pathto --------------------------------------------------------------------


def test_dumpobjgcrefs_lists_the_fields(case: HeapCase, host: str) -> None:
    n = x(case)["nodes"]
    lines = case.out(host, f"dumpobjgcrefs {n['a']}").text.splitlines()
    assert lines[0] == "GC Refs:" and lines[1].split() == ["Field", "Offset", "Object", "Type"]
    rows = [ln.split() for ln in lines[2:]]
    assert [(f, int(o, 16), h(a), t) for f, o, a, t in rows] == \
        [(r["field"], r["offset"] - 8, h(r["object"]), r["type"]) for r in n["aRefs"]]
    doc = json.loads(case.out(host, f"dumpobjgcrefs {n['a']} --json").text)
    assert [(r["field"], r["offset"], h(r["object"])) for r in doc["refs"]] == \
        [(r["field"], r["offset"] - 8, h(r["object"])) for r in n["aRefs"]]
    # SOS fails on 0 and answers any other address that holds no object (no failure).
    assert case.out(host, "dumpobjgcrefs 0").errors == ["error: Invalid object address: '0'"]
    assert case.out(host, "dumpobjgcrefs zz").errors == ["error: Invalid object address: 'zz'"]


_NOTICES = ("Caching GC roots, this may take a while.", "Subsequent runs of this command will be faster.",
            "Calculating live objects, this may take a while...")


def without_notices(lines: list[str]) -> list[str]:
    """The lines without SOS's once-per-session notices about its root and live-object caches
    (the first root-using command of a session prints them, as SOS does)."""
    out, skip_blank = [], False
    for ln in lines:
        if ln in _NOTICES or ln.startswith("Calculating live objects complete: "):
            skip_blank = ln == _NOTICES[1]
            continue
        if skip_blank and ln == "":
            skip_blank = False
            continue
        skip_blank = False
        out.append(ln)
    return out


def test_pathto_follows_the_chain(case: HeapCase, host: str) -> None:
    n = x(case)["nodes"]
    lines = without_notices(case.out(host, f"pathto {n['a']} {n['c']}").text.splitlines())
    assert [ln.split() for ln in lines] == [["->", f"{h(n[k]):x}", n["type"]] for k in "abc"]
    assert case.out(host, f"pathto {n['c']} {n['a']}").text.strip() == \
        f"Could not find a path from {h(n['c']):x} to {h(n['a']):x}"
    doc = json.loads(case.out(host, f"pathto {n['a']} {n['c']} --json").text)
    assert [h(o["address"]) for o in doc["chain"]] == [h(n[k]) for k in "abc"]
    # SOS's answers (no failure): an invalid source said so, an invalid target a path not found
    # (SOS checks the source twice).
    assert not case.out(host, f"pathto 10 {n['a']}").errors
    assert case.out(host, f"pathto 10 {n['a']}").lines == ["Source address 10 is not a valid object."]
    assert case.out(host, f"pathto {n['a']}").errors == ["error: Missing target address (usage: pathto <source> <target>)"]
    assert case.out(host, "pathto zz 10").errors == ["error: Could not parse argument 'source': zz"]


# -- dumpruntimetypes -------------------------------------------------------------------------


def test_dumpruntimetypes_names_each_type(case: HeapCase, host: str) -> None:
    text = case.out(host, "dumpruntimetypes").text
    lines = text.splitlines()
    assert lines[0].split() == ["Address", "Domain", "MT", "Type", "Name"]
    rows = {h(ln.split()[0]): ln for ln in lines[1:]}
    for r in x(case)["runtimeTypes"]:
        cells = rows[h(r["address"])].split()
        handle = h(r["handle"])
        if r["name"] is not None:
            assert (h(cells[2]), cells[3]) == (handle, r["name"])
        else:  # a TypeDesc (pointer type): no module, so no domain; SOS's words instead of a name
            assert cells[1:4] == [f"{handle:012x}", "typehandle:", f"{handle:x}"]
    doc = {h(r["address"]): r for r in json.loads(case.out(host, "dumpruntimetypes --json").text)["runtime_types"]}
    assert len(doc) == len(rows)
    for r in x(case)["runtimeTypes"]:
        assert h(doc[h(r["address"])]["mt"]) == h(r["handle"])
        assert doc[h(r["address"])]["name"].startswith(r["name"] or "typehandle: ")


# -- threadpoolqueue --------------------------------------------------------------------------


def test_tpq_lists_the_queued_work_items(case: HeapCase, host: str) -> None:
    tp = x(case)["threadPool"]
    lines = case.out(host, "tpq").text.splitlines()
    g = lines.index("global work item queue________________________________")
    loc = lines.index("local per thread work items_____________________________________")
    glob, local = lines[g + 1:loc - 1], lines[loc + 1:]
    assert f"0x{h(tp['globalTask']):016X} Task | {tp['taskMethod']}" in glob
    assert f"0x{h(tp['raw']):016X} {tp['rawType']}" in glob
    assert [ln for ln in glob if " Work | " in ln] and \
        all(re.fullmatch(rf"0x[0-9A-F]{{16}} Work \| {re.escape(tp['workMethod'])}", ln) for ln in glob if " Work | " in ln)
    assert local[0] == f"0x{h(tp['localTask']):016X} Task | {tp['localMethod']}"
    assert f"    1 Task  {tp['taskMethod']}" in lines and f"    1 Task  {tp['localMethod']}" in lines
    assert f"    1 Work  {tp['workMethod']}" in lines
    doc = json.loads(case.out(host, "threadpoolqueue --json").text)
    by_addr = {h(i["address"]): i for i in doc["items"]}
    assert (by_addr[h(tp["globalTask"])]["kind"], by_addr[h(tp["globalTask"])]["local"]) == ("task", False)
    assert (by_addr[h(tp["localTask"])]["kind"], by_addr[h(tp["localTask"])]["local"]) == ("task", True)
    assert by_addr[h(tp["raw"])]["kind"] == "raw"


def test_threadpool_wi_and_stat_list_the_queued_work_items(case: HeapCase, host: str) -> None:
    """threadpool -wi: SOS's Queue/Object/Type rows (a worker's local queue is "[Global]" there too);
    -stat: the same items in a dumpheap -stat table (both as dotnet-dump prints them)."""
    tp = x(case)["threadPool"]
    lines = case.out(host, "threadpool -wi").lines
    i = lines.index("Queue             Object           Type")
    rows = {int(ln.split()[1], 16): ln.split()[2] for ln in lines[i + 1:] if ln.startswith("[Global]")}
    assert rows[h(tp["globalTask"])] == "System.Threading.Tasks.Task"
    assert rows[h(tp["localTask"])] == "System.Threading.Tasks.Task"
    assert rows[h(tp["raw"])] == tp["rawType"]
    total = re.search(r"^Total (\d+) objects, [\d,]+ bytes$", case.out(host, "threadpool -stat").text, re.M)
    assert total and int(total.group(1)) == len(rows), case.out(host, "threadpool -stat").text


# -- dumpgcdata, analyzeoom -------------------------------------------------------------------

GLOBAL = ("concurrent GCs", "compacting GCs", "promoting GCs", "GCs that did demotion", "card bundles",
          "elevation logic")


def test_dumpgcdata_counts_the_gcs(case: HeapCase, host: str) -> None:
    rt = case.truth["runtime"]
    text = case.out(host, "dumpgcdata").text
    lines = text.splitlines()
    gcs = rt["gcCounts"][0]
    if not rt["serverGC"]:
        values = {}
        for ln in lines[:len(GLOBAL)]:
            name, value = ln.rsplit(":", 1)
            values[name.strip()] = int(value)
        assert list(values) == list(GLOBAL)
        assert all(0 <= v <= gcs for v in values.values()), (values, gcs)  # each counts GCs
        assert "promoting GCs" in values and values["promoting GCs"] >= 1
        assert lines[len(GLOBAL):len(GLOBAL) + 2] == ["", "[info per heap]"]
        assert lines.count("Interesting data points") == 1
    else:
        heaps = [ln for ln in lines if ln.startswith("--------info for heap ")]
        assert heaps == [f"--------info for heap {i}--------" for i in range(rt["gcConfig"]["HeapCount"])]
    assert re.search(r"^\[M\]             low on ephemeral space: \d+$", text, re.M)
    # Every host reads the same process state.
    for other in HOSTS:
        assert case.out(other, "dumpgcdata").text == text
    doc = json.loads(case.out(host, "dumpgcdata --json").text)
    assert sorted({c["heap"] for c in doc["counters"] if c["heap"] is not None}) == \
        list(range(rt["gcConfig"]["HeapCount"]))
    pins = [c["value"] for c in doc["counters"] if c["name"] == "pre and post pin"]
    assert pins == [int(ln.rsplit(":", 1)[1]) for ln in lines if ln.strip().startswith("pre and post pin:")]


def test_analyzeoom_without_an_oom(case: HeapCase, host: str) -> None:
    assert case.out(host, "analyzeoom").text.strip() == "There was no managed OOM due to allocations on the GC heap"
    assert json.loads(case.out(host, "analyzeoom --json").text).get("oom", []) == []


# -- notreachableinrange ----------------------------------------------------------------------


def test_notreachableinrange_lists_the_dead_objects(case: HeapCase, host: str) -> None:
    r = x(case)["range"]
    dead = [h(a) for a in r["dead"]]
    lines = without_notices(case.out(host, f"notreachableinrange {r['start']} {r['end']}").text.splitlines())
    assert lines[0] == "         Address               MT           Size"
    rows = [ln.split() for ln in lines[1:lines.index("")]]
    assert [h(a) for a, _mt, _s in rows] == dead
    assert f"Total {len(dead)} objects, {24 * len(dead)} bytes" in lines
    assert re.search(rf" {len(dead)} +{24 * len(dead)} {re.escape(r['deadType'])}$",
                     "\n".join(lines), re.M)
    short = case.out(host, f"notreachableinrange -short {r['start']} {r['end']}").text.split()
    assert [h(a) for a in short] == dead
    doc = json.loads(case.out(host, f"notreachableinrange {r['start']} "
                                    f"L{h(r['end']) - h(r['start']):x} --json").text)
    assert [h(o["address"]) for o in doc["objects"]] == dead
    assert case.out(host, "notreachableinrange 10 zz").errors == ["error: Could not parse end address: zz"]


# -- dumpalc, findappdomain, findroots --------------------------------------------------------


def test_dumpalc_names_the_load_context(case: HeapCase, host: str) -> None:
    a = x(case)["alc"]
    n = x(case)["nodes"]
    text = case.out(host, f"dumpalc {a['pluginObject']}").text
    assert text.splitlines()[0] == f"Name:        {a['pluginType']}"
    assert h(json.loads(case.out(host, f"dumpalc {a['pluginObject']} --json").text)["assembly_load_context"]) == \
        h(a["plugin"])
    assert h(json.loads(case.out(host, f"dumpalc {n['a']} --json").text)["assembly_load_context"]) == h(a["default"])
    assert case.out(host, f"dumpalc {n['a']}").text.splitlines()[0] == f"Name:        {a['defaultType']}"
    assert case.out(host, "dumpalc 0").errors == ["error: 0000000000000000 is not a valid object"]


def test_findappdomain_and_findroots(case: HeapCase, host: str) -> None:
    lines = case.out(host, f"findappdomain {x(case)['nodes']['a']}").text.splitlines()
    assert re.fullmatch(r"AppDomain: [0-9a-f]{16}", lines[0]) and lines[1].startswith("Name:      ")
    assert lines[2] == f"ID:        {x(case)['appDomain']['id']}"
    for cmd in ("findroots", "findroots -gen 0"):
        errors = case.out(host, cmd).errors
        assert len(errors) == 1 and "gcroot -gcgen" in errors[0]


# -- ephrefs, ephtoloh ------------------------------------------------------------------------


def eph_groups(text: str) -> dict[str, list[list[str]]]:
    groups: dict[str, list[list[str]]] = {}
    cur = None
    for ln in text.splitlines():
        m = re.match(r"^References from (\S+) to (\S+):$", ln)
        if m:
            cur = groups.setdefault(f"{m.group(1)}>{m.group(2)}", [])
        elif cur is not None and re.match(r"^ +[0-9a-f]{12,16} ", ln):
            cur.append(ln.split())
    return groups


def test_ephrefs_finds_old_objects_holding_young_ones(case: HeapCase, host: str) -> None:
    g = x(case)["generations"]
    assert (g["oldGeneration"], g["youngGeneration"]) == (2, 0)
    groups = eph_groups(case.out(host, "ephrefs").text)
    old = [r for r in groups["generation2>generation0"] if h(r[0]) == h(g["old"])]
    assert old == [[f"{h(g['old']):x}", old[0][1], old[0][2], "Generation2", "Generation0", "1", str(g["youngSize"]),
                    g["oldType"]]]
    assert [r for r in groups["large>generation0"] if h(r[0]) == h(g["loh"])][0][5:7] == ["1", str(g["youngSize"])]
    doc = json.loads(case.out(host, "ephrefs --json").text)
    mine = [r for r in doc["references"] if h(r["object"]) == h(g["old"])]
    assert [(r["generation"], r["referenced_generation"], r["count"]) for r in mine] == [("gen2", "gen0", 1)]


def test_ephtoloh_finds_young_large_young(case: HeapCase, host: str) -> None:
    g = x(case)["generations"]
    young, loh = f"{h(g['young']):x}", f"{h(g['loh']):x}"
    lines = [ln.split() for ln in case.out(host, "ephtoloh").text.splitlines()]
    assert [young, g["youngType"], loh, "System.Object[]"] in lines
    assert [loh, "System.Object[]", young, g["youngType"]] in lines
    assert [young, g["youngType"], loh, "System.Object[]", young, g["youngType"]] in lines
    doc = json.loads(case.out(host, "findephemeralreferencestoloh --json").text)
    assert {"from": "0x" + young, "from_type": g["youngType"], "to": "0x" + loh, "to_type": "System.Object[]",
            "from_csharp_type": g["youngType"], "to_csharp_type": "System.Object[]"} in doc["ephemeral_to_loh"]


# -- clrmodules -------------------------------------------------------------------------------


def _size_of_image(path: str) -> int:
    """SizeOfImage from the PE file on disk: what the loaded image's header says too."""
    head = Path(path).read_bytes()[:0x400]
    pe = int.from_bytes(head[0x3C:0x40], "little")
    return int.from_bytes(head[pe + 24 + 56:pe + 24 + 60], "little")


def test_clrmodules_lists_the_modules(case: HeapCase, host: str) -> None:
    m = x(case)["module"]
    lines = case.out(host, "clrmodules").text.splitlines()
    mine = [ln.split() for ln in lines if ln.endswith(" " + m["path"])]
    # The size the runtime reports, as SOS prints it: the file's for a flat (IsFileLayout) image,
    # else the mapped image's SizeOfImage.
    sizes = {_size_of_image(m["path"]), os.path.getsize(m["path"])}
    assert mine and all(h(b) in {h(a) for a in m["mappedAt"]} and int(s, 16) in sizes
                        for b, s, _p in mine), (mine, m)
    corelib = os.path.join(case.truth["runtime"]["runtimeDir"], "System.Private.CoreLib.dll")
    assert any(ln.endswith(" " + corelib) for ln in lines)
    verbose = case.out(host, "clrmodules -v -n ^sosextdebuggee").text.splitlines()
    assert verbose[0] == m["path"]  # this assembly, twice: the default and the plugin's load context
    assert verbose.count(m["path"]) == 2
    # The runtime's assembly name, as SOS prints it: the path the assembly was loaded from.
    assert f"    AssemblyName:    {m['path']}" in verbose
    assert f"    ImageBase:       {mine[0][0]}" in verbose
    assert f"    Version:         {m['fileVersion']}" in verbose
    doc = json.loads(case.out(host, "clrmodules --json").text)
    assert len(doc["modules"]) == len(lines)


# -- traverseheap -----------------------------------------------------------------------------


def test_traverseheap_writes_the_graph(case: HeapCase, host: str) -> None:
    n = x(case)["nodes"]
    files = case.files[host]
    log, xml = files / "heap.log", files / "heap.xml"
    assert case.out(host, f"traverseheap {log}").errors == []
    assert stat.S_IMODE(log.stat().st_mode) == 0o600 and stat.S_IMODE(xml.stat().st_mode) == 0o600
    text = log.read_text()
    types = dict(re.findall(r"^t (\d+) 0 (.+)$", text, re.M))
    objs = {int(m.group(1), 16): (m.group(2), [int(v, 16) for v in m.group(3).split()])
            for m in re.finditer(r"^o 0x([0-9a-f]{16}) (\d+) \d+ (.*)$", text, re.M)}
    tid, refs = objs[h(n["a"])]
    assert types[tid] == n["type"]
    assert sorted(refs) == sorted(h(r["object"]) for r in n["aRefs"])
    root = ET.parse(xml).getroot()
    xtypes = {t.get("id"): t.get("name") for t in root.find("types")}
    obj = next(o for o in root.find("objects") if int(o.get("address"), 16) == h(n["a"]))
    assert xtypes[obj.get("typeid")] == n["type"]
    assert sorted(int(mb.get("address"), 16) for mb in obj) == sorted(h(r["object"]) for r in n["aRefs"])
    assert len(root.find("objects")) == len(objs)
    assert case.out(host, f"TraverseHeap {log}").errors == [f"error: {log} exists; choose another name or add --force"]
    link = files / "link.log"
    assert case.out(host, f"traverseheap {link}").errors == [f"error: {link} exists; choose another name or add --force"]
    assert not (files / "not-there").exists()


# -- gctonative, findpointersin ---------------------------------------------------------------


def bordered_rows(lines: list[str]) -> list[list[str]]:
    return [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in lines if ln.startswith(" | ")]


def test_gctonative_finds_the_object_holding_native_memory(case: HeapCase, host: str) -> None:
    r = x(case)["range"]
    block = h(r["start"])
    assert kind_at(map_rows(case.out(host, "maddress").text), block) == ["PAGE_READWRITE"]
    lines = case.out(host, "gctonative -a PAGE_READWRITE").text.splitlines()
    assert lines[:2] == ["Walking GC heap to find pointers...", "Resolving object names..."]
    assert lines[2].strip("=") == " PAGE_READWRITE Regions "
    rows = bordered_rows(lines)
    assert [f"{block:x}", f"{h(r['holder']):x}", r["holderType"]] in rows
    summary = lines[lines.index("Other memory pointer summary:"):]
    assert [r["holderType"], "1", f"{block:x}"] in bordered_rows(summary)
    doc = json.loads(case.out(host, "gctonative PAGE_READWRITE --json").text)
    assert {"kind": "PAGE_READWRITE", "pointer": f"0x{block:x}", "object": f"0x{h(r['holder']):x}",
            "type": r["holderType"]} in [{k: p[k] for k in ("kind", "pointer", "object", "type")} for p in doc["pointers"]]
    assert case.out(host, "gctonative").errors == ["error: Must specify at least one memory region type to search for."]
    assert case.out(host, "gctonative NoSuchKind").text.splitlines()[0] == "No matching memory ranges."


def test_findpointersin_finds_the_native_block_pointers(case: HeapCase, host: str) -> None:
    r = x(case)["range"]
    block = h(r["start"])
    regions = [(k, s, e) for k, s, e, _t, _i in map_rows(case.out(host, "maddress").text) if s <= block < e]
    (_kind, start, end), = regions
    for cmd, all_objects in (("findpointersin -a PAGE_READWRITE", True), ("findpointersin PAGE_READWRITE", False)):
        lines = case.out(host, cmd).text.splitlines()
        assert lines[0] == "Scanning for pinned objects..."
        i = next(k for k, ln in enumerate(lines) if f"REGION [{start:x}-{end:x}] " in ln)
        stop = next(k for k in range(i, len(lines)) if re.fullmatch(r"=+END REGION=+", lines[k]))
        section = lines[i:stop]
        assert section[1] == "Type:  PAGE_READWRITE"
        gc = bordered_rows(section[section.index("Pointers to GC heap:"):])
        named = {row[0]: row for row in gc}
        if all_objects:
            # The block points to the three dead items (exactly three exist, so three distinct
            # pointers) and to a node. The region is the C heap's: the runtime's own native data
            # there (the GC's mark list …) may hold stale copies of addresses, counted as well.
            unique, count = (int(v) for v in named[r["deadType"]][1:3])
            assert unique == 3 and count >= 3
            assert int(named[x(case)["nodes"]["type"]][2]) >= 1
        else:
            assert r["deadType"] not in named  # not pinned: counted, not named
            assert "[Pointers to non-pinned objects]" in named or any(
                "pointers to the GC heap, but none pointed to a pinned object." in ln for ln in section)
    assert case.out(host, "findpointersin NoSuchKind").text.splitlines()[1] == \
        "Found not memory regions matching 'NoSuchKind'."


# -- analyzeoom after a real out-of-memory ----------------------------------------------------

OOM_HOSTS = ["lldb-live", "cli-heap"]
HARD_LIMIT = {"DOTNET_GCHeapHardLimit": "0x4000000"}  # 64 MiB: 1 MiB arrays run out soon


@pytest.fixture(scope="module")
def oom(tmp_path_factory) -> tuple[dict, dict[str, list[drivers.Output]]]:
    drivers.require_dotnet_and_lldb()
    where = tmp_path_factory.mktemp("extraheap-oom")
    with Debuggee("extraheap", "oom", dll=build_debuggee(), core_dir=where, env=HARD_LIMIT) as d:
        return d.truth, drivers.run_in_hosts(d, ["analyzeoom", "analyzeoom --json"], OOM_HOSTS, where)


@pytest.mark.parametrize("where", OOM_HOSTS)
def test_analyzeoom_reports_the_failed_allocation(oom, where: str) -> None:
    truth, outs = oom
    o = truth["extraheap"]["oom"]
    assert o["arraysBeforeFailure"] > 0  # the debuggee did run out
    # A GC heap hard limit makes the GC fail to commit: oom_cant_commit, in SOS's words.
    assert outs[where][0].text.strip() == "Didn't have enough memory to commit"
    (rec,) = json.loads(outs[where][1].text)["oom"]
    assert (rec["heap"], rec["reason"], rec["failure"]) == (0, "Didn't have enough memory to commit", None)
    assert rec["gc_index"] == o["gcsAtFailure"]
    # The request is the array and, on the large object heap, the GC's padding object before it.
    assert 0 <= rec["allocation_size"] - o["arraySize"] <= 32, (rec, o)
