"""docs/sos-users.md's command tables cannot drift from the commands sosext registers."""
from __future__ import annotations

import re
from pathlib import Path

from sosext.commands import load_all
from sosext.commands.base import REGISTRY

DOC = Path(__file__).resolve().parents[1] / "docs" / "sos-users.md"
STATUSES = {"supported", "partial", "not yet", "not applicable"}


def rows() -> list[tuple[list[str], str]]:
    """(command names with aliases, status) of every table row naming commands in backticks."""
    out = []
    for ln in DOC.read_text().splitlines():
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        if ln.startswith("| `") and len(cells) >= 2:
            out.append((re.findall(r"`([^`]+)`", cells[0]), cells[1]))
    return out


def test_statuses_are_known() -> None:
    bad = [(names, st) for names, st in rows() if st not in STATUSES]
    assert rows() and not bad, bad


def test_every_registered_command_is_in_a_supported_row_and_back() -> None:
    load_all()
    # SOS names sosext lacks are registered too, as placeholders that say so: not commands.
    registered = {n.lower() for n, cls in REGISTRY.items() if not cls.__name__.startswith("Placeholder_")}
    claimed = {n.lower() for names, st in rows() if st in ("supported", "partial") for n in names}
    denied = {n.lower() for names, st in rows() if st not in ("supported", "partial") for n in names}
    assert registered - claimed == set(), "registered but not in a supported/partial row"
    assert claimed - registered == set(), "in a supported/partial row but not registered"
    assert registered & denied == set(), "registered but listed as not there"


def test_each_command_has_one_row() -> None:
    names = [n for ns, _ in rows() for n in {x.lower() for x in ns}]
    assert len(names) == len(set(names)), sorted({n for n in names if names.count(n) > 1})


def test_prose_never_calls_a_registered_command_missing() -> None:
    """Issue 27: the prose said code-level commands were "not there yet" while the table listed
    them. A sentence saying something is missing names no command sosext registers, and only the
    statuses' legend says "not yet"."""
    load_all()
    registered = {n.lower() for n, cls in REGISTRY.items() if not cls.__name__.startswith("Placeholder_")}
    text = "\n".join(ln for ln in DOC.read_text().splitlines() if not ln.startswith("|"))
    bad = []
    for sentence in re.split(r"(?<=[.;:])\s+", " ".join(text.split())):
        if re.search(r"\bnot (there|yet|available|supported|implemented)\b|\bmissing\b|\black(s)?\b", sentence, re.I):
            named = {n.lower() for n in re.findall(r"`([A-Za-z!]+)`", sentence)} & registered
            if named:
                bad.append((sorted(named), sentence[:160]))
        # "not there yet" of a family of commands names none: the table's statuses say what is
        # missing, command by command; the legend of those statuses is the one place for the words.
        if re.search(r"\bnot (there|yet)\b", sentence, re.I) and "**not yet**" not in sentence:
            bad.append(([], sentence[:160]))
    assert not bad, bad
