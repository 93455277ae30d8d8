"""The reference graph, built on the other core while the user reads a gcroot's answer.

A cold ``gcroot`` on a core searches forward from the roots (``rootsearch``) and builds no
graph: that is the fastest first answer. Every later gcroot of the stop would search again
(0.4 s at 20M objects) unless the graph exists, after which each takes milliseconds. So
after a search, when more commands may follow, a daemon thread builds the index, the graph
and its reverse (what ``PathFinder`` needs) while the user reads; by the next gcroot typed
at a human pace it is there.

What makes that safe:
* Only on cores, whose bytes come from sosext's own mapping of the file in every host
  (never from the debugger's API, which GDB allows on its main thread alone), and only in
  hosts that declare it (``target.background_safe``).
* Every DAC call holds ``dac.com.CALL_LOCK``; the kernels run without the GIL (see
  ``kernels.__main__``), so the host's Python stays responsive.
* The heap's builds hold ``ClrHeap.building()``: a foreground command that needs the index
  or the graph waits for this thread's build instead of doing it a second time.
* The thread never prints and never polls the host for Ctrl-C: ``progress.check_interrupt``
  asks it only whether it was cancelled; a failure just leaves the graph unbuilt, and the
  foreground builds it as before.
* It starts only when the graph fits easily in the memory the machine has free.

The thread starts when the command that asked for it has printed its answer (the hosts call
:func:`start_pending` after every command), so that it does not slow that answer down. A
gcroot that comes while it runs waits for it rather than searching again: the two would
only slow each other down (measured: docs/design.md).
"""
from __future__ import annotations

import atexit
import os
import threading
from typing import TYPE_CHECKING, Callable

from .. import progress as progress_mod
from ..progress import Progress

if TYPE_CHECKING:
    from ..heap.heap import ClrHeap

GRAPH_BYTES_PER_OBJECT = 80  # index columns + graph rows + reverse rows (64, measured at 20M: docs/design.md), components (16)
_allowed = True  # hosts say whether more commands may follow (the CLI's last -c: no)


def allow(more_commands: bool) -> None:
    """Whether a background build may start: not before the last command of a batch."""
    global _allowed
    _allowed = more_commands


def build_graph(heap: "ClrHeap") -> None:
    """The index, the graph, its reverse and its components: what every later gcroot (and
    -shortest) answers from in milliseconds."""
    with heap.building():
        graph = heap.graph(Progress.silent())
        graph.reverse()
        heap.lookup()
        graph.components()  # which roots reach an object, at once, on a leak's heap too


def graph_fits(objects: int, beside: int = 0) -> bool:
    """Whether the graph of ``objects`` objects may be built in the background now, beside
    what holds ``beside`` bytes per object (a root forest)."""
    return os.environ.get("SOSEXT_BACKGROUND", "1") != "0" and _fits(objects, GRAPH_BYTES_PER_OBJECT + beside)


class GraphBuild:
    """One background build of a heap's graph."""

    def __init__(self, heap: "ClrHeap", job: "Callable[[], None] | None" = None) -> None:
        """``job``: what to build instead of the graph (a root forest, ``forest.py``)."""
        self.heap = heap
        self.job = job or self._graph
        self.then_graph = job is None  # whether it builds the graph (a forest's job may build it after)
        self.cancelled = threading.Event()
        self.failed: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="sosext-graph", daemon=True)

    def _graph(self) -> None:
        build_graph(self.heap)

    def _run(self) -> None:
        progress_mod.run_in_background(self.cancelled)
        try:
            self.job()
        except BaseException as e:  # noqa: BLE001 - the foreground builds it as before
            self.failed = e

    def wait(self, until: "Callable[[], bool] | None" = None) -> bool:
        """Wait for the build, or only until ``until()`` holds (a forest's job goes on to the
        graph: a gcroot needs only the forest); Ctrl-C stops waiting. Whether it succeeded."""
        while self.thread.is_alive() and not (until is not None and until()):
            self.thread.join(0.01 if until is not None else 0.05)
            progress_mod.check_interrupt()
        return self.failed is None

    @property
    def running(self) -> bool:
        return self.thread.is_alive()

    def cancel(self, wait: float = 5.0) -> None:
        self.cancelled.set()
        self.thread.join(wait)


_builds: list[GraphBuild] = []
_pending: list[GraphBuild] = []


def after_root_search(heap: "ClrHeap", objects: int) -> GraphBuild | None:
    """Plan to build ``heap``'s graph in the background when that is safe and useful; it
    starts at :func:`start_pending`, once the command has printed its answer."""
    if not _allowed or os.environ.get("SOSEXT_BACKGROUND", "1") == "0":
        return None
    target = heap.runtime.target
    if target.is_live or not getattr(target, "background_safe", False):
        return None
    if heap.background is not None or not _fits(objects):
        return None
    if heap.has_graph and heap.graph().condensed is not None:
        return None  # nothing left to build (a graph built in the foreground still lacks its components)
    heap.index_store()  # a note about the index cache is printed now, in the command's output
    build = GraphBuild(heap)
    heap.background = build
    _pending.append(build)
    return build


def forest_may_follow(heap: "ClrHeap", objects: int, bytes_per_object: int) -> bool:
    """Whether :func:`after_walk` would plan a root forest now (a first gcroot then records
    the forest's prefix as it searches)."""
    if not _allowed or os.environ.get("SOSEXT_BACKGROUND", "1") == "0":
        return False
    target = heap.runtime.target
    if target.is_live or not getattr(target, "background_safe", False):
        return False
    return heap.forest_build is None and _fits(objects, bytes_per_object)


def after_walk(heap: "ClrHeap", objects: int, job: "Callable[[], None]", bytes_per_object: int) -> GraphBuild | None:
    """Plan ``job`` (a root forest: later gcroots in SOS's order) in the background, when
    that is safe; it starts at :func:`start_pending`."""
    if not forest_may_follow(heap, objects, bytes_per_object):
        return None
    build = GraphBuild(heap, job)
    heap.forest_build = build
    _pending.append(build)
    return build


def start_pending() -> None:
    """Start the builds the last command planned (hosts call this after every command)."""
    while _pending:
        build = _pending.pop()
        _builds.append(build)
        build.thread.start()


def _fits(objects: int, bytes_per_object: int = GRAPH_BYTES_PER_OBJECT) -> bool:
    """The build needs well under half of the memory the machine has available."""
    try:
        with open("/proc/meminfo") as f:
            avail = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return False
    return objects * bytes_per_object < avail // 2


@atexit.register
def _stop_all() -> None:
    """Cancel running builds before the interpreter tears down what they read."""
    for b in _builds:
        if b.running:
            b.cancel()
