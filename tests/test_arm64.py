"""linux-arm64 cores on this x86-64 machine, in the CLI, LLDB (given the executable) and GDB
(gdb-multiarch).

The cores are made by tests/harness/arm64core.py: the debuggee published for linux-arm64, run
under qemu-aarch64-static, killed with SIGABRT, qemu's core made kernel-like. The debuggee
prints its own truth (MethodTables, counts, sizes, addresses, thread ids); ClrMD 4.2 built for
linux-arm64 and run under qemu with the core's own arm64 DAC is the second opinion.

What needs no runtime reader (threads, registers, modules, sosstatus) is asserted outright.
What needs one (the heap, objects, roots, managed threads and stacks) can only be read by the
contracts reader here (the DAC is arm64 code): where it cannot answer, a test xfails with
sosext's own one-line error as the reason; any other failure fails.
"""
from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import drivers
import sosparse as sp
from harness import dotnet_path
from harness.arm64core import Arm64Core, Arm64Unavailable, arm64_core, clrmd_opinion
from test_objects import field_rows, label
from test_roots import parse_gcroot
from test_threads import call_sites, in_order, thread_rows

pytestmark = pytest.mark.slow

HOSTS = ["cli", "lldb", "gdb"]


def h(text: str) -> int:
    return int(text, 16)


@dataclass
class Case:
    core: Arm64Core
    commands: list[str]
    outputs: dict[str, list[drivers.Output]] = field(default_factory=dict)

    @property
    def truth(self) -> dict:
        return self.core.truth

    def out(self, host: str, command: str) -> drivers.Output:
        if host not in self.outputs:
            self.outputs[host] = run_host(host, self.core, self.commands)
        return self.outputs[host][self.commands.index(command)]


def run_host(host: str, core: Arm64Core, commands: list[str]) -> list[drivers.Output]:
    if host == "cli":
        return drivers.run_cli(commands, core=core.core)
    if host == "lldb":
        if drivers.LLDB is None:
            pytest.skip("lldb-16 is not installed")
        # lldb-16 opens an AArch64 core on x86-64 only with its executable ("Unsupported OS" without).
        return drivers.run_lldb(commands, core=core.core, exe=str(core.exe))
    if drivers.GDB_MULTIARCH is None:
        pytest.skip("gdb-multiarch is not installed (scripts/setup.sh --arm64)")
    return drivers.run_gdb(commands, core=core.core, exe=str(core.exe), gdb=drivers.GDB_MULTIARCH)


def make_core(scenario: str, commands: tuple[str, ...] = (), attempt: int = 0) -> Arm64Core:
    if dotnet_path() is None:
        pytest.skip("dotnet is not on PATH: the arm64 debuggee is published with the .NET SDK")
    try:
        return arm64_core(scenario, commands, attempt)
    except Arm64Unavailable as e:
        pytest.skip(str(e))


def main_tid(truth: dict) -> int:
    return truth["runtime"]["mainOsTid"]


def heap_commands(t: dict) -> list[str]:
    e = t["itemE"]
    str_field = next(f for f in e["fields"] if f["name"] == "Str")
    return ["sosstatus", "threads", "registers", "modules", "modules -v",
            "dumpheap -stat", f"dumpobj {e['address']}", f"dumpobj {str_field['value']}",
            f"gcroot {t['rootChain']['path'][-1]['address']}", "clrthreads",
            "clrstack -all", "dumpheap -live -type SosextDebuggee. -stat",
            f"dso {t['threads'][0]['osTid']:#x}"]


def roots_commands(t: dict) -> list[str]:
    return [f"gcroot {t['wrapperLeak']['chain'][-1]}", "dumpheap -stat"]


@pytest.fixture(scope="module")
def heap() -> Case:
    core = make_core("heap")
    return Case(core, heap_commands(core.truth))


@pytest.fixture(scope="module")
def roots() -> Case:
    core = make_core("roots")
    return Case(core, roots_commands(core.truth))


# stackvalues' threads in the states crash dumps are taken in: blocked in an exception filter
# (the dispatcher's first pass), in a finally block the second pass runs, in a catch block inside
# a finally block, in a managed callback from libc's qsort, in a static constructor
DISPATCH = ("filterwait", "finallywait", "morewaits")


