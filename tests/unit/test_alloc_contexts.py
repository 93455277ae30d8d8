"""The heap walk leaves out each allocation context and the space the GC reserves after its
limit (Align(min object size), written only when the context is retired), also when the
context is empty (pointer == limit). ClrMD forgets empty contexts and reads their zero header
as an object of no type (docs/sos-users.md, "The heap walk skips an empty allocation context
and an object being allocated"); a webapi core under load showed it at 0x7faafc988780, where
the next real object began 24 bytes later.

A thread moves its allocation pointer first and writes the new object's MethodTable after:
dumped in between, the object is zeros just below the pointer (a webapi core under load showed
24 such bytes at 0x7f9d049afdc0, below a context at 0x7f9d049afdd8). The walk ends its range
where those zeros begin, so they are neither an object nor corruption; SOS counts them as one
`<unknown_type_0>` and misses the next real object."""
from __future__ import annotations

from types import SimpleNamespace

from sosext.clr.heap.heap import ClrHeap


def _pieces(start: int, end: int, contexts: list[tuple[int, int]],
            words: dict[int, int] | None = None, readable: bool = True) -> list[tuple[int, int]]:
    """The pieces of a segment whose memory is zero but for ``words`` (address -> value)."""
    def read_partial(address: int, size: int) -> bytes:
        if not readable:
            return b""
        return b"".join((words or {}).get(a, 0x5A5A if words is None else 0).to_bytes(8, "little")
                        for a in range(address, address + size, 8))
    heap = object.__new__(ClrHeap)
    heap.alloc_contexts = sorted(contexts)
    heap._pieces = {}
    heap.runtime = SimpleNamespace(target=SimpleNamespace(read_partial=read_partial))
    return heap.pieces(SimpleNamespace(start=start, end=end))  # type: ignore[arg-type]


def test_an_empty_context_still_reserves_a_minimal_object() -> None:
    assert _pieces(0x1000, 0x2000, [(0x1780, 0x1780)]) == [(0x1000, 0x1780), (0x1798, 0x2000)]


def test_a_context_is_skipped_with_its_reserved_tail() -> None:
    assert _pieces(0x1000, 0x2000, [(0x1100, 0x1200), (0x1800, 0x1800)]) == \
        [(0x1000, 0x1100), (0x1218, 0x1800), (0x1818, 0x2000)]


def test_contexts_of_other_segments_are_ignored() -> None:
    assert _pieces(0x1000, 0x2000, [(0x3000, 0x3100)]) == [(0x1000, 0x2000)]


def test_an_object_being_allocated_below_the_pointer_ends_the_range() -> None:
    # A 24-byte object at 0x1100 (MethodTable, then zeros), then 24 unwritten bytes, then the pointer.
    words = {0x1100: 0x7F0000001234}
    assert _pieces(0x1000, 0x2000, [(0x1130, 0x1200)], words) == [(0x1000, 0x1108), (0x1218, 0x2000)]


def test_a_written_word_just_below_the_pointer_keeps_the_range() -> None:
    assert _pieces(0x1000, 0x2000, [(0x1130, 0x1200)], {0x1128: 1}) == [(0x1000, 0x1130), (0x1218, 0x2000)]


def test_zeros_back_to_the_range_start_leave_no_range() -> None:
    assert _pieces(0x1000, 0x2000, [(0x1030, 0x1200)], {}) == [(0x1218, 0x2000)]


def test_memory_that_cannot_be_read_keeps_the_range() -> None:
    assert _pieces(0x1000, 0x2000, [(0x1130, 0x1200)], readable=False) == [(0x1000, 0x1130), (0x1218, 0x2000)]
