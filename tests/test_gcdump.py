"""sosext gcdump / gcdump-stat / diff over EventPipe heap snapshots, checked against the
debuggee's own counts of live instances per MethodTable (tests/debuggees scenario `heap`)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sosext.clr.snapshots.gcdumpsnap import GcDump, GcDumpError
from sosext.clr.typesystem.typekeys import key
from test_typenames import ask, oracle  # noqa: F401 - ClrMD's names, the second opinion (a fixture)

REPO = Path(__file__).resolve().parents[1]
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def sosext(*args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-m", "sosext", *args], cwd=REPO, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode != 0, proc.stdout
    lines = proc.stderr.strip().splitlines()
    errors = [ln for ln in lines if ln.startswith("error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], proc.stderr
    return errors[0]


@pytest.fixture(params=["wks", "svr"])
def heap_dump(request, debuggee_factory, tmp_path):  # type: ignore[no-untyped-def]
    d = debuggee_factory("heap", gc=request.param)
    path = tmp_path / "heap.gcdump.npz"
    proc = sosext("gcdump", str(d.pid), "-o", str(path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Wrote ") and proc.stdout.strip().endswith(f" to {path}")
    return d, path


@pytest.mark.slow
def test_counts_and_sizes_equal_truth(heap_dump, oracle) -> None:  # type: ignore[no-untyped-def]
    d, path = heap_dump
    assert (os.stat(path).st_mode & 0o777) == 0o600
    dump = GcDump.load(str(path))
    assert dump.pid == d.pid
    stats = {s.type_id: s for s in dump.stats()}
    checked = 0
    for name, t in d.truth["types"].items():
        mt = int(t["mt"], 16)
        # The dump's GC collected the garbage: only live instances are reported.
        if t["count"] == 0:
            assert mt not in stats, f"{name} has no live instances but is listed"
            continue
        assert mt in stats, f"{name} missing"
        assert (stats[mt].count, stats[mt].size) == (t["count"], t["unalignedSize"]), name
        # The runtime names a nested type without its enclosing type (Dictionary`2+Entry[...] -> Entry[...]).
        if "+" in name.split("[")[0]:
            assert name.endswith("+" + stats[mt].event_name), (name, stats[mt].event_name)
        else:
            assert stats[mt].event_name == name
        # Shown in C#'s spelling, as a core's types are (typekeys.key: without the enclosing types).
        assert stats[mt].name == key(name) and "`" not in stats[mt].name, (name, stats[mt].name)
        checked += 1
    assert checked >= 10
    # ClrMD names the same MethodTables (on a core of the process): the snapshot shows its names
    # with a nested type's enclosing types left out, as the events leave them out.
    clrmd = {int(mt, 16): n for mt, n in (ln.split("\t", 1) for ln in
                                          ask(oracle, "heap", str(d.write_core("heap"))).splitlines())}
    differ = {f"{s.type_id:x}": (s.name, clrmd[s.type_id]) for s in stats.values()
              if s.type_id in clrmd and s.name != key(clrmd[s.type_id])}
    assert not differ, differ
    assert sum(s.type_id in clrmd for s in stats.values()) >= 20
    # References: every node's edge count adds up, and the static root holds a node.
    assert int(dump.node_edges.sum()) == dump.edge_target.size
    assert dump.root_address.size > 0
    assert np.isin(dump.root_address, dump.node_address).sum() > 0


@pytest.mark.slow
def test_gcdump_stat_prints_the_snapshot(heap_dump) -> None:  # type: ignore[no-untyped-def]
    d, path = heap_dump
    proc = sosext("gcdump-stat", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    by_mt = {int(t["mt"], 16): t for t in doc["types"]}
    for name, t in d.truth["types"].items():
        if t["count"]:
            row = by_mt[int(t["mt"], 16)]
            assert (row["count"], row["size"]) == (t["count"], t["unalignedSize"])
            assert row["name"] == key(name)
    assert doc["total_objects"] == sum(t["count"] for t in doc["types"])

    text = sosext("gcdump-stat", str(path), "-type", "SosextDebuggee.HeapItemA").stdout.splitlines()
    assert text[1] == "Statistics:" and text[2].split() == ["MT", "Count", "TotalSize", "Class", "Name"]
    t = d.truth["types"]["SosextDebuggee.HeapItemA"]
    row = next(line for line in text if line.endswith(" SosextDebuggee.HeapItemA"))
    assert row.split() == [f"{int(t['mt'], 16):012x}", f"{t['count']:,}", f"{t['unalignedSize']:,}",
                           "SosextDebuggee.HeapItemA"]
    # The analyzer takes a snapshot where it takes a core, for what a snapshot holds.
    analyzed = sosext("analyze", str(path), "-c", "dumpheap -stat -type SosextDebuggee.HeapItemA")
    assert analyzed.returncode == 0 and analyzed.stdout.splitlines() == text
    refused = sosext("analyze", str(path), "-c", f"dumpobj {t['addresses'][0]}")
    assert one_line_error(refused) == (
        f"error: dumpobj: {path} is a gcdump snapshot (types, sizes and references only, no memory, fields "
        "or stacks): it answers dumpheap -stat [-type T] [--json]; compare two with 'sosext diff' or 'sosext leaks'")


@pytest.mark.slow
def test_diff_of_two_snapshots_sees_the_growth(debuggee_factory, tmp_path) -> None:  # type: ignore[no-untyped-def]
    d = debuggee_factory("counters")
    kept0 = d.truth["counters"]["kept"]
    old, new = tmp_path / "old.gcdump.npz", tmp_path / "new.gcdump.npz"
    assert sosext("gcdump", str(d.pid), "-o", str(old)).returncode == 0
    assert d.command("grow 5000") == f"SOSEXT-GROWN {kept0 + 5000}"
    assert sosext("gcdump", str(d.pid), "-o", str(new)).returncode == 0
    o, n = GcDump.load(str(old)), GcDump.load(str(new))
    block = next(s for s in n.stats() if s.name == "DebuggeeHost.CounterBlock")
    assert block.count == kept0 + 5000
    assert next(s for s in o.stats() if s.name == "DebuggeeHost.CounterBlock").count == kept0

    proc = sosext("diff", str(old), str(new), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    rows = {r["name"]: r for r in doc["types"]}
    cb = rows["DebuggeeHost.CounterBlock"]
    assert (cb["old_count"], cb["new_count"], cb["count_delta"]) == (kept0, kept0 + 5000, 5000)
    assert cb["size_delta"] == 5000 * (block.size // block.count)
    assert rows["System.Byte[]"]["count_delta"] >= 5000  # each block keeps a byte[1024]

    # Who holds the growth: the debuggee keeps every block in its static List<CounterBlock> s_kept.
    proc = sosext("leaks", str(old), str(new), "-top", "1", "-type", "DebuggeeHost.CounterBlock", "--json")
    assert proc.returncode == 0, proc.stderr
    (grown,) = json.loads(proc.stdout)["types"]
    assert grown["name"] == "DebuggeeHost.CounterBlock" and grown["count_delta"] == 5000
    top = grown["groups"][0]
    assert top["root"] == "static s_kept" and top["count"] == kept0 + 5000
    assert top["path"] == ["System.Collections.Generic.List<DebuggeeHost.CounterBlock>",
                           "DebuggeeHost.CounterBlock[]", "DebuggeeHost.CounterBlock"]
    assert grown["unreachable_instances"] == 0
    text = sosext("leaks", str(old), str(new), "-top", "1", "-type", "DebuggeeHost.CounterBlock").stdout
    assert f"  {kept0 + 5000:,} objects, {block.size:,} bytes, held by static s_kept:\n" in text

    text = sosext("diff", str(old), str(new), "-top", "3").stdout.splitlines()
    assert text[0] == f"Heap growth from gcdump {old} to gcdump {new}:"
    assert any(line.endswith("DebuggeeHost.CounterBlock") and "+5,000" in line for line in text[2:5])


def test_bad_input(tmp_path) -> None:  # type: ignore[no-untyped-def]
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        line = one_line_error(sosext("gcdump", str(sleeper.pid), "-o", str(tmp_path / "x.npz")))
        assert line.startswith(f"error: process {sleeper.pid} has no diagnostics socket")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not (tmp_path / "x.npz").exists()
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"PK\x03\x04meta.npy" + b"\0" * 100)
    assert one_line_error(sosext("gcdump-stat", str(junk))).startswith(f"error: {junk} is not a sosext gcdump")
    core_like = tmp_path / "core"
    core_like.write_bytes(b"\x7fELF" + b"\0" * 100)
    assert one_line_error(sosext("gcdump-stat", str(core_like))) == f"error: {core_like} is not a sosext gcdump snapshot"
    assert one_line_error(sosext("gcdump-stat", str(tmp_path / "none"))).startswith("error: cannot read")
    assert one_line_error(sosext("gcdump-stat", str(tmp_path))) == f"error: not a gcdump snapshot: {tmp_path} is a directory"
    tiny = _tiny_dump(tmp_path)
    # A snapshot compares with a core, either way round: a broken core is one line, whichever side it is.
    assert one_line_error(sosext("diff", str(tiny), str(core_like))) == (
        f"error: unsupported core file: {core_like} (only 64-bit little-endian ELF is supported)")
    assert one_line_error(sosext("diff", str(core_like), str(tiny))) == (
        f"error: baseline {core_like}: unsupported core file: {core_like} (only 64-bit little-endian ELF is supported)")
    with pytest.raises(GcDumpError):
        GcDump.load(str(junk))


@pytest.mark.slow
def test_existing_output_is_not_overwritten(debuggee_factory, tmp_path) -> None:  # type: ignore[no-untyped-def]
    d = debuggee_factory("counters")
    target = tmp_path / "exists.npz"
    target.write_text("keep me")
    assert one_line_error(sosext("gcdump", str(d.pid), "-o", str(target))) == (
        f"error: {target} exists; choose another name (snapshots are never overwritten)")
    assert target.read_text() == "keep me"
    link = tmp_path / "link.npz"
    link.symlink_to(tmp_path / "elsewhere")
    assert one_line_error(sosext("gcdump", str(d.pid), "-o", str(link))).startswith(f"error: {link} exists")
    assert not (tmp_path / "elsewhere").exists()


def _tiny_dump(tmp_path) -> Path:  # type: ignore[no-untyped-def]
    dump = GcDump(1, 0.0, "10.0.0", 8, 3, [0x1000, 0x2000], ["A", "B[]"],
                  np.array([0x10, 0x20, 0x30], dtype=np.uint64), np.array([24, 32, 24], dtype=np.uint64),
                  np.array([0, 1, 0], dtype=np.uint32), np.array([1, 2, 0], dtype=np.uint32),
                  np.array([0x20, 0x10, 0x30], dtype=np.uint64), np.array([0x20], dtype=np.uint64),
                  np.array([6], dtype=np.uint8), {0: "s_root"})
    path = tmp_path / "tiny.gcdump.npz"
    dump.save(str(path))
    return path


def test_format_round_trip_and_retention(tmp_path) -> None:  # type: ignore[no-untyped-def]
    back = GcDump.load(str(_tiny_dump(tmp_path)))
    assert [(s.name, s.count, s.size) for s in back.stats()] == [("B[]", 1, 32), ("A", 2, 48)]
    assert back.edges_of(1).tolist() == [0x10, 0x30] and back.edges_of(2).tolist() == []
    assert back.root_names == {0: "s_root"}
    # handle -> B[] @0x20 -> A @0x10 (-> B[]) and A @0x30
    groups, n, unreached = back.retention("A", exact=True)
    assert (n, unreached) == (1, 0)
    assert (groups[0].root, groups[0].types, groups[0].count, groups[0].size) == ("static s_root", ("B[]", "A"), 2, 48)


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_damaged_snapshot_is_one_line_error(tmp_path, data) -> None:  # type: ignore[no-untyped-def]
    raw = bytearray(_TINY.get("raw") or b"")
    if not raw:
        (tmp_path / "src").mkdir(exist_ok=True)
        raw = bytearray(_tiny_dump(tmp_path / "src").read_bytes())
        _TINY["raw"] = bytes(raw)
    if data.draw(st.booleans()):
        raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
    else:
        for _ in range(data.draw(st.integers(1, 6))):
            raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    path = tmp_path / "damaged.npz"
    path.write_bytes(bytes(raw))
    try:
        GcDump.load(str(path)).stats()
    except GcDumpError as exc:
        assert "\n" not in str(exc)


_TINY: dict[str, bytes] = {}


@pytest.mark.slow
def test_a_core_and_a_snapshot_compare_both_ways(debuggee_factory, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """diff/leaks take a gcdump snapshot where they take a core: the core's side counts its
    live objects (what the snapshot's GC leaves), and type names are matched across the two
    spellings (the DAC's List`1[[T, Asm]] and the events' List`1[T]), both shown in C#'s."""
    d = debuggee_factory("counters")
    kept0 = d.truth["counters"]["kept"]
    first = d.write_core("heap", tmp_path / "first.core")
    assert d.command("grow 5000") == f"SOSEXT-GROWN {kept0 + 5000}"
    middle = tmp_path / "middle.gcdump.npz"
    assert sosext("gcdump", str(d.pid), "-o", str(middle)).returncode == 0
    assert d.command("grow 3000") == f"SOSEXT-GROWN {kept0 + 8000}"
    last = d.write_core("heap", tmp_path / "last.core")
    block = next(s for s in GcDump.load(str(middle)).stats() if s.name == "DebuggeeHost.CounterBlock")
    each = block.size // block.count
    lists = "System.Collections.Generic.List<DebuggeeHost.CounterBlock>"  # static List<CounterBlock> s_kept

    for old, new, before, after in ((first, middle, kept0, kept0 + 5000), (middle, last, kept0 + 5000, kept0 + 8000)):
        proc = sosext("diff", str(old), str(new), "--json")
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        assert doc["note"].startswith("A core compared with a gcdump snapshot: the core counts only the objects")
        rows = {r["name"]: r for r in doc["types"]}
        cb = rows["DebuggeeHost.CounterBlock"]
        assert (cb["old_count"], cb["new_count"], cb["size_delta"]) == (before, after, (after - before) * each)
        text = sosext("diff", str(old), str(new), "-type", "CounterBlock").stdout.splitlines()
        assert text[1] == doc["note"]
        # The List<CounterBlock> is the same object on both sides, whichever spelling each side read.
        same = [r for r in doc["types"] if "CounterBlock>" in r["name"]]
        assert len(same) == 1 and (same[0]["old_count"], same[0]["new_count"]) == (1, 1), same
        assert same[0]["name"] == lists
        assert not [r["name"] for r in doc["types"] if "`" in r["name"]]

    # leaks: with the snapshot newer, its own retention paths; with the core newer, the core's.
    doc = json.loads(sosext("leaks", str(first), str(middle), "-top", "1", "-type", "DebuggeeHost.CounterBlock",
                            "--json").stdout)
    (grown,) = doc["types"]
    assert grown["count_delta"] == 5000 and grown["groups"][0]["root"] == "static s_kept"
    assert grown["groups"][0]["count"] == kept0 + 5000
    proc = sosext("leaks", str(middle), str(last), "-top", "1", "-type", "DebuggeeHost.CounterBlock", "--json")
    assert proc.returncode == 0, proc.stderr
    (grown,) = json.loads(proc.stdout)["types"]
    assert grown["count_delta"] == 3000 and grown["new_count"] == kept0 + 8000
    assert grown["groups"][0]["count"] == kept0 + 8000

    # report: a snapshot's report, against a core as the baseline, and a core's against a snapshot.
    for target, baseline, delta in ((middle, first, 5000), (last, middle, 3000)):
        proc = sosext("report", str(target), "--baseline", str(baseline), "--format", "json")
        assert proc.returncode == 0, proc.stderr
        rows = {t["name"]: t for t in json.loads(proc.stdout)["types"]}
        assert rows["DebuggeeHost.CounterBlock"]["count_delta"] == delta
        assert rows[lists]["count_delta"] == 0
        assert not [n for n in rows if "`" in n]


@pytest.mark.slow
def test_report_of_a_snapshot_retains_what_the_debuggee_computed(debuggee_factory, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The dominator tree over a snapshot's references: every object the `retained` scenario
    describes retains exactly the bytes it computed, under the dominator it built."""
    from sosext.report.snapshot import _Graph
    d = debuggee_factory("retained")
    path = tmp_path / "retained.gcdump.npz"
    assert sosext("gcdump", str(d.pid), "-o", str(path)).returncode == 0
    dump = GcDump.load(str(path))
    g = _Graph(dump)
    objects = [o for o in d.truth["retained"]["objects"] if o["name"].startswith(("tree", "left", "right", "shared",
                                                                                     "leaf", "ring"))]
    assert len(objects) >= 12
    rows = g.rows_of(np.array([int(o["address"], 16) for o in objects], dtype=np.uint64))
    for o, row in zip(objects, rows.tolist()):
        assert row >= 0, o["name"]
        assert int(g.retained[row]) == o["retained"], o["name"]
        if o["idom"] is not None:
            assert int(dump.node_address[g.idom[row]]) == int(o["idom"], 16), o["name"]
    proc = sosext("report", str(path), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    tree = next(o for o in objects if o["name"] == "tree")
    row = next(t for t in doc["types"] if t["name"] == tree["type"])
    assert (row["count"], row["retained"]) == (1, tree["retained"])
    assert doc["summary"]["note"].startswith("A gcdump snapshot:")
    html = tmp_path / "r.html"
    proc = sosext("report", str(path), "-o", str(html))
    assert proc.returncode == 0 and proc.stdout.startswith(f"Wrote {html}: ") and "A gcdump snapshot:" in html.read_text()
