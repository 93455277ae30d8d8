"""Retention paths grouped by type: the icicle's and the folded stacks' tree, built with numpy.

Input is a tree over the heap index (``parent`` per row: the immediate dominator; ``ROOT``
under the virtual root, ``UNREACHABLE`` outside the tree; any tree works). An object's
*path* is the sequence of types from its root object down to it, runs of one type
collapsed (a linked list is one ``Node`` step, not ten thousand), with the root's kind in
front: ``strong handle → Cache → Entry[] → Entry → Byte[]``.

A node's *total* is the sum of the sizes of every object whose path starts with the node's
path; on a dominator tree that is exactly the retained size of the objects at the node
(the top object of each run: its dominator subtree is what carries its path).

Every step is a whole-array numpy pass; the only loops run over pointer-jumping rounds
(logarithmic in the tree's depth) and over path levels (at most ``max_depth``):
1. run heads: an object whose parent is of another type (or a root) starts a run; every
   other object joins its parent's run (pointer jumping to the head);
2. the heads form a tree of their own; each head's depth in it is its path length (list
   ranking by pointer jumping); heads deeper than ``max_depth`` are folded into their
   ancestor at that depth, so no path is longer than ``max_depth`` types;
3. level by level, (parent node, type) pairs become nodes (np.unique);
4. sizes are summed per node (bincount) and totals accumulated bottom-up by level;
5. the tree is cut to a few thousand nodes: each node keeps its ``top_children`` largest
   children, the rest becomes one "other" node, and the largest ``max_nodes`` survive.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ROOT = -1
UNREACHABLE = -2
OTHER = -1  # type id of an "other" node
KIND = -2  # type id of a root-kind node
_CHUNK = 1 << 22


@dataclass
class PathTree:
    """The cut tree, root-kind nodes first. Node 0 is the virtual root ("all roots")."""

    parent: np.ndarray  # int64 node id, -1 for node 0
    type_id: np.ndarray  # int64 type id, KIND for root-kind nodes, OTHER for "other" nodes
    kind: np.ndarray  # int64 root-kind id (meaningful for KIND nodes)
    total: np.ndarray  # int64 bytes under the node
    count: np.ndarray  # int64 objects at the node of the node's own type
    other_types: np.ndarray  # int64: how many (parent, type) groups an "other" node stands for
    example: np.ndarray  # int64 index row of the largest run head at the node (-1 if none)

    def __len__(self) -> int:
        return len(self.parent)

    def children(self) -> list[list[int]]:
        kids: list[list[int]] = [[] for _ in range(len(self))]
        for k, p in enumerate(self.parent.tolist()):
            if p >= 0:
                kids[p].append(k)
        return kids

    def own(self) -> np.ndarray:
        """Total minus the kept children's totals: what flamegraph.pl calls a frame's self."""
        out = self.total.copy()
        m = self.parent >= 0
        np.subtract.at(out, self.parent[m], self.total[m])
        return out


def _jump(ptr: np.ndarray) -> np.ndarray:
    """Follow ``ptr`` to its fixed points (every chain must end in one: ptr[x] == x)."""
    for _ in range(80):
        nxt = ptr[ptr]
        if np.array_equal(nxt, ptr):
            return ptr
        ptr = nxt
    raise ValueError("the tree has a cycle")


def _depths(up: np.ndarray) -> np.ndarray:
    """Depth of each node of a forest given as parent positions (-1 at the tops; tops are 1)."""
    depth = np.ones(len(up), dtype=np.int32)
    up = up.copy()
    for _ in range(80):
        m = np.nonzero(up >= 0)[0]
        if not len(m):
            return depth
        nd = depth.copy()
        nd[m] += depth[up[m]]
        nu = up.copy()
        nu[m] = up[up[m]]
        depth, up = nd, nu
    raise ValueError("the tree has a cycle")


def _unique(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(key, return_inverse=True) without sorting when the keys span a small range
    (the usual case: a few thousand parent nodes times the types)."""
    lo = int(key.min())
    span = int(key.max()) - lo + 1
    if span > max(4 * len(key), 1 << 22):
        return np.unique(key, return_inverse=True)
    present = np.zeros(span, dtype=bool)
    off = key - lo
    present[off] = True
    rank = np.cumsum(present, dtype=np.int32) - 1
    return np.nonzero(present)[0] + lo, rank[off]


