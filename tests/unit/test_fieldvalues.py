"""Field values from raw bytes: decimal, DateTime, TimeSpan, Guid, floats, primitives.

Expected texts are what .NET prints (ToString with the invariant culture; "o" for
DateTime, "c" for TimeSpan, "D" for Guid), worked out by hand from the layouts.
"""
from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sosext.clr.typesystem.enums import EnumInfo  # noqa: E402
from sosext.formats.metadata.signatures import ElementType as ET  # noqa: E402
from sosext.clr.heap.values import (  # noqa: E402
    c_fixed,
    decode_datetime,
    decode_decimal,
    decode_guid,
    decode_primitive,
    decode_timespan,
    fixed_loses_information,
    round_trip,
    well_known_text,
)


def dec(value: int, scale: int, negative: bool = False) -> bytes:
    """System.Decimal's memory layout: int flags, uint hi32, ulong lo64."""
    flags = (scale << 16) | (0x80000000 if negative else 0)
    return struct.pack("<IIQ", flags, value >> 64, value & 0xFFFFFFFFFFFFFFFF)


@pytest.mark.parametrize("raw, text", [
    (dec(123456789, 4), "12345.6789"),
    (dec(1250, 2), "12.50"),
    (dec(5, 3, True), "-0.005"),
    (dec(0, 2), "0.00"),
    (dec(0, 0, True), "0"),
    (dec(7, 0), "7"),
    (dec((1 << 96) - 1, 0), "79228162514264337593543950335"),
    (dec((1 << 96) - 1, 28), "7.9228162514264337593543950335"),
    (dec(1, 28), "0.0000000000000000000000000001"),
])
def test_decimal(raw: bytes, text: str) -> None:
    assert decode_decimal(raw) == text
    assert well_known_text("System.Decimal", raw) == text


def test_decimal_with_bad_scale_is_reported() -> None:
    assert decode_decimal(dec(1, 29)) == "<invalid decimal>"
    assert decode_decimal(struct.pack("<IIQ", 1, 0, 1)) == "<invalid decimal>"


def dt(ticks: int, kind: int) -> bytes:
    return struct.pack("<Q", ticks | (kind << 62))


def test_datetime() -> None:
    # new DateTime(2024, 2, 29, 13, 14, 15, DateTimeKind.Utc).AddTicks(1234567)
    ticks = 638448092551234567
    assert decode_datetime(dt(ticks, 1)) == "2024-02-29T13:14:15.1234567Z"
    assert decode_datetime(dt(ticks, 0)) == "2024-02-29T13:14:15.1234567"
    assert decode_datetime(dt(ticks, 2)) == "2024-02-29T13:14:15.1234567 Local"
    assert decode_datetime(dt(0, 0)) == "0001-01-01T00:00:00.0000000"
    assert decode_datetime(dt(3155378975999999999, 1)) == "9999-12-31T23:59:59.9999999Z"
    assert decode_datetime(dt(3155378976000000000, 0)) == "<invalid DateTime>"
    assert well_known_text("System.DateTime", dt(ticks, 1)) == "2024-02-29T13:14:15.1234567Z"


@pytest.mark.parametrize("ticks, text", [
    (0, "00:00:00"),
    # new TimeSpan(1, 2, 3, 4, 5)
    (((1 * 24 + 2) * 3600 + 3 * 60 + 4) * 10_000_000 + 5 * 10_000, "1.02:03:04.0050000"),
    (-15 * 10_000_000, "-00:00:15"),
    (1, "00:00:00.0000001"),
])
def test_timespan(ticks: int, text: str) -> None:
    assert decode_timespan(struct.pack("<q", ticks)) == text


def test_guid_uses_the_mixed_endian_layout() -> None:
    # new Guid("0f8fad5b-d9cb-469f-a165-70867728950e"): int, short, short, then 8 bytes in order
    raw = struct.pack("<IHH", 0x0F8FAD5B, 0xD9CB, 0x469F) + bytes.fromhex("a16570867728950e")
    assert decode_guid(raw) == "0f8fad5b-d9cb-469f-a165-70867728950e"
    assert well_known_text("System.Guid", raw) == "0f8fad5b-d9cb-469f-a165-70867728950e"
    assert well_known_text("System.Guid", raw[:8]) is None
    assert well_known_text("SosextDebuggee.FieldPair", raw) is None


def test_floats_as_sos_prints_them_and_round_trip_text() -> None:
    f = struct.unpack("<f", struct.pack("<f", 3.25))[0]
    assert c_fixed(f) == "3.250000"
    assert c_fixed(-1234.5625) == "-1234.562500"
    assert not fixed_loses_information(-1234.5625)
    assert fixed_loses_information(1e-9)
    assert round_trip(1e-9) == "1e-09"
    tenth = struct.unpack("<f", struct.pack("<f", 0.1))[0]
    assert round_trip(tenth, single=True) == "0.1"  # not 0.10000000149011612
    assert not fixed_loses_information(tenth, single=True)
    assert round_trip(struct.unpack("<f", struct.pack("<f", 16777216.0))[0], single=True) == "16777216"
    assert c_fixed(float("nan")) == "nan" and c_fixed(float("-inf")) == "-inf"


@pytest.mark.parametrize("et, raw, value", [
    (ET.I1, b"\x9c", -100),
    (ET.U1, b"\xc8", 200),
    (ET.I2, struct.pack("<h", -30000), -30000),
    (ET.U2, struct.pack("<H", 60000), 60000),
    (ET.I4, struct.pack("<i", -2000000000), -2000000000),
    (ET.U4, struct.pack("<I", 4000000000), 4000000000),
    (ET.I8, struct.pack("<q", -9000000000000000000), -9000000000000000000),
    (ET.U8, struct.pack("<Q", 18000000000000000000), 18000000000000000000),
    (ET.I, struct.pack("<q", -2), -2),
    (ET.U, struct.pack("<Q", 0xDEADBEEF), 0xDEADBEEF),
    (ET.BOOLEAN, b"\x01", True),
    (ET.CHAR, struct.pack("<H", ord("Q")), ord("Q")),
    (ET.R8, struct.pack("<d", 0.5), 0.5),
    (ET.CLASS, struct.pack("<Q", 0x7F0012345678), 0x7F0012345678),
    (ET.PTR, struct.pack("<Q", 0x5566ED7721E0), 0x5566ED7721E0),
])
def test_primitives(et: int, raw: bytes, value) -> None:  # type: ignore[no-untyped-def]
    assert decode_primitive(et, raw) == value


def test_primitive_rejects_structs() -> None:
    with pytest.raises(ValueError):
        decode_primitive(ET.VALUETYPE, b"\0" * 8)


def test_enum_member_names() -> None:
    color = EnumInfo(((1, "Red"), (2, "Green"), (42, "Blue")), is_flags=False)
    assert color.text(42) == "Blue"
    assert color.text(3) is None
    perms = EnumInfo(((0, "None"), (1, "Read"), (2, "Write"), (4, "Exec")), is_flags=True)
    assert perms.text(5) == "Read, Exec"
    assert perms.text(0) == "None"
    assert perms.text(8) is None
    assert perms.text(7) == "Read, Write, Exec"
