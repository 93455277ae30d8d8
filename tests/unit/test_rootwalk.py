"""gcroot's search in SOS's order (``clr/roots/rootwalk.py``, ``kernels/rootwalk.py``) on
fabricated memory, against a model of ClrMD 4's ``GCRoot`` written here from its algorithm
(microsoft/clrmd, src/Microsoft.Diagnostics.Runtime/GCRoot.cs): the kernel must print, root for
root, the chain ClrMD's search finds, and drop the roots it drops.

The model keeps ClrMD's own data: a set of seen addresses, a dictionary of objects on found
chains, and a stack of 32-byte reference lists with their byte accounting (a cursor byte, the
object and its parent, then references of 5, 6 or 8 bytes each; a parent of 0 is not stored,
so such a list's ``Parent`` reads its first reference)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import test_rootsearch as trs
from test_rootsearch import ARRAY_MT, FREE_MT, LEAF_MT, NODE_MT, STRUCTS_MT, FakeCoreHeap, handle
from sosext.clr.roots.roots import ClrRoot, RootKind
from sosext.clr.roots.rootwalk import RootWalk


def stored(p: int) -> int:
    p &= ~3
    return 0 if p == 0 else 5 if p < 1 << 40 else 6 if p < 1 << 48 else 8


class RefList:
    def __init__(self, obj: int, parent: int) -> None:
        self.obj, self._parent = obj, parent
        self.refs: list[int] = []
        self.used = 1 + stored(obj) + stored(parent)
        self.pos = 0

    def store(self, r: int) -> bool:
        n = stored(r)
        if n and 32 - self.used < n:
            return False
        if n:
            self.refs.append(r & ~3)
            self.used += n
        return True

    @property
    def parent(self) -> int:
        if self._parent:
            return self._parent
        return self.refs[0] if self.refs else 0

    def next(self) -> int:
        if self.pos < len(self.refs):
            self.pos += 1
            return self.refs[self.pos - 1]
        return 0


class ClrMDGCRoot:
    """ClrMD's GCRoot with target predicate ``== target``; ``leaf_dependents``: also follow the
    dependent handles of objects without references (sosext's one deliberate difference)."""

    def __init__(self, heap: FakeCoreHeap, target: int, leaf_dependents: bool = True) -> None:
        self.heap, self.target, self.leaf_dependents = heap, target, leaf_dependents
        self.seen: set[int] = set()
        self.found: dict[int, int | None] = {}
        self.at = {a: k for k, a in enumerate(heap.addr)}

    def references(self, obj: int) -> list[int] | None:
        """None: not walked (no object, or nothing it holds is followed)."""
        k = self.at.get(obj)
        if k is None:
            return None
        deps = [s for p, s in sorted(self.heap.dependent) if p == obj]
        if self.heap.objects[k][1] not in trs.DESCS and not (self.leaf_dependents and deps):
            return None
        slots = [r[1] if isinstance(r, tuple) else self.heap.addr[r]
                 for _s, r in zip(self.heap.slots(k), self.heap.objects[k][3])]
        return deps + [v for v in slots if v]

    def chain(self, obj: int) -> tuple[int, ...]:
        out = [obj]
        while self.found[out[-1]] is not None:
            out.append(self.found[out[-1]])
        return tuple(out)

    def path_from(self, start: int) -> tuple[int, ...] | None:
        if start in self.found:
            return self.chain(start)
        if start == self.target:
            self.found[start] = None
            return self.chain(start)
        if self.references(start) is None:
            return None
        stack: list[RefList] = []
        if self.walk(stack, 0, start) is not None:
            self.drain(stack)
            return self.chain(start)
        while stack:
            curr = stack[-1]
            child = curr.next()
            if child == 0:
                stack.pop()
                continue
            hit = self.walk(stack, curr.obj, child)
            if hit is not None:
                self.cleanup(stack, hit, curr)
                return self.chain(start)
        return None

    def walk(self, stack: list[RefList], parent: int, obj: int) -> int | None:
        if obj == self.target:
            self.found[obj] = None
            return obj
        refs = self.references(obj)
        if refs is None:
            return None
        lst = None
        for r in refs:
            if r in self.found:
                self.found[obj] = r
                if lst is not None:
                    stack.append(lst)
                return obj
            if r in self.seen:
                continue
            self.seen.add(r)
            lst = lst or RefList(obj, parent)
            if not lst.store(r):
                stack.append(lst)
                lst = RefList(obj, parent)
                lst.store(r)
        if lst is not None:
            stack.append(lst)
        return None

    def add_link(self, nxt: int, obj: int) -> None:
        self.found.setdefault(obj, nxt)
        self.seen.discard(obj)

    def cleanup(self, stack: list[RefList], hit: int, curr: RefList) -> None:
        obj, parent = curr.obj, curr.parent
        self.add_link(hit, obj)
        for lst in reversed(stack):
            if lst.obj == obj:
                continue
            if lst.obj == parent:
                self.add_link(obj, lst.obj)
                obj, parent = lst.obj, lst.parent
            else:
                obj = lst.obj
                self.seen.discard(obj)
        self.drain(stack)

    def drain(self, stack: list[RefList]) -> None:
        for lst in stack:
            while (c := lst.next()) != 0:
                self.seen.discard(c)
        stack.clear()


def model_paths(heap: FakeCoreHeap, target: int, roots: list[ClrRoot], starts: list[int | None]) -> list:
    m = ClrMDGCRoot(heap, target)
    out = []
    for r, s in zip(roots, starts):
        chain = m.path_from(s) if s is not None else None
        if chain is not None:
            deps = set(heap.dependent)
            out.append((r, chain, tuple((a, b) in deps for a, b in zip(chain, chain[1:]))))
    return out


def walk_paths(heap: FakeCoreHeap, target: int, roots: list[ClrRoot], limit: int | None = None):
    w = RootWalk(heap, heap.memory(), target, roots)
    return w, list(w.paths(roots, limit))


objects_strategy = st.integers(2, 40).flatmap(lambda n: st.tuples(
    st.just(n),
    st.lists(st.tuples(st.integers(0, 1), st.sampled_from([NODE_MT, ARRAY_MT, ARRAY_MT, STRUCTS_MT, LEAF_MT, FREE_MT]),
                       st.integers(0, 14), st.lists(st.one_of(st.integers(0, n - 1), st.just(("raw", 0x12345))),
                                                    max_size=14)), min_size=n, max_size=n),
    st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=4),
    st.lists(st.integers(0, n - 1), min_size=1, max_size=8),
    st.integers(0, n - 1)))


