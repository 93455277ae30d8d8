"""Exception objects: type, message, inner exception, HResult and the stack trace the runtime recorded.

While an exception propagates, the runtime appends one element per frame to the exception's
``_stackTrace`` field. On .NET 9+ (verified on 10.0) that field is either a ``byte[]`` or an
``object[]`` whose element 0 is that ``byte[]`` (the other elements keep collectible or dynamic
methods alive). The ``byte[]``'s payload starts with a header ``{u32 count; u32
keepAliveItemsCount; Thread* thread}`` (16 bytes on 64-bit; before .NET 9 ``{size_t count;
Thread* thread}``, same size, same count position) followed by ``count`` StackTraceElement
records ``{ip, sp, MethodDesc*, i32 flags}`` padded to 4 pointers (32 bytes on 64-bit).
"""
from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import SosError
from ..addresses import classifier
from ..heap.objects import string_text
from .stacks import module_file_name

if TYPE_CHECKING:
    from ..runtime import ClrRuntime

STACK_TRACE_HEADER = 16  # 64-bit
STACK_TRACE_ELEMENT = 32  # 64-bit: ip, sp, pFunc, flags + padding
EXCEPTION_COMPLUS = 0xE0434352  # the SEH code of a managed throw; anything else came from a fault
# HResults of exceptions the runtime makes from hardware faults (SOS's "async" exceptions).
ASYNC_HRESULTS = {0x80070216, 0x80131516, 0x80020012, 0x80131537, 0x80004003, 0x80131541}
OBJECT_TYPE_ARRAY = 3  # DacpObjectData.ObjectType
MAX_STRING_CHARS = 0x100000  # a message longer than this is shown cut


class StackTraceState(enum.Enum):
    NONE = "none"  # no stack trace object: never thrown
    NOT_AVAILABLE = "not available"  # an empty array
    UNDECIPHERABLE = "undecipherable"  # the header says no frames
    OK = "ok"


@dataclass(frozen=True, slots=True)
class StackTraceFrame:
    sp: int
    ip: int  # as recorded (+1 for faults on x64, as SOS shows it)
    method_desc: int
    flags: int
    module: str  # file name of the method's module, "" when unknown
    method_name: str  # "Namespace.Type.Method(Args)", "" when unknown
    offset: int  # ip - start of the method's native code

    @property
    def is_last_from_foreign_trace(self) -> bool:
        return bool(self.flags & 1)


@dataclass(frozen=True, slots=True)
class ClrExceptionInfo:
    address: int
    method_table: int
    type_name: str
    message: str | None  # None: no message object
    inner: int  # inner exception object, 0 if none
    inner_type: str | None
    stack_trace_object: int  # the _stackTrace field's value
    stack_trace_state: StackTraceState
    frames: tuple[StackTraceFrame, ...]
    stack_trace_string: str | None
    hresult: int  # unsigned 32-bit
    xcode: int

    @property
    def is_async(self) -> bool:
        """Raised by a hardware fault rather than a throw (SOS adjusts IPs of these)."""
        return self.xcode != EXCEPTION_COMPLUS or self.hresult in ASYNC_HRESULTS


class NotAnException(SosError):
    def __init__(self, address: int) -> None:
        self.address = address
        super().__init__("Not a valid exception object")


class InvalidExceptionObject(SosError):
    def __init__(self, address: int) -> None:
        self.address = address
        super().__init__(f"Invalid exception object: {address:016x}")


def is_exception(runtime: "ClrRuntime", mt: int) -> bool:
    """True when the MethodTable is System.Exception or derives from it."""
    exception_mt = runtime.globals.exception_method_table
    types = runtime.types
    seen: set[int] = set()
    while mt and mt not in seen:
        if mt == exception_mt:
            return True
        seen.add(mt)
        t = types.get(mt)
        if t is None:
            return False
        mt = t.parent
    return False


