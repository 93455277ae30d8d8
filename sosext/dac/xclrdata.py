"""The DAC's IXCLRData* interfaces that walk stacks: task, stack walk, frame, method instance, value.

Slot numbers are derived from the method lists below, which follow the declaration order of
dotnet/runtime src/coreclr/inc/xclrdata.idl (each interface derives from IUnknown, so the
first listed method is slot 3). Every wrapper owns one reference to its interface and
releases it in ``release()`` (or at the end of a ``with`` block); every call takes the DAC's
lock, because the DAC is not thread-safe.
"""
from __future__ import annotations

import ctypes
import struct
from typing import TYPE_CHECKING, Any

from . import structs as st
from .com import ADDR, P_ADDR, P_PTR, P_U32, P_WCHAR, PTR, U32, ComPtr, failed, slot_table, utf16_buffer, utf16_text
from .sos import SOS

if TYPE_CHECKING:
    from .sos import SosDac

# IXCLRDataProcess (the object CLRDataCreateInstance returns); only the first slots are used.
PROCESS = slot_table("Flush", "StartEnumTasks", "EnumTask", "EndEnumTasks", "GetTaskByOSThreadID",
                     "GetTaskByUniqueID", "GetFlags", "IsSameObject", "GetManagedObject",
                     "GetDesiredExecutionState", "SetDesiredExecutionState", "GetAddressType",
                     "GetRuntimeNameByAddress", "StartEnumAppDomains", "EnumAppDomain", "EndEnumAppDomains",
                     "GetAppDomainByUniqueID", "StartEnumAssemblies", "EnumAssembly", "EndEnumAssemblies",
                     "StartEnumModules", "EnumModule", "EndEnumModules", "GetModuleByAddress",
                     "StartEnumMethodInstancesByAddress", "EnumMethodInstanceByAddress",
                     "EndEnumMethodInstancesByAddress")
TASK = slot_table("GetProcess", "GetCurrentAppDomain", "GetUniqueID", "GetFlags", "IsSameObject",
                  "GetManagedObject", "GetDesiredExecutionState", "SetDesiredExecutionState",
                  "CreateStackWalk", "GetOSThreadID", "GetContext", "SetContext",
                  "GetCurrentExceptionState", "Request", "GetName", "GetLastExceptionState")
STACK_WALK = slot_table("GetContext", "SetContext", "Next", "GetStackSizeSkipped", "GetFrameType",
                        "GetFrame", "Request", "SetContext2")
FRAME = slot_table("GetFrameType", "GetContext", "GetAppDomain", "GetNumArguments", "GetArgumentByIndex",
                   "GetNumLocalVariables", "GetLocalVariableByIndex", "GetCodeName", "GetMethodInstance",
                   "Request", "GetNumTypeArguments", "GetTypeArgumentByIndex")
METHOD_INSTANCE = slot_table("GetTypeInstance", "GetDefinition", "GetTokenAndScope", "GetName", "GetFlags",
                             "IsSameObject", "GetEnCVersion", "GetNumTypeArguments", "GetTypeArgumentByIndex",
                             "GetILOffsetsByAddress", "GetAddressRangesByILOffset", "GetILAddressMap",
                             "StartEnumExtents", "EnumExtent", "EndEnumExtents", "Request",
                             "GetRepresentativeEntryAddress")
VALUE = slot_table("GetFlags", "GetAddress", "GetSize", "GetBytes", "SetBytes", "GetType", "GetNumFields",
                   "GetFieldByIndex", "Request", "GetNumFields2", "StartEnumFields", "EnumField",
                   "EndEnumFields", "StartEnumFieldsByName", "EnumFieldByName", "EndEnumFieldsByName",
                   "GetFieldByToken", "GetAssociatedValue", "GetAssociatedType", "GetString",
                   "GetArrayProperties", "GetArrayElement", "EnumField2", "EnumFieldByName2",
                   "GetFieldByToken2", "GetNumLocations", "GetLocationByIndex")

