"""Source files and lines in stacks: clrstack, pe -lines, ip2md, setsymbolserver / --symbols.

The `source` debuggee blocks a thread three calls deep and catches an exception thrown two
calls deep; every call shares its source line with a [CallerLineNumber] capture, so the truth
holds the exact line of each frame and [CallerFilePath] the document path the PDB records.
The debuggee runs from a private copy of the build, so the tests can take its PDB away, put it
in a symbol directory, or replace it with one of another build. A second build embeds the PDB
in the assembly (DebugType=embedded).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import drivers
from harness import Debuggee, build_debuggee
from harness.debuggee import dotnet_path

pytestmark = pytest.mark.slow

HOSTS = ["lldb-live", "lldb-core", "cli-core"]
if drivers.GDB:
    HOSTS += ["gdb-live", "gdb-core"]

STACK_ROW = re.compile(r"^([0-9A-F]{16}) ([0-9A-Fa-f]{16}| {16}) (.*)$")
PDB = "SosextDebuggee.pdb"
DLL = "SosextDebuggee.dll"


def batch(truth: dict, host: str, ip: int) -> list[tuple[str, str]]:
    src = truth["source"]
    exc = truth["sourceException"]
    return [
        ("select", drivers.select_thread(host, src["osTid"])),
        ("clrstack", "clrstack"),
        ("clrstack /d", "clrstack /d"),
        ("clrstack -n", "clrstack -n"),
        ("dso", "dso"),
        ("pe -lines", f"pe -lines {exc['address']}"),
        ("pe", f"pe {exc['address']}"),
        ("ip2md", f"ip2md {ip:x}"),
        ("ip2md bad", "ip2md 0x10"),
        ("gcroot", f"gcroot {src['held']}"),
        ("managedexception", "clrthreads -managedexception"),
        ("pe current", "pe -lines"),
        ("sosstatus", "sosstatus"),
    ]


def run(host: str, truth: dict, ip: int, **kw) -> dict[str, drivers.Output]:  # type: ignore[no-untyped-def]
    pairs = batch(truth, host, ip)
    cmds = [c for _k, c in pairs]
    outs = drivers.run_in_host(host, cmds, **kw)
    return {k: o for (k, _c), o in zip(pairs, outs)}


def rows(text: str) -> list[str]:
    return [m.group(3) for m in map(STACK_ROW.match, text.splitlines()) if m]


def row_ips(text: str) -> dict[str, int]:
    """Call site -> IP of the stack's rows."""
    return {m.group(3): int(m.group(2), 16) for m in map(STACK_ROW.match, text.splitlines()) if m and m.group(2).strip()}


def frame_row(sites: list[str], method: str) -> str:
    found = [s for s in sites if s.startswith(method + "(")]
    assert len(found) == 1, f"{method}: {found}\n" + "\n".join(sites)
    return found[0]


def copy_app(src_dll: Path, dest: Path) -> Path:
    shutil.copytree(src_dll.parent, dest)
    return dest / DLL


@dataclass
class Case:
    truth: dict
    app: Path  # the private copy's directory
    core: Path
    outputs: dict[str, dict[str, drivers.Output]] = field(default_factory=dict)

    def out(self, host: str, key: str) -> drivers.Output:
        return self.outputs[host][key]


