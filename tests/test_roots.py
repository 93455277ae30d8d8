"""Acceptance of "who keeps it alive": gcroot prints the exact chains the debuggee built, with
the right root kind, for the three classic leaks and every root kind; liveness counts equal
the truth; objsize, gchandles, finalizequeue, dso and verifyheap agree with it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import pytest

import drivers
import sosparse as sp
from harness import Debuggee, build_debuggee

pytestmark = pytest.mark.slow

CONFIGS = [("wks", "regions"), ("svr", "segments")]
HOSTS = ["lldb-live", "lldb-heap", "cli-heap"] + (["gdb-live", "gdb-heap"] if drivers.GDB else [])


@dataclass
class Case:
    truth: dict
    commands: list[str]
    outputs: dict[str, list[drivers.Output]] = field(default_factory=dict)

    def out(self, host: str, command: str) -> drivers.Output:
        return self.outputs[host][self.commands.index(command)]


def commands_for(t: dict) -> list[str]:
    return [
        f"gcroot {t['cacheLeak']['chain'][-1]}",
        f"gcroot {t['customerLeak']['chain'][-1]}",
        f"gcroot {t['wrapperLeak']['chain'][-1]}",
        f"gcroot {t['namedLocal']['address']}",
        f"gcroot {t['pinned']['object']}",
        f"gcroot {t['weak']['object']}",
        f"gcroot {t['dependent']['secondary']}",
        f"gcroot {t['finalizerOnly']['target']}",
        f"gcroot {t['genericStatic']['address']}",
        f"gcroot {t['exception']['address']}",
        f"gcroot -nostacks {t['namedLocal']['address']}",
        f"gcroot -limit 1 {t['cacheLeak']['chain'][-1]}",
        f"gcroot -limit 2 {t['cacheLeak']['chain'][-1]}",
        f"gcroot -limit 1 {t['wrapperLeak']['chain'][-1]}",
        f"gcroot -limit 1 {t['dependent']['secondary']}",
        f"gcroot -limit 1 {t['longChain']['tail']}",
        f"gcroot {t['longChain']['tail']}",
        f"gcroot -shortest {t['cacheLeak']['chain'][-1]}",
        f"gcroot -shortest {t['customerLeak']['chain'][-1]}",
        f"gcroot --json {t['wrapperLeak']['chain'][-1]}",
        "dumpheap -live -type SosextDebuggee. -stat",
        "dumpheap -dead -type SosextDebuggee. -stat",
        f"objsize {t['cacheLeak']['worker']}",
        f"objsize -stat {t['wrapperLeak']['chain'][0]}",
        "gchandles",
        "finalizequeue -allReady -short",
        f"dso {t['namedLocal']['thread']['osTid']:#x}",
        "verifyheap",
        "dumpheap -thinlock",
        "gcroot 10",
        f"gcroot {int(t['wrapperLeak']['chain'][0], 16) + 8:x}",
        "gcroot",
        "gcroot 0",
    ]


@pytest.fixture(scope="module", params=CONFIGS, ids=lambda c: f"{c[0]}-{c[1]}")
def case(request, tmp_path_factory) -> Case:
    drivers.require_dotnet_and_lldb()
    gc, flavor = request.param
    tfm = request.config.getoption("--tfm")
    cores = tmp_path_factory.mktemp(f"roots-{gc}-{flavor}")
    with Debuggee("roots", gc=gc, gc_flavor=flavor, tfm=tfm, dll=build_debuggee(tfm), core_dir=cores) as d:
        c = Case(d.truth, commands_for(d.truth))
        c.outputs = drivers.run_in_hosts(d, c.commands, HOSTS, cores)
    return c


@pytest.fixture(params=HOSTS)
def host(request) -> str:
    return request.param


@dataclass
class Root:
    header: list[str]  # section / thread / frame / handle lines
    chain: list[tuple[int, str, str]]  # (address, type, extra)


CHAIN = re.compile(r"^ {10}-> ([0-9a-f]+) +(\S+)(?: (.*))?$")


def parse_gcroot(text: str) -> tuple[list[Root], int]:
    roots: list[Root] = []
    header: list[str] = []
    chain: list[tuple[int, str, str]] = []
    for ln in text.splitlines():
        m = CHAIN.match(ln)
        if m:
            chain.append((int(m.group(1), 16), m.group(2), (m.group(3) or "").strip()))
        elif not ln.strip():
            if chain:
                roots.append(Root(header, chain))
            header, chain = [], []
        elif ln.startswith("Found "):
            n = int(re.match(r"Found ([\d,]+) unique roots\.", ln).group(1).replace(",", ""))
            return roots, n
        else:
            header.append(ln)
    raise AssertionError(f"no 'Found N unique roots.' line in:\n{text}")


def addrs(values: list[str]) -> list[int]:
    return [int(v, 16) for v in values]


def gcroot(case: Case, host: str, address: str, opts: str = "") -> tuple[list[Root], int]:
    roots, n = parse_gcroot(case.out(host, f"gcroot {opts}{address}").text)
    assert n == len(roots)
    return roots, n


def test_cache_leak_chain_through_timer(case: Case, host: str) -> None:
    leak = case.truth["cacheLeak"]
    roots, _ = gcroot(case, host, leak["chain"][-1])
    expected = addrs(leak["chain"])
    ending = [r for r in roots if [a for a, _t, _e in r.chain[-len(expected):]] == expected]
    assert ending, "no root path ends with worker → cache → dictionary → entries → entry"
    assert any(any(t == "System.Threading.TimerQueueTimer" for _a, t, _e in r.chain) for r in ending)
    assert all(r.chain[-1][1] == "SosextDebuggee.CacheEntry" for r in roots)
    limited, n = parse_gcroot(case.out(host, f"gcroot -limit 1 {leak['chain'][-1]}").text)
    assert n == 1 and len(limited) == 1


def test_limit_gives_the_first_roots_in_order_each_with_a_real_chain(case: Case, host: str) -> None:
    """-limit n (on a core: depth-first per root, stopping at the object) answers with the
    first n roots of the full answer, in its order, each chain from the root's object."""
    t = case.truth
    target = t["cacheLeak"]["chain"][-1]
    full, _ = gcroot(case, host, target)
    limited, n = parse_gcroot(case.out(host, f"gcroot -limit 2 {target}").text)
    assert n == len(limited) == min(2, len(full))
    for got, want in zip(limited, full):
        assert got.header == want.header
        assert got.chain[0][:2] == want.chain[0][:2] and got.chain[-1][0] == int(target, 16)
    # Where one chain exists, it is that one: through a strong handle, a dependent handle, a long list.
    leak = t["wrapperLeak"]
    (only,), _ = parse_gcroot(case.out(host, f"gcroot -limit 1 {leak['chain'][-1]}").text)
    assert [a for a, _t, _e in only.chain] == addrs(leak["chain"])
    (dep,), _ = parse_gcroot(case.out(host, f"gcroot -limit 1 {t['dependent']['secondary']}").text)
    assert [a for a, _t, _e in dep.chain[-2:]] == addrs([t["dependent"]["primary"], t["dependent"]["secondary"]])
    assert dep.chain[-1][2] == "(dependent handle)"
    (longest,), _ = parse_gcroot(case.out(host, f"gcroot -limit 1 {t['longChain']['tail']}").text)
    nodes = [c for c in longest.chain if c[1] == "SosextDebuggee.LongChainNode"]
    assert len(nodes) == t["longChain"]["length"] and nodes[-1][0] == int(t["longChain"]["tail"], 16)


