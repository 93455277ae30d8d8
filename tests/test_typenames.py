"""Type names as SOS's managed commands print them, held to a second opinion: ClrMD itself.

SOS's C# commands (dumpheap, gcroot, objsize …) print ClrMD's ``ClrType.Name``, which ClrMD
derives from the runtime's name with its own parser. tests/clrmd-names is a small ClrMD 4.2
program (the package bench/clrmd-baseline uses, from the local NuGet copy) that prints
``ClrType.Name`` for every MethodTable on a core's heap, and ClrMD's parse of any name given
on stdin. The `dcdscript` debuggee adds objects of the shapes where the two forms differ
(nested generics, arrays and jagged arrays of instantiations, a multi-dimensional one, a
ValueTuple with a TRest) and names them itself, composed from reflection.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import drivers
from harness import Debuggee, build_debuggee, dotnet_path
from harness.debuggee import work_dir
from sosext.clr.typesystem.typenames import csharp_name

pytestmark = pytest.mark.slow

ORACLE_SRC = Path(__file__).resolve().parent / "clrmd-names"
STAT_ROW = re.compile(r"^\s*([0-9a-f]+) +[\d,]+ +[\d,]+ (.+)$")

# Runtime-style names beside those of the core: every rule of ClrMD's parser, and names it
# leaves alone. The expected text is whatever ClrMD answers, never written here.
SYNTHETIC = [
    "System.String", "System.String[]", "System.String[,,]", "System.String[][]", "Test.Foo+Bar", "System.Int32*",
    "Free", "", "Test.Foo`2", "Foo`1+Bar`1", "N.Foo+Bar`1", "Foo`2+Bar", "Foo`1[]", "Foo`1+Bar",
    "System.Collections.Generic.List`1[[System.String, System.Private.CoreLib]]",
    "System.Collections.Generic.List`1[[System.String, System.Private.CoreLib]][]",
    "System.Collections.Generic.List`1[[System.String, System.Private.CoreLib]][][][]",
    "System.Collections.Generic.List`1[[System.String, System.Private.CoreLib]][,]",
    "System.Collections.Generic.List`1[[System.String, System.Private.CoreLib]][][,]",
    "System.Collections.Generic.List`1[[System.String, System.Private.CoreLib]][,][]",
    "System.Collections.Generic.Dictionary`2+Entry[[System.String, System.Private.CoreLib],"
    "[System.Int32, System.Private.CoreLib]][]",
    "A.Outer`1+Inner`1[[System.Int32, System.Private.CoreLib],[System.String, System.Private.CoreLib]]",
    "A.Outer`1+<>c__DisplayClass2_0`1+<<M>b__0>d[[System.Int32, a],[System.String, b]]",
    "A.Outer`2[[System.Int32, a]]", "A.Outer`1+Inner`2[[System.Int32, a]]",
    "A`1[[B*, x]]", "A`1[[System.Int32[], x]]", "A`1[[System.Int32[,], x]][,]", "A`1[[System.Int32[][,], x]]",
    "A`1[[B`1[[C, c]][], b]]", "A`1[[B`1[[C, c]][][,], b]]", "A`1[[B`1+C`1[[D, d],[E, e]][], b]]",
    "A`1[[B, Version=1.0.0.0, Culture=neutral, PublicKeyToken=null]]",
    "A`2[[B+C, b],[System.ValueTuple`2[[D, d],[E, e]], f]]",
    "Foo`1[T]", "Foo`2[T,U]", "Foo`2[T, U]", "Microsoft.FSharp.Foo@2-1[TKey,TValue]",
    "Foo`1[[A, a]]*", "Foo`1[[A, a]]&", "Foo`1[[A, a]][]*", "Foo`1[[A, a]]+<M>d__0", "Foo`1[[A, a]",
    "Foo`1[[A, a],[B, b]]", "Foo`1[[A, a]][*]", "Foo`1[[A, a]] ", "Foo`x[[A, a]]", "Foo`1[[A]]",
    "Foo`1[[Bar`1[[A, a]]*, b]]", "method System.Void *(System.Int32)",
    # An array of an instantiation as an argument, whose last argument ends in ranks (directly
    # or through its own last argument): ClrMD keeps the whole name (MSBuild's heap has one).
    "System.Lazy`1[[System.Collections.Generic.KeyValuePair`2[[System.Int32, System.Private.CoreLib],"
    "[NuGet.Frameworks.NuGetFramework[], NuGet.Frameworks]][], System.Private.CoreLib]]",
    "A`1[[B`1[[D[], d]][], b]]", "A`1[[B`1[[D[,], d]][][], b]]", "A`1[[B`1[[C`1[[D[], d]], d]][], b]]",
    "A`1[[B`1[[C`1[[D, d]][], d]][], b]]", "A`1[[B`1+C[[D[], d]][], b]]", "A`2[[E, e],[B`1[[D[], d]][], b]]",
    "A`1[[X`1[[B`1[[D[], d]][], b]], x]]", "A`1[[B`1[[C`1[[D, d]], d]][], b]]", "A`1[[B`2[[D[], d],[E, e]][], b]]",
    "A`1[B`1[D[]][]]", "A`1[[B`1[[D*, d]][], b]]", "A`1[[B`1[[D[], d]], b]][]", "B`1[[D[], d]][]",
]


@pytest.fixture(scope="module")
def oracle() -> Path:
    """The ClrMD program, built once per source hash under the work directory."""
    dotnet = dotnet_path()
    if dotnet is None:
        pytest.skip("dotnet is not on PATH")
    files = sorted(p for p in ORACLE_SRC.iterdir() if p.is_file())
    digest = hashlib.sha256(b"".join(p.name.encode() + p.read_bytes() for p in files)).hexdigest()[:16]
    dest = work_dir() / f"clrmd-names-{digest}"
    dll = dest / "out" / "ClrmdNames.dll"
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / f".{dest.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not dll.exists():
            shutil.rmtree(dest, ignore_errors=True)
            (dest / "src").mkdir(parents=True)
            for p in files:
                shutil.copy2(p, dest / "src" / p.name)
            r = subprocess.run([dotnet, "build", str(dest / "src" / "ClrmdNames.csproj"), "-c", "Release",
                                "-o", str(dest / "out"), "--disable-build-servers", "-nodeReuse:false", "-nologo"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
            if r.returncode != 0:
                # the only outside input is the Microsoft.Diagnostics.Runtime package
                pytest.skip(f"the ClrMD oracle did not build (its NuGet package?): {r.stdout.strip()[-400:]}")
    return dll


def ask(oracle: Path, *args: str, stdin: str | None = None) -> str:
    dotnet = dotnet_path()
    assert dotnet is not None
    r = subprocess.run([dotnet, str(oracle), *args], input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=600, env={**os.environ, "DOTNET_ROLL_FORWARD": "Major"})
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture(scope="module")
def core(tmp_path_factory) -> tuple[Path, dict]:
    drivers.require_dotnet_and_lldb()
    work = tmp_path_factory.mktemp("typenames")
    with Debuggee("dcdscript", dll=build_debuggee(), core_dir=work) as d:
        return d.write_core("heap", work / "dcdscript.core"), d.truth["dcdscript"]


def test_every_dumpheap_stat_row_names_its_type_as_clrmd_does(oracle: Path, core: tuple[Path, dict]) -> None:
    path, _truth = core
    clrmd = dict(ln.split("\t", 1) for ln in ask(oracle, "heap", str(path)).splitlines())
    clrmd = {int(mt, 16): name for mt, name in clrmd.items()}
    text, as_json = (o.text for o in drivers.run_cli(["dumpheap -stat", "dumpheap -stat --json"], core=path))
    rows = {int(m.group(1), 16): m.group(2) for ln in text.splitlines() if (m := STAT_ROW.match(ln))}
    assert len(rows) > 100 and rows.keys() == clrmd.keys(), set(rows) ^ set(clrmd)
    differ = {f"{mt:x}": (rows[mt], clrmd[mt]) for mt in rows if rows[mt] != clrmd[mt]}
    assert not differ, differ
    # the JSON keeps the runtime's name and adds ClrMD's
    types = json.loads(as_json)["types"]
    assert {int(t["mt"], 16): t["csharp_name"] for t in types} == clrmd
    assert any("`" in t["name"] and t["name"] != t["csharp_name"] for t in types)


def test_the_debuggees_own_names_of_generic_shapes(core: tuple[Path, dict]) -> None:
    path, truth = core
    text = drivers.run_cli(["dumpheap -stat"], core=path)[0].text
    rows = {int(m.group(1), 16): m.group(2) for ln in text.splitlines() if (m := STAT_ROW.match(ln))}
    want = [*truth["shapes"], *(truth[k] for k in ("arrays", "ints", "strings", "structKeys", "structValues"))]
    assert {int(w["mt"], 16): rows.get(int(w["mt"], 16)) for w in want} == {int(w["mt"], 16): w["name"] for w in want}


def test_csharp_name_parses_as_clrmds_parser(oracle: Path, core: tuple[Path, dict]) -> None:
    path, _truth = core
    runtime_names = [t["name"] for t in json.loads(drivers.run_cli(["dumpheap -stat --json"], core=path)[0].text)["types"]]
    names = [n for n in SYNTHETIC + runtime_names if "\n" not in n]
    answers = ask(oracle, "parse", stdin="".join(n + "\n" for n in names)).split("\n")[:-1]
    assert len(answers) == len(names)
    differ = [(n, csharp_name(n), a) for n, a in zip(names, answers) if csharp_name(n) != a]
    assert not differ, differ


# the statistics rows of dumpgen, objsize, finalizequeue and dumpheap -retained: MT, counts, name
TABLE_ROW = re.compile(r"^\s*([0-9a-f]{8,16}) +[\d,]+ +[\d,]+ +(?:[\d,]+ +)?(\S.*?)\s*$")


def test_managed_commands_tables_name_types_as_clrmd_does(oracle: Path, core: tuple[Path, dict]) -> None:
    path, truth = core
    clrmd = {int(mt, 16): name for mt, name in
             (ln.split("\t", 1) for ln in ask(oracle, "heap", str(path)).splitlines())}
    dictionary = truth["structKeys"]["address"]
    cmds = [*(f"dumpgen {g}" for g in ("gen0", "gen1", "gen2", "loh", "poh")), f"objsize {dictionary}",
            "dumpheap -stat -retained", "finalizequeue -allReady"]
    outs = dict(zip(cmds, (o.text for o in drivers.run_cli(cmds, core=path))))
    checked = 0
    for cmd, text in outs.items():
        rows = [(int(m.group(1), 16), m.group(2)) for ln in text.splitlines() if (m := TABLE_ROW.match(ln))]
        rows = [(mt, name) for mt, name in rows if mt in clrmd]
        differ = [(f"{mt:x}", name, clrmd[mt]) for mt, name in rows if name != clrmd[mt]]
        assert not differ, (cmd, differ)
        checked += len(rows)
    assert checked > 150, outs
    # gcroot's chain ends at the dictionary, named as the debuggee names it
    chain = drivers.run_cli([f"gcroot {dictionary}"], core=path)[0].text
    last = re.search(rf"-> +0*{int(dictionary, 16):x} +(\S.*?)(?: \(static variable: .*\))?\s*$", chain, re.M)
    assert last and last.group(1) == truth["structKeys"]["name"], chain
