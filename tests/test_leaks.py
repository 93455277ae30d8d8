"""Acceptance of the leak-hunting workflow on the bundled leaking service: two dumps taken with
`sosext collect`, `sosext diff` ranks the leak with the exact count delta the service reports,
and `sosext leaks` names the retention chain with the exact count; the same inside LLDB and GDB
(heapdiff/leaks against a baseline core), and as JSON.
"""
from __future__ import annotations

import html
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

import drivers
from harness.debuggee import dotnet_path, work_dir
from test_typenames import ask, oracle  # noqa: F401 - ClrMD's names, the second opinion (a fixture)

pytestmark = pytest.mark.slow

APP = drivers.REPO / "examples" / "LeakyService"


def build_leaky() -> Path:
    import hashlib
    h = hashlib.sha256()
    for f in sorted(APP.glob("*.cs*")):
        h.update(f.name.encode() + f.read_bytes())
    out = work_dir() / f"leaky-{h.hexdigest()[:16]}"
    dll = out / "LeakyService.dll"
    if not dll.exists():
        subprocess.run(["dotnet", "build", "-c", "Release", "-o", str(out), "--nologo", "-v", "q", str(APP)],
                       check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return dll


class Leaky:
    """The service, driven through its stdin; replies are `LEAKY {json}` lines."""

    def __init__(self, dll: Path) -> None:
        self.proc = subprocess.Popen(["dotnet", str(dll)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.started = self._reply()

    def _reply(self) -> dict:
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError("LeakyService exited")
            if line.startswith("LEAKY "):  # createdump, spawned by the runtime, shares stdout
                return json.loads(line[6:])

    def leak(self, n: int, what: str = "leak") -> dict:
        """``leak``: cache entries; ``customers``: the static customer list; ``wrappers``:
        wrappers behind strong GC handles."""
        self.proc.stdin.write(f"{what} {n}\n")
        self.proc.stdin.flush()
        return self._reply()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def collect(pid: int, path: Path) -> str:
    out = subprocess.run([drivers.PYTHON, "-m", "sosext", "collect", str(pid), "-o", str(path)], cwd=drivers.REPO,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=True).stdout
    assert path.exists() and path.stat().st_size > 0
    return out


@dataclass
class Case:
    old_core: Path
    new_core: Path
    before: dict
    after: dict
    outputs: dict


@pytest.fixture(scope="module")
def case(tmp_path_factory) -> Case:
    if dotnet_path() is None:
        pytest.skip("dotnet is not on PATH: this test needs the .NET SDK to build the bundled service")
    tmp = tmp_path_factory.mktemp("leaks")
    app = Leaky(build_leaky())
    try:
        app.leak(10, "customers")
        app.leak(5, "wrappers")
        before = app.leak(100)
        collect(app.started["pid"], tmp / "old.core")
        app.leak(290, "customers")
        app.leak(55, "wrappers")
        after = app.leak(2000)
        collect(app.started["pid"], tmp / "new.core")
        outputs = {}
        if drivers.LLDB:
            outputs["lldb-live"] = drivers.run_lldb(
                [f"heapdiff {tmp / 'old.core'} -type LeakyService", f"leaks {tmp / 'old.core'} -type LeakyService.CacheEntry",
                 f"leaks {tmp / 'old.core'} -holders 1 --json"],
                pid=app.started["pid"])
    finally:
        app.stop()
    if drivers.GDB:
        outputs["gdb-core"] = drivers.run_gdb(
            [f"heapdiff {tmp / 'old.core'} -type LeakyService", f"leaks {tmp / 'old.core'} -type LeakyService.CacheEntry",
             f"leaks {tmp / 'old.core'} -holders 1 --json"],
            core=tmp / "new.core")
    return Case(tmp / "old.core", tmp / "new.core", before, after, outputs)


def sosext(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([drivers.PYTHON, "-m", "sosext", *args], cwd=drivers.REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)


def diff_rows(text: str, retained: bool = False) -> list[list[str]]:
    """The heapdiff table's rows: OldCount … BytesDelta, Class Name (and RetainedDelta before
    the name if ``retained``)."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if "CountDelta" in ln) + 1
    assert "RetainedDelta" in lines[start - 1]
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("Total"))
    rows = [ln.split(None, 7) for ln in lines[start:end]]
    return rows if retained else [r[:6] + r[7:] for r in rows]


def test_diff_ranks_the_leak_first_with_the_exact_delta(case: Case) -> None:
    res = sosext("diff", str(case.old_core), str(case.new_core), "-top", "6")
    assert res.returncode == 0, res.stderr
    rows = diff_rows(res.stdout)
    leaked = case.after["cacheEntries"] - case.before["cacheEntries"]
    # The payloads dominate the growth: 10,000 bytes per entry.
    assert rows[0][6] == "System.Byte[]"
    assert int(rows[0][2].replace(",", "")) >= leaked
    entry = next(r for r in rows if r[6] == "LeakyService.CacheEntry")
    assert int(entry[0].replace(",", "")) == case.before["cacheEntries"]
    assert int(entry[1].replace(",", "")) == case.after["cacheEntries"]
    assert int(entry[2].replace(",", "")) == leaked


def test_diff_filters_and_json(case: Case) -> None:
    res = sosext("diff", str(case.old_core), str(case.new_core), "-type", "LeakyService", "--json")
    doc = json.loads(res.stdout)
    by_name = {t["name"]: t for t in doc["types"]}
    assert set(by_name) >= {"LeakyService.CacheEntry", "LeakyService.CacheWarmupWorker"}
    assert all("LeakyService" in n for n in by_name)
    assert by_name["LeakyService.CacheEntry"]["count_delta"] == case.after["cacheEntries"] - case.before["cacheEntries"]
    assert by_name["LeakyService.CacheWarmupWorker"]["count_delta"] == 0
    res = sosext("diff", str(case.old_core), str(case.new_core), "-min-delta", "1000000", "--json")
    assert [t["name"] for t in json.loads(res.stdout)["types"]] == ["System.Byte[]"]


def test_leaks_names_the_chain_with_the_exact_count(case: Case) -> None:
    res = sosext("leaks", str(case.old_core), str(case.new_core), "-type", "LeakyService.CacheEntry", "--json")
    assert res.returncode == 0, res.stderr
    t = json.loads(res.stdout)["types"][0]
    assert t["name"] == "LeakyService.CacheEntry"
    assert t["count_delta"] == case.after["cacheEntries"] - case.before["cacheEntries"]
    top = t["groups"][0]
    assert top["count"] == case.after["cacheEntries"]
    # The service keeps its worker in `static CacheWarmupWorker s_worker` of class Program.
    assert top["root"] == "static LeakyService.Program.s_worker (strong handle)"
    worker, cache, dictionary, entries, entry = top["path"][-5:]
    assert (worker, cache, entry) == ("LeakyService.CacheWarmupWorker", "LeakyService.MemoryCache",
                                      "LeakyService.CacheEntry")
    # MemoryCache's Dictionary<string, CacheEntry>, named as dumpheap and C# name it
    assert dictionary == "System.Collections.Generic.Dictionary<System.String, LeakyService.CacheEntry>"
    assert entries == "System.Collections.Generic.Dictionary<System.String, LeakyService.CacheEntry>+Entry[]"


def test_leaks_text_report(case: Case) -> None:
    res = sosext("leaks", str(case.old_core), str(case.new_core), "-top", "1")
    text = res.stdout
    leaked = case.after["cacheEntries"] - case.before["cacheEntries"]
    assert f"System.Byte[]: {leaked:+,} objects" in text or "System.Byte[]: +" in text
    assert f"{case.after['cacheEntries']:,} objects" in text
    assert "-> LeakyService.CacheEntry" in text


@pytest.mark.parametrize("host", ["lldb-live", "gdb-core"])
def test_in_the_debuggers(case: Case, host: str) -> None:
    if host not in case.outputs:
        pytest.skip(f"{host.split('-')[0]} is not installed")
    diff, leaks, holders = case.outputs[host]
    rows = {r[6]: r for r in diff_rows(diff.text)}
    leaked = case.after["cacheEntries"] - case.before["cacheEntries"]
    assert int(rows["LeakyService.CacheEntry"][2].replace(",", "")) == leaked
    assert f"LeakyService.CacheEntry: {leaked:+,} objects" in leaks.text
    assert f"  {case.after['cacheEntries']:,} objects, " in leaks.text
    # the entries' holder, named with its exact retained size and growth
    grew = case.after["cacheRetained"] - case.before["cacheRetained"]
    assert f": retains {case.after['cacheRetained']:,} bytes ({grew:+,} since the baseline)" in leaks.text
    line = next(ln for ln in leaks.lines if ": retains " in ln)
    assert line.split()[0] == "LeakyService.MemoryCache"
    text = holders.text
    assert_cache_holder_first(case, json.loads(text[text.index("{"):text.rindex("}") + 1])["holders"])


def assert_cache_holder_first(case: Case, holders: list[dict]) -> None:
    """The MemoryCache holds the growth: ranked first, with the retained size and growth the
    service computed itself, dominated by the worker, held by the static that holds the worker."""
    top = holders[0]
    assert top["name"] == "LeakyService.MemoryCache"
    assert top["retained"] == case.after["cacheRetained"]
    assert top["retained_delta"] == case.after["cacheRetained"] - case.before["cacheRetained"]
    assert top["chain"][:2] == ["LeakyService.MemoryCache", "LeakyService.CacheWarmupWorker"]
    assert top["held_by"][0]["root"] == "static LeakyService.Program.s_worker (strong handle)"
    payloads = next(t for t in top["types"] if t["name"] == "System.Byte[]")
    assert payloads["count"] == case.after["cacheEntries"]


def test_leaks_and_diff_rank_the_cache_holder_first_by_retained_growth(case: Case) -> None:
    for command in ("leaks", "diff"):
        res = sosext(command, str(case.old_core), str(case.new_core), "--json")
        assert res.returncode == 0, res.stderr
        assert_cache_holder_first(case, json.loads(res.stdout)["holders"])
    res = sosext("diff", str(case.old_core), str(case.new_core), "-type", "LeakyService.MemoryCache")
    row = diff_rows(res.stdout, retained=True)[0]
    assert row[7] == "LeakyService.MemoryCache"
    assert int(row[6].replace(",", "")) == case.after["cacheRetained"] - case.before["cacheRetained"]
    text = sosext("leaks", str(case.old_core), str(case.new_core), "-holders", "1").stdout
    assert "Holders of the growth, by retained growth:" in text
    assert "      held by static LeakyService.Program.s_worker (strong handle)" in text


def test_the_other_two_leaks_are_named_by_their_holders(case: Case) -> None:
    """The static customer list and the wrappers behind leaked strong handles, each with the
    retained bytes the service computed itself."""
    res = sosext("leaks", str(case.old_core), str(case.new_core), "-holders", "6", "--json")
    holders = json.loads(res.stdout)["holders"]
    assert_cache_holder_first(case, holders)
    a, b = case.after, case.before
    customers = next(h for h in holders
                     if h["held_by"][0]["root"] == "static LeakyService.CustomerStore.s_customers (strong handle)")
    assert customers["name"] == "System.Collections.Generic.List<LeakyService.Customer>"
    assert customers["retained"] == a["customersRetained"]
    assert customers["retained_delta"] == a["customersRetained"] - b["customersRetained"]
    assert {t["name"]: t["count"] for t in customers["types"]}["LeakyService.Customer"] == a["customers"]
    wrappers = next(h for h in holders if h["name"] == "LeakyService.DacWrapper")
    assert wrappers["instances"] == a["wrappers"]
    assert wrappers["retained"] == a["wrappers"] * a["wrapperRetained"]
    assert [(r["kind"], r["root"]) for r in wrappers["held_by"]] == [("handle", "strong handle")]
    text = sosext("leaks", str(case.old_core), str(case.new_core), "-holders", "6").stdout
    assert f"  {a['wrappers']:,} x LeakyService.DacWrapper (e.g. " in text


def test_bad_baseline_gives_one_line(case: Case) -> None:
    res = sosext("diff", "/nonexistent.core", str(case.new_core))
    assert res.returncode == 1
    # analyze's words for the same path (tests/test_first_hour.py: a directory too)
    assert res.stderr.strip() == "error: cannot open core file /nonexistent.core: No such file or directory"
    res = sosext("diff", str(drivers.REPO / "README.md"), str(case.new_core))
    assert res.returncode == 1 and len(res.stderr.strip().splitlines()) == 1
    assert "not an ELF core file" in res.stderr


def test_collect_and_ps_cli(case: Case, tmp_path) -> None:
    res = sosext("collect", str(os.getpid()), "-o", str(tmp_path / "x.core"))
    assert res.returncode == 1 and res.stderr.startswith("error: process ") and len(res.stderr.splitlines()) == 1
    res = sosext("ps")
    assert res.returncode == 0


def test_collect_to_a_full_disk(tmp_path) -> None:
    """createdump runs out of space: one line, and the service lives on."""
    if dotnet_path() is None:
        pytest.skip("dotnet is not on PATH")
    full = tmp_path / "full"
    full.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)],
                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root): no full file system to write to")
    app = Leaky(build_leaky())
    try:
        res = sosext("collect", str(app.started["pid"]), "-o", str(full / "x.core"))
        assert res.returncode == 1
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and "0x80004005" in lines[0]
        assert app.leak(1)["cacheEntries"] == 1  # still alive and answering
    finally:
        app.stop()
        subprocess.run(["umount", str(full)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_with(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([drivers.PYTHON, "-m", "sosext", *args], cwd=drivers.REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env={**os.environ, **env})


def test_diff_top_is_never_padded(case: Case) -> None:
    doc = json.loads(sosext("diff", str(case.old_core), str(case.new_core), "--json").stdout)
    grew = [t["name"] for t in doc["types"] if t["size_delta"] > 0 or (t["size_delta"] == 0 and t["count_delta"] > 0)]
    res = sosext("diff", str(case.old_core), str(case.new_core), "-top", str(len(doc["types"])))
    rows = diff_rows(res.stdout)
    assert [r[6] for r in rows] == grew  # only types that grew, however large -top is
    assert all(r[5] != "+0" or r[2] != "+0" for r in rows)


def test_next_step_hints_only_when_asked_for_a_terminal(case: Case) -> None:
    old, new = str(case.old_core), str(case.new_core)
    piped = sosext("diff", old, new, "-top", "3").stdout
    assert "Next:" not in piped  # a pipe gets no hint
    shown = run_with({"SOSEXT_HINTS": "1"}, "diff", old, new, "-top", "3").stdout.splitlines()
    top = diff_rows("\n".join(shown[:-2]))[0][6]
    assert shown[-1].startswith(f"Next: dumpheap -type {top} -stat, then dumpheap -mt <MT>"), shown[-3:]
    as_json = run_with({"SOSEXT_HINTS": "1"}, "diff", old, new, "-top", "3", "--json").stdout
    assert json.loads(as_json)["types"][0]["name"] == top
    leaks = run_with({"SOSEXT_HINTS": "1"}, "leaks", old, new, "-top", "1").stdout.splitlines()
    first = next(m.group(1) for ln in leaks if (m := re.match(r"^(\S.*): \+[\d,]+ objects, ", ln)))
    assert leaks[-1].startswith(f"Next: dumpheap -type {first} -stat"), leaks[-3:]
    assert "Next:" not in sosext("leaks", old, new, "-top", "1").stdout


# -- one spelling of type names: C#'s, as dumpheap prints them and ClrMD names them ------------------

def _type_names(doc: object, keys: tuple[str, ...] = ("name", "type")) -> set[str]:
    """Every type name in a command's JSON: "name"/"type" values and the "path"/"chain" lists."""
    out: set[str] = set()
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k in keys and isinstance(v, str):
                out.add(v)
            elif k in ("path", "chain") and isinstance(v, list) and all(isinstance(x, str) for x in v):
                out.update(v)
            else:
                out |= _type_names(v, keys)
    elif isinstance(doc, list):
        for v in doc:
            out |= _type_names(v, keys)
    return out


def test_own_commands_name_types_as_clrmd_does(case: Case, oracle, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """diff, leaks, dominators, retained and report print C#'s names (no generic arity, no
    assembly): each one ClrMD 4.2 gives a type of those heaps."""
    clrmd = {name for core in (case.old_core, case.new_core)
             for ln in ask(oracle, "heap", str(core)).splitlines() for name in [ln.split("\t", 1)[1]]}
    old, new = str(case.old_core), str(case.new_core)
    texts = {"diff": sosext("diff", old, new, "--json"), "leaks": sosext("leaks", old, new, "-holders", "6", "--json"),
             "diff text": sosext("diff", old, new), "leaks text": sosext("leaks", old, new, "-holders", "6")}
    dictionary = "System.Collections.Generic.Dictionary<System.String, LeakyService.CacheEntry>+Entry[]"
    holder = next(h for h in json.loads(texts["leaks"].stdout)["holders"] if h["name"] == "LeakyService.MemoryCache")
    for command in ("dominators -top 5", f"retained {holder['address']}"):
        for form in ("", " --json"):
            texts[command + form] = subprocess.run(
                [drivers.PYTHON, "-m", "sosext", "analyze", new, "-c", command + form], cwd=drivers.REPO,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    texts["report"] = sosext("report", new, "--baseline", old, "--format", "json", "-o", "-")
    texts["folded"] = sosext("report", new, "--format", "folded", "-o", "-")
    for what, res in texts.items():
        assert res.returncode == 0, (what, res.stderr)
        assert "`" not in res.stdout, (what, [ln for ln in res.stdout.splitlines() if "`" in ln][:5])
    names = set()
    for what in ("diff", "leaks", "dominators -top 5 --json", f"retained {holder['address']} --json"):
        names |= _type_names(json.loads(texts[what].stdout))
    report = json.loads(texts["report"].stdout)
    names |= {t["name"] for t in report["types"]} | {h["type"] for h in report["holders"]}
    assert dictionary in names and "System.Collections.Generic.List<LeakyService.Customer>" in names
    assert names <= clrmd, names - clrmd
    assert f";{dictionary};" in texts["folded"].stdout
    # the HTML page too (its tables and plots; plotly.js's own source is not a type name)
    page = tmp_path / "heap.html"
    res = sosext("report", new, "--baseline", old, "-o", str(page))
    assert res.returncode == 0, res.stderr
    html_text = page.read_text()
    assert html.escape(dictionary, quote=False) in html_text and "Dictionary`2" not in html_text
    assert not re.search(r"[A-Za-z]`\d+\[\[", html_text)


def test_type_option_takes_every_spelling(case: Case) -> None:
    """-type finds a type by C#'s name (dumpheap's), the runtime's (dumpobj's) or a gcdump's."""
    old, new = str(case.old_core), str(case.new_core)
    want = "System.Collections.Generic.Dictionary<System.String, LeakyService.CacheEntry>+Entry[]"
    for spelling in (want, "Dictionary`2+Entry[[System.String, System.Private.CoreLib],[LeakyService.CacheEntry",
                     "Entry[System.String,LeakyService.CacheEntry][]"):
        doc = json.loads(sosext("diff", old, new, "-type", spelling, "--json").stdout)
        assert [t["name"] for t in doc["types"]] == [want], spelling


def test_counts_in_sentences_agree_with_their_number(case: Case) -> None:
    """"1 more group", "holds 1 growing object", "1 more type" (issue 27: "1 more groups",
    "1 growing objects"): the numbers are the JSON report's, the grammar follows them."""
    old, new = str(case.old_core), str(case.new_core)
    doc = json.loads(sosext("leaks", old, new, "-holders", "10", "-top", "1", "--json").stdout)
    groups = doc["types"][0]["group_count"]
    assert groups >= 2
    text = sosext("leaks", old, new, "-holders", "10", "-top", "1", "-groups", str(groups - 1)).stdout.splitlines()
    assert "  ... 1 more group (-groups <n> shows more)" in text
    said = [ln.strip() for ln in text if " growing object" in ln]
    assert len(said) == len(doc["holders"])
    for h, ln in zip(doc["holders"], said):
        n = h["objects"]
        assert ln.startswith(f"hold{'s' if h['instances'] == 1 else ''} {n:,} growing object{'' if n == 1 else 's'}, "), ln
        more = len(h["types"]) - 3
        assert ln.endswith(f", {more} more type{'' if more == 1 else 's'}" if more > 0 else ")"), ln
    assert {1} <= {h["objects"] for h in doc["holders"]}, "no holder of one growing object in this run"
