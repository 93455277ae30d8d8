"""What SOS's own behavioural scripts GCTests, GCPOH, DumpGen, ConcurrentDictionaries,
DynamicMethod and OtherCommands check, asserted against our `gcscripts` debuggee.

The debuggee parks the thread "sosext-gcwhere" with, as locals of its frames, three objects
the GC put in gen2, gen1 and gen0, a StringWriter, a pinned byte[100] and a DynamicMethod,
and holds concurrent dictionaries with a long string key, struct keys and a struct value
(tests/debuggees/SosextDebuggee/GcScriptsScenario.cs). It prints their addresses, types and
generations. Under workstation GC with regions and server GC with segments, one batch runs in
each host of test_parity's matrix (LLDB live and on a with-heap
core, the CLI on the core, GDB when installed), after a first LLDB run on the live process
has read the values a script takes from an earlier command's output (an IP of clrstack,
a struct value's address from dcd, an EEClass from dumpmd, CoreLib's assembly and module
from dumpdomain). Values are compared with the truth; shapes are what the scripts verify.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import drivers
from harness import Debuggee, build_debuggee
from test_parity import HOSTS, Case, h, host  # noqa: F401 - host is a fixture

pytestmark = pytest.mark.slow

HEX = r"[0-9a-fA-F]+"
DEC = r"[\d,]+"
SCRIPTS_NS = "DebuggeeHost.GcScriptsScenario"
CD = "System.Collections.Concurrent.ConcurrentDictionary"


def g(truth: dict) -> dict:
    return truth["gcscripts"]


# -- the first run: values the scripts read from earlier output ------------------------------


def first_commands(t: dict) -> list[str]:
    x = g(t)
    return [drivers.select_thread("lldb-live", x["osTid"]), "clrstack",
            f"dcd {x['dictionaries']['structValues']['address']}", f"dumpmd {x['parkMethodDesc']}", "dumpdomain"]


def derived(t: dict, outs: list[drivers.Output]) -> dict:
    x = g(t)
    _sel, stack, dcd, dumpmd, domain = (o.text for o in outs)
    # Body's frame, a call with a statement after it (as the script's Foo1)
    ip = re.search(rf"^{HEX} +({HEX}) +{re.escape(x['bodyMethod'])}\(", stack, re.M)
    vc = re.search(rf"Value: dumpvc ({HEX}) ({HEX})$", dcd, re.M)
    eeclass = re.search(rf"^Class: +({HEX})$", dumpmd, re.M)
    asm = re.search(rf"^Assembly: +({HEX}) \[(\S*System\.Private\.CoreLib\.dll)\]$", domain, re.M)
    module = re.search(rf"^  ({HEX}) +\S*System\.Private\.CoreLib\.dll$", domain, re.M)
    assert ip and vc and eeclass and asm and module, (stack, dcd, dumpmd, domain)
    return {"ip": ip.group(1), "dumpvc": f"{vc.group(1)} {vc.group(2)}", "eeclass": eeclass.group(1),
            "corelibAssembly": asm.group(1), "corelibPath": asm.group(2), "corelibModule": module.group(1)}


# -- the batch every host runs ---------------------------------------------------------------


def commands_for(t: dict, d: dict, host: str, files: Path) -> list[str]:
    x = g(t)
    where = [o["address"] for o in x["where"]]
    dicts = x["dictionaries"]
    dicts_struct_value = dicts["structKeys"]["values"]
    cmds = [
        drivers.select_thread(host, x["osTid"]),
        "dumpstackobjects", f"dumpobj {x['writer']['address']}",
        *[f"gcwhere {a}" for a in where], *[f"gcroot {a}" for a in where],
        f"dumpobj {where[0]}", f"dumpobj -nofields {where[0]}", f"dumpobj -refs {where[0]}",
        "dumpheap -stat", "dumpheap -stat -gen gen0", "dumpheap -stat -gen poh", "dumpheap -stat -gen xxx",
        f"dumpheap -mt {x['whereMt']}", "eeheap", "eeheap -gc", "eeheap -loader",
        f"dumpobj {x['pinned']['address']}", f"objsize {x['pinned']['address']}",
        f"gcwhere {x['pinned']['address']}", f"gcroot {x['pinned']['address']}", "verifyheap", "gcheapstat",
        "clrstack -i -a", f"dumpil {x['dynamic']['address']}",
        f"dumpheap -stat -type {CD}<",
        *[f"dumpheap -mt {v['mt']}" for v in dicts.values()],
        *[f"dcd {v['address']}" for v in dicts.values()],
        *[f"dumpobj {a}" for a in dicts_struct_value if a],
        f"dumpvc {d['dumpvc']}", "dcd", "dcd abcdefgh", "dcd 0000000000000001",
        "dumpgen gen0", "dumpgen gen1", "dumpgen gen2", "dumpgen poh", f"dumpgen gen0 -type {x['whereType']}",
        f"dumpgen gen0 -mt {x['whereMt']}", "dumpgen gen0 -mt 00000001", "dumpgen gen0 -type NoMatchingType",
        "dumpgen", "dumpgen invalid",
        f"dumpgen poh -mt {x['pinned']['mt']}", f"dumpgen gen2 -mt {x['pinned']['mt']}",
        f"ip2md {d['ip']}", f"dumpmd {x['parkMethodDesc']}", f"dumpclass {d['eeclass']}", f"dumpmt {x['scenarioMt']}",
        "dumpdomain", f"dumpassembly {d['corelibAssembly']}", f"dumpmodule {d['corelibModule']}",
        "finalizequeue", "clrmodules -v", "syncblk", "gchandles", "dumpgcdata", "dumpruntimetypes",
        f"dumplog {files}/stress.log",
    ]
    ext = "sos " if host.startswith(("lldb", "gdb")) else ""  # dotnet-dump's host commands
    cmds += [f"{ext}modules -v", f"{ext}registers"]
    if not ext:
        cmds += ["dumpgen gen0 -mt"]
    return cmds


def run(host_: str, truth: dict, d: dict, files: Path, **kw) -> dict[str, drivers.Output]:  # type: ignore[no-untyped-def]
    files.mkdir(parents=True, exist_ok=True)
    cmds = commands_for(truth, d, host_, files)
    outs = drivers.run_in_host(host_, cmds, **kw)
    return {c: o for c, o in zip(cmds, outs)}


class ScriptCase(Case):
    derived: dict
    files: dict[str, Path]


@pytest.fixture(scope="module", params=[("wks", "regions"), ("svr", "segments")], ids=lambda p: "-".join(p))
def case(request, tmp_path_factory) -> ScriptCase:
    drivers.require_dotnet_and_lldb()
    tfm = request.config.getoption("--tfm")
    gc, flavor = request.param
    work = tmp_path_factory.mktemp(f"gcscripts-{gc}-{flavor}")
    # The stress log on (SOS's OtherCommands ends with dumplog, which needs one with thread logs).
    with Debuggee("gcscripts", env={"DOTNET_StressLog": "1"}, gc=gc, gc_flavor=flavor, tfm=tfm,
                  dll=build_debuggee(tfm), core_dir=work) as dbg:
        c = ScriptCase(dbg.truth)
        c.files = {hst: work / hst for hst in HOSTS}
        core = dbg.write_core("heap", work / "gcscripts.core")
        c.derived = derived(dbg.truth, drivers.run_lldb(first_commands(dbg.truth), pid=dbg.pid))
        exe = str(dbg.executable)
        c.outputs["lldb-live"] = run("lldb-live", c.truth, c.derived, c.files["lldb-live"], pid=dbg.pid)
        if "gdb-live" in HOSTS:
            c.outputs["gdb-live"] = run("gdb-live", c.truth, c.derived, c.files["gdb-live"], pid=dbg.pid)
    c.outputs["lldb-core"] = run("lldb-core", c.truth, c.derived, c.files["lldb-core"], core=core, exe=exe)
    c.outputs["cli-core"] = run("cli-core", c.truth, c.derived, c.files["cli-core"], core=core)
    if "gdb-core" in HOSTS:
        c.outputs["gdb-core"] = run("gdb-core", c.truth, c.derived, c.files["gdb-core"], core=core, exe=exe)
    core.unlink(missing_ok=True)
    return c


def out(case: ScriptCase, host: str, command: str) -> str:
    o = case.out(host, command)
    assert "Traceback" not in o.text, o.text
    return o.text


def lines(case: ScriptCase, host: str, command: str) -> list[str]:
    return out(case, host, command).splitlines()


def has(text: str, pattern: str) -> re.Match:
    m = re.search(pattern, text, re.M)
    assert m, f"no line matches {pattern!r} in:\n{text}"
    return m


# -- GCTests.script ----------------------------------------------------------------------------


def test_dumpstackobjects_lists_the_parked_locals(case: ScriptCase, host: str) -> None:
    x = g(case.truth)
    text = out(case, host, "dumpstackobjects")
    found = {(h(a), n) for a, n in re.findall(rf"^\s*\S+\s+({HEX})\s+(\S+)\s*$", text, re.M)}
    assert (h(x["writer"]["address"]), "System.IO.StringWriter") in found, text
    for o in x["where"]:
        assert (h(o["address"]), x["whereType"]) in found, text
    assert (h(x["pinned"]["address"]), "System.Byte[]") in found, text


def test_dumpobj_of_the_string_writer_shows_textwriter_null(case: ScriptCase, host: str) -> None:
    text = out(case, host, f"dumpobj {g(case.truth)['writer']['address']}")
    has(text, r"^Name:\s+System\.IO\.StringWriter$")
    has(text, rf"^\s*{HEX}\s+{HEX}\s+{HEX}\s+System\.IO\.TextWriter\s+No\s+static\s+{HEX}\s+Null$")


def gcwhere_row(text: str, address: int) -> tuple[int, str]:
    """(heap, generation) of gcwhere's row for ``address``."""
    has(text, r"^\s*Address\s+Heap\s+Segment\s+Generation\s+Allocated\s+Committed\s+Reserved\s*$")
    for a, heap, _seg, gen in re.findall(rf"^\s*({HEX})\s+({DEC})\s+({HEX})\s+(\S+)\s", text, re.M):
        if h(a) == address:
            return int(heap.replace(",", "")), gen
    raise AssertionError(text)


