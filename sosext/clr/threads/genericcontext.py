"""The exact instantiation a frame of shared generic code runs with (its generic context).

Code compiled once for every instantiation over reference types (``List<__Canon>.Add``,
``ValueTask<__Canon>.GetResult``, ``Foo.Bar<__Canon>``) learns which instantiation it runs for
from a generic context: the ``this`` object's MethodTable for an instance method of a class, a
hidden MethodTable argument for a struct's instance method or a static method of a generic type,
a hidden MethodDesc argument for a generic method. Where the method uses it, the JIT keeps the
context in a stack slot that the GC info header names (flags say which of the three it is).

The runtime's stack walk reads that slot (EECodeManager::GetExactGenericsToken): since .NET 10
(GC info format 4) the slot is measured from the frame register when the method has one (the
header says so), else from the stack pointer; before (.NET 8 and 9, formats 2 and 3, which are
laid out alike), from the caller's stack pointer (GetCallerSp: the SP the frame returns to, which
the walk gives each managed frame but its last), and in a funclet through the parent's PSPSym,
which is not read here (a funclet keeps the canonical instantiation). The
debugger API (DacDbiInterfaceImpl's frame data, CordbJITILFrame::LoadGenericArgs, whose types
SOS's clrstack -i prints) types a frame's variables with the instantiation found there; without a
slot, a class method's ``this`` argument (outside the prolog and epilog) gives it; failing both it
keeps the canonical one. (For a hidden MethodTable or MethodDesc argument without a slot the
debugger API also looks for its place in the JIT's variable info; that is not read here.)

What the slot holds is target data: a MethodTable counts only when it is an instantiation of the
frame's own generic type (or derives from one), a MethodDesc only when it is an instantiation of
the frame's method; anything else leaves the canonical instantiation.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import SosError
from ...formats.gcinfo import (GENERICS_MASK, GENERICS_MD, HAS_STACK_BASE_REGISTER, decode_gcinfo_header,
                               gc_info_version)
from ...readers.records import IL_OFFSET_EPILOG, IL_OFFSET_PROLOG
from ..addresses import AddressKind, classifier
from ..heap.objects import method_table_of
from .funclets import code_and_funclet
from .stacks import ClrStackFrame

if TYPE_CHECKING:
    from ...readers.records import MethodDescData
    from ..runtime import ClrRuntime

_HEADER_READ = 64  # bytes: more than any GC info header takes
_MAX_PARENTS = 64  # a class hierarchy deeper than this is a corrupt one
_THIS = GENERICS_MASK  # GENERIC_CONTEXTPARAM_THIS: both flag bits (MethodTable 0x10, MethodDesc 0x20)


@dataclass(frozen=True, slots=True)
class ExactInstantiation:
    """Where a shared frame's exact type arguments are named: ``class_mt`` the instantiation of
    the method's declaring type, ``method_desc`` the instantiated method (its own arguments)."""

    class_mt: int
    method_desc: int


def exact_instantiation(runtime: "ClrRuntime", frame: ClrStackFrame, mdd: "MethodDescData", *,
                        from_this: bool) -> ExactInstantiation | None:
    """The instantiation ``frame`` (a frame of shared generic code, MethodDesc data ``mdd``)
    runs with; None where the frame does not say (the canonical one then stands).
    ``from_this``: the method takes its context from ``this`` (an instance method of a class,
    not itself generic), so the ``this`` argument stands in for a missing slot."""
    try:
        token, kind = _context_slot(runtime, frame)
        if not token and kind in (None, _THIS) and from_this:
            token, kind = _this_argument(runtime, frame, mdd), _THIS
        if not token:
            return None
        if kind == GENERICS_MD:
            return _from_method_desc(runtime, token, mdd)
        mt = _object_type(runtime, token) if kind == _THIS else token
        class_mt = _instantiation_of(runtime, mt, mdd.method_table_ptr) if mt else 0
        return ExactInstantiation(class_mt, mdd.method_desc_ptr) if class_mt else None
    except SosError:
        return None


