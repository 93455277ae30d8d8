"""Paths from GC roots to an object, found backwards.

Instead of searching forward from every root (SOS's approach, which is what makes gcroot
slow on big heaps), we walk the reverse reference graph once from the target: every
object that can reach the target gets a pointer to its next step towards it, on a
shortest path. Each root whose object got such a pointer then yields its chain in time
proportional to the chain's length. Dependent handles add primary → secondary edges.
"""
from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

import numpy as np

from ...errors import SosError
from ..progress import Progress
from .roots import ClrRoot, RootKind
from .statics import static_name_between

if TYPE_CHECKING:
    from ..heap.heap import ClrHeap
    from ..runtime import ClrRuntime


@dataclass(frozen=True, slots=True)
class RootPath:
    root: ClrRoot
    chain: tuple[int, ...]  # object indices, root object first, target last
    via_dependent: tuple[bool, ...]  # per chain element after the first: reached by a dependent handle


# A search from the roots costs about half of building the graph (walk, scan, reverse; 0.4
# against 0.9 s at 20M objects), after which every gcroot of the stop takes milliseconds: as
# in renting before buying, search while the searches cost less than the graph, then build it.
# Where a background build is allowed (background.py) the graph is built on the other core
# right after the first search instead, and later gcroots wait for it.
SEARCHES_BEFORE_GRAPH = 2


@dataclass(frozen=True, slots=True)
class RootChain:
    """A root's chain by address, whichever search found it (what gcroot prints)."""

    root: ClrRoot
    addresses: tuple[int, ...]  # root object first, target last
    method_tables: tuple[int, ...]
    via_dependent: tuple[bool, ...]  # per element after the first: reached by a dependent handle


def sos_order(roots: list[ClrRoot], stacks: bool = True) -> list[ClrRoot]:
    """The roots in the order dotnet-dump's gcroot searches them: handles, the finalizer
    queue, then (``stacks``) the threads' stack roots."""
    kinds = (RootKind.HANDLE, RootKind.FINALIZER) + ((RootKind.STACK,) if stacks else ())
    return [r for kind in kinds for r in roots if r.kind is kind]


def root_chains(heap: "ClrHeap", address: int, roots: list[ClrRoot], limit: int | None = None,
                progress: "Progress | None" = None) -> list[RootChain]:
    """The chain of each root in ``roots`` (in that order) that reaches the object at
    ``address``, at most ``limit`` of them (see :func:`iter_root_chains`)."""
    return list(iter_root_chains(heap, address, roots, limit, progress))


def iter_root_chains(heap: "ClrHeap", address: int, roots: list[ClrRoot], limit: int | None = None,
                     progress: "Progress | None" = None, shortest: bool = False) -> Iterator[RootChain]:
    """The chain of each root in ``roots`` (in that order) that reaches the object at
    ``address``, at most ``limit`` of them, each as soon as it is known.

    On a core, SOS's chains: ClrMD's search in the roots' order (``rootwalk.RootWalk``). With
    ``shortest`` (and on a live process), each root's shortest chain: with a ``limit`` on a
    core without the graph each root is searched depth-first up to the target
    (``rootsearch.FirstPaths``: the shortest chain over that search's objects); without one
    the first two such gcroots search from the roots over the core's memory
    (``rootsearch.RootSearch``), and an object the last such search did not meet has no roots;
    later ones, and live processes, build the reverse graph once and answer from it in
    milliseconds. ``SOSEXT_GCROOT=walk``, ``=graph``, ``=search`` or ``=first`` forces one way
    (tests compare them)."""
    way = os.environ.get("SOSEXT_GCROOT", "")
    if way == "walk" or (way == "" and not shortest):
        walked = _walk_chains(heap, address, roots, limit, progress)
        if walked is not None:
            yield from walked
            return
        if way == "walk":
            raise SosError("the search in SOS's order cannot read this heap in place (a live process)")
    if way != "graph" and (way == "search" or not heap.has_graph):
        last = heap.last_root_search  # it met every object its roots reach
        if last is not None and last.is_object(address) and not last.reached(address) \
                and last.root_objects(roots) == last.root_set:
            return
    first = way == "first" or (limit is not None and way == "" and not heap.has_graph)
    if way != "graph" and (way in ("search", "first") or first or _rent(heap)):
        found = _search_chains(heap, address, roots, limit, progress, first)
        if found is not None:
            yield from found
            return
        if way in ("search", "first") and not heap.runtime.target.is_live:
            raise SosError("the search from the roots cannot read this core's heap in place")
    ix = heap.index()
    target = ix.find(address)
    if target is None:
        raise SosError(f"{address:#x} is not a valid object")
    finder = PathFinder(heap, target, roots)
    if finder.graph.condensed is None:
        _plan_build(heap, len(ix))  # the components, so that the next gcroots stop early
    n = 0
    for r in roots:
        p = finder.path_from(r)
        if p is None:
            continue
        yield RootChain(r, tuple(int(ix.addresses[i]) for i in p.chain),
                        tuple(ix.method_table_at(i) for i in p.chain), p.via_dependent)
        n += 1
        if limit is not None and n >= limit:
            break


