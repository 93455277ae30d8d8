"""ContractReader: the runtime read from its own data contracts, in pure Python.

It answers the model's questions with the same records as the DAC reader (readers/records.py),
field for field as the .NET 10 DAC fills them (dotnet/runtime ``src/coreclr/debug/daccess/
request.cpp`` and ``request_svr.cpp``, as of .NET 10), quirks included, so that every command prints the same
bytes whichever reader answers. What it reads:

* the contract descriptor (descriptor.py): the Thread contract's types and the runtime's
  globals (ThreadStore, AppDomain, the well-known MethodTables);
* the GC's DAC variables (gcvars.py): heaps, generations, segments, finalization queues;
* the GC's handle table (handles.py);
* types, objects, fields, domains, assemblies and modules (typeanswers.py over the
  RuntimeTypeSystem, Object, Exception, Loader and EcmaMetadata contracts).

A question it cannot answer yet raises ``ReaderUnsupported`` naming ``--reader dac``. It loads
no native code, so it reads cores of any architecture and runtimes whose DAC is missing or
untrusted.
"""
from __future__ import annotations

import itertools
import struct
from dataclasses import replace
from typing import Iterator

from ..errors import ContractError, ReaderUnsupported, SosError
from ..readers import records as rec
from ..readers.stacks import (CONTEXT_REGISTERS_X64, MAX_FRAMES, ClrStack, ClrStackFrame, FrameKind,
                              NotManagedThread)
from ..targets.base import Module, Target
from .debuginfo import NativeVar
from .descriptor import ContractDescriptor, read_descriptor
from .gcvars import GC_HEAP_SVR, GcDacVars, GcHeapView, runtime_gc_globals
from .typeanswers import TypeAnswers

# What typeanswers.py answers, under the DAC reader's method names.
_TYPE_ANSWERS = frozenset(n for n in vars(TypeAnswers) if not n.startswith("_") and n != "forget")

_MAX_THREADS = 100_000
_FILL_POINTERS = 7  # DacpGcHeapDetails: NUMBERGENERATIONS + 3
_DAC_GENERATIONS = 4  # DacpGcHeapDetails.generation_table
_ALL_ONES = (1 << 64) - 1


