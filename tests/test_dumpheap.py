"""Acceptance of the foundation: dumpheap, eeheap -gc and gcheapstat give the exact numbers
the debuggee reports, in every host, live and on cores, under every GC flavour.

One debuggee per GC configuration builds the `heap` scenario; each host runs the same
batch of commands once (live attach, heap dump, full dump), and the tests below compare
each command's output with the debuggee's ground truth.
"""
from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field

import pytest

import drivers
import sosparse as sp
from harness import Debuggee, build_debuggee, dotnet_path

pytestmark = pytest.mark.slow

CONFIGS = [("wks", "regions"), ("svr", "regions"), ("wks", "segments"), ("svr", "segments")]
HOSTS = ["lldb-live", "lldb-heap", "lldb-full", "cli-heap"] + (["gdb-live", "gdb-heap"] if drivers.GDB else [])


@dataclass
class Case:
    truth: dict
    commands: list[str]
    outputs: dict[str, list[drivers.Output]] = field(default_factory=dict)

    def out(self, host: str, command: str) -> drivers.Output:
        return self.outputs[host][self.commands.index(command)]


def populated_types(truth: dict) -> dict[str, dict]:
    """Test types that have at least one instance on the heap (live or dead)."""
    return {k: v for k, v in truth["types"].items() if v["count"] + v["deadCount"] > 0}


def big_object_addresses(truth: dict) -> dict[str, set[int]]:
    objs = truth["objects"]
    pick = lambda *roles: {int(objs[r]["address"], 16) for r in roles if r in objs}  # noqa: E731
    return {"loh": pick("lohBytes", "lohItems", "strLong"),
            "poh": pick("pohBytes", "pohLongs", "pohStructs"),
            "foh": pick("strFrozenLiteral", "strEmpty")}


def commands_for(truth: dict) -> list[str]:
    string_mt = truth["stringMethodTable"]["mt"]
    cmds = ["dumpheap -stat",
            "dumpheap -type SosextDebuggee.",
            "dumpheap -gen gen0 -type SosextDebuggee. -stat",
            "dumpheap -gen gen1 -type SosextDebuggee. -stat",
            "dumpheap -gen gen2 -type SosextDebuggee. -stat",
            "dumpheap -gen loh -short",
            "dumpheap -gen large -short",
            "dumpheap -gen poh -short",
            "dumpheap -gen foh -short",
            f"dumpheap -mt {string_mt} -min 100000 -short",
            "dumpheap -type SosextDebuggee.HeapItemA[] -min 1000 -max 100000",
            "dumpheap -strings",
            "dumpheap -live -type SosextDebuggee. -stat",
            "dumpheap -dead -type SosextDebuggee. -stat",
            "dumpheap",
            "eeheap -gc",
            "gcheapstat",
            "dumpheap -gen xxx",
            "dumpheap -mt zzz",
            "dumpheap -foo",
            "dumpheap -bycount -type SosextDebuggee.HeapItem -stat",
            "dumpheap -stat -type SosextDebuggee. --json"]
    cmds += [f"dumpheap -mt {v['mt']}" for v in populated_types(truth).values()]
    return cmds


@pytest.fixture(scope="module", params=CONFIGS, ids=lambda c: f"{c[0]}-{c[1]}")
def case(request, tmp_path_factory) -> Case:
    drivers.require_dotnet_and_lldb()
    gc, flavor = request.param
    tfm = request.config.getoption("--tfm")
    cores = tmp_path_factory.mktemp(f"cores-{gc}-{flavor}")
    with Debuggee("heap", gc=gc, gc_flavor=flavor, tfm=tfm, dll=build_debuggee(tfm), core_dir=cores) as d:
        c = Case(d.truth, commands_for(d.truth))
        c.outputs = drivers.run_in_hosts(d, c.commands, HOSTS, cores)
    return c


@pytest.fixture(params=HOSTS)
def host(request) -> str:
    return request.param


