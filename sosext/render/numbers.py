"""SOS's number formats that are not table columns (see render/table.py for those)."""
from __future__ import annotations


def hex_and_dec(value: int) -> str:
    """``0x1000 (4096)`` as eeheap prints sizes."""
    return f"0x{value:x} ({value})"
