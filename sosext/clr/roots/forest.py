"""Later gcroots in SOS's order, from one search that looked for nothing (cores).

ClrMD's GCRoot (``kernels/rootwalk.py``) shares what it met across roots, in the roots'
order, so until its first chain is found the search does not depend on the target: it is a
prefix of the *forest*, the same search run with no target to the end. The forest records
every reference it takes off the stack (its rank, in that order) with the object that met
it (its parent). For any target T, then:

* T is found when the forest takes it off the stack, or earlier when a root's object is T
  (the first such root, if its search starts first); neither: no root reaches T at all,
  and gcroot answers at once.
* The first chain is T's parents up to the root's object: the frames of the search at
  that moment are exactly those parents.
* What the search has seen then, once it drains the references it met and never took, is
  what the forest took off the stack before T (rank below T's) — plus T itself, which is
  on the chain. The search goes on from the next root with that state: the walk kernel
  treats an object of the forest below that rank as seen (``fcut``) without copying a
  bitmap, and runs from there exactly as a cold gcroot would, with the first chain already
  in ``found``. What it costs is what the later roots search, which on heaps where one
  root holds most of the heap (a leak's cache) is little.

``gcroot -limit 1`` (and every target no root reaches) needs no search at all.

Memory: a bit per 8 heap bytes (what the forest met), a prefix count per 64 of them, and 12
bytes per object it met (the rank, 4; the parent, 8). It is built after a first gcroot, on
the other core where that is safe (``background.py``), going on from where that gcroot's
search, which recorded the forest's prefix, met its target (``rootwalk.WalkFork``).
"""
from __future__ import annotations

import copy
import os
import threading
from typing import TYPE_CHECKING, Iterator

import numpy as np

from ..heap import memory
from ..kernels import reach
from ..kernels import rootwalk as rw
from ..progress import Progress
from ..typesystem.types import MIN_OBJECT_SIZE
from .roots import ClrRoot
from .rootwalk import MapsAhead, RootWalk, WalkFork, WalkState

if TYPE_CHECKING:
    from ..heap.heap import ClrHeap
    from .rootsearch import CoreHeapMemory

BYTES_PER_OBJECT = 12 + 16  # kept (rank, parent), and the recording in search order while it is built
RECORD_SLACK = 1024  # recording room beyond the objects the heap can hold: values outside the heap


