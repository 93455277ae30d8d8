"""The GDB target: the selected inferior of GDB, a live process or a core file.

Memory: a live local process is read through /proc/<pid>/mem when the kernel allows it
(the same bytes as GDB's reads, without a round trip through GDB per read), else through
``Inferior.read_memory``. A core file is read by sosext's own ELF core reader, as in every
host, so the DAC sees identical bytes in LLDB, GDB and the CLI (reference/measured.md,
"Cores"). Threads come from GDB; registers from GDB's newest frame of each thread, or from
the core's NT_PRSTATUS notes when there is a core (the same values, without touching GDB's
thread selection).

Facts of GDB 13's Python API this module relies on (verified on Debian's gdb 13.1):
- ``Inferior.pid`` is 0 without a process; on a core it is the pid the core names.
- ``Inferior.connection.type`` is "native" for a local process, "core" for a core file,
  "remote"/"extended-remote" for gdbserver.
- ``info target`` names a core as "Local core dump file:\\n\\t`PATH', file type ...".
- ``Thread.ptid`` is (pid, lwp, tid); the LWP is the OS thread id.
- A gdb.Frame of another thread becomes invalid once that thread is selected again, so
  the user's frame is saved by level and reselected after reading registers.
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Callable, Iterator

import gdb  # type: ignore[import-not-found]

from .. import interrupts
from ..errors import Interrupted, TargetError
from .base import (STATE_ERRORS, Module, OnHit, ProcessState, Registers, TargetBase, ThreadInfo,
                   modules_from_mappings, normalize_registers)
from .corefind import find_open_core
from .disasm import Instruction
from .procfs import W_X_HINT, ProcMemory, process_gone, read_maps, shared_mapping_at

NO_PROCESS = "no process: attach to a process (attach PID) or load a core (gdb EXE CORE)"
# The same words as in LLDB; in GDB that is Ctrl-C, or `interrupt -a` after `continue &`.
RUNNING = STATE_ERRORS[ProcessState.RUNNING]

_CORE_FILE_RE = re.compile(r"Local core dump file:\s*`(.+?)',\s*file type", re.S)
# `info proc mappings`: start end size offset [perms] [objfile]; GDB 13 prints perms for
# live processes and leaves them out for cores.
_MAPPING_RE = re.compile(r"^\s*(0x[0-9a-fA-F]+)\s+(0x[0-9a-fA-F]+)\s+0x[0-9a-fA-F]+\s+(0x[0-9a-fA-F]+)"
                         r"(?:\s+([r-][w-][x-][ps-]))?(?:\s+(.*?))?\s*$")
# `info sharedlibrary`: From To Syms-Read Path (From/To bound .text, not the image).
_SOLIB_RE = re.compile(r"^\s*(0x[0-9a-fA-F]+)\s+(0x[0-9a-fA-F]+)\s+(?:Yes|No)(?:\s*\(\*\))?\s+(/.*?)\s*$")

_REGISTER_NAMES: dict[str, tuple[str, ...]] = {
    "x86_64": ("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11",
               "r12", "r13", "r14", "r15", "rip", "eflags", "cs", "ss", "fs_base", "gs_base"),
    "aarch64": tuple(f"x{i}" for i in range(31)) + ("sp", "pc", "cpsr"),
}
_PAGE = 4096
_U64 = (1 << 64) - 1


# -- the generation counter: bumped by every GDB event after which memory may differ ----------

_generation = 0
_events_connected = False


def _bump(*_event: object) -> None:
    global _generation
    _generation += 1


def connect_events() -> None:
    """Bump the generation whenever an inferior runs, stops, changes, or loads code.

    One module-level counter serves every inferior: a spurious bump only costs a cache
    rebuild, a missed one would serve stale heap data."""
    global _events_connected
    if _events_connected:
        return
    for name in ("cont", "stop", "exited", "new_objfile", "clear_objfiles", "memory_changed",
                 "register_changed", "inferior_call", "new_inferior", "inferior_deleted"):
        registry = getattr(gdb.events, name, None)
        if registry is not None:
            registry.connect(_bump)
    _events_connected = True


def generation() -> int:
    return _generation


# -- what GDB says about the selected inferior -------------------------------------------------

def _gdb_arch_name(inferior: "gdb.Inferior") -> str:
    try:
        return inferior.architecture().name()
    except (gdb.error, AttributeError):
        return ""


def arch_of(inferior: "gdb.Inferior") -> str:
    return "aarch64" if _gdb_arch_name(inferior).startswith("aarch64") else "x86_64"


def connection_type(inferior: "gdb.Inferior") -> str:
    conn = getattr(inferior, "connection", None)
    return (conn.type or "") if conn is not None else ""


def core_file_of_gdb() -> str | None:
    """The core file GDB has open, from ``info target``; None without one."""
    try:
        text = gdb.execute("info target", to_string=True)
    except gdb.error:
        return None
    m = _CORE_FILE_RE.search(text)
    return m.group(1) if m else None


def is_running(inferior: "gdb.Inferior") -> bool:
    """Whether any thread runs (``continue &``, non-stop mode): no stable heap to read."""
    try:
        threads = inferior.threads()
    except gdb.error:
        return False
    return any(t.is_valid() and t.is_running() for t in threads)


def require_stopped(inferior: "gdb.Inferior") -> None:
    if is_running(inferior):
        raise TargetError(RUNNING)


def parse_proc_mappings(text: str) -> list[tuple[int, int, str, int]]:
    """(start, end, path, file offset) of each line of ``info proc mappings``."""
    out = []
    for line in text.splitlines():
        m = _MAPPING_RE.match(line)
        if m:
            out.append((int(m.group(1), 16), int(m.group(2), 16), m.group(5) or "", int(m.group(3), 16)))
    return out


def parse_sharedlibrary(text: str) -> list[tuple[int, int, str]]:
    """(text start, text end, path) of each line of ``info sharedlibrary``."""
    out = []
    for line in text.splitlines():
        m = _SOLIB_RE.match(line)
        if m:
            out.append((int(m.group(1), 16), int(m.group(2), 16), m.group(3)))
    return out


class _Interruptible:
    """Turns GDB's Ctrl-C (a KeyboardInterrupt raised inside Python code) into Interrupted.

    The DAC calls the target back through ctypes; a KeyboardInterrupt escaping there would
    be swallowed by ctypes and the call would report success with an unfilled buffer.
    Interrupted is a SosError: the data target's guard turns it into E_FAIL, and the flag
    lets the host's interrupt source stop the command at the next progress check."""

    def __call__(self, fn: Callable) -> Callable:
        def guarded(*args, **kwargs):  # type: ignore[no-untyped-def]
            try:
                return fn(*args, **kwargs)
            except KeyboardInterrupt:
                interrupts.request()
                raise Interrupted() from None
        guarded.__name__ = fn.__name__
        guarded.__doc__ = fn.__doc__
        return guarded


