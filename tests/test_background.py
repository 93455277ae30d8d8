"""What is built on the other core after a gcroot on a core (clr/roots/background.py).

After the first gcroot of a session (SOS's search from the roots, no graph), sosext runs
that search once more in a thread of its own while the user reads, for no object, and
records it (the root forest, clr/roots/forest.py): later gcroots of the stop answer from it;
then, where memory allows, it builds the index, the graph and its reverse, which later
``gcroot -shortest`` answer from. After a ``gcroot -shortest`` it builds only the graph.
Every command that follows, typed while that thread works (DAC calls and all) or after it,
must print exactly what it prints in a session without background work — the later gcroots
from the forest the chains of a whole search each — (sosstatus says what was built). The
truth of the roots debuggee pins the chains.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import drivers
from harness import Debuggee, build_debuggee
from test_roots import parse_gcroot

pytestmark = pytest.mark.slow

NO_BACKGROUND = {"SOSEXT_BACKGROUND": "0"}


@pytest.fixture(scope="module")
def roots_core(request, tmp_path_factory) -> tuple[dict, Path, str]:
    drivers.require_dotnet_and_lldb()
    tfm = request.config.getoption("--tfm")
    where = tmp_path_factory.mktemp("background")
    with Debuggee("roots", tfm=tfm, dll=build_debuggee(tfm), core_dir=where) as d:
        core = d.write_core("heap", where / "heap.core")
        return d.truth, core, str(d.executable)


def batch(t: dict) -> list[str]:
    first = t["cacheLeak"]["chain"][-1]
    return [
        f"gcroot {first}",
        # Typed at once: the background build is running under these.
        f"dumpobj {t['wrapperLeak']['chain'][0]}",
        f"dumpobj {t['cacheLeak']['worker']}",
        "gchandles -stat",
        "dumpheap -stat -type SosextDebuggee.",
        f"gcroot {t['customerLeak']['chain'][-1]}",
        f"gcroot {t['longChain']['tail']}",
        f"gcroot {t['dependent']['secondary']}",
        f"gcroot {first}",
        f"gcroot -shortest {t['customerLeak']['chain'][-1]}",
        "sosstatus",
    ]


def graph_line(out: drivers.Output) -> str:
    m = re.search(r"^Reference graph: (.*)$", out.text, re.M)
    assert m, out.text
    return m.group(1)


def forest_line(out: drivers.Output) -> str:
    m = re.search(r"^Root forest: (.*)$", out.text, re.M)
    assert m, out.text
    return re.sub(r" \([\d,]+ objects\)$", "", m.group(1))


def test_commands_during_and_after_the_build_print_what_they_print_without_it(roots_core) -> None:
    truth, core, _exe = roots_core
    cmds = batch(truth)
    with_build = drivers.run_cli(cmds, core=core)
    without = drivers.run_cli(cmds, core=core, env=NO_BACKGROUND)
    for c, a, b in zip(cmds[:-1], with_build, without):
        assert not a.errors, (c, a.text)
        assert a.text == b.text, c
    # The background built the forest, and then the graph (it may still be at it)...
    assert forest_line(with_build[-1]) == "built after a gcroot"
    assert graph_line(with_build[-1]) in ("built in the background after a gcroot", "being built in the background")
    # ...where without it no forest was: every gcroot on a core searches from the roots, and
    # the second search (the -shortest one) builds the graph in the foreground.
    assert forest_line(without[-1]) == "not built"
    assert graph_line(without[-1]) == "built"


def test_chains_from_the_forest_are_the_debuggees(roots_core) -> None:
    truth, core, _exe = roots_core
    cmds = batch(truth)
    outs = drivers.run_cli(cmds, core=core)
    for name in ("cacheLeak", "customerLeak"):
        want = [int(a, 16) for a in truth[name]["chain"]]
        text = outs[cmds.index(f"gcroot {truth[name]['chain'][-1]}")].text
        roots, n = parse_gcroot(text)
        assert n >= 1 and any([a for a, _t, _x in r.chain][-len(want):] == want for r in roots), text


def test_a_single_command_run_starts_no_build(roots_core) -> None:
    """The CLI's last -c command ends the process: nothing is built for nobody."""
    truth, core, _exe = roots_core
    outs = drivers.run_cli([f"gcroot {truth['cacheLeak']['chain'][-1]}"], core=core)
    assert not outs[0].errors
    # sosstatus as the last command would itself be the last; ask in a two-command run instead.
    two = drivers.run_cli([f"gcroot {truth['cacheLeak']['chain'][-1]}", "sosstatus"], core=core)
    assert forest_line(two[1]) in ("being built in the background", "built after a gcroot")


def test_lldb_on_the_core_builds_it_too_and_agrees(roots_core) -> None:
    truth, core, exe = roots_core
    cmds = batch(truth)
    lldb = drivers.run_lldb(cmds, core=core, exe=exe)
    cli = drivers.run_cli(cmds, core=core, env=NO_BACKGROUND)
    for c, a, b in zip(cmds[:-1], lldb, cli):
        if c.startswith("gcroot"):
            assert a.text == b.text, c
    assert forest_line(lldb[-1]) == "built after a gcroot"


@pytest.mark.skipif(not drivers.GDB, reason="gdb is not installed")
def test_gdb_builds_nothing_in_the_background(roots_core) -> None:
    """GDB's Python API belongs to its main thread: sosext starts no thread there."""
    truth, core, exe = roots_core
    cmds = batch(truth)
    gdb = drivers.run_gdb(cmds, core=core, exe=exe)
    assert graph_line(gdb[-1]) == "built"  # by the -shortest gcroot, in the foreground
    assert forest_line(gdb[-1]) == "not built"


