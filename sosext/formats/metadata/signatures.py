"""Signature blobs (ECMA-335 II.23.2): decoding into records, and rendering as text.

Signatures are recursive (an array of pointers to a generic instantiation over arrays
...), and a corrupt blob can describe any depth, so the decoder carries an explicit depth
bound instead of trusting Python's recursion limit. Every count read from a blob is
checked against the bytes left before anything is allocated by it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Callable, Mapping, Sequence

from .errors import MetadataError
from .heaps import read_compressed_int, read_compressed_uint

MAX_SIG_DEPTH = 64


class ElementType(IntEnum):
    """CorElementType: the first byte of every type in a signature."""

    END = 0x00
    VOID = 0x01
    BOOLEAN = 0x02
    CHAR = 0x03
    I1 = 0x04
    U1 = 0x05
    I2 = 0x06
    U2 = 0x07
    I4 = 0x08
    U4 = 0x09
    I8 = 0x0A
    U8 = 0x0B
    R4 = 0x0C
    R8 = 0x0D
    STRING = 0x0E
    PTR = 0x0F
    BYREF = 0x10
    VALUETYPE = 0x11
    CLASS = 0x12
    VAR = 0x13
    ARRAY = 0x14
    GENERICINST = 0x15
    TYPEDBYREF = 0x16
    I = 0x18
    U = 0x19
    FNPTR = 0x1B
    OBJECT = 0x1C
    SZARRAY = 0x1D
    MVAR = 0x1E
    CMOD_REQD = 0x1F
    CMOD_OPT = 0x20
    INTERNAL = 0x21
    MODIFIER = 0x40
    SENTINEL = 0x41
    PINNED = 0x45


class CallingConvention(IntEnum):
    """Low nibble of a signature's first byte."""

    DEFAULT = 0x0
    C = 0x1
    STDCALL = 0x2
    THISCALL = 0x3
    FASTCALL = 0x4
    VARARG = 0x5
    FIELD = 0x6
    LOCAL_SIG = 0x7
    PROPERTY = 0x8
    UNMANAGED = 0x9
    GENERICINST = 0xA  # MethodSpec instantiation


SIG_GENERIC = 0x10
SIG_HASTHIS = 0x20
SIG_EXPLICITTHIS = 0x40

# Calling conventions a method (or property, or function pointer) signature may have.
_METHOD_KINDS = frozenset({0x0, 0x1, 0x2, 0x3, 0x4, 0x5, 0x8, 0x9})
# The runtime's limit on array dimensions; a larger rank in a blob is corruption and
# would otherwise let the formatter build an enormous "[,,,...]".
MAX_ARRAY_RANK = 32

# Types that are complete in one byte.
_SIMPLE = frozenset(
    {
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0D,
        0x0E, 0x16, 0x18, 0x19, 0x1C,
    }
)  # fmt: skip
# TypeDefOrRefOrSpecEncoded (II.23.2.8): the tag's token type.
_TYPE_TOKEN_TABLE = (0x02000000, 0x01000000, 0x1B000000)


@dataclass(frozen=True, slots=True)
class CustomModifier:
    """modreq/modopt attached to a type: ``required`` tells which."""

    required: bool
    token: int


@dataclass(frozen=True, slots=True)
class SigType:
    """One type in a signature.

    Which fields matter depends on ``element_type``: ``token`` for CLASS, VALUETYPE and
    GENERICINST (the generic type definition or reference, with ``value_type`` telling
    whether it was instantiated as a value type); ``element`` for PTR, BYREF, SZARRAY
    and ARRAY (plus ``rank``, ``sizes``, ``lower_bounds``); ``args`` for GENERICINST;
    ``index`` for VAR (!n) and MVAR (!!n); ``method`` for FNPTR.
    """

    element_type: int
    token: int | None = None
    element: SigType | None = None
    args: tuple[SigType, ...] = ()
    index: int = 0
    rank: int = 0
    sizes: tuple[int, ...] = ()
    lower_bounds: tuple[int, ...] = ()
    value_type: bool = False
    method: MethodSig | None = None
    modifiers: tuple[CustomModifier, ...] = ()
    pinned: bool = False


