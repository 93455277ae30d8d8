"""Fields of a type (instance, static, thread-static) and where their values live.

A MethodTable lists only the fields its own class declares (a chain of FieldDescs); the
parent's fields come from the parent MethodTable. Names come from the module's metadata
by token (the DAC does not name fields). An instance field's offset counts from the first
byte after the object's MethodTable pointer (for a struct: from its first byte); a static
field's offset counts from its class's statics base.

Statics bases: .NET 9+ answers per MethodTable (ISOSDacInterface14: a non-GC base for
primitives, a GC base, in a pinned object[], for references and boxed structs). Older
runtimes keep them in the module's DomainLocalModule. When neither answers, the value is
reported as unknown rather than guessed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Protocol

from ...dac.sos import MT_INITIALIZATION_FAILED, MT_INITIALIZED
from ...formats.metadata import MetadataError
from ...formats.metadata.signatures import ElementType as ET
from ..heap.values import ELEMENT_SIZES, POINTER_SIZE, decode_primitive, is_reference

from ..parts import RuntimeParts

if TYPE_CHECKING:
    from .modules import ModuleCatalog


class _Runtime(RuntimeParts, Protocol):
    @property
    def catalog(self) -> "ModuleCatalog": ...  # metadata names the fields

OBJECT_HEADER = POINTER_SIZE  # instance field offsets start after the MethodTable pointer
_MAX_FIELDS = 1 << 16  # FieldDesc chains longer than this are corrupt


@dataclass(frozen=True, slots=True)
class ClrField:
    """One FieldDesc: a field of one class, as the runtime laid it out."""

    field_desc: int
    token: int  # mdFieldDef
    name: str
    element_type: int  # CorElementType of the field (an enum's underlying type; CLASS for references)
    sig_type: int  # the signature's element type (may be more specific than element_type)
    type_mt: int  # MethodTable of the field's type; 0 if not loaded
    type_token: int
    module: int  # module of the declaring class
    enclosing_mt: int  # the declaring class (canonical for generic instantiations)
    owner_mt: int  # the MethodTable the field was listed for (exact instantiation): statics live there
    offset: int  # from the instance data start, or from the statics base
    is_static: bool
    is_thread_static: bool
    is_context_static: bool

    @property
    def is_instance(self) -> bool:
        return not self.is_static

    @property
    def is_struct(self) -> bool:
        """An embedded value type other than a primitive or enum."""
        return self.element_type == ET.VALUETYPE

    @property
    def is_reference(self) -> bool:
        return is_reference(self.element_type)

    @property
    def is_value_type(self) -> bool:
        """SOS's "VT" column: primitives, IntPtr/UIntPtr and structs (not pointers)."""
        et = self.element_type
        return ET.BOOLEAN <= et <= ET.R8 or et in (ET.VALUETYPE, ET.I, ET.U)

    @property
    def is_gc_static(self) -> bool:
        """Statics of reference and struct types live in the GC statics (structs boxed)."""
        return self.element_type in (ET.CLASS, ET.VALUETYPE)

    @property
    def size(self) -> int | None:
        """Bytes of a primitive/pointer/reference field; None for structs."""
        return ELEMENT_SIZES.get(self.element_type)

    def address_in(self, start: int, value_class: bool = False) -> int:
        """The field's address in an object at ``start`` (or a struct's data at ``start``)."""
        return start + self.offset + (0 if value_class else OBJECT_HEADER)


@dataclass(frozen=True, slots=True)
class StaticBases:
    """Where one MethodTable's statics are; 0 means not allocated (yet)."""

    non_gc: int
    gc: int
    initialized: bool | None  # None when the runtime does not say

    def base_for(self, field: ClrField) -> int:
        return self.gc if field.is_gc_static else self.non_gc


