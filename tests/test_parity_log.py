"""The stress log against the `stresslog` debuggee: dumplog and the hist* commands.

The debuggee runs with DOTNET_StressLog=1, forces a gen0, a gen1 and a gen2 GC and then a
compacting GC that moves an object held by an address-exposed stack local; it prints each
forced GC's index and generation, the root slot, the object's addresses before and after and
its MethodTable. Every host (LLDB and GDB live and on a heap core, the CLI on the core) runs
one batch; the decoded log must hold exactly those GCs and that relocation.
"""
from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import drivers
from harness import Debuggee, build_debuggee
from test_parity import HOSTS, h
from test_stack_values import crash_dump

pytestmark = pytest.mark.slow

# What the runtime logs: GC and root messages (LF_GC | LF_GCALLOC | LF_GCROOTS) at
# LL_INFO1000, in 1 MiB per thread so that nothing the truth names is overwritten.
STRESS_ENV = {"DOTNET_StressLog": "1", "DOTNET_LogFacility": "0x80101", "DOTNET_LogLevel": "6",
              "DOTNET_StressLogSize": "0x100000"}
ITEM = "DebuggeeHost.StressLogItem"


def commands_for(t: dict, files: Path) -> list[str]:
    s = t["stressLog"]
    moved = s["moved"]
    return [
        f"dumplog -f {files / 'log.txt'}", f"dumplog {files / 'log.txt'}", f"dumplog -f {files / 'link.txt'}", f"dumplog --force -f {files / 'link.txt'}",
        f"dumplog -addr 10 -f {files / 'addr.txt'}", f"dumplog -f {files / 'a.txt'} {files / 'b.txt'}",
        "histobj 1234", "histobj -notes 1234", "histinit", "histstats", "histstats --json",
        f"histobj {moved['after']}", f"histobj {moved['after']} --json",
        f"histobjfind {moved['after']}", f"histobjfind {moved['before']}", f"histroot {moved['root']}",
        f"histroot {moved['root']} --json", "histobj zz", "histroot", "histclear", f"HistRoot {moved['root']}",
        f"HistRoot -notes {moved['root']}",
        "crashinfo", "bpmd -list", "stoponcatch",
    ]


@dataclass
class Case:
    truth: dict
    files: dict[str, Path] = field(default_factory=dict)
    outputs: dict[str, dict[str, drivers.Output]] = field(default_factory=dict)

    def out(self, host: str, command: str) -> drivers.Output:
        return self.outputs[host][command]


def _files(root: Path, host: str) -> Path:
    d = root / host
    d.mkdir()
    os.symlink(d / "elsewhere.txt", d / "link.txt")  # dangling: dumplog must not create through it
    return d


@pytest.fixture(scope="module", params=[("wks", "regions"), ("svr", "segments")], ids=lambda p: "-".join(p))
def case(request, tmp_path_factory) -> Case:
    drivers.require_dotnet_and_lldb()
    tfm = request.config.getoption("--tfm")
    gc, flavor = request.param
    work = tmp_path_factory.mktemp(f"stresslog-{gc}-{flavor}")
    with Debuggee("stresslog", env=STRESS_ENV, gc=gc, gc_flavor=flavor, tfm=tfm, dll=build_debuggee(tfm),
                  core_dir=work) as d:
        c = Case(d.truth)
        core = d.write_core("heap", work / "stresslog.core")
        exe = str(d.executable)
        for host in HOSTS:
            c.files[host] = _files(work, host)
        for host in [x for x in HOSTS if x.endswith("-live")]:
            cmds = commands_for(c.truth, c.files[host])
            c.outputs[host] = dict(zip(cmds, drivers.run_in_host(host, cmds, pid=d.pid)))
    for host in [x for x in HOSTS if not x.endswith("-live")]:
        cmds = commands_for(c.truth, c.files[host])
        kw = {"core": core} if host.startswith("cli") else {"core": core, "exe": exe}
        c.outputs[host] = dict(zip(cmds, drivers.run_in_host(host, cmds, **kw)))
    Path(core).unlink(missing_ok=True)
    return c


@pytest.fixture(params=HOSTS)
def host(request) -> str:
    return request.param


def p16(text: str) -> str:
    return f"{h(text):016x}"


# -- dumplog ----------------------------------------------------------------------------------

