"""Colour for SOS text on a terminal, through pygments.

Only the host decides whether output is a terminal (the CLI asks isatty, LLDB and GDB their
own colour settings and their stdout); ``--no-color`` and the ``NO_COLOR`` environment
variable (https://no-color.org) turn it off. Colour is applied to each line after
escaping, so target-derived text cannot carry escape sequences of its own.

The lexer knows SOS's shapes, not the CLR: hex addresses, counts and sizes, headings ending
in a colon, and the words of errors and warnings.
"""
from __future__ import annotations

import os
from typing import Callable


def color_wanted(is_terminal: bool, no_color_option: bool = False) -> bool:
    """Whether to colour: a terminal, no --no-color, no NO_COLOR in the environment."""
    return is_terminal and not no_color_option and not os.environ.get("NO_COLOR")


_cached: Callable[[str], str] | None = None


def colorizer() -> Callable[[str], str]:
    """A function colouring one line of SOS text for a 16-colour terminal."""
    global _cached
    if _cached is not None:
        return _cached
    try:
        from pygments import highlight
        from pygments.formatters import TerminalFormatter
        from pygments.lexer import RegexLexer
        from pygments.token import Comment, Generic, Name, Number, Text
    except ImportError:  # pygments missing: plain text is still right
        _cached = lambda s: s  # noqa: E731
        return _cached

    class SosLexer(RegexLexer):
        name = "sos"
        tokens = {
            "root": [
                (r"^(Statistics|Total|Fragmented|Found|HandleTable|Finalizer Queue|Thread \w+)\b.*$", Generic.Heading),
                (r"^\s*[A-Z][A-Za-z ]+:(?=\s)", Generic.Subheading),
                (r"\b(error|warning|Invalid|not a valid)\b", Generic.Error),
                (r"\b(0x)?[0-9a-fA-F]{12,16}\b", Number.Hex),
                (r"\b\d{1,3}(,\d{3})+\b|\b\d+\b", Number.Integer),
                (r"\b(System|Microsoft)(\.[A-Za-z_`0-9<>+\[\],]+)+", Name.Class),
                (r"\s+", Text),
                (r".", Text),
            ],
        }

    lexer = SosLexer()
    formatter = TerminalFormatter()
    del Comment

    def paint(line: str) -> str:
        return highlight(line, lexer, formatter).rstrip("\n")

    _cached = paint
    return paint
