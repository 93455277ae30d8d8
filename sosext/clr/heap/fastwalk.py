"""The heap walk with compiled kernels: every object's address, type id and size.

Per segment Python picks the bytes (zero-copy from a core's mapping, or one reused buffer
for a live process) and the pieces between allocation contexts; ``kernels.heapwalk.walk``
does the per-object work. When the kernel meets a header word it does not know, Python
asks the DAC whether it is a MethodTable, teaches the table, and restarts the kernel at
that word. The output goes straight into the index's columns (``IndexColumns``), which are
sized for the worst case (every object 24 bytes): pages never written are never touched,
so they cost address space, not memory.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from . import memory
from ..kernels import heapwalk as hw
from ..progress import Progress
from .segments import ClrSegment, SegmentKind
from ..typesystem.types import MIN_OBJECT_SIZE
from .walk import WalkError

if TYPE_CHECKING:
    from ..parts import HeapParts

_GOLDEN = 0x9E3779B97F4A7C15
_MASK64 = (1 << 64) - 1
_HEADER = 16  # bytes read per large object: MethodTable and length


class MethodTableTable:
    """Header word → type id, as an open-addressing table the kernel reads directly.

    Type ids are given in the order types are met; ``values`` holds -1 for a word known
    not to be a MethodTable, so a corrupt header stops the kernel without a DAC call.
    """

    def __init__(self, resolve: Callable[[int], "tuple[int, int] | None"]) -> None:
        self.resolve = resolve
        self.keys = np.zeros(1 << 10, dtype=np.uint64)
        self.values = np.full(1 << 10, -1, dtype=np.int32)
        self.base_sizes = np.zeros(64, dtype=np.uint64)
        self.component_sizes = np.zeros(64, dtype=np.uint64)
        self.method_tables: list[int] = []
        self._used = 0

    def learn(self, word: int) -> int:
        """Type id of header ``word`` (asking the DAC once), or -1 if it is no MethodTable."""
        mt = word & ~7 & _MASK64
        if mt == 0:
            return -1
        slot = self._slot(mt)
        if self.keys[slot] == mt:
            return int(self.values[slot])
        info = self.resolve(mt)
        tid = -1
        if info is not None:
            tid = len(self.method_tables)
            self.method_tables.append(mt)
            if tid >= len(self.base_sizes):
                self.base_sizes = np.resize(self.base_sizes, 2 * tid)
                self.component_sizes = np.resize(self.component_sizes, 2 * tid)
            self.base_sizes[tid], self.component_sizes[tid] = info
        self._insert(mt, tid)
        return tid

    def _slot(self, key: int) -> int:
        mask = len(self.keys) - 1
        i = (((key * _GOLDEN) & _MASK64) >> 40) & mask
        keys = self.keys
        while True:
            k = int(keys[i])
            if k == key or k == 0:
                return i
            i = (i + 1) & mask

    def _insert(self, key: int, value: int) -> None:
        if 2 * (self._used + 1) > len(self.keys):
            old = [(int(k), int(v)) for k, v in zip(self.keys, self.values) if k]
            size = 2 * len(self.keys)
            self.keys = np.zeros(size, dtype=np.uint64)
            self.values = np.full(size, -1, dtype=np.int32)
            for k, v in old:
                s = self._slot(k)
                self.keys[s], self.values[s] = k, v
        s = self._slot(key)
        self.keys[s], self.values[s] = key, value
        self._used += 1


@dataclass
class IndexColumns:
    """Where the walk writes: address, type id and size of each object, in walk order."""

    addresses: np.ndarray  # uint64
    type_ids: np.ndarray  # uint32
    sizes: np.ndarray  # uint32 (SOS size; SIZE_OVERFLOW when it does not fit)
    count: int = 0


@dataclass(frozen=True, slots=True)
class WalkResult:
    count: int
    slices: list  # (segment, first, stop)
    errors: list[WalkError]
    table: MethodTableTable
    big_sizes: dict[int, int]  # object position -> size, for sizes of 4 GiB and more


def capacity(heap: "HeapParts") -> int:
    """The most objects the heap can hold: every object takes at least 24 bytes."""
    return sum(max(b - a, 0) // MIN_OBJECT_SIZE + 1 for seg in heap.segments for a, b in heap.pieces(seg))


Flush = Callable[[IndexColumns, MethodTableTable, dict], None]


def walk_heap(heap: "HeapParts", cols: IndexColumns, progress: Progress,
              resolve: Callable[[int], "tuple[int, int] | None"], flush: Flush | None = None) -> WalkResult:
    """Every object into ``cols``. With ``flush``, ``cols`` is a window rather than the
    whole index: whenever it is full, and after each segment, ``flush(cols, table, big)``
    consumes what it holds and the walk starts again at position 0 (``stream_stats``)."""
    table = MethodTableTable(resolve)
    target = heap.runtime.target
    errors: list[WalkError] = []
    slices: list = []
    big: dict[int, int] = {}
    progress.start("Scanning heap", sum(s.length for s in heap.segments))
    done = 0
    ahead = _ReadAhead.of(heap, target)
    try:
        for seg in heap.segments:
            first = cols.count
            if seg.kind is SegmentKind.LOH:
                _walk_large(heap, seg, table, cols, errors, big, flush)
            else:
                _walk_bulk(heap, target, seg, table, cols, errors, flush, ahead)
            slices.append((seg, first, cols.count))
            if flush is not None:
                flush(cols, table, big)
            done += seg.length
            progress.update(done)
    finally:
        if ahead is not None:
            ahead.close()
    progress.finish()
    return WalkResult(cols.count, slices, errors, table, big)


class _ReadAhead:
    """A core's bulk segments read on another thread, each while the kernel walks the one
    before it (both release the GIL), into two buffers used in turn: on two cores the
    copy from the page cache (a third of a cold ``dumpheap -stat`` at 20M objects) stops
    adding to the walk. Only for cores, whose bytes come from sosext's own file descriptor
    (never a debugger's API), in the hosts that allow a second thread at all
    (``Target.background_safe``: the CLI and LLDB)."""

    def __init__(self, heap: "HeapParts", core) -> None:  # core: elfcore.ElfCore
        from concurrent.futures import ThreadPoolExecutor
        self.heap, self.core = heap, core
        self.queue = [s for s in heap.segments if s.kind is not SegmentKind.LOH and heap.pieces(s)]
        self.next = 0
        self.bufs: list = [None, None]
        self.turn = 0
        self.pending = None
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="sosext-read")

    @classmethod
    def of(cls, heap: "HeapParts", target) -> "_ReadAhead | None":
        core = target.core_file() if hasattr(target, "core_file") else None
        if core is None or not hasattr(core, "read_into") or os.environ.get("SOSEXT_READ_AHEAD", "1") == "0":
            return None
        if not getattr(target, "background_safe", False):  # hosts that keep Python to one thread (GDB)
            return None
        return cls(heap, core)

    def _start(self) -> None:
        if self.next >= len(self.queue):
            self.pending = None
            return
        seg = self.queue[self.next]
        self.next += 1
        lo = self.heap.pieces(seg)[0][0]
        size = seg.end - lo
        buf = self.bufs[self.turn]
        if buf is None or len(buf) < size:
            buf = self.bufs[self.turn] = memory.buffer(size)
        self.turn ^= 1
        self.pending = (seg, buf[:size], self.pool.submit(self.core.read_into, lo, buf[:size]))

    def take(self, seg: ClrSegment) -> "tuple[memoryview, int] | None":
        """The segment's bytes and how many were read; None if it is not the one read ahead.
        The buffer is the caller's until its next ``take``."""
        if self.pending is None and self.next == 0:
            self._start()
        if self.pending is None or self.pending[0] is not seg:
            return None
        _seg, buf, future = self.pending
        avail = future.result()
        self._start()
        return buf, avail

    def close(self) -> None:
        self.pool.shutdown(wait=True)


def _walk_bulk(heap: "HeapParts", target, seg: ClrSegment, table: MethodTableTable,
               cols: IndexColumns, errors: list[WalkError], flush: Flush | None,
               ahead: "_ReadAhead | None" = None) -> None:
    pieces = heap.pieces(seg)
    if not pieces:
        return
    lo = pieces[0][0]
    # Into reused buffers, for cores too: copying from the page cache costs less than
    # faulting in a mapping page by page, and the buffers stay hot from segment to segment.
    read = ahead.take(seg) if ahead is not None else None
    if read is not None:
        buf, avail = read[0], read[1] & ~7
    else:
        buf = heap.scratch(seg.end - lo)
        avail = target.read_into(lo, buf) & ~7
    if avail < seg.end - lo:
        errors.append(WalkError(lo + avail, 0, "memory not readable"))
    words = np.frombuffer(buf, dtype=np.uint64, count=avail // 8)
    # Map the output for this segment's most objects in one call, not a page fault at a time.
    most = cols.count + (seg.end - lo) // MIN_OBJECT_SIZE + 1
    for column in (cols.addresses, cols.type_ids, cols.sizes):
        memory.populate(column, cols.count, most)
    for a, b in pieces:
        i = (a - lo) >> 3
        stop = min((b - lo) >> 3, len(words))
        while i < stop:
            i, cols.count, status = hw.walk(words, i, stop, np.uint64(lo), table.keys, table.values,
                                            table.base_sizes, table.component_sizes,
                                            cols.addresses, cols.type_ids, cols.sizes, cols.count)
            if status == hw.UNKNOWN and table.learn(int(words[i])) >= 0:
                continue
            if status in (hw.UNKNOWN, hw.INVALID):
                bad = i
                i = resynchronise(words, bad, stop, table)
                errors.append(WalkError(lo + 8 * bad, int(words[bad]) if bad < len(words) else 0,
                                        "invalid object header", lo + 8 * i if i < stop else 0))
            if status == hw.FULL:
                if flush is None:
                    raise RuntimeError("heap index capacity exceeded")  # capacity() is an upper bound
                flush(cols, table, {})


_RESYNC_CHECK = 4  # objects that must follow a candidate header for the walk to trust it


def resynchronise(words: np.ndarray, bad: int, stop: int, table: MethodTableTable) -> int:
    """Where objects start again after a corrupt header at word ``bad`` (SOS steps over
    corruption too): the first later word that holds a known MethodTable and is followed
    by ``_RESYNC_CHECK`` well-formed objects (or a clean end of the range). ``stop`` if none."""
    known = np.array([mt for mt in table.method_tables], dtype=np.uint64)
    start = bad + MIN_OBJECT_SIZE // 8
    if start >= stop or not len(known):
        return stop
    heads = words[start:stop] & np.uint64(~7 & 0xFFFFFFFFFFFFFFFF)
    out = [np.zeros(_RESYNC_CHECK, dt) for dt in (np.uint64, np.uint32, np.uint32)]
    for j in (np.nonzero(np.isin(heads, known))[0] + start).tolist():
        end, n, status = hw.walk(words, j, stop, np.uint64(0), table.keys, table.values, table.base_sizes,
                                 table.component_sizes, *out, 0)
        if status == hw.FULL or (status == hw.DONE and end == stop):
            return j
    return stop


def _walk_large(heap: "HeapParts", seg: ClrSegment, table: MethodTableTable, cols: IndexColumns,
                errors: list[WalkError], big: dict[int, int], flush: Flush | None) -> None:
    """Large objects one header at a time: reading them in bulk would read every byte of
    every big array only to look at its first 16."""
    target = heap.runtime.target
    for a, b in heap.pieces(seg):
        pos = a
        while pos < b:
            head = target.read_partial(pos, _HEADER)
            if len(head) < _HEADER:
                errors.append(WalkError(pos, 0, "memory not readable"))
                break
            word = int.from_bytes(head[:8], "little")
            tid = table.learn(word)
            if tid < 0:
                errors.append(WalkError(pos, word, "invalid object header"))
                break
            size = int(table.base_sizes[tid]) + int(table.component_sizes[tid]) * int.from_bytes(head[8:12], "little")
            if flush is not None and cols.count == len(cols.addresses):
                flush(cols, table, big)
            n = cols.count
            cols.addresses[n] = pos
            cols.type_ids[n] = tid
            sos = max(size, MIN_OBJECT_SIZE)
            if sos >= hw.SIZE_OVERFLOW:
                big[n] = sos
                sos = hw.SIZE_OVERFLOW
            cols.sizes[n] = sos
            cols.count = n + 1
            pos += (size + 7) & ~7
