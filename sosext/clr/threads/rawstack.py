"""The raw stack of a thread: every stack slot that holds a return address (SOS's dumpstack).

No unwinder is trusted here: from the thread's stack pointer to the top of its stack, each
pointer-sized word is a candidate return address when it points just past a call instruction,
either in a native module's mapping or in managed code the runtime knows (its MethodDesc).
Stale return addresses of finished calls pass too, as in SOS's dumpstack; it is a view for
when the unwinders disagree, not a replacement for clrstack.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ...errors import SosError
from ...targets.symbols import native_symbol

if TYPE_CHECKING:
    from ..runtime import ClrRuntime

MAX_SCAN = 256 << 10  # bytes of stack looked at above the stack pointer when the top is unknown
WORD = 8


@dataclass(frozen=True, slots=True)
class RawFrame:
    """One return address found on the stack, or (``slot`` 0) the thread's current instruction."""

    slot: int  # the stack slot holding the address (Child-SP)
    address: int  # the return address
    method_desc: int  # managed code: its MethodDesc; 0 for native code
    name: str  # managed: the method's name; native: the module's file name
    offset: int  # from the method's code start (managed) or the module's base (native)
    callee: "RawFrame | None" = None  # what a direct call (x64 call rel32) before it went to
    symbol: str = ""  # native: the function holding the address, from the module's ELF symbols
    symbol_offset: int = 0  # native: from that function's start

    @property
    def is_managed(self) -> bool:
        return bool(self.method_desc)

    @property
    def where(self) -> str:
        """``module!symbol+0xoff`` for native code with a symbol, ``module + 0xoff`` without;
        a managed frame's method name."""
        if self.is_managed:
            return self.name
        if self.symbol:
            return f"{self.name}!{self.symbol}+{self.symbol_offset:#x}"
        return f"{self.name} + {self.offset:#x}"


@dataclass(frozen=True, slots=True)
class RawStack:
    os_thread_id: int
    sp: int
    current: RawFrame | None  # where the thread's instruction pointer is
    frames: tuple[RawFrame, ...]
    top: int  # the end of the scanned range


def is_call_before(code: bytes, arch: str) -> bool:
    """``code`` ends where a return address points: is the instruction just before it a call?"""
    if arch == "aarch64":
        if len(code) < 4:
            return False
        insn = int.from_bytes(code[-4:], "little")
        return insn & 0xFC000000 == 0x94000000 or insn & 0xFFFFFC1F == 0xD63F0000  # BL, BLR
    n = len(code)
    if n >= 5 and code[-5] == 0xE8:  # call rel32
        return True
    if n >= 2 and code[-2] == 0xFF and code[-1] & 0x38 == 0x10 and code[-1] >> 6 == 3:  # call reg
        return True
    if n >= 2 and code[-2] == 0xFF and code[-1] & 0xF8 == 0x10 and code[-1] & 7 not in (4, 5):  # call [reg]
        return True
    # call [reg+disp8] / via SIB, call [rip+disp32] / [reg+disp32], possibly REX-prefixed
    for length in (3, 4, 6, 7):
        if n >= length and code[-length] == 0xFF and code[-length + 1] & 0x38 == 0x10:
            return True
        if n >= length + 1 and code[-length - 1] & 0xF0 == 0x40 and code[-length] == 0xFF \
                and code[-length + 1] & 0x38 == 0x10:
            return True
    return False


def stack_top(runtime: "ClrRuntime", os_tid: int, sp: int) -> int:
    dac = runtime.reader
    for addr, t in dac.threads():
        if t.os_thread_id == os_tid:
            lim = dac.stack_limits(addr)
            if lim and lim[0] != lim[1] and min(lim) <= sp < max(lim):
                return max(lim)
    return sp + MAX_SCAN


def native_module(modules: list, address: int):  # type: ignore[no-untyped-def]
    """The file mapping that holds ``address``: the smallest one, never an anonymous memfd (the
    runtime's double-mapped executable memory spans whole regions with other modules inside)."""
    best = None
    for m in modules:
        if m.base <= address < m.base + m.size and not m.name.startswith(("memfd:", "[")):
            if best is None or m.size < best.size:
                best = m
    return best


def describe_address(runtime: "ClrRuntime", address: int, slot: int = 0,
                     modules: list | None = None) -> RawFrame | None:
    """The code at ``address``: a managed method, a native module, or None."""
    dac = runtime.reader
    md = dac.method_desc_from_ip(address) or 0
    if md:
        name = dac.method_desc_name(md) or "<unknown method>"
        start = runtime.method_code_start(md, address)
        start = address if start is None else start
        return RawFrame(slot, address, md, name, (address - start) & 0xFFFFFFFFFFFFFFFF)
    module = native_module(runtime.target.modules() if modules is None else modules, address)
    if module is not None:
        sym = native_symbol(module, address)
        return RawFrame(slot, address, 0, module.name, address - module.base,
                        symbol=sym[0] if sym else "", symbol_offset=sym[1] if sym else 0)
    return None


def raw_stack(runtime: "ClrRuntime", os_tid: int, *, max_bytes: int = MAX_SCAN) -> RawStack:
    """Return addresses on OS thread ``os_tid``'s stack, innermost first."""
    runtime.refresh()
    target = runtime.target
    regs = target.registers(os_tid)
    sp = regs.get("rsp", regs.get("sp", 0))
    ip = regs.get("rip", regs.get("pc", 0))
    if not sp:
        raise SosError(f"no stack pointer for thread {os_tid:#x}")
    top = min(stack_top(runtime, os_tid, sp), sp + max_bytes)
    try:
        raw = bytes(target.read_partial(sp, top - sp))
    except SosError:
        raw = b""
    top = sp + len(raw) - len(raw) % WORD
    modules = target.modules()
    current = describe_address(runtime, ip, modules=modules) if ip else None
    arch = target.arch
    frames = []
    seen_code: dict[int, bytes | None] = {}
    callees: dict[int, RawFrame | None] = {}
    for off in range(0, len(raw) - WORD + 1, WORD):
        word = int.from_bytes(raw[off:off + WORD], "little")
        if word < 0x10000 or word >> 47:
            continue
        if word not in seen_code:
            try:
                before = bytes(target.read_partial(word - 8, 8))
            except SosError:
                before = b""
            seen_code[word] = before if len(before) == 8 and is_call_before(before, arch) else None
        before = seen_code[word]
        if before is None:
            continue
        frame = describe_address(runtime, word, sp + off, modules)
        if frame is None:
            continue
        if arch == "x86_64" and before[-5] == 0xE8:
            dest = (word + int.from_bytes(before[-4:], "little", signed=True)) & 0xFFFFFFFFFFFFFFFF
            if dest not in callees:
                callees[dest] = describe_address(runtime, dest, 0, modules)
            frame = replace(frame, callee=callees[dest])
        frames.append(frame)
    return RawStack(os_tid, sp, current, tuple(frames), top)