def _heap_and_roots(bases, objs, dep, root_ids):  # type: ignore[no-untyped-def]
    """A random case's heap laid out at ``bases``, its handle roots, and a stack root holding an
    interior pointer into the first root's object."""
    saved, trs.SEG_BASES = trs.SEG_BASES, bases
    try:
        heap = FakeCoreHeap(objs, dependent=dep)
    finally:
        trs.SEG_BASES = saved
    roots = [handle(heap.addr[k]) for k in root_ids]
    roots.append(ClrRoot(RootKind.STACK, 0x7ff0, heap.addr[root_ids[0]] + 8))
    return heap, roots


@pytest.mark.parametrize("bases", [(0x10000000, 0x20000000), (0x7f2300000000, 0x7f2310000000),
                                   (0x10000000, 0x7f2310000000)], ids=["5-byte", "6-byte", "mixed"])
@settings(max_examples=120, deadline=None)
@given(case=objects_strategy)
def test_random_heaps_give_clrmds_chains_root_for_root(bases, case) -> None:
    n, objs, dep, root_ids, target = case
    heap, roots = _heap_and_roots(bases, objs, dep, root_ids)
    w, got = walk_paths(heap, heap.addr[target], roots)
    want = model_paths(heap, heap.addr[target], roots, [w.starts.get(r) for r in roots])
    assert got == want
    # -limit n: the first n of them, the same chains
    _w, first = walk_paths(heap, heap.addr[target], roots, 2)
    assert first == want[:2]


