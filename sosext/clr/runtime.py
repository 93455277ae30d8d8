"""ClrRuntime: the .NET runtime inside one target, the root of the object model.

A runtime is created once per target and survives the process running: when the target's
generation changes (a live process ran), the DAC's caches are flushed and the heap model
is rebuilt on next use.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..dac.loader import DacLocation, file_version, locate_dac
from ..dac.sos import SosDac, open_dac
from ..targets.base import Target

if TYPE_CHECKING:
    from ..dac.structs import UsefulGlobals
    from .heap import ClrHeap
    from .types import TypeCache
    from .fields import FieldCatalog
    from .methods import MethodCatalog
    from .modules import ClrAppDomain, ClrModule, ModuleCatalog


@dataclass(frozen=True, slots=True)
class RuntimeInfo:
    version: str  # file version of the runtime, e.g. "10.0.1226.42308"
    runtime_path: str
    dac_path: str
    runtime_base: int


class ClrRuntime:
    def __init__(self, target: Target, location: DacLocation | None = None) -> None:
        self.target = target
        self.location = location or locate_dac(target)
        self.dac: SosDac = open_dac(target, self.location)
        self._generation = target.generation
        self._heap: "ClrHeap | None" = None
        self._caches: dict[str, object] = {}
        # Processes a heap walk may use; only the standalone analyzer raises it (for cores).
        self.workers = 1
        # Where a core's heap index is cached on disk (None: not cached); see indexcache.py.
        self.index_dir: str | None = None
        # Module metadata never changes once loaded: kept across target generations.
        self.metadata_cache: dict[tuple[int, int], object] = {}

    @property
    def info(self) -> RuntimeInfo:
        loc = self.location
        version = file_version(loc.runtime.path) or loc.version
        return RuntimeInfo(version, loc.runtime.path, loc.dac_path, loc.runtime.base)

    def rebind(self, target: Target) -> None:
        """Read through ``target`` from now on: a new host wrapper of the same process."""
        if target is not self.target:
            self.target = target
            self.dac.data_target.target = target

    def refresh(self) -> None:
        """Forget everything derived from target memory if the process has run since."""
        gen = self.target.generation
        if gen != self._generation:
            self._generation = gen
            self.dac.flush()
            self._heap = None
            self._caches.clear()

    @property
    def heap(self) -> "ClrHeap":
        self.refresh()
        if self._heap is None:
            from .heap import ClrHeap
            self._heap = ClrHeap(self)
        return self._heap

    @property
    def globals(self) -> "UsefulGlobals":
        """The runtime's well-known MethodTables (String, Object, Exception, Free ...)."""
        return self.cache("globals", self.dac.useful_globals)

    @property
    def types(self) -> "TypeCache":
        """MethodTable -> type, without the GC heap (triage dumps have types but no heap)."""
        from .types import TypeCache
        g = self.globals
        return self.cache("types", lambda: TypeCache(self.dac, g.string_method_table, g.free_method_table))

    @property
    def has_gc_heap(self) -> bool:
        """False for a dump that holds no GC heap (a triage dump)."""
        from ..errors import NoGcHeap

        def probe() -> bool:
            try:
                self.heap
            except NoGcHeap:
                return False
            return True
        return self.cache("has_gc_heap", probe)

    def cache(self, key: str, factory):  # type: ignore[no-untyped-def]
        """A per-target-generation cache for models built on top of the heap."""
        self.refresh()
        if key not in self._caches:
            self._caches[key] = factory()
        return self._caches[key]

    @property
    def catalog(self) -> "ModuleCatalog":
        """Domains, assemblies, modules and their metadata (rebuilt when the process has run)."""
        from .modules import ModuleCatalog
        return self.cache("modules", lambda: ModuleCatalog(self))

    def app_domains(self) -> "list[ClrAppDomain]":
        return self.catalog.app_domains()

    def modules(self) -> "list[ClrModule]":
        """Every loaded module once, in domain and assembly order."""
        return self.catalog.modules()

    @property
    def fields(self) -> "FieldCatalog":
        """Fields per MethodTable and statics bases (rebuilt when the process has run)."""
        from .fields import FieldCatalog
        return self.cache("fields", lambda: FieldCatalog(self))

    @property
    def methods(self) -> "MethodCatalog":
        """MethodDescs, slots, JIT state and code versions (rebuilt when the process has run)."""
        from .methods import MethodCatalog
        return self.cache("methods", lambda: MethodCatalog(self))
