"""What keeps what alive, for the report: the one place that reads the dominator tree.

``parent`` is each object's immediate dominator (``heap.dominators()``), ``retained`` what
freeing it would free; the rest is how the report names roots: a root kind per object at
the top of a chain, and leaks'/dominators' wording for a holder's roots.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ..clr.roots.roots import RootKind

if TYPE_CHECKING:
    from ..clr.heap.heap import ClrHeap
    from ..clr.progress import Progress

ROOT = -1
UNREACHABLE = -2
SEVERAL = "several roots"  # an object under the virtual root that no single root keeps


@dataclass
class Retention:
    parent: np.ndarray  # signed int per index row: ROOT, UNREACHABLE or a row
    retained: np.ndarray  # uint64 bytes per row
    chain_of: Callable[[int], list[int]]  # rows from the root object down to the row
    kinds: list[str]  # root-kind labels
    root_kind: np.ndarray  # int16 per row: index into kinds for rows with parent == ROOT, else -1
    retained_by_type: np.ndarray  # uint64 per type id (dumpheap -stat -retained)
    top: Callable[[int], list[int]]  # rows retaining the most, largest first
    held_by: Callable[[int], str]  # how leaks/dominators name the root holding a row
    tree: Any = None  # the model's DominatorTree, for what the report asks of it directly


def retention_of(heap: "ClrHeap", progress: "Progress | None" = None) -> Retention:
    dt = heap.dominators(progress)
    parent = np.asarray(dt.idom)  # int32: build_paths takes it as it is
    by_type = np.zeros(len(heap.index().method_tables), dtype=np.uint64)
    for t in dt.retained_by_type():
        by_type[t.type_id] = t.retained

    def chain(row: int) -> list[int]:
        return list(dt.chain(row))[::-1]  # dt.chain runs from the row up to the top

    def held_by(row: int) -> str:
        held = dt.root_of(row, limit=2)
        if not held:
            return "unreachable"
        return held[0].label + (" (and other roots)" if len(held) > 1 else "")
    labels = _root_labels(heap)
    for row in _also_referenced(heap, parent, labels):
        labels[row] = SEVERAL
    kinds, root_kind = _kind_column(labels, parent)
    return Retention(parent, np.asarray(dt.retained), chain, kinds, root_kind, by_type,
                     lambda n: list(dt.top(n)), held_by, dt)


def _root_labels(heap: "ClrHeap") -> dict[int, str]:
    """Row -> root kind of every root object; a handle outranks the finalizer queue, which
    outranks a stack (the long-lived holder is the one a leak hunter wants)."""
    ix = heap.index()
    order = {RootKind.HANDLE: 0, RootKind.FINALIZER: 1, RootKind.STACK: 2}
    out: dict[int, str] = {}
    for r in sorted(heap.roots().roots, key=lambda r: order[r.kind]):
        i = ix.find(r.object)
        if i is None and r.kind is RootKind.STACK:
            i = ix.containing(r.object)
        if i is None or i in out:
            continue
        if r.kind is RootKind.HANDLE:
            out[i] = f"{r.handle.kind_name} handle" if r.handle else "handle"
        elif r.kind is RootKind.FINALIZER:
            out[i] = "finalizer queue"
        else:
            out[i] = "stack"
    for hnd in heap.roots().dependent_handles:
        s = ix.find(hnd.secondary)
        if s is not None and s not in out:
            out[s] = "dependent handle"
    return out


def _also_referenced(heap: "ClrHeap", parent: np.ndarray, labels: dict[int, str]) -> list[int]:
    """Root objects under the virtual root that a reachable object references too: a static
    and a thread's local, say. No single root keeps them, so neither kind names them."""
    rows = np.array([r for r in labels if parent[r] == ROOT], dtype=np.int64)
    if not len(rows):
        return []
    g = heap.graph()
    wanted = np.zeros(len(parent), dtype=bool)
    wanted[rows] = True
    hit = np.nonzero(wanted[g.targets])[0]  # one byte per reference, no sort
    src = np.searchsorted(g.offsets, hit, side="right") - 1
    dst = g.targets[hit].astype(np.int64)
    keep = (src != dst) & (parent[src] != UNREACHABLE)
    return sorted(set(dst[keep].tolist()))


def _kind_column(labels: dict[int, str], parent: np.ndarray) -> tuple[list[str], np.ndarray]:
    kinds = sorted(set(labels.values()) | {SEVERAL})
    ids = {k: n for n, k in enumerate(kinds)}
    column = np.full(len(parent), -1, dtype=np.int16)
    top = np.nonzero(parent == ROOT)[0]
    column[top] = ids[SEVERAL]
    if labels:
        rows = np.fromiter(labels.keys(), dtype=np.int64, count=len(labels))
        vals = np.fromiter((ids[v] for v in labels.values()), dtype=np.int16, count=len(labels))
        at_top = parent[rows] == ROOT
        column[rows[at_top]] = vals[at_top]
    used = sorted(set(column[top].tolist()))
    if len(used) == len(kinds):
        return kinds, column
    remap = np.full(len(kinds), -1, dtype=np.int16)
    remap[used] = np.arange(len(used))
    column[top] = remap[column[top]]
    return [kinds[k] for k in used], column
