"""GC roots: handles, thread stacks and the finalizer queue.

What keeps an object alive, the way the GC sees it:
* strong handles (strong, pinned, async pinned, sized ref, and ref-counted ones with a
  non-zero count); weak handles are not roots, and a dependent handle keeps its secondary
  alive only while its primary is alive;
* references on managed threads' stacks and in their registers, as the DAC's precise
  stack walk reports them (it needs each thread's register context from the host);
* objects on the finalizer queue's ready-for-finalization part ("f-reachable").
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable

from ...dac.sos import HANDLE_TYPES  # the runtime's names of handle types (HNDTYPE_*), re-exported
from ...errors import ContractError, DacError, SosError

if TYPE_CHECKING:
    from ..parts import HeapParts

# gcroot's wording of handle kinds (SOS's current C# gcroot).
HANDLE_KIND_TEXT = {
    0: "weak short handle", 1: "weak long handle", 2: "strong handle", 3: "pinned handle",
    4: "variable handle", 5: "ref counted handle", 6: "dependent handle", 7: "async pinned handle",
    8: "sized ref handle", 9: "weak WinRT handle", 10: "weak interior pointer handle",
}
# gchandles' column words.
HANDLE_TYPE_WORD = {
    0: "WeakShort", 1: "WeakLong", 2: "Strong", 3: "Pinned", 4: "Variable", 5: "RefCounted",
    6: "Dependent", 7: "AsyncPinned", 8: "SizedRef", 9: "WeakWinRT", 10: "WeakInteriorPointer",
}
STRONG_HANDLE_TYPES = {2, 3, 7, 8}  # strong, pinned, async pinned, sizedref
REFCOUNTED = 5
DEPENDENT = 6
WEAK_HANDLE_TYPES = {0, 1, 9, 10}


class RootKind(enum.Enum):
    HANDLE = "handle"
    STACK = "stack"
    FINALIZER = "finalizer"


@dataclass(frozen=True, slots=True)
class ClrHandle:
    address: int  # the handle (a slot in the handle table)
    object: int  # what it refers to
    handle_type: int
    secondary: int = 0  # dependent handles: the object kept alive by ``object``
    ref_count: int = 0

    @property
    def kind_name(self) -> str:
        return HANDLE_TYPES.get(self.handle_type, f"type {self.handle_type}")

    @property
    def is_strong(self) -> bool:
        if self.handle_type == REFCOUNTED:
            return self.ref_count > 0
        return self.handle_type in STRONG_HANDLE_TYPES


@dataclass(frozen=True, slots=True)
class ClrRoot:
    kind: RootKind
    address: int  # handle address, stack slot address (0 for a register), or queue slot
    object: int
    handle: ClrHandle | None = None
    thread_os_id: int = 0  # stack roots
    thread_address: int = 0
    frame_sp: int = 0
    source: int = 0  # stack roots: the IP of the managed frame, or a clr!Frame address
    source_is_frame: bool = False
    register: str = ""  # stack roots held in a register: its name
    offset: int = 0  # stack roots relative to a register: the offset
    interior: bool = False
    pinned: bool = False


def read_handles(heap: "HeapParts") -> list[ClrHandle]:
    target = heap.runtime.target
    out = []
    for h in heap.reader.handles():
        try:
            obj = target.read_pointer(h.handle)
        except SosError:
            continue
        out.append(ClrHandle(h.handle, obj, h.type, h.secondary, h.ref_count))
    return out


def handle_roots(handles: Iterable[ClrHandle]) -> list[ClrRoot]:
    return [ClrRoot(RootKind.HANDLE, h.address, h.object, handle=h)
            for h in handles if h.object and h.is_strong]


def finalizer_queue_ranges(heap: "HeapParts") -> list[tuple[int, int, int]]:
    """Per subheap (index, start, end) of the queue part holding objects ready to finalize.

    The fill pointers partition the finalization array: one part per generation (oldest
    first), then the critical and normal ready-for-finalization lists, which are the last
    two parts: [fill[n-3], fill[n-1]).
    """
    out = []
    for sh in heap.subheaps:
        fill = sh.fill_pointers
        if len(fill) >= 3 and fill[-3] <= fill[-1]:
            out.append((sh.index, fill[-3], fill[-1]))
    return out


def finalizable_ranges(heap: "HeapParts") -> list[tuple[int, int, int]]:
    """Per subheap (index, start, end) of the queue part holding objects registered for
    finalization that are still reachable (not yet ready)."""
    out = []
    for sh in heap.subheaps:
        fill = sh.fill_pointers
        if len(fill) >= 3 and fill[0] <= fill[-3]:
            out.append((sh.index, fill[0], fill[-3]))
    return out


def read_pointer_array(heap: "HeapParts", start: int, end: int) -> list[tuple[int, int]]:
    """(slot, value) for the pointers in [start, end)."""
    if end <= start or end - start > 1 << 30:
        return []
    data = heap.runtime.target.read_partial(start, end - start)
    mv = memoryview(bytes(data))
    n = len(mv) // 8
    vals = mv[: n * 8].cast("Q")
    return [(start + 8 * i, vals[i]) for i in range(n)]


def finalizer_roots(heap: "HeapParts") -> list[ClrRoot]:
    out = []
    for _heap, start, end in finalizer_queue_ranges(heap):
        for slot, obj in read_pointer_array(heap, start, end):
            if obj:
                out.append(ClrRoot(RootKind.FINALIZER, slot, obj))
    return out


def stack_roots(heap: "HeapParts", errors: list[str] | None = None) -> list[ClrRoot]:
    """Precise stack roots of every managed thread that is running on an OS thread.

    The runtime reports every live GC slot; an interior one (a byref) may point anywhere, into
    the stack too. As ClrMD (and so SOS) does, an interior pointer outside the GC heap stands for
    the object whose reference it points to, when that is on the heap, and roots nothing
    otherwise (it is left out)."""
    dac = heap.reader
    out = []
    known_tids = {t.tid for t in heap.runtime.target.threads()}
    reg_names: dict[int, str] = {}
    for taddr, t in dac.threads():
        if not t.os_thread_id or t.os_thread_id not in known_tids:
            continue
        try:
            refs = heap.runtime.stack_references(t.os_thread_id)
        except (DacError, ContractError) as e:  # either reader: one thread's walk failed
            if errors is not None:
                errors.append(f"thread {t.os_thread_id:#x}: {e}")
            continue
        for r in refs:
            if not r.object:
                continue
            obj = r.object
            if r.flags & 1 and heap.segment_of(obj) is None:
                obj = _pointed_heap_object(heap, obj)
                if not obj:
                    continue
            reg = ""
            if r.has_register_information:
                if r.register not in reg_names:
                    reg_names[r.register] = dac.register_name(r.register) or f"r{r.register}"
                reg = reg_names[r.register]
            out.append(ClrRoot(RootKind.STACK, r.address, obj, thread_os_id=t.os_thread_id,
                               thread_address=taddr, frame_sp=r.stack_pointer, source=r.source,
                               source_is_frame=r.source_type == 1, register=reg, offset=r.offset,
                               interior=bool(r.flags & 1), pinned=bool(r.flags & 2)))
    return out


def _pointed_heap_object(heap: "HeapParts", address: int) -> int:
    """The pointer stored at ``address`` when it points into the GC heap, else 0."""
    try:
        value = heap.runtime.target.read_pointer(address)
    except SosError:
        return 0
    return value if value and heap.segment_of(value) is not None else 0


@dataclass
class RootSet:
    handles: list[ClrHandle]
    roots: list[ClrRoot]  # every root, all kinds
    stack_errors: list[str]

    @property
    def dependent_handles(self) -> list[ClrHandle]:
        return [h for h in self.handles if h.handle_type == DEPENDENT and h.object and h.secondary]

    def dependent_pairs(self, find: "Callable[[int], int | None]") -> list[tuple[int, int]]:
        """(primary, secondary) heap index positions of every dependent handle whose two
        objects are both on the heap; ``find`` maps an address to its position
        (``HeapIndex.find``). Marking, gcroot and retention all add these edges."""
        out = []
        for h in self.dependent_handles:
            p, s = find(h.object), find(h.secondary)
            if p is not None and s is not None:
                out.append((p, s))
        return out


def gather_roots(heap: "HeapParts", include_stacks: bool = True) -> RootSet:
    handles = read_handles(heap)
    roots = handle_roots(handles)
    errors: list[str] = []
    if include_stacks:
        roots.extend(stack_roots(heap, errors))
    roots.extend(finalizer_roots(heap))
    return RootSet(handles, roots, errors)