@dataclass(frozen=True, slots=True)
class MethodSig:
    """A MethodDefSig, MethodRefSig, StandAloneMethodSig or PropertySig."""

    calling_convention: int  # the whole first byte, flags included
    generic_param_count: int
    return_type: SigType
    params: tuple[SigType, ...]
    # Index into ``params`` of the first argument after the SENTINEL of a vararg call site.
    vararg_start: int | None = None

    @property
    def kind(self) -> int:
        return self.calling_convention & 0x0F

    @property
    def has_this(self) -> bool:
        return bool(self.calling_convention & SIG_HASTHIS)

    @property
    def explicit_this(self) -> bool:
        return bool(self.calling_convention & SIG_EXPLICITTHIS)

    @property
    def is_generic(self) -> bool:
        return bool(self.calling_convention & SIG_GENERIC)


# Shared instances for the common one-byte types: decoding CoreLib creates millions of
# signature types otherwise.
_SIMPLE_TYPES = {et: SigType(et) for et in _SIMPLE}


class _Cursor:
    """Reads one signature blob front to back."""

    __slots__ = ("data", "pos", "end")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0
        self.end = len(data)

    def byte(self) -> int:
        if self.pos >= self.end:
            raise MetadataError("truncated signature")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def peek(self) -> int:
        if self.pos >= self.end:
            raise MetadataError("truncated signature")
        return self.data[self.pos]

    def uint(self) -> int:
        value, self.pos = read_compressed_uint(self.data, self.pos, self.end)
        return value

    def int(self) -> int:
        value, self.pos = read_compressed_int(self.data, self.pos, self.end)
        return value

    def count(self, what: str) -> int:
        # Every counted item takes at least one byte, so a count larger than what is
        # left is corrupt; refusing it early keeps loops and lists bounded.
        n = self.uint()
        if n > self.end - self.pos:
            raise MetadataError(f"signature {what} count {n} exceeds the blob")
        return n

    def type_token(self) -> int:
        coded = self.uint()
        tag = coded & 3
        if tag == 3:
            raise MetadataError("bad TypeDefOrRefOrSpec tag in signature")
        return _TYPE_TOKEN_TABLE[tag] | (coded >> 2)

    def type(self, depth: int, *, allow_pinned: bool = False) -> SigType:
        if depth > MAX_SIG_DEPTH:
            raise MetadataError("signature nested too deeply")
        et = self.byte()
        simple = _SIMPLE_TYPES.get(et)
        if simple is not None:
            return simple
        if et == 0x12 or et == 0x11:  # CLASS, VALUETYPE
            return SigType(et, token=self.type_token())
        if et == 0x1D or et == 0x0F or et == 0x10:  # SZARRAY, PTR, BYREF
            return SigType(et, element=self.type(depth + 1))
        if et == 0x13 or et == 0x1E:  # VAR, MVAR
            return SigType(et, index=self.uint())
        if et == 0x15:  # GENERICINST (CLASS|VALUETYPE) TypeDefOrRefOrSpec count type*
            kind = self.byte()
            if kind not in (0x11, 0x12):
                raise MetadataError(f"bad generic instantiation kind {kind:#04x} in signature")
            token = self.type_token()
            n = self.count("generic argument")
            args = tuple(self.type(depth + 1) for _ in range(n))
            return SigType(et, token=token, args=args, value_type=kind == 0x11)
        if et == 0x14:  # ARRAY type rank nsizes size* nbounds bound*
            element = self.type(depth + 1)
            rank = self.uint()
            if not 0 < rank <= MAX_ARRAY_RANK:
                raise MetadataError(f"bad array rank {rank} in signature")
            sizes = tuple(self.uint() for _ in range(self.count("array size")))
            bounds = tuple(self.int() for _ in range(self.count("array bound")))
            return SigType(et, element=element, rank=rank, sizes=sizes, lower_bounds=bounds)
        if et == 0x1B:  # FNPTR MethodSig
            return SigType(et, method=self.method(depth + 1))
        if et == 0x1F or et == 0x20:  # CMOD_REQD / CMOD_OPT token, then the type
            mods = [CustomModifier(et == 0x1F, self.type_token())]
            while self.peek() in (0x1F, 0x20):
                mods.append(CustomModifier(self.byte() == 0x1F, self.type_token()))
            inner = self.type(depth + 1, allow_pinned=allow_pinned)
            return replace(inner, modifiers=tuple(mods) + inner.modifiers)
        if et == 0x45 and allow_pinned:  # PINNED, only in local variable signatures
            inner = self.type(depth + 1)
            return replace(inner, pinned=True)
        raise MetadataError(f"bad element type {et:#04x} in signature")

    def method(self, depth: int) -> MethodSig:
        if depth > MAX_SIG_DEPTH:
            raise MetadataError("signature nested too deeply")
        conv = self.byte()
        if conv & 0x0F not in _METHOD_KINDS:
            raise MetadataError(f"bad method calling convention {conv:#04x}")
        generic = self.count("generic parameter") if conv & SIG_GENERIC else 0
        n = self.count("parameter")
        ret = self.type(depth + 1)
        params: list[SigType] = []
        vararg_start = None
        while len(params) < n:
            if self.peek() == 0x41:  # SENTINEL: the vararg part of a call site begins
                self.pos += 1
                if vararg_start is not None:
                    raise MetadataError("two sentinels in a method signature")
                vararg_start = len(params)
                continue
            params.append(self.type(depth + 1))
        return MethodSig(conv, generic, ret, tuple(params), vararg_start)