def test_shortest_prints_every_root_sos_prints_with_a_chain_no_longer(case: Case, host: str) -> None:
    """-shortest: each root's shortest chain, and every root that reaches the object (SOS's
    search, the default, may drop some): each root the default prints is there, from the same
    object to the target, no longer."""
    t = case.truth
    for name in ("cacheLeak", "customerLeak"):
        target = t[name]["chain"][-1]
        sos, n = gcroot(case, host, target)
        short, m = gcroot(case, host, target, "-shortest ")
        assert m >= n >= 1
        ours = {}
        for r in short:
            ours.setdefault(r.header[-1], []).append(r)
        for r in sos:
            assert any(s.chain[0][0] == r.chain[0][0] and len(s.chain) <= len(r.chain)
                       for s in ours.get(r.header[-1], [])), (name, r.header)
        assert all(s.chain[-1][0] == int(target, 16) for s in short)


def test_customer_leak_chain_from_a_thread_local(case: Case, host: str) -> None:
    leak = case.truth["customerLeak"]
    roots, n = gcroot(case, host, leak["chain"][-1])
    assert n == 1
    r = roots[0]
    assert r.header[0] == f"Thread {leak['thread']['osTid']:x}:"
    assert "DebuggeeHost.RootsScenario.ProcessorBody(DebuggeeHost.StackHolder)" in r.header[1]
    assert [a for a, _t, _e in r.chain] == addrs(leak["chain"])
    assert [t for _a, t, _e in r.chain][-2:] == ["SosextDebuggee.Customer", "System.String"]


