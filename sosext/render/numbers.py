"""SOS's number formats.

Managed-era commands (dumpheap, gcroot, eeheap ...) print pointers as lowercase hex
without 0x and counts with thousands separators; native-era commands (dumpobj, dumpmt ...)
print pointers zero-padded to 16 digits.
"""
from __future__ import annotations


def hexptr(value: int) -> str:
    """Lowercase hex, no 0x, no padding: ``7ff92c91aa68``."""
    return f"{value:x}"


def ptr16(value: int) -> str:
    """Zero-padded 16-digit hex: ``00007f12345678a0``."""
    return f"{value:016x}"


def count(value: int) -> str:
    """Thousands separators: ``8,184``."""
    return f"{value:,}"


def hex_and_dec(value: int) -> str:
    """``0x1000 (4096)`` as eeheap prints sizes."""
    return f"0x{value:x} ({value})"
