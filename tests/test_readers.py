"""The two runtime readers agree: `--reader contracts` prints what `--reader dac` prints.

Over the heap scenario's cores (workstation and server GC, regions and segments), every command
of COMMANDS runs once under each reader in the CLI and the outputs must be byte-identical.
The contracts reader is built in two halves: the GC heap (here) and the type system (branch
contracts-types). A command the contracts reader cannot answer yet prints one line naming the
DAC reader: that case is skipped, naming what is missing, until the other half lands.

The GC half is proved now as well: the same commands run in-process with a reader that takes
every GC and thread answer from the contracts reader and everything else from the DAC, and
must print exactly what the DAC alone prints; and the records both readers return (heaps,
generations, every segment, fill pointers, threads, handles in their order) must be equal
field for field.
Plus: `sosext.open(core, reader="contracts")` maps no libmscordaccore.
"""
from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from contextlib import redirect_stderr
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import drivers
import sosparse as sp
from harness import Debuggee, build_debuggee

pytestmark = pytest.mark.slow

CONFIGS = [("wks", "regions"), ("svr", "regions"), ("wks", "segments"), ("svr", "segments")]

# The reader methods the GC half answers (contracts/reader.py); the split reader takes these
# from the contracts reader.
GC_HALF = frozenset({
    "gc_heap_data", "gc_heap_list", "gc_heap_details", "gc_heap_static_data", "heap_segment_data",
    "number_generations", "generation_table", "finalization_fill_pointers", "global_allocation_context",
    "gc_dynamic_adaptation_mode", "oom_data", "useful_globals", "thread_store_data", "thread_data", "threads",
    "handles", "stack_limits", "stress_log_address",
})


# The commands compared (adding one is one line): {obj} is a HeapItemA instance, {mt} its
# MethodTable, {string_mt} System.String's, all from the debuggee's truth.
TEMPLATES = [
    "eeheap -gc",
    "gcwhere {obj}",
    "gcheapstat",
    "analyzeoom",
    "sizestats",
    "clrthreads",
    "gchandleleaks",
    "dumpheap -short",
    "dumpheap -strings",
    "dumpheap -gen loh -short",
    "dumpheap -gen poh -short",
    "dumpheap -gen foh -short",
    "dumpheap -stat",
    "dumpheap -mt {mt}",
    "dumpheap -type SosextDebuggee. -stat",
    "dumpheap -mt {string_mt} -min 100000 -short",
    "dumpheap -type SosextDebuggee.HeapItemA[] -min 1000 -max 100000",
    "dumpheap -gen gen2 -type SosextDebuggee. -stat",
    "dumpheap -live -type SosextDebuggee. -stat",
    "dumpheap -dead -type SosextDebuggee. -stat",
    "gchandles",
    "gchandles -stat",
    "finalizequeue",
    # the type-system half: {item_e} the HeapItemE instance with one field of each kind,
    # {root} the static Object[] root, {tail} the end of its reference chain
    "dumpobj {obj}",
    "dumpobj {item_e}",
    "dumparray {root}",
    "objsize {root}",
    "dumpmt {mt}",
    "dumpclass {item_e_mt}",
    "name2ee *!SosextDebuggee.HeapItemA",
    "dumpdomain",
    "gcroot {tail}",
    "dumplog",
    # stacks (contracts/stackwalk.py, stackrefs.py, debuginfo.py): frames with and without
    # source lines, the raw stack scan, the liveness that starts from the stack roots, and
    # root chains from a frame: {stack_held} is referenced from a worker thread's frame and
    # the static array, {stack_only} only from the frame
    "clrstack -all",
    "clrstack -n -all",
    "clrstack -r -all",
    "clrstack -f -all",
    "clrstack -f -native -all",
    "clrstack -gc -all",
    "clrstack -i -all",
    "clrstack -a -all",
    "clrstack -i -a -all",
    "eestack",
    "dso",
    "dumpheap -live",
    "dumpheap -dead",
    "gcroot {stack_only}",
    "gcroot {stack_held}",
    "gcroot -nostacks {tail}",
    "gcroot -nostacks {root}",
    # the rest of issue 24's point 2: {module} is the debuggee's module (from the DAC reader's
    # dumpmt), {exception} the runtime's preallocated OutOfMemoryException, {boxed} the data of a
    # boxed UniqueStruct ({struct_mt}), {core} the core itself (a diff against itself)
    "dumpheap -thinlock",
    "dumpheap -bycount -stat",
    "dumpheap -heap 0 -stat",
    "dumpheap -stat -retained",
    "dumpmt -md {mt}",
    "dumpvc {struct_mt} {boxed}",
    "dumpmodule {module}",
    "dumpmodule -mt {module}",
    "verifyheap",
    "pe {exception}",
    "syncblk",
    "syncblk -all",
    "retained {obj}",
    "dominators -top 5",
    "heapdiff {core}",
    "leaks {core}",
    "report --format folded -o -",
]


def commands_for(truth: dict, core: Path) -> list[str]:
    item = truth["types"]["SosextDebuggee.HeapItemA"]
    worker = truth["threads"][0]
    boxed = truth["types"]["SosextDebuggee.UniqueStruct"]
    # what the truth does not print, asked of the DAC reader once
    module, exception = drivers.run_cli([f"dumpmt {item['mt']}", "dumpheap -type System.OutOfMemoryException -short"],
                                        core=core, env={"SOSEXT_READER": "dac", "SOSEXT_CLR_PATH": ""})
    module_address = re.search(r"^Module:\s+([0-9A-Fa-f]+)$", module.text, re.M)
    exception_object = re.search(r"^([0-9a-f]{8,16})$", exception.text, re.M)
    assert module_address and exception_object, module.text + exception.text
    return [t.format(obj=item["addresses"][0], mt=item["mt"], string_mt=truth["stringMethodTable"]["mt"],
                     item_e=truth["itemE"]["address"], item_e_mt=truth["types"]["SosextDebuggee.HeapItemE"]["mt"],
                     root=truth["objects"]["staticRoot"]["address"], tail=truth["rootChain"]["path"][-1]["address"],
                     stack_only=worker["stackOnly"]["address"], stack_held=worker["held"]["address"],
                     struct_mt=boxed["mt"], boxed=f"{int(boxed['addresses'][0], 16) + 8:#x}",
                     module=module_address.group(1), exception=exception_object.group(1), core=core)
            for t in TEMPLATES]


