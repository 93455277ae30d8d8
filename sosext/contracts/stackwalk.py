"""A thread's managed frames from the runtime's data contracts, on x86-64 and AArch64: the part
of the StackWalk contract (dotnet/runtime docs/design/datacontracts/StackWalk.md) that a
stopped thread of a core needs, with no DAC and no native code of the runtime.

The walk is the runtime's stack frame iterator (vm/stackwalk.cpp), which the DAC's
IXCLRDataStackWalk and the cDAC follow, so that the frames it reports are the DAC's:

* managed code (the ExecutionManager contract finds its method and RUNTIME_FUNCTION): the
  method's frame is reported, then unwound one step with the method's unwind codes
  (unwind_amd64.py: Windows x64 UNWIND_INFO; unwind_arm64.py: ARM64 .xdata);
* before a managed frame is reported, runtime Frames that live inside it (an InlinedCallFrame
  of a P/Invoke the method made: its address is below the caller's stack pointer) are
  reported first, with the managed frame's registers ("skipped" Frames);
* native code: the runtime never unwinds it. The next Frame of the thread's chain is
  reported with the native registers, then, if it records where managed code called out
  (an active InlinedCallFrame; a TransitionBlock's return address and callee-saved
  registers), the walk resumes there; other Frames are passed. Native code with no Frame
  left ends the walk. Native registers themselves (the thread's leaf, or where a managed
  frame returned to) are not reported, as the DAC's walk filters them out.

Bounded: at most ``max_frames`` frames, the stack pointer never goes down across a managed
unwind, and the Frame chain is followed at most ``_MAX_RUNTIME_FRAMES`` links.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

from ..errors import ContractError, SosError
from ..targets.base import Target, normalize_registers
from . import unwind_amd64, unwind_arm64
from .executionmanager import CodeBlock, ExecutionManager
from .targetdata import TargetData

_FRAME_TOP = (1 << 64) - 1
_MAX_RUNTIME_FRAMES = 4096


@dataclass(frozen=True, slots=True)
class _Arch:
    pc: str
    sp: str
    fp: str
    call_back: int                    # a return address minus this lies in the calling method
    context: tuple[tuple[str, int], ...]   # the integer registers of the runtime's CONTEXT: offsets
    callee_saved: tuple[str, ...]          # what a SoftwareExceptionFrame restores besides pc and sp


_ARCHES = {
    # AMD64 CONTEXT (winnt.h, the PAL's copy): Rax 0x78 … R15 0xF0, Rip 0xF8; Rsp 0x98.
    "x86_64": _Arch("rip", "rsp", "rbp", 1,
                    tuple(zip(("rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12",
                               "r13", "r14", "r15", "rip"), range(0x78, 0x100, 8))),
                    ("rbx", "rbp", "r12", "r13", "r14", "r15")),
    # ARM64 CONTEXT: X0 at 8 … X28, Fp 0xF0, Lr 0xF8, Sp 0x100, Pc 0x108.
    "aarch64": _Arch("pc", "sp", "x29", 4,
                     tuple((f"x{i}", 8 + 8 * i) for i in range(31)) + (("sp", 0x100), ("pc", 0x108)),
                     tuple(f"x{i}" for i in range(19, 30))),
}
# Frames that record a CONTEXT: (the descriptor type that lays the field out, the field, whether
# it holds a pointer to the CONTEXT). A RedirectedThreadFrame (a thread the GC suspension
# redirected) is a ResumableFrame with no field of its own: the descriptor lists no type for it.
_CONTEXT_FRAMES = {"SoftwareExceptionFrame": ("SoftwareExceptionFrame", "TargetContext", False),
                   "FaultingExceptionFrame": ("FaultingExceptionFrame", "TargetContext", False),
                   "ResumableFrame": ("ResumableFrame", "TargetContextPtr", True),
                   "RedirectedThreadFrame": ("ResumableFrame", "TargetContextPtr", True)}
# Frames after which the next managed frame is again a thread's active frame (FRAME_ATTR_RESUMABLE).
_RESUMABLE = ("ResumableFrame", "RedirectedThreadFrame", "HijackFrame")
# Frames whose registers come from a TransitionBlock (TransitionFrame and its kin).
_TRANSITION = ("FramedMethodFrame", "PInvokeCalliFrame", "PrestubMethodFrame", "StubDispatchFrame",
               "CallCountingHelperFrame", "ExternalMethodFrame", "DynamicHelperFrame")


@dataclass(frozen=True, slots=True)
class StackFrame:
    """One frame: a managed method's (``method_desc`` set) or a runtime Frame (``frame`` set)."""

    sp: int
    ip: int
    method_desc: int = 0
    frame: int = 0            # address of the runtime's Frame (InlinedCallFrame …)
    frame_kind: str = ""      # its identifier's name, "InlinedCallFrame" …
    frame_method_desc: int = 0  # the Frame's method (an InlinedCallFrame's P/Invoke target …)
    registers: dict[str, int] | None = field(default=None, compare=False)  # the walk's registers here


