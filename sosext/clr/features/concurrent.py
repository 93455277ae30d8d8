"""System.Collections.Concurrent.ConcurrentDictionary's items, read from its buckets.

A dictionary keeps its state in ``_tables`` (a Tables object) whose ``_buckets`` array holds
the head of each bucket's linked list of Node objects (``_key``, ``_value``, ``_next``). Since
.NET 8 each bucket is a VolatileNode struct wrapping the head in ``_node``; before, the
array held the Nodes themselves. .NET Framework used ``m_`` names.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from ...errors import SosError
from ..typesystem.fields import ClrField
from ..heap.instances import ObjectReader
from ...formats.metadata.signatures import ElementType as ET

if TYPE_CHECKING:
    from ..runtime import ClrRuntime

# ClrMD's spelling and the runtime's (which sosext's type names use); nested types such as
# ConcurrentDictionary`2+Node match neither.
DICTIONARY_PREFIXES = ("System.Collections.Concurrent.ConcurrentDictionary<",
                       "System.Collections.Concurrent.ConcurrentDictionary`2[")
_MAX_ITEMS = 1 << 26


@dataclass(frozen=True, slots=True)
class ClrValue:
    """A field's value as SOS shows it in collection dumps."""

    kind: str  # "null", "string", "array", "object", "primitive", "struct"
    address: int = 0  # the object, or the struct's data
    method_table: int = 0  # a struct's MethodTable
    element_type: int = 0  # a primitive's CorElementType
    value: object = None  # a primitive's value, or a string's text
    type_name: str = ""


@dataclass(frozen=True, slots=True)
class DictionaryItem:
    key: ClrValue
    value: ClrValue


def read_concurrent_dictionary(runtime: "ClrRuntime", address: int) -> Iterator[DictionaryItem]:
    """The dictionary's items, bucket by bucket. The caller has checked the object's type."""
    r = ObjectReader(runtime)
    p = "_" if r.has_field(address, "_tables") else "m_"
    tables = r.read(address, p + "tables")
    if not r.is_object(tables):
        raise SosError(f"ConcurrentDictionary at {address:#x} has no {p}tables")
    buckets = r.read(tables, p + "buckets")
    if not r.is_object(buckets):
        raise SosError(f"ConcurrentDictionary tables at {tables:#x} has no {p}buckets")
    arr = runtime.reader.object_data(buckets)
    if arr is None or arr.object_type != 3:
        raise SosError(f"{buckets:#x} is not an array")
    element_mt = arr.element_type_handle
    wrapped = arr.element_type == ET.VALUETYPE  # .NET 8+: VolatileNode structs
    target = runtime.target
    count = 0
    for i in range(arr.num_components):
        slot = arr.array_data_ptr + i * arr.component_size
        node = r.read(slot, "_node", element_mt, value_class=True) if wrapped else target.read_pointer(slot)
        seen: set[int] = set()
        while node and node not in seen and r.is_object(node):
            seen.add(node)
            count += 1
            if count > _MAX_ITEMS:
                raise SosError(f"ConcurrentDictionary at {address:#x} has more than {_MAX_ITEMS} items: corrupt?")
            yield DictionaryItem(_value(r, node, p + "key"), _value(r, node, p + "value"))
            node = r.read(node, p + "next")


def _value(r: ObjectReader, node: int, name: str, mt: int | None = None, value_class: bool = False) -> ClrValue:
    """Field ``name`` of the object at ``node`` (or of the struct there, with ``mt``)."""
    mt = mt if mt is not None else r.method_table(node)
    f: ClrField | None = r.field(mt, name)
    if f is None:
        raise SosError(f"{r.heap.types.name_of(mt)} has no field {name}: this runtime version's layout is not supported")
    where = f.address_in(node, value_class)
    if f.is_reference:
        obj = r.runtime.target.read_pointer(where)
        if not obj:
            return ClrValue("null")
        omt = r.method_table(obj)
        heap = r.heap
        name_ = heap.types.name_of(omt)
        if omt == heap.string_mt:
            return ClrValue("string", obj, omt, value=r.string(obj), type_name=name_)
        t = heap.types.get(omt)
        if t is not None and t.is_array:
            return ClrValue("array", obj, omt, type_name=name_)
        return ClrValue("object", obj, omt, type_name=name_)
    if f.is_struct:
        return ClrValue("struct", where, f.type_mt, type_name=r.heap.types.name_of(f.type_mt) if f.type_mt else "")
    return ClrValue("primitive", where, f.type_mt, f.element_type, r.runtime.fields.read(f, where))


QUEUE_PREFIXES = ("System.Collections.Concurrent.ConcurrentQueue<",
                  "System.Collections.Concurrent.ConcurrentQueue`1[")


def read_concurrent_queue(runtime: "ClrRuntime", address: int, slot_order: bool = False) -> Iterator[ClrValue]:
    """The items of a ConcurrentQueue, oldest first (``slot_order``: each segment's in the order
    of their slots, as SOS's thread pool commands list them, which differs once the ring wraps).

    The queue is a list of segments from ``_head`` on (``_nextSegment``); a segment's ``_slots``
    array of Slot structs (``Item``, ``SequenceNumber``) is a ring, and its ``_headAndTail``
    (``Head``, ``Tail``) counts the items dequeued and enqueued. A segment frozen for
    enqueues (once a newer one exists) has ``2 * slots`` added to Tail. SOS prints every slot
    of every segment; the items are those in [Head, Tail), which is what this reads. Struct
    items (not primitives) are not read: as SOS, the segment's slots array stands for them.
    """
    r = ObjectReader(runtime)
    seg = r.read(address, "_head")
    seen: set[int] = set()
    count = 0
    while seg and seg not in seen and r.is_object(seg):
        seen.add(seg)
        slots = r.read(seg, "_slots")
        arr = runtime.reader.object_data(slots) if slots and r.is_object(slots) else None
        if arr is None or arr.object_type != 3:
            raise SosError(f"ConcurrentQueue segment {seg:#x} has no slots array")
        smt = r.method_table(seg)
        ht = r.field(smt, "_headAndTail")
        if ht is None or not ht.type_mt:
            raise SosError(f"{r.type_name(seg)} has no _headAndTail: this runtime version's layout is not supported")
        at = ht.address_in(seg)
        head = r.read(at, "Head", ht.type_mt, value_class=True)
        tail = r.read(at, "Tail", ht.type_mt, value_class=True)
        n = arr.num_components
        if n and r.field(smt, "_frozenForEnqueues") is not None and r.read(seg, "_frozenForEnqueues"):
            tail -= 2 * n
        if n == 0 or n & (n - 1) or not 0 <= tail - head <= n:
            raise SosError(f"ConcurrentQueue segment {seg:#x} has an impossible head {head} and tail {tail}")
        item = r.field(arr.element_type_handle, "Item") if arr.element_type_handle else None
        if item is not None and item.is_struct:
            # Items that are structs (not primitives): SOS names the segment's slots array for
            # dumparray instead of the items, once per segment, whatever the queue holds.
            yield ClrValue("array", slots)
            seg = r.read(seg, "_nextSegment")
            continue
        for i in (sorted(range(head, tail), key=lambda k: k & (n - 1)) if slot_order else range(head, tail)):
            count += 1
            if count > _MAX_ITEMS:
                raise SosError(f"ConcurrentQueue at {address:#x} has more than {_MAX_ITEMS} items: corrupt?")
            slot = arr.array_data_ptr + (i & (n - 1)) * arr.component_size
            yield _value(r, slot, "Item", arr.element_type_handle, value_class=True)
        seg = r.read(seg, "_nextSegment")
