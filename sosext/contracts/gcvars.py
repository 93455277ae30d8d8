"""The GC's description of its heap for debuggers: ``GcDacVars``, reached through ``g_dacTable``.

The .NET 9/10 contract descriptor says nothing about the GC heap (the GC describes itself only
from .NET 11, in a sub-descriptor). What the DAC reads instead, we read:

* ``g_dacTable`` (exported by libcoreclr) is the runtime's table of DAC globals, one
  pointer-size target address per variable, in the order of dotnet/runtime
  ``src/coreclr/inc/dacvars.h``. That order has ``#ifdef`` holes that differ by build, so no
  index is hard-coded: entries are found next to *anchors*, variables the contract descriptor
  also names (its ``ThreadStore``, ``FinalizerThread``, ``ProfilerControlBlock`` and
  ``ThinlockThreadIdDispenser`` globals are the addresses of the same variables), and each
  use is checked against a second anchor at its expected distance::

      ThreadStore::s_pThreadStore      <- anchor (descriptor "ThreadStore")
      g_pFinalizerThread               <- checked (descriptor "FinalizerThread")
      g_pSuspensionThread
      g_heap_type                      1 workstation, 2 server
      g_gcDacGlobals                   -> GcDacVars
      ...
      g_card_table, g_lowest_address, g_highest_address
      g_global_alloc_context           an ee_alloc_context (.NET 10) / gc_alloc_context
      g_pGCHeap, g_pThinLockThreadIdDispenser
      g_pObjectClass                   <- anchor (descriptor "ObjectMethodTable")
      g_pRuntimeTypeClass, g_pCanonMethodTableClass
      g_pStringClass                   <- checked (descriptor "StringMethodTable")

* ``GcDacVars`` (``src/coreclr/gc/gcinterface.dac.h``, ``gcinterface.dacvars.def``) is filled
  by the GC in use (libcoreclr's own, or the standalone libclrgc.so): ``u8 major, u8 minor``,
  ``size_t generation_size, total_generation_count``, then one pointer per variable of the
  .def file, in its order. A workstation GC's per-heap state is in those variables; a server
  GC's is in each ``gc_heap`` object (``g_heaps[n_heaps]``), at the offsets the GC publishes
  in ``gc_heap_field_offsets`` (``dac_gcheap_fields.h`` order; -1 for a field the build
  lacks), with the same for ``generation`` (``dac_generation_fields.h``).

Major version 2 is the layout read here (.NET 8, 9 and 10 ship 2.x); another major is refused
in one line, as the DAC itself would. Every pointer is checked before it is followed.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from ..errors import ContractError, SosError
from ..targets.base import Module, Target
from ..targets.elfsymbols import image_extent
from .descriptor import ContractDescriptor, ImageBackedMemory, export_address

DAC_TABLE_SYMBOL = "g_dacTable"
SUPPORTED_MAJOR = 2
_TABLE_ENTRIES = 256  # dacvars.h has ~130 variables; the anchors sit in its first hundred

# GcDacVars' variables after its four leading values, in gcinterface.dacvars.def order.
GC_VARS = (
    "build_variant", "built_with_svr", "gc_global_mechanisms", "generation_table", "max_gen",
    "mark_array", "current_c_gc_state", "ephemeral_heap_segment", "saved_sweep_ephemeral_seg",
    "saved_sweep_ephemeral_start", "background_saved_lowest_address", "background_saved_highest_address",
    "alloc_allocated", "next_sweep_obj", "oom_info", "finalize_queue", "internal_root_array",
    "internal_root_array_index", "heap_analyze_success", "n_heaps", "g_heaps", "gc_structures_invalid_cnt",
    "interesting_data_per_heap", "compact_reasons_per_heap", "expand_mechanisms_per_heap",
    "interesting_mechanism_bits_per_heap", "handle_table_map", "gc_heap_field_offsets",
    "generation_field_offsets", "bookkeeping_start", "global_regions_to_decommit",
    "global_free_huge_regions", "free_regions",
    # minor 2 and later
    "freeable_soh_segment", "freeable_uoh_segment", "#bookkeeping_counts", "#card_table_info_size",
    # minor 4 and later
    "dynamic_adaptation_mode",
)
_VARS_BY_MINOR = ((4, len(GC_VARS)), (2, len(GC_VARS) - 1), (0, GC_VARS.index("free_regions") + 1))

# dac_gcheap_fields.h order: the index of each field in gc_heap_field_offsets.
GC_HEAP_FIELDS = (
    "alloc_allocated", "ephemeral_heap_segment", "finalize_queue", "oom_info", "interesting_data_per_heap",
    "compact_reasons_per_heap", "expand_mechanisms_per_heap", "interesting_mechanism_bits_per_heap",
    "internal_root_array", "internal_root_array_index", "heap_analyze_success", "card_table",
    "mark_array", "next_sweep_obj", "background_saved_lowest_address", "background_saved_highest_address",
    "saved_sweep_ephemeral_seg", "saved_sweep_ephemeral_start", "generation_table",
)
GENERATION_FIELDS = ("allocation_context", "start_segment", "allocation_start")

# build_variant bits (gcinterface.dac.h)
BUILD_REGIONS, BUILD_BACKGROUND_GC, BUILD_DYNAMIC_HEAP_COUNT = 1, 2, 4
GC_HEAP_WKS, GC_HEAP_SVR = 1, 2
MAX_HEAPS = 4096

# dac_heap_segment (gcinterface.dac.h), in pointer-size slots
SEGMENT_FIELDS = ("allocated", "committed", "reserved", "used", "mem", "flags", "next",
                  "background_allocated", "heap")


@dataclass(frozen=True, slots=True)
class RuntimeGcGlobals:
    """The runtime's own GC-related variables, found in g_dacTable (0: not found)."""

    gc_dac_vars: int  # the GcDacVars record
    heap_type: int  # GC_HEAP_WKS / GC_HEAP_SVR
    card_table: int
    lowest_address: int
    highest_address: int
    global_alloc_context: int  # address of g_global_alloc_context (0: not found)


