"""Acceptance of the objects/types/modules family: dumpobj, dumparray, dumpvc, dumpmt,
dumpclass, dumpmd, name2ee, token2ee, dumpmodule, dumpdomain, dumpassembly.

The `fields` debuggee sets known values in an object with a field of every kind, plus
strings, arrays of each kind, boxed structs, statics and two methods (one run, one never
run), and prints them with their addresses, MethodTables, offsets and tokens. Each host
runs one batch of commands (LLDB live, LLDB on a heap core, the CLI on the heap core, and
GDB live and on the core when it is installed) and the tests compare every output with
that truth.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import drivers
from harness import Debuggee, build_debuggee

pytestmark = pytest.mark.slow

HOSTS = ["lldb-live", "lldb-heap", "cli-heap"]
if drivers.GDB:
    HOSTS += ["gdb-live", "gdb-heap"]

MODULE_FILE = "SosextDebuggee.dll"
ENUM_UNDERLYING = {"SosextDebuggee.FieldColor": "System.Int32", "SosextDebuggee.FieldSmall": "System.Byte",
                   "SosextDebuggee.FieldPerms": "System.Int32"}
# Test types name2ee must find (non-generic: the TypeDef map holds exactly their MethodTable).
NAMED_TYPES = ["SosextDebuggee.FieldsHolder", "SosextDebuggee.FieldPair", "SosextDebuggee.FieldLeaf",
               "SosextDebuggee.FieldColor", "SosextDebuggee.FieldSmall", "SosextDebuggee.FieldPerms",
               "SosextDebuggee.ColdStatics", "SosextDebuggee.FieldsOuter", "SosextDebuggee.FieldsOuter+Inner"]
ARRAYS = ["ints", "strings", "pairs", "matrix", "jagged", "empty", "bytes", "chars"]
OBJECTS = ["boxedPair", "boxedInt", "boxedCold", "inner", "outer", "genericInt", "genericString", "list"]


def h(text: str) -> int:
    return int(text, 16)


@dataclass
class Places:
    """Addresses the debuggee cannot print (runtime structures), read with sosext's model
    from the heap core: only used as command arguments, never as expected values."""

    module: int
    assembly: int
    domain: int


@dataclass
class Case:
    truth: dict
    places: Places
    commands: list[str]
    outputs: dict[str, list[drivers.Output]] = field(default_factory=dict)

    def out(self, host: str, command: str) -> drivers.Output:
        return self.outputs[host][self.commands.index(command)]

    def obj(self, role: str) -> dict:
        return self.truth["objects"][role]

    def type(self, name: str) -> dict:
        return self.truth["types"][name]


def bad_inputs(truth: dict) -> list[tuple[str, str | re.Pattern]]:
    """(command, expected error) pairs; each is followed in the batch by a good command."""
    holder = h(truth["holder"]["address"])
    mt = h(truth["holder"]["mt"])
    return [
        ("dumpobj zzz", "error: Invalid parameter zzz"),
        ("dumpobj 0", "error: Invalid parameter 0"),
        (f"dumpobj {holder + 0x10:x}",
         f"error: {holder + 0x10:#x} is not a valid object: it is inside {holder:#x} (SosextDebuggee.FieldsHolder, "
         f"{truth['holder']['size']} bytes) at offset 0x10 (try dumpobj {holder:x})"),
        (f"dumpobj {mt:x}", f"error: {mt:#x} is not a valid object: it is a MethodTable (SosextDebuggee.FieldsHolder) "
                            f"(try dumpmt {mt:x})"),
        # SOS answers these two (not as failures): no module; the named module's header alone.
        ("name2ee NoSuchModule.dll NoSuch.Type", "Failed to find module matching 'NoSuchModule.dll'."),
        (f"name2ee {MODULE_FILE} NoSuch.Type", re.compile(f"Module:      [0-9a-f]{{16}}\nAssembly:    {re.escape(MODULE_FILE)}")),
        ("dumpmt 1230", "error: 0000000000001230 is not a MethodTable"),
        # SOS answers these (not as failures): its own line, printed as output.
        ("dumpmd 1230", "0000000000001230 is not a MethodDesc"),
        ("dumparray " + truth["holder"]["address"], "Not an array, please use dumpobj instead"),
        (f"dumpvc {holder:x} {holder:x}", "Not a managed object"),
    ]


def commands_for(truth: dict, places: Places) -> list[str]:
    holder = truth["holder"]
    o = truth["objects"]
    t = truth["types"]
    m = truth["methods"]
    cmds = [f"dumpobj {holder['address']}", f"dumpobj -notes {holder['address']}",
            f"dumpobj -notes {o['boxedCold']['address']}", f"dumpobj -nofields {holder['address']}",
            f"dumpobj -refs {o['inner']['address']}", f"dumpobj -refs {o['strAscii']['address']}",
            f"dumpobj {o['strAscii']['address']}", f"do {o['strNonAscii']['address']}",
            f"dumpvc {t['SosextDebuggee.FieldPair']['mt']} {truth['pair']['address']}",
            f"dumpvc {t['SosextDebuggee.FieldLeaf']['mt']} {h(truth['pair']['address']) + truth['pair']['offsetLeaf']:x}",
            f"dumpclass {holder['mt']}"]
    cmds += [f"dumpobj {o[r]['address']}" for r in ARRAYS + OBJECTS]
    cmds += [f"dumparray -details {o['ints']['address']}", f"dumparray {o['strings']['address']}",
             f"dumparray -details {o['matrix']['address']}", f"dumparray {o['jagged']['address']}",
             f"dumparray {o['empty']['address']}", f"dumparray -details {o['pairs']['address']}",
             f"da -start 1 -length 1 {o['ints']['address']}"]
    cmds += [f"name2ee {MODULE_FILE} {n}" for n in NAMED_TYPES]
    cmds += [f"name2ee *!SosextDebuggee.FieldsHolder", "name2ee SosextDebuggee SosextDebuggee.FieldsOuter/Inner",
             f"name2ee {MODULE_FILE} SosextDebuggee.GenericStatics",
             f"name2ee {MODULE_FILE} SosextDebuggee.FieldsHolder.RanMethod",
             f"name2ee * SosextDebuggee.FieldsHolder.NeverRanMethod",
             f"name2ee {MODULE_FILE}!SosextDebuggee.FieldsHolder.s_counter"]
    cmds += [f"dumpmt {v['mt']}" for v in t.values()]
    cmds += [f"dumpheap -mt {t[n]['mt']}" for n in ("SosextDebuggee.FieldsHolder", "SosextDebuggee.FieldsOuter+Inner",
                                                      "System.Int32[,]", "SosextDebuggee.FieldPair[]")]
    cmds += [f"dumpmt -md {holder['mt']}", f"dumpmd {m['ran']['methodDesc']}", f"dumpmd {m['never']['methodDesc']}",
             f"token2ee {MODULE_FILE} {t['SosextDebuggee.FieldsHolder']['token']}",
             f"token2ee {MODULE_FILE} {m['ran']['token']}", f"token2ee * {m['never']['token']}",
             f"dumpmodule {places.module:x}", f"dumpmodule -mt {places.module:x}", "dumpdomain",
             f"dumpdomain {places.domain:x}", f"dumpassembly {places.assembly:x}"]
    for bad, _expected in bad_inputs(truth):
        cmds += [bad, f"dumpobj -nofields {o['inner']['address']}"]
    return cmds


def find_places(core: Path) -> Places:
    sys.path.insert(0, str(drivers.REPO))
    from sosext.clr.runtime import ClrRuntime
    from sosext.targets.elfcore import CoreTarget
    rt = ClrRuntime(CoreTarget(core))
    mod = rt.catalog.find(MODULE_FILE)[0]
    domain = next(d for d in rt.app_domains() if any(a.address == mod.assembly for a in d.assemblies))
    return Places(mod.address, mod.assembly, domain.address)


@pytest.fixture(scope="module")
def case(request, tmp_path_factory) -> Case:
    drivers.require_dotnet_and_lldb()
    tfm = request.config.getoption("--tfm")
    cores = tmp_path_factory.mktemp("cores-fields")
    with Debuggee("fields", tfm=tfm, dll=build_debuggee(tfm), core_dir=cores) as d:
        heap_core = d.write_core("heap", cores / "heap.core")
        places = find_places(heap_core)
        c = Case(d.truth, places, commands_for(d.truth, places))
        c.outputs = drivers.run_in_hosts(d, c.commands, HOSTS, cores, cores={"heap": heap_core})
    heap_core.unlink(missing_ok=True)
    return c


@pytest.fixture(params=HOSTS)
def host(request) -> str:
    return request.param


# -- parsing ------------------------------------------------------------------------------------


@dataclass
class FieldRow:
    mt: int
    token: int
    offset: int
    type: str
    vt: str
    attr: str
    value: str | None
    name: str
    note: str | None


def field_rows(text: str) -> dict[str, FieldRow]:
    """The dumpobj/dumpvc field table by name (SOS's fixed printf columns)."""
    rows: dict[str, FieldRow] = {}
    for ln in text.splitlines():
        s = ln.lstrip(" ")
        if not re.match(r"^[0-9a-f]{16} [0-9a-f]{8} ", s) or len(s) < 71:
            continue
        rest = s[70:]
        if s[61:69] in ("TLstatic", "CLstatic"):
            value, tail = None, rest.strip()
        elif rest[:16].strip() == "":
            value, tail = None, rest[17:]
        else:
            value, tail = rest.split(None, 1)
        name, _, note = tail.partition(" ")
        rows[name] = FieldRow(h(s[0:16]), h(s[17:25]), h(s[26:34].strip()), s[35:55].strip(), s[56:60].strip(),
                              s[61:69].strip(), value, name, note[1:-1] if note else None)
    return rows


def label(text: str, name: str) -> str | None:
    for ln in text.splitlines():
        if ln.startswith(name + ":"):
            return ln[len(name) + 1:].strip()
    return None


def blocks(text: str) -> list[dict[str, str]]:
    """name2ee/token2ee output as one dict of labels per match (module header carried over)."""
    out: list[dict[str, str]] = []
    header: dict[str, str] = {}
    cur: dict[str, str] | None = None
    for ln in text.splitlines():
        if ln.startswith("---") or not ln.strip() or ln.startswith("Scanned "):
            cur = None
            continue
        key, sep, value = ln.partition(":")
        if key in ("Module", "Assembly"):
            if key == "Module":
                header = {}
            header[key] = value.strip()
            continue
        if cur is None:
            cur = dict(header)
            out.append(cur)
        if ln.startswith("Not JITTED yet"):
            cur["NotJitted"] = ln
        elif sep:
            cur[key] = value.strip()
    return out


def runtime_major(truth: dict) -> int:
    return int(truth["runtime"]["version"].split(".")[0])


def clip(name: str) -> str:
    return name if len(name) <= 20 else "..." + name[-17:]


def sos_type_name(truth: dict, cs_name: str) -> str:
    for v in truth["types"].values():
        if v["csName"] == cs_name:
            return v["sosName"]
    return cs_name


# -- dumpobj ------------------------------------------------------------------------------------


def test_dumpobj_header_of_the_test_object(case: Case, host: str) -> None:
    text = case.out(host, f"dumpobj {case.truth['holder']['address']}").text
    assert label(text, "Name") == "SosextDebuggee.FieldsHolder"
    assert label(text, "MethodTable") == f"{h(case.truth['holder']['mt']):016x}"
    assert label(text, "Size") == f"{case.truth['holder']['size']}(0x{case.truth['holder']['size']:x}) bytes"
    assert label(text, "File") == case.truth["module"]["path"]
    assert not any(ln.startswith("error") for ln in text.splitlines())


def test_dumpobj_every_instance_field_equals_the_truth(case: Case, host: str) -> None:
    truth = case.truth
    holder = h(truth["holder"]["address"])
    rows = field_rows(case.out(host, f"dumpobj -notes {truth['holder']['address']}").text)
    # Without -notes, SOS's table: the same rows and values, nothing after a name.
    plain = field_rows(case.out(host, f"dumpobj {truth['holder']['address']}").text)
    assert all(r.note is None for r in plain.values())
    assert {n: r.value for n, r in plain.items()} == {n: r.value for n, r in rows.items()}
    for f in truth["holder"]["fields"]:
        name, kind, want = f["name"], f["kind"], f["value"]
        row = rows.get(name)
        assert row is not None, f"{name} missing"
        assert (row.offset, row.attr) == (f["offset"], "instance"), name
        sos_name = sos_type_name(truth, f["type"])
        if kind == "enum":
            assert row.type == ENUM_UNDERLYING[f["type"]], name
            assert row.mt == h(truth["types"][f["type"]]["mt"]), name
            assert int(row.value) == want and row.note == truth["holder"]["enumTexts"][name], name
        elif kind == "pointer" and f["type"] == "System.Int32*":
            assert (row.type, row.vt, row.value) == ("PTR", "No", f"{h(want):016x}"), name
        elif kind == "pointer":
            assert (row.type, row.vt, row.value) == (f["type"], "Yes", f"{h(want):016X}"), name
        else:
            assert row.type == clip(sos_name), name
        if kind == "int":
            assert int(row.value) == want, name
        elif kind == "bool":
            assert row.value == ("1" if want else "0"), name
        elif kind == "char":
            assert int(row.value, 16) == want and row.note == f"'{chr(want)}'", name
        elif kind == "float":
            assert float(row.value) == float(want) and re.fullmatch(r"-?\d+\.\d{6}", row.value), name
        elif kind == "ref":
            assert row.value == f"{h(want):016x}" and row.vt == "No", name
        elif kind in ("struct", "decimal", "datetime", "guid", "timespan"):
            assert row.value == f"{holder + f['offset']:016x}" and row.vt == "Yes", name
            expected_note = {"decimal": want, "guid": want, "timespan": want,
                             "datetime": want["text"] if isinstance(want, dict) else None, "struct": None}[kind]
            assert row.note == expected_note, name


def test_dumpobj_statics(case: Case, host: str) -> None:
    truth = case.truth
    st = truth["statics"]
    rows = field_rows(case.out(host, f"dumpobj {truth['holder']['address']}").text)
    assert (rows["s_counter"].attr, int(rows["s_counter"].value)) == ("static", st["s_counter"])
    assert rows["s_name"].value == f"{h(st['s_name']):016x}"
    assert rows["s_pair"].attr == "static" and h(rows["s_pair"].value) != 0
    assert rows["t_perThread"].attr == "TLstatic" and rows["t_perThread"].value is None
    text = case.out(host, f"dumpobj {truth['holder']['address']}").text
    if runtime_major(truth) >= 9:
        assert "    Thread static values (Thread:Value)" in text
        assert f"        {st['t_perThreadOsTid']:x}:{st['t_perThread']}" in text.splitlines()
    else:
        # .NET 8's DAC cannot find thread statics safely: said so, not guessed.
        assert text.splitlines()[-1] == " <no information>"
    gi_text = case.out(host, f"dumpobj {case.obj('genericInt')['address']}").text
    gs_text = case.out(host, f"dumpobj {case.obj('genericString')['address']}").text
    assert int(field_rows(gi_text)["Value"].value) == 11
    if runtime_major(truth) >= 9:
        assert int(field_rows(gi_text)["s_shared"].value) == st["genericIntShared"]
        assert field_rows(gs_text)["s_shared"].value == f"{h(st['genericStringShared']):016x}"
    else:
        # Statics of generic instantiations live in .NET 8's dynamic statics: not located.
        for text in (gi_text, gs_text):
            assert text.splitlines()[-1].endswith("   static  <no information>")
    cold = field_rows(case.out(host, f"dumpobj -notes {case.obj('boxedCold')['address']}").text)
    assert cold["s_cold"].attr == "static" and cold["s_cold"].note == "not initialized"
    assert field_rows(case.out(host, f"dumpobj {case.obj('boxedCold')['address']}").text)["s_cold"].note is None
    assert cold["s_cold"].value in (None, "0")


def test_dumpobj_nofields_and_refs(case: Case, host: str) -> None:
    truth = case.truth
    text = case.out(host, f"dumpobj -nofields {truth['holder']['address']}").text
    assert "Fields:" not in text and label(text, "Name") == "SosextDebuggee.FieldsHolder"
    refs = case.out(host, f"dumpobj -refs {case.obj('inner')['address']}").text.splitlines()
    i = refs.index("GC Refs:")
    assert refs[i + 1].split() == ["Field", "Offset", "Object", "Type"]
    fld, off, obj, typ = refs[i + 2].split()
    inner_fields = field_rows("\n".join(refs))
    assert (fld, obj, typ) == ("InnerName", inner_fields["InnerName"].value.lstrip("0"), "System.String")
    # dumpobj's offsets count from the object, dumpobjgcrefs' (ClrMD's) from the data after the MethodTable.
    assert off == f"0x{inner_fields['InnerName'].offset - 8:02x}"
    assert case.out(host, f"dumpobj -refs {case.obj('strAscii')['address']}").lines[-1] == "GC Refs: none"


# SOS names GDB keeps for itself (none of those used here: `do <address>` is dumpobj in GDB too).
GDB_SHADOWED: tuple[str, ...] = ()


def test_dumpobj_strings(case: Case, host: str) -> None:
    for role, cmd in (("strAscii", "dumpobj"), ("strNonAscii", "do")):
        if host.startswith("gdb") and cmd + " " in GDB_SHADOWED:
            cmd = "dumpobj"
            continue
        o = case.obj(role)
        text = case.out(host, f"{cmd} {o['address']}").text
        assert label(text, "Name") == "System.String"
        assert text.splitlines()[[ln.startswith("String:") for ln in text.splitlines()].index(True)] == \
            f"String:      {o['value']}"
        assert label(text, "Size") == f"{o['unalignedSize']}(0x{o['unalignedSize']:x}) bytes"
        assert int(field_rows(text)["_stringLength"].value) == o["length"]


def test_dumpobj_arrays(case: Case, host: str) -> None:
    kinds = {"System.Int32": "Int32", "System.String": "CLASS", "SosextDebuggee.FieldPair": "VALUETYPE",
             "System.Int32[]": "SZARRAY", "System.Byte": "Byte", "System.Char": "Char"}
    for role in ARRAYS:
        o = case.obj(role)
        text = case.out(host, f"dumpobj {o['address']}").text
        assert label(text, "Name") == sos_type_name(case.truth, o["type"]), role
        assert label(text, "MethodTable") == f"{h(o['mt']):016x}", role
        assert label(text, "Size") == f"{o['unalignedSize']}(0x{o['unalignedSize']:x}) bytes", role
        assert label(text, "Array") == f"Rank {o['rank']}, Number of elements {o['length']}, " \
                                       f"Type {kinds[o['elementType']]}", role
        assert label(text, "File") is None, role
        assert text.splitlines()[-2:] == ["Fields:", "None"], role
    arrays = case.truth["arrays"]
    flat = lambda s: "".join(c if 32 <= ord(c) <= 126 else "." for c in s)  # noqa: E731
    assert label(case.out(host, f"dumpobj {case.obj('bytes')['address']}").text, "Content") == flat(arrays["bytesText"])
    assert label(case.out(host, f"dumpobj {case.obj('chars')['address']}").text, "Content") == arrays["charsText"]


def element_lines(text: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^((?:\[\d+\])+) (\S+)$", text, re.M)]


def test_dumparray_contents(case: Case, host: str) -> None:
    arrays = case.truth["arrays"]
    ints = case.obj("ints")
    text = case.out(host, f"dumparray -details {ints['address']}").text
    assert re.fullmatch(r"[0-9a-f]{16}", label(text, "Element Methodtable"))
    elems = element_lines(text)
    assert [e[0] for e in elems] == [f"[{i}]" for i in range(ints["length"])]
    assert [h(e[1]) for e in elems] == [h(ints["address"]) + 16 + 4 * i for i in range(ints["length"])]
    values = [int(ln.split()[-2]) for ln in text.splitlines() if ln.rstrip().endswith(" m_value")]
    assert values == arrays["ints"]
    strings = element_lines(case.out(host, f"dumparray {case.obj('strings')['address']}").text)
    assert [v for _i, v in strings] == [("null" if a == "0x0" else f"{h(a):016x}") for a in arrays["strings"]]
    matrix = case.out(host, f"dumparray -details {case.obj('matrix')['address']}").text
    assert [i for i, _v in element_lines(matrix)] == [f"[{i}][{j}]" for i in range(2) for j in range(3)]
    assert [int(ln.split()[-2]) for ln in matrix.splitlines() if ln.rstrip().endswith(" m_value")] == arrays["matrix"]
    jagged = element_lines(case.out(host, f"dumparray {case.obj('jagged')['address']}").text)
    assert [v for _i, v in jagged] == [("null" if a == "0x0" else f"{h(a):016x}") for a in arrays["jagged"]]
    empty = case.out(host, f"dumparray {case.obj('empty')['address']}").text
    assert element_lines(empty) == [] and "Number of elements 0" in empty
    pairs = case.out(host, f"dumparray -details {case.obj('pairs')['address']}").text
    assert [h(v) for _i, v in element_lines(pairs)] == [h(p["address"]) for p in arrays["pairs"]]
    ids = [int(ln.split()[-2]) for ln in pairs.splitlines() if ln.rstrip().endswith(" Id")]
    assert ids == [p["id"] for p in arrays["pairs"]]
    part = element_lines(case.out(host, f"da -start 1 -length 1 {ints['address']}").text)
    assert part == [("[1]", f"{h(ints['address']) + 20:016x}")]


def test_dumpvc_nested_struct(case: Case, host: str) -> None:
    p = case.truth["pair"]
    rows = field_rows(case.out(host, f"dumpvc {case.type('SosextDebuggee.FieldPair')['mt']} {p['address']}").text)
    assert (int(rows["Id"].value), rows["Id"].offset) == (p["id"], p["offsetId"])
    assert (float(rows["Weight"].value), rows["Weight"].offset) == (float(p["weight"]), p["offsetWeight"])
    assert (h(rows["Leaf"].value), rows["Leaf"].offset) == (h(p["address"]) + p["offsetLeaf"], p["offsetLeaf"])
    leaf_addr = h(p["address"]) + p["offsetLeaf"]
    leaf = field_rows(case.out(host, f"dumpvc {case.type('SosextDebuggee.FieldLeaf')['mt']} {leaf_addr:x}").text)
    assert (int(leaf["Number"].value), leaf["Number"].offset) == (p["leafNumber"], p["leafOffsetNumber"])
    assert (leaf["Label"].value, leaf["Label"].offset) == (f"{h(p['leafLabel']):016x}", p["leafOffsetLabel"])


def test_dumpobj_other_objects(case: Case, host: str) -> None:
    for role in OBJECTS:
        o = case.obj(role)
        text = case.out(host, f"dumpobj {o['address']}").text
        assert label(text, "Name") == sos_type_name(case.truth, o["type"]), role
        assert label(text, "MethodTable") == f"{h(o['mt']):016x}", role
        assert label(text, "Size") == f"{o['unalignedSize']}(0x{o['unalignedSize']:x}) bytes", role
    boxed = field_rows(case.out(host, f"dumpobj {case.obj('boxedInt')['address']}").text)
    assert int(boxed["m_value"].value) == 314159
    inner = field_rows(case.out(host, f"dumpobj {case.obj('inner')['address']}").text)
    assert int(inner["InnerValue"].value) == 31


def test_dumpclass_lists_fields_without_instance_values(case: Case, host: str) -> None:
    text = case.out(host, f"dumpclass {case.truth['holder']['mt']}").text
    assert label(text, "Class Name") == "SosextDebuggee.FieldsHolder"
    assert label(text, "Method Table") == f"{h(case.truth['holder']['mt']):016x}"
    assert label(text, "NumInstanceFields") == str(len(case.truth["holder"]["fields"]))
    rows = field_rows(text)
    assert rows["IntField"].value is None and int(rows["s_counter"].value) == case.truth["statics"]["s_counter"]


# -- types and methods -------------------------------------------------------------------------------


def test_name2ee_finds_each_test_type(case: Case, host: str) -> None:
    for name in NAMED_TYPES:
        found = [b for b in blocks(case.out(host, f"name2ee {MODULE_FILE} {name}").text) if b.get("Name") == name]
        assert len(found) == 1, name
        b = found[0]
        t = case.type(name)
        assert (h(b["MethodTable"]), h(b["Token"])) == (h(t["mt"]), h(t["token"])), name
        assert len(b["Token"]) == 16 and b["Assembly"] == case.truth["module"]["fileName"]
        assert h(b["Module"]) == case.places.module
    star = blocks(case.out(host, "name2ee *!SosextDebuggee.FieldsHolder").text)
    assert [h(b["MethodTable"]) for b in star] == [h(case.truth["holder"]["mt"])]
    assert case.out(host, "name2ee *!SosextDebuggee.FieldsHolder").lines[-1].startswith("Scanned ")
    slash = blocks(case.out(host, "name2ee SosextDebuggee SosextDebuggee.FieldsOuter/Inner").text)
    assert [b["Name"] for b in slash] == ["SosextDebuggee.FieldsOuter+Inner"]
    outer = case.out(host, f"name2ee {MODULE_FILE} SosextDebuggee.FieldsOuter").text
    assert "-" * 23 in outer.splitlines() and len(blocks(outer)) == 2
    generic = blocks(case.out(host, f"name2ee {MODULE_FILE} SosextDebuggee.GenericStatics").text)
    assert [(b["Name"], h(b["Token"])) for b in generic] == \
        [("SosextDebuggee.GenericStatics<T1>", h(case.type(
            "SosextDebuggee.GenericStatics`1[[System.Int32, System.Private.CoreLib]]")["token"]))]


def test_name2ee_methods_and_jit_state(case: Case, host: str) -> None:
    m = case.truth["methods"]
    ran = blocks(case.out(host, f"name2ee {MODULE_FILE} SosextDebuggee.FieldsHolder.RanMethod").text)
    assert len(ran) == 1
    assert (h(ran[0]["Token"]), h(ran[0]["MethodDesc"]), ran[0]["Name"]) == \
        (h(m["ran"]["token"]), h(m["ran"]["methodDesc"]), m["ran"]["sosName"])
    assert h(ran[0]["JITTED Code Address"]) != 0 and "NotJitted" not in ran[0]
    # As SOS (ClrMD's ClrType.Methods): a method is found through the MethodTable's slots that
    # hold an entry point; a non-virtual method that never ran has none, so it is not listed.
    never = case.out(host, "name2ee * SosextDebuggee.FieldsHolder.NeverRanMethod")
    assert blocks(never.text) == [] and never.lines[-1].startswith("Scanned ")
    fld = case.out(host, f"name2ee {MODULE_FILE}!SosextDebuggee.FieldsHolder.s_counter").lines
    assert any(ln.startswith("Field s_counter (mdToken 04") for ln in fld)


def test_dumpmt_sizes_agree_with_dumpheap(case: Case, host: str) -> None:
    for name, t in case.truth["types"].items():
        text = case.out(host, f"dumpmt {t['mt']}").text
        assert label(text, "Name") == t["sosName"], name
        # The DAC (and so SOS) reports System.String's base size without its terminator.
        base = t["baseSize"] - (t["componentSize"] if name == "System.String" else 0)
        assert label(text, "BaseSize") == f"0x{base:x}", name
        comp = label(text, "ComponentSize")
        assert (h(comp) if comp else 0) == t["componentSize"], name
        assert h(label(text, "mdToken")) == h(t["token"]), name
        assert label(text, "File") == t["module"], name
    for name, role in (("SosextDebuggee.FieldsHolder", None), ("SosextDebuggee.FieldsOuter+Inner", "inner"),
                       ("System.Int32[,]", "matrix"), ("SosextDebuggee.FieldPair[]", "pairs")):
        t = case.type(name)
        rows = {}
        for ln in case.out(host, f"dumpheap -mt {t['mt']}").lines:
            parts = ln.split()
            if len(parts) >= 3 and re.fullmatch(r"[0-9a-f]{12,16}", parts[0]):
                rows[h(parts[0])] = int(parts[2].replace(",", ""))
        addr = h(case.truth["holder"]["address"]) if role is None else h(case.obj(role)["address"])
        length = case.obj(role).get("length", 0) if role else 0
        assert rows[addr] == max(t["baseSize"] + t["componentSize"] * length, 24), name


def test_dumpmt_md_lists_methods_with_jit_state(case: Case, host: str) -> None:
    m = case.truth["methods"]
    text = case.out(host, f"dumpmt -md {case.truth['holder']['mt']}").text
    lines = text.splitlines()
    i = lines.index("MethodDesc Table")
    assert lines[i - 1] == "-" * 38
    assert lines[i + 1] == "           Entry       MethodDesc    JIT Slot             Name"
    rows = {ln.split()[-1]: ln.split() for ln in lines[i + 2:]}
    ran = rows[m["ran"]["sosName"]]
    never = rows[m["never"]["sosName"]]
    assert (h(ran[1]), ran[2]) == (h(m["ran"]["methodDesc"]), "JIT")
    assert (h(never[1]), never[2]) == (h(m["never"]["methodDesc"]), "NONE")
    assert "System.Object.ToString()" in rows


def test_dumpmd(case: Case, host: str) -> None:
    m = case.truth["methods"]
    ran = case.out(host, f"dumpmd {m['ran']['methodDesc']}").text
    assert label(ran, "Method Name") == m["ran"]["sosName"]
    assert label(ran, "IsJitted") == "yes" and h(label(ran, "mdToken")) == h(m["ran"]["token"])
    assert label(ran, "MethodTable") == f"{h(case.truth['holder']['mt']):016x}"
    code = label(ran, "Current CodeAddr")
    assert f"     CodeAddr:           {code}  (Optimized)" in ran.splitlines()
    never = case.out(host, f"dumpmd {m['never']['methodDesc']}").text
    assert label(never, "IsJitted") == "no"


def test_token2ee(case: Case, host: str) -> None:
    t = case.type("SosextDebuggee.FieldsHolder")
    m = case.truth["methods"]
    b = blocks(case.out(host, f"token2ee {MODULE_FILE} {t['token']}").text)
    assert [(h(x["Token"]), h(x["MethodTable"]), x["Name"]) for x in b] == \
        [(h(t["token"]), h(t["mt"]), "SosextDebuggee.FieldsHolder")]
    assert len(b[0]["Token"]) == 8
    b = blocks(case.out(host, f"token2ee {MODULE_FILE} {m['ran']['token']}").text)
    assert [(h(x["MethodDesc"]), x["Name"]) for x in b] == [(h(m["ran"]["methodDesc"]), m["ran"]["sosName"])]
    # With * every module whose loaded types have a method with that token matches.
    b = blocks(case.out(host, f"token2ee * {m['never']['token']}").text)
    assert [h(x["MethodDesc"]) for x in b if x["Assembly"] == MODULE_FILE] == [h(m["never"]["methodDesc"])]
    assert all(h(x["Token"]) == h(m["never"]["token"]) for x in b)


# -- modules -------------------------------------------------------------------------------------


def test_module_commands_show_the_debuggee_module(case: Case, host: str) -> None:
    path = case.truth["module"]["path"]
    mod = case.out(host, f"dumpmodule {case.places.module:x}").text
    assert mod.splitlines()[0] == f"Name: {path}"
    assert label(mod, "Assembly") == f"{case.places.assembly:016x}"
    assert re.search(r"^MetaData start address:  [0-9A-F]{16} \(\d+ bytes\)$", mod, re.M)
    listing = case.out(host, f"dumpmodule -mt {case.places.module:x}").text
    assert f"{h(case.truth['holder']['mt']):016x} 0x{h(case.type('SosextDebuggee.FieldsHolder')['token']):08x} " \
           "SosextDebuggee.FieldsHolder" in listing.splitlines()
    dom = case.out(host, "dumpdomain").text
    assert f"Assembly:           {case.places.assembly:016x} [{path}]" in dom.splitlines()
    assert f"  {case.places.module:016x}    {path}" in dom.splitlines()
    assert dom.splitlines()[1].startswith("System Domain:      ")
    one = case.out(host, f"dumpdomain {case.places.domain:x}").text
    assert f"  {case.places.module:016x}    {path}" in one.splitlines()
    asm = case.out(host, f"dumpassembly {case.places.assembly:x}").text
    assert label(asm, "Name") == path
    assert asm.splitlines()[-2:] == ["  Module", f"  {case.places.module:016x}    {path}"]
    header = blocks(case.out(host, f"name2ee {MODULE_FILE} SosextDebuggee.FieldsHolder").text)[0]
    assert header["Assembly"] == case.truth["module"]["fileName"] == MODULE_FILE


# -- bad input -------------------------------------------------------------------------------------


def test_bad_inputs_give_one_line_and_the_host_keeps_working(case: Case, host: str) -> None:
    good = f"dumpobj -nofields {case.obj('inner')['address']}"
    outs = case.outputs[host]
    for bad, expected in bad_inputs(case.truth):
        i = case.commands.index(bad)
        shown = [ln for ln in outs[i].lines if ln.strip()]
        if isinstance(expected, re.Pattern):
            assert expected.fullmatch("\n".join(shown)), (bad, shown)
        else:
            assert shown == [expected], bad
        assert outs[i + 1].text.startswith("Name:        SosextDebuggee.FieldsOuter+Inner\n"), f"after {bad}"
        assert case.commands[i + 1] == good


def test_hosts_print_the_same_text_for_the_same_core(case: Case) -> None:
    hosts = [h_ for h_ in ("lldb-heap", "cli-heap", "gdb-heap") if h_ in case.outputs]
    for i, cmd in enumerate(case.commands):
        first = case.outputs[hosts[0]][i].text
        for other in hosts[1:]:
            if other.startswith("gdb") and cmd.startswith(GDB_SHADOWED):
                continue
            assert case.outputs[other][i].text == first, f"{cmd!r}: {hosts[0]} and {other} differ"


def test_live_and_core_agree(case: Case) -> None:
    """The same process seen live and in its heap core: identical output for every command."""
    for i, cmd in enumerate(case.commands):
        assert case.outputs["lldb-live"][i].text == case.outputs["lldb-heap"][i].text, cmd