class RootForest:
    """ClrMD's search from ``roots`` run to the end with no target, recorded."""

    def __init__(self, heap: "ClrHeap", mem: "CoreHeapMemory", roots: list[ClrRoot],
                 progress: "Progress | None" = None, like: RootWalk | None = None,
                 recording: list | None = None, fork: WalkFork | None = None) -> None:
        """``like``: a walk over the same roots whose roots' objects, MethodTables and type
        layouts serve again (the first gcroot's); ``recording``: :func:`new_recording`'s
        list, which another thread may read while the forest is built (:func:`partial_paths`).
        A first gcroot that recorded (``RootWalk.paths(record=...)``) leaves in ``recording``
        the forest's prefix, and ``fork``, the state it goes on from; or, when that search
        never met its target, the whole forest (only the ranks are left to do)."""
        if like is not None:
            walk = copy.copy(like)
            walk.target, walk.progress = 0, progress or Progress.silent()
        else:
            walk = RootWalk(heap, mem, 0, roots, progress)
        self.mem = mem
        self.roots = list(roots)
        starts = walk.root_starts(roots)
        pri, sec = walk.dependent_edges()
        self.dependent = (pri, sec)
        record = recording if recording is not None else new_recording(mem, len(roots))
        # The ranks' arrays (by position in address order, as ``rank``), written at random once
        # the walk ends: their pages are mapped and first written while it runs, on the other
        # core (MapsAhead), with the rest of the recording's, two 4-byte ranks to a word.
        most = mem.heap_bytes // MIN_OBJECT_SIZE + 1
        rank_words, parent = memory.reserve(most // 2 + 1, np.uint64), memory.reserve(most, np.uint64)
        if not recording_is_whole(record):
            ahead = MapsAhead(record, ((rank_words, 0.5), (parent, 1.0)))
            try:
                for _ in walk.run_search(starts, pri, sec, np.uint64(0), WalkState(resume=fork), record):
                    pass  # no target: nothing is found
            finally:
                ahead.stop()
        pops, parents, root_pops, count, _roots, bits = record
        root_pops[len(roots)] = count
        self.count = count
        self.walked = walk.visited
        self.starts = [int(a) for a in starts]
        self.root_pops = root_pops
        self.bits = bits
        self.prefix = np.zeros(len(bits) + 1, np.int64)
        rw.bit_prefix(bits, self.prefix)
        n = int(self.prefix[-1])
        # Written at random, in 4 KiB pages: faulting huge pages in cost more than their TLB
        # misses spared (measured, the ranks at 20M: 0.63 s so, 0.86 s in huge pages)
        if n > len(parent):  # more than the heap can hold: only where a test shrinks MIN_OBJECT_SIZE's bound
            rank_words, parent = memory.empty(n // 2 + 1, np.uint64), memory.empty(n, np.uint64)
        memory.populate(rank_words, 0, n // 2 + 1)  # mapped in one call where no MapsAhead ran
        memory.populate(parent, 0, n)
        self.rank = rank_words.view(np.uint32)[:n]
        self.parent = parent[:n]  # by position in address order, as ``rank``
        outside = np.zeros(count, np.uint8)
        _ranks(pops, parents, count, mem, bits, self.prefix, self.rank, self.parent, outside)
        where = np.flatnonzero(outside)
        self.outside = pops[where].copy()  # values outside the heap, by rank
        self.outside_rank = where.astype(np.int64)
        self.outside_parent = parents[where].copy()
        record[0] = record[1] = None  # freed once no gcroot reading the build's prefix holds them
        self.walk = walk  # its MethodTables and layouts serve the searches from the forest

    def matches(self, roots: list[ClrRoot]) -> bool:
        """Whether ``roots`` are the forest's, in the same order."""
        return list(roots) == self.roots

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.bits, self.prefix, self.rank, self.parent, self.outside,
                                       self.outside_rank, self.outside_parent))

    def _position(self, address: int) -> int:
        """``address``'s position among the objects the forest took, or -1."""
        at = _bit_at(self.mem, address)
        if at is None or not (int(self.bits[at[0]]) >> at[1]) & 1:
            return -1
        return int(rw.bit_position(self.bits, self.prefix, at[0], at[1]))

    def _taken_before(self, address: int, cut: int) -> bool:
        """Whether the forest took the object at ``address`` before rank ``cut``."""
        pos = self._position(address)
        return pos >= 0 and int(self.rank[pos]) < cut

    def first(self, target: int) -> tuple[int, int, tuple[int, ...]] | None:
        """(root position, rank cut, chain) of the first chain to ``target``, or None."""
        pos = self._position(target)
        r = int(self.rank[pos]) if pos >= 0 else -1
        root = next((k for k, a in enumerate(self.starts) if a == target), -1)
        if root >= 0 and (r < 0 or int(self.root_pops[root]) <= r):
            return root, int(self.root_pops[root]), (target,)
        if r < 0:
            return None
        chain = [target]
        at = pos
        while True:
            parent = int(self.parent[at])
            chain.append(parent & ~1)
            if parent & 1:
                break
            at = self._position(parent)
            if at < 0 or len(chain) > len(self.rank) + 1:
                return None  # not the forest's own record: no answer from it
        chain.reverse()
        k = int(np.searchsorted(self.root_pops, r, side="right")) - 1  # the root whose search took T
        while k > 0 and self.starts[k] != chain[0]:
            k -= 1
        return k, r, tuple(chain)

    def paths(self, heap: "ClrHeap", target: int, roots: list[ClrRoot], limit: int | None,
              progress: "Progress | None") -> Iterator[tuple[ClrRoot, tuple[int, ...], tuple[bool, ...]]]:
        """What ``RootWalk(target).paths(roots, limit)`` yields, the first chain at once."""
        first = self.first(target)
        if first is None:
            return
        k, cut, chain = first
        walk = copy.copy(self.walk)  # its roots' objects, MethodTables and layouts: the same
        walk.target, walk.progress = target, progress or Progress.silent()
        pri, sec = self.dependent
        dependent = set(zip(pri, sec))
        rank, end = self.outside_rank, int(self.root_pops[k + 1])
        held = (rank > cut) & (rank < end) & np.isin(self.outside_parent, np.array(sorted(_frame_parents(chain)),
                                                                                     np.uint64))
        outside = drained_outside([int(a) for a in self.outside[rank < cut]], [int(a) for a in self.outside[held]],
                                  lambda a: self._taken_before(a, cut))
        if outside is None:  # the drain unsees what the forest holds as seen: a search from the first root
            state, skip = WalkState(), 0
        else:
            yield roots[k], chain, tuple((a, b) in dependent for a, b in zip(chain, chain[1:]))
            if limit is not None and limit <= 1:
                return
            found = [(chain[-1], int(rw.END))] + [(a, b) for a, b in zip(chain, chain[1:])]
            state, skip = WalkState(root=k + 1, found=found, forest=self, fcut=cut, outside=outside), 1
        left = None if limit is None else limit - skip
        for k, chain in walk.run_search(walk.root_starts(roots), pri, sec, np.uint64(target), state, None):
            yield roots[k], chain, tuple((a, b) in dependent for a, b in zip(chain, chain[1:]))
            if left is not None:
                left -= 1
                if left <= 0:
                    return


def _bit_at(m: "CoreHeapMemory", address: int) -> tuple[int, int] | None:
    """The word and bit of a heap bitmap (a bit per 8 heap bytes) for ``address``; None for
    an address that is not 8-aligned inside a segment."""
    if not 0 < address < 1 << 64 or address & 7:
        return None
    s = int(reach.segment_of(np.uint64(address), m.seg_lo, m.seg_hi))
    if s < 0:
        return None
    b = (address - int(m.seg_lo[s])) >> 3
    return int(m.seg_block[s]) + (b >> 6), b & 63


def _frame_parents(chain: tuple[int, ...]) -> set[int]:
    """How the recording names the objects a search's frames walked when it met the chain's
    end: the root's object with its low bit set, then the others."""
    return {chain[0] | 1, *chain[1:-1]} if len(chain) > 1 else set()


def _odd_pops(pops: np.ndarray, lo: int, hi: int) -> list[int]:
    """The positions in [lo, hi) of recorded values whose low two bits are set (no object's
    address), a chunk at a time: a temporary as long as a 20M-object heap's recording would
    cost its pages' first writes."""
    step = 1 << 20
    return [a + int(i) for a in range(lo, hi, step) for i in np.flatnonzero(pops[a:min(a + step, hi)] & np.uint64(3))]


def drained_outside(taken: list[int], pending: list[int], seen_in_heap) -> list[int] | None:  # type: ignore[no-untyped-def]
    """The values outside the heap a search holds as seen once it drained, at its first chain,
    what its frames met and never took (ClrMD's ``DrainUnwalkedFromSeen``): ``taken``, those
    it took before; ``pending``, what the frames met among them and still held. The drain
    takes each pending value out of the seen set without its low two bits
    (``kernels/rootwalk.unsee_object``): a value whose low bits are set stays seen, and the
    value below it, if seen, does not. None when a value below is a heap object the forest
    holds as seen (``seen_in_heap``: a misaligned value into the heap): only a search says
    what follows."""
    held = set(taken) | set(pending)
    for q in pending:
        below = q & ~3
        if below in held:
            held.discard(below)
        elif below != q and seen_in_heap(below):
            return None
    return sorted(held)


RANKS_SPLIT = 1 << 20  # pops above which the ranks are written by two threads


def _ranks(pops: np.ndarray, parents: np.ndarray, count: int, mem: "CoreHeapMemory", bits: np.ndarray,
           prefix: np.ndarray, rank: np.ndarray, parent: np.ndarray, outside: np.ndarray) -> None:
    """``rw.forest_ranks`` over the pops, in two halves at once where there are two cores:
    each object is popped once, so the halves write apart; all random access (measured at
    20M objects: 0.63 s on one core, 0.54 s on two; most of what a build gone on from a first
    gcroot costs)."""
    def part(lo: int, hi: int) -> None:
        rw.forest_ranks(pops, parents, lo, hi, mem.seg_lo, mem.seg_hi, mem.seg_block, bits, prefix, rank, parent,
                        outside, mem.buckets, mem.bucket_base, mem.bucket_shift)
    if count < RANKS_SPLIT or (os.cpu_count() or 1) < 2:
        part(0, count)
        return
    half = count // 2
    other = threading.Thread(target=part, args=(half, count), name="sosext-forest-ranks", daemon=True)
    other.start()
    part(0, half)
    other.join()


def new_recording(mem: "CoreHeapMemory", roots: int) -> list:
    """Where a forest's walk records: [pops, parents, root_pops, count, roots started]; the
    walk that ends it appends its seen bitmap (:func:`recording_is_whole`)."""
    most = mem.heap_bytes // MIN_OBJECT_SIZE + RECORD_SLACK
    # Not in huge pages: faulting those in was slower (measured, a first gcroot recording at 20M
    # objects: +0.30 s against +0.10 s for 4 KiB pages).
    return [memory.reserve(most, np.uint64), memory.reserve(most, np.uint64), np.zeros(roots + 1, np.int64), 0, 0]


def recording_is_whole(recording: list) -> bool:
    """Whether the walk that recorded ran to the end (RootWalk.paths appended its seen bitmap)."""
    return len(recording) == 6


def partial_paths(walk: RootWalk, recording: list, roots: list[ClrRoot], limit: int | None
                  ) -> Iterator[tuple[ClrRoot, tuple[int, ...], tuple[bool, ...]]] | None:
    """While the forest is being built: ``walk``'s answer (a walk for the target over the
    forest's roots), when the target's first chain is in what the forest recorded so far —
    as :meth:`RootForest.paths`, with the seen bits of the pops before the target set
    explicitly. None when it is not there yet."""
    count = int(recording[3])  # first the count, then the arrays (they only grow)
    started = int(recording[4])
    pops, parents, root_pops = recording[0], recording[1], recording[2]
    if pops is None or parents is None:
        return None  # the forest is built: it answers
    target = walk.target
    starts = walk.root_starts(roots)
    hits = np.flatnonzero(pops[:count] == np.uint64(target))
    r = int(hits[0]) if len(hits) else -1
    root = next((k for k in range(min(started, len(roots))) if int(starts[k]) == target), -1)
    if root >= 0 and (r < 0 or int(root_pops[root]) <= r):
        k, cut, chain = root, int(root_pops[root]), (target,)
    elif r >= 0:
        out = np.zeros(min(count, 1 << 16) + 2, np.uint64)
        n = int(rw.chain_back(pops, parents, r, out))
        if n < 0:
            return None
        chain = tuple(int(a) for a in out[:n][::-1])
        k = int(np.searchsorted(root_pops[:started], r, side="right")) - 1
        while k > 0 and int(starts[k]) != chain[0]:
            k -= 1
        cut = r
        if k < 0 or int(starts[k]) != chain[0]:
            return None
    else:
        return None  # not met so far: found later, or never
    if k + 1 >= started:
        return None  # root k's search goes on: what its frames held at the chain is not all recorded yet
    m = walk.mem
    seen = memory.zeros_huge(int(m.seg_block[-1]), np.uint64)
    outside = np.zeros(1024, np.uint64)
    while True:
        n_out = int(rw.seen_from_pops(pops, cut, m.seg_lo, m.seg_hi, m.seg_block, seen, outside))
        if n_out >= 0:
            break
        outside = np.zeros(2 * len(outside), np.uint64)
    # what the frames still held: only a value with its low two bits set changes what the drain leaves
    parents_of = _frame_parents(chain)
    pending = [int(pops[i]) for i in _odd_pops(pops, cut + 1, int(root_pops[k + 1])) if int(parents[i]) in parents_of]

    def seen_in_heap(a: int) -> bool:
        at = _bit_at(m, a)
        return at is not None and bool((int(seen[at[0]]) >> at[1]) & 1)
    drained = drained_outside([int(a) for a in outside[:n_out]], pending, seen_in_heap)
    if drained is None:
        return None  # the drain unsees a heap object: the forest, once built, falls back to a search
    pri, sec = walk.dependent_edges()
    dependent = set(zip(pri, sec))

    def stream() -> Iterator[tuple[ClrRoot, tuple[int, ...], tuple[bool, ...]]]:
        yield roots[k], chain, tuple((a, b) in dependent for a, b in zip(chain, chain[1:]))
        if limit is not None and limit <= 1:
            return
        found = [(chain[-1], int(rw.END))] + [(a, b) for a, b in zip(chain, chain[1:])]
        state = WalkState(root=k + 1, found=found, outside=drained, seen=seen)
        left = None if limit is None else limit - 1
        for j, c in walk.run_search(starts, pri, sec, np.uint64(target), state, None):
            yield roots[j], c, tuple((a, b) in dependent for a, b in zip(c, c[1:]))
            if left is not None:
                left -= 1
                if left <= 0:
                    return
    return stream()
