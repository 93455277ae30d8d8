"""A managed frame's instantiation as the debugger API types its variables (SOS's clrstack -i).

ICorDebug gives an argument typed ``!0`` or ``!!0`` (a generic type's or method's parameter),
and a struct's ``this``, the exact type the frame runs with: the class's arguments from the
MethodDesc's MethodTable, the method's from the MethodDesc itself. Code shared between
instantiations runs with ``System.__Canon`` there; its frame's generic context names the exact
ones (genericcontext.py), and where it does not, SOS prints ``System.__Canon`` as well. Both
come from the runtime's names of the two, which carry each argument's assembly; an argument's
MethodTable is found through that assembly's metadata when it is a loaded, non-generic type
(what is needed to read a struct or an enum in place).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import SosError
from ...formats.metadata.errors import MetadataError
from ...formats.metadata.signatures import ElementType as ET
from ...formats.metadata.signatures import SigType
from ..typesystem.debuggernames import TypeArgument, debugger_type_name, method_type_arguments, type_arguments
from .genericcontext import exact_instantiation

if TYPE_CHECKING:
    from ...readers.records import MethodDescData
    from ...readers.stacks import ClrStackFrame
    from ..runtime import ClrRuntime

_CANON = "System.__Canon"

# The element types a keyword argument stands for (the debugger API's names of primitives).
_KEYWORD_TYPES = {"bool": ET.BOOLEAN, "char": ET.CHAR, "signed byte": ET.I1, "byte": ET.U1, "short": ET.I2,
                  "unsigned short": ET.U2, "int": ET.I4, "unsigned int": ET.U4, "long": ET.I8,
                  "unsigned long": ET.U8, "float": ET.R4, "double": ET.R8, "IntPtr": ET.I, "UIntPtr": ET.U,
                  "string": ET.STRING, "object": ET.OBJECT}
_VALUE_BASES = ("System.ValueType", "System.Enum")


@dataclass(frozen=True, slots=True)
class GenericArgument:
    """One resolved ``!n``/``!!n``: the debugger API's name; the element type of a primitive,
    string or object argument (else None); the MethodTable when loaded and non-generic (0 else);
    whether it is a value type (None: cannot tell)."""
    name: str
    keyword: int | None
    mt: int
    value_type: bool | None

    def as_sig(self) -> SigType | None:
        """A primitive, string or object argument as the signature type it stands for."""
        return SigType(self.keyword) if self.keyword is not None else None


@dataclass(frozen=True, slots=True)
class FrameGenerics:
    class_args: tuple[GenericArgument, ...]
    method_args: tuple[GenericArgument, ...]
    this_type: str       # the declaring type's exact name ("" when unknown)
    this_is_struct: bool  # the method is a value type's: its `this` is a byref

    def argument(self, sig: SigType | None) -> GenericArgument | None:
        """The argument ``sig`` (a VAR or MVAR) stands for, when the frame's instantiation has it."""
        if sig is None or sig.element_type not in (ET.VAR, ET.MVAR):
            return None
        args = self.class_args if sig.element_type == ET.VAR else self.method_args
        return args[sig.index] if sig.index < len(args) else None


NONE = FrameGenerics((), (), "", False)


def frame_generics(runtime: "ClrRuntime", mdd: "MethodDescData | None", frame: "ClrStackFrame | None" = None, *,
                   has_this: bool = False) -> FrameGenerics:
    """The instantiation of the method ``mdd`` describes, as the variables of ``frame`` (a frame
    of that method; ``has_this``: an instance method) are typed: for shared code, the one its
    generic context names, when it names one."""
    if mdd is None:
        return NONE
    mt = mdd.method_table_ptr
    class_name = runtime.types.name_of(mt) if mt else ""
    method_name = runtime.method_desc_name(mdd.method_desc_ptr) or ""
    if frame is not None and (_CANON in class_name or _CANON in method_name):
        # A generic method's context is its MethodDesc; only a class's instance method that is
        # not itself generic takes it from `this`.
        shared_method = any(_CANON in a.runtime_name for a in method_type_arguments(method_name)) \
            if "[" in method_name else False
        exact = exact_instantiation(runtime, frame, mdd, from_this=has_this and not shared_method)
        if exact is not None:
            mt = exact.class_mt
            class_name = runtime.types.name_of(mt) or class_name
            method_name = runtime.method_desc_name(exact.method_desc) or method_name
    class_args = tuple(_resolve(runtime, a) for a in type_arguments(class_name)) if "[" in class_name else ()
    method_args = tuple(_resolve(runtime, a) for a in method_type_arguments(method_name)) if "[" in method_name else ()
    return FrameGenerics(class_args, method_args, debugger_type_name(class_name) if class_name else "",
                         bool(mt) and _is_value_type(runtime, mt))


def _is_value_type(runtime: "ClrRuntime", mt: int) -> bool:
    data = runtime.method_table_data(mt)
    parent = data.parent_method_table if data is not None else 0
    return bool(parent) and runtime.types.name_of(parent) in _VALUE_BASES and \
        runtime.types.name_of(mt) not in _VALUE_BASES


def _resolve(runtime: "ClrRuntime", arg: TypeArgument) -> GenericArgument:
    keyword = _KEYWORD_TYPES.get(arg.name)
    if keyword is not None:
        return GenericArgument(arg.name, keyword, 0, keyword not in (ET.STRING, ET.OBJECT))
    mt = _loaded_method_table(runtime, arg)
    return GenericArgument(arg.name, None, mt, _is_value_type(runtime, mt) if mt else _defined_as_value_type(runtime, arg))


def _defined_as_value_type(runtime: "ClrRuntime", arg: TypeArgument) -> bool | None:
    """Whether a generic instantiation's definition (``Ns.Type`1`` of ``Ns.Type`1[[…]]``) derives
    from System.ValueType or System.Enum, by its TypeDef in its assembly (None: not found). A
    struct state machine of a shared async method (``<SerializeAsync>d__15<T>``) is one."""
    open_name = arg.runtime_name.split("[", 1)[0]
    if not arg.assembly or open_name == arg.runtime_name or any(c in open_name for c in "*&"):
        return None
    catalog = runtime.catalog
    try:
        for module in catalog.find(arg.assembly):
            md = catalog.metadata(module)
            token = md.find_type(open_name) if md is not None else None
            if token:
                extends = md.type_def(token).extends
                return bool(extends) and md.type_name(extends) in _VALUE_BASES
    except (SosError, MetadataError):
        return None
    return None


def _loaded_method_table(runtime: "ClrRuntime", arg: TypeArgument) -> int:
    """The MethodTable of a non-generic, non-array argument, looked up by name in its
    assembly's module (0: generic, an array, or not loaded)."""
    if not arg.assembly or any(c in arg.runtime_name for c in "[]*&"):
        return 0
    catalog = runtime.catalog
    try:
        for module in catalog.find(arg.assembly):
            md = catalog.metadata(module)
            token = md.find_type(arg.runtime_name) if md is not None else None
            if token:
                return catalog.type_def_map(module.address).get(token) or 0
    except (SosError, MetadataError):
        return 0
    return 0
