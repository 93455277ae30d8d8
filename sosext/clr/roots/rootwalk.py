"""gcroot's chains as SOS prints them (cores): ClrMD's GCRoot search, compiled.

dotnet-dump's gcroot takes the roots in its order (handles, finalizer queue, stacks) and
searches each depth-first for the object, sharing what it learnt between roots: the
objects already met are not followed again, and an object of a chain printed before ends
a search at once (``kernels/rootwalk.py`` says exactly how). The chain printed for a root
is the one that search meets, not the shortest, and a root whose only paths run through
objects an earlier root's search met is not printed: SOS's answer, line for line.

The search reads the core's mapping (``rootsearch.CoreHeapMemory``): no heap walk, no
graph; a bit per 8 heap bytes for the objects met, the pending references of the path
being searched, and the chains found. Each chain is yielded as soon as it is found.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from ...errors import SosError
from ..heap import memory
from ..kernels import reach
from ..kernels import rootwalk as rw
from ..typesystem.types import MIN_OBJECT_SIZE
from .rootsearch import _PAUSE_EVERY, RootSearch
from .roots import ClrRoot

_FIRST_FOUND = 1 << 10


_NONE_U8, _NONE_I8, _NONE_U4 = np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, np.uint32)


@dataclass
class WalkState:
    """Where a search resumes: the root to take next, the chains found so far (object →
    next object, ``rootwalk.END`` for the target) and what counts as seen already (a forest
    up to rank ``fcut``, the values outside the heap met before it)."""

    root: int = 0
    found: list[tuple[int, int]] = field(default_factory=list)
    forest: "object | None" = None  # forest.RootForest
    fcut: int = 0
    outside: list[int] = field(default_factory=list)
    seen: np.ndarray | None = None  # the seen bits to start from (else none)
    resume: "WalkFork | None" = None  # a recording search's state where it met its target


@dataclass
class WalkFork:
    """A recording search's whole state the moment it was about to take its target (the
    kernel's ``FORK``): until then it was the root forest's search, which goes on from here
    (``forest.py``) while the search itself goes on to its chains."""

    seen: np.ndarray
    f_obj: np.ndarray  # the frames, ``depth`` of them
    f_cur: np.ndarray
    f_end: np.ndarray
    pend: np.ndarray  # the pending references, ``ptop`` of them
    xkeys: np.ndarray
    xvals: np.ndarray
    st: np.ndarray

    @classmethod
    def copy_of(cls, seen: np.ndarray, f_obj: np.ndarray, f_cur: np.ndarray, f_end: np.ndarray, pend: np.ndarray,
                xkeys: np.ndarray, xvals: np.ndarray, st: np.ndarray) -> "WalkFork":
        depth, ptop = int(st[1]), int(st[2])
        # Mapped at once, not in huge pages: faulting those in took 40 ms of the user's wait
        # (measured at 20M objects; 10 ms so). The forest's walk on from here pays the TLB misses.
        copied, pending = memory.empty(len(seen), np.uint64), memory.empty(ptop, np.uint64)
        copied[:], pending[:] = seen, pend[:ptop]
        return cls(copied, f_obj[:depth].copy(), f_cur[:depth].copy(), f_end[:depth].copy(), pending,
                   xkeys.copy(), xvals.copy(), st.copy())


class MapsAhead:
    """Maps a recording's pages ahead of the search that writes them, on the other core: the
    search would otherwise fault them in one by one (measured at 20M objects: 0.1 s of its
    2 s on one machine; 0.5-0.65 s on a VM whose host backs a page only at its first write,
    which ``madvise`` does not do: docs/design.md, sixteenth session). ``extra``: more arrays
    of 8-byte words the walk's results go to afterwards, each ``(words, per_pop)``, mapped to
    ``per_pop`` words per recorded pop. Its own thread; ``madvise`` holds the GIL, which the
    kernels (the search's and ``touch_pages``) do not need."""

    CHUNK = 1 << 21  # pops mapped at a time (16 MiB of each recording array)
    LEAD = 4  # chunks kept mapped beyond what is recorded (a kernel call records ~2M between returns)

    def __init__(self, record: list, extra: tuple[tuple[np.ndarray, float], ...] = ()) -> None:
        self.record = record
        self.extra = extra
        self.done = threading.Event()
        self.mapped = int(record[3]) // self.CHUNK * self.CHUNK  # a forest goes on from a first gcroot's
        self.extra_mapped = 0  # the extra arrays are by position: all of them are still to map
        self.thread = threading.Thread(target=self._run, name="sosext-record-pages", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.is_set():
            pops, parents = self.record[0], self.record[1]
            if pops is None:
                return
            count = int(self.record[3])
            if self.mapped < min(count + self.LEAD * self.CHUNK, len(pops)):  # what the search writes next first
                self._map(((pops, 1.0), (parents, 1.0)), self.mapped)
                self.mapped += self.CHUNK
            elif self.extra and self.extra_mapped + self.CHUNK <= count:  # then, behind it, what comes after
                self._map(self.extra, self.extra_mapped)
                self.extra_mapped += self.CHUNK
            else:
                self.done.wait(0.005)

    def _map(self, arrays: tuple[tuple[np.ndarray, float], ...], lo: int) -> None:
        hi = lo + self.CHUNK
        for a, per in arrays:
            memory.populate(a, int(lo * per), int(hi * per))
            rw.touch_pages(a, int(lo * per), int(hi * per))  # the page's first write, here

    def stop(self) -> None:
        self.done.set()
        self.thread.join()


class RootWalk(RootSearch):
    """The roots that reach ``target``, each with the chain SOS prints, in the roots' order."""

    def root_starts(self, roots: list[ClrRoot]) -> np.ndarray:
        return np.array([self.starts.get(r) or 0 for r in roots], dtype=np.uint64)

    def paths(self, roots: list[ClrRoot], limit: int | None = None, state: WalkState | None = None,
              record: "list | None" = None) -> Iterator[tuple[ClrRoot, tuple[int, ...], tuple[bool, ...]]]:
        """(root, addresses from the root's object to the target, by-dependent-handle per
        step) for each root in ``roots``' order that reaches the target, at most ``limit``;
        from ``state`` (a forest's first chain) when given. With ``record`` (a forest's
        recording, ``forest.new_recording``) the search records the forest's prefix it is
        and leaves ``self.fork`` where the forest goes on (None: the recording is whole)."""
        if not self.is_object(self.target) or (limit is not None and limit <= 0):
            return
        pri, sec = self.dependent_edges()
        dependent = set(zip(pri, sec))
        starts = self.root_starts(roots)
        for k, chain in self.run_search(starts, pri, sec, np.uint64(self.target), state or WalkState(), record):
            yield roots[k], chain, tuple((a, b) in dependent for a, b in zip(chain, chain[1:]))
            if limit is not None:
                limit -= 1
                if limit <= 0:
                    return

    def run_search(self, starts: np.ndarray, pri: list[int], sec: list[int], target: np.uint64, state: WalkState,
             record: "list | None") -> Iterator[tuple[int, tuple[int, ...]]]:
        """The kernel's search from ``state``: (root position, chain) per FOUND. ``record``
        (a forest's walk, target 0): [pop_addr, pop_parent, root_pops, count, roots started]
        filled in, the count and roots at each return to Python (another thread may read what
        is recorded so far: the count first, then the arrays, which are never shrunk or
        released while the walk runs), then the seen bitmap appended."""
        m = self.mem
        dep_pri, dep_sec = np.array(pri, dtype=np.uint64), np.array(sec, dtype=np.uint64)
        fork = state.resume
        if fork is not None:
            seen = fork.seen  # the forest's own from here on
        elif state.seen is not None:
            seen = state.seen
        elif state.forest is not None:
            seen = memory.reserve(int(m.seg_block[-1]), np.uint64)
        else:
            seen = memory.zeros_huge(int(m.seg_block[-1]), np.uint64)
        most = m.heap_bytes // MIN_OBJECT_SIZE + 1  # objects the heap can hold: the deepest path
        f_obj, f_cur, f_end = memory.reserve(most, np.uint64), memory.reserve(most, np.int64), \
            memory.reserve(most, np.int64)
        pend = memory.reserve(max(m.heap_bytes // 8 + len(dep_sec) + 16, 0 if fork is None else 2 * len(fork.pend)),
                              np.uint64)
        self.fork: WalkFork | None = None
        size = _FIRST_FOUND
        while size < 4 * (len(state.found) + 1):
            size *= 2
        fkeys, fvals = np.zeros(size, np.uint64), np.zeros(size, np.int64)
        for a, nxt in state.found:
            rw.found_add(np.uint64(a), nxt, fkeys, fvals)
        size = _FIRST_FOUND
        while size < 4 * (len(state.outside) + 1):
            size *= 2
        xkeys, xvals = np.zeros(size, np.uint64), np.zeros(size, np.int64)
        for a in state.outside:
            reach.open_insert(np.uint64(a), 0, xkeys, xvals)
        st = np.zeros(12, dtype=np.int64)
        st[0], st[3], st[7], st[8] = state.root, len(state.found), len(state.outside), _PAUSE_EVERY
        if fork is not None:  # the forest goes on where a first search forked it
            depth, ptop = int(fork.st[1]), int(fork.st[2])
            f_obj[:depth], f_cur[:depth], f_end[:depth], pend[:ptop] = fork.f_obj, fork.f_cur, fork.f_end, fork.pend
            xkeys, xvals, st = fork.xkeys, fork.xvals, fork.st.copy()
        fbits, fprefix, frank = (_NONE_U8, _NONE_I8, _NONE_U4) if state.forest is None else \
            (state.forest.bits, state.forest.prefix, state.forest.rank)
        pop_addr, pop_parent, root_pops = (_NONE_U8, _NONE_U8, _NONE_I8) if record is None else record[:3]
        ahead = MapsAhead(record) if record is not None and target != 0 else None  # a first gcroot's: it waits
        self.progress.start("Objects searched from the roots", 0)
        try:
            while True:
                status = rw.root_walk(m.words, m.seg_lo, m.seg_hi, m.seg_word, m.seg_block, m.seg_gap, m.gap_lo,
                                      m.gap_hi, self.table.keys, self.table.values, *self.layouts.arrays, starts,
                                      dep_pri, dep_sec, target, seen, xkeys, xvals, fkeys, fvals, f_obj, f_cur,
                                      f_end, pend, st, fbits, fprefix, frank, np.int64(state.fcut),
                                      pop_addr, pop_parent, root_pops, m.buckets, m.bucket_base, m.bucket_shift)
                if record is not None:
                    record[3], record[4] = int(st[10]), int(st[0]) + (1 if st[1] > 0 else 0)
                if status == rw.UNKNOWN:
                    self._learn(int(st[5]))
                elif status == rw.GROW:
                    size = 2 * len(fkeys)
                    while size < int(st[6]):
                        size *= 2
                    keys, vals = np.zeros(size, np.uint64), np.zeros(size, np.int64)
                    rw.found_rehash(fkeys, fvals, keys, vals)
                    fkeys, fvals = keys, vals
                elif status == rw.XGROW:
                    size = len(xkeys)
                    while size < 2 * int(st[6]):
                        size *= 2
                    held = xkeys[xkeys != 0]
                    xkeys, xvals = np.zeros(size, np.uint64), np.zeros(size, np.int64)
                    reach.rehash(held, len(held), xkeys, xvals)
                elif status == rw.PAUSE:
                    self.progress.update(int(st[4]))
                elif status == rw.PENDING:
                    grown = memory.reserve(2 * int(st[6]), np.uint64)
                    grown[:int(st[2])] = pend[:int(st[2])]
                    pend = grown
                elif status == rw.RECORD:
                    for i in (0, 1):
                        grown = memory.reserve(2 * len(record[i]) + 1024, np.uint64)
                        grown[:int(st[10])] = record[i][:int(st[10])]
                        record[i] = grown  # the old one is not released: a reader may hold it
                    pop_addr, pop_parent = record[0], record[1]
                elif status == rw.FORK:  # the forest's state; this search goes on without recording
                    if ahead is not None:
                        ahead.stop()
                        ahead = None
                    self.fork = WalkFork.copy_of(seen, f_obj, f_cur, f_end, pend, xkeys, xvals, st)
                    record = None
                    pop_addr, pop_parent, root_pops = _NONE_U8, _NONE_U8, _NONE_I8
                elif status == rw.FOUND:
                    k = int(st[9])
                    yield k, self._chain(int(starts[k]), fkeys, fvals)
                else:
                    break
            if record is not None:  # a forest's, or a search that never met its target: the whole forest
                record[3] = int(st[10])
                record.append(seen)  # every heap object the forest took off the stack: forest.recording_is_whole
                seen = None
        finally:
            if ahead is not None:
                ahead.stop()
            self.visited = int(st[4])
            self.progress.finish()
            for a in (seen, f_obj, f_cur, f_end, pend):
                if a is not None:
                    memory.release(a)

    @staticmethod
    def _chain(start: int, fkeys: np.ndarray, fvals: np.ndarray) -> tuple[int, ...]:
        for size in (64, len(fkeys) + 1):  # no chain is longer than the objects on chains
            out = np.zeros(size, dtype=np.uint64)
            n = int(rw.found_chain(np.uint64(start), fkeys, fvals, out))
            if n >= 0:
                return tuple(int(a) for a in out[:n])
        raise SosError(f"gcroot: the chain from {start:#x} does not end (a cycle in the search's chains)")
