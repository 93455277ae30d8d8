"""The records a runtime reader answers with, each defined once (dacprivate.h, sospriv.idl).

Both readers return these: the DAC reader fills them from the DAC's structures, the contracts
reader from target memory it reads itself. A class body lists the fields in header order with
their C layout (``ADDR``, ``U32`` ... or ``(element, count)`` for an array); ``@record(size)``
turns it into an immutable named tuple of plain Python ints and remembers the layout, from
which ``dac/structs.py`` builds the matching ctypes structure (checked against the header's
size). Field names are snake_case versions of the header's names. No ctypes here: the
contracts reader loads no native code.
"""
import collections
from typing import Any, Callable, TypeVar

# C layouts: struct-module codes of the DAC's x64 ABI (CLRDATA_ADDRESS is 64-bit everywhere).
ADDR = "Q"  # CLRDATA_ADDRESS
U64 = "Q"
SIZE_T = "Q"
U32 = "I"
I32 = "i"
U16 = "H"
BOOL = "i"

# CLRDATA_IL_OFFSET_MARKER: what an IL-offset answer holds for code with no IL offset, in a
# method's prolog or in an epilog (both readers answer these).
IL_OFFSET_NO_MAPPING = 0xFFFFFFFF
IL_OFFSET_PROLOG = 0xFFFFFFFE
IL_OFFSET_EPILOG = 0xFFFFFFFD

T = TypeVar("T")
Layout = list[tuple[str, Any]]  # (field, code | record class | (element, count))
LAYOUTS: dict[type, tuple[int, Layout]] = {}  # record class -> (header size, layout)


def record(size: int) -> Callable[[type[T]], type[T]]:
    def wrap(cls: type[T]) -> type[T]:
        # Annotations are evaluated (no ``from __future__ import annotations`` here): codes,
        # record classes and (element, count) tuples, as written.
        layout = list(cls.__dict__.get("__annotations__", {}).items())
        # A named tuple: immutable, compact and made in microseconds (a frozen slotted
        # dataclass costs half a millisecond each, 20 ms of every start for these 35).
        rec = collections.namedtuple(cls.__name__, [n for n, _ in layout])  # type: ignore[misc]
        rec.__doc__ = cls.__doc__
        rec.__module__ = cls.__module__
        LAYOUTS[rec] = (size, layout)
        return rec  # type: ignore[return-value]
    return wrap


@record(0x10)
class GcHeapData:
    server_mode: BOOL
    gc_structures_valid: BOOL
    heap_count: U32
    max_generation: U32


@record(0x20)
class GenerationData:
    start_segment: ADDR
    allocation_start: ADDR
    alloc_context_ptr: ADDR  # generation 0 only
    alloc_context_limit: ADDR


@record(0x120)
class GcHeapDetails:
    heap_addr: ADDR  # server GC only
    alloc_allocated: ADDR
    mark_array: ADDR
    current_c_gc_state: ADDR
    next_sweep_obj: ADDR
    saved_sweep_ephemeral_seg: ADDR
    saved_sweep_ephemeral_start: ADDR
    background_saved_lowest_address: ADDR
    background_saved_highest_address: ADDR
    generation_table: (GenerationData, 4)
    ephemeral_heap_segment: ADDR
    finalization_fill_pointers: (ADDR, 7)
    lowest_address: ADDR
    highest_address: ADDR
    card_table: ADDR


@record(0x58)
class HeapSegmentData:
    segment_addr: ADDR
    allocated: ADDR
    committed: ADDR
    reserved: ADDR
    used: ADDR
    mem: ADDR
    next: ADDR
    gc_heap: ADDR
    high_alloc_mark: ADDR
    flags: U64  # size_t; bit 1 (heap_segment_flags_readonly) marks frozen segments
    background_allocated: ADDR


@record(0x28)
class UsefulGlobals:
    array_method_table: ADDR
    string_method_table: ADDR
    object_method_table: ADDR
    exception_method_table: ADDR
    free_method_table: ADDR


@record(0x48)
class MethodTableData:
    is_free: BOOL
    module: ADDR
    klass: ADDR  # "Class": the canonical MethodTable on .NET 9+, the EEClass before
    parent_method_table: ADDR
    num_interfaces: U16
    num_methods: U16
    num_vtable_slots: U16
    num_virtuals: U16
    base_size: U32
    component_size: U32
    token: U32  # "cl"
    attr_class: U32
    is_shared: BOOL
    is_dynamic: BOOL
    contains_pointers: BOOL


@record(0x18)
class MethodTableFieldData:
    num_instance_fields: U16
    num_static_fields: U16
    num_thread_static_fields: U16
    first_field: ADDR
    context_static_offset: U16
    context_statics_size: U16


@record(0x40)
class FieldDescData:
    type: U32  # CorElementType
    sig_type: U32
    mt_of_type: ADDR
    module_of_type: ADDR
    token_of_type: U32
    token: U32  # "mb": the field's mdFieldDef
    mt_of_enclosing_class: ADDR
    offset: U32
    is_thread_local: BOOL
    is_context_local: BOOL
    is_static: BOOL
    next_field: ADDR


