"""sosext's own error messages write an address or other hex number as 0x…, so that it is not
read as decimal. Messages in SOS's own words (a capitalised sentence: "Address %p not found in
the managed heap.", "Could not read pointer …") keep SOS's format, and so do messages whose
number is formatted by P16/p16 (SOS's %p): tests/test_parity* compare those with SOS."""
from __future__ import annotations

import re
from pathlib import Path

SOSEXT = Path(__file__).resolve().parents[2] / "sosext"
_RAISE = re.compile(r"raise [A-Za-z]*Error\(")
_BARE_HEX = re.compile(r"(?<!0x)(?<!IL_)\{[^{}:]+:0?\d*x\}")


def _raises(text: str):
    for m in _RAISE.finditer(text):
        j, depth = m.end(), 1
        while depth and j < len(text):
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            j += 1
        yield text[m.start():j]


def test_error_messages_write_hex_with_0x() -> None:
    bad = []
    for path in sorted(SOSEXT.rglob("*.py")):
        for call in _raises(path.read_text()):
            message = call[call.index("(") + 1:].lstrip("f").lstrip("\"'")
            if message[:1].isupper():
                continue  # SOS's own sentence, in SOS's format
            if _BARE_HEX.search(call):
                bad.append(f"{path.relative_to(SOSEXT.parent)}: {call.splitlines()[0].strip()}")
    assert not bad, "hex without 0x in an error message:\n" + "\n".join(bad)


def test_the_rule_catches_a_bare_hex_number() -> None:
    assert list(_raises('raise SosError(f"{address:x} is not a valid object")'))
    assert _BARE_HEX.search('f"{address:x} is not"') and not _BARE_HEX.search('f"{address:#x} is not"')
    assert not _BARE_HEX.search('f"0x{address:016x} is not"')