ROW = re.compile(r"^([0-9a-f]+) +(\d+\.\d{9}) (`\S+`) +(.*)$")


def log_file(case: Case, host: str) -> list[str]:
    out = case.out(host, f"dumplog -f {case.files[host] / 'log.txt'}")
    assert out.lines == [f"Attempting to dump Stress log to file '{case.files[host] / 'log.txt'}'",
                         "SUCCESS: Stress log dumped"], out.text
    return (case.files[host] / "log.txt").read_text().splitlines()


def test_dumplog_writes_a_private_file(case: Case, host: str) -> None:
    path = case.files[host] / "log.txt"
    log_file(case, host)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert case.out(host, f"dumplog {path}").errors == [f"error: {path} exists; choose another name or add --force"]
    link = case.files[host] / "link.txt"
    assert case.out(host, f"dumplog -f {link}").errors == [f"error: {link} exists; choose another name or add --force"]
    # --force replaces the link itself, never the file it names.
    assert case.out(host, f"dumplog --force -f {link}").lines[-1] == "SUCCESS: Stress log dumped"
    assert not link.is_symlink() and link.read_text().startswith("STRESS LOG:")
    assert stat.S_IMODE(link.stat().st_mode) == 0o600
    assert not (case.files[host] / "elsewhere.txt").exists()


def test_dumplog_usage_errors(case: Case, host: str) -> None:
    f = case.files[host]
    assert case.out(host, f"dumplog -addr 10 -f {f / 'addr.txt'}").errors == [
        "error: the stress log at 0x10 is not readable"]
    assert case.out(host, f"dumplog -f {f / 'a.txt'} {f / 'b.txt'}").errors == [
        "error: give the file once: dumplog -f <file> or dumplog <file>"]
    assert not any((f / n).exists() for n in ("addr.txt", "a.txt", "b.txt"))


def test_dumplog_header_and_rows(case: Case, host: str) -> None:
    lines = log_file(case, host)
    assert lines[0] == "STRESS LOG:"
    assert "    levelToLog       = 6" in lines
    assert "    MaxLogSizePerThread = 0x100000 (1048576)" in lines
    title = lines.index("") + 1
    assert lines[title].split() == ["THREAD", "TIMESTAMP", "FACILITY", "MESSAGE"]
    rows = lines[title + 1:-1]
    assert lines[-1] == f"---------------------------- {len(rows)} total entries ------------------------------------"
    stamps = [float(ROW.match(r).group(2)) for r in rows]  # type: ignore[union-attr]
    assert stamps == sorted(stamps, reverse=True), "newest first"


def test_dumplog_holds_the_forced_gcs(case: Case, host: str) -> None:
    text = "\n".join(log_file(case, host))
    for gc in case.truth["stressLog"]["forced"]:
        i, g = gc["index"], gc["generation"]
        assert len(re.findall(rf"BEGINGC {i}, \(requested generation = {g}, ", text)) == 1, gc
        assert len(re.findall(rf"ENDGC {i} \(gen = {g}, ", text)) == 1, gc


def test_dumplog_names_the_moved_object(case: Case, host: str) -> None:
    m = case.truth["stressLog"]["moved"]
    want = (f"GC Root {p16(m['root'])} RELOCATED {p16(m['before'])} -> {p16(m['after'])}  "
            f"MT = {p16(m['mt'])} ({ITEM})")
    rows = [ln for ln in log_file(case, host) if ln.endswith(want)]
    # Server GC may report the slot twice (seen in a CI run: two rows, in every host, live and
    # core alike, so in the log itself); a record decoded twice would be the same line twice.
    assert rows, want
    assert len(set(rows)) == len(rows), rows
    for row in rows:
        match = ROW.match(row)
        assert match and match.group(3) == "`GC`GCROOTS`"


# -- hist* ------------------------------------------------------------------------------------

def test_hist_needs_histinit(case: Case, host: str) -> None:
    """Before histinit (and after histclear) SOS 10's native hist* print their header and no row;
    -notes prints the line SOS's later, managed versions print instead."""
    root = case.truth['stressLog']['moved']['root']
    assert case.out(host, "histobj 1234").lines == [HISTOBJ_HEADER, "-" * 57]
    assert case.out(host, f"HistRoot {root}").lines == [HISTROOT_HEADER, "-" * 57]
    for cmd in ("histobj -notes 1234", f"HistRoot -notes {root}"):
        assert case.out(host, cmd).lines == ["Run !histinit to initialize the GC history from the stress log."]
    assert case.out(host, "histclear").lines == ["Completed successfully."]
    assert case.out(host, "histinit").lines[-1] == "SUCCESS: GCHist structures initialized"


