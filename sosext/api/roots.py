"""Why an object is alive: its GC roots and the chains of references from each of them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from ..clr.roots.gcroot import chain_static, root_method_name
from ..clr.roots.roots import HANDLE_KIND_TEXT, HANDLE_TYPES, RootKind
from . import _model

if TYPE_CHECKING:
    from ..clr.roots.roots import ClrRoot
    from .heap import Heap, HeapObject



@dataclass(frozen=True, slots=True)
class Root:
    """A GC root: a strong handle, a reference on a thread's stack, or the finalizer queue.

    ``kind`` is "handle", "stack" or "finalizer"; ``name`` says which one in words ("strong
    handle", "pinned handle", "finalizer queue", or for a stack root the method whose frame
    holds the reference). ``address`` is the handle, the stack slot (0 for a register) or the
    queue slot; ``object`` the address it refers to.
    """

    kind: str
    name: str
    address: int
    object: int
    handle_type: str | None = None  # handles: the runtime's name of the handle type
    thread_os_id: int | None = None  # stack roots: the OS thread
    register: str | None = None  # stack roots held in a register
    interior: bool = False  # stack roots: points inside the object
    pinned: bool = False


@dataclass(frozen=True, slots=True)
class RootPath:
    """One root and the chain of objects from it to the object asked about.

    ``objects[0]`` is the object the root refers to, ``objects[-1]`` the target.
    ``via_dependent[i]`` is True when ``objects[i + 1]`` is kept by a dependent handle whose
    primary is ``objects[i]`` rather than by a field. ``static_field`` names the static
    variable the chain starts from when the root is a class's statics array
    (``"MyApp.Program.s_cache"``), else None.
    """

    root: Root
    objects: tuple["HeapObject", ...]
    via_dependent: tuple[bool, ...]
    static_field: str | None


def describe_root(heap: "Heap", r: "ClrRoot") -> Root:
    if r.kind is RootKind.HANDLE:
        h = r.handle
        word = HANDLE_KIND_TEXT.get(h.handle_type, "handle") if h is not None else "handle"
        kind_name = HANDLE_TYPES.get(h.handle_type) if h is not None else None
        return Root("handle", word, r.address, r.object, handle_type=kind_name)
    if r.kind is RootKind.FINALIZER:
        return Root("finalizer", "finalizer queue", r.address, r.object)
    method = root_method_name(heap._model.runtime, r) or "<unknown method>"
    return Root("stack", method, r.address, r.object, thread_os_id=r.thread_os_id,
                register=r.register or None, interior=r.interior, pinned=r.pinned)


def paths_to(heap: "Heap", position: int, *, stacks: bool, limit: int | None,
             shortest: bool = False) -> Iterator[RootPath]:
    model = heap._model
    roots = model.roots(include_stacks=stacks).roots
    order = {RootKind.HANDLE: 0, RootKind.FINALIZER: 1, RootKind.STACK: 2}
    ordered = [r for r in sorted(roots, key=lambda r: order[r.kind])  # stable: the runtime's order within a kind
               if stacks or r.kind is not RootKind.STACK]
    if not shortest or limit is not None:  # gcroot's chains, each as soon as it is found
        from ..clr.roots.gcroot import iter_root_chains
        address = int(model.index().addresses[position])
        for c in iter_root_chains(model, address, ordered, limit, shortest=shortest):
            chain = [_model.find(model, a) for a in c.addresses]
            yield RootPath(describe_root(heap, c.root), tuple(heap._at(i) for i in chain), tuple(c.via_dependent),
                           chain_static(model, chain))
        return
    finder = _model.path_finder(model, position)
    found = 0
    for r in ordered:
        p = finder.path_from(r)
        if p is None:
            continue
        objects = tuple(heap._at(i) for i in p.chain)
        static = chain_static(model, p.chain)
        yield RootPath(describe_root(heap, r), objects, tuple(p.via_dependent), static)
        found += 1
        if limit is not None and found >= limit:
            return
