"""Every command's output in every form render/ offers, on a core of the debuggee.

* ``--json`` on every command that prints a table or a record: the output parses, carries
  the documented keys (docs/commands.md, "Output formats"), and where the debuggee printed
  the truth, the values equal it;
* ``--format csv`` and ``--format markdown`` give the same table;
* colour on a terminal (a pseudo-terminal), never in a pipe, never with NO_COLOR or --no-color;
* an empty result still prints SOS's header and totals.

A command added to the registry must be listed in JSON_COMMANDS (with a command line to run)
or in NO_TABLE (with the reason it prints neither a table nor a record): the coverage test
fails otherwise.
"""
from __future__ import annotations

import csv
import io
import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

import drivers
from harness import Debuggee, build_debuggee

REPO = Path(__file__).resolve().parents[1]

# Commands that print no table and no record of their own, and why.
NO_TABLE = {
    "sosext": "a host command (sosext core <file> opens a core); prints one line",
    "heapsnapshot": "prints a JSON snapshot in every format already",
    "heapdiff": "needs a baseline core; its --json is tested in test_diff.py",
    "leaks": "needs a baseline core; its --json is tested in test_diff.py",
    "report": "writes a report file (--format html, folded or its own json); tested in test_report.py",
    "verifyobj": "prints SOS's verdict line or its problem rows; exact in test_parity.py",
    "listnearobj": "prints SOS's before/current/after lines about one address; exact in test_parity.py",
    "sosstatus": "labelled lines about sosext itself (target, DAC, caches, kernels); tested in test_parity.py",
    "sosflush": "prints one line",
    "dumplog": "writes the stress log to a file and prints two lines; tested in test_parity_log.py",
    "histinit": "prints SOS's STRESS LOG header; needs a stress log; tested in test_parity_log.py",
    "histclear": "prints one line",
    "histstats": "needs a stress log (the debuggee run with DOTNET_StressLog=1): --json tested in test_parity_log.py",
    "histroot": "needs a stress log and a root: --json tested in test_parity_log.py",
    "histobj": "needs a stress log and an object: --json tested in test_parity_log.py",
    "histobjfind": "needs a stress log and an object: its rows are tested in test_parity_log.py",
    "crashinfo": "needs a dump written at a crash: --json tested in test_parity_log.py",
    "bpmd": "needs a live process; prints SOS's lines; tested in test_bpmd.py",
    "findroots": "one line: SOS's findroots needs a stop inside a GC (gcroot -gcgen answers on a stop)",
    "traverseheap": "writes a file (CLR Profiler's text or XML) and one line; read back in test_parity_heap.py",
    "dumpsig": "prints the signature as one line (its --json has it as 'signature'); exact in test_parity_code.py",
    "dumpsigelem": "prints one type as one line; exact in test_parity_code.py",
    "logopen": "prints where the console is logged, one line",
    "logclose": "prints one line",
    "logging": "prints whether the diagnostic log is on and its file",
    "dbgout": "prints one line",
    "loadsymbols": "prints what the debugger does about native symbols; no table",
}


def _by_name(truth: dict, name: str) -> dict:
    return truth["types"][name]