def roots_holding(address: int, roots: list[ClrRoot], limit: int | None = None) -> Iterator[RootChain]:
    """gcroot of an address that is no object, as ClrMD's search answers it: each root (in
    ``roots``' order, at most ``limit``) whose value is the address itself, as a chain of that
    one address with no MethodTable. An interior root stands for the object containing its
    value (ClrMD's root object), so never for an address that is no object's start."""
    n = 0
    for r in roots:
        if limit is not None and n >= limit:
            return
        if r.object == address and not r.interior:
            yield RootChain(r, (address,), (0,), ())
            n += 1


def _walk_chains(heap: "ClrHeap", address: int, roots: list[ClrRoot], limit: int | None,
                 progress: "Progress | None") -> Iterator[RootChain] | None:
    """SOS's chains in SOS's order (``rootwalk.RootWalk``), or None where the core's heap
    cannot be read in place (a live process: the graph answers). From the second gcroot of
    a stop on, the root forest built after the first answers (``forest.py``)."""
    from .. import kernels
    if not kernels.compiled() or heap.runtime.target.is_live:
        return None
    from .rootsearch import CoreHeapMemory
    from .rootwalk import RootWalk
    read = heap.runtime.target.read_pointer
    forest = _forest_for(heap, roots)
    if forest is None:
        partial = _from_partial_forest(heap, address, roots, limit, progress)
        if partial is not None:
            return partial
        forest = _forest_for(heap, roots, wait=True)
    if forest is not None:
        if not forest.walk.is_object(address):
            return None

        def from_forest() -> Iterator[RootChain]:
            for root, chain, via in forest.paths(heap, address, roots, limit, progress):
                yield RootChain(root, chain, tuple(read(a) & ~7 for a in chain), via)
        return from_forest()
    mem = CoreHeapMemory.of(heap)
    if mem is None:
        return None
    walk = RootWalk(heap, mem, address, roots, progress)
    if not walk.is_object(address):
        return None
    recording = _forest_recording(heap, mem, roots)

    def stream() -> Iterator[RootChain]:
        t0 = time.monotonic()
        for root, chain, via in walk.paths(roots, limit, record=recording):
            yield RootChain(root, chain, tuple(read(a) & ~7 for a in chain), via)
        heap.root_searches += 1
        if limit is None and heap.first_walk is None:
            heap.first_walk = (time.monotonic() - t0, walk.visited)  # what a search costs here
        _plan_forest(heap, mem, roots, walk, recording)
    return stream()


def _forest_wanted(heap: "ClrHeap") -> bool:
    """Whether a root forest is still to be built for the heap: none yet, and no search
    forced by SOSEXT_GCROOT (which measures the searches themselves)."""
    return os.environ.get("SOSEXT_GCROOT", "") == "" and heap.root_forest is None


