"""gcroot's search from the roots (``clr/roots/rootsearch.py``, ``kernels/reach.py``) on fabricated
memory: every root's chain must be the graph path's, which is computed here independently
(every object's references from its layout, the reversed rows in address order, dependent
handles last, breadth-first from the target as ``gcroot.PathFinder`` does)."""
from __future__ import annotations

from collections import deque
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sosext.clr.heap.gcdesc import GCDesc
from sosext.clr.kernels import reach
from sosext.clr.roots.rootsearch import CoreHeapMemory, RootSearch
from sosext.clr.roots.roots import ClrHandle, ClrRoot, RootKind

FREE_MT, NODE_MT, ARRAY_MT, STRUCTS_MT, LEAF_MT = 0x7000, 0x7100, 0x7200, 0x7300, 0x7500
TYPES = {FREE_MT: (24, 1), NODE_MT: (32, 0), ARRAY_MT: (24, 8), STRUCTS_MT: (24, 16), LEAF_MT: (24, 0)}
DESCS = {NODE_MT: GCDesc(series=((8, 16 - 32),)),  # two reference fields, at 8 and 16
         ARRAY_MT: GCDesc(series=((16, -24),)),  # object[]: elements from 16
         STRUCTS_MT: GCDesc(repeat_start=16, repeat=((1, 8),))}  # {ref, long}[]
SEG_BASES = (0x10000000, 0x20000000)
FILE_GAP = 5  # words of "core file" before each segment: segments sit at an offset in the file


