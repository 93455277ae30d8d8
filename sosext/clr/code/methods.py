"""Methods: MethodDescs, their JIT state and code versions, and a MethodTable's slots.

A type's MethodDescs exist once the type is loaded; code exists only for methods that
have run (or were precompiled: ReadyToRun). The DAC reports "no code" as 0 or as all ones
depending on the path; both are normalised to 0 here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...dac.structs import MethodDescData

if TYPE_CHECKING:
    from ..parts import RuntimeParts

NO_CODE = 0xFFFFFFFFFFFFFFFF
JIT_TYPES = {1: "JIT", 2: "PreJIT"}  # DacpCodeHeaderData.JITType; 0 = unknown
# DacpTieredVersionData::OptimizationTier, as SOS names them.
TIER_NAMES = {
    0: "Unknown Tier", 1: "MinOptJitted", 2: "Optimized", 3: "QuickJitted", 4: "OptimizedTier1",
    5: "ReadyToRun", 6: "OptimizedTier1OSR", 7: "QuickJitted + Instrumented",
    8: "OptimizedTier1 + Instrumented",
}


def code_address(value: int) -> int:
    """A DAC code address with "none" (0 or all ones) as 0."""
    return 0 if value in (0, NO_CODE) else value


@dataclass(frozen=True, slots=True)
class ClrMethod:
    method_desc: int
    data: MethodDescData
    name: str  # as the runtime names it: "Namespace.Type.Method(Int32)"; "UNKNOWN" if it cannot

    @property
    def token(self) -> int:
        return self.data.token

    @property
    def module(self) -> int:
        return self.data.module_ptr

    @property
    def method_table(self) -> int:
        return self.data.method_table_ptr

    @property
    def slot(self) -> int:
        return self.data.slot_number

    @property
    def native_code(self) -> int:
        """Start of the current code; 0 if the method has none (never ran, not precompiled)."""
        return code_address(self.data.native_code_addr) if self.data.has_native_code else 0

    @property
    def is_jitted(self) -> bool:
        return bool(self.data.has_native_code)


@dataclass(frozen=True, slots=True)
class MethodSlot:
    """One MethodTable slot: an entry point and (usually) the MethodDesc behind it."""

    slot: int
    entry_point: int
    method_desc: int
    token: int
    defining_module: int
    defining_method_table: int


@dataclass(frozen=True, slots=True)
class CodeVersion:
    native_code: int
    tier: str
    native_code_version_node: int


@dataclass(frozen=True, slots=True)
class CodeVersions:
    """dumpmd's Version History: the current IL version and its native code versions."""

    il_code_version_node: int
    rejit_id: int
    il_address: int
    native: tuple[CodeVersion, ...]  # oldest first, as the DAC lists them
    pending: tuple[int, int, int] | None  # (rejit id, IL version node, IL address) of a pending rejit


class MethodCatalog:
    def __init__(self, runtime: "RuntimeParts") -> None:
        self.runtime = runtime
        self.reader = runtime.reader
        self._methods: dict[int, ClrMethod | None] = {}

    def get(self, method_desc: int) -> ClrMethod | None:
        """The method at ``method_desc``; None if the DAC says it is not a MethodDesc."""
        if method_desc not in self._methods:
            m = None
            if method_desc and not method_desc & 7:
                data = self.reader.method_desc_data(method_desc)
                if data is not None:
                    m = ClrMethod(method_desc, data, self.reader.method_desc_name(method_desc) or "UNKNOWN")
            self._methods[method_desc] = m
        return self._methods[method_desc]

    def desc_from_token(self, module: int, token: int, method_table: int = 0) -> int:
        """The MethodDesc address of a MethodDef token; 0 if the runtime has not made one.

        The module's MethodDef map is filled lazily (ReadyToRun images especially), so a
        method missing there is also looked for among ``method_table``'s slots."""
        md = self.reader.method_desc_from_token(module, token)
        if md:
            return md
        if method_table:
            for s in self.slots(method_table):
                if s.token == token and s.method_desc and s.defining_module in (0, module):
                    return s.method_desc
        return 0

    def dynamic_method_object(self, method: ClrMethod) -> int:
        """A dynamic method's DynamicMethod object (0: none); the contracts reader says in one
        line that it cannot find it (the method's resolver is in no data contract)."""
        return self.reader.dynamic_method_object(method.data)

    def from_token(self, module: int, token: int, method_table: int = 0) -> ClrMethod | None:
        """The method of a MethodDef token, if its MethodDesc exists and the DAC can read it."""
        md = self.desc_from_token(module, token, method_table)
        return self.get(md) if md else None

    def slots(self, mt: int) -> list[MethodSlot]:
        """Every slot of ``mt``: virtuals (inherited ones too) first, then its own methods."""
        dac = self.reader
        entries = dac.method_table_slots(mt)
        if entries is not None:
            return [MethodSlot(e.slot, e.entry_point, e.method_desc, e.token, e.defining_module,
                               e.defining_method_table) for e in entries]
        # Runtimes before .NET 9: read the slots one by one and ask who owns each entry point.
        data = dac.method_table_data(mt)
        out: list[MethodSlot] = []
        for i in range(data.num_methods if data else 0):
            entry = dac.method_table_slot(mt, i) or 0
            md = dac.method_desc_from_ip(entry) if entry else None
            if not md and entry:
                # A slot usually holds a precode stub, which only the code header lookup knows.
                ch = dac.code_header_data(entry)
                md = ch.method_desc_ptr if ch else None
            m = self.get(md) if md else None
            out.append(MethodSlot(i, entry, md or 0, m.token if m else 0, m.module if m else 0,
                                  m.method_table if m else 0))
        return out

    def jit_kind(self, entry_point: int, method_desc: int) -> str:
        """SOS's JIT column: JIT, PreJIT, FCALL (code inside the runtime) or NONE."""
        dac = self.reader
        kind = 0
        if entry_point:
            kind = dac.code_jit_type(entry_point)
        native = 0
        m = self.get(method_desc) if method_desc else None
        if m is not None:
            native = code_address(m.data.native_code_addr)
            if kind == 0 and native:
                # A slot often holds a precode stub; the MethodDesc knows the real code.
                kind = dac.code_jit_type(native)
        if kind in JIT_TYPES:
            return JIT_TYPES[kind]
        rt = self.runtime.location.runtime
        if native and rt.base <= native < rt.base + rt.size:
            return "FCALL"
        return "NONE"

    def code_versions(self, method: ClrMethod) -> CodeVersions:
        dac = self.reader
        rejit_id = method.data.rejit_data_current.rejit_id
        info = dac.rejit_information(method.method_desc, rejit_id)
        pending = None
        pending_id = dac.pending_rejit_id(method.method_desc)
        if pending_id is not None:
            p = dac.rejit_information(method.method_desc, pending_id)
            if p is not None:
                pending = (pending_id, p.il_code_version_node_ptr, p.il)
        tiers = dac.tiered_versions(method.method_desc, rejit_id) or []
        native = tuple(CodeVersion(t.native_code_addr, TIER_NAMES.get(t.optimization_tier, "Unknown Tier"),
                                   t.native_code_version_node_ptr) for t in tiers)
        return CodeVersions(info.il_code_version_node_ptr if info else 0, rejit_id,
                            info.il if info else 0, native, pending)