def test_wrapper_leak_chain_from_a_strong_handle(case: Case, host: str) -> None:
    leak = case.truth["wrapperLeak"]
    roots, n = gcroot(case, host, leak["chain"][-1])
    assert n == 1
    assert roots[0].header == ["HandleTable:", f"    {int(leak['handle'], 16):016x} (strong handle)"]
    assert [a for a, _t, _e in roots[0].chain] == addrs(leak["chain"])
    assert [t for _a, t, _e in roots[0].chain] == [
        "SosextDebuggee.HandleLink1", "SosextDebuggee.HandleLink2", "SosextDebuggee.HandleLink3",
        "SosextDebuggee.HandleLink4", "SosextDebuggee.DataTargetWrapper"]


def test_local_on_a_named_thread(case: Case, host: str) -> None:
    t = case.truth["namedLocal"]
    roots, n = gcroot(case, host, t["address"])
    assert n == 1
    assert roots[0].header[0] == f"Thread {t['thread']['osTid']:x}:"
    assert "DebuggeeHost.RootsScenario.NamedLocalBody(DebuggeeHost.StackHolder)" in roots[0].header[1]
    assert roots[0].chain == [(int(t["address"], 16), "SosextDebuggee.NamedLocalItem", "")]
    _, n = parse_gcroot(case.out(host, f"gcroot -nostacks {t['address']}").text)
    assert n == 0


def test_pinned_handle(case: Case, host: str) -> None:
    t = case.truth["pinned"]
    roots, n = gcroot(case, host, t["object"])
    assert n == 1
    # GCHandle.ToIntPtr marks pinned handles with the low bit.
    assert roots[0].header == ["HandleTable:", f"    {int(t['handle'], 16) & ~1:016x} (pinned handle)"]


def test_weak_handle_is_not_a_root(case: Case, host: str) -> None:
    roots, n = gcroot(case, host, case.truth["weak"]["object"])
    assert n == 0 and not roots


def test_dependent_handle_edge(case: Case, host: str) -> None:
    t = case.truth["dependent"]
    roots, n = gcroot(case, host, t["secondary"])
    assert n == 1
    assert [a for a, _t, _e in roots[0].chain[-2:]] == addrs([t["primary"], t["secondary"]])
    assert roots[0].chain[-1][2] == "(dependent handle)"


def test_object_only_the_finalizer_queue_keeps(case: Case, host: str) -> None:
    t = case.truth["finalizerOnly"]
    roots, n = gcroot(case, host, t["target"])
    assert n == 1
    assert roots[0].header[0] == "Finalizer Queue:"
    assert roots[0].header[1].endswith("(finalizer root)")
    assert [a for a, _t, _e in roots[0].chain] == addrs([t["holder"], t["target"]])
    ready = sp.short_addresses(case.out(host, "finalizequeue -allReady -short").text)
    assert int(t["holder"], 16) in ready


def test_generic_static_and_caught_exception(case: Case, host: str) -> None:
    for key in ("genericStatic", "exception"):
        address = case.truth[key]["address"]
        roots, n = gcroot(case, host, address)
        assert n >= 1, key
        assert roots[0].header[0] == "HandleTable:", key
        assert roots[0].chain[-1][0] == int(address, 16), key
    # The scenario keeps the caught exception in `static RootsTestException s_caught`.
    roots, _ = gcroot(case, host, case.truth["exception"]["address"])
    assert roots[0].chain[1][2] == "(static variable: DebuggeeHost.RootsScenario.s_caught)"
    roots, _ = gcroot(case, host, case.truth["dependent"]["secondary"])
    assert roots[0].chain[1][2] == "(static variable: DebuggeeHost.RootsScenario.s_primary)"


def test_deep_cyclic_list_does_not_recurse(case: Case, host: str) -> None:
    t = case.truth["longChain"]
    roots, n = gcroot(case, host, t["tail"])
    assert n >= 1
    chain = roots[0].chain
    nodes = [c for c in chain if c[1] == "SosextDebuggee.LongChainNode"]
    assert len(nodes) == t["length"]
    assert nodes[0][0] == int(t["head"], 16) and nodes[-1][0] == int(t["tail"], 16)