# SOS's headers: "%8s %16s %40s" and "%8s %16s %16s %9s %20s".
HISTOBJ_HEADER = f"{'GCCount':>8} {'Object':>16} {'Roots':>40}"
HISTROOT_HEADER = f"{'GCCount':>8} {'Value':>16} {'MT':>16} {'Promoted?':>9} {'Notes':>20}"


def stats_rows(case: Case, host: str) -> list[tuple[int, int, int]]:
    lines = case.out(host, "histstats").lines
    assert lines[:2] == [" GCCount Promotes   Relocs", "-----------------------------------"]
    return [tuple(int(x) for x in ln.split()) for ln in lines[2:] if re.match(r"^ +\d+ +\d+ +\d+$", ln)]  # type: ignore


def test_histstats_lists_every_gc_newest_first(case: Case, host: str) -> None:
    s = case.truth["stressLog"]
    rows = stats_rows(case, host)
    counts = [r[0] for r in rows]
    assert counts[0] == s["gcCount"]
    assert counts == list(range(s["gcCount"], s["gcCount"] - len(counts), -1))
    assert {g["index"] for g in s["forced"]} <= set(counts)
    relocs = {r[0]: r[2] for r in rows}
    assert relocs[s["moved"]["gcIndex"]] >= 1
    doc = json.loads(case.out(host, "histstats --json").text)
    assert [(g["gc_count"], g["promotes"], g["relocs"]) for g in doc["gcs"]] == rows


def test_histobj_follows_the_object_back(case: Case, host: str) -> None:
    m = case.truth["stressLog"]["moved"]
    lines = case.out(host, f"histobj {m['after']}").lines
    assert lines[:2] == [HISTOBJ_HEADER, "-" * 57]
    rows = {int(ln.split()[0]): ln.split(None, 2)[1:] for ln in lines[2:]}
    assert rows[m["gcIndex"]][0] == p16(m["after"])
    assert p16(m["root"]) + "," in rows[m["gcIndex"]][1]
    assert rows[m["gcIndex"] - 1][0] == p16(m["before"])
    doc = json.loads(case.out(host, f"histobj {m['after']} --json").text)
    by_gc = {r["gc_count"]: r for r in doc["relocations"]}
    assert h(by_gc[m["gcIndex"]]["object"]) == h(m["after"])
    assert m["root"] in by_gc[m["gcIndex"]]["roots"]


def test_histobjfind_and_histroot(case: Case, host: str) -> None:
    m = case.truth["stressLog"]["moved"]
    i = m["gcIndex"]
    found = case.out(host, f"histobjfind {m['after']}").lines
    assert found[:2] == [f"{'GCCount':>8} {'Object':>16} {'Message':>40}", "-" * 57]
    assert f"{i:>8} {p16(m['after'])} Relocation NEWVALUE for root {p16(m['root'])}" in found
    before = case.out(host, f"histobjfind {m['before']}").lines
    assert f"{i:>8} {p16(m['before'])} Relocation PREVVALUE for root {p16(m['root'])}" in before
    roots = case.out(host, f"histroot {m['root']}").lines
    assert roots[0] == HISTROOT_HEADER
    row = next(ln for ln in roots if ln.startswith(f"{i:>8} "))
    assert row.split()[:4] == [str(i), p16(m["after"]), p16(m["mt"]), "yes"]
    doc = json.loads(case.out(host, f"histroot {m['root']} --json").text)
    r = next(x for x in doc["relocations"] if x["gc_count"] == i)
    assert (h(r["value"]), h(r["method_table"]), r["promoted"]) == (h(m["after"]), h(m["mt"]), True)


def test_hist_usage_errors(case: Case, host: str) -> None:
    assert case.out(host, "histobj zz").errors == ["error: Usage: histobj <object address>"]
    assert case.out(host, "histroot").errors == ["error: Usage: histroot <root>"]


# -- no stress log ------------------------------------------------------------------------------

