"""Which static field a slot is: names for the statics arrays that roots lead through.

Since .NET 9 a type's reference statics live in a pinned object[] that a strong handle keeps
alive, so a leak held by a static shows up as "strong handle -> System.Object[] -> ...".
This map turns the slot of that array into the static's name (``LeakyService.Program.s_worker``)
by laying out the static fields of every loaded type once. Statics of generic
instantiations are not in the modules' TypeDef maps and stay unnamed.
"""
from __future__ import annotations

import bisect
from typing import Any, Callable, Protocol, TypeVar

from ...errors import SosError

T = TypeVar("T")


class ClrRuntime(Protocol):
    """What the statics map reads of the runtime. The façade itself is not imported (see
    parts.py), so that pieces below it, such as the dominator tree, may name statics."""

    heap: Any
    fields: Any
    catalog: Any

    def modules(self) -> list: ...

    def cache(self, key: str, factory: Callable[[], T]) -> T: ...


class StaticSlots:
    """Static field names by the address of their storage; with ``window`` (lo, hi) only
    the statics that may be stored in [lo, hi), which spares reading every type's fields.

    Since .NET 9 the GC statics of many types share one array, each type's from its base
    on: a type whose base lies in the window is read only when a slot at or above its base
    is asked for and no type with a higher base at or below the slot named it."""

    def __init__(self, runtime: "ClrRuntime", window: tuple[int, int] | None = None) -> None:
        self.by_address: dict[int, str] = {}
        self._runtime = runtime
        self._deferred: list[tuple[int, int]] = []  # (GC statics base, MethodTable), not read yet
        fields = runtime.fields
        for module in runtime.modules():
            try:
                types = list(runtime.catalog.iter_loaded_types(module))
            except SosError:
                continue
            for _token, mt in types:
                if window is not None:
                    where = _statics_base_in(fields, mt, *window)
                    if where is None:
                        continue
                    if where >= 0:
                        self._deferred.append((where, mt))
                        continue
                self._read(mt)
        self._deferred.sort()

    def _read(self, mt: int) -> None:
        fields = self._runtime.fields
        try:
            own = fields.own_fields(mt) or []
        except SosError:
            return
        statics = [f for f in own if f.is_static and not f.is_thread_static
                   and not f.is_context_static and f.is_gc_static]
        if not statics:
            return
        owner = self._runtime.heap.types.name_of(mt)
        for f in statics:
            try:
                address = fields.static_address(mt, f)
            except SosError:
                address = None
            if address:
                self.by_address[address] = f"{owner}.{f.name}"

    def name_at(self, slot: int) -> str | None:
        name = self.by_address.get(slot)
        # The owner's base is at or below the slot: nearest bases first.
        k = bisect.bisect_right(self._deferred, (slot, 1 << 64)) - 1
        while name is None and k >= 0:
            _base, mt = self._deferred.pop(k)
            self._read(mt)
            name = self.by_address.get(slot)
            k -= 1
        return name


def _statics_base_in(fields: Any, mt: int, lo: int, hi: int) -> int | None:
    """Where a GC static of ``mt`` can live, for a window [lo, hi): None when not in it;
    its statics base when that lies in the window (since .NET 9, ISOSDacInterface14, a
    type's GC statics are elements of a statics array from its base on); -1 when the type
    must be read to tell (an unknown base, or before .NET 9, when the base is the module's
    and only a base above the window rules the type out)."""
    try:
        bases = fields.static_bases(mt)
    except SosError:
        return -1  # let the full path decide, as the whole map would
    if bases is None or not bases.gc or bases.gc >= hi:
        return None
    if fields.reader.sos14 is None:
        return -1
    return bases.gc if bases.gc >= lo else None


def static_slots(runtime: "ClrRuntime") -> StaticSlots:
    """The map for this target generation (built on first use: it reads every type's fields)."""
    return runtime.cache("static-slots", lambda: StaticSlots(runtime))


def static_name_between(runtime: "ClrRuntime", holder: int, target: int) -> str | None:
    """The static field of ``holder`` (a statics array) whose slot holds ``target``, if known."""
    from ..heap.objects import ClrObject
    try:
        obj = ClrObject(runtime.heap, holder)
        if not obj.type.name.endswith("[]"):
            return None
        slots = [off for off, value in obj.reference_slots() if value == target]
    except SosError:
        return None
    if not slots:
        return None
    end = holder + max(slots) + 8  # one type's statics array: read only the types that may own it
    names = runtime.cache(f"static-slots {holder:x}-{end:x}", lambda: StaticSlots(runtime, (holder, end)))
    for off in slots:
        name = names.name_at(holder + off)
        if name:
            return name
    return None
