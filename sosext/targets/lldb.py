"""The LLDB target: a live process or a core file opened in LLDB.

Memory: a live local process is read through /proc/<pid>/mem when the kernel allows it
(an order of magnitude faster than SBProcess.ReadMemory, reference/measured.md), else
through LLDB. A core file is read by sosext's own ELF core reader, because LLDB hands out
zeros for the image pages a createdump core leaves out. Threads and registers come from
LLDB in both cases.
"""
from __future__ import annotations

import os

import lldb  # type: ignore[import-not-found]

from ..errors import TargetError
from .base import Module, OnHit, ProcessState, Registers, TargetBase, ThreadInfo, modules_from_mappings, normalize_registers
from .corefind import find_open_core
from .disasm import Instruction
from .procfs import W_X_HINT, ProcMemory, process_gone, read_maps, shared_mapping_at

_RUNNING = (lldb.eStateRunning, lldb.eStateStepping, lldb.eStateLaunching, lldb.eStateAttaching)
_GONE = (lldb.eStateInvalid, lldb.eStateExited, lldb.eStateUnloaded, lldb.eStateConnected)


def _target_for_core(debugger: "lldb.SBDebugger", core_path: str) -> "lldb.SBTarget | None":
    """A target for a core named with ``sosext core PATH`` when LLDB has none: LLDB 16 opens an
    AArch64 core on x86-64 only together with its executable, which the core itself names
    (the file NT_FILE maps at the auxiliary vector's AT_PHDR)."""
    from .elfcore import ElfCore
    try:
        with ElfCore(core_path) as core:
            exe = core.executable()
    except TargetError:
        return None
    if exe is None or not os.path.isfile(exe):
        return None
    error = lldb.SBError()
    target = debugger.CreateTarget(exe, None, None, False, error)
    if not target or not target.IsValid():
        return None
    process = target.LoadCore(core_path)
    if not process or not process.IsValid():
        debugger.DeleteTarget(target)
        return None
    return target