interrupt_state = _Interruptible()


class GdbTarget(TargetBase):
    """GDB's selected inferior (or ``inferior``) as a sosext Target. Never writes to it."""

    debugger_unwinds_native = True

    def __init__(self, inferior: "gdb.Inferior | None" = None, core_path: str | None = None,
                 use_procfs: bool = True, use_core_reader: bool = True) -> None:
        inferior = inferior if inferior is not None else gdb.selected_inferior()
        if inferior is None or not inferior.is_valid() or inferior.pid == 0:
            raise TargetError(NO_PROCESS)
        connect_events()
        self.inferior = inferior
        self.pid: int = inferior.pid
        self.connection = connection_type(inferior)
        self.connection_num: int | None = getattr(inferior, "connection_num", None)
        self.is_live = self.connection != "core"
        self.arch = arch_of(inferior)
        self.pointer_size = 8
        self.proc_mem: ProcMemory | None = None
        self.core = None  # CoreTarget when GDB has a core file loaded
        if self.is_live:
            require_stopped(inferior)
            # Only a native connection means the process runs on this machine.
            if use_procfs and self.connection == "native":
                self.proc_mem = ProcMemory.try_open(self.pid)
        elif use_core_reader:
            self.core = self._open_core(core_path)
        self._modules: list[Module] | None = None
        self._modules_generation = -1
        self._registers: dict[int, Registers] = {}
        self._registers_generation = -1
        # On opening a core GDB selects the thread of its first NT_PRSTATUS note, not the one
        # that took the signal (LLDB selects that one): a selection counts as the user's once
        # it has been seen on another thread (selection_chosen).
        threads = self.core.threads() if self.core is not None else []
        self._opening_tid: int | None = threads[0].tid if threads else None
        self._chosen = self._opening_tid is None
        self.selection_chosen()

    def _open_core(self, override: str | None):  # type: ignore[no-untyped-def]
        from .elfcore import CoreTarget
        path = override or core_file_of_gdb() or find_open_core(self.pid)
        if path is None:
            raise TargetError("cannot tell which core file GDB opened; name it with: sosext core <path>")
        core = CoreTarget(path)
        if core.arch == "aarch64" and not _gdb_arch_name(self.inferior).startswith("aarch64"):
            # A GDB built for x86-64 alone (Debian's gdb) reads an AArch64 core as i386 with
            # no registers and process 1: say what to run instead of a mismatch of pids.
            core.close()
            raise TargetError(f"core file {path} is an AArch64 core, which this GDB cannot read "
                              "(it has no AArch64 support): open it with gdb-multiarch EXE CORE")
        pid = _core_pid(core)
        if pid is not None and pid != self.pid:
            core.close()
            raise TargetError(f"core file {path} is of process {pid}, but GDB's core is of process "
                              f"{self.pid}; name the right one with: sosext core <path>")
        self.arch = core.arch
        return core

    # -- identity ---------------------------------------------------------------------------

    @property
    def key(self) -> tuple:
        return ("gdb", self.inferior.num, self.connection_num, self.pid,
                self.core.path if self.core is not None else None)

    @property
    def generation(self) -> int:
        # A core never runs: events such as loading symbols must not flush its heap index.
        return _generation if self.is_live else 0

    def is_current(self, inferior: "gdb.Inferior") -> bool:
        """Whether this object still describes ``inferior`` as GDB sees it now."""
        return (self.inferior.is_valid() and inferior.num == self.inferior.num
                and inferior.pid == self.pid and connection_type(inferior) == self.connection
                and getattr(inferior, "connection_num", None) == self.connection_num)

    def check_usable(self) -> None:
        """Raise unless the inferior can be read now (checked before every command)."""
        problem = self.state_error()
        if problem:
            raise TargetError(problem)

    def state(self) -> ProcessState:
        if not self.is_live:
            return ProcessState.STOPPED
        inferior = self.inferior
        if not inferior.is_valid() or inferior.pid != self.pid:
            return ProcessState.EXITED  # killed, exited or detached: GDB cleared the pid
        if is_running(inferior):
            return ProcessState.RUNNING
        # GDB hears of a SIGKILL only when it next waits for the process; the kernel knows now.
        if self.connection == "native" and process_gone(self.pid):
            return ProcessState.EXITED
        return ProcessState.STOPPED

    def describe(self) -> str:
        return f"core file {self.core.path}" if self.core is not None else f"process {self.pid}"

    # -- memory -----------------------------------------------------------------------------

    @interrupt_state
    def read_partial(self, address: int, size: int) -> bytes | memoryview:
        if size <= 0 or address < 0 or address + size > 1 << 64:
            return b""
        if self.core is not None:
            return self.core.read_partial(address, size)
        if self.proc_mem is not None:
            return self.proc_mem.read_partial(address, size)
        return self._gdb_read_partial(address, size)

    @interrupt_state
    def read_into(self, address: int, buf: memoryview) -> int:
        if self.core is not None:
            return self.core.read_into(address, buf)
        if self.proc_mem is not None:
            return self.proc_mem.read_into(address, buf)
        return super().read_into(address, buf)

    def _gdb_read(self, address: int, size: int) -> bytes | None:
        try:
            return self.inferior.read_memory(address, size).tobytes()
        except gdb.MemoryError:
            return None
        except gdb.error as e:
            if "while the target is running" in str(e):
                raise TargetError(RUNNING) from None
            return None

    def _gdb_read_partial(self, address: int, size: int) -> bytes:
        """The readable prefix of [address, address + size): pages are all-or-nothing, so
        grow page-aligned chunks while they read and halve them when one fails."""
        whole = self._gdb_read(address, size)
        if whole is not None:
            return whole
        chunks: list[bytes] = []
        done = 0
        step = _PAGE - (address % _PAGE)
        while done < size:
            n = min(step, size - done)
            data = self._gdb_read(address + done, n)
            if data is not None:
                chunks.append(data)
                done += n
                step = n * 2 if (address + done) % _PAGE == 0 else _PAGE - ((address + done) % _PAGE)
            elif n <= _PAGE:
                break  # the first page of the rest is unreadable: the prefix ends here
            else:
                step = max(_PAGE, (n // 2) & ~(_PAGE - 1))
        return b"".join(chunks)

    # -- modules ----------------------------------------------------------------------------

    @interrupt_state
    def modules(self) -> list[Module]:
        gen = self.generation
        if self._modules is None or gen != self._modules_generation:
            self._modules = self._load_modules()
            self._modules_generation = gen
        return self._modules

    def _load_modules(self) -> list[Module]:
        if self.core is not None:
            return self.core.modules()
        if self.proc_mem is not None:
            try:
                return modules_from_mappings((s, e, p, off) for s, e, _perm, p, off in read_maps(self.pid))
            except OSError:
                pass
        mods = self._modules_from_gdb_mappings()
        return mods if mods else self._modules_from_solibs()

    def _modules_from_gdb_mappings(self) -> list[Module]:
        try:
            text = gdb.execute("info proc mappings", to_string=True)
        except gdb.error:
            return []
        return modules_from_mappings(parse_proc_mappings(text))

    def _modules_from_solibs(self) -> list[Module]:
        """Shared libraries only (a remote target without /proc): the image base is the
        ELF header found at or below the start of .text."""
        try:
            text = gdb.execute("info sharedlibrary", to_string=True)
        except gdb.error:
            return []
        mods = []
        for lo, hi, path in parse_sharedlibrary(text):
            base = self._elf_header_below(lo)
            if base is not None:
                mods.append(Module(path.rsplit("/", 1)[-1], path, base, hi - base))
        mods.sort(key=lambda m: m.base)
        return mods

    def _elf_header_below(self, address: int, limit: int = 1 << 24) -> int | None:
        page = address & ~(_PAGE - 1)
        stop = max(0, page - limit)
        while page >= stop:
            if self._gdb_read(page, 4) == b"\x7fELF":
                return page
            page -= _PAGE
        return None

    # -- threads and registers --------------------------------------------------------------

    def threads(self) -> list[ThreadInfo]:
        if self.core is not None and not self._gdb_threads():
            return self.core.threads()
        return [ThreadInfo(tid=_lwp(t), index=t.num) for t in self._gdb_threads()]

    def _gdb_threads(self) -> list["gdb.InferiorThread"]:
        try:
            threads = [t for t in self.inferior.threads() if t.is_valid()]
        except gdb.error:
            return []
        return sorted(threads, key=lambda t: t.num)

    @interrupt_state
    def registers(self, tid: int) -> Registers:
        if self.core is not None:
            try:
                return self.core.registers(tid)
            except TargetError:
                pass  # not in the core's notes: ask GDB
        gen = self.generation
        if gen != self._registers_generation:
            self._registers.clear()
            self._registers_generation = gen
        regs = self._registers.get(tid)
        if regs is None:
            regs = self.gdb_registers(tid)
            self._registers[tid] = regs
        return dict(regs)

    def gdb_registers(self, tid: int) -> Registers:
        """Frame-0 registers of thread ``tid`` as GDB reads them; {} if it cannot."""
        thread = next((t for t in self._gdb_threads() if _lwp(t) == tid), None)
        if thread is None or thread.is_running():
            return {}
        names = _REGISTER_NAMES.get(self.arch, ())
        with _selection_kept():
            try:
                thread.switch()
                frame = gdb.newest_frame()
            except gdb.error:
                return {}
            return normalize_registers(self.arch, _read_frame_registers(frame, names))

    def selected_thread_tid(self) -> int | None:
        try:
            t = gdb.selected_thread()
        except gdb.error:
            return None
        return _lwp(t) if t is not None and t.is_valid() else None

    def selection_chosen(self) -> bool:
        """Whether GDB's selected thread is the user's choice: always for a live process; on a
        core, from the first time sosext sees the selection away from the thread GDB selected
        when it opened the core (the host looks at every command). A ``thread N`` naming that
        first thread before any other selection cannot be told from GDB's own choice."""
        if not self._chosen:
            tid = self.selected_thread_tid()
            self._chosen = tid is not None and tid != self._opening_tid
        return self._chosen

    # -- lifetime ---------------------------------------------------------------------------

    def close(self) -> None:
        if self.proc_mem is not None:
            self.proc_mem.close()
            self.proc_mem = None
        if self.core is not None:
            self.core.close()
            self.core = None

    def selected_tid(self) -> int | None:
        """The thread selected with GDB's ``thread <n>``: what clrstack and pe act on."""
        return self.selected_thread_tid()

    def disassemble(self, address: int, code: bytes) -> list[Instruction]:
        """GDB's disassembler (Intel syntax on x86-64, the user's flavour restored after).
        GDB reads the code itself; where it cannot (a page the core lacks), objdump on the
        bytes sosext read."""
        arch = self.inferior.architecture()
        flavor = None
        try:
            if self.arch == "x86_64":
                flavor = gdb.parameter("disassembly-flavor")
                gdb.execute("set disassembly-flavor intel", to_string=True)
            found = arch.disassemble(address, address + len(code) - 1)
        except gdb.error:
            return super().disassemble(address, code)
        finally:
            if flavor is not None and flavor != "intel":
                gdb.execute(f"set disassembly-flavor {flavor}", to_string=True)
        out = []
        for ins in found:
            at, size = int(ins["addr"]), int(ins["length"])
            offset = at - address
            if offset < 0 or offset + size > len(code):
                break
            out.append(Instruction(at, bytes(code[offset:offset + size]), " ".join(ins["asm"].split())))
        return out

    def select_tid(self, tid: int) -> bool:
        """Make OS thread ``tid`` GDB's selected thread (clrthreads -managedexception)."""
        for t in self._gdb_threads():
            if _lwp(t) == tid:
                t.switch()
                self._chosen = True
                return True
        return False

    # -- breakpoints (the Breakpoints capability) ----------------------------------------------

    def set_breakpoint(self, address: int, on_hit: OnHit | None = None) -> int:
        if not self.is_live:
            raise TargetError("breakpoints need a live process")
        # GDB plants its traps only when the process resumes, and then fails on a page it
        # cannot patch: say so now.
        if self.proc_mem is not None and shared_mapping_at(self.pid, address):
            raise TargetError(f"cannot break at {address:#x}: {W_X_HINT}")
        try:
            bp = _SosextBreakpoint(address, on_hit)
        except gdb.error as e:
            raise TargetError(f"GDB could not set a breakpoint at {address:#x}: {e}") from None
        return bp.number

    def set_function_breakpoint(self, module: str, function: str, on_hit: OnHit) -> int:
        if not self.is_live:
            raise TargetError("breakpoints need a live process")
        # A Python breakpoint whose function is not found yet is pending: GDB resolves it when a
        # library defining it loads (only ``module`` exports this name among the runtime's).
        try:
            bp = _SosextBreakpoint(function, on_hit, spec=True)
        except gdb.error as e:
            raise TargetError(f"GDB could not set a breakpoint on {module}:{function}: {e}") from None
        return bp.number

    def delete_breakpoint(self, number: int) -> None:
        for bp in gdb.breakpoints() or ():
            if bp.number == number and isinstance(bp, _SosextBreakpoint):
                bp.delete()


def _core_pid(core) -> int | None:  # type: ignore[no-untyped-def]
    """The process a core is of, as GDB numbers a core's inferior (NT_PRPSINFO's pid)."""
    info = core.core.process
    if info is not None and info.pid:
        return info.pid
    threads = core.core.threads
    return threads[0].tid if threads else None


def _lwp(thread: "gdb.InferiorThread") -> int:
    pid, lwp, _tid = thread.ptid
    return lwp or pid


def _read_frame_registers(frame: "gdb.Frame", names: tuple[str, ...]) -> Registers:
    regs: Registers = {}
    for name in names:
        try:
            regs[name] = int(frame.read_register(name)) & _U64
        except (gdb.error, ValueError):
            continue  # e.g. fs_base on a kernel that does not report it
    return regs


@contextmanager
def _selection_kept() -> Iterator[None]:
    """Restores the user's selected thread and frame (by level) on the way out.

    Reading another thread's registers means selecting it; the user must not notice."""
    thread, level = None, 0
    try:
        thread = gdb.selected_thread()
        level = gdb.selected_frame().level()
    except gdb.error:
        pass  # no thread or no stack selected: nothing to restore beyond the thread
    try:
        yield
    finally:
        _reselect(thread, level)


def _reselect(thread: "gdb.InferiorThread | None", level: int) -> None:
    try:
        if thread is None or not thread.is_valid():
            return
        thread.switch()  # selects its newest frame
        frame = gdb.newest_frame()
        for _ in range(level):
            older = frame.older()
            if older is None:
                break
            frame = older
        if level:
            frame.select()
    except gdb.error:
        pass


__all__ = ["GdbTarget", "NO_PROCESS", "RUNNING", "connect_events", "core_file_of_gdb",
           "parse_proc_mappings", "parse_sharedlibrary", "generation", "interrupt_state"]


class _GdbHit:
    def __init__(self, thread: "gdb.InferiorThread") -> None:
        self.tid = _lwp(thread)
        self.frame = gdb.newest_frame()

    def register(self, name: str) -> int:
        return int(self.frame.read_register(name)) & 0xFFFFFFFFFFFFFFFF


class _SosextBreakpoint(gdb.Breakpoint):
    """A breakpoint at an address (or a function, ``spec``) whose stop() asks the sosext
    callback, if it has one."""

    def __init__(self, address: int | str, on_hit: OnHit | None, spec: bool = False) -> None:
        super().__init__(str(address) if spec else f"*{address:#x}", type=gdb.BP_BREAKPOINT)
        self.on_hit = on_hit

    def stop(self) -> bool:
        if self.on_hit is None:
            return True
        _bump()  # the process has run: what a callback reads must not come from a cache
        try:
            return bool(self.on_hit(_GdbHit(gdb.selected_thread())))
        except Exception as e:  # noqa: BLE001 - a callback error stops there, with one line
            print(f"error: sosext breakpoint {self.number}: {type(e).__name__}: {e}")
            return True
