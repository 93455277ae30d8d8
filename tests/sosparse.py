"""Parse SOS-format command output back into numbers, for assertions against the truth."""
from __future__ import annotations

import re
from dataclasses import dataclass

HEX = re.compile(r"^[0-9a-f]+$")


@dataclass
class StatRow:
    mt: int
    count: int
    total: int
    name: str


def num(text: str) -> int:
    return int(text.replace(",", ""))


def stat_rows(text: str) -> dict[int, StatRow]:
    """dumpheap/objsize statistics: MT -> row."""
    rows: dict[int, StatRow] = {}
    lines = text.splitlines()
    try:
        start = next(i for i, ln in enumerate(lines) if ln.strip() == "Statistics:") + 2
    except StopIteration:
        return rows
    for ln in lines[start:]:
        if ln.startswith("Total ") or not ln.strip():
            break
        parts = ln.split(None, 3)
        rows[int(parts[0], 16)] = StatRow(int(parts[0], 16), num(parts[1]), num(parts[2]), parts[3] if len(parts) > 3 else "")
    return rows


def total_line(text: str) -> tuple[int, int] | None:
    m = re.search(r"^Total ([\d,]+) objects, ([\d,]+) bytes$", text, re.M)
    return (num(m.group(1)), num(m.group(2))) if m else None


@dataclass
class ObjRow:
    address: int
    mt: int
    size: int
    free: bool


def object_rows(text: str) -> list[ObjRow]:
    """The ``Address MT Size`` listing of dumpheap."""
    out = []
    in_table = False
    for ln in text.splitlines():
        if ln.split() == ["Address", "MT", "Size"]:
            in_table = True
            continue
        if in_table:
            parts = ln.split()
            if len(parts) < 3 or not HEX.match(parts[0]):
                if not ln.strip() or ln.strip() == "Statistics:":
                    in_table = False
                continue
            out.append(ObjRow(int(parts[0], 16), int(parts[1], 16), num(parts[2]), len(parts) > 3 and parts[3] == "Free"))
    return out


def short_addresses(text: str) -> list[int]:
    return [int(ln, 16) for ln in text.split() if HEX.match(ln)]


@dataclass
class SegRow:
    segment: int
    begin: int
    allocated: int
    committed: int
    section: str


def eeheap_segments(text: str) -> list[SegRow]:
    out = []
    section = ""
    for ln in text.splitlines():
        s = ln.strip()
        if s in ("Small object heap", "NonGC heap", "Large object heap", "Pinned object heap") or \
                s.startswith(("Large object heap starts", "Pinned object heap starts")):
            section = s.split(" starts")[0]
            continue
        parts = ln.split()
        if len(parts) >= 4 and all(HEX.match(p) for p in parts[:4]) and len(parts[0]) >= 12:
            out.append(SegRow(*(int(p, 16) for p in parts[:4]), section=section))
    return out


def eeheap_total(text: str, what: str) -> int:
    m = re.search(rf"GC {what} Heap Size:\s+Size: 0x([0-9a-f]+) \((\d+)\) bytes\.", text)
    assert m, f"no GC {what} Heap Size line in:\n{text}"
    assert int(m.group(1), 16) == int(m.group(2))
    return int(m.group(2))


_THREAD_HEADER = re.compile(r"^OS Thread Id: 0x([0-9a-f]+)\b.*$", re.M)


def thread_sections(text: str) -> dict[int, str]:
    """A per-thread output (`clrstack -all`, `dso`, ...) by OS thread id: the text after each
    `OS Thread Id: 0x…` line up to the next one (a whole id: 0x1be is not 0x1be5)."""
    parts = _THREAD_HEADER.split(text)
    return {int(parts[i], 16): parts[i + 1] for i in range(1, len(parts), 2)}


STACK_ROW = re.compile(r"^([0-9A-F]{16}) ([0-9A-Fa-f]{16}| {16}) (.*)$")  # clrstack: SP, IP, call site


def frame_block(text: str, method: str) -> list[str]:
    """clrstack: the lines after the first stack row whose call site starts with ``method(``,
    up to the blank line (or the next row)."""
    lines = text.splitlines()
    for i, ln in enumerate(lines):
        m = STACK_ROW.match(ln)
        if m and m.group(3).startswith(method + "("):
            block = []
            for nxt in lines[i + 1:]:
                if not nxt.strip() or STACK_ROW.match(nxt):
                    break
                block.append(nxt)
            return block
    raise AssertionError(f"no frame of {method} in:\n{text}")
