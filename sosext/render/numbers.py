"""SOS's number formats, the only place sosext turns a number into text.

SOS prints pointers three ways: table columns as 12 lowercase hex digits (``%012x`` in its
managed-era tables), DML helpers and record lines as 16 lowercase digits, and raw ``%p`` as
16 uppercase digits; counts and sizes in tables take thousands separators. JSON carries
addresses as ``"0x…"`` strings (64-bit values do not survive every JSON reader as numbers)
and counts as plain numbers.
"""
from __future__ import annotations

from typing import Any

MASK64 = 0xFFFFFFFFFFFFFFFF


def pointer(v: Any) -> str:
    """A table column pointer: 12 lowercase hex digits, no prefix ("" for None)."""
    return "" if v is None else f"{int(v):012x}"


def p16(value: int) -> str:
    """A pointer as SOS's DML helpers and record lines print it: 16 lowercase hex digits."""
    return f"{value & MASK64:016x}"


def P16(value: int) -> str:  # noqa: N802 - SOS's raw %p: uppercase
    """A pointer as SOS's raw %p prints it: 16 uppercase hex digits."""
    return f"{value & MASK64:016X}"


def printf_d(value: int) -> str:
    """A 64-bit value as SOS's ``Decimal()`` prints it: handed to printf's ``%d``, so only the low
    32 bits, signed. Shows where a displacement wraps because the runtime reports no code start
    (NativeCodeAddr -1), as for some P/Invoke stubs under an InlinedCallFrame."""
    low = value & 0xFFFFFFFF
    return str(low - (1 << 32) if low & 0x80000000 else low)


def count(v: Any) -> str:
    """A count or size in a table: thousands separators ("" for None)."""
    return "" if v is None else f"{int(v):,}"


def counted(n: int, noun: str, plural: str | None = None, *, signed: bool = False) -> str:
    """``1 group``, ``2 groups``, ``+1 object``: sosext's own sentences (SOS's tables keep SOS's
    "1 objects"). ``noun`` may hold words before the counted one: ``growing object``."""
    many = plural or (noun[:-1] + "ies" if noun.endswith("y") and noun[-2:-1] not in "aeiou" else noun + "s")
    number = f"{n:+,}" if signed else f"{n:,}"
    return f"{number} {noun if abs(n) == 1 else many}"


def hex_and_dec(value: int) -> str:
    """``0x1000 (4096)`` as eeheap prints sizes."""
    return f"0x{value:x} ({value})"


def address_json(value: int | None) -> str | None:
    """An address in a JSON document: ``"0x7f3a1c000040"`` (None stays null)."""
    return None if value is None else f"0x{int(value):x}"


# -- thread ids ---------------------------------------------------------------------------
# One convention everywhere, SOS's: an OS thread id is hex. In a table column it is bare
# (clrthreads' OSID, ``%x``); inside a sentence it carries 0x ("OS Thread Id: 0x1a2b").
# The debugger's own thread number (DBG) and the managed thread id (ID) are decimal.


def os_thread_id(tid: int) -> str:
    """An OS thread id in a sentence: ``0x1a2b``."""
    return f"0x{tid:x}"


def os_thread_column(tid: int) -> str:
    """An OS thread id in a table column: ``1a2b``."""
    return f"{tid:x}"


def dotnet_fixed2(value: float, *, single: bool = False) -> str:
    """``value.ToString("0.00")`` as .NET (Core 3.0+) prints it: the number first cut to the
    significant digits .NET keeps for custom formats (15 for a double, 7 for a float), then
    rounded half away from zero to two decimals (a negative value that rounds to 0 keeps its
    sign, as .NET Core 3.0+ keeps -0's)."""
    from decimal import ROUND_HALF_UP, Decimal

    if value != value or value in (float("inf"), float("-inf")):
        return {"nan": "NaN", "inf": "∞", "-inf": "-∞"}[repr(value)]
    digits = Decimal(f"{value:.{6 if single else 14}e}")
    return f"{digits.quantize(Decimal('0.01'), rounding=ROUND_HALF_UP):f}"
