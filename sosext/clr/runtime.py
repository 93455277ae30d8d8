"""ClrRuntime: the .NET runtime inside one target, the root of the object model.

A runtime is created once per target and survives the process running: when the target's
generation changes (a live process ran), the DAC's caches are flushed and the heap model
is rebuilt on next use.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..dac import loader
from ..dac.loader import DacLocation, file_version, locate_dac
from ..dac.structs import (MethodDescData, MethodTableCollectibleData, MethodTableData, MethodTableFieldData,
                           ObjectData, ThreadData)
from ..targets.base import Target
from .readerchoice import open_reader, reader_choice, set_reader

if TYPE_CHECKING:
    from ..readers.protocol import RuntimeReader
    from ..dac.structs import GetModuleData, UsefulGlobals
    from .heap.heap import ClrHeap
    from .typesystem.types import TypeCache
    from .typesystem.fields import FieldCatalog
    from .code.methods import MethodCatalog
    from .typesystem.modules import ClrAppDomain, ClrModule, ModuleCatalog


__all__ = ["ClrRuntime", "RuntimeInfo", "ObjectData", "MethodDescData", "MethodTableData",
           "MethodTableFieldData", "MethodTableCollectibleData", "ThreadData", "set_clr_path", "clr_path",
           "locate_runtime", "set_reader", "reader_choice"]


def set_clr_path(directory: str | None) -> None:
    """``setclrpath``: load the DAC from ``directory`` instead of beside libcoreclr.so (None: beside)."""
    loader.set_clr_path(directory)


def clr_path() -> str | None:
    """The directory ``setclrpath`` (or ``--clr-path``, ``SOSEXT_CLR_PATH``) chose, if any."""
    return loader.clr_path_override()


def locate_runtime(target: Target) -> DacLocation:
    """Where the target's runtime and its DAC are (raises NotDotNetError/DacError)."""
    return locate_dac(target)


@dataclass(frozen=True, slots=True)
class RuntimeInfo:
    version: str  # file version of the runtime, e.g. "10.0.1226.42308"
    runtime_path: str
    dac_path: str  # "" when the contracts reader answers
    runtime_base: int