class FieldCatalog:
    """Fields per MethodTable and statics bases, cached for a target generation."""

    def __init__(self, runtime: "_Runtime") -> None:
        self.runtime = runtime
        self.reader = runtime.reader
        self._own: dict[int, list[ClrField] | None] = {}
        self._statics: dict[int, StaticBases | None] = {}

    # -- layout --------------------------------------------------------------------------

    def own_fields(self, mt: int) -> list[ClrField] | None:
        """The fields ``mt``'s class declares (instance, then as the runtime ordered them);
        None when the FieldDesc chain cannot be read."""
        if mt not in self._own:
            self._own[mt] = self._load(mt)
        return self._own[mt]

    def all_fields(self, mt: int) -> list[ClrField] | None:
        """Inherited fields first (most-base class first), then ``mt``'s own, as SOS lists them."""
        chain: list[int] = []
        seen: set[int] = set()
        cur = mt
        while cur and cur not in seen and len(chain) < 256:
            seen.add(cur)
            chain.append(cur)
            data = self.reader.method_table_data(cur)
            if data is None:
                return None
            cur = data.parent_method_table
        out: list[ClrField] = []
        for m in reversed(chain):
            own = self.own_fields(m)
            if own is None:
                return None
            out.extend(own)
        return out

    def instance_fields(self, mt: int) -> list[ClrField]:
        return [f for f in self.all_fields(mt) or () if f.is_instance]

    def field(self, mt: int, name: str) -> ClrField | None:
        """The instance or static field called ``name`` (the most derived one wins)."""
        for f in reversed(self.all_fields(mt) or ()):
            if f.name == name:
                return f
        return None

    def _load(self, mt: int) -> list[ClrField] | None:
        if mt == self.runtime.globals.free_method_table:
            return []  # no FieldDescs: the .NET 8 DAC asked for them crashed the process (SIGSEGV)
        dac = self.reader
        data = dac.method_table_data(mt)
        fdata = dac.method_table_field_data(mt)
        if data is None or fdata is None:
            return None
        inherited = 0
        if data.parent_method_table:
            pdata = dac.method_table_field_data(data.parent_method_table)
            inherited = pdata.num_instance_fields if pdata else 0
        own_instance = max(fdata.num_instance_fields - inherited, 0)
        remaining_instance, remaining_static = own_instance, fdata.num_static_fields
        names = self._names(data.module)
        out: list[ClrField] = []
        addr = fdata.first_field
        while (remaining_instance > 0 or remaining_static > 0) and addr and len(out) < _MAX_FIELDS:
            fd = dac.field_desc_data(addr)
            if fd is None or fd.type >= 0x22:
                return None
            if fd.is_static:
                remaining_static -= 1
            else:
                remaining_instance -= 1
            token = 0x04000000 | (fd.token & 0xFFFFFF)
            out.append(ClrField(
                field_desc=addr, token=token, name=names(token), element_type=fd.type, sig_type=fd.sig_type,
                type_mt=fd.mt_of_type, type_token=fd.token_of_type, module=data.module,
                enclosing_mt=fd.mt_of_enclosing_class or mt, owner_mt=mt, offset=fd.offset, is_static=bool(fd.is_static),
                is_thread_static=bool(fd.is_thread_local), is_context_static=bool(fd.is_context_local)))
            addr = fd.next_field
        return out

    def _names(self, module: int):  # type: ignore[no-untyped-def]
        md = self.runtime.catalog.metadata(module)

        def name(token: int) -> str:
            if md is None:
                return ""
            try:
                return md.field(token).name
            except MetadataError:
                return ""
        return name

    # -- statics -------------------------------------------------------------------------

    def static_bases(self, mt: int) -> StaticBases | None:
        """The statics bases of ``mt``; None when this runtime cannot tell."""
        if mt not in self._statics:
            self._statics[mt] = self._load_statics(mt)
        return self._statics[mt]

    def _load_statics(self, mt: int) -> StaticBases | None:
        dac = self.reader
        if dac.sos14 is not None:
            bases = dac.static_base_address(mt)
            if bases is None:
                return None
            flags = dac.method_table_initialization_flags(mt)
            initialized = None if flags is None else bool(flags & MT_INITIALIZED) and \
                not flags & MT_INITIALIZATION_FAILED
            return StaticBases(bases[0], bases[1], initialized)
        # Before .NET 9: the module's DomainLocalModule holds the bases and one flags byte
        # per TypeDef; dynamic statics (generic instantiations) are not reachable this way.
        data = dac.method_table_data(mt)
        if data is None or data.is_dynamic:
            return None
        dlm = dac.domain_local_module_data_from_module(data.module)
        if dlm is None:
            return None
        initialized = None
        if dlm.class_data and data.token & 0xFFFFFF:
            raw = self.runtime.target.read_partial(dlm.class_data + (data.token & 0xFFFFFF) - 1, 1)
            if len(raw) == 1:
                initialized = bool(raw[0] & MT_INITIALIZED) and not raw[0] & MT_INITIALIZATION_FAILED
        return StaticBases(dlm.non_gc_static_data_start, dlm.gc_static_data_start, initialized)

    def static_address(self, mt: int, field: ClrField) -> int | None:
        """Address of a (non-thread) static's storage; 0 if not allocated; None if unknown.
        A struct static's storage holds a reference to its box."""
        bases = self.static_bases(mt)
        if bases is None:
            return None
        base = bases.base_for(field)
        return base + field.offset if base else 0

    def thread_static_addresses(self, mt: int, field: ClrField) -> list[tuple[int, int]] | None:
        """(OS thread id, address) of a thread static on every thread that has its storage;
        None when the runtime cannot tell (before .NET 9)."""
        dac = self.reader
        out: list[tuple[int, int]] = []
        if dac.sos14 is not None:
            for thread, t in dac.threads():
                if not t.os_thread_id:
                    continue
                bases = dac.thread_static_base_address(mt, thread)
                if bases is None:
                    continue
                base = bases[1] if field.is_gc_static else bases[0]
                if base:
                    out.append((t.os_thread_id, base + field.offset))
            return out
        # Before .NET 9 the DAC's only way (GetThreadLocalModuleData) walks a thread's
        # ThreadLocalBlock that .NET 8 threads may lack, and the DAC then crashes the
        # debugger: report the values as unknown instead.
        return None

    # -- values --------------------------------------------------------------------------

    def read(self, field: ClrField, address: int) -> Any:
        """The value at a field's address: int/float/bool for primitives, the referenced
        address for references and pointers, the address itself for an embedded struct."""
        if field.is_struct:
            return address
        size = field.size or POINTER_SIZE
        raw = self.runtime.target.read(address, size)
        return decode_primitive(field.element_type, raw)

    def instance_values(self, obj: int, mt: int) -> Iterator[tuple[ClrField, Any]]:
        """(field, value) of every instance field of the object at ``obj``."""
        for f in self.instance_fields(mt):
            yield f, self.read(f, f.address_in(obj))
