"""Acceptance of the public Python API (docs/api.md): `sosext.open` on cores and live processes,
`sosext.current()` inside LLDB and GDB, and the example scripts, against the debuggee's own truth.

Counts per MethodTable, addresses, sizes, generations, field values and string contents come
from the `heap` scenario's truth JSON; gcroot chains from the `roots` scenario's; growth and
string counts from the leaking service's own replies.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import drivers
from harness import Debuggee, build_debuggee
from test_typenames import oracle  # noqa: F401 - ClrMD's names, the second opinion (a fixture)

pytestmark = pytest.mark.slow

REPO = drivers.REPO
sys.path.insert(0, str(REPO))
import sosext  # noqa: E402
from sosext.clr.typesystem.typenames import csharp_name  # noqa: E402

SCRIPTS = REPO / "examples" / "scripts"
DOC = REPO / "docs" / "api.md"


def h(text: str) -> int:
    return int(text, 16)


def sos_name(full_name: str) -> str:
    """Type.FullName as the runtime (and SOS) names types: no assembly versions in generic arguments."""
    return re.sub(r", Version=[^,\]]*, Culture=[^,\]]*, PublicKeyToken=[^,\]]*", "", full_name)


def get_generation(g: sosext.Generation) -> int:
    """What GC.GetGeneration says for an object in ``g``: 2 for the LOH and POH, int.MaxValue when frozen."""
    if g is sosext.Generation.FROZEN:
        return 2 ** 31 - 1
    return min(int(g), 2)


def own_types(truth: dict) -> list[dict]:
    return [t for k, t in truth["types"].items() if k.startswith("SosextDebuggee.")]


@dataclass
class Live:
    truth: dict
    pid: int
    core: Path


def _start(request, tmp_path_factory, scenario: str):  # type: ignore[no-untyped-def]
    drivers.require_dotnet_and_lldb()
    tfm = request.config.getoption("--tfm")
    d = Debuggee(scenario, tfm=tfm, dll=build_debuggee(tfm), core_dir=tmp_path_factory.mktemp(f"api-{scenario}"))
    d.start()
    try:
        core = d.write_core("heap")
    except BaseException:
        d.stop()
        raise
    return d, Live(d.truth, d.pid, core)


@pytest.fixture(scope="module")
def heap_case(request, tmp_path_factory):  # type: ignore[no-untyped-def]
    """The `heap` scenario: running (for pid= and the debuggers) and as a heap dump."""
    d, live = _start(request, tmp_path_factory, "heap")
    try:
        yield live
    finally:
        d.stop()


@pytest.fixture(scope="module")
def roots_case(request, tmp_path_factory):  # type: ignore[no-untyped-def]
    d, live = _start(request, tmp_path_factory, "roots")
    try:
        yield live
    finally:
        d.stop()


@pytest.fixture(scope="module")
def core_rt(heap_case: Live):  # type: ignore[no-untyped-def]
    with sosext.open(heap_case.core) as rt:
        yield rt


@pytest.fixture(scope="module")
def roots_rt(roots_case: Live):  # type: ignore[no-untyped-def]
    with sosext.open(roots_case.core) as rt:
        yield rt


def populated(truth: dict) -> dict[str, dict]:
    return {k: v for k, v in truth["types"].items() if v["count"] + v["deadCount"] > 0}


# -- the heap: stats, objects, filters ----------------------------------------------------------

def check_stats(rt: sosext.Runtime, truth: dict) -> None:
    rows = {r.type.method_table: r for r in rt.heap.stats()}
    for name, t in truth["types"].items():
        row = rows.get(h(t["mt"]))
        got = (row.count, row.total_size) if row else (0, 0)
        assert got == (t["count"] + t["deadCount"], t["unalignedSize"] + t["deadUnalignedSize"]), name
        if row:
            assert row.type.runtime_name == sos_name(t["fullName"]), name
            assert (row.type.base_size, row.type.component_size) == (t["baseSize"], t["componentSize"]), name
    totals = [r.total_size for r in rows.values()]
    assert totals == sorted(totals)
    assert all(type(v) is int for r in rows.values() for v in (r.count, r.total_size, r.type.method_table))


def test_stats_of_a_core_equal_truth(core_rt, heap_case: Live) -> None:
    check_stats(core_rt, heap_case.truth)


def test_stats_of_a_live_process_equal_truth(heap_case: Live) -> None:
    with sosext.open(pid=heap_case.pid) as rt:
        assert rt.is_live and not rt.has_stacks
        check_stats(rt, heap_case.truth)


def test_stats_of_a_snapshot_equal_truth(heap_case: Live) -> None:
    with sosext.open(pid=heap_case.pid, snapshot=True) as rt:
        directory = rt._cleanup
        assert not rt.is_live and rt.has_stacks
        check_stats(rt, heap_case.truth)
        live = {r.type.method_table: r.count for r in rt.heap.stats(live=True)}
        for name, t in heap_case.truth["types"].items():
            assert live.get(h(t["mt"]), 0) == t["count"], name
    assert directory and not os.path.exists(directory)


def test_objects_by_mt_and_by_name(core_rt, heap_case: Live) -> None:
    check_objects(core_rt.heap, heap_case.truth)


def check_objects(heap: sosext.Heap, truth: dict) -> None:
    for name, t in populated(truth).items():
        objs = list(heap.objects(mt=h(t["mt"])))
        assert [o.address for o in objs] == sorted(h(a) for a in t["addresses"] + t["deadAddresses"]), name
        assert [o.address for o in heap.objects(type=sos_name(t["fullName"]))] == [o.address for o in objs], name
        assert sum(o.size for o in objs) == t["unalignedSize"] + t["deadUnalignedSize"], name
        by_addr = {o.address: o for o in objs}
        for a, g in zip(t["addresses"], t["generations"]):
            assert get_generation(by_addr[h(a)].generation) == g, (name, a)
        if t["size"] == t["unalignedSize"]:
            for a, s in zip(t["addresses"], t["sizes"]):
                assert by_addr[h(a)].size == s, (name, a)
        assert all(type(o.address) is int and type(o.size) is int for o in objs)


def test_server_gc_with_segments(request, tmp_path_factory) -> None:
    """The same answers from a server-GC heap made of segments (several heaps, ephemeral ranges)."""
    drivers.require_dotnet_and_lldb()
    tfm = request.config.getoption("--tfm")
    with Debuggee("heap", gc="svr", gc_flavor="segments", tfm=tfm, dll=build_debuggee(tfm),
                  core_dir=tmp_path_factory.mktemp("api-svr")) as d:
        core = d.write_core("heap")
        with sosext.open(pid=d.pid) as live:
            check_stats(live, d.truth)
    with sosext.open(core) as rt:
        assert rt.heap.is_server
        check_stats(rt, d.truth)
        check_objects(rt.heap, d.truth)


def test_live_dead_and_generation_filters(core_rt, heap_case: Live) -> None:
    heap = core_rt.heap
    for name, t in populated(heap_case.truth).items():
        live = {o.address for o in heap.objects(type=sos_name(t["fullName"]), live=True)}
        dead = {o.address for o in heap.objects(type=sos_name(t["fullName"]), live=False)}
        assert live == {h(a) for a in t["addresses"]}, name
        assert dead == {h(a) for a in t["deadAddresses"]}, name
        for gen, n in t["gens"].items():
            gens = [int(gen)] if gen != "2" else [2, "loh", "poh"]
            assert sum(1 for g in gens for _ in heap.objects(mt=h(t["mt"]), gen=g, live=True)) == n, (name, gen)
    prefix = heap.stats(type=lambda n: n.startswith("SosextDebuggee."), live=True)
    mine = own_types(heap_case.truth)
    assert (sum(r.count for r in prefix), sum(r.total_size for r in prefix)) == \
        (sum(t["count"] for t in mine), sum(t["unalignedSize"] for t in mine))


def test_size_and_generation_filters_on_the_big_objects(core_rt, heap_case: Live) -> None:
    objs = heap_case.truth["objects"]
    loh = {o.address for o in core_rt.heap.objects(gen="loh")}
    for role in ("lohBytes", "lohItems", "strLong"):
        if role in objs:
            assert h(objs[role]["address"]) in loh, role
    poh = {o.address for o in core_rt.heap.objects(gen=sosext.Generation.POH)}
    for role in ("pohBytes", "pohLongs", "pohStructs"):
        if role in objs:
            assert h(objs[role]["address"]) in poh, role
    big = core_rt.heap.objects(min_size=objs["lohBytes"]["unalignedSize"], max_size=objs["lohBytes"]["unalignedSize"])
    assert h(objs["lohBytes"]["address"]) in {o.address for o in big}
    with pytest.raises(sosext.SosError):
        next(core_rt.heap.objects(gen="gen7"))


def test_strings_and_fields(core_rt, heap_case: Live) -> None:
    heap = core_rt.heap
    for role in ("strAscii", "strNonAscii", "strLong", "strEmpty"):
        t = heap_case.truth["objects"].get(role)
        if t is None:
            continue
        s = heap.object(h(t["address"]))
        assert s.type.is_string and s.type.name == "System.String"
        assert s.as_string() == t["value"], role
        assert s["_stringLength"] == t["length"] == s.length, role
    e = heap_case.truth["itemE"]
    obj = heap.object(h(e["address"]))
    assert obj.type.method_table == h(e["mt"])
    for f in e["fields"]:
        value = obj[f["name"]]
        if f["type"] in ("System.String", "System.Object"):
            assert value.address == h(f["value"]), f["name"]
        elif f["name"] == "Inline":
            assert isinstance(value, int)  # an embedded struct: the address of its data
        else:
            assert value == f["value"], f["name"]
    assert set(obj.field_names()) == {f["name"] for f in e["fields"]}
    with pytest.raises(KeyError):
        obj["NoSuchField"]
    with pytest.raises(sosext.SosError, match="not a valid object"):
        heap.object(h(e["address"]) + 8)


def test_gcroot_of_a_static_chain(core_rt, heap_case: Live) -> None:
    chain = heap_case.truth["rootChain"]
    target = h(chain["path"][-1]["address"])
    paths = list(core_rt.heap.gcroot(core_rt.heap.object(target)))
    assert paths
    p = paths[0]
    assert p.root.kind == "handle" and p.root.name == "strong handle"
    assert [o.address for o in p.objects[1:]] == [h(s["address"]) for s in chain["path"]]
    assert [o.type.name for o in p.objects[1:]] == [s["type"] for s in chain["path"]]
    assert p.static_field == chain["staticField"]
    assert p.objects[-1].address == target and p.root.object == p.objects[0].address


def test_threads_frames_and_stack_roots(core_rt, heap_case: Live) -> None:
    threads = {t.os_id: t for t in core_rt.threads}
    for th in heap_case.truth["threads"]:
        t = threads[th["osTid"]]
        assert t.managed_id == th["managedId"] and t.is_alive
        methods = [f.method for f in t.frames]
        assert any("HeapScenario.WorkerMain(System.Object)" in m for m in methods), methods
        paths = list(core_rt.heap.gcroot(h(th["stackOnly"]["address"])))
        assert [p.root.kind for p in paths] == ["stack"]
        assert paths[0].root.thread_os_id == th["osTid"]
        assert "HeapScenario.WorkerMain(System.Object)" in paths[0].root.name
        assert [o.address for o in paths[0].objects] == [h(th["stackOnly"]["address"])]
        assert list(core_rt.heap.gcroot(h(th["stackOnly"]["address"]), stacks=False)) == []
    main = threads[heap_case.truth["runtime"]["mainOsTid"]]
    assert main.frames[-1].method == "DebuggeeHost.Program.Main(System.String[])"


def test_a_live_process_has_no_stack_roots(heap_case: Live) -> None:
    chain = heap_case.truth["rootChain"]
    with sosext.open(pid=heap_case.pid) as rt:
        target = h(chain["path"][-1]["address"])
        paths = list(rt.heap.gcroot(target))
        assert [o.address for o in paths[0].objects[1:]] == [h(s["address"]) for s in chain["path"]]
        stack_only = h(heap_case.truth["threads"][0]["stackOnly"]["address"])
        assert list(rt.heap.gcroot(stack_only)) == []  # its only root is on a stack
        for ask in (lambda: rt.heap.gcroot(stack_only, stacks=True), lambda: rt.heap.objects(live=True),
                    lambda: rt.heap.stats(live=False), lambda: rt.threads[0].frames):
            with pytest.raises(sosext.SosError, match="registers"):
                r = ask()
                next(iter(r))
        rt.refresh()
        check_stats(rt, heap_case.truth)


def test_bad_input_is_one_sos_error(tmp_path) -> None:
    with pytest.raises(sosext.SosError, match="cannot open core file .*: No such file or directory"):
        sosext.open(tmp_path / "nothing.core")
    with pytest.raises(sosext.SosError, match="not both or neither"):
        sosext.open()
    with pytest.raises(sosext.SosError, match="cannot read process"):
        sosext.open(pid=2 ** 22 + 7)
    with pytest.raises(sosext.SosError):
        sosext.open(REPO / "README.md")
    with pytest.raises(sosext.SosError, match="inside LLDB or GDB"):
        sosext.current()


def test_help_reads_well() -> None:
    import pydoc
    text = pydoc.render_doc(sosext, renderer=pydoc.plaintext)
    for name in ("open", "current", "diff", "leaks", "Runtime", "Heap", "HeapObject", "RootPath", "Thread",
                 "sosext.open(\"core.1234\")"):
        assert name in text, name
    for cls in (sosext.Runtime, sosext.Heap, sosext.HeapObject, sosext.ClrType, sosext.TypeStats, sosext.Root,
                sosext.RootPath, sosext.Thread, sosext.Frame, sosext.Retention, sosext.HeldBy, sosext.HeapDiff,
                sosext.TypeGrowth, sosext.Holder, sosext.Leaks, sosext.GrownType, sosext.PathGroup):
        assert cls.__doc__, cls
        for attr, value in vars(cls).items():
            if not attr.startswith("_") and (callable(value) or isinstance(value, property)):
                assert value.__doc__, f"{cls.__name__}.{attr} has no docstring"


# -- gcroot: the roots scenario's chains ----------------------------------------------------------

def test_gcroot_limit_on_a_fresh_core_searches_depth_first_and_gives_the_only_chain(roots_case: Live) -> None:
    """limit=n before any graph exists: each root searched up to the object (gcroot -limit)."""
    t = roots_case.truth
    with sosext.open(roots_case.core) as rt:
        wrapper = t["wrapperLeak"]
        paths = list(rt.heap.gcroot(h(wrapper["chain"][-1]), limit=1))
        assert len(paths) == 1 and paths[0].root.address == h(wrapper["handle"])
        assert [o.address for o in paths[0].objects] == [h(a) for a in wrapper["chain"]]
        dep = t["dependent"]
        (path,) = rt.heap.gcroot(h(dep["secondary"]), limit=1)
        assert [o.address for o in path.objects[-2:]] == [h(dep["primary"]), h(dep["secondary"])]
        assert path.via_dependent[-1] and path.static_field == "DebuggeeHost.RootsScenario.s_primary"


def test_gcroot_chains_equal_truth(roots_rt, roots_case: Live) -> None:
    t = roots_case.truth
    heap = roots_rt.heap
    wrapper = t["wrapperLeak"]
    paths = list(heap.gcroot(h(wrapper["chain"][-1])))
    assert len(paths) == 1
    assert (paths[0].root.kind, paths[0].root.name, paths[0].root.address) == ("handle", "strong handle", h(wrapper["handle"]))
    assert [o.address for o in paths[0].objects] == [h(a) for a in wrapper["chain"]]

    cache = t["cacheLeak"]
    ending = [p for p in heap.gcroot(h(cache["chain"][-1]))
              if [o.address for o in p.objects[-len(cache["chain"]):]] == [h(a) for a in cache["chain"]]]
    assert ending and any(o.type.name == "System.Threading.TimerQueueTimer" for p in ending for o in p.objects)
    assert len(list(heap.gcroot(h(cache["chain"][-1]), limit=1))) == 1

    customer = t["customerLeak"]
    paths = list(heap.gcroot(h(customer["chain"][-1])))
    assert len(paths) == 1 and paths[0].root.kind == "stack"
    assert paths[0].root.thread_os_id == customer["thread"]["osTid"]
    assert "DebuggeeHost.RootsScenario.ProcessorBody(DebuggeeHost.StackHolder)" in paths[0].root.name
    assert [o.address for o in paths[0].objects] == [h(a) for a in customer["chain"]]

    dep = t["dependent"]
    paths = list(heap.gcroot(h(dep["secondary"])))
    assert len(paths) == 1
    assert [o.address for o in paths[0].objects[-2:]] == [h(dep["primary"]), h(dep["secondary"])]
    assert paths[0].via_dependent[-1] is True and not any(paths[0].via_dependent[:-1])
    assert paths[0].static_field == "DebuggeeHost.RootsScenario.s_primary"

    fin = t["finalizerOnly"]
    paths = list(heap.gcroot(h(fin["target"])))
    assert [(p.root.kind, p.root.name) for p in paths] == [("finalizer", "finalizer queue")]
    assert [o.address for o in paths[0].objects] == [h(fin["holder"]), h(fin["target"])]

    assert list(heap.gcroot(h(t["weak"]["object"]))) == []
    pinned = list(heap.gcroot(h(t["pinned"]["object"])))
    assert [(p.root.name, p.root.address) for p in pinned] == [("pinned handle", h(t["pinned"]["handle"]) & ~1)]
    named = t["namedLocal"]
    assert [p.root.kind for p in heap.gcroot(h(named["address"]))] == ["stack"]
    assert list(heap.gcroot(h(named["address"]), stacks=False)) == []


def test_live_and_dead_counts_of_the_roots_scenario(roots_rt, roots_case: Live) -> None:
    live = {r.type.method_table: r.count for r in roots_rt.heap.stats(live=True)}
    dead = {r.type.method_table: r.count for r in roots_rt.heap.stats(live=False)}
    for name, t in roots_case.truth["types"].items():
        assert live.get(h(t["mt"]), 0) == t["count"], name
        assert dead.get(h(t["mt"]), 0) == t["deadCount"], name


def test_handle_chains_of_a_live_process(roots_case: Live) -> None:
    wrapper = roots_case.truth["wrapperLeak"]
    with sosext.open(pid=roots_case.pid) as rt:
        paths = list(rt.heap.gcroot(h(wrapper["chain"][-1])))
        assert [o.address for o in paths[0].objects] == [h(a) for a in wrapper["chain"]]


# -- inside the debuggers: sosext.current() --------------------------------------------------------

CURRENT_SCRIPT = """
import json, sys
sys.path.insert(0, {repo!r})
import sosext
rt = sosext.current()
rows = {{hex(r.type.method_table): [r.count, r.total_size] for r in rt.heap.stats()}}
live = {{hex(r.type.method_table): r.count for r in rt.heap.stats(live=True)}}
chain = [hex(o.address) for o in next(rt.heap.gcroot(int({target!r}, 16))).objects]
frames = {{t.os_id: [f.method for f in t.frames] for t in rt.threads if t.is_alive}}
with open({out!r}, "w") as f:
    json.dump({{"rows": rows, "live": live, "chain": chain, "frames": frames, "is_live": rt.is_live}}, f)