def test_gcroot_json(case: Case, host: str) -> None:
    import json
    doc = json.loads(case.out(host, f"gcroot --json {case.truth['wrapperLeak']['chain'][-1]}").text)
    assert doc["count"] == 1
    assert [int(c["address"], 16) for c in doc["roots"][0]["chain"]] == addrs(case.truth["wrapperLeak"]["chain"])
    assert doc["roots"][0]["root"]["handle_type"] == "strong handle"


def test_live_and_dead_counts(case: Case, host: str) -> None:
    live = sp.stat_rows(case.out(host, "dumpheap -live -type SosextDebuggee. -stat").text)
    dead = sp.stat_rows(case.out(host, "dumpheap -dead -type SosextDebuggee. -stat").text)
    for name, t in case.truth["types"].items():
        mt = int(t["mt"], 16)
        assert (live[mt].count if mt in live else 0) == t["count"], name
        assert (dead[mt].count if mt in dead else 0) == t["deadCount"], name


def test_objsize(case: Case, host: str) -> None:
    t = case.truth
    text = case.out(host, f"objsize {t['cacheLeak']['worker']}").text
    assert text.startswith(f"Objects which {int(t['cacheLeak']['worker'], 16):x} (SosextDebuggee.HostedWorker) "
                           "transitively keep alive:")
    rows = sp.stat_rows(text)
    entry = int(t["types"]["SosextDebuggee.CacheEntry"]["mt"], 16)
    assert rows[entry].count == t["cacheLeak"]["entries"]
    payloads = [r for r in rows.values() if r.name == "System.Byte[]"]
    assert payloads and payloads[0].count == t["cacheLeak"]["entries"]
    assert payloads[0].total == t["cacheLeak"]["entries"] * (t["cacheLeak"]["payloadSize"] + 24)
    wrapper = sp.stat_rows(case.out(host, f"objsize -stat {t['wrapperLeak']['chain'][0]}").text)
    assert sum(r.count for r in wrapper.values()) == 5


def test_gchandles_lists_the_debuggee_handles(case: Case, host: str) -> None:
    text = case.out(host, "gchandles").text
    rows = {int(ln.split()[0], 16): ln.split()[1] for ln in text.splitlines()
            if re.match(r"^[0-9A-F]{16} ", ln)}
    t = case.truth
    assert rows[int(t["wrapperLeak"]["handle"], 16)] == "Strong"
    assert rows[int(t["pinned"]["handle"], 16) & ~1] == "Pinned"
    assert rows[int(t["weak"]["handle"], 16)] == "WeakShort"
    assert "Pinned Handles:" in text and "Strong Handles:" in text


def test_dso_finds_the_thread_local(case: Case, host: str) -> None:
    t = case.truth["namedLocal"]
    text = case.out(host, f"dso {t['thread']['osTid']:#x}").text
    assert text.startswith(f"OS Thread Id: 0x{t['thread']['osTid']:x} ")
    assert any(ln.split()[1:] == [f"{int(t['address'], 16):012x}", "SosextDebuggee.NamedLocalItem"]
               for ln in text.splitlines()[2:] if len(ln.split()) == 3)


def test_thinlock_lists_the_held_lock(case: Case, host: str) -> None:
    t = case.truth["thinLock"]
    rows = [ln.split() for ln in case.out(host, "dumpheap -thinlock").text.splitlines()[1:]]
    mine = [r for r in rows if int(r[0], 16) == int(t["object"], 16)]
    assert len(mine) == 1
    assert mine[0][2] == f"0x{t['thread']['osTid']:x}" and mine[0][3] == "0"


def test_verifyheap_is_clean(case: Case, host: str) -> None:
    assert "No heap corruption detected." in case.out(host, "verifyheap").text


def test_bad_addresses_give_one_line(case: Case, host: str) -> None:
    """gcroot of an address that is no object warns as SOS does and searches anyway: no root
    holds these addresses themselves (a root inside an object stands for that object)."""
    start = int(case.truth['wrapperLeak']['chain'][0], 16)
    for address in (0x10, start + 8):
        out = case.out(host, f"gcroot {address:x}")
        shown = [ln for ln in out.lines if ln.strip() and not ln.startswith(("Caching GC roots", "Subsequent runs"))]
        assert not out.errors and shown == [f"Warning: {address:x} is not a valid object", "Found 0 unique roots."], \
            out.text
    assert case.out(host, "gcroot").errors == ["error: Could not parse target object address: 0"]
    assert case.out(host, "gcroot 0").errors == ["error: Could not parse target object address: 0"]
