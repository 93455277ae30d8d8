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

A request made before the module it names is loaded, or before the runtime itself is
(``bpmd App.dll App.Program.Main`` at the process's first instruction, as SOS's test scripts
do), is matched when the JIT compiles: ``info->scope`` (the Module, second field) tells which
module a compilation is for, and a module is looked at once (its metadata for a method name,
its PDB for ``file:line``). Until libclrjit is loaded, a pending by-name breakpoint of the
debugger on its ``getJit`` export waits for it; getJit's return value is the JIT, whose
vtable gives compileMethod. A breakpoint at an IL offset (``file:line`` or the third argument)
needs the JIT's IL-to-native map, which the runtime records only after compileMethod
returns: a callback at the code's start reads it on the first call and plants the breakpoint
at the offset's native code. A method with ReadyToRun code in a module loaded now never goes
through the JIT: its breakpoint goes on that code (readytorun.py finds it by token).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from ...errors import SosError
from ...targets.base import BreakpointHit, Breakpoints, Target
from .readytorun import precompiled_code

if TYPE_CHECKING:
    from ..typesystem.modules import ClrModule
    from ..runtime import ClrRuntime

JIT_MODULE = "libclrjit.so"
JIT_EXPORT = "getJit"
IL_OFFSET_MARKERS = (0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFFFD)  # no mapping, prolog, epilog


@dataclass(frozen=True, slots=True)
class BreakRequest:
    """What a user named, to be matched in modules loaded now or later: a method
    (``module``, ``method``, an IL offset) or a source line (``source_file``, ``line``)."""

    module: str = ""
    method: str = ""  # Namespace.Type.Method
    il_offset: int = 0
    source_file: str = ""
    line: int = 0

    def describe(self) -> str:
        if self.source_file:
            return f"{self.source_file}:{self.line}"
        return f"{self.module}!{self.method}+{self.il_offset}"

    def matches_module(self, mod: "ClrModule") -> bool:
        return bool(self.source_file) or mod.matches(self.module)

    def locations(self, runtime: "ClrRuntime", mod: "ClrModule") -> list[tuple[int, int]]:
        """(MethodDef token, IL offset) of what this names in ``mod`` (empty: nothing there)."""
        if not self.matches_module(mod):
            return []
        if self.source_file:
            return source_line_locations(runtime, mod, self.source_file, self.line)
        return [(t, self.il_offset) for t in method_tokens(runtime, mod, self.method)]


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
    method: MethodMatch | None  # None: a request no loaded module has matched yet
    request: BreakRequest | None = None
    il_offset: int = 0
    code: list[int] = field(default_factory=list)  # addresses with a host breakpoint that stops
    host_ids: list[int] = field(default_factory=list)

    @property
    def pending(self) -> bool:
        return not self.code

    def describe(self) -> str:
        if self.method is not None:
            suffix = f"+{self.il_offset}" if self.il_offset else ""
            return f"{self.method.module}!{self.method.name}{suffix}"
        return self.request.describe() if self.request else "?"


def method_tokens(runtime: "ClrRuntime", mod: "ClrModule", method_name: str) -> list[int]:
    """MethodDef tokens of ``Namespace.Type.Method`` in the module's metadata (loaded type or not)."""
    type_name, _, member = method_name.rpartition(".")
    reader = runtime.catalog.metadata(mod)
    if reader is None or not type_name:
        return []
    token = reader.find_type(type_name.replace("/", "+"))
    if token is None:
        return []
    return [m.token for m in reader.methods_of(token) if m.name == member]


def source_line_locations(runtime: "ClrRuntime", mod: "ClrModule", source_file: str, line: int) -> list[tuple[int, int]]:
    """(MethodDef token, IL offset) of the visible sequence points that start on ``line`` of a
    document whose path ends with ``source_file`` (as SOS matches), from the module's PDB."""
    from ...formats.metadata.errors import MetadataError
    from .sourcelines import source_lines
    pdb = source_lines(runtime).pdb(mod.address).pdb
    if pdb is None:
        return []
    want = source_file.replace("\\", "/").lower()
    found: dict[int, int] = {}
    try:
        docs = {rid for rid in range(1, pdb.document_count + 1)
                if _path_ends_with(pdb.document_name(rid).replace("\\", "/").lower(), want)}
        if not docs:
            return []
        for rid in range(1, pdb.method_count + 1):
            token = 0x06000000 | rid
            for p in pdb.sequence_points(token):
                if not p.is_hidden and p.document in docs and p.start_line == line:
                    found[token] = min(found.get(token, p.il_offset), p.il_offset)
    except MetadataError:
        return []
    return sorted(found.items())