def test_gcwhere_names_each_objects_generation(case: ScriptCase, host: str) -> None:
    x = g(case.truth)
    for o in x["where"]:
        _heap, gen = gcwhere_row(out(case, host, f"gcwhere {o['address']}"), h(o["address"]))
        assert gen == str(o["generation"]), (o, gen)


def check_thread_root(case: ScriptCase, text: str) -> None:
    """gcroot's answer holds a "Thread <os id>:" section whose frame is the parked thread's."""
    x = g(case.truth)
    tids = [h(t) for t in re.findall(rf"^Thread ({HEX}):$", text, re.M)]
    assert x["osTid"] in tids, text
    frames = (re.escape(x["bodyMethod"]), re.escape(x["parkMethod"]))
    has(text, rf"^\s+{HEX}\s+{HEX}\s+(?:{'|'.join(frames)})\(")


def test_gcroot_finds_the_thread_root(case: ScriptCase, host: str) -> None:
    for o in g(case.truth)["where"]:
        check_thread_root(case, out(case, host, f"gcroot {o['address']}"))


def test_dumpobj_fields_nofields_and_refs(case: ScriptCase, host: str) -> None:
    x = g(case.truth)
    first = x["where"][0]
    for cmd in (f"dumpobj {first['address']}", f"dumpobj -nofields {first['address']}",
                f"dumpobj -refs {first['address']}"):
        text = out(case, host, cmd)
        has(text, rf"^Name:\s+{re.escape(x['whereType'])}$")
        assert h(has(text, rf"^MethodTable:\s+({HEX})$").group(1)) == h(x["whereMt"])
        if "-nofields" in cmd:
            assert "Fields:" not in text, text
            continue
        has(text, r"^Fields:$")
        label = has(text, rf"^\s*{HEX}\s+{HEX}\s+{HEX}\s+System\.String\s+No\s+instance\s+({HEX})\s+Label$")
        assert h(label.group(1)) == h(first["label"])
        has(text, rf"^\s*{HEX}\s+{HEX}\s+{HEX}\s+System\.UInt64\s+Yes\s+static\s+{x['staticValue']}\s+Shared$")
    refs = out(case, host, f"dumpobj -refs {first['address']}")
    has(refs, r"^GC Refs:$")
    has(refs, r"^\s*Field\s+Offset\s+Object\s+Type$")
    row = has(refs, rf"^\s*Label\s+(0x[0-9a-f]+)\s+({HEX})\s+System\.String$")
    assert h(row.group(2)) == h(first["label"]), refs


