"""The managed heap: subheaps, segments/regions, allocation contexts and the walk.

``ClrHeap`` discovers the heap's shape from the DAC once per target generation and walks
it into a :class:`HeapIndex` (every object's address, MethodTable and size), which the
commands then filter instead of walking again.
"""
from __future__ import annotations

import bisect
import os
import threading
from array import array
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

import numpy as np

from ...errors import ContractError, DacError, NoGcHeap, SosError
from . import parallel
from ..roots.graph import ReferenceGraph, build_graph
from .index import HeapIndex, SegmentSlice
from ..roots.liveness import live_mask
from .objects import ClrObject, gcdesc_reader
from ..roots.roots import RootSet, gather_roots
from ..progress import Progress, check_interrupt
from .segments import (SEGMENT_FLAG_READONLY, ClrSegment, ClrSubHeap, Generation, GenerationRange,
                       SegmentKind)
from ..typesystem.types import MIN_OBJECT_SIZE, ClrType, TypeCache
from .walk import SizeTable, WalkError, object_facts, walk_words

if TYPE_CHECKING:
    from ..parts import RuntimeParts

# Reading a large-object segment in bulk would read every byte of every big array only
# to look at their headers; read headers one object at a time there instead.
_HEADER = 16
_LARGE_OBJECT_SIZE = 85_000  # the runtime's LOH threshold
CORDBG_E_READVIRTUAL_FAILURE = 0x80131C49