def test_stat_counts_and_sizes_equal_truth(case: Case, host: str) -> None:
    rows = sp.stat_rows(case.out(host, "dumpheap -stat").text)
    for name, t in populated_types(case.truth).items():
        row = rows.get(int(t["mt"], 16))
        assert row is not None, f"{name} missing from dumpheap -stat"
        assert (row.count, row.total) == (t["count"] + t["deadCount"], t["unalignedSize"] + t["deadUnalignedSize"]), name
    for name, t in case.truth["types"].items():
        if t["count"] + t["deadCount"] == 0:
            assert int(t["mt"], 16) not in rows, f"{name} has no instances but is listed"


def test_stat_total_line_sums_rows(case: Case, host: str) -> None:
    text = case.out(host, "dumpheap -stat").text
    rows = sp.stat_rows(text)
    assert sp.total_line(text) == (sum(r.count for r in rows.values()), sum(r.total for r in rows.values()))
    # SOS's order: ascending total size.
    totals = [r.total for r in rows.values()]
    assert totals == sorted(totals)


def test_mt_lists_exactly_the_instances(case: Case, host: str) -> None:
    for name, t in populated_types(case.truth).items():
        out = case.out(host, f"dumpheap -mt {t['mt']}")
        rows = sp.object_rows(out.text)
        expected = {int(a, 16) for a in t["addresses"] + t["deadAddresses"]}
        assert {r.address for r in rows} == expected, name
        assert len(rows) == len(expected), name
        assert all(r.mt == int(t["mt"], 16) for r in rows), name
        sizes = dict(zip((int(a, 16) for a in t["addresses"]), t["sizes"]))
        for r in rows:
            if r.address in sizes:
                assert r.size == sizes[r.address], (name, hex(r.address))
        assert sp.stat_rows(out.text)[int(t["mt"], 16)].count == len(expected)


def test_type_filter_finds_every_test_type_and_nothing_else(case: Case, host: str) -> None:
    rows = sp.object_rows(case.out(host, "dumpheap -type SosextDebuggee.").text)
    expected = {}
    for t in populated_types(case.truth).values():
        for a in t["addresses"] + t["deadAddresses"]:
            expected[int(a, 16)] = int(t["mt"], 16)
    assert {r.address: r.mt for r in rows} == expected


def test_generation_filters(case: Case, host: str) -> None:
    big = big_object_addresses(case.truth)
    in_big_heaps = big["loh"] | big["poh"] | big["foh"]
    for gen in (0, 1, 2):
        rows = sp.stat_rows(case.out(host, f"dumpheap -gen gen{gen} -type SosextDebuggee. -stat").text)
        for name, t in populated_types(case.truth).items():
            expected = sum(1 for a, g in zip(t["addresses"], t["generations"])
                           if g == gen and int(a, 16) not in in_big_heaps)
            if gen == 0:
                expected += t["deadCount"]  # dead objects were allocated after the last GC
            got = rows.get(int(t["mt"], 16))
            assert (got.count if got else 0) == expected, (name, gen)
    loh = set(sp.short_addresses(case.out(host, "dumpheap -gen loh -short").text))
    assert loh == set(sp.short_addresses(case.out(host, "dumpheap -gen large -short").text))
    poh = set(sp.short_addresses(case.out(host, "dumpheap -gen poh -short").text))
    foh = set(sp.short_addresses(case.out(host, "dumpheap -gen foh -short").text))
    assert big["loh"] <= loh and not (big["loh"] & (poh | foh))
    assert big["poh"] <= poh and not (big["poh"] & (loh | foh))
    assert big["foh"] <= foh and not (big["foh"] & (loh | poh))