def test_a_drained_value_outside_the_heap_with_low_bits_stays_seen_as_in_clrmd() -> None:
    """ClrMD keeps a reference in its lists without the two low bits and its drain takes that
    out of the seen set: 0x12345, met by root 0's search and not walked when it found its
    chain, stays seen. So root 1's object 8 has three new references (2, 9, 26), one list,
    taken in order: the chain goes through 9, not 26 (hypothesis found this heap)."""
    objs = [(0, NODE_MT, 0, [1, ("raw", 0x12345)])] + [(0, NODE_MT, 0, [])] * 6 + \
        [(0, NODE_MT, 0, [8]), (0, ARRAY_MT, 4, [2, 9, ("raw", 0x12345), 26]), (0, NODE_MT, 0, [0])] + \
        [(0, NODE_MT, 0, [])] * 16 + [(0, NODE_MT, 0, [0])]
    heap, roots = _heap_and_roots((0x7f2300000000, 0x7f2310000000), objs, [], [0, 7])
    a = heap.addr
    w, got = walk_paths(heap, a[1], roots)
    assert [chain for _r, chain, _d in got] == [(a[0], a[1]), (a[7], a[8], a[9], a[0], a[1]), (a[0], a[1])]
    assert got == model_paths(heap, a[1], roots, [w.starts.get(r) for r in roots])


def test_lists_are_taken_last_first_and_a_found_chain_ends_later_searches() -> None:
    # Root 0 holds 9 references (two 32-byte lists at 5 bytes each: 5 in the root's first, 4
    # in its second); both 1 and 9 lead to the target, and ClrMD takes the second list first.
    objs = [(0, ARRAY_MT, 9, list(range(1, 10)))] + [(0, NODE_MT, 0, [11]) if k in (1, 9) else (0, LEAF_MT, 0, [])
                                                     for k in range(1, 10)]
    objs += [(1, NODE_MT, 0, [11]), (1, NODE_MT, 0, [])]  # 10 -> 11 (the target)
    heap = FakeCoreHeap(objs)
    roots = [handle(heap.addr[0]), handle(heap.addr[10]), handle(heap.addr[1])]
    _w, got = walk_paths(heap, heap.addr[11], roots)
    a = heap.addr
    assert [c for _r, c, _v in got] == [(a[0], a[9], a[11]), (a[10], a[11]), (a[1], a[11])]
    assert got == model_paths(heap, a[11], roots, [a[0], a[10], a[1]])


def test_a_root_whose_only_path_an_earlier_search_met_is_dropped_as_sos_drops_it() -> None:
    # 0 -> [1, 2], 1 -> 2, 2 -> 3 (the target), 4 -> 1. Root 0's search walks 1 first, whose
    # only reference (2) is already met, pending in 0's list: 1 is a dead end and stays met;
    # then 2 reaches 3. Root 4's only path runs through 1: not followed again, 4 is dropped.
    objs = [(0, NODE_MT, 0, [1, 2]), (0, NODE_MT, 0, [2]), (0, NODE_MT, 0, [3]), (1, LEAF_MT, 0, []),
            (1, NODE_MT, 0, [1])]
    heap = FakeCoreHeap(objs)
    a = heap.addr
    roots = [handle(a[0]), handle(a[4]), handle(a[2])]
    _w, got = walk_paths(heap, a[3], roots)
    assert got == model_paths(heap, a[3], roots, [a[0], a[4], a[2]])
    assert [c for _r, c, _v in got] == [(a[0], a[2], a[3]), (a[2], a[3])]


def test_a_dependent_handle_of_an_object_without_references_is_followed() -> None:
    objs = [(0, NODE_MT, 0, [1]), (0, LEAF_MT, 0, []), (1, NODE_MT, 0, [])]
    heap = FakeCoreHeap(objs, dependent=[(1, 2)])
    a = heap.addr
    _w, got = walk_paths(heap, a[2], [handle(a[0])])
    assert [(c, v) for _r, c, v in got] == [((a[0], a[1], a[2]), (False, True))]
    # ClrMD (SOS) does not look into the primary, so it finds no root
    assert ClrMDGCRoot(heap, a[2], leaf_dependents=False).path_from(a[0]) is None


