"""ClrObject: one managed object, read on demand.

Commands that look at a few objects (dumpobj, gcroot's chains, objsize's start) use this;
whole-heap questions go through the HeapIndex and the reference graph instead.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ...errors import SosError
from .gcdesc import GCDesc, parse_gcdesc
from ..typesystem.types import ClrType

if TYPE_CHECKING:
    from ..parts import HeapParts

# -- the object header: the 32-bit word just before the MethodTable pointer ----------------
# Its low bits hold either a thin lock (owner's thin-lock thread id, recursion level) or,
# when BIT_SBLK_IS_HASH_OR_SYNCBLKINDEX is set, a hash code or a sync block index.
HEADER_HASH_OR_SYNCBLOCK = 0x08000000
HEADER_SPIN_LOCK = 0x10000000
THIN_LOCK_THREAD_ID = 0x0000FFFF
THIN_LOCK_RECURSION_SHIFT, THIN_LOCK_RECURSION_MASK = 16, 0x3F

# -- System.String: the length (UTF-16 code units) at +8, the characters from +12 ----------
STRING_LENGTH_OFFSET = 8
STRING_CHARS_OFFSET = 12
ARRAY_DATA_OFFSET = 16  # the first element of a single-dimension array


class _Reader(Protocol):
    def read_partial(self, address: int, size: int) -> bytes: ...


@dataclass(frozen=True, slots=True)
class ThinLock:
    owner_id: int  # the thin-lock id of the owning managed thread (not an OS id)
    recursion: int


# The first word of an object is its MethodTable pointer; the GC keeps mark bits in its low bits.
METHOD_TABLE_BITS = ~7
# A TypeHandle with bit 1 set is a TypeDesc (a pointer, array or function type), not a MethodTable.
TYPE_DESC_BIT = 2


def method_table_of(target: _Reader, address: int) -> int | None:
    """The MethodTable pointer in the header word of the object at ``address`` (None: unreadable)."""
    raw = target.read_partial(address, 8)
    return int.from_bytes(raw, "little") & METHOD_TABLE_BITS if len(raw) == 8 else None


def type_desc_of(type_handle: int) -> int | None:
    """The TypeDesc a TypeHandle points to, or None when it is a MethodTable."""
    return type_handle & ~TYPE_DESC_BIT if type_handle & TYPE_DESC_BIT else None


def thin_lock(target: _Reader, address: int) -> ThinLock | None:
    """The thin lock held on the object at ``address``, from its header (None: none)."""
    raw = target.read_partial(address - 4, 4)
    if len(raw) < 4:
        return None
    word = int.from_bytes(raw, "little")
    if word & (HEADER_HASH_OR_SYNCBLOCK | HEADER_SPIN_LOCK) or not word & THIN_LOCK_THREAD_ID:
        return None
    return ThinLock(word & THIN_LOCK_THREAD_ID, (word >> THIN_LOCK_RECURSION_SHIFT) & THIN_LOCK_RECURSION_MASK)


def string_length(target: _Reader, address: int) -> int:
    """The length word of the System.String at ``address`` (0 when unreadable)."""
    raw = target.read_partial(address + STRING_LENGTH_OFFSET, 4)
    return int.from_bytes(raw, "little") if len(raw) == 4 else 0


def string_text(target: _Reader, address: int, max_chars: int | None = None) -> str:
    """The text of the System.String at ``address``; ``max_chars`` reads only that many."""
    n = string_length(target, address)
    if max_chars is not None:
        n = min(n, max_chars)
    raw = target.read_partial(address + STRING_CHARS_OFFSET, 2 * n)
    return bytes(raw).decode("utf-16-le", errors="replace")


class ClrObject:
    __slots__ = ("heap", "address", "_type", "_length")

    def __init__(self, heap: "HeapParts", address: int) -> None:
        self.heap = heap
        self.address = address
        self._type: ClrType | None = None
        self._length: int | None = None

    def __repr__(self) -> str:
        return f"ClrObject({self.address:#x}, {self.type.name if self.is_valid else '?'})"

    @property
    def method_table(self) -> int:
        return self.heap.runtime.target.read_pointer(self.address) & METHOD_TABLE_BITS

    @property
    def is_valid(self) -> bool:
        try:
            return self.type is not None
        except SosError:
            return False

    @property
    def type(self) -> ClrType:
        if self._type is None:
            t = self.heap.types.get(self.method_table)
            if t is None:
                raise SosError(f"{self.address:#x} is not a valid object")
            self._type = t
        return self._type

    @property
    def length(self) -> int:
        """Element count for arrays and strings, 0 otherwise."""
        if self._length is None:
            t = self.type
            self._length = self.heap.runtime.target.read_u32(self.address + 8) if t.component_size else 0
        return self._length

    @property
    def raw_size(self) -> int:
        t = self.type
        return t.base_size + t.component_size * self.length

    @property
    def size(self) -> int:
        return (self.raw_size + 7) & ~7

    def gcdesc(self) -> GCDesc | None:
        return self.heap.gcdesc(self.type.method_table)

    def reference_slots(self) -> list[tuple[int, int]]:
        """(offset, referenced address) for every non-null reference field/element."""
        t = self.type
        if not t.contains_pointers:
            return []
        desc = self.heap.gcdesc(t.method_table)
        if desc is None:
            return []
        raw_size = self.raw_size
        data = self.heap.runtime.target.read_partial(self.address, raw_size)
        mv = memoryview(data)
        out = []
        for off in desc.offsets(raw_size):
            if off + 8 <= len(mv):
                v = int.from_bytes(mv[off:off + 8], "little")
                if v:
                    out.append((off, v))
        return out

    def references(self) -> list[int]:
        return [v for _o, v in self.reference_slots()]


def gcdesc_reader(heap: "HeapParts"):  # type: ignore[no-untyped-def]
    cache: dict[int, GCDesc | None] = {}

    def get(mt: int) -> GCDesc | None:
        if mt not in cache:
            try:
                cache[mt] = parse_gcdesc(heap.runtime.target.read, mt)
            except SosError:
                cache[mt] = None
        return cache[mt]
    return get
