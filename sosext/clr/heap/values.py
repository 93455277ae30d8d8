"""Field values from raw bytes: primitives by CorElementType, and the BCL structs people
want to read at a glance (decimal, DateTime, TimeSpan, Guid).

Pure functions over bytes (little-endian, 64-bit targets), so they are unit-testable
without a process. The layouts are those of .NET Core's System.Private.CoreLib.
"""
from __future__ import annotations

import struct
import uuid
from datetime import date, timedelta
from typing import Callable

from ...formats.metadata.signatures import ElementType as ET

POINTER_SIZE = 8

# Bytes a field of each element type takes (references and pointers: a pointer).
ELEMENT_SIZES: dict[int, int] = {
    ET.BOOLEAN: 1, ET.CHAR: 2, ET.I1: 1, ET.U1: 1, ET.I2: 2, ET.U2: 2, ET.I4: 4, ET.U4: 4,
    ET.I8: 8, ET.U8: 8, ET.R4: 4, ET.R8: 8, ET.I: POINTER_SIZE, ET.U: POINTER_SIZE,
    ET.PTR: POINTER_SIZE, ET.FNPTR: POINTER_SIZE, ET.BYREF: POINTER_SIZE, ET.STRING: POINTER_SIZE,
    ET.CLASS: POINTER_SIZE, ET.OBJECT: POINTER_SIZE, ET.SZARRAY: POINTER_SIZE, ET.ARRAY: POINTER_SIZE,
    ET.GENERICINST: POINTER_SIZE, ET.VAR: POINTER_SIZE, ET.MVAR: POINTER_SIZE,
}
_INT_FORMATS = {ET.I1: "<b", ET.U1: "<B", ET.I2: "<h", ET.U2: "<H", ET.I4: "<i", ET.U4: "<I",
                ET.I8: "<q", ET.U8: "<Q", ET.I: "<q", ET.U: "<Q"}
REFERENCE_TYPES = frozenset({ET.STRING, ET.CLASS, ET.OBJECT, ET.SZARRAY, ET.ARRAY, ET.GENERICINST,
                             ET.VAR, ET.MVAR})


def is_reference(element_type: int) -> bool:
    return element_type in REFERENCE_TYPES


def decode_primitive(element_type: int, raw: bytes) -> int | float | bool:
    """The value of a primitive, pointer or reference field (references: the address)."""
    et = element_type
    if et == ET.BOOLEAN:
        return raw[0] != 0
    if et == ET.CHAR:
        return struct.unpack_from("<H", raw)[0]
    if et == ET.R4:
        return struct.unpack_from("<f", raw)[0]
    if et == ET.R8:
        return struct.unpack_from("<d", raw)[0]
    fmt = _INT_FORMATS.get(et)
    if fmt is not None:
        return struct.unpack_from(fmt, raw)[0]
    if et in ELEMENT_SIZES:
        return struct.unpack_from("<Q", raw)[0]
    raise ValueError(f"element type {et:#x} is not a primitive")


# -- floating point ---------------------------------------------------------------------


def c_fixed(value: float) -> str:
    """C's ``%f`` (what SOS prints for float and double fields)."""
    if value != value:
        return "nan"
    if value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    return f"{value:f}"


def round_trip(value: float, single: bool = False) -> str:
    """The shortest text that reads back as the same float/double (.NET's "R")."""
    if value != value or value in (float("inf"), float("-inf")):
        return c_fixed(value)
    if not single:
        return repr(value)
    want = struct.pack("<f", value)
    for digits in range(1, 10):
        text = f"{value:.{digits}g}"
        if struct.pack("<f", float(text)) == want:
            return _plain_float(text)
    return repr(value)


def _plain_float(text: str) -> str:
    """'%g' output without a redundant exponent for ordinary magnitudes (2.5e+01 -> 25)."""
    if "e" not in text:
        return text
    v = float(text)
    return repr(v) if 1e-5 <= abs(v) < 1e16 else text


def fixed_loses_information(value: float, single: bool = False) -> bool:
    """Whether ``%f`` of this value reads back as a different value (1e-9, 1.2345678e20 ...)."""
    if value != value or value in (float("inf"), float("-inf")):
        return False
    back = float(c_fixed(value))
    if single:
        return struct.pack("<f", back) != struct.pack("<f", value)
    return back != value


