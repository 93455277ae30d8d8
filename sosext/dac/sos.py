"""ISOSDacInterface and friends, wrapped as Python methods returning records.

Slot numbers are derived from the method lists below, which follow sospriv.idl's
declaration order exactly (IUnknown's three slots come first). Every call goes through a
lock: the DAC is not thread-safe.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any, Iterator

from ..errors import DacError
from ..readers.records import IL_OFFSET_EPILOG, IL_OFFSET_NO_MAPPING, IL_OFFSET_PROLOG
from ..readers.stacks import ClrStack
from . import structs as st
from .com import (ADDR, GUID, I32, P_ADDR, P_I32, P_PTR, P_U32, P_WCHAR, PTR, U32, ComPtr, hresult_text,
                  slot_table, utf16_buffer, utf16_text)
from .datatarget import DataTarget
from .loader import DacLocation, load_dac

IID_IXCLRDataProcess = GUID.parse("5c552ab6-fc09-4cb3-8e36-22fa03c798b7")
IID_ISOSDacInterface = GUID.parse("436f00f2-b42a-4b9f-870c-e73db66ae930")
IID_ISOSDacInterface2 = GUID.parse("A16026EC-96F4-40BA-87FB-5575986FB7AF")
IID_ISOSDacInterface3 = GUID.parse("B08C5CDC-FD8A-49C5-AB38-5FEEF35235B4")
IID_ISOSDacInterface5 = GUID.parse("127d6abe-6c86-4e48-8e7b-220781c58101")
IID_ISOSDacInterface6 = GUID.parse("11206399-4B66-4EDB-98EA-85654E59AD45")
IID_ISOSDacInterface7 = GUID.parse("c1020dde-fe98-4536-a53b-f35a74c327eb")
IID_ISOSDacInterface8 = GUID.parse("c12f35a9-e55c-4520-a894-b3dc5165dfce")
IID_ISOSDacInterface12 = GUID.parse("1b93bacc-8ca4-432d-943a-3e6e7ec0b0a3")
IID_ISOSDacInterface13 = GUID.parse("3176a8ed-597b-4f54-a71f-83695c6a8c5e")
IID_ISOSDacInterface16 = GUID.parse("4ba12ff8-daac-4e43-ac56-98cf8d5c595d")
# .NET 9+ (statics without DomainLocalModule; MethodTable slot enumeration).
IID_ISOSDacInterface14 = GUID.parse("9aa22aca-6dc6-4a0c-b4e0-70d2416b9837")
IID_ISOSDacInterface15 = GUID.parse("7ed81261-52a9-4a23-a358-c3313dea30a8")


SOS = slot_table(
    "GetThreadStoreData", "GetAppDomainStoreData", "GetAppDomainList", "GetAppDomainData",
    "GetAppDomainName", "GetDomainFromContext", "GetAssemblyList", "GetAssemblyData",
    "GetAssemblyName", "GetModule", "GetModuleData", "TraverseModuleMap",
    "GetAssemblyModuleList", "GetILForModule", "GetThreadData", "GetThreadFromThinlockID",
    "GetStackLimits", "GetMethodDescData", "GetMethodDescPtrFromIP", "GetMethodDescName",
    "GetMethodDescPtrFromFrame", "GetMethodDescFromToken", "GetMethodDescTransparencyData",
    "GetCodeHeaderData", "GetJitManagerList", "GetJitHelperFunctionName", "GetJumpThunkTarget",
    "GetThreadpoolData", "GetWorkRequestData", "GetHillClimbingLogEntry", "GetObjectData",
    "GetObjectStringData", "GetObjectClassName", "GetMethodTableName", "GetMethodTableData",
    "GetMethodTableSlot", "GetMethodTableFieldData", "GetMethodTableTransparencyData",
    "GetMethodTableForEEClass", "GetFieldDescData", "GetFrameName", "GetPEFileBase",
    "GetPEFileName", "GetGCHeapData", "GetGCHeapList", "GetGCHeapDetails",
    "GetGCHeapStaticData", "GetHeapSegmentData", "GetOOMData", "GetOOMStaticData",
    "GetHeapAnalyzeData", "GetHeapAnalyzeStaticData", "GetDomainLocalModuleData",
    "GetDomainLocalModuleDataFromAppDomain", "GetDomainLocalModuleDataFromModule",
    "GetThreadLocalModuleData", "GetSyncBlockData", "GetSyncBlockCleanupData", "GetHandleEnum",
    "GetHandleEnumForTypes", "GetHandleEnumForGC", "TraverseEHInfo", "GetNestedExceptionData",
    "GetStressLogAddress", "TraverseLoaderHeap", "GetCodeHeapList", "TraverseVirtCallStubHeap",
    "GetUsefulGlobals", "GetClrWatsonBuckets", "GetTLSIndex", "GetDacModuleHandle",
    "GetRCWData", "GetRCWInterfaces", "GetCCWData", "GetCCWInterfaces",
    "TraverseRCWCleanupList", "GetStackReferences", "GetRegisterName", "GetThreadAllocData",
    "GetHeapAllocData", "GetFailedAssemblyList", "GetPrivateBinPaths", "GetAssemblyLocation",
    "GetAppDomainConfigFile", "GetApplicationBase", "GetFailedAssemblyData",
    "GetFailedAssemblyLocation", "GetFailedAssemblyDisplayName",
)
SOS2 = slot_table("GetObjectExceptionData", "IsRCWDCOMProxy")
SOS3 = slot_table("GetGCInterestingInfoData", "GetGCInterestingInfoStaticData", "GetGCGlobalMechanisms")
SOS8 = slot_table("GetNumberGenerations", "GetGenerationTable", "GetFinalizationFillPointers",
                  "GetGenerationTableSvr", "GetFinalizationFillPointersSvr", "GetAssemblyLoadContext")
SOS12 = slot_table("GetGlobalAllocationContext")
SOS13 = slot_table("TraverseLoaderHeap", "GetDomainLoaderAllocator", "GetLoaderAllocatorHeapNames",
                   "GetLoaderAllocatorHeaps", "GetHandleTableMemoryRegions", "GetGCBookkeepingMemoryRegions",
                   "GetGCFreeRegions", "LockedFlush")
SOS16 = slot_table("GetGCDynamicAdaptationMode")
SOS5 = slot_table("GetTieredVersions")
SOS6 = slot_table("GetMethodTableCollectibleData")
SOS7 = slot_table("GetPendingReJITID", "GetReJITInformation", "GetProfilerModifiedILInformation",
                  "GetMethodsWithProfilerModifiedIL")
SOS14 = slot_table("GetStaticBaseAddress", "GetThreadStaticBaseAddress", "GetMethodTableInitializationFlags")
SOS15 = slot_table("GetMethodTableSlotEnumerator")
# MethodTableInitializationFlags (sospriv.idl); the pre-.NET 9 DomainLocalModule class
# flags use the same bits, plus 4 for "thread statics allocated".
MT_INITIALIZED = 1
MT_INITIALIZATION_FAILED = 2
ENUM = slot_table("Skip", "Reset", "GetCount", "Next")  # ISOSEnum + Next of the typed enumerators
XCLR_PROCESS_FLUSH = 3

_A, _PA, _U32, _PU32, _I32, _PI32, _P, _PP, _PW = ADDR, P_ADDR, U32, P_U32, I32, P_I32, PTR, P_PTR, P_WCHAR

MODULEMAPTRAVERSE = ctypes.CFUNCTYPE(None, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_void_p)
# BOOL (*DUMPEHINFO)(UINT clauseIndex, UINT totalClauses, DACEHInfo *pEHInfo, LPVOID token)
DUMPEHINFO = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p)
# void (*VISITHEAP)(CLRDATA_ADDRESS blockData, size_t blockSize, BOOL blockIsCurrentBlock)
VISITHEAP = ctypes.CFUNCTYPE(None, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_int32)
LOADER_HEAP_NORMAL, LOADER_HEAP_EXPLICIT_CONTROL = 0, 1  # LoaderHeapKind

HANDLE_TYPES = {
    0: "weak short", 1: "weak long", 2: "strong", 3: "pinned", 4: "variable",
    5: "ref counted", 6: "dependent", 7: "async pinned", 8: "sizedref", 9: "weak WinRT",
    10: "weak interior pointer", 11: "cross reference",
}


class SosDac:
    """One DAC instance bound to one target (a readers/protocol.py RuntimeReader). Create with
    :func:`open_dac`."""

    name = "dac"

    def __init__(self, location: DacLocation, data_target: DataTarget, process: ComPtr) -> None:
        self.location = location
        self.data_target = data_target
        self.process = process
        self.lock = threading.RLock()
        sos = process.query(IID_ISOSDacInterface, "ISOSDacInterface")
        if sos is None:
            raise DacError("the DAC does not offer ISOSDacInterface")
        self.sos = sos
        self.sos2 = process.query(IID_ISOSDacInterface2, "ISOSDacInterface2")
        self.sos3 = process.query(IID_ISOSDacInterface3, "ISOSDacInterface3")
        self.sos8 = process.query(IID_ISOSDacInterface8, "ISOSDacInterface8")
        self.sos12 = process.query(IID_ISOSDacInterface12, "ISOSDacInterface12")
        self.sos16 = process.query(IID_ISOSDacInterface16, "ISOSDacInterface16")
        self.sos5 = process.query(IID_ISOSDacInterface5, "ISOSDacInterface5")
        self.sos6 = process.query(IID_ISOSDacInterface6, "ISOSDacInterface6")
        self.sos7 = process.query(IID_ISOSDacInterface7, "ISOSDacInterface7")
        self.sos14 = process.query(IID_ISOSDacInterface14, "ISOSDacInterface14")
        self.sos15 = process.query(IID_ISOSDacInterface15, "ISOSDacInterface15")
        self.sos13 = process.query(IID_ISOSDacInterface13, "ISOSDacInterface13")

    # -- plumbing ---------------------------------------------------------------------

    def _call(self, iface: ComPtr, what: str, slot: int, argtypes: tuple[Any, ...], *args: Any) -> int:
        with self.lock:
            return iface.check(what, slot, argtypes, *args)

    def _try(self, iface: ComPtr, slot: int, argtypes: tuple[Any, ...], *args: Any) -> int:
        with self.lock:
            return iface.call(slot, argtypes, *args)

    def _record(self, name: str, rec: Any, *lead: tuple[Any, Any]) -> Any:
        c = rec.C()
        types = tuple(t for t, _ in lead) + (ctypes.POINTER(rec.C),)
        args = tuple(v for _, v in lead) + (ctypes.byref(c),)
        self._call(self.sos, name, SOS[name], types, *args)
        return rec.from_c(c)

    def _record_or_none(self, name: str, rec: Any, *lead: tuple[Any, Any]) -> Any:
        try:
            return self._record(name, rec, *lead)
        except DacError:
            return None

    def _text(self, iface: ComPtr, name: str, slot: int, lead: tuple[tuple[Any, Any], ...], *,
              sized_on_failure: bool = False) -> str | None:
        """The two-call WCHAR pattern: ask for the size, then fill. ``sized_on_failure``: the size
        counts even when asking for it fails (then the filling call's result decides)."""
        types = tuple(t for t, _ in lead) + (_U32, _PW, _PU32)
        vals = tuple(v for _, v in lead)
        needed = _U32(0)
        with self.lock:
            hr = iface.call(slot, types, *vals, 0, None, ctypes.byref(needed))
            if (hr & 0x80000000 and not sized_on_failure) or needed.value == 0:
                return None
            buf = utf16_buffer(needed.value)
            hr = iface.call(slot, types, *vals, needed.value, buf, ctypes.byref(needed))
        if hr & 0x80000000:
            return None
        return utf16_text(buf, needed.value)

    def _addresses(self, name: str, *lead: tuple[Any, Any], signed: bool = False,
                   count: int | None = None) -> list[int]:
        """The (count, values[], pNeeded) pattern for arrays of CLRDATA_ADDRESS.

        With ``count`` (known from a data record) one call fills the array: some of these
        methods do not report the needed size when asked with an empty buffer."""
        cnt_t, pcnt_t = (_I32, _PI32) if signed else (_U32, _PU32)
        types = tuple(t for t, _ in lead) + (cnt_t, _PA, pcnt_t)
        vals = tuple(v for _, v in lead)
        needed = cnt_t(0)
        with self.lock:
            if count is None:
                self.sos.check(name, SOS[name], types, *vals, 0, None, ctypes.byref(needed))
                n = needed.value
            else:
                n = count
            if n <= 0:
                return []
            arr = (_A * n)()
            self.sos.check(name, SOS[name], types, *vals, n, arr, ctypes.byref(needed))
        got = needed.value if 0 < needed.value <= n else n
        return list(arr[:got])

    def flush(self) -> None:
        """Drop the DAC's cached view of target memory (after a live process ran)."""
        self._try(self.process, XCLR_PROCESS_FLUSH, ())

    def rebind(self, target: Any) -> None:
        """Read through ``target`` from now on (a new host wrapper of the same process)."""
        self.data_target.target = target

    # -- GC heap ----------------------------------------------------------------------

    def gc_heap_data(self) -> st.GcHeapData:
        return self._record("GetGCHeapData", st.GcHeapData)

    def gc_heap_list(self, count: int) -> list[int]:
        arr = (_A * max(count, 1))()
        needed = _U32(0)
        self._call(self.sos, "GetGCHeapList", SOS["GetGCHeapList"], (_U32, _PA, _PU32),
                   count, arr, ctypes.byref(needed))
        return list(arr[: min(count, needed.value)])

    def gc_heap_details(self, heap: int) -> st.GcHeapDetails:
        return self._record("GetGCHeapDetails", st.GcHeapDetails, (_A, heap))

    def gc_heap_static_data(self) -> st.GcHeapDetails:
        return self._record("GetGCHeapStaticData", st.GcHeapDetails)

    def heap_segment_data(self, segment: int) -> st.HeapSegmentData:
        return self._record("GetHeapSegmentData", st.HeapSegmentData, (_A, segment))

    def number_generations(self) -> int | None:
        if self.sos8 is None:
            return None
        n = _U32(0)
        if self._try(self.sos8, SOS8["GetNumberGenerations"], (_PU32,), ctypes.byref(n)) & 0x80000000:
            return None
        return n.value

    def generation_table(self, heap: int | None = None) -> list[st.GenerationData] | None:
        """All generations (gen0..2, LOH, POH on .NET 5+), or None without ISOSDacInterface8."""
        n = self.number_generations()
        if not n:
            return None
        arr = (st.GenerationData.C * n)()
        needed = _U32(0)
        if heap is None:
            hr = self._try(self.sos8, SOS8["GetGenerationTable"], (_U32, _P, _PU32), n, arr, ctypes.byref(needed))
        else:
            hr = self._try(self.sos8, SOS8["GetGenerationTableSvr"], (_A, _U32, _P, _PU32),
                           heap, n, arr, ctypes.byref(needed))
        if hr & 0x80000000:
            return None
        return [st.GenerationData.from_c(g) for g in arr[: needed.value]]

    def finalization_fill_pointers(self, heap: int | None = None) -> list[int] | None:
        if self.sos8 is None:
            return None
        needed = _U32(0)
        name = "GetFinalizationFillPointers" if heap is None else "GetFinalizationFillPointersSvr"
        lead: tuple[Any, ...] = () if heap is None else (heap,)
        types: tuple[Any, ...] = (() if heap is None else (_A,)) + (_U32, _PA, _PU32)
        with self.lock:
            hr = self.sos8.call(SOS8[name], types, *lead, 0, None, ctypes.byref(needed))
            if hr & 0x80000000 or not needed.value:
                return None
            arr = (_A * needed.value)()
            hr = self.sos8.call(SOS8[name], types, *lead, needed.value, arr, ctypes.byref(needed))
        if hr & 0x80000000:
            return None
        return list(arr[: needed.value])

    def global_allocation_context(self) -> tuple[int, int] | None:
        if self.sos12 is None:
            return None
        p, lim = _A(0), _A(0)
        if self._try(self.sos12, SOS12["GetGlobalAllocationContext"], (_PA, _PA),
                     ctypes.byref(p), ctypes.byref(lim)) & 0x80000000:
            return None
        return p.value, lim.value

    def gc_dynamic_adaptation_mode(self) -> int | None:
        """DATAS mode of a server GC (1 = adapt to application sizes); None when the runtime
        has no DATAS (workstation GC, older runtimes) or does not say."""
        if self.sos16 is None:
            return None
        mode = _I32(0)
        # S_FALSE (with -1) is the runtime's "no DATAS here" (workstation GC, the segments GC), as ClrMD reads it.
        if self._try(self.sos16, SOS16["GetGCDynamicAdaptationMode"], (_PI32,), ctypes.byref(mode)) != 0:
            return None
        return mode.value

    def useful_globals(self) -> st.UsefulGlobals:
        return self._record("GetUsefulGlobals", st.UsefulGlobals)

    # -- types and objects ------------------------------------------------------------

    def method_table_data(self, mt: int) -> st.MethodTableData | None:
        return self._record_or_none("GetMethodTableData", st.MethodTableData, (_A, mt))

    def method_table_name(self, mt: int) -> str | None:
        return self._text(self.sos, "GetMethodTableName", SOS["GetMethodTableName"], ((_A, mt),))

    def method_table_field_data(self, mt: int) -> st.MethodTableFieldData | None:
        return self._record_or_none("GetMethodTableFieldData", st.MethodTableFieldData, (_A, mt))

    def method_table_for_eeclass(self, eeclass: int) -> int | None:
        out = _A(0)
        if self._try(self.sos, SOS["GetMethodTableForEEClass"], (_A, _PA), eeclass, ctypes.byref(out)) & 0x80000000:
            return None
        return out.value

    def method_table_slot(self, mt: int, slot: int) -> int | None:
        out = _A(0)
        if self._try(self.sos, SOS["GetMethodTableSlot"], (_A, _U32, _PA), mt, slot, ctypes.byref(out)) & 0x80000000:
            return None
        return out.value

    def field_desc_data(self, fd: int) -> st.FieldDescData | None:
        return self._record_or_none("GetFieldDescData", st.FieldDescData, (_A, fd))

    def object_data(self, address: int) -> st.ObjectData | None:
        return self._record_or_none("GetObjectData", st.ObjectData, (_A, address))

    def object_class_name(self, address: int) -> str | None:
        return self._text(self.sos, "GetObjectClassName", SOS["GetObjectClassName"], ((_A, address),))

    def object_string(self, address: int) -> str | None:
        # .NET 9's DAC answers E_INVALIDARG to the size query (no buffer), yet gives the size.
        return self._text(self.sos, "GetObjectStringData", SOS["GetObjectStringData"], ((_A, address),),
                          sized_on_failure=True)

    def exception_object_data(self, address: int) -> st.ExceptionObjectData | None:
        if self.sos2 is None:
            return None
        c = st.ExceptionObjectData.C()
        if self._try(self.sos2, SOS2["GetObjectExceptionData"], (_A, _P), address, ctypes.byref(c)) & 0x80000000:
            return None
        return st.ExceptionObjectData.from_c(c)

    # -- threads ----------------------------------------------------------------------

    def thread_store_data(self) -> st.ThreadStoreData:
        return self._record("GetThreadStoreData", st.ThreadStoreData)

    def thread_data(self, thread: int) -> st.ThreadData:
        return self._record("GetThreadData", st.ThreadData, (_A, thread))

    def threads(self) -> Iterator[tuple[int, st.ThreadData]]:
        """Every runtime Thread object with its data, following the store's list."""
        addr = self.thread_store_data().first_thread
        seen: set[int] = set()
        while addr and addr not in seen:
            seen.add(addr)
            data = self.thread_data(addr)
            yield addr, data
            addr = data.next_thread

    def stack_limits(self, thread: int) -> tuple[int, int] | None:
        lo, hi, fp = _A(0), _A(0), _A(0)
        if self._try(self.sos, SOS["GetStackLimits"], (_A, _PA, _PA, _PA), thread,
                     ctypes.byref(lo), ctypes.byref(hi), ctypes.byref(fp)) & 0x80000000:
            return None
        return lo.value, hi.value

    def domain_from_context(self, context: int) -> int | None:
        """The AppDomain of a thread's context (threads whose ThreadData has no domain)."""
        out = _A(0)
        if self._try(self.sos, SOS["GetDomainFromContext"], (_A, _PA), context, ctypes.byref(out)) & 0x80000000:
            return None
        return out.value

    # -- roots ------------------------------------------------------------------------

    def _drain(self, enum: ComPtr, rec: Any, batch: int = 512) -> list[Any]:
        out: list[Any] = []
        arr = (rec.C * batch)()
        fetched = _U32(0)
        try:
            while True:
                with self.lock:
                    hr = enum.call(ENUM["Next"], (_U32, _P, _PU32), batch, arr, ctypes.byref(fetched))
                n = fetched.value
                out.extend(rec.from_c(arr[i]) for i in range(n))
                if hr & 0x80000000 or n < batch:
                    break
        finally:
            enum.release()
        return out

    def handles(self) -> list[st.HandleData]:
        out = _P()
        self._call(self.sos, "GetHandleEnum", SOS["GetHandleEnum"], (_PP,), ctypes.byref(out))
        return self._drain(ComPtr(out.value, "ISOSHandleEnum"), st.HandleData)

    def stack_references(self, os_tid: int) -> list[st.StackRefData]:
        out = _P()
        hr = self._try(self.sos, SOS["GetStackReferences"], (_U32, _PP), os_tid, ctypes.byref(out))
        if hr & 0x80000000 or not out.value:
            raise DacError(f"GetStackReferences({os_tid:#x}) failed: {hresult_text(hr)}")
        return self._drain(ComPtr(out.value, "ISOSStackRefEnum"), st.StackRefData)

    def stack_frames(self, os_tid: int, *, arguments: bool = False, local_variables: bool = False,
                     registers: bool = False, max_frames: int = 0) -> ClrStack:
        """A thread's stops, innermost first, through IXCLRDataStackWalk (dac/stackwalk.py)."""
        from .stackwalk import stack_frames
        return stack_frames(self, os_tid, arguments=arguments, local_variables=local_variables,
                            registers=registers, max_frames=max_frames)

    def register_name(self, reg: int) -> str | None:
        return self._text(self.sos, "GetRegisterName", SOS["GetRegisterName"], ((_I32, reg),))

    # -- domains, assemblies, modules, methods --------------------------------------

    def app_domain_store_data(self) -> st.AppDomainStoreData:
        return self._record("GetAppDomainStoreData", st.AppDomainStoreData)

    def app_domain_list(self, count: int | None = None) -> list[int]:
        """AppDomain addresses; pass AppDomainStoreData.domain_count (the DAC does not report
        the needed size for an empty buffer)."""
        return self._addresses("GetAppDomainList", count=count)

    def app_domain_data(self, domain: int) -> st.AppDomainData | None:
        return self._record_or_none("GetAppDomainData", st.AppDomainData, (_A, domain))

    def app_domain_name(self, domain: int) -> str | None:
        return self._text(self.sos, "GetAppDomainName", SOS["GetAppDomainName"], ((_A, domain),))

    def assembly_list(self, domain: int, count: int | None = None) -> list[int]:
        """Assemblies of a domain; pass AppDomainData.assembly_count when known."""
        return self._addresses("GetAssemblyList", (_A, domain), signed=True, count=count)

    def assembly_data(self, domain: int, assembly: int) -> st.AssemblyData | None:
        return self._record_or_none("GetAssemblyData", st.AssemblyData, (_A, domain), (_A, assembly))

    def assembly_name(self, assembly: int) -> str | None:
        return self._text(self.sos, "GetAssemblyName", SOS["GetAssemblyName"], ((_A, assembly),))

    def assembly_module_list(self, assembly: int, count: int | None = None) -> list[int]:
        """Modules of an assembly; pass AssemblyData.module_count when known."""
        return self._addresses("GetAssemblyModuleList", (_A, assembly), count=count)

    def module_data(self, module: int) -> st.ModuleData | None:
        return self._record_or_none("GetModuleData", st.ModuleData, (_A, module))

    def module_load_data(self, module: int) -> st.GetModuleData | None:
        """How the runtime loaded the module (IXCLRDataModule's request; xclrdata.py)."""
        from .xclrdata import module_load_data
        return module_load_data(self, module)

    def module_file_name(self, module: int) -> str | None:
        """IXCLRDataModule::GetFileName: the name of a module whose PEAssembly names no file."""
        from .xclrdata import module_file_name
        return module_file_name(self, module)

    def pe_file_name(self, pe: int) -> str | None:
        return self._text(self.sos, "GetPEFileName", SOS["GetPEFileName"], ((_A, pe),))

    def pe_file_base(self, pe: int) -> int | None:
        out = _A(0)
        if self._try(self.sos, SOS["GetPEFileBase"], (_A, _PA), pe, ctypes.byref(out)) & 0x80000000:
            return None
        return out.value

    # -- loader and code heaps ---------------------------------------------------------

    def _struct_array(self, name: str, rec: Any, lead: tuple[tuple[Any, Any], ...], limit: int) -> list[Any]:
        """The (count, records[], pNeeded) pattern for arrays of DAC structs; [] on failure."""
        types = tuple(t for t, _ in lead) + (_U32, _P, _PU32)
        vals = tuple(v for _, v in lead)
        needed = _U32(0)
        with self.lock:
            if self.sos.call(SOS[name], types, *vals, 0, None, ctypes.byref(needed)) & 0x80000000:
                return []
            n = min(needed.value, limit)
            if not n:
                return []
            arr = (rec.C * n)()
            if self.sos.call(SOS[name], types, *vals, n, arr, ctypes.byref(needed)) & 0x80000000:
                return []
        return [rec.from_c(c) for c in arr[: min(n, needed.value)]]

    def jit_managers(self) -> list[st.JitManagerInfo]:
        return self._struct_array("GetJitManagerList", st.JitManagerInfo, (), 64)

    def code_heaps(self, jit_manager: int) -> list[st.JitCodeHeapInfo]:
        return self._struct_array("GetCodeHeapList", st.JitCodeHeapInfo, ((_A, jit_manager),), 4096)

    def domain_loader_allocator(self, domain: int) -> int | None:
        """The LoaderAllocator of a domain (.NET 8+), or None."""
        if self.sos13 is None:
            return None
        out = _A(0)
        if self._try(self.sos13, SOS13["GetDomainLoaderAllocator"], (_A, _PA), domain, ctypes.byref(out)) & 0x80000000:
            return None
        return out.value or None

    def loader_allocator_heaps(self, loader_allocator: int) -> list[tuple[str, int, int]] | None:
        """(name, LoaderHeap address, LoaderHeapKind) of each heap of a LoaderAllocator (.NET 8+)."""
        if self.sos13 is None:
            return None
        needed = _I32(0)
        pchars = ctypes.POINTER(ctypes.c_char_p)
        with self.lock:
            hr = self.sos13.call(SOS13["GetLoaderAllocatorHeapNames"], (_I32, pchars, _PI32), 0, None,
                                 ctypes.byref(needed))
            n = needed.value
            if hr & 0x80000000 or not 0 < n <= 256:
                return None
            names = (ctypes.c_char_p * n)()
            hr = self.sos13.call(SOS13["GetLoaderAllocatorHeapNames"], (_I32, pchars, _PI32), n, names,
                                 ctypes.byref(needed))
            if hr & 0x80000000:
                return None
            heaps, kinds = (_A * n)(), (_I32 * n)()
            hr = self.sos13.call(SOS13["GetLoaderAllocatorHeaps"], (_A, _I32, _PA, _PI32, _PI32),
                                 loader_allocator, n, heaps, kinds, ctypes.byref(needed))
            if hr & 0x80000000:
                return None
        return [((names[i] or b"").decode("ascii", "replace"), heaps[i], kinds[i]) for i in range(n)]

    def traverse_loader_heap(self, heap: int, kind: int) -> list[tuple[int, int, bool]] | None:
        """(block address, block size, is the current block) of a LoaderHeap; None on failure
        (the DAC met a bad block). Without ISOSDacInterface13 an explicit-control heap, which
        has no vtable, is handed to the old method one pointer lower, as it expects a vtable."""
        blocks: list[tuple[int, int, bool]] = []

        def visit(address: int, size: int, current: int) -> None:
            if len(blocks) < 100_000:
                blocks.append((address, size, bool(current)))

        cb = VISITHEAP(visit)
        if self.sos13 is not None:
            hr = self._try(self.sos13, SOS13["TraverseLoaderHeap"], (_A, _I32, VISITHEAP), heap, kind, cb)
        else:
            addr = heap - 8 if kind == LOADER_HEAP_EXPLICIT_CONTROL else heap
            hr = self._try(self.sos, SOS["TraverseLoaderHeap"], (_A, VISITHEAP), addr, cb)
        return None if hr & 0x80000000 else blocks

    def traverse_module_map(self, module: int, kind: int = 0) -> list[tuple[int, int]]:
        """(rid, MethodTable) pairs of a module's TypeDef (kind 0) or TypeRef (1) map."""
        found: list[tuple[int, int]] = []

        def visit(index: int, mt: int, _token: Any) -> None:
            found.append((index, mt))

        cb = MODULEMAPTRAVERSE(visit)
        self._call(self.sos, "TraverseModuleMap", SOS["TraverseModuleMap"],
                   (_U32, _A, MODULEMAPTRAVERSE, _P), kind, module, cb, None)
        return found

    def frame_code_start(self, md: int, ip: int) -> int | None:
        """Where a frame of ``md`` at ``ip`` is measured from: MethodDescData.NativeCodeAddr,
        the method's active code version."""
        mdd = self.method_desc_data(md)
        return mdd.native_code_addr if mdd is not None else None

    def code_gc_info(self, ip: int) -> int | None:
        """The GC info of the managed code holding ``ip`` (DacpCodeHeaderData.GCInfo)."""
        ch = self.code_header_data(ip)
        return ch.gc_info or None if ch is not None else None

    def method_module_token(self, md: int) -> tuple[int, int] | None:
        """A MethodDesc's Module and metadata token (from MethodDescData)."""
        mdd = self.method_desc_data(md)
        return (mdd.module_ptr, mdd.token) if mdd is not None else None

    def il_offsets(self, ip: int) -> list[int] | None:
        """The IL offsets the JIT mapped code address ``ip`` to (IXCLRDataMethodInstance)."""
        from .xclrdata import method_instance_by_address
        mi = method_instance_by_address(self, ip)
        if mi is None:
            return None
        with mi:
            return mi.il_offsets(ip)

    def last_il_offset(self, ip: int) -> int | None:
        """The highest IL offset the JIT's map of the code at ``ip`` names, 0 when it names none
        (SOS's GetLastMethodIlOffset over IXCLRDataMethodInstance::GetILAddressMap)."""
        from .xclrdata import method_instance_by_address
        mi = method_instance_by_address(self, ip)
        if mi is None:
            return None
        with mi:
            entries = mi.il_address_map()
        if entries is None:
            return None
        markers = (IL_OFFSET_NO_MAPPING, IL_OFFSET_PROLOG, IL_OFFSET_EPILOG)
        return max((il for il, _start, _end in entries if il not in markers), default=0)

    def method_desc_data(self, md: int) -> st.MethodDescData | None:
        return self.method_desc_data_at(md, 0)

    def method_desc_data_at(self, md: int, ip: int) -> st.MethodDescData | None:
        """MethodDescData as the code at ``ip`` sees it: NativeCodeAddr is then the start of the
        code version that holds ``ip`` (0: the active version), as SOS's ip2md asks for it."""
        c = st.MethodDescData.C()
        hr = self._try(self.sos, SOS["GetMethodDescData"], (_A, _A, _P, _U32, _P, _PU32),
                       md, ip, ctypes.byref(c), 0, None, None)
        if hr & 0x80000000:
            return None
        return st.MethodDescData.from_c(c)

    def dynamic_method_object(self, data: st.MethodDescData) -> int:
        """A dynamic method's DynamicMethod object (0: none), which the DAC puts in its data."""
        return data.managed_dynamic_method_object

    def method_desc_name(self, md: int) -> str | None:
        return self._text(self.sos, "GetMethodDescName", SOS["GetMethodDescName"], ((_A, md),))

    def stress_log_address(self) -> int | None:
        out = _A(0)
        if self._try(self.sos, SOS["GetStressLogAddress"], (_PA,), ctypes.byref(out)) & 0x80000000:
            return None
        return out.value or None

    def method_desc_from_ip(self, ip: int) -> int | None:
        out = _A(0)
        if self._try(self.sos, SOS["GetMethodDescPtrFromIP"], (_A, _PA), ip, ctypes.byref(out)) & 0x80000000:
            return None
        return out.value or None

    def il_address(self, module: int, rva: int) -> int | None:
        """Where a method body (its IL header) at ``rva`` of ``module`` lies in the target."""
        out = _A(0)
        if self._try(self.sos, SOS["GetILForModule"], (_A, _U32, _PA), module, rva, ctypes.byref(out)) & 0x80000000:
            return None
        return out.value or None

    def method_desc_from_frame(self, frame: int) -> int | None:
        out = _A(0)
        if self._try(self.sos, SOS["GetMethodDescPtrFromFrame"], (_A, _PA), frame, ctypes.byref(out)) & 0x80000000:
            return None
        return out.value or None

    def method_desc_from_token(self, module: int, token: int) -> int | None:
        out = _A(0)
        if self._try(self.sos, SOS["GetMethodDescFromToken"], (_A, _U32, _PA), module, token,
                     ctypes.byref(out)) & 0x80000000:
            return None
        return out.value or None

    def code_header_data(self, ip: int) -> st.CodeHeaderData | None:
        return self._record_or_none("GetCodeHeaderData", st.CodeHeaderData, (_A, ip))

    def code_jit_type(self, ip: int) -> int:
        """The JIT type of the managed code holding ``ip`` (1 JIT, 2 pre-JIT); 0 where it is not
        managed code (a precode stub, an FCall, nothing)."""
        ch = self.code_header_data(ip)
        return ch.jit_type if ch is not None else 0

    def traverse_eh_info(self, ip: int) -> list[st.EHInfo] | None:
        """The exception clauses of the jitted code that holds ``ip``; None if the DAC refuses."""
        found: list[st.EHInfo] = []

        def visit(_index: int, _total: int, info: Any, _token: Any) -> int:
            found.append(st.EHInfo.from_c(st.EHInfo.C.from_address(info)))
            return 1

        cb = DUMPEHINFO(visit)
        if self._try(self.sos, SOS["TraverseEHInfo"], (_A, DUMPEHINFO, _P), ip, cb, None) & 0x80000000:
            return None
        return found

    def jit_helper_name(self, ip: int) -> str | None:
        """The name of the JIT helper at ``ip`` (JIT_New ...), if it is one."""
        types = (_A, _U32, ctypes.c_char_p, _PU32)
        buf = ctypes.create_string_buffer(256)
        needed = _U32(0)
        if self._try(self.sos, SOS["GetJitHelperFunctionName"], types, ip, len(buf), buf,
                     ctypes.byref(needed)) & 0x80000000:
            return None
        return buf.value.decode("ascii", "replace") or None

    def frame_name(self, vtable: int) -> str | None:
        return self._text(self.sos, "GetFrameName", SOS["GetFrameName"], ((_A, vtable),))

    def threadpool_data(self) -> st.ThreadpoolData | None:
        return self._record_or_none("GetThreadpoolData", st.ThreadpoolData)

    def sync_block_data(self, number: int) -> st.SyncBlockData | None:
        return self._record_or_none("GetSyncBlockData", st.SyncBlockData, (_U32, number))

    # -- statics, method slots, code versions (objects/types family) -----------------

    def static_base_address(self, mt: int) -> tuple[int, int] | None:
        """(non-GC statics, GC statics) base of a MethodTable via ISOSDacInterface14 (.NET 9+);
        None without the interface or when the call fails. A 0 base means not allocated."""
        if self.sos14 is None:
            return None
        non_gc, gc = _A(0), _A(0)
        if self._try(self.sos14, SOS14["GetStaticBaseAddress"], (_A, _PA, _PA), mt,
                     ctypes.byref(non_gc), ctypes.byref(gc)) & 0x80000000:
            return None
        return non_gc.value, gc.value

    def thread_static_base_address(self, mt: int, thread: int) -> tuple[int, int] | None:
        """(non-GC, GC) thread-static bases of ``mt`` on runtime Thread ``thread`` (.NET 9+)."""
        if self.sos14 is None:
            return None
        non_gc, gc = _A(0), _A(0)
        if self._try(self.sos14, SOS14["GetThreadStaticBaseAddress"], (_A, _A, _PA, _PA), mt, thread,
                     ctypes.byref(non_gc), ctypes.byref(gc)) & 0x80000000:
            return None
        return non_gc.value, gc.value

    def method_table_initialization_flags(self, mt: int) -> int | None:
        """MT_INITIALIZED / MT_INITIALIZATION_FAILED bits (.NET 9+), None if unknown."""
        if self.sos14 is None:
            return None
        flags = _I32(0)
        if self._try(self.sos14, SOS14["GetMethodTableInitializationFlags"], (_A, _PI32), mt,
                     ctypes.byref(flags)) & 0x80000000:
            return None
        return flags.value

    def domain_local_module_data_from_module(self, module: int) -> st.DomainLocalModuleData | None:
        """Statics bases of a module on runtimes before .NET 9."""
        return self._record_or_none("GetDomainLocalModuleDataFromModule", st.DomainLocalModuleData, (_A, module))

    def method_table_slots(self, mt: int) -> list[st.MethodSlotData] | None:
        """Every slot of a MethodTable with its MethodDesc and entry point (ISOSDacInterface15),
        or None when the runtime does not offer the enumerator."""
        if self.sos15 is None:
            return None
        out = _P()
        if self._try(self.sos15, SOS15["GetMethodTableSlotEnumerator"], (_A, _PP), mt,
                     ctypes.byref(out)) & 0x80000000 or not out.value:
            return None
        return self._drain(ComPtr(out.value, "ISOSMethodEnum"), st.MethodSlotData, batch=64)

    def method_table_collectible_data(self, mt: int) -> st.MethodTableCollectibleData | None:
        if self.sos6 is None:
            return None
        c = st.MethodTableCollectibleData.C()
        if self._try(self.sos6, SOS6["GetMethodTableCollectibleData"], (_A, _P), mt, ctypes.byref(c)) & 0x80000000:
            return None
        return st.MethodTableCollectibleData.from_c(c)

    def assembly_load_context(self, mt: int) -> int | None:
        """The AssemblyLoadContext object of ``mt``'s assembly; 0 = default ALC not created yet."""
        if self.sos8 is None:
            return None
        out = _A(0)
        if self._try(self.sos8, SOS8["GetAssemblyLoadContext"], (_A, _PA), mt, ctypes.byref(out)) & 0x80000000:
            return None
        return out.value

    def tiered_versions(self, md: int, rejit_id: int, limit: int = 10) -> list[st.TieredVersionData] | None:
        if self.sos5 is None:
            return None
        arr = (st.TieredVersionData.C * limit)()
        n = _I32(0)
        if self._try(self.sos5, SOS5["GetTieredVersions"], (_A, _I32, _P, _I32, _PI32), md, rejit_id,
                     arr, limit, ctypes.byref(n)) & 0x80000000:
            return None
        return [st.TieredVersionData.from_c(arr[i]) for i in range(min(max(n.value, 0), limit))]

    def rejit_information(self, md: int, rejit_id: int) -> st.ReJitData2 | None:
        if self.sos7 is None:
            return None
        c = st.ReJitData2.C()
        if self._try(self.sos7, SOS7["GetReJITInformation"], (_A, _I32, _P), md, rejit_id,
                     ctypes.byref(c)) & 0x80000000:
            return None
        return st.ReJitData2.from_c(c)

    def pending_rejit_id(self, md: int) -> int | None:
        """A rejit requested but not yet jitted (S_OK only when there is one)."""
        if self.sos7 is None:
            return None
        out = _I32(0)
        if self._try(self.sos7, SOS7["GetPendingReJITID"], (_A, _PI32), md, ctypes.byref(out)) != 0:
            return None
        return out.value

    def nested_exception(self, exception: int) -> tuple[int, int] | None:
        obj, nxt = _A(0), _A(0)
        if self._try(self.sos, SOS["GetNestedExceptionData"], (_A, _PA, _PA), exception,
                     ctypes.byref(obj), ctypes.byref(nxt)) & 0x80000000:
            return None
        return obj.value, nxt.value

    # -- the GC's own bookkeeping: out-of-memory record, GC_CONFIG_DRIVEN counters ----------

    def oom_data(self, heap: int | None = None) -> st.OomData | None:
        """The last OOM the GC recorded (workstation: ``heap`` None; server: the heap's address)."""
        if heap is None:
            return self._record_or_none("GetOOMStaticData", st.OomData)
        return self._record_or_none("GetOOMData", st.OomData, (_A, heap))

    def gc_interesting_info(self, heap: int | None = None) -> st.GCInterestingInfoData | None:
        """Per-heap GC_CONFIG_DRIVEN counters (None: no ISOSDacInterface3, or the GC keeps none)."""
        if self.sos3 is None:
            return None
        c = st.GCInterestingInfoData.C()
        if heap is None:
            hr = self._try(self.sos3, SOS3["GetGCInterestingInfoStaticData"], (_P,), ctypes.byref(c))
        else:
            hr = self._try(self.sos3, SOS3["GetGCInterestingInfoData"], (_A, _P), heap, ctypes.byref(c))
        return None if hr & 0x80000000 else st.GCInterestingInfoData.from_c(c)

    def gc_global_mechanisms(self) -> tuple[int, ...] | None:
        """The GC's global mechanism counters (six size_t), None when not offered."""
        if self.sos3 is None:
            return None
        arr = (ctypes.c_size_t * 6)()
        if self._try(self.sos3, SOS3["GetGCGlobalMechanisms"], (_P,), arr) & 0x80000000:
            return None
        return tuple(arr)


def open_dac(target: Any, location: DacLocation) -> SosDac:
    """Load the DAC at ``location`` and create an IXCLRDataProcess over ``target``."""
    lib = load_dac(location.dac_path)
    data_target = DataTarget(target, location.runtime.base)
    create = lib.CLRDataCreateInstance
    create.restype = ctypes.c_int32
    create.argtypes = [ctypes.POINTER(GUID), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
    out = ctypes.c_void_p()
    hr = create(ctypes.byref(IID_IXCLRDataProcess), data_target.pointer, ctypes.byref(out)) & 0xFFFFFFFF
    if hr & 0x80000000 or not out.value:
        raise DacError(f"CLRDataCreateInstance failed: {hresult_text(hr)}")
    return SosDac(location, data_target, ComPtr(out.value, "IXCLRDataProcess"))
