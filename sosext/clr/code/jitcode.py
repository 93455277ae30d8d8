"""Compiled code of managed methods: where it is, its exception clauses, its IL body, and
names for the addresses an instruction mentions (clru, ehinfo, gcinfo, dumpil).

A method's code is found from its MethodDesc (the current native code) or from any address
inside it (the code header that the runtime's code manager keeps next to the code). The
header tells the start, the size (hot and cold parts), the JIT kind and where the GC info
is. Addresses a user typed are classified before the DAC sees them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import SosError
from ..addresses import AddressKind, classifier
from ...formats.gcinfo import GcInfo, GcInfoError, decode_gcinfo, gc_info_version
from .methods import ClrMethod, code_address

if TYPE_CHECKING:
    from ..runtime import ClrRuntime

JIT_KINDS = {1: "Normal JIT generated code", 2: "preJIT generated code"}  # DacpCodeHeaderData.JITType
EH_KINDS = {0: "FAULT", 1: "FINALLY", 2: "FILTER", 3: "TYPED"}  # EHClauseType
_CODE_KINDS = (AddressKind.UNKNOWN, AddressKind.UNALIGNED)  # where code can be: not heap, stack, runtime data


@dataclass(frozen=True, slots=True)
class MethodCode:
    """One compiled body of a method (the DAC's code header)."""

    method: ClrMethod
    start: int
    size: int  # hot and cold parts together
    jit_type: int  # 1 JIT, 2 ReadyToRun (pre-JIT), 3 interpreter; 0 unknown
    gc_info: int
    cold_start: int
    cold_size: int
    hot_size: int

    @property
    def kind_text(self) -> str:
        return JIT_KINDS.get(self.jit_type, "unknown Jit")

    def ranges(self) -> list[tuple[int, int]]:
        """(start, end) of the hot part, then of the cold part when the method has one."""
        if self.cold_start:
            return [(self.start, self.start + self.hot_size), (self.cold_start, self.cold_start + self.cold_size)]
        return [(self.start, self.start + self.size)]


@dataclass(frozen=True, slots=True)
class EHClause:
    """An exception clause of compiled code: native offsets from the code's start."""

    index: int
    kind: str  # FAULT, FINALLY, FILTER, TYPED or UNKNOWN
    try_start: int
    try_end: int
    handler_start: int
    handler_end: int
    filter_offset: int | None
    catch_type: str | None  # TYPED clauses: the caught type's name, "..." for catch-all
    duplicate: bool
    cloned_finally: bool


def method_or_none(rt: "ClrRuntime", address: int) -> tuple[ClrMethod, int] | None:
    """The method that ``address`` names, as SOS takes it: a MethodDesc, or an address
    inside the method's code; with the code address to use (0 for a MethodDesc: its
    current code). None when it names no method."""
    c = classifier(rt).classify(address)
    if c.kind is AddressKind.METHOD_DESC:
        m = rt.methods.get(address)
        if m is not None:
            return m, 0
    elif c.kind in _CODE_KINDS:
        md = rt.method_desc_at(address)
        m = rt.methods.get(md) if md else None
        if m is not None:
            return m, address
        ch = rt.reader.code_header_data(address)
        m = rt.methods.get(ch.method_desc_ptr) if ch is not None and ch.method_desc_ptr else None
        if m is not None:  # a precode stub of a method (the DAC knows its MethodDesc)
            return m, 0
    return None


def method_of(rt: "ClrRuntime", address: int) -> tuple[ClrMethod, int]:
    """``method_or_none``, or one line saying what the address is instead."""
    found = method_or_none(rt, address)
    if found is None:
        c = classifier(rt).classify(address)
        raise SosError(f"{address:#x} is not a MethodDesc nor an address in managed code"
                       + (f" ({c.description()})" if c.description() else ""))
    return found


def code_of(rt: "ClrRuntime", method: ClrMethod, ip: int = 0) -> MethodCode | None:
    """The code holding ``ip``, or the method's current code; None if it has none."""
    ch = rt.reader.code_header_data(ip) if ip else None
    if ch is None:
        native = method.native_code
        ch = rt.reader.code_header_data(native) if native else None
    if ch is None or not ch.method_start:
        return None
    return MethodCode(method, ch.method_start, ch.method_size, ch.jit_type, ch.gc_info,
                      code_address(ch.cold_region_start), ch.cold_region_size, ch.hot_region_size)


def eh_clauses(rt: "ClrRuntime", code: MethodCode) -> list[EHClause] | None:
    """The code's exception clauses, in the runtime's order; None if the runtime refuses."""
    raw = rt.reader.traverse_eh_info(code.start)
    if raw is None:
        return None
    out = []
    for i, e in enumerate(raw):
        kind = EH_KINDS.get(e.clause_type, "UNKNOWN")
        catch = None
        if kind == "TYPED":
            catch = "..." if e.is_catch_all_handler else _catch_type(rt, e.module_addr, e.tok_catch, e.mt_catch)
        cloned = (kind == "FINALLY" and bool(e.is_duplicate_clause) and e.try_start_offset == e.try_end_offset
                  == e.handler_start_offset and rt.target.arch in ("x86_64", "aarch64"))
        out.append(EHClause(i, kind, e.try_start_offset, e.try_end_offset, e.handler_start_offset,
                            e.handler_end_offset, e.filter_offset if kind == "FILTER" else None, catch,
                            bool(e.is_duplicate_clause), cloned))
    return out


def _catch_type(rt: "ClrRuntime", module: int, token: int, mt: int) -> str:
    if not module:
        return rt.heap.types.name_of(mt) if mt else f"token_0x{token:08X}"
    md = rt.catalog.metadata(module)
    if md is None:
        return f"token_0x{token:08X}"
    try:
        return md.type_name(token)
    except SosError:
        return f"token_0x{token:08X}"


def il_body_address(rt: "ClrRuntime", method: ClrMethod) -> tuple[int, int]:
    """(address of the IL body in the target, its RVA) of a method with IL in its module."""
    if method.token & 0xFFFFFF == 0:
        raise SosError("This method has no IL body (e.g. IL stubs generated for P/Invoke or Reverse P/Invoke "
                       "marshaling).")
    md = rt.catalog.require_metadata(method.module)
    rva = md.method(method.token).rva
    if not rva:
        raise SosError(f"{method.name} has no IL body (abstract, extern or runtime-implemented)")
    addr = rt.reader.il_address(method.module, rva)
    if not addr:
        raise SosError(f"Unable to retrieve IL for this method (ilAddr is {0:016x}).")
    return addr, rva


def callee_name(rt: "ClrRuntime", target: int) -> str | None:
    """What a call to ``target`` reaches, as SOS annotates it: ``Ns.Type.M(args), mdToken: …``
    for managed code or a method's stub, ``JitHelp: name`` for a JIT helper."""
    c = classifier(rt).classify(target)
    if c.kind not in _CODE_KINDS:
        return None
    md = rt.method_desc_at(target)
    if not md:
        ch = rt.reader.code_header_data(target)
        md = ch.method_desc_ptr if ch is not None else 0
    m = rt.methods.get(md) if md else None
    if m is not None:
        return f"{m.name}, mdToken: {m.token:016x}"
    helper = rt.reader.jit_helper_name(target)
    if helper:
        return f"JitHelp: {helper}"
    return None



GC_INFO_READ = 1 << 16  # more than the header and slot table of any method take


def gc_info_of(rt: "ClrRuntime", code: MethodCode) -> GcInfo:
    """The decoded GC info of ``code``. The format follows the runtime's version; the code
    length it holds must equal the code header's, which tells a misread at once."""
    if not code.gc_info:
        raise GcInfoError("the code header names no GC info")
    raw = bytes(rt.target.read_partial(code.gc_info, GC_INFO_READ))
    try:
        major = int(rt.info.version.split(".")[0])
    except ValueError:
        major = 10
    first = gc_info_version(major)
    info = decode_gcinfo(raw, rt.target.arch, first)
    if info.code_length != code.size:
        raise GcInfoError(f"it says the code is {info.code_length:#x} bytes, the code header {code.size:#x} "
                          f"(format {first})")
    return info


def il_native_map(rt: "ClrRuntime", code: MethodCode) -> list[tuple[int, int, int]] | None:
    """The JIT's map of the code: (IL offset, native start, native end) per entry; the IL
    offset is 0xFFFFFFFF (no mapping), 0xFFFFFFFE (prolog) or 0xFFFFFFFD (epilog) where the
    code has none. None when the runtime keeps no map for it."""
    from ...dac.xclrdata import method_instance_by_address
    rt.refresh()
    mi = method_instance_by_address(rt.reader, code.start)
    if mi is None:
        return None
    with mi:
        return mi.il_address_map()
