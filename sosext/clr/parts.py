"""What the pieces of the model may use of the two façades above them.

``ClrRuntime`` (runtime.py) and ``ClrHeap`` (heap.py) are façades: they build and cache the
pieces (the heap walk, the index, the reference graph, roots, the module, field and method
catalogs) and hand themselves to them. A piece must not import its façade, not even for a
type hint, or the model becomes one circle where every module depends on every other. So
a piece names what it needs with these protocols, and the façades satisfy them.

Services *above* the façades (addresses, gcroot, retention, statics, stacks, threads …) may
import ``ClrRuntime`` and ``ClrHeap`` directly; the façades never import a service except
through a lazy call in a method whose job is to offer it (``ClrRuntime.is_method_table``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol, TypeVar

if TYPE_CHECKING:
    from ..dac.loader import DacLocation
    from ..readers.protocol import RuntimeReader
    from ..dac.structs import UsefulGlobals
    from ..targets.base import Target
    from .heap.gcdesc import GCDesc
    from .heap.segments import ClrSegment, ClrSubHeap
    from .typesystem.types import TypeCache

T = TypeVar("T")


class RuntimeParts(Protocol):
    """The runtime as its pieces see it: the target, the runtime reader, caches and settings."""

    target: "Target"
    reader: "RuntimeReader"
    location: "DacLocation"
    workers: int  # processes a heap walk may use
    index_dir: str | None  # where a core's heap index is cached on disk
    metadata_cache: dict[tuple[int, int], object]

    def refresh(self) -> None: ...

    def cache(self, key: str, factory: Callable[[], T]) -> T: ...

    def is_method_table(self, mt: int) -> bool: ...

    @property
    def globals(self) -> "UsefulGlobals": ...  # well-known MethodTables, no GC heap needed

    @property
    def types(self) -> "TypeCache": ...  # MethodTable -> type, no GC heap needed

    @property
    def has_gc_heap(self) -> bool: ...  # False for a triage dump


class HeapParts(Protocol):
    """The heap as its pieces see it: segments, types, scratch memory, per-type GCDescs."""

    runtime: RuntimeParts
    reader: "RuntimeReader"
    types: "TypeCache"
    segments: "list[ClrSegment]"
    subheaps: "list[ClrSubHeap]"
    string_mt: int
    free_mt: int
    store: Any  # indexcache.IndexStore of a core whose index is cached on disk, or None
    gcdesc: Callable[[int], "GCDesc | None"]

    def scratch(self, size: int) -> memoryview: ...

    def pieces(self, seg: "ClrSegment") -> list[tuple[int, int]]: ...

    def segment_of(self, address: int) -> "ClrSegment | None": ...

    def lookup(self) -> Any: ...  # refscan.ObjectLookup
