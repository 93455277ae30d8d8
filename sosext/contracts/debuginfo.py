"""The JIT's native-to-IL map of a method (what the DAC's GetILOffsetsByAddress answers from
vm/debuginfostore.cpp; the later DebugInfo contract, docs/design/datacontracts/DebugInfo.md,
describes the same bounds), which gives clrstack and gcroot their source lines through the
module's PDB.

Where: a JIT-compiled method's RealCodeHeader starts with its debug info pointer (the field
two pointers before the GC info, which the .NET 10 descriptor lists but not this one). A
ReadyToRun method's debug info lives in its image and is not read here (None).

The .NET 10 blob of JIT-compiled code starts with a flag byte (1: patchpoint info follows,
not read here; 2: rich debug info follows, a 32-bit size then that many bytes, skipped). Then
a stream of nibble-coded unsigned integers (3 value bits a nibble, the top bit set when more
follow, high bits first, the low nibble of a byte first): the bounds' and the variables'
sizes in bytes; the bounds follow: their count, then the bits of a native-offset delta and of
an IL offset (each stored minus 1), then per entry a packed little-endian bit field of 2
source-type bits, the native delta and the IL offset + 3 (so that NO_MAPPING -1, PROLOG -2 and
EPILOG -3 fit). (The contract's later "fat" header, 0 then six sizes, is read as well.)
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from ..errors import ContractError, MemoryReadError
from .targetdata import TargetData

if TYPE_CHECKING:
    from .executionmanager import CodeBlock, ExecutionManager

_DEBUG_INFO_FAT = 0
_IL_OFFSET_BIAS = -3
_SOURCE_TYPE_BITS = 2
_MAX_BOUNDS = 1 << 20
_MAX_HEADER = 42  # 7 nibble-coded 32-bit values


@dataclass(frozen=True, slots=True)
class OffsetMapping:
    native_offset: int
    il_offset: int        # signed: -1 no mapping, -2 prolog, -3 epilog
    source_type: int


class _Nibbles:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0   # pos counts nibbles

    def nibble(self) -> int:
        byte = self.pos // 2
        if byte >= len(self.data):
            raise ContractError("a debug info stream is cut short")
        value = self.data[byte] >> 4 if self.pos & 1 else self.data[byte] & 0xF
        self.pos += 1
        return value

    def unsigned(self) -> int:
        value = 0
        for _ in range(11):            # 33 bits at most
            n = self.nibble()
            value = value << 3 | (n & 7)
            if not n & 8:
                return value & 0xFFFFFFFF
        raise ContractError("a nibble-coded value in debug info does not end")

    def next_byte(self) -> int:
        return (self.pos + 1) // 2


def bounds_extent(header_bytes: bytes) -> tuple[int, int]:
    """(offset, size) of the bounds in a debug info blob, from its header."""
    header = _Nibbles(header_bytes[:_MAX_HEADER])
    first = header.unsigned()
    if first == _DEBUG_INFO_FAT:
        bounds_size = header.unsigned()
        for _ in range(5):
            header.unsigned()
    else:
        bounds_size = first
        header.unsigned()
    return header.next_byte(), bounds_size


def parse_bounds(blob: bytes) -> list[OffsetMapping]:
    """The bounds (native offset → IL offset entries) of a debug info blob."""
    start, bounds_size = bounds_extent(blob)
    data = blob[start:start + bounds_size]
    if not bounds_size:
        return []
    if len(data) < bounds_size:
        raise ContractError("debug info bounds are cut short")
    r = _Nibbles(data)
    count = r.unsigned()
    if count > _MAX_BOUNDS:
        raise ContractError(f"debug info claims {count} bounds")
    native_bits, il_bits = r.unsigned() + 1, r.unsigned() + 1
    if native_bits > 32 or il_bits > 32:
        raise ContractError("debug info bounds claim entries over 32 bits")
    per_entry = _SOURCE_TYPE_BITS + native_bits + il_bits
    bits = int.from_bytes(data[r.next_byte():], "little")
    available = 8 * (len(data) - r.next_byte())
    if count * per_entry > available:
        raise ContractError("debug info bounds are cut short")
    out = []
    native = 0
    for i in range(count):
        entry = bits >> (i * per_entry)
        source = entry & ((1 << _SOURCE_TYPE_BITS) - 1)
        entry >>= _SOURCE_TYPE_BITS
        native += entry & ((1 << native_bits) - 1)
        il = ((entry >> native_bits) & ((1 << il_bits) - 1)) + _IL_OFFSET_BIAS
        il = il - (1 << 32) if il >= 1 << 31 else il
        out.append(OffsetMapping(native & 0xFFFFFFFF, il, source))
    return out


def il_offsets_at(bounds: list[OffsetMapping], native_offset: int) -> list[int]:
    """The IL offsets whose native range holds ``native_offset`` (GetILOffsetsByAddress: an
    entry's range runs to the next entry's native offset; the last one's is open)."""
    out = []
    for i, b in enumerate(bounds):
        end = bounds[i + 1].native_offset if i + 1 < len(bounds) else None
        if native_offset >= b.native_offset and (end is None or native_offset < end):
            out.append(b.il_offset)
    return out


def jitted_debug_info(data: TargetData, code_header: int) -> int:
    """Where a JIT-compiled method's debug info is (RealCodeHeader's first field)."""
    return data.pointer(code_header + data.offset("RealCodeHeader", "GCInfo") - 2 * data.pointer_size)


_PATCHPOINT, _RICH = 0x01, 0x02
_MAX_BLOB = 1 << 24

# PatchpointInfo (patchpointinfo.h), which the JIT stores after the flag byte of a tier-0 method
# with patchpoints: a fixed part, then one 32-bit offset-and-exposure word per local. Its size
# is the fixed part's sizeof plus 4 bytes a local; the .NET 9/10 descriptors give neither (the
# later DebugInfo contract reads them from a PatchpointInfo type). Two layouts are known: (where
# m_numberOfLocals is, sizeof): the header's public one, a 64-bit callee-save mask then the count
# (8, 32), and the .NET 10 runtimes' here, with 8 more bytes before the count (16, 40). After the
# count come the original frame's size and four special offsets (-1: none). A layout is used only
# when it is the one layout whose fields are plausible (a count of at most the method's IL
# arguments and locals plus 4 hidden ones, a positive frame size, special offsets -1 or small)
# and after which the rest of the blob parses, with every IL variable number below the count.
_PATCHPOINT_LAYOUTS = ((8, 32), (16, 40))
_MAX_PATCHPOINT_LOCALS = 1 << 16
_MAX_FRAME = 1 << 24
_HIDDEN_LOCALS = 4  # a return buffer, a generic context, a varargs cookie, an async continuation


def _patchpoint_size(read: Callable[[int, int], bytes], at: int, rich: bool, il_variables: int | None) -> int | None:
    """The size of the PatchpointInfo at ``at``; None unless exactly one known layout fits."""
    fits = []
    for count_at, fixed in _PATCHPOINT_LAYOUTS:
        raw = bytes(read(at, fixed))
        if len(raw) != fixed:
            continue
        count, frame, *specials = struct.unpack_from("<Ii4i", raw, count_at)
        if count > _MAX_PATCHPOINT_LOCALS or not 0 < frame < _MAX_FRAME \
                or any(v != -1 and abs(v) >= _MAX_FRAME for v in specials):
            continue
        if il_variables is not None and not il_variables <= count <= il_variables + _HIDDEN_LOCALS:
            continue
        size = fixed + 4 * count
        try:
            start = _past_rich(read, at + size) if rich else at + size
            blob_start, bounds_size = bounds_extent(bytes(read(start, _MAX_HEADER)))
            if bounds_size > _MAX_BLOB:
                continue
            parse_bounds(bytes(read(start, blob_start + bounds_size)))
            if any(v.number >= count for v in blob_vars(read, start)):
                continue
        except (ContractError, MemoryReadError):
            continue
        fits.append(size)
    return fits[0] if len(fits) == 1 else None


def _past_rich(read: Callable[[int, int], bytes], at: int) -> int:
    size = int.from_bytes(read(at, 4), "little")
    if size > _MAX_BLOB:
        raise ContractError("rich debug info claims too many bytes")
    return at + 4 + size


def _after_jit_header(read: Callable[[int, int], bytes], at: int, il_variables: int | None = None) -> int | None:
    """Where the bounds start in the JIT-compiled debug info at ``at``: past its flag byte, any
    patchpoint info and any rich debug info; None when the patchpoint info's size is not known
    (``il_variables``: the method's IL arguments and locals, when the caller knows them)."""
    flags = read(at, 1)
    if len(flags) != 1 or flags[0] & ~(_PATCHPOINT | _RICH):
        raise ContractError("a debug info flag byte is not one this reader knows")
    at += 1
    if flags[0] & _PATCHPOINT:
        size = _patchpoint_size(read, at, bool(flags[0] & _RICH), il_variables)
        if size is None:
            return None
        at += size
    if flags[0] & _RICH:
        at = _past_rich(read, at)
    return at


def jitted_bounds(read: Callable[[int, int], bytes], at: int, il_variables: int | None = None) -> list[OffsetMapping] | None:
    """The bounds of the JIT-compiled debug info at ``at`` (flag byte first); None when the
    blob carries patchpoint info whose size is not known (see _patchpoint_size)."""
    at = _after_jit_header(read, at, il_variables)
    if at is None:
        return None
    start, size = bounds_extent(bytes(read(at, _MAX_HEADER)))
    if size > _MAX_BLOB:
        raise ContractError("debug info bounds claim too many bytes")
    return parse_bounds(bytes(read(at, start + size)))


# -- native variable info: where each argument and local lives, over which native range ----------

# ICorDebugInfo::VarLocType
VLT_REG, VLT_REG_BYREF, VLT_REG_FP, VLT_STK, VLT_STK_BYREF, VLT_REG_REG, VLT_REG_STK, VLT_STK_REG, VLT_STK2, \
    VLT_FPSTK, VLT_FIXED_VA, VLT_COUNT, VLT_INVALID = range(13)
_MAX_ILNUM = -4  # ICorDebugInfo::MAX_ILNUM (UNKNOWN_ILNUM): var numbers are stored minus this
_MAX_VARS = 1 << 16


@dataclass(frozen=True, slots=True)
class NativeVar:
    """One ICorDebugInfo::NativeVarInfo: IL variable ``number`` (arguments first, then locals;
    negative numbers are the JIT's own: -3 the generic context …) lives at ``location`` while
    the native offset is in [start, end] (the DAC's lookup includes the end)."""

    start: int
    end: int
    number: int
    kind: int                          # VLT_*
    registers: tuple[int, ...] = ()    # ICorDebugInfo::RegNum values, in the location's order
    base_register: int = 0             # the stack part's base register
    offset: int = 0                    # the stack part's offset from it


def _signed(r: _Nibbles) -> int:
    value = r.unsigned()
    return -(value >> 1) if value & 1 else value >> 1


def parse_vars(data: bytes) -> list[NativeVar]:
    """The native variable infos of a debug info blob's vars chunk (debuginfostore.cpp's
    DoNativeVarInfo: start, end - start, var number - MAX_ILNUM, then the location's type and
    its registers and stack offsets, all nibble-coded)."""
    if not data:
        return []
    r = _Nibbles(data)
    count = r.unsigned()
    if count > _MAX_VARS:
        raise ContractError(f"debug info claims {count} variables")
    out = []
    for _ in range(count):
        start = r.unsigned()
        end = (start + r.unsigned()) & 0xFFFFFFFF
        number = (r.unsigned() + _MAX_ILNUM) & 0xFFFFFFFF
        number = number - (1 << 32) if number >= 1 << 31 else number
        kind = r.unsigned()
        if kind in (VLT_REG, VLT_REG_FP, VLT_REG_BYREF):
            var = NativeVar(start, end, number, kind, (r.unsigned(),))
        elif kind in (VLT_STK, VLT_STK_BYREF, VLT_STK2):
            base = r.unsigned()
            var = NativeVar(start, end, number, kind, (), base, _signed(r))
        elif kind == VLT_REG_REG:
            var = NativeVar(start, end, number, kind, (r.unsigned(), r.unsigned()))
        elif kind == VLT_REG_STK:
            reg, base = r.unsigned(), r.unsigned()
            var = NativeVar(start, end, number, kind, (reg,), base, _signed(r))
        elif kind == VLT_STK_REG:
            offset = _signed(r)
            base, reg = r.unsigned(), r.unsigned()
            var = NativeVar(start, end, number, kind, (reg,), base, offset)
        elif kind in (VLT_FPSTK, VLT_FIXED_VA):
            var = NativeVar(start, end, number, kind, (r.unsigned(),))
        else:
            raise ContractError(f"debug info names a variable location of kind {kind}")
        out.append(var)
    return out


def jitted_vars(read: Callable[[int, int], bytes], at: int, il_variables: int | None = None) -> list[NativeVar] | None:
    """The native variable infos of the JIT-compiled debug info at ``at``; None when the blob
    carries patchpoint info whose size is not known (see _patchpoint_size)."""
    at = _after_jit_header(read, at, il_variables)
    if at is None:
        return None
    return blob_vars(read, at)


def blob_vars(read: Callable[[int, int], bytes], at: int) -> list[NativeVar]:
    """The native variable infos of the nibble-coded debug info at ``at`` (its header of chunk
    sizes first: bounds, vars …), as a ReadyToRun image stores it and the JIT's follows its
    flag byte."""
    header = _Nibbles(bytes(read(at, _MAX_HEADER)))
    bounds_size = header.unsigned()
    if bounds_size == _DEBUG_INFO_FAT:
        bounds_size, vars_size = header.unsigned(), header.unsigned()
    else:
        vars_size = header.unsigned()
    if bounds_size > _MAX_BLOB or vars_size > _MAX_BLOB:
        raise ContractError("debug info claims too many bytes")
    start = at + header.next_byte() + bounds_size
    return parse_vars(bytes(read(start, vars_size))) if vars_size else []


def code_vars(manager: "ExecutionManager", block: "CodeBlock", il_variables: int | None = None) -> list[NativeVar] | None:
    """The native variables of ``block``'s code: a ReadyToRun method's from its image's debug
    info, a JIT-compiled one's from its code header's ([] without debug info: the DAC finds
    no place for any value). None for a tier-0 method with patchpoints whose PatchpointInfo
    cannot be sized (``il_variables``: the method's IL arguments and locals, which size it)."""
    data = manager.data
    if block.ready_to_run:
        at = manager.ready_to_run_debug_info(block)
        return blob_vars(data.read, at) if at else []
    at = jitted_debug_info(data, block.code_header) if block.code_header else 0
    return jitted_vars(data.read, at, il_variables) if at else []
