"""Walking a core's heap on two cores: a forked child takes half of the segments.

Segments (regions) are independent, so the walk splits by segment. The parent first walks
a few segments alone, which teaches its size table the common MethodTables; then it forks.
The child inherits the table and the core's read-only mapping, walks its half, and hands the
results back through a temporary file; the parent walks the other half meanwhile. The child
never calls the DAC (it is not fork-safe to share): a segment in which it meets an unknown
MethodTable is simply walked again by the parent afterwards.

Only the standalone analyzer uses this, and only for cores: forking a debugger would copy
the whole debugger, and a live process's memory may not be read twice the same way.
"""
from __future__ import annotations

import os
import pickle
import tempfile
from typing import Callable, Sequence

from .walk import SizeTable

# Below this many bytes of heap, forking costs more than it saves (measured: bench_heap.py).
# SOSEXT_PARALLEL_MIN_BYTES overrides it (the tests walk small heaps in parallel with it).
PARALLEL_MIN_BYTES = int(os.environ.get("SOSEXT_PARALLEL_MIN_BYTES", 64 << 20))
WARMUP_FRACTION = 0.05

SegmentResult = tuple[list, list]  # (parts, errors) of one segment
WalkOne = Callable[[int], SegmentResult]


class _NeedsDac(Exception):
    """The child met a MethodTable its size table does not know."""


def _refuse(_mt: int) -> None:
    raise _NeedsDac()


def plan(lengths: Sequence[int], large: Sequence[bool]) -> tuple[list[int], list[int], list[int]] | None:
    """(warm-up, parent, child) segment indices, or None when the heap is too small.

    Large-object segments stay with the parent: their walk reads headers one by one
    through the target, and may need the DAC for rare types.
    """
    total = sum(lengths)
    if total < PARALLEL_MIN_BYTES or len(lengths) < 4:
        return None
    warm: list[int] = []
    done = 0
    order = list(range(len(lengths)))
    while order and (done < total * WARMUP_FRACTION or not warm):
        i = order.pop(0)
        warm.append(i)
        done += lengths[i]
    parent = [i for i in order if large[i]]
    rest = [i for i in order if not large[i]]
    half = (sum(lengths[i] for i in rest) + sum(lengths[i] for i in parent)) / 2
    child: list[int] = []
    acc = sum(lengths[i] for i in parent)
    for i in rest:  # the parent's share fills up first, then the child's
        if acc < half:
            parent.append(i)
            acc += lengths[i]
        else:
            child.append(i)
    return warm, parent, child


def walk_split(walk_one: WalkOne, sizes: SizeTable, warm: list[int], parent: list[int],
               child: list[int], after_each: Callable[[int], None]) -> dict[int, SegmentResult]:
    results: dict[int, SegmentResult] = {}
    for i in warm:
        results[i] = walk_one(i)
        after_each(i)
    if not child:
        for i in parent:
            results[i] = walk_one(i)
            after_each(i)
        return results
    scratch_dir = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryFile(dir=scratch_dir) as out:
        pid = os.fork()
        if pid == 0:  # the child: walk, write, leave without running any cleanup of the parent's
            code = 1
            try:
                sizes.resolve = _refuse
                found: dict[int, SegmentResult | None] = {}
                for i in child:
                    try:
                        found[i] = walk_one(i)
                    except _NeedsDac:
                        found[i] = None
                pickle.dump(found, out, protocol=pickle.HIGHEST_PROTOCOL)
                out.flush()
                code = 0
            finally:
                os._exit(code)
        try:
            for i in parent:
                results[i] = walk_one(i)
                after_each(i)
            _, status = os.waitpid(pid, 0)
            pid = 0
            found = {}
            if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
                out.seek(0)
                found = pickle.load(out)
        finally:
            if pid:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
    for i in child:
        r = found.get(i)
        results[i] = r if r is not None else walk_one(i)  # met a new MethodTable: ours to walk
        after_each(i)
    return results