def decode_type_sig(blob: bytes) -> SigType:
    """A TypeSpec signature: a single type."""
    return _Cursor(blob).type(0)


def decode_field_sig(blob: bytes) -> SigType:
    """A FieldSig: 0x06, custom modifiers, the field's type."""
    c = _Cursor(blob)
    conv = c.byte()
    if conv & 0x0F != CallingConvention.FIELD:
        raise MetadataError(f"bad field signature lead byte {conv:#04x}")
    return c.type(0)


def decode_method_sig(blob: bytes) -> MethodSig:
    """A MethodDefSig, MethodRefSig, StandAloneMethodSig or PropertySig."""
    return _Cursor(blob).method(0)


def decode_member_sig(blob: bytes) -> SigType | MethodSig:
    """A MemberRef signature: a field's type or a method's signature."""
    if blob and blob[0] & 0x0F == CallingConvention.FIELD:
        return decode_field_sig(blob)
    return decode_method_sig(blob)


def decode_local_sig(blob: bytes) -> tuple[SigType, ...]:
    """A LocalVarSig: 0x07, count, types (which may be PINNED, BYREF or TYPEDBYREF)."""
    c = _Cursor(blob)
    conv = c.byte()
    if conv != CallingConvention.LOCAL_SIG:
        raise MetadataError(f"bad local signature lead byte {conv:#04x}")
    n = c.count("local")
    return tuple(c.type(0, allow_pinned=True) for _ in range(n))


def decode_method_spec_sig(blob: bytes) -> tuple[SigType, ...]:
    """A MethodSpec instantiation: 0x0A, count, type arguments."""
    c = _Cursor(blob)
    conv = c.byte()
    if conv != CallingConvention.GENERICINST:
        raise MetadataError(f"bad method instantiation lead byte {conv:#04x}")
    n = c.count("generic argument")
    return tuple(c.type(0) for _ in range(n))


# ---------------------------------------------------------------------------------------
# Rendering

