"""Typed reads of runtime structures through the contract descriptor.

Every contract module reads ``Type.Field`` of a structure at some address: the descriptor says
where the field is, this module reads it with the target's pointer size and little-endian
byte order (the only order .NET runs in). A failed read or a field the descriptor lacks is
one ``SosError`` line; nothing here loops over target-controlled counts.
"""
from __future__ import annotations

import struct

from ..errors import ContractError
from ..targets.base import Target
from .descriptor import ContractDescriptor

# The longest UTF-16 text a contract reads in one piece (paths, names): longer is damage.
MAX_TEXT_CHARS = 1 << 16


class TargetData:
    """The target and its descriptor, with reads of descriptor-named fields."""

    def __init__(self, target: Target, descriptor: ContractDescriptor) -> None:
        self.target = target
        self.desc = descriptor
        self.pointer_size = descriptor.pointer_size
        self._ptr = "<Q" if self.pointer_size == 8 else "<I"
        self._offsets: dict[tuple[str, str], int] = {}

    # -- raw reads -------------------------------------------------------------------------

    def read(self, address: int, size: int) -> bytes:
        return self.target.read(address, size)

    def pointer(self, address: int) -> int:
        return struct.unpack(self._ptr, self.target.read(address, self.pointer_size))[0]

    def u8(self, address: int) -> int:
        return self.target.read(address, 1)[0]

    def u16(self, address: int) -> int:
        return struct.unpack("<H", self.target.read(address, 2))[0]

    def u32(self, address: int) -> int:
        return struct.unpack("<I", self.target.read(address, 4))[0]

    def i32(self, address: int) -> int:
        return struct.unpack("<i", self.target.read(address, 4))[0]

    def u64(self, address: int) -> int:
        return struct.unpack("<Q", self.target.read(address, 8))[0]

    def utf16(self, address: int, chars: int) -> str:
        if not 0 <= chars <= MAX_TEXT_CHARS:
            raise ContractError(f"text of {chars} characters at {address:#x} is too long to be real")
        return self.target.read(address, 2 * chars).decode("utf-16-le", "replace")

    def utf16z(self, address: int, limit: int = 4096) -> str:
        """A NUL-terminated UTF-16 string of at most ``limit`` characters."""
        out = bytearray()
        while len(out) < 2 * limit:
            chunk = bytes(self.target.read_partial(address + len(out), 256))
            if len(chunk) < 2:
                break
            for i in range(0, len(chunk) - 1, 2):
                if chunk[i] == 0 and chunk[i + 1] == 0:
                    out += chunk[:i]
                    return out[: 2 * limit].decode("utf-16-le", "replace")
            out += chunk[: len(chunk) & ~1]
        raise ContractError(f"no end to the text at {address:#x}")

    # -- descriptor fields -----------------------------------------------------------------

    def offset(self, type_name: str, field: str) -> int:
        key = (type_name, field)
        off = self._offsets.get(key)
        if off is None:
            off = self._offsets[key] = self.desc.field_offset(type_name, field)
        return off

    def has(self, type_name: str, field: str) -> bool:
        return self.desc.has_field(type_name, field)

    def field_pointer(self, address: int, type_name: str, field: str) -> int:
        return self.pointer(address + self.offset(type_name, field))

    def field_u8(self, address: int, type_name: str, field: str) -> int:
        return self.u8(address + self.offset(type_name, field))

    def field_u16(self, address: int, type_name: str, field: str) -> int:
        return self.u16(address + self.offset(type_name, field))

    def field_u32(self, address: int, type_name: str, field: str) -> int:
        return self.u32(address + self.offset(type_name, field))

    def field_i32(self, address: int, type_name: str, field: str) -> int:
        return self.i32(address + self.offset(type_name, field))

    def size(self, type_name: str) -> int:
        size = self.desc.type_size(type_name)
        if size is None:
            raise ContractError(f"the runtime's data descriptor gives no size for {type_name}")
        return size

    # -- globals ---------------------------------------------------------------------------

    def global_value(self, name: str) -> int:
        return self.desc.global_value(name)

    def global_pointer(self, name: str) -> int:
        """The value of a pointer global: the descriptor holds the variable's address."""
        return self.pointer(self.desc.global_value(name))
