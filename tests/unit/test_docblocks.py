"""tests/docblocks.py: a doc's example matches a run whose OS thread ids differ, and only then."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from docblocks import match  # noqa: E402


def test_pstacks_thread_lists_match_whatever_the_ids_look_like() -> None:
    # CI's PIDs are small: three-digit ids ("708,709") once read as one grouped decimal.
    doc = ["   ~~~~ 42cf,42d0", "      2 DebuggeeHost.X.ParkB(Int32)", " ~~~~ 42be"]
    for run in (["   ~~~~ 708,709", "      2 DebuggeeHost.X.ParkB(Int32)", " ~~~~ 6fb"],
                ["   ~~~~ abc,abd", "      2 DebuggeeHost.X.ParkB(Int32)", " ~~~~ 1234567"]):
        assert match(doc, run) is not None, run


def test_pstacks_lines_still_differ_where_the_stacks_do() -> None:
    doc = ["   ~~~~ 42cf,42d0", "      2 DebuggeeHost.X.ParkB(Int32)"]
    assert match(doc, ["   ~~~~ 708,709", "      2 DebuggeeHost.X.ParkA(Int32)"]) is None
    assert match(doc, ["   ~~~~ 708,709 extra", "      2 DebuggeeHost.X.ParkB(Int32)"]) is None


def test_syncblk_owner_thread_ids_match_with_or_without_a_digit() -> None:
    row = "    3 000055C80FCB5E98            3         2 000055C80FC93350 {}   9   00007f3d198111f8 X.Lock"
    assert match([row.format("2a05")], [row.format("fde")]) is not None
    assert match([row.format("2a05")], [row.format("6fb").replace("   9 ", "   9 extra ")]) is None


def test_the_thread_of_a_managed_exception_matches_with_or_without_a_digit() -> None:
    assert match(["Found managed exception on thread 40e7"], ["Found managed exception on thread adf"]) is not None
    assert match(["Found managed exception on thread 40e7"], ["Found managed exception in thread adf"]) is None