STAT_ROW = rf"^\s*({HEX})\s+({DEC})\s+({DEC})\s+(.+?)\s*$"


def stat_rows(text: str) -> dict[int, tuple[int, int, str]]:
    has(text, r"^Statistics:$")
    has(text, r"^\s+MT\s+Count\s+TotalSize\s+Class Name$")
    return {h(mt): (int(c.replace(",", "")), int(s.replace(",", "")), n)
            for mt, c, s, n in re.findall(STAT_ROW, text[text.index("Statistics:"):], re.M)}


def test_dumpheap_stat_and_generations(case: ScriptCase, host: str) -> None:
    x = g(case.truth)
    mt = h(x["whereMt"])
    rows = stat_rows(out(case, host, "dumpheap -stat"))
    assert rows[mt][0] == 3 and rows[mt][2] == x["whereType"]
    gen0 = stat_rows(out(case, host, "dumpheap -stat -gen gen0"))
    in_gen0 = sum(1 for o in x["where"] if o["generation"] == 0)
    assert (gen0[mt][0] if mt in gen0 else 0) == in_gen0
    poh = stat_rows(out(case, host, "dumpheap -stat -gen poh"))
    assert h(x["pinned"]["mt"]) in poh and poh[h(x["pinned"]["mt"])][2] == "System.Byte[]", poh
    assert case.out(host, "dumpheap -stat -gen xxx").errors == [
        "error: Unknown generation: xxx. Only gen0, gen1, gen2, loh (large), poh (pinned) and foh (frozen) are supported"]