@pytest.fixture(scope="module")
def case(request, tmp_path_factory) -> Case:
    drivers.require_dotnet_and_lldb()
    tfm = request.config.getoption("--tfm")
    work = tmp_path_factory.mktemp("source")
    dll = copy_app(build_debuggee(tfm), work / "app")
    with Debuggee("source", tfm=tfm, dll=dll, core_dir=work) as d:
        core = d.write_core("heap", work / "source.core")
        c = Case(d.truth, dll.parent, core)
        # The CLI first: its clrstack gives the IP ip2md is asked about in every host.
        pre = drivers.run_cli([f"setthread -t {d.truth['source']['osTid']}", "clrstack"], core=core)[1].text
        inner = frame_row(rows(pre), d.truth["source"]["frames"][0]["method"])
        ip = next(v for k, v in row_ips(pre).items() if k == inner) - 1  # the call itself
        c.truth["ip2md_ip"] = ip
        c.outputs["lldb-live"] = run("lldb-live", d.truth, ip, pid=d.pid)
        if "gdb-live" in HOSTS:
            c.outputs["gdb-live"] = run("gdb-live", d.truth, ip, pid=d.pid)
        exe = str(d.executable)
    c.outputs["cli-core"] = run("cli-core", c.truth, ip, core=core)
    c.outputs["lldb-core"] = run("lldb-core", c.truth, ip, core=core, exe=exe)
    if "gdb-core" in HOSTS:
        c.outputs["gdb-core"] = run("gdb-core", c.truth, ip, core=core, exe=exe)
    return c


@pytest.fixture(params=HOSTS)
def host(request) -> str:
    return request.param


# -- clrstack ----------------------------------------------------------------------------------


def test_clrstack_frames_end_with_the_debuggees_file_and_line(case: Case, host: str) -> None:
    src = case.truth["source"]
    sites = rows(case.out(host, "clrstack").text)
    for f in src["frames"]:
        row = frame_row(sites, f["method"])
        assert row.endswith(f" [{src['file']} @ {f['line']}]"), row
    # Frames of CoreLib have no PDB here: no brackets, and no note (SOS prints none); sosstatus
    # names the module.
    assert not any(" @ " in s for s in sites if s.startswith("System.Threading.ManualResetEventSlim"))
    assert not any(ln.startswith("No source lines for ") for ln in case.out(host, "clrstack").lines)
    notes = [ln for ln in case.out(host, "sosstatus").lines if ln.startswith("No source lines for ")]
    assert len(notes) == 1 and "System.Private.CoreLib.dll" in notes[0] and DLL not in notes[0], notes


def test_clrstack_slash_d_is_accepted_and_n_drops_the_lines(case: Case, host: str) -> None:
    assert not case.out(host, "clrstack /d").errors
    assert rows(case.out(host, "clrstack /d").text) == rows(case.out(host, "clrstack").text)
    plain = rows(case.out(host, "clrstack -n").text)
    assert plain and not any(" @ " in s for s in plain), plain
    assert "No source lines for" not in case.out(host, "clrstack /d").text


def test_dso_numbers_the_thread_as_clrstack_does(case: Case, host: str) -> None:
    first = case.out(host, "clrstack").lines[0]
    m = re.fullmatch(r"OS Thread Id: 0x([0-9a-f]+) \((\d+)\)", first)
    assert m and int(m.group(1), 16) == case.truth["source"]["osTid"], first
    assert case.out(host, "dso").lines[0] == first


# -- pe -lines --------------------------------------------------------------------------------


def test_pe_lines_shows_each_frames_file_and_line(case: Case, host: str) -> None:
    exc = case.truth["sourceException"]
    file = case.truth["source"]["file"]
    text = case.out(host, "pe -lines").text
    frames = [ln for ln in text.splitlines() if re.match(r"^    [0-9A-F]{16} [0-9A-F]{16} ", ln)]
    assert len(frames) == len(exc["frames"]), text
    for ln, f in zip(frames, exc["frames"]):
        assert f"!{f['method']}()+0x" in ln, (ln, f)
        assert ln.endswith(f" [{file} @ {f['line']}]"), (ln, f)
    plain = case.out(host, "pe").text
    assert " @ " not in plain and plain.count("SourceThrow") == len(exc["frames"])


# -- ip2md -------------------------------------------------------------------------------------