def test_without_a_stress_log(tmp_path: Path, request) -> None:  # type: ignore[no-untyped-def]
    drivers.require_dotnet_and_lldb()
    tfm = request.config.getoption("--tfm")
    cmds = [f"dumplog -f {tmp_path / 'none.txt'}", "histinit", "histstats"]
    with Debuggee("stresslog", tfm=tfm, dll=build_debuggee(tfm), core_dir=tmp_path) as d:
        core = d.write_core("heap", tmp_path / "plain.core")
        outs = {"lldb-live": drivers.run_in_host("lldb-live", cmds, pid=d.pid)}
    outs["cli-core"] = drivers.run_cli(cmds, core=core)
    no_log = "----- No thread logs in the image: The stress log was probably not initialized correctly. -----"
    for host, (dump, init, stats) in outs.items():
        assert dump.lines == [f"Attempting to dump Stress log to file '{tmp_path / 'none.txt'}'", no_log,
                              "No Stress log in the image, no file written"], host  # as dotnet-dump
        assert init.lines == ["Attempting to read Stress log", no_log,
                              "No Stress log in the image, GCHist commands unavailable"], host
        # Without a history SOS's histstats shows an empty one (dotnet-dump on such a core).
        assert stats.lines == [" GCCount Promotes   Relocs", "-----------------------------------",
                               "No duplicate promote or relocate messages found in the log."], host
    assert not (tmp_path / "none.txt").exists()


# -- bpmd and stoponcatch where they cannot work (live bpmd: test_bpmd.py) ------------------------

def test_bpmd_on_a_core_and_stoponcatch(case: Case, host: str) -> None:
    if host.endswith("-live"):
        assert case.out(host, "bpmd -list").lines == [
            "!bpmd breakpoint list", " Breakpoint index - Location, MethodDesc, Method Token, Code"]
    else:
        assert case.out(host, "bpmd -list").errors == ["error: bpmd needs a live process in LLDB or GDB"]
    assert case.out(host, "stoponcatch").errors == [
        "error: stoponcatch needs the runtime's debugger notifications (exception catch events), which sosext "
        "does not turn on (it never writes the target); use bpmd on the catching method"]


# -- crashinfo ----------------------------------------------------------------------------------

def test_crashinfo_without_a_crash(case: Case, host: str) -> None:
    out = case.out(host, "crashinfo")
    assert not out.errors and out.text.strip() == "No crash info to display"


def test_crashinfo_on_the_runtimes_crash_dump(request, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    drivers.require_dotnet_and_lldb()
    truth, exe, tid, core = crash_dump(request, tmp_path, "stackvalues", "crash")
    crash = truth["crash"]
    hosts = {"cli-core": {"core": core}, "lldb-core": {"core": core, "exe": exe}}
    if drivers.GDB:
        hosts["gdb-core"] = {"core": core, "exe": exe}
    for host, kw in hosts.items():
        text, as_json = (o.text for o in drivers.run_in_host(host, ["crashinfo", "crashinfo --json"], **kw))
        lines = text.splitlines()
        assert lines[:7] == [
            "CrashReason:        UnhandledException", f"ThreadId:           {tid:04X}",
            f"HResult:            {truth['thrower']['hresult']:08X}", "RuntimeType:        NetCore", lines[4],
            lines[5], f"Message:            {crash['message']}"], (host, text)
        assert lines[4].startswith("RuntimeBaseAddress: ") and lines[5].startswith("RuntimeVersion:     ")
        for title in ("** Current Exception **", f"** Thread {tid} Exception **", "** Nested Exceptions **"):
            assert title in lines, (host, title)
        assert lines.count(f"Exception type:     {truth['thrower']['type']}") == 3, host
        trace = [ln for ln in lines if re.match(r"^    [0-9A-F]{16} SosextDebuggee!", ln)]
        for m in crash["frames"]:
            assert sum(f"!{m}() + 0x" in ln for ln in trace) == 3, (host, m)
        doc = json.loads(as_json)
        assert (doc["crash_reason"], doc["thread_id"], doc["message"]) == ("UnhandledException", tid, crash["message"])
        assert [f["method"] for f in doc["exception"]["stack"]][:len(crash["frames"])] == [
            f"{m}()" for m in crash["frames"]]
    core.unlink(missing_ok=True)