def _needs_sdk() -> None:
    """Skip, saying why, where the .NET SDK that builds the debuggee is missing."""
    from harness import dotnet_path
    if dotnet_path() is None:
        pytest.skip("dotnet is not on PATH: these tests need the .NET SDK to build the debuggee")


def _older_debuggee(tfm: str) -> Path:
    """The debuggee built for an older runtime (its pack restored from NuGet), or a skip saying why not."""
    from harness import DebuggeeError
    _needs_sdk()
    try:
        return build_debuggee(tfm)
    except DebuggeeError as e:
        pytest.skip(f"no .NET {tfm[3]} debuggee: {str(e).splitlines()[0]}")


@dataclass
class Case:
    truth: dict
    core: Path
    commands: list[str]
    outputs: dict[str, list[drivers.Output]] = field(default_factory=dict)


@pytest.fixture(scope="module", params=CONFIGS, ids=lambda c: f"{c[0]}-{c[1]}")
def case(request, tmp_path_factory) -> Case:
    _needs_sdk()
    tfm = request.config.getoption("--tfm")
    gc, flavor = request.param
    cores = tmp_path_factory.mktemp(f"cores-readers-{gc}-{flavor}")
    with Debuggee("heap", gc=gc, gc_flavor=flavor, tfm=tfm, dll=build_debuggee(tfm), core_dir=cores) as d:
        c = Case(d.truth, d.write_core("heap", cores / "heap.core"), [])
    c.commands = commands_for(c.truth, c.core)
    for reader in ("dac", "contracts"):
        c.outputs[reader] = drivers.run_cli(c.commands, core=c.core, timeout=600,
                                            env={"SOSEXT_READER": reader, "SOSEXT_CLR_PATH": ""})
    return c


def _index(case: Case, command: str) -> int:
    return case.commands.index(command)


@pytest.mark.parametrize("n", range(len(TEMPLATES)), ids=lambda n: TEMPLATES[n].split(" {")[0].replace(" ", "_"))
def test_contracts_reader_prints_what_the_dac_reader_prints(case: Case, n: int) -> None:
    command = case.commands[n]
    dac, contracts = case.outputs["dac"][n], case.outputs["contracts"][n]
    assert not dac.errors or command.startswith("gcwhere"), dac.text[-2000:]
    if contracts.errors and not dac.errors:
        # Until the type-system half lands: one line naming the DAC reader, nothing else.
        assert len(contracts.errors) == 1 and "--reader dac" in contracts.errors[0], contracts.text[-2000:]
        pytest.skip(f"{command}: needs what the contracts reader does not answer yet "
                    f"({contracts.errors[0].removeprefix('error: ')})")
    assert contracts.text == dac.text, command


def test_syncblk_refusal_names_what_the_descriptor_lacks(case: Case) -> None:
    """syncblk under the contracts reader: one line listing exactly what the SyncBlock contract
    reads and the core's own descriptor lacks (the descriptor, parsed here, is the check)."""
    sys.path.insert(0, str(drivers.REPO))
    from sosext.contracts.descriptor import read_descriptor
    from sosext.dac.loader import locate_dac
    from sosext.targets.elfcore import CoreTarget
    out = case.outputs["contracts"][_index(case, "syncblk")]
    assert len(out.errors) == 1 and "--reader dac" in out.errors[0], out.text
    listed = re.search(r"lacks what the SyncBlock contract reads \((.+)\);", out.errors[0])
    assert listed, out.errors[0]
    target = CoreTarget(str(case.core))
    desc = read_descriptor(target, locate_dac(target).runtime)
    assert "SyncBlock" not in desc.contracts
    for item in listed.group(1).split(", "):
        kind, _, name = item.rpartition(" ")
        if kind == "global":
            assert not desc.has_global(name), item
        elif kind == "type":
            assert not desc.has_type(name), item
        else:
            type_name, _, field_name = name.partition(".")
            assert desc.has_type(type_name) and not desc.has_field(type_name, field_name), item
    # what the .NET 10 descriptor does give of it is not listed
    assert desc.has_global("SyncTableEntries") and desc.has_field("SyncTableEntry", "SyncBlock")
    assert "SyncTableEntries" not in listed.group(1) and "SyncTableEntry.SyncBlock" not in listed.group(1)


def test_stack_commands_have_what_the_truth_says(case: Case) -> None:
    """The stack commands compared above are not empty agreements: the DAC reader's clrstack
    has source lines and Main, and gcroot finds the stack-only object from its worker's frame."""
    out = {c: o.text for c, o in zip(case.commands, case.outputs["dac"])}
    assert " @ " in out["clrstack -all"] and "DebuggeeHost.Program.Main(System.String[])" in out["clrstack -all"]
    only = next(c for c in case.commands if c.startswith("gcroot") and
                c.endswith(case.truth["threads"][0]["stackOnly"]["address"]))
    assert "WorkerMain" in out[only], out[only]


