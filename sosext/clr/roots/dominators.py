"""Dominators and retained sizes: what freeing one object would free.

An object d *dominates* v when every path from the GC's roots to v passes through d. The
roots hang under one virtual root (handles, statics — which live in arrays that strong
handles hold —, stack roots, the finalizer queue's ready objects); a dependent handle is an
edge from its primary to its secondary. The closest dominator is the *immediate* one, and
the immediate dominators form a tree: an object's **retained size** is its own size plus
the sizes of everything below it in that tree, i.e. exactly what a collection would free if
nothing referenced it any more.

The tree is computed once per target generation by the kernels in
``kernels/dominators.py`` (see there why Cooper–Harvey–Kennedy) over the reference graph's
compressed rows, with 32-bit object ids. Columns are aligned with the HeapIndex rows.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..heap.index import SIZE_OVERFLOW
from .roots import HANDLE_KIND_TEXT, ClrRoot, RootKind
from .statics import static_name_between
from ..typesystem.typenames import csharp_member_name

# The heap façade builds this tree (``heap.dominators()``), so this module names it only as
# ``Any``: importing it, even for a type hint, would make the model one circle (parts.py).
ClrHeap = Any

MAX_CHAIN = 100_000  # a dominator chain longer than this is cut (a corrupt tree would loop)


@dataclass(frozen=True, slots=True)
class HeldBy:
    """One root holding the top of a dominator chain."""

    kind: str  # "handle", "stack" or "finalizer" (RootKind values)
    label: str  # as leaks/gcroot word it: "static N.C.s_field (strong handle)", "thread 1a2b: M()"
    row: int  # index row of the root's object
    address: int  # the root: handle address, stack slot (0: a register) or finalizer queue slot
    root: ClrRoot
    direct: bool = True  # the root refers to the top object itself (else: through references)


@dataclass(frozen=True, slots=True)
class TypeRetained:
    """``DominatorTree.retained_by_type`` row: reachable objects of one type."""

    type_id: int
    method_table: int
    count: int
    shallow: int  # their own bytes
    retained: int  # bytes they retain, counting an object only below a dominator of another type


@dataclass(frozen=True, slots=True)
class GrowthHolder:
    """``DominatorTree.growth_holders`` row: one object holding growing objects."""

    row: int  # the holder (index row)
    objects: int  # growing objects whose holder it is
    size: int  # their own bytes
    types: tuple[tuple[int, int, int], ...]  # (type id, objects, bytes) of those, most bytes first
    example: int  # one growing object it holds (row)
    via: int  # a top holder split by reference: the object below it they are held through; else -1


class DominatorTree:
    """The dominator tree of one heap; ``heap.dominators()`` builds and caches it.

    ``idom`` (int32, one per HeapIndex row): the row of the immediate dominator,
    :attr:`ROOT` when only the virtual root dominates it (a root object, or an object that
    several roots reach independently), :attr:`UNREACHABLE` when no root reaches it.
    ``retained`` (uint64 per row): bytes retained (SOS sizes, as dumpheap adds them),
    0 for unreachable objects.
    """

    ROOT = -1
    UNREACHABLE = -2

    def __init__(self, heap: "ClrHeap", idom: np.ndarray, retained: np.ndarray, reached: int,
                 passes: int) -> None:
        self.heap = heap
        self.index = heap.index()
        self.idom = idom
        self.retained = retained
        self.reached = reached  # objects some root reaches
        self.passes = passes  # iterations the algorithm needed (diagnostics)
        self._root_rows: dict[int, list[ClrRoot]] | None = None
        self._search: list | None = None  # root_of's backward search: stamp, next step, queue, via, epoch
        self._by_type: list[TypeRetained] | None = None

    def __len__(self) -> int:
        return len(self.idom)

    def chain(self, row: int) -> list[int]:
        """``row``, its immediate dominator, that one's, … up to the object just under the
        virtual root (the top). Empty if ``row`` is unreachable."""
        if int(self.idom[row]) == self.UNREACHABLE:
            return []
        out = [int(row)]
        while len(out) < MAX_CHAIN:
            d = int(self.idom[out[-1]])
            if d < 0:
                break
            out.append(d)
        return out

    def top_of(self, row: int) -> int | None:
        c = self.chain(row)
        return c[-1] if c else None

    def root_of(self, row: int, limit: int = 8, below: int | None = None) -> list[HeldBy]:
        """The roots holding the top of ``row``'s chain: the roots of that object itself
        when it is a root object (long-lived kinds first: handles, finalizer queue,
        stacks), else the roots whose references reach it (it then has several, none of
        which alone keeps it). At most ``limit``. ``below``: when ``row`` is itself the top,
        the object under it that the question is about (a statics array's slot then names
        the static)."""
        chain = self.chain(row)
        if not chain:
            return []
        top = chain[-1]
        below = chain[-2] if len(chain) > 1 else below
        direct = [self._held(r, top, below) for r in self.root_rows().get(top, [])]
        if any(r.kind is not RootKind.STACK for r in self.root_rows().get(top, [])):
            return _unique(direct)[:limit]
        # Only threads' stacks hold it directly (or nothing does): the long-lived roots that
        # reach it through references come first, as leaks and gcroot order them.
        reach = self._reaching(top)
        out: list[HeldBy] = []
        for r in self._ordered(self.heap.roots().roots):
            if direct and r.kind is RootKind.STACK:
                break
            start = self._root_row(r)
            if start is None or start == top or not reach(start):
                continue
            out.append(self._held(r, start, self._next_step(start), direct=False))
            if len(_unique(out)) >= limit:
                break
        return _unique(out + direct)[:limit]

    def _root_row(self, r: ClrRoot) -> int | None:
        i = self.index.find(r.object)
        if i is None and r.kind is RootKind.STACK:
            i = self.index.containing(r.object)
        return i

    def _reaching(self, top: int):  # -> Callable[[int], bool]
        """One breadth-first search backwards from ``top`` (the reversed graph, dependent
        handles as edges): afterwards ``_next_step(v)`` is v's next object towards ``top``
        on a shortest path, for every v the returned test accepts."""
        from ..heap import memory
        from ..kernels import refs
        n = len(self.index)
        if self._search is None:  # kept for later searches, an epoch stamp instead of clearing
            self._search = [memory.zeros(n, np.int32), memory.empty(n, np.int32), memory.empty(n, np.int32),
                            memory.zeros(n, np.bool_), 0]
        stamp, nxt, queue, via, epoch = self._search
        epoch += 1
        self._search[4] = epoch
        ro, rs = self.heap.graph().reverse()
        pairs = sorted((s, p) for p, s in self.heap.roots().dependent_pairs(self.index.find))
        dep_sec = np.array([s for s, _p in pairs], dtype=np.int64)
        dep_pri = np.array([p for _s, p in pairs], dtype=np.int64)
        refs.ancestors(ro, rs, dep_sec, dep_pri, int(top), nxt, stamp, epoch, queue, via)
        return lambda v: int(stamp[v]) == epoch

    def _next_step(self, v: int) -> int | None:
        step = int(self._search[1][v]) if self._search is not None else -1
        return step if step >= 0 else None

    def _held(self, r: ClrRoot, obj_row: int, below: int | None, direct: bool = True) -> HeldBy:
        return HeldBy(r.kind.value, root_label(self.heap, r, obj_row, below), obj_row, r.address, r, direct)

    @staticmethod
    def _ordered(roots: list[ClrRoot]) -> list[ClrRoot]:
        order = {RootKind.HANDLE: 0, RootKind.FINALIZER: 1, RootKind.STACK: 2}
        return sorted(roots, key=lambda r: order[r.kind])

    def root_rows(self) -> dict[int, list[ClrRoot]]:
        """Row of each root object → its roots, handles first."""
        if self._root_rows is None:
            ix = self.index
            rows: dict[int, list[ClrRoot]] = {}
            for r in self._ordered(self.heap.roots().roots):
                i = ix.find(r.object)
                if i is None and r.kind is RootKind.STACK:
                    i = ix.containing(r.object)
                if i is not None:
                    rows.setdefault(i, []).append(r)
            self._root_rows = rows
        return self._root_rows

    def top(self, n: int, type_id: int | None = None, mask: np.ndarray | None = None) -> list[int]:
        """Rows of the ``n`` objects retaining the most (of one type id, or among the rows a
        bool ``mask`` keeps, if given), largest first, ties by address."""
        if n <= 0:
            return []
        if type_id is None and mask is None:  # no heap-sized temporaries but argpartition's own
            total = len(self.retained)
            rows = np.argpartition(self.retained, total - n)[total - n:] if total > n else np.arange(total)
        else:
            rows = np.nonzero(self.index.type_ids == np.uint32(type_id) if mask is None else mask)[0]
            if len(rows) > n:
                rows = rows[np.argpartition(self.retained[rows], len(rows) - n)[len(rows) - n:]]
        out = [r for r in rows.tolist() if self.retained[r] > 0]
        out.sort(key=lambda r: (-int(self.retained[r]), r))  # ties: rows ascend = addresses ascend
        return out[:n]

    def growth_holders(self, growing: np.ndarray, passed: np.ndarray | None = None,
                       by_reference: bool = True) -> list[GrowthHolder]:
        """Who holds the growth: for every reachable object of a type that ``growing`` (bool
        per type id) marks, its holder is the first object up its dominator chain whose type
        is neither growing nor marked by ``passed`` (types to look through, such as a
        collection's internals), or the chain's top if there is none. Holders with the bytes
        of the growing objects they hold, most first; with ``by_reference``, a holder at the
        top of its chain (a root object) that holds growth through several objects below it
        (a statics array: one per static) once per such object (``via``)."""
        from ..heap import memory
        from ..kernels import dominators as k
        ix = self.index
        growing = np.ascontiguousarray(growing, dtype=np.bool_)
        skip = growing | (np.zeros_like(growing) if passed is None else np.asarray(passed, dtype=np.bool_))
        rows = np.nonzero(growing[ix.type_ids] & (self.idom != self.UNREACHABLE))[0].astype(np.int64)
        if not len(rows):
            return []
        memo = memory.full(len(ix), -3, np.int32)
        memo_via = memory.full(len(ix), -3, np.int32)
        out = np.empty(len(rows), np.int32)
        out_via = np.empty(len(rows), np.int32)
        k.holders(self.idom, ix.type_ids, np.ascontiguousarray(skip), rows, memo, memo_via, out, out_via)
        del memo, memo_via
        # A root object holding growth through several references (a statics array: one
        # slot per static) is one holder per reference, so that each is named on its own.
        split = np.zeros(len(out), dtype=bool)
        if by_reference:
            through = (out >= 0) & (out_via >= 0)
            # Distinct (holder, reference) pairs as one 64-bit key each: numpy's unique over
            # columns sorts a structured dtype element by element (minutes at 100M objects).
            keys = np.unique((out[through].astype(np.int64) << 32) | out_via[through].astype(np.int64))
            holder_of_pair, refs = np.unique(keys >> 32, return_counts=True)
            split_rows = holder_of_pair[(refs > 1) & (self.idom[holder_of_pair] < 0)]
            if len(split_rows):
                split = np.isin(out, split_rows)
        sizes = np.array(ix.sizes_at(rows), dtype=np.uint64) if ix.big_sizes else ix.sizes[rows].astype(np.uint64)
        via_key = np.where(split, out_via, -1).astype(np.int64)
        tid = ix.type_ids[rows]
        order = np.lexsort((tid, via_key, out))  # by holder, reference, then type
        h, vk, t, sz = out[order], via_key[order], tid[order], sizes[order]
        change = np.r_[True, (h[1:] != h[:-1]) | (vk[1:] != vk[:-1]) | (t[1:] != t[:-1])]
        starts = np.flatnonzero(change)
        counts = np.diff(np.r_[starts, len(h)])
        totals = np.add.reduceat(sz, starts) if len(starts) else np.empty(0, np.uint64)
        held_rows = rows[order]
        acc: dict[tuple[int, int], list] = {}
        example: dict[tuple[int, int], int] = {}
        for s0, c, tot in zip(starts.tolist(), counts.tolist(), totals.tolist()):
            key = (int(h[s0]), int(vk[s0]))
            acc.setdefault(key, []).append((int(t[s0]), c, int(tot)))
            example.setdefault(key, int(held_rows[s0]))
        result = [GrowthHolder(r, sum(c for _t, c, _b in ts), sum(b for _t, _c, b in ts),
                               tuple(sorted(ts, key=lambda x: (-x[2], x[0]))), example[(r, v)], v)
                  for (r, v), ts in acc.items()]
        result.sort(key=lambda g: (-g.size, -g.objects, g.row))
        return result

    def retained_by_type(self, mask: np.ndarray | None = None) -> list[TypeRetained]:
        """Per type (reachable objects only): count, shallow bytes, and retained bytes where
        an object counts only if its immediate dominator is not of the same type — a list of
        nodes retains once, not once per node — so the types' figures never double count
        among themselves (different types still nest: a cache and its entries both show).
        ``mask`` (bool per row) restricts it to some objects, as dumpheap's filters do."""
        if self._by_type is None or mask is not None:
            from ..kernels import dominators as k
            ix = self.index
            ntypes = len(ix.method_tables)
            acc = np.zeros(3 * ntypes, dtype=np.uint64)
            keep = np.empty(0, np.bool_) if mask is None else np.ascontiguousarray(mask, dtype=np.bool_)
            k.retained_by_type(ix.type_ids, self.idom, self.retained, ix.sizes, keep, acc)
            for p, s in ix.big_sizes.items():
                if int(self.idom[p]) != self.UNREACHABLE and (mask is None or mask[p]):
                    acc[3 * int(ix.type_ids[p]) + 1] += np.uint64(s - SIZE_OVERFLOW)
            rows = [TypeRetained(t, int(ix.method_tables[t]), int(acc[3 * t]), int(acc[3 * t + 1]),
                                 int(acc[3 * t + 2])) for t in range(ntypes) if acc[3 * t]]
            if mask is not None:
                return rows
            self._by_type = rows
        return self._by_type


def root_label(heap: "ClrHeap", r: ClrRoot | None, root_obj: int, below: int | None = None) -> str:
    """How leaks, retained and dominators name root ``r`` of object row ``root_obj``: the
    handle kind as gcroot words it, and when the root object is a statics array and
    ``below`` the object in one of its slots, the static field's name; names in C#'s spelling."""
    if r is None:
        return "dependent handle"
    if r.kind is RootKind.HANDLE:
        kind = HANDLE_KIND_TEXT.get(r.handle.handle_type, "handle")
        if below is not None and below != root_obj:
            ix = heap.index()
            static = static_name_between(heap.runtime, int(ix.addresses[root_obj]), int(ix.addresses[below]))
            if static:
                return f"static {csharp_member_name(static)} ({kind})"
        return kind
    if r.kind is RootKind.FINALIZER:
        return "finalizer queue"
    method = heap.runtime.method_name_at(r.source) if r.source and not r.source_is_frame else None
    return f"thread {r.thread_os_id:x}" + (f": {csharp_member_name(method)}" if method else "")


def _unique(held: list[HeldBy]) -> list[HeldBy]:
    """One entry per (kind, label): a frame often reports one local in several slots."""
    seen: set[tuple[str, str]] = set()
    out = []
    for h in held:
        if (h.kind, h.label) not in seen:
            seen.add((h.kind, h.label))
            out.append(h)
    return out


def root_rows_and_deps(heap: "ClrHeap") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(root rows, dependent primaries sorted, their secondaries) as the kernels take them."""
    from .liveness import root_indices
    ix = heap.index()
    roots = heap.roots()
    rows = root_indices(ix, roots)
    pairs = sorted(roots.dependent_pairs(ix.find))
    return (np.ascontiguousarray(rows, dtype=np.int64), np.array([p for p, _ in pairs], dtype=np.int64),
            np.array([s for _, s in pairs], dtype=np.int64))


def build_dominators(heap: "ClrHeap") -> DominatorTree:
    """The tree of this heap: computed, or for a core whose index is cached on disk, read
    from beside the index when it was computed for the same roots (and saved after)."""
    ix = heap.index()
    graph = heap.graph()
    roots, dep_p, dep_s = root_rows_and_deps(heap)
    store = heap.store
    key = roots_key(roots, dep_p, dep_s)
    cached = store.load_dominators(key, ix) if store is not None else None
    if cached is not None:
        idom, retained = cached
        return DominatorTree(heap, idom, retained, int(np.count_nonzero(idom != DominatorTree.UNREACHABLE)), 0)
    idom, retained, count, passes = compute(graph.offsets, graph.targets, ix.sizes, roots, dep_p, dep_s)
    for p, s in ix.big_sizes.items():  # sizes of 4 GiB and more were counted as SIZE_OVERFLOW
        extra = np.uint64(s - SIZE_OVERFLOW)
        v = p
        while v >= 0 and int(idom[v]) != DominatorTree.UNREACHABLE:
            retained[v] += extra
            v = int(idom[v])
    if store is not None:
        # Saved, then used from the file: page cache instead of process memory.
        store.save_dominators(idom, retained, key, ix)
        mapped = store.load_dominators(key, ix)
        if mapped is not None:
            idom, retained = mapped
    return DominatorTree(heap, idom, retained, count, passes)


def roots_key(roots: np.ndarray, dep_primary: np.ndarray, dep_secondary: np.ndarray) -> str:
    """A fingerprint of the roots a tree was computed from."""
    import hashlib
    h = hashlib.sha256()
    for a in (roots, dep_primary, dep_secondary):
        h.update(np.ascontiguousarray(a, dtype=np.int64).tobytes())
        h.update(b"|")
    return h.hexdigest()[:32]


def compute(offsets: np.ndarray, targets: np.ndarray, sizes: np.ndarray, roots: np.ndarray,
            dep_primary: np.ndarray, dep_secondary: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(idom, retained, objects reached, passes) of the graph in compressed rows
    (``offsets`` int64 n + 1, ``targets`` uint32), object sizes (uint32), root rows and the
    dependent-handle edges (primaries sorted, secondaries beside them)."""
    from ..heap import memory
    from ..kernels import dominators as k
    n = len(offsets) - 1
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    targets = np.ascontiguousarray(targets, dtype=np.uint32)
    roots = np.ascontiguousarray(roots, dtype=np.int64)
    dep_primary = np.ascontiguousarray(dep_primary, dtype=np.int64)
    dep_secondary = np.ascontiguousarray(dep_secondary, dtype=np.int64)
    post = memory.full(n, -1, np.int32)
    order = memory.empty(n, np.int32)
    cursor = memory.empty(n, np.int32)
    stack = memory.empty(n + 1, np.int32)
    count = int(k.dfs_postorder(offsets, targets, roots, dep_primary, dep_secondary, post, order, cursor, stack))
    dom = stack  # the stack is free now: dominators by postorder number, count + 1 items
    passes = int(k.iterate(offsets, targets, roots, dep_primary, dep_secondary, post, order, count, dom))
    idom = cursor  # so is the cursor: it becomes the dominators by row
    k.rows_of(post, order, dom, count, idom)
    del post, dom, stack
    retained = memory.zeros(n, np.uint64)
    k.accumulate(order, idom, count, np.ascontiguousarray(sizes, dtype=np.uint32), retained)
    return idom, retained, count, passes
