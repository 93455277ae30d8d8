"""IL method bodies (ECMA-335 II.25.4): the header, the code, the exception clauses, and
the instruction stream decoded with the CIL opcode table (III.1.2 / opcode.def).

A body starts with a tiny header (one byte: size << 2 | 2, no locals, no clauses) or a fat
one (flags and header size in 12 + 4 bits, max stack, code size, local signature token).
Extra sections follow the code at a 4-byte boundary; the only kind in use is the exception
clause table, small (12-byte clauses) or fat (24-byte clauses). Everything is read from
bytes the caller supplies, with every length checked against them, so a corrupt body ends
in an ``ILError`` and never in an index error or a huge allocation.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from ...errors import SosError


class ILError(SosError):
    """A method body that cannot be decoded (truncated, or not IL at all)."""


class Operand(IntEnum):
    """The inline operand of an opcode (opcode.def's argument kinds)."""

    NONE = 0
    VAR8 = 1  # ShortInlineVar: an argument or local index
    VAR16 = 2  # InlineVar
    I8 = 3  # ShortInlineI
    I32 = 4  # InlineI
    I64 = 5  # InlineI8
    R32 = 6  # ShortInlineR
    R64 = 7  # InlineR
    BR8 = 8  # ShortInlineBrTarget
    BR32 = 9  # InlineBrTarget
    TOKEN = 10  # InlineMethod, InlineField, InlineType, InlineTok, InlineSig, InlineString
    SWITCH = 11  # InlineSwitch: a count, then that many 32-bit targets


_SIZES = {Operand.NONE: 0, Operand.VAR8: 1, Operand.VAR16: 2, Operand.I8: 1, Operand.I32: 4, Operand.I64: 8,
          Operand.R32: 4, Operand.R64: 8, Operand.BR8: 1, Operand.BR32: 4, Operand.TOKEN: 4}

_N, _V8, _V16, _I8, _I32, _I64, _R32, _R64, _B8, _B32, _T, _SW = Operand


def _table(*rows: tuple[int, str, Operand]) -> dict[int, tuple[str, Operand]]:
    return {code: (name, operand) for code, name, operand in rows}


# One-byte opcodes, by value (III.1.2.1). Values not listed are unused.
_ONE_BYTE = _table(
    (0x00, "nop", _N), (0x01, "break", _N), (0x02, "ldarg.0", _N), (0x03, "ldarg.1", _N),
    (0x04, "ldarg.2", _N), (0x05, "ldarg.3", _N), (0x06, "ldloc.0", _N), (0x07, "ldloc.1", _N),
    (0x08, "ldloc.2", _N), (0x09, "ldloc.3", _N), (0x0A, "stloc.0", _N), (0x0B, "stloc.1", _N),
    (0x0C, "stloc.2", _N), (0x0D, "stloc.3", _N), (0x0E, "ldarg.s", _V8), (0x0F, "ldarga.s", _V8),
    (0x10, "starg.s", _V8), (0x11, "ldloc.s", _V8), (0x12, "ldloca.s", _V8), (0x13, "stloc.s", _V8),
    (0x14, "ldnull", _N), (0x15, "ldc.i4.m1", _N), (0x16, "ldc.i4.0", _N), (0x17, "ldc.i4.1", _N),
    (0x18, "ldc.i4.2", _N), (0x19, "ldc.i4.3", _N), (0x1A, "ldc.i4.4", _N), (0x1B, "ldc.i4.5", _N),
    (0x1C, "ldc.i4.6", _N), (0x1D, "ldc.i4.7", _N), (0x1E, "ldc.i4.8", _N), (0x1F, "ldc.i4.s", _I8),
    (0x20, "ldc.i4", _I32), (0x21, "ldc.i8", _I64), (0x22, "ldc.r4", _R32), (0x23, "ldc.r8", _R64),
    (0x25, "dup", _N), (0x26, "pop", _N), (0x27, "jmp", _T), (0x28, "call", _T), (0x29, "calli", _T),
    (0x2A, "ret", _N), (0x2B, "br.s", _B8), (0x2C, "brfalse.s", _B8), (0x2D, "brtrue.s", _B8),
    (0x2E, "beq.s", _B8), (0x2F, "bge.s", _B8), (0x30, "bgt.s", _B8), (0x31, "ble.s", _B8),
    (0x32, "blt.s", _B8), (0x33, "bne.un.s", _B8), (0x34, "bge.un.s", _B8), (0x35, "bgt.un.s", _B8),
    (0x36, "ble.un.s", _B8), (0x37, "blt.un.s", _B8), (0x38, "br", _B32), (0x39, "brfalse", _B32),
    (0x3A, "brtrue", _B32), (0x3B, "beq", _B32), (0x3C, "bge", _B32), (0x3D, "bgt", _B32),
    (0x3E, "ble", _B32), (0x3F, "blt", _B32), (0x40, "bne.un", _B32), (0x41, "bge.un", _B32),
    (0x42, "bgt.un", _B32), (0x43, "ble.un", _B32), (0x44, "blt.un", _B32), (0x45, "switch", _SW),
    (0x46, "ldind.i1", _N), (0x47, "ldind.u1", _N), (0x48, "ldind.i2", _N), (0x49, "ldind.u2", _N),
    (0x4A, "ldind.i4", _N), (0x4B, "ldind.u4", _N), (0x4C, "ldind.i8", _N), (0x4D, "ldind.i", _N),
    (0x4E, "ldind.r4", _N), (0x4F, "ldind.r8", _N), (0x50, "ldind.ref", _N), (0x51, "stind.ref", _N),
    (0x52, "stind.i1", _N), (0x53, "stind.i2", _N), (0x54, "stind.i4", _N), (0x55, "stind.i8", _N),
    (0x56, "stind.r4", _N), (0x57, "stind.r8", _N), (0x58, "add", _N), (0x59, "sub", _N),
    (0x5A, "mul", _N), (0x5B, "div", _N), (0x5C, "div.un", _N), (0x5D, "rem", _N), (0x5E, "rem.un", _N),
    (0x5F, "and", _N), (0x60, "or", _N), (0x61, "xor", _N), (0x62, "shl", _N), (0x63, "shr", _N),
    (0x64, "shr.un", _N), (0x65, "neg", _N), (0x66, "not", _N), (0x67, "conv.i1", _N),
    (0x68, "conv.i2", _N), (0x69, "conv.i4", _N), (0x6A, "conv.i8", _N), (0x6B, "conv.r4", _N),
    (0x6C, "conv.r8", _N), (0x6D, "conv.u4", _N), (0x6E, "conv.u8", _N), (0x6F, "callvirt", _T),
    (0x70, "cpobj", _T), (0x71, "ldobj", _T), (0x72, "ldstr", _T), (0x73, "newobj", _T),
    (0x74, "castclass", _T), (0x75, "isinst", _T), (0x76, "conv.r.un", _N), (0x79, "unbox", _T),
    (0x7A, "throw", _N), (0x7B, "ldfld", _T), (0x7C, "ldflda", _T), (0x7D, "stfld", _T),
    (0x7E, "ldsfld", _T), (0x7F, "ldsflda", _T), (0x80, "stsfld", _T), (0x81, "stobj", _T),
    (0x82, "conv.ovf.i1.un", _N), (0x83, "conv.ovf.i2.un", _N), (0x84, "conv.ovf.i4.un", _N),
    (0x85, "conv.ovf.i8.un", _N), (0x86, "conv.ovf.u1.un", _N), (0x87, "conv.ovf.u2.un", _N),
    (0x88, "conv.ovf.u4.un", _N), (0x89, "conv.ovf.u8.un", _N), (0x8A, "conv.ovf.i.un", _N),
    (0x8B, "conv.ovf.u.un", _N), (0x8C, "box", _T), (0x8D, "newarr", _T), (0x8E, "ldlen", _N),
    (0x8F, "ldelema", _T), (0x90, "ldelem.i1", _N), (0x91, "ldelem.u1", _N), (0x92, "ldelem.i2", _N),
    (0x93, "ldelem.u2", _N), (0x94, "ldelem.i4", _N), (0x95, "ldelem.u4", _N), (0x96, "ldelem.i8", _N),
    (0x97, "ldelem.i", _N), (0x98, "ldelem.r4", _N), (0x99, "ldelem.r8", _N), (0x9A, "ldelem.ref", _N),
    (0x9B, "stelem.i", _N), (0x9C, "stelem.i1", _N), (0x9D, "stelem.i2", _N), (0x9E, "stelem.i4", _N),
    (0x9F, "stelem.i8", _N), (0xA0, "stelem.r4", _N), (0xA1, "stelem.r8", _N), (0xA2, "stelem.ref", _N),
    (0xA3, "ldelem", _T), (0xA4, "stelem", _T), (0xA5, "unbox.any", _T), (0xB3, "conv.ovf.i1", _N),
    (0xB4, "conv.ovf.u1", _N), (0xB5, "conv.ovf.i2", _N), (0xB6, "conv.ovf.u2", _N),
    (0xB7, "conv.ovf.i4", _N), (0xB8, "conv.ovf.u4", _N), (0xB9, "conv.ovf.i8", _N),
    (0xBA, "conv.ovf.u8", _N), (0xC2, "refanyval", _T), (0xC3, "ckfinite", _N), (0xC6, "mkrefany", _T),
    (0xD0, "ldtoken", _T), (0xD1, "conv.u2", _N), (0xD2, "conv.u1", _N), (0xD3, "conv.i", _N),
    (0xD4, "conv.ovf.i", _N), (0xD5, "conv.ovf.u", _N), (0xD6, "add.ovf", _N), (0xD7, "add.ovf.un", _N),
    (0xD8, "mul.ovf", _N), (0xD9, "mul.ovf.un", _N), (0xDA, "sub.ovf", _N), (0xDB, "sub.ovf.un", _N),
    (0xDC, "endfinally", _N), (0xDD, "leave", _B32), (0xDE, "leave.s", _B8), (0xDF, "stind.i", _N),
    (0xE0, "conv.u", _N),
)

# Two-byte opcodes: 0xFE, then this byte (III.1.2.1).
_TWO_BYTE = _table(
    (0x00, "arglist", _N), (0x01, "ceq", _N), (0x02, "cgt", _N), (0x03, "cgt.un", _N), (0x04, "clt", _N),
    (0x05, "clt.un", _N), (0x06, "ldftn", _T), (0x07, "ldvirtftn", _T), (0x09, "ldarg", _V16),
    (0x0A, "ldarga", _V16), (0x0B, "starg", _V16), (0x0C, "ldloc", _V16), (0x0D, "ldloca", _V16),
    (0x0E, "stloc", _V16), (0x0F, "localloc", _N), (0x11, "endfilter", _N), (0x12, "unaligned.", _I8),
    (0x13, "volatile.", _N), (0x14, "tail.", _N), (0x15, "initobj", _T), (0x16, "constrained.", _T),
    (0x17, "cpblk", _N), (0x18, "initblk", _N), (0x19, "no.", _I8), (0x1A, "rethrow", _N),
    (0x1C, "sizeof", _T), (0x1D, "refanytype", _N), (0x1E, "readonly.", _N),
)

TWO_BYTE_PREFIX = 0xFE
MAX_SWITCH_CASES = 1 << 16  # a larger count in a body is corruption (and would print forever)


@dataclass(frozen=True, slots=True)
class Instruction:
    offset: int  # from the start of the code
    opcode: int  # one-byte value, or 0xFE00 | second byte
    name: str  # "unused" for an undefined opcode, as ildasm and SOS name it
    operand: Operand
    value: int | float | None = None  # the operand: a number, a token, or a branch target
    targets: tuple[int, ...] = ()  # switch targets
    size: int = 1


# CorExceptionFlag (II.25.4.6)
CLAUSE_EXCEPTION, CLAUSE_FILTER, CLAUSE_FINALLY, CLAUSE_FAULT = 0, 1, 2, 4


@dataclass(frozen=True, slots=True)
class ILClause:
    """One exception clause of a body, in IL offsets."""

    flags: int
    try_offset: int
    try_length: int
    handler_offset: int
    handler_length: int
    class_token: int  # typed clauses (CLAUSE_EXCEPTION)
    filter_offset: int  # filter clauses

    @property
    def kind(self) -> str:
        """SOS's EHClauseType names: TYPED, FILTER, FINALLY, FAULT."""
        if self.flags & CLAUSE_FAULT:
            return "FAULT"
        if self.flags & CLAUSE_FINALLY:
            return "FINALLY"
        if self.flags & CLAUSE_FILTER:
            return "FILTER"
        return "TYPED"


@dataclass(frozen=True, slots=True)
class MethodBody:
    header_size: int
    max_stack: int
    local_sig_token: int
    code: bytes
    clauses: tuple[ILClause, ...]
    fat: bool

    @property
    def total_size(self) -> int:
        """Header and code (not the extra sections): what ``dumpil`` reads."""
        return self.header_size + len(self.code)


MAX_BODY = 1 << 24  # larger than any body a compiler writes; beyond this the bytes are not IL


def parse_body(data: bytes | memoryview) -> MethodBody:
    """The header, code and clauses of the method body that ``data`` starts with."""
    data = bytes(data)
    if not data:
        raise ILError("error decoding IL: no bytes")
    first = data[0]
    if first & 3 == 2:  # tiny
        size = first >> 2
        if 1 + size > len(data):
            raise ILError("error decoding IL: the code runs past the bytes read")
        return MethodBody(1, 8, 0, data[1:1 + size], (), False)
    if first & 3 != 3 or len(data) < 12:
        raise ILError(f"error decoding IL: {first:#04x} starts neither a tiny nor a fat header")
    flags_size, max_stack, code_size, local_sig = struct.unpack_from("<HHII", data, 0)
    header_size = (flags_size >> 12) * 4
    if header_size < 12 or code_size > MAX_BODY or header_size + code_size > len(data):
        raise ILError("error decoding IL: the fat header's sizes do not fit the bytes read")
    code = data[header_size:header_size + code_size]
    clauses: list[ILClause] = []
    pos = header_size + code_size
    more = bool(flags_size & 0x8)
    while more:
        pos = (pos + 3) & ~3
        if pos + 4 > len(data):
            raise ILError("error decoding IL: an exception section runs past the bytes read")
        kind = data[pos]
        more = bool(kind & 0x80)
        fat = bool(kind & 0x40)
        size = int.from_bytes(data[pos + 1:pos + 4], "little") if fat else data[pos + 1]
        if pos + size > len(data) or size < 4:
            raise ILError("error decoding IL: an exception section runs past the bytes read")
        if kind & 0x3F == 1:  # CorILMethod_Sect_EHTable
            clauses.extend(_clauses(data[pos + 4:pos + size], fat))
        pos += size
    return MethodBody(header_size, max_stack, local_sig, code, tuple(clauses), True)


def _clauses(data: bytes, fat: bool) -> list[ILClause]:
    if fat:
        return [ILClause(*struct.unpack_from("<IIIIII", data, i)[:5], *_class_or_filter(data, i + 20))
                for i in range(0, len(data) - 23, 24)]
    out = []
    for i in range(0, len(data) - 11, 12):
        flags, try_off, try_len, h_off, h_len = struct.unpack_from("<HHBHB", data, i)
        out.append(ILClause(flags, try_off, try_len, h_off, h_len, *_class_or_filter(data, i + 8)))
    return out


def _class_or_filter(data: bytes, at: int) -> tuple[int, int]:
    value = int.from_bytes(data[at:at + 4], "little")
    return value, value


def decode(code: bytes) -> list[Instruction]:
    """Every instruction of ``code``; an operand cut off by the end raises ILError."""
    out: list[Instruction] = []
    pos = 0
    n = len(code)
    while pos < n:
        start = pos
        op = code[pos]
        pos += 1
        if op == TWO_BYTE_PREFIX:
            if pos >= n:
                raise ILError(f"error decoding IL: a two-byte opcode is cut off at IL_{start:04x}")
            second = code[pos]
            pos += 1
            op = 0xFE00 | second
            name, operand = _TWO_BYTE.get(second, ("unused", _N))
        else:
            name, operand = _ONE_BYTE.get(op, ("unused", _N))
        value: int | float | None = None
        targets: tuple[int, ...] = ()
        if operand is _SW:
            if pos + 4 > n:
                raise ILError(f"error decoding IL: switch at IL_{start:04x} is cut off")
            count = int.from_bytes(code[pos:pos + 4], "little")
            pos += 4
            if count > MAX_SWITCH_CASES or pos + 4 * count > n:
                raise ILError(f"error decoding IL: switch at IL_{start:04x} has {count} targets past the end")
            rel = struct.unpack_from(f"<{count}i", code, pos)
            pos += 4 * count
            targets = tuple(pos + r for r in rel)
        else:
            size = _SIZES[operand]
            if pos + size > n:
                raise ILError(f"error decoding IL: the operand of {name} at IL_{start:04x} is cut off")
            raw = code[pos:pos + size]
            pos += size
            value = _operand_value(operand, raw, pos)
        out.append(Instruction(start, op, name, operand, value, targets, pos - start))
    return out


def _operand_value(operand: Operand, raw: bytes, next_offset: int) -> int | float | None:
    if operand is _N:
        return None
    if operand in (_V8, _V16, _T):
        return int.from_bytes(raw, "little")
    if operand is _R32:
        return struct.unpack("<f", raw)[0]
    if operand is _R64:
        return struct.unpack("<d", raw)[0]
    signed = int.from_bytes(raw, "little", signed=True)
    if operand in (_B8, _B32):
        return next_offset + signed  # branch targets are relative to the next instruction
    return signed


def encode(ins: list[tuple[int, int | float | None, tuple[int, ...]]]) -> bytes:
    """Bytes for (opcode, operand, switch targets) triples: the inverse of :func:`decode`,
    for tests that fabricate bodies. Branch operands are absolute targets, as decode gives."""
    out = bytearray()
    for op, value, targets in ins:
        name, operand = (_TWO_BYTE.get(op & 0xFF) if op > 0xFF else _ONE_BYTE.get(op)) or ("", _N)
        out += bytes([0xFE, op & 0xFF]) if op > 0xFF else bytes([op])
        if operand is _SW:
            end = len(out) + 4 + 4 * len(targets)
            out += struct.pack(f"<I{len(targets)}i", len(targets), *(t - end for t in targets))
        elif operand is _R32:
            out += struct.pack("<f", value)
        elif operand is _R64:
            out += struct.pack("<d", value)
        elif operand is not _N:
            size = _SIZES[operand]
            v = int(value or 0)
            if operand in (_B8, _B32):
                v -= len(out) + size
            out += (v & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
    return bytes(out)


def opcodes() -> dict[int, tuple[str, Operand]]:
    """Every defined opcode: value (two-byte ones as 0xFE00 | second byte) -> (name, operand)."""
    table = dict(_ONE_BYTE)
    table.update({0xFE00 | k: v for k, v in _TWO_BYTE.items()})
    return table