def test_both_readers_map_code_to_the_same_il_offsets(case: Case) -> None:
    """The JIT's native-to-IL map (contracts/debuginfo.py) gives what the DAC's
    GetILOffsetsByAddress gives at every third byte of each JIT-compiled method on the stacks."""
    sys.path.insert(0, str(drivers.REPO))
    from sosext.contracts.reader import ContractReader
    from sosext.dac.loader import locate_dac
    from sosext.dac.sos import open_dac
    from sosext.dac.xclrdata import method_instance_by_address
    from sosext.targets.elfcore import CoreTarget
    target = CoreTarget(str(case.core))
    location = locate_dac(target)
    dac, contracts = open_dac(target, location), ContractReader(target, location.runtime)
    walker = contracts._stack_walker()
    starts = set()
    for _addr, thread in contracts.threads():
        for frame in walker.walk(thread.os_thread_id, thread.frame):
            block = walker.manager.code_block(frame.ip - 1) if frame.method_desc else None
            if block is not None and not block.ready_to_run:
                starts.add(block.start)
    compared = 0
    for start in sorted(starts):
        for offset in range(0, 0x400, 3):
            method = method_instance_by_address(dac, start + offset)
            if method is None:
                break
            with method:
                theirs = method.il_offsets(start + offset)
            assert (contracts.il_offsets(start + offset) or []) == (theirs or []), hex(start + offset)
            compared += 1
    assert len(starts) >= 3 and compared > 200


def test_both_readers_find_the_same_stack_references(case: Case) -> None:
    """Every thread's stack references (contracts: x64 unwinding, GC info) are the DAC's
    GetStackReferences records, field for field and in order; and the register names."""
    sys.path.insert(0, str(drivers.REPO))
    from sosext.contracts.reader import ContractReader
    from sosext.dac.loader import locate_dac
    from sosext.dac.sos import open_dac
    from sosext.targets.elfcore import CoreTarget
    target = CoreTarget(str(case.core))
    location = locate_dac(target)
    a, b = open_dac(target, location), ContractReader(target, location.runtime)
    total = 0
    for _addr, thread in a.threads():
        if thread.os_thread_id:
            refs = a.stack_references(thread.os_thread_id)
            assert refs == b.stack_references(thread.os_thread_id), hex(thread.os_thread_id)
            total += len(refs)
    held = {int(t["held"]["address"], 16) for t in case.truth["threads"]}
    found = {r.object for _a, t in a.threads() if t.os_thread_id for r in b.stack_references(t.os_thread_id)}
    assert held <= found and total > 20
    assert [a.register_name(r) for r in range(-17, 17)] == [b.register_name(r) for r in range(-17, 17)]


def test_both_readers_give_the_same_arguments_and_locals(case: Case) -> None:
    """Every managed frame's arguments and locals (name, register or stack address, bytes) from
    the contracts reader's native variable info are the DAC's IXCLRDataFrame values, frame by
    frame on every thread, and many of them have data (not an agreement on nothing); so are the
    frame register, the caller's stack pointer and the code's GC info (what a shared frame's generic
    context is read from)."""
    sys.path.insert(0, str(drivers.REPO))
    from sosext.contracts.reader import ContractReader
    from sosext.dac.loader import locate_dac
    from sosext.dac.sos import open_dac
    from sosext.readers.stacks import NotManagedThread
    from sosext.targets.elfcore import CoreTarget
    target = CoreTarget(str(case.core))
    location = locate_dac(target)
    a, b = open_dac(target, location), ContractReader(target, location.runtime)
    values = []
    callers = 0
    for _addr, thread in a.threads():
        if not thread.os_thread_id:
            continue
        try:
            dac = a.stack_frames(thread.os_thread_id, arguments=True, local_variables=True)
        except NotManagedThread:
            continue
        contracts = b.stack_frames(thread.os_thread_id, arguments=True, local_variables=True)
        mine = [(f.method_desc, f.arguments, f.locals, f.frame_pointer, f.caller_sp, b.code_gc_info(f.ip))
                for f in contracts.frames if f.is_managed]
        theirs = [(f.method_desc, f.arguments, f.locals, f.frame_pointer, f.caller_sp, a.code_gc_info(f.ip))
                  for f in dac.frames if f.is_managed]
        assert mine == theirs, hex(thread.os_thread_id)
        assert all(gc_info for *_v, gc_info in theirs), hex(thread.os_thread_id)
        # Every managed frame but the walk's last has its caller's SP, above its own.
        assert all(f.caller_sp > f.sp for f in dac.frames[:-1] if f.is_managed), hex(thread.os_thread_id)
        callers += sum(1 for f in dac.frames if f.caller_sp)
        values += [v for _md, args, local_values, *_r in theirs for v in (args or ()) + (local_values or ())]
    assert len(values) > 20 and sum(v.data is not None for v in values) > 10
    assert callers >= 10


# -- the GC half alone, under the DAC's type answers -----------------------------------------------

class SplitReader:
    """GC and thread answers from the contracts reader, the rest from the DAC reader."""

    name = "dac"

    def __init__(self, dac, contracts) -> None:  # type: ignore[no-untyped-def]
        self._dac, self._contracts = dac, contracts

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self._contracts if name in GC_HALF else self._dac, name)


def _run_in_process(core: Path, commands: list[str], split: bool) -> list[str]:
    sys.path.insert(0, str(drivers.REPO))
    from sosext.cli import _session_for_core
    from sosext.clr.runtime import set_reader
    from sosext.contracts.reader import ContractReader
    from sosext.hosts.common import execute
    set_reader("dac")
    try:
        session = _session_for_core(str(core))
        session.settings["workers"] = 1
        rt = session.runtime()
        if split:
            rt.reader = SplitReader(rt.reader, ContractReader(rt.target, rt.location.runtime))
        texts = []
        for command in commands:
            out: list[str] = []
            name, _, rest = command.partition(" ")
            with redirect_stderr(io.StringIO()):
                execute(session, name, rest, out.append, out.append, color=False)
            texts.append("\n".join(out))
        return texts
    finally:
        set_reader(None)


