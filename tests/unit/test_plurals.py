"""sosext's own sentences count in English: "1 more group", "1 growing object", "2 groups"."""
from __future__ import annotations

import re
from pathlib import Path

from sosext.render.numbers import counted

REPO = Path(__file__).resolve().parents[2]


def test_counted_agrees_with_its_number() -> None:
    assert counted(1, "more group") == "1 more group"
    assert counted(2, "more group") == "2 more groups"
    assert counted(1, "growing object") == "1 growing object"
    assert counted(0, "object") == "0 objects"
    assert counted(1_200, "byte") == "1,200 bytes"
    assert counted(1, "object", signed=True) == "+1 object"
    assert counted(-1, "object", signed=True) == "-1 object"
    assert counted(-3, "byte", signed=True) == "-3 bytes"
    assert counted(2, "entry") == "2 entries" and counted(2, "key") == "2 keys"
    assert counted(2, "index", "indexes") == "2 indexes"


def test_leaks_and_diff_count_with_it() -> None:
    # The sentences that said "1 more groups" and "1 growing objects" (issue 27) count through counted().
    for path in ("sosext/commands/diff.py", "sosext/cli.py"):
        text = (REPO / path).read_text()
        assert not re.search(r":,\}\s+(more groups|growing objects)", text), path
        assert "counted(" in text, path