MODULE = slot_table("StartEnumAssemblies", "EnumAssembly", "EndEnumAssemblies", "StartEnumTypeDefinitions",
                    "EnumTypeDefinition", "EndEnumTypeDefinitions", "StartEnumTypeInstances", "EnumTypeInstance",
                    "EndEnumTypeInstances", "StartEnumTypeDefinitionsByName", "EnumTypeDefinitionByName",
                    "EndEnumTypeDefinitionsByName", "StartEnumTypeInstancesByName", "EnumTypeInstanceByName",
                    "EndEnumTypeInstancesByName", "GetTypeDefinitionByToken", "StartEnumMethodDefinitionsByName",
                    "EnumMethodDefinitionByName", "EndEnumMethodDefinitionsByName",
                    "StartEnumMethodInstancesByName", "EnumMethodInstanceByName", "EndEnumMethodInstancesByName",
                    "GetMethodDefinitionByToken", "StartEnumDataByName", "EnumDataByName", "EndEnumDataByName",
                    "GetName", "GetFileName", "GetFlags", "IsSameObject", "StartEnumExtents", "EnumExtent",
                    "EndEnumExtents", "Request")
# dacprivate.h: IXCLRDataModule's private request answering DacpGetModuleData.
DACDATAMODULEPRIV_REQUEST_GET_MODULEDATA = 0xF0000001

# CLRDataSimpleFrameType: which frames a stack walk stops at (all of them, as SOS asks).
SIMPFRAME_UNRECOGNIZED = 0x1
SIMPFRAME_MANAGED_METHOD = 0x2
SIMPFRAME_RUNTIME_MANAGED_CODE = 0x4
SIMPFRAME_RUNTIME_UNMANAGED_CODE = 0x8
SIMPFRAME_ALL = 0xF

# dacprivate.h: a private stack-walk request answering the clr!Frame behind the current frame.
DACSTACKPRIV_REQUEST_FRAME_DATA = 0xF0000000
# ClrDataValueLocationFlag
VLOC_MEMORY = 0
VLOC_REGISTER = 1
# HRESULT_FROM_WIN32(ERROR_BUFFER_OVERFLOW): what GetBytes answers to a size query.
HR_BUFFER_OVERFLOW = 0x8007006F

# Windows CONTEXT records the DAC reads and writes: flags for a full context, size, SP and IP offsets.
CONTEXT_LAYOUT = {
    "x86_64": (0x10000B, 0x4D0, 0x98, 0xF8),
    "aarch64": (0x400007, 0x390, 0x100, 0x108),
}

_A, _PA, _U32, _PU32, _P, _PP, _PW = ADDR, P_ADDR, U32, P_U32, PTR, P_PTR, P_WCHAR

NAME_CHARS = 1024  # SOS's mdNameLen: enough for any method or parameter name


# Integer and control registers of the CONTEXT records (winnt.h layouts).
_AMD64_REGISTERS = (("rax", 0x78), ("rcx", 0x80), ("rdx", 0x88), ("rbx", 0x90), ("rsp", 0x98), ("rbp", 0xA0),
                    ("rsi", 0xA8), ("rdi", 0xB0), ("r8", 0xB8), ("r9", 0xC0), ("r10", 0xC8), ("r11", 0xD0),
                    ("r12", 0xD8), ("r13", 0xE0), ("r14", 0xE8), ("r15", 0xF0), ("rip", 0xF8))
_ARM64_REGISTERS = tuple((f"x{i}", 8 + 8 * i) for i in range(29)) + (
    ("fp", 0xF0), ("lr", 0xF8), ("sp", 0x100), ("pc", 0x108))


def context_registers(arch: str, context: bytes) -> dict[str, int]:
    """The integer registers of a CONTEXT record, by Linux name (plus cpsr/eflags)."""
    if arch == "x86_64":
        regs = {name: struct.unpack_from("<Q", context, off)[0] for name, off in _AMD64_REGISTERS}
        regs["eflags"] = struct.unpack_from("<I", context, 0x44)[0]
    else:
        regs = {name: struct.unpack_from("<Q", context, off)[0] for name, off in _ARM64_REGISTERS}
        regs["cpsr"] = struct.unpack_from("<I", context, 4)[0]
    return regs


def context_frame_pointer(arch: str, context: bytes) -> int:
    """The frame register (rbp, fp) of a CONTEXT record of ``arch``."""
    return struct.unpack_from("<Q", context, 0xA0 if arch == "x86_64" else 0xF0)[0]


def context_sp_ip(arch: str, context: bytes) -> tuple[int, int]:
    """Stack and instruction pointer of a CONTEXT record of ``arch``."""
    _flags, _size, sp_off, ip_off = CONTEXT_LAYOUT[arch]
    return struct.unpack_from("<Q", context, sp_off)[0], struct.unpack_from("<Q", context, ip_off)[0]


