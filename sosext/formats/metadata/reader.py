"""MetadataReader: names and signatures from one module's metadata blob.

The blob is what the runtime's DAC points at (the metadata root, "BSJB"), read out of the
target in one piece. Rows are decoded on first use and the records cached, so asking for a
MethodTable's name costs a few dictionary lookups once the module has been touched.
"""
from __future__ import annotations

import uuid
from typing import Iterator, Mapping, Sequence

from .errors import MetadataError
from .heaps import BlobHeap, GuidHeap, StringsHeap, UserStringHeap
from .records import (
    AssemblyDef,
    AssemblyRef,
    ExportedType,
    Field,
    MemberRef,
    MethodDef,
    MethodSpec,
    ModuleDef,
    TypeDef,
    TypeRef,
    TypeSpec,
)
from .root import MetadataRoot, parse_root
from .signatures import (
    FULL_PRIMITIVE_NAMES,
    SHORT_PRIMITIVE_NAMES,
    GenericFormatter,
    MethodSig,
    SigType,
    angle_brackets,
    decode_field_sig,
    decode_local_sig,
    decode_member_sig,
    decode_method_sig,
    decode_method_spec_sig,
    decode_type_sig,
    format_type_sig,
)
from .tables import (
    COL,
    CUSTOM_ATTRIBUTE_TYPE,
    HAS_CUSTOM_ATTRIBUTE,
    IMPLEMENTATION,
    MEMBER_REF_PARENT,
    METHOD_DEF_OR_REF,
    PTR_TABLE,
    RESOLUTION_SCOPE,
    TOKEN_USER_STRING,
    TYPE_DEF_OR_REF,
    TYPE_OR_METHOD_DEF,
    Table,
    TableIndex,
    TableStream,
)

T = TableIndex
MAX_NESTING = 64  # enclosing-type chains; real code nests a handful deep
# A TypeSpec whose signature names another TypeSpec (legal only in modifiers) is named
# one level deep; a longer chain is corruption and could otherwise loop.
_MAX_TYPESPEC_LEVEL = 2
_FIELD_LIST = COL[T.TYPE_DEF]["FieldList"]
_METHOD_LIST = COL[T.TYPE_DEF]["MethodList"]
_PARAM_LIST = COL[T.METHOD_DEF]["ParamList"]

__all__ = ["MetadataReader"]


