"""The one table engine: SOS's table layout for every command, and rows for JSON/CSV/Markdown.

Rows are cells joined by one space; fixed-width columns pad (right-aligned ones on the
left), unbounded ones do not; a text column either shows the tail of a long value after
"..." (SOS's managed-era tables) or cuts it at its width (``%-*.*s`` in its native tables,
``clip="cut"``), and a table whose last cell is never padded says ``pad_last=False``. Pointers print as lowercase hex zero-padded to 12 digits in
a 16-wide column, counts with thousands separators in a 14-wide column. Column widths can
be fitted to the values, and a header longer than the column count widens a narrower
column, as SOS does (its quirk is reproduced so that scripts see the same columns).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from .numbers import count as fmt_integer
from .numbers import pointer as fmt_pointer

POINTER_WIDTH = 16


def fmt_text(v: Any) -> str:
    return "" if v is None else str(v)


def fmt_as_is(v: Any) -> str:
    return "" if v is None else str(v)


@dataclass
class Column:
    width: int  # -1: unbounded
    right: bool
    fmt: Callable[[Any], str]
    truncate: bool | str = False  # True: "..." and the tail; "cut": the head, cut at the width

    def render(self, value: Any, pad: bool = True) -> str:
        text = self.fmt(value)
        w = self.width
        if w < 0:
            return text
        if len(text) > w and self.truncate == "cut":
            text = text[:w]
        elif len(text) > w and self.truncate:
            text = "." * w if w <= 3 else "..." + text[-(w - 3):]
        if not pad:
            return text
        return text.rjust(w) if self.right else text.ljust(w)


def Pointer() -> Column:  # noqa: N802 - named like SOS's column kinds
    return Column(POINTER_WIDTH, True, fmt_pointer)


def Integer() -> Column:  # noqa: N802
    return Column(14, True, fmt_integer)


def Text(width: int = -1) -> Column:  # noqa: N802
    return Column(width, False, fmt_text, truncate=True)


def TypeName(width: int = -1) -> Column:  # noqa: N802
    return Column(width, False, fmt_text, truncate=True)


def Cells(widths: Iterable[int], right: Iterable[bool], cut: Iterable[int] = ()) -> "Table":  # noqa: N802
    """A table of pre-formatted cells laid out as SOS's native TableOutput does: every cell
    but the last padded to its width; the ``cut`` columns cut to it (%-*.*s), the others
    (numbers, %p) only padded, so a long one overflows."""
    cut = set(cut)
    cols = [Column(w, r, fmt_as_is, "cut" if i in cut else False) for i, (w, r) in enumerate(zip(widths, right))]
    return Table(*cols, pad_last=False)


class Table:
    def __init__(self, *columns: Column, indent: str = "", pad_last: bool = True) -> None:
        self.columns = list(columns)
        self.indent = indent
        self.pad_last = pad_last

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
                if col.width < 0 or (i == len(titles) - 1 and not self.pad_last):
                    cells.append(title)
                else:
                    cells.append(title.rjust(col.width) if col.right else title.ljust(col.width))
            else:
                cells.append(title)
        return self.indent + " ".join(cells)

    def row(self, *values: Any) -> str:
        cells = []
        last = len(values) - 1
        for i, v in enumerate(values):
            col = self.columns[i] if i < len(self.columns) else Text()
            cells.append(col.render(v, self.pad_last or i < last))
        return self.indent + " ".join(cells)
