"""The compiled kernels on fabricated memory: each answer is checked against a small
reference written independently here, and the compiled form against the same source run
as plain Python (``registry.KERNELS[name].function``)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sosext.clr import kernels
from sosext.clr.heap.gcdesc import GCDesc
from sosext.clr.kernels import heapwalk as hw
from sosext.clr.kernels import refs
from sosext.clr.kernels.registry import KERNELS

FREE_MT, NODE_MT, ARRAY_MT, STRUCTS_MT, BAD_MT = 0x7000, 0x7100, 0x7200, 0x7300, 0x7400
BASE = 0x10000000


def plain(name: str):  # the kernel's source, interpreted
    return KERNELS[name].function


class Table:
    """MethodTable facts as the walk kernel wants them (a tiny open-addressing table)."""

    def __init__(self, types: dict[int, tuple[int, int]]) -> None:
        from sosext.clr.heap.fastwalk import MethodTableTable
        self.t = MethodTableTable(lambda mt: types.get(mt))
        for mt in types:
            self.t.learn(mt)

    def walk(self, words, first, stop, cap=1000, fn=None):
        fn = fn or hw.walk
        out_a = np.zeros(cap, np.uint64)
        out_t = np.zeros(cap, np.uint32)
        out_s = np.zeros(cap, np.uint32)
        with np.errstate(over="ignore"):  # the interpreted form hashes with wrapping u64 arithmetic
            i, n, status = fn(words, first, stop, np.uint64(BASE), self.t.keys, self.t.values,
                              self.t.base_sizes, self.t.component_sizes, out_a, out_t, out_s, 0)
        mts = [self.t.method_tables[x] for x in out_t[:n]]
        return int(i), int(n), int(status), out_a[:n].tolist(), mts, out_s[:n].tolist()


TYPES = {FREE_MT: (24, 1), NODE_MT: (32, 0), ARRAY_MT: (24, 8), STRUCTS_MT: (24, 16)}


def heap_words(objects: list[tuple[int, int]]) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
    """Lay out (MethodTable, element count) objects back to back; also the expected
    (address, MethodTable, SOS size) of each."""
    words: list[int] = []
    expected = []
    for mt, count in objects:
        base, comp = TYPES[mt]
        size = base + comp * count
        expected.append((BASE + 8 * len(words), mt, max(size, 24)))
        nwords = (size + 7) // 8
        obj = [0] * nwords
        obj[0] = mt
        if comp:
            obj[1] = count
        words.extend(obj)
    return np.array(words, dtype=np.uint64), expected


def test_walk_objects_arrays_and_free_space() -> None:
    objs = [(NODE_MT, 0), (ARRAY_MT, 3), (FREE_MT, 77), (NODE_MT, 0), (STRUCTS_MT, 2), (ARRAY_MT, 0)]
    words, expected = heap_words(objs)
    i, n, status, addrs, mts, sizes = Table(TYPES).walk(words, 0, len(words))
    assert status == hw.DONE and i == len(words) and n == len(objs)
    assert list(zip(addrs, mts, sizes)) == expected


def test_walk_stops_at_a_region_end_and_resumes() -> None:
    words, expected = heap_words([(NODE_MT, 0)] * 10)
    table = Table(TYPES)
    i, n, status, addrs, _m, _s = table.walk(words, 0, 16)  # the limit cuts after 4 objects
    assert (status, n, i) == (hw.DONE, 4, 16)
    _i, n2, _st, addrs2, _m, _s = table.walk(words, i, len(words))
    assert addrs + addrs2 == [a for a, _mt, _sz in expected]


def test_walk_reports_unknown_and_invalid_headers_where_they_are() -> None:
    words, _ = heap_words([(NODE_MT, 0), (NODE_MT, 0)])
    words = np.concatenate([words, np.array([0x9999, 0, 0, 0], np.uint64)])
    table = Table(TYPES)
    i, n, status, *_ = table.walk(words, 0, len(words))
    assert (status, n, i) == (hw.UNKNOWN, 2, 8)
    assert table.t.learn(0x9999) == -1  # the resolver says: not a MethodTable
    i, n, status, *_ = table.walk(words, 0, len(words))
    assert (status, n, i) == (hw.INVALID, 2, 8)
    i, n, status, *_ = table.walk(np.zeros(4, np.uint64), 0, 4)  # a zero header is never an object
    assert (status, n, i) == (hw.UNKNOWN, 0, 0)


def test_walk_array_cut_off_by_the_buffer_is_invalid_not_a_read_past_it() -> None:
    words = np.array([ARRAY_MT], dtype=np.uint64)  # no room for the length word
    _i, n, status, *_ = Table(TYPES).walk(words, 0, 1)
    assert (status, n) == (hw.INVALID, 0)


def test_walk_fills_its_output_then_says_full() -> None:
    words, _ = heap_words([(NODE_MT, 0)] * 5)
    i, n, status, *_ = Table(TYPES).walk(words, 0, len(words), cap=3)
    assert (status, n, i) == (hw.FULL, 3, 12)


def test_walk_of_an_empty_range() -> None:
    assert Table(TYPES).walk(np.zeros(0, np.uint64), 0, 0)[:3] == (0, 0, hw.DONE)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(sorted(TYPES)), st.integers(0, 40)), max_size=60))
def test_walk_compiled_equals_interpreted(objs) -> None:
    words, expected = heap_words(objs)
    table = Table(TYPES)
    got = table.walk(words, 0, len(words))
    assert got == table.walk(words, 0, len(words), fn=plain("walk"))
    assert list(zip(got[3], got[4], got[5])) == expected


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(24, 5000), st.booleans()), max_size=80))
def test_type_statistics_and_free_blocks(rows) -> None:
    tids = np.array([r[0] for r in rows], np.uint32)
    sizes = np.array([r[1] for r in rows], np.uint32)
    mask = np.array([r[2] for r in rows], np.bool_)
    addrs = np.cumsum(np.concatenate([[BASE], (sizes.astype(np.uint64) + 7) // 8 * 8]))[:-1].astype(np.uint64)
    for m in (np.empty(0, np.bool_), mask):
        counts, totals, first = hw.type_stats(tids, sizes, m, 6)
        keep = range(len(rows)) if m.size == 0 else [i for i in range(len(rows)) if m[i]]
        for t in range(6):
            mine = [i for i in keep if tids[i] == t]
            assert counts[t] == len(mine) and totals[t] == sum(int(sizes[i]) for i in mine)
            assert first[t] == (mine[0] if mine else -1)
        free = hw.free_blocks(addrs, tids, sizes, m, 0, 1000).tolist()
        kept = list(keep)
        want = [a for a, b in zip(kept, kept[1:]) if tids[a] == 0 and sizes[a] >= 1000 and tids[b] != 0
                and int(addrs[a]) + (int(sizes[a]) + 7) // 8 * 8 == int(addrs[b])]
        assert free == want
        assert free == hw.NUMPY_FORMS["free_blocks"](addrs, tids, sizes, m, 0, 1000).tolist()
        for a, b in zip(hw.type_stats(tids, sizes, m, 6), hw.NUMPY_FORMS["type_stats"](tids, sizes, m, 6)):
            assert a.tolist() == b.tolist()


def test_check_index_rejects_disorder_and_wild_type_ids() -> None:
    a = np.array([8, 16, 40], np.uint64)
    assert hw.check_index(a, np.array([0, 1, 2], np.uint32), 3)
    assert not hw.check_index(a, np.array([0, 3, 2], np.uint32), 3)
    assert not hw.check_index(np.array([8, 8, 40], np.uint64), np.array([0, 0, 0], np.uint32), 1)


# -- references ------------------------------------------------------------------------------

class FakeHeap:
    """Two segments of objects with references, and what kernels need to know about them."""

    def __init__(self, layout: list[list[tuple[int, int, list[int]]]]) -> None:
        """layout: per segment, objects as (MethodTable, element count, referenced object ordinals)."""
        self.descs = {NODE_MT: GCDesc(series=((8, 16 - 32),)),  # two fields at 8 and 16
                      ARRAY_MT: GCDesc(series=((16, -24),)),  # object[]: elements from 16
                      STRUCTS_MT: GCDesc(repeat_start=16, repeat=((1, 8),))}  # {ref, long}[]
        self.segments = []
        self.addresses: list[int] = []
        self.mts: list[int] = []
        flat = [o for seg in layout for o in seg]
        # addresses first, so references can name objects of either segment
        pos = []
        seg_base = BASE
        for seg in layout:
            at = seg_base
            for mt, count, _r in seg:
                base, comp = TYPES[mt]
                pos.append(at)
                at += (base + comp * count + 7) // 8 * 8
            self.segments.append((seg_base, at))
            seg_base = (at + 0xFFFF) & ~0xFFFF
            seg_base += 0x100000
        self.words = {}
        k = 0
        for (lo, hi), seg in zip(self.segments, layout):
            w = np.zeros((hi - lo) // 8, np.uint64)
            for mt, count, targets in seg:
                off = (pos[k] - lo) // 8
                w[off] = mt
                base, comp = TYPES[mt]
                if comp:
                    w[off + 1] = count
                slots = [o // 8 for o in self.descs[mt].offsets(base + comp * count)] if mt in self.descs else []
                for s, tgt in zip(slots, targets):
                    w[off + s] = pos[tgt]
                k += 1
            self.words[lo] = w
        self.pos = pos
        self.flat = flat

    def expected_edges(self) -> list[list[int]]:
        out = []
        for mt, count, targets in self.flat:
            base, comp = TYPES[mt]
            nslots = len(self.descs[mt].offsets(base + comp * count)) if mt in self.descs else 0
            out.append(list(targets[:nslots]))
        return out


def build(fh: FakeHeap):
    from sosext.clr.heap.index import SegmentSlice
    from sosext.clr.roots.refscan import ObjectLookup
    addresses = np.array(fh.pos, np.uint64)
    mts = sorted({mt for mt, _c, _t in fh.flat} | {NODE_MT})
    tids = np.array([mts.index(mt) for mt, _c, _t in fh.flat], np.uint32)

    class Seg:
        def __init__(self, lo, hi):
            self.start, self.end = lo, hi
    slices, k = [], 0
    for (lo, hi), w in zip(fh.segments, fh.words.values()):
        n = sum(1 for p in fh.pos if lo <= p < hi)
        slices.append(SegmentSlice(Seg(lo, hi), k, k + n))
        k += n

    class Ix:
        pass
    ix = Ix()
    ix.addresses, ix.slices = addresses, slices
    lookup = ObjectLookup(ix)
    n = len(mts)
    lay = dict(base=np.zeros(n, np.int64), comp=np.zeros(n, np.int64), kind=np.zeros(n, np.int8),
               sf=np.zeros(n, np.int64), sc=np.zeros(n, np.int64), rs=np.zeros(n, np.int64),
               rf=np.zeros(n, np.int64), ri=np.zeros(n, np.int64))
    so, ss, rc, rk = [], [], [], []
    for t, mt in enumerate(mts):
        lay["base"][t], lay["comp"][t] = TYPES[mt]
        d = fh.descs.get(mt)
        if d is None:
            continue
        if d.is_repeating:
            lay["kind"][t], lay["rs"][t], lay["rf"][t], lay["ri"][t] = 2, d.repeat_start, len(rc), len(d.repeat)
            for c, s in d.repeat:
                rc.append(c)
                rk.append(s)
        else:
            lay["kind"][t], lay["sf"][t], lay["sc"][t] = 1, len(so), len(d.series)
            for o, s in d.series:
                so.append(o)
                ss.append(s)
    arrays = (lay["base"], lay["comp"], lay["kind"], lay["sf"], lay["sc"], np.array(so, np.int64),
              np.array(ss, np.int64), lay["rs"], lay["rf"], lay["ri"], np.array(rc, np.int64), np.array(rk, np.int64))
    return addresses, tids, arrays, lookup


def scan_all(fh: FakeHeap, fn=None, cap=1 << 12):
    fn = fn or refs.scan
    addresses, tids, arrays, lookup = build(fh)
    offsets = np.zeros(len(addresses) + 1, np.int64)
    targets = np.zeros(cap, np.uint32)
    e = 0
    for sl, (lo, _hi) in zip(lookup_slices(fh), fh.segments):
        first, stop = sl
        p = first
        while p < stop:
            p, e, status = fn(fh.words[lo], np.uint64(lo), p, stop, addresses, tids, *arrays,
                              *lookup.arrays, offsets, targets, e)
            if status == refs.FULL:
                targets = np.concatenate([targets, np.zeros(len(targets), np.uint32)])
    return offsets, targets[:e], lookup


def lookup_slices(fh: FakeHeap):
    out, k = [], 0
    for lo, hi in fh.segments:
        n = sum(1 for p in fh.pos if lo <= p < hi)
        out.append((k, k + n))
        k += n
    return out


LAYOUT = [
    [(NODE_MT, 0, [1, 5]), (ARRAY_MT, 3, [0, 2, 4]), (FREE_MT, 40, []), (NODE_MT, 0, [3, 3])],
    [(STRUCTS_MT, 3, [0, 1, 6]), (NODE_MT, 0, []), (ARRAY_MT, 0, []), (NODE_MT, 0, [4, 0])],
]


def test_scan_follows_series_arrays_and_value_type_arrays_across_segments() -> None:
    fh = FakeHeap(LAYOUT)
    offsets, targets, _ = scan_all(fh)
    got = [targets[offsets[i]:offsets[i + 1]].tolist() for i in range(len(fh.pos))]
    assert got == fh.expected_edges()
    # growing the edge array mid-object re-scans that object, never losing or doubling an edge
    offsets2, targets2, _ = scan_all(fh, cap=2)
    assert offsets2.tolist() == offsets.tolist() and targets2.tolist() == targets.tolist()
    offsets3, targets3, _ = scan_all(fh, fn=plain("scan"))
    assert targets3.tolist() == targets.tolist()


def test_lookup_finds_only_object_starts() -> None:
    fh = FakeHeap(LAYOUT)
    _o, _t, lookup = scan_all(fh)
    for i, a in enumerate(fh.pos):
        assert lookup.find(a) == i
        assert lookup.find(a + 8) in (-1, i + 1)  # inside an object (or the next one's start)
        assert lookup.find(a + 1) == -1
    assert lookup.find(0) == -1 and lookup.find(BASE - 8) == -1 and lookup.find((1 << 64) - 8) == -1
    assert lookup.find(fh.segments[0][1] + 8) == -1  # between segments


def random_graph(n: int, edges: list[tuple[int, int]]):
    rows = [[] for _ in range(n)]
    for a, b in edges:
        rows[a % n].append(b % n)
    offsets = np.zeros(n + 1, np.int64)
    offsets[1:] = np.cumsum([len(r) for r in rows])
    targets = np.array([x for r in rows for x in r], np.uint32)
    return rows, offsets, targets


graphs = st.integers(1, 40).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=120)))


@settings(max_examples=80, deadline=None)
@given(graphs, st.data())
def test_reverse_mark_and_ancestor_search(g, data) -> None:
    n, edges = g
    rows, offsets, targets = random_graph(n, edges)
    roff = np.zeros(n + 1, np.int64)
    sources = np.zeros(len(targets), np.uint32)
    refs.reverse(offsets, targets, roff, sources)
    for v in range(n):
        assert sorted(sources[roff[v]:roff[v + 1]].tolist()) == sorted(p for p in range(n) for c in rows[p] if c == v)
    roots = np.array(data.draw(st.lists(st.integers(0, n - 1), max_size=4)), np.int64)
    seen = np.zeros(n, np.bool_)
    refs.mark(offsets, targets, roots, seen, np.zeros(n, np.int32))
    reach, todo = set(roots.tolist()), list(roots.tolist())
    while todo:
        for c in rows[todo.pop()]:
            if c not in reach:
                reach.add(c)
                todo.append(c)
    assert set(np.nonzero(seen)[0].tolist()) == reach
    target = data.draw(st.integers(0, n - 1))
    dep = sorted(data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3)))
    nxt, stamp = np.zeros(n, np.int32), np.zeros(n, np.int32)
    via = np.zeros(n, np.bool_)
    count = refs.ancestors(roff, sources, np.array([s for s, _p in dep], np.int64),
                           np.array([p for _s, p in dep], np.int64), target, nxt, stamp, 7, np.zeros(n, np.int32), via)
    # Independently: breadth-first distances to the target over edges + dependent edges.
    dist = {target: 0}
    frontier = [target]
    while frontier:
        new = []
        for v in frontier:
            for p in range(n):
                if (v in rows[p] or (v, p) in dep) and p not in dist:
                    dist[p] = dist[v] + 1
                    new.append(p)
        frontier = new
    assert count == len(dist) and {v for v in range(n) if stamp[v] == 7} == set(dist)
    for v in dist:
        if v != target:  # each step goes one closer to the target, over a real edge
            w = int(nxt[v])
            assert dist[w] == dist[v] - 1
            assert (w in rows[v]) if not via[v] else ((w, v) in dep)


def test_aot_calls_check_their_arguments() -> None:
    if kernels.mode() != "aot":
        pytest.skip(f"kernels run as {kernels.mode()}: the ahead-of-time build is what checks arguments")
    with pytest.raises(TypeError, match="kernel type_stats: argument 0"):
        hw.type_stats(np.zeros(3, np.int64), np.zeros(3, np.uint32), np.empty(0, np.bool_), 1)
    with pytest.raises(TypeError, match="kernel mark: argument 3"):
        refs.mark(np.zeros(2, np.int64), np.zeros(0, np.uint32), np.zeros(0, np.int64),
                  np.zeros(1, np.bool_)[::1].copy().view(np.uint8), np.zeros(1, np.int32))


@st.composite
def _segments(draw):  # type: ignore[no-untyped-def]
    """Sorted, disjoint segments: tiny ones, ones sharing a bucket, and spans wide enough
    that the bucket table must widen its buckets (its size is capped)."""
    lo, out = draw(st.integers(1 << 12, 1 << 40)) & ~7, []
    for _ in range(draw(st.integers(0, 40))):
        lo += draw(st.sampled_from([0, 8, 1 << 12, 1 << 20, 3 << 20, 1 << 36])) & ~7
        size = draw(st.sampled_from([8, 24, 1 << 16, 1 << 20, 4 << 20, 66 << 20]))
        out.append((lo, lo + size))
        lo += size
    return out


@settings(max_examples=200, deadline=None)
@given(segs=_segments(), data=st.data())
def test_segment_buckets_find_what_the_binary_search_finds(segs, data) -> None:
    """``reach.segment_in`` (a bucket table) answers as an independent scan of the segments,
    compiled and interpreted, at every segment's edges and at addresses drawn anywhere."""
    from sosext.clr.kernels import reach
    seg_lo = np.array([a for a, _ in segs], dtype=np.uint64)
    seg_hi = np.array([b for _, b in segs], dtype=np.uint64)
    buckets, base, shift = reach.segment_buckets(seg_lo, seg_hi)
    assert buckets.size <= reach.BUCKETS_MOST
    probes = {0, 1, (1 << 64) - 1} | {a + d for a, b in segs for d in (-8, -1, 0, 8)} | \
        {b + d for a, b in segs for d in (-8, -1, 0, 8)}
    probes |= set(data.draw(st.lists(st.integers(0, (1 << 64) - 1), max_size=50)))
    for v in sorted(p for p in probes if 0 <= p < 1 << 64):
        want = next((i for i, (a, b) in enumerate(segs) if a <= v < b), -1)
        args = (np.uint64(v), seg_lo, seg_hi, buckets, base, shift)
        assert reach.segment_in(*args) == want, hex(v)
        assert plain("segment_in")(*args) == want, hex(v)