def test_min_max_filters(case: Case, host: str) -> None:
    truth = case.truth
    long_str = int(truth["objects"]["strLong"]["address"], 16)
    got = sp.short_addresses(case.out(host, f"dumpheap -mt {truth['stringMethodTable']['mt']} -min 100000 -short").text)
    assert long_str in got
    assert all(a != int(truth["objects"]["strAscii"]["address"], 16) for a in got)
    t = truth["types"]["SosextDebuggee.HeapItemA[]"]
    expected = {int(a, 16) for a, s in zip(t["addresses"], t["sizes"]) if 1000 <= s <= 100000}
    rows = sp.object_rows(case.out(host, "dumpheap -type SosextDebuggee.HeapItemA[] -min 1000 -max 100000").text)
    assert {r.address for r in rows} == expected
    assert all(1000 <= r.size <= 100000 for r in rows)


def _sos_string_cell(text: str, limit: int) -> str:
    def letter_or_digit(c: str) -> bool:
        return unicodedata.category(c)[0] == "L" or unicodedata.category(c) == "Nd"
    if all(letter_or_digit(c) for c in text):
        return text
    return "".join(c if letter_or_digit(c) or c == " " or unicodedata.category(c).startswith("P") else "."
                   for c in text[:limit])


def _sos_string_limit(stats: list[str]) -> int:
    """SOS's width for a string: 80 columns (output not to a terminal) less the Count column
    (as wide as the largest count, at least 5), a TotalSize column SOS sizes the same way (at
    least 9) and 2; at most 128."""
    counts = [int(ln.split()[0].replace(",", "")) for ln in stats if ln.strip() and ln.split()[0][0].isdigit()]
    count_len = max(len(f"{max(counts, default=0):,}"), 5)
    return min(80 - count_len - max(count_len, 9) - 2, 128)


def test_strings_statistics_show_the_debuggee_strings(case: Case, host: str) -> None:
    text = case.out(host, "dumpheap -strings").text
    listed = {r.address for r in sp.object_rows(text)}
    stats = text.split("Statistics:", 1)[1].splitlines()
    cells = {ln[30:] for ln in stats if len(ln) > 30}
    for role in ("strAscii", "strNonAscii"):
        o = case.truth["objects"][role]
        assert int(o["address"], 16) in listed, role
        assert _sos_string_cell(o["value"], _sos_string_limit(stats)) in cells, role


def test_live_and_dead_counts(case: Case, host: str) -> None:
    live = sp.stat_rows(case.out(host, "dumpheap -live -type SosextDebuggee. -stat").text)
    dead = sp.stat_rows(case.out(host, "dumpheap -dead -type SosextDebuggee. -stat").text)
    for name, t in populated_types(case.truth).items():
        mt = int(t["mt"], 16)
        assert (live[mt].count if mt in live else 0) == t["count"], name
        assert (dead[mt].count if mt in dead else 0) == t["deadCount"], name


def test_eeheap_totals_are_tiled_by_the_walk(case: Case, host: str) -> None:
    """Every byte of every segment's object range is an object dumpheap walked, except
    allocation contexts; and the segment rows add up to the total line."""
    ee = case.out(host, "eeheap -gc").text
    segs = sp.eeheap_segments(ee)
    assert sum(s.allocated - s.begin for s in segs) == sp.eeheap_total(ee, "Allocated")
    expected_heaps = case.truth["runtime"]["processorCount"] if case.truth["runtime"]["serverGC"] else 1
    assert f"Number of GC Heaps: {expected_heaps}" in ee
    env = case.truth["runtime"]["env"]
    if case.truth["runtime"]["serverGC"] and not env["DOTNET_GCName"]:
        # The harness turns DATAS off for server GC; the segments GC (libclrgc.so) has none (blank).
        assert f"DATAS = {case.truth['runtime']['env']['DOTNET_GCDynamicAdaptationMode']}" in ee.splitlines()
    objects = sorted(sp.object_rows(case.out(host, "dumpheap").text), key=lambda r: r.address)
    starts = [o.address for o in objects]
    import bisect
    holes = []
    for s in segs:
        i = bisect.bisect_left(starts, s.begin)
        pos = s.begin
        while i < len(objects) and objects[i].address < s.allocated:
            o = objects[i]
            if o.address != pos:
                holes.append(o.address - pos)
            pos = o.address + ((o.size + 7) & ~7)
            i += 1
        if pos != s.allocated:
            holes.append(s.allocated - pos)
    walked = sum((o.size + 7) & ~7 for o in objects)
    assert walked + sum(holes) == sp.eeheap_total(ee, "Allocated")
    # The only holes are allocation contexts: a few, each at least a minimum object.
    assert len(holes) <= 2 * len(case.truth["threads"]) + 8
    assert all(h >= 24 for h in holes)


