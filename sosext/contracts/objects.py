"""Contracts Object and Exception: what an object on the GC heap is, and what it holds.

dotnet/runtime ``docs/design/datacontracts/Object.md`` and ``Exception.md`` (version 1).
An object starts with its MethodTable pointer (low bits masked with the global
``ObjectToMethodTableUnmask``: the GC marks objects there); a string has ``m_StringLength``
UTF-16 units at ``m_FirstChar``; an array has ``m_NumComponents`` and, when it is not a
single-dimensional zero-based array, one length and one lower bound per dimension after the
``Array`` header, its data starting at base size minus the object header. A free block is
the GC's filler whose length sits where an array's does.

``ObjectData`` is filled as the runtime's DAC fills it (``GetObjectData``): the size is the
base size plus components, with no minimum-size rounding; strings, System.Object, free blocks
and arrays get their own kinds.
"""
from __future__ import annotations

from ..errors import ContractError
from ..readers.records import ExceptionObjectData, ObjectData
from .runtimetypesystem import RuntimeTypeSystem
from .targetdata import TargetData
from .typename import TypeNames

OBJ_STRING, OBJ_FREE, OBJ_OBJECT, OBJ_ARRAY, OBJ_OTHER = 0, 1, 2, 3, 4
MAX_STRING_CHARS = 1 << 28  # 512 MB of text: past this a length is damage, not a string


class Objects:
    def __init__(self, data: TargetData, rts: RuntimeTypeSystem, names: TypeNames) -> None:
        self.data = data
        self.rts = rts
        self.names = names
        self.unmask = data.global_value("ObjectToMethodTableUnmask")
        try:
            self.array_bounds_zero = data.global_value("ArrayBoundsZero")
        except ContractError:
            self.array_bounds_zero = 0

    def method_table_of(self, address: int) -> int:
        return self.data.field_pointer(address, "Object", "m_pMethTab") & ~self.unmask

    def string_length(self, address: int) -> int:
        n = self.data.field_u32(address, "String", "m_StringLength")
        if n > MAX_STRING_CHARS:
            raise ContractError(f"string {address:#x} claims {n} characters")
        return n

    def string_value(self, address: int) -> str:
        n = self.string_length(address)
        raw = self.data.read(address + self.data.offset("String", "m_FirstChar"), 2 * n)
        return raw.decode("utf-16-le", "replace")

    def object_data(self, address: int) -> ObjectData:
        rts = self.rts
        d = self.data
        mt_addr = self.method_table_of(address)
        mt = rts.checked(mt_addr)
        size = mt.base_size
        component = mt.component_size
        kind, rank, count = OBJ_OTHER, 0, 0
        elem_th = elem_type = data_ptr = bounds = lower = 0
        if mt_addr == rts.free_mt:
            kind = OBJ_FREE
            size += d.field_u32(address, "Array", "m_NumComponents") * component
        elif mt_addr == rts.string_mt:
            kind = OBJ_STRING
            size += self.string_length(address) * component
        elif mt_addr == rts.object_mt:
            kind = OBJ_OBJECT
        elif mt.is_array:
            kind = OBJ_ARRAY
            rank = rts.array_rank(mt_addr)
            count = d.field_u32(address, "Array", "m_NumComponents")
            if rts.signature_element_type(mt_addr) == 0x1D:  # SZARRAY: no bounds stored
                bounds = address + d.offset("Array", "m_NumComponents")
                lower = self.array_bounds_zero
            else:
                bounds = address + d.size("Array")
                lower = bounds + 4 * rank
            data_ptr = address + mt.base_size - d.global_value("ObjectHeaderSize")
            size += count * component
            elem_th = rts.type_param(mt_addr)
            elem_type = rts.signature_element_type(elem_th)
        return ObjectData(mt_addr, kind, size, elem_th, elem_type, rank, count, component,
                          data_ptr, bounds, lower, 0, 0)

    def object_class_name(self, address: int) -> str:
        mt = self.method_table_of(address)
        self.rts.checked(mt)
        if mt == self.rts.free_mt:
            return "Free"
        return self.names.name(mt)

    def exception_data(self, address: int) -> ExceptionObjectData:
        d = self.data

        def ptr(name: str) -> int:
            return d.field_pointer(address, "Exception", name)

        return ExceptionObjectData(
            message=ptr("_message"),
            inner_exception=ptr("_innerException"),
            stack_trace=ptr("_stackTrace"),
            watson_buckets=ptr("_watsonBuckets"),
            stack_trace_string=ptr("_stackTraceString"),
            remote_stack_trace_string=ptr("_remoteStackTraceString"),
            hresult=d.field_i32(address, "Exception", "_HResult"),
            xcode=d.field_i32(address, "Exception", "_xcode"),
        )
