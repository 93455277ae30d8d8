"""Decoded metadata rows. Tokens are full 32-bit tokens (table << 24 | rid); a null
reference is ``None``."""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Sequence

from .signatures import MethodSig, SigType

# TypeAttributes / FieldAttributes / MethodAttributes bits that callers ask about often.
TYPE_INTERFACE = 0x20
TYPE_VISIBILITY_MASK = 0x07
FIELD_STATIC = 0x10
FIELD_LITERAL = 0x40
METHOD_STATIC = 0x10
METHOD_VIRTUAL = 0x40
METHOD_ABSTRACT = 0x400


@dataclass(frozen=True, slots=True)
class TypeDef:
    token: int
    flags: int
    name: str
    namespace: str
    extends: int | None  # TypeDef, TypeRef or TypeSpec token; None for Object and interfaces
    fields: Sequence[int]  # Field tokens, in declaration order
    methods: Sequence[int]  # MethodDef tokens, in declaration order
    enclosing: int | None  # the declaring TypeDef of a nested type
    generic_params: tuple[str, ...]  # names, by position

    @property
    def is_nested(self) -> bool:
        return self.enclosing is not None

    @property
    def is_interface(self) -> bool:
        return bool(self.flags & TYPE_INTERFACE)


@dataclass(frozen=True, slots=True)
class TypeRef:
    token: int
    resolution_scope: int | None  # Module, ModuleRef, AssemblyRef or (nested) TypeRef token
    name: str
    namespace: str


@dataclass(frozen=True, slots=True)
class TypeSpec:
    token: int
    signature: SigType


@dataclass(frozen=True, slots=True)
class Field:
    token: int
    flags: int
    name: str
    signature: SigType  # the field's type, with any custom modifiers

    @property
    def is_static(self) -> bool:
        return bool(self.flags & FIELD_STATIC)

    @property
    def is_literal(self) -> bool:
        return bool(self.flags & FIELD_LITERAL)


@dataclass(frozen=True, slots=True)
class MethodDef:
    token: int
    flags: int
    impl_flags: int
    name: str
    rva: int
    signature: MethodSig

    @property
    def is_static(self) -> bool:
        return bool(self.flags & METHOD_STATIC)

    @property
    def is_virtual(self) -> bool:
        return bool(self.flags & METHOD_VIRTUAL)


@dataclass(frozen=True, slots=True)
class MemberRef:
    token: int
    parent: int | None  # TypeDef, TypeRef, ModuleRef, MethodDef or TypeSpec token
    name: str
    signature: MethodSig | SigType  # SigType when it refers to a field

    @property
    def is_field(self) -> bool:
        return isinstance(self.signature, SigType)


@dataclass(frozen=True, slots=True)
class MethodSpec:
    token: int
    method: int | None  # MethodDef or MemberRef token
    instantiation: tuple[SigType, ...]


@dataclass(frozen=True, slots=True)
class AssemblyDef:
    token: int
    name: str
    version: tuple[int, int, int, int]
    culture: str
    flags: int
    public_key: bytes
    hash_algorithm: int


@dataclass(frozen=True, slots=True)
class AssemblyRef:
    token: int
    name: str
    version: tuple[int, int, int, int]
    culture: str
    flags: int
    public_key_or_token: bytes


@dataclass(frozen=True, slots=True)
class ExportedType:
    token: int
    flags: int
    type_def_id: int  # a hint: the TypeDef token in the module that defines it
    name: str
    namespace: str
    implementation: int | None  # File, AssemblyRef, or enclosing ExportedType token


@dataclass(frozen=True, slots=True)
class ModuleDef:
    name: str
    mvid: uuid.UUID | None
    generation: int
