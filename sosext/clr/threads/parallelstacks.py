"""Parallel stacks: the managed stacks of every thread merged into one call tree.

Threads that entered the same outermost method share a root; below it they share a node for
as long as their frames agree, and branch where they differ (dotnet-dump's parallelstacks).
Each node counts the threads that passed through it; a node where threads stop (their
innermost frame) lists them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ... import interrupts
from ...errors import SosError
from .stacks import walk_stack
from .threads import clr_threads

if TYPE_CHECKING:
    from ..runtime import ClrRuntime


@dataclass(slots=True)
class CallNode:
    method: str  # "" for the tree's invisible root
    owner: str = ""  # the method's declaring type as the DAC names it ("" when unknown)
    threads: list[int] = field(default_factory=list)  # OS ids of the threads through this node
    stopped: list[int] = field(default_factory=list)  # OS ids of the threads whose innermost frame this is
    children: list["CallNode"] = field(default_factory=list)

    def child(self, method: str, owner: str = "") -> "CallNode":
        for c in self.children:
            if c.method == method:
                return c
        c = CallNode(method, owner)
        self.children.append(c)
        return c


@dataclass(frozen=True, slots=True)
class ParallelStacks:
    root: CallNode  # its children are the outermost frames
    thread_count: int  # threads with at least one managed frame
    skipped: tuple[int, ...]  # OS ids of threads without managed frames


def parallel_stacks(runtime: "ClrRuntime") -> ParallelStacks:
    root = CallNode("")
    skipped = []
    count = 0
    for t in clr_threads(runtime):
        if not t.os_id:
            continue
        if interrupts.requested():
            break
        try:
            stack = walk_stack(runtime, t.os_id)
        except SosError:
            skipped.append(t.os_id)
            continue
        methods = [(f.method_name or "<unknown>", _owner(runtime, f.method_desc)) for f in stack.frames if f.is_managed]
        if not methods:
            skipped.append(t.os_id)
            continue
        count += 1
        node = root
        root.threads.append(t.os_id)
        for m, owner in reversed(methods):  # outermost first
            node = node.child(m, owner)
            node.threads.append(t.os_id)
        node.stopped.append(t.os_id)
    # Roots stay in the order of their first thread, as dotnet-dump lists them.
    for c in root.children:
        _sort(c)
    return ParallelStacks(root, count, tuple(skipped))


def _owner(runtime: "ClrRuntime", method_desc: int) -> str:
    """The declaring type's name: where a method's name has dots of its own (an explicit
    interface implementation) the frame's text alone does not say where the type ends."""
    method = runtime.methods.get(method_desc) if method_desc else None
    return (runtime.types.name_of(method.method_table) or "") if method is not None else ""


def _sort(node: CallNode) -> None:
    # Busiest branches first; ties in first-seen order (stable), so output is deterministic.
    node.children.sort(key=lambda c: -len(c.threads))
    for c in node.children:
        _sort(c)
