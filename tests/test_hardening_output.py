"""Target-derived text never reaches a terminal raw (terminal injection).

The `hostile` debuggee holds a string with OSC (ESC ] 0;pwned BEL), a clear-screen CSI, the
8-bit CSI U+009B, a tab, a CR and DEL; a string with a lone surrogate; a thread named with an
escape; an exception whose message holds OSC; and an object of a Reflection.Emit type whose
name holds ESC c (terminal reset) and U+009B. Each host (LLDB and GDB live, the CLI and LLDB on
a heap core) prints them: no control byte may reach the output, and the escaped form
(``\\x1b``, ``\\u009b``) must be what the debuggee's own text gives under the documented rule.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import drivers
from harness import Debuggee, build_debuggee

pytestmark = pytest.mark.slow

HOSTS = ["lldb-live", "lldb-heap", "cli-heap"] + (["gdb-live"] if drivers.GDB else [])
# Bytes that a terminal acts on. CR is among them: it lets a string overwrite the line it is on.
RAW = ("\x1b", "\x07", "\x9b", "\x7f", "\r", "\x00")


def escaped(text: str) -> str:
    """The documented rule (docs/commands.md, "Output safety"), written independently of sosext."""
    out = []
    for c in text:
        o = ord(c)
        if c == "\n":
            out.append(c)
        elif c == "\t":
            out.append("\\t")
        elif c == "\r":
            out.append("\\r")
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\x{o:02x}")
        elif 0x80 <= o <= 0x9F or 0xD800 <= o <= 0xDFFF:
            out.append(f"\\u{o:04x}")
        else:
            out.append(c)
    return "".join(out)


def commands(h: dict) -> dict[str, str]:
    return {
        "text": f"dumpobj {h['text']}",
        "text-json": f"dumpobj --json {h['text']}",
        "thread-name": f"dumpobj {h['threadName']}",
        "surrogate": f"dumpobj {h['surrogate']}",
        "exception": f"pe {h['exception']}",
        "exceptions": "dumpexceptions -type InvalidOperation",
        "runtime-types": "dumpruntimetypes",
        "exception-refs": f"dumpobjgcrefs {h['exception']}",
        "strings": "dumpheap -strings",
        "emitted": f"dumpheap -mt {h['emittedMt']}",
        "emitted-obj": f"dumpobj {h['emitted']}",
        "stat-json": "dumpheap -stat --json",
        "bad-command": "dumpobj \x1b]0;pwned\x07",
    } | {f"num{i}": c for i, c in enumerate(HOSTILE_NUMBERS)}


# Numbers out of every range: each gives one line, "error: ...", never an internal error.
HOSTILE_NUMBERS = [
    "dumpheap -min 99999999999999999999999999",
    "dumpheap -max 0x10000000000000000",
    "dumpheap -stat 0x1000 L0xffffffffffffffff",
    "verifyheap 1 L0xffffffffffffffff",
    "dumpheap -heap -1",
    "dso -1",
    "dso 4294967296",
    "dso 0x7fffffff",
    "dumparray -start 99999999999999999999 0x1000",
    "gcroot -limit -5 0x1000",
    "clrstack -c 99999999999999999999999",
    "setthread 99999999999999999999",
    "notreachableinrange 0x1000 L0xffffffffffffffff",
    "listnearobj 0x10000000000000000",
    "clrstack -i -a 99999999999999999999",
    "dumpgen gen99999999999999999999",
]


@pytest.fixture(scope="module")
def case(request, tmp_path_factory):  # type: ignore[no-untyped-def]
    drivers.require_dotnet_and_lldb()
    tfm = request.config.getoption("--tfm")
    cores = tmp_path_factory.mktemp("cores-hostile")
    with Debuggee("hostile", tfm=tfm, dll=build_debuggee(tfm), core_dir=cores) as d:
        h = d.truth["hostile"]
        cmds = commands(h)
        outs = drivers.run_in_hosts(d, list(cmds.values()), HOSTS, cores)
    return h, {host: dict(zip(cmds, o)) for host, o in outs.items()}


@pytest.fixture(params=HOSTS)
def host(request):  # type: ignore[no-untyped-def]
    return request.param


def test_no_control_character_reaches_the_output(case, host):  # type: ignore[no-untyped-def]
    _h, outs = case
    for key, out in outs[host].items():
        for raw in RAW:
            assert raw not in out.text, f"{host} {key}: raw {raw!r} in {out.text[:400]!r}"


def test_string_contents_are_escaped(case, host):  # type: ignore[no-untyped-def]
    h, outs = case
    assert "\x1b" in h["textValue"] and "\u009b" in h["textValue"]  # the debuggee did its part
    assert f"String:      {escaped(h['textValue'])}" in outs[host]["text"].lines
    assert f"String:      {escaped(h['threadNameValue'])}" in outs[host]["thread-name"].lines


def test_exception_message_is_escaped(case, host):  # type: ignore[no-untyped-def]
    h, outs = case
    assert f"Message:          {escaped(h['exceptionMessage'])}" in outs[host]["exception"].lines


def test_dumpexceptions_escapes_the_message(case, host):  # type: ignore[no-untyped-def]
    h, outs = case
    assert f"        Message: {escaped(h['exceptionMessage'])}" in outs[host]["exceptions"].lines


def test_lone_surrogate_does_not_break_output(case, host):  # type: ignore[no-untyped-def]
    h, outs = case
    line = next(ln for ln in outs[host]["surrogate"].lines if ln.startswith("String:"))
    prefix, _, suffix = h["surrogateValue"].partition("\ud800")
    # Shown as the escape or as U+FFFD (the string decoder's replacement), never raw.
    assert line in (f"String:      {prefix}\\ud800{suffix}", f"String:      {prefix}\ufffd{suffix}")


def test_json_stays_valid_and_exact(case, host):  # type: ignore[no-untyped-def]
    h, outs = case
    doc = json.loads(outs[host]["text-json"].text)
    assert doc["string"] == h["textValue"]  # escaped by JSON, exact once parsed
    stat = json.loads(outs[host]["stat-json"].text)
    assert any(int(t["mt"], 16) == int(h["emittedMt"], 16) for t in stat["types"])


def test_emitted_type_instance_is_listed(case, host):  # type: ignore[no-untyped-def]
    h, outs = case
    rows = [ln.split() for ln in outs[host]["emitted"].lines]
    assert any(r[:2] == [f"{int(h['emitted'], 16):x}", f"{int(h['emittedMt'], 16):x}"] for r in rows if len(r) >= 2)
    # sosext cannot name a Reflection.Emit type yet (no dynamic-module metadata): when it can,
    # the name must come escaped.
    if "SosextEvil" in outs[host]["emitted"].text:
        assert escaped(h["emittedType"]) in outs[host]["emitted"].text


def test_error_echoing_target_text_is_one_escaped_line(case, host):  # type: ignore[no-untyped-def]
    _h, outs = case
    out = outs[host]["bad-command"]
    assert out.errors and "\\x1b]0;pwned\\x07" in out.errors[0]


def test_hostile_numbers_give_one_line(case, host):  # type: ignore[no-untyped-def]
    _h, outs = case
    for i, cmd in enumerate(HOSTILE_NUMBERS):
        out = outs[host][f"num{i}"]
        assert len(out.lines) == 1 and out.errors == out.lines, f"{host} {cmd}: {out.text!r}"
        assert "internal error" not in out.text, f"{host} {cmd}: {out.text!r}"