def test_ip2md_names_the_method_and_its_line(case: Case, host: str) -> None:
    src = case.truth["source"]
    inner = src["frames"][0]
    out = case.out(host, "ip2md")
    assert not out.errors, out.text
    lines = out.lines
    assert re.fullmatch(r"MethodDesc:   [0-9a-f]{16}", lines[0]), lines
    assert re.match(rf"^Method Name: +{re.escape(inner['method'])}\(Int32\)$", lines[1]), lines
    assert "IsJitted:             yes" in lines
    assert lines[-1] == f"Source file:  {src['file']} @ {inner['line']}", lines
    bad = case.out(host, "ip2md bad").errors
    assert len(bad) == 1 and "not in JIT code range" in bad[0], bad


# -- gcroot ------------------------------------------------------------------------------------


def test_gcroot_stack_frames_show_their_line(case: Case, host: str) -> None:
    src = case.truth["source"]
    inner = src["frames"][0]
    text = case.out(host, "gcroot").text
    assert f"Thread {src['osTid']:x}:" in text.splitlines(), text
    want = re.compile(rf"^    [0-9a-f]+ [0-9a-f]+ {re.escape(inner['method'])}\(Int32\) "
                      rf"\[{re.escape(src['file'])} @ {inner['line']}\]$")
    assert any(want.match(ln) for ln in text.splitlines()), text
    assert "Found 1 unique roots." in text, text


# -- clrthreads -managedexception -------------------------------------------------------------


def test_managedexception_selects_the_thread_of_the_exception(case: Case, host: str) -> None:
    exc = case.truth["sourceException"]
    out = case.out(host, "managedexception")
    assert not out.errors, out.text
    # SOS's line (strike.cpp's Threads -managedexception), the thread's OS id in hex.
    assert out.lines == [f"Found managed exception on thread {exc['osTid']:x}"], out.lines
    # pe without an address now shows that thread's exception, with lines.
    cur = case.out(host, "pe current").text
    assert f"Exception object: {int(exc['address'], 16):016x}" in cur, cur
    assert f" [{case.truth['source']['file']} @ {exc['frames'][0]['line']}]" in cur, cur


# -- where PDBs come from (CLI on the core) ------------------------------------------------------


def _inner_row(text: str, truth: dict) -> str:
    return frame_row(rows(text), truth["source"]["frames"][0]["method"])


def _analyze(core: Path, *args: str, commands: list[str]) -> list[str]:
    argv = [drivers.PYTHON, "-m", "sosext", "analyze", str(core), *args, "--separator", drivers.MARK]
    for c in commands:
        argv += ["-c", c]
    proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=600, cwd=drivers.REPO)
    return proc.stdout.split(drivers.MARK + "\n")


