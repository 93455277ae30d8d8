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


class RootWalk(RootSearch):
    """The roots that reach ``target``, each with the chain SOS prints, in the roots' order."""

    def paths(self, roots: list[ClrRoot], limit: int | None = None
              ) -> Iterator[tuple[ClrRoot, tuple[int, ...], tuple[bool, ...]]]:
        """(root, addresses from the root's object to the target, by-dependent-handle per
        step) for each root in ``roots``' order that reaches the target, at most ``limit``."""
        if not self.is_object(self.target):
            return
        m = self.mem
        starts = np.array([self.starts.get(r) or 0 for r in roots], dtype=np.uint64)
        pri, sec = self._dependent()
        dep_pri, dep_sec = np.array(pri, dtype=np.uint64), np.array(sec, dtype=np.uint64)
        dependent = set(zip(pri, sec))
        seen = memory.zeros(int(m.seg_block[-1]), np.uint64)
        most = m.heap_bytes // MIN_OBJECT_SIZE + 1  # objects the heap can hold: the deepest path
        f_obj, f_cur, f_end = memory.reserve(most, np.uint64), memory.reserve(most, np.int64), \
            memory.reserve(most, np.int64)
        pend = memory.reserve(m.heap_bytes // 8 + len(dep_sec) + 16, np.uint64)
        fkeys, fvals = np.zeros(_FIRST_FOUND, np.uint64), np.zeros(_FIRST_FOUND, np.int64)
        xkeys, xvals = np.zeros(_FIRST_FOUND, np.uint64), np.zeros(_FIRST_FOUND, np.int64)
        st = np.zeros(10, dtype=np.int64)
        st[8] = _PAUSE_EVERY
        found = 0
        self.progress.start("Objects searched from the roots", 0)
        try:
            while True:
                status = rw.root_walk(m.words, m.seg_lo, m.seg_hi, m.seg_word, m.seg_block, m.seg_gap, m.gap_lo,
                                      m.gap_hi, self.table.keys, self.table.values, *self.layouts.arrays, starts,
                                      dep_pri, dep_sec, np.uint64(self.target), seen, xkeys, xvals, fkeys, fvals, f_obj, f_cur,
                                      f_end, pend, st)
                if status == rw.UNKNOWN:
                    self._learn(int(st[5]))
                elif status == rw.GROW:
                    keys, vals = np.zeros(2 * len(fkeys), np.uint64), np.zeros(2 * len(fkeys), np.int64)
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
                elif status == rw.FOUND:
                    k = int(st[9])
                    chain = self._chain(int(starts[k]), fkeys, fvals)
                    yield roots[k], chain, tuple((a, b) in dependent for a, b in zip(chain, chain[1:]))
                    found += 1
                    if limit is not None and found >= limit:
                        return
                else:
                    return
        finally:
            self.visited = int(st[4])
            self.progress.finish()
            for a in (seen, f_obj, f_cur, f_end, pend):
                memory.release(a)

    @staticmethod
    def _chain(start: int, fkeys: np.ndarray, fvals: np.ndarray) -> tuple[int, ...]:
        for size in (64, len(fkeys) + 1):  # no chain is longer than the objects on chains
            out = np.zeros(size, dtype=np.uint64)
            n = int(rw.found_chain(np.uint64(start), fkeys, fvals, out))
            if n >= 0:
                return tuple(int(a) for a in out[:n])
        raise SosError(f"gcroot: the chain from {start:#x} does not end (a cycle in the search's chains)")
