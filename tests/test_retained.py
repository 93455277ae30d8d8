"""Retained sizes and dominators against a heap of known shape: the debuggee's `retained`
scenario computes every object's retained size and immediate dominator itself, from the
runtime's own object sizes, and prints them; `retained`, `dominators` and
`dumpheap -stat -retained` must give exactly those numbers, on a core and live, in the CLI
and the debuggers. The shapes: two branches sharing a subgraph (retained by neither
branch), a cycle, a value kept only by a dependent handle (ConditionalWeakTable), and an
object only the finalizer queue holds.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

import drivers
from harness import Debuggee, build_debuggee

pytestmark = pytest.mark.slow

CONFIGS = [("wks", "regions"), ("svr", "segments")]
HOSTS = ["cli-heap", "lldb-live"] + (["gdb-heap", "gdb-live"] if drivers.GDB else [])
NS = "SosextDebuggee.Retained."


@dataclass
class Case:
    truth: dict
    commands: list[str]
    outputs: dict[str, list[drivers.Output]] = field(default_factory=dict)

    def out(self, host: str, command: str) -> drivers.Output:
        return self.outputs[host][self.commands.index(command)]


def commands_for(t: dict) -> list[str]:
    fin = t["finalizerOnly"]
    return ([f"retained {o['address']} --json" for o in t["objects"]]
            + [f"retained {fin['holder']} --json", f"retained {fin['target']} --json",
               f"retained {by_name(t, 'left')['address']}", f"retained {fin['holder']}",
               f"dumpheap -stat -retained -type {NS} --json", f"dumpheap -stat -retained -type {NS}",
               f"dominators -type {NS}RetRing -top 2 --json", f"dominators -type {NS}RetRing -top 1"])


def by_name(t: dict, name: str) -> dict:
    return next(o for o in t["objects"] if o["name"] == name)


@pytest.fixture(scope="module", params=CONFIGS, ids=lambda c: f"{c[0]}-{c[1]}")
def case(request, tmp_path_factory) -> Case:
    drivers.require_dotnet_and_lldb()
    gc, flavor = request.param
    tfm = request.config.getoption("--tfm")
    cores = tmp_path_factory.mktemp(f"retained-{gc}-{flavor}")
    with Debuggee("retained", gc=gc, gc_flavor=flavor, tfm=tfm, dll=build_debuggee(tfm), core_dir=cores) as d:
        truth = d.truth["retained"]
        c = Case(truth, commands_for(truth))
        c.outputs = drivers.run_in_hosts(d, c.commands, HOSTS, cores)
    return c


@pytest.fixture(params=HOSTS)
def host(request) -> str:
    return request.param


def doc(out: drivers.Output) -> dict:
    text = out.text
    assert not out.errors, text
    return json.loads(text[text.index("{"):text.rindex("}") + 1])


def test_every_object_retains_exactly_what_the_debuggee_computed(case: Case, host: str) -> None:
    for o in case.truth["objects"]:
        d = doc(case.out(host, f"retained {o['address']} --json"))
        assert d["reachable"] and d["name"] == o["type"]
        assert (d["size"], d["retained"]) == (o["size"], o["retained"]), o["name"]
        chain = d["chain"]
        assert int(chain[0]["address"], 16) == int(o["address"], 16)
        assert chain[0]["retained"] == o["retained"]
        if o["idom"] is not None:
            assert int(chain[1]["address"], 16) == int(o["idom"], 16), o["name"]
        # every step up the chain retains at least as much
        assert all(a["retained"] <= b["retained"] for a, b in zip(chain, chain[1:]))


def test_shared_subgraph_belongs_to_the_common_dominator(case: Case, host: str) -> None:
    shared = by_name(case.truth, "shared")
    tree = by_name(case.truth, "tree")
    d = doc(case.out(host, f"retained {shared['address']} --json"))
    assert int(d["chain"][1]["address"], 16) == int(tree["address"], 16)
    for branch in ("left", "right"):
        b = by_name(case.truth, branch)
        assert b["retained"] < shared["retained"] + b["size"]  # the branch does not retain the shared part
        assert doc(case.out(host, f"retained {b['address']} --json"))["retained"] == b["retained"]


def test_tops_are_named_by_their_statics(case: Case, host: str) -> None:
    statics = case.truth["statics"]
    for name, obj in (("tree", "tree"), ("ring", "ring0"), ("key", "key")):
        d = doc(case.out(host, f"retained {by_name(case.truth, obj)['address']} --json"))
        assert d["top_is_root"]
        kinds = {h["kind"] for h in d["held_by"]}
        assert kinds == {"handle"}
        assert d["held_by"][0]["root"].startswith(f"static {statics[name]} ("), d["held_by"]


def test_dependent_handle_value_is_retained_by_its_key(case: Case, host: str) -> None:
    key, value = by_name(case.truth, "key"), by_name(case.truth, "value")
    d = doc(case.out(host, f"retained {value['address']} --json"))
    assert int(d["chain"][1]["address"], 16) == int(key["address"], 16)
    assert d["chain"][1]["retained"] == key["retained"]


def test_finalizer_queue_holds_its_object(case: Case, host: str) -> None:
    fin = case.truth["finalizerOnly"]
    d = doc(case.out(host, f"retained {fin['holder']} --json"))
    assert d["retained"] == fin["holderRetained"]
    assert len(d["chain"]) == 1 and d["top_is_root"]
    assert [(h["kind"], h["root"]) for h in d["held_by"]] == [("finalizer", "finalizer queue")]
    d = doc(case.out(host, f"retained {fin['target']} --json"))
    assert d["retained"] == fin["targetRetained"]
    assert [int(c["address"], 16) for c in d["chain"]] == [int(fin["target"], 16), int(fin["holder"], 16)]
    text = case.out(host, f"retained {fin['holder']}").text
    assert f"retains {fin['holderRetained']:,} bytes" in text
    assert "Held by: finalizer queue [finalizer " in text


def expected_types(t: dict) -> dict[str, tuple[int, int, int]]:
    """(count, shallow, retained) per scenario type: retained counts an object only when its
    immediate dominator is of another type."""
    addr_type = {int(o["address"], 16): o["type"] for o in t["objects"]}
    out: dict[str, list[int]] = {}
    for o in t["objects"]:
        if not o["type"].startswith(NS):
            continue
        acc = out.setdefault(o["type"], [0, 0, 0])
        acc[0] += 1
        acc[1] += o["size"]
        if o["idom"] is None or addr_type.get(int(o["idom"], 16)) != o["type"]:
            acc[2] += o["retained"]
    fin = t["finalizerOnly"]
    out[NS + "RetFinalHolder"] = [1, fin["holderRetained"] - fin["targetRetained"], fin["holderRetained"]]
    return {k: tuple(v) for k, v in out.items()}


def test_dumpheap_stat_retained(case: Case, host: str) -> None:
    rows = {r["name"]: r for r in doc(case.out(host, f"dumpheap -stat -retained -type {NS} --json"))["types"]}
    want = expected_types(case.truth)
    for name, (count, shallow, retained) in want.items():
        assert (rows[name]["count"], rows[name]["total_size"], rows[name]["retained_size"]) == \
            (count, shallow, retained), name
    fin = case.truth["finalizerOnly"]
    assert rows[NS + "RetFinalTarget"]["retained_size"] == fin["targetRetained"]
    # sorted by retained size, largest last
    sizes = [r["retained_size"] for r in doc(case.out(host, f"dumpheap -stat -retained -type {NS} --json"))["types"]]
    assert sizes == sorted(sizes)
    text = case.out(host, f"dumpheap -stat -retained -type {NS}").lines
    assert "RetainedSize" in text[1].split()
    ring = next(ln for ln in text if ln.endswith(NS + "RetRing")).split()
    assert [int(x.replace(",", "")) for x in ring[1:4]] == list(want[NS + "RetRing"])


def test_dominators_ranks_the_cycle_head_first(case: Case, host: str) -> None:
    objs = doc(case.out(host, f"dominators -type {NS}RetRing -top 2 --json"))["objects"]
    r0, r1 = by_name(case.truth, "ring0"), by_name(case.truth, "ring1")
    assert [(int(o["address"], 16), o["retained"]) for o in objs] == \
        [(int(r0["address"], 16), r0["retained"]), (int(r1["address"], 16), r1["retained"])]
    assert objs[0]["held_by"][0]["root"].startswith(f"static {case.truth['statics']['ring']} (")
    text = case.out(host, f"dominators -type {NS}RetRing -top 1").text
    assert f"{int(r0['address'], 16):x} ({NS}RetRing) retains {r0['retained']:,} bytes:" in text


def test_retained_text(case: Case, host: str) -> None:
    left, tree = by_name(case.truth, "left"), by_name(case.truth, "tree")
    lines = case.out(host, f"retained {left['address']}").lines
    assert lines[0] == f"{int(left['address'], 16):x} ({NS}RetBranch) retains {left['retained']:,} bytes " \
                       f"(its own size {left['size']:,})"
    rows = [ln.split() for ln in lines[1:] if ln.split()[:1] and ln.split()[0] in
            (f"{int(left['address'], 16):x}", f"{int(tree['address'], 16):x}")]
    assert [int(r[3].replace(",", "")) for r in rows] == [left["retained"], tree["retained"]]
    assert any(ln.startswith(f"Held by: static {case.truth['statics']['tree']} (") for ln in lines)