def test_gc_half_under_the_dacs_types_prints_what_the_dac_prints(case: Case) -> None:
    dac = _run_in_process(case.core, case.commands, split=False)
    split = _run_in_process(case.core, case.commands, split=True)
    for command, a, b in zip(case.commands, dac, split):
        assert a == b, command
    assert "Total" in dac[case.commands.index("dumpheap -stat")]


def test_both_readers_return_equal_records(case: Case) -> None:
    _assert_equal_records(case.core, case.truth)


@pytest.fixture(scope="module")
def net9_core(tmp_path_factory) -> tuple[Path, dict]:
    """A .NET 9 heap core (the runtime pack restored from NuGet when 9 is not installed)."""
    dll = _older_debuggee("net9.0")
    cores = tmp_path_factory.mktemp("cores-readers-net9")
    with Debuggee("heap", tfm="net9.0", dll=dll, core_dir=cores) as d:
        return d.write_core("heap", cores / "heap.core"), d.truth


def test_net9_gc_half_equals_the_dac(net9_core: tuple[Path, dict]) -> None:
    """.NET 9's descriptor has the Thread contract but fewer globals (no ProfilerControlBlock, no
    string globals) and its GC's DAC variables are version 2.1: the GC half still equals the DAC."""
    core, truth = net9_core
    clr_path = drivers.runtime_dir(core)  # built inside the checkout, which may lie under /tmp
    _assert_equal_records(core, truth, clr_path=clr_path)
    commands = ["eeheap -gc", "dumpheap -gen loh -short", "dumpheap -gen poh -short"]
    dac = drivers.run_cli(commands, core=core, env={"SOSEXT_READER": "dac", "SOSEXT_CLR_PATH": clr_path})
    contracts = drivers.run_cli(commands, core=core, env={"SOSEXT_READER": "contracts", "SOSEXT_CLR_PATH": clr_path})
    for command, a, b in zip(commands, dac, contracts):
        assert not a.errors and a.text == b.text, command


def _assert_equal_records(core: Path, truth: dict, clr_path: str | None = None) -> None:
    sys.path.insert(0, str(drivers.REPO))
    from sosext.contracts.reader import ContractReader
    from sosext.dac.loader import clr_path_override, locate_dac, set_clr_path
    from sosext.dac.sos import open_dac
    from sosext.targets.elfcore import CoreTarget
    target = CoreTarget(str(core))
    before = clr_path_override()
    set_clr_path(clr_path or before)
    try:
        location = locate_dac(target)
    finally:
        set_clr_path(before)
    a, b = open_dac(target, location), ContractReader(target, location.runtime)
    data = a.gc_heap_data()
    assert data == b.gc_heap_data()
    heaps = a.gc_heap_list(data.heap_count) if data.server_mode else [None]
    assert bool(data.server_mode) == (truth["runtime"]["serverGC"])
    if data.server_mode:
        assert heaps == b.gc_heap_list(data.heap_count)
    segments = 0
    for heap in heaps:
        assert (a.gc_heap_details(heap) if heap else a.gc_heap_static_data()) == \
            (b.gc_heap_details(heap) if heap else b.gc_heap_static_data())
        gens = a.generation_table(heap)
        assert gens == b.generation_table(heap)
        assert a.finalization_fill_pointers(heap) == b.finalization_fill_pointers(heap)
        assert a.oom_data(heap) == b.oom_data(heap)
        seen: set[int] = set()
        for g in gens:
            seg = g.start_segment
            while seg and seg not in seen:
                seen.add(seg)
                d = a.heap_segment_data(seg)
                assert d == b.heap_segment_data(seg), hex(seg)
                seg = d.next
        segments += len(seen)
    assert segments >= 3
    assert a.number_generations() == b.number_generations()
    assert a.global_allocation_context() == b.global_allocation_context()
    assert a.gc_dynamic_adaptation_mode() == b.gc_dynamic_adaptation_mode()
    assert a.useful_globals() == b.useful_globals()
    assert a.useful_globals().string_method_table == int(truth["stringMethodTable"]["mt"], 16)
    assert a.thread_store_data() == b.thread_store_data()
    assert list(a.threads()) == list(b.threads())
    assert [a.stack_limits(t) for t, _ in a.threads()] == [b.stack_limits(t) for t, _ in b.threads()]
    handles = a.handles()
    assert handles == b.handles() and len(handles) > 10  # same handles, same order
    os_tids = {t.os_thread_id for _, t in b.threads()}
    assert {t["osTid"] for t in truth["threads"]} <= os_tids
    # how every module was loaded (dumpmodule's Attributes, clrmodules' layout), where the
    # runtime's descriptor describes PEImage layouts (.NET 10)
    if b.descriptor.has_type("PEImageLayout"):
        modules = [m for d in a.app_domain_list(a.app_domain_store_data().domain_count)
                   for asm in a.assembly_list(d) for m in a.assembly_module_list(asm)]
        assert len(modules) > 5
        for m in modules:
            assert a.module_load_data(m) == b.module_load_data(m), hex(m)


