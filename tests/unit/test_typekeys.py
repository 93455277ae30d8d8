"""The three spellings of a type's name (clr/typesystem/typekeys.py): the runtime's, a gcdump's events' and
C#'s; the key that pairs a core's type with a snapshot's; and names of members in C#'s spelling.

The spellings here are the ones the runtime wrote for the bundled service's types (the DAC's and
the BulkType events' names of Dictionary<string, CacheEntry>'s entry array, as tests/test_gcdump.py
reads them from a real process); ClrMD's C# forms are held to ClrMD itself in test_typenames.py.
"""
from __future__ import annotations

import pytest

from sosext.clr.typesystem.typekeys import event_name, key, name_contains, named, shown_name, spellings
from sosext.clr.typesystem.typenames import csharp_member_name, csharp_name

RUNTIME = ("System.Collections.Generic.Dictionary`2+Entry[[System.String, System.Private.CoreLib],"
           "[LeakyService.CacheEntry, LeakyService]][]")
EVENTS = "Entry[System.String,LeakyService.CacheEntry][]"
CSHARP = "System.Collections.Generic.Dictionary<System.String, LeakyService.CacheEntry>+Entry[]"


def test_the_events_spelling_of_a_runtime_name() -> None:
    assert event_name(RUNTIME) == EVENTS
    assert event_name("System.Collections.Generic.List`1[[System.Int32, System.Private.CoreLib]]") == \
        "System.Collections.Generic.List`1[System.Int32]"
    assert event_name("System.String") == "System.String"


@pytest.mark.parametrize("name", [RUNTIME, EVENTS, CSHARP])
def test_every_spelling_has_one_key(name: str) -> None:
    assert key(name) == "Entry<System.String, LeakyService.CacheEntry>[]"


@pytest.mark.parametrize("runtime, events", [
    ("System.Collections.Generic.List`1[[System.Int32, System.Private.CoreLib]]",
     "System.Collections.Generic.List`1[System.Int32]"),
    ("A.Outer`1+Inner`1[[System.Int32, a],[System.String, b]]", "Inner`1[System.Int32,System.String]"),
    ("N.Program+<>c", "<>c"), ("<PrivateImplementationDetails>", "<PrivateImplementationDetails>"),
    ("System.Int32[,]", "System.Int32[,]"), ("Free", "Free"),
])
def test_a_core_and_a_snapshot_name_pair_up(runtime: str, events: str) -> None:
    assert key(runtime) == key(events) == key(csharp_name(runtime))
    assert "`" not in key(runtime)


def test_a_snapshot_shows_its_names_in_csharps_spelling() -> None:
    assert shown_name(EVENTS) == "Entry<System.String, LeakyService.CacheEntry>[]"
    assert shown_name("Inner`1[System.Int32,System.String]") == "Inner<System.Int32, System.String>"
    assert shown_name("System.Collections.Generic.List`1[System.Int32][]") == "System.Collections.Generic.List<System.Int32>[]"
    assert shown_name(RUNTIME) == CSHARP


def test_csharp_name_is_idempotent_on_its_own_output() -> None:
    for name in (RUNTIME, EVENTS, "System.Collections.Generic.List`1[[System.String, System.Private.CoreLib]][][,]",
                 "A`2[[B+C, b],[System.ValueTuple`2[[D, d],[E, e]], f]]", "N.Program+<>c", "System.Int32[,]"):
        once = csharp_name(name)
        assert csharp_name(once) == once, name


def test_spellings_match_a_type_by_any_of_them() -> None:
    assert spellings(RUNTIME) == (CSHARP, RUNTIME, EVENTS)
    for text in (CSHARP, RUNTIME, EVENTS):
        assert named(text, RUNTIME)
    assert not named("Entry[]", RUNTIME)
    for part in ("Dictionary<System.String, LeakyService", "Dictionary`2+Entry", "Entry[System.String,Leaky"):
        assert name_contains(part, RUNTIME)


@pytest.mark.parametrize("dac, shown", [
    ("System.ConsolePal.Read(Microsoft.Win32.SafeHandles.SafeFileHandle, System.Span`1<Byte>)",
     "System.ConsolePal.Read(Microsoft.Win32.SafeHandles.SafeFileHandle, System.Span<Byte>)"),
    ("System.Collections.Generic.List`1[[System.Int32, System.Private.CoreLib]].Add(Int32)",
     "System.Collections.Generic.List<System.Int32>.Add(Int32)"),
    ("System.Object..ctor()", "System.Object..ctor()"),
    ("LeakyService.Program.s_worker", "LeakyService.Program.s_worker"),
    ("N.Holder`1[[System.Int32, System.Private.CoreLib]].s_items", "N.Holder<System.Int32>.s_items"),
    ("N.C.<Main>b__0_0(System.String[])", "N.C.<Main>b__0_0(System.String[])"),
])
def test_member_names_in_csharps_spelling(dac: str, shown: str) -> None:
    assert csharp_member_name(dac) == shown