@pytest.fixture(scope="module")
def big_core(request, tmp_path_factory) -> tuple[dict, Path]:
    """2M objects: the build takes long enough that the commands typed after the first gcroot
    run while it reads the heap and calls the DAC."""
    drivers.require_dotnet_and_lldb()
    tfm = request.config.getoption("--tfm")
    where = tmp_path_factory.mktemp("background-big")
    with Debuggee("bigheap", 2_000_000, "mixed", tfm=tfm, dll=build_debuggee(tfm), core_dir=where) as d:
        return d.truth, d.write_core("heap", where / "big.core")


def test_dac_calls_during_a_build_on_a_bigger_heap(big_core) -> None:
    truth, core = big_core
    objs = truth["objects"]
    deep, leaf = objs["deepNode"]["address"], objs["firstLeaf"]["address"]
    cmds = [f"gcroot {deep}", f"dumpobj {deep}", f"dumpmt {objs['deepNode']['mt']}", f"dumpobj {leaf}",
            "gchandles -stat", "eeheap -gc", f"gcroot {leaf}", f"gcroot -limit 1 {deep}", "sosstatus"]
    with_build = drivers.run_cli(cmds, core=core)
    without = drivers.run_cli(cmds, core=core, env=NO_BACKGROUND)
    for c, a, b in zip(cmds[:-1], with_build, without):
        assert not a.errors, (c, a.text)
        assert a.text == b.text, c
    roots, n = parse_gcroot(with_build[0].text)
    assert n == 1 and roots[0].chain[-1][0] == int(deep, 16)
    # The later gcroots wait for the build only when it should end before a search would; on a
    # busy machine they search, and the build may still be running when sosstatus asks.
    assert forest_line(with_build[-1]) in ("built after a gcroot", "being built in the background")


def test_a_shortest_gcroot_builds_the_graph_instead(roots_core) -> None:
    """``-shortest`` answers from the reverse graph: that is what is built after it, and the
    later -shortest gcroots print what they print without it."""
    truth, core, _exe = roots_core
    cmds = [f"gcroot -shortest {truth['cacheLeak']['chain'][-1]}", "gchandles -stat",
            f"gcroot -shortest {truth['customerLeak']['chain'][-1]}", f"gcroot -shortest {truth['longChain']['tail']}",
            "sosstatus"]
    with_build = drivers.run_cli(cmds, core=core)
    without = drivers.run_cli(cmds, core=core, env=NO_BACKGROUND)
    for c, a, b in zip(cmds[:-1], with_build, without):
        assert not a.errors, (c, a.text)
        assert a.text == b.text, c
    assert graph_line(with_build[-1]) == "built in the background after a gcroot"


def _forest_arrays(forest) -> dict:
    return {name: getattr(forest, name) for name in ("bits", "prefix", "rank", "parent", "outside", "outside_rank",
                                                     "root_pops")} | {"count": forest.count, "starts": forest.starts}


@pytest.mark.parametrize("which", ["roots", "big"])
def test_a_forest_gone_on_from_a_first_gcroot_is_the_forest(which, roots_core, big_core) -> None:
    """In a session where more commands may follow, the first gcroot records the root forest's
    prefix as it searches (until it meets its target its search *is* the forest's) and the
    build goes on from where it met the target: that forest is, array for array, the one
    walked from scratch; and recording changes nothing in the gcroot's own chains. Targets:
    objects met late and early, a root's own object, an object no root reaches, and -limit 1."""
    import numpy as np
    from sosext.cli import _session_for_core
    from sosext.clr.roots.forest import RootForest, new_recording
    from sosext.clr.roots.gcroot import sos_order
    from sosext.clr.roots.rootsearch import CoreHeapMemory
    from sosext.clr.roots.rootwalk import RootWalk
    truth, core = roots_core[:2] if which == "roots" else big_core
    heap = _session_for_core(str(core)).runtime().heap
    mem = CoreHeapMemory.of(heap)
    roots = sos_order(heap.roots().roots)
    cold = RootForest(heap, mem, roots)
    want = _forest_arrays(cold)
    if which == "roots":
        named = [int(truth["cacheLeak"]["chain"][-1], 16), int(truth["longChain"]["tail"], 16),
                 int(truth["dependent"]["secondary"], 16)]
    else:
        named = [int(truth["objects"]["deepNode"]["address"], 16), int(truth["objects"]["firstLeaf"]["address"], 16)]
    root_object = next(r.object for r in roots if r.object and cold._position(r.object) >= 0)
    unreached = next(int(a) for a in heap.index().addresses if cold._position(int(a)) < 0
                     and int(a) not in cold.starts)
    for target, limit in [(t, None) for t in named + [root_object, unreached]] + [(named[0], 1)]:
        plain = list(RootWalk(heap, mem, target, roots, None).paths(roots, limit))
        walk = RootWalk(heap, mem, target, roots, None)
        record = new_recording(mem, len(roots))
        assert list(walk.paths(roots, limit, record=record)) == plain, hex(target)
        met = bool(plain) or target == root_object
        assert (walk.fork is not None) == met and (len(record) == 6) == (not met), hex(target)
        forest = RootForest(heap, mem, roots, like=walk, recording=record, fork=walk.fork)
        got = _forest_arrays(forest)
        for name, value in want.items():
            same = np.array_equal(got[name], value) if isinstance(value, np.ndarray) else got[name] == value
            assert same, (hex(target), limit, name)