class ContractReader:
    """One target's runtime, read through its contract descriptor and the GC's DAC variables."""

    name = "contracts"
    sos14 = True  # the statics questions of the DAC's ISOSDacInterface14 are answered (typeanswers.py)

    def __init__(self, target: Target, runtime: Module, descriptor: ContractDescriptor | None = None) -> None:
        self.target = target
        self.runtime = runtime
        self.descriptor = descriptor or read_descriptor(target, runtime)
        self._gc: GcDacVars | None = None
        self._gc_globals = None
        self._types: TypeAnswers | None = None
        self._stack_offset: int | None = None
        self._by_os_id: dict[int, rec.ThreadData] | None = None  # managed threads by OS thread id

    # -- plumbing ---------------------------------------------------------------------------

    def flush(self) -> None:
        """Forget what was read (a live process ran): everything is read again."""
        self._gc = None
        self._gc_globals = None
        self._types = None
        self._by_os_id = None

    @property
    def types(self) -> TypeAnswers:
        """The type-system and loader half (built on first use)."""
        if self._types is None:
            self._types = TypeAnswers(self.target, self.descriptor)
        return self._types

    def rebind(self, target: Target) -> None:
        self.target = target
        self.flush()

    def unsupported(self, what: str) -> ReaderUnsupported:
        return ReaderUnsupported(f"the contracts reader cannot answer {what} yet; --reader dac (or setreader dac) does")

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        # A DAC-reader method this reader lacks: a one-line error when called, not an AttributeError.
        if name.startswith("_"):
            raise AttributeError(name)
        if name in _TYPE_ANSWERS:
            return getattr(self.types, name)

        def missing(*_args, **_kwargs):  # type: ignore[no-untyped-def]
            raise self.unsupported(_need_of(name))
        return missing

    @property
    def gc_globals(self):  # type: ignore[no-untyped-def]
        if self._gc_globals is None:
            self._gc_globals = runtime_gc_globals(self.target, self.runtime, self.descriptor)
        return self._gc_globals

    @property
    def gc(self) -> GcDacVars:
        if self._gc is None:
            self._gc = GcDacVars(self.target, self.gc_globals.gc_dac_vars)
        return self._gc

    @property
    def is_server(self) -> bool:
        return self.gc_globals.heap_type == GC_HEAP_SVR

    @property
    def uses_regions(self) -> bool:
        gc = self.gc
        if gc.uses_regions is None:
            # Before build_variant said so: regions when generations 0 and 1 start apart.
            view = self._view(gc.server_heaps()[0] if self.is_server else None)
            gc.uses_regions = gc.generation(view, 0)[0] != gc.generation(view, 1)[0]
        return gc.uses_regions

    def _pointer(self, address: int, what: str) -> int:
        return self.gc.read_pointer(address, what)

    def _global_pointer(self, name: str) -> int:
        """The pointer stored at the variable the descriptor's global ``name`` locates."""
        return self._pointer(self.descriptor.global_value(name), name)

    def _view(self, heap: int | None) -> GcHeapView:
        if self.is_server:
            if not heap or heap not in self.gc.server_heaps():
                raise ContractError(f"{heap or 0:#x} is not a server GC heap")
            return self.gc.heap_view(heap)
        return self.gc.heap_view(0)

    # -- GC heap ----------------------------------------------------------------------------

    def gc_heap_data(self) -> rec.GcHeapData:
        gc = self.gc
        count = len(gc.server_heaps()) if self.is_server else 1
        valid = gc.int_value("gc_structures_invalid_cnt") == 0
        return rec.GcHeapData(int(self.is_server), int(valid), count, gc.read_u32(gc.var("max_gen"), "max_gen"))

    def gc_heap_list(self, count: int) -> list[int]:
        if not self.is_server:
            raise ContractError("a workstation GC has no heap list")
        return self.gc.server_heaps()[:count]

    def gc_heap_details(self, heap: int) -> rec.GcHeapDetails:
        if not self.is_server:
            raise ContractError("a workstation GC has no per-heap details")
        return self._details(self._view(heap))

    def gc_heap_static_data(self) -> rec.GcHeapDetails:
        if self.is_server:
            raise ContractError("a server GC has no static heap data")
        return self._details(self.gc.heap_view(0))

    def _details(self, view: GcHeapView) -> rec.GcHeapDetails:
        gc, g = self.gc, self.gc_globals
        # The background GC's fields are reported only when the GC says it was built with it
        # (build_variant), whatever the heap holds; with regions the saved-sweep pair is gone
        # and the DAC marks that with -1.
        if gc.background_gc:
            state = gc.read_i32(gc.var("current_c_gc_state"), "c_gc_state") if gc.var("current_c_gc_state") else 0
            mark_array, next_sweep = view.pointer("mark_array"), view.pointer("next_sweep_obj")
            low, high = view.pointer("background_saved_lowest_address"), view.pointer("background_saved_highest_address")
        else:
            state, mark_array, next_sweep, low, high = 0, _ALL_ONES, 0, 0, 0
        card_table = view.pointer("card_table") if view.heap else g.card_table
        if self.uses_regions:
            saved_seg, saved_start = _ALL_ONES, 0
        elif gc.background_gc:
            saved_seg, saved_start = view.pointer("saved_sweep_ephemeral_seg"), view.pointer("saved_sweep_ephemeral_start")
        else:
            saved_seg, saved_start = 0, 0
        gens = tuple(rec.GenerationData(*gc.generation(view, i)) for i in range(_DAC_GENERATIONS))
        fill = self._fill_pointers(view, _FILL_POINTERS) or (0,) * _FILL_POINTERS
        return rec.GcHeapDetails(view.heap, view.pointer("alloc_allocated"), mark_array & _ALL_ONES, state, next_sweep,
                                 saved_seg, saved_start, low, high, gens, view.pointer("ephemeral_heap_segment"),
                                 tuple(fill), g.lowest_address, g.highest_address, card_table)

    def _fill_pointers(self, view: GcHeapView, count: int) -> list[int] | None:
        queue = view.pointer("finalize_queue")
        if not queue:
            return None
        ps = self.target.pointer_size
        raw = self.gc_bytes(queue, count * ps, "finalization queue")
        return list(struct.unpack(f"<{count}{'Q' if ps == 8 else 'I'}", raw))

    def gc_bytes(self, address: int, size: int, what: str) -> bytes:
        from .gcvars import _read
        return _read(self.target, address, size, f"the GC's {what}")

    def heap_segment_data(self, segment: int) -> rec.HeapSegmentData:
        gc = self.gc
        s = gc.segment(segment)
        view = gc.heap_view(s["heap"] if self.is_server else 0)
        if self.is_server and not s["heap"]:
            raise ContractError(f"heap segment {segment:#x} names no GC heap")
        # The ephemeral segment's objects end where its heap allocates, not at its own mark.
        eph = view.pointer("ephemeral_heap_segment")
        mark = view.pointer("alloc_allocated") if segment == eph else s["allocated"]
        return rec.HeapSegmentData(segment, s["allocated"], s["committed"], s["reserved"], s["used"], s["mem"],
                                   s["next"], s["heap"] if self.is_server else 0, mark, s["flags"],
                                   s["background_allocated"])

    def number_generations(self) -> int | None:
        return self.gc.total_generation_count

    def generation_table(self, heap: int | None = None) -> list[rec.GenerationData] | None:
        view = self._view(heap)
        return [rec.GenerationData(*self.gc.generation(view, i)) for i in range(self.gc.total_generation_count)]

    def finalization_fill_pointers(self, heap: int | None = None) -> list[int] | None:
        return self._fill_pointers(self._view(heap), self.gc.total_generation_count + 2)

    def global_allocation_context(self) -> tuple[int, int] | None:
        at = self.gc_globals.global_alloc_context
        if not at:
            return None
        d = self.descriptor
        if d.has_field("EEAllocContext", "GCAllocationContext"):
            at += d.field_offset("EEAllocContext", "GCAllocationContext")
        ptr = self._pointer(at + d.field_offset("GCAllocContext", "Pointer"), "global allocation context")
        limit = self._pointer(at + d.field_offset("GCAllocContext", "Limit"), "global allocation context")
        return ptr, limit

    def gc_dynamic_adaptation_mode(self) -> int | None:
        gc = self.gc
        if gc.minor < 4:
            return None  # a GC from before DATAS was published (.NET 9: its DAC has no such question)
        if not gc.dynamic_heap_count or not gc.var("dynamic_adaptation_mode"):
            return None  # the DAC answers S_FALSE (and -1) when the GC was built without DATAS: "no DATAS here"
        return gc.int_value("dynamic_adaptation_mode")

    def oom_data(self, heap: int | None = None) -> rec.OomData | None:
        view = self._view(heap)
        at = view.field_address("oom_info") if view.heap else self.gc.var("oom_info")
        if not at:
            return None
        raw = self.gc_bytes(at, 72, "out-of-memory record")
        reason, alloc_size, _reserved, _allocated, gc_index, fgm, size, pagefile, loh_p = \
            struct.unpack_from("<i4xQQQQi4xQQi", raw)
        return rec.OomData(reason, alloc_size, pagefile, gc_index, fgm, size, loh_p)

    def useful_globals(self) -> rec.UsefulGlobals:
        return rec.UsefulGlobals(self._global_pointer("ObjectArrayMethodTable"), self._global_pointer("StringMethodTable"),
                                 self._global_pointer("ObjectMethodTable"), self._global_pointer("ExceptionMethodTable"),
                                 self._global_pointer("FreeObjectMethodTable"))

    # -- threads (the Thread contract) -----------------------------------------------------------

    def thread_store_data(self) -> rec.ThreadStoreData:
        d = self.descriptor
        store = self._global_pointer("ThreadStore")
        if not store:
            raise ContractError("the runtime has no thread store yet")

        def i32(field: str) -> int:
            return struct.unpack("<i", self.gc_bytes(store + d.field_offset("ThreadStore", field), 4, "thread store"))[0]
        first_link = self._pointer(store + d.field_offset("ThreadStore", "FirstThreadLink"), "thread store")
        first = self._thread_of_link(first_link)
        return rec.ThreadStoreData(i32("ThreadCount"), i32("UnstartedCount"), i32("BackgroundCount"),
                                   i32("PendingCount"), i32("DeadCount"), first,
                                   self._global_pointer("FinalizerThread"), self._global_pointer("GCThread"), 0)

    def _thread_of_link(self, link: int) -> int:
        return link - self.descriptor.field_offset("Thread", "LinkNext") if link else 0

    def thread_data(self, thread: int) -> rec.ThreadData:
        d = self.descriptor

        def off(field: str) -> int:
            return thread + d.field_offset("Thread", field)

        def u32(field: str) -> int:
            return struct.unpack("<I", self.gc_bytes(off(field), 4, "Thread"))[0]
        ptr, limit = 0, 0
        locals_ = self._pointer(off("RuntimeThreadLocals"), "Thread")
        if locals_:
            ctx = locals_ + d.field_offset("RuntimeThreadLocals", "AllocContext")
            if d.has_field("EEAllocContext", "GCAllocationContext"):
                ctx += d.field_offset("EEAllocContext", "GCAllocationContext")
            ptr = self._pointer(ctx + d.field_offset("GCAllocContext", "Pointer"), "allocation context")
            limit = self._pointer(ctx + d.field_offset("GCAllocContext", "Limit"), "allocation context")
        domain = self._global_pointer("AppDomain")
        nested = 0
        tracker = self._pointer(off("ExceptionTracker"), "Thread") if d.has_field("Thread", "ExceptionTracker") else 0
        if tracker and d.has_field("ExceptionInfo", "PreviousNestedInfo"):
            nested = self._pointer(tracker + d.field_offset("ExceptionInfo", "PreviousNestedInfo"), "exception info")
        next_link = self._pointer(off("LinkNext"), "Thread")
        return rec.ThreadData(u32("Id"), u32("OSId"), u32("State"), u32("PreemptiveGCDisabled"), ptr, limit,
                              domain, domain, self._pointer(off("Frame"), "Thread"), 0xFFFFFFFF, nested, 0, 0,
                              self._pointer(off("LastThrownObject"), "Thread"), self._thread_of_link(next_link))

    def stack_limits(self, thread: int) -> tuple[int, int] | None:
        """(base, limit) of the thread's stack, as the DAC answers (base above limit).

        The Thread contract does not publish them; the runtime keeps them in
        ``m_CacheStackBase``/``m_CacheStackLimit`` (threads.h), which follow ``m_Link`` (the
        contract's LinkNext) directly in .NET 9 and 10 and after a 4-byte field in older
        builds. Which, is measured once: the pair must bracket each thread's stack pointer
        (from the core's registers), be page-aligned and span at most 1 GiB."""
        if self._stack_offset is None:
            self._stack_offset = self._measure_stack_offset()
        at = thread + self.descriptor.field_offset("Thread", "LinkNext") + self._stack_offset
        ps = self.target.pointer_size
        return self._pointer(at, "Thread"), self._pointer(at + ps, "Thread")

    def _measure_stack_offset(self) -> int:
        ps = self.target.pointer_size
        link = self.descriptor.field_offset("Thread", "LinkNext")
        threads = [(addr, t.os_thread_id) for addr, t in itertools.islice(self.threads(), 16)]
        sp_name = "sp" if getattr(self.target, "arch", "x86_64") == "aarch64" else "rsp"
        for offset in (ps, 2 * ps):
            confirmed, contradicted = 0, False
            for addr, os_tid in threads:
                base = self._pointer(addr + link + offset, "Thread")
                limit = self._pointer(addr + link + offset + ps, "Thread")
                if base == limit == 0:
                    continue  # a thread that has not started
                if not (limit < base <= limit + (1 << 30)) or (base | limit) & 0xFFF:
                    contradicted = True
                    break
                try:
                    sp = self.target.registers(os_tid).get(sp_name) if os_tid else None
                except (SosError, NotImplementedError):
                    sp = None
                if sp is not None:
                    if not limit <= sp < base:
                        contradicted = True
                        break
                    confirmed += 1
            if confirmed and not contradicted:
                return offset
        raise self.unsupported("stack limits (the Thread's cached stack bounds could not be located)")

    def threads(self) -> Iterator[tuple[int, rec.ThreadData]]:
        """Every runtime Thread with its data, following the store's list (bounded, cycle-safe)."""
        addr = self.thread_store_data().first_thread
        seen: set[int] = set()
        while addr and addr not in seen and len(seen) < _MAX_THREADS:
            seen.add(addr)
            data = self.thread_data(addr)
            yield addr, data
            addr = data.next_thread

    def stress_log_address(self) -> int | None:
        """Where ``StressLog::theLog`` is: the descriptor's StressLog global points at it (.NET 10;
        .NET 9's descriptor has no stress log)."""
        if not self.descriptor.has_global("StressLog"):
            raise self.unsupported("the stress log (this runtime's descriptor does not locate it)")
        return self._global_pointer("StressLog") or None

    def sync_block_data(self, number: int) -> rec.SyncBlockData | None:
        """Not answered. The .NET 9/10 descriptors give the table (global SyncTableEntries,
        SyncTableEntry.SyncBlock) and SyncBlock.InteropInfo, but not how many entries are in
        use (SyncBlockCache.FreeSyncTableIndex), an entry's object, nor a lock's state
        (SyncBlock.Monitor, an AwareLock's LockState, RecursionLevel, HoldingThreadId, the
        waiters' Link). The SyncBlock contract that describes them (dotnet/runtime
        docs/design/datacontracts/SyncBlock.md) is newer than .NET 10; the refusal names what
        this runtime's descriptor lacks of it."""
        missing = [f"global {name}" for name in _SYNC_BLOCK_GLOBALS if not self.descriptor.has_global(name)]
        for type_name, fields in _SYNC_BLOCK_FIELDS:
            if not self.descriptor.has_type(type_name):
                missing.append(f"type {type_name}")
            else:
                missing += [f"{type_name}.{f}" for f in fields if not self.descriptor.has_field(type_name, f)]
        if not missing:
            raise self.unsupported("sync blocks (the SyncBlock contract is not read)")
        raise ReaderUnsupported("the contracts reader cannot answer sync blocks: this runtime's data descriptor "
                                f"lacks what the SyncBlock contract reads ({', '.join(missing)}); "
                                "--reader dac (or setreader dac) does")

    # -- roots ------------------------------------------------------------------------------

    def _managed_thread(self, os_tid: int) -> rec.ThreadData | None:
        """The runtime Thread running on OS thread ``os_tid`` (a map built once: the model asks
        for each thread in turn, and a scan each time would read the thread list quadratically)."""
        if self._by_os_id is None:
            self._by_os_id = {}
            for _addr, thread in self.threads():
                self._by_os_id.setdefault(thread.os_thread_id, thread)  # the first, as a scan finds it
        return self._by_os_id.get(os_tid)

    def stack_references(self, os_tid: int) -> list[rec.StackRefData]:
        """The references on a thread's managed frames (stackwalk.py, stackrefs.py)."""
        from .stackrefs import stack_references
        thread = self._managed_thread(os_tid)
        if thread is None:
            raise ContractError(f"no managed thread runs on OS thread {os_tid:#x}")
        return stack_references(self._stack_walker(), os_tid, thread.frame)

    def in_exception_dispatch(self, os_tid: int) -> bool:
        """Whether thread ``os_tid`` is dispatching an exception (.NET 9 and later): between its
        leaf and the exception Frame of the throw there is nothing but the runtime (the throw
        itself) or a method of the managed dispatcher, CoreLib's System.Runtime.EH (a filter it
        calls is on top of them). The .NET 10 DAC's stack reference enumeration faults on such a
        thread (a SIGSEGV in the debugger, SOS's too); a thread in a catch block is not one."""
        thread = self._managed_thread(os_tid)
        if thread is None or not thread.frame:
            return False
        walker = self._stack_walker()
        kinds = {walker.frame_kind(f) for f in walker.runtime_frames(thread.frame)}
        if not kinds & {"SoftwareExceptionFrame", "FaultingExceptionFrame"}:
            return False  # nothing thrown on this thread's stack
        managed = False  # a managed frame of the program's own above the exception Frame
        for frame in walker.walk(os_tid, thread.frame):
            if frame.frame_kind in ("SoftwareExceptionFrame", "FaultingExceptionFrame"):
                return not managed  # nothing but the runtime above it: the throw itself
            if frame.method_desc:
                if (self.method_desc_name(frame.method_desc) or "").startswith("System.Runtime.EH."):
                    return True
                managed = True
        return False

    def stack_frames(self, os_tid: int, *, arguments: bool = False, local_variables: bool = False,
                     registers: bool = False, max_frames: int = 0) -> ClrStack:
        """A thread's stops, innermost first: managed methods' and the runtime's Frames
        (stackwalk.py); registers are the walk's on x86-64 (the integer registers of the DAC's
        CONTEXT); arguments and locals from the JIT's native variable info (framevalues.py)."""
        thread = self._managed_thread(os_tid)
        if thread is None:
            raise NotManagedThread(os_tid)
        walker = self._stack_walker()
        want = registers and self.target.arch == "x86_64"
        frames: list[ClrStackFrame] = []
        for step in itertools.islice(walker.steps(os_tid, thread.frame), max_frames or MAX_FRAMES):
            f = step.frame
            regs = {name: f.registers.get(name, 0) for name in CONTEXT_REGISTERS_X64} if want and f.registers else None
            if f.method_desc:
                args = local_values = None
                if (arguments or local_variables) and step.block is not None:
                    from .framevalues import FrameValues
                    values = FrameValues(self.types, walker.manager, self.target.arch, step.block, f.ip, step.regs)
                    args = values.arguments() if arguments else None
                    # as SOS: once the arguments could not be listed, the locals are not tried
                    listed = not arguments or values.vars is not None or not values.count
                    local_values = values.locals() if local_variables and listed else None
                frames.append(ClrStackFrame(FrameKind.MANAGED, f.sp, f.ip, f.method_desc,
                                            self.method_desc_name(f.method_desc) or "", arguments=args,
                                            locals=local_values, registers=regs,
                                            frame_pointer=step.regs.get(walker.arch.fp, 0),
                                            caller_sp=step.caller.get(walker.arch.sp, 0)))
            else:
                # As the DAC's walk: a runtime Frame's stack pointer is the Frame's address.
                md = f.frame_method_desc
                method = (self.method_desc_name(md) or "<unknown method>") if md else ""
                frames.append(ClrStackFrame(FrameKind.RUNTIME, f.frame, f.ip, md, method, frame_address=f.frame,
                                            frame_name=f.frame_kind, registers=regs))
        if frames and frames[-1].caller_sp:
            # As the DAC's walk, which has no context after its last stop (this one unwound it).
            frames[-1] = replace(frames[-1], caller_sp=0)
        # A walk with no stop at all is a failed one, as the DAC's: it has no first context.
        return ClrStack(os_tid, tuple(frames), complete=bool(frames))

    def method_table_slots(self, mt: int) -> list[rec.MethodSlotData] | None:
        """The slots as the type half reads them from the MethodDesc chunks, except that a vtable
        slot holding managed code of no known method gets no MethodDesc, as the DAC's slot
        enumerator (GetMethodDescForSlot_NoThrow: the owner of the entry point) answers."""
        slots = self.types.method_table_slots(mt)
        if not slots or not self.descriptor.contract_version("ExecutionManager"):
            return slots
        manager = self._stack_walker().manager
        vtable = self.types.methods.num_vtable_slots(mt)  # the first entries; the rest come from chunks
        out = []
        for i, s in enumerate(slots):
            try:
                unknown = i < vtable and bool(s.entry_point) and manager.is_code_of_no_method(s.entry_point)
            except SosError:
                unknown = False
            out.append(rec.MethodSlotData(0, s.entry_point, 0, 0, 0, s.slot) if unknown else s)
        return out

    def method_desc_from_ip(self, ip: int) -> int | None:
        """The MethodDesc whose code holds ``ip`` (the ExecutionManager contract)."""
        manager = self._stack_walker().manager
        try:
            block = manager.code_block(ip)
        except SosError:  # a table page the dump left out: as the DAC, no method there
            return None
        return block.method_desc if block is not None else None

    def dynamic_method_object(self, data: rec.MethodDescData) -> int:
        """The DAC reads it from the method's LCGMethodResolver, which no contract describes."""
        raise self.unsupported("a dynamic method's DynamicMethod object (its resolver is in no data contract)")

    def method_desc_data_at(self, md: int, ip: int) -> rec.MethodDescData | None:
        """MethodDescData as the code at ``ip`` sees it, as SOS's ip2md asks the DAC for it:
        NativeCodeAddr is the start of the code version that holds ``ip`` (0: the active one)."""
        data = self.types.method_desc_data(md)
        if data is None or not ip:
            return data
        # CodeVersions' GetNativeCodeVersionForIP: the version whose code starts where the code
        # block holding ip starts (the method's own code, or one of its native code versions);
        # none, as for a P/Invoke's IL stub, leaves NativeCodeAddr -1 and no native code.
        start = self.frame_code_start(md, ip)
        versions = {data.native_code_addr}
        try:
            versions.update(v.native_code_addr for v in self.types.tiered_versions(md, 0) or ())
        except ReaderUnsupported:
            pass
        if start and start in versions:
            return data._replace(has_native_code=1, native_code_addr=start, requested_ip=ip)
        return data._replace(has_native_code=0, native_code_addr=_ALL_ONES, requested_ip=ip)

    def frame_code_start(self, md: int, ip: int) -> int | None:
        """The first instruction of the managed code that holds ``ip`` (a return address just
        past a method's end counts as its method's). No MethodDescData here: the DAC's active
        code version is the same but for a frame still running code a newer tier replaced."""
        manager = self._stack_walker().manager
        try:
            block = manager.code_block(ip) or manager.code_block(ip - 1)
        except SosError:
            return None
        return block.start if block is not None else None

    def code_gc_info(self, ip: int) -> int | None:
        """The GC info of the managed code holding ``ip``: a JIT-compiled method's code
        header's, or what follows a ReadyToRun method's unwind info (the ExecutionManager
        contract's GetGCInfo)."""
        try:
            block = self._stack_walker().manager.code_block(ip)
        except SosError:
            return None
        return block.gc_info or None if block is not None else None

    def code_start_and_funclet(self, ip: int) -> tuple[int, bool] | None:
        """The start of the managed code holding ``ip`` and whether ``ip`` is in one of its
        funclets (an EH handler compiled apart: a later unwind entry of the method). None for
        code of no method, or where it cannot be read."""
        try:
            block = self._stack_walker().manager.code_block(ip)
        except SosError:
            return None
        return (block.start, block.funclet) if block is not None else None

    def variable_ranges(self, ip: int, il_variables: int | None = None) -> tuple[int, list[NativeVar]] | None:
        """The start of the code holding ``ip`` and its native variables (IL number, [start,
        end] native offsets from that start, location kind): what the debugger API searches for
        a value, by its own rule (clrstack -i). None where the code or its debug info cannot be read."""
        from .debuginfo import code_vars
        try:
            manager = self._stack_walker().manager
            block = manager.code_block(ip)
            if block is None:
                return None
            found = code_vars(manager, block, il_variables)
            return (block.start, found) if found is not None else None
        except SosError:
            return None

    def module_file_name(self, module: int) -> str | None:
        """What IXCLRDataModule::GetFileName gives for a module whose PEAssembly names no path (an
        assembly loaded from bytes): the runtime's file-name hint, the name in the module's own
        metadata (its Module table row), e.g. ``Microsoft.CodeAnalysis.NetAnalyzers.dll``."""
        try:
            data = self.module_data(module)
            if data is None or data.is_reflection:
                return None  # a Reflection.Emit module has no file-name hint: the DAC fails there
            md = self.types.metadata.metadata(module)
            return md.module_name() if md is not None else None
        except SosError:
            return None

    def code_jit_type(self, ip: int) -> int:
        """GetCodeHeaderData's JITType: 1 for JIT-compiled code, 2 for ReadyToRun code, 0 where
        ``ip`` is no managed code (a precode stub, whose MethodDesc the DAC also reports with
        type 0, or nothing: the DAC fails). What SOS's JIT column needs of code headers."""
        try:
            block = self._stack_walker().manager.code_block(ip)
        except SosError:  # a table page the dump left out: as the DAC, no code there
            return 0
        return 0 if block is None else 2 if block.ready_to_run else 1

    def method_module_token(self, md: int) -> tuple[int, int] | None:
        """A MethodDesc's Module and metadata token (what source lines need of MethodDescData)."""
        methods = self.types.methods
        try:
            desc = methods.method_desc(md)
            return methods.module(desc), desc.token
        except SosError:
            return None

    def il_offsets(self, ip: int) -> list[int] | None:
        """The IL offsets the JIT mapped code address ``ip`` to (GetILOffsetsByAddress), from
        a JIT-compiled method's debug info (debuginfo.py); None where it is not read."""
        from .debuginfo import il_offsets_at
        found = self._jitted_bounds_at(ip)
        if found is None:
            return None
        block, bounds = found
        return [o & 0xFFFFFFFF for o in il_offsets_at(bounds, block.relative_offset)]  # as the DAC: unsigned

    def last_il_offset(self, ip: int) -> int | None:
        """The highest IL offset the JIT's map of the code at ``ip`` names, 0 when it names none
        (what SOS's GetLastMethodIlOffset finds in the DAC's IL address map)."""
        found = self._jitted_bounds_at(ip)
        if found is None:
            return None
        markers = (rec.IL_OFFSET_NO_MAPPING, rec.IL_OFFSET_PROLOG, rec.IL_OFFSET_EPILOG)
        return max((b.il_offset & 0xFFFFFFFF for b in found[1] if b.il_offset & 0xFFFFFFFF not in markers), default=0)

    def _jitted_bounds_at(self, ip: int):  # type: ignore[no-untyped-def]
        """(code block, its debug info's bounds) of the JIT-compiled code holding ``ip``."""
        from .debuginfo import jitted_bounds, jitted_debug_info
        try:
            block = self._stack_walker().manager.code_block(ip)
            if block is None or block.ready_to_run or not block.code_header:
                return None
            at = jitted_debug_info(self._stack_walker().data, block.code_header)
            read = lambda a, n: bytes(self.target.read_partial(a, n))  # noqa: E731
            # the IL variable count only sizes patchpoint info (flag bit 0): asked only then
            il_variables = self._il_variables(block, ip) if at and read(at, 1)[:1] in (b"\x01", b"\x03") else None
            bounds = jitted_bounds(read, at, il_variables) if at else None
        except SosError:
            return None
        return (block, bounds) if bounds is not None else None

    def _il_variables(self, block, ip: int) -> int | None:  # type: ignore[no-untyped-def]
        """How many IL arguments and locals the method of ``block`` has (None: not known)."""
        from .framevalues import FrameValues
        try:
            return FrameValues(self.types, self._stack_walker().manager, self.target.arch, block, ip, {},
                               read_vars=False).il_variables
        except SosError:
            return None

    def register_name(self, register: int) -> str | None:
        from .stackrefs import register_name
        return register_name(register, self.target.arch)

    def _stack_walker(self):  # type: ignore[no-untyped-def]
        walker = getattr(self, "_walker", None)
        if walker is None or walker.target is not self.target:
            if not self.descriptor.contract_version("ExecutionManager"):
                raise self.unsupported("stacks (this runtime's descriptor has no ExecutionManager contract: .NET 9)")
            from .stackwalk import StackWalker
            from .targetdata import TargetData
            walker = self._walker = StackWalker(self.target, TargetData(self.target, self.descriptor))
        return walker

    def handles(self) -> list[rec.HandleData]:
        from .handles import handle_table_handles
        return handle_table_handles(self)