class LldbTarget(TargetBase):
    debugger_unwinds_native = True

    def __init__(self, debugger: "lldb.SBDebugger", core_path: str | None = None) -> None:
        target = debugger.GetSelectedTarget()
        if (not target or not target.IsValid()) and core_path:
            target = _target_for_core(debugger, core_path)
        if not target or not target.IsValid():
            # LLDB 16 makes no target of an AArch64 core on x86-64 without its executable
            # ("Unsupported OS": it learns Linux from the executable), hence the second hint.
            raise TargetError("no target: attach to a process (process attach -p PID) or load a core (target create -c CORE; "
                              "an arm64 core on x86-64 needs its executable too: target create --core CORE EXE, or sosext core CORE)")
        process = target.GetProcess()
        if not process or not process.IsValid() or process.GetState() in (lldb.eStateInvalid, lldb.eStateExited,
                                                                           lldb.eStateDetached):
            raise TargetError("no process: attach to a process (process attach -p PID) or load a core (target create -c CORE)")
        self.debugger = debugger
        self.sbtarget = target
        self.process = process
        self.pid = process.GetProcessID()
        self.is_live = process.GetPluginName() != "elf-core"
        triple = target.GetTriple() or ""
        self.arch = "aarch64" if triple.startswith(("aarch64", "arm64")) else "x86_64"
        self.pointer_size = target.GetAddressByteSize() or 8
        self.core = None
        self.proc_mem: ProcMemory | None = None
        if self.is_live:
            local = debugger.GetSelectedPlatform().GetName() == "host"
            self.proc_mem = ProcMemory.try_open(self.pid) if local else None
        else:
            from .elfcore import CoreTarget
            path = core_path or find_open_core(self.pid)
            if path is None:
                raise TargetError("cannot tell which core file LLDB opened; name it with: sosext core <path>")
            self.core = CoreTarget(path)
        self._modules: list[Module] | None = None
        self._modules_stop = -1

    @property
    def background_safe(self) -> bool:  # type: ignore[override]
        """On a core every read goes to sosext's own mapping of the file (and LLDB's SB API
        is safe to call from any thread anyway). GDB's target keeps the default: no."""
        return self.core is not None

    @property
    def key(self) -> tuple:
        return ("lldb", self.sbtarget.GetProcess().GetUniqueID(), self.pid, self.core.path if self.core else None)

    @property
    def generation(self) -> int:
        # The stop id grows whenever the process has run, counting the stops of expression
        # evaluation (`expr Foo()` runs managed code that may allocate); a core never runs.
        return self.process.GetStopID(True) if self.is_live else 0

    def state(self) -> ProcessState:
        if not self.is_live:
            return ProcessState.STOPPED
        if not self.process.IsValid():
            return ProcessState.EXITED
        s = self.process.GetState()
        if s in _RUNNING:
            return ProcessState.RUNNING
        if s == lldb.eStateDetached:
            return ProcessState.DETACHED
        if s in _GONE:
            return ProcessState.EXITED
        # LLDB hears of a SIGKILL only when its event thread gets to it; the kernel knows now.
        if self.proc_mem is not None and process_gone(self.pid):
            return ProcessState.EXITED
        return ProcessState.STOPPED

    def describe(self) -> str:
        return f"core file {self.core.path}" if self.core else f"process {self.pid}"

    def read_partial(self, address: int, size: int) -> bytes | memoryview:
        if self.core is not None:
            return self.core.read_partial(address, size)
        if self.proc_mem is not None:
            return self.proc_mem.read_partial(address, size)
        return self._lldb_read(address, size)

    def read_into(self, address: int, buf: memoryview) -> int:
        if self.core is not None:
            return self.core.read_into(address, buf)
        if self.proc_mem is not None:
            return self.proc_mem.read_into(address, buf)
        return super().read_into(address, buf)

    def _lldb_read(self, address: int, size: int) -> bytes:
        err = lldb.SBError()
        data = self.process.ReadMemory(address, size, err)
        if err.Success() and data:
            return data
        # Fall back to the readable prefix: halve until something reads.
        chunk = size // 2
        got = b""
        while chunk >= 8 and not got:
            err = lldb.SBError()
            got = self.process.ReadMemory(address, chunk, err) or b""
            if not err.Success():
                got = b""
            chunk //= 2
        if got:
            return got + self._lldb_read(address + len(got), size - len(got)) if len(got) < size else got
        return b""

    def modules(self) -> list[Module]:
        stop = self.generation
        if self._modules is None or stop != self._modules_stop:
            self._modules = self._load_modules()
            self._modules_stop = stop
        return self._modules

    def _load_modules(self) -> list[Module]:
        if self.core is not None:
            return self.core.modules()
        if self.proc_mem is not None:
            return modules_from_mappings((s, e, p, off) for s, e, _perm, p, off in read_maps(self.pid))
        mods = []
        for m in self.sbtarget.module_iter():
            spec = m.GetFileSpec()
            path = os.path.join(spec.GetDirectory() or "", spec.GetFilename() or "")
            lo, hi = None, 0
            for sec in m.section_iter():
                a = sec.GetLoadAddress(self.sbtarget)
                if a == lldb.LLDB_INVALID_ADDRESS or sec.GetByteSize() == 0:
                    continue
                lo = a if lo is None else min(lo, a)
                hi = max(hi, a + sec.GetByteSize())
            if lo is not None:
                header = m.GetObjectFileHeaderAddress().GetLoadAddress(self.sbtarget)
                base = header if header != lldb.LLDB_INVALID_ADDRESS else lo
                mods.append(Module(spec.GetFilename() or path, path, base, hi - base))
        mods.sort(key=lambda m: m.base)
        return mods

    def threads(self) -> list[ThreadInfo]:
        return [ThreadInfo(tid=t.GetThreadID(), index=t.GetIndexID()) for t in self.process]

    def registers(self, tid: int) -> Registers:
        thread = self.process.GetThreadByID(tid)
        if not thread or not thread.IsValid():
            if self.core is not None:
                return self.core.registers(tid)
            return {}
        frame = thread.GetFrameAtIndex(0)
        regs: Registers = {}
        for regset in frame.GetRegisters():
            for reg in regset:
                value = reg.GetValueAsUnsigned(0) if reg.GetByteSize() <= 8 else None
                if value is not None:
                    regs[reg.GetName()] = value
            break  # the first set holds the general-purpose registers
        return normalize_registers(self.arch, regs)

    def selected_tid(self) -> int | None:
        """The thread selected with ``thread select`` (LLDB's current thread)."""
        t = self.process.GetSelectedThread()
        return t.GetThreadID() if t and t.IsValid() else None

    selected_thread_tid = selected_tid  # the earlier name

    def select_tid(self, tid: int) -> bool:
        """Make OS thread ``tid`` LLDB's selected thread (clrthreads -managedexception); a debugger
        selection, nothing changes in the target."""
        return bool(self.process.SetSelectedThreadByID(tid))

    def disassemble(self, address: int, code: bytes) -> list[Instruction]:
        """LLDB's disassembler (Intel syntax on x86-64) over bytes sosext read."""
        flavor = "intel" if self.arch == "x86_64" else None
        base = lldb.SBAddress(address, self.sbtarget)
        insns = self.sbtarget.GetInstructionsWithFlavor(base, flavor, code)
        out: list[Instruction] = []
        offset = 0
        for i in range(insns.GetSize()):
            ins = insns.GetInstructionAtIndex(i)
            size = ins.GetByteSize()
            if size <= 0:
                break
            mnemonic = ins.GetMnemonic(self.sbtarget) or ""
            operands = ins.GetOperands(self.sbtarget) or ""
            out.append(Instruction(address + offset, bytes(code[offset:offset + size]),
                                   f"{mnemonic} {operands}".strip()))
            offset += size
        return out

    # -- breakpoints (the Breakpoints capability) ----------------------------------------------

    def set_breakpoint(self, address: int, on_hit: OnHit | None = None) -> int:
        if not self.is_live:
            raise TargetError("breakpoints need a live process")
        if self.proc_mem is not None and shared_mapping_at(self.pid, address):
            raise TargetError(f"cannot break at {address:#x}: {W_X_HINT}")
        bp = self.sbtarget.BreakpointCreateByAddress(address)
        if not bp or not bp.IsValid() or bp.GetNumResolvedLocations() == 0:
            if bp and bp.IsValid():
                self.sbtarget.BreakpointDelete(bp.GetID())
            raise TargetError(f"LLDB could not set a breakpoint at {address:#x}")
        if on_hit is not None:
            self._call_back(bp, on_hit)
        return bp.GetID()

    def set_function_breakpoint(self, module: str, function: str, on_hit: OnHit) -> int:
        if not self.is_live:
            raise TargetError("breakpoints need a live process")
        # LLDB keeps a by-name breakpoint in a library not loaded yet and resolves it at the load.
        bp = self.sbtarget.BreakpointCreateByName(function, module)
        if not bp or not bp.IsValid():
            raise TargetError(f"LLDB could not set a breakpoint on {module}`{function}")
        self._call_back(bp, on_hit)
        return bp.GetID()

    def _call_back(self, bp: "lldb.SBBreakpoint", on_hit: OnHit) -> None:
        _CALLBACKS[(self.process.GetUniqueID(), bp.GetID())] = on_hit
        bp.SetScriptCallbackFunction(f"{__name__}._breakpoint_hit")

    def delete_breakpoint(self, number: int) -> None:
        _CALLBACKS.pop((self.process.GetUniqueID(), number), None)
        self.sbtarget.BreakpointDelete(number)


# Callbacks by (process unique id, breakpoint id): LLDB calls one module-level function by name.
_CALLBACKS: dict[tuple[int, int], OnHit] = {}


class _LldbHit:
    def __init__(self, frame: "lldb.SBFrame") -> None:
        self.frame = frame
        self.tid = frame.GetThread().GetThreadID()

    def register(self, name: str) -> int:
        reg = self.frame.FindRegister(name)
        if not reg or not reg.IsValid():
            raise TargetError(f"no register {name}")
        return reg.GetValueAsUnsigned(0)


def _breakpoint_hit(frame, bp_loc, extra_args, internal_dict):  # type: ignore[no-untyped-def]
    """LLDB's breakpoint callback: the sosext callback decides whether to stop (it never raises)."""
    bp = bp_loc.GetBreakpoint()
    on_hit = _CALLBACKS.get((frame.GetThread().GetProcess().GetUniqueID(), bp.GetID()))
    if on_hit is None:
        return True
    try:
        return bool(on_hit(_LldbHit(frame)))
    except Exception as e:  # noqa: BLE001 - a callback error stops there, with one line
        print(f"error: sosext breakpoint {bp.GetID()}: {type(e).__name__}: {e}")
        return True
