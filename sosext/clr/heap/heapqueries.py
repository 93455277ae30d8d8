"""Whole-heap questions answered from the index and the reference graph: which objects are
exceptions or RuntimeTypes, which old objects hold young ones (the GC's card-marking
work), and which objects in a block of pointers nothing roots.

Each is a pass over index columns (numpy) or the graph's rows; no Python object per heap
object is made except for what is returned.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..threads.exceptions import is_exception
from ..roots.graph import ragged_arange
from ..roots.liveness import live_mask
from .objects import type_desc_of
from ..roots.roots import RootKind, RootSet
from .segments import Generation

if TYPE_CHECKING:
    from .heap import ClrHeap
    from .index import HeapIndex

RUNTIME_TYPE = "System.RuntimeType"
EPHEMERAL = (Generation.GEN0, Generation.GEN1)


def exception_positions(heap: "ClrHeap", mask: np.ndarray | None = None) -> np.ndarray:
    """Index positions of every object whose type is System.Exception or derives from it."""
    ix = heap.index()
    runtime = heap.runtime
    ids = [i for i, mt in enumerate(ix.method_tables.tolist())
           if mt != heap.free_mt and is_exception(runtime, mt)]  # type: ignore[arg-type]
    keep = ix.mask_type_ids(ids)
    if mask is not None:
        keep &= mask
    return np.flatnonzero(keep)


@dataclass(frozen=True, slots=True)
class RuntimeTypeObject:
    address: int
    handle: int  # m_handle: a MethodTable, or a TypeDesc with bit 1 set
    method_table: int  # 0 when the handle is a TypeDesc or not a known MethodTable
    module: int  # the type's module (0 when unknown)


def runtime_type_objects(heap: "ClrHeap") -> list[RuntimeTypeObject]:
    """Every System.RuntimeType on the heap with the type handle it stands for."""
    ix = heap.index()
    runtime = heap.runtime
    fields = runtime.fields  # type: ignore[attr-defined]
    out = []
    for tid, mt in enumerate(ix.method_tables.tolist()):
        if heap.types.name_of(mt) != RUNTIME_TYPE:
            continue
        f = fields.field(mt, "m_handle")
        if f is None:
            continue
        for address in ix.addresses[ix.mask_type_ids([tid])].tolist():
            handle = fields.read(f, f.address_in(address))
            known = 0
            module = 0
            if handle and type_desc_of(handle) is None and runtime.is_method_table(handle):
                t = heap.types.get(handle)
                if t is not None:
                    known, module = handle, t.module
            out.append(RuntimeTypeObject(address, handle, known, module))
    out.sort(key=lambda r: r.address)
    return out


def edges(ix: "HeapIndex", graph, sources: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
    """(source, target) index positions of every reference held by the objects ``sources``."""
    starts = graph.offsets[sources]
    counts = graph.offsets[sources + 1] - starts
    src = np.repeat(sources, counts)
    if not len(src):
        return src, np.empty(0, dtype=np.int64)
    dst = graph.targets[np.repeat(starts, counts) + ragged_arange(counts)].astype(np.int64)
    return src, dst


def cross_generation_references(heap: "ClrHeap", from_gens: tuple[Generation, ...],
                                to_gens: tuple[Generation, ...]) -> list[tuple[int, int]]:
    """(source, target) index positions of references from objects of ``from_gens`` to
    objects of ``to_gens``, sorted by source then target address, each pair once."""
    ix = heap.index()
    graph = heap.graph()
    gens = ix.generations
    sources = np.flatnonzero(np.isin(gens, np.array(from_gens, dtype=np.uint8)))
    src, dst = edges(ix, graph, sources)
    keep = np.isin(gens[dst], np.array(to_gens, dtype=np.uint8))
    pairs = np.unique(np.stack([src[keep], dst[keep]], axis=1), axis=0) if keep.any() else np.empty((0, 2))
    return [(int(a), int(b)) for a, b in pairs.tolist()]


@dataclass(frozen=True, slots=True)
class YoungReferences:
    """An older object's references into one younger generation."""

    position: int
    generation: Generation
    referenced_generation: Generation
    count: int  # references (a young object referenced twice counts twice)
    size: int  # their objects' sizes, summed per reference


