"""SOS's leak-hunting commands against the `parity` debuggee: dumpgen, sizestats, timerinfo,
syncblk, dumpconcurrentdictionary.

The debuggee builds objects of its own types in each generation (and asks the GC where they
are), timers with known due times and periods, a Monitor held twice by a named thread on an
object with a sync block, and concurrent dictionaries of known contents; it prints all of it
as truth. Each host (LLDB live and on a heap core, the CLI on the core, GDB when installed)
runs one batch, and every value is compared with the truth.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import drivers
from harness import Debuggee, build_debuggee

pytestmark = pytest.mark.slow

HOSTS = ["lldb-live", "lldb-core", "cli-core"]
if drivers.GDB:
    HOSTS += ["gdb-live", "gdb-core"]

GENS = {0: "gen0", 1: "gen1", 2: "gen2"}


def commands_for(t: dict) -> list[str]:
    g = t["generations"]
    dicts = [d["address"] for d in t["dictionaries"]]
    return [
        "dumpgen gen0", "dumpgen gen1", "dumpgen gen2", "dumpgen loh", "dumpgen poh",
        f"dumpgen gen0 -mt {g['itemMt']}", f"dumpgen gen1 -mt {g['itemMt']} --json",
        "dumpgen gen2 -type paritygenitem", "dumpgen gen0 -type NoMatchingType", "dumpgen gen2 --json",
        "dumpgen", "dumpgen invalid", "dumpgen gen1 -mt zzzzz", "dumpgen gen0 -mt 00000001",
        "sizestats", "sizestats --json",
        "timerinfo", "timerinfo --json",
        "syncblk", "syncblk -all", f"syncblk {t['monitor']['held']['syncBlock']}", "syncblk --json",
        *[f"dcd {a}" for a in dicts], f"dumpconcurrentdictionary {dicts[0]} --json",
        "gchandleleaks", "gchandleleaks --json",
        "dumpasync", "dumpasync --stats", "dumpasync --coalesce", "dumpasync --json",
        f"dumpasync --methodtable {t['async']['chain'][1]['mt']}", "dumpasync --type LonelyAsync",
        "dumpasync --tasks --stats", "dumpasync --completed --stats", "dumpasync --fields",
        "maddress", "maddress -summary", "maddress --json", "maddress -list GCHeap,Stack,NoSuchKind",
        *[f"dcq {q['address']}" for q in t["queues"]], f"dcq {t['queues'][0]['address']} --json",
        f"dcq {dicts[0]}", "dcq",
        "dcd", "dcd abcdefgh", "dcd 0000000000000001", f"dcd {t['monitor']['held']['address']}",
        *gcgen_commands(g),
        "eeversion", "eeversion --json", "runtimes", "runtimes --json", "runtimes -netfx", "sosstatus", "sosflush",
        "sosstatus -reset",
        *near_commands(g),
    ]


def near_commands(g: dict) -> list[str]:
    a = g["items"][0]["address"]
    inside = f"{int(a, 16) + 8:x}"
    return [f"verifyobj {a}", f"listnearobj {a}", f"verifyobj {inside}", f"listnearobj {inside}", "verifyobj"]


def _items_of(g: dict, gen: int) -> list[str]:
    return [o["address"] for o in g["items"] if o["generation"] == gen]


def gcgen_commands(g: dict) -> list[str]:
    """gcroot -gcgen (findroots' helper) on an item the GC put in gen2 and one in gen0."""
    old, young = _items_of(g, 2)[:1], _items_of(g, 0)[:1]
    return ([f"gcroot -gcgen 0 {a}" for a in old] + [f"gcroot -gcgen 2 {a}" for a in old]
            + [f"gcroot {a}" for a in old] + [f"gcroot -gcgen 0 {a}" for a in young])


@dataclass
class Case:
    truth: dict
    outputs: dict[str, dict[str, drivers.Output]] = field(default_factory=dict)

    def out(self, host: str, command: str) -> drivers.Output:
        return self.outputs[host][command]


def run(host: str, truth: dict, **kw) -> dict[str, drivers.Output]:  # type: ignore[no-untyped-def]
    cmds = commands_for(truth)
    return dict(zip(cmds, drivers.run_in_host(host, cmds, **kw)))


@pytest.fixture(scope="module", params=[("wks", "regions"), ("svr", "segments")], ids=lambda p: "-".join(p))
def case(request, tmp_path_factory) -> Case:
    drivers.require_dotnet_and_lldb()
    tfm = request.config.getoption("--tfm")
    gc, flavor = request.param
    cores = tmp_path_factory.mktemp(f"cores-parity-{gc}-{flavor}")
    with Debuggee("parity", gc=gc, gc_flavor=flavor, tfm=tfm, dll=build_debuggee(tfm), core_dir=cores) as d:
        c = Case(d.truth)
        core = d.write_core("heap", cores / "parity.core")
        exe = str(d.executable)
        c.outputs["lldb-live"] = run("lldb-live", d.truth, pid=d.pid)
        if "gdb-live" in HOSTS:
            c.outputs["gdb-live"] = run("gdb-live", d.truth, pid=d.pid)
    c.outputs["lldb-core"] = run("lldb-core", c.truth, core=core, exe=exe)
    c.outputs["cli-core"] = run("cli-core", c.truth, core=core)
    if "gdb-core" in HOSTS:
        c.outputs["gdb-core"] = run("gdb-core", c.truth, core=core, exe=exe)
    Path(core).unlink(missing_ok=True)
    return c


@pytest.fixture(params=HOSTS)
def host(request) -> str:
    return request.param


def h(text: str) -> int:
    return int(text, 16)


def align8(n: int) -> int:
    return (n + 7) & ~7


# -- dumpgen ----------------------------------------------------------------------------------

STAT_ROW = re.compile(r"^([0-9a-f]{16}) +(\d+) +(\d+) (.+)$")


def stat_rows(text: str) -> dict[int, tuple[int, int, str]]:
    """MT -> (count, total size, name) of a dumpgen statistics table."""
    lines = text.splitlines()
    assert lines[:2] == ["Statistics:", "              MT    Count    TotalSize Class Name"], text
    rows = {}
    for ln in lines[2:]:
        m = STAT_ROW.match(ln)
        if m:
            rows[h(m.group(1))] = (int(m.group(2)), int(m.group(3)), m.group(4))
    total = re.search(r"^Total (\d+) objects$", text, re.M)
    assert total and int(total.group(1)) == sum(c for c, _s, _n in rows.values()), text
    return rows


def test_dumpgen_counts_each_generation(case: Case, host: str) -> None:
    g = case.truth["generations"]
    mt = h(g["itemMt"])
    for gen, name in GENS.items():
        mine = [o for o in g["items"] if o["generation"] == gen]
        rows = stat_rows(case.out(host, f"dumpgen {name}").text)
        if mine:
            assert rows[mt] == (len(mine), sum(o["size"] for o in mine), g["itemType"]), name
        else:
            assert mt not in rows
    for key, name in (("loh", "loh"), ("pinned", "poh")):
        o = g[key]
        rows = stat_rows(case.out(host, f"dumpgen {name}").text)
        assert rows[h(o["mt"])] == (1, o["size"], o["type"])


def test_dumpgen_sorts_by_total_size(case: Case, host: str) -> None:
    sizes = [s for _c, s, _n in stat_rows(case.out(host, "dumpgen gen0").text).values()]
    assert sizes == sorted(sizes)


def test_dumpgen_mt_lists_the_instances(case: Case, host: str) -> None:
    g = case.truth["generations"]
    mine = {h(o["address"]): o["size"] for o in g["items"] if o["generation"] == 0}
    lines = case.out(host, f"dumpgen gen0 -mt {g['itemMt']}").text.splitlines()
    assert lines[0] == "         Address               MT     Size"
    rows = [ln.split() for ln in lines[1:] if re.match(r"^[0-9a-f]{16} ", ln)]
    assert {h(a): int(s) for a, _m, s in rows} == mine
    assert all(h(m) == h(g["itemMt"]) for _a, m, _s in rows)
    assert f"Total {len(mine)} objects" in lines
    doc = json.loads(case.out(host, f"dumpgen gen1 -mt {g['itemMt']} --json").text)
    assert {h(o["address"]) for o in doc["objects"]} == {h(o["address"]) for o in g["items"] if o["generation"] == 1}


def test_dumpgen_type_filter_ignores_case(case: Case, host: str) -> None:
    g = case.truth["generations"]
    rows = stat_rows(case.out(host, "dumpgen gen2 -type paritygenitem").text)
    assert rows[h(g["itemMt"])][0] == sum(1 for o in g["items"] if o["generation"] == 2)
    assert all("paritygenitem" in n.lower() for _c, _s, n in rows.values())
    assert "Total 0 objects" in case.out(host, "dumpgen gen0 -type NoMatchingType").text
    assert "Total 0 objects" in case.out(host, "dumpgen gen0 -mt 00000001").text


def test_dumpgen_json_matches_text(case: Case, host: str) -> None:
    doc = json.loads(case.out(host, "dumpgen gen2 --json").text)
    rows = stat_rows(case.out(host, "dumpgen gen2").text)
    assert {h(t["mt"]): (t["count"], t["total_size"], t["csharp_name"]) for t in doc["types"]} == rows


def test_dumpgen_usage_errors(case: Case, host: str) -> None:
    assert case.out(host, "dumpgen").errors == ["error: Generation argument is missing"]
    assert case.out(host, "dumpgen invalid").errors == [
        "error: invalid is not a supported generation (gen0, gen1, gen2, loh, poh, foh)"]
    assert case.out(host, "dumpgen gen1 -mt zzzzz").errors == ["error: Hexadecimal address expected for -mt option"]


# -- sizestats --------------------------------------------------------------------------------

SIZE_ROW = re.compile(r"^ *([\d,]+) +([\d,]+) +([\d,]+) +([\d,]+)$")


def size_sections(text: str) -> dict[str, list[tuple[int, int, int, int]]]:
    sections: dict[str, list[tuple[int, int, int, int]]] = {}
    cur = None
    for ln in text.splitlines():
        m = re.match(r"^Size Statistics for (.+) objects$", ln)
        if m:
            cur = sections.setdefault(m.group(1), [])
            continue
        m = SIZE_ROW.match(ln)
        if m and cur is not None:
            cur.append(tuple(int(x.replace(",", "")) for x in m.groups()))  # type: ignore[arg-type]
    return sections


def test_sizestats_counts_the_odd_arrays(case: Case, host: str) -> None:
    g = case.truth["generations"]
    sections = size_sections(case.out(host, "sizestats").text)
    assert list(sections)[:4] == ["generation0", "generation1", "generation2", "large"]
    assert "pinned" in sections and "generation0 free" in sections
    for gen in (0, 1, 2):
        odd = [o for o in g["oddArrays"] if o["generation"] == gen]
        if odd:
            size = align8(odd[0]["size"])
            assert [r[1] for r in sections[f"generation{gen}"] if r[0] == size] == [len(odd)]


def test_sizestats_cumulative_columns_count_the_rows_above(case: Case, host: str) -> None:
    for name, rows in size_sections(case.out(host, "sizestats").text).items():
        cum_size = cum_count = 0
        for size, count, csize, ccount in rows:
            assert (csize, ccount) == (cum_size, cum_count), name
            cum_size += size * count
            cum_count += count
        assert [r[0] for r in rows] == sorted(r[0] for r in rows)


def test_sizestats_agrees_with_dumpgen(case: Case, host: str) -> None:
    sections = size_sections(case.out(host, "sizestats").text)
    for gen, name in GENS.items():
        rows = stat_rows(case.out(host, f"dumpgen {name}").text)
        live = sum(c for c, _s, n in rows.values() if n != "Free")
        free = sum(c for c, _s, n in rows.values() if n == "Free")
        assert sum(r[1] for r in sections[f"generation{gen}"]) == live
        assert sum(r[1] for r in sections[f"generation{gen} free"]) == free
    doc = json.loads(case.out(host, "sizestats --json").text)
    assert [(s["generation"] + (" free" if s["free"] else "")) for s in doc["sections"]] == list(sections)


# -- timerinfo --------------------------------------------------------------------------------


def timer_text(t: dict) -> tuple[str, str]:
    """The line and summary key SOS prints for one of the debuggee's timers (all on the long
    list: their due times are far beyond the 1/3 s a short timer has)."""
    period = "  ------" if t["period"] == 0xFFFFFFFF else str(t["period"])
    tail = f"{h(t['state']):016X} ({t['stateType']}) -> {t['method']}"
    head = f"@{t['dueTime']:>8} ms every {period:>8} ms |"
    return f"(L) 0x{h(t['address']):016X} {head}  {tail}", f"(L) {head} {tail}"


def test_timerinfo_lists_the_timers(case: Case, host: str) -> None:
    text = case.out(host, "timerinfo").text
    lines = text.splitlines()
    timers = case.truth["timers"]
    where = []
    for t in timers:
        line, key = timer_text(t)
        assert line in lines, text
        assert f"   1 | {key}" in lines, text
        where.append(lines.index(line))
    # Sorted by period: the debuggee's periods ascend in the order it made them.
    assert where == sorted(where)
    listed = [ln for ln in lines if re.match(r"^(\([SL]\) )?0x[0-9A-F]{16} @", ln)]
    assert f"   {len(listed)} timers" in lines


def test_timerinfo_json(case: Case, host: str) -> None:
    doc = json.loads(case.out(host, "timerinfo --json").text)
    by_addr = {h(t["address"]): t for t in doc["timers"]}
    for t in case.truth["timers"]:
        got = by_addr[h(t["address"])]
        assert got["due_time"] == t["dueTime"]
        assert got["period"] == (None if t["period"] == 0xFFFFFFFF else t["period"])
        assert (h(got["state"]), got["state_type"], got["callback"]) == (h(t["state"]), t["stateType"], t["method"])
        assert got["short"] is False and got["canceled"] is False


# -- syncblk ----------------------------------------------------------------------------------

SYNC_HEADER = "Index         SyncBlock MonitorHeld Recursion Owning Thread Info          SyncBlock Owner"


def sync_rows(text: str) -> dict[int, list[str]]:
    lines = text.splitlines()
    assert lines[0] == SYNC_HEADER, text
    # SOS (dotnet-dump and LLDB) prints the SyncBlock and the owning Thread in upper case.
    return {int(ln.split()[0]): ln.split() for ln in lines[1:] if re.match(r"^ +\d+ [0-9A-F]{16} ", ln)}


def test_syncblk_shows_the_held_monitor(case: Case, host: str) -> None:
    held = case.truth["monitor"]["held"]
    text = case.out(host, "syncblk").text
    rows = sync_rows(text)
    row = rows[held["syncBlock"]]
    # index, SyncBlock, MonitorHeld, Recursion, Thread, OS id, debugger thread number, object, type
    assert row[2:4] == [str(1 + 2 * held["waiters"]), str(held["recursion"])]
    assert h(row[5]) == held["osTid"]
    assert h(row[-2]) == h(held["address"]) and row[-1] == held["type"]
    released = case.truth["monitor"]["released"]["syncBlock"]
    assert released not in rows  # not held: only -all shows it
    total = int(re.search(r"^Total +(\d+)$", text, re.M).group(1))
    assert total >= max(held["syncBlock"], released)
    assert re.search(r"^Free +\d+$", text, re.M)


def test_syncblk_all_and_one_index(case: Case, host: str) -> None:
    held = case.truth["monitor"]["held"]
    released = case.truth["monitor"]["released"]
    rows = sync_rows(case.out(host, "syncblk -all").text)
    r = rows[released["syncBlock"]]
    assert r[2:4] == ["0", "0"] and r[5] == "none" and h(r[-2]) == h(released["address"])
    assert rows[held["syncBlock"]] == sync_rows(case.out(host, "syncblk").text)[held["syncBlock"]]
    one = sync_rows(case.out(host, f"syncblk {held['syncBlock']}").text)
    assert list(one) == [held["syncBlock"]]
    doc = json.loads(case.out(host, "syncblk --json").text)
    e = next(e for e in doc["entries"] if e["index"] == held["syncBlock"])
    assert (e["monitor_held"], e["recursion"], e["os_thread_id"], h(e["object"])) == \
        (1 + 2 * held["waiters"], held["recursion"], held["osTid"], h(held["address"]))


# -- dumpconcurrentdictionary -----------------------------------------------------------------


def dcd_items(text: str) -> list[tuple[str, str]]:
    lines = text.splitlines()
    items = []
    for i, ln in enumerate(lines):
        if ln.startswith("      Key: "):
            assert lines[i + 1].startswith("    Value: "), text
            items.append((ln[len("      Key: "):], lines[i + 1][len("    Value: "):]))
    return items


def test_dcd_lists_keys_and_values(case: Case, host: str) -> None:
    for d in case.truth["dictionaries"]:
        text = case.out(host, f"dcd {d['address']}").text
        assert text.splitlines()[0].startswith("System.Collections.Concurrent.ConcurrentDictionary")
        got = sorted(dcd_items(text))
        want = sorted(tuple(e) for e in d["entries"])
        # "*" in the truth stands for an address only the node knows (a struct value's).
        assert len(got) == len(want)
        for (gk, gv), (wk, wv) in zip(got, want):
            assert gk == wk and (gv == wv or wv.endswith(" *") and re.fullmatch(re.escape(wv[:-1]) + "[0-9a-f]{16}", gv))
        assert f"{len(d['entries'])} items" in text.splitlines()
    d = case.truth["dictionaries"][0]
    doc = json.loads(case.out(host, f"dumpconcurrentdictionary {d['address']} --json").text)
    assert sorted((i["key"], i["value"]) for i in doc["items"]) == sorted(tuple(e) for e in d["entries"])


def test_dcd_errors(case: Case, host: str) -> None:
    held = case.truth["monitor"]["held"]
    assert case.out(host, "dcd").errors == ["error: Missing ConcurrentDictionary address..."]
    assert case.out(host, "dcd abcdefgh").errors == ["error: Hexadecimal address expected..."]
    assert case.out(host, "dcd 0000000000000001").errors == [
        "error: 0000000000000001 is not referencing an object..."]
    assert case.out(host, f"dcd {held['address']}").errors == [
        f"error: {held['address']} is not a ConcurrentDictionary but an instance of {held['type']}..."]


# -- gchandleleaks ----------------------------------------------------------------------------


def test_gchandleleaks_finds_exactly_the_leaked_handles(case: Case, host: str) -> None:
    hs = case.truth["handles"]
    text = case.out(host, "gchandleleaks").text
    lines = text.splitlines()
    listed = {h(v) for ln in lines[lines.index(next(ln for ln in lines if ln.startswith("Found ") and
                                                    ln.endswith(" handles:"))) + 1:lines.index("Searching memory")]
              for v in ln.split()}
    assert {h(v) for v in hs["kept"] + hs["leaked"]} <= listed
    found = {h(m.group(1)) for m in re.finditer(r"^Found ([0-9a-f]+) at location [0-9a-f]+$", text, re.M)}
    assert {h(v) for v in hs["kept"]} <= found
    i = lines.index(f"Didn't find {len(hs['leaked'])} handles:")
    assert {h(v) for ln in lines[i + 1:] for v in ln.split()} == {h(v) for v in hs["leaked"]}
    doc = json.loads(case.out(host, "gchandleleaks --json").text)
    assert {h(v) for v in doc["not_found"]} == {h(v) for v in hs["leaked"]}
    assert {h(v) for v in doc["handles"]} == listed


# -- dumpasync ---------------------------------------------------------------------------------

FLAG_NAMES = ((0x10000, "Started"), (0x20000, "DelegateInvoked"), (0x40000, "Disposed"),
              (0x80000, "ExceptionObservedByParent"), (0x100000, "CancellationAcknowledged"),
              (0x200000, "Faulted"), (0x400000, "Canceled"), (0x800000, "WaitingOnChildren"),
              (0x1000000, "RanToCompletion"), (0x4000000, "CompletionReserved"))


def task_flags(flags: int) -> str:
    """Task.m_stateFlags as SOS's dumpasync names them (" " when none of its names applies)."""
    return "|".join(n for bit, n in FLAG_NAMES if flags & bit) or " "


def stacks(text: str) -> list[list[str]]:
    out: list[list[str]] = []
    for ln in text.splitlines():
        if re.match(r"^STACKS? \d+$", ln):
            out.append([])
        elif ln and out:
            out[-1].append(ln)
    return out


def chain_lines(a: dict) -> list[str]:
    src = a["source"]
    lines = [f"{h(src['address']):016x} {h(src['mt']):016x} ({task_flags(src['flags'])}) "
             "System.Threading.Tasks.Task<System.Int32>"]
    for depth, t in enumerate(a["chain"], 1):
        lines.append(f"{'  ' * depth}{h(t['address']):016x} {h(t['mt']):016x} (0) {t['stateMachine']}")
    return lines


def test_dumpasync_prints_the_awaiting_chain(case: Case, host: str) -> None:
    a = case.truth["async"]
    all_stacks = stacks(case.out(host, "dumpasync").text)
    assert chain_lines(a) in all_stacks
    lonely = a["lonely"]
    mine = [s for s in all_stacks if any(f"{h(lonely['address']):016x}" in ln for ln in s)]
    assert len(mine) == 1
    awaiting, frame = mine[0]
    assert re.fullmatch(rf"<< Awaiting: [0-9a-f]{{16}} {h(a['awaiterMt']):016x} {re.escape(a['awaiterType'])} >>", awaiting)
    assert frame == f"  {h(lonely['address']):016x} {h(lonely['mt']):016x} (0) {lonely['stateMachine']}"


def test_dumpasync_filters(case: Case, host: str) -> None:
    a = case.truth["async"]
    assert stacks(case.out(host, f"dumpasync --methodtable {a['chain'][1]['mt']}").text) == [chain_lines(a)]
    only = stacks(case.out(host, "dumpasync --type LonelyAsync").text)
    assert len(only) == 1 and only[0][-1].endswith(a["lonely"]["stateMachine"])


def test_dumpasync_stats_and_coalesce(case: Case, host: str) -> None:
    a = case.truth["async"]
    boxes = a["chain"] + [a["lonely"]]
    text = case.out(host, "dumpasync --stats").text
    lines = text.splitlines()
    assert lines[0] == "MT               Count    Type"
    for t in boxes:
        assert f"{h(t['mt']):016x} 1        {t['stateMachine']}" in lines
    assert not any("Task<System.Int32>" in ln for ln in lines)  # tasks only with --tasks
    tasks = case.out(host, "dumpasync --tasks --stats").text.splitlines()
    assert f"{h(a['source']['mt']):016x} " in "\n".join(tasks) and "System.Threading.Tasks.Task<System.Int32>" in "\n".join(tasks)
    completed = case.out(host, "dumpasync --completed --stats").text.splitlines()
    for t in boxes:
        assert f"{h(t['mt']):016x} 1        {t['stateMachine']}" in completed
    co = stacks(case.out(host, "dumpasync --coalesce").text)
    want = [f"[1] {h(a['source']['mt']):016x} System.Threading.Tasks.Task<System.Int32>"] + [
        f"{'  ' * d}[1] {h(t['mt']):016x} (0) {t['stateMachine']}" for d, t in enumerate(a["chain"], 1)]
    assert want in co


def test_dumpasync_json(case: Case, host: str) -> None:
    a = case.truth["async"]
    doc = json.loads(case.out(host, "dumpasync --json").text)
    chains = [[h(f["address"]) for f in s["frames"]] for s in doc["stacks"]]
    assert [h(a["source"]["address"])] + [h(t["address"]) for t in a["chain"]] in chains


# -- maddress ----------------------------------------------------------------------------------

MAP_ROW = re.compile(r"^ \| (\S+) +\| +([0-9a-f]+) \| +([0-9a-f]+) \| +(\S+) \| (\S+) +\| (\S+) +\| (\S+) +\| (.*?) *\| $")


def map_rows(text: str) -> list[tuple[str, int, int, str, str]]:
    """(kind, start, end exclusive, type, image) of maddress's listing."""
    rows = []
    for ln in text.splitlines():
        m = MAP_ROW.match(ln)
        if m and m.group(1) != "Memory":
            rows.append((m.group(1), h(m.group(2)), h(m.group(3)) + 1, m.group(5), m.group(8)))
    return rows


def kind_at(rows, address: int) -> list[str]:  # type: ignore[no-untyped-def]
    return [k for k, s, e, _t, _i in rows if s <= address < e]


def test_maddress_names_the_debuggee_memory(case: Case, host: str) -> None:
    m = case.truth["memory"]
    rows = map_rows(case.out(host, "maddress").text)
    assert kind_at(rows, h(m["stackSlot"])) == ["Stack"]
    assert kind_at(rows, h(m["gcObject"])) == ["GCHeap"]
    assert kind_at(rows, h(m["handle"])) == ["HandleTable"]
    native = [r for r in rows if r[1] <= h(m["native"]) < r[2]]
    assert len(native) == 1 and native[0][0] == "PAGE_READWRITE" and native[0][3] == "MEM_PRIVATE"
    assert native[0][2] >= h(m["native"]) + m["nativeSize"]
    assert any(k == "Image" and t == "MEM_IMAGE" and i == m["assembly"] for k, _s, _e, t, i in rows)
    starts = [r[1] for r in rows]
    assert starts == sorted(starts)
    assert all(a[2] <= b[1] for a, b in zip(rows, rows[1:]))  # no overlaps


def test_maddress_summary_adds_up(case: Case, host: str) -> None:
    rows = map_rows(case.out(host, "maddress").text)
    want: dict[str, list[int]] = {}
    for k, s, e, _t, _i in rows:
        w = want.setdefault(k, [0, 0])
        w[0] += 1
        w[1] += e - s
    got = {}
    for ln in case.out(host, "maddress -summary").text.splitlines():
        parts = [p.strip() for p in ln.strip().strip("|").split("|")]
        if len(parts) == 4 and parts[0] not in ("Memory Type", ""):
            got[parts[0]] = [int(parts[1].replace(",", "")), int(parts[3].replace(",", ""))]
    total = got.pop("[TOTAL]")
    assert got == want
    assert total == [len(rows), sum(e - s for _k, s, e, _t, _i in rows)]
    doc = json.loads(case.out(host, "maddress --json").text)
    assert {(r["kind"], h(r["start"]), h(r["end"])) for r in doc["regions"]} == {(k, s, e) for k, s, e, _t, _i in rows}


def test_maddress_list(case: Case, host: str) -> None:
    text = case.out(host, "maddress -list GCHeap,Stack,NoSuchKind").text
    assert "GCHeap Memory Regions:" in text and "Stack Memory Regions:" in text
    assert "No memory regions match 'NoSuchKind'." in text
    rows = map_rows(case.out(host, "maddress").text)
    n = sum(1 for r in rows if r[0] == "Stack")
    size = sum(e - s for k, s, e, _t, _i in rows if k == "Stack")
    assert re.search(rf"^{size:,} bytes \(.*\) in {n:,} memory regions$", text, re.M)


def test_dumpasync_fields(case: Case, host: str) -> None:
    a = case.truth["async"]
    lines = case.out(host, "dumpasync --fields").text.splitlines()
    for depth, t in enumerate(a["chain"], 1):
        i = lines.index(f"{'  ' * depth}{h(t['address']):016x} {h(t['mt']):016x} (0) {t['stateMachine']}")
        tab = " " * ((depth + 4) * 2)
        assert lines[i + 1] == f"{tab}{'Address':>16} {'MT':>16} {'Type':<32} {'Value':>16} Name"
        rows = {}
        for ln in lines[i + 2:]:
            if not ln.startswith(tab) or ln.startswith(tab + " "):
                break
            parts = ln.split()
            rows[parts[-1]] = parts
        assert rows["<>1__state"][-2] == "0"
        assert h(rows["<>u__1"][1]) == h(a["taskAwaiterMt"])
    lonely = a["lonely"]
    i = lines.index(f"  {h(lonely['address']):016x} {h(lonely['mt']):016x} (0) {lonely['stateMachine']}")
    awaiting = lines[i - 1].split()[2]
    awaiter_row = next(ln.split() for ln in lines[i + 2:] if ln.split()[-1] == "<>u__1")
    assert awaiter_row[0] == awaiting and h(awaiter_row[1]) == h(a["awaiterMt"])


def test_dcq_lists_the_queued_items_in_order(case: Case, host: str) -> None:
    for q in case.truth["queues"]:
        lines = case.out(host, f"dcq {q['address']}").text.splitlines()
        assert lines[0].startswith("System.Collections.Concurrent.ConcurrentQueue")
        items = [ln for ln in lines[1:] if re.match(r"^ *\d+ - ", ln)]
        assert items == [f"{i:4} - {v}" for i, v in enumerate(q["items"], 1)]
        assert f"{len(q['items'])} items" in lines
    q = case.truth["queues"][0]
    assert json.loads(case.out(host, f"dcq {q['address']} --json").text)["items"] == q["items"]
    d = case.truth["dictionaries"][0]["address"]
    assert case.out(host, f"dcq {d}").errors[0].startswith(f"error: {d} is not a ConcurrentQueue but an instance of")
    assert case.out(host, "dcq").errors == ["error: Missing ConcurrentQueue address..."]


def test_gcroot_gcgen_says_an_older_object_survives(case: Case, host: str) -> None:
    g = case.truth["generations"]
    old = _items_of(g, 2)
    if not old:
        pytest.skip("the GC promoted no item to gen2 in this run")
    a = h(old[0])
    out = case.out(host, f"gcroot -gcgen 0 {old[0]}")
    assert out.errors == []
    assert out.text.splitlines() == [f"Object {a:x} will survive this collection:",
                                     f"    gen({a:x}) = 2 > 0 = condemned generation."]
    # A gen2 collection condemns it: the roots are gcroot's own (only the first root search of
    # the session says it caches the roots, as SOS).
    notice = "Caching GC roots, this may take a while.\nSubsequent runs of this command will be faster.\n\n"
    assert case.out(host, f"gcroot -gcgen 2 {old[0]}").text.replace(notice, "") == \
        case.out(host, f"gcroot {old[0]}").text.replace(notice, "")
    assert "Found 1 unique roots." in case.out(host, f"gcroot {old[0]}").text


def test_gcroot_gcgen_of_a_young_object_needs_a_running_gc(case: Case, host: str) -> None:
    young = _items_of(case.truth["generations"], 0)
    if not young:
        pytest.skip("no item stayed in gen0 in this run")
    errors = case.out(host, f"gcroot -gcgen 0 {young[0]}").errors
    assert len(errors) == 1 and errors[0].startswith("error: older-generation roots of a gen0 collection")


def _file_version_matches(file_version: str, runtime_version: str) -> bool:
    """10.0.1226.42308 is the file version of runtime 10.0.12 (build = patch * 100 + revision)."""
    major, minor, build, _rev = (int(x) for x in file_version.split("."))
    want = [int(x) for x in runtime_version.split(".")]
    return [major, minor, build // 100] == want[:3]


def test_eeversion_names_the_runtime_and_its_gc_mode(case: Case, host: str) -> None:
    rt = case.truth["runtime"]
    lines = case.out(host, "eeversion").text.splitlines()
    assert _file_version_matches(lines[0], rt["version"]), (lines[0], rt["version"])
    assert re.fullmatch(r"\d+\.\d+\.\d+\.\d+ @Commit: [0-9a-f]{40}", lines[1]) and lines[1].startswith(lines[0])
    assert lines[2] == (f"Server mode with {rt['processorCount']} gc heaps" if rt["serverGC"] else "Workstation mode")
    if rt["serverGC"] and not rt["env"]["DOTNET_GCName"]:
        # SOS's DATAS line (with its trailing space): the GC's own configured mode, as the debuggee
        # read it; the standalone segments GC (DOTNET_GCName) has no DATAS and SOS prints no line.
        assert case.out(host, "eeversion").text.splitlines()[3] == f"DATAS {rt['gcConfig']['GCDynamicAdaptationMode']} "
        lines = lines[:3] + lines[4:]
    assert lines[3].startswith("SOS Version: sosext ")
    doc = json.loads(case.out(host, "eeversion --json").text)
    assert (doc["version"], doc["server_gc"]) == (lines[0], rt["serverGC"])


def test_runtimes_shows_the_runtime_and_the_dac(case: Case, host: str) -> None:
    rt = case.truth["runtime"]
    lines = case.out(host, "runtimes").text.splitlines()
    assert re.fullmatch(r"#0 \.NET Core runtime (\S+) at [0-9A-F]{16} size [0-9A-F]{8}( index [0-9a-f]+)?", lines[0])
    assert _file_version_matches(lines[0].split()[4], rt["version"])
    assert lines[1] == f"    Runtime module path: {rt['runtimeDir']}/libcoreclr.so"
    assert lines[2] == f"    Runtime module directory: {rt['runtimeDir']}"
    assert lines[3] == f"    DAC: {rt['runtimeDir']}/libmscordaccore.so (trusted by its location)"
    (one,) = json.loads(case.out(host, "runtimes --json").text)["runtimes"]
    assert one["path"] == f"{rt['runtimeDir']}/libcoreclr.so" and one["base"] == "0x" + lines[0].split()[6].lower().lstrip("0")
    assert case.out(host, "runtimes -netfx").errors == ["error: -netfx: a Linux process has no desktop .NET Framework runtime"]


def test_sosstatus_and_sosflush(case: Case, host: str) -> None:
    text = case.out(host, "sosstatus").text.splitlines()
    assert text[0].startswith("Target: ") and text[1].startswith("#0 .NET Core runtime ")
    assert any(ln.startswith("Heap kernels: ") for ln in text)
    assert case.out(host, "sosflush").text.strip() == "Internal cached state reset"
    assert case.out(host, "sosstatus -reset").text.strip() == "Internal cached state reset"


def test_verifyobj_and_listnearobj(case: Case, host: str) -> None:
    g = case.truth["generations"]
    item = g["items"][0]
    a = h(item["address"])
    assert case.out(host, f"verifyobj {item['address']}").text.strip() == f"object 0x{a:x} is a valid object"
    lines = case.out(host, f"listnearobj {item['address']}").text.splitlines()
    rows = {ln.split()[0]: ln.split() for ln in lines if ln.split() and ln.split()[0].endswith(":")}
    cur = rows["Current:"]
    assert (h(cur[1]), int(cur[2].replace(",", "")), cur[4]) == (a, item["size"], g["itemType"])
    before = rows["Before:"]
    end = h(before[1]) + ((int(before[2].replace(",", "")) + 7) & ~7)
    assert end == a or "Gap:" in rows   # the object before ends where this one starts
    assert h(rows["Next:"][1]) == a + ((item["size"] + 7) & ~7) or "Gap:" in rows
    assert lines[-1] == "Heap local consistency confirmed."
    inside = f"{a + 8:x}"
    # Inside an object: SOS's corruption table (no failure), the field's bytes read as a header.
    inside_out = case.out(host, f"verifyobj {inside}")
    assert not inside_out.errors
    assert inside_out.lines[0] == f"{'Offset':<6} {'Issue':<32} Description"
    assert inside_out.lines[1].startswith(f"0x00   {'InvalidMethodTable':<32} Object {inside} has an invalid method table ")
    assert inside_out.lines[-1] == "1 error  detected."
    near = case.out(host, f"listnearobj {inside}").text.splitlines()
    assert [ln.split()[:2] for ln in near[:2]] == [["Before:", f"{a:x}"], ["Next:", rows["Next:"][1]]]
    assert case.out(host, "verifyobj").errors == ["error: Missing object address"]
