"""A method named the way SOS's ICorDebug stack (``clrstack -i``) names it: the calling
convention, the return type, the owner and method, and the parameter types in the element-type
vocabulary of ECMA-335 (``[DEFAULT] [hasThis] Void Ns.Type.Method(I4,String,Class Ns.Item)``),
which is what ILDasm-style signature dumpers print rather than C# names.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import MetadataError
from .signatures import ElementType as ET
from .signatures import MethodSig, SigType

if TYPE_CHECKING:
    from .reader import MetadataReader

_CALLING = ("[DEFAULT]", "[C]", "[STDCALL]", "[THISCALL]", "[FASTCALL]", "[VARARG]", "[FIELD]",
            "[LOCALSIG]", "[PROPERTY]", "[UNMANAGED]", "[GENERICINST]", "[NATIVEVARARG]")

# Element types printed by their ECMA name alone.
_NAMES = {ET.VOID: "Void", ET.BOOLEAN: "Boolean", ET.CHAR: "Char", ET.I1: "I1", ET.U1: "U1", ET.I2: "I2",
          ET.U2: "U2", ET.I4: "I4", ET.U4: "U4", ET.I8: "I8", ET.U8: "U8", ET.R4: "R4", ET.R8: "R8",
          ET.STRING: "String", ET.TYPEDBYREF: "TypedByRef", ET.I: "IntPtr", ET.U: "UIntPtr",
          ET.OBJECT: "Object"}


def ilasm_type(reader: "MetadataReader", t: SigType) -> str:
    """One signature type: ``I4``, ``Class Ns.T``, ``ValueType Ns.S``, ``SZArray String``, ``ByRef I4``."""
    et = t.element_type
    if et in _NAMES:
        return _NAMES[et]
    if et in (ET.PTR, ET.BYREF):
        return ("Ptr " if et == ET.PTR else "ByRef ") + (ilasm_type(reader, t.element) if t.element else "")
    if et in (ET.VAR, ET.MVAR):
        return ("!" if et == ET.VAR else "!!") + str(t.index)
    if et in (ET.CLASS, ET.VALUETYPE):
        return ("Class " if et == ET.CLASS else "ValueType ") + _sig_type_name(reader, t.token)
    if et == ET.GENERICINST:
        base = ("ValueType " if t.value_type else "Class ") + _sig_type_name(reader, t.token)
        return base + "<" + ",".join(ilasm_type(reader, a) for a in t.args) + ">"
    if et == ET.SZARRAY:
        return "SZArray " + (ilasm_type(reader, t.element) if t.element else "")
    if et == ET.ARRAY:
        return "MDArray " + (ilasm_type(reader, t.element) if t.element else "") + f" {t.rank}"
    if et == ET.FNPTR:
        return "FnPtr"
    return "INVALID_ELEMENT_TYPE"


def _sig_type_name(reader: "MetadataReader", token: int | None) -> str:
    """A signature's type as SOS's signature printer names it: a nested type by its own row's name
    alone (``WaitHandleWaitSourceMap``, not ``Ns.Outer+WaitHandleWaitSourceMap``)."""
    try:
        if token and token >> 24 == 0x02:
            td = reader.type_def(token)
            if td.enclosing is not None:
                return f"{td.namespace}.{td.name}" if td.namespace else td.name
        elif token and token >> 24 == 0x01:
            tr = reader.type_ref(token)
            if tr.resolution_scope is not None and tr.resolution_scope >> 24 == 0x01:
                return f"{tr.namespace}.{tr.name}" if tr.namespace else tr.name
    except MetadataError:
        pass
    return _type_ref(reader, token)


def _type_ref(reader: "MetadataReader", token: int | None) -> str:
    if not token:
        return ""
    try:
        return reader.type_name(token)
    except MetadataError:
        return f"{token:x}"


def ilasm_method(reader: "MetadataReader", token: int) -> str:
    """``[DEFAULT] [hasThis] Void Ns.Type.Method(I4,String)`` for a MethodDef token."""
    m = reader.method(token)
    sig: MethodSig = m.signature
    owner = reader.declaring_type(m.token)
    name = (_type_ref(reader, owner) + "." if owner else "") + m.name
    text = _CALLING[sig.kind] if sig.kind < len(_CALLING) else "[UNKNOWN]"
    text += " "
    if sig.has_this:
        text += "[hasThis] "
    if sig.explicit_this:
        text += "[explicit] "
    if sig.is_generic:
        text += f"[generic:{sig.generic_param_count}] "
    text += ilasm_type(reader, sig.return_type) + " " + name
    return text + "(" + ",".join(ilasm_type(reader, p) for p in sig.params) + ")"
