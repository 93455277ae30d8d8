"""Paths from GC roots to an object, found backwards.

Instead of searching forward from every root (SOS's approach, which is what makes gcroot
slow on big heaps), we walk the reverse reference graph once from the target: every
object that can reach the target gets a pointer to its next step towards it, on a
shortest path. Each root whose object got such a pointer then yields its chain in time
proportional to the chain's length. Dependent handles add primary → secondary edges.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .roots import ClrRoot, RootKind

if TYPE_CHECKING:
    from .heap import ClrHeap


@dataclass(frozen=True, slots=True)
class RootPath:
    root: ClrRoot
    chain: tuple[int, ...]  # object indices, root object first, target last
    via_dependent: tuple[bool, ...]  # per chain element after the first: reached by a dependent handle


class PathFinder:
    """Shortest paths towards one target object, for any number of roots."""

    def __init__(self, heap: "ClrHeap", target_index: int) -> None:
        self.heap = heap
        self.index = heap.index()
        self.graph = heap.graph()
        self.target = target_index
        self.next_step: dict[int, int] = {target_index: -1}
        self.dependent_step: set[int] = set()
        self._search()

    def _dependent_parents(self) -> dict[int, list[int]]:
        parents: dict[int, list[int]] = {}
        for h in self.heap.roots(include_stacks=False).dependent_handles:
            p, s = self.index.find(h.object), self.index.find(h.secondary)
            if p is not None and s is not None:
                parents.setdefault(s, []).append(p)
        return parents

    def _search(self) -> None:
        ro, rs = self.graph.reverse()
        dep = self._dependent_parents()
        queue = deque([self.target])
        nxt = self.next_step
        while queue:
            node = queue.popleft()
            for parent in rs[ro[node]:ro[node + 1]].tolist():
                if parent not in nxt:
                    nxt[parent] = node
                    queue.append(parent)
            for parent in dep.get(node, ()):
                if parent not in nxt:
                    nxt[parent] = node
                    self.dependent_step.add(parent)
                    queue.append(parent)

    def reaches(self, obj_index: int) -> bool:
        return obj_index in self.next_step

    def path_from(self, root: ClrRoot) -> RootPath | None:
        start = self.index.find(root.object)
        if start is None and root.kind is RootKind.STACK:
            start = self.index.containing(root.object)
        if start is None or start not in self.next_step:
            return None
        chain = [start]
        via: list[bool] = []
        node = start
        while node != self.target:
            via.append(node in self.dependent_step)
            node = self.next_step[node]
            chain.append(node)
        return RootPath(root, tuple(chain), tuple(via))

    @property
    def ancestor_count(self) -> int:
        return len(self.next_step) - 1


def retained_set(heap: "ClrHeap", start_indices: np.ndarray, bfs_limit: int = 200_000) -> np.ndarray:
    """Object indices reachable from ``start_indices`` (included).

    Breadth-first order like SOS's objsize when the set is small; for a large set the
    membership comes from the vectorised mark and the order is by address, so that a
    retained set of millions of objects (or a million-long list) stays fast.
    """
    graph = heap.graph()
    mask = graph.mark(np.asarray(start_indices, dtype=np.int64))
    members = np.nonzero(mask)[0]
    if len(members) > bfs_limit:
        return members
    offsets, targets = graph.offsets, graph.targets
    seen: set[int] = set()
    order: list[int] = []
    queue = deque()
    for i in np.asarray(start_indices, dtype=np.int64).tolist():
        if i not in seen:
            seen.add(i)
            queue.append(i)
    while queue:
        i = queue.popleft()
        order.append(i)
        for k in targets[offsets[i]:offsets[i + 1]].tolist():
            if k not in seen:
                seen.add(k)
                queue.append(k)
    return np.array(order, dtype=np.int64)
