"""The machine's floor for a heap search: nanoseconds per dependent load at random over 1 GiB.

    /usr/bin/python3 bench/bench_floor.py [--mib 1024] [--hops 5000000] [--repeat 3]

gcroot's search in SOS's order (``kernels/rootwalk.py``) is depth-first: the object it walks
next is named by the object it walks now, so on a heap where the leak keeps everything alive
each step waits for a line of the core's mapping that nothing could fetch earlier. A pointer
chase through a random cycle of 64-byte cells is that wait alone, with no work per step: one
load per hop, each depending on the one before. It runs over anonymous memory twice, in 4 KiB
pages (as the core's file mapping is) and asking for transparent huge pages (madvise), and
prints the best of ``--repeat`` per page size. Divide a search's time by the objects it walked
(bench_scale.py prints both) to compare. Nothing is asserted.
"""
from __future__ import annotations

import argparse
import mmap
import sys
import time

import numpy as np

try:
    import numba
except ImportError:  # the floor needs compiled code: interpreted, each hop costs far more than the load
    sys.exit("bench_floor: needs numba (apt-get install python3-numba)")


@numba.njit(nogil=True, cache=False)
def chase(cells: np.ndarray, start: int, hops: int) -> int:
    p = start
    for _ in range(hops):
        p = cells[p]
    return p


def cycle(mib: int, huge: bool) -> tuple[np.ndarray, mmap.mmap, int]:
    """A random cycle through every 64-byte cell: each cell's first word is the next one's."""
    words = (mib << 20) // 8
    area = mmap.mmap(-1, words * 8, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    area.madvise(mmap.MADV_HUGEPAGE if huge else mmap.MADV_NOHUGEPAGE)
    cells = np.frombuffer(area, dtype=np.int64)
    order = np.random.default_rng(1).permutation(words // 8).astype(np.int64) * 8
    cells[order] = np.roll(order, -1)
    return cells, area, int(order[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--hops", type=int, default=5_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"pointer chase, {args.mib} MiB, {args.hops:,} dependent loads, best of {args.repeat}")
    for huge in (False, True):
        cells, area, start = cycle(args.mib, huge)
        chase(cells, start, 1000)  # compiled, and the first pages touched
        best = min(_timed(cells, start, args.hops) for _ in range(args.repeat))
        print(f"  {'huge pages (THP)' if huge else '4 KiB pages':18} {best / args.hops * 1e9:7.1f} ns per hop")
        del cells
        area.close()


def _timed(cells: np.ndarray, start: int, hops: int) -> float:
    t = time.perf_counter()
    chase(cells, start, hops)
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
