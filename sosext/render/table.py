"""SOS's table layout for the managed-era commands (dumpheap, eeheap, gcroot ...).

Rows are cells joined by one space; fixed-width columns pad (right-aligned ones on the
left), unbounded ones do not. Pointers print as lowercase hex zero-padded to 12 digits in
a 16-wide column, counts with thousands separators in a 14-wide column. Column widths can
be fitted to the values, and a header longer than the column count widens a narrower
column, as SOS does (its quirk is reproduced so that scripts see the same columns).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

POINTER_WIDTH = 16


def fmt_pointer(v: Any) -> str:
    return "" if v is None else f"{int(v):012x}"


def fmt_integer(v: Any) -> str:
    return "" if v is None else f"{int(v):,}"


def fmt_text(v: Any) -> str:
    return "" if v is None else str(v)


@dataclass
class Column:
    width: int  # -1: unbounded
    right: bool
    fmt: Callable[[Any], str]
    truncate: bool = False

    def render(self, value: Any) -> str:
        text = self.fmt(value)
        w = self.width
        if w < 0:
            return text
        if len(text) > w and self.truncate:
            text = "." * w if w <= 3 else "..." + text[-(w - 3):]
        return text.rjust(w) if self.right else text.ljust(w)


def Pointer() -> Column:  # noqa: N802 - named like SOS's column kinds
    return Column(POINTER_WIDTH, True, fmt_pointer)


def Integer() -> Column:  # noqa: N802
    return Column(14, True, fmt_integer)


def Text(width: int = -1) -> Column:  # noqa: N802
    return Column(width, False, fmt_text, truncate=True)


def TypeName(width: int = -1) -> Column:  # noqa: N802
    return Column(width, False, fmt_text, truncate=True)


class Table:
    def __init__(self, *columns: Column, indent: str = "") -> None:
        self.columns = list(columns)
        self.indent = indent

    def fit(self, i: int, values: Iterable[Any], minimum: int = 0, maximum: int = 0) -> "Table":
        """Size column ``i`` to its longest formatted value, within [minimum, maximum]."""
        col = self.columns[i]
        width = max((len(col.fmt(v)) for v in values), default=0)
        width = max(width, minimum)
        if maximum > 0:
            width = min(width, maximum)
        col.width = width
        return self

    def header(self, *titles: str) -> str:
        cells = []
        for i, title in enumerate(titles):
            if i < len(self.columns):
                col = self.columns[i]
                if len(title) > len(self.columns) and 0 <= col.width < len(title):
                    col.width = len(title)
                if col.width < 0:
                    cells.append(title)
                else:
                    cells.append(title.rjust(col.width) if col.right else title.ljust(col.width))
            else:
                cells.append(title)
        return self.indent + " ".join(cells)

    def row(self, *values: Any) -> str:
        cells = []
        for i, v in enumerate(values):
            col = self.columns[i] if i < len(self.columns) else Text()
            cells.append(col.render(v))
        return self.indent + " ".join(cells)