def test_gcheapstat_matches_eeheap(case: Case, host: str) -> None:
    text = case.out(host, "gcheapstat").text
    total = next(ln for ln in text.splitlines() if ln.startswith("Total"))
    allocated = sum(int(x) for x in total.split()[1:6])
    ee = case.out(host, "eeheap -gc").text
    non_frozen = sum(s.allocated - s.begin for s in sp.eeheap_segments(ee) if s.section != "NonGC heap")
    assert allocated == non_frozen
    free = sp.stat_rows(case.out(host, "dumpheap -stat").text)
    free_total = sum(r.total for r in free.values() if r.name == "Free")
    free_lines = text.split("Free space:")[1].splitlines()
    free_row = next(ln for ln in free_lines if ln.startswith("Total"))
    frozen_free = 0  # the NonGC heap holds no free objects
    assert sum(int(x) for x in free_row.split()[1:6]) + frozen_free == free_total


def test_bad_options_give_one_line_and_the_host_keeps_working(case: Case, host: str) -> None:
    gen = case.out(host, "dumpheap -gen xxx")
    assert gen.errors == ["error: Unknown generation: xxx. Only gen0, gen1, gen2, loh (large), poh (pinned) "
                          "and foh (frozen) are supported"]
    assert case.out(host, "dumpheap -mt zzz").errors == ["error: Invalid MethodTable: zzz"]
    assert len(case.out(host, "dumpheap -foo").errors) == 1
    # The command after the bad ones ran normally.
    assert sp.stat_rows(case.out(host, "dumpheap -bycount -type SosextDebuggee.HeapItem -stat").text)


def test_stat_json(case: Case, host: str) -> None:
    import json
    doc = json.loads(case.out(host, "dumpheap -stat -type SosextDebuggee. --json").text)
    by_mt = {int(t["mt"], 16): t for t in doc["types"]}
    for name, t in populated_types(case.truth).items():
        row = by_mt[int(t["mt"], 16)]
        assert (row["count"], row["total_size"]) == (t["count"] + t["deadCount"],
                                                     t["unalignedSize"] + t["deadUnalignedSize"]), name
    assert doc["total_objects"] == sum(t["count"] for t in doc["types"])


def test_bycount_sorts_by_count(case: Case, host: str) -> None:
    text = case.out(host, "dumpheap -bycount -type SosextDebuggee.HeapItem -stat").text
    counts = [r.count for r in sp.stat_rows(text).values()]
    assert counts == sorted(counts) and len(counts) >= 5


def test_hosts_print_the_same_text_for_the_same_core(case: Case) -> None:
    hosts = [h for h in ("lldb-heap", "cli-heap", "gdb-heap") if h in case.outputs]
    for i, cmd in enumerate(case.commands):
        texts = {h: case.outputs[h][i].text for h in hosts}
        first = texts[hosts[0]]
        for h in hosts[1:]:
            assert texts[h] == first, f"{cmd!r}: {hosts[0]} and {h} differ"


def test_eeheap_reports_datas_on(tmp_path) -> None:
    """Server GC with DATAS (dynamic heap count) on, as .NET 9+ defaults it."""
    if dotnet_path() is None:
        pytest.skip("dotnet is not on PATH: no debuggee can be built")
    with Debuggee("heap", gc="svr", datas=True, dll=build_debuggee(), core_dir=tmp_path) as d:
        core = d.write_core("heap", tmp_path / "heap.core")
    ee = drivers.run_cli(["eeheap -gc"], core=core)[0]
    assert "DATAS = 1" in ee.lines