def test_the_walk_pauses_for_progress_and_resumes_exactly(monkeypatch) -> None:
    from sosext.clr.progress import Progress
    from sosext.clr.roots import rootwalk
    n = 300
    objs = [(k % 2, NODE_MT if k % 3 else ARRAY_MT, 2, [(k * 7 + 1) % n, (k * 13 + 5) % n]) for k in range(n)]
    heap = FakeCoreHeap(objs, dependent=[(3, 4)])
    roots = [handle(heap.addr[0]), handle(heap.addr[17]), handle(heap.addr[40])]
    want = [walk_paths(heap, heap.addr[t], roots)[1] for t in (5, 99, 298)]
    counted: list[int] = []

    class Counting(Progress):
        def update(self, done: int) -> None:
            counted.append(done)

    monkeypatch.setattr(rootwalk, "_PAUSE_EVERY", 7)
    monkeypatch.setattr(rootwalk, "_FIRST_FOUND", 2)  # the hashes grow too
    got = [list(RootWalk(heap, heap.memory(), heap.addr[t], roots, Counting(stream=None)).paths(roots))
           for t in (5, 99, 298)]
    assert got == want
    assert want == [model_paths(heap, heap.addr[t], roots, [heap.addr[0], heap.addr[17], heap.addr[40]])
                    for t in (5, 99, 298)]
    assert len(counted) >= 3


# -- the root forest (clr/roots/forest.py): later gcroots from one search for nothing ----------

def forest_paths(heap: FakeCoreHeap, targets: list[int], roots: list[ClrRoot], limit: int | None = None):
    from sosext.clr.roots.forest import RootForest
    forest = RootForest(heap, heap.memory(), roots)
    assert forest.matches(roots)
    return [list(forest.paths(heap, t, roots, limit, None)) for t in targets]


@pytest.mark.parametrize("bases", [(0x10000000, 0x20000000), (0x7f2300000000, 0x7f2310000000),
                                   (0x10000000, 0x7f2310000000)], ids=["5-byte", "6-byte", "mixed"])
@settings(max_examples=150, deadline=None)
@given(case=objects_strategy)
def test_the_forest_answers_every_target_as_the_walk_does(bases, case) -> None:
    """Every object of a random heap as the target: the forest's chains are the walk's (and
    so ClrMD's), root for root, with and without -limit."""
    n, objs, dep, root_ids, _target = case
    heap, roots = _heap_and_roots(bases, objs, dep, root_ids)
    targets = list(heap.addr)
    for limit in (None, 1, 2):
        got = forest_paths(heap, targets, roots, limit)
        for t, g in zip(targets, got):
            assert g == walk_paths(heap, t, roots, limit)[1], (hex(t), limit)


def test_the_forest_keeps_a_drained_value_with_low_bits_seen_as_the_walk_does() -> None:
    """The walk's drain leaves 0x12345 seen (ClrMD's, above), so the forest's later roots must
    start with it seen: here root 9's search still holds it when it finds object 4, root 1's
    object 12 then has one new reference fewer to lay out in ClrMD's lists, and its chain to
    4 goes as the walk's (hypothesis found this heap). A forest half built answers the same
    or declines."""
    import numpy as np
    from sosext.clr.roots.forest import RootForest, new_recording, partial_paths
    raw = ("raw", 0x12345)
    objs = [(0, NODE_MT, 0, [4])] + [(0, NODE_MT, 0, [])] * 3 + [(1, NODE_MT, 0, []), (1, NODE_MT, 0, [4])] + \
        [(0, NODE_MT, 0, [])] * 3 + [(0, ARRAY_MT, 5, [0, 1, 12, raw, 4]), (0, NODE_MT, 0, []),
                                     (0, NODE_MT, 0, []), (1, ARRAY_MT, 4, [0, 1, raw, 5])]
    heap, roots = _heap_and_roots((0x10000000, 0x7f2310000000), objs, [(1, 12)], [9, 1])
    targets = list(heap.addr)
    want = [walk_paths(heap, t, roots)[1] for t in targets]
    assert forest_paths(heap, targets, roots) == want
    w = RootWalk(heap, heap.memory(), heap.addr[4], roots)
    assert want[4] == model_paths(heap, heap.addr[4], roots, [w.starts.get(r) for r in roots])  # ClrMD's
    record = new_recording(heap.memory(), len(roots))
    pops, parents = record[0], record[1]
    RootForest(heap, heap.memory(), roots, recording=record)
    root_pops, count = record[2], record[3]
    for cut in range(count + 1):
        started = int(np.sum(root_pops[:len(roots)] < cut)) if cut < count else len(roots)
        so_far = [pops, parents, np.where(np.arange(len(root_pops)) < started, root_pops, 0), cut, started]
        for t, w in zip(targets, want):
            got = partial_paths(RootWalk(heap, heap.memory(), t, roots), so_far, roots, None)
            assert got is None or list(got) == w, (hex(t), cut)


