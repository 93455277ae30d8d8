"""The Thread contract's thread-local statics: where one thread keeps a type's [ThreadStatic]s.

dotnet/runtime ``docs/design/datacontracts/Thread.md`` (``GetThreadLocalStaticBase``, .NET 9+).
A type with thread statics has a ``ThreadStaticsInfo`` just before its MethodTable's auxiliary
data, holding two ``TLSIndex``es (non-GC, GC). A TLSIndex is allocated unless its raw value is
all ones; its top byte says where the slot is and the low 24 bits are an offset:

* 0, non-collectible: entry ``offset - NumberOfTlsOffsetsNotUsedInNoncollectibleArray`` of the
  managed object[] ``ThreadLocalData.NonCollectibleTlsArrayData`` (elements start
  ``PtrArrayOffsetToDataArray`` bytes into it), if ``NonCollectibleTlsDataCount`` covers it;
* 1, collectible: entry ``offset`` of the array ``CollectibleTlsArrayData``, if covered;
* 2, direct: ``offset`` bytes into the thread's ``ThreadLocalData`` itself.

A slot not found there may still be in flight: ``InFlightData`` chains ``InFlightTLSData``
records (``TlsIndex``, ``TLSData``, ``Next``) of statics being set up.
"""
from __future__ import annotations

from ..errors import ContractError
from .targetdata import TargetData

TLS_UNALLOCATED = 0xFFFFFFFF
TLS_NON_COLLECTIBLE, TLS_COLLECTIBLE, TLS_DIRECT = 0, 1, 2
MAX_IN_FLIGHT = 10_000
MAX_TLS_COUNT = 1 << 24


class ThreadStatics:
    def __init__(self, data: TargetData) -> None:
        self.data = data

    def static_base(self, thread: int, tls_index_address: int) -> int:
        """The base of the statics that the TLSIndex at ``tls_index_address`` names on ``thread``
        (0: none yet)."""
        d = self.data
        tld = d.field_pointer(thread, "Thread", "ThreadLocalDataPtr")
        if not tld:
            return 0
        raw = d.field_u32(tls_index_address, "TLSIndex", "TLSIndexRawIndex")
        if raw == TLS_UNALLOCATED:
            return 0
        kind, offset = raw >> 24, raw & 0xFFFFFF
        base = 0
        if kind == TLS_NON_COLLECTIBLE:
            count = d.field_u32(tld, "ThreadLocalData", "NonCollectibleTlsDataCount")
            if offset < min(count, MAX_TLS_COUNT):
                array = d.field_pointer(tld, "ThreadLocalData", "NonCollectibleTlsArrayData")
                index = offset - d.global_value("NumberOfTlsOffsetsNotUsedInNoncollectibleArray")
                if array and index >= 0:
                    base = d.pointer(array + d.global_value("PtrArrayOffsetToDataArray") + index * d.pointer_size)
        elif kind == TLS_COLLECTIBLE:
            count = d.field_u32(tld, "ThreadLocalData", "CollectibleTlsDataCount")
            if offset < min(count, MAX_TLS_COUNT):
                array = d.field_pointer(tld, "ThreadLocalData", "CollectibleTlsArrayData")
                base = d.pointer(array + offset * d.pointer_size) if array else 0
        elif kind == TLS_DIRECT:
            base = tld + offset
        else:
            raise ContractError(f"TLS index {raw:#x} of an unknown kind")
        if base:
            return base
        node = d.field_pointer(tld, "ThreadLocalData", "InFlightData")
        for _ in range(MAX_IN_FLIGHT):
            if not node:
                return 0
            if d.field_u32(node + d.offset("InFlightTLSData", "TlsIndex"), "TLSIndex", "TLSIndexRawIndex") == raw:
                return d.field_pointer(node, "InFlightTLSData", "TLSData")
            node = d.field_pointer(node, "InFlightTLSData", "Next")
        raise ContractError(f"thread {thread:#x}: the in-flight TLS chain does not end")
