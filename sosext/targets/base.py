"""The Target protocol: where the bytes, modules and threads of a debuggee come from.

Every host (LLDB, GDB, the standalone CLI) supplies one Target; everything above this
layer (the DAC bridge, the CLR model, the commands) is written against this protocol only.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Callable, Iterable, Protocol, runtime_checkable

from ..errors import MemoryReadError
from .disasm import Instruction


@dataclass(frozen=True, slots=True)
class Module:
    """A file mapped into the target: a native library or a managed assembly."""

    name: str  # file name without directory, e.g. "libcoreclr.so"
    path: str  # full path as the target saw it
    base: int  # lowest mapped address
    size: int  # span from base to the end of the last mapping of this file
    build_id: bytes | None = None


# Register names follow Linux x86_64 user_regs_struct (lowercase); AArch64 those of the kernel's
# user_pt_regs: x0..x30, sp, pc, pstate (normalize_registers maps LLDB's and GDB's own names).
Registers = dict[str, int]

# What LLDB (fp, lr, cpsr) and GDB (cpsr) call some AArch64 registers, and the kernel's names.
_AARCH64_ALIASES = {"fp": "x29", "lr": "x30", "cpsr": "pstate"}


def normalize_registers(arch: str, regs: Registers) -> Registers:
    """``regs`` under the names the Target protocol uses for ``arch`` (a debugger's own names
    for AArch64's frame pointer, link register and flags become x29, x30 and pstate)."""
    if arch != "aarch64":
        return regs
    return {_AARCH64_ALIASES.get(n, n): v for n, v in regs.items()}


@dataclass(frozen=True, slots=True)
class ThreadInfo:
    """An OS thread of the target."""

    tid: int  # OS thread id (LWP)
    # The debugger's own thread number: LLDB and GDB count from 1; sosext's CLI counts from 0,
    # as dotnet-dump does (the standalone analyzer its users compare it with). -1 when unknown.
    index: int = -1


@dataclass(frozen=True, slots=True)
class MemoryRange:
    start: int
    end: int
    readable: bool = True
    path: str = ""


class ProcessState(Enum):
    """Whether a target can be read now. A core is always STOPPED."""

    STOPPED = "stopped"  # a stopped live process: its memory holds still
    RUNNING = "running"  # resumed (``continue &``, LLDB's async mode): memory changes under us
    EXITED = "exited"  # gone, or a zombie the debugger has not reaped yet
    DETACHED = "detached"


# One line per state, for a command that is about to start ...
STATE_ERRORS = {
    ProcessState.RUNNING: "the process is running; interrupt it first",
    ProcessState.EXITED: "the process has exited",
    ProcessState.DETACHED: "the process was detached",
}
# ... and for one that was reading when it happened (what it printed so far is not the whole answer).
CHANGED_ERRORS = {
    ProcessState.RUNNING: "the process ran during the command; output above is incomplete",
    ProcessState.EXITED: "the process exited during the command; output above is incomplete",
    ProcessState.DETACHED: "the process was detached during the command; output above is incomplete",
}


@runtime_checkable
class Target(Protocol):
    """What sosext needs of a debuggee. Implementations never write target memory."""

    pointer_size: int
    arch: str  # "x86_64" or "aarch64"
    is_live: bool

    @property
    def generation(self) -> int:
        """Changes whenever a live process has run; every cache keys on it."""
        ...

    def state(self) -> ProcessState:
        """Whether the target can be read now; asked before every command and during long ones."""
        ...

    def read(self, address: int, size: int) -> bytes:
        """Exactly ``size`` bytes at ``address``; raises MemoryReadError otherwise."""
        ...

    def read_partial(self, address: int, size: int) -> bytes | memoryview:
        """As many bytes as can be read from ``address`` on (possibly none).

        May return a memoryview into a mapped file (zero-copy); callers treat it as read-only."""
        ...

    def modules(self) -> list[Module]:
        ...

    def threads(self) -> list[ThreadInfo]:
        ...

    def registers(self, tid: int) -> Registers:
        ...

    def selected_tid(self) -> int | None:
        """The OS thread id of the debugger's selected thread; None where there is no selection
        (a core in the CLI): commands then use the thread chosen with setthread, or the first."""
        ...

    def describe(self) -> str:
        """One line naming the target for messages ("process 1234", "core /tmp/x")."""
        ...

    def disassemble(self, address: int, code: bytes) -> list[Instruction]:
        """Optional: ``code`` (read from ``address``) as instructions, by the host's own
        disassembler; raises disasm.NoDisassembler when the host has none."""
        ...


class BreakpointHit(Protocol):
    """A thread stopped at a host breakpoint, as a breakpoint's callback sees it."""

    tid: int  # OS thread id

    def register(self, name: str) -> int:
        """A general-purpose register of the stopped thread's frame 0 ("rsp", "rdx" ...)."""
        ...


# A breakpoint callback: True stops the process there, False lets it run on. It may read
# memory and registers and set breakpoints; it must not resume or step.
OnHit = Callable[[BreakpointHit], bool]


@runtime_checkable
class Breakpoints(Protocol):
    """An optional host capability (LLDB, GDB on a live process): the debugger's own
    breakpoints. The debugger plants its trap; nothing else in the target changes."""

    def set_breakpoint(self, address: int, on_hit: OnHit | None = None) -> int:
        """A breakpoint at ``address``; the host's breakpoint number. Without ``on_hit`` the
        process stops there; with it, ``on_hit`` decides. Raises TargetError (one line) where
        the debugger cannot plant one."""
        ...

    def set_function_breakpoint(self, module: str, function: str, on_hit: OnHit) -> int:
        """A breakpoint on exported ``function`` of shared library ``module`` (a file name),
        pending until the library is loaded; the host's breakpoint number."""
        ...

    def delete_breakpoint(self, number: int) -> None:
        """Remove a breakpoint this target set (a number it no longer has is ignored)."""
        ...


class TargetBase:
    """Shared conveniences for Target implementations (read helpers, module lookup)."""

    pointer_size: int = 8
    arch: str = "x86_64"
    is_live: bool = False
    _generation: int = 0
    # Whether sosext may read this target from a thread of its own while the host runs
    # (clr/roots/background.py): only when every read goes to sosext's own mapping of a core file,
    # never through the host's API.
    background_safe: bool = False
    # A debugger that unwinds native code itself (LLDB, GDB): SOS there shows its native frames
    # in clrstack -f; dotnet-dump, which cannot, shows managed frames and runtime Frames only.
    debugger_unwinds_native: bool = False

    @property
    def generation(self) -> int:
        return self._generation

    def core_file(self):  # -> elfcore.ElfCore | None
        """The core file the bytes come from, or None for a live process (the heap index
        is cached on disk only for cores: a core never changes)."""
        core = getattr(self, "core", None)
        return core.core_file() if core is not None else None

    def state(self) -> ProcessState:
        return ProcessState.STOPPED

    def state_error(self) -> str | None:
        """Why a command cannot read the target now (one line), or None when it can."""
        return STATE_ERRORS.get(self.state())

    def read_partial(self, address: int, size: int) -> bytes:
        raise NotImplementedError

    def read_into(self, address: int, buf: memoryview) -> int:
        """Fill ``buf`` from ``address`` on; the number of bytes read. Targets that can read
        straight into a buffer override this: big walks reuse one buffer instead of
        allocating (and page-faulting in) fresh memory per segment."""
        data = self.read_partial(address, len(buf))
        n = len(data)
        buf[:n] = data
        return n

    def read(self, address: int, size: int) -> bytes:
        data = self.read_partial(address, size)
        if len(data) != size:
            raise MemoryReadError(address, size)
        return data

    def read_pointer(self, address: int) -> int:
        return int.from_bytes(self.read(address, self.pointer_size), "little")

    def read_u32(self, address: int) -> int:
        return int.from_bytes(self.read(address, 4), "little")

    def modules(self) -> list[Module]:
        raise NotImplementedError

    def find_module(self, name: str) -> Module | None:
        """The module whose file name (or full path) is ``name``; None if not loaded."""
        for m in self.modules():
            if m.name == name or m.path == name:
                return m
        return None

    def module_at(self, address: int) -> Module | None:
        for m in self.modules():
            if m.base <= address < m.base + m.size:
                return m
        return None

    def selected_tid(self) -> int | None:
        return None

    def selection_chosen(self) -> bool:
        """Whether the debugger's selected thread is the user's choice rather than one the
        debugger made by itself on opening a core (GDB's first thread of the core); commands
        act on a crash dump's signalled thread until the user chooses."""
        return True

    def disassemble(self, address: int, code: bytes) -> "list[Instruction]":
        """``code``, read from ``address``, as instructions (optional: a host with a
        disassembler of its own overrides this; the default borrows objdump, and raises
        NoDisassembler without it)."""
        from .disasm import objdump_disassemble
        return objdump_disassemble(address, code, self.arch)

    def describe(self) -> str:
        return type(self).__name__


def modules_from_mappings(mappings: Iterable[tuple]) -> list[Module]:
    """One Module per mapped image from (start, end, path[, file offset]) mappings.

    A file can be mapped more than once: the runtime maps a managed assembly as a flat
    copy and again as a loaded image, each starting at file offset 0. A mapping at offset
    0 of a path already seen therefore starts a new image instead of widening the old one.
    """
    spans: list[list] = []  # [start, end, path]
    current: dict[str, list] = {}
    for m in sorted(mappings, key=lambda m: m[0]):
        start, end, path = m[0], m[1], m[2]
        offset = m[3] if len(m) > 3 else None
        if not path or not path.startswith("/"):
            continue
        span = current.get(path)
        if span is None or offset == 0:
            span = [start, end, path]
            current[path] = span
            spans.append(span)
        else:
            span[1] = max(span[1], end)
    mods = [Module(name=p.rsplit("/", 1)[-1], path=p, base=s, size=e - s) for s, e, p in spans]
    mods.sort(key=lambda m: m.base)
    return mods


__all__ = ["Module", "ThreadInfo", "BreakpointHit", "Breakpoints", "OnHit", "MemoryRange", "Registers", "Target", "TargetBase",
           "ProcessState", "STATE_ERRORS", "CHANGED_ERRORS", "modules_from_mappings", "normalize_registers"]