class ClrRuntime:
    def __init__(self, target: Target, location: DacLocation | None = None, reader: str | None = None) -> None:
        """``reader``: "dac" or "contracts" (None: the user's setreader/SOSEXT_READER choice, else
        automatic, see readerchoice.py); ``location``: a DAC already located for ``target``."""
        self.target = target
        chosen = open_reader(target, reader, location)
        self.location = chosen.location
        self.reader: "RuntimeReader" = chosen.reader
        self.reader_reason = chosen.reason  # one line: which reader answers and why
        self.reader_fallback = chosen.fallback  # the DAC was wanted but could not run
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
    def reader_name(self) -> str:
        """"dac" or "contracts": which reader answers for this runtime."""
        return self.reader.name

    @property
    def info(self) -> RuntimeInfo:
        loc = self.location
        version = file_version(loc.runtime.path) or loc.version or "unknown"
        return RuntimeInfo(version, loc.runtime.path, loc.dac_path, loc.runtime.base)

    def version_marker(self) -> str | None:
        """The runtime build's ``@(#)Version x @Commit: y`` text (from its file), or None."""
        from ..dac.loader import runtime_marker
        marker = runtime_marker(self.location.runtime.path) or (
            runtime_marker(self.location.dac_path) if self.location.dac_path else None)
        return marker.removeprefix("@(#)Version ") if marker else None

    def flush(self) -> None:
        """Forget everything read from the target (sosflush): it is read again when asked."""
        if self._heap is not None:
            for build in (self._heap.background, self._heap.forest_build):
                if build is not None:
                    build.cancel()  # it would build from what is being forgotten
        self.reader.flush()
        self._heap = None
        self._caches.clear()

    def rebind(self, target: Target) -> None:
        """Read through ``target`` from now on: a new host wrapper of the same process."""
        if target is not self.target:
            self.target = target
            self.reader.rebind(target)

    def refresh(self) -> None:
        """Forget everything derived from target memory if the process has run since."""
        gen = self.target.generation
        if gen != self._generation:
            self._generation = gen
            self.reader.flush()
            self._heap = None
            self._caches.clear()

    @property
    def heap(self) -> "ClrHeap":
        self.refresh()
        if self._heap is None:
            from .heap.heap import ClrHeap
            self._heap = ClrHeap(self)
        return self._heap

    def built_heap(self) -> "ClrHeap | None":
        """The heap model if a command has built it (never builds it)."""
        return self._heap

    @property
    def globals(self) -> "UsefulGlobals":
        """The runtime's well-known MethodTables (String, Object, Exception, Free ...)."""
        return self.cache("globals", self.reader.useful_globals)

    @property
    def types(self) -> "TypeCache":
        """MethodTable -> type, without the GC heap (triage dumps have types but no heap)."""
        from .typesystem.types import TypeCache
        g = self.globals
        return self.cache("types", lambda: TypeCache(self.reader, g.string_method_table, g.free_method_table))

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
        from .typesystem.modules import ModuleCatalog
        return self.cache("modules", lambda: ModuleCatalog(self))

    def app_domains(self) -> "list[ClrAppDomain]":
        return self.catalog.app_domains()

    def modules(self) -> "list[ClrModule]":
        """Every loaded module once, in domain and assembly order."""
        return self.catalog.modules()

    @property
    def fields(self) -> "FieldCatalog":
        """Fields per MethodTable and statics bases (rebuilt when the process has run)."""
        from .typesystem.fields import FieldCatalog
        return self.cache("fields", lambda: FieldCatalog(self))

    @property
    def methods(self) -> "MethodCatalog":
        """MethodDescs, slots, JIT state and code versions (rebuilt when the process has run)."""
        from .code.methods import MethodCatalog
        return self.cache("methods", lambda: MethodCatalog(self))

    # -- what commands ask of the runtime, in its own words ---------------------------------
    # Each is one DAC request; commands call these and never the DAC itself.

    def module_layout(self, module: int) -> str:
        """How the runtime laid the module's image out, in ClrMD's words (SOS's clrmodules -v
        Layout): "Flat" (the file as it is on disk), "Mapped" (section by section) or "Unknown"."""
        data = self.module_load_info(module)
        if data is None:
            return "Unknown"
        return "Flat" if data.is_file_layout else "Mapped"

    def module_load_info(self, module: int) -> "GetModuleData | None":
        """How the module was loaded (dynamic, in memory, file layout, where): the module's own
        IXCLRDataModule request, as SOS's dumpmodule asks it; None when the DAC does not say."""
        return self.reader.module_load_data(module)

    def module_image_size(self, module: int, image_base: int) -> int:
        """The size of the module's loaded image as SOS's clrmodules prints it (ClrMD's
        ClrModule.Size): the runtime's own figure (the file's size for a flat layout, the
        mapped size otherwise), else the PE headers' SizeOfImage; 0 when neither is known."""
        from ..formats.metadata.pe import image_size
        data = self.reader.module_load_data(module)
        if data is not None and data.loaded_pe_size:
            return int(data.loaded_pe_size)
        return (image_size(self.target.read_partial, image_base) or 0) if image_base else 0

    def object_data(self, address: int) -> ObjectData | None:
        """The runtime's view of the object at ``address`` (classify the address first)."""
        return self.reader.object_data(address)

    def object_type_name(self, address: int) -> str | None:
        """The object's class name as the runtime prints it (never ask for a Free object)."""
        return self.reader.object_class_name(address)

    def method_table_data(self, mt: int) -> MethodTableData | None:
        return self.reader.method_table_data(mt)

    def field_counts(self, mt: int) -> MethodTableFieldData | None:
        """Instance and static field counts of a MethodTable (None: the runtime did not answer)."""
        return self.reader.method_table_field_data(mt)

    def canonical_method_table(self, eeclass: int) -> int | None:
        """The MethodTable the runtime reports for an EEClass (.NET 9+: the canonical MT itself)."""
        return self.reader.method_table_for_eeclass(eeclass)

    def collectible_data(self, mt: int) -> MethodTableCollectibleData | None:
        return self.reader.method_table_collectible_data(mt)

    def assembly_load_context(self, mt: int) -> int | None:
        return self.reader.assembly_load_context(mt)

    def method_desc_data(self, md: int) -> MethodDescData | None:
        return self.reader.method_desc_data(md)

    def method_desc_name(self, md: int) -> str | None:
        return self.reader.method_desc_name(md)

    def method_code_start_at(self, md: int, ip: int) -> int | None:
        """The start of the native code version of ``md`` that holds ``ip`` (ip2md's "Current
        CodeAddr"); None when the reader cannot tell versions apart by address."""
        at = getattr(self.reader, "method_desc_data_at", None)
        data = at(md, ip) if at is not None else None
        return data.native_code_addr if data is not None else None

    def method_code_start(self, md: int, ip: int) -> int | None:
        """Where the native code a frame of ``md`` at ``ip`` is measured from."""
        return self.reader.frame_code_start(md, ip)

    def method_module(self, md: int) -> int | None:
        """The runtime Module of a MethodDesc."""
        found = self.reader.method_module_token(md)
        return found[0] if found else None

    def method_desc_at(self, ip: int) -> int | None:
        """The MethodDesc of the managed code at instruction pointer ``ip``."""
        return self.reader.method_desc_from_ip(ip) if ip else None

    def method_name_at(self, ip: int) -> str | None:
        """The name of the managed method whose code holds ``ip`` (None: not managed code)."""
        md = self.method_desc_at(ip)
        return self.reader.method_desc_name(md) if md else None

    def contracts_beside(self):  # -> ContractReader | None
        """The runtime's own description (its contract descriptor, .NET 9 and later), read
        beside the DAC for what the DAC does not expose: the reader itself when it is the
        contracts reader, else one built once per target generation; None without a descriptor.
        It loads no native code."""
        from ..contracts.reader import ContractReader
        if isinstance(self.reader, ContractReader):
            return self.reader

        def make():  # type: ignore[no-untyped-def]
            from ..errors import SosError
            try:
                return ContractReader(self.target, self.location.runtime)
            except (SosError, AttributeError, ValueError):
                return None
        return self.cache("contracts-beside", make)

    def stack_references(self, os_tid: int) -> list:
        """The GC references on thread ``os_tid``'s stack, from the reader. Under the DAC, a
        thread inside the runtime's managed exception dispatcher (a throw being dispatched, a
        filter it calls) is answered by the contracts reader beside it, with one line on stderr
        once a thread: the .NET 10 DAC's enumeration faults on such a thread (a SIGSEGV that
        would end the debugger's session; SOS's too). .NET 9's DAC answers such a thread, and
        its contracts reader walks no stacks: the check says no there."""
        reader = self.reader
        if reader.name == "dac" and self._in_exception_dispatch(os_tid):
            beside = self.contracts_beside()
            if beside is not None:
                told = self.cache("dispatch-threads-told", set)
                if os_tid not in told:
                    told.add(os_tid)
                    sys.stderr.write(f"sosext: thread {os_tid:#x} is dispatching an exception, where the DAC faults "
                                     "reading its stack's references; the contracts reader answers for it\n")
                return beside.stack_references(os_tid)
        return reader.stack_references(os_tid)

    def _in_exception_dispatch(self, os_tid: int) -> bool:
        """Whether the contracts reader beside the DAC sees thread ``os_tid`` in the runtime's
        exception dispatcher; False where it cannot walk stacks (.NET 9)."""
        from ..errors import SosError
        beside = self.contracts_beside()
        if beside is None:
            return False
        try:
            return beside.in_exception_dispatch(os_tid)
        except SosError:
            return False

    def frame_method_name(self, frame: int) -> str | None:
        """The method an explicit Frame (a runtime transition frame) stands for, if any."""
        md = self.reader.method_desc_from_frame(frame)
        return self.reader.method_desc_name(md) if md else None

    def frame_name(self, frame: int) -> str:
        """The kind of an explicit Frame ("InlinedCallFrame" …), from its first word."""
        # The first word is a vtable (a frame identifier since .NET 10); the DAC only compares
        # it with the values it knows and never follows it, so any value is safe to hand over.
        from ..errors import SosError
        try:
            vtable = self.target.read_pointer(frame)
        except SosError:
            return "Frame"
        return self.reader.frame_name(vtable) or "Frame"

    def nested_exception(self, exception: int) -> tuple[int, int] | None:
        return self.reader.nested_exception(exception)

    def gc_dynamic_adaptation_mode(self) -> int | None:
        """DATAS (dynamic adaptation to application sizes): the mode, None when not reported."""
        return self.reader.gc_dynamic_adaptation_mode()

    def thread_records(self) -> "list[tuple[int, ThreadData]]":
        """(Thread address, the runtime's record) of every managed thread, in the runtime's order."""
        return list(self.reader.threads())

    def thread_with_lock_id(self, thin_id: int) -> tuple[int, int] | None:
        """(Thread address, OS thread id) of the managed thread a thin lock names."""
        for addr, t in self.reader.threads():
            if t.cor_thread_id == thin_id:
                return addr, t.os_thread_id
        return None

    def stack_range(self, os_tid: int, sp: int) -> tuple[int, int] | None:
        """The (low, high) stack range of managed thread ``os_tid`` that holds ``sp``, if known."""
        for addr, t in self.reader.threads():
            if t.os_thread_id == os_tid:
                lim = self.reader.stack_limits(addr)
                if lim:
                    low, high = sorted(lim[:2])  # the DAC answers (base, limit): high end first on x64
                    if low <= sp < high:
                        return low, high
        return None

    def stress_log_address(self) -> int | None:
        """Where ``StressLog::theLog`` is (None: the runtime does not say)."""
        return self.reader.stress_log_address()

    def is_method_table(self, mt: int) -> bool:
        """Whether ``mt`` is a MethodTable, checked before the DAC is asked anything about it."""
        from .addresses import classifier
        return classifier(self).is_method_table(mt)
