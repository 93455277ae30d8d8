"""Signatures as SOS's dumpsig and dumpsigelem write them (its metadata reader's style):
``[DEFAULT] [hasThis] I4 (String,Class System.Collections.Generic.List`1<I4>,ByRef I8)``.

Element types by their CorElementType names (I4, String, Object, IntPtr, SZArray <type>,
ByRef <type>, Class/ValueType <full name>), generic parameters as !n and !!n, the calling
convention in brackets first.
"""
from __future__ import annotations

from typing import Callable

from ...formats.metadata import MetadataError, MethodSig, SigType

ELEMENT_NAMES = {
    0x01: "Void", 0x02: "Boolean", 0x03: "Char", 0x04: "I1", 0x05: "U1", 0x06: "I2", 0x07: "U2", 0x08: "I4",
    0x09: "U4", 0x0A: "I8", 0x0B: "U8", 0x0C: "R4", 0x0D: "R8", 0x0E: "String", 0x16: "TypedByRef",
    0x18: "IntPtr", 0x19: "UIntPtr", 0x1C: "Object",
}
CALLING = ("[DEFAULT]", "[C]", "[STDCALL]", "[THISCALL]", "[FASTCALL]", "[VARARG]", "[FIELD]", "[LOCALSIG]",
           "[PROPERTY]", "[UNMANAGED]", "[GENERICINST]", "[NATIVEVARARG]", "[UNKNOWN]", "[UNKNOWN]",
           "[UNKNOWN]", "[UNKNOWN]")
MAX_DEPTH = 64

TokenName = Callable[[int], str]


def element_text(t: SigType, name: TokenName, depth: int = 0) -> str:
    """One type (SOS's GetOneElementType)."""
    if depth > MAX_DEPTH:
        raise MetadataError("signature nested too deeply")
    text = ""
    for m in t.modifiers:
        text += f"{'CMOD_REQD' if m.required else 'CMOD_OPT'} {name(m.token)} "
    if t.pinned:
        text += "PINNED "
    et = t.element_type
    if et in ELEMENT_NAMES:
        return text + ELEMENT_NAMES[et]
    if et in (0x0F, 0x10):
        return text + ("Ptr " if et == 0x0F else "ByRef ") + element_text(t.element, name, depth + 1)  # type: ignore[arg-type]
    if et == 0x13:
        return f"{text}!{t.index}"
    if et == 0x1E:
        return f"{text}!!{t.index}"
    if et in (0x11, 0x12):
        return text + ("ValueType " if et == 0x11 else "Class ") + name(t.token or 0)
    if et == 0x15:
        base = ("ValueType " if t.value_type else "Class ") + name(t.token or 0)
        return f"{text}{base}<{','.join(element_text(a, name, depth + 1) for a in t.args)}>"
    if et == 0x1D:
        return text + "SZArray " + element_text(t.element, name, depth + 1)  # type: ignore[arg-type]
    if et == 0x14:
        sizes = "".join(f"{s} " for s in t.sizes)
        lows = "".join(f"{b} " for b in t.lower_bounds)
        shape = f"{t.rank} {len(t.sizes)} {sizes or ' '}{len(t.lower_bounds)} {lows}" if t.rank else "0"
        return text + "{" + element_text(t.element, name, depth + 1) + ", " + shape.rstrip() + "}"  # type: ignore[arg-type]
    if et == 0x1B and t.method is not None:
        m = t.method
        flags = ("[explicit] " if m.explicit_this else "") + ("[hasThis] " if m.has_this else "")
        params = ",".join(element_text(p, name, depth + 1) for p in m.params)
        return f"{text}FnPtr {flags}{CALLING[m.kind]}{element_text(m.return_type, name, depth + 1)}({params})"
    return text + "INVALID_ELEMENT_TYPE"


def method_sig_text(sig: MethodSig, name: TokenName) -> str:
    """A whole method signature (SOS's GetFullNameForMD without a method name)."""
    flags = ("[hasThis] " if sig.has_this else "") + ("[explicit] " if sig.explicit_this else "")
    if sig.is_generic:
        flags += f"[generic:{sig.generic_param_count}] "
    params = ",".join(element_text(p, name) for p in sig.params)
    return f"{CALLING[sig.kind]} {flags}{element_text(sig.return_type, name)} ({params})"


def field_sig_text(t: SigType, name: TokenName) -> str:
    """A field signature: ``[FIELD] <type>``."""
    return f"{CALLING[6]} {element_text(t, name)}"


def sos_type_namer(md) -> TokenName:  # type: ignore[no-untyped-def]
    """Names as SOS's metadata reader gives them: a TypeDef's or TypeRef's namespace and
    name (no enclosing type); a TypeSpec token as its hex value; 0x%08x when unreadable."""
    def name(token: int) -> str:
        if md is None:
            return f"0x{token:08x}"
        kind = token >> 24
        try:
            if kind == 0x02:
                td = md.type_def(token)
                return f"{td.namespace}.{td.name}" if td.namespace else td.name
            if kind == 0x01:
                ref = md.type_ref(token)
                return f"{ref.namespace}.{ref.name}" if ref.namespace else ref.name
        except MetadataError:
            return f"0x{token:08x}"
        return f"{token:x}"
    return name
