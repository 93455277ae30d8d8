"""The same exactness on the other supported runtimes: .NET 8 and .NET 9, whose runtime packs
(runtime, DAC, createdump) the harness restores from NuGet and publishes with the debuggee.

A compact subset of the acceptance suites per version: dumpheap -stat/-mt/-gen exact for every
test type, live/dead counts, and gcroot's chains, in LLDB live and the CLI on a heap core.
The installed runtime (.NET 10) runs the full suites; `./run-tests.sh --tfm net8.0` runs the
full suites on another version.
"""
from __future__ import annotations

import pytest

import drivers
import sosparse as sp
from harness import Debuggee, DebuggeeError, build_debuggee, dotnet_path
from test_dumpheap import populated_types
from test_roots import addrs, parse_gcroot

pytestmark = pytest.mark.slow

VERSIONS = ["net8.0", "net9.0"]


def _build(tfm: str):
    if dotnet_path() is None:
        pytest.skip("dotnet is not on PATH: these tests need the .NET SDK")
    try:
        return build_debuggee(tfm)
    except DebuggeeError as e:
        pytest.skip(f"{tfm} runtime pack could not be restored from NuGet: {str(e).splitlines()[0]}")


def _trust(dll) -> dict[str, str]:
    """The self-contained runtime lives in the work directory (often under /tmp, which sosext does
    not trust for a DAC the target names): name it explicitly, as a user would."""
    return {"SOSEXT_CLR_PATH": str(dll.parent)}


@pytest.fixture(scope="module", params=VERSIONS)
def heap_case(request, tmp_path_factory):
    tfm = request.param
    dll = _build(tfm)
    cores = tmp_path_factory.mktemp(f"versions-{tfm}")
    with Debuggee("heap", tfm=tfm, dll=dll, core_dir=cores) as d:
        truth = d.truth
        cmds = ["dumpheap -stat", "dumpheap -live -type SosextDebuggee. -stat",
                "dumpheap -dead -type SosextDebuggee. -stat", "dumpheap -gen foh -short", "dumpheap -gen poh -short"]
        cmds += [f"dumpheap -mt {t['mt']}" for t in populated_types(truth).values()]
        core = d.write_core("heap", cores / "heap.core")
        outs = {"lldb-live": drivers.run_lldb(cmds, pid=d.pid, env=_trust(dll)) if drivers.LLDB else None}
    outs["cli-heap"] = drivers.run_cli(cmds, core=core, env=_trust(dll))
    return tfm, truth, cmds, outs


@pytest.fixture(scope="module", params=VERSIONS)
def roots_case(request, tmp_path_factory):
    tfm = request.param
    dll = _build(tfm)
    cores = tmp_path_factory.mktemp(f"versions-roots-{tfm}")
    with Debuggee("roots", tfm=tfm, dll=dll, core_dir=cores) as d:
        truth = d.truth
        core = d.write_core("heap", cores / "heap.core")
    cmds = [f"gcroot {truth['wrapperLeak']['chain'][-1]}", f"gcroot {truth['customerLeak']['chain'][-1]}",
            f"gcroot {truth['finalizerOnly']['target']}", f"gcroot {truth['exception']['address']}"]
    return tfm, truth, cmds, drivers.run_cli(cmds, core=core, env=_trust(dll))


@pytest.mark.parametrize("host", ["lldb-live", "cli-heap"])
def test_counts_addresses_and_liveness(heap_case, host: str) -> None:
    tfm, truth, cmds, outs = heap_case
    if outs.get(host) is None:
        pytest.skip("lldb-16 is not installed")
    out = dict(zip(cmds, outs[host]))
    assert truth["runtime"]["version"].split(".")[0] == tfm[3:].split(".")[0]
    rows = sp.stat_rows(out["dumpheap -stat"].text)
    live = sp.stat_rows(out["dumpheap -live -type SosextDebuggee. -stat"].text)
    dead = sp.stat_rows(out["dumpheap -dead -type SosextDebuggee. -stat"].text)
    for name, t in populated_types(truth).items():
        mt = int(t["mt"], 16)
        assert (rows[mt].count, rows[mt].total) == (t["count"] + t["deadCount"],
                                                    t["unalignedSize"] + t["deadUnalignedSize"]), name
        listed = {r.address for r in sp.object_rows(out[f"dumpheap -mt {t['mt']}"].text)}
        assert listed == {int(a, 16) for a in t["addresses"] + t["deadAddresses"]}, name
        assert (live[mt].count if mt in live else 0) == t["count"], name
        assert (dead[mt].count if mt in dead else 0) == t["deadCount"], name
    frozen = set(sp.short_addresses(out["dumpheap -gen foh -short"].text))
    assert int(truth["objects"]["strFrozenLiteral"]["address"], 16) in frozen
    pinned = set(sp.short_addresses(out["dumpheap -gen poh -short"].text))
    assert int(truth["objects"]["pohBytes"]["address"], 16) in pinned


def test_gcroot_chains(roots_case) -> None:
    tfm, truth, cmds, outs = roots_case
    wrapper, customer, finalizer, exception = outs
    roots, n = parse_gcroot(wrapper.text)
    assert n == 1 and [a for a, _t, _e in roots[0].chain] == addrs(truth["wrapperLeak"]["chain"])
    assert roots[0].header[1] == f"    {int(truth['wrapperLeak']['handle'], 16):016x} (strong handle)"
    roots, n = parse_gcroot(customer.text)
    assert n == 1 and roots[0].header[0] == f"Thread {truth['customerLeak']['thread']['osTid']:x}:"
    assert [a for a, _t, _e in roots[0].chain] == addrs(truth["customerLeak"]["chain"])
    roots, n = parse_gcroot(finalizer.text)
    assert n == 1 and roots[0].header[0] == "Finalizer Queue:"
    roots, n = parse_gcroot(exception.text)
    assert roots[0].chain[1][2] == "(static variable: DebuggeeHost.RootsScenario.s_caught)"