def _forest_recording(heap: "ClrHeap", mem, roots: list[ClrRoot]) -> list | None:
    """Where a first gcroot records the root forest's prefix, when a forest will be built
    after it (a session where more commands may follow): up to its target that search *is*
    the forest's, so the build goes on from there instead of walking it again (on a leak's
    heap, where the target is met late, that is most of the forest). None: not recording."""
    if not _forest_wanted(heap):
        return None
    from . import background
    from .forest import BYTES_PER_OBJECT, new_recording
    if not background.forest_may_follow(heap, mem.heap_bytes // 24, BYTES_PER_OBJECT):
        return None
    return new_recording(mem, len(roots))


def _forest_for(heap: "ClrHeap", roots: list[ClrRoot], wait: bool = False):  # -> forest.RootForest | None
    """The heap's root forest for these roots; with ``wait``, waiting for its build if one
    runs and is likely to end before a search would (:func:`_worth_waiting`)."""
    build = heap.forest_build
    if wait and heap.root_forest is None and build is not None and build.running and _worth_waiting(heap, build):
        build.wait(until=lambda: heap.root_forest is not None)
    forest = heap.root_forest
    return forest if forest is not None and forest.matches(roots) else None


def _from_partial_forest(heap: "ClrHeap", address: int, roots: list[ClrRoot], limit: int | None,
                         progress: "Progress | None") -> Iterator[RootChain] | None:
    """While the forest is being built: the answer from what it has recorded so far, when
    the object's first chain is in it (``forest.partial_paths``); else None."""
    build = heap.forest_build
    record = getattr(getattr(build, "tracker", None), "record", None)
    if heap.root_forest is not None or build is None or not build.running or record is None \
            or build.tracker.roots != list(roots):
        return None
    from .forest import partial_paths
    from .rootsearch import CoreHeapMemory
    from .rootwalk import RootWalk
    mem = CoreHeapMemory.of(heap)
    if mem is None:
        return None
    walk = RootWalk(heap, mem, address, roots, progress)  # its own MethodTables: the build learns its own
    if not walk.is_object(address):
        return None
    found = partial_paths(walk, record, roots, limit)
    if found is None:
        return None
    read = heap.runtime.target.read_pointer
    return (RootChain(root, chain, tuple(read(a) & ~7 for a in chain), via) for root, chain, via in found)


# The forest's build walks everything the roots reach (measured on the leak heap: 1.2x the
# objects the first full gcroot walked, then a ranking pass of ~0.35x the walk's time), so at
# 100M objects it takes 20 s where a search takes 6. Rent or buy, priced by the build's
# progress: wait for it when it should end before a search of the first one's cost would,
# or when no core is spare for a search beside it (measured on a loaded machine: both then
# share one, and the search took 7 s where waiting took 5).
FOREST_WALKS_PER_SEARCH = 1.2
FOREST_RANKING_SHARE = 0.35


def _worth_waiting(heap: "ClrHeap", build) -> bool:
    first = heap.first_walk
    tracker = getattr(build, "tracker", None)
    if first is None or tracker is None:
        return True
    try:
        if os.getloadavg()[0] >= (os.cpu_count() or 1):  # the build's thread and others fill the cores
            return True
    except OSError:
        pass
    seconds, walked = first
    total = max(tracker.done, FOREST_WALKS_PER_SEARCH * walked)
    if tracker.base >= total:
        return True  # the first gcroot's search walked it all: only the ranks are left
    here, elapsed = tracker.done - tracker.base, time.monotonic() - tracker.started
    if here <= 0 or elapsed <= 0:
        # just started: the rest of the walk is ahead, more than a search unless the
        # first gcroot's search walked most of it (met its target late)
        return tracker.base >= (1 - FOREST_RANKING_SHARE) * total
    rate = elapsed / here
    left = (total - tracker.done) * rate + FOREST_RANKING_SHARE * total * rate
    return left < seconds


class _BuildTracker(Progress):
    """How far the forest's walk has gone (objects walked, since when), for _worth_waiting."""

    def __init__(self) -> None:
        super().__init__(stream=None, enabled=False)
        self.done = 0
        self.base = 0  # objects the first gcroot's search walked for the forest (it goes on from there)
        self.started = time.monotonic()
        self.roots: list[ClrRoot] = []
        self.record: list | None = None  # forest.new_recording's, read by _from_partial_forest

    def update(self, done: int) -> None:
        self.done = done
        super().update(done)


def _plan_forest(heap: "ClrHeap", mem, roots: list[ClrRoot], walk, recording: list | None = None) -> None:
    """After a first gcroot in SOS's order: the root forest, in the background (from where
    that gcroot's ``recording`` stopped, if it recorded)."""
    if not _forest_wanted(heap):
        return
    from . import background
    from .forest import BYTES_PER_OBJECT, RootForest, new_recording
    ordered = list(roots)

    tracker = _BuildTracker()
    tracker.roots = ordered
    fork = None
    if recording is not None:
        fork, walk.fork = walk.fork, None
        tracker.base = tracker.done = walk.visited if fork is None else int(fork.st[4])
    # read by gcroots that come meanwhile
    tracker.record = recording if recording is not None else new_recording(mem, len(ordered))

    def job() -> None:
        tracker.started = time.monotonic()
        try:
            heap.root_forest = RootForest(heap, mem, ordered, tracker, like=walk, recording=tracker.record, fork=fork)
        finally:
            tracker.record = None  # its arrays go with the last gcroot reading them
        # Then the graph, while the user still reads: gcroot -shortest (and the commands of
        # retention) answer from it, where they would otherwise search or build it in the foreground.
        if build is not None and build.then_graph and not heap.has_graph:
            background.build_graph(heap)
    build = background.after_walk(heap, mem.heap_bytes // 24, job, BYTES_PER_OBJECT)
    if build is not None:
        build.tracker = tracker
        build.then_graph = background.graph_fits(mem.heap_bytes // 24, beside=BYTES_PER_OBJECT)


def _rent(heap: "ClrHeap") -> bool:
    """Search (rent) rather than use the graph (buy): while it is not built, unless a
    background build makes it (waiting for it costs less than competing with it) or two
    searches were already paid for."""
    if heap.has_graph:
        return False
    build = heap.background
    if build is not None and build.failed is None:
        return False
    return heap.root_searches < SEARCHES_BEFORE_GRAPH


def _search_chains(heap: "ClrHeap", address: int, roots: list[ClrRoot], limit: int | None,
                   progress: "Progress | None", first: bool) -> Iterator[RootChain] | None:
    """The chains by a search over the core's mapping, or None where it cannot read the heap."""
    from .. import kernels
    if not kernels.compiled() or heap.runtime.target.is_live:
        return None
    from .rootsearch import CoreHeapMemory, FirstPaths, RootSearch, TooCyclic
    mem = CoreHeapMemory.of(heap)
    if mem is None:
        return None
    read = heap.runtime.target.read_pointer
    if first:
        finder = FirstPaths(heap, mem, address, roots, progress)
        if not finder.is_object(address):
            return None

        def stream() -> Iterator[RootChain]:
            for root, chain, via in finder.paths(roots, limit if limit is not None else len(roots)):
                yield RootChain(root, chain, tuple(read(a) & ~7 for a in chain), via)
            heap.root_searches += 1
            _plan_build(heap, mem.heap_bytes // 24)  # objects the heap can hold, at most
        return stream()
    try:
        search = RootSearch(heap, mem, address, roots, progress)
    except TooCyclic:
        if os.environ.get("SOSEXT_GCROOT", "") == "search":
            raise SosError("the search from the roots gave up: a strongly connected component holds a large "
                           "part of the heap (the graph path answers)") from None
        return None  # the graph costs less on this heap
    if not search.is_object(address):
        return None
    heap.last_root_search = search
    heap.root_searches += 1
    _plan_build(heap, search.visited)
    out: list[RootChain] = []
    for r in roots:
        found = search.chain(r)
        if found is None:
            continue
        chain, via = found
        out.append(RootChain(r, chain, tuple(read(a) & ~7 for a in chain), via))
        if limit is not None and len(out) >= limit:
            break
    return iter(out)


def _plan_build(heap: "ClrHeap", objects: int) -> None:
    if os.environ.get("SOSEXT_GCROOT", "") == "":
        from . import background
        background.after_root_search(heap, objects)


def chain_static_of(heap: "ClrHeap", chain: RootChain) -> str | None:
    """The static field a chain starts from, when its first object is a statics array."""
    if len(chain.addresses) < 2 or heap.types.name_of(chain.method_tables[0]) != "System.Object[]":
        return None
    return static_name_between(heap.runtime, chain.addresses[0], chain.addresses[1])


def root_method_name(runtime: "ClrRuntime", root: ClrRoot) -> str | None:
    """The method whose frame holds a stack root (an explicit Frame's method, or the managed
    code at the frame's IP); None for other roots or when the runtime cannot name it."""
    if root.kind is not RootKind.STACK or not root.source:
        return None
    if root.source_is_frame:
        return runtime.frame_method_name(root.source)
    return runtime.method_name_at(root.source)


def chain_static(heap: "ClrHeap", chain: tuple[int, ...] | list[int]) -> str | None:
    """The static field a chain of index positions starts from, when its first object is a
    statics array (``Class.field``), else None."""
    if len(chain) < 2:
        return None
    ix = heap.index()
    if heap.type_name_at(chain[0]) != "System.Object[]":
        return None
    return static_name_between(heap.runtime, int(ix.addresses[chain[0]]), int(ix.addresses[chain[1]]))


class PathFinder:
    """Shortest paths towards one target object, for any number of roots."""

    def __init__(self, heap: "ClrHeap", target_index: int, roots: "list[ClrRoot] | None" = None) -> None:
        """``roots``: the roots the chains will be asked for; where the graph's components
        are built, the search stops once it has reached every one of them that reaches the
        target (``kernels/components.py``) rather than visiting every ancestor."""
        self.heap = heap
        self.index = heap.index()
        self.graph = heap.graph()
        self.target = target_index
        self._roots = roots
        self.next_step: dict[int, int] = {target_index: -1}
        self.dependent_step: set[int] = set()
        self._arrays: _SearchArrays | None = None
        self._epoch = 0
        self._count = 0
        self._search()

    def _dependent_parents(self) -> dict[int, list[int]]:
        parents: dict[int, list[int]] = {}
        for p, s in self.heap.roots(include_stacks=False).dependent_pairs(self.index.find):
            parents.setdefault(s, []).append(p)
        return parents

    def _search(self) -> None:
        if self.graph.compiled:
            self._search_compiled()
            return
        ro, rs = self.graph.reverse()
        dep = self._dependent_parents()
        queue = deque([self.target])
        nxt = self.next_step
        while queue:
            node = queue.popleft()
            for parent in rs[ro[node]:ro[node + 1]].tolist():
                if parent not in nxt:
                    nxt[parent] = node
                    queue.append(parent)
            for parent in dep.get(node, ()):
                if parent not in nxt:
                    nxt[parent] = node
                    self.dependent_step.add(parent)
                    queue.append(parent)

    def _search_compiled(self) -> None:
        """The same search as a kernel over arrays kept with the graph and reused by every
        later search (an epoch stamp instead of clearing them)."""
        from ..kernels import refs
        ro, rs = self.graph.reverse()
        arrays = _SearchArrays.of(self.graph, len(self.index))
        arrays.epoch += 1
        pairs = sorted((s, p) for s, ps in self._dependent_parents().items() for p in ps)
        dep_sec = np.array([s for s, _p in pairs], dtype=np.int64)
        dep_pri = np.array([p for _s, p in pairs], dtype=np.int64)
        wanted = self._wanted([(p, s) for s, p in pairs])
        if wanted is not None:
            from ..kernels import components
            self._count = int(components.ancestors_until(ro, rs, dep_sec, dep_pri, self.target, arrays.next_step,
                                                         arrays.stamp, arrays.epoch, arrays.queue, arrays.via,
                                                         wanted))
        else:
            self._count = int(refs.ancestors(ro, rs, dep_sec, dep_pri, self.target, arrays.next_step,
                                             arrays.stamp, arrays.epoch, arrays.queue, arrays.via))
        self._arrays = arrays
        self._epoch = arrays.epoch

    def _wanted(self, dep_pairs: list[tuple[int, int]]) -> np.ndarray | None:
        """The roots' objects that reach the target (sorted), where the components are
        built (by the background build: never worth building for one search); else None."""
        comps = self.graph.condensed
        if self._roots is None or comps is None:
            return None
        starts = {s for s in (self._start(r) for r in self._roots) if s is not None}
        reaching = comps.reaching(self.target, dep_pairs)
        return np.array(sorted(s for s in starts if reaching[comps.comp[s]]), dtype=np.int64)

    def _start(self, root: ClrRoot) -> int | None:
        start = self.index.find(root.object)
        if start is None and root.kind is RootKind.STACK:
            start = self.index.containing(root.object)
        return start

    def reaches(self, obj_index: int) -> bool:
        if self._arrays is not None:
            return int(self._arrays.stamp[obj_index]) == self._epoch
        return obj_index in self.next_step

    def _step(self, node: int) -> tuple[int, bool]:
        """The next object from ``node`` towards the target, and whether by a dependent handle."""
        a = self._arrays
        if a is not None:
            return int(a.next_step[node]), bool(a.via[node])
        return self.next_step[node], node in self.dependent_step

    def path_from(self, root: ClrRoot) -> RootPath | None:
        start = self._start(root)
        found = self.chain_from(start) if start is not None else None
        return RootPath(root, *found) if found is not None else None

    def chain_from(self, start: int) -> tuple[tuple[int, ...], tuple[bool, ...]] | None:
        """A shortest chain of index positions from object ``start`` to the target, with
        whether each step after the first is a dependent handle's (None: no path)."""
        if not self.reaches(start):
            return None
        chain = [start]
        via: list[bool] = []
        node = start
        while node != self.target:
            node, dep = self._step(node)
            via.append(dep)
            chain.append(node)
        return tuple(chain), tuple(via)

    @property
    def ancestor_count(self) -> int:
        if self._arrays is not None:
            return self._count - 1
        return len(self.next_step) - 1


class _SearchArrays:
    """Per-graph scratch of the ancestor search, n-sized, allocated once.

    Address space only (``memory.reserve``): a search writes the entries of the objects it
    reaches, usually a small part of the heap, so only those pages ever become memory. Mapping
    all four up front cost 13 bytes/object of the cold gcroot's peak."""

    def __init__(self, n: int) -> None:
        from ..heap import memory
        self.stamp = memory.reserve(n, np.int32)  # zero-filled: fresh anonymous pages
        self.next_step = memory.reserve(n, np.int32)
        self.queue = memory.reserve(n, np.int32)
        self.via = memory.reserve(n, np.bool_)
        self.epoch = 0

    @classmethod
    def of(cls, graph, n: int) -> "_SearchArrays":
        arrays = getattr(graph, "search_arrays", None)
        if arrays is None:
            arrays = graph.search_arrays = cls(n)
        return arrays


def retained_set(heap: "ClrHeap", start_indices: np.ndarray, bfs_limit: int = 200_000) -> np.ndarray:
    """Object indices reachable from ``start_indices`` (included), through references and
    dependent handles (a ConditionalWeakTable's key keeps its value).

    Breadth-first order like SOS's objsize when the set is small; for a large set the
    membership comes from the vectorised mark and the order is by address, so that a
    retained set of millions of objects (or a million-long list) stays fast.
    """
    graph = heap.graph()
    # A dependent handle's secondary is kept alive by its primary: an edge from the primary,
    # followed first, as ClrMD's EnumerateReferences (and so SOS's objsize) follows it.
    dependents: dict[int, list[int]] = {}
    for p, s in heap.roots(include_stacks=False).dependent_pairs(heap.index().find):
        dependents.setdefault(p, []).append(s)
    mask = graph.mark(np.asarray(start_indices, dtype=np.int64))
    changed = bool(dependents)
    while changed:
        grow = [s for p, ss in dependents.items() if mask[p] for s in ss if not mask[s]]
        changed = bool(grow)
        if grow:
            graph.mark(np.array(grow, dtype=np.int64), visited=mask)
    members = np.nonzero(mask)[0]
    if len(members) > bfs_limit:
        return members
    offsets, targets = graph.offsets, graph.targets
    seen: set[int] = set()
    order: list[int] = []
    queue = deque()
    for i in np.asarray(start_indices, dtype=np.int64).tolist():
        if i not in seen:
            seen.add(i)
            queue.append(i)
    while queue:
        i = queue.popleft()
        order.append(i)
        for k in (*dependents.get(i, ()), *targets[offsets[i]:offsets[i + 1]].tolist()):
            if k not in seen:
                seen.add(k)
                queue.append(k)
    return np.array(order, dtype=np.int64)