def test_the_contracts_reader_maps_no_dac(case: Case) -> None:
    """sosext.open(core, reader="contracts") and a heap command leave no libmscordaccore mapped."""
    script = f"""
import json, sosext
rt = sosext.open({str(case.core)!r}, reader="contracts")
segments = len(rt.model.heap.segments)
try:
    rows = len(rt.heap.stats())
except sosext.SosError as e:
    rows = str(e)
maps = open("/proc/self/maps").read()
print(json.dumps({{"reader": rt.reader, "segments": segments, "rows": rows, "dac": "libmscordaccore" in maps}}))
"""
    done = subprocess.run([drivers.PYTHON, "-c", script], cwd=drivers.REPO, text=True, capture_output=True,
                          timeout=300, env={**drivers.os.environ, "SOSEXT_READER": "", "SOSEXT_CLR_PATH": ""})
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(done.stdout.splitlines()[-1])
    assert doc["reader"] == "contracts" and doc["segments"] >= 3 and doc["dac"] is False, doc


def test_net8_has_no_descriptor_and_says_so_in_one_line(tmp_path: Path) -> None:
    """.NET 8 exports no contract descriptor: --reader contracts names the DAC reader, and the
    automatic choice stays with the DAC."""
    dll = _older_debuggee("net8.0")
    with Debuggee("heap", tfm="net8.0", dll=dll, core_dir=tmp_path) as d:
        core = d.write_core("heap", tmp_path / "heap.core")
    clr_path = drivers.runtime_dir(core)  # built inside the checkout, which may lie under /tmp
    (out,) = drivers.run_cli(["eeheap -gc"], core=core, env={"SOSEXT_READER": "contracts", "SOSEXT_CLR_PATH": clr_path})
    assert out.lines == ["error: the contracts reader cannot read this runtime: the runtime has no contract "
                         "descriptor (DotNetRuntimeContractDescriptor: .NET 9 and later export one); "
                         "--reader dac reads it"], out.text
    (auto,) = drivers.run_cli(["eeversion -reader"], core=core, env={"SOSEXT_READER": "", "SOSEXT_CLR_PATH": clr_path})
    assert "Reader: the DAC reader answers" in auto.text


@pytest.mark.parametrize("host", [pytest.param("lldb", marks=pytest.mark.skipif(drivers.LLDB is None, reason="no lldb")),
                                  pytest.param("gdb", marks=pytest.mark.skipif(drivers.GDB is None, reason="no gdb"))])
def test_setreader_in_the_debuggers(case: Case, host: str) -> None:
    """setreader switches the reader of the debugger's target: eeheap -gc and clrstack -all are
    the DAC's, byte for byte, and sosstatus names the contracts reader."""
    if case.truth["runtime"]["serverGC"]:
        pytest.skip("one GC flavour is enough for the host plumbing")
    runner = drivers.run_lldb if host == "lldb" else drivers.run_gdb
    outs = runner(["setreader", "setreader contracts", "eeheap -gc", "sosstatus", "setreader auto", "eeversion -reader",
                   "setreader contracts", "clrstack -all"],
                  core=case.core, env={"SOSEXT_READER": "", "SOSEXT_CLR_PATH": ""})
    assert outs[0].lines == ["Runtime reader: auto"] and outs[1].lines == ["Runtime reader set to contracts"]
    assert outs[2].text.strip() == case.outputs["dac"][case.commands.index("eeheap -gc")].text.strip()
    assert "Reader: the contracts reader answers: asked for (setreader, --reader or SOSEXT_READER)" in outs[3].text
    assert "Reader: the DAC reader answers: its DAC is found and trusted" in outs[5].text
    # the contracts reader's stack walk with the debugger's registers: the CLI's DAC bytes
    assert outs[7].text.strip() == case.outputs["dac"][case.commands.index("clrstack -all")].text.strip()


@pytest.mark.parametrize("scenario", ["threads", "stackvalues"])
def test_stacks_with_an_exception_in_flight_are_the_dacs(scenario: str, tmp_path: Path) -> None:
    """A thread blocked inside a catch block (its SoftwareExceptionFrame, the catch funclet,
    the frames the exception unwound, the funclet's parent): clrstack (-r, -f), eestack, dso
    and the liveness print the DAC reader's bytes, and every thread's stack references are the
    DAC's (the unwound frames and the funclet's parent report none); so do the arguments and
    locals of every frame (clrstack -a, -i -a), a catch funclet's among them."""
    _needs_sdk()
    with Debuggee(scenario, dll=build_debuggee(), core_dir=tmp_path) as d:
        core = d.write_core("heap", tmp_path / f"{scenario}.core")
    commands = ["clrstack -all", "clrstack -r -all", "clrstack -f -all", "eestack", "dso", "dumpheap -live -stat",
                "clrstack -a -all", "clrstack -i -a -all"]
    outs = {reader: drivers.run_cli(commands, core=core, timeout=600,
                                    env={"SOSEXT_READER": reader, "SOSEXT_CLR_PATH": ""})
            for reader in ("dac", "contracts")}
    for command, a, b in zip(commands, outs["dac"], outs["contracts"]):
        assert not a.errors and a.text == b.text, command
    assert "[SoftwareExceptionFrame: " in outs["dac"][0].text
    if scenario == "stackvalues":
        # and the values are the debuggee's own: a double, a bool, a long and an int argument
        v = d.truth["values"]
        frame = outs["contracts"][commands.index("clrstack -i -a -all")].text.split(f" {v['method']}(", 1)[1]
        frame = frame.split("LOCALS:", 1)[0]
        for line in (f"  + int count  = {v['count']}", f"  + long big  = {v['big']}",
                     f"  + bool flag  = {'true' if v['flag'] else 'false'}", f"  + double ratio  = {v['ratio']:f}"):
            assert line in frame.splitlines(), (line, frame)
    sys.path.insert(0, str(drivers.REPO))
    from sosext.contracts.reader import ContractReader
    from sosext.dac.loader import locate_dac
    from sosext.dac.sos import open_dac
    from sosext.targets.elfcore import CoreTarget
    target = CoreTarget(str(core))
    location = locate_dac(target)
    dac, contracts = open_dac(target, location), ContractReader(target, location.runtime)
    for _addr, thread in dac.threads():
        if thread.os_thread_id:
            assert dac.stack_references(thread.os_thread_id) == contracts.stack_references(thread.os_thread_id)


