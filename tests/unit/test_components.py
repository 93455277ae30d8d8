"""Strongly connected components of a reference graph, the reversed condensation, and the
breadth-first search that stops once the roots that reach the target are reached
(``kernels/components.py``): checked against brute force on random graphs."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sosext.clr.kernels import components as k
from sosext.clr.kernels import refs

graphs = st.integers(1, 40).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.lists(st.integers(0, n - 1), max_size=4), min_size=n, max_size=n),
    st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3),
    st.integers(0, n - 1), st.lists(st.integers(0, n - 1), max_size=6)))


def csr(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(rows) + 1, np.int64)
    np.cumsum([len(r) for r in rows], out=offsets[1:])
    return offsets, np.array([t for r in rows for t in r], np.uint32)


def closure(rows: list[list[int]], start: int, extra: list[tuple[int, int]] = ()) -> set[int]:
    seen, todo = {start}, [start]
    while todo:
        v = todo.pop()
        for w in list(rows[v]) + [s for p, s in extra if p == v]:
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


def comps(rows: list[list[int]]) -> np.ndarray:
    offsets, targets = csr(rows)
    n = len(rows)
    comp = np.zeros(n, np.int32)
    count = k.components(offsets, targets, comp, np.zeros(n, np.int32), np.zeros(n, np.int32),
                         np.zeros(n, np.int64), np.zeros(n, np.bool_))
    assert sorted(set(comp.tolist())) == list(range(count))
    return comp


@settings(max_examples=200, deadline=None)
@given(graphs)
def test_components_are_the_mutually_reachable_sets_closing_in_order(case) -> None:
    n, rows, _dep, _t, _r = case
    comp = comps(rows)
    reach = [closure(rows, v) for v in range(n)]
    for u in range(n):
        for v in range(n):
            assert (comp[u] == comp[v]) == (v in reach[u] and u in reach[v])
            if v in reach[u] and comp[u] != comp[v]:
                assert comp[v] < comp[u]  # a component closes after every one it reaches


@settings(max_examples=200, deadline=None)
@given(graphs)
def test_reaching_roots_and_the_early_stop_give_the_full_searchs_chains(case) -> None:
    n, rows, dep, target, roots = case
    offsets, targets = csr(rows)
    comp = comps(rows)
    count = int(comp.max()) + 1
    croff = np.zeros(count + 1, np.int64)
    total = k.condense(offsets, targets, comp, croff, np.zeros(0, np.int32))
    csrc = np.zeros(total, np.int32)
    k.condense(offsets, targets, comp, croff, csrc)
    pairs = sorted((int(comp[s]), int(comp[p])) for p, s in dep if comp[s] != comp[p])
    cstamp = np.zeros(count, np.int32)
    k.component_ancestors(croff, csrc, np.array([s for s, _ in pairs], np.int64),
                          np.array([p for _, p in pairs], np.int64), int(comp[target]), cstamp, 1,
                          np.zeros(count, np.int32))
    reaching = [r for r in sorted(set(roots)) if cstamp[comp[r]] == 1]
    assert reaching == [r for r in sorted(set(roots)) if target in closure(rows, r, dep)]
    # the object-level search: full, then stopping once the reaching roots are reached
    roff, sources = np.zeros(n + 1, np.int64), np.zeros(len(targets), np.uint32)
    refs.reverse(offsets, targets, roff, sources)
    dsec = sorted((s, p) for p, s in dep)
    ds, dp = np.array([s for s, _ in dsec], np.int64), np.array([p for _, p in dsec], np.int64)
    full = [np.zeros(n, np.int32), np.zeros(n, np.int32), np.zeros(n, np.int32), np.zeros(n, np.bool_)]
    refs.ancestors(roff, sources, ds, dp, target, full[0], full[1], 1, full[2], full[3])
    early = [np.zeros(n, np.int32), np.zeros(n, np.int32), np.zeros(n, np.int32), np.zeros(n, np.bool_)]
    k.ancestors_until(roff, sources, ds, dp, target, early[0], early[1], 1, early[2], early[3],
                      np.array(reaching, np.int64))

    def chain(arrays, r):
        nxt, stamp, _q, via = arrays
        if stamp[r] != 1:
            return None
        out = [(r, False)]
        while out[-1][0] != target:
            v = out[-1][0]
            out.append((int(nxt[v]), bool(via[v])))
        return out
    for r in set(roots):
        assert chain(early, r) == chain(full, r)