def read_exception(runtime: "ClrRuntime", address: int) -> ClrExceptionInfo:
    """Everything SOS's printexception shows about the exception object at ``address``."""
    types = runtime.types
    dac = runtime.reader
    # Without a GC heap (a triage dump) there is nothing to check the address against: the
    # runtime's own object data (which validates the MethodTable) has to do.
    checks = classifier(runtime) if runtime.has_gc_heap else None
    if checks is None or checks.object_or_none(address) is not None:
        od = dac.object_data(address)
    else:
        od = None
    if od is None:
        raise InvalidExceptionObject(address)
    mt = od.method_table
    if not is_exception(runtime, mt):
        raise NotAnException(address)
    data = dac.exception_object_data(address)
    if data is None:
        raise SosError(f"the runtime gives no exception data for {address:#x}")
    message = _string(runtime, data.message)
    inner_type = None
    if data.inner_exception:
        inner_mt = _method_table_of(runtime, data.inner_exception)
        valid = inner_mt and (checks.is_method_table(inner_mt) if checks is not None else types.get(inner_mt))
        inner_type = types.name_of(inner_mt) if valid else None
    hresult = data.hresult & 0xFFFFFFFF
    xcode = data.xcode & 0xFFFFFFFF
    is_async = xcode != EXCEPTION_COMPLUS or hresult in ASYNC_HRESULTS
    state, frames = _stack_trace(runtime, data.stack_trace, is_async)
    trace_text = _string(runtime, data.stack_trace_string)
    return ClrExceptionInfo(address, mt, types.name_of(mt), message, data.inner_exception, inner_type,
                            data.stack_trace, state, frames, trace_text, hresult, xcode)


def _string(runtime: "ClrRuntime", address: int) -> str | None:
    """The text of a System.String field's value. The .NET 8 DAC does not answer for strings on
    the frozen (NonGC) heap, where string literals live: those are read from memory."""
    if not address:
        return None
    text = runtime.reader.object_string(address)
    if text is None and _method_table_of(runtime, address) == runtime.globals.string_method_table:
        text = string_text(runtime.target, address, max_chars=MAX_STRING_CHARS)
    return text


def _method_table_of(runtime: "ClrRuntime", obj: int) -> int:
    try:
        return runtime.target.read_pointer(obj) & ~7
    except SosError:
        return 0


def _stack_trace(runtime: "ClrRuntime", obj: int, is_async: bool) -> tuple[StackTraceState, tuple[StackTraceFrame, ...]]:
    if not obj:
        return StackTraceState.NONE, ()
    dac = runtime.reader
    checks = classifier(runtime) if runtime.has_gc_heap else None

    def object_data(address: int):  # type: ignore[no-untyped-def]
        if checks is not None and checks.object_or_none(address) is None:
            return None
        return dac.object_data(address)

    od = object_data(obj)
    if od is None:
        return StackTraceState.NOT_AVAILABLE, ()
    if od.object_type == OBJECT_TYPE_ARRAY and od.element_type_handle == runtime.globals.object_method_table:
        # object[]: element 0 is the byte[] with the frames, the rest keep methods alive.
        if not od.num_components:
            return StackTraceState.NOT_AVAILABLE, ()
        try:
            obj = runtime.target.read_pointer(od.array_data_ptr)
        except SosError:
            return StackTraceState.NOT_AVAILABLE, ()
        od = object_data(obj) if obj else None
        if od is None:
            return StackTraceState.NOT_AVAILABLE, ()
    length = od.num_components
    if not length:
        return StackTraceState.NOT_AVAILABLE, ()
    raw = bytes(runtime.target.read_partial(od.array_data_ptr, length))
    if len(raw) < STACK_TRACE_HEADER:
        return StackTraceState.NOT_AVAILABLE, ()
    count = struct.unpack_from("<I", raw, 0)[0]
    if count == 0:
        return StackTraceState.UNDECIPHERABLE, ()
    count = min(count, (len(raw) - STACK_TRACE_HEADER) // STACK_TRACE_ELEMENT)
    adjust = 1 if is_async and runtime.target.arch == "x86_64" else 0
    frames = []
    for i in range(count):
        ip, sp, md, flags = struct.unpack_from("<QQQi", raw, STACK_TRACE_HEADER + i * STACK_TRACE_ELEMENT)
        frame = _frame(runtime, sp, ip + adjust, md, flags)
        if frame is not None:
            frames.append(frame)
    return StackTraceState.OK, tuple(frames)


def _frame(runtime: "ClrRuntime", sp: int, ip: int, md: int, flags: int) -> StackTraceFrame | None:
    dac = runtime.reader
    # The MethodDesc comes from the trace's bytes in target memory: validate it first.
    mdd = dac.method_desc_data(md) if md and classifier(runtime).is_method_desc(md) else None
    if mdd is None:
        return None  # SOS leaves out frames whose MethodDesc it cannot read
    name = dac.method_desc_name(md) or ""
    module = module_file_name(runtime, mdd.module_ptr)
    if "!" in name and not module:
        module, name = name.split("!", 1)
    return StackTraceFrame(sp, ip, md, flags, module, name, (ip - mdd.native_code_addr) & 0xFFFFFFFFFFFFFFFF)