def test_bad_reader_names_are_one_line(case: Case) -> None:
    """A reader name that is not one, from setreader, SOSEXT_READER or --reader, is one escaped
    line; the session goes on with the reader it had."""
    outs = drivers.run_cli(["setreader bogus", "setreader \x1b[31mx", "setreader", "eeheap -gc"], core=case.core)
    assert outs[0].lines == ["error: setreader: unknown reader 'bogus' (choose dac, contracts or auto)"]
    assert outs[1].lines == ["error: setreader: unknown reader '\\x1b[31mx' (choose dac, contracts or auto)"]
    assert "\x1b" not in "".join(o.text for o in outs)
    assert outs[3].text == case.outputs["dac"][_index(case, "eeheap -gc")].text
    (status,) = drivers.run_cli(["sosstatus"], core=case.core, env={"SOSEXT_READER": "bogus"})
    assert "SOSEXT_READER: unknown reader 'bogus' (choose dac, contracts or auto)" in status.text
    assert "Traceback" not in status.text
    done = subprocess.run([drivers.PYTHON, "-m", "sosext", "analyze", str(case.core), "--reader", "bogus",
                           "-c", "eeheap -gc"], cwd=drivers.REPO, text=True, capture_output=True, timeout=120)
    assert done.returncode == 2 and done.stderr.splitlines()[-1].startswith(
        "sosext analyze: error: argument --reader: invalid choice: 'bogus'"), done.stderr


def test_a_dynamic_methods_code_names_its_method(tmp_path: Path) -> None:
    """A DynamicMethod's code lives in a code heap of its own, whose range section is
    collectible: the range section map's pointers to its fragments carry bit 0, which the
    contracts reader masks (a webapi core's expression-tree frame, lambda_method1, failed so).
    From its code, both readers find the MethodDesc the debuggee read from the DynamicMethod's
    handle; the contracts reader's dumpmd names it and its code. dumpil of the MethodDesc says
    in one line that the DAC reader answers (the DynamicMethod object is behind the method's
    resolver, which no data contract describes); dumpil of the object prints the DAC reader's
    bytes, the debuggee's IL. (This core's DAC answers no MethodDescData for the method: SOS's
    dumpmd prints nothing; the webapi cores' lambda_method1 is answered by both readers alike,
    tests/test_readers_realapps.py.)"""
    _needs_sdk()
    with Debuggee("gcscripts", dll=build_debuggee(), core_dir=tmp_path) as d:
        core = d.write_core("heap", tmp_path / "gcscripts.core")
    dyn = d.truth["gcscripts"]["dynamic"]
    md = int(dyn["methodDesc"], 16)
    env = {"SOSEXT_CLR_PATH": ""}
    (dumpmd,) = drivers.run_cli([f"dumpmd {md:x}"], core=core, env={**env, "SOSEXT_READER": "contracts"})
    code = re.search(r"^Current CodeAddr: +([0-9a-f]{16})$", dumpmd.text, re.M)
    assert code and "Method Name:          DynamicClass.GcScriptsAddZero(Int32)\n" in dumpmd.text, dumpmd.text
    commands = [f"ip2md {int(code.group(1), 16) + 1:x}", f"dumpil {dyn['address']}", f"dumpil {md:x}"]
    outs = {reader: drivers.run_cli(commands, core=core, timeout=600, env={**env, "SOSEXT_READER": reader})
            for reader in ("dac", "contracts")}
    for reader in ("dac", "contracts"):
        assert outs[reader][0].text.startswith(f"MethodDesc:   {md:016x}\n"), (reader, outs[reader][0].text)
    assert outs["contracts"][0].text.splitlines()[1:3] == dumpmd.text.splitlines()[:2]
    assert not outs["dac"][1].errors and outs["dac"][1].text == outs["contracts"][1].text
    assert [ln.split(": ", 1)[1] for ln in outs["dac"][1].text.splitlines() if ln.startswith("IL_")] == dyn["il"]
    assert outs["contracts"][2].text == ("error: the contracts reader cannot answer a dynamic method's DynamicMethod "
                                         "object (its resolver is in no data contract) yet; --reader dac (or "
                                         "setreader dac) does\n")


def _thread_section(text: str, os_tid: int) -> str:
    """One thread's part of a `clrstack -all` output (after its `OS Thread Id:` line, to the next)."""
    sections = sp.thread_sections(text)
    assert os_tid in sections, f"no thread 0x{os_tid:x} in:\n{text}"
    return sections[os_tid]