def references_to_ephemeral(heap: "ClrHeap") -> tuple[list[YoungReferences], int, int]:
    """What the GC's card table must cover: every object of gen1 or older (not frozen) that
    references gen0, and every object of gen2 or older that references gen1. Returns the
    groups (by source generation and referenced generation, then address), and the number
    and total size of the distinct young objects referenced."""
    ix = heap.index()
    graph = heap.graph()
    gens = ix.generations
    older = (Generation.GEN1, Generation.GEN2, Generation.LOH, Generation.POH)
    sources = np.flatnonzero(np.isin(gens, np.array(older, dtype=np.uint8)))
    src, dst = edges(ix, graph, sources)
    sg, dg = gens[src], gens[dst]
    keep = (dg == Generation.GEN0) | ((dg == Generation.GEN1) & (sg > Generation.GEN1))
    src, dst, sg, dg = src[keep], dst[keep], sg[keep], dg[keep]
    sizes = np.array(ix.sizes_at(dst), dtype=np.int64) if len(dst) else np.empty(0, dtype=np.int64)
    groups: dict[tuple[int, int], list[int]] = {}
    order: list[tuple[int, int]] = []
    for s, g, d_gen, size in zip(src.tolist(), sg.tolist(), dg.tolist(), sizes.tolist()):
        key = (s, d_gen)
        entry = groups.get(key)
        if entry is None:
            groups[key] = entry = [g, 0, 0]
            order.append(key)
        entry[1] += 1
        entry[2] += size
    # An object's gen0 record comes before its gen1 record, whatever its fields' order (SOS
    # yields them so, and the groups' order follows from the records').
    seen_at: dict[int, int] = {}
    for i, (s, _d) in enumerate(order):
        seen_at.setdefault(s, i)
    order.sort(key=lambda k: (seen_at[k[0]], k[1] != Generation.GEN0))
    found = [YoungReferences(s, Generation(groups[(s, d)][0]), Generation(d), groups[(s, d)][1], groups[(s, d)][2])
             for s, d in order]
    # Grouped as SOS groups them: by (object generation, referenced generation) in order of
    # first appearance in the heap walk, objects by address within a group.
    first: dict[tuple[Generation, Generation], int] = {}
    for k, r in enumerate(found):
        first.setdefault((r.generation, r.referenced_generation), k)
    found.sort(key=lambda r: (first[(r.generation, r.referenced_generation)], r.position))
    unique = np.unique(dst)
    total = int(sum(ix.sizes_at(unique))) if len(unique) else 0
    return found, len(unique), total


def live_without_finalizer_queue(heap: "ClrHeap") -> np.ndarray:
    """Objects reachable from handles and stacks only: what the finalizer queue alone keeps
    alive is not in it (SOS's notreachableinrange -nofinalizer)."""
    roots = heap.roots()
    kept = RootSet(roots.handles, [r for r in roots.roots if r.kind is not RootKind.FINALIZER], roots.stack_errors)
    return live_mask(heap.index(), heap.graph(), kept)


def pointers_in(heap: "ClrHeap", start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
    """The pointer-aligned values stored in [start, end) of target memory, and for each the
    index position of the object starting there (-1: not an object start)."""
    start &= ~7
    raw = bytes(heap.runtime.target.read_partial(start, max(end - start, 0)))
    values = np.frombuffer(raw[:len(raw) & ~7], dtype=np.uint64)
    ix = heap.index()
    pos = np.searchsorted(ix.addresses, values)
    inside = pos < len(ix.addresses)
    found = np.full(len(values), -1, dtype=np.int64)
    hit = inside.copy()
    hit[inside] = ix.addresses[pos[inside]] == values[inside]
    found[hit] = pos[hit]
    return values, found
