"""The dominator kernels on fabricated graphs, against the definition: d dominates v when
removing d leaves v unreachable from the roots; the immediate dominator is the strict
dominator that every other strict dominator dominates; the retained size of v is the sum of
the sizes of everything v dominates (itself included). Run as compiled kernels and as the
same source interpreted."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sosext.clr.roots import dominators as dm
from sosext.clr.kernels import dominators as kd
from sosext.clr.kernels.registry import KERNELS


def csr(n: int, edges: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    rows: list[list[int]] = [[] for _ in range(n)]
    for a, b in edges:
        rows[a].append(b)
    offsets = np.zeros(n + 1, np.int64)
    offsets[1:] = np.cumsum([len(r) for r in rows])
    targets = np.array([t for r in rows for t in r], dtype=np.uint32)
    return offsets, targets


def reachable(n: int, edges, roots, removed: int | None = None) -> set[int]:
    adj: dict[int, list[int]] = {}
    for a, b in edges:
        adj.setdefault(a, []).append(b)
    seen: set[int] = set()
    todo = [r for r in roots if r != removed]
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        todo.extend(w for w in adj.get(v, ()) if w != removed and w not in seen)
    return seen


def brute(n: int, edges, roots, sizes) -> tuple[list[int], list[int]]:
    """(idom, retained) from the definition."""
    reach = reachable(n, edges, roots)
    dominated_by = {d: reach - reachable(n, edges, roots, removed=d) for d in range(n)}  # includes d itself
    idom = []
    for v in range(n):
        if v not in reach:
            idom.append(-2)
            continue
        strict = [d for d in range(n) if d != v and v in dominated_by[d]]
        # the closest: the one dominated by all the others
        close = [d for d in strict if all(d in dominated_by[o] for o in strict)]
        idom.append(close[0] if close else -1)
    retained = [sum(sizes[w] for w in dominated_by[v]) if v in reach else 0 for v in range(n)]
    return idom, retained


def run(n, edges, roots, sizes, deps=(), interpreted=False):
    offsets, targets = csr(n, edges)
    deps = sorted(deps)
    dep_p = np.array([p for p, _ in deps], dtype=np.int64)
    dep_s = np.array([s for _, s in deps], dtype=np.int64)
    if interpreted:  # the kernels' source as plain Python, calling each other as Python too
        saved = {name: getattr(kd, name) for name in KERNELS if KERNELS[name].module == kd.__name__}
        for name in saved:
            setattr(kd, name, KERNELS[name].function)
        try:
            out = dm.compute(offsets, targets, np.array(sizes, np.uint32), np.array(roots, np.int64), dep_p, dep_s)
        finally:
            for name, fn in saved.items():
                setattr(kd, name, fn)
    else:
        out = dm.compute(offsets, targets, np.array(sizes, np.uint32), np.array(roots, np.int64), dep_p, dep_s)
    idom, retained, count, _passes = out
    return idom.tolist(), retained.tolist(), count


def check(n, edges, roots, sizes=None, deps=(), interpreted=False):
    sizes = sizes or [10 + 3 * i for i in range(n)]
    idom, retained, count = run(n, edges, roots, sizes, deps, interpreted)
    all_edges = list(edges) + list(deps)
    want_idom, want_ret = brute(n, all_edges, roots, sizes)
    assert idom == want_idom
    assert retained == want_ret
    assert count == len(reachable(n, all_edges, roots))
    return idom, retained


def test_chain():
    idom, ret = check(4, [(0, 1), (1, 2), (2, 3)], [0], [1, 2, 4, 8])
    assert idom == [-1, 0, 1, 2] and ret == [15, 14, 12, 8]


def test_diamond_shared_node_is_retained_by_neither_holder():
    # 0 -> 1, 0 -> 2, 1 -> 3, 2 -> 3: node 3 belongs to 0, not to 1 or 2
    idom, ret = check(4, [(0, 1), (0, 2), (1, 3), (2, 3)], [0], [1, 2, 4, 8])
    assert idom == [-1, 0, 0, 0] and ret == [15, 2, 4, 8]


def test_two_roots_share_a_node():
    idom, ret = check(3, [(0, 2), (1, 2)], [0, 1], [1, 2, 4])
    assert idom == [-1, -1, -1] and ret == [1, 2, 4]


def test_cycle():
    idom, ret = check(4, [(0, 1), (1, 2), (2, 3), (3, 1)], [0], [1, 2, 4, 8])
    assert idom == [-1, 0, 1, 2] and ret == [15, 14, 12, 8]


def test_unreachable_and_self_loop():
    idom, ret = check(5, [(0, 0), (0, 1), (3, 4), (4, 3), (3, 1)], [0], [1, 2, 4, 8, 16])
    assert idom == [-1, 0, -2, -2, -2] and ret == [3, 2, 0, 0, 0]


def test_dependent_handle_is_an_edge_from_the_primary():
    # 0 -> 1 (primary), dependent handle 1 => 2, 2 -> 3
    idom, ret = check(4, [(0, 1), (2, 3)], [0], [1, 2, 4, 8], deps=[(1, 2)])
    assert idom == [-1, 0, 1, 2] and ret == [15, 14, 12, 8]


def test_long_list_needs_no_recursion():
    n = 200_000
    edges = [(i, i + 1) for i in range(n - 1)] + [(i + 1, i) for i in range(n - 1)]
    idom, ret, count = run(n, edges, [0], [1] * n)
    assert count == n and idom[0] == -1 and idom[1:] == list(range(n - 1)) and ret[0] == n


graphs = st.integers(1, 14).flatmap(lambda n: st.tuples(
    st.just(n),
    st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n),
    st.lists(st.integers(0, n - 1), min_size=1, max_size=3),
    st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=2)))


@settings(max_examples=400, deadline=None)
@given(graphs)
def test_random_graphs_match_the_definition(g):
    n, edges, roots, deps = g
    check(n, edges, roots, deps=deps)


@settings(max_examples=60, deadline=None)
@given(graphs)
def test_interpreted_source_matches_the_definition(g):
    n, edges, roots, deps = g
    check(n, edges, roots, deps=deps, interpreted=True)


def test_retained_by_type_counts_each_run_of_one_type_once():
    # types: 0 -> 1 -> 2 -> 3 with types A B B C; roots: 0
    idom = np.array([-1, 0, 1, 2, -2], np.int32)
    retained = np.array([15, 14, 12, 8, 0], np.uint64)
    sizes = np.array([1, 2, 4, 8, 16], np.uint32)
    tids = np.array([0, 1, 1, 2, 2], np.uint32)
    for fn in (kd.retained_by_type, kd.NUMPY_FORMS["retained_by_type"]):
        out = np.zeros(9, np.uint64)
        fn(tids, idom, retained, sizes, np.empty(0, np.bool_), out)
        assert out.reshape(3, 3).tolist() == [[1, 1, 15], [2, 6, 14], [1, 8, 8]]
        out = np.zeros(9, np.uint64)  # only the second B (its dominator is a B) and C
        fn(tids, idom, retained, sizes, np.array([False, False, True, True, True]), out)
        assert out.reshape(3, 3).tolist() == [[0, 0, 0], [1, 4, 0], [1, 8, 8]]


def test_holders_climb_past_growing_and_passed_types():
    # chain: 0(A, root) <- 1(B) <- 2(C) <- 3(G) <- 4(G); 5(G) under 2; 6(G) a root; 7(G) unreachable
    idom = np.array([-1, 0, 1, 2, 3, 2, -1, -2], np.int32)
    tids = np.array([0, 1, 2, 3, 3, 3, 3, 3], np.uint32)
    rows = np.array([3, 4, 5, 6, 7], np.int64)
    for fn in (kd.holders, KERNELS["holders"].function):
        growing = np.array([False, False, False, True])
        out = np.zeros(5, np.int32)
        via = np.zeros(5, np.int32)
        fn(idom, tids, growing, rows, np.full(8, -3, np.int32), np.full(8, -3, np.int32), out, via)
        assert out.tolist() == [2, 2, 2, 6, -2] and via.tolist() == [3, 3, 5, -1, -1]
        skip = np.array([False, True, True, True])  # B and C passed over as well
        memo, memo_via = np.full(8, -3, np.int32), np.full(8, -3, np.int32)
        fn(idom, tids, skip, rows, memo, memo_via, out, via)
        assert out.tolist() == [0, 0, 0, 6, -2] and via.tolist() == [1, 1, 1, -1, -1]
        fn(idom, tids, skip, rows[::-1].copy(), memo, memo_via, out, via)  # answers from the memo
        assert out.tolist() == [-2, 6, 0, 0, 0] and via.tolist() == [-1, -1, 1, 1, 1]
        skip = np.array([True, True, True, True])  # everything passed: the top
        fn(idom, tids, skip, rows, np.full(8, -3, np.int32), np.full(8, -3, np.int32), out, via)
        assert out.tolist() == [0, 0, 0, 6, -2] and via.tolist() == [1, 1, 1, -1, -1]


@settings(max_examples=200, deadline=None)
@given(graphs)
def test_holders_match_climbing_the_chain(g):
    n, edges, roots, deps = g
    offsets, targets = csr(n, edges)
    dp = sorted(deps)
    idom, _r, _c, _p = dm.compute(offsets, targets, np.full(n, 24, np.uint32), np.array(roots, np.int64),
                                  np.array([p for p, _ in dp], np.int64), np.array([s for _, s in dp], np.int64))
    tids = np.array([i % 3 for i in range(n)], np.uint32)
    skip = np.array([True, False, True])
    rows = np.arange(n, dtype=np.int64)
    out, via = np.zeros(n, np.int32), np.zeros(n, np.int32)
    kd.holders(idom, tids, skip, rows, np.full(n, -3, np.int32), np.full(n, -3, np.int32), out, via)
    for v in range(n):
        if idom[v] == -2:
            assert out[v] == -2
            continue
        chain = [v]
        while idom[chain[-1]] >= 0:
            chain.append(int(idom[chain[-1]]))
        k = next((i for i in range(1, len(chain)) if not skip[tids[chain[i]]]), len(chain) - 1)
        assert out[v] == chain[k] and via[v] == (chain[k - 1] if k > 0 else -1)


@settings(max_examples=100, deadline=None)
@given(graphs)
def test_check_tree_accepts_computed_trees_and_refuses_damaged_ones(g):
    n, edges, roots, deps = g
    offsets, targets = csr(n, edges)
    dp = sorted(deps)
    sizes = np.array([24 + 8 * i for i in range(n)], np.uint32)
    idom, retained, _c, _p = dm.compute(offsets, targets, sizes, np.array(roots, np.int64),
                                        np.array([p for p, _ in dp], np.int64), np.array([s for _, s in dp], np.int64))
    for fn in (kd.check_tree, KERNELS["check_tree"].function):
        assert fn(idom, retained, sizes)
        reach = np.flatnonzero(idom != -2)
        v = int(reach[-1])
        bad = idom.copy()
        bad[v] = v  # its own dominator
        assert not fn(bad, retained, sizes)
        bad = retained.copy()
        bad[v] = sizes[v] - 1  # less than its own size
        assert not fn(idom, bad, sizes)
        if len(reach) > 1 and idom[v] != -1:
            bad = idom.copy()
            bad[int(idom[v])] = v  # a cycle between two objects
            assert not fn(bad, retained, sizes)
