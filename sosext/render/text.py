"""Target-derived text made safe for a terminal.

Any string in a target (a string object, an exception message, a thread name, a type name
made with Reflection.Emit, a module path) can hold terminal control sequences: ESC ] 0;title
BEL sets the window title, ESC [ 2J clears the screen, and C1 controls such as U+009B (CSI)
do the same on terminals that take 8-bit controls. Printed raw, text that any web request
can put on a heap rewrites the analyst's terminal. So every line we print passes through
:func:`safe_text` (in :class:`~sosext.render.output.Output` and the hosts' error writers):
C0 controls other than newline, DEL, C1 controls and lone surrogates (which cannot even be
encoded as UTF-8) are shown as escapes - ``\\x1b``, ``\\t``, ``\\r``, ``\\u009b``, ``\\udc80``.
Newline stays: multi-line blocks (stack traces, help) are printed on purpose.
"""
from __future__ import annotations

import re

# C0 except \n, DEL, C1, and the surrogate range (only lone surrogates reach a str).
_UNSAFE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_NAMED = {"\t": "\\t", "\r": "\\r"}


def _escape(m: re.Match[str]) -> str:
    c = m.group()
    named = _NAMED.get(c)
    if named is not None:
        return named
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}"


def safe_text(text: str) -> str:
    """``text`` with every control character escaped (newlines kept); unchanged if it has none."""
    if _UNSAFE.search(text) is None:
        return text
    return _UNSAFE.sub(_escape, text)


def safe_line(text: str) -> str:
    """Like :func:`safe_text`, newlines escaped too: for one-line messages (errors)."""
    return safe_text(text).replace("\n", "\\n")