def _path_ends_with(path: str, tail: str) -> bool:
    return path == tail or path.endswith("/" + tail.lstrip("/"))


def is_ready_to_run(runtime: "ClrRuntime", module: int) -> bool:
    """Whether the module's file is a ReadyToRun image: its methods run precompiled code that
    never goes through the JIT, so the compile watch does not see them (False when unknown)."""
    import mmap
    from ...formats.metadata.errors import MetadataError
    from ...formats.metadata.pe import COMIMAGE_FLAGS_IL_LIBRARY, cli_flags
    mod = runtime.catalog.module(module)
    local = runtime.catalog.local_file(mod.path) if mod is not None and mod.path else None
    if local is None:
        return False
    try:
        with open(local, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as image:
            return bool(cli_flags(image, mapped=False) & COMIMAGE_FLAGS_IL_LIBRARY)
    except (OSError, ValueError, BufferError, MetadataError):
        return False


def method_by_desc(runtime: "ClrRuntime", md: int) -> MethodMatch:
    from ..addresses import classifier
    if not classifier(runtime).is_method_desc(md):
        raise SosError(f"{md:#x} is not a MethodDesc")
    data = runtime.method_desc_data(md)
    if data is None:
        raise SosError(f"{md:#x} is not a MethodDesc")
    module = next((m for m in runtime.modules() if m.address == data.module_ptr), None)
    return MethodMatch(md, runtime.method_desc_name(md) or f"<MethodDesc {md:x}>",
                       module.file_name if module else "", data.module_ptr, data.token)


def native_code(runtime: "ClrRuntime", md: int) -> int:
    m = runtime.methods.get(md)
    return m.native_code if m is not None and m.native_code else 0


def compile_method_address(target: Target) -> int | None:
    """Where the JIT's compileMethod is (None: no JIT loaded, or its getJit not understood)."""
    from ...targets.elfsymbols import exported_symbol
    jit = target.find_module(JIT_MODULE)
    if jit is None or target.arch != "x86_64":
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
            return _in_jit(target, compile_method)
    return None


def _return_slot(target: Target, hit: BreakpointHit) -> int:
    """Where the return address of the getJit call ``hit`` stopped in is. A debugger may have put
    its by-name breakpoint after the prologue (GDB does): then, behind ``push rbp; mov rbp, rsp``,
    it is at rbp + 8."""
    from ...targets.elfsymbols import exported_symbol
    jit = target.find_module(JIT_MODULE)
    sym = exported_symbol(jit.path, JIT_EXPORT) if jit is not None else None
    rip = hit.register("rip")
    if sym is not None:
        entry = jit.base + sym[0]
        if rip == entry:
            return hit.register("rsp")
        # Past the frame set-up (and whatever else the debugger took for prologue): rbp is set.
        past = entry + len(_FRAME_PROLOGUE) <= rip < entry + _PROLOGUE_SKIP_LIMIT
        if past and bytes(target.read(entry, len(_FRAME_PROLOGUE))) == _FRAME_PROLOGUE:
            return hit.register("rbp") + 8
    raise SosError(f"cannot follow {JIT_MODULE}'s {JIT_EXPORT} at {rip:#x}: pending bpmd breakpoints cannot be "
                   f"watched")


_FRAME_PROLOGUE = b"\x55\x48\x89\xe5"  # push rbp; mov rbp, rsp
_PROLOGUE_SKIP_LIMIT = 64  # bytes: a by-name breakpoint further into getJit is not understood


def _in_jit(target: Target, address: int) -> int | None:
    jit = target.find_module(JIT_MODULE)
    return address if jit is not None and jit.base <= address < jit.base + jit.size else None


def il_offset_code(runtime: "ClrRuntime", code: int, il_offset: int) -> list[int]:
    """Native addresses where the code starting at ``code`` begins IL offset ``il_offset``,
    from the JIT's IL-to-native map (SOS: GetAddressRangesByILOffset); when no entry starts
    exactly there, the next IL offset that has one."""
    from ...dac.xclrdata import method_instance_by_address
    runtime.refresh()
    mi = method_instance_by_address(runtime.reader, code)
    if mi is None:
        return []
    with mi:
        entries = [e for e in (mi.il_address_map() or []) if e[0] not in IL_OFFSET_MARKERS and e[0] >= il_offset]
    if not entries:
        return []
    first = min(e[0] for e in entries)
    return sorted({start for il, start, _end in entries if il == first})


class BpmdState:
    """The bpmd breakpoints of one live process, from its first instruction on: the runtime
    (``runtime()``) may not be loaded yet when the first ones are asked for. ``target`` is the
    host's target as the last command saw it: callbacks read through it."""

    def __init__(self, target: Target, runtime_for: Callable[[Target], "ClrRuntime"]) -> None:
        self.target = target
        self._runtime_for = runtime_for
        self.entries: list[MethodBreakpoint] = []
        self.next_number = 1
        self.compile_watch: int | None = None  # host breakpoint on compileMethod
        self.jit_load_watch: int | None = None  # pending host breakpoint on libclrjit's getJit
        self.spent: list[int] = []  # one-shot breakpoints to delete at the next command
        # Module (a compilation's info->scope) -> {MethodDef token: [(request entry, IL offset)]}.
        self._interest: dict[int, dict[int, list[tuple[MethodBreakpoint, int]]]] = {}

    @property
    def host(self) -> Breakpoints:
        target = self.target
        if not isinstance(target, Breakpoints) or not target.is_live:
            raise SosError("bpmd needs a live process in LLDB or GDB")
        return target

    def runtime(self) -> "ClrRuntime | None":
        """The runtime, or None while libcoreclr is not loaded (or not readable yet)."""
        try:
            return self._runtime_for(self.target)
        except SosError:
            return None

    def tidy(self) -> None:
        host = self.host
        for n in self.spent:
            host.delete_breakpoint(n)
        self.spent.clear()

    def _new_entry(self, method: MethodMatch | None, request: BreakRequest | None, il_offset: int) -> MethodBreakpoint:
        entry = MethodBreakpoint(self.next_number, method, request, il_offset)
        self.next_number += 1
        self.entries.append(entry)
        return entry

    def add(self, method: MethodMatch, il_offset: int = 0) -> MethodBreakpoint:
        """A breakpoint on a method the runtime knows (its MethodDesc): now, or when jitted."""
        self.tidy()
        existing = next((e for e in self.entries if e.method is not None and e.il_offset == il_offset
                         and e.method.method_desc == method.method_desc), None)
        entry = existing or self._new_entry(method, None, il_offset)
        try:
            self._arm_jitted(entry)
            self._watch_compiles()
        except SosError:
            if existing is None:
                self.entries.remove(entry)
            raise
        return entry

    def add_request(self, request: BreakRequest) -> MethodBreakpoint:
        """A breakpoint on a method or line of a module not loaded (or not compiled) yet: the
        JIT watch matches it by module and token when the method is compiled."""
        self.tidy()
        entry = self._new_entry(None, request, request.il_offset)
        self._interest.clear()  # modules already looked at may hold what this names
        try:
            self._watch_compiles()
        except SosError:
            self.entries.remove(entry)
            raise
        return entry

    def _arm_jitted(self, entry: MethodBreakpoint) -> None:
        """Break now where the method's code is: JIT-compiled, or precompiled (ReadyToRun)."""
        rt = self.runtime()
        if rt is None or entry.method is None:
            return
        code = native_code(rt, entry.method.method_desc)
        if code:
            self._arm(entry, code, jitted=True)
            return
        mod = rt.catalog.module(entry.method.module_address)
        if mod is not None:
            self._arm_precompiled(entry, mod.image_base, entry.method.token, entry.il_offset)

    def _arm_precompiled(self, entry: MethodBreakpoint, image_base: int, token: int, il_offset: int) -> bool:
        """Break at the method's ReadyToRun code (which runs without the JIT), if it has some."""
        code = precompiled_code(self.target, image_base, token)
        if code is None:
            return False
        entry.il_offset = il_offset
        self._arm(entry, code, jitted=False)
        return True

    def arm_loaded_precompiled(self, entry: MethodBreakpoint) -> None:
        """A request whose methods have no MethodDesc yet (their types are not loaded) may have
        ReadyToRun code in a module loaded now: break there; the request stays open for the JIT."""
        rt = self.runtime()
        if rt is None or entry.request is None:
            return
        for mod in rt.catalog.modules():
            for token, il in entry.request.locations(rt, mod):
                self._arm_precompiled(entry, mod.image_base, token, il)

    def _arm(self, entry: MethodBreakpoint, code: int, *, jitted: bool) -> None:
        """Break in ``entry``'s method whose native code starts at ``code``: there, or at its IL
        offset's code (read now if the method has run, else when it first runs)."""
        if not entry.il_offset:
            self._plant(entry, code)
            return
        rt = self.runtime()
        if jitted and rt is not None:
            found = il_offset_code(rt, code, entry.il_offset)
            if not found:
                raise SosError(_unmapped(entry))
            for at in found:
                self._plant(entry, at)
            return

        def locate(hit: BreakpointHit) -> bool:
            if number in self.spent:
                return False  # located already; deleted at the next command
            self.spent.append(number)
            runtime = self.runtime()
            if runtime is None or entry not in self.entries:
                return False
            found = il_offset_code(runtime, code, entry.il_offset)
            if not found:
                raise SosError(_unmapped(entry) + "; stopped at the method's start")
            for at in found:
                if at != code:
                    self._plant(entry, at)
            if code in found:
                entry.code.append(code)
                return True  # the offset's code is the method's start: stop now
            return False
        number = self.host.set_breakpoint(code, locate)
        entry.host_ids.append(number)

    def _plant(self, entry: MethodBreakpoint, code: int) -> None:
        if code in entry.code:
            return
        entry.host_ids.append(self.host.set_breakpoint(code))
        entry.code.append(code)

    # -- the JIT watch ---------------------------------------------------------------------

    def _watch_compiles(self) -> None:
        if self.compile_watch is not None or self.jit_load_watch is not None:
            return
        host = self.host
        target = self.target
        address = compile_method_address(target)
        if address is not None:
            self.compile_watch = host.set_breakpoint(address, self._on_compile)
            return
        if target.find_module(JIT_MODULE) is not None or target.arch != "x86_64":
            if any(e.pending for e in self.entries):
                raise SosError("cannot find the JIT's compileMethod: a method not yet JIT-compiled cannot be "
                               "watched (x86-64 with libclrjit.so only)")
            return
        self.jit_load_watch = host.set_function_breakpoint(JIT_MODULE, JIT_EXPORT, self._on_get_jit)

    def _on_get_jit(self, hit: BreakpointHit) -> bool:
        """In getJit: its return value (rax at the return address) is the JIT."""
        target = self.target
        slot = _return_slot(target, hit)
        tid = hit.tid

        def on_return(back: BreakpointHit) -> bool:
            if number in self.spent or back.tid != tid or back.register("rsp") != slot + 8:
                return False
            self.spent.append(number)
            if self.compile_watch is None:
                jit = back.register("rax")
                address = _in_jit(target, target.read_pointer(target.read_pointer(jit))) if jit else None
                if address is not None:
                    self.compile_watch = self.host.set_breakpoint(address, self._on_compile)
                    if self.jit_load_watch is not None:
                        self.spent.append(self.jit_load_watch)
                        self.jit_load_watch = None
            return False
        number = self.host.set_breakpoint(target.read_pointer(slot), on_return)
        return False

    def _on_compile(self, hit: BreakpointHit) -> bool:
        target = self.target
        info = hit.register("rdx")
        md = target.read_pointer(info)
        entries = [e for e in self.entries if e.method is not None and e.method.method_desc == md]
        entries += self._requests_for(target.read_pointer(info + target.pointer_size), md)
        if not entries:
            return False
        sp = hit.register("rsp")
        native_entry = hit.register("r8")
        tid = hit.tid
        returned_to = target.read_pointer(sp)

        def on_return(back: BreakpointHit) -> bool:
            # Spent: a later compilation returns there with the same stack, and this one-shot
            # must not read that compilation's code as its own. Other thread: not this call.
            if number in self.spent or back.tid != tid or back.register("rsp") != sp + 8:
                return False
            self.spent.append(number)
            code = target.read_pointer(native_entry)

            for entry in entries:
                if code and entry in self.entries:
                    self._arm(entry, code, jitted=False)
            return False
        number = self.host.set_breakpoint(returned_to, on_return)
        return False

    def _requests_for(self, scope: int, md: int) -> list[MethodBreakpoint]:
        """The requests that method ``md`` of module ``scope`` answers; they become its breakpoints."""
        open_requests = [e for e in self.entries if e.method is None]
        if not open_requests or scope & 1:  # tagged: a dynamic method's resolver, not a Module
            return []
        interest = self._interest.get(scope)
        rt = self.runtime()
        if interest is None:
            mod = rt.catalog.module(scope) if rt is not None else None
            if mod is None:
                return []  # not readable yet: asked again at the next compilation
            interest = {}
            for entry in open_requests:
                for token, il in entry.request.locations(rt, mod):
                    interest.setdefault(token, []).append((entry, il))
            self._interest[scope] = interest
        if not interest or rt is None:
            return []
        data = rt.method_desc_data(md)
        if data is None or data.token not in interest:
            return []
        mod = rt.catalog.module(scope)
        found = []
        for entry, il in interest[data.token]:
            if entry.method is None and entry in self.entries:
                entry.method = MethodMatch(md, rt.method_desc_name(md) or entry.describe(),
                                           mod.file_name if mod else "", scope, data.token)
                entry.il_offset = il
                found.append(entry)
        return found

    def resolve_loaded(self, request: BreakRequest) -> list[tuple[MethodMatch, int]]:
        """What ``request`` names in the modules loaded now, with a MethodDesc: (method, IL offset)."""
        rt = self.runtime()
        if rt is None:
            return []
        out = []
        for mod in rt.catalog.modules():
            for token, il in request.locations(rt, mod):
                md = rt.methods.desc_from_token(mod.address, token, _method_table(rt, mod, token))
                if md:
                    out.append((MethodMatch(md, rt.method_desc_name(md) or request.describe(), mod.file_name,
                                            mod.address, token), il))
        return out

    # -- removing ----------------------------------------------------------------------------

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
        if self.entries:
            return
        for attr in ("compile_watch", "jit_load_watch"):
            number = getattr(self, attr)
            if number is not None:
                self.host.delete_breakpoint(number)
                setattr(self, attr, None)
        self.tidy()


def _unmapped(entry: MethodBreakpoint) -> str:
    return (f"{entry.describe()}: the JIT's IL-to-native map has no IL offset {entry.il_offset} or later "
            f"(a Release build's map holds IL offset 0 only; a Debug build's has every statement)")


def _method_table(rt: "ClrRuntime", mod: "ClrModule", method_token: int) -> int:
    """The MethodTable of the loaded type declaring ``method_token`` (0: none loaded)."""
    reader = rt.catalog.metadata(mod)
    if reader is None:
        return 0
    for type_token, mt in rt.catalog.type_def_map(mod.address).items():
        if any(m.token == method_token for m in reader.methods_of(type_token)):
            return mt
    return 0


_STATES: dict[tuple, BpmdState] = {}


def bpmd_state(target: Target, runtime_for: Callable[[Target], "ClrRuntime"]) -> BpmdState:
    """The bpmd state of ``target``'s process (one per process, kept while it lives)."""
    key = getattr(target, "key", None) or (id(target),)
    state = _STATES.get(key)
    if state is None:
        state = _STATES[key] = BpmdState(target, runtime_for)
    state.target = target
    return state