def json_commands(truth: dict) -> dict[str, str]:
    """One command line per command that prints a table or a record (key: its main name)."""
    a = _by_name(truth, "SosextDebuggee.HeapItemA")
    obj = truth["objects"]
    tid = truth["threads"][0]["osTid"]
    return {
        "dumpheap": f"dumpheap -mt {a['mt']}",
        "eeheap": "eeheap -gc",
        "gcheapstat": "gcheapstat",
        "gcwhere": f"gcwhere {a['addresses'][0]}",
        "dumpdomain": "dumpdomain",
        "dumpmodule": "dumpmodule -mt {module}",  # filled in from dumpmt's answer
        "dumpassembly": "dumpassembly {assembly}",  # filled in from dumpdomain's answer
        "dumpobj": f"dumpobj {a['addresses'][0]}",
        "dumpvc": None,  # needs a struct field's MT: covered by test_objects
        "dumparray": f"dumparray {obj['ints']['address']}",
        "gcroot": f"gcroot {a['addresses'][0]}",
        "objsize": f"objsize {a['addresses'][0]}",
        "gchandles": "gchandles",
        "finalizequeue": "finalizequeue",
        "dumpstackobjects": f"dumpstackobjects {tid:x}",
        "verifyheap": "verifyheap",
        "clrthreads": "clrthreads",
        "threadstate": "threadstate 21220",
        "threads": "threads -v",
        "clrstack": "clrstack",  # after setthread -t <tid>, see docs()
        "pe": "pe",
        "threadpool": "threadpool",
        "ip2md": None,  # needs a code address: covered by test_threads
        "clru": None,  # needs a jitted method: --json covered by test_parity_code
        "dumpil": None,  # needs a MethodDesc: --json covered by test_parity_code
        "ehinfo": None,  # needs a MethodDesc: --json covered by test_parity_code
        "gcinfo": None,  # needs a MethodDesc: covered by test_parity_code
        "dumpmt": f"dumpmt -md {a['mt']}",
        "dumpclass": None,  # needs an EEClass: covered by test_types
        "dumpmd": None,  # needs a MethodDesc: covered by test_types
        "name2ee": "name2ee * SosextDebuggee.HeapItemA",
        "token2ee": None,  # needs a module and token: covered by test_types
        "setclrpath": "setclrpath",
        "setsymbolserver": "setsymbolserver -directory /tmp",
        "soshelp": "soshelp",
        "dumpgen": "dumpgen gen2",
        "sizestats": "sizestats",
        "timerinfo": "timerinfo",
        "syncblk": "syncblk -all",
        "dumpconcurrentdictionary": None,  # needs a dictionary: covered by test_parity
        "dumpconcurrentqueue": None,  # needs a queue: covered by test_parity
        "gchandleleaks": "gchandleleaks",
        "dumpasync": "dumpasync --tasks",
        "taskstate": "taskstate -v 73728",
        "dumphttp": "dumphttp",  # no requests on this heap: the empty table; rows in test_parity_http
        "dumprequests": "dumprequests",  # likewise
        "maddress": "maddress",
        "retained": f"retained {a['addresses'][0]}",
        "dominators": "dominators -top 3",
        "dumpstack": "dumpstack",  # after setthread -t <tid>, as clrstack
        "eestack": "eestack -EE",
        "parallelstacks": "parallelstacks",
        "clrma": "clrma",
        "eeversion": "eeversion",
        "runtimes": "runtimes",
        "dumpexceptions": "dumpexceptions",
        "dumpdelegate": None,  # needs a delegate: covered by test_parity_heap
        "dumpobjgcrefs": f"dumpobjgcrefs {a['addresses'][0]}",
        "dumpruntimetypes": "dumpruntimetypes",
        "pathto": None,  # needs two related objects: covered by test_parity_heap
        "notreachableinrange": None,  # needs a block of object pointers: covered by test_parity_heap
        "findreferencestoephemeral": "findreferencestoephemeral",
        "findephemeralreferencestoloh": "findephemeralreferencestoloh",
        "threadpoolqueue": "threadpoolqueue",
        "dumpgcdata": "dumpgcdata",
        "analyzeoom": "analyzeoom",
        "clrmodules": "clrmodules",
        "dumpalc": f"dumpalc {a['addresses'][0]}",
        "findappdomain": f"findappdomain {a['addresses'][0]}",
        "gctonative": "gctonative PAGE_READWRITE",
        "findpointersin": "findpointersin HandleTable",
        "modules": "modules -v",
        "registers": "registers",
    }


@pytest.fixture(scope="module")
def core(tmp_path_factory) -> tuple[dict, Path]:
    drivers.require_dotnet_and_lldb()
    where = tmp_path_factory.mktemp("formats")
    with Debuggee("heap", dll=build_debuggee(), core_dir=where) as d:
        path = d.write_core("heap", where / "heap.core")
        return d.truth, path


@pytest.fixture(scope="module")
def docs(core) -> dict[str, dict]:
    """Each command's --json document (clrstack after setthread, in one batch)."""
    truth, path = core
    pairs = [(k, f"{v} --json") for k, v in json_commands(truth).items()
             if v is not None and "{" not in v and k not in ("clrstack", "dumpstack")]
    pairs += [("", f"setthread -t {truth['threads'][0]['osTid']}"), ("clrstack", "clrstack --json"),
              ("dumpstack", "dumpstack --json"),
              ("dumpmt-plain", f"dumpmt {_by_name(truth, 'SosextDebuggee.HeapItemA')['mt']} --json")]
    outs = drivers.run_cli([line for _k, line in pairs], core=path)
    got: dict[str, dict] = {}
    for (name, line), out in zip(pairs, outs):
        if name:
            try:
                got[name] = json.loads(out.text)
            except json.JSONDecodeError:
                pytest.fail(f"{line}: not JSON: {out.text[:2000]!r}")
    # dumpmodule and dumpassembly need addresses that the first answers hold.
    module = got["dumpmt-plain"]["module"]
    assembly = got["dumpdomain"]["assemblies"][0]["address"]
    extra = drivers.run_cli([f"dumpmodule -mt {module} --json", f"dumpassembly {assembly} --json"], core=path)
    got["dumpmodule"], got["dumpassembly"] = (json.loads(o.text) for o in extra)
    return got