@pytest.fixture(scope="module")
def dispatch() -> Case:
    core = make_core("stackvalues", DISPATCH)
    return Case(core, ["clrstack -all -gc", "clrstack -a -all"])


def dispatch_threads(truth: dict) -> dict[str, object]:
    """The threads and objects the debuggee's replies name (tests/test_readers.py reads the same)."""
    (tag, tid, exception, kept), (ftag, ftid, _e), (mtag, *more) = (r.split() for r in truth["replies"])
    assert (tag, ftag, mtag) == ("SOSEXT-FILTER", "SOSEXT-FINALLY", "SOSEXT-MORE")
    nested, callback, cctor = map(int, more)
    return {"filter": int(tid), "exception": h(exception), "kept": h(kept), "finally": int(ftid),
            "nested": nested, "callback": callback, "cctor": cctor}


@pytest.fixture(params=HOSTS)
def host(request) -> str:
    return request.param


# The reader answers when it does not fail with one of these: the refusal of a foreign core
# (before a reader for it exists) and the contracts reader's "cannot answer yet".
_NOT_YET = re.compile(r"aarch64 core; this machine is x86_64|contracts reader|no contract|need the DAC|"
                      r"data descriptor has no", re.I)


def answered(out: drivers.Output, what: str) -> str:
    """The output of a command that needs a runtime reader; xfails naming what is missing when
    sosext's own error says the reader cannot answer yet, fails on any other error."""
    errors = out.errors
    if errors and _NOT_YET.search(errors[0]):
        pytest.xfail(f"{what} on an arm64 core needs the contracts reader (sosext/contracts) to answer; "
                     f"sosext says: {errors[0]}")
    assert not errors, out.text
    return out.text


# -- what needs no runtime reader ----------------------------------------------------------------


def test_threads_lists_the_debuggees_threads(heap: Case, host: str) -> None:
    text = heap.out(host, "threads").text
    tids = {int(m.group(1)) for m in re.finditer(r"\((\d+)\)", text)}
    want = {main_tid(heap.truth)} | {t["osTid"] for t in heap.truth["threads"]}
    assert want <= tids, text


def test_registers_are_aarch64_and_alike_in_every_host(heap: Case, host: str) -> None:
    text = heap.out(host, "registers").text
    regs = dict(re.findall(r"^(\w+) = 0x([0-9a-f]{16})$", text, re.M))
    assert list(regs) == [f"x{i}" for i in range(31)] + ["sp", "pc", "pstate"], text
    assert text == heap.out("cli", "registers").text
    # The program counter lies in a module the core maps (the main thread waits in libc's read).
    pc = h(regs["pc"])
    mods = [ln.split() for ln in heap.out(host, "modules").lines if re.match(r"^[0-9A-F]{16} ", ln)]
    assert any(h(b) <= pc < h(b) + h(s) for b, s, *_ in mods), hex(pc)


def test_registers_equal_the_debuggers_own(heap: Case) -> None:
    """LLDB's own reading of the core's NT_PRSTATUS (register read) is the second opinion."""
    out = drivers.run_lldb(["register read"], core=heap.core.core, exe=str(heap.core.exe))[0].text
    lldb_regs = {n: int(v, 16) for n, v in re.findall(r"^\s+(\w+) = 0x([0-9a-f]+)", out, re.M)}
    ours = {n: int(v, 16) for n, v in re.findall(r"^(\w+) = 0x([0-9a-f]{16})$", heap.out("cli", "registers").text, re.M)}
    alias = {"x29": "fp", "x30": "lr", "pstate": "cpsr"}
    for name, value in ours.items():
        assert lldb_regs[alias.get(name, name)] == value, name


def test_modules_name_the_arm64_runtime(heap: Case, host: str) -> None:
    runtime_dir = heap.truth["runtime"]["runtimeDir"]
    paths = {ln.split(None, 2)[2] for ln in heap.out(host, "modules").lines if re.match(r"^[0-9A-F]{16} ", ln)}
    assert f"{runtime_dir}/libcoreclr.so" in paths
    assert f"{runtime_dir}/System.Private.CoreLib.dll" in paths
    # The build id sosext reads from the image in the core is the file's own (readelf's).
    text = heap.out(host, "modules -v").text
    block = text.split(f"{runtime_dir}/libcoreclr.so\n", 1)[1]
    assert block.splitlines()[0].strip() == f"BuildId: {gnu_build_id(Path(runtime_dir) / 'libcoreclr.so')}"