class MetadataReader:
    """Read-only view of one module's ECMA-335 metadata."""

    def __init__(self, blob: bytes | bytearray | memoryview) -> None:
        # One private copy: later reads are bytes indexing (the fastest access Python has)
        # and a live target's memory changing under us cannot tear a row.
        data = bytes(blob)
        self._data = data
        self.root: MetadataRoot = parse_root(data)

        def heap(name: str) -> tuple[int, int]:
            s = self.root.stream(name)
            return (s.offset, s.size) if s else (0, 0)

        self.strings = StringsHeap(data, *heap("#Strings"))
        self.blobs = BlobHeap(data, *heap("#Blob"))
        self.user_strings = UserStringHeap(data, *heap("#US"))
        self.guids = GuidHeap(data, *heap("#GUID"))
        ts = self.root.stream("#~", "#-")
        if ts is None:
            raise MetadataError("metadata has no table stream (#~ or #-)")
        self.uncompressed = ts.name == "#-"
        # "#JTD" marks a minimal delta whose indexes are all 4 bytes wide.
        force_large = self.root.stream("#JTD") is not None
        self.table_stream = TableStream(data, ts.offset, ts.size, force_large=force_large)
        self._tables = self.table_stream.tables

        self._type_defs: dict[int, TypeDef] = {}
        self._names: dict[int, str] = {}
        self._fields: dict[int, Field] = {}
        self._methods: dict[int, MethodDef] = {}
        self._enclosing: dict[int, int] | None = None
        self._generic_params: dict[int, list[tuple[int, int]]] | None = None
        self._by_name: dict[str, int] | None = None
        self._method_owner: dict[int, int] | None = None

    @classmethod
    def from_pe(
        cls, image: bytes | bytearray | memoryview, *, mapped: bool = False
    ) -> MetadataReader:
        """Open the metadata inside a PE image (a .dll file's bytes, or a loaded image)."""
        from .pe import metadata_from_pe

        return cls(metadata_from_pe(image, mapped))

    # ------------------------------------------------------------------ basics

    @property
    def data(self) -> bytes:
        """The metadata bytes this reader decodes (its own copy of the blob)."""
        return self._data

    @property
    def version(self) -> str:
        """The runtime version string of the metadata root, e.g. ``v4.0.30319``."""
        return self.root.version

    def row_count(self, table: TableIndex | int) -> int:
        return self._table(table).rows

    def raw_row(self, table: TableIndex | int, rid: int) -> tuple[int, ...]:
        """Column values as stored (heap offsets, coded indexes undecoded)."""
        return self._table(table).row(self._data, rid)

    def _table(self, table: TableIndex | int) -> Table:
        try:
            return self._tables[TableIndex(table)]
        except ValueError:
            raise MetadataError(f"no metadata table {table:#04x}") from None

    def _row(self, table: TableIndex, rid: int) -> tuple[int, ...]:
        return self._tables[table].row(self._data, rid)

    @staticmethod
    def _rid(token_or_rid: int, table: TableIndex) -> int:
        """Accept a token of ``table`` or a bare row number."""
        if token_or_rid < 0 or token_or_rid > 0xFFFFFFFF:
            raise MetadataError(f"bad token {token_or_rid:#x}")
        kind = token_or_rid >> 24
        if kind and kind != table:
            raise MetadataError(f"token {token_or_rid:#010x} is not a {table.name} token")
        return token_or_rid & 0xFFFFFF

    def _list_tokens(
        self, owner: TableIndex, rid: int, column: int, target: TableIndex
    ) -> Sequence[int]:
        """The tokens of a "list" column (TypeDef.FieldList, MethodDef.ParamList ...).

        A list runs from this row's start to the next row's start; the last row's list
        runs to the end of the target table. In #- metadata a Ptr table may sit between.
        """
        owner_table = self._tables[owner]
        start = owner_table.row(self._data, rid)[column]
        ptr = self._tables[PTR_TABLE[target]]
        through = ptr if ptr.rows else self._tables[target]
        if rid < owner_table.rows:
            end = owner_table.row(self._data, rid + 1)[column]
        else:
            end = through.rows + 1
        if start == 0 or end == 0:
            return ()  # some writers store 0 for "no members"
        if not start <= end <= through.rows + 1:
            raise MetadataError(
                f"{owner.name} row {rid} has a bad {target.name} list ({start}..{end - 1})"
            )
        base = target << 24
        if ptr.rows:
            rows = [ptr.row(self._data, r)[0] for r in range(start, end)]
            return tuple(base | r for r in rows)
        return range(base | start, base | end)

    # ------------------------------------------------------------------ types

    def type_def(self, token_or_rid: int) -> TypeDef:
        rid = self._rid(token_or_rid, T.TYPE_DEF)
        td = self._type_defs.get(rid)
        if td is not None:
            return td
        flags, name, namespace, extends, _, _ = self._row(T.TYPE_DEF, rid)
        enclosing = self._enclosing_map().get(rid)
        token = 0x02000000 | rid
        td = TypeDef(
            token=token,
            flags=flags,
            name=self.strings.get(name),
            namespace=self.strings.get(namespace),
            extends=TYPE_DEF_OR_REF.decode(extends) or None,
            fields=self._list_tokens(T.TYPE_DEF, rid, _FIELD_LIST, T.FIELD),
            methods=self._list_tokens(T.TYPE_DEF, rid, _METHOD_LIST, T.METHOD_DEF),
            enclosing=0x02000000 | enclosing if enclosing else None,
            generic_params=self.generic_param_names(token),
        )
        self._type_defs[rid] = td
        return td

    def type_defs(self) -> Iterator[TypeDef]:
        """Every TypeDef in token order, ``<Module>`` (row 1) included."""
        for rid in range(1, self._tables[T.TYPE_DEF].rows + 1):
            yield self.type_def(rid)

    def type_ref(self, token_or_rid: int) -> TypeRef:
        rid = self._rid(token_or_rid, T.TYPE_REF)
        scope, name, namespace = self._row(T.TYPE_REF, rid)
        return TypeRef(
            token=0x01000000 | rid,
            resolution_scope=RESOLUTION_SCOPE.decode(scope) or None,
            name=self.strings.get(name),
            namespace=self.strings.get(namespace),
        )

    def type_refs(self) -> Iterator[TypeRef]:
        for rid in range(1, self._tables[T.TYPE_REF].rows + 1):
            yield self.type_ref(rid)

    def type_spec(self, token_or_rid: int) -> TypeSpec:
        rid = self._rid(token_or_rid, T.TYPE_SPEC)
        (sig,) = self._row(T.TYPE_SPEC, rid)
        return TypeSpec(0x1B000000 | rid, decode_type_sig(self.blobs.get(sig)))

    def exported_type(self, token_or_rid: int) -> ExportedType:
        rid = self._rid(token_or_rid, T.EXPORTED_TYPE)
        flags, type_def_id, name, namespace, impl = self._row(T.EXPORTED_TYPE, rid)
        return ExportedType(
            token=0x27000000 | rid,
            flags=flags,
            type_def_id=type_def_id,
            name=self.strings.get(name),
            namespace=self.strings.get(namespace),
            implementation=IMPLEMENTATION.decode(impl) or None,
        )

    def exported_types(self) -> Iterator[ExportedType]:
        """Types this assembly forwards to (a facade like System.Runtime) or ships in
        other files."""
        for rid in range(1, self._tables[T.EXPORTED_TYPE].rows + 1):
            yield self.exported_type(rid)

    def _enclosing_map(self) -> dict[int, int]:
        if self._enclosing is None:
            table = self._tables[T.NESTED_CLASS]
            self._enclosing = {nested: outer for nested, outer in table.all_rows(self._data)}
        return self._enclosing

    def generic_param_names(self, owner_token: int) -> tuple[str, ...]:
        """Names of a TypeDef's or MethodDef's generic parameters, by position."""
        if self._generic_params is None:
            owners: dict[int, list[tuple[int, int]]] = {}
            for number, _, owner, name in self._tables[T.GENERIC_PARAM].all_rows(self._data):
                owners.setdefault(TYPE_OR_METHOD_DEF.decode(owner), []).append((number, name))
            for params in owners.values():
                params.sort()
            self._generic_params = owners
        params = self._generic_params.get(owner_token)
        if not params:
            return ()
        return tuple(self.strings.get(name) for _, name in params)

    # ------------------------------------------------------------------ names

    def type_name(
        self,
        token: int,
        *,
        generic_args: Sequence[str] | None = None,
        method_generic_args: Sequence[str] | None = None,
    ) -> str:
        """A type's name as SOS prints it: ``Namespace.Outer+Inner``, arity suffix kept.

        TypeDef, TypeRef and ExportedType tokens give the plain name; a TypeSpec token is
        rendered from its signature with format_type_sig (``!0`` for generic parameters
        unless ``generic_args``/``method_generic_args`` name them).
        """
        return self._type_name(token, 0, generic_args, method_generic_args)

    def _type_name(
        self,
        token: int,
        level: int,
        generic_args: Sequence[str] | None = None,
        method_generic_args: Sequence[str] | None = None,
    ) -> str:
        kind = token >> 24
        if kind == T.TYPE_SPEC:
            if level >= _MAX_TYPESPEC_LEVEL:
                raise MetadataError(f"TypeSpec {token:#010x} is nested in TypeSpecs too deeply")
            return format_type_sig(
                self.type_spec(token).signature,
                lambda t: self._type_name(t, level + 1, generic_args, method_generic_args),
                generic_args=generic_args,
                method_generic_args=method_generic_args,
            )
        name = self._names.get(token)
        if name is None:
            name = self._plain_name(token)
            self._names[token] = name
        return name

    def _plain_name(self, token: int) -> str:
        """Name a TypeDef, TypeRef or ExportedType, walking its enclosing types."""
        parts: list[str] = []
        kind = token >> 24
        for _ in range(MAX_NESTING):
            if kind == T.TYPE_DEF:
                # Straight from the row: a name must not depend on the member lists
                # that type_def() also checks.
                rid = self._rid(token, T.TYPE_DEF)
                _, name_index, ns_index, _, _, _ = self._row(T.TYPE_DEF, rid)
                name, namespace = self.strings.get(name_index), self.strings.get(ns_index)
                enclosing = self._enclosing_map().get(rid)
                outer = 0x02000000 | enclosing if enclosing else None
            elif kind == T.TYPE_REF:
                tr = self.type_ref(token)
                scope = tr.resolution_scope
                outer = scope if scope is not None and scope >> 24 == T.TYPE_REF else None
                name, namespace = tr.name, tr.namespace
            elif kind == T.EXPORTED_TYPE:
                et = self.exported_type(token)
                impl = et.implementation
                outer = impl if impl is not None and impl >> 24 == T.EXPORTED_TYPE else None
                name, namespace = et.name, et.namespace
            else:
                raise MetadataError(f"token {token:#010x} does not name a type")
            if outer is None:
                parts.append(f"{namespace}.{name}" if namespace else name)
                return "+".join(reversed(parts))
            # A nested type's own namespace column is ignored, as reflection does.
            parts.append(name)
            token = outer
        raise MetadataError(f"types nested more than {MAX_NESTING} deep (a cycle?)")

    def format_sig(
        self,
        sig: SigType,
        *,
        generic_args: Sequence[str] | None = None,
        method_generic_args: Sequence[str] | None = None,
        primitive_names: Mapping[int, str] = FULL_PRIMITIVE_NAMES,
        generic_formatter: GenericFormatter = angle_brackets,
        show_modifiers: bool = False,
    ) -> str:
        """format_type_sig with this module naming the tokens."""
        return format_type_sig(
            sig,
            self.type_name,
            generic_args=generic_args,
            method_generic_args=method_generic_args,
            primitive_names=primitive_names,
            generic_formatter=generic_formatter,
            show_modifiers=show_modifiers,
        )

    def find_type(self, full_name: str) -> int | None:
        """The TypeDef token for ``Namespace.Outer+Inner`` (arity suffix included).

        The index is built once; a row that cannot be named (corrupt) is left out of it
        rather than making every other type unfindable.
        """
        if self._by_name is None:
            by_name: dict[str, int] = {}
            for rid in range(1, self._tables[T.TYPE_DEF].rows + 1):
                token = 0x02000000 | rid
                try:
                    by_name.setdefault(self._type_name(token, 0), token)
                except MetadataError:
                    continue
            self._by_name = by_name
        return self._by_name.get(full_name)

    # ------------------------------------------------------------------ members

    def field(self, token_or_rid: int) -> Field:
        rid = self._rid(token_or_rid, T.FIELD)
        f = self._fields.get(rid)
        if f is None:
            flags, name, sig = self._row(T.FIELD, rid)
            f = Field(
                token=0x04000000 | rid,
                flags=flags,
                name=self.strings.get(name),
                signature=decode_field_sig(self.blobs.get(sig)),
            )
            self._fields[rid] = f
        return f

    def fields_of(self, type_token: int) -> list[Field]:
        return [self.field(t) for t in self.type_def(type_token).fields]

    def method(self, token_or_rid: int) -> MethodDef:
        rid = self._rid(token_or_rid, T.METHOD_DEF)
        m = self._methods.get(rid)
        if m is None:
            rva, impl_flags, flags, name, sig, _ = self._row(T.METHOD_DEF, rid)
            m = MethodDef(
                token=0x06000000 | rid,
                flags=flags,
                impl_flags=impl_flags,
                name=self.strings.get(name),
                rva=rva,
                signature=decode_method_sig(self.blobs.get(sig)),
            )
            self._methods[rid] = m
        return m

    def methods_of(self, type_token: int) -> list[MethodDef]:
        return [self.method(t) for t in self.type_def(type_token).methods]

    def param_names(self, method_token: int) -> list[str]:
        """Parameter names by position ("" where metadata has none); ``this`` excluded."""
        rid = self._rid(method_token, T.METHOD_DEF)
        names = [""] * len(self.method(rid).signature.params)
        for token in self._list_tokens(T.METHOD_DEF, rid, _PARAM_LIST, T.PARAM):
            _, sequence, name = self._row(T.PARAM, token & 0xFFFFFF)
            if 0 < sequence <= len(names):  # sequence 0 describes the return value
                names[sequence - 1] = self.strings.get(name)
        return names

    def declaring_type(self, member_token: int) -> int | None:
        """The TypeDef token that declares a MethodDef or Field token.

        Like find_type, the index skips TypeDef rows too corrupt to decode.
        """
        if self._method_owner is None:
            owners: dict[int, int] = {}
            for rid in range(1, self._tables[T.TYPE_DEF].rows + 1):
                try:
                    td = self.type_def(rid)
                except MetadataError:
                    continue
                for t in td.methods:
                    owners[t] = td.token
                for t in td.fields:
                    owners[t] = td.token
            self._method_owner = owners
        return self._method_owner.get(member_token)

    def member_ref(self, token_or_rid: int) -> MemberRef:
        rid = self._rid(token_or_rid, T.MEMBER_REF)
        parent, name, sig = self._row(T.MEMBER_REF, rid)
        return MemberRef(
            token=0x0A000000 | rid,
            parent=MEMBER_REF_PARENT.decode(parent) or None,
            name=self.strings.get(name),
            signature=decode_member_sig(self.blobs.get(sig)),
        )

    def method_spec(self, token_or_rid: int) -> MethodSpec:
        rid = self._rid(token_or_rid, T.METHOD_SPEC)
        method, inst = self._row(T.METHOD_SPEC, rid)
        return MethodSpec(
            0x2B000000 | rid,
            METHOD_DEF_OR_REF.decode(method) or None,
            decode_method_spec_sig(self.blobs.get(inst)),
        )

    def stand_alone_sig(self, token_or_rid: int) -> tuple[SigType, ...] | MethodSig:
        """A local variable signature (a tuple of types) or a calli method signature."""
        rid = self._rid(token_or_rid, T.STAND_ALONE_SIG)
        (sig,) = self._row(T.STAND_ALONE_SIG, rid)
        blob = self.blobs.get(sig)
        if blob[:1] == b"\x07":
            return decode_local_sig(blob)
        return decode_method_sig(blob)

    def custom_attribute_types(self, parent_token: int) -> list[int]:
        """Constructor tokens (MethodDef/MemberRef) of the custom attributes on a token."""
        # Rare query; a scan keeps the reader free of a per-table index it seldom needs.
        out = []
        for parent, ctor, _ in self._tables[T.CUSTOM_ATTRIBUTE].all_rows(self._data):
            if HAS_CUSTOM_ATTRIBUTE.decode(parent) == parent_token:
                out.append(CUSTOM_ATTRIBUTE_TYPE.decode(ctor))
        return out

    # ------------------------------------------------------------------ text

    def method_signature_text(self, token: int) -> str:
        """``Namespace.Type.Method(Int32, System.String)``, as SOS names methods.

        Works for MethodDef and MemberRef tokens; generic parameters show their names
        when the metadata has them.
        """
        kind = token >> 24
        if kind == T.METHOD_DEF:
            m = self.method(token)
            name, sig = m.name, m.signature
            owner = self.declaring_type(m.token)
            method_generics = self.generic_param_names(m.token)
        elif kind == T.MEMBER_REF:
            ref = self.member_ref(token)
            if not isinstance(ref.signature, MethodSig):
                raise MetadataError(f"MemberRef {token:#010x} refers to a field")
            name, sig, owner = ref.name, ref.signature, ref.parent
            method_generics = ()
        else:
            raise MetadataError(f"token {token:#010x} is not a method")
        type_generics: Sequence[str] = ()
        prefix = ""
        if owner is not None and owner >> 24 in (T.TYPE_DEF, T.TYPE_REF, T.TYPE_SPEC):
            prefix = self.type_name(owner) + "."
            if owner >> 24 == T.TYPE_DEF:
                type_generics = self.generic_param_names(owner)
            elif owner >> 24 == T.TYPE_SPEC:
                # A call through List`1<Int32> shows Add(System.Int32), not Add(!0).
                spec = self.type_spec(owner).signature
                type_generics = [self.format_sig(a) for a in spec.args]
        params = ", ".join(
            self.format_sig(
                p,
                generic_args=type_generics or None,
                method_generic_args=method_generics or None,
                primitive_names=SHORT_PRIMITIVE_NAMES,
            )
            for p in sig.params
        )
        return f"{prefix}{name}({params})"

    # ------------------------------------------------------------------ assembly

    def module(self) -> ModuleDef:
        generation, name, mvid, _, _ = self._row(T.MODULE, 1)
        return ModuleDef(self.strings.get(name), self.guids.get(mvid), generation)

    def module_name(self) -> str:
        return self.module().name

    def assembly(self) -> AssemblyDef | None:
        """The assembly manifest, or None for a module without one (a netmodule)."""
        if not self._tables[T.ASSEMBLY].rows:
            return None
        hash_alg, major, minor, build, rev, flags, key, name, culture = self._row(T.ASSEMBLY, 1)
        return AssemblyDef(
            token=0x20000001,
            name=self.strings.get(name),
            version=(major, minor, build, rev),
            culture=self.strings.get(culture),
            flags=flags,
            public_key=self.blobs.get(key),
            hash_algorithm=hash_alg,
        )

    def assembly_ref(self, token_or_rid: int) -> AssemblyRef:
        rid = self._rid(token_or_rid, T.ASSEMBLY_REF)
        major, minor, build, rev, flags, key, name, culture, _ = self._row(T.ASSEMBLY_REF, rid)
        return AssemblyRef(
            token=0x23000000 | rid,
            name=self.strings.get(name),
            version=(major, minor, build, rev),
            culture=self.strings.get(culture),
            flags=flags,
            public_key_or_token=self.blobs.get(key),
        )

    def assembly_refs(self) -> list[AssemblyRef]:
        return [self.assembly_ref(rid) for rid in range(1, self._tables[T.ASSEMBLY_REF].rows + 1)]

    def user_string(self, token: int) -> str:
        """The #US literal for an ``ldstr`` token (0x70xxxxxx) or a bare heap offset."""
        if token >> 24 not in (0, TOKEN_USER_STRING):
            raise MetadataError(f"token {token:#010x} is not a user string token")
        return self.user_strings.get(token & 0xFFFFFF)

    def guid(self, index: int) -> uuid.UUID | None:
        return self.guids.get(index)