def test_dumpheap_lists_objects_then_statistics(case: ScriptCase, host: str) -> None:
    x = g(case.truth)
    text = out(case, host, f"dumpheap -mt {x['whereMt']}")
    has(text, r"^\s*Address\s+MT\s+Size$")
    listed = {h(a) for a, m in re.findall(rf"^\s*({HEX})\s+({HEX})\s+{DEC}\s*$", text, re.M) if h(m) == h(x["whereMt"])}
    assert listed == {h(o["address"]) for o in x["where"]}
    total = has(text, rf"^Total ({DEC}) objects, ({DEC}) bytes$")
    assert int(total.group(1)) == 3
    assert stat_rows(text)[h(x["whereMt"])][1] == int(total.group(2).replace(",", ""))


# -- eeheap: the loader heaps and the GC heap (GCTests, GCPOH) ---------------------------------

SIZE = r"Size: 0x([0-9a-f]+) \((\d+)\) bytes total"
BLOCK = r"([0-9a-f]{12,16})\(([0-9a-f]+):([0-9a-f]+)\)"


def loader_totals(text: str) -> tuple[int, list[tuple[str, int]]]:
    """The loader part's total and every (kind, size) row, each row's size its blocks' sum."""
    total = 0
    rows = []
    for ln in text.splitlines():
        m = re.match(rf"^(\w+):\s+((?:{BLOCK} )+){SIZE}(?:, 0x[0-9a-f]+ \(\d+\) bytes wasted)?\.$", ln)
        if m:
            kind, blocks = m.group(1), re.findall(BLOCK, m.group(2))
            size = int(m.group(7))
            assert int(m.group(6), 16) == size
            assert sum(int(actual, 16) for _a, _r, actual in blocks) == size, ln
            assert all(int(actual, 16) <= int(reserved, 16) for _a, reserved, actual in blocks), ln
            rows.append((kind, size))
        t = re.match(rf"^Total size:\s+{SIZE}(?:, .* bytes wasted)?\.$", ln)
        if t:
            total += int(t.group(2))
    return total, rows


def test_eeheap_shows_loader_heaps_code_heaps_and_gc_heap(case: ScriptCase, host: str) -> None:
    text = out(case, host, "eeheap")
    has(text, r"^Loader Heap:$")
    has(text, rf"^System Domain:\s+{HEX}$")
    has(text, rf"^Domain 1:\s+{HEX}$")
    has(text, rf"^LowFrequencyHeap:\s+{HEX}.*bytes")
    has(text, rf"^HighFrequencyHeap:\s+{HEX}.*bytes")
    has(text, rf"^JIT Manager:\s+{HEX}$")
    has(text, rf"^(LoaderCodeHeap|HostCodeHeap):\s+{HEX}.*bytes")
    total, rows = loader_totals(text)
    assert total == sum(s for _k, s in rows) and total > 0, text
    # the GC part is eeheap -gc's, and the closing total adds the two parts
    gc_part = out(case, host, "eeheap -gc")
    assert gc_part.strip() in text, (gc_part, text)
    has(text, r"^Number of GC Heaps:\s+\d+$")
    has(text, r"^\s*segment\s+begin\s+allocated\s+committed\s+allocated size\s+committed size\s*$")
    has(text, rf"^\s*{HEX}\s+{HEX}\s+{HEX}\s+{HEX}\s+0x{HEX}\s*\(\d+\)\s+0x{HEX}\s*\(\d+\)\s*$")
    has(text, r"^Large object heap")
    has(text, r"^Pinned object heap")
    committed = int(has(gc_part, r"GC Committed Heap Size:\s+Size: 0x[0-9a-f]+ \((\d+)\) bytes\.$").group(1))
    grand = int(has(text, r"^Total bytes consumed by CLR: 0x[0-9a-f]+ \((\d+)\)$").group(1))
    assert grand == total + committed
    loader_only = out(case, host, "eeheap -loader")
    assert "Number of GC Heaps" not in loader_only and loader_totals(loader_only)[0] == total
    assert "Loader Heap:" not in gc_part


# -- GCPOH.script ------------------------------------------------------------------------------


def test_pinned_array_on_the_pinned_object_heap(case: ScriptCase, host: str) -> None:
    x = g(case.truth)
    p = x["pinned"]
    text = out(case, host, f"dumpobj {p['address']}")
    has(text, r"^Name:\s+System\.Byte\[\]$")
    has(text, rf"^Array:\s+Rank 1, Number of elements {x['pinnedLength']}, Type Byte")
    objsize = out(case, host, f"objsize {p['address']}")
    assert not case.out(host, f"objsize {p['address']}").errors, objsize
    _heap, gen = gcwhere_row(out(case, host, f"gcwhere {p['address']}"), h(p["address"]))
    assert gen == "pinned"
    check_thread_root(case, out(case, host, f"gcroot {p['address']}"))
    verify = out(case, host, "verifyheap")
    has(verify, r" 0 errors")
    has(verify, r"^No heap corruption detected\.$")
    assert not case.out(host, "gcheapstat").errors