class ClrHeap:
    def __init__(self, runtime: "RuntimeParts") -> None:
        self.runtime = runtime
        dac = runtime.reader
        self.reader = dac
        try:
            data = dac.gc_heap_data()
            self.is_server = bool(data.server_mode)
            self.subheaps = self._load_subheaps(data.heap_count)
            gens = self.subheaps[0].generations
            self.uses_regions = gens[0].start_segment != gens[1].start_segment
            self.segments = self._load_segments()
        except (DacError, ContractError) as e:
            # CORDBG_E_READVIRTUAL_FAILURE on the GC's own globals and segments (the contracts
            # reader: memory it needs is missing): the dump left the heap out (a triage dump).
            missing = getattr(e, "hr", 0) == CORDBG_E_READVIRTUAL_FAILURE or getattr(e, "missing_memory", False)
            if missing and not runtime.target.is_live:
                raise NoGcHeap() from None
            raise
        self.can_walk = bool(data.gc_structures_valid)
        self.max_generation = data.max_generation
        g = dac.useful_globals()
        self.free_mt = g.free_method_table
        self.string_mt = g.string_method_table
        self.object_mt = g.object_method_table
        self.array_mt = g.array_method_table
        self.exception_mt = g.exception_method_table
        self.types = runtime.types
        self._starts = [s.start for s in self.segments]
        self.alloc_contexts = self._load_alloc_contexts()
        self._pieces: dict[int, list[tuple[int, int]]] = {}
        self.gcdesc = gcdesc_reader(self)
        self._index: HeapIndex | None = None
        self._statistics = None  # heapstats.HeapStatistics
        self._store_checked: tuple | None = None
        self._scratch_buf = memoryview(bytearray())
        self._graph: "ReferenceGraph | None" = None
        self._lookup = None
        self.root_searches = 0  # gcroots answered without the graph (gcroot.root_chains)
        self.background = None  # background.GraphBuild started after one of them
        self.root_forest = None  # forest.RootForest: later gcroots in SOS's order from it
        self.forest_build = None  # background.GraphBuild making it
        self.first_walk: tuple[float, int] | None = None  # seconds and objects of the first full gcroot's search
        self._build_lock = threading.RLock()  # held while the index or the graph is built
        self.last_root_search = None  # rootsearch.RootSearch: what it met answers "no roots" at once
        self.store = None  # indexcache.IndexStore of a core whose index is cached on disk
        self._roots: dict[bool, RootSet] = {}
        self._live: np.ndarray | None = None
        self._dominators = None  # dominators.DominatorTree

    # -- discovery ----------------------------------------------------------------------

    @property
    def dac(self):  # type: ignore[no-untyped-def]
        """The former name of ``reader`` (kept while branches that use it merge)."""
        return self.reader

    def _load_subheaps(self, count: int) -> list[ClrSubHeap]:
        dac = self.reader
        heaps: list[ClrSubHeap] = []
        if self.is_server:
            addresses = dac.gc_heap_list(count)
        else:
            addresses = [0]
        for i, addr in enumerate(addresses):
            details = dac.gc_heap_details(addr) if self.is_server else dac.gc_heap_static_data()
            # ISOSDacInterface8 knows every generation (the fixed struct stops at LOH).
            gens = dac.generation_table(addr if self.is_server else None) or list(details.generation_table)
            fill = dac.finalization_fill_pointers(addr if self.is_server else None) \
                or list(details.finalization_fill_pointers)
            heaps.append(ClrSubHeap(i, addr, details, tuple(gens), tuple(fill)))
        return heaps

    def _chain(self, first: int) -> Iterator[tuple[int, object]]:
        seen: set[int] = set()
        seg = first
        while seg and seg not in seen:
            seen.add(seg)
            data = self.reader.heap_segment_data(seg)
            yield seg, data
            seg = data.next

    def _load_segments(self) -> list[ClrSegment]:
        out: list[ClrSegment] = []
        seen: set[int] = set()
        for heap in self.subheaps:
            det = heap.details
            gens = heap.generations
            for gen_no, gen in enumerate(gens):
                if not self.uses_regions and gen_no < 2:
                    continue  # with segments gen0/gen1 live inside gen2's ephemeral segment
                for addr, d in self._chain(gen.start_segment):
                    if addr in seen:
                        continue
                    seen.add(addr)
                    end = det.alloc_allocated if addr == det.ephemeral_heap_segment else d.allocated
                    out.append(self._segment(heap, gen_no, addr, d, end))
        out.sort(key=lambda s: s.start)
        return out

    def _segment(self, heap: ClrSubHeap, gen_no: int, addr: int, d, end: int) -> ClrSegment:
        if d.flags & SEGMENT_FLAG_READONLY:
            kind, gen = SegmentKind.FROZEN, Generation.FROZEN
        elif gen_no == 3:
            kind, gen = SegmentKind.LOH, Generation.LOH
        elif gen_no == 4:
            kind, gen = SegmentKind.POH, Generation.POH
        else:
            kind, gen = SegmentKind.SOH, Generation(gen_no)
        start = d.mem
        if self.uses_regions or kind is not SegmentKind.SOH:
            ranges = (GenerationRange(gen, start, end),)
            return ClrSegment(addr, heap.index, kind, start, end, d.committed, d.reserved, d.flags, gen, ranges)
        if addr != heap.details.ephemeral_heap_segment:
            ranges = (GenerationRange(Generation.GEN2, start, end),)
            return ClrSegment(addr, heap.index, kind, start, end, d.committed, d.reserved, d.flags,
                              Generation.GEN2, ranges)
        g1 = min(max(heap.generations[1].allocation_start, start), end)
        g0 = min(max(heap.generations[0].allocation_start, g1), end)
        ranges = (GenerationRange(Generation.GEN2, start, g1), GenerationRange(Generation.GEN1, g1, g0),
                  GenerationRange(Generation.GEN0, g0, end))
        return ClrSegment(addr, heap.index, kind, start, end, d.committed, d.reserved, d.flags, None, ranges)

    def _load_alloc_contexts(self) -> list[tuple[int, int]]:
        """Every [ptr, limit) the runtime is allocating into: not yet objects."""
        ctx: set[tuple[int, int]] = set()
        for _addr, t in self.reader.threads():
            if t.alloc_context_ptr:
                ctx.add((t.alloc_context_ptr, t.alloc_context_limit))
        for heap in self.subheaps:
            g0 = heap.generations[0]
            if g0.alloc_context_ptr:
                ctx.add((g0.alloc_context_ptr, g0.alloc_context_limit))
        glob = self.reader.global_allocation_context()
        if glob and glob[0]:
            ctx.add(glob)
        return sorted(ctx)

    # -- lookups --------------------------------------------------------------------------

    def segment_of(self, address: int) -> ClrSegment | None:
        i = bisect.bisect_right(self._starts, address) - 1
        if i >= 0:
            seg = self.segments[i]
            if seg.start <= address < max(seg.end, seg.committed):
                return seg
        return None

    def generation_of(self, address: int) -> Generation | None:
        seg = self.segment_of(address)
        return seg.generation_of(address) if seg else None

    def get_type(self, mt: int) -> ClrType | None:
        return self.types.get(mt)

    def method_table_sizes(self, mt: int) -> tuple[int, int] | None:
        """(base size, component size) of a header word that is a MethodTable, else None
        (a corrupt header: the DAC is never asked about it). What the walks learn types by."""
        return self._sizes_of(mt)

    def _sizes_of(self, mt: int) -> tuple[int, int] | None:
        if not self.runtime.is_method_table(mt):
            return None  # a corrupt header word: the DAC is never asked about it
        t = self.types.get(mt)
        if t is None or t.base_size < 17 or t.base_size > 1 << 31:
            return None  # not a MethodTable: treat the header as corrupt
        return t.base_size, t.component_size

    # -- the walk -------------------------------------------------------------------------

    def index(self, progress: Progress | None = None) -> HeapIndex:
        """Every object on the heap, walked once and cached for this target generation
        (and, for a core, on disk: see indexcache.py)."""
        if self._index is None:
            with self.building():
                if self._index is None:
                    self._index = self._walk(progress or Progress.silent())
        return self._index

    def statistics(self, progress: Progress | None = None):  # -> heapstats.HeapStatistics
        """dumpheap -stat's numbers for the whole heap. From the index when it exists or a
        core's index cache is about to keep it on disk; otherwise (a live process, the cache
        off) streamed by a walk that keeps no column per object."""
        from . import heapstats
        from .. import kernels
        if self._statistics is None:
            p = progress or Progress.silent()
            store = self.index_store()
            if self._index is None and store is not None:
                self._statistics = store.load_statistics(self)
            if self._statistics is not None:
                pass
            elif self._index is None and kernels.compiled() and store is None:
                self._statistics = heapstats.stream(self, p, self._sizes_of)
            else:
                self._statistics = heapstats.HeapStatistics.of_index(self, self.index(p))
                if store is not None:
                    store.save_statistics(self._statistics)
        return self._statistics

    def lookup(self):  # -> refscan.ObjectLookup
        """Address → index position in constant time (a start bitmap per segment)."""
        if self._lookup is None:
            from ..roots.refscan import ObjectLookup
            with self.building():
                if self._lookup is None:
                    self._lookup = ObjectLookup(self.index())
        return self._lookup

    def graph(self, progress: Progress | None = None) -> ReferenceGraph:
        """Who references whom, for the whole heap; built once per target generation."""
        if self._graph is None:
            with self.building():
                if self._graph is None:
                    p = progress or Progress.silent()
                    self._graph = build_graph(self, self.index(p), p)
        return self._graph

    @property
    def has_graph(self) -> bool:
        return self._graph is not None

    @contextmanager
    def building(self) -> Iterator[None]:
        """Hold the heap's build lock: one thread builds the index or the graph at a time,
        and one that needs what another builds waits for it (still stopping on Ctrl-C)."""
        while not self._build_lock.acquire(timeout=0.05):
            check_interrupt()
        try:
            yield
        finally:
            self._build_lock.release()

    def roots(self, include_stacks: bool = True) -> RootSet:
        """Handles, stack roots (optional: they need thread contexts) and the f-reachable queue."""
        if include_stacks not in self._roots:
            self._roots[include_stacks] = gather_roots(self, include_stacks)
        return self._roots[include_stacks]

    def live(self, progress: Progress | None = None) -> np.ndarray:
        """Boolean mask over the index: True where the object is reachable from a root."""
        if self._live is None:
            self._live = live_mask(self.index(progress), self.graph(progress), self.roots())
        return self._live

    def dominators(self, progress: Progress | None = None):  # -> dominators.DominatorTree
        """Immediate dominators and retained sizes of every object (see dominators.py);
        built once per target generation."""
        if self._dominators is None:
            from ..roots.dominators import build_dominators
            self.graph(progress)
            self._dominators = build_dominators(self)
        return self._dominators

    def type_name_at(self, position: int) -> str:
        """The type name of the object at heap index position ``position``."""
        return self.types.name_of(self.index().method_table_at(position))

    def csharp_type_name_at(self, position: int) -> str:
        """The same in ClrMD's shape (``List<System.String>``), as SOS's managed commands print it."""
        return self.types.csharp_name_of(self.index().method_table_at(position))

    def get_object(self, address: int) -> ClrObject:
        return ClrObject(self, address)

    def explain_non_object(self, address: int) -> str:
        """One line saying why ``address`` is not an object: inside another object (the
        walk knows where objects are), outside the GC heap, or just not an object."""
        if self.segment_of(address) is None:
            return f"{address:#x} is not a valid object (the address is not in the GC heap)"
        ix = self.index()
        i = ix.containing(address)
        if i is not None:
            start = int(ix.addresses[i])
            if start != address:
                mt = ix.method_table_at(i)
                return (f"{address:#x} is not a valid object: it is inside {start:#x} ({self.types.name_of(mt)}, "
                        f"{int(ix.sizes[i])} bytes) at offset 0x{address - start:x}")
        return f"{address:#x} is not a valid object"

    def pieces(self, seg: ClrSegment) -> list[tuple[int, int]]:
        """The segment's object range minus the allocation contexts inside it, each with the
        object being allocated just below its pointer (see _unset_before)."""
        cached = self._pieces.get(seg.start)
        if cached is not None:
            return cached
        pieces = []
        pos = seg.start
        for ptr, limit in self.alloc_contexts:
            if ptr < pos or ptr >= seg.end:
                continue
            pieces.append((pos, self._unset_before(ptr, pos)))
            pos = limit + MIN_OBJECT_SIZE
        if pos < seg.end:
            pieces.append((pos, seg.end))
        pieces = [(a, b) for a, b in pieces if b > a]
        self._pieces[seg.start] = pieces
        return pieces

    def _unset_before(self, ptr: int, floor: int) -> int:
        """Where the zero words that end just below an allocation pointer begin. A thread that
        allocates moves its pointer first and writes the new object's MethodTable after: dumped
        in between, the object is zeros without a type, not corruption. No object starts in
        zeros, so the walk's range may end there; an object of size < 85,000 bytes (the rest go
        to the large object heap) bounds the look back."""
        for span in (64, _LARGE_OBJECT_SIZE):  # nearly always the first word below is no zero
            low = max(floor, ptr - span)
            data = self.runtime.target.read_partial(low, ptr - low)
            if len(data) != ptr - low or (ptr - low) % 8:
                return ptr
            nonzero = np.flatnonzero(np.frombuffer(data, dtype=np.uint64))
            if len(nonzero):
                return low + 8 * (int(nonzero[-1]) + 1)
            if low == floor:
                break
        return low

    def index_store(self):  # -> indexcache.IndexStore | None
        """Where a core's index is kept on disk; None for a live process or with the cache off
        (asked once: the answer may come with a one-line note)."""
        if self._store_checked is None:
            from .indexcache import IndexStore
            self._store_checked = (IndexStore.for_heap(self),)
        return self._store_checked[0]

    def _walk(self, progress: Progress) -> HeapIndex:
        from .. import kernels
        if kernels.compiled():
            return self._walk_compiled(progress)
        kernels.note_slow_path()
        return self._walk_numpy(progress)

    def _walk_compiled(self, progress: Progress) -> HeapIndex:
        from . import fastwalk, memory
        store = self.store = self.index_store()
        if store is not None:
            cached = store.load(self)
            if cached is not None:
                return cached
        cap = fastwalk.capacity(self)
        cols = store.columns(cap) if store is not None else None
        if cols is None:
            store = None
            cols = fastwalk.IndexColumns(memory.reserve(cap, np.uint64), memory.reserve(cap, np.uint32),
                                         memory.reserve(cap, np.uint32))
        try:
            res = fastwalk.walk_heap(self, cols, progress, self._sizes_of)
        except BaseException:
            if store is not None:
                store.discard()
            raise
        ix = HeapIndex.from_walk(self, cols, res, store.generations if store is not None else None)
        if store is not None:
            store.commit(ix)
        return ix

    def _walk_numpy(self, progress: Progress) -> HeapIndex:
        """The walk without numba: a Python loop with numpy run-skipping (walk.py)."""
        sizes = SizeTable(self._sizes_of)
        segments = self.segments
        total = sum(s.length for s in segments)
        progress.start("Scanning heap", total)
        target = self.runtime.target
        done = [0]

        def walk_one(i: int) -> tuple[list, list]:
            seg = segments[i]
            errors: list[WalkError] = []
            if seg.kind is SegmentKind.LOH:
                parts = self._walk_headers(seg, sizes, errors)
            else:
                parts = self._walk_bulk(target, seg, sizes, errors)
            # Only what the index keeps: addresses, MethodTables, length words.
            return [(a, m, n) for a, m, _footprint, n in parts], errors

        def after_each(i: int) -> None:
            done[0] += segments[i].length
            progress.update(done[0])

        split = None
        # Fork only from the main thread: a child of a multi-threaded process inherits the
        # other threads' locks held (a background build, clr/roots/background.py, walks alone).
        if self.runtime.workers > 1 and not target.is_live and hasattr(os, "fork") \
                and threading.current_thread() is threading.main_thread():
            split = parallel.plan([s.length for s in segments], [s.kind is SegmentKind.LOH for s in segments])
        if split is not None:
            results = parallel.walk_split(walk_one, sizes, *split, after_each=after_each)
        else:
            results = {}
            for i in range(len(segments)):
                results[i] = walk_one(i)
                after_each(i)
        progress.finish()
        addr_parts: list[np.ndarray] = []
        mt_parts: list[np.ndarray] = []
        len_parts: list[np.ndarray] = []
        slices: list[SegmentSlice] = []
        errors: list[WalkError] = []
        count = 0
        for i, seg in enumerate(segments):
            parts, errs = results[i]
            first = count
            for a, m, n in parts:
                addr_parts.append(a)
                mt_parts.append(m)
                len_parts.append(n)
                count += len(a)
            slices.append(SegmentSlice(seg, first, count))
            errors.extend(errs)
        known = {w & ~7 for w in sizes.fixed} | {w & ~7 for w in sizes.varying}
        return HeapIndex.build(self, addr_parts, mt_parts, len_parts, slices, errors, known)

    def _walk_bulk(self, target, seg: ClrSegment, sizes: SizeTable, errors: list[WalkError]):
        pieces = self.pieces(seg)
        if not pieces:
            return []
        lo = pieces[0][0]
        if target.is_live:
            # A live process's bytes are copied anyway: into one buffer reused for every
            # segment, so the walk does not page-fault in a fresh copy of the whole heap.
            buf = self.scratch(seg.end - lo)
            avail = target.read_into(lo, buf) & ~7
        else:
            data = target.read_partial(lo, seg.end - lo)  # zero-copy from a core's mapping
            avail = len(data) & ~7
            buf = memoryview(data)
        if avail < seg.end - lo:
            errors.append(WalkError(lo + avail, 0, "memory not readable"))
        buf = buf[:avail]
        words = buf.cast("B").cast("Q") if avail else memoryview(b"").cast("Q")
        out = []
        for a, b in pieces:
            first = (a - lo) >> 3
            stop = min((b - lo) >> 3, avail >> 3)
            if first >= stop:
                continue
            idx = array("q")
            end, bad = walk_words(words, first, stop, sizes, idx)
            if bad is not None:
                mt = words[bad] if bad < len(words) else 0
                errors.append(WalkError(lo + bad * 8, mt, "invalid object header"))
            out.append(object_facts(buf, lo, idx, end))
        return out

    def scratch(self, size: int) -> memoryview:
        if len(self._scratch_buf) < size:
            from . import memory
            self._scratch_buf = memory.buffer(size)
        return self._scratch_buf[:size]

    def _walk_headers(self, seg: ClrSegment, sizes: SizeTable, errors: list[WalkError]):
        target = self.runtime.target
        out = []
        for a, b in self.pieces(seg):
            addrs: list[int] = []
            mts: list[int] = []
            lens: list[int] = []
            counts: list[int] = []
            pos = a
            while pos < b:
                head = target.read_partial(pos, _HEADER)
                if len(head) < _HEADER:
                    errors.append(WalkError(pos, 0, "memory not readable"))
                    break
                raw = int.from_bytes(head[:8], "little")
                info = sizes.varying.get(raw)
                fixed = sizes.fixed.get(raw)
                if info is None and fixed is None:
                    if not sizes.learn(raw):
                        errors.append(WalkError(pos, raw, "invalid object header"))
                        break
                    continue
                n = int.from_bytes(head[8:12], "little")
                if fixed is not None:
                    size = fixed << 3
                else:
                    size = ((info[0] + info[1] * n) >> 3) << 3
                addrs.append(pos)
                mts.append(raw & ~7)
                lens.append(size)
                counts.append(n)
                pos += size
            out.append((np.array(addrs, dtype=np.uint64), np.array(mts, dtype=np.uint64),
                        np.array(lens, dtype=np.uint64), np.array(counts, dtype=np.uint64)))
        return out

    def check_walkable(self, ignore_gc_state: bool = False) -> None:
        if not self.can_walk and not ignore_gc_state:
            raise SosError("The GC heap is not in a valid state for traversal.  (Use -ignoreGCState to override.)")
