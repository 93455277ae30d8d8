"""Heap growth between two dumps: which types grew, which objects hold the growth, and along
which paths of types the growing instances are kept. What ``heapdiff``/``sosext diff`` and
``leaks`` print, and what the API's ``sosext.diff`` and ``sosext.leaks`` return: both call
this module.

Types are matched by name in C#'s spelling (snapshot.py); the older heap is a snapshot made by
a child process (a core), read from a gcdump file, or made here (an open heap).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..roots.dominators import GrowthHolder
from ..progress import Progress, polled
from ..roots.retention import RetentionGroup, RetentionTree
from ..roots.roots import RootKind
from .snapshot import BaselineJob, HeapSnapshot, TypeDelta, align

if TYPE_CHECKING:
    from ..heap.heap import ClrHeap

# A collection's internals (a Dictionary's entry array, a List's items) belong to whoever owns
# the collection: a holder is looked for above them, where the code that fills it lives.
PASSED_OVER = ("System.Collections.",)


def heap_snapshot(heap: "ClrHeap", progress: Progress | None = None, live_only: bool = False) -> HeapSnapshot:
    """Per-type totals of ``heap``, with retained bytes unless ``live_only`` (as a gcdump counts)."""
    heap.index(progress)
    return HeapSnapshot.of_heap(heap, heap.runtime.target.describe(), retained=not live_only, live_only=live_only)


def baseline_and_current(heap: "ClrHeap", baseline: str,
                         progress: Progress | None = None) -> tuple[HeapSnapshot, HeapSnapshot]:
    """(old, new): ``baseline`` (a core a child process walks meanwhile, or a gcdump snapshot,
    compared then with the live objects of ``heap``) and ``heap`` itself."""
    from .gcdumpsnap import GcDump, is_gcdump
    if is_gcdump(baseline):
        snap = GcDump.load(baseline).heap_snapshot()
        new, old = align(heap_snapshot(heap, progress, live_only=True), snap)
        return old, new
    job = BaselineJob(baseline)
    try:
        new = heap_snapshot(heap, progress)
        old = job.result()
    finally:
        job.cancel()
    return old, new


@dataclass
class HolderReport:
    """Holders of the growth that look alike (same type, dominator chain and roots: the
    wrappers behind a thousand leaked handles) are one report."""

    holder: GrowthHolder  # the first of them
    address: int
    name: str
    retained: int  # what they retain now, together
    retained_delta: int | None  # growth of their type's retained bytes since the baseline
    chain: list[str]  # type names, the holder first, up its dominator chain
    held_by: list[tuple[str, str]]  # (root kind, root label)
    types: list[tuple[str, int, int]]  # growing types under them: (name, objects, bytes)
    instances: int = 1
    objects: int = 0  # growing objects under them, together
    size: int = 0  # their bytes
    rows: set = field(default_factory=set)  # the holders' index rows


def growth_holders(heap: "ClrHeap", grown: list[TypeDelta], limit: int, every: list[TypeDelta],
                   progress: Progress | None = None) -> list[HolderReport]:
    """The objects holding the growth, ranked by how much their retained bytes grew (known
    when the holder is its type's only instance), else by the growing bytes they hold. A growing
    object's holder is the first object up its dominator chain whose type did not grow and
    is not a collection's internals. ``grown``: the types whose growth is explained;
    ``every``: all types' deltas (a holder's type need not be among ``grown``)."""
    ix = heap.index()
    names = [heap.types.csharp_name_of(mt) for mt in ix.method_tables.tolist()]  # as the snapshots name types
    grown_names = {r.name for r in grown if r.size_delta > 0}
    growing = np.array([n in grown_names for n in names], dtype=bool)
    if not growing.any():
        return []
    passed = np.array([n.startswith(PASSED_OVER) for n in names], dtype=bool)
    tree = heap.dominators(progress)
    by_name = {r.name: r for r in every}

    def delta(row: int) -> int | None:
        # A growing object can be its own holder (nothing above it did not grow): its type's
        # growth is then not this object's, and it ranks by what it holds.
        if growing[ix.type_ids[row]]:
            return None
        # Snapshots know retained bytes per type: that is this object's growth only when it is
        # its type's one instance in both dumps.
        d = by_name.get(names[ix.type_ids[row]])
        return d.retained_delta if d is not None and d.new_count == 1 and d.old_count <= 1 else None

    roots_of = tree.root_rows()
    groups: dict[tuple, HolderReport] = {}
    below_of: dict[tuple, int | None] = {}
    for g in polled(tree.growth_holders(growing, passed)):
        # A root object holding growth through one of its references (a statics array's
        # slot) is shown as that reference: the object the static refers to.
        row = g.via if g.via >= 0 else g.row
        chain = tree.chain(row)
        under = tree.chain(g.example)
        k = under.index(row) if row in under else 0
        below = under[k - 1] if k > 0 else None
        names_up = [names[ix.type_ids[r]] for r in chain]
        # Alike: same types up the chain and a top held by the same kinds of long-lived roots
        # (a thousand wrappers behind a thousand strong handles); else each holder on its own.
        top_roots = roots_of.get(chain[-1], [])
        kinds = tuple(sorted({(r.kind.value, r.handle.handle_type if r.handle else -1) for r in top_roots}))
        alike = bool(top_roots) and len(chain) == 1 and all(r.kind is not RootKind.STACK for r in top_roots)
        key = (tuple(names_up), kinds if alike else row)
        rep = groups.get(key)
        if rep is None:
            rep = groups[key] = HolderReport(g, int(ix.addresses[row]), names_up[0], 0, delta(row), names_up,
                                             [], [], 0)
            below_of[key] = below
        if row not in rep.rows:
            rep.rows.add(row)
            rep.instances += 1
            rep.retained += int(tree.retained[row])
        rep.objects += g.objects
        rep.size += g.size
        rep.types.extend((names[t], c, b) for t, c, b in g.types)
    out = list(groups.values())
    out.sort(key=lambda r: (-(r.retained_delta if r.retained_delta is not None else r.size), -r.size, r.address))
    below_by_rep = {id(groups[k]): b for k, b in below_of.items()}
    for rep in out[:limit]:
        merged: dict[str, list[int]] = {}
        for n, c, b in rep.types:
            acc = merged.setdefault(n, [0, 0])
            acc[0] += c
            acc[1] += b
        rep.types = sorted(((n, c, b) for n, (c, b) in merged.items()), key=lambda x: (-x[2], x[0]))
        first = rep.holder.via if rep.holder.via >= 0 else rep.holder.row
        rep.held_by = [(h.kind, h.label) for h in tree.root_of(first, limit=3, below=below_by_rep[id(rep)])]
    return out[:limit]


@dataclass(frozen=True)
class GrownType:
    """One growing type as ``leaks`` explains it: its growth, and the instances of the newer
    heap grouped by their path from a root (root kind and sequence of types)."""

    delta: TypeDelta
    groups: tuple[RetentionGroup, ...]  # the largest groups, by bytes
    group_count: int  # all groups
    unreachable: int  # instances no root reaches (garbage not yet collected)


def grown_types(heap: "ClrHeap", deltas: list[TypeDelta], top: int, groups: int) -> list[GrownType]:
    """The ``top`` types that grew most in bytes (and in count), each with its retention groups."""
    grown = [r for r in deltas if r.size_delta > 0 and r.count_delta > 0][:top]
    if not grown:
        return []
    ix = heap.index()
    tree = RetentionTree(heap)
    names = [heap.types.csharp_name_of(mt) for mt in ix.method_tables.tolist()]
    out = []
    for r in grown:
        ids = [i for i, n in enumerate(names) if n == r.name]
        instances = np.nonzero(ix.mask_type_ids(ids))[0]
        found = tree.groups(instances)
        unreached = len(instances) - sum(g.count for g in found)
        out.append(GrownType(r, tuple(found[:groups]), len(found), unreached))
    return out