class GcHeapView:
    """One GC heap's fields: the workstation GC's globals, or one server ``gc_heap``."""

    def __init__(self, vars_: "GcDacVars", heap: int) -> None:
        self.vars = vars_
        self.heap = heap  # 0 for the workstation heap

    def field_address(self, name: str) -> int | None:
        """Where field ``name`` of this heap is; None when the GC build lacks it."""
        v = self.vars
        if self.heap == 0:
            if name == "card_table":
                return None  # the workstation GC uses the runtime's g_card_table
            return v.var(name) or None
        offset = v.heap_offsets[GC_HEAP_FIELDS.index(name)]
        return None if offset < 0 else self.heap + offset

    def pointer(self, name: str, missing: int = 0) -> int:
        at = self.field_address(name)
        return missing if at is None else self.vars.read_pointer(at, name)

    def generation_address(self, index: int) -> int:
        v = self.vars
        base = self.field_address("generation_table")
        if base is None:
            raise ContractError("the GC publishes no generation table")
        return base + index * v.generation_size


class GcDacVars:
    """The ``GcDacVars`` record of the GC in a target."""

    def __init__(self, target: Target, address: int) -> None:
        self.target = target
        self.address = address
        ps = target.pointer_size
        head = _read(target, address, 8 + 2 * ps, "the GC's DAC variables (GcDacVars)")
        self.major, self.minor = head[0], head[1]
        if self.major != SUPPORTED_MAJOR:
            raise ContractError(f"the GC's DAC interface is version {self.major}.{self.minor}; "
                                f"the contracts reader reads {SUPPORTED_MAJOR}.x")
        fmt = "<Q" if ps == 8 else "<I"
        self.generation_size = struct.unpack_from(fmt, head, ps)[0]
        self.total_generation_count = struct.unpack_from(fmt, head, 2 * ps)[0]
        if not 8 <= self.generation_size <= 4096 or not 3 <= self.total_generation_count <= 8:
            raise ContractError(f"the GC's DAC variables at {address:#x} are damaged "
                                f"(generation size {self.generation_size}, {self.total_generation_count} generations)")
        count = next(n for minimum, n in _VARS_BY_MINOR if self.minor >= minimum)
        raw = _read(target, address + 3 * ps, count * ps, "the GC's DAC variables (GcDacVars)")
        values = struct.unpack(f"<{count}{fmt[1]}", raw)
        self._vars = dict(zip(GC_VARS[:count], values))
        self.build_variant = self.read_u8(self.var("build_variant")) if self.var("build_variant") else 0
        # Regions are a build_variant bit from minor 2 on (.NET 10); before (.NET 9, minor 1) the
        # reader decides from the generation table (None here), as the heap model does.
        self.uses_regions: bool | None = bool(self.build_variant & BUILD_REGIONS) if self.minor >= 2 else None
        self.background_gc = bool(self.build_variant & BUILD_BACKGROUND_GC)
        self.dynamic_heap_count = bool(self.build_variant & BUILD_DYNAMIC_HEAP_COUNT)
        self._heap_offsets: tuple[int, ...] | None = None
        self._heaps: list[int] | None = None
        self._generation_offsets: tuple[int, ...] | None = None

    # -- reading ----------------------------------------------------------------------------

    def var(self, name: str) -> int:
        """The target address of GC variable ``name`` (0: absent in this GC build or version)."""
        return self._vars.get(name, 0)

    def read_pointer(self, address: int, what: str) -> int:
        return int.from_bytes(_read(self.target, address, self.target.pointer_size, f"the GC's {what}"), "little")

    def read_u32(self, address: int, what: str) -> int:
        return int.from_bytes(_read(self.target, address, 4, f"the GC's {what}"), "little")

    def read_i32(self, address: int, what: str) -> int:
        return int.from_bytes(_read(self.target, address, 4, f"the GC's {what}"), "little", signed=True)

    def read_u8(self, address: int) -> int:
        return _read(self.target, address, 1, "the GC's build variant")[0]

    def value(self, name: str, missing: int = 0) -> int:
        """The pointer-size value of variable ``name`` (``missing`` when the GC lacks it)."""
        at = self.var(name)
        return self.read_pointer(at, name) if at else missing

    def int_value(self, name: str, missing: int = 0) -> int:
        at = self.var(name)
        return self.read_i32(at, name) if at else missing

    def _offsets(self, name: str, count: int) -> tuple[int, ...]:
        at = self.var(name)
        if not at:
            raise ContractError(f"the GC publishes no {name}")
        raw = _read(self.target, at, 4 * count, f"the GC's {name}")
        return struct.unpack(f"<{count}i", raw)

    @property
    def heap_offsets(self) -> tuple[int, ...]:
        if self._heap_offsets is None:
            self._heap_offsets = self._offsets("gc_heap_field_offsets", len(GC_HEAP_FIELDS))
        return self._heap_offsets

    @property
    def generation_offsets(self) -> tuple[int, ...]:
        if self._generation_offsets is None:
            self._generation_offsets = self._offsets("generation_field_offsets", len(GENERATION_FIELDS))
        return self._generation_offsets

    # -- heaps ------------------------------------------------------------------------------

    def server_heaps(self) -> list[int]:
        """The server GC's ``gc_heap`` objects, in heap-number order (read once)."""
        if self._heaps is None:
            self._heaps = self._read_server_heaps()
        return self._heaps

    def _read_server_heaps(self) -> list[int]:
        count = self.int_value("n_heaps")
        if not 0 < count <= MAX_HEAPS:
            raise ContractError(f"the GC reports {count} server heaps")
        table = self.value("g_heaps")
        ps = self.target.pointer_size
        raw = _read(self.target, table, count * ps, "the GC's heap table")
        return list(struct.unpack(f"<{count}{'Q' if ps == 8 else 'I'}", raw))

    def heap_view(self, heap: int) -> GcHeapView:
        return GcHeapView(self, heap)

    def generation(self, view: GcHeapView, index: int) -> tuple[int, int, int, int]:
        """(start_segment, allocation_start, alloc_ptr, alloc_limit) of generation ``index``:
        allocation_start is 0 where the GC has none (regions)."""
        gen = view.generation_address(index)
        ctx_off, seg_off, start_off = self.generation_offsets
        ps = self.target.pointer_size
        seg = self.read_pointer(gen + seg_off, "generation table") if seg_off >= 0 else 0
        start = self.read_pointer(gen + start_off, "generation table") if start_off >= 0 else 0
        ptr = limit = 0
        if ctx_off >= 0:
            ptr = self.read_pointer(gen + ctx_off, "generation table")
            limit = self.read_pointer(gen + ctx_off + ps, "generation table")
        return seg, start, ptr, limit

    def segment(self, address: int) -> dict[str, int]:
        """The ``dac_heap_segment`` at ``address`` (its fields by name)."""
        ps = self.target.pointer_size
        raw = _read(self.target, address, len(SEGMENT_FIELDS) * ps, "heap segment")
        return dict(zip(SEGMENT_FIELDS, struct.unpack(f"<{len(SEGMENT_FIELDS)}{'Q' if ps == 8 else 'I'}", raw)))