# What the SyncBlock contract (version 1) reads: the entries in use, each entry's object and
# sync block, and a sync block's lock (its AwareLock) and waiters.
_SYNC_BLOCK_GLOBALS = ("SyncTableEntries", "SyncBlockCache")
_SYNC_BLOCK_FIELDS = (
    ("SyncBlockCache", ("FreeSyncTableIndex",)),
    ("SyncTableEntry", ("SyncBlock", "Object")),
    ("SyncBlock", ("Monitor", "InteropInfo", "Link")),
    ("AwareLock", ("LockState", "RecursionLevel", "HoldingThreadId")),
)


# What a missing method is about, in the user's words (the prefix of the DAC reader's name).
_NEEDS = (
    (("method_table", "field_desc", "object_", "eeclass", "useful"), "type names, sizes and fields (MethodTables)"),
    (("app_domain", "assembly", "module", "pe_file", "traverse_module", "domain_", "il_address"),
     "modules and assemblies"),
    (("method_desc", "code_header", "jit_", "traverse_eh", "tiered", "rejit", "pending_rejit", "code_heaps"),
     "methods and jitted code"),
    (("stack_", "frame_", "register_", "nested_exception", "exception_object"), "stacks and exceptions"),
    (("sync_block",), "sync blocks"), (("threadpool",), "the thread pool"),
    (("static_base", "thread_static"), "statics"), (("loader_", "traverse_loader"), "loader heaps"),
)


def _need_of(method: str) -> str:
    for prefixes, need in _NEEDS:
        if method.startswith(prefixes):
            return f"{need} ({method})"
    return method.replace("_", " ")