@dataclass(frozen=True, slots=True)
class Step:
    """A reported frame with the walk's state there (what the GC stack scan needs)."""

    frame: StackFrame
    regs: dict[str, int]          # the frame's registers
    caller: dict[str, int]        # a managed frame's caller's registers (else ``regs``)
    known: frozenset[str]         # registers whose values the walk knows here
    active: bool                  # a managed frame the thread is executing (not a call site)
    block: CodeBlock | None = None
    interrupted: bool = False     # reached through an exception's Frame (its code did not return)


class StackWalker:
    """Managed stacks of a target's threads (see the module's description)."""

    def __init__(self, target: Target, data: TargetData, manager: ExecutionManager | None = None) -> None:
        arch = _ARCHES.get(target.arch)
        if arch is None:
            raise SosError(f"this stack walk unwinds x86-64 and AArch64 code; the target is {target.arch}")
        self.target = target
        self.arch = arch
        self.data = data
        self.manager = manager or ExecutionManager(data)
        self._frame_names = {v: k.removesuffix("Identifier") for k, v in data.desc.globals.items()
                             if k.endswith("FrameIdentifier") and isinstance(v, int)}

    def runtime_frames(self, first: int) -> list[int]:
        """The thread's Frame chain from ``first`` (Thread.Frame) to FRAME_TOP."""
        out = []
        frame = first
        while frame and frame != _FRAME_TOP and len(out) < _MAX_RUNTIME_FRAMES:
            out.append(frame)
            frame = self.data.field_pointer(frame, "Frame", "Next")
        return out

    def frame_kind(self, frame: int) -> str:
        return self._frame_names.get(self.data.pointer(frame), "Frame")

    def calls_a_filter(self, frame: int) -> bool:
        """Whether ``frame`` is the InlinedCallFrame through which the managed exception
        dispatcher's first pass calls a filter funclet, the call still active: its Datum is the
        ExceptionHandlingHelper marker without SecondPassFuncletCaller's (2 and 4 on 64-bit;
        the runtime's exceptionhandling.h, InlinedCallFrameMarker)."""
        if self.data.pointer_size != 8 or self.frame_kind(frame) != "InlinedCallFrame":
            return False
        datum = self._inlined_call_datum(frame)
        return bool(datum) and datum & 7 == 2

    # -- one managed frame --------------------------------------------------------------------

    def code_block(self, pc: int, leaf: bool) -> CodeBlock | None:
        """The managed method at ``pc`` (a return address is looked up at its call)."""
        block = self.manager.code_block(pc if leaf else pc - self.arch.call_back)
        if block is None or not block.runtime_function:
            return None
        if not leaf:  # offsets are the return address's
            block = CodeBlock(block.start, block.method_desc, pc - block.start, block.unwind_base,
                              block.runtime_function, block.ready_to_run, block.gc_info, block.code_header,
                              block.funclet)
        return block

    def unwind(self, block: CodeBlock, regs: dict[str, int], leaf: bool, restored: set[str]) -> dict[str, int]:
        """The caller's registers of the managed frame ``regs`` (in ``block``'s method)."""
        read = self.target.read
        if self.target.arch == "aarch64":
            return unwind_arm64.unwind_frame(regs, block.unwind_base, block.runtime_function, read, restored)
        d, rf = self.data, block.runtime_function
        entry = (d.field_u32(rf, "RuntimeFunction", "BeginAddress"), d.field_u32(rf, "RuntimeFunction", "EndAddress"),
                 d.field_u32(rf, "RuntimeFunction", "UnwindData"))
        return unwind_amd64.unwind_frame(regs, block.unwind_base, entry, read, restored, leaf)

    # -- the Frames -----------------------------------------------------------------------------

    def return_address(self, frame: int, kind: str) -> int:
        """Where a Frame says managed code continues; 0 for Frames that do not say."""
        d = self.data
        if kind == "InlinedCallFrame":
            return d.field_pointer(frame, "InlinedCallFrame", "CallerReturnAddress")
        if kind in _TRANSITION and d.has("FramedMethodFrame", "TransitionBlockPtr"):
            block = d.field_pointer(frame, "FramedMethodFrame", "TransitionBlockPtr")
            return d.field_pointer(block, "TransitionBlock", "ReturnAddress") if block else 0
        if kind in ("SoftwareExceptionFrame", "HijackFrame") and d.has(kind, "ReturnAddress"):
            return d.field_pointer(frame, kind, "ReturnAddress")
        if kind in _CONTEXT_FRAMES and kind != "SoftwareExceptionFrame":
            context = self._context(frame, kind)
            return d.pointer(context + dict(self.arch.context)[self.arch.pc]) if context else 0
        return 0

    def _context(self, frame: int, kind: str) -> int:
        layout, name, indirect = _CONTEXT_FRAMES[kind]
        if not self.data.has(layout, name):
            return 0
        return self.data.field_pointer(frame, layout, name) if indirect else frame + self.data.offset(layout, name)

    def update_from_frame(self, frame: int, kind: str, regs: dict[str, int]) -> tuple[dict[str, int], frozenset[str]]:
        """The registers a Frame records (UpdateRegDisplay) and which of them are known."""
        d, a = self.data, self.arch
        out = dict(regs)
        if kind == "InlinedCallFrame":
            out[a.pc] = d.field_pointer(frame, "InlinedCallFrame", "CallerReturnAddress")
            out[a.sp] = d.field_pointer(frame, "InlinedCallFrame", "CallSiteSP")
            out[a.fp] = d.field_pointer(frame, "InlinedCallFrame", "CalleeSavedFP")
            return out, frozenset((a.pc, a.sp, a.fp))
        if kind in _TRANSITION:
            block = d.field_pointer(frame, "FramedMethodFrame", "TransitionBlockPtr")
            out[a.pc] = d.field_pointer(block, "TransitionBlock", "ReturnAddress")
            out[a.sp] = block + d.size("TransitionBlock")
            saved = block + d.offset("TransitionBlock", "CalleeSavedRegisters")
            known = {a.pc, a.sp}
            fields = d.desc.types.get("CalleeSavedRegisters", (None, {}))[1]
            for name, offset in fields.items():
                register = name.lower().replace("fp", "x29").replace("lr", "x30")
                out[register] = d.pointer(saved + offset)
                known.add(register)
            return out, frozenset(known)
        if kind in _CONTEXT_FRAMES:
            # A SoftwareExceptionFrame gives pc, sp and the callee-saved registers of its
            # CONTEXT; the others all of it.
            context = self._context(frame, kind)
            wanted = (a.pc, a.sp) + a.callee_saved if kind == "SoftwareExceptionFrame" else None
            for name, offset in a.context:
                if wanted is None or name in wanted:
                    out[name] = d.pointer(context + offset)
            return out, frozenset(wanted if wanted is not None else (n for n, _o in a.context))
        if kind == "HijackFrame" and self.target.arch == "x86_64":
            args = d.field_pointer(frame, "HijackFrame", "HijackArgsPtr")
            out[a.pc] = d.field_pointer(frame, "HijackFrame", "ReturnAddress")
            out[a.sp] = args + d.size("HijackArgs")   # Unix: the arguments end where the caller's stack was
            saved = args + d.offset("HijackArgs", "CalleeSavedRegisters")
            known = {a.pc, a.sp}
            for name, offset in d.desc.types.get("CalleeSavedRegisters", (None, {}))[1].items():
                out[name.lower()] = d.pointer(saved + offset)
                known.add(name.lower())
            return out, frozenset(known)
        raise ContractError(f"a {kind} records no registers this walk reads")

    def _inlined_call_datum(self, frame: int) -> int | None:
        """An active InlinedCallFrame's Datum (None: no call active through it)."""
        d = self.data
        if not d.field_pointer(frame, "InlinedCallFrame", "CallerReturnAddress"):
            return None
        # Datum: the field after Frame's Next (frames.h; the descriptor does not list it)
        return d.pointer(frame + d.offset("Frame", "Next") + 8)

    def frame_method_desc(self, frame: int, kind: str) -> int:
        """The method a Frame names (Frame::GetFunction): an active InlinedCallFrame's Datum
        when it holds a MethodDesc (bit 0 clear), without the low bits the exception handling
        helpers mark it with (InlinedCallFrameMarker: 2, 4; a helper's Datum is the marker
        alone); a FramedMethodFrame's MethodDesc."""
        d = self.data
        if kind == "InlinedCallFrame":
            datum = self._inlined_call_datum(frame)
            if not datum or datum & 1:
                return 0
            return datum & ~(d.pointer_size - 1)
        if kind in _TRANSITION and d.has("FramedMethodFrame", "TransitionBlockPtr"):
            return d.pointer(frame + d.offset("FramedMethodFrame", "TransitionBlockPtr") + 8)
        return 0

    # -- the walk -------------------------------------------------------------------------------

    def walk(self, os_tid: int, first_frame: int, max_frames: int = 1024) -> list[StackFrame]:
        """The frames of thread ``os_tid`` whose Thread.Frame is ``first_frame``, innermost first."""
        return [step.frame for step in self.steps(os_tid, first_frame, max_frames)]

    def managed_frames(self, os_tid: int, first_frame: int) -> list[StackFrame]:
        """Only the managed methods' frames of ``walk`` (what ClrMD's ManagedMethod frames are)."""
        return [f for f in self.walk(os_tid, first_frame) if f.method_desc]

    def steps(self, os_tid: int, first_frame: int, max_frames: int = 1024) -> Iterator[Step]:
        """Each reported frame with its registers (see Step), innermost first."""
        a = self.arch
        regs = normalize_registers(self.target.arch, dict(self.target.registers(os_tid)))
        known = frozenset(regs)
        chain = self.runtime_frames(first_frame)
        at = 0                     # the Frame iterator: chain[at] is the current Frame
        first = True               # CrawlFrame::isFirst: the next managed frame is active
        leaf = True                # the registers are a thread's own, not a call's return
        interrupted = False        # CrawlFrame::isInterrupted: reached through an exception Frame
        count = 0
        caller: dict[str, int] | None = regs
        restored: set[str] = set()
        block = self.code_block(regs[a.pc], True) if regs.get(a.pc) else None
        state = "native"
        if block is not None:
            state, caller, restored = self._managed(block, regs, True, chain, at)
        while count < max_frames:
            if state == "managed":
                assert block is not None
                yield Step(StackFrame(regs[a.sp], regs[a.pc], block.method_desc, registers=regs), regs, caller or regs,
                           known, first, block, interrupted)
                count += 1
            elif state in ("skipped", "frame"):
                frame = chain[at]
                kind = self.frame_kind(frame)
                yield Step(StackFrame(regs[a.sp], regs[a.pc], 0, frame, kind, self.frame_method_desc(frame, kind),
                                      regs), regs, regs, known, False)
                count += 1
            # Advance (NextRaw), then classify where the walk is now (ProcessCurrentFrame).
            was = state
            if state == "managed":
                first = interrupted = False
                if caller is None or caller[a.sp] < regs[a.sp] or \
                        (caller[a.sp] == regs[a.sp] and caller[a.pc] == regs[a.pc]):
                    return  # the frame cannot be unwound, or no progress: a damaged stack
                regs, known, leaf = caller, known | restored | {a.pc, a.sp}, False
            elif state == "skipped":
                at += 1
            elif state == "frame":
                frame = chain[at]
                kind = self.frame_kind(frame)
                ra = self.return_address(frame, kind)
                if ra:
                    try:
                        regs, known = self.update_from_frame(frame, kind, regs)
                    except ContractError:
                        return
                    leaf = kind in _RESUMABLE
                    interrupted = kind in ("SoftwareExceptionFrame", "FaultingExceptionFrame")
                if not (kind == "InlinedCallFrame" and ra):
                    at += 1
                first = kind in _RESUMABLE
            else:  # native: the initial registers or a managed frame's native caller
                first = False
            valid = at < len(chain)
            if was == "native":
                state = "frame" if valid else "done"
            else:
                pc = regs.get(a.pc, 0)
                block = self.code_block(pc, leaf) if pc else None
                if block is not None:
                    state, caller, restored = self._managed(block, regs, leaf, chain, at)
                elif was == "frame":
                    state = "frame" if valid else "done"
                else:
                    state = "native" if valid or was == "managed" else "done"
            if state == "done":
                return

    def _managed(self, block: CodeBlock, regs: dict[str, int], leaf: bool, chain: list[int], at: int
                 ) -> tuple[str, dict[str, int] | None, set[str]]:
        """A managed frame: its caller's registers (None: it cannot be unwound, the walk ends
        after it), and whether the next Frame lies inside it (below the caller's stack
        pointer: reported first, as a skipped Frame)."""
        restored: set[str] = set()
        try:
            caller = self.unwind(block, regs, leaf, restored)
        except (ContractError, SosError):
            return "managed", None, restored
        skipped = at < len(chain) and chain[at] < caller[self.arch.sp]
        return ("skipped" if skipped else "managed"), caller, restored
