"""The heap walk leaves out each allocation context and the space the GC reserves after its
limit (Align(min object size), written only when the context is retired), also when the
context is empty (pointer == limit). ClrMD forgets empty contexts and reads their zero header
as an object of no type (docs/sos-users.md, "The heap walk skips an empty allocation context");
a webapi core under load showed it at 0x7faafc988780, where the next real object began 24
bytes later."""
from __future__ import annotations

from types import SimpleNamespace

from sosext.clr.heap.heap import ClrHeap


def _pieces(start: int, end: int, contexts: list[tuple[int, int]]) -> list[tuple[int, int]]:
    heap = object.__new__(ClrHeap)
    heap.alloc_contexts = sorted(contexts)
    return heap.pieces(SimpleNamespace(start=start, end=end))  # type: ignore[arg-type]


def test_an_empty_context_still_reserves_a_minimal_object() -> None:
    assert _pieces(0x1000, 0x2000, [(0x1780, 0x1780)]) == [(0x1000, 0x1780), (0x1798, 0x2000)]


def test_a_context_is_skipped_with_its_reserved_tail() -> None:
    assert _pieces(0x1000, 0x2000, [(0x1100, 0x1200), (0x1800, 0x1800)]) == \
        [(0x1000, 0x1100), (0x1218, 0x1800), (0x1818, 0x2000)]


def test_contexts_of_other_segments_are_ignored() -> None:
    assert _pieces(0x1000, 0x2000, [(0x3000, 0x3100)]) == [(0x1000, 0x2000)]