class FakeCoreHeap:
    """Objects in two segments, laid into one array of words as a core file would hold them.

    ``objects``: per object (segment, MethodTable, element count, referenced object ordinals
    or raw values given as ('raw', value))."""

    def __init__(self, objects: list[tuple[int, int, int, list]], dependent: list[tuple[int, int]] = (),
                 alloc_gap: bool = False) -> None:
        self.objects = objects
        self.addr: list[int] = []
        at = list(SEG_BASES)
        for seg, mt, count, _refs in objects:
            base, comp = TYPES[mt]
            self.addr.append(at[seg])
            at[seg] += (base + comp * count + 7) // 8 * 8
        self.alloc_contexts = []
        if alloc_gap:  # an allocation context at the end of segment 0: not objects
            self.alloc_contexts.append((at[0], at[0] + 64))
            at[0] += 64 + 24
        self.seg_ranges = [(lo, hi) for lo, hi in zip(SEG_BASES, at)]
        file_words: list[np.ndarray] = []
        self.seg_word = []
        pos = 0
        self.segment_words = {}
        for lo, hi in self.seg_ranges:
            w = np.zeros((hi - lo) // 8, np.uint64)
            self.segment_words[lo] = w
            file_words.append(np.zeros(FILE_GAP, np.uint64))
            pos += FILE_GAP
            file_words.append(w)
            pos += len(w)
            self.seg_word.append(pos)
        for k, (seg, mt, count, refs) in enumerate(objects):
            lo = SEG_BASES[seg]
            w = self.segment_words[lo]
            off = (self.addr[k] - lo) // 8
            w[off] = mt
            base, comp = TYPES[mt]
            if comp:
                w[off + 1] = count
            for slot, r in zip(self.slots(k), refs):
                w[off + slot // 8] = r[1] if isinstance(r, tuple) else self.addr[r]
        self.words = np.concatenate(file_words)
        self.dependent = [(self.addr[p], self.addr[s]) for p, s in dependent]
        # what the search asks of the heap
        self.types = SimpleNamespace(get=lambda mt: SimpleNamespace(
            base_size=TYPES[mt][0], component_size=TYPES[mt][1], contains_pointers=mt in DESCS)
            if mt in TYPES else None)
        self.segments = [SimpleNamespace(start=lo, end=hi) for lo, hi in self.seg_ranges]

    def slots(self, k: int) -> list[int]:
        _seg, mt, count, _r = self.objects[k]
        base, comp = TYPES[mt]
        return DESCS[mt].offsets(base + comp * count) if mt in DESCS else []

    # -- the heap's side, as RootSearch uses it --
    def method_table_sizes(self, mt: int):
        return TYPES.get(mt)

    def gcdesc(self, mt: int):
        return DESCS.get(mt)

    def pieces(self, seg) -> list[tuple[int, int]]:
        return [(seg.start, seg.end)]

    def segment_of(self, address: int):
        return next((s for s in self.segments if s.start <= address < s.end), None)

    def roots(self, include_stacks: bool = True):
        return SimpleNamespace(dependent_handles=[ClrHandle(0x100 + i, p, 6, s)
                                                  for i, (p, s) in enumerate(self.dependent)])

    def memory(self) -> CoreHeapMemory:
        gaps = sorted((p, lim + 24) for p, lim in self.alloc_contexts)
        return CoreHeapMemory(self.words, np.array([lo for lo, _ in self.seg_ranges], np.uint64),
                              np.array([hi for _, hi in self.seg_ranges], np.uint64),
                              np.array(self.seg_word, np.int64), np.array([a for a, _ in gaps], np.uint64),
                              np.array([b for _, b in gaps], np.uint64))

    # -- the graph path, independently --
    def graph_chains(self, target: int, roots: list[ClrRoot]) -> list:
        order = sorted(range(len(self.addr)), key=lambda k: self.addr[k])  # index positions
        start = {self.addr[k]: k for k in order}
        parents: dict[int, list[int]] = {k: [] for k in order}
        for k in order:  # sources ascending: the reversed rows' order
            for _slot, r in zip(self.slots(k), self.objects[k][3]):
                value = r[1] if isinstance(r, tuple) else self.addr[r]
                if value in start:
                    parents[start[value]].append(k)
        dep_parents: dict[int, list[int]] = {}
        for sec, pri in sorted((start[s], start[p]) for p, s in self.dependent):
            dep_parents.setdefault(sec, []).append(pri)
        t = start[target]
        nxt: dict[int, tuple[int, bool]] = {t: (-1, False)}
        queue = deque([t])
        while queue:
            node = queue.popleft()
            for p in parents[node]:
                if p not in nxt:
                    nxt[p] = (node, False)
                    queue.append(p)
            for p in dep_parents.get(node, ()):
                if p not in nxt:
                    nxt[p] = (node, True)
                    queue.append(p)
        out = []
        for r in roots:
            k = start.get(r.object)
            if k is None and r.kind is RootKind.STACK:
                k = next((j for j in order if self.addr[j] <= r.object < self.addr[j] + self.size(j)), None)
            if k is None or k not in nxt:
                out.append(None)
                continue
            chain, via = [k], []
            while k != t:
                k, d = nxt[k]
                via.append(d)
                chain.append(k)
            out.append((tuple(self.addr[j] for j in chain), tuple(via)))
        return out

    def reachable(self, roots: list[ClrRoot]) -> set[int]:
        """Addresses of every object the roots reach (edges as in graph_chains, and dependent handles)."""
        start = {a: k for k, a in enumerate(self.addr)}
        todo = [start[r.object] for r in roots if r.object in start]
        todo += [k for r in roots if r.kind is RootKind.STACK and r.object not in start
                 for k in range(len(self.addr)) if self.addr[k] <= r.object < self.addr[k] + self.size(k)]
        seen = set(todo)
        while todo:
            k = todo.pop()
            nxt = [start[v] for _s, r in zip(self.slots(k), self.objects[k][3])
                   for v in [r[1] if isinstance(r, tuple) else self.addr[r]] if v in start]
            nxt += [start[s] for p, s in self.dependent if p == self.addr[k]]
            for j in nxt:
                if j not in seen:
                    seen.add(j)
                    todo.append(j)
        return {self.addr[k] for k in seen}

    def size(self, k: int) -> int:
        base, comp = TYPES[self.objects[k][1]]
        return max(base + comp * self.objects[k][2], 24)


def search_chains(heap: FakeCoreHeap, target: int, roots: list[ClrRoot]) -> list:
    s = RootSearch(heap, heap.memory(), target, roots)
    return [s.chain(r) for r in roots]


def handle(address: int) -> ClrRoot:
    return ClrRoot(RootKind.HANDLE, 0x900, address)


def test_chains_through_cycles_arrays_value_type_arrays_and_dependent_handles() -> None:
    objs = [
        (0, NODE_MT, 0, [1, 2]),  # 0 -> 1, 2
        (0, ARRAY_MT, 3, [3, 4, 0]),  # 1 -> 3, 4, 0 (a cycle with 0)
        (0, FREE_MT, 40, []),  # 2: a Free object (referenced: as the graph would, an edge to it)
        (1, STRUCTS_MT, 2, [5, 6]),  # 3 -> 5, 6 through value-type array elements
        (0, NODE_MT, 0, [4, ("raw", 0x12345)]),  # 4 -> itself, and a value that is no object
        (1, NODE_MT, 0, [7]),  # 5 -> 7
        (1, LEAF_MT, 0, []),  # 6: no references
        (1, NODE_MT, 0, [1]),  # 7 -> 1 (a longer cycle), the target below
        (1, NODE_MT, 0, []),  # 8: only a dependent handle's secondary, its primary is 6
        (0, NODE_MT, 0, [8]),  # 9: garbage pointing at 8: not reachable from roots
    ]
    heap = FakeCoreHeap(objs, dependent=[(6, 8)])
    roots = [handle(heap.addr[0]), handle(heap.addr[4]), handle(heap.addr[6]), handle(heap.addr[9] + 8),
             ClrRoot(RootKind.STACK, 0x7ff0, heap.addr[3] + 20), handle(heap.addr[7])]
    for target in (7, 8, 2, 6, 9):
        want = heap.graph_chains(heap.addr[target], roots)
        assert search_chains(heap, heap.addr[target], roots) == want
    # the dependent handle's step is marked, and a stack root inside an object starts at that object
    got = search_chains(heap, heap.addr[8], roots)
    assert got[2] == ((heap.addr[6], heap.addr[8]), (True,))
    assert search_chains(heap, heap.addr[7], roots)[4][0][0] == heap.addr[3]


def test_an_unreachable_target_has_no_chains_and_roots_reaching_it_several_ways_get_the_shortest() -> None:
    objs = [(0, NODE_MT, 0, [1, 2]), (0, NODE_MT, 0, [3]), (1, NODE_MT, 0, [3]), (1, NODE_MT, 0, [4]),
            (0, LEAF_MT, 0, []), (1, NODE_MT, 0, [4])]
    heap = FakeCoreHeap(objs)
    roots = [handle(heap.addr[0]), handle(heap.addr[2]), handle(heap.addr[1])]
    got = search_chains(heap, heap.addr[4], roots)
    assert got == heap.graph_chains(heap.addr[4], roots)
    assert got[0] == ((heap.addr[0], heap.addr[1], heap.addr[3], heap.addr[4]), (False, False, False))
    assert search_chains(heap, heap.addr[5], roots) == [None, None, None]


def test_allocation_contexts_and_unknown_headers_are_not_objects() -> None:
    heap = FakeCoreHeap([(0, NODE_MT, 0, [1]), (0, NODE_MT, 0, [])], alloc_gap=True)
    gap = heap.alloc_contexts[0][0]
    heap.segment_words[SEG_BASES[0]][(gap - SEG_BASES[0]) // 8] = NODE_MT  # looks like an object
    w = heap.segment_words[SEG_BASES[0]]
    w[(heap.addr[1] - SEG_BASES[0]) // 8 + 1] = gap  # a reference into the allocation context
    roots = [handle(heap.addr[0]), handle(gap)]
    s = RootSearch(heap, heap.memory(), heap.addr[1], roots)
    assert [s.chain(r) for r in roots] == [((heap.addr[0], heap.addr[1]), (False,)), None]
    assert s.visited == 2
    assert not s.is_object(gap) and not s.is_object(0x10000) and not s.is_object(heap.addr[0] + 8)


def test_the_hash_of_open_objects_grows_with_a_deep_chain() -> None:
    n = 6000  # deeper than the first hash holds half of
    objs = [(k % 2, NODE_MT, 0, [k + 1] if k + 1 < n else [0]) for k in range(n)]  # one big cycle
    heap = FakeCoreHeap(objs)
    roots = [handle(heap.addr[0]), handle(heap.addr[n // 2])]
    got = search_chains(heap, heap.addr[n - 1], roots)
    assert got == heap.graph_chains(heap.addr[n - 1], roots)
    assert len(got[0][0]) == n and len(got[1][0]) == n - n // 2


def test_open_object_hash_deletes_without_losing_neighbours() -> None:
    keys, vals = np.zeros(16, np.uint64), np.zeros(16, np.int64)
    addrs = [np.uint64(0x1000 + 8 * i * 16) for i in range(7)]
    for p, a in enumerate(addrs):
        reach.open_insert(a, p, keys, vals)
    for a in addrs[::2]:
        reach.open_delete(a, keys, vals)
    assert [int(reach.open_find(a, keys, vals)) for a in addrs] == [-1 if p % 2 == 0 else p for p in range(7)]


objects_strategy = st.integers(2, 30).flatmap(lambda n: st.tuples(
    st.just(n),
    st.lists(st.tuples(st.integers(0, 1), st.sampled_from([NODE_MT, ARRAY_MT, STRUCTS_MT, LEAF_MT, FREE_MT]),
                       st.integers(0, 4), st.lists(st.integers(0, n - 1), max_size=8)), min_size=n, max_size=n),
    st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3),
    st.lists(st.integers(0, n - 1), min_size=1, max_size=5),
    st.integers(0, n - 1)))


@settings(max_examples=150, deadline=None)
@given(objects_strategy)
def test_random_heaps_give_the_graph_paths_chains(case) -> None:
    n, objs, dep, root_ids, target = case
    heap = FakeCoreHeap(objs, dependent=dep)
    roots = [handle(heap.addr[k]) for k in root_ids]
    roots.append(ClrRoot(RootKind.STACK, 0x7ff0, heap.addr[root_ids[0]] + 8))
    s = RootSearch(heap, heap.memory(), heap.addr[target], roots)
    assert [s.chain(r) for r in roots] == heap.graph_chains(heap.addr[target], roots)
    # What it met is every object the roots reach, the target's own references included
    # (gcroot answers a later target it did not meet with "no roots" at once).
    assert {a for a in heap.addr if s.reached(a)} == heap.reachable(roots)


def test_a_gcdesc_claiming_slots_past_its_objects_grows_the_edge_stack_safely() -> None:
    bad = 0x7600
    TYPES[bad], DESCS[bad] = (32, 0), GCDesc(series=((8, 4000 - 32),))  # 4000 bytes of "slots" per object
    try:
        n = 200
        objs = [(0, bad, 0, [k + 1] if k + 1 < n else []) for k in range(n)]
        heap = FakeCoreHeap(objs)
        roots = [handle(heap.addr[0])]
        chain, via = search_chains(heap, heap.addr[n - 1], roots)[0]
        assert chain[0] == heap.addr[0] and chain[-1] == heap.addr[n - 1] and not any(via)
        words = heap.segment_words[SEG_BASES[0]]
        for a, b in zip(chain, chain[1:]):  # each step is a word the claimed slots cover
            first = (a - SEG_BASES[0]) // 8 + 1
            assert b in words[first:first + 4000 // 8].tolist()
    finally:
        del TYPES[bad], DESCS[bad]


def test_the_search_pauses_for_progress_and_resumes_exactly(monkeypatch) -> None:
    from sosext.clr.roots import rootsearch
    from sosext.clr.progress import Progress
    n = 300
    objs = [(k % 2, NODE_MT if k % 3 else ARRAY_MT, 2, [(k * 7 + 1) % n, (k * 13 + 5) % n]) for k in range(n)]
    heap = FakeCoreHeap(objs, dependent=[(3, 4)])
    roots = [handle(heap.addr[0]), handle(heap.addr[17])]
    want = [search_chains(heap, heap.addr[t], roots) for t in (5, 99, 298)]
    seen: list[int] = []

    class Counting(Progress):
        def update(self, done: int) -> None:
            seen.append(done)

    monkeypatch.setattr(rootsearch, "_PAUSE_EVERY", 7)
    got = [[s.chain(r) for r in roots]
           for s in (RootSearch(heap, heap.memory(), heap.addr[t], roots, Counting(stream=None)) for t in (5, 99, 298))]
    assert got == want == [heap.graph_chains(heap.addr[t], roots) for t in (5, 99, 298)]
    assert len(seen) >= 3 and max(seen) <= n  # it did pause, and counted objects it met


# -- gcroot -limit n: each root depth-first up to the target (rootsearch.FirstPaths) --

def first_paths(heap: FakeCoreHeap, target: int, roots: list[ClrRoot], limit: int) -> list:
    from sosext.clr.roots.rootsearch import FirstPaths
    f = FirstPaths(heap, heap.memory(), target, roots)
    return list(f.paths(roots, limit))


def edges_of(heap: FakeCoreHeap) -> set[tuple[int, int, bool]]:
    """(from, to, by dependent handle) of every reference and dependent handle, by address."""
    out = set()
    for k in range(len(heap.addr)):
        for _slot, r in zip(heap.slots(k), heap.objects[k][3]):
            out.add((heap.addr[k], r[1] if isinstance(r, tuple) else heap.addr[r], False))
    out |= {(p, s, True) for p, s in heap.dependent}
    return out


@settings(max_examples=150, deadline=None)
@given(objects_strategy, st.integers(1, 4))
def test_first_paths_are_the_first_roots_reaching_the_target_each_with_a_real_chain(case, limit) -> None:
    n, objs, dep, root_ids, target = case
    heap = FakeCoreHeap(objs, dependent=dep)
    roots = [handle(heap.addr[k]) for k in root_ids]
    roots.append(ClrRoot(RootKind.STACK, 0x7ff0, heap.addr[root_ids[0]] + 8))
    t = heap.addr[target]
    reaching = [r for r, c in zip(roots, heap.graph_chains(t, roots)) if c is not None]
    got = first_paths(heap, t, roots, limit)
    assert [r for r, _c, _v in got] == reaching[:limit]  # in the roots' order, duplicates included
    edges = edges_of(heap)
    for (r, chain, via), want in zip(got, heap.graph_chains(t, [r for r, _c, _v in got])):
        assert chain[0] == want[0][0] and chain[-1] == t and len(set(chain)) == len(chain)
        assert all((a, b, d) in edges for a, b, d in zip(chain, chain[1:], via))


def test_a_first_path_through_a_long_list_comes_out_by_the_shortcut_its_objects_hold() -> None:
    n = 2000  # root -> list head -> ... -> node n-1, and the root also holds node n-1's holder directly
    objs = [(0, ARRAY_MT, 2, [1, n + 1])] + [(k % 2, NODE_MT, 0, [k + 2] if k + 2 <= n else [n + 1])
                                            for k in range(n)] + [(1, NODE_MT, 0, [n + 2]), (0, LEAF_MT, 0, [])]
    heap = FakeCoreHeap(objs)
    roots = [handle(heap.addr[0])]
    (_r, chain, via), = first_paths(heap, heap.addr[n + 2], roots, 1)
    assert chain == (heap.addr[0], heap.addr[n + 1], heap.addr[n + 2]) and via == (False, False)


def test_a_component_holding_much_of_the_heap_makes_the_search_give_up(monkeypatch) -> None:
    from sosext.clr.roots import rootsearch
    n = 6000
    objs = [(k % 2, NODE_MT, 0, [k + 1] if k + 1 < n else [0]) for k in range(n)]  # one big cycle
    heap = FakeCoreHeap(objs)
    monkeypatch.setattr(rootsearch, "MIN_OPEN", 1024)
    monkeypatch.setattr(rootsearch, "OPEN_SHARE", 1 << 30)
    with pytest.raises(rootsearch.TooCyclic):
        RootSearch(heap, heap.memory(), heap.addr[n - 1], [handle(heap.addr[0])])
    # Many objects in components of their own, none deeper than the limit: the search answers.
    m = 20
    chains = FakeCoreHeap([(0, ARRAY_MT, n // m, [k * m + 1 for k in range(n // m)])]
                          + [(k % 2, NODE_MT, 0, [k + 2] if k % m != m - 1 else []) for k in range(n)])
    s = RootSearch(chains, chains.memory(), chains.addr[n], [handle(chains.addr[0])])
    assert len(s.chain(handle(chains.addr[0]))[0]) == m + 1 and s.visited == n + 1
