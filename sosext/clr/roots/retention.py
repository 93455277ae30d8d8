"""Why many objects are alive, in one answer: retention paths grouped by their shape.

One breadth-first walk from every root records, for each reachable object, the object it
was reached from (a shortest-path tree). An instance's retention path is then its chain of
parents up to a root; instances whose paths have the same root kind and the same sequence
of types (runs of one type collapsed, as in a linked list) form one group. This answers
"what holds the growth" for thousands of instances at once, where gcroot answers for one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .graph import ragged_arange
from ..progress import check_interrupt
from .roots import ClrRoot, RootKind

if TYPE_CHECKING:
    from ..heap.heap import ClrHeap

UNREACHED = -2
ROOT = -1
MAX_DEPTH = 10_000


@dataclass(frozen=True, slots=True)
class RetentionGroup:
    root: str  # "strong handle", "pinned handle", "finalizer queue", "thread 1a2b: Method()"
    types: tuple[str, ...]  # root object's type first, the instances' type last; runs collapsed
    repeated: tuple[bool, ...]  # per entry of ``types``: the type repeats consecutively on the path
    count: int
    size: int
    example: int  # address of one instance
    example_path: tuple[int, ...]  # its chain of addresses, root object first


class RetentionTree:
    def __init__(self, heap: "ClrHeap") -> None:
        self.heap = heap
        self.index = heap.index()
        self.graph = heap.graph()
        roots = heap.roots()
        self.root_of: dict[int, ClrRoot] = {}
        order = {RootKind.HANDLE: 0, RootKind.FINALIZER: 1, RootKind.STACK: 2}
        for r in sorted(roots.roots, key=lambda r: order[r.kind]):
            i = self.index.find(r.object)
            if i is None and r.kind is RootKind.STACK:
                i = self.index.containing(r.object)
            if i is not None and i not in self.root_of:
                self.root_of[i] = r
        # Long-lived roots first: an object a static (handle) holds is attributed to it even
        # when a thread's local happens to point at it too, which is what a leak hunter wants.
        self.parent = np.full(len(self.index), UNREACHED, dtype=np.int64)
        for kind in (RootKind.HANDLE, RootKind.FINALIZER, RootKind.STACK):
            starts = np.array(sorted(i for i, r in self.root_of.items()
                                     if r.kind is kind and self.parent[i] == UNREACHED), dtype=np.int64)
            if len(starts):
                self.parent[starts] = ROOT
                self._bfs(starts, self.parent)
            self._add_dependents(roots.dependent_pairs(self.index.find))

    def _bfs(self, starts: np.ndarray, parent: np.ndarray) -> None:
        """Extend the tree breadth-first from ``starts`` (already in it) to what they reach."""
        offsets, targets = self.graph.offsets, self.graph.targets
        frontier = starts
        while frontier.size:
            check_interrupt()  # one level per turn: a long list makes many levels
            starts_ = offsets[frontier]
            counts = offsets[frontier + 1] - starts_
            kids = targets[np.repeat(starts_, counts) + ragged_arange(counts)].astype(np.int64)
            srcs = np.repeat(frontier, counts)
            fresh = parent[kids] == UNREACHED
            kids, srcs = kids[fresh], srcs[fresh]
            uk, first = np.unique(kids, return_index=True)
            parent[uk] = srcs[first]
            frontier = uk
            if 0 < frontier.size < 64:
                frontier = self._thin(frontier, parent)

    def _thin(self, frontier: np.ndarray, parent: np.ndarray, budget: int = 500_000) -> np.ndarray:
        """Follow a thin frontier (a long list) breadth-first in Python, then hand back."""
        offsets, targets = self.graph.offsets, self.graph.targets
        queue = [int(x) for x in frontier]
        steps = 0
        while queue and len(queue) < 4096 and steps < budget:
            nxt = []
            for i in queue:
                steps += 1
                if steps & 4095 == 0:
                    check_interrupt()
                for k in targets[offsets[i]:offsets[i + 1]].tolist():
                    if parent[k] == UNREACHED:
                        parent[k] = i
                        nxt.append(k)
            queue = nxt
        return np.array(queue, dtype=np.int64)

    def _add_dependents(self, pairs: list[tuple[int, int]]) -> None:
        while True:
            grow = [(p, s) for p, s in pairs if self.parent[p] != UNREACHED and self.parent[s] == UNREACHED]
            if not grow:
                return
            for p, s in grow:
                self.parent[s] = p
            self._bfs(np.array([s for _p, s in grow], dtype=np.int64), self.parent)

    def reached(self, i: int) -> bool:
        return self.parent[i] != UNREACHED

    def path(self, i: int) -> list[int]:
        """Object indices from the root object down to ``i`` (empty if unreachable)."""
        if self.parent[i] == UNREACHED:
            return []
        out = [i]
        while self.parent[out[-1]] >= 0 and len(out) < MAX_DEPTH:
            out.append(int(self.parent[out[-1]]))
        return out[::-1]

    def root_label(self, root_obj: int, below: int | None = None) -> str:
        from .dominators import root_label
        return root_label(self.heap, self.root_of.get(root_obj), root_obj, below)

    def groups(self, instances: np.ndarray) -> list[RetentionGroup]:
        """Group ``instances`` (object indices) by the shape of their retention path."""
        ix = self.index
        inst = instances[self.parent[instances] != UNREACHED]
        if not len(inst):
            return []
        tids = ix.type_ids.astype(np.uint64)
        sig = np.zeros(len(inst), dtype=np.uint64)
        prime = np.uint64(1099511628211)
        prev = tids[inst].copy()
        sig = (sig * prime) ^ (prev + np.uint64(1))
        root_obj = inst.copy()
        below_root = inst.copy()  # the object just below the root object on the path
        cur = self.parent[inst].copy()
        with np.errstate(over="ignore"):
            for _ in range(MAX_DEPTH):
                check_interrupt()
                act = np.nonzero(cur >= 0)[0]
                if not len(act):
                    break
                c = cur[act]
                t = tids[c]
                changed = t != prev[act]
                idx = act[changed]
                sig[idx] = (sig[idx] * prime) ^ (t[changed] + np.uint64(1))
                prev[act] = t
                below_root[act] = root_obj[act]
                root_obj[act] = c
                cur[act] = self.parent[c]
        # Group by (path signature, root label); a statics array's label names the static.
        # (A label per distinct pair, then an array lookup: no Python step per instance, which
        # at 100M objects meant millions of tuples.)
        keys, pair_of = np.unique((root_obj.astype(np.int64) << 32) | below_root.astype(np.int64),
                                  return_inverse=True)  # one 64-bit key per pair (object rows < 2**32)
        labels = [self.root_label(int(k >> 32), int(k & 0xFFFFFFFF)) for k in keys.tolist()]
        label_ids = {lab: k for k, lab in enumerate(sorted(set(labels)))}
        lab_of = np.array([label_ids[lab] for lab in labels], dtype=np.uint64)[np.asarray(pair_of).reshape(-1)]
        key = sig ^ (lab_of * np.uint64(0x9E3779B97F4A7C15))
        uniq, first, inverse, counts = np.unique(key, return_index=True, return_inverse=True, return_counts=True)
        sizes = np.bincount(inverse, weights=ix.sizes[inst].astype(np.float64), minlength=len(uniq))
        out = []
        for g in range(len(uniq)):
            example = int(inst[first[g]])
            path = self.path(example)
            types, repeated = _collapse([self.heap.csharp_type_name_at(p) for p in path])
            label = labels[int(np.asarray(pair_of).reshape(-1)[first[g]])]
            out.append(RetentionGroup(label, tuple(types), tuple(repeated),
                                      int(counts[g]), int(sizes[g]), int(ix.addresses[example]),
                                      tuple(int(ix.addresses[p]) for p in path)))
        out.sort(key=lambda g: (-g.size, -g.count, g.types))
        return out


def _collapse(names: list[str]) -> tuple[list[str], list[bool]]:
    types: list[str] = []
    repeated: list[bool] = []
    for n in names:
        if types and types[-1] == n:
            repeated[-1] = True
        else:
            types.append(n)
            repeated.append(False)
    return types, repeated