def test_a_drain_that_unsees_a_heap_object_the_forest_holds_gives_the_walks_chains() -> None:
    """A misaligned value into the heap (object 0's address + 1), still pending when root 2's
    search finds object 1, is drained without its low bits: object 0, which that search took
    before, is unseen again and root 3 reaches 1 through it. The forest holds 0 as seen up to
    the cut, so it hands such a target to a search from the first root: the walk's chains."""
    from sosext.clr.roots import forest as forest_mod
    base = 0x10000000
    objs = [(0, NODE_MT, 0, [1]), (0, NODE_MT, 0, []), (0, ARRAY_MT, 3, [0, 1, ("raw", base + 1)]),
            (0, NODE_MT, 0, [0])]
    heap, roots = _heap_and_roots((base, 0x20000000), objs, [], [2, 3])
    a = heap.addr
    assert a[0] == base
    w, want = walk_paths(heap, a[1], roots)
    assert [chain for _r, chain, _d in want] == [(a[2], a[1]), (a[3], a[0], a[1]), (a[2], a[1])]  # + the stack root
    assert want == model_paths(heap, a[1], roots, [w.starts.get(r) for r in roots])
    assert forest_mod.drained_outside([], [base + 1], lambda x: x == base) is None
    assert forest_paths(heap, [a[1]], roots) == [want]
    assert forest_paths(heap, [a[1]], roots, 1) == [want[:1]]


def test_the_forest_after_a_first_chain_lets_later_roots_reenter_what_the_root_left() -> None:
    # Root 0: 0 -> [1, 2]; ClrMD takes 2 first (lists last first? one list here: 1 then 2).
    # 1 -> 3 (the target) and 1 -> 4 -> 5; root 6 -> 4: after the first chain (0, 1, 3) the
    # search drains what root 0 met but never took; root 6 then walks 4 and 5 again, which the
    # forest gave to root 0. A target 5: root 0 takes 1, then 3, then 4 -> 5.
    objs = [(0, NODE_MT, 0, [1, 2]), (0, NODE_MT, 0, [3, 4]), (0, LEAF_MT, 0, []), (0, LEAF_MT, 0, []),
            (1, NODE_MT, 0, [5, 3]), (1, LEAF_MT, 0, []), (1, NODE_MT, 0, [4])]
    heap = FakeCoreHeap(objs)
    a = heap.addr
    roots = [handle(a[0]), handle(a[6]), handle(a[4])]
    for t in range(len(a)):
        want = walk_paths(heap, a[t], roots)[1]
        assert forest_paths(heap, [a[t]], roots)[0] == want
        assert want == model_paths(heap, a[t], roots, [a[0], a[6], a[4]])


def test_the_forest_records_through_pauses_and_growth_and_answers_as_the_walk(monkeypatch) -> None:
    """The forest's walk returns to Python for progress, for a bigger found hash and for more
    recording room, and resumes exactly: every target's chains are still the walk's."""
    from sosext.clr.roots import forest as forest_mod
    from sosext.clr.roots import rootwalk
    n = 300
    objs = [(k % 2, NODE_MT if k % 3 else ARRAY_MT, 2, [(k * 7 + 1) % n, (k * 13 + 5) % n]) for k in range(n)]
    heap = FakeCoreHeap(objs, dependent=[(3, 4)])
    roots = [handle(heap.addr[0]), handle(heap.addr[17]), handle(heap.addr[40]), handle(heap.addr[17])]
    targets = [heap.addr[t] for t in range(0, n, 7)]
    want = [walk_paths(heap, t, roots)[1] for t in targets]
    monkeypatch.setattr(rootwalk, "_PAUSE_EVERY", 7)
    monkeypatch.setattr(rootwalk, "_FIRST_FOUND", 2)
    monkeypatch.setattr(forest_mod, "MIN_OBJECT_SIZE", 1 << 40)  # room for 1 recorded pop: it grows
    monkeypatch.setattr(forest_mod, "RECORD_SLACK", 1)
    assert forest_paths(heap, targets, roots) == want
    assert sum(len(w) >= 2 for w in want) >= 3  # later roots' chains after the first: the resumed walk


