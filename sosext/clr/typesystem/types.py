"""MethodTables as the heap walk and the commands see them.

The walk only needs a MethodTable's object-size facts (base size, component size); the
commands also want its name and module. Both come from the DAC once per MethodTable and
are cached for the life of the target generation.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .typenames import csharp_name

if TYPE_CHECKING:
    from ...dac.sos import SosDac

MIN_OBJECT_SIZE = 24  # Align(min_obj_size) on 64-bit: header + MethodTable + one pointer


@dataclass(slots=True)
class ClrType:
    """A MethodTable and what the runtime says about it."""

    method_table: int
    base_size: int  # bytes, for System.String including the terminator
    component_size: int  # bytes per array element / character; 0 for fixed-size types
    contains_pointers: bool
    is_free: bool
    module: int
    canonical: int  # DacpMethodTableData.Class: canonical MT (.NET 9+) or EEClass
    parent: int
    token: int
    num_methods: int
    num_interfaces: int
    num_vtable_slots: int
    num_virtuals: int
    is_dynamic: bool
    attr_class: int
    _name: str | None = field(default=None, repr=False)
    _heap: "TypeCache | None" = field(default=None, repr=False)

    @property
    def name(self) -> str:
        if self._name is None:
            self._name = self._heap.name_of(self.method_table) if self._heap else unknown_type_name(self.method_table)
        return self._name

    @property
    def is_array(self) -> bool:
        return self.component_size != 0 and not self.is_string and not self.is_free

    @property
    def is_string(self) -> bool:
        return self._heap is not None and self.method_table == self._heap.string_mt

    def object_size(self, num_components: int = 0) -> int:
        return (self.base_size + self.component_size * num_components + 7) & ~7


def unknown_type_name(mt: int) -> str:
    return f"<unknown_type_{mt:x}>"


class TypeCache:
    """MethodTable address -> ClrType, filled from the DAC on first use."""

    def __init__(self, dac: "SosDac", string_mt: int, free_mt: int) -> None:
        self.reader = dac
        self.string_mt = string_mt
        self.free_mt = free_mt
        self._types: dict[int, ClrType | None] = {}
        self._names: dict[int, str] = {}
        self._csharp: dict[int, str] = {}

    def get(self, mt: int) -> ClrType | None:
        """The type at ``mt``, or None when the DAC does not recognise a MethodTable there."""
        try:
            return self._types[mt]
        except KeyError:
            pass
        t = self._load(mt)
        self._types[mt] = t
        return t

    def _load(self, mt: int) -> ClrType | None:
        if mt == 0 or mt & 7:
            return None
        d = self.reader.method_table_data(mt)
        if d is None:
            return None
        base = d.base_size
        if mt == self.string_mt:
            base += d.component_size  # the DAC leaves out the string terminator
        return ClrType(
            method_table=mt, base_size=base, component_size=d.component_size,
            contains_pointers=bool(d.contains_pointers), is_free=bool(d.is_free) or mt == self.free_mt,
            module=d.module, canonical=d.klass, parent=d.parent_method_table, token=d.token,
            num_methods=d.num_methods, num_interfaces=d.num_interfaces,
            num_vtable_slots=d.num_vtable_slots, num_virtuals=d.num_virtuals,
            is_dynamic=bool(d.is_dynamic), attr_class=d.attr_class, _heap=self)

    def name_of(self, mt: int) -> str:
        name = self._names.get(mt)
        if name is None:
            if mt == self.free_mt:
                name = "Free"
            else:
                name = self.reader.method_table_name(mt) or unknown_type_name(mt)
            self._names[mt] = name
        return name

    def csharp_name_of(self, mt: int) -> str:
        """The type's name as ClrMD's ``ClrType.Name`` gives it (``List<System.String>``): what
        SOS's managed commands (dumpheap, gcroot, objsize …) print. :meth:`name_of` is the
        runtime's own name, which SOS's native commands (dumpobj, dumpmt …) print."""
        name = self._csharp.get(mt)
        if name is None:
            raw = self.name_of(mt)
            # ClrMD gives such a type no name; SOS's type column then shows "Unknown (MethodTable: …)".
            name = f"Unknown (MethodTable: {mt:012x})" if raw == "<Unloaded Type>" else csharp_name(raw)
            self._csharp[mt] = name
        return name

    def names_known(self) -> dict[int, str]:
        """MethodTable -> name for every type named so far (no DAC call)."""
        return dict(self._names)

    def known(self) -> list[ClrType]:
        return [t for t in self._types.values() if t is not None]
