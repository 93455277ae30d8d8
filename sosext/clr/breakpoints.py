"""bpmd's breakpoints on managed methods, through the host debugger's own breakpoints.

A method that has native code gets a host breakpoint at its code's start. A method that has
none yet is watched without touching the target's data: a host breakpoint on the JIT's
``ICorJitCompiler::compileMethod`` (found from libclrjit's ``getJit`` export: its
``lea reg, [rip+disp]`` gives the JIT singleton, whose vtable's first slot is
compileMethod) reads, on every compilation, ``info->ftn`` (the MethodDesc, first field of
CORINFO_METHOD_INFO, in rdx); for a watched method it plants a one-shot breakpoint on the
call's return address, where ``*nativeEntry`` (r8 at entry) holds the new code's address,
and sets the method's breakpoint there. Every later compilation (a tier-1 version) gets one
too. x86-64 System V only.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import SosError
from ..targets.base import BreakpointHit, Breakpoints

if TYPE_CHECKING:
    from .runtime import ClrRuntime

JIT_MODULE = "libclrjit.so"


@dataclass(frozen=True, slots=True)
class MethodMatch:
    method_desc: int
    name: str
    module: str  # file name
    module_address: int
    token: int


@dataclass(slots=True)
class MethodBreakpoint:
    number: int  # bpmd's own number (for -list and -clear)
    method: MethodMatch
    code: list[int] = field(default_factory=list)  # native code starts with a host breakpoint
    host_ids: list[int] = field(default_factory=list)

    @property
    def pending(self) -> bool:
        return not self.code


def find_methods(runtime: "ClrRuntime", module_name: str, method_name: str) -> list[MethodMatch]:
    """Methods called ``Namespace.Type.Method`` (exact case) in the loaded types of the modules
    ``module_name`` names (a file name with or without .dll, or a path)."""
    type_name, _, member = method_name.rpartition(".")
    if not type_name or not member:
        raise SosError(f"'{method_name}' is not Namespace.Type.Method")
    found: list[MethodMatch] = []
    catalog = runtime.catalog
    for mod in catalog.find(module_name):
        md_reader = None
        for token, mt in catalog.iter_loaded_types(mod):
            if runtime.types.name_of(mt) != type_name.replace("/", "+"):
                continue
            md_reader = md_reader or catalog.metadata(mod)
            if md_reader is None:
                continue
            for m in md_reader.methods_of(token):
                if m.name != member:
                    continue
                desc = runtime.methods.desc_from_token(mod.address, m.token, mt)
                if desc:
                    found.append(MethodMatch(desc, runtime.method_desc_name(desc) or method_name,
                                             mod.file_name, mod.address, m.token))
    return found


def method_by_desc(runtime: "ClrRuntime", md: int) -> MethodMatch:
    from .addresses import classifier
    if not classifier(runtime).is_method_desc(md):
        raise SosError(f"{md:x} is not a MethodDesc")
    data = runtime.method_desc_data(md)
    if data is None:
        raise SosError(f"{md:x} is not a MethodDesc")
    module = next((m for m in runtime.modules() if m.address == data.module_ptr), None)
    return MethodMatch(md, runtime.method_desc_name(md) or f"<MethodDesc {md:x}>",
                       module.file_name if module else "", data.module_ptr, data.token)


def native_code(runtime: "ClrRuntime", md: int) -> int:
    m = runtime.methods.get(md)
    return m.native_code if m is not None and m.native_code else 0


def compile_method_address(runtime: "ClrRuntime") -> int | None:
    """Where the JIT's compileMethod is (None: no JIT loaded, or its getJit not understood)."""
    from ..dac.trust import exported_symbol
    target = runtime.target
    jit = target.find_module(JIT_MODULE)
    if jit is None or runtime.target.arch != "x86_64":
        return None
    sym = exported_symbol(jit.path, "getJit")
    if sym is None:
        return None
    start = jit.base + sym[0]
    try:
        code = bytes(target.read(start, 64))
    except SosError:
        return None
    for i in range(len(code) - 7):
        # lea r64, [rip + disp32]: REX.W 8D, ModRM mod=00 rm=101
        if code[i] in (0x48, 0x4C) and code[i + 1] == 0x8D and code[i + 2] & 0xC7 == 0x05:
            disp = int.from_bytes(code[i + 3:i + 7], "little", signed=True)
            singleton = start + i + 7 + disp
            try:
                vtable = target.read_pointer(singleton)
                compile_method = target.read_pointer(vtable)
            except SosError:
                return None
            inside = jit.base <= compile_method < jit.base + jit.size
            return compile_method if inside else None
    return None


