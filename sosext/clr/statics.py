"""Which static field a slot is: names for the statics arrays that roots lead through.

Since .NET 9 a type's reference statics live in a pinned object[] that a strong handle keeps
alive, so a leak held by a static shows up as "strong handle -> System.Object[] -> ...".
This map turns the slot of that array into the static's name (``LeakyService.Program.s_worker``)
by laying out the static fields of every loaded type once. Statics of generic
instantiations are not in the modules' TypeDef maps and stay unnamed.
"""
from __future__ import annotations

from typing import Any, Callable, Protocol, TypeVar

from ..errors import SosError

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
    the statics that may be stored in [lo, hi), which spares reading every type's fields."""

    def __init__(self, runtime: "ClrRuntime", window: tuple[int, int] | None = None) -> None:
        self.by_address: dict[int, str] = {}
        heap = runtime.heap
        fields = runtime.fields
        for module in runtime.modules():
            try:
                types = list(runtime.catalog.iter_loaded_types(module))
            except SosError:
                continue
            for _token, mt in types:
                if window is not None and not _may_store_in(fields, mt, *window):
                    continue
                try:
                    own = fields.own_fields(mt) or []
                except SosError:
                    continue
                statics = [f for f in own if f.is_static and not f.is_thread_static
                           and not f.is_context_static and f.is_gc_static]
                if not statics:
                    continue
                owner = heap.types.name_of(mt)
                for f in statics:
                    try:
                        address = fields.static_address(mt, f)
                    except SosError:
                        address = None
                    if address:
                        self.by_address[address] = f"{owner}.{f.name}"

    def name_at(self, slot: int) -> str | None:
        return self.by_address.get(slot)


def _may_store_in(fields: Any, mt: int, lo: int, hi: int) -> bool:
    """Whether a GC static of ``mt`` can live in [lo, hi): its storage is the statics base
    plus the field's offset. Since .NET 9 (ISOSDacInterface14) a type's GC statics are the
    elements of its own array, so its base lies in the window; before, the base is the
    module's and only a base above the window rules the type out."""
    try:
        bases = fields.static_bases(mt)
    except SosError:
        return True  # let the full path decide, as the whole map would
    if bases is None or not bases.gc or bases.gc >= hi:
        return False
    return bases.gc >= lo or fields.dac.sos14 is None


def static_slots(runtime: "ClrRuntime") -> StaticSlots:
    """The map for this target generation (built on first use: it reads every type's fields)."""
    return runtime.cache("static-slots", lambda: StaticSlots(runtime))


def static_name_between(runtime: "ClrRuntime", holder: int, target: int) -> str | None:
    """The static field of ``holder`` (a statics array) whose slot holds ``target``, if known."""
    from .objects import ClrObject
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
