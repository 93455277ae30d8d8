"""SOS's bordered tables (maddress and friends): cells between " | ", framed by +--+ rules.

    +-------------------------------------------------+
    | Memory Type |  Count |        Size | Size (bytes) |
    +-------------------------------------------------+
    | GCHeap      |      5 |     12.00mb |   12,582,912 |
    +-------------------------------------------------+
    | [TOTAL]     |      5 |     12.00mb |   12,582,912 |
    +-------------------------------------------------+

Columns have fixed widths (fitted to their values beforehand); a header wider than its column
widens it, as SOS's Table does when the title is longer than the number of columns.
"""
from __future__ import annotations

from typing import Any

from .table import Column

SPACING = " | "


def human_size(n: int) -> str:
    """SOS's human-readable size: kb below 1 MiB, mb below 1 GiB, else gb, two decimals."""
    v = n / 1024
    if v < 1024:
        return f"{v:.2f}kb"
    v /= 1024
    if v < 1024:
        return f"{v:.2f}mb"
    return f"{v / 1024:.2f}gb"


class BorderedTable:
    def __init__(self, *columns: Column) -> None:
        self.columns = list(columns)

    def rule(self) -> str:
        return " +-" + "---".join("-" * max(c.width, 0) for c in self.columns) + "-+ "

    def header(self, *titles: str) -> list[str]:
        for c, t in zip(self.columns, titles):
            if len(t) > len(self.columns) and 0 <= c.width < len(t):
                c.width = len(t)
        cells = [t.rjust(c.width) if c.right else t.ljust(c.width) for c, t in zip(self.columns, titles)]
        return [self.rule(), SPACING + SPACING.join(cells) + SPACING, self.rule()]

    def row(self, *values: Any) -> str:
        return SPACING + SPACING.join(c.render(v) for c, v in zip(self.columns, values)) + SPACING

    def footer(self, *values: Any) -> list[str]:
        return [self.rule(), self.row(*values), self.rule()]