class BpmdState:
    """The bpmd breakpoints of one live target."""

    def __init__(self, runtime: "ClrRuntime") -> None:
        self.runtime = runtime
        self.entries: list[MethodBreakpoint] = []
        self.next_number = 1
        self.compile_watch: int | None = None  # host breakpoint on compileMethod
        self.spent: list[int] = []  # one-shot return breakpoints to delete at the next command

    @property
    def host(self) -> Breakpoints:
        target = self.runtime.target
        if not isinstance(target, Breakpoints) or not target.is_live:
            raise SosError("bpmd needs a live process in LLDB or GDB")
        return target

    def tidy(self) -> None:
        host = self.host
        for n in self.spent:
            host.delete_breakpoint(n)
        self.spent.clear()

    def add(self, method: MethodMatch) -> MethodBreakpoint:
        self.tidy()
        existing = next((e for e in self.entries if e.method.method_desc == method.method_desc), None)
        entry = existing or MethodBreakpoint(self.next_number, method)
        if existing is None:
            self.next_number += 1
            self.entries.append(entry)
        code = native_code(self.runtime, method.method_desc)
        try:
            if code and code not in entry.code:
                self._plant(entry, code)
            self._watch_compiles()
        except SosError:
            if existing is None:
                self.entries.remove(entry)
            raise
        return entry

    def _plant(self, entry: MethodBreakpoint, code: int) -> None:
        entry.host_ids.append(self.host.set_breakpoint(code))
        entry.code.append(code)

    def _watch_compiles(self) -> None:
        if self.compile_watch is not None:
            return
        address = compile_method_address(self.runtime)
        if address is None:
            if any(e.pending for e in self.entries):
                raise SosError("cannot find the JIT's compileMethod: a method not yet JIT-compiled cannot be "
                               "watched (x86-64 with libclrjit.so only)")
            return
        self.compile_watch = self.host.set_breakpoint(address, self._on_compile)

    def _on_compile(self, hit: BreakpointHit) -> bool:
        target = self.runtime.target
        md = target.read_pointer(hit.register("rdx"))
        entry = next((e for e in self.entries if e.method.method_desc == md), None)
        if entry is None:
            return False
        sp = hit.register("rsp")
        native_entry = hit.register("r8")
        tid = hit.tid
        returned_to = target.read_pointer(sp)

        def on_return(back: BreakpointHit) -> bool:
            if back.tid != tid or back.register("rsp") != sp + 8:
                return False  # another thread's JIT call returning there
            code = target.read_pointer(native_entry)
            if code and code not in entry.code and entry in self.entries:
                self._plant(entry, code)
            if number not in self.spent:
                self.spent.append(number)
            return False
        number = self.host.set_breakpoint(returned_to, on_return)
        return False

    def clear(self, number: int) -> MethodBreakpoint:
        entry = next((e for e in self.entries if e.number == number), None)
        if entry is None:
            raise SosError(f"Invalid pending breakpoint index {number}")
        self.entries.remove(entry)
        for n in entry.host_ids:
            self.host.delete_breakpoint(n)
        self._unwatch_if_idle()
        return entry

    def clear_all(self) -> None:
        for e in list(self.entries):
            self.clear(e.number)
        self._unwatch_if_idle()

    def _unwatch_if_idle(self) -> None:
        if not self.entries and self.compile_watch is not None:
            self.host.delete_breakpoint(self.compile_watch)
            self.compile_watch = None
            self.tidy()


_STATES: "weakref.WeakKeyDictionary[object, BpmdState]" = weakref.WeakKeyDictionary()


def bpmd_state(runtime: "ClrRuntime") -> BpmdState:
    state = _STATES.get(runtime)
    if state is None:
        state = _STATES[runtime] = BpmdState(runtime)
    return state
