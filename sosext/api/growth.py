"""What the leak commands answer, as records: retained sizes and dominators (``retained``,
``dominators``), and the growth between two heaps with its holders (``diff``, ``leaks``).

Each call runs the model code the commands run (``clr/roots/dominators.py``, ``clr/snapshots/growth.py``,
``clr/snapshots/snapshot.py``); this module only turns rows of the heap index into
:class:`~sosext.HeapObject` and keeps the records plain.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

from ..errors import UsageError
from . import _model

if TYPE_CHECKING:
    from ..clr.roots.dominators import DominatorTree
    from ..clr.snapshots.snapshot import HeapSnapshot, TypeDelta
    from .heap import Heap, HeapObject, TypeFilter
    from .runtime import Runtime


@dataclass(frozen=True, slots=True)
class HeldBy:
    """A root holding the top of a dominator chain, as ``retained`` and ``dominators`` print it.

    ``label`` is the words they print ("static MyApp.Program.s_cache (strong handle)",
    "thread 1a2b: MyApp.Worker.Run()"); ``kind`` is "handle", "stack" or "finalizer";
    ``address`` the handle, the stack slot (0 for a register) or the queue slot. ``direct`` is
    False when the root reaches the top only through other objects (several roots do: none
    of them alone keeps it).
    """

    kind: str
    label: str
    address: int
    direct: bool


@dataclass(frozen=True, slots=True)
class Retention:
    """What freeing one object would free: its retained size and its dominator chain.

    ``retained``: the object's own size plus that of everything only it keeps alive (0 when no
    root reaches it). ``chain``: the object, its immediate dominator, that one's … up to the
    object just under the roots (empty when unreachable); ``heap.retained(o)`` gives each
    one's retained size. ``held_by``: the roots holding the top of the chain.
    """

    object: "HeapObject"
    retained: int
    chain: tuple["HeapObject", ...]
    held_by: tuple[HeldBy, ...]


def _tree(heap: "Heap") -> "DominatorTree":
    return _model.dominators(heap._model)


def _retention(heap: "Heap", tree: "DominatorTree", row: int) -> Retention:
    chain = tree.chain(row)
    held = tree.root_of(row) if chain else []
    return Retention(heap._at(row), int(tree.retained[row]), tuple(heap._at(r) for r in chain),
                     tuple(HeldBy(h.kind, h.label, int(h.address), bool(h.direct)) for h in held))


def retained(heap: "Heap", obj: "HeapObject | int") -> int:
    return int(_tree(heap).retained[heap._position(obj)])


def retention(heap: "Heap", obj: "HeapObject | int") -> Retention:
    return _retention(heap, _tree(heap), heap._position(obj))


def dominators(heap: "Heap", top: int, type: "TypeFilter") -> list[Retention]:
    if top < 1:
        raise UsageError(f"top must be at least 1: {top}")
    tree = _tree(heap)
    ids = heap._type_ids(type, None)
    if ids is None:
        rows = tree.top(top)
    elif len(ids) == 0:
        rows = []
    else:
        rows = tree.top(top, mask=_model.mask_of_type_ids(heap._model, ids))
    return [_retention(heap, tree, r) for r in rows]


# -- growth between two heaps ----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class TypeGrowth:
    """One type's totals in the older and the newer heap, matched by name (C#'s spelling):
    a row of ``sosext diff``. ``*_retained`` are None when the older side has no retained
    sizes (a gcdump snapshot)."""

    name: str
    old_count: int
    new_count: int
    old_size: int
    new_size: int
    old_retained: int | None
    new_retained: int | None

    @property
    def count_delta(self) -> int:
        """Objects more (negative: fewer) in the newer heap."""
        return self.new_count - self.old_count

    @property
    def size_delta(self) -> int:
        """Bytes more (negative: fewer) in the newer heap."""
        return self.new_size - self.old_size

    @property
    def retained_delta(self) -> int | None:
        """How much the bytes its objects retain grew; None without retained sizes on both sides."""
        if self.old_retained is None or self.new_retained is None:
            return None
        return self.new_retained - self.old_retained


@dataclass(frozen=True, slots=True)
class Holder:
    """An object holding the growth (or ``instances`` alike ones, such as the wrappers behind a
    thousand leaked handles): the first object up a growing object's dominator chain whose type
    did not grow and is not a collection's internals. As ``sosext leaks`` prints it.

    ``retained``: what they retain now, together; ``retained_delta``: how much that grew, when
    known (the holder is its type's one instance). ``objects``/``size``: the growing objects
    they hold; ``types``: those per type as (name, objects, bytes), most bytes first.
    ``chain``: type names from the holder up its dominator chain; ``held_by``: the roots'
    labels.
    """

    object: "HeapObject"
    instances: int
    retained: int
    retained_delta: int | None
    objects: int
    size: int
    types: tuple[tuple[str, int, int], ...]
    chain: tuple[str, ...]
    held_by: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class HeapDiff:
    """``sosext.diff(old, new)``: every type's growth, largest growth in bytes first, and the
    holders of the growth. ``note`` says what the comparison cannot see (a gcdump side)."""

    old_source: str
    new_source: str
    types: tuple[TypeGrowth, ...]
    holders: tuple[Holder, ...]
    old_total: tuple[int, int]  # (objects, bytes)
    new_total: tuple[int, int]
    note: str = ""

    def grown(self) -> list[TypeGrowth]:
        """The types that grew in bytes, most first."""
        return [t for t in self.types if t.size_delta > 0]


@dataclass(frozen=True, slots=True)
class PathGroup:
    """Instances of a growing type kept along the same path: the same root kind and the same
    sequence of types from the root's object (first) to the instances' type (last); runs of
    one type (a linked list) appear once, ``repeated`` marking them."""

    root: str
    types: tuple[str, ...]
    repeated: tuple[bool, ...]
    count: int
    size: int
    example: "HeapObject"


@dataclass(frozen=True, slots=True)
class GrownType:
    """A growing type as ``sosext leaks`` explains it: its growth and the largest path groups."""

    growth: TypeGrowth
    groups: tuple[PathGroup, ...]
    group_count: int  # all groups (``groups`` holds the largest)
    unreachable: int  # instances no root reaches (garbage not yet collected)


@dataclass(frozen=True, slots=True)
class Leaks:
    """``sosext.leaks(old, new)``: what ``sosext leaks`` prints, as records."""

    old_source: str
    new_source: str
    holders: tuple[Holder, ...]
    types: tuple[GrownType, ...]
    note: str = ""


Baseline = Union["Runtime", str, "os.PathLike[str]"]


def _snapshots(old: Baseline, new: "Runtime") -> tuple["HeapSnapshot", "HeapSnapshot"]:
    from ..clr.snapshots import growth
    from .runtime import Runtime
    if not isinstance(new, Runtime):
        raise UsageError("the newer side must be an open runtime: sosext.open(core), open(pid=...) or current()")
    heap = new._model.heap
    if isinstance(old, Runtime):
        # Both open here: walk them one after the other (a core path instead is walked by a
        # child process while this one walks the newer heap, as the commands do).
        return growth.heap_snapshot(old._model.heap), growth.heap_snapshot(heap)
    if isinstance(old, (str, os.PathLike)):
        return growth.baseline_and_current(heap, os.fspath(old))
    raise UsageError(f"old must be an open runtime, a core file or a gcdump snapshot, not {old!r}")


def _growth(d: "TypeDelta") -> TypeGrowth:
    return TypeGrowth(d.name, d.old_count, d.new_count, d.old_size, d.new_size, d.old_retained, d.new_retained)


def _holders(new: "Runtime", reports: list) -> tuple[Holder, ...]:  # type: ignore[type-arg]
    heap = new.heap
    return tuple(Holder(heap.object(h.address), h.instances, h.retained, h.retained_delta, h.objects, h.size,
                        tuple(h.types), tuple(h.chain), tuple(label for _k, label in h.held_by)) for h in reports)


def diff(old: Baseline, new: "Runtime", *, type: str | None = None, holders: int = 3) -> HeapDiff:
    """Which types grew from ``old`` to ``new``, and the ``holders`` objects holding the most
    growth: what ``sosext diff OLD NEW`` prints, as a :class:`HeapDiff`.

    ``new`` is an open runtime (``sosext.open(core)``, ``open(pid=...)`` or ``current()``);
    ``old`` one too, or the path of an older core (walked by a child process meanwhile, as the
    commands do) or of a gcdump snapshot (compared with ``new``'s live objects). Types are
    matched by name; ``type`` keeps those whose name contains the text in any spelling.

    >>> d = sosext.diff("before.core", rt)
    >>> for t in d.grown()[:3]:
    ...     print(t.count_delta, t.size_delta, t.name)
    """
    from ..clr.snapshots import growth
    from ..clr.snapshots.snapshot import diff_snapshots, filter_deltas
    o, n = _snapshots(old, new)
    every = diff_snapshots(o, n)
    rows = filter_deltas(every, type_substring=type)
    found = growth.growth_holders(new._model.heap, rows, holders, every)
    return HeapDiff(o.source, n.source, tuple(_growth(r) for r in rows), _holders(new, found),
                    (o.total_count, o.total_size), (n.total_count, n.total_size), n.note)


def leaks(old: Baseline, new: "Runtime", *, type: str | None = None, top: int = 3, groups: int = 5,
          holders: int = 3) -> Leaks:
    """What ``sosext leaks OLD NEW`` prints, as a :class:`Leaks`: the ``holders`` objects holding
    the most growth, then for each of the ``top`` types that grew most (bytes and count) its
    instances in ``new`` grouped by their path from a root (the ``groups`` largest groups).
    ``old``, ``new`` and ``type`` as for :func:`diff`.

    >>> for h in sosext.leaks("before.core", rt).holders:
    ...     print(h.object.type.name, h.retained, h.retained_delta, h.held_by)
    """
    from ..clr.snapshots import growth
    from ..clr.snapshots.snapshot import diff_snapshots, filter_deltas
    o, n = _snapshots(old, new)
    every = diff_snapshots(o, n)
    rows = filter_deltas(every, type_substring=type)
    model = new._model.heap
    found = growth.growth_holders(model, rows, holders, every)
    heap = new.heap
    types = tuple(GrownType(_growth(g.delta), tuple(PathGroup(p.root, p.types, p.repeated, p.count, p.size,
                                                              heap.object(p.example)) for p in g.groups),
                            g.group_count, g.unreachable)
                  for g in growth.grown_types(model, rows, top, groups))
    return Leaks(o.source, n.source, _holders(new, found), types, n.note)
