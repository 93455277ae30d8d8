"""The reference graph of the whole heap, in compressed sparse rows.

Built from the HeapIndex by a second pass over the heap memory, one segment at a time,
with numpy doing the per-object work: every object's reference slots are computed from
its type's GCDesc as a ragged array of word positions, the words are gathered, and the
values that are the exact start of a heap object become edges. Memory per object: 8
bytes of row offset plus 4 bytes per outgoing reference.

Reachability (``mark``) runs breadth-first with numpy over large frontiers and switches
to a plain stack for thin ones, so that a million-long linked list is neither recursive
nor one numpy call per node.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

import numpy as np

from ..heap.gcdesc import GCDesc
from ..heap.index import HeapIndex
from ..progress import Progress
from ..heap.segments import SegmentKind

if TYPE_CHECKING:
    from ..parts import HeapParts


def ragged_arange(counts: np.ndarray) -> np.ndarray:
    """[0..c0), [0..c1), ... concatenated."""
    total = int(counts.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    starts = np.cumsum(counts) - counts
    return np.arange(total, dtype=np.int64) - np.repeat(starts, counts)


@dataclass(slots=True)
class _TypeSlots:
    """A type's reference layout in the three shapes the vectorised pass handles."""

    kind: int  # 0 none, 1 fixed offsets, 2 array series, 3 repeating value-type array
    offsets: np.ndarray  # kind 1: word offsets; kind 3: word offsets inside one element
    start: int = 0  # kind 2: first slot (bytes); kind 3: repeat start (bytes)
    base_size: int = 0
    component_size: int = 0
    series_size: int = 0  # kind 2: adjusted series size (bytes, usually -base size)