def test_every_command_is_listed() -> None:
    from sosext.commands import load_all
    from sosext.commands.base import primary_commands
    load_all()
    listed = set(json_commands(_FAKE_TRUTH)) | set(NO_TABLE)
    assert sorted(c.names[0] for c in primary_commands() if c.names[0] not in listed) == []


_FAKE_TRUTH = {"types": {"SosextDebuggee.HeapItemA": {"mt": "0x1", "addresses": ["0x2"]}},
               "objects": {"ints": {"address": "0x3"}}, "threads": [{"osTid": 4}]}


def test_every_table_command_takes_json_and_it_parses(docs: dict[str, dict]) -> None:
    for name, doc in docs.items():
        assert doc["sosext"] == 1, name
        assert doc["command"] in (name.split("-")[0], "setthread", "threads"), name


def test_json_has_structure_not_just_text(docs: dict[str, dict]) -> None:
    # A table or record command gives keyed values; only a message ("no exception on this
    # thread", "no thread pool data") may come as "lines".
    may_be_a_message = {"pe", "threadpool", "clrstack"}
    for name, doc in docs.items():
        keys = set(doc) - {"sosext", "command"}
        if name not in may_be_a_message:
            assert keys and keys != {"lines"}, f"{name} printed only text: {doc}"


def test_json_values_equal_the_debuggee_truth(core, docs: dict[str, dict]) -> None:
    truth, _ = core
    a = _by_name(truth, "SosextDebuggee.HeapItemA")
    objs = docs["dumpheap"]["objects"]
    assert sorted(o["address"] for o in objs) == sorted(a["addresses"])
    assert {o["mt"] for o in objs} == {a["mt"]}
    assert docs["dumpheap"]["total_objects"] == a["count"]
    mt = docs["dumpmt-plain"]
    assert (mt["mt"], mt["name"], mt["base_size"]) == (a["mt"], a["name"], a["baseSize"])
    assert mt["component_size"] == a["componentSize"]
    obj = docs["dumpobj"]
    assert (obj["address"], obj["mt"], obj["size"]) == (a["addresses"][0], a["mt"], a["baseSize"])
    ints = truth["objects"]["ints"]
    arr = docs["dumparray"]
    assert (arr["mt"], arr["length"], arr["size"]) == (ints["mt"], ints["length"], ints["unalignedSize"])
    assert len(arr["elements"]) == ints["length"]
    where = docs["gcwhere"]["segments"][0]
    assert where["address"] == a["addresses"][0]
    assert where["generation"] == str(next(iter(a["gens"])))
    threads = {t["os_thread_id"]: t for t in docs["clrthreads"]["threads"]}
    for t in truth["threads"]:
        assert threads[t["osTid"]]["id"] == t["managedId"]
    held = truth["threads"][0]["held"]["address"]
    assert held in {o["object"] for o in docs["dumpstackobjects"]["objects"]}
    assert docs["dumpstackobjects"]["os_thread_id"] == truth["threads"][0]["osTid"]
    assert docs["verifyheap"]["errors_found"] == 0
    assert docs["eeheap"]["gc_heaps"] == 1  # the debuggee runs workstation GC here
    assert not truth["runtime"]["serverGC"]
    matches = docs["name2ee"]["matches"]
    assert [int(m["method_table"], 16) for m in matches] == [int(a["mt"], 16)]
    names = {c["name"] for c in docs["soshelp"]["commands"]}
    assert {"dumpheap", "gcroot", "clrthreads"} <= names
    assert docs["gcroot"]["object"] == a["addresses"][0]
    ret = docs["retained"]  # a HeapItemA holds nothing: it retains exactly its own size
    assert (ret["address"], ret["size"], ret["retained"]) == (a["addresses"][0], a["baseSize"], a["baseSize"])
    assert [o["retained"] for o in docs["dominators"]["objects"]] == \
        sorted((o["retained"] for o in docs["dominators"]["objects"]), reverse=True)


def test_csv_and_markdown_give_the_same_rows(core) -> None:
    truth, path = core
    a = _by_name(truth, "SosextDebuggee.HeapItemA")
    csv_out, md_out, js = drivers.run_cli([f"dumpheap -stat -mt {a['mt']} --format csv",
                                           f"dumpheap -stat -mt {a['mt']} --format markdown",
                                           f"dumpheap -stat -mt {a['mt']} --json"], core=path)
    sections = csv_out.text.strip().split("\n\n")
    rows = list(csv.DictReader(io.StringIO(sections[-1].split("\n", 1)[1] if sections[-1].startswith("#")
                                           else sections[-1])))
    # a non-generic type: the runtime's name and ClrMD's are the same
    assert [(r["mt"], int(r["count"]), int(r["total_size"]), r["name"], r["csharp_name"]) for r in rows] == \
        [(a["mt"], a["count"], a["size"], a["name"], a["name"])]
    md = [ln for ln in md_out.text.splitlines() if ln.startswith("|")]
    assert [c.strip() for c in md[-3].split("|")[1:-1]] == ["mt", "count", "total_size", "name", "csharp_name"]
    assert any(a["mt"] in ln and str(a["count"]) in ln for ln in md[2:])
    assert json.loads(js.text)["types"][0]["count"] == a["count"]