def build_paths(type_ids: np.ndarray, sizes: np.ndarray, parent: np.ndarray, root_kind: np.ndarray,
                n_kinds: int, rank: np.ndarray | None = None, *, max_depth: int = 16,
                top_children: int = 12, max_nodes: int = 2000) -> PathTree:
    """The grouped path tree of the objects ``parent`` reaches.

    ``root_kind`` gives, for rows with ``parent == ROOT``, their root kind id in
    ``[0, n_kinds)``; ``rank`` (e.g. retained bytes) picks each node's example head.
    """
    n = len(parent)
    it = np.int32 if n < (1 << 31) - 1 else np.int64  # row numbers: 4 bytes each below 2G objects
    tids = type_ids
    reach = parent != UNREACHABLE
    top = parent == ROOT
    par = np.where(parent >= 0, parent, 0).astype(it, copy=False)
    is_head = reach & (top | (tids[par] != tids))
    # 1. run heads
    rh = np.where(is_head | ~reach, np.arange(n, dtype=it), par)
    rh = _jump(rh)
    heads = np.nonzero(is_head)[0].astype(it)
    del is_head
    h = len(heads)
    hpos = np.full(n, -1, dtype=it)
    hpos[heads] = np.arange(h, dtype=it)
    hp = np.where(top[heads], -1, hpos[rh[par[heads]]]).astype(it)
    del par, top
    # 2. path depth; deep heads fold into their ancestor at max_depth
    depth = _depths(hp)
    anchor = np.where(depth <= max_depth, np.arange(h, dtype=it), hp)
    anchor = _jump(anchor)
    # 3. nodes level by level: 0 = all roots, 1..n_kinds = root kinds, then types
    node_parent = [np.array([-1], dtype=np.int64), np.zeros(n_kinds, dtype=np.int64)]
    node_type = [np.array([KIND], dtype=np.int64), np.full(n_kinds, KIND, dtype=np.int64)]
    group = np.full(h, -1, dtype=it)
    ntypes = int(tids.max()) + 1 if n else 1  # type_ids is never empty when n > 0
    base = 1 + n_kinds
    order = np.argsort(depth, kind="stable").astype(it)
    bounds = np.searchsorted(depth[order], np.arange(1, max_depth + 2))
    del depth
    level_start = [0, 1]
    for lvl in range(1, max_depth + 1):
        at = order[bounds[lvl - 1]:bounds[lvl]]
        level_start.append(base)
        if not len(at):
            break
        if lvl == 1:
            pnode = 1 + root_kind[heads[at]].astype(np.int64)
        else:
            pnode = group[hp[at]].astype(np.int64)
        key = pnode * ntypes + tids[heads[at]]
        uniq, inv = _unique(key)
        group[at] = base + inv
        node_parent.append(uniq // ntypes)
        node_type.append(uniq % ntypes)
        base += len(uniq)
        del pnode, key, inv, at
    level_start.append(base)
    del order, hp
    parents = np.concatenate(node_parent)
    ntype = np.concatenate(node_type)
    # 4. sizes per node (a chunk of rows at a time: no heap-sized temporaries), totals bottom-up
    head_node = group[anchor]
    del anchor
    total_f = np.zeros(base, dtype=np.float64)
    count = np.zeros(base, dtype=np.int64)
    for lo in range(0, n, _CHUNK):
        hi = min(n, lo + _CHUNK)
        live = reach[lo:hi]
        node_of = head_node[hpos[rh[lo:hi][live]]]
        total_f += np.bincount(node_of, weights=sizes[lo:hi][live].astype(np.float64), minlength=base)
        same = ntype[node_of] == tids[lo:hi][live]
        count += np.bincount(node_of[same], minlength=base)
        del node_of, same, live
    del head_node, hpos, rh
    total = np.rint(total_f).astype(np.int64)
    for lvl in range(len(level_start) - 2, 0, -1):
        lo, hi = level_start[lvl], level_start[lvl + 1]
        if hi > lo:
            np.add.at(total, parents[lo:hi], total[lo:hi])
    # each node's example: its head that ranks highest (the first such row on ties)
    example = np.full(base, -1, dtype=np.int64)
    if h:
        key = (rank if rank is not None else sizes)[heads]
        best = np.zeros(base, dtype=key.dtype)
        np.maximum.at(best, group, key)
        cand = np.nonzero(key == best[group])[0]
        del key
        nodes, first = np.unique(group[cand], return_index=True)
        example[nodes] = heads[cand[first]]
    kinds = np.full(base, -1, dtype=np.int64)
    kinds[1:1 + n_kinds] = np.arange(n_kinds)
    return _cut(parents, ntype, kinds, total, count, example, level_start, top_children, max_nodes)


def _cut(parents: np.ndarray, ntype: np.ndarray, kinds: np.ndarray, total: np.ndarray, count: np.ndarray,
         example: np.ndarray, level_start: list[int], top_children: int, max_nodes: int) -> PathTree:
    """Keep each node's largest children (the rest: one "other" node per parent), then the
    ``max_nodes`` largest nodes; parents always come before their children."""
    n = len(parents)
    keep = np.zeros(n, dtype=bool)
    keep[0] = True
    keep[1:level_start[2]] = total[1:level_start[2]] > 0
    for lvl in range(2, len(level_start) - 1):
        lo, hi = level_start[lvl], level_start[lvl + 1]
        if hi <= lo:
            continue
        ids = np.arange(lo, hi)
        ids = ids[keep[parents[ids]]]
        if not len(ids):
            continue
        by = ids[np.lexsort((-total[ids], parents[ids]))]
        p = parents[by]
        start = np.ones(len(p), dtype=bool)
        start[1:] = p[1:] != p[:-1]
        first_of = np.maximum.accumulate(np.where(start, np.arange(len(p)), 0))
        rank = np.arange(len(p)) - first_of
        keep[by[rank < top_children]] = True
    # The rest of each kept parent's children: "other" nodes.
    rest = ~keep & (parents >= 0)
    rest[rest] = keep[parents[rest]]
    op = np.unique(parents[rest])
    o_total = np.zeros(len(op), dtype=np.int64)
    o_count = np.zeros(len(op), dtype=np.int64)
    o_types = np.zeros(len(op), dtype=np.int64)
    where = np.searchsorted(op, parents[rest])
    np.add.at(o_total, where, total[rest])
    np.add.at(o_types, where, 1)
    kept = np.nonzero(keep)[0]
    all_parent = np.concatenate([parents[kept], op])
    all_total = np.concatenate([total[kept], o_total])
    all_type = np.concatenate([ntype[kept], np.full(len(op), OTHER, dtype=np.int64)])
    all_kind = np.concatenate([kinds[kept], np.full(len(op), -1, dtype=np.int64)])
    all_count = np.concatenate([count[kept], o_count])
    all_other = np.concatenate([np.zeros(len(kept), dtype=np.int64), o_types])
    all_example = np.concatenate([example[kept], np.full(len(op), -1, dtype=np.int64)])
    old_id = np.concatenate([kept, np.full(len(op), -1, dtype=np.int64)])
    level = np.searchsorted(np.array(level_start[1:]), np.concatenate([kept, op]), side="right")
    level[len(kept):] += 1
    # The largest max_nodes (ties: shallower first), so every kept node's parent is kept.
    order = np.lexsort((level, -all_total))[:max_nodes]
    order = order[np.lexsort((-all_total[order], level[order]))]
    renum = np.full(n, -1, dtype=np.int64)
    sel_old = old_id[order]
    renum[sel_old[sel_old >= 0]] = np.nonzero(sel_old >= 0)[0]
    new_parent = np.where(all_parent[order] >= 0, renum[np.maximum(all_parent[order], 0)], -1)
    alive = (new_parent >= 0) | (np.arange(len(order)) == 0)
    # A node whose parent fell to the cap goes too (cannot happen when totals nest; kept safe).
    sel = np.nonzero(alive)[0]
    remap = np.full(len(order), -1, dtype=np.int64)
    remap[sel] = np.arange(len(sel))
    fin_parent = np.where(new_parent[sel] >= 0, remap[np.maximum(new_parent[sel], 0)], -1)
    o = order[sel]
    return PathTree(fin_parent, all_type[o], all_kind[o], all_total[o], all_count[o], all_other[o],
                    all_example[o])