# -- System.Decimal -----------------------------------------------------------------------


def decode_decimal(raw: bytes) -> str:
    """System.Decimal (int _flags, uint _hi32, ulong _lo64) as .NET prints it invariantly:
    every digit of the scale kept (``12.50``), no exponent."""
    if len(raw) < 16:
        raise ValueError("a decimal is 16 bytes")
    flags, hi, lo = struct.unpack_from("<iIQ", raw)
    scale = (flags >> 16) & 0xFF
    negative = flags < 0
    if scale > 28 or flags & 0x7F00FFFF:
        return "<invalid decimal>"
    digits = str((hi << 64) | lo)
    if scale:
        digits = digits.rjust(scale + 1, "0")
        digits = f"{digits[:-scale]}.{digits[-scale:]}"
    if negative and ((hi << 64) | lo):
        digits = "-" + digits
    return digits


# -- System.DateTime and System.TimeSpan ----------------------------------------------------

TICKS_PER_SECOND = 10_000_000
TICKS_PER_DAY = 86_400 * TICKS_PER_SECOND
MAX_DATETIME_TICKS = 3_155_378_975_999_999_999  # 9999-12-31T23:59:59.9999999
_KINDS = ("", "Z", " Local", " Local")


def decode_datetime(raw: bytes) -> str:
    """System.DateTime (ulong _dateData: 62 bits of ticks, 2 bits of kind) in the round-trip
    ("o") shape: ``2024-02-29T13:14:15.1234567Z`` for UTC, no suffix for Unspecified, and
    `` Local`` for local times (whose offset the target does not record)."""
    (data,) = struct.unpack_from("<Q", raw)
    ticks = data & 0x3FFF_FFFF_FFFF_FFFF
    kind = data >> 62
    if ticks > MAX_DATETIME_TICKS:
        return "<invalid DateTime>"
    days, rest = divmod(ticks, TICKS_PER_DAY)
    d = date(1, 1, 1) + timedelta(days=days)
    seconds, fraction = divmod(rest, TICKS_PER_SECOND)
    hh, rem = divmod(seconds, 3600)
    mm, ss = divmod(rem, 60)
    return f"{d.year:04d}-{d.month:02d}-{d.day:02d}T{hh:02d}:{mm:02d}:{ss:02d}.{fraction:07d}{_KINDS[kind]}"


def decode_timespan(raw: bytes) -> str:
    """System.TimeSpan (long _ticks) in the constant ("c") shape: ``[-][d.]hh:mm:ss[.fffffff]``."""
    (ticks,) = struct.unpack_from("<q", raw)
    sign = "-" if ticks < 0 else ""
    t = -ticks if ticks < 0 else ticks
    days, rest = divmod(t, TICKS_PER_DAY)
    seconds, fraction = divmod(rest, TICKS_PER_SECOND)
    hh, rem = divmod(seconds, 3600)
    mm, ss = divmod(rem, 60)
    text = f"{sign}{f'{days}.' if days else ''}{hh:02d}:{mm:02d}:{ss:02d}"
    return text + (f".{fraction:07d}" if fraction else "")


# -- System.Guid --------------------------------------------------------------------------------


def decode_guid(raw: bytes) -> str:
    """System.Guid (int, short, short, 8 bytes) as ``0f8fad5b-d9cb-469f-a165-70867728950e``."""
    return str(uuid.UUID(bytes_le=bytes(raw[:16])))


# Value types shown readably: type name -> (bytes, decoder).
WELL_KNOWN: dict[str, tuple[int, Callable[[bytes], str]]] = {
    "System.Decimal": (16, decode_decimal),
    "System.DateTime": (8, decode_datetime),
    "System.TimeSpan": (8, decode_timespan),
    "System.Guid": (16, decode_guid),
}


def well_known_size(type_name: str) -> int | None:
    entry = WELL_KNOWN.get(type_name)
    return entry[0] if entry else None


def well_known_text(type_name: str, raw: bytes) -> str | None:
    """Readable text of a decimal/DateTime/TimeSpan/Guid value; None for other types."""
    entry = WELL_KNOWN.get(type_name)
    if entry is None or len(raw) < entry[0]:
        return None
    return entry[1](bytes(raw[:entry[0]]))
