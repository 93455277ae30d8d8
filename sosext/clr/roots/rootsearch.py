"""A cold gcroot without the heap index or the reference graph (cores only).

The graph path (``gcroot.PathFinder``) walks the whole heap, scans every object's references
into rows and reverses them before its backward search can start. For one object of a core
that is most of the work: here a compiled depth-first search runs forward from the roots
over the core's mapping (``kernels/reach.py``) and marks the objects that reach the target
(Tarjan's components, two bits per 8 heap bytes). Only those objects — usually a tiny part
of the heap — get their references scanned into rows, and the same backward breadth-first
search as the graph path (``refs.ancestors``) runs over them. The answer is the graph
path's, step for step: the objects reached from the roots are reached, in the reversed
graph, only from objects reached from the roots, and both searches visit each row's
referrers in address order with dependent handles last, so every root gets the same chain.

A live process is read through system calls, not a mapping: it takes the graph path.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Iterator

import numpy as np

from ..heap import memory
from ..heap.fastwalk import MethodTableTable
from ..kernels import heapwalk as hw
from ..kernels import reach, refs
from ..progress import Progress
from .refscan import TypeLayouts
from .roots import ClrRoot, RootKind
from ..typesystem.types import MIN_OBJECT_SIZE

if TYPE_CHECKING:
    from ..heap.heap import ClrHeap

_FIRST_HASH = 1 << 12
_PAUSE_EVERY = 1 << 20  # objects between progress reports (~20 ms)


class CoreHeapMemory:
    """The heap's segments as words of the core file's mapping, for kernels."""

    def __init__(self, words: np.ndarray, seg_lo: np.ndarray, seg_hi: np.ndarray, seg_word: np.ndarray,
                 gap_lo: np.ndarray, gap_hi: np.ndarray) -> None:
        self.words = words
        self.seg_lo, self.seg_hi, self.seg_word = seg_lo, seg_hi, seg_word
        self.gap_lo, self.gap_hi = gap_lo, gap_hi  # sorted
        self.seg_gap = np.searchsorted(gap_lo, seg_lo).astype(np.int64)  # each segment's first gap
        self.seg_gap = np.append(self.seg_gap, len(gap_lo)).astype(np.int64)
        blocks = ((seg_hi - seg_lo) // np.uint64(8) + np.uint64(63)) // np.uint64(64)
        self.seg_block = np.zeros(len(seg_lo) + 1, dtype=np.int64)
        np.cumsum(blocks.astype(np.int64), out=self.seg_block[1:])
        self.buckets, self.bucket_base, self.bucket_shift = reach.segment_buckets(seg_lo, seg_hi)

    @classmethod
    def of(cls, heap: "ClrHeap") -> "CoreHeapMemory | None":
        """None unless every segment lies, 8-aligned, in bytes one core mapping holds."""
        core = heap.runtime.target.core_file()
        if core is None or not hasattr(core, "mapped_range"):
            return None
        segs = sorted((s for s in heap.segments if s.end > s.start), key=lambda s: s.start)
        mapping = None
        lo, hi, word = [], [], []
        for seg in segs:
            where = core.mapped_range(seg.start, seg.end - seg.start)
            if where is None or (seg.start | seg.end | where[1]) & 7:
                return None
            if mapping is not None and where[0] is not mapping:
                return None
            mapping = where[0]
            lo.append(seg.start)
            hi.append(seg.end)
            word.append((where[1] + seg.end - seg.start) // 8)
        if mapping is None:
            return None
        words = np.frombuffer(mapping, dtype=np.uint64, count=len(mapping) // 8)
        # Allocation contexts hold no objects yet: [pointer, limit + the filler object), as the walk.
        gaps = sorted((p, lim + MIN_OBJECT_SIZE) for p, lim in heap.alloc_contexts)
        return cls(words, np.array(lo, dtype=np.uint64), np.array(hi, dtype=np.uint64),
                   np.array(word, dtype=np.int64), np.array([a for a, _ in gaps], dtype=np.uint64),
                   np.array([b for _, b in gaps], dtype=np.uint64))

    @property
    def heap_bytes(self) -> int:
        return int((self.seg_hi - self.seg_lo).sum())


class TooCyclic(Exception):
    """The search's open objects (strongly connected components not closed yet) outgrew what
    it may hold: on such a heap building the reverse graph costs less (gcroot's graph path)."""


# The search keeps each object of a component still open in a hash (16 bytes, at most half
# full); on a leak's heap one component can be most of the heap (an LRU list whose nodes,
# entries and items point back at each other), and then every step probes a table far
# larger than the caches: measured 28 s against 6 s for the graph on a 17.8M-object heap
# (loaded machine). Rent or buy, priced by the heap's size: the search gives up once its
# hash would pass this share of the objects the heap can hold (the heap's words / 3 are
# the most objects it can hold; / 16 of that), or, past a million open objects, as soon as
# they are a quarter of the objects met (one component is taking the heap in).
OPEN_SHARE = 16
MIN_OPEN = 1 << 20  # a small heap always searches (a hash of 2M entries, 32 MiB, at most)


class RootSearch:
    """Which objects reach ``target`` from the roots, and the next step of each towards it."""

    def __init__(self, heap: "ClrHeap", mem: CoreHeapMemory, target: int, roots: Iterable[ClrRoot],
                 progress: Progress | None = None) -> None:
        self.heap = heap
        self.most_open = max(MIN_OPEN, mem.heap_bytes // MIN_OBJECT_SIZE // OPEN_SHARE)
        self.progress = progress or Progress.silent()
        self.mem = mem
        self.target = target
        self.table = MethodTableTable(heap.method_table_sizes)
        self.layouts = TypeLayouts(heap, [])
        self.starts = {r: self.start_of(r) for r in roots}
        self.root_set = frozenset(a for a in self.starts.values() if a is not None)
        self.members = np.empty(0, dtype=np.uint64)
        self.visited = 0
        self.met: np.ndarray | None = None  # the visited bitmap: every object the roots reach
        if type(self) is RootSearch:
            self._search()

    # -- objects -----------------------------------------------------------------------

    def _learn(self, word: int) -> None:
        self.table.learn(word)
        self.layouts.extend(self.table.method_tables)

    def type_of(self, address: int) -> int:
        """Type id of the object at ``address``, or -1 when there is none (as the walk sees it)."""
        m = self.mem
        if not 0 < address < 1 << 64:
            return -1
        v = np.uint64(address)
        s = int(reach.segment_of(v, m.seg_lo, m.seg_hi))
        if s < 0:
            return -1
        while True:
            t = int(reach.object_type(v, s, m.words, m.seg_hi, m.seg_word, m.seg_gap, m.gap_lo, m.gap_hi,
                                      self.table.keys, self.table.values, self.layouts.base_sizes,
                                      self.layouts.component_sizes))
            if t != reach.UNKNOWN_TYPE:
                return t
            self._learn(int(m.words[int(reach.word_at(v, s, m.seg_hi, m.seg_word))]))

    def is_object(self, address: int) -> bool:
        return self.type_of(address) >= 0

    def root_objects(self, roots: Iterable[ClrRoot]) -> frozenset[int]:
        return frozenset(a for a in (self.start_of(r) for r in roots) if a is not None)

    def reached(self, address: int) -> bool:
        """Whether the search met the object at ``address`` (it reached every object its
        roots reach), so that another target needs no search when it was not met."""
        m = self.mem
        s = int(reach.segment_of(np.uint64(address), m.seg_lo, m.seg_hi)) if 0 < address < 1 << 64 else -1
        if s < 0 or self.met is None:
            return False
        b = (address - int(m.seg_lo[s])) >> 3
        return bool((int(self.met[int(m.seg_block[s]) + (b >> 6)]) >> (b & 63)) & 1)

    def start_of(self, root: ClrRoot) -> int | None:
        """The object a root holds (as gcroot.PathFinder.path_from: a stack root may point
        inside one)."""
        if self.is_object(root.object):
            return root.object
        if root.kind is RootKind.STACK:
            return self._containing(root.object)
        return None

    def _containing(self, address: int) -> int | None:
        """The object whose bytes hold ``address``: the walk of its segment piece up to it."""
        heap, m = self.heap, self.mem
        s = int(reach.segment_of(np.uint64(address), m.seg_lo, m.seg_hi)) if 0 < address < 1 << 64 else -1
        if s < 0:
            return None
        seg = heap.segment_of(address)
        piece = next(((a, b) for a, b in heap.pieces(seg) if a <= address < b), None) if seg else None
        if piece is None:
            return None
        a, b = piece
        end_word = int(m.seg_word[s])
        first = end_word - (int(m.seg_hi[s]) - a) // 8
        words = m.words[first:end_word - (int(m.seg_hi[s]) - b) // 8]
        out = (np.zeros(4096, np.uint64), np.zeros(4096, np.uint32), np.zeros(4096, np.uint32))
        i, stop, table = 0, min((address - a) // 8 + 1, len(words)), self.table
        last = None
        while i < stop:
            i, n, status = hw.walk(words, i, stop, np.uint64(a), table.keys, table.values, table.base_sizes,
                                   table.component_sizes, *out, 0)
            if n:
                last = (int(out[0][n - 1]), int(out[2][n - 1]))
            if status == hw.UNKNOWN and table.learn(int(words[i])) >= 0:
                self.layouts.extend(table.method_tables)
                continue
            if status in (hw.UNKNOWN, hw.INVALID):
                return None
        if last is not None and last[0] <= address < last[0] + last[1]:
            return last[0]
        return None

    # -- the search ----------------------------------------------------------------------

    def dependent_edges(self) -> tuple[list[int], list[int]]:
        pairs = sorted((h.object, h.secondary) for h in self.heap.roots(include_stacks=False).dependent_handles
                       if self.is_object(h.object) and self.is_object(h.secondary))
        return [p for p, _ in pairs], [s for _, s in pairs]

    def _search(self) -> None:
        m = self.mem
        if not self.is_object(self.target):
            return
        starts = np.array(sorted({a for a in self.starts.values() if a is not None}), dtype=np.uint64)
        pri, sec = self.dependent_edges()
        dep_pri, dep_sec = np.array(pri, dtype=np.uint64), np.array(sec, dtype=np.uint64)
        blocks = int(m.seg_block[-1])
        visited, reached = memory.zeros(blocks, np.uint64), memory.zeros(blocks, np.uint64)
        most = m.heap_bytes // MIN_OBJECT_SIZE + 1  # objects the heap can hold: frames, Tarjan stack
        frames = [memory.reserve(most, dt) for dt in (np.uint64, np.int64, np.int64, np.int64, np.int64, np.int64)]
        edges = memory.reserve(m.heap_bytes // 8 + len(dep_sec) + 16, np.uint64)
        tstack = memory.reserve(most, np.uint64)
        hkeys, hvals = np.zeros(_FIRST_HASH, np.uint64), np.zeros(_FIRST_HASH, np.int64)
        st = np.zeros(9, dtype=np.int64)
        st[8] = _PAUSE_EVERY
        self.progress.start("Objects reached from the roots", 0)
        while True:
            status = reach.search(m.words, m.seg_lo, m.seg_hi, m.seg_word, m.seg_block, m.seg_gap, m.gap_lo, m.gap_hi,
                                  self.table.keys, self.table.values, *self.layouts.arrays,
                                  starts, dep_pri, dep_sec, np.uint64(self.target), visited, reached,
                                  *frames, edges, tstack, hkeys, hvals, st)
            if status == reach.UNKNOWN:
                self._learn(int(st[5]))
            elif status == reach.GROW:
                # Open objects a quarter of those met: one component is taking the heap in.
                if len(hkeys) >= self.most_open or (len(hkeys) >= MIN_OPEN and 4 * int(st[3]) > int(st[4])):
                    raise TooCyclic(int(st[3]))
                hkeys, hvals = np.zeros(2 * len(hkeys), np.uint64), np.zeros(2 * len(hkeys), np.int64)
                reach.rehash(tstack, int(st[3]), hkeys, hvals)
                st[7] = st[1]  # every open object is in the hash now, those of the frames too
            elif status == reach.PAUSE:
                self.progress.update(int(st[4]))
            elif status == reach.EDGES:
                grown = memory.reserve(2 * int(st[6]), np.uint64)
                grown[:int(st[2])] = edges[:int(st[2])]
                edges = grown
            else:
                break
        self.progress.finish()
        self.visited = int(st[4])
        self.met = visited
        self.members = reach.bitmap_addresses(reached, m.seg_lo, m.seg_block)
        if len(self.members):
            self._rows(dep_pri, dep_sec, edges)

    def _rows(self, dep_pri: np.ndarray, dep_sec: np.ndarray, scratch: np.ndarray) -> None:
        """The backward search over the members: ``refs.ancestors`` as the graph path runs it."""
        m, members = self.mem, self.members
        n = len(members)
        type_of = reach.member_types(members, m.words, m.seg_lo, m.seg_hi, m.seg_word, m.seg_gap, m.gap_lo,
                                     m.gap_hi, self.table.keys, self.table.values, self.layouts.base_sizes,
                                     self.layouts.component_sizes)
        lay = self.layouts.arrays
        offsets = np.zeros(n + 1, dtype=np.int64)
        size = 1 << max(4, (2 * n).bit_length())  # at most half full: a miss ends soon
        hkeys, hvals = np.zeros(size, np.uint64), np.zeros(size, np.int64)
        reach.rehash(members, n, hkeys, hvals)
        # One pass: the members' references are distinct words of the heap, so a heap's worth
        # of address space holds them (only what is written becomes memory).
        rows = memory.reserve(m.heap_bytes // 8 + 1, np.uint32)
        count = reach.member_rows(m.words, m.seg_lo, m.seg_hi, m.seg_word, type_of, *lay, members, hkeys, hvals,
                                  scratch, offsets, rows)
        if count < 0:  # more references than words: count them, then fill
            count = reach.member_rows(m.words, m.seg_lo, m.seg_hi, m.seg_word, type_of, *lay, members, hkeys,
                                      hvals, scratch, offsets, np.zeros(0, np.uint32))
            rows = np.zeros(count, dtype=np.uint32)
            reach.member_rows(m.words, m.seg_lo, m.seg_hi, m.seg_word, type_of, *lay, members, hkeys, hvals, scratch,
                              offsets, rows)
        targets = rows[:count]
        del hkeys, hvals
        roff, sources = np.zeros(n + 1, dtype=np.int64), np.zeros(count, dtype=np.uint32)
        refs.reverse(offsets, targets, roff, sources)
        pos = {int(a): i for i, a in enumerate(members.tolist())} if len(dep_pri) else {}
        pairs = sorted((pos[s], pos[p]) for p, s in zip(dep_pri.tolist(), dep_sec.tolist())
                       if p in pos and s in pos)
        self.next_step = np.zeros(n, dtype=np.int32)
        self.stamp = np.zeros(n, dtype=np.int32)
        self.via = np.zeros(n, dtype=np.bool_)
        refs.ancestors(roff, sources, np.array([s for s, _ in pairs], dtype=np.int64),
                       np.array([p for _, p in pairs], dtype=np.int64), self.position(self.target),
                       self.next_step, self.stamp, 1, np.zeros(n, dtype=np.int32), self.via)

    # -- answers -------------------------------------------------------------------------

    def position(self, address: int) -> int:
        i = int(np.searchsorted(self.members, np.uint64(address)))
        return i if i < len(self.members) and int(self.members[i]) == address else -1

    def chain(self, root: ClrRoot) -> tuple[tuple[int, ...], tuple[bool, ...]] | None:
        """(object addresses from the root's object to the target, reached-by-dependent-handle
        per step), or None when the root does not reach the target."""
        start = self.starts.get(root)
        i = self.position(start) if start is not None else -1
        if i < 0 or self.stamp[i] != 1:
            return None
        chain, via = [i], []
        while int(self.members[i]) != self.target:
            via.append(bool(self.via[i]))
            i = int(self.next_step[i])
            chain.append(i)
        return tuple(int(self.members[k]) for k in chain), tuple(via)


class FirstPaths(RootSearch):
    """``gcroot -limit n``: each root in turn, depth-first, stopping at the target
    (``reach.first_paths``), so that the first chains cost what reaching them costs, not
    the whole heap. A chain is the one the depth-first search met (references in slot
    order, dependent handles last), which need not be the shortest."""

    def paths(self, roots: list[ClrRoot], limit: int) -> Iterator[tuple[ClrRoot, tuple[int, ...], tuple[bool, ...]]]:
        """(root, addresses from the root's object to the target, by-dependent-handle per
        step) for the first ``limit`` roots, in ``roots``' order, that reach the target."""
        if not self.is_object(self.target):
            return
        m = self.mem
        order = [(r, self.starts.get(r)) for r in roots]
        order = [(r, a) for r, a in order if a is not None]
        starts = np.array([a for _r, a in order], dtype=np.uint64)
        pri, sec = self.dependent_edges()
        dep_pri, dep_sec = np.array(pri, dtype=np.uint64), np.array(sec, dtype=np.uint64)
        blocks = int(m.seg_block[-1])
        visited = memory.zeros(blocks, np.uint64)
        track = limit > 1 and len(starts) > 1
        current = memory.zeros(blocks, np.uint64) if track else np.zeros(1, np.uint64)
        most = m.heap_bytes // MIN_OBJECT_SIZE + 1
        base, cur = memory.reserve(most, np.int64), memory.reserve(most, np.int64)
        edges = memory.reserve(m.heap_bytes // 8 + len(dep_sec) + 16, np.uint64)
        st = np.zeros(12, dtype=np.int64)
        st[7], st[11], st[8], st[9] = blocks, -1, _PAUSE_EVERY, int(track)
        found = 0
        self.progress.start("Objects searched from the roots", 0)
        try:
            while True:
                status = reach.first_paths(m.words, m.seg_lo, m.seg_hi, m.seg_word, m.seg_block, m.seg_gap,
                                           m.gap_lo, m.gap_hi, self.table.keys, self.table.values,
                                           *self.layouts.arrays, starts, dep_pri, dep_sec, np.uint64(self.target),
                                           visited, current, base, cur, edges, st)
                if status == reach.UNKNOWN:
                    self._learn(int(st[5]))
                elif status == reach.PAUSE:
                    self.progress.update(int(st[4]))
                elif status == reach.EDGES:
                    grown = memory.reserve(2 * int(st[6]), np.uint64)
                    grown[:int(st[2])] = edges[:int(st[2])]
                    edges = grown
                elif status == reach.FOUND:
                    depth = int(st[1])
                    path = np.empty(depth + 1, dtype=np.uint64)
                    path[0] = starts[int(st[10])]
                    path[1:] = edges[cur[:depth] - 1]  # each frame's step; the last one is the target
                    found += 1
                    if found >= limit:  # the search is over: its memory goes before the shortening's comes
                        for a in (base, cur, visited, current, edges):
                            memory.release(a)
                    yield (order[int(st[10])][0], *self._shortest_within(path, dep_pri, dep_sec, edges))
                    if found >= limit:
                        return
                    st[1] = st[2] = 0  # on with the next root
                else:
                    return
        finally:
            self.visited = int(st[4])
            self.progress.finish()

    def _shortest_within(self, path: np.ndarray, dep_pri: np.ndarray, dep_sec: np.ndarray,
                         scratch: np.ndarray) -> tuple[tuple[int, ...], tuple[bool, ...]]:
        """The depth-first path's shortest chain over the references among its own objects
        (the graph path's backward search, ``_rows``, run on them alone): a path through a
        million-long linked list whose first node's owner also holds the target's holder
        directly comes out a few steps long. Every step is still a reference (or a
        dependent handle) of the heap."""
        self.members = np.unique(path)
        self._rows(dep_pri, dep_sec, scratch)
        i = self.position(int(path[0]))
        chain, via = [i], []
        while int(self.members[i]) != self.target:
            via.append(bool(self.via[i]))
            i = int(self.next_step[i])
            chain.append(i)
        return tuple(int(self.members[k]) for k in chain), tuple(via)