class _Interface:
    """One counted reference to a DAC interface, released once."""

    kind = "IUnknown"

    def __init__(self, dac: "SosDac", ptr: int) -> None:
        self.dac = dac
        self.com = ComPtr(ptr, self.kind)

    def release(self) -> None:
        with self.dac.lock:
            self.com.release()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _call(self, slot: int, argtypes: tuple[Any, ...], *args: Any) -> int:
        with self.dac.lock:
            return self.com.call(slot, argtypes, *args)

    def _out_interface(self, slot: int, lead: tuple[tuple[Any, Any], ...] = ()) -> tuple[int, int]:
        """Call a method whose last parameter is an ``[out] IFoo**``: (HRESULT, pointer)."""
        out = _P()
        types = tuple(t for t, _ in lead) + (_PP,)
        hr = self._call(slot, types, *(v for _, v in lead), ctypes.byref(out))
        return hr, out.value or 0

    def _context(self, slot: int, arch: str) -> bytes | None:
        flags, size, _sp, _ip = CONTEXT_LAYOUT[arch]
        buf = (ctypes.c_ubyte * size)()
        got = _U32(0)
        hr = self._call(slot, (_U32, _U32, _PU32, _P), flags, size, ctypes.byref(got), buf)
        # S_FALSE means the walk has no valid frame: as good as a failure for a caller.
        if failed(hr) or hr == 1:
            return None
        return bytes(buf)


class Task(_Interface):
    """IXCLRDataTask: a managed thread."""

    kind = "IXCLRDataTask"

    def create_stack_walk(self, flags: int = SIMPFRAME_ALL) -> tuple[int, "StackWalk | None"]:
        hr, ptr = self._out_interface(TASK["CreateStackWalk"], ((_U32, flags),))
        return hr, (StackWalk(self.dac, ptr) if not failed(hr) and ptr else None)


class StackWalk(_Interface):
    """IXCLRDataStackWalk. Created on the thread's first frame (despite the IDL's comment, the
    DAC's implementation positions it there, and SOS relies on that); ``next()`` moves on."""

    kind = "IXCLRDataStackWalk"

    def context(self, arch: str) -> bytes | None:
        return self._context(STACK_WALK["GetContext"], arch)

    def next(self) -> int:
        """S_OK (0) on a new frame, S_FALSE (1) at the end, a failure HRESULT if the walk broke."""
        return self._call(STACK_WALK["Next"], ())

    def frame_type(self) -> tuple[int, int] | None:
        simple, detailed = _U32(0), _U32(0)
        if failed(self._call(STACK_WALK["GetFrameType"], (_PU32, _PU32),
                             ctypes.byref(simple), ctypes.byref(detailed))):
            return None
        return simple.value, detailed.value

    def frame_address(self) -> int:
        """The runtime Frame (clr!Frame) the walk stands on, or 0 for a managed method's frame."""
        out = _A(0)
        hr = self._call(STACK_WALK["Request"], (_U32, _U32, _P, _U32, _P),
                        DACSTACKPRIV_REQUEST_FRAME_DATA, 0, None, ctypes.sizeof(out), ctypes.byref(out))
        return 0 if failed(hr) else out.value

    def frame(self) -> "Frame | None":
        hr, ptr = self._out_interface(STACK_WALK["GetFrame"])
        return Frame(self.dac, ptr) if not failed(hr) and ptr else None


class Frame(_Interface):
    """IXCLRDataFrame: one frame's method, arguments and locals."""

    kind = "IXCLRDataFrame"

    def _count(self, slot: int) -> int | None:
        n = _U32(0)
        if failed(self._call(slot, (_PU32,), ctypes.byref(n))):
            return None
        return n.value

    def num_arguments(self) -> int | None:
        return self._count(FRAME["GetNumArguments"])

    def num_locals(self) -> int | None:
        return self._count(FRAME["GetNumLocalVariables"])

    def _value(self, slot: int, index: int) -> tuple["Value | None", str]:
        out = _P()
        name = utf16_buffer(NAME_CHARS)
        got = _U32(0)
        hr = self._call(slot, (_U32, _PP, _U32, _PU32, _PW), index, ctypes.byref(out), NAME_CHARS,
                        ctypes.byref(got), name)
        if failed(hr) or not out.value:
            return None, ""
        return Value(self.dac, out.value), utf16_text(name)

    def argument(self, index: int) -> tuple["Value | None", str]:
        """The value of argument ``index`` (0 = ``this`` for instance methods) and its name."""
        return self._value(FRAME["GetArgumentByIndex"], index)

    def local(self, index: int) -> tuple["Value | None", str]:
        """The value of local ``index`` and its name (the DAC knows no local names: "")."""
        return self._value(FRAME["GetLocalVariableByIndex"], index)

    def method_instance(self) -> "MethodInstance | None":
        hr, ptr = self._out_interface(FRAME["GetMethodInstance"])
        return MethodInstance(self.dac, ptr) if not failed(hr) and ptr else None