# --- finding GcDacVars ------------------------------------------------------------------------

def runtime_gc_globals(target: Target, runtime: Module, descriptor: ContractDescriptor) -> RuntimeGcGlobals:
    """The GC-related runtime variables, from ``g_dacTable`` anchored by the descriptor."""
    table = export_address(target, runtime, DAC_TABLE_SYMBOL)
    target = ImageBackedMemory(target, runtime)  # type: ignore[assignment]
    if table is None:
        raise ContractError("the runtime exports no g_dacTable: the contracts reader cannot find the GC heap")
    # The variables live in the image's .data and .bss; .bss is past the file mappings.
    end = runtime.base + max(runtime.size, image_extent(runtime.path) or 0)
    entries = _table_entries(target, runtime.base, end, table)
    in_module = [runtime.base <= e < end for e in entries]

    def anchor(name: str) -> int | None:
        if not descriptor.has_global(name):
            return None
        value = descriptor.global_value(name)
        hits = [i for i, e in enumerate(entries) if e == value and in_module[i]]
        return hits[0] if len(hits) == 1 else None

    def checked(i: int | None, name: str) -> bool:
        return (i is not None and i < len(entries) and descriptor.has_global(name)
                and entries[i] == descriptor.global_value(name))

    ts = anchor("ThreadStore")
    if ts is None or not checked(ts + 1, "FinalizerThread") or ts + 4 >= len(entries) \
            or not (in_module[ts + 3] and in_module[ts + 4]):
        raise ContractError("cannot find the GC in the runtime's DAC table (g_dacTable does not hold the "
                            "variables its contract descriptor names)")
    heap_type = _read_u32(target, entries[ts + 3], "g_heap_type")
    gc_vars = int.from_bytes(_read(target, entries[ts + 4], target.pointer_size, "g_gcDacGlobals"), "little")
    if heap_type not in (GC_HEAP_WKS, GC_HEAP_SVR):
        raise ContractError("the GC heap is not initialised yet (g_heap_type is invalid)")
    if not gc_vars:
        raise ContractError("the GC heap is not initialised yet (g_gcDacGlobals is null)")

    card = lowest = highest = alloc = 0
    obj = anchor("ObjectMethodTable")
    if obj is not None and obj >= 6 and checked(obj + 3, "StringMethodTable") and all(in_module[obj - 6:obj - 2]):
        ps = target.pointer_size
        card, lowest, highest = (int.from_bytes(_read(target, entries[obj - k], ps, "GC bounds"), "little")
                                 for k in (6, 5, 4))
        alloc = entries[obj - 3]
    return RuntimeGcGlobals(gc_vars, heap_type, card, lowest, highest, alloc)


