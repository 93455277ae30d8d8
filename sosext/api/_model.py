"""The only place the public API touches the heap model's internals.

The heap walk, the index, the graph, liveness and gcroot are being rewritten behind a few
calls that stay stable; this adapter uses exactly those and nothing else, so a change of
the index layout costs one edit here:

* ``heap.index()`` with numpy arrays ``addresses``, ``type_ids``, ``method_tables``,
  ``sizes``, ``generations``; ``index.find(address)``; ``index.stats(mask)``
* ``heap.live()`` (a bool mask over the index), ``heap.roots(include_stacks)``
* ``gcroot.PathFinder(heap, position).path_from(root)``
* ``heap.get_object(address)``, ``heap.types.get(mt)``, ``heap.types.name_of(mt)``
* ``heap.dominators()`` (``retained``, ``chain``, ``root_of``, ``top``), ``index.mask_type_ids``

(growth.py calls ``clr/snapshots/growth.py`` with the model heap: the leak commands' own model code.)
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

if TYPE_CHECKING:
    from ..clr.heap.heap import ClrHeap

# Objects per step when a query walks the index: bounded memory on any heap size.
CHUNK = 1 << 16


def index(heap: "ClrHeap") -> Any:
    return heap.index()


def positions(heap: "ClrHeap", *, type_ids: np.ndarray | None, generation: int | None,
              live: bool | None, min_size: int | None, max_size: int | None) -> Iterator[np.ndarray]:
    """Index positions that pass every filter, one chunk of the index at a time, in address order."""
    ix = heap.index()
    live_mask = heap.live() if live is not None else None
    n = len(ix.addresses)
    for lo in range(0, n, CHUNK):
        hi = min(n, lo + CHUNK)
        keep = np.ones(hi - lo, dtype=bool)
        if type_ids is not None:
            keep &= np.isin(ix.type_ids[lo:hi], type_ids)
        if generation is not None:
            keep &= ix.generations[lo:hi] == np.uint8(generation)
        if min_size is not None:
            keep &= ix.sizes[lo:hi] >= np.uint64(min_size)
        if max_size is not None:
            keep &= ix.sizes[lo:hi] <= np.uint64(max_size)
        if live_mask is not None:
            keep &= live_mask[lo:hi] if live else ~live_mask[lo:hi]
        found = np.flatnonzero(keep)
        if len(found):
            yield found + lo


def stats_mask(heap: "ClrHeap", *, type_ids: np.ndarray | None, generation: int | None,
               live: bool | None, min_size: int | None, max_size: int | None) -> np.ndarray | None:
    """One whole-index mask for ``index.stats`` (None: every object)."""
    ix = heap.index()
    if type_ids is None and generation is None and live is None and min_size is None and max_size is None:
        return None
    mask = np.ones(len(ix.addresses), dtype=bool)
    if type_ids is not None:
        mask &= np.isin(ix.type_ids, type_ids)
    if generation is not None:
        mask &= ix.generations == np.uint8(generation)
    if min_size is not None:
        mask &= ix.sizes >= np.uint64(min_size)
    if max_size is not None:
        mask &= ix.sizes <= np.uint64(max_size)
    if live is not None:
        mask &= heap.live() if live else ~heap.live()
    return mask


def type_ids_where(heap: "ClrHeap", keep) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Positions in ``index.method_tables`` whose MethodTable satisfies ``keep(mt)``."""
    mts = heap.index().method_tables.tolist()
    return np.array([i for i, mt in enumerate(mts) if keep(int(mt))], dtype=np.uint32)


def facts(heap: "ClrHeap", pos: np.ndarray) -> Iterator[tuple[int, int, int, int, int]]:
    """(position, address, MethodTable, size, generation) as Python ints."""
    ix = heap.index()
    mts = ix.method_tables[ix.type_ids[pos]]
    yield from zip(pos.tolist(), ix.addresses[pos].tolist(), mts.tolist(), ix.sizes[pos].tolist(),
                   ix.generations[pos].tolist())


def fact(heap: "ClrHeap", position: int) -> tuple[int, int, int, int]:
    """(address, MethodTable, size, generation) of one indexed object."""
    ix = heap.index()
    return (int(ix.addresses[position]), ix.method_table_at(position),
            int(ix.sizes[position]), int(ix.generations[position]))


def find(heap: "ClrHeap", address: int) -> int | None:
    return heap.index().find(address)


def stats(heap: "ClrHeap", mask: np.ndarray | None) -> list[tuple[int, int, int]]:
    return [(s.method_table, s.count, s.total_size) for s in heap.index().stats(mask)]


def count(heap: "ClrHeap") -> int:
    return len(heap.index().addresses)


def path_finder(heap: "ClrHeap", position: int):  # type: ignore[no-untyped-def]
    from ..clr.roots.gcroot import PathFinder
    return PathFinder(heap, position)


def dominators(heap: "ClrHeap"):  # type: ignore[no-untyped-def]
    """The dominator tree (``clr/roots/dominators.py``): ``retained``, ``chain``, ``root_of``, ``top``."""
    return heap.dominators()


def mask_of_type_ids(heap: "ClrHeap", type_ids: np.ndarray) -> np.ndarray:
    return heap.index().mask_type_ids(type_ids.tolist())