def test_pdb_from_a_symbol_directory_and_never_from_another_build(case: Case, tmp_path: Path) -> None:
    truth = case.truth
    src = truth["source"]
    inner = src["frames"][0]
    want = f" [{src['file']} @ {inner['line']}]"
    select = f"setthread -t {src['osTid']}"
    beside = case.app / PDB
    symbols = tmp_path / "symbols"
    symbols.mkdir()
    shutil.move(beside, symbols / PDB)
    try:
        # No PDB anywhere: no lines, and the module is named once.
        outs = _analyze(case.core, commands=[select, "clrstack", "setsymbolserver", "sosstatus"])
        assert not _inner_row(outs[1], truth).endswith(want), outs[1]
        assert any(ln.startswith("No source lines for ") and DLL in ln for ln in outs[3].splitlines()), outs[3]
        assert "No symbol directories" in outs[2]
        # --symbols DIR
        outs = _analyze(case.core, "--symbols", str(symbols), commands=[select, "clrstack"])
        assert _inner_row(outs[1], truth).endswith(want), outs[1]
        # setsymbolserver -directory DIR, listed afterwards; servers are refused.
        outs = _analyze(case.core, commands=[select, f"setsymbolserver -directory {symbols}", "clrstack",
                                             "setsymbolserver", "setsymbolserver -ms",
                                             "setsymbolserver https://msdl.microsoft.com/download/symbols",
                                             f"setsymbolserver -directory {tmp_path / 'nope'}"])
        assert outs[1].strip() == f"Added symbol directory path: {symbols}"
        assert _inner_row(outs[2], truth).endswith(want), outs[2]
        assert outs[3].strip() == f"Symbol directory: {symbols}"
        for o in outs[4:7]:
            errs = [ln for ln in o.splitlines() if ln.startswith("error:")]
            assert len(errs) == 1 and len(o.strip().splitlines()) == 1, o
        # The symbol-server layout: name.pdb/<GUID><stamp>FFFF/name.pdb
        from sosext.formats.metadata.pdb import PortablePdb
        pid = PortablePdb((symbols / PDB).read_bytes()).id
        store = tmp_path / "store" / PDB.lower() / f"{pid.guid.hex.upper()}{pid.stamp:08X}FFFF"
        store.mkdir(parents=True)
        shutil.copy(symbols / PDB, store / PDB.lower())
        outs = _analyze(case.core, "--symbols", str(tmp_path / "store"), commands=[select, "clrstack"])
        assert _inner_row(outs[1], truth).endswith(want), outs[1]
        # A PDB of another build beside the assembly (same bytes, another id) is not used.
        other = bytearray((symbols / PDB).read_bytes())
        pos = other.find(pid.guid.bytes_le)
        assert pos > 0
        other[pos] ^= 0xFF
        beside.write_bytes(bytes(other))
        outs = _analyze(case.core, commands=[select, "clrstack"])
        assert " @ " not in _inner_row(outs[1], truth), outs[1]
    finally:
        beside.unlink(missing_ok=True)
        shutil.move(symbols / PDB, beside)


# -- an embedded PDB ------------------------------------------------------------------------------


def _build_embedded(tfm: str, dest: Path) -> Path:
    """The debuggee built with DebugType=embedded: the PDB lives inside the dll, none beside it."""
    src = build_debuggee(tfm).parents[1] / "src"
    work = dest / "src"
    shutil.copytree(src, work, ignore=shutil.ignore_patterns("obj", "bin"))
    project = str(work / "SosextDebuggee.csproj")
    common = [f"-p:TargetFramework={tfm}", "-p:DebugType=embedded", "--disable-build-servers",
              "-nodeReuse:false", "-nologo"]
    env = {**os.environ, "DOTNET_CLI_TELEMETRY_OPTOUT": "1", "DOTNET_NOLOGO": "1", "MSBUILDDISABLENODEREUSE": "1"}
    dotnet = dotnet_path()
    for cmd in ([dotnet, "restore", project, *common],
                [dotnet, "build", project, "--no-restore", "-c", "Release", "-o", str(dest / "out"), *common]):
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=600, env=env)
        if proc.returncode != 0:
            pytest.skip(f"the embedded-PDB build failed (exit {proc.returncode}): {proc.stdout[-400:]}")
    return dest / "out" / DLL


def test_an_embedded_pdb_gives_lines(request, tmp_path: Path) -> None:
    drivers.require_dotnet_and_lldb()
    tfm = request.config.getoption("--tfm")
    dll = _build_embedded(tfm, tmp_path)
    assert not (dll.parent / PDB).exists()
    with Debuggee("source", tfm=tfm, dll=dll, core_dir=tmp_path) as d:
        core = d.write_core("heap", tmp_path / "embedded.core")
        truth = d.truth
    src = truth["source"]
    exc = truth["sourceException"]
    outs = drivers.run_cli([f"setthread -t {src['osTid']}", "clrstack", f"pe -lines {exc['address']}"], core=core)
    sites = rows(outs[1].text)
    for f in src["frames"]:
        assert frame_row(sites, f["method"]).endswith(f" [{src['file']} @ {f['line']}]"), sites
    assert f" [{src['file']} @ {exc['frames'][0]['line']}]" in outs[2].text, outs[2].text
    core.unlink(missing_ok=True)