def test_floating_point_register_values_are_the_dacs(tmp_path: Path) -> None:
    """A thread spinning in an optimized leaf loop keeps its double argument in an XMM register:
    the JIT's variable info places it in a floating-point register (VLT_REG_FP, checked here, so
    that the case is really met). The DAC has no place for such a value
    (NativeVarLocations knows no floating-point register): SOS prints `<no data>` in clrstack -a
    and ICorDebug's CORDBG_E_IL_VAR_NOT_AVAILABLE in clrstack -i -a. The contracts reader refused
    the whole stack in one line there; both readers now print the same bytes, and they are
    SOS's (when dotnet-dump is installed)."""
    _needs_sdk()
    with Debuggee("stackvalues", dll=build_debuggee(), core_dir=tmp_path) as d:
        tag, tid_text, method = d.command("fpspin").split()
        core = d.write_core("heap", tmp_path / "fpspin.core")
    assert tag == "SOSEXT-FPSPIN", tag
    tid = int(tid_text)
    commands = ["clrstack -all -a", "clrstack -all -i -a"]
    outs = {reader: drivers.run_cli(commands, core=core, timeout=600,
                                    env={"SOSEXT_READER": reader, "SOSEXT_CLR_PATH": ""})
            for reader in ("dac", "contracts")}
    for command, a, b in zip(commands, outs["dac"], outs["contracts"]):
        assert not a.errors and not b.errors and a.text == b.text, command
    plain = _thread_section(outs["contracts"][0].text, tid)
    frame = plain.split(f" {method}(Double, Single) ", 1)[1].split("\n\n", 1)[0]
    assert "        scale = <no data>\n        factor = <no data>\n" in frame, frame
    icd = _thread_section(outs["contracts"][1].text, tid) if f"0x{tid:x}" in outs["contracts"][1].text else \
        outs["contracts"][1].text
    assert "  + (Error 0x80131304 retrieving parameter 'scale')\n" in icd, icd

    # the values are in floating-point registers where the thread stopped
    sys.path.insert(0, str(drivers.REPO))
    from sosext.contracts.debuginfo import VLT_REG_FP, code_vars
    from sosext.contracts.reader import ContractReader
    from sosext.dac.loader import locate_dac
    from sosext.targets.elfcore import CoreTarget
    target = CoreTarget(str(core))
    reader = ContractReader(target, locate_dac(target).runtime)
    ip = int(re.search(rf"^[0-9A-F]{{16}} ([0-9A-F]{{16}}) {re.escape(method)}\(", plain, re.M).group(1), 16)
    manager = reader._stack_walker().manager
    block = manager.code_block(ip)
    offset = ip - block.start
    kinds = {v.number: v.kind for v in code_vars(manager, block) if v.start <= offset <= v.end}
    assert kinds.get(0) == VLT_REG_FP, kinds  # scale: used by every turn of the loop

    import sosref
    if sosref.dotnet_dump() is None:
        return  # the parity tests say SOS is not installed; the readers' agreement stands alone
    (sos,) = sosref.run_sos(core, commands[:1])
    assert _thread_section(sos.text, tid) == plain


def test_a_thread_in_an_exception_filter(tmp_path: Path) -> None:
    """A thread blocked inside an exception filter (the managed dispatcher's first pass calls
    the filter funclet through an InlinedCallFrame whose Datum is the ExceptionHandlingHelper
    marker alone). The DAC's stack reference enumeration faults on such a thread: dotnet-dump's
    clrstack -gc dies of SIGSEGV there, and so did sosext's DAC reader, taking the debugger's
    session with it. sosext now asks the contracts reader for that thread's references (one line
    on stderr says so) and every command prints under the DAC reader what it prints under the
    contracts reader; the helper's InlinedCallFrame names no method (its Datum's marker bits are
    no MethodDesc) under either. The filter's argument, the exception the debuggee caught, is a
    stack root of that thread. The filter runs in the first pass, so the frames below it (the
    dispatcher's, the ones that threw, the parent's) are live and report their references, and
    the filter its tracked slots alone: the debuggee proves it with a full GC during the filter,
    which leaves alive an object only the throwing FilterThrowOuter's frame holds. Beside it, a thread blocked in a finally block that the second
    pass runs is the DAC's to answer, and both readers print the same for it too, as for three
    more threads: a catch inside a finally, a callback from native code, a static constructor."""
    _needs_sdk()
    with Debuggee("stackvalues", dll=build_debuggee(), core_dir=tmp_path) as d:
        tag, tid_text, exception, kept = d.command("filterwait").split()
        finally_tag, finally_tid, _e = d.command("finallywait").split()
        more_tag, *more = d.command("morewaits").split()
        core = d.write_core("heap", tmp_path / "filter.core")
    assert (tag, finally_tag, more_tag) == ("SOSEXT-FILTER", "SOSEXT-FINALLY", "SOSEXT-MORE")
    tid = int(tid_text)
    commands = ["clrstack -all", "clrstack -all -gc", "clrstack -all -a", "clrstack -all -i -a", "clrstack -all -f",
                "eestack", "dso", "dumpheap -live -stat", f"gcroot {exception}", f"gcroot {kept}"]
    outs = {reader: drivers.run_cli(commands, core=core, timeout=600,
                                    env={"SOSEXT_READER": reader, "SOSEXT_CLR_PATH": ""})
            for reader in ("dac", "contracts")}
    notice = (f"sosext: thread {tid:#x} is dispatching an exception, where the DAC faults reading its stack's "
              "references; the contracts reader answers for it")
    # stderr is in the CLI's output here: the notice, once in the session, where it was written
    assert sum(o.text.count(notice + "\n") for o in outs["dac"]) == 1
    assert all(notice not in o.text for o in outs["contracts"])
    texts = [o.text.replace(notice + "\n", "") for o in outs["dac"]]
    for command, a, text, b in zip(commands, outs["dac"], texts, outs["contracts"]):
        assert not a.errors and not b.errors and text == b.text, command
    gc = _thread_section(texts[1], tid)
    assert ".FilterWait(DebuggeeHost.StackValuesException)" in gc and "System.Runtime.EH.FindFirstPassHandler(" in gc
    assert "<unknown method>" not in texts[0]
    assert f"-> {int(exception, 16):016x} - DebuggeeHost.StackValuesException" in gc, gc
    assert f"Thread {tid:x}:" in texts[-2]
    # The runtime's own answer: a full GC while the filter ran left alive the object only
    # FilterThrowOuter's frame holds (below the filter, not unwound yet): that frame is reported.
    assert int(kept, 16), "the GC during the filter collected what FilterThrowOuter's frame holds"
    assert f"-> {int(kept, 16):016x} - DebuggeeHost.StackValuesItem" in gc, gc
    assert f"Thread {tid:x}:" in texts[-1] and ".FilterThrowOuter()" in texts[-1], texts[-1]
    # a finally block run by the second pass, on another thread: no filter, the DAC's own answer
    assert ".FinallyThrower()" in _thread_section(texts[1], int(finally_tid))
    # and three more states (the DAC's answers): a catch block inside a finally block (two
    # exceptions in flight), a managed callback libc's qsort calls (native frames between
    # managed ones; the callback's object in a register), a static constructor being run
    nested, callback, cctor = (_thread_section(texts[1], int(t)) for t in more)
    assert nested.count(".NestedOuter()") == 3 and ".NestedThreadMain()" in nested, nested
    assert ".CompareBlocking(Void*, Void*)" in callback and ".CallbackThreadMain()" in callback, callback
    assert "- DebuggeeHost.StackValuesItem" in callback, callback
    assert "+SlowInit..cctor()" in cctor and ".CctorThreadMain()" in cctor, cctor


