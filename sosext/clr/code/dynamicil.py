"""The IL of a DynamicMethod (System.Reflection.Emit), which lives in managed objects rather
than in a module: DynamicMethod._resolver (m_resolver before .NET 8) is a DynamicResolver
whose m_code is the IL (a byte[]) and whose m_scope.m_tokens (a List<object>) resolves the
tokens the IL names: a token's low 24 bits index that list. The list holds
RuntimeTypeHandles, RuntimeMethodHandles, RuntimeFieldHandles, strings, signatures.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import SosError
from ..addresses import classifier
from ..heap.objects import ARRAY_DATA_OFFSET, method_table_of, string_text

if TYPE_CHECKING:
    from ..runtime import ClrRuntime

MAX_DYNAMIC_IL = 1 << 24
MAX_TOKENS = 1 << 20
STRING_SHOWN = 40  # SOS shows this many characters of a string token


@dataclass(frozen=True, slots=True)
class DynamicIL:
    dynamic_method: int  # the DynamicMethod object
    code: bytes
    token_array: int  # the object[] behind m_scope.m_tokens (0: none)
    tokens: tuple[int, ...]  # its elements (object addresses)


class DynamicInfoMissing(SosError):
    """The object holds no DynamicMethod's IL where it should (SOS: "Error gathering dynamic
    info from object at ...")."""


class _Objects:
    """Reading fields of objects by name, each object checked to be one first."""

    def __init__(self, rt: "ClrRuntime") -> None:
        self.rt = rt
        self.cls = classifier(rt)

    def mt(self, obj: int) -> int:
        if not obj or self.cls.object_or_none(obj) is None:
            raise DynamicInfoMissing(f"{obj:#x} is not an object")
        mt = method_table_of(self.rt.target, obj)
        if not mt:
            raise DynamicInfoMissing(f"{obj:#x} is not an object")
        return mt

    def field(self, obj: int, *names: str) -> int | None:
        mt = self.mt(obj)
        for name in names:
            f = self.rt.fields.field(mt, name)
            if f is not None and f.is_instance:
                address = f.address_in(obj)
                if f.is_struct:  # a handle struct (RuntimeMethodHandleInternal): its one pointer
                    raw = self.rt.target.read_partial(address, 8)
                    return int.from_bytes(raw, "little") if len(raw) == 8 else None
                return int(self.rt.fields.read(f, address))
        return None

    def array(self, obj: int, limit: int) -> tuple[int, int]:
        """(element count, address of the first element) of a single-dimension array."""
        self.mt(obj)
        raw = self.rt.target.read_partial(obj + 8, 4)
        n = int.from_bytes(raw, "little") if len(raw) == 4 else 0
        if n > limit:
            raise DynamicInfoMissing(f"the array at {obj:#x} has {n} elements: not what a DynamicMethod keeps")
        return n, obj + ARRAY_DATA_OFFSET


def read_dynamic_il(rt: "ClrRuntime", dynamic_method: int) -> DynamicIL:
    """The IL and token list of the DynamicMethod object at ``dynamic_method``."""
    o = _Objects(rt)
    resolver = o.field(dynamic_method, "_resolver", "m_resolver")
    if not resolver:
        raise DynamicInfoMissing(f"{dynamic_method:#x} is not a DynamicMethod with IL (no resolver: not yet compiled?)")
    code_array = o.field(resolver, "m_code")
    if not code_array:
        raise DynamicInfoMissing("the DynamicMethod's resolver holds no IL")
    n, data = o.array(code_array, MAX_DYNAMIC_IL)
    code = bytes(rt.target.read_partial(data, n))
    if len(code) != n:
        raise SosError("the DynamicMethod's IL cannot be read from the target")
    tokens: tuple[int, ...] = ()
    token_array = 0
    scope = o.field(resolver, "m_scope")
    token_list = o.field(scope, "m_tokens") if scope else None
    if token_list:
        token_array = o.field(token_list, "_items") or 0
        count = o.field(token_list, "_size") or 0
        if token_array:
            n_items, first = o.array(token_array, MAX_TOKENS)
            raw = bytes(rt.target.read_partial(first, 8 * min(n_items, count)))
            tokens = tuple(int.from_bytes(raw[i:i + 8], "little") for i in range(0, len(raw) - 7, 8))
    return DynamicIL(dynamic_method, code, token_array, tokens)


def dynamic_token_text(rt: "ClrRuntime", il: DynamicIL, token: int) -> str:
    """A token of dynamic IL as SOS shows it: a type's or method's name when the token list
    holds its handle, a string's text, else the token and the object it stands for."""
    rid = token & 0xFFFFFF
    obj = il.tokens[rid] if rid < len(il.tokens) else 0
    kind = token >> 24
    o = _Objects(rt)
    try:
        if kind == 0x70 and obj:
            return f'{token:x} "{string_text(rt.target, obj, STRING_SHOWN)}"'
        if kind == 0x02 and obj:
            mt = o.field(obj, "m_type")  # a RuntimeTypeHandle boxed: its RuntimeType
            handle = o.field(mt, "m_handle") if mt else None
            if handle:
                return f'{token:x} "{rt.heap.types.name_of(handle)}"'
        if kind == 0x06 and obj:
            info = o.field(obj, "m_value")  # RuntimeMethodHandle -> its IRuntimeMethodInfo
            md = o.field(info, "m_value", "m_handle") if info else None  # a stub's handle, or a MethodInfo's
            m = rt.methods.get(md) if md else None
            if m is not None:
                return f"{token:x} {m.name}"
    except SosError:
        pass
    return f"{token:x} ({obj:016x})"
