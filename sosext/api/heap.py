"""The managed heap as plain Python values: types, per-type statistics, objects, root paths.

Every answer is made of ints, strs, bools and frozen dataclasses; queries over the whole
heap are generators that step through the heap index a chunk at a time, so iterating a
heap of millions of objects keeps memory flat and can stop early.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Union

from ..formats.metadata.signatures import ElementType as ET
from ..clr.heap.objects import string_text
from ..clr.heap.segments import GENERATION_NAMES, Generation
from ..clr.typesystem.typekeys import key
from ..clr.typesystem.types import unknown_type_name
from ..errors import SosError, UsageError
from . import _model

if TYPE_CHECKING:
    from ..clr.heap.heap import ClrHeap
    from .growth import Retention
    from .roots import RootPath

TypeFilter = Union[str, Callable[[str], bool], "ClrType", None]
GenerationFilter = Union[int, str, Generation, None]


@dataclass(frozen=True, slots=True)
class ClrType:
    """A MethodTable: the runtime's type of an object.

    ``name`` is the full name in C#'s spelling, as ``dumpheap`` and sosext's own commands print it
    (``System.Collections.Generic.Dictionary<System.String, MyApp.Entry>+Entry[]``);
    ``runtime_name`` is the runtime's own (``System.Collections.Generic.Dictionary`2+Entry[[System.String,
    System.Private.CoreLib],[MyApp.Entry, MyApp]][]``), as ``dumpobj`` and ``dumpmt`` print it.
    ``base_size`` and ``component_size`` give an object's size: ``base_size + component_size * length``
    (strings count their terminator in ``base_size``).
    """

    method_table: int
    name: str
    base_size: int
    component_size: int  # bytes per array element or character; 0 for fixed-size types
    contains_pointers: bool
    is_string: bool
    is_array: bool
    is_free: bool  # the GC's filler between objects ("Free" in dumpheap)
    module: int  # the runtime Module that defines it (0 when unknown)
    runtime_name: str  # the runtime's spelling of the name (generic arity and assemblies: List`1[[...]])


@dataclass(frozen=True, slots=True)
class TypeStats:
    """One row of ``dumpheap -stat``: how many objects of a type and their bytes."""

    type: ClrType
    count: int
    total_size: int  # sum of the objects' sizes (unaligned, as SOS counts them)


class HeapObject:
    """One object on the heap. Cheap to create: fields are read from the target when asked.

    ``address`` (int), ``type`` (:class:`ClrType`), ``size`` (bytes, as dumpheap shows them)
    and ``generation`` (:class:`Generation`) come from the heap walk.

    ``obj["_items"]`` reads an instance field: ints, floats and bools for primitives, a
    :class:`HeapObject` (or None for null) for references, a one-character str for a char, the
    address of the data for an embedded struct.
    """

    __slots__ = ("_heap", "address", "type", "size", "generation")

    def __init__(self, heap: "Heap", address: int, type: ClrType, size: int, generation: Generation) -> None:
        self._heap = heap
        self.address: int = address
        self.type: ClrType = type
        self.size: int = size  # bytes, as dumpheap shows them (not rounded up to 8)
        self.generation: Generation = generation

    def __repr__(self) -> str:
        return f"<HeapObject {self.address:#x} {self.type.name} size={self.size} {self.generation.label}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HeapObject) and other.address == self.address and other._heap is self._heap

    def __hash__(self) -> int:
        return hash(self.address)

    @property
    def length(self) -> int:
        """Elements of an array, characters of a string; 0 for other objects."""
        if not self.type.component_size:
            return 0
        return self._heap._target().read_u32(self.address + 8)

    def field_names(self) -> list[str]:
        """Names of the instance fields, inherited ones first (as dumpobj lists them)."""
        fields = self._heap._model.runtime.fields
        return [f.name for f in fields.instance_fields(self.type.method_table)]

    def __getitem__(self, name: str) -> Any:
        runtime = self._heap._model.runtime
        f = runtime.fields.field(self.type.method_table, name)
        if f is None or f.is_static:
            raise KeyError(name)
        value = runtime.fields.read(f, f.address_in(self.address))
        if f.is_reference:
            return self._heap.object(value) if value else None
        if f.element_type == ET.CHAR:
            return chr(value)
        return value

    def as_string(self, max_chars: int | None = None) -> str | None:
        """The text of a System.String (None for other objects); ``max_chars`` cuts long ones."""
        if not self.type.is_string:
            return None
        return string_text(self._heap._target(), self.address, max_chars)

    def references(self) -> list["HeapObject"]:
        """The objects this one references directly (its non-null reference fields/elements)."""
        out = []
        for address in self._heap._model.get_object(self.address).references():
            obj = self._heap.find_object(address)
            if obj is not None:
                out.append(obj)
        return out


class Heap:
    """The GC heap of one runtime (``rt.heap``); answers come from one walk, cached until
    the target runs again."""

    def __init__(self, model: "ClrHeap", *, has_stacks: bool = True) -> None:
        self._model = model
        self._has_stacks = has_stacks
        self._types: dict[int, ClrType] = {}

    def __repr__(self) -> str:
        kind = "server" if self._model.is_server else "workstation"
        return f"<Heap {kind} GC, {len(self._model.subheaps)} heap(s), {len(self._model.segments)} segments>"

    def __len__(self) -> int:
        """Number of objects on the heap (Free included)."""
        return _model.count(self._model)

    def _target(self) -> Any:
        return self._model.runtime.target

    @property
    def is_server(self) -> bool:
        """True with server GC (one heap per core), False with workstation GC."""
        return self._model.is_server

    # -- types -----------------------------------------------------------------------

    def type_of(self, method_table: int) -> ClrType:
        """The type at ``method_table`` (cached)."""
        t = self._types.get(method_table)
        if t is None:
            types = self._model.types
            m = types.get(method_table)
            if m is None:
                name = unknown_type_name(method_table)
                t = ClrType(method_table, name, 0, 0, False, False, False, False, 0, name)
            else:
                t = ClrType(method_table, types.csharp_name_of(method_table), m.base_size, m.component_size,
                            m.contains_pointers, m.is_string, m.is_array, m.is_free, m.module,
                            types.name_of(method_table))
            self._types[method_table] = t
        return t

    def _type_ids(self, type: TypeFilter, mt: int | None) -> Any:
        if type is None and mt is None:
            return None
        if isinstance(type, ClrType):
            mt, type = type.method_table, None
        if type is not None and not (isinstance(type, str) or callable(type)):
            raise UsageError(f"type must be a type name, a predicate on names or a ClrType, not {type!r}")

        def keep(m: int) -> bool:
            if mt is not None and m != mt:
                return False
            if type is None:
                return True
            t = self.type_of(m)
            if isinstance(type, str):
                return (type in (t.name, t.runtime_name)
                        or (wanted_key is not None and key(t.runtime_name) == wanted_key))
            return bool(type(t.name))

        # A name in a gcdump's spelling (Entry[System.String,MyApp.Entry][]) names a nested type
        # without its enclosing types: it matches the types whose key (typekeys.py) is its own.
        wanted_key = key(type) if isinstance(type, str) and "[[" not in type and "<" not in type else None
        return _model.type_ids_where(self._model, keep)

    # -- queries -----------------------------------------------------------------------

    def stats(self, *, type: TypeFilter = None, mt: int | None = None, gen: GenerationFilter = None,
              live: bool | None = None, min_size: int | None = None,
              max_size: int | None = None) -> list[TypeStats]:
        """Objects per type, as ``dumpheap -stat``: ascending total size (then count, name).

        Filters as for :meth:`objects`. Free space is a row of its own (``row.type.is_free``).

        >>> for row in heap.stats()[-3:]:
        ...     print(row.type.name, row.count, row.total_size)
        """
        self._check_live(live)
        mask = _model.stats_mask(self._model, type_ids=self._type_ids(type, mt), generation=_generation(gen),
                                 live=live, min_size=min_size, max_size=max_size)
        rows = [TypeStats(self.type_of(m), c, s) for m, c, s in _model.stats(self._model, mask)]
        rows.sort(key=lambda r: (r.total_size, r.count, r.type.name))
        return rows

    def objects(self, *, type: TypeFilter = None, mt: int | None = None, gen: GenerationFilter = None,
                live: bool | None = None, min_size: int | None = None,
                max_size: int | None = None) -> Iterator[HeapObject]:
        """Every object that passes all the given filters, in address order, lazily.

        ``type``: the exact full type name in any spelling (C#'s as ``type.name`` and dumpheap
        print it, the runtime's as ``type.runtime_name``, or a gcdump's), a predicate on the C#
        name (``lambda n: n.startswith("MyApp.")``) or a :class:`ClrType`; ``mt``: a MethodTable
        address; ``gen``: 0, 1, 2, "loh", "poh",
        "foh" (or a :class:`Generation`); ``live``: True for objects reachable from a root, False
        for unreachable (dead) ones; ``min_size``/``max_size``: bytes.

        >>> for obj in heap.objects(type="System.String", gen=2, live=True):
        ...     print(hex(obj.address), obj.size)
        """
        self._check_live(live)
        ids = self._type_ids(type, mt)
        if ids is not None and len(ids) == 0:
            return
        generation = _generation(gen)
        if live is not None:
            self._model.live()  # build liveness before the first object is handed out
        for chunk in _model.positions(self._model, type_ids=ids, generation=generation, live=live,
                                      min_size=min_size, max_size=max_size):
            for _pos, address, mt_, size, g in _model.facts(self._model, chunk):
                yield HeapObject(self, address, self.type_of(mt_), size, Generation(g))

    def _check_live(self, live: bool | None) -> None:
        if live is not None and not self._has_stacks:
            raise SosError("live= needs stack roots, which need thread registers: open a core, "
                           "use sosext.open(pid=..., snapshot=True), or sosext.current() in a debugger")

    def find_object(self, address: int) -> HeapObject | None:
        """The object that starts at ``address``, or None."""
        pos = _model.find(self._model, address)
        if pos is None:
            return None
        return self._at(pos)

    def object(self, address: int) -> HeapObject:
        """The object that starts at ``address``; raises SosError when there is none."""
        obj = self.find_object(address)
        if obj is None:
            raise SosError(self._model.explain_non_object(address))
        return obj

    def _at(self, position: int) -> HeapObject:
        address, mt, size, g = _model.fact(self._model, position)
        return HeapObject(self, address, self.type_of(mt), size, Generation(g))

    def gcroot(self, obj: HeapObject | int, *, stacks: bool | None = None,
               limit: int | None = None, shortest: bool = False) -> Iterator["RootPath"]:
        """The roots that keep ``obj`` alive, each with the chain of references gcroot prints
        (on a core SOS's, found by ClrMD's depth-first search; on a live process a shortest one),
        each yielded as soon as it is found.

        Paths come as gcroot prints them: handles, then the finalizer queue, then thread stacks
        (``stacks=False`` leaves those out; the default, None, includes them wherever thread
        registers are available, i.e. everywhere but ``open(pid=...)``). Each path's ``objects`` run from the root's object
        to ``obj``. ``shortest=True``: each root's shortest chain instead, as ``gcroot -shortest``.

        >>> for path in heap.gcroot(obj):
        ...     print(path.root.kind, [hex(o.address) for o in path.objects])
        """
        from .roots import paths_to
        if stacks is None:
            stacks = self._has_stacks
        elif stacks and not self._has_stacks:
            raise SosError("stack roots need thread registers: open a core, use "
                           "sosext.open(pid=..., snapshot=True), or sosext.current() in a debugger")
        address = obj.address if isinstance(obj, HeapObject) else int(obj)
        pos = _model.find(self._model, address)
        if pos is None:
            raise SosError(self._model.explain_non_object(address))
        yield from paths_to(self, pos, stacks=stacks, limit=limit, shortest=shortest)


    def _position(self, obj: "HeapObject | int") -> int:
        address = obj.address if isinstance(obj, HeapObject) else int(obj)
        pos = _model.find(self._model, address)
        if pos is None:
            raise SosError(self._model.explain_non_object(address))
        return pos

    # -- what freeing an object would free ------------------------------------------------

    def retained(self, obj: HeapObject | int) -> int:
        """Bytes a GC would free if nothing referenced ``obj`` any more: its own size plus that
        of everything only it keeps alive (0 when no root reaches it), as ``retained`` prints.

        >>> heap.retained(obj)
        """
        from .growth import retained
        return retained(self, obj)

    def retention(self, obj: HeapObject | int) -> "Retention":
        """``obj``'s retained size, dominator chain and roots: what the ``retained`` command
        prints (a :class:`Retention`)."""
        from .growth import retention
        return retention(self, obj)

    def dominators(self, top: int = 10, *, type: TypeFilter = None) -> list["Retention"]:
        """The ``top`` objects retaining the most, largest first, each a :class:`Retention`:
        what the ``dominators`` command prints. ``type`` as for :meth:`objects`.

        >>> for r in heap.dominators(3):
        ...     print(r.retained, r.object.type.name, [o.type.name for o in r.chain[1:]])
        """
        from .growth import dominators
        return dominators(self, top, type)


def _generation(gen: GenerationFilter) -> int | None:
    if gen is None:
        return None
    if isinstance(gen, str):
        g = GENERATION_NAMES.get(gen.lower())
        if g is None:
            raise UsageError(f"unknown generation {gen!r} (0, 1, 2, 'loh', 'poh' or 'foh')")
        return int(g)
    if isinstance(gen, int) and 0 <= int(gen) <= int(Generation.FROZEN):
        return int(gen)
    raise UsageError(f"unknown generation {gen!r} (0, 1, 2, 'loh', 'poh' or 'foh')")
