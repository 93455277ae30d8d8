"""Which heap objects are alive: the closure of the roots over the reference graph.

Dependent handles make it a fixpoint: a dependent handle's secondary is alive when its
primary is, so marking repeats until no dependent handle adds anything.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .roots import RootKind, RootSet

if TYPE_CHECKING:
    from .graph import ReferenceGraph
    from ..heap.index import HeapIndex


def root_indices(index: "HeapIndex", roots: RootSet) -> np.ndarray:
    """Object indices of every root; interior stack pointers count for their object."""
    out = []
    for r in roots.roots:
        i = index.find(r.object)
        if i is None and r.kind is RootKind.STACK:
            i = index.containing(r.object)
        if i is not None:
            out.append(i)
    return np.unique(np.array(out, dtype=np.int64))


def live_mask(index: "HeapIndex", graph: "ReferenceGraph", roots: RootSet) -> np.ndarray:
    seen = graph.mark(root_indices(index, roots))
    deps = roots.dependent_pairs(index.find)
    changed = True
    while changed and deps:
        changed = False
        grow = [s for p, s in deps if seen[p] and not seen[s]]
        if grow:
            graph.mark(np.array(grow, dtype=np.int64), visited=seen)
            changed = True
    return seen
