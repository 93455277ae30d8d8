"""dumpheap -stat streamed through a small window equals the same statistics taken over the
whole index: per-type counts, sizes, first positions and the fragmentation list, whatever
the window size and wherever a Free block falls against a window's edge."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sosext.clr.heap.fastwalk import IndexColumns
from sosext.clr.heap.heapstats import FRAGMENT_MIN, FreeBlock, _Folder
from sosext.clr.kernels import heapwalk as hw

FREE_MT = 0x7000
MTS = [FREE_MT, 0x7100, 0x7200, 0x7300]
BASE = 0x10000000


class Heap:
    free_mt = FREE_MT

    def segment_of(self, address: int):  # no large-object segment here
        return None


class Table:
    def __init__(self) -> None:
        self.method_tables: list[int] = []


def objects(draw_kinds: list[tuple[int, bool]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Back-to-back objects: (type id, big) per object; a big Free is above FRAGMENT_MIN."""
    sizes = np.array([FRAGMENT_MIN + 8 * (i % 3) if big else 24 + 8 * t for i, (t, big) in enumerate(draw_kinds)],
                     dtype=np.uint32)
    ids = np.array([t for t, _big in draw_kinds], dtype=np.uint32)
    addresses = BASE + np.concatenate([[0], np.cumsum(sizes.astype(np.uint64))[:-1]]).astype(np.uint64)
    return addresses, ids, sizes


def expected(addresses, ids, sizes):
    counts, totals, first = hw.type_stats(ids, sizes, np.empty(0, np.bool_), len(MTS))
    blocks = [FreeBlock(int(addresses[i]), int(sizes[i]), int(addresses[i + 1]), MTS[int(ids[i + 1])])
              for i in hw.free_blocks(addresses, ids, sizes, np.empty(0, np.bool_), 0, FRAGMENT_MIN).tolist()]
    return counts, totals, first, blocks


def streamed(addresses, ids, sizes, window: int):
    fold, table = _Folder(Heap()), Table()
    cols = IndexColumns(np.zeros(window, np.uint64), np.zeros(window, np.uint32), np.zeros(window, np.uint32))
    for start in range(0, len(ids), window):
        stop = min(start + window, len(ids))
        for t in ids[start:stop].tolist():  # the walk learns types in the order it meets them
            if MTS[t] not in table.method_tables:
                table.method_tables.append(MTS[t])
        n = stop - start
        cols.addresses[:n], cols.type_ids[:n], cols.sizes[:n] = addresses[start:stop], ids[start:stop], sizes[start:stop]
        # The walk's ids are in meeting order: translate ours to it for the window.
        cols.type_ids[:n] = [table.method_tables.index(MTS[t]) for t in ids[start:stop].tolist()]
        cols.count = n
        fold(cols, table, {})
        assert cols.count == 0
    order = [table.method_tables.index(mt) if mt in table.method_tables else None for mt in MTS]
    pick = lambda a, empty: np.array([a[k] if k is not None else empty for k in order], dtype=np.int64)  # noqa: E731
    return pick(fold.counts, 0), pick(fold.totals, 0), pick(fold.first, -1), fold.blocks


kinds = st.lists(st.one_of(st.tuples(st.integers(1, 3), st.just(False)),
                           st.tuples(st.just(0), st.booleans())), min_size=1, max_size=60)


@settings(max_examples=300, deadline=None)
@given(kinds, st.integers(1, 9))
def test_any_window_gives_the_whole_index_answer(kinds_list, window) -> None:
    addresses, ids, sizes = objects(kinds_list)
    want_counts, want_totals, want_first, want_blocks = expected(addresses, ids, sizes)
    counts, totals, first, blocks = streamed(addresses, ids, sizes, window)
    assert counts.tolist() == want_counts.tolist()
    assert totals.tolist() == want_totals.tolist()
    assert first.tolist() == want_first.tolist()
    assert blocks == want_blocks


def test_a_big_free_block_at_a_window_edge_is_listed_once() -> None:
    addresses, ids, sizes = objects([(1, False), (0, True), (2, False), (0, True), (0, False), (3, False)])
    _c, _t, _f, want = expected(addresses, ids, sizes)
    assert [b.address for b in want] == [int(addresses[1])]  # a Free followed by a Free is not listed
    for window in (1, 2, 3):
        assert streamed(addresses, ids, sizes, window)[3] == want