class MethodInstance(_Interface):
    kind = "IXCLRDataMethodInstance"

    def name(self) -> str | None:
        buf = utf16_buffer(NAME_CHARS)
        got = _U32(0)
        hr = self._call(METHOD_INSTANCE["GetName"], (_U32, _U32, _PU32, _PW), 0, NAME_CHARS,
                        ctypes.byref(got), buf)
        return utf16_text(buf) if hr == 0 else None  # S_FALSE: truncated, not worth showing

    def il_offsets(self, address: int) -> list[int] | None:
        """The IL offsets the JIT mapped native ``address`` to (several when code was inlined or
        duplicated); special values are the CLRDATA_IL_OFFSET_* markers. None on failure."""
        n = 8
        for _ in range(2):
            buf = (_U32 * n)()
            need = _U32(0)
            hr = self._call(METHOD_INSTANCE["GetILOffsetsByAddress"], (_A, _U32, _PU32, _P),
                            address, n, ctypes.byref(need), buf)
            if failed(hr):
                return None
            if need.value <= n:
                return list(buf[: need.value])
            n = min(need.value, 4096)
        return list(buf[:n])


    def il_address_map(self) -> list[tuple[int, int, int]] | None:
        """The JIT's IL-to-native map: (IL offset or CLRDATA_IL_OFFSET_* marker, native start,
        native end) per entry, in the JIT's order. None on failure."""
        need = _U32(0)
        hr = self._call(METHOD_INSTANCE["GetILAddressMap"], (_U32, _PU32, _P), 0, ctypes.byref(need), None)
        if failed(hr) or not 0 < need.value <= 1 << 16:
            return None if failed(hr) else []
        buf = (IL_ADDRESS_MAP * need.value)()
        hr = self._call(METHOD_INSTANCE["GetILAddressMap"], (_U32, _PU32, _P), need.value, ctypes.byref(need), buf)
        if failed(hr):
            return None
        return [(e.il_offset, e.start_address, e.end_address) for e in buf[: need.value]]


class IL_ADDRESS_MAP(ctypes.Structure):  # noqa: N801 - CLRDATA_IL_ADDRESS_MAP
    _fields_ = [("il_offset", ctypes.c_uint32), ("start_address", ctypes.c_uint64),
                ("end_address", ctypes.c_uint64), ("type", ctypes.c_uint32)]


assert ctypes.sizeof(IL_ADDRESS_MAP) == 32


class Value(_Interface):
    """IXCLRDataValue: where a variable lives and its bytes."""

    kind = "IXCLRDataValue"

    def flags(self) -> int | None:
        """CLRDataValueFlag bits (primitive, value type, string, array, reference ...)."""
        out = _U32(0)
        return None if failed(self._call(VALUE["GetFlags"], (_PU32,), ctypes.byref(out))) else out.value

    def size(self) -> int | None:
        out = _A(0)
        return None if failed(self._call(VALUE["GetSize"], (_PA,), ctypes.byref(out))) else out.value

    def address(self) -> int | None:
        """Where the value lives when it is one piece of memory (None in a register, or split)."""
        out = _A(0)
        return None if failed(self._call(VALUE["GetAddress"], (_PA,), ctypes.byref(out))) else out.value

    def locations(self) -> list[tuple[int, int]] | None:
        """(flags, address) per piece: VLOC_MEMORY with its address or VLOC_REGISTER; None if unknown."""
        n = _U32(0)
        if failed(self._call(VALUE["GetNumLocations"], (_PU32,), ctypes.byref(n))):
            return None
        out = []
        for i in range(n.value):
            flags, addr = _U32(0), _A(0)
            if failed(self._call(VALUE["GetLocationByIndex"], (_U32, _PU32, _PA), i,
                                 ctypes.byref(flags), ctypes.byref(addr))):
                return None
            out.append((flags.value, addr.value))
        return out

    def data(self) -> tuple[bytes | None, bool]:
        """(bytes, ok): (None, True) when the DAC has no data for it, (None, False) when reading failed."""
        size = _U32(0)
        hr = self._call(VALUE["GetBytes"], (_U32, _PU32, _P), 0, ctypes.byref(size), None)
        if hr != HR_BUFFER_OVERFLOW:
            return None, True
        buf = (ctypes.c_ubyte * max(size.value, 1))()
        hr = self._call(VALUE["GetBytes"], (_U32, _PU32, _P), size.value, ctypes.byref(size), buf)
        if failed(hr):
            return None, False
        return bytes(buf[: size.value]), True