# -- DynamicMethod.script ----------------------------------------------------------------------


def test_clrstack_i_a_names_the_dynamic_method_local_and_dumpil_decodes_it(case: ScriptCase, host: str) -> None:
    x = g(case.truth)
    text = out(case, host, "clrstack -i -a")
    has(text, r"^\s*LOCALS:$")
    m = has(text, r"^\s+\+ System\.Reflection\.Emit\.DynamicMethod dynamicMethod @ 0x([0-9a-f]+)$")
    assert h(m.group(1)) == h(x["dynamic"]["address"])
    il = out(case, host, f"dumpil {x['dynamic']['address']}")
    ops = re.findall(r"^\s*IL_([0-9a-f]{4}): (\S+)", il, re.M)
    assert [op for _o, op in ops] == x["dynamic"]["il"], il
    assert [int(o, 16) for o, _op in ops] == list(range(len(ops)))


# -- ConcurrentDictionaries.script -------------------------------------------------------------


def dcd_items(text: str) -> list[tuple[str, str]]:
    return re.findall(r"^\s+Key: (.*)\n\s+Value: (.*)$", text, re.M)


def test_dictionaries_found_by_dumpheap_then_dumped(case: ScriptCase, host: str) -> None:
    x = g(case.truth)
    dicts = x["dictionaries"]
    names = {"strings": f"{CD}<System.String, System.Boolean>",
             "structKeys": f"{CD}<DebuggeeHost.GcScriptsKey, DebuggeeHost.GcScriptsValue>",
             "structValues": f"{CD}<System.Int32, DebuggeeHost.GcScriptsKey>"}
    rows = stat_rows(out(case, host, f"dumpheap -stat -type {CD}<"))
    for key, d in dicts.items():
        # -type takes SOS's C# shape, and the rows print it, as ClrMD names types
        assert rows[h(d["mt"])][2] == names[key], rows
        listed = re.findall(rf"^\s*({HEX})\s+({HEX})\s+\d+", out(case, host, f"dumpheap -mt {d['mt']}"), re.M)
        assert h(d["address"]) in {h(a) for a, m in listed if h(m) == h(d["mt"])}


def test_dcd_long_string_key_is_cut(case: ScriptCase, host: str) -> None:
    d = g(case.truth)["dictionaries"]["strings"]
    text = out(case, host, f"dcd {d['address']}")
    has(text, r"^2 items$")
    items = dict(dcd_items(text))
    assert items['"short true"'] == "True"
    assert items['"' + d["longKey"][:99] + "..."] == "False", items


def test_dcd_struct_keys_and_class_values(case: ScriptCase, host: str) -> None:
    d = g(case.truth)["dictionaries"]["structKeys"]
    text = out(case, host, f"dcd {d['address']}")
    has(text, r"^2 items$")
    items = dcd_items(text)
    for key, _value in items:
        m = re.fullmatch(rf"dumpvc ({HEX}) ({HEX})", key)
        assert m and h(m.group(1)) == h(d["keyMt"]), items
    values = sorted(v for _k, v in items)
    want = sorted("null" if a is None else f"dumpobj {h(a):016x}" for a in d["values"])
    assert values == want, items
    for a in (a for a in d["values"] if a):
        obj = out(case, host, f"dumpobj {a}")
        has(obj, rf"^Name:\s+{re.escape(d['valueType'])}$")
        has(obj, r"\sinstance\s+0\s+<Count>k__BackingField$")
        has(obj, r"\sinstance\s+0000000000000000\s+<Note>k__BackingField$")


def test_dcd_struct_value_and_dumpvc(case: ScriptCase, host: str) -> None:
    d = g(case.truth)["dictionaries"]["structValues"]
    text = out(case, host, f"dcd {d['address']}")
    has(text, r"^1 items$")
    items = dcd_items(text)
    assert len(items) == 1 and items[0][0] == "0", items
    assert items[0][1] == f"dumpvc {case.derived['dumpvc']}"
    assert h(case.derived["dumpvc"].split()[0]) == h(d["valueMt"])
    vc = out(case, host, f"dumpvc {case.derived['dumpvc']}")
    has(vc, rf"^Name:\s+{re.escape(d['valueType'])}$")
    has(vc, rf"\sinstance\s+{d['number']}\s+Number$")
    assert h(has(vc, rf"\sinstance\s+({HEX})\s+Text$").group(1)) == h(d["text"])
    has(vc, rf"\sinstance\s+{HEX}\s+When\b")