def _table_entries(target: Target, base: int, end: int, table: int) -> tuple[int, ...]:
    """The table's entries as target addresses. .NET 9 and 10 store absolute addresses; an
    older layout stored 32-bit offsets from the module base, recognised by their size."""
    ps = target.pointer_size
    raw = _read(target, table, _TABLE_ENTRIES * ps, "the runtime's DAC table (g_dacTable)")
    wide = struct.unpack(f"<{_TABLE_ENTRIES}{'Q' if ps == 8 else 'I'}", raw)
    if sum(base <= e < end for e in wide[:32]) >= 16:
        return wide
    narrow = struct.unpack(f"<{_TABLE_ENTRIES}I", raw[:4 * _TABLE_ENTRIES])
    return tuple(base + e for e in narrow)


def _read(target: Target, address: int, size: int, what: str) -> bytes:
    if address <= 0 or address + size > (1 << (8 * target.pointer_size)):
        raise ContractError(f"{what} is at a bad address ({address:#x})")
    try:
        return bytes(target.read(address, size))
    except SosError as e:
        missing = ContractError(f"cannot read {what} ({size} bytes at {address:#x}): the dump lacks it")
        missing.missing_memory = True  # type: ignore[attr-defined]  # a triage dump: no GC heap (heap.py)
        raise missing from e


def _read_u32(target: Target, address: int, what: str) -> int:
    return int.from_bytes(_read(target, address, 4, what), "little")