def test_touching_pages_ahead_keeps_every_value() -> None:
    """MapsAhead's ``touch_pages`` writes each page's first item back as it is (an atomic
    ``or 0``): items a search stored before keep their values, the untouched stay zero, and the
    pages counted are those whose first item is in the range."""
    import numpy as np
    from sosext.clr.heap import memory
    from sosext.clr.kernels import rootwalk as rw
    a = memory.reserve(5 * 512 + 7, np.uint64)
    a[:700] = np.arange(1, 701, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    want = a.copy()
    assert rw.touch_pages(a, 0, len(a)) == 6
    assert rw.touch_pages(a, 1, 1024) == 1 and rw.touch_pages(a, 512, 1025) == 2
    assert rw.touch_pages(a, 2600, 10_000) == 0
    assert np.array_equal(a, want)


@settings(max_examples=60, deadline=None)
@given(case=objects_strategy)
def test_a_forest_half_built_answers_as_the_walk_or_not_at_all(case) -> None:
    """What a forest's walk has recorded so far (any prefix, the roots started by then)
    answers a target whose first chain is in it exactly as the walk; else it declines."""
    import numpy as np
    from sosext.clr.roots.forest import RootForest, new_recording, partial_paths
    n, objs, dep, root_ids, _target = case
    heap = FakeCoreHeap(objs, dependent=dep)
    roots = [handle(heap.addr[k]) for k in root_ids]
    roots.append(ClrRoot(RootKind.STACK, 0x7ff0, heap.addr[root_ids[0]] + 8))
    record = new_recording(heap.memory(), len(roots))
    pops, parents = record[0], record[1]  # room for every pop of these small heaps: never grown
    RootForest(heap, heap.memory(), roots, recording=record)
    root_pops, count = record[2], record[3]
    assert record[0] is None  # dropped by the built forest
    answered = 0
    for cut in sorted({0, 1, count // 3, count // 2, count - 1, count}):
        started = int(np.sum(root_pops[:len(roots)] < cut)) if cut < count else len(roots)
        so_far = [pops, parents, np.where(np.arange(len(root_pops)) < started, root_pops, 0), cut, started]
        for t in heap.addr:
            walk = RootWalk(heap, heap.memory(), t, roots)
            got = partial_paths(walk, so_far, roots, None)
            if got is not None:
                assert list(got) == walk_paths(heap, t, roots)[1], (hex(t), cut)
                answered += 1
    assert answered or count == 0 or all(not walk_paths(heap, t, roots)[1] for t in heap.addr)


def test_gcroot_of_no_object_finds_the_roots_holding_the_address_itself() -> None:
    """ClrMD's search tests each root's object against the target before walking it, so for an
    address that is no object only roots whose value is that address match; an interior root's
    object is the one containing its value (ClrThread.CreateClrStackRoot), never such an address."""
    from sosext.clr.roots.gcroot import roots_holding
    target = 0x7F00_0000_1238
    roots = [ClrRoot(RootKind.HANDLE, 0x1000, 0x7F00_0000_2000),
             ClrRoot(RootKind.STACK, 0x2000, target, interior=True),
             ClrRoot(RootKind.STACK, 0x2008, target),
             ClrRoot(RootKind.STACK, 0x2010, target + 8),
             ClrRoot(RootKind.STACK, 0x2018, target)]
    found = list(roots_holding(target, roots))
    assert [c.root.address for c in found] == [0x2008, 0x2018]
    assert all(c.addresses == (target,) and c.method_tables == (0,) and c.via_dependent == () for c in found)
    assert [c.root.address for c in roots_holding(target, roots, limit=1)] == [0x2008]
    assert not list(roots_holding(0x10, roots))