def test_dcd_argument_errors(case: ScriptCase, host: str) -> None:
    assert "Missing ConcurrentDictionary address" in case.out(host, "dcd").text
    assert "Hexadecimal address expected" in case.out(host, "dcd abcdefgh").text
    assert "is not referencing an object" in case.out(host, "dcd 0000000000000001").text


# -- ConcurrentDictionaries.script, played as SOS's test runner plays it ------------------------
#
# The `dcdscript` debuggee holds the script's five dictionaries under the script's own type names
# (DotnetDumpCommands.Program+DumpSampleStruct …). Each host plays the script's steps: a step's
# argument is the first group of the step's regular expression on the previous step's output
# (SOS's <POUT>), found in that host's own output. The truth then checks what was found.

HEXVAL = r"[A-Fa-f0-9]+(?:`[A-Fa-f0-9]+)?"  # SOS's <HEXVAL>
DCD_STAT = f"dumpheap -stat -type {CD}<"
# section: (the generic arguments the section's dumpheap -mt picks, what its dcd output must show)
DCD_SECTIONS = {
    "arrays": (r"System\.Int32, System\.String\[\]", ["2 items", "Key: 2"]),
    "ints": (r"System\.Int32, System\.Int32",
             ["3 items", r"Key: 0\s+Value: 1", r"Key: 31\s+Value: 17", r"Key: 1521482\s+Value: 512487"]),
    "strings": (r"System\.String, System\.Boolean",
                ["3 items", r'Key: "String true"\s+Value: True', r'Key: "String false"\s+Value: False',
                 'Key: "' + "S" * 99 + r"\.\.\.\s+Value: False"]),
    "structKeys": (r"DotnetDumpCommands\.Program\+DumpSampleStruct, DotnetDumpCommands\.Program\+DumpSampleClass",
                   ["2 items", rf"Key: dumpvc {HEXVAL} {HEXVAL}\s+Value: null",
                    rf"Key: dumpvc {HEXVAL} {HEXVAL}\s+Value: dumpobj {HEXVAL}"]),
    "structValues": (r"System\.Int32, DotnetDumpCommands\.Program\+DumpSampleStruct",
                     ["1 items", rf"Key: 0\s+Value: dumpvc {HEXVAL} {HEXVAL}"]),
}
# section: (command, the regular expression on dcd's output giving its argument, what it must show)
DCD_FOLLOW = {
    "arrays": ("dumparray", rf"Key: 1\s+Value: dumparray ({HEXVAL})",
               [r"Name:\s+System\.String\[\]", "Number of elements 4"]),
    "structKeys": ("dumpobj", rf"Value: dumpobj ({HEXVAL})",
                   [r"Name:\s+DotnetDumpCommands\.Program\+DumpSampleClass", r"instance\s+0\s+<Value1>",
                    r"instance\s+0000000000000000\s+<Value2>"]),
    "structValues": ("dumpvc", rf"dumpvc ({HEXVAL} {HEXVAL})",
                     [r"Name:\s+DotnetDumpCommands\.Program\+DumpSampleStruct", r"instance\s+12\s+IntValue",
                      rf"instance\s+{HEXVAL}\s+StringValue", rf"instance\s+{HEXVAL}\s+Date"]),
}
DCD_ERRORS = {"dcd": "Missing ConcurrentDictionary address", "dcd abcdefgh": "Hexadecimal address expected",
              "dcd 0000000000000001": "is not referencing an object"}


def pout(pattern: str, text: str | None) -> str | None:
    """SOS's <POUT>: the first group of ``pattern`` (multi-line) in the previous output."""
    m = re.search(pattern, text, re.M) if text is not None else None
    return m.group(1) if m else None


def play_dcd(host_: str, **kw) -> dict:  # type: ignore[no-untyped-def]
    """The script's steps in one host, a batch per step: {step: {section: (argument, output)}}."""
    def batch(cmds: list[str]) -> list[str]:
        return [o.text for o in drivers.run_in_host(host_, cmds, **kw)] if cmds else []

    first = batch([*DCD_ERRORS, DCD_STAT])
    played: dict = {"errors": dict(zip(DCD_ERRORS, first)), "stat": first[-1]}
    mts = {k: pout(rf"^({HEXVAL}) .*{re.escape(CD)}<{args}>[^+]", first[-1]) for k, (args, _v) in DCD_SECTIONS.items()}
    played["mt"] = {k: (a, t) for (k, a), t in zip(((k, a) for k, a in mts.items() if a),
                                                   batch([f"dumpheap -mt {a}" for a in mts.values() if a]))}
    addrs = {k: pout(rf"\n\s*({HEXVAL})\s+{HEXVAL}\s+\d+", t) for k, (_a, t) in played["mt"].items()}
    played["dcd"] = {k: (a, t) for (k, a), t in zip(((k, a) for k, a in addrs.items() if a),
                                                    batch([f"dcd {a}" for a in addrs.values() if a]))}
    follow = {k: (cmd, pout(rx, played["dcd"].get(k, (None, None))[1])) for k, (cmd, rx, _v) in DCD_FOLLOW.items()}
    follow = {k: v for k, v in follow.items() if v[1]}
    played["follow"] = {k: (a, t) for (k, (_c, a)), t in zip(follow.items(), batch([f"{c} {a}" for c, a in follow.values()]))}
    return played


