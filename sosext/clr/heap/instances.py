"""Reading managed objects by their fields' names: what the commands that interpret BCL
types (timers, concurrent collections, tasks) need, and nothing more.

Field names are those of the runtime's own sources (``_dueTime``, ``_tables`` ...); a field
missing by that name means a runtime version this code does not know, which is reported
as such rather than guessed.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Collection

from ...errors import SosError
from ..typesystem.fields import ClrField

if TYPE_CHECKING:
    from .heap import ClrHeap
    from ..runtime import ClrRuntime


class MissingField(SosError):
    """A BCL type lacks a field this runtime version was expected to have (or the object is
    not of the type the caller assumed): ``method_table`` and ``field`` say which."""

    def __init__(self, message: str, method_table: int = 0, field: str = "") -> None:
        super().__init__(message)
        self.method_table = method_table
        self.field = field


class ObjectReader:
    """Fields of objects read by name, with each (MethodTable, name) looked up once."""

    def __init__(self, runtime: "ClrRuntime") -> None:
        self.runtime = runtime
        self.heap: "ClrHeap" = runtime.heap
        self._fields: dict[tuple[int, str], ClrField | None] = {}

    def method_table(self, obj: int) -> int:
        from .objects import method_table_of
        return method_table_of(self.runtime.target, obj) or 0

    def type_name(self, obj: int) -> str:
        return self.heap.types.name_of(self.method_table(obj))

    def field(self, mt: int, name: str) -> ClrField | None:
        key = (mt, name)
        if key not in self._fields:
            self._fields[key] = self.runtime.fields.field(mt, name)
        return self._fields[key]

    def has_field(self, obj: int, name: str) -> bool:
        return self.field(self.method_table(obj), name) is not None

    def read(self, obj: int, name: str, mt: int | None = None, value_class: bool = False) -> Any:
        """The value of field ``name`` of the object at ``obj`` (or, with ``value_class``, of
        the struct whose data starts at ``obj`` and whose MethodTable is ``mt``)."""
        mt = mt if mt is not None else self.method_table(obj)
        f = self.field(mt, name)
        if f is None:
            raise MissingField(f"{self.heap.types.name_of(mt)} has no field {name}: "
                               "this runtime version's layout is not supported", mt, name)
        return self.runtime.fields.read(f, f.address_in(obj, value_class))

    def is_object(self, address: int) -> bool:
        """Whether ``address`` starts an object on the heap (cheap: the walk's index)."""
        return bool(address) and self.heap.index().find(address) is not None

    def string(self, obj: int, limit: int = 4096) -> str:
        target = self.runtime.target
        n = target.read_u32(obj + 8)
        raw = target.read_partial(obj + 12, 2 * min(n, limit))
        return bytes(raw).decode("utf-16-le", errors="replace")


def objects_of_type(heap: "ClrHeap", name: str) -> list[int]:
    """Addresses, in heap order, of every object whose type is named exactly ``name``."""
    return [address for address, _ in objects_of_types(heap, (name,))]


def objects_of_types(heap: "ClrHeap", names: Collection[str]) -> list[tuple[int, str]]:
    """(address, type name), in heap order, of every object whose type is named exactly one of ``names``."""
    ix = heap.index()
    type_names = {i: n for i, mt in enumerate(ix.method_tables.tolist()) if (n := heap.types.name_of(mt)) in names}
    if not type_names:
        return []
    mask = ix.mask_type_ids(type_names)
    return [(a, type_names[t]) for a, t in zip(ix.addresses[mask].tolist(), ix.type_ids[mask].tolist())]


OBJECT_TYPE_ARRAY = 3  # DacpObjectData.ObjectType
_MAX_ELEMENTS = 1 << 24


def reference_elements(reader: ObjectReader, array: int, limit: int | None = None) -> list[int] | None:
    """The non-null elements of the reference array at ``array`` (its first ``limit``) that
    are objects on the heap; None when ``array`` is not an array of references (or ``limit``
    is more than it holds)."""
    if not array or not reader.is_object(array):
        return None
    data = reader.runtime.object_data(array)
    if data is None or data.object_type != OBJECT_TYPE_ARRAY or data.component_size != 8:
        return None
    n = data.num_components if limit is None else limit
    if not 0 <= n <= data.num_components:
        return None
    raw = bytes(reader.runtime.target.read_partial(data.array_data_ptr, 8 * min(n, _MAX_ELEMENTS)))
    values = (int.from_bytes(raw[i:i + 8], "little") for i in range(0, len(raw) - 7, 8))
    return [v for v in values if v and reader.is_object(v)]
