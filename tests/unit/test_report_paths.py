"""report/paths.py against a direct reading of its definition, on random forests: every
object's path (root kind, then types root object first, runs collapsed), a node's total is
the bytes of every object whose path starts with the node's path."""
from __future__ import annotations

import numpy as np
import pytest

from sosext.report.paths import KIND, OTHER, ROOT, UNREACHABLE, build_paths


def random_forest(rng: np.random.Generator, n: int, ntypes: int) -> tuple[np.ndarray, ...]:
    parent = np.empty(n, dtype=np.int32)
    for i in range(n):  # parents come first: always a tree
        r = rng.random()
        parent[i] = ROOT if i == 0 or r < 0.1 else UNREACHABLE if r < 0.15 else rng.integers(0, i)
    # long runs of one type (lists) and an unreachable object's children stay unreachable
    types = rng.integers(0, ntypes, n).astype(np.uint32)
    for i in range(1, n):
        if parent[i] >= 0 and parent[parent[i]] == UNREACHABLE:
            parent[i] = UNREACHABLE
        if parent[i] >= 0 and rng.random() < 0.4:
            types[i] = types[parent[i]]
    sizes = rng.integers(24, 5000, n).astype(np.uint32)
    kinds = np.where(parent == ROOT, rng.integers(0, 3, n), -1).astype(np.int16)
    return types, sizes, parent, kinds


def path_of(i: int, types, parent, kinds) -> tuple:
    chain = [i]
    while parent[chain[-1]] >= 0:
        chain.append(int(parent[chain[-1]]))
    chain.reverse()
    out: list = [("kind", int(kinds[chain[0]]))]
    for r in chain:
        if out[-1] != ("type", int(types[r])):
            out.append(("type", int(types[r])))
    return tuple(out)


def tree_paths(tree) -> list[tuple]:
    paths: list[tuple] = []
    for k in range(len(tree)):
        p = int(tree.parent[k])
        t = int(tree.type_id[k])
        step = ("kind", int(tree.kind[k])) if t == KIND else ("other",) if t == OTHER else ("type", t)
        paths.append(() if p < 0 else paths[p] + (step,))
    return paths


@pytest.mark.parametrize("seed", range(6))
def test_totals_are_the_bytes_under_each_path(seed: int) -> None:
    rng = np.random.default_rng(seed)
    types, sizes, parent, kinds = random_forest(rng, 3000, 5)
    tree = build_paths(types, sizes, parent, kinds, 3, max_depth=10_000, top_children=10_000, max_nodes=10_000_000)
    want: dict[tuple, int] = {}
    count: dict[tuple, int] = {}
    for i in range(len(parent)):
        if parent[i] == UNREACHABLE:
            continue
        p = path_of(i, types, parent, kinds)
        for k in range(len(p) + 1):
            want[p[:k]] = want.get(p[:k], 0) + int(sizes[i])
        count[p] = count.get(p, 0) + 1
    got = {p: int(t) for p, t in zip(tree_paths(tree), tree.total)}
    assert got == want
    assert {p: int(c) for p, c in zip(tree_paths(tree), tree.count) if c} == count


def test_cuts_keep_totals_nested_and_bounded() -> None:
    rng = np.random.default_rng(7)
    types, sizes, parent, kinds = random_forest(rng, 20_000, 40)
    full = build_paths(types, sizes, parent, kinds, 3, max_depth=10_000, top_children=10_000, max_nodes=10_000_000)
    tree = build_paths(types, sizes, parent, kinds, 3, max_depth=4, top_children=3, max_nodes=60)
    assert len(tree) <= 60 < len(full)
    assert int(tree.total[0]) == int(full.total[0]) == int(sizes[parent != UNREACHABLE].sum())
    paths = tree_paths(tree)
    assert max(len(p) for p in paths) <= 1 + 4 + 1  # kind, four types, and an "other" below them
    for k in range(1, len(tree)):
        assert 0 <= tree.parent[k] < k  # parents first
    kids: dict[int, list[int]] = {}
    for k in range(1, len(tree)):
        kids.setdefault(int(tree.parent[k]), []).append(k)
    for p, ks in kids.items():
        assert sum(int(tree.total[k]) for k in ks) <= int(tree.total[p])
        assert sum(1 for k in ks if tree.type_id[k] != OTHER) <= 3
    assert (tree.own() >= 0).all()