@pytest.fixture(scope="module", params=[("wks", "regions"), ("svr", "segments")], ids=lambda p: "-".join(p))
def dcd_case(request, tmp_path_factory) -> Case:
    drivers.require_dotnet_and_lldb()
    tfm = request.config.getoption("--tfm")
    gc, flavor = request.param
    work = tmp_path_factory.mktemp(f"dcdscript-{gc}-{flavor}")
    with Debuggee("dcdscript", gc=gc, gc_flavor=flavor, tfm=tfm, dll=build_debuggee(tfm), core_dir=work) as dbg:
        c = Case(dbg.truth)
        core = dbg.write_core("heap", work / "dcdscript.core")
        exe = str(dbg.executable)
        for live in (hst for hst in HOSTS if hst.endswith("-live")):
            c.outputs[live] = play_dcd(live, pid=dbg.pid)
    for hst in (hst for hst in HOSTS if not hst.endswith("-live")):
        c.outputs[hst] = play_dcd(hst, core=core) if hst.startswith("cli") else play_dcd(hst, core=core, exe=exe)
    core.unlink(missing_ok=True)
    return c


def test_concurrent_dictionaries_script(dcd_case: Case, host: str) -> None:
    t, played = dcd_case.truth["dcdscript"], dcd_case.outputs[host]
    for command, message in DCD_ERRORS.items():
        assert message in played["errors"][command], played["errors"][command]
    for key, (_args, shows) in DCD_SECTIONS.items():
        # the row the section's regular expression picked is the dictionary's MethodTable …
        assert key in played["mt"], f"{key}: no row of {DCD_STAT!r} matches:\n{played['stat']}"
        assert h(played["mt"][key][0]) == h(t[key]["mt"]), played["stat"]
        # … whose name is the one the debuggee composes from reflection
        row = has(played["stat"], rf"^\s*0*{h(t[key]['mt']):x} +\d+ +\d+ (.+)$")
        assert row.group(1) == t[key]["name"], row.group(0)
        assert key in played["dcd"], played["mt"][key][1]
        assert h(played["dcd"][key][0]) == h(t[key]["address"]), played["mt"][key][1]
        for pattern in shows:
            has(played["dcd"][key][1], pattern)
    for key, (_cmd, _rx, shows) in DCD_FOLLOW.items():
        assert key in played["follow"], played["dcd"][key][1]
        for pattern in shows:
            has(played["follow"][key][1], pattern)
    assert h(played["follow"]["arrays"][0]) == h(t["arrayOne"])


# -- DumpGen.script ----------------------------------------------------------------------------


def test_dumpgen_per_generation_and_filters(case: ScriptCase, host: str) -> None:
    x = g(case.truth)
    mt = h(x["whereMt"])
    for gen in (0, 1, 2):
        text = out(case, host, f"dumpgen gen{gen}")
        has(text, r"^\s+MT\s+Count\s+TotalSize\s+Class Name$")
        rows = stat_rows(text)
        want = sum(1 for o in x["where"] if o["generation"] == gen)
        assert (rows[mt][0] if mt in rows else 0) == want, (gen, rows.get(mt))
    poh = stat_rows(out(case, host, "dumpgen poh"))
    assert poh[h(x["pinned"]["mt"])][2] == "System.Byte[]"
    # the pinned array is listed in the POH and nowhere else (DumpGen's "not in gen2")
    byte_mt = x["pinned"]["mt"]
    for gen, listed in (("poh", True), ("gen2", False)):
        rows = re.findall(rf"^({HEX})\s+{HEX}\s+(\d+)$", out(case, host, f"dumpgen {gen} -mt {byte_mt}"), re.M)
        assert ((h(x["pinned"]["address"]), str(x["pinned"]["unalignedSize"])) in {(h(a), n) for a, n in rows}) == listed
    in_gen0 = [o for o in x["where"] if o["generation"] == 0]
    typed = out(case, host, f"dumpgen gen0 -type {x['whereType']}")
    has(typed, rf"^Total {len(in_gen0)} objects$")
    listing = out(case, host, f"dumpgen gen0 -mt {x['whereMt']}")
    has(listing, r"^\s+Address\s+MT\s+Size$")
    has(listing, rf"^Total {len(in_gen0)} objects$")
    assert {h(a) for a in re.findall(rf"^({HEX})\s+{HEX}\s+\d+$", listing, re.M)} == {h(o["address"]) for o in in_gen0}
    has(out(case, host, "dumpgen gen0 -mt 00000001"), r"^Total 0 objects$")
    has(out(case, host, "dumpgen gen0 -type NoMatchingType"), r"^Total 0 objects$")
    assert "Generation argument is missing" in case.out(host, "dumpgen").text
    assert "invalid is not a supported generation" in case.out(host, "dumpgen invalid").text
    if not host.startswith(("lldb", "gdb")):
        assert "Required argument missing for option: '-mt'." in case.out(host, "dumpgen gen0 -mt").text