print("SOSEXT-API-DONE")
"""


def run_in_debugger(host: str, pid: int, script: Path, tmp_path: Path, env: dict[str, str] | None = None) -> str:
    if host == "lldb":
        cmd = [drivers.LLDB, "--no-lldbinit", "-b", "-p", str(pid), "-o", f"script exec(open({str(script)!r}).read())",
               "-o", "process detach"]
    else:
        if not drivers.GDB:
            pytest.skip("gdb is not installed")
        cmd = [drivers.GDB, "-nx", "-batch", "-p", str(pid), "-ex", f"source {script}"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=600)
    return proc.stdout


@pytest.mark.parametrize("host", ["lldb", "gdb"])
def test_current_in_the_debugger(host: str, heap_case: Live, tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    chain = heap_case.truth["rootChain"]
    script = tmp_path / "hunt.py"
    script.write_text(CURRENT_SCRIPT.format(repo=str(REPO), target=chain["path"][-1]["address"], out=str(out)))
    text = run_in_debugger(host, heap_case.pid, script, tmp_path)
    assert "SOSEXT-API-DONE" in text, text[-3000:]
    doc = json.loads(out.read_text())
    assert doc["is_live"] is True
    for name, t in heap_case.truth["types"].items():
        key = hex(h(t["mt"]))
        assert doc["rows"].get(key, [0, 0]) == [t["count"] + t["deadCount"], t["unalignedSize"] + t["deadUnalignedSize"]], name
        assert doc["live"].get(key, 0) == t["count"], name
    assert [h(a) for a in doc["chain"][1:]] == [h(s["address"]) for s in chain["path"]]
    for th in heap_case.truth["threads"]:
        assert any("HeapScenario.WorkerMain" in m for m in doc["frames"][str(th["osTid"])])


# -- docs/api.md: every example runs -----------------------------------------------------------------

def doc_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_doc_has_examples() -> None:
    blocks = doc_blocks()
    assert len(blocks) >= 8
    assert sum("sosext.current()" in b for b in blocks) == 1


def test_doc_examples_run(heap_case: Live, tmp_path: Path) -> None:
    """The standalone examples in order, as one script, from another directory; the one for
    the debuggers inside LLDB and GDB."""
    blocks = doc_blocks()
    subst = lambda b: (b.replace('"core.1234"', repr(str(heap_case.core))).replace("pid=1234", f"pid={heap_case.pid}")  # noqa: E731
                       .replace('"before.core"', repr(str(heap_case.core))))
    standalone = "\n".join(subst(b) for b in blocks if "sosext.current()" not in b)
    script = tmp_path / "doc_examples.py"
    script.write_text(standalone)
    env = drivers.link_front_door(tmp_path / "home")  # `import sosext` after the README's set-up, no PYTHONPATH
    res = subprocess.run([drivers.PYTHON, str(script)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "objects on the heap" in out and "error: 0x10 is not a valid object" in out
    assert "False\n" in out  # pid= has no stacks
    mine = own_types(heap_case.truth)
    assert f"{sum(t['count'] + t['deadCount'] for t in mine)} objects of my own types" in out
    # a core compared with itself: every type, none grew
    assert re.search(rf"^core file {re.escape(str(heap_case.core))} -> core file .* \d+ types, 0 grew$", out, re.M), out
    debugger = next(b for b in blocks if "sosext.current()" in b)
    inside = tmp_path / "doc_debugger.py"
    inside.write_text(debugger + "\nprint('SOSEXT-DOC-DONE')\n")  # the debuggers' Python imports sosext after set-up
    for host in ("lldb", "gdb") if drivers.GDB else ("lldb",):
        text = run_in_debugger(host, heap_case.pid, inside, tmp_path, env)
        assert "SOSEXT-DOC-DONE" in text and "System.String" in text, (host, text[-3000:])


# -- the example scripts over the leaking service ----------------------------------------------------

@dataclass
class LeakCase:
    old: Path
    new: Path
    before: dict
    after: dict
    pid: int  # the service, still running as it was for the new dump


@pytest.fixture(scope="module")
def leak_case(tmp_path_factory):  # type: ignore[no-untyped-def]
    from harness.debuggee import dotnet_path
    from test_leaks import Leaky, build_leaky, collect
    if dotnet_path() is None:
        pytest.skip("dotnet is not on PATH: this test needs the .NET SDK to build the bundled service")
    tmp = tmp_path_factory.mktemp("api-leaks")
    app = Leaky(build_leaky())
    try:
        # The shape of docs/api.md's run: the cache, and a static list and handles that leak too.
        app.leak(10, "customers")
        app.leak(5, "wrappers")
        before = app.leak(100)
        collect(app.started["pid"], tmp / "old.core")
        app.leak(290, "customers")
        app.leak(55, "wrappers")
        after = app.leak(2000)  # as the doc's run: 2,100 entries, the entry array outweighs the entries
        collect(app.started["pid"], tmp / "new.core")
        yield LeakCase(tmp / "old.core", tmp / "new.core", before, after, app.started["pid"])
    finally:
        app.stop()


def run_script(name: str, *args: str, cwd: Path) -> str:
    """``examples/scripts/NAME ARGS`` as docs/api.md types it (the script is executable, pinned to
    /usr/bin/python3), from another directory, after the README's set-up and without PYTHONPATH."""
    env = drivers.link_front_door(cwd / "home")
    res = subprocess.run([str(SCRIPTS / name), *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_api_md_script_examples_run_as_typed(leak_case: LeakCase, tmp_path: Path) -> None:
    """docs/api.md's `$ examples/scripts/…` lines, typed as there (a shell in the checkout, after
    the README's set-up, no PYTHONPATH; the doc's /tmp/before.core and /tmp/after.core are this
    run's dumps), print what the doc shows: the same lines, types and words, numbers aside."""
    from docblocks import blocks, match, steps
    env = drivers.link_front_door(tmp_path / "home")
    paths = {"/tmp/before.core": str(leak_case.old), "/tmp/after.core": str(leak_case.new)}
    ran = 0
    for block in blocks(DOC):
        for st in steps(block) if block.kind == "console" else []:
            if not st.command.startswith("examples/scripts/"):
                continue
            command = st.command
            for doc_path, path in paths.items():
                command = command.replace(doc_path, path)
            res = subprocess.run(["bash", "-c", command], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, timeout=600)
            assert res.returncode == 0 and res.stderr == "", (st.command, res.stderr)
            real = res.stdout
            for doc_path, path in paths.items():
                real = real.replace(path, doc_path)
            assert match(st.output, real.splitlines()) is not None, (
                f"{block.where}: `{st.command}`\n--- doc shows:\n" + "\n".join(st.output) + "\n--- this run:\n" + real)
            ran += 1
    assert ran == 4  # the four scripts


def test_grown_types_script(leak_case: LeakCase, tmp_path: Path) -> None:
    out = run_script("grown_types.py", str(leak_case.old), str(leak_case.new), "--type", "LeakyService.", cwd=tmp_path)
    lines = out.splitlines()
    first = lines[1].split()
    leaked = leak_case.after["cacheEntries"] - leak_case.before["cacheEntries"]
    assert first[4] == "LeakyService.CacheEntry"
    assert [int(x) for x in first[:3]] == [leak_case.before["cacheEntries"], leak_case.after["cacheEntries"], leaked]
    assert "  handle root (strong handle) static LeakyService.Program.s_worker" in lines
    chain = [ln.split()[-1] for ln in lines if ln.startswith("    -> ")]
    assert chain[1:3] == ["LeakyService.CacheWarmupWorker", "LeakyService.MemoryCache"]
    assert chain[-1] == "LeakyService.CacheEntry"
    # The instance is one the old dump did not have.
    address = int(re.search(r"A new LeakyService.CacheEntry at (0x[0-9a-f]+)", out).group(1), 16)
    with sosext.open(leak_case.old) as old:
        assert old.heap.find_object(address) is None or old.heap.find_object(address).type.name != "LeakyService.CacheEntry"


def test_find_strings_script(leak_case: LeakCase, tmp_path: Path) -> None:
    entries = leak_case.after["cacheEntries"]
    out = run_script("find_strings.py", str(leak_case.new), r"^customer-\d+$", "--live", "--stat", cwd=tmp_path)
    # Each entry's key is two strings: the dictionary's key and the entry's Key field.
    assert out.splitlines()[-1] == f"{2 * entries} strings, {entries} distinct"
    assert all(ln.split()[0] == "2" for ln in out.splitlines()[:-1])
    out = run_script("find_strings.py", str(leak_case.new), r"^customer-1$", cwd=tmp_path)
    assert out.splitlines()[-1] == "2 strings"
    # The running service, read through /proc: no garbage strings of that shape exist, so all count.
    out = run_script("find_strings.py", str(leak_case.pid), r"^customer-\d+$", "--stat", cwd=tmp_path)
    assert out.splitlines()[-1] == f"{2 * entries} strings, {entries} distinct"


def test_top_types_script(heap_case: Live, tmp_path: Path) -> None:
    out = run_script("top_types.py", str(heap_case.core), "--top", "40", "--live", cwd=tmp_path)
    lines = out.splitlines()
    rows = {}
    for ln in lines[1:]:
        if not ln.strip():
            break
        count, total, name = ln.split(None, 2)
        rows[name] = (int(count), int(total))
    for name, t in heap_case.truth["types"].items():
        if name in rows:
            assert rows[name] == (t["count"], t["unalignedSize"]), name
    totals = [v[1] for v in rows.values()]
    assert totals == sorted(totals, reverse=True)
    top = next(iter(rows))
    t = heap_case.truth["types"][top]  # the scenario's arrays of HeapItemA outweigh everything else
    biggest = max(t["sizes"])
    address = min(h(a) for a, s in zip(t["addresses"], t["sizes"]) if s == biggest)
    assert f"The biggest {top}, {biggest} bytes at {address:#x}:" in out
    assert "static DebuggeeHost.HeapScenario.s_root" in out
    live = run_script("top_types.py", str(heap_case.pid), "--top", "40", cwd=tmp_path)
    rows = {ln.split(None, 2)[2]: ln.split(None, 2)[:2] for ln in live.splitlines()[1:41] if ln.strip()}
    for name, t in heap_case.truth["types"].items():
        if csharp_name(sos_name(t["fullName"])) in rows:
            assert [int(x) for x in rows[csharp_name(sos_name(t["fullName"]))]] == [t["count"] + t["deadCount"],
                                                                       t["unalignedSize"] + t["deadUnalignedSize"]], name
    assert sum(csharp_name(sos_name(t["fullName"])) in rows for t in heap_case.truth["types"].values()) >= 5


def test_clr_path_names_the_dac(heap_case: Live, tmp_path: Path) -> None:
    """clr_path= as setclrpath: the DAC is taken from there, and the setting does not stick."""
    from sosext.dac import loader
    runtime_dir = Path(heap_case.truth["runtime"]["runtimeDir"])
    copy = tmp_path / "runtime"
    copy.mkdir()
    for name in ("libcoreclr.so", "libmscordaccore.so"):
        shutil.copy2(runtime_dir / name, copy / name)
    with sosext.open(heap_case.core, clr_path=str(copy)) as rt:
        assert rt.dac_path == str(copy / "libmscordaccore.so")
        check_stats(rt, heap_case.truth)
    assert loader.clr_path_override() is None
    with pytest.raises(sosext.SosError, match="not a directory"):
        sosext.open(heap_case.core, clr_path=str(tmp_path / "nowhere"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(sosext.SosError, match="DAC not found"):
        sosext.open(heap_case.core, clr_path=str(empty))


# -- the leak commands as records: retained, dominators, diff, leaks ---------------------------------

def test_growth_holders_script(leak_case: LeakCase, tmp_path: Path) -> None:
    out = run_script("growth_holders.py", str(leak_case.old), str(leak_case.new), "--top", "1", cwd=tmp_path)
    lines = out.splitlines()
    a, b = leak_case.after, leak_case.before
    # the service computes its cache's retained bytes itself
    assert lines[0].startswith("LeakyService.MemoryCache at 0x")
    assert lines[0].endswith(f" retains {a['cacheRetained']:,} bytes "
                             f"({a['cacheRetained'] - b['cacheRetained']:+,} since {leak_case.old})")
    assert lines[1].startswith("    held by static LeakyService.Program.s_worker (strong handle)")
    assert f"  {a['cacheEntries']:,} of them held by static LeakyService.Program.s_worker (strong handle):" in lines
    assert "    -> System.Collections.Generic.Dictionary<System.String, LeakyService.CacheEntry>+Entry[]" in lines


def test_retained_dominators_diff_and_leaks_equal_the_services_own_numbers(leak_case: LeakCase) -> None:
    a, b = leak_case.after, leak_case.before
    with sosext.open(leak_case.new) as rt, sosext.open(leak_case.old) as old:
        heap = rt.heap
        cache = next(heap.objects(type="LeakyService.MemoryCache"))
        assert heap.retained(cache) == heap.retained(cache.address) == a["cacheRetained"]
        r = heap.retention(cache)
        assert (r.object, r.retained) == (cache, a["cacheRetained"])
        assert [o.type.name for o in r.chain[:2]] == ["LeakyService.MemoryCache", "LeakyService.CacheWarmupWorker"]
        assert r.held_by[0].label == "static LeakyService.Program.s_worker (strong handle)"
        assert r.held_by[0].kind == "handle" and r.held_by[0].address
        # the worker and its cache are the top dominators: nothing else retains the cache's bytes
        top = heap.dominators(3)
        assert [t.retained for t in top] == sorted((t.retained for t in top), reverse=True)
        assert cache in [t.object for t in top]
        only = heap.dominators(5, type="LeakyService.MemoryCache")
        assert [(t.object, t.retained) for t in only] == [(cache, a["cacheRetained"])]
        entry = next(heap.objects(type="LeakyService.CacheEntry"))
        assert heap.retention(entry).chain[0] == entry and cache in heap.retention(entry).chain
        with pytest.raises(sosext.SosError):
            heap.retained(cache.address + 1)

        leaked = a["cacheEntries"] - b["cacheEntries"]
        for baseline in (str(leak_case.old), old):  # a core's path (a child walks it) or an open runtime
            d = sosext.diff(baseline, rt)
            rows = {t.name: t for t in d.types}
            assert (rows["LeakyService.CacheEntry"].old_count, rows["LeakyService.CacheEntry"].count_delta) == \
                (b["cacheEntries"], leaked)
            assert d.grown()[0].name == "System.Byte[]" and d.grown() == [t for t in d.types if t.size_delta > 0]
            h = d.holders[0]
            assert (h.object, h.retained, h.retained_delta) == (cache, a["cacheRetained"],
                                                               a["cacheRetained"] - b["cacheRetained"])
            assert h.chain[:2] == ("LeakyService.MemoryCache", "LeakyService.CacheWarmupWorker")
            assert h.held_by[0] == "static LeakyService.Program.s_worker (strong handle)"
            assert dict((n, c) for n, c, _b in h.types)["LeakyService.CacheEntry"] == a["cacheEntries"]
        # (type= is a part of the name, as -type: the dictionary's entry array matches too)
        report = sosext.leaks(old, rt, type="LeakyService.CacheEntry", top=3, groups=1)
        assert report.holders[0].object == cache
        assert all("LeakyService.CacheEntry" in g.growth.name for g in report.types)
        grown = next(g for g in report.types if g.growth.name == "LeakyService.CacheEntry")
        assert (grown.growth.name, grown.growth.count_delta) == ("LeakyService.CacheEntry", leaked)
        (path,) = grown.groups
        assert path.count == a["cacheEntries"] and path.example.type.name == "LeakyService.CacheEntry"
        assert path.root == "static LeakyService.Program.s_worker (strong handle)"
        assert path.types[-3:] == ("System.Collections.Generic.Dictionary<System.String, LeakyService.CacheEntry>",
                                   "System.Collections.Generic.Dictionary<System.String, LeakyService.CacheEntry>+Entry[]",
                                   "LeakyService.CacheEntry")


def test_the_api_names_a_leaks_generic_types_in_csharp(leak_case: LeakCase) -> None:
    """Issue 27's done-when on a heap with generic types (the service's Dictionary<String,
    CacheEntry>+Entry[]): no backtick in a type.name, a diff's or a leaks report's names, a
    holder's chain; the runtime's spelling stays as type.runtime_name."""
    entry_array = "System.Collections.Generic.Dictionary<System.String, LeakyService.CacheEntry>+Entry[]"
    with sosext.open(leak_case.new) as rt:
        stats = {r.type.name: r.type for r in rt.heap.stats()}
        assert entry_array in stats and not [n for n in stats if "`" in n]
        assert stats[entry_array].runtime_name.startswith("System.Collections.Generic.Dictionary`2+Entry[[")
        # type= finds the nested generic by the name dumpheap prints, the runtime's and a gcdump's
        from sosext.clr.typesystem.typekeys import event_name
        want = sum(r.count for r in rt.heap.stats() if r.type.name == entry_array)
        for spelling in (entry_array, stats[entry_array].runtime_name, event_name(stats[entry_array].runtime_name)):
            found = list(rt.heap.objects(type=spelling))
            assert len(found) == want and {o.type.name for o in found} == {entry_array}, spelling
        top = rt.heap.dominators(5)
        assert not [o.type.name for r in top for o in (r.object, *r.chain) if "`" in o.type.name]
        d = sosext.diff(str(leak_case.old), rt)
        names = [t.name for t in d.types] + [n for h in d.holders for n in (*h.chain, *(x[0] for x in h.types))]
        report = sosext.leaks(str(leak_case.old), rt, top=3, groups=3)
        names += [n for g in report.types for p in g.groups for n in (g.growth.name, *p.types)]
        assert entry_array in names and not [n for n in names if "`" in n]


def test_type_names_are_clrmds_and_every_spelling_finds_them(core_rt, heap_case: Live, oracle) -> None:  # type: ignore[no-untyped-def]
    """``type.name`` is ClrMD's ``ClrType.Name`` (the second opinion) for every MethodTable;
    ``runtime_name`` the runtime's, as the debuggee's Type.FullName has it; ``type=`` takes both
    and a gcdump's spelling."""
    from sosext.clr.typesystem.typekeys import event_name
    from test_typenames import ask
    clrmd = {int(mt, 16): name for mt, name in
             (ln.split("\t", 1) for ln in ask(oracle, "heap", str(heap_case.core)).splitlines())}
    rows = {r.type.method_table: r for r in core_rt.heap.stats()}
    assert rows.keys() == clrmd.keys()
    differ = {hex(mt): (r.type.name, clrmd[mt]) for mt, r in rows.items() if r.type.name != clrmd[mt]}
    assert not differ, differ
    assert not [r.type.name for r in rows.values() if "`" in r.type.name]
    for name, t in heap_case.truth["types"].items():
        row = rows.get(h(t["mt"]))
        if row:
            assert row.type.runtime_name == sos_name(t["fullName"]), name
    generic = [r for r in rows.values() if "`" in r.type.runtime_name and "+" not in r.type.runtime_name][:5]
    assert generic
    for r in generic:
        spellings = (r.type.name, r.type.runtime_name, event_name(r.type.runtime_name))
        assert {sum(1 for _ in core_rt.heap.objects(type=s)) for s in spellings} == {r.count}, spellings
