"""Delegates: the object a delegate calls its method on, and the method.

A System.Delegate keeps ``_target`` (the instance, or for a static method the delegate
itself), ``_methodPtr`` (the code to call) and ``_methodPtrAux`` (for static and some
open-instance delegates the real method's code, ``_methodPtr`` then being a shuffle thunk).
A System.MulticastDelegate with more than one method keeps them as single-cast delegates in
``_invocationList`` (an object[] of which the first ``_invocationCount`` elements count).
The method is found from either code address: as jitted code, or as a precode stub.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import SosError
from ..heap.instances import ObjectReader, reference_elements
from .timers import method_desc_of_code, method_of_code

if TYPE_CHECKING:
    from ..runtime import ClrRuntime

DELEGATE = "System.Delegate"
_MAX_INVOCATIONS = 1 << 20


@dataclass(frozen=True, slots=True)
class DelegateCall:
    """One method a delegate calls."""

    delegate: int  # the single-cast delegate object
    target: int  # _target: the instance (or the delegate itself for a static method)
    method_desc: int  # 0 when the code cannot be mapped to a method
    method_name: str  # as the runtime names it, "Namespace.Type.Method(Args)"; "" if unknown


def derives_from(runtime: "ClrRuntime", mt: int, name: str) -> bool:
    """Whether the MethodTable is the type ``name`` or derives from it."""
    types = runtime.types
    seen: set[int] = set()
    while mt and mt not in seen:
        seen.add(mt)
        t = types.get(mt)
        if t is None:
            return False
        if t.name == name:
            return True
        mt = t.parent
    return False


def is_delegate(runtime: "ClrRuntime", mt: int) -> bool:
    return derives_from(runtime, mt, DELEGATE)


def delegate_method_desc(reader: ObjectReader, delegate: int) -> int:
    """The MethodDesc a single-cast delegate calls: from ``_methodPtrAux`` first (a static or
    open delegate's real method), then ``_methodPtr``; 0 when neither maps to a method."""
    for name in ("_methodPtrAux", "_methodPtr"):
        if not reader.has_field(delegate, name):
            continue
        code = reader.read(delegate, name)
        md = method_desc_of_code(reader.runtime, code) if code else 0
        if md:
            return md
    return 0


def invocation_list(reader: ObjectReader, delegate: int) -> list[int] | None:
    """The single-cast delegates of a multicast delegate in invocation order, or None when
    the delegate calls one method itself."""
    if not reader.has_field(delegate, "_invocationList"):
        return None
    inv = reader.read(delegate, "_invocationList")
    if not inv:
        return None
    count = reader.read(delegate, "_invocationCount") if reader.has_field(delegate, "_invocationCount") else 0
    # Anything but an array of delegates here is the runtime's own (wrapper delegates): no list.
    return reference_elements(reader, inv, min(count, _MAX_INVOCATIONS)) or []


def delegate_calls(runtime: "ClrRuntime", address: int) -> list[DelegateCall]:
    """Every method the delegate at ``address`` calls, in invocation order (the caller has
    checked that it is a delegate). Nested invocation lists are followed once each."""
    reader = ObjectReader(runtime)
    out: list[DelegateCall] = []
    seen: set[int] = set()
    todo = [address]
    while todo:
        d = todo.pop()
        if d in seen or len(seen) > _MAX_INVOCATIONS:
            continue
        seen.add(d)
        if not reader.has_field(d, "_target"):
            raise SosError(f"{reader.type_name(d)} has no _target field: this runtime's delegates are not supported")
        listed = invocation_list(reader, d)
        if listed is not None:
            todo.extend(reversed(listed))
            continue
        md = delegate_method_desc(reader, d)
        name = (runtime.method_desc_name(md) or "") if md else ""
        out.append(DelegateCall(d, reader.read(d, "_target"), md, name))
    return out


def callback_name(reader: ObjectReader, delegate: int, target_type: str) -> str:
    """How SOS's threadpoolqueue names a callback: ``Type.Method`` when the method is the
    target's own (or the delegate type is WaitCallback/Action<…>), else ``(TargetType)Type.Method``."""
    runtime = reader.runtime
    method = None
    for name in ("_methodPtr", "_methodPtrAux"):
        code = reader.read(delegate, name) if reader.has_field(delegate, name) else 0
        method = method_of_code(runtime, code) if code else None
        if method is not None:
            break
    if method is None:
        return ""
    declaring, name = method
    if declaring == target_type or target_type == "System.Threading.WaitCallback" \
            or target_type.startswith("System.Action<"):
        return f"{declaring}.{name}"
    return f"({target_type}){declaring}.{name}"