# -- OtherCommands.script ----------------------------------------------------------------------


def test_ip2md_dumpmd_dumpclass_dumpmt(case: ScriptCase, host: str) -> None:
    x = g(case.truth)
    park = re.escape(x["parkMethod"])
    ip2md = out(case, host, f"ip2md {case.derived['ip']}")
    has(ip2md, rf"^Method Name:\s+{re.escape(x['bodyMethod'])}\(\)$")
    # the IP is Park's return address in Body: the statement after the call
    source = (Path(__file__).parent / "debuggees" / "SosextDebuggee" / "GcScriptsScenario.cs").read_text().splitlines()
    after_call = next(i for i, ln in enumerate(source, 1) if ln.strip() == "GC.KeepAlive(young);")
    has(ip2md, rf"^Source file:\s+\S*/GcScriptsScenario\.cs @ {after_call}$")
    has(out(case, host, f"dumpmd {x['parkMethodDesc']}"), rf"^Method Name:\s+{park}\(")
    for cmd, label in ((f"dumpclass {case.derived['eeclass']}", "Class Name"), (f"dumpmt {x['scenarioMt']}", "Name")):
        text = out(case, host, cmd)
        has(text, rf"^{label}:\s+{re.escape(x['scenarioType'])}$")
        has(text, r"^File:\s+\S*SosextDebuggee\.dll$")


def test_dumpdomain_dumpassembly_dumpmodule(case: ScriptCase, host: str) -> None:
    d = case.derived
    dom = out(case, host, "dumpdomain")
    has(dom, rf"^LowFrequencyHeap:\s+{HEX}$")
    has(dom, rf"^HighFrequencyHeap:\s+{HEX}$")
    domain = has(dom, rf"^Domain 1:\s+({HEX})$").group(1)
    # eeheap's loader part names the same domain
    assert h(has(out(case, host, "eeheap"), rf"^Domain 1:\s+({HEX})$").group(1)) == h(domain)
    asm = out(case, host, f"dumpassembly {d['corelibAssembly']}")
    has(asm, rf"^Parent Domain:\s+{HEX}$")
    has(asm, rf"^Name:\s+{re.escape(d['corelibPath'])}$")
    mod = out(case, host, f"dumpmodule {d['corelibModule']}")
    has(mod, rf"^LoaderHeap:\s+{HEX}$")
    has(mod, rf"^TypeDefToMethodTableMap:\s+{HEX}$")


def test_finalizequeue_and_the_rest_run(case: ScriptCase, host: str) -> None:
    fq = out(case, host, "finalizequeue")
    has(fq, r"^SyncBlocks to be cleaned up:\s+\d+$")
    has(fq, r"^Statistics for all finalizable objects.*:$")
    has(fq, r"^\s+Address\s+MT\s+Size$")
    has(fq, rf"^Total\s+{DEC}\s+objects.*{DEC}\s+bytes$")
    has(out(case, host, "clrmodules -v"), rf"^\s+ImageBase:\s+{HEX}$")
    for cmd in ("syncblk", "gchandles", "dumpgcdata", "dumpruntimetypes"):
        assert not case.out(host, cmd).errors, case.out(host, cmd).text
        out(case, host, cmd)
    has(out(case, host, f"dumplog {case.files[host]}/stress.log"), r"^SUCCESS: Stress log dumped$")


def test_host_commands_modules_and_registers(case: ScriptCase, host: str) -> None:
    """OtherCommands' EXTCOMMANDs: modules -v and registers (under `sos` in the debuggers)."""
    ext = "sos " if host.startswith(("lldb", "gdb")) else ""
    mods = out(case, host, f"{ext}modules -v")
    rows = re.findall(rf"^({HEX}) ({HEX}) (\S+)$", mods, re.M)
    assert any(p.endswith("/libcoreclr.so") for _b, _s, p in rows), mods
    regs = out(case, host, f"{ext}registers")
    has(regs, r"^rip = 0x[0-9A-F]{16}$")
    has(regs, r"^rsp = 0x[0-9A-F]{16}$")
