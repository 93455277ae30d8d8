"""Reading managed objects by their fields' names: what the commands that interpret BCL
types (timers, concurrent collections, tasks) need, and nothing more.

Field names are those of the runtime's own sources (``_dueTime``, ``_tables`` ...); a field
missing by that name means a runtime version this code does not know, which is reported
as such rather than guessed.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import SosError
from .fields import ClrField

if TYPE_CHECKING:
    from .heap import ClrHeap
    from .runtime import ClrRuntime


class MissingField(SosError):
    """A BCL type lacks a field this runtime version was expected to have."""


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
                               "this runtime version's layout is not supported")
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
    ix = heap.index()
    ids = [i for i, mt in enumerate(ix.method_tables.tolist()) if heap.types.name_of(mt) == name]
    if not ids:
        return []
    return ix.addresses[ix.mask_type_ids(ids)].tolist()