def _pty_run(args: list[str], env: dict[str, str]) -> str:
    master, slave = pty.openpty()
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.DEVNULL,
                            cwd=REPO, env=env)
    os.close(slave)
    chunks = []
    try:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
    finally:
        proc.wait(timeout=300)
        os.close(master)
    return b"".join(chunks).decode(errors="replace")


# pygments' terminal formatter starts every coloured token with SGR "ESC [ <n> m" and ends it
# with "ESC [ 39;49;00m"; no other part of sosext writes escapes.
_RESET = "\x1b[39;49;00m"


def test_colour_on_a_terminal_never_in_a_pipe(core) -> None:
    _, path = core
    args = [sys.executable, "-m", "sosext", "analyze", str(path), "-c", "dumpheap -stat -type SosextDebuggee."]
    # No next-step hints: they show on a terminal only, by design (render/output.hint).
    env = {**{k: v for k, v in os.environ.items() if k != "NO_COLOR"}, "SOSEXT_HINTS": "0"}
    on_tty = _pty_run(args, env)
    assert _RESET in on_tty and "Statistics:" in on_tty
    piped = subprocess.run(args, capture_output=True, text=True, cwd=REPO, env=env, timeout=300).stdout
    assert "\x1b" not in piped and "Statistics:" in piped
    assert _RESET not in _pty_run(args, {**env, "NO_COLOR": "1"})
    assert _RESET not in _pty_run(args[:-1] + [args[-1] + " --no-color"], env)
    # Colour never changes the text: stripped of escapes, the terminal shows the pipe's lines.
    import re
    plain = re.sub(r"\x1b\[[0-9;]*m", "", on_tty).replace("\r\n", "\n")
    assert plain.strip() == piped.strip()


def test_empty_results_print_nothing(core) -> None:
    """As SOS (dotnet-dump 10): a dumpheap that matches nothing prints no header, no statistics
    and no totals; tests/test_sos_parity.py compares the same with SOS itself."""
    _, path = core
    listing, stat = drivers.run_cli(["dumpheap -type NoSuchTypeAnywhere", "dumpheap -stat -type NoSuchTypeAnywhere"],
                                    core=path)
    assert listing.text.strip() == "" and stat.text.strip() == ""


def test_renderers_without_a_debuggee() -> None:
    from sosext.render.output import Address, Output
    from sosext.render.table import Integer, Pointer, Table
    for mode in ("text", "json", "csv", "markdown"):
        got: list[str] = []
        out = Output(got.append, mode=mode, command="demo")
        rows = out.table("things", Table(Pointer(), Integer()), ("address", "count"))
        rows.header("Address", "Count")
        rows.row(Address(0x7F0012345678), 1234)
        out.field("total", 1234, "Total 1,234")
        out.record(["Name:        a,b \x1b]0;title\x07"])
        out.finish()
        text = "\n".join(got)
        assert "\x1b" not in text and "\x07" not in text  # target text stays escaped in every form
        if mode == "text":
            assert text.splitlines()[1] == "    7f0012345678          1,234"
        elif mode == "json":
            doc = json.loads(text)
            assert doc["things"] == [{"address": "0x7f0012345678", "count": 1234}]
            assert (doc["total"], doc["name"]) == (1234, "a,b \\x1b]0;title\\x07")
        elif mode == "csv":
            assert "0x7f0012345678,1234" in text and '"a,b \\x1b]0;title\\x07"' in text
        else:
            assert "| 0x7f0012345678 | 1234    |" in text


def test_colour_is_added_after_escaping_and_stops_on_long_listings(monkeypatch) -> None:
    from sosext.render import output
    monkeypatch.setattr(output, "COLOR_LINES_MAX", 3)
    got: list[str] = []
    out = output.Output(got.append, color=True)
    out.line("Statistics: \x1b]0;title\x07 7f0012345678")
    out.lines([f"    7f00123456{i:02x}          1,234" for i in range(4)])
    out.finish()
    lines = "\n".join(got).split("\n")
    assert _RESET in lines[0] and "\\x1b]0;title\\x07" in lines[0]  # the target's escape stays escaped
    assert "\x1b]" not in lines[0] and "\x07" not in lines[0]
    assert all(_RESET in ln for ln in lines[1:3])
    assert lines[3:] == ["    7f0012345602          1,234", "    7f0012345603          1,234"]