@record(0x60)
class ObjectData:
    method_table: ADDR
    object_type: U32  # 0 string, 1 free, 2 object, 3 array, 4 other
    size: U64
    element_type_handle: ADDR
    element_type: U32
    rank: U32
    num_components: U64
    component_size: U64
    array_data_ptr: ADDR
    array_bounds_ptr: ADDR
    array_lower_bounds_ptr: ADDR
    rcw: ADDR
    ccw: ADDR


@record(0x38)
class ThreadStoreData:
    thread_count: I32
    unstarted_thread_count: I32
    background_thread_count: I32
    pending_thread_count: I32
    dead_thread_count: I32
    first_thread: ADDR
    finalizer_thread: ADDR
    gc_thread: ADDR
    host_config: U32


@record(0x68)
class ThreadData:
    cor_thread_id: U32
    os_thread_id: U32
    state: I32
    preemptive_gc_disabled: U32
    alloc_context_ptr: ADDR
    alloc_context_limit: ADDR
    context: ADDR
    domain: ADDR
    frame: ADDR
    lock_count: U32
    first_nested_exception: ADDR
    teb: ADDR
    fiber_data: ADDR
    last_thrown_object_handle: ADDR
    next_thread: ADDR


@record(0x18)
class AppDomainStoreData:
    shared_domain: ADDR
    system_domain: ADDR
    domain_count: I32


@record(0x48)
class AppDomainData:
    app_domain_ptr: ADDR
    app_sec_desc: ADDR
    low_frequency_heap: ADDR
    high_frequency_heap: ADDR
    stub_heap: ADDR
    domain_local_block: ADDR
    domain_local_modules: ADDR
    id: U32
    assembly_count: I32
    failed_assembly_count: I32
    stage: U32


@record(0x40)
class AssemblyData:
    assembly_ptr: ADDR
    class_loader: ADDR
    parent_domain: ADDR
    domain_ptr: ADDR
    assembly_sec_desc: ADDR
    is_dynamic: BOOL
    module_count: U32
    load_context: U32
    is_domain_neutral: BOOL
    location_flags: U32


@record(0xA0)
class ModuleData:
    address: ADDR
    pe_assembly: ADDR
    il_base: ADDR
    metadata_start: ADDR
    metadata_size: U64
    assembly: ADDR
    is_reflection: BOOL
    is_pe_file: BOOL
    base_class_index: U64
    module_id: U64
    transient_flags: U32
    type_def_to_method_table_map: ADDR
    type_ref_to_method_table_map: ADDR
    method_def_to_desc_map: ADDR
    field_def_to_desc_map: ADDR
    member_ref_to_desc_map: ADDR
    file_references_map: ADDR
    manifest_module_references_map: ADDR
    loader_allocator: ADDR
    thunk_heap: ADDR
    module_index: U64


@record(0x38)
class GetModuleData:
    """DacpGetModuleData: IXCLRDataModule's private request for how the image is loaded."""
    is_dynamic: BOOL
    is_in_memory: BOOL
    is_file_layout: BOOL
    pe_assembly: ADDR
    loaded_pe_address: ADDR
    loaded_pe_size: U64
    in_memory_pdb_address: ADDR
    in_memory_pdb_size: U64


@record(0x18)
class ReJitData:
    rejit_id: ADDR
    flags: U32
    native_code_addr: ADDR


@record(0x98)
class MethodDescData:
    has_native_code: BOOL
    is_dynamic: BOOL
    slot_number: U16
    native_code_addr: ADDR
    address_of_native_code_slot: ADDR
    method_desc_ptr: ADDR
    method_table_ptr: ADDR
    module_ptr: ADDR
    token: U32
    gc_info: ADDR
    gc_stress_code_copy: ADDR
    managed_dynamic_method_object: ADDR
    requested_ip: ADDR
    rejit_data_current: ReJitData
    rejit_data_requested: ReJitData
    jitted_rejit_versions: U32


@record(0x38)
class CodeHeaderData:
    gc_info: ADDR
    jit_type: U32  # 1 JIT, 2 pre-JIT (ReadyToRun), 3 interpreter
    method_desc_ptr: ADDR
    method_start: ADDR
    method_size: U32
    cold_region_start: ADDR
    cold_region_size: U32
    hot_region_size: U32


@record(0x58)
class EHInfo:
    """DACEHInfo: one exception clause of jitted code, offsets from the code's start."""
    clause_type: U32  # EHClauseType: 0 fault, 1 finally, 2 filter, 3 typed, 4 unknown
    try_start_offset: ADDR
    try_end_offset: ADDR
    handler_start_offset: ADDR
    handler_end_offset: ADDR
    is_duplicate_clause: BOOL
    filter_offset: ADDR
    is_catch_all_handler: BOOL
    module_addr: ADDR  # nonzero: tok_catch is a type token of this module; 0: mt_catch is a MethodTable
    mt_catch: ADDR
    tok_catch: U32