def _require_dac(reader: object) -> None:
    """These interfaces exist only in the DAC: another reader says so in one line."""
    if getattr(reader, "name", "dac") != "dac":
        from ..errors import ReaderUnsupported
        raise ReaderUnsupported("stack walks, source lines and module images need the DAC: "
                                "--reader dac (or setreader dac) answers them")


def method_instance_by_address(dac: "SosDac", address: int) -> MethodInstance | None:
    """The (first) method instance whose native code holds ``address``, or None."""
    _require_dac(dac)
    handle = ctypes.c_uint64(0)
    with dac.lock:
        hr = dac.process.call(PROCESS["StartEnumMethodInstancesByAddress"], (_A, _P, ctypes.POINTER(ctypes.c_uint64)),
                              address, None, ctypes.byref(handle))
    if hr != 0:  # S_FALSE: no method there, and no enumeration to end
        return None
    out = _P()
    try:
        with dac.lock:
            hr = dac.process.call(PROCESS["EnumMethodInstanceByAddress"], (ctypes.POINTER(ctypes.c_uint64), _PP),
                                  ctypes.byref(handle), ctypes.byref(out))
    finally:
        with dac.lock:
            dac.process.call(PROCESS["EndEnumMethodInstancesByAddress"], (ctypes.c_uint64,), handle.value)
    if hr != 0 or not out.value:
        return None
    return MethodInstance(dac, out.value)


def task_by_os_thread_id(dac: "SosDac", os_tid: int) -> tuple[int, Task | None]:
    """The managed task running on OS thread ``os_tid``: (HRESULT, task or None)."""
    _require_dac(dac)
    out = _P()
    with dac.lock:
        hr = dac.process.call(PROCESS["GetTaskByOSThreadID"], (_U32, _PP), os_tid, ctypes.byref(out))
    if hr != 0 or not out.value:
        return hr, None
    return hr, Task(dac, out.value)


def module_load_data(dac: "SosDac", module: int) -> st.GetModuleData | None:
    """How the runtime loaded module ``module`` (flat file or mapped image, its extent), through
    ISOSDacInterface::GetModule's IXCLRDataModule; None when the DAC does not say."""
    _require_dac(dac)
    out = _P()
    with dac.lock:
        hr = dac.sos.call(SOS["GetModule"], (_A, _PP), module, ctypes.byref(out))
    if failed(hr) or not out.value:
        return None
    with _Interface(dac, out.value) as mod:
        c = st.GetModuleData.C()
        hr = mod._call(MODULE["Request"], (_U32, _U32, _P, _U32, ctypes.POINTER(st.GetModuleData.C)),
                       DACDATAMODULEPRIV_REQUEST_GET_MODULEDATA, 0, None, ctypes.sizeof(c), ctypes.byref(c))
    return None if failed(hr) else st.GetModuleData.from_c(c)


def module_file_name(dac: "SosDac", module: int) -> str | None:
    """IXCLRDataModule::GetFileName of module ``module``: what SOS shows for a module whose
    PEAssembly names no file (an assembly loaded from bytes: "Foo.dll"); None when the DAC does not say."""
    out = _P()
    with dac.lock:
        hr = dac.sos.call(SOS["GetModule"], (_A, _PP), module, ctypes.byref(out))
    if failed(hr) or not out.value:
        return None
    with _Interface(dac, out.value) as mod:
        got = _U32(0)
        buf = utf16_buffer(NAME_CHARS)
        hr = mod._call(MODULE["GetFileName"], (_U32, _PU32, _PW), NAME_CHARS, ctypes.byref(got), buf)
    return utf16_text(buf) if hr == 0 else None
