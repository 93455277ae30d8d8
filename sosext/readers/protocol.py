"""The RuntimeReader protocol: what the model asks of the runtime inside a target.

Two readers implement it (docs/readers.md):

* ``dac/sos.py SosDac``: the runtime's own DAC (libmscordaccore.so), native code for one
  runtime build and the host's architecture, driven through ctypes;
* ``contracts/reader.py ContractReader``: pure Python over the runtime's contract descriptor
  and the GC's DAC variables; any architecture, no native code.

The model (sosext/clr) holds one as ``ClrRuntime.reader`` and never knows which. Every method
returns the records of readers/records.py, the same values from either reader on the runtimes
both read. A method a reader cannot answer raises ``ReaderUnsupported`` (one line naming the
reader that can); a runtime that answered with a failure raises another ``SosError``.
Addresses are target addresses (ints); ``None`` means "the runtime does not say".
"""
from __future__ import annotations

from typing import Iterator, Protocol, runtime_checkable

from ..targets.base import Target
from . import records as rec
from .stacks import ClrStack


@runtime_checkable
class RuntimeReader(Protocol):
    """What sosext needs of a runtime reader. Implementations never write target memory."""

    name: str  # "dac" or "contracts": which reader answers (sosstatus, eeversion)

    def flush(self) -> None:
        """Forget everything cached from target memory (a live process has run)."""
        ...

    def rebind(self, target: Target) -> None:
        """Read through ``target`` from now on (a new host wrapper of the same process)."""
        ...

    # -- the GC heap: discovery of heaps, generations and segments ----------------------------

    def gc_heap_data(self) -> rec.GcHeapData:
        """Server or workstation, heap count, max generation, whether the heap is walkable."""
        ...

    def gc_heap_list(self, count: int) -> list[int]:
        """Server GC: the ``gc_heap`` addresses, in heap-number order."""
        ...

    def gc_heap_details(self, heap: int) -> rec.GcHeapDetails:
        """Server GC: one heap's allocation end, ephemeral segment, first four generations,
        finalization fill pointers and the GC's bounds."""
        ...

    def gc_heap_static_data(self) -> rec.GcHeapDetails:
        """Workstation GC: as ``gc_heap_details`` for its one heap."""
        ...

    def heap_segment_data(self, segment: int) -> rec.HeapSegmentData:
        """A segment (or region): its object range, commit and reserve ends, flags, next."""
        ...

    def number_generations(self) -> int | None:
        """Generations including LOH and POH (5 since .NET 5)."""
        ...

    def generation_table(self, heap: int | None = None) -> list[rec.GenerationData] | None:
        """Every generation of a heap (``heap`` None: the workstation heap)."""
        ...

    def finalization_fill_pointers(self, heap: int | None = None) -> list[int] | None:
        """The finalization queue's segment boundaries (generations + 2 pointers)."""
        ...

    def global_allocation_context(self) -> tuple[int, int] | None:
        """(pointer, limit) of the runtime's global allocation context."""
        ...

    def gc_dynamic_adaptation_mode(self) -> int | None:
        """DATAS mode (-1: the GC has none)."""
        ...

    def oom_data(self, heap: int | None = None) -> rec.OomData | None:
        """The GC's record of its last out-of-memory failure."""
        ...

    def useful_globals(self) -> rec.UsefulGlobals:
        """The well-known MethodTables: Object[], String, Object, Exception, Free."""
        ...

    # -- threads and roots ------------------------------------------------------------------

    def thread_store_data(self) -> rec.ThreadStoreData:
        ...

    def thread_data(self, thread: int) -> rec.ThreadData:
        ...

    def threads(self) -> Iterator[tuple[int, rec.ThreadData]]:
        """Every runtime Thread with its data, in the runtime's list order."""
        ...

    def stack_frames(self, os_tid: int, *, arguments: bool = False, local_variables: bool = False,
                     registers: bool = False, max_frames: int = 0) -> ClrStack:
        """OS thread ``os_tid``'s stops, innermost first: managed frames (with their arguments'
        and locals' locations and values when asked, where the reader knows them) and the
        runtime's Frames; each stop's registers when asked; at most ``max_frames`` (0: all).
        Raises NotManagedThread when no runtime Thread runs there."""
        ...

    def frame_code_start(self, md: int, ip: int) -> int | None:
        """Where a frame of MethodDesc ``md`` at ``ip`` is measured from (its code's start)."""
        ...

    def code_gc_info(self, ip: int) -> int | None:
        """Where the GC info of the managed code holding ``ip`` is (its code header's); None
        where ``ip`` is no managed code."""
        ...

    def method_module_token(self, md: int) -> tuple[int, int] | None:
        """A MethodDesc's Module and metadata token."""
        ...

    def il_offsets(self, ip: int) -> list[int] | None:
        """The IL offsets the JIT mapped code address ``ip`` to; None where nothing says."""
        ...

    def module_load_data(self, module: int) -> "rec.GetModuleData | None":
        """How the runtime loaded a module: flat or mapped, dynamic, in memory, its extent."""
        ...

    def module_file_name(self, module: int) -> str | None:
        """The file name of a module whose PEAssembly names none (loaded from bytes)."""
        ...

    def stack_limits(self, thread: int) -> tuple[int, int] | None:
        """(base, limit) of a runtime Thread's stack: base is the higher address."""
        ...

    def handles(self) -> list[rec.HandleData]:
        """Every handle of the GC's handle tables, in the DAC's enumeration order."""
        ...

    # -- types and objects (the type-system half; the DAC reader answers all of these) --------

    def method_table_data(self, mt: int) -> rec.MethodTableData | None:
        ...

    def method_table_name(self, mt: int) -> str | None:
        ...

    def method_table_field_data(self, mt: int) -> rec.MethodTableFieldData | None:
        ...

    def field_desc_data(self, fd: int) -> rec.FieldDescData | None:
        ...

    def object_data(self, address: int) -> rec.ObjectData | None:
        ...

    def object_class_name(self, address: int) -> str | None:
        ...

    def object_string(self, address: int) -> str | None:
        ...

    # Further methods the model calls where a command needs them (modules and assemblies,
    # MethodDescs and code, stacks, sync blocks, statics, the thread pool, loader heaps) are
    # those of dac/sos.py SosDac; a reader without one raises ReaderUnsupported.