def gnu_build_id(path: Path) -> str:
    import subprocess
    out = subprocess.run(["readelf", "-n", str(path)], stdout=subprocess.PIPE, text=True).stdout
    return re.search(r"Build ID: ([0-9a-f]+)", out).group(1)


def test_sosstatus_names_the_architecture(heap: Case, host: str) -> None:
    text = heap.out(host, "sosstatus").text
    assert "Architecture: aarch64 (this machine: x86_64)" in text.splitlines()
    assert not heap.out(host, "sosstatus").errors


def test_native_unwinding_equals_gdb_multiarch(heap: Case) -> None:
    """sosext's AArch64 CFI unwinder (targets/cfi.py) walks each thread's native frames to the
    same return addresses as gdb-multiarch's own unwinder, down to the first managed frame."""
    from sosext.targets.cfi import unwind_native
    from sosext.targets.elfcore import CoreTarget
    if drivers.GDB_MULTIARCH is None:
        pytest.skip("gdb-multiarch is not installed (scripts/setup.sh --arm64)")
    import subprocess
    out = subprocess.run([drivers.GDB_MULTIARCH, "-nx", "-q", "-batch", "-ex", f"file {heap.core.exe}",
                          "-ex", f"core-file {heap.core.core}", "-ex", "thread apply all bt 64"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=300).stdout
    gdb_pcs: dict[int, list[int]] = {}
    tid = None
    for line in out.splitlines():
        m = re.match(r"^Thread \d+ \(Thread 0x[0-9a-f]+ \(LWP (\d+)\)\)", line)
        if m:
            tid = int(m.group(1))
            gdb_pcs[tid] = []
        m = re.match(r"^#\d+\s+(0x[0-9a-f]+) in ", line)
        if m and tid is not None:
            gdb_pcs[tid].append(int(m.group(1), 16))
    with CoreTarget(heap.core.core) as t:
        native = [m for m in t.modules() if not m.path.endswith(".dll") and "/memfd:" not in m.path]
        compared = 0
        for thread in t.threads():
            ours = [f.ip for f in unwind_native(native, t.registers(thread.tid), t.read_pointer, t.arch)]
            assert len(ours) >= 2, thread.tid
            assert ours == gdb_pcs[thread.tid][:len(ours)], thread.tid
            compared += len(ours)
    assert compared > 3 * len(gdb_pcs)


def test_lldb_opens_an_arm64_core_named_with_sosext_core(heap: Case) -> None:
    """lldb-16 makes no target of an AArch64 core without its executable; `sosext core CORE`
    finds the executable in the core (NT_FILE at AT_PHDR) and opens both."""
    import subprocess
    if drivers.LLDB is None:
        pytest.skip("lldb-16 is not installed")
    script = [f"command script import {drivers.REPO / 'lldbinit' / 'sosext.py'}", f"sosext core {heap.core.core}",
              "clrstack", "quit"]
    out = subprocess.run([drivers.LLDB, "--no-lldbinit"], input="\n".join(script) + "\n", text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600,
                         env={**drivers.os.environ, **drivers.QUIET}).stdout
    assert f"OS Thread Id: {main_tid(heap.truth):#x}" in out, out
    assert in_order(["DebuggeeHost.Program.Main"], call_sites(out)), out


def test_the_arm64_dac_is_refused_before_loading(heap: Case) -> None:
    """Asked for the DAC reader, sosext refuses the core's arm64 DAC in one line (it checks the
    ELF machine before dlopen) and the session goes on."""
    # The arm64 runtime is unpacked inside the checkout, which CI clones under /tmp: name its
    # directory, so the refusal is the architecture's and not the location's.
    outs = drivers.run_cli(["dumpheap -stat", "threads"], core=heap.core.core,
                           env={"SOSEXT_READER": "dac", "SOSEXT_CLR_PATH": os.path.dirname(heap.core.dac)})
    assert outs[0].errors == [f"error: refusing to load {os.path.realpath(heap.core.dac)}: built for ELF machine 183, not x86-64 "
                              "(the DAC must match the debugger's architecture)"], outs[0].text
    assert f"({main_tid(heap.truth)})" in outs[1].text


def test_api_opens_an_arm64_core_without_the_dac(heap: Case) -> None:
    """sosext.open on an arm64 core picks the contracts reader, its heap statistics are the
    truth's, and no libmscordaccore is mapped into the process afterwards."""
    import json
    import subprocess
    script = (
        "import json, sys, sosext\n"
        "rt = sosext.open(sys.argv[1])\n"
        "stats = {s.type.method_table: [s.count, s.total_size] for s in rt.heap.stats()}\n"
        "maps = open('/proc/self/maps').read()\n"
        "print(json.dumps({'reader': rt.reader, 'stats': stats, 'dac': 'libmscordaccore' in maps}))\n")
    out = subprocess.run([drivers.PYTHON, "-c", script, str(heap.core.core)], cwd=drivers.REPO, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600, check=True).stdout
    doc = json.loads(out.splitlines()[-1])
    assert doc["reader"] == "contracts" and doc["dac"] is False
    stats = {int(mt): tuple(v) for mt, v in doc["stats"].items()}
    for name, t in heap.truth["types"].items():
        count = t["count"] + t["deadCount"]
        if count:
            assert stats[h(t["mt"])][0] == count, name


# -- the second opinion on the cores themselves --------------------------------------------------


def test_clrmd_under_qemu_reads_the_truth_from_the_core(heap: Case) -> None:
    """Checks the fixture: ClrMD with the arm64 DAC finds every test type's count and size
    in the core the harness made, the debuggee's threads, and the main thread down to Main."""
    opinion = clrmd_opinion(heap.core)
    for name, t in heap.truth["types"].items():
        count = t["count"] + t["deadCount"]
        got = opinion.types.get(h(t["mt"]), (0, 0, ""))
        assert got[:2] == (count, t["unalignedSize"] + t["deadUnalignedSize"]) if count else got[0] == 0, name
    assert {main_tid(heap.truth)} | {t["osTid"] for t in heap.truth["threads"]} <= set(opinion.threads)
    assert ("ManagedMethod", "DebuggeeHost.Program.Main") in {f[:2] for f in opinion.frames[main_tid(heap.truth)]}


def contracts_frames(core: Arm64Core) -> dict[int, list[tuple[int, int, int]]]:
    """Each thread's managed frames as the contracts reader's stack walk finds them: (ip, sp, MethodDesc)."""
    from sosext.contracts.descriptor import read_descriptor
    from sosext.contracts.reader import ContractReader
    from sosext.contracts.stackwalk import StackWalker
    from sosext.contracts.targetdata import TargetData
    from sosext.targets.elfcore import CoreTarget
    with CoreTarget(core.core) as t:
        runtime = t.find_module("libcoreclr.so")
        walker = StackWalker(t, TargetData(t, read_descriptor(t, runtime)))
        return {th.os_thread_id: [(f.ip, f.sp, f.method_desc) for f in walker.managed_frames(th.os_thread_id, th.frame)]
                for _addr, th in ContractReader(t, runtime).threads()}


def assert_frames_are_clrmds(ours: dict[int, list], opinion) -> None:  # type: ignore[no-untyped-def]
    theirs = {tid: [(ip, sp, md) for kind, _n, ip, sp, md in frames if kind == "ManagedMethod"]
              for tid, frames in opinion.frames.items()}
    assert {tid: f for tid, f in ours.items() if f} == {tid: f for tid, f in theirs.items() if f}


def contracts_roots(core: Arm64Core) -> dict[int, list[tuple[int, int, bool]]]:
    """Each thread's stack references as the contracts reader finds them: (slot, object, interior)."""
    from sosext.contracts.reader import ContractReader
    from sosext.targets.elfcore import CoreTarget
    with CoreTarget(core.core) as t:
        reader = ContractReader(t, t.find_module("libcoreclr.so"))
        return {th.os_thread_id: sorted((r.address, r.object, bool(r.flags & 1))
                                        for r in reader.stack_references(th.os_thread_id) if r.object)
                for _addr, th in reader.threads()}


def assert_roots_are_clrmds(ours: dict[int, list], opinion) -> None:  # type: ignore[no-untyped-def]
    """The same slots (address 0: a register) holding the same objects (ClrMD names an interior
    pointer's object by its start; the runtime reports the pointer); the threads ClrMD was not
    asked about aside."""
    theirs = {tid: sorted(roots) for tid, roots in opinion.roots.items()}
    assert {tid for tid, r in ours.items() if r and tid not in opinion.no_roots} == \
        {tid for tid, r in theirs.items() if r}
    for tid, roots in theirs.items():
        assert len(ours[tid]) == len(roots), tid
        exact = [(a, o) for a, o, interior in roots if not interior]
        assert exact == [(a, o) for a, o, interior in ours[tid] if not interior], tid
        for (a, o, _i), (a2, raw, _i2) in zip([r for r in roots if r[2]], [r for r in ours[tid] if r[2]]):
            assert a == a2 and o <= raw < o + 0x10000, (tid, hex(a), hex(o), hex(raw))


def test_contracts_stack_walk_equals_clrmd(heap: Case) -> None:
    """The pure-Python AArch64 stack walk (ExecutionManager contract, ARM64 unwind codes,
    the runtime's Frames for native code) finds every managed frame ClrMD finds with the
    arm64 DAC: the same instruction pointers, stack pointers and MethodDescs, down to Main."""
    opinion = clrmd_opinion(heap.core)
    ours = contracts_frames(heap.core)
    assert_frames_are_clrmds(ours, opinion)
    main = next(md for kind, name, _ip, _sp, md in opinion.frames[main_tid(heap.truth)]
                if name == "DebuggeeHost.Program.Main")
    assert ours[main_tid(heap.truth)][-1][2] == main
    for t in heap.truth["threads"]:
        assert len(ours[t["osTid"]]) >= 3, t


def test_contracts_stack_roots_equal_clrmd(heap: Case) -> None:
    """The stack references the contracts reader finds from the arm64 GC info of each frame are
    ClrMD's stack roots (``assert_roots_are_clrmds``)."""
    opinion = clrmd_opinion(heap.core)
    ours = contracts_roots(heap.core)
    assert_roots_are_clrmds(ours, opinion)
    assert sum(map(len, ours.values())) > 10


def test_threads_dispatching_exceptions_are_clrmds(dispatch: Case) -> None:
    """On an arm64 core of threads in exception dispatch (a filter the first pass calls, a finally
    block of the second pass, nested exceptions), a callback from native code and a static
    constructor, the contracts reader's AArch64 walk finds ClrMD's managed frames on every
    thread, and ClrMD's stack roots on each one ClrMD can read: the arm64 DAC, like the x86-64 one,
    dies of SIGSEGV reading the references of the thread in the filter (tried: ClrMD's process
    died there), so ClrMD is asked for every other thread's. The filter thread's references
    hold the exception it filters and the object only the throwing frame below the filter holds,
    which a full GC during the filter left alive (the debuggee's reply: the runtime reported it)."""
    want = dispatch_threads(dispatch.truth)
    opinion = clrmd_opinion(dispatch.core, (want["filter"],))
    frames = contracts_frames(dispatch.core)
    assert_frames_are_clrmds(frames, opinion)
    assert len(frames[want["filter"]]) > 6  # the filter, the dispatcher, the thrower, its caller
    roots = contracts_roots(dispatch.core)
    assert_roots_are_clrmds(roots, opinion)
    assert opinion.no_roots == {want["filter"]}
    held = {o for _a, o, _i in roots[want["filter"]]}
    assert want["kept"], "the GC during the filter collected what the throwing frame holds"
    assert {want["exception"], want["kept"]} <= held


@dataclass
class Storm:
    core: Arm64Core
    redirected: set[int]  # the threads a RedirectedThreadFrame shows in `clrstack -all -f`
    dispatching: tuple[int, ...]  # the threads dispatching an exception (ClrMD is not asked for their roots)


@pytest.fixture(scope="module")
def storm() -> Storm:
    """An arm64 core written while collections run back to back (stackvalues' `throwstorm`,
    then `stormfast`): threads the suspension redirected and threads throwing and catching.
    Under qemu most cores catch a redirect (6 of the first 7 made here), so cores are made
    until one does."""
    from sosext.contracts.reader import ContractReader
    from sosext.targets.elfcore import CoreTarget
    for attempt in range(1, 9):
        core = make_core("stackvalues", ("throwstorm", "stormfast"), attempt)
        text = answered(run_host("cli", core, ["clrstack -all -f"])[0], "clrstack -all -f")
        redirected = {tid for tid, section in sp.thread_sections(text).items() if "[RedirectedThreadFrame: " in section}
        if redirected:
            break
    assert redirected, f"{attempt} cores showed no thread the GC suspension redirected"
    with CoreTarget(core.core) as t:
        reader = ContractReader(t, t.find_module("libcoreclr.so"))
        dispatching = tuple(th.os_thread_id for _a, th in reader.threads() if reader.in_exception_dispatch(th.os_thread_id))
    return Storm(core, redirected, dispatching)


def test_threads_the_gc_suspends_are_clrmds(storm: Storm) -> None:
    """On the storm core: threads the suspension redirected (a RedirectedThreadFrame, whose saved
    context is where the thread's managed frames go on; one spins in a loop with no call, an
    object live in a register). The contracts reader's frames equal ClrMD-under-qemu's on every
    thread, and its roots on every thread but those dispatching an exception, which ClrMD is not
    asked about (the arm64 DAC dies there)."""
    core, redirected = storm.core, storm.redirected
    opinion = clrmd_opinion(core, storm.dispatching)
    frames = contracts_frames(core)
    assert_frames_are_clrmds(frames, opinion)
    roots = contracts_roots(core)
    assert_roots_are_clrmds(roots, opinion)
    for tid in redirected:  # its managed frames go on below the redirect, and hold objects
        assert frames[tid] and opinion.roots.get(tid), hex(tid)


def test_threads_the_gc_suspends_in_every_host(storm: Storm, host: str) -> None:
    """The redirected threads as `clrstack -all -gc` prints them in the CLI, LLDB and GDB: the
    RedirectedThreadFrame, then ClrMD-under-qemu's managed frames of the thread (by stack
    pointer and IP, in order), and among its references every object ClrMD's stack roots of
    the thread hold: the spinning threads' objects are in registers of the saved context
    (`X19: <object>`, or `X0: <pointer> (interior)` where the loop reads a field). The frames below the redirect are walked from the Frame's saved context, not
    from the debugger's registers, so each host must print them."""
    opinion = clrmd_opinion(storm.core, storm.dispatching)
    text = answered(run_host(host, storm.core, ["clrstack -all -gc"])[0], "clrstack -all -gc")
    sections = sp.thread_sections(text)
    for tid in storm.redirected:
        assert tid in sections, f"no thread 0x{tid:x} in:\n{text}"
        section = sections[tid]
        assert "[RedirectedThreadFrame: " in section, section
        rows = [(int(m.group(1), 16), int(m.group(2), 16)) for m in
                re.finditer(r"^([0-9A-Fa-f]{16}) ([0-9A-Fa-f]{16}) (?!\[)", section, re.M)]
        theirs = [(sp_, ip) for kind, _n, ip, sp_, _md in opinion.frames[tid] if kind == "ManagedMethod"]
        assert theirs and rows == theirs, (hex(tid), section, theirs)
        # `X19: <object> - <type>` for a register, `<slot> -> <object> - <type>` for a stack slot,
        # `X0: <pointer> (interior)` for a pointer into an object (ClrMD names its object's start)
        objects = {int(m.group(1), 16) for m in re.finditer(r"(?::|->) ([0-9a-f]{16}) - \S", section)}
        interiors = [int(m.group(1), 16) for m in re.finditer(r": ([0-9a-f]{16}) \(interior\)", section)]
        roots = opinion.roots.get(tid, ())
        assert roots, hex(tid)
        for _a, o, interior in roots:
            if interior:
                assert any(o <= v < o + 0x10000 for v in interiors), (hex(tid), hex(o), section)
            else:
                assert o in objects, (hex(tid), hex(o), section)


def test_threads_dispatching_exceptions_in_every_host(dispatch: Case, host: str) -> None:
    """The same threads as `clrstack -all -gc` prints them in the CLI, LLDB and GDB: the filter
    funclet above the managed dispatcher's first pass, with the exception and the throwing
    frame's object among its roots, and the other threads' frames, as on x86-64 cores
    (tests/test_readers.py, where both readers print the same)."""
    want = dispatch_threads(dispatch.truth)
    text = answered(dispatch.out(host, "clrstack -all -gc"), "clrstack -all -gc")
    sections = sp.thread_sections(text)

    def section(tid: int) -> str:
        assert tid in sections, f"no thread 0x{tid:x} in:\n{text}"
        return sections[tid]
    gc = section(want["filter"])
    assert ".FilterWait(DebuggeeHost.StackValuesException)" in gc and "System.Runtime.EH.FindFirstPassHandler(" in gc
    assert f"-> {want['exception']:016x} - DebuggeeHost.StackValuesException" in gc, gc
    assert f"-> {want['kept']:016x} - DebuggeeHost.StackValuesItem" in gc, gc
    assert ".FinallyThrower()" in section(want["finally"])
    nested, callback, cctor = (section(want[k]) for k in ("nested", "callback", "cctor"))
    assert nested.count(".NestedOuter()") == 3 and ".NestedThreadMain()" in nested, nested
    assert ".CompareBlocking(Void*, Void*)" in callback and ".CallbackThreadMain()" in callback, callback
    assert "+SlowInit..cctor()" in cctor and ".CctorThreadMain()" in cctor, cctor
    assert "<unknown method>" not in text


def test_clrstack_a_values_are_the_debuggees(dispatch: Case, host: str) -> None:
    """`clrstack -a` on arm64: the values ValuesFrame's arguments and locals hold, read from the
    stack slots and registers arm64 GC info and debug info name, are those the debuggee passed
    and printed (as on x86-64, tests/test_stack_values.py): ints, a long, a bool, a double's
    bits, a string and an object, and a struct's first field."""
    v = dispatch.truth["values"]
    text = answered(dispatch.out(host, "clrstack -a -all"), "clrstack -a -all")
    sections = sp.thread_sections(text)
    assert v["osTid"] in sections, text
    block = sp.frame_block(sections[v["osTid"]], v["method"])
    assert block[0] == "    PARAMETERS:" and "    LOCALS:" in block, block
    where = r"\((?:0x[0-9A-F]{16}|<CLR reg>)\)"
    params = {m.group(1): int(m.group(2), 16) for m in
              (re.fullmatch(rf"        (\w+) {where} = 0x([0-9a-f]{{16}})", ln) for ln in block[1:block.index("    LOCALS:")]) if m}
    assert params == {"count": v["count"], "big": v["big"], "flag": int(v["flag"]),
                      "ratio": struct.unpack("<Q", struct.pack("<d", v["ratio"]))[0],
                      "text": h(v["textAddress"]), "item": h(v["item"]),
                      "point": params.get("point", -1) & ~0xFFFFFFFF | (v["pointX"] & 0xFFFFFFFF)}, block
    locals_ = {int(m.group(1), 16) for m in (re.fullmatch(r"        (?:0x[0-9A-F]{16}|<CLR reg>) = 0x([0-9a-f]{16})", ln)
                                              for ln in block[block.index("    LOCALS:") + 1:]) if m}
    assert {v["localCount"], v["localBig"], h(v["localItem"])} <= locals_, block
    assert any(x & 0xFFFFFFFF == v["localPointX"] & 0xFFFFFFFF for x in locals_), block


# -- what needs the runtime reader ---------------------------------------------------------------


def test_dumpheap_stat_equals_truth(heap: Case, host: str) -> None:
    rows = sp.stat_rows(answered(heap.out(host, "dumpheap -stat"), "dumpheap -stat"))
    for name, t in heap.truth["types"].items():
        count = t["count"] + t["deadCount"]
        row = rows.get(h(t["mt"]))
        if count == 0:
            assert row is None, name
            continue
        assert row is not None, f"{name} missing"
        assert (row.count, row.total) == (count, t["unalignedSize"] + t["deadUnalignedSize"]), name


def test_dumpheap_stat_agrees_with_clrmd(heap: Case, host: str) -> None:
    rows = sp.stat_rows(answered(heap.out(host, "dumpheap -stat"), "dumpheap -stat"))
    clrmd = clrmd_opinion(heap.core).types
    assert {mt: (r.count, r.total) for mt, r in rows.items()} == {mt: (c, s) for mt, (c, s, _n) in clrmd.items()}


def test_dumpobj_fields_and_string(heap: Case, host: str) -> None:
    e = heap.truth["itemE"]
    text = answered(heap.out(host, f"dumpobj {e['address']}"), "dumpobj")
    assert label(text, "MethodTable") == f"{h(e['mt']):016x}"
    rows = field_rows(text)
    for f in e["fields"]:
        row = rows[f["name"]]
        assert row.offset == f["offset"], f
        if f["type"] in ("System.Int32", "System.Int64", "System.Int16", "System.Byte"):
            assert int(row.value) == f["value"], f
        elif f["type"] in ("System.String", "System.Object"):
            assert h(row.value) == h(f["value"]), f
    str_field = next(f for f in e["fields"] if f["name"] == "Str")
    text = answered(heap.out(host, f"dumpobj {str_field['value']}"), "dumpobj of a string")
    assert label(text, "String") == e["strValue"]


def test_gcroot_chain_to_a_static(heap: Case, host: str) -> None:
    path = heap.truth["rootChain"]["path"]
    out = heap.out(host, f"gcroot {path[-1]['address']}")
    roots, _n = parse_gcroot(answered(out, "gcroot"))
    want = [h(step["address"]) for step in path]
    assert any([a for a, _t, _e in r.chain[-len(want):]] == want for r in roots), out.text


def test_gcroot_chain_to_a_strong_handle(roots: Case, host: str) -> None:
    leak = roots.truth["wrapperLeak"]
    out = roots.out(host, f"gcroot {leak['chain'][-1]}")
    found, _n = parse_gcroot(answered(out, "gcroot"))
    want = [h(a) for a in leak["chain"]]
    through_handle = [r for r in found if [a for a, _t, _e in r.chain] == want]
    assert through_handle, out.text
    assert any("strong handle" in ln.lower() and f"{h(leak['handle']):016x}" in ln.lower()
               for r in through_handle for ln in r.header), out.text


def test_clrthreads(heap: Case, host: str) -> None:
    rows = thread_rows(answered(heap.out(host, "clrthreads"), "clrthreads"))
    assert main_tid(heap.truth) in rows
    for t in heap.truth["threads"]:
        assert rows[t["osTid"]].managed_id == t["managedId"], t


def test_clrstack_down_to_main(heap: Case, host: str) -> None:
    text = answered(heap.out(host, "clrstack -all"), "clrstack")
    stacks = sp.thread_sections(text)
    assert in_order(["DebuggeeHost.Program.Main"], call_sites(stacks[main_tid(heap.truth)])), text
    for t in heap.truth["threads"]:
        assert in_order(["DebuggeeHost.HeapScenario.WorkerMain"], call_sites(stacks[t["osTid"]])), t


def test_dumpheap_live_counts_stack_roots(heap: Case, host: str) -> None:
    """Liveness comes from every root, stack roots included (the stack-only items are live)."""
    rows = sp.stat_rows(answered(heap.out(host, "dumpheap -live -type SosextDebuggee. -stat"), "dumpheap -live"))
    for name, t in heap.truth["types"].items():
        row = rows.get(h(t["mt"]))
        assert (row.count if row else 0) == t["count"], name


def test_dso_finds_a_worker_stacks_objects(heap: Case, host: str) -> None:
    worker = heap.truth["threads"][0]
    text = answered(heap.out(host, f"dso {worker['osTid']:#x}"), "dso")
    found = {int(m.group(1), 16) for m in re.finditer(r"^\s+\S+\s+([0-9a-f]{12,16}) ", text, re.M)}
    assert {h(worker["held"]["address"]), h(worker["stackOnly"]["address"])} <= found, text


def test_damaged_arm64_cores_say_what_is_wrong_in_one_line(heap: Case, tmp_path: Path) -> None:
    """qemu's own core (no NT_FILE note) and a core cut short each get one line; the commands
    that need no runtime still answer."""
    data = heap.core.core.read_bytes()
    no_files = tmp_path / "no-nt-file.core"
    note = (0x46494C45).to_bytes(4, "little") + b"CORE\0"
    assert data.count(note) == 1
    no_files.write_bytes(data.replace(note, (0x46494C46).to_bytes(4, "little") + b"CORE\0"))
    cut = tmp_path / "cut.core"
    cut.write_bytes(data[: len(data) // 3])
    for core, expected in ((no_files, "the core has no NT_FILE note"), (cut, "truncated core file")):
        outs = drivers.run_cli(["dumpheap -stat", "clrstack", "threads"], core=core)
        for out in outs[:2]:
            assert len(out.errors) == 1 and expected in out.errors[0], out.text
        assert f"({main_tid(heap.truth)})" in outs[2].text