@record(0x38)
class ExceptionObjectData:
    message: ADDR
    inner_exception: ADDR
    stack_trace: ADDR
    watson_buckets: ADDR
    stack_trace_string: ADDR
    remote_stack_trace_string: ADDR
    hresult: I32
    xcode: I32


@record(0x58)
class ThreadpoolData:
    cpu_utilization: I32
    num_idle_worker_threads: I32
    num_working_worker_threads: I32
    num_retired_worker_threads: I32
    min_limit_total_worker_threads: I32
    max_limit_total_worker_threads: I32
    first_unmanaged_work_request: ADDR
    hill_climbing_log: ADDR
    hill_climbing_log_first_index: I32
    hill_climbing_log_size: I32
    num_timers: U32
    num_cp_threads: I32
    num_free_cp_threads: I32
    max_free_cp_threads: I32
    num_retired_cp_threads: I32
    max_limit_total_cp_threads: I32
    current_limit_total_cp_threads: I32
    min_limit_total_cp_threads: I32
    async_timer_callback_completion_fptr: ADDR


@record(0x48)
class SyncBlockData:
    object: ADDR
    free: BOOL
    sync_block_pointer: ADDR
    com_flags: U32
    monitor_held: U32
    recursion: U32
    holding_thread: ADDR
    additional_thread_count: U32
    app_domain_ptr: ADDR
    sync_block_count: U32


@record(0x30)
class HandleData:
    app_domain: ADDR
    handle: ADDR
    secondary: ADDR
    type: U32
    strong_reference: BOOL
    ref_count: U32
    jupiter_ref_count: U32
    is_pegged: BOOL


@record(0x38)
class StackRefData:
    has_register_information: BOOL
    register: I32
    offset: I32
    address: ADDR
    object: ADDR
    flags: U32  # 1 interior, 2 pinned
    source_type: U32  # 0 IP (managed frame), 1 clr!Frame
    source: ADDR
    stack_pointer: ADDR


@record(0x30)
class DomainLocalModuleData:
    """Where a module's statics live on runtimes before .NET 9 (DomainLocalModule)."""

    app_domain_addr: ADDR
    module_id: U64
    class_data: ADDR  # one flags byte per TypeDef rid: 1 initialized, 2 init failed, 4 allocated
    dynamic_class_table: ADDR
    gc_static_data_start: ADDR
    non_gc_static_data_start: ADDR


@record(0x28)
class MethodSlotData:
    """SOSMethodData: one MethodTable slot from ISOSDacInterface15's enumerator."""

    method_desc: ADDR
    entry_point: ADDR
    defining_method_table: ADDR
    defining_module: ADDR
    token: U32
    slot: U32  # 0xFFFFFFFF for methods added by Edit and Continue


@record(0x18)
class TieredVersionData:
    native_code_addr: ADDR
    optimization_tier: I32  # DacpTieredVersionData::OptimizationTier
    native_code_version_node_ptr: ADDR


@record(0x18)
class ReJitData2:
    rejit_id: U32
    flags: U32  # 0 unknown, 1 requested, 2 active, 3 reverted
    il: ADDR
    il_code_version_node_ptr: ADDR


@record(0x10)
class MethodTableCollectibleData:
    loader_allocator_object_handle: ADDR
    is_collectible: BOOL


@record(0x38)
class OomData:
    """DacpOomData: the GC's record of its last out-of-memory failure (reason 0: none)."""

    reason: I32  # oom_reason: 1 budget, 2 can't commit, 3 can't reserve, 4 LOH, 5 low memory, 6 unproductive full GC
    alloc_size: U64
    available_pagefile_mb: U64
    gc_index: U64
    fgm: I32  # failure_get_memory: 1 reserve segment, 2 commit segment begin, 3 commit ephemeral segment, 4 grow table, 5 commit table
    size: U64
    loh_p: BOOL


@record(0x110)
class GCInterestingInfoData:
    """DacpGCInterestingInfoData: counters the GC keeps when built GC_CONFIG_DRIVEN."""

    interesting_data_points: (SIZE_T, 9)
    compact_reasons: (SIZE_T, 11)
    expand_mechanisms: (SIZE_T, 6)
    bit_mechanisms: (SIZE_T, 2)
    global_mechanisms: (SIZE_T, 6)


@record(0x18)
class JitManagerInfo:
    manager_addr: ADDR
    code_type: U32
    ptr_heap_list: ADDR


@record(0x18)
class JitCodeHeapInfo:
    """DacpJitCodeHeapInfo: a LoaderCodeHeap's loader heap in ``base``, or a HostCodeHeap's
    (base, current) range (the header's union)."""
    code_heap_type: U32  # 0 loader, 1 host, 2 unknown
    base: ADDR
    current: ADDR
