"""soshelp: every command in one family, as SOS's help groups them; the list fits 80 columns,
soshelp -v 100, and --json carries each command's family and summary."""
from __future__ import annotations

import json

from sosext.commands import load_all
from sosext.commands.base import primary_commands
from sosext.commands.context import CommandContext
from sosext.commands.help import FAMILIES, SosHelp, _columns, grouped
from sosext.render.output import Output


def run(*words: str, mode: str = "text") -> list[str]:
    got: list[str] = []
    out = Output(got.append, mode=mode, command="soshelp")
    SosHelp().run(CommandContext(None, out, None), SosHelp.parse(list(words)))  # type: ignore[arg-type]
    out.finish()
    return "\n".join(got).splitlines()


def test_every_command_is_in_exactly_one_family() -> None:
    load_all()
    names = [c.names[0] for c in primary_commands()]
    listed = [n for _family, members in FAMILIES for n in members]
    assert sorted(listed) == sorted(set(listed)), "a command in two families"
    assert sorted(set(names) - set(listed)) == [], "commands in no family (they would go to Other)"
    assert sorted(set(listed) - set(names)) == [], "families name commands that do not exist"
    assert [f for f, _ in grouped()] == [f for f, _ in FAMILIES]


def test_the_list_fits_80_columns_and_names_every_command() -> None:
    lines = run()
    assert max(len(ln) for ln in lines) <= 80, max(lines, key=len)
    assert lines[0].startswith("sosext commands (soshelp <command> for details")
    text = "\n".join(lines)
    load_all()
    words = set(text.replace("(", " ").replace(")", " ").replace(",", " ").split())
    for c in primary_commands():
        assert c.names[0] in words, c.names[0]
    assert [ln for ln in lines[1:] if ln.endswith(":") and not ln.startswith(" ")] == [f"{f}:" for f, _ in FAMILIES]


def test_verbose_list_fits_100_columns_with_each_summary() -> None:
    lines = run("-v")
    assert max(len(ln) for ln in lines) <= 100, max(lines, key=len)
    assert any(ln.startswith("  dumpheap ") and "Display the objects on the managed heap" in ln for ln in lines)


def test_json_gives_family_and_summary() -> None:
    doc = json.loads("\n".join(run("--json", mode="json")))
    by_name = {c["name"]: c for c in doc["commands"]}
    assert by_name["gcroot"]["family"] == "Roots" and by_name["leaks"]["family"] == "sosext's own (not in SOS)"
    assert by_name["dumpobj"]["aliases"] and by_name["dumpobj"]["summary"]


def test_columns_wrap_long_names_onto_two_cells() -> None:
    lines = _columns(["a", "b" * 30, "c", "d"], width=80, column=26)
    assert lines == ["  a" + " " * 25 + "b" * 30, "  c" + " " * 25 + "d"]  # 2 + 26 + 52 + 1 > 80