def _layout(heap: "HeapParts", mt: int) -> _TypeSlots:
    t = heap.types.get(mt)
    none = _TypeSlots(0, np.empty(0, dtype=np.int64))
    if t is None or not t.contains_pointers:
        return none
    desc: GCDesc | None = heap.gcdesc(mt)
    if desc is None:
        return none
    if desc.is_repeating:
        per_elem: list[int] = []
        pos = 0
        for nptrs, skip in desc.repeat:
            per_elem.extend(range(pos, pos + 8 * nptrs, 8))
            pos += 8 * nptrs + skip
        if not per_elem or t.component_size == 0:
            return none
        return _TypeSlots(3, np.array(per_elem, dtype=np.int64) // 8, desc.repeat_start,
                          t.base_size, t.component_size)
    if t.component_size == 0:
        offs = desc.offsets(t.base_size)
        return _TypeSlots(1, np.array(offs, dtype=np.int64) // 8, 0, t.base_size)
    if len(desc.series) == 1:
        off, size = desc.series[0]
        return _TypeSlots(2, np.empty(0, dtype=np.int64), off, t.base_size, t.component_size, size)
    return none  # no array type has several series; be safe rather than wrong


class ReferenceGraph:
    def __init__(self, index: HeapIndex, offsets: np.ndarray, targets: np.ndarray,
                 compiled: bool = False, store=None) -> None:  # store: indexcache.IndexStore
        self.index = index
        self.offsets = offsets  # int64, len(index) + 1
        self.targets = targets  # uint32 object indices
        self.compiled = compiled  # searches run as numba kernels (kernels/refs.py)
        self.store = store  # where a core's reversed graph is kept between processes
        self._reverse: tuple[np.ndarray, np.ndarray] | None = None
        self._reverse_lock = threading.Lock()
        self.search_arrays = None  # gcroot.PathFinder's reusable scratch
        self.condensed: Components | None = None  # built after the graph in the background (background.py)
        self._components_lock = threading.Lock()

    @property
    def edge_count(self) -> int:
        return len(self.targets)

    def children(self, i: int) -> np.ndarray:
        return self.targets[self.offsets[i]:self.offsets[i + 1]]

    def reverse(self) -> tuple[np.ndarray, np.ndarray]:
        """(offsets, sources): who references each object. Built on first use, by one
        thread at a time (a background build may be making it: clr/roots/background.py)."""
        if self._reverse is None:
            with self._reverse_lock:
                return self._build_reverse()
        return self._reverse

    def _build_reverse(self) -> tuple[np.ndarray, np.ndarray]:
        if self._reverse is None and self.compiled:
            from ..heap import memory
            from ..kernels import refs
            if self.store is not None:
                self._reverse = self.store.load_rows("reverse", self.index)
            if self._reverse is None:
                roff = memory.zeros(len(self.index) + 1, np.int64)
                sources = memory.empty(len(self.targets), np.uint32)
                refs.reverse(self.offsets, self.targets, roff, sources)
                self._reverse = (roff, sources)
                if self.store is not None:
                    self.store.save_rows("reverse", roff, sources, self.index)
                    self._reverse = self.store.load_rows("reverse", self.index) or self._reverse
        if self._reverse is None:
            n = len(self.index)
            counts = np.diff(self.offsets)
            sources = np.repeat(np.arange(n, dtype=np.uint32), counts)
            order = np.argsort(self.targets, kind="stable")
            rsrc = sources[order]
            roffsets = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(np.bincount(self.targets, minlength=n), out=roffsets[1:])
            self._reverse = (roffsets, rsrc)
        return self._reverse

    def components(self) -> "Components | None":
        """The graph's strongly connected components and their reversed condensation
        (``kernels/components.py``), built once; None without compiled kernels."""
        if not self.compiled:
            return None
        with self._components_lock:
            if self.condensed is None:
                self.condensed = Components.of(self)
        return self.condensed

    def parents(self, i: int) -> np.ndarray:
        ro, rs = self.reverse()
        return rs[ro[i]:ro[i + 1]]

    def mark(self, roots: Iterable[int] | np.ndarray, visited: np.ndarray | None = None) -> np.ndarray:
        """Boolean mask of every object reachable from object indices ``roots``."""
        n = len(self.index)
        if self.compiled:
            from ..heap import memory
            from ..kernels import refs
            seen = memory.zeros(n, np.bool_) if visited is None else visited
            start = np.asarray(list(roots) if not isinstance(roots, np.ndarray) else roots, dtype=np.int64)
            start = start[(start >= 0) & (start < n)]
            refs.mark(self.offsets, self.targets, start, seen, memory.empty(n, np.int32))
            return seen
        seen = np.zeros(n, dtype=bool) if visited is None else visited
        frontier = np.unique(np.asarray(list(roots) if not isinstance(roots, np.ndarray) else roots,
                                        dtype=np.int64))
        frontier = frontier[(frontier >= 0) & (frontier < n)]
        frontier = frontier[~seen[frontier]]
        offsets, targets = self.offsets, self.targets
        while frontier.size:
            seen[frontier] = True
            if frontier.size < 64:
                frontier = self._mark_thin(frontier, seen)
                continue
            starts = offsets[frontier]
            counts = offsets[frontier + 1] - starts
            kids = targets[np.repeat(starts, counts) + ragged_arange(counts)]
            kids = kids[~seen[kids]]
            frontier = np.unique(kids).astype(np.int64)
        return seen

    def _mark_thin(self, frontier: np.ndarray, seen: np.ndarray, budget: int = 200_000) -> np.ndarray:
        """Depth-first with a Python stack while the frontier is thin; returns what is left."""
        offsets, targets = self.offsets, self.targets
        stack = [int(x) for x in frontier]
        steps = 0
        while stack and steps < budget and len(stack) < 4096:
            i = stack.pop()
            steps += 1
            for k in targets[offsets[i]:offsets[i + 1]].tolist():
                if not seen[k]:
                    seen[k] = True
                    stack.append(k)
        if not stack:
            return np.empty(0, dtype=np.int64)
        rest = np.array(stack, dtype=np.int64)
        # Already marked: expand their children in the numpy path.
        starts = offsets[rest]
        counts = offsets[rest + 1] - starts
        kids = targets[np.repeat(starts, counts) + ragged_arange(counts)]
        return np.unique(kids[~seen[kids]]).astype(np.int64)


def build_graph(heap: "HeapParts", index: HeapIndex, progress: Progress) -> ReferenceGraph:
    from .. import kernels
    if kernels.compiled():
        from . import refscan
        store = heap.store
        rows = store.load_rows("graph", index) if store is not None else None
        if rows is None:
            rows = refscan.build_graph(heap, index, heap.lookup(), progress)
            if store is not None:
                # Saved, then used from the file: page cache instead of process memory.
                store.save_rows("graph", *rows, index)
                rows = store.load_rows("graph", index) or rows
        return ReferenceGraph(index, *rows, compiled=True, store=store)
    return _build_graph_numpy(heap, index, progress)


def _build_graph_numpy(heap: "HeapParts", index: HeapIndex, progress: Progress) -> ReferenceGraph:
    n = len(index)
    layouts = [_layout(heap, int(mt)) for mt in index.method_tables]
    kinds = np.array([lay.kind for lay in layouts], dtype=np.int8)
    # Kind-1 types: all their word offsets in one flat table.
    fixed_count = np.array([len(lay.offsets) if lay.kind == 1 else 0 for lay in layouts], dtype=np.int64)
    fixed_start = np.cumsum(fixed_count) - fixed_count
    fixed_flat = np.concatenate([lay.offsets for lay in layouts if lay.kind == 1] or
                                [np.empty(0, dtype=np.int64)])
    src_parts: list[np.ndarray] = []
    dst_parts: list[np.ndarray] = []
    target = heap.runtime.target
    total = sum(sl.segment.length for sl in index.slices)
    progress.start("Building reference graph", total)
    done = 0
    addresses = index.addresses
    for sl in index.slices:
        seg = sl.segment
        done += seg.length
        if sl.stop == sl.first:
            continue
        objs = np.arange(sl.first, sl.stop, dtype=np.int64)
        tids = index.type_ids[sl.first:sl.stop]
        okind = kinds[tids]
        has = okind != 0
        if not has.any():
            progress.update(done)
            continue
        objs, tids, okind = objs[has], tids[has], okind[has]
        if seg.kind is SegmentKind.LOH:
            src, slot_addr = _slots_by_object(heap, index, objs, tids, layouts)
            values = _read_words(target, slot_addr)
        else:
            if target.is_live:
                buf = heap.scratch(seg.end - seg.start)
                data = buf[:target.read_into(seg.start, buf)]
            else:
                data = target.read_partial(seg.start, seg.end - seg.start)
            words = np.frombuffer(data, dtype=np.uint64, count=len(data) // 8)
            base_pos = ((addresses[objs] - np.uint64(seg.start)) // np.uint64(8)).astype(np.int64)
            src, pos = _slot_positions(words, base_pos, objs, tids, okind, layouts,
                                       fixed_count, fixed_start, fixed_flat)
            ok = pos < len(words)
            src, pos = src[ok], pos[ok]
            values = words[pos]
        keep = values != 0
        src, values = src[keep], values[keep]
        j = np.searchsorted(addresses, values)
        j[j == n] = 0
        hit = addresses[j] == values
        src, dst = src[hit], j[hit].astype(np.uint32)
        # Sorted by source within the segment; segments come in address order, so the
        # concatenation is sorted too and needs no global argsort (time and memory).
        order = np.argsort(src, kind="stable")
        src_parts.append(src[order])
        dst_parts.append(dst[order])
        progress.update(done)
    progress.finish()
    src = np.concatenate(src_parts) if src_parts else np.empty(0, dtype=np.int64)
    src_parts.clear()
    counts = np.bincount(src, minlength=n)
    del src
    targets = np.concatenate(dst_parts) if dst_parts else np.empty(0, dtype=np.uint32)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return ReferenceGraph(index, offsets, targets)


def _slot_positions(words, base_pos, objs, tids, okind, layouts, fixed_count, fixed_start, fixed_flat):
    """Word positions (within the segment buffer) of every reference slot, with sources."""
    src_parts = []
    pos_parts = []
    # Kind 1: fixed layouts, all types at once.
    m = okind == 1
    if m.any():
        t = tids[m]
        cnt = fixed_count[t]
        flat = np.repeat(fixed_start[t], cnt) + ragged_arange(cnt)
        pos_parts.append(np.repeat(base_pos[m], cnt) + fixed_flat[flat])
        src_parts.append(np.repeat(objs[m], cnt))
    # Kind 2 and 3 depend on each array's length, read from the word after the header.
    for kind in (2, 3):
        m = okind == kind
        if not m.any():
            continue
        bp = base_pos[m]
        ob = objs[m]
        tt = tids[m]
        inb = bp + 1 < len(words)
        bp, ob, tt = bp[inb], ob[inb], tt[inb]
        lengths = (words[bp + 1] & np.uint64(0xFFFFFFFF)).astype(np.int64)
        for t in np.unique(tt):
            lay = layouts[int(t)]
            sel = tt == t
            b, o, ln = bp[sel], ob[sel], lengths[sel]
            if kind == 2:
                nslots = (lay.series_size + lay.base_size + lay.component_size * ln) // 8
                nslots = np.maximum(nslots, 0)
                pos_parts.append(np.repeat(b + lay.start // 8, nslots) + ragged_arange(nslots))
                src_parts.append(np.repeat(o, nslots))
            else:
                per = len(lay.offsets)
                nslots = ln * per
                k = ragged_arange(nslots)
                elem, within = np.divmod(k, per)
                pos_parts.append(np.repeat(b, nslots) + lay.start // 8
                                 + elem * (lay.component_size // 8) + lay.offsets[within])
                src_parts.append(np.repeat(o, nslots))
    if not pos_parts:
        e = np.empty(0, dtype=np.int64)
        return e, e
    return np.concatenate(src_parts), np.concatenate(pos_parts)


def _slots_by_object(heap, index, objs, tids, layouts):
    """Large objects: slot addresses object by object (their bytes are not read in bulk)."""
    from ..heap.objects import ClrObject
    src: list[int] = []
    slots: list[int] = []
    for i in objs.tolist():
        addr = int(index.addresses[i])
        obj = ClrObject(heap, addr)
        desc = heap.gcdesc(obj.type.method_table)
        if desc is None:
            continue
        for off in desc.offsets(obj.raw_size):
            src.append(i)
            slots.append(addr + off)
    return np.array(src, dtype=np.int64), np.array(slots, dtype=np.uint64)


def _read_words(target, slot_addrs: np.ndarray) -> np.ndarray:
    """Read the words at ``slot_addrs``, one read per run of adjacent slots."""
    out = np.zeros(len(slot_addrs), dtype=np.uint64)
    if not len(slot_addrs):
        return out
    breaks = np.nonzero(np.diff(slot_addrs.astype(np.int64)) != 8)[0] + 1
    starts = np.concatenate(([0], breaks))
    stops = np.concatenate((breaks, [len(slot_addrs)]))
    for a, b in zip(starts.tolist(), stops.tolist()):
        data = target.read_partial(int(slot_addrs[a]), 8 * (b - a))
        got = len(data) // 8
        if got:
            out[a:a + got] = np.frombuffer(data, dtype=np.uint64, count=got)
    return out


class Components:
    """Each object's strongly connected component and, per component, the components that
    reference it: which roots reach an object is then a search over components, where a
    leak's one giant cycle is a single step (gcroot's ``PathFinder``)."""

    def __init__(self, comp: np.ndarray, count: int, croff: np.ndarray, csrc: np.ndarray) -> None:
        self.comp = comp  # int32 per object
        self.count = count
        self.croff, self.csrc = croff, csrc
        self.stamp = np.zeros(count, dtype=np.int32)  # per component, an epoch per search
        self.queue = np.zeros(count, dtype=np.int32)
        self.epoch = 0

    @classmethod
    def of(cls, graph: "ReferenceGraph") -> "Components":
        from ..heap import memory
        from ..kernels import components as k
        n = len(graph.offsets) - 1
        comp = memory.zeros(n, np.int32)
        count = int(k.components(graph.offsets, graph.targets, comp, memory.reserve(n, np.int32),
                                 memory.reserve(n, np.int32), memory.reserve(n, np.int64),
                                 memory.reserve(n, np.bool_)))
        croff = np.zeros(count + 1, dtype=np.int64)
        total = int(k.condense(graph.offsets, graph.targets, comp, croff, np.zeros(0, np.int32)))
        csrc = memory.empty(total, np.int32)
        if total:
            k.condense(graph.offsets, graph.targets, comp, croff, csrc)
        return cls(comp, count, croff, csrc)

    def reaching(self, target: int, dep_pairs: list[tuple[int, int]]) -> np.ndarray:
        """A mask over components: those that reach object ``target``'s (dependent handles,
        (primary, secondary) object pairs, as edges)."""
        from ..kernels import components as k
        self.epoch += 1
        comp = self.comp
        pairs = sorted((int(comp[s]), int(comp[p])) for p, s in dep_pairs if comp[s] != comp[p])
        k.component_ancestors(self.croff, self.csrc, np.array([s for s, _ in pairs], dtype=np.int64),
                              np.array([p for _, p in pairs], dtype=np.int64), int(comp[target]), self.stamp,
                              self.epoch, self.queue)
        return self.stamp == self.epoch