def _context_slot(runtime: "ClrRuntime", frame: ClrStackFrame) -> tuple[int, int | None]:
    """(what the GC info's generic context slot holds, the context's kind); (0, None) when the
    method's GC info names no slot, or the walk did not give the register it is measured from."""
    version = _gc_info_version(runtime)
    gc_info = runtime.reader.code_gc_info(frame.ip)
    if not gc_info:
        return 0, None
    info = decode_gcinfo_header(bytes(runtime.target.read_partial(gc_info, _HEADER_READ)), runtime.target.arch,
                                version)
    if info.generics_context is None:
        return 0, None
    if version < 4:
        # A funclet's slot is its parent's, found through the PSPSym; clrstack -i reads a
        # funclet's variables in its parent's frame anyway (frames.inspection_frame).
        if not frame.caller_sp or _in_funclet(runtime, frame.ip):
            return 0, None
        base = frame.caller_sp
    elif info.flags & HAS_STACK_BASE_REGISTER:
        if not frame.frame_pointer:
            return 0, None
        base = frame.frame_pointer
    else:
        base = frame.sp
    slot = (base + info.generics_context) & 0xFFFFFFFFFFFFFFFF
    return runtime.target.read_pointer(slot), info.flags & GENERICS_MASK


def _in_funclet(runtime: "ClrRuntime", ip: int) -> bool:
    """Whether ``ip`` is in a funclet, or cannot be told to be in the method's body."""
    found = code_and_funclet(runtime, ip)
    return found is None or found[1]


def _gc_info_version(runtime: "ClrRuntime") -> int:
    try:
        return gc_info_version(int(runtime.info.version.split(".")[0]))
    except (ValueError, AttributeError):
        return gc_info_version(10)


def _this_argument(runtime: "ClrRuntime", frame: ClrStackFrame, mdd: "MethodDescData") -> int:
    """The ``this`` object of a class's instance method, as the frame's variable info places it,
    outside the prolog and epilog (where the debugger API takes no variable's value)."""
    args = frame.arguments
    if not args or args[0].name != "this" or args[0].value is None or args[0].data is None:
        return 0
    offsets = runtime.reader.il_offsets(frame.ip) or []
    if IL_OFFSET_PROLOG in offsets or IL_OFFSET_EPILOG in offsets:
        return 0
    data = runtime.method_table_data(mdd.method_table_ptr)
    if data is None or _is_value_type(runtime, data.parent_method_table):
        return 0  # a struct's `this` is a byref, not the context
    return args[0].value


def _is_value_type(runtime: "ClrRuntime", parent: int) -> bool:
    return bool(parent) and runtime.types.name_of(parent) in ("System.ValueType", "System.Enum")


def _object_type(runtime: "ClrRuntime", obj: int) -> int:
    """The MethodTable of the object at ``obj``; 0 when it is no object."""
    if classifier(runtime).classify(obj).kind is not AddressKind.OBJECT:
        return 0
    return method_table_of(runtime.target, obj) or 0


def _instantiation_of(runtime: "ClrRuntime", mt: int, canonical: int) -> int:
    """``mt`` or the base class of it that instantiates the same generic type as ``canonical``
    (GetInstantiationOfParentClass); 0 when none does or ``mt`` is no MethodTable."""
    check = classifier(runtime)
    want = runtime.method_table_data(canonical)
    if want is None:
        return 0
    for _ in range(_MAX_PARENTS):
        if not mt or not check.is_method_table(mt):
            return 0
        data = runtime.method_table_data(mt)
        if data is None:
            return 0
        if data.module == want.module and data.token == want.token:
            return mt
        mt = data.parent_method_table
    return 0


def _from_method_desc(runtime: "ClrRuntime", md: int, mdd: "MethodDescData") -> ExactInstantiation | None:
    """A MethodDesc context: an instantiation of the frame's own method (same module and
    token), whose MethodTable is its declaring type's instantiation."""
    if md == mdd.method_desc_ptr or not classifier(runtime).is_method_desc(md):
        return None
    data = runtime.reader.method_desc_data(md)
    if data is None or data.module_ptr != mdd.module_ptr or data.token != mdd.token:
        return None
    class_mt = _instantiation_of(runtime, data.method_table_ptr, mdd.method_table_ptr)
    return ExactInstantiation(class_mt, md) if class_mt else None
