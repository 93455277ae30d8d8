"""What an address is, decided before the DAC sees it.

The DAC is native code running in our process, and it trusts the addresses it is given: a
MethodTable handed over as an AppDomain, or a Free object asked for its class name, can
take the debugger down with SIGSEGV. Every address a user types (and every value read
from target memory that a command would pass on) is classified here first, from facts
that are safe to gather:

- arithmetic: null, the never-mapped first 64 KiB, non-canonical or kernel addresses;
- a raw read through the Target (never the DAC): not readable means unmapped;
- the GC heap's segments (``heap.segment_of``) and its allocation contexts; inside a
  segment, the heap index says object start, Free object or inside which object;
- the lists the DAC enumerated itself (app domains, assemblies, modules, managed
  threads' stack limits): an exact match is that structure;
- a MethodTable is accepted only if the word where every MethodTable keeps its Module
  (the offset is learnt from System.String and System.Object, which the runtime names)
  is a known module, and the DAC then validates it (its GetMethodTableData checks that
  the EEClass or canonical MethodTable points back) and reports the same module;
- a MethodDesc is what the DAC validates as one (its checks run inside the DAC's own
  exception handling) once the address is none of the above, and whose MethodTable and
  module pass the checks above;
- an EEClass (runtimes before .NET 9) holds, among its first words, a MethodTable whose
  class is that EEClass: found with raw reads and the MethodTable check alone.

Anything else is UNKNOWN, and commands refuse it with one line naming what it is.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ..errors import SosError
from .parts import RuntimeParts

if TYPE_CHECKING:
    from .heap.index import HeapIndex
    from .typesystem.modules import ModuleCatalog
    from .heap.segments import ClrSegment
    from .typesystem.types import TypeCache


# The runtime answers ``is_method_table`` with this module, so the classifier must not know
# the runtime and heap façades (an import circle): it names what it reads of them.
class _Heap(Protocol):
    alloc_contexts: list[tuple[int, int]]
    string_mt: int
    free_mt: int
    object_mt: int
    array_mt: int
    exception_mt: int
    types: "TypeCache"

    def index(self) -> "HeapIndex": ...

    def segment_of(self, address: int) -> "ClrSegment | None": ...


class _Runtime(RuntimeParts, Protocol):
    @property
    def heap(self) -> _Heap: ...

    @property
    def catalog(self) -> "ModuleCatalog": ...

LOW_LIMIT = 0x10000  # Linux never maps the first 64 KiB (vm.mmap_min_addr)
USER_LIMIT = 1 << 47  # x86_64 and arm64 user space with 4-level page tables
_MT_PROBE = 64  # bytes read from a candidate MethodTable: its fixed header
# A MethodDesc's byte 2 is its index in its MethodDescChunk (in 8-byte units), whose 24-byte
# header starts with the chunk's MethodTable and holds its size less one (8-byte units) at 0x10
_MD_CHUNK_INDEX, _MD_ALIGNMENT, _MD_CHUNK_HEADER, _MD_CHUNK_SIZE = 2, 8, 0x18, 0x10


class AddressKind(enum.Enum):
    NULL = "null"
    LOW = "low"
    NOT_USER = "not a user-space address"
    UNMAPPED = "unmapped"
    UNALIGNED = "unaligned"
    OBJECT = "object"
    FREE = "Free object"
    INTERIOR = "inside an object"
    ALLOC_CONTEXT = "allocation context"
    HEAP_GAP = "GC heap, no object"
    METHOD_TABLE = "MethodTable"
    MODULE = "Module"
    APP_DOMAIN = "AppDomain"
    ASSEMBLY = "Assembly"
    METHOD_DESC = "MethodDesc"
    EECLASS = "EEClass"
    STACK = "stack"
    UNKNOWN = "unknown"


# The command that shows each kind, for the "(try ...)" hint.
_SHOW_WITH = {
    AddressKind.OBJECT: "dumpobj", AddressKind.FREE: "dumpobj", AddressKind.METHOD_TABLE: "dumpmt",
    AddressKind.MODULE: "dumpmodule", AddressKind.APP_DOMAIN: "dumpdomain", AddressKind.ASSEMBLY: "dumpassembly",
    AddressKind.METHOD_DESC: "dumpmd", AddressKind.EECLASS: "dumpclass",
}


@dataclass(frozen=True, slots=True)
class AddressClass:
    """What ``address`` is; ``start`` is the containing object's address for INTERIOR (else
    the address itself), ``name`` a type, module, assembly or method name when known."""

    address: int
    kind: AddressKind
    start: int = 0
    size: int = 0
    name: str = ""
    thread: int = 0  # OS thread id, for STACK

    @property
    def is_object(self) -> bool:
        """An object start the DAC may be asked about (Free objects included)."""
        return self.kind in (AddressKind.OBJECT, AddressKind.FREE)

    def description(self) -> str | None:
        """``it is ...`` text, or None when there is nothing useful to say."""
        k = self.kind
        named = f" ({self.name})" if self.name else ""
        if k is AddressKind.NULL or k is AddressKind.LOW:
            return None
        if k is AddressKind.NOT_USER:
            return "it is not a user-space address"
        if k is AddressKind.UNMAPPED:
            return "it is not readable in the target"
        if k is AddressKind.UNALIGNED:
            return "it is not pointer-aligned"
        if k is AddressKind.OBJECT:
            return f"it is an object{named}"
        if k is AddressKind.FREE:
            return f"it is a Free object (free space of {self.size} bytes in the GC heap)"
        if k is AddressKind.INTERIOR:
            return (f"it is inside {self.start:#x} ({self.name}, {self.size} bytes) "
                    f"at offset 0x{self.address - self.start:x}")
        if k is AddressKind.ALLOC_CONTEXT:
            return "it is in an allocation context (GC heap memory that holds no objects yet)"
        if k is AddressKind.HEAP_GAP:
            return "it is in the GC heap but not in any object"
        if k is AddressKind.STACK:
            return f"it is on the stack of thread 0x{self.thread:x}"
        if k is AddressKind.UNKNOWN:
            return f"it is in {self.name}, not a runtime structure sosext knows" if self.name else None
        article = "an" if k.value[0] in "AEIOU" else "a"
        return f"it is {article} {k.value}{named}"

    def hint(self) -> str:
        cmd = _SHOW_WITH.get(self.kind)
        if self.kind is AddressKind.INTERIOR:
            return f" (try dumpobj {self.start:x})"
        return f" (try {cmd} {self.address:x})" if cmd else ""

    def error(self, wanted: str, show: str | None = None) -> SosError:
        """``<address> is not <wanted>: it is ... (try ...)``; ``show`` replaces the address text."""
        text = f"{show or f'{self.address:#x}'} is not {wanted}"
        desc = self.description()
        return SosError(f"{text}: {desc}{self.hint()}" if desc else text)


class AddressClassifier:
    """Classifies addresses of one runtime at one target generation (``runtime.addresses``)."""

    def __init__(self, runtime: "_Runtime") -> None:
        self.runtime = runtime
        self.target = runtime.target
        self._heap: "_Heap | None" = None
        self._mt_ok: dict[int, bool] = {}
        self._md_ok: dict[int, bool] = {}
        self._module_offset: int | None | bool = False  # False: not learnt yet; None: no such offset
        self._known: dict[int, tuple[AddressKind, str]] | None = None
        self._stacks: list[tuple[int, int, int]] | None = None

    # -- facts gathered once -------------------------------------------------------------

    @property
    def heap(self) -> "_Heap":
        if self._heap is None:
            self._heap = self.runtime.heap
        return self._heap

    def known_structures(self) -> dict[int, tuple[AddressKind, str]]:
        """Domains, assemblies and modules the DAC enumerated, by address."""
        if self._known is None:
            known: dict[int, tuple[AddressKind, str]] = {}
            catalog = self.runtime.catalog
            for d in catalog.app_domains():
                known[d.address] = (AddressKind.APP_DOMAIN, d.name)
                for a in d.assemblies:
                    known.setdefault(a.address, (AddressKind.ASSEMBLY, a.name))
                    for m in a.modules:
                        known.setdefault(m.address, (AddressKind.MODULE, m.path))
            self._known = known
        return self._known

    def module_addresses(self) -> set[int]:
        return {a for a, (k, _n) in self.known_structures().items() if k is AddressKind.MODULE}

    def stacks(self) -> list[tuple[int, int, int]]:
        """(low, high, OS thread id) of every managed thread's stack."""
        if self._stacks is None:
            dac = self.runtime.reader
            out = []
            for addr, t in dac.threads():
                lim = dac.stack_limits(addr)
                if lim and lim[0] != lim[1]:
                    # The DAC answers (base, limit): the stack grows down from base.
                    out.append((min(lim), max(lim), t.os_thread_id))
            self._stacks = out
        return self._stacks

    def readable(self, address: int, size: int = 8) -> bool:
        if address < LOW_LIMIT or address + size > USER_LIMIT:
            return False
        try:
            return len(self.target.read_partial(address, size)) == size
        except SosError:
            return False

    def _word(self, address: int) -> int | None:
        raw = self.target.read_partial(address, 8) if self.readable(address) else b""
        return int.from_bytes(raw, "little") if len(raw) == 8 else None

    # -- MethodTables and MethodDescs ------------------------------------------------------

    def _learn_module_offset(self) -> int | None:
        """Where a MethodTable keeps its Module: the offset at which the MethodTables the runtime
        names itself (System.String, System.Object, System.Exception, System.Array) all hold the
        module the DAC reports for them. A triage dump may lack some of them: those the DAC
        cannot describe are left out, as long as two remain."""
        if self._module_offset is False:
            g = self.runtime.globals
            dac = self.runtime.reader
            found = None
            mts = [mt for mt in (g.string_method_table, g.object_method_table, g.exception_method_table,
                                 g.array_method_table) if mt]
            pairs = [(dac.method_table_data(mt), bytes(self.target.read_partial(mt, _MT_PROBE))) for mt in mts]
            pairs = [(d, r) for d, r in pairs if d is not None and len(r) == _MT_PROBE]
            datas = [d for d, _ in pairs]
            raws = [r for _, r in pairs]
            if len(pairs) >= 2:
                for off in range(0, _MT_PROBE, 8):
                    if all(int.from_bytes(r[off:off + 8], "little") == d.module for r, d in zip(raws, datas)):
                        found = off
                        break
            self._module_offset = found
        return self._module_offset  # type: ignore[return-value]

    def is_method_table(self, mt: int) -> bool:
        """True when ``mt`` is a MethodTable; no DAC call unless the raw header points at a
        known module."""
        ok = self._mt_ok.get(mt)
        if ok is None:
            ok = self._check_method_table(mt)
            self._mt_ok[mt] = ok
        return ok

    def _check_method_table(self, mt: int) -> bool:
        if mt & 7 or not self.readable(mt, _MT_PROBE):
            return False
        g = self.runtime.globals
        if mt in (g.free_method_table, g.string_method_table, g.object_method_table, g.array_method_table,
                  g.exception_method_table):
            return True
        if self._in_heap(mt) or mt in self.known_structures():
            return False
        modules = self.module_addresses()
        off = self._learn_module_offset()
        if off is not None:
            raw = self.target.read_partial(mt, _MT_PROBE)
            if int.from_bytes(raw[off:off + 8], "little") not in modules:
                return False
        else:
            return False  # cannot check the header without the DAC: refuse rather than risk it
        d = self.runtime.reader.method_table_data(mt)
        # An interface's MethodTable has no instances, so no base size (tdInterface, 0x20, says which).
        return d is not None and d.module in modules and (0 < d.base_size < 1 << 31 or
                                                           (d.base_size == 0 and bool(d.attr_class & 0x20)))

    def is_method_desc(self, md: int) -> bool:
        ok = self._md_ok.get(md)
        if ok is None:
            ok = self._check_method_desc(md)
            self._md_ok[md] = ok
        return ok

    def _check_method_desc(self, md: int) -> bool:
        if md & 7 or not self.readable(md, 16) or self._in_heap(md) or md in self.known_structures():
            return False
        if self._on_stack(md) is not None or self.is_method_table(md):
            return False
        # Read raw first, as the chunk holding it, and not an EEClass: a .NET 8 DAC asked for the
        # MethodDescData of an EEClass (dumpclass, dumpmd of one) crashed the process (SIGSEGV
        # inside the DAC), and an EEClass can pass the chunk test by what precedes it.
        index = bytes(self.target.read_partial(md + _MD_CHUNK_INDEX, 1))
        chunk = md - (index[0] if index else 0) * _MD_ALIGNMENT - _MD_CHUNK_HEADER
        head = bytes(self.target.read_partial(chunk, _MD_CHUNK_HEADER)) if index else b""
        if len(head) != _MD_CHUNK_HEADER or index[0] > head[_MD_CHUNK_SIZE] or \
                not self.is_method_table(int.from_bytes(head[:8], "little")) or \
                self.eeclass_method_table(md) is not None:
            return False
        d = self.runtime.reader.method_desc_data(md)
        return d is not None and d.module_ptr in self.module_addresses() and self.is_method_table(d.method_table_ptr)

    def eeclass_method_table(self, addr: int) -> int | None:
        """The MethodTable whose class is ``addr``: an EEClass (before .NET 9) points to its
        MethodTable among its first words, which the MethodTable's own class field confirms;
        ``addr`` itself never reaches the DAC."""
        if not addr or addr & 7 or not self.readable(addr, 64):
            return None
        raw = bytes(self.target.read_partial(addr, 64))
        for off in range(0, 64, 8):
            word = int.from_bytes(raw[off:off + 8], "little")
            if word and word != addr and self.is_method_table(word):
                t = self.runtime.types.get(word)
                if t is not None and t.canonical == addr:
                    return word
        return None

    # -- the heap --------------------------------------------------------------------------

    def _in_heap(self, address: int) -> bool:
        if not self.runtime.has_gc_heap:  # a triage dump: no address is in a heap it lacks
            return False
        return self.heap.segment_of(address) is not None

    def _on_stack(self, address: int) -> int | None:
        for lo, hi, tid in self.stacks():
            if lo <= address < hi:
                return tid
        return None

    def _heap_class(self, address: int) -> AddressClass:
        heap = self.heap
        for ptr, limit in heap.alloc_contexts:
            if ptr <= address < limit:
                return AddressClass(address, AddressKind.ALLOC_CONTEXT)
        quick = self._object_by_header(address)
        if quick is not None:
            return quick
        ix = heap.index()
        i = ix.containing(address)
        if i is None:
            return AddressClass(address, AddressKind.HEAP_GAP)
        start = int(ix.addresses[i])
        mt = ix.method_table_at(i)
        size = int(ix.sizes[i])
        if start != address:
            return AddressClass(address, AddressKind.INTERIOR, start, size, heap.types.name_of(mt))
        if mt == heap.free_mt:
            return AddressClass(address, AddressKind.FREE, address, size, "Free")
        return AddressClass(address, AddressKind.OBJECT, address, size, heap.types.name_of(mt))

    def _object_by_header(self, address: int) -> AddressClass | None:
        """A cold single query need not walk the heap: an aligned address whose first word
        is a valid MethodTable and whose object ends inside its segment is an object start.
        Only an answer of yes is trusted; a no falls back to the heap index, which knows."""
        if address & 7:
            return None
        word = self._word(address)
        if word is None:
            return None
        mt = word & ~7
        heap = self.heap
        seg = heap.segment_of(address)
        if seg is None or not self.is_method_table(mt):
            return None
        t = heap.types.get(mt)
        if t is None:
            return None
        count = 0
        if t.component_size:
            raw = self.target.read_partial(address + 8, 4)
            if len(raw) < 4:
                return None
            count = int.from_bytes(raw, "little")
        size = max(t.base_size + t.component_size * count, 24)
        if address + size > seg.end:
            return None
        if mt == heap.free_mt:
            return AddressClass(address, AddressKind.FREE, address, size, "Free")
        return AddressClass(address, AddressKind.OBJECT, address, size, heap.types.name_of(mt))

    # -- the answer --------------------------------------------------------------------------

    def classify(self, address: int) -> AddressClass:
        """What ``address`` is. Calls the DAC only with addresses that passed the checks
        above its call in this order."""
        if address == 0:
            return AddressClass(address, AddressKind.NULL)
        if address < LOW_LIMIT:
            return AddressClass(address, AddressKind.LOW)
        if address >= USER_LIMIT:
            return AddressClass(address, AddressKind.NOT_USER)
        if self._in_heap(address):
            return self._heap_class(address)
        if not self.readable(address, 1):
            return AddressClass(address, AddressKind.UNMAPPED)
        known = self.known_structures().get(address)
        if known is not None:
            return AddressClass(address, known[0], address, 0, known[1])
        tid = self._on_stack(address)
        if tid is not None:
            return AddressClass(address, AddressKind.STACK, thread=tid)
        if address & 7:
            return AddressClass(address, AddressKind.UNALIGNED)
        if self.is_method_table(address):
            return AddressClass(address, AddressKind.METHOD_TABLE, address, 0, self.runtime.types.name_of(address))
        if self.is_method_desc(address):
            name = self.runtime.reader.method_desc_name(address) or ""
            return AddressClass(address, AddressKind.METHOD_DESC, address, 0, name)
        mt = self.eeclass_method_table(address)
        if mt is not None:
            return AddressClass(address, AddressKind.EECLASS, address, 0, self.runtime.types.name_of(mt))
        image = self.target.module_at(address) if hasattr(self.target, "module_at") else None
        return AddressClass(address, AddressKind.UNKNOWN, name=image.name if image is not None else "")

    # -- what commands ask ------------------------------------------------------------------

    def require(self, address: int, kind: AddressKind, wanted: str, show: str | None = None) -> AddressClass:
        """The class of ``address`` if it is ``kind`` (objects: Free ones too), else one
        error line that says what it is instead."""
        c = self.classify(address)
        if c.kind is kind or (kind is AddressKind.OBJECT and c.kind is AddressKind.FREE):
            return c
        raise c.error(wanted, show)

    def require_object(self, address: int, show: str | None = None) -> AddressClass:
        return self.require(address, AddressKind.OBJECT, "a valid object", show)

    def object_or_none(self, address: int) -> AddressClass | None:
        """For values read from target memory: the object there, or None (no error)."""
        if not address or address & 7 or not self._in_heap(address):
            return None
        c = self._heap_class(address)
        return c if c.is_object else None

    def method_table_or_none(self, mt: int) -> int | None:
        return mt if mt and self.is_method_table(mt) else None


def classifier(runtime: "_Runtime") -> AddressClassifier:
    """The runtime's classifier for the current target generation."""
    return runtime.cache("addresses", lambda: AddressClassifier(runtime))