def test_a_net9_thread_in_an_exception_filter_is_the_dacs(tmp_path: Path) -> None:
    """.NET 9's DAC answers a thread blocked in an exception filter, and its contracts reader walks
    no stacks (the descriptor has no ExecutionManager contract): the filter check says no there
    and the DAC answers every thread (a refusal of the check must not empty them all, as it once
    did). Its answer for the filter thread is the rule the contracts reader follows on .NET 10:
    the frames below the filter report their references, among them the object only the
    throwing FilterThrowOuter's frame holds, which a full GC during the filter left alive."""
    dll = _older_debuggee("net9.0")
    with Debuggee("stackvalues", tfm="net9.0", dll=dll, core_dir=tmp_path) as d:
        tag, tid_text, _exception, kept = d.command("filterwait").split()
        core = d.write_core("heap", tmp_path / "filter9.core")
    assert tag == "SOSEXT-FILTER" and int(kept, 16), (tag, kept)
    (out,) = drivers.run_cli(["clrstack -all -gc"], core=core, timeout=600,
                             env={"SOSEXT_READER": "dac", "SOSEXT_CLR_PATH": drivers.runtime_dir(core)})
    assert not out.errors and "is dispatching an exception" not in out.text, out.text
    section = _thread_section(out.text, int(tid_text))
    assert f"-> {int(kept, 16):016x} - DebuggeeHost.StackValuesItem" in section, section
    assert out.text.count(" -> ") > 40  # every thread's references, not the filter thread's alone


_GC_BUSY = "error: The GC heap is not in a valid state for traversal.  (Use -ignoreGCState to override.)"


def test_threads_the_gc_suspends_are_the_dacs(tmp_path: Path) -> None:
    """Threads caught while a GC suspends them or an exception is dispatched: the debuggee's
    throwstorm collects in a loop while two threads call a small method in a loop, one spins in a
    loop with no call (fully interruptible code: a suspension redirects it; the others are
    redirected only when stopped right at a call's return, which one debuggee process may never
    be) and two throw and catch in a loop (through a filter and a finally block), and cores are
    taken until one shows a thread the suspension redirected (a RedirectedThreadFrame, whose saved CONTEXT is
    where the thread's managed frames go on; the descriptor lists no type for it: it is a
    ResumableFrame) and one dispatching an exception (the .NET 10 DAC faults reading its stack
    references: sosext's DAC reader asks the contracts reader for it, one line on stderr). The
    contracts reader lost every managed frame of a redirected thread; both readers now print the
    same stacks, references and values on each core (a thread hijacked at a return address, a
    HijackFrame, shows up in some of them too), and the DAC reader's process never dies. A core
    written while a collection runs has a heap no walk may take: both readers then refuse the
    heap commands in the same one line, as SOS does."""
    _needs_sdk()
    commands = ["clrstack -all -f", "clrstack -all -gc", "clrstack -all -a", "dumpheap -live -stat"]
    notice = re.compile(r"^sosext: thread 0x[0-9a-f]+ is dispatching an exception, where the DAC faults reading "
                        r"its stack's references; the contracts reader answers for it\n", re.M)
    seen: set[str] = set()
    with Debuggee("stackvalues", dll=build_debuggee(), core_dir=tmp_path) as d:
        assert d.command("throwstorm") == "SOSEXT-THROWSTORM"
        for attempt in range(16):
            if attempt == 4:  # collections back to back: threads caught mid-suspension more often
                assert d.command("stormfast") == "SOSEXT-STORMFAST"
            core = d.write_core("heap", tmp_path / f"storm{attempt}.core")
            outs = {reader: drivers.run_cli(commands, core=core, timeout=600,
                                            env={"SOSEXT_READER": reader, "SOSEXT_CLR_PATH": ""})
                    for reader in ("dac", "contracts")}
            for command, a, b in zip(commands, outs["dac"], outs["contracts"]):
                # a core written while a GC runs: the heap walk refuses in one line, as SOS does
                assert a.errors == b.errors and set(a.errors) <= {_GC_BUSY}, (attempt, command, a.errors)
                assert notice.sub("", a.text) == b.text, (attempt, command)
            seen |= {kind for kind in ("RedirectedThreadFrame", "HijackFrame") if f"[{kind}: " in outs["dac"][0].text}
            if notice.search("".join(o.text for o in outs["dac"])):
                seen.add("dispatching")
            core.unlink()
            if {"RedirectedThreadFrame", "dispatching"} <= seen and attempt >= 4:
                break
    assert {"RedirectedThreadFrame", "dispatching"} <= seen, f"16 cores showed only {sorted(seen)}"