# How reflection and SOS's dumpobj name primitives.
FULL_PRIMITIVE_NAMES: Mapping[int, str] = {
    0x01: "System.Void", 0x02: "System.Boolean", 0x03: "System.Char", 0x04: "System.SByte",
    0x05: "System.Byte", 0x06: "System.Int16", 0x07: "System.UInt16", 0x08: "System.Int32",
    0x09: "System.UInt32", 0x0A: "System.Int64", 0x0B: "System.UInt64",
    0x0C: "System.Single", 0x0D: "System.Double", 0x0E: "System.String",
    0x16: "System.TypedReference", 0x18: "System.IntPtr", 0x19: "System.UIntPtr",
    0x1C: "System.Object",
}  # fmt: skip

# How the runtime formats method signatures (MissingMethodException, SOS's method
# names): value primitives lose their namespace, String and Object keep it.
SHORT_PRIMITIVE_NAMES: Mapping[int, str] = {
    et: name.removeprefix("System.") if et not in (0x0E, 0x1C) else name
    for et, name in FULL_PRIMITIVE_NAMES.items()
}

TokenNamer = Callable[[int], str]
GenericFormatter = Callable[[str, Sequence[str]], str]


def angle_brackets(name: str, args: Sequence[str]) -> str:
    """The default generic instantiation style: ``List`1<System.Int32>``."""
    return f"{name}<{', '.join(args)}>"


def format_type_sig(
    sig: SigType,
    name_of: TokenNamer,
    *,
    generic_args: Sequence[str] | None = None,
    method_generic_args: Sequence[str] | None = None,
    primitive_names: Mapping[int, str] = FULL_PRIMITIVE_NAMES,
    generic_formatter: GenericFormatter = angle_brackets,
    show_modifiers: bool = False,
) -> str:
    """Render a signature type as text.

    ``name_of`` names a TypeDef/TypeRef/TypeSpec token. Generic parameters print as
    ``!n``/``!!n`` unless ``generic_args``/``method_generic_args`` supply names (the
    definition's parameter names or the actual arguments). Arrays print as ``T[]``,
    ``T[,]`` (``T[*]`` for a rank-1 general array), pointers ``T*``, byrefs ``T&``.
    """

    def fmt(t: SigType, depth: int) -> str:
        if depth > MAX_SIG_DEPTH:
            raise MetadataError("signature nested too deeply")
        text = _format_core(t, depth)
        if show_modifiers and t.modifiers:
            mods = " ".join(
                f"{'modreq' if m.required else 'modopt'}({name_of(m.token)})" for m in t.modifiers
            )
            text = f"{mods} {text}"
        return text

    def _format_core(t: SigType, depth: int) -> str:
        et = t.element_type
        name = primitive_names.get(et)
        if name is not None:
            return name
        if et == 0x12 or et == 0x11:
            return name_of(t.token or 0)
        if et == 0x1D:
            return fmt(t.element, depth + 1) + "[]"  # type: ignore[arg-type]
        if et == 0x14:
            # Rank 1 general arrays are "[*]" so they differ from SZARRAY's "[]".
            rank = min(max(t.rank, 1), MAX_ARRAY_RANK)
            dims = "[*]" if rank == 1 else "[" + "," * (rank - 1) + "]"
            return fmt(t.element, depth + 1) + dims  # type: ignore[arg-type]
        if et == 0x0F:
            return fmt(t.element, depth + 1) + "*"  # type: ignore[arg-type]
        if et == 0x10:
            return fmt(t.element, depth + 1) + "&"  # type: ignore[arg-type]
        if et == 0x13:
            if generic_args is not None and t.index < len(generic_args):
                return generic_args[t.index]
            return f"!{t.index}"
        if et == 0x1E:
            if method_generic_args is not None and t.index < len(method_generic_args):
                return method_generic_args[t.index]
            return f"!!{t.index}"
        if et == 0x15:
            args = [fmt(a, depth + 1) for a in t.args]
            return generic_formatter(name_of(t.token or 0), args)
        if et == 0x1B and t.method is not None:
            m = t.method
            params = ", ".join(fmt(p, depth + 1) for p in m.params)
            return f"method {fmt(m.return_type, depth + 1)} *({params})"
        raise MetadataError(f"cannot format element type {et:#04x}")

    return fmt(sig, 0)
