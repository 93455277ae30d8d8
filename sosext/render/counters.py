"""Output of ``sosext counters``: a table refreshed in place on a terminal, one line per
counter reading in a pipe, CSV, or JSON lines (one object per interval)."""
from __future__ import annotations

import csv
import io
import json
import math
import time
from typing import TextIO

from ..ipc.counters import CounterInterval, CounterSample


def clean(text: str) -> str:
    """Target-derived text with control characters replaced (nothing reaches the terminal raw)."""
    return "".join(c if c.isprintable() else "?" for c in text)


def number(v: float | None) -> str:
    """As dotnet-counters writes a value (##,###,##0.###): thousands separators, at most three
    decimals (36.4326 -> 36.433)."""
    if v is None or not math.isfinite(v):
        return "-" if v is None else str(v)
    if v == int(v) and abs(v) < 1e18:
        return f"{int(v):,}"
    text = f"{v:,.3f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


# The runtime names units in UCUM (the meter's "By", "s", "{collection}") or in its EventCounters'
# words ("B", "MB", "%"); a person reads bytes and collections. CSV and JSON keep the runtime's.
_UNIT_WORDS = {"By": ("byte", "bytes"), "B": ("byte", "bytes"), "count": ("", ""), "1": ("", "")}


def human_unit(unit: str, value: float | None = None) -> str:
    """``By`` -> bytes, ``{collection}`` -> collections, ``{work_item}`` -> work items (singular
    after a value of 1); the rest as given."""
    unit = clean(unit)
    one = value is not None and abs(value) == 1
    if unit in _UNIT_WORDS:
        return _UNIT_WORDS[unit][0 if one else 1]
    if unit.startswith("{") and unit.endswith("}") and len(unit) > 2:
        word = unit[1:-1].replace("_", " ")
        if one or word.endswith("s"):
            return word
        return word[:-1] + "ies" if word.endswith("y") and word[-2:-1] not in "aeiou" else word + "s"
    return unit


def label(s: CounterSample) -> str:
    return clean(s.name + (f" [{s.tags}]" if s.tags else ""))


def _stamp(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


class CounterWriter:
    """Writes intervals in one of the formats; ``tty`` selects refresh-in-place for tables."""

    def __init__(self, out: TextIO, fmt: str, *, tty: bool, pid: int, interval: float) -> None:
        self.out, self.fmt, self.tty, self.pid, self.interval = out, fmt, tty, pid, interval
        self._csv_header = False

    def write(self, iv: CounterInterval) -> None:
        getattr(self, f"_{self.fmt}")(iv)
        self.out.flush()

    def _table(self, iv: CounterInterval) -> None:
        rows = sorted(iv.samples, key=lambda s: (s.name, s.tags))
        if not self.tty:
            for s in rows:
                rate = "" if s.rate is None else f"  ({number(s.rate)}/{self.interval:g}s)"
                unit = f" {human_unit(s.unit, s.value)}" if human_unit(s.unit) else ""
                self.out.write(f"{_stamp(iv.time)}  {label(s)}  {number(s.value)}{unit}{rate}\n")
            return
        width = max([len(label(s)) for s in rows] + [20])
        lines = [f"sosext counters: process {self.pid}, source {iv.source}, every {self.interval:g} s, "
                 f"{_stamp(iv.time)}   (Ctrl-C stops)", ""]
        lines.append(f"{'Counter':<{width}}  {'Value':>18}  {'Change':>14}  Unit")
        for s in rows:
            rate = "" if s.rate is None else number(s.rate)
            lines.append(f"{label(s):<{width}}  {number(s.value):>18}  {rate:>14}  {human_unit(s.unit)}")
        self.out.write("\x1b[H\x1b[J" + "\n".join(lines) + "\n")

    def _csv(self, iv: CounterInterval) -> None:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        if not self._csv_header:
            w.writerow(["timestamp", "source", "name", "tags", "unit", "value", "rate"])
            self._csv_header = True
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(iv.time)) + f".{int(iv.time * 1000) % 1000:03d}Z"
        for s in sorted(iv.samples, key=lambda s: (s.name, s.tags)):
            w.writerow([stamp, iv.source, s.name, s.tags, s.unit, "" if s.value is None else _raw(s.value), "" if s.rate is None else _raw(s.rate)])
        self.out.write(buf.getvalue())

    def _json(self, iv: CounterInterval) -> None:
        doc = {"time": round(iv.time, 3), "pid": self.pid, "source": iv.source, "counters": [
            {"name": s.name, "tags": s.tags, "unit": s.unit, "value": _raw(s.value), "rate": _raw(s.rate),
             **({"display": s.display} if s.display else {})}
            for s in sorted(iv.samples, key=lambda s: (s.name, s.tags))]}
        self.out.write(json.dumps(doc) + "\n")


def _raw(v: float | None) -> int | float | None:
    if v is None or not math.isfinite(v):
        return None
    return int(v) if v == int(v) and abs(v) < 2**63 else v
