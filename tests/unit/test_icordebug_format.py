"""clrstack -i's lines for variables ICorDebug cannot give, and its argument rules (SOS's forms)."""
from __future__ import annotations

import pytest

from sosext.clr.threads.frames import FrameVariable
from sosext.clr.threads.stacks import FrameValue
from sosext.commands.base import Parsed
from sosext.commands.icordebug import retrieval_error, should_expand
from sosext.commands.threads import icordebug_arguments
from sosext.errors import UsageError


def test_a_variable_without_a_home_is_not_available() -> None:
    v = FrameVariable(0, "this", "", "unknown", FrameValue("", None, True, None))
    assert retrieval_error(v, "parameter") == "  + (Error 0x80131304 retrieving parameter 'this')"


def test_a_variable_whose_memory_cannot_be_read_is_a_read_failure() -> None:
    v = FrameVariable(2, "localBig", "long", "unknown", FrameValue("", 0x7FFC0000, False, b"", read_failed=True))
    assert retrieval_error(v, "local variable") == "  + (Error 0x80131c49 retrieving local variable 'localBig')"


def test_expansion_follows_the_named_path() -> None:
    assert should_expand("point", "point")
    assert should_expand("point.Inner.X", "point") and should_expand("point.Inner.X", "point.Inner")
    assert not should_expand("point", "point.X")  # a field of the named variable is listed, not expanded
    assert not should_expand("points", "point") and not should_expand("point", "points")
    assert not should_expand(None, "point")


def args(i: bool, variable: str | None, frame: str | None = None) -> Parsed:
    return Parsed({"i": i, "variable": variable, "frame": frame})


@pytest.mark.parametrize("words, want", [
    ((None, None), (None, None)),
    (("point", None), ("point", None)),
    (("3", None), (None, 3)),
    (("10", None), (None, 0x10)),  # alone, a number is an expression: hex, as SOS evaluates it
    (("point", "10"), ("point", 10)),  # after a name, decimal
    (("3", "5"), ("3", 5)),  # two arguments: the first is a name whatever it looks like
    (("0x3", None), ("0x3", None)),
])
def test_clrstack_i_arguments_are_read_as_sos_reads_them(words, want) -> None:  # type: ignore[no-untyped-def]
    assert icordebug_arguments(args(True, *words)) == want


def test_clrstack_arguments_need_i() -> None:
    with pytest.raises(UsageError):
        icordebug_arguments(args(False, "point"))
    with pytest.raises(UsageError):
        icordebug_arguments(args(True, "point", "x"))
