"""A thread's managed frames from the runtime's data contracts, on AArch64: the part of the
StackWalk contract (dotnet/runtime docs/design/datacontracts/StackWalk.md) that a stopped
thread of a core needs, with no DAC and no native code of the runtime.

The walk alternates between three kinds of code, as the runtime's own stack frame iterator
does, and reports the managed frames and the runtime's Frames it passes:

* managed code (the ExecutionManager contract finds its method and RUNTIME_FUNCTION): one
  frame, then one step out with the method's ARM64 unwind codes (unwind_arm64.py);
* native code entered from managed code through a P/Invoke: the runtime left an
  InlinedCallFrame on the thread's Frame chain with the managed caller's return address,
  stack pointer and frame pointer, and the walk resumes there, as the runtime's does (it
  never unwinds native code itself);
* other native code (a thread's leaf frames in libc or the runtime, the runtime calling into
  managed code): one step with the module's .eh_frame (targets/cfi.py), until the walk is back
  in managed code or the next Frame of the chain lies below the stack pointer.

Bounded: at most ``max_frames`` frames, the stack pointer must never go down, and the Frame
chain is followed at most ``_MAX_RUNTIME_FRAMES`` links.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Iterator

from ..errors import SosError
from ..targets.base import Module, Target, normalize_registers
from ..targets.cfi import unwind_step
from .executionmanager import ExecutionManager
from .targetdata import TargetData
from .unwind_arm64 import unwind_frame

_FRAME_TOP = (1 << 64) - 1
_MAX_RUNTIME_FRAMES = 4096


@dataclass(frozen=True, slots=True)
class StackFrame:
    """One frame: a managed method's (``method_desc`` set) or a runtime Frame (``frame`` set)."""

    sp: int
    ip: int
    method_desc: int = 0
    frame: int = 0            # address of the runtime's Frame (InlinedCallFrame …)
    frame_kind: str = ""      # its identifier's name, "InlinedCallFrame" …


class StackWalker:
    """Managed stacks of an AArch64 target's threads (see the module's description)."""

    def __init__(self, target: Target, data: TargetData, manager: ExecutionManager | None = None) -> None:
        if target.arch != "aarch64":
            raise SosError(f"this stack walk unwinds AArch64 code; the target is {target.arch}")
        self.target = target
        self.data = data
        self.manager = manager or ExecutionManager(data)
        self._frame_names = {v: k.removesuffix("Identifier") for k, v in data.desc.globals.items()
                             if k.endswith("FrameIdentifier") and isinstance(v, int)}
        self._icf = data.desc.globals.get("InlinedCallFrameIdentifier")
        native = [m for m in target.modules() if not m.path.endswith((".dll", ".exe")) and "/memfd:" not in m.path]
        self._native = sorted(native, key=lambda m: m.base)
        self._bases = [m.base for m in self._native]

    def _native_module(self, ip: int) -> Module | None:
        i = bisect.bisect_right(self._bases, ip) - 1
        return self._native[i] if i >= 0 and ip < self._native[i].base + self._native[i].size else None

    def runtime_frames(self, first: int) -> list[int]:
        """The thread's Frame chain from ``first`` (Thread.Frame) to FRAME_TOP."""
        out = []
        frame = first
        while frame and frame != _FRAME_TOP and len(out) < _MAX_RUNTIME_FRAMES:
            out.append(frame)
            frame = self.data.field_pointer(frame, "Frame", "Next")
        return out

    def walk(self, os_tid: int, first_frame: int, max_frames: int = 1024) -> list[StackFrame]:
        """The frames of thread ``os_tid`` whose Thread.Frame is ``first_frame``, innermost first."""
        return [frame for frame, _regs, _caller, _known in self.steps(os_tid, first_frame, max_frames)]

    def steps(self, os_tid: int, first_frame: int, max_frames: int = 1024
              ) -> Iterator[tuple[StackFrame, dict[str, int], dict[str, int], frozenset[str]]]:
        """Each frame with its registers, its caller's, and the names of the registers whose
        values the walk knows there (all at the thread's leaf; after an InlinedCallFrame only
        pc, sp and x29, plus what unwinding reads back from the stack)."""
        d = self.data
        regs = normalize_registers("aarch64", dict(self.target.registers(os_tid)))
        known = frozenset(regs)
        chain = self.runtime_frames(first_frame)
        count = 0
        leaf = True
        while count < max_frames and regs.get("pc"):
            pc, sp = regs["pc"], regs["sp"]
            # A return address may lie just past its method's end: look the call itself up.
            block = self.manager.code_block(pc if leaf else pc - 4)
            if block is not None and block.runtime_function:
                restored: set[str] = set()
                caller = unwind_frame(regs, block.unwind_base, block.runtime_function, self.target.read, restored)
                yield StackFrame(sp, pc, block.method_desc), regs, caller, known
                known = known | restored | {"pc", "sp"}
            else:
                # Native code: the runtime resumes at the next InlinedCallFrame of an active
                # P/Invoke; other Frames below the stack pointer are passed.
                while chain and chain[0] < sp:
                    chain.pop(0)
                frame = chain[0] if chain else 0
                kind = d.pointer(frame) if frame else None
                if frame and kind == self._icf and d.field_pointer(frame, "InlinedCallFrame", "CallerReturnAddress"):
                    chain.pop(0)
                    caller = dict(regs)
                    caller["pc"] = d.field_pointer(frame, "InlinedCallFrame", "CallerReturnAddress")
                    caller["sp"] = d.field_pointer(frame, "InlinedCallFrame", "CallSiteSP")
                    caller["x29"] = d.field_pointer(frame, "InlinedCallFrame", "CalleeSavedFP")
                    yield StackFrame(sp, pc, 0, frame, "InlinedCallFrame"), regs, caller, known
                    count += 1
                    regs, leaf, known = caller, True, frozenset(("pc", "sp", "x29"))  # a recorded return address
                    continue
                module = self._native_module(pc)
                step = unwind_step(module, regs, self.target.read_pointer, leaf, "aarch64") if module else None
                if step is None:
                    if frame:  # the bottom of the managed stack (a thread's start)
                        yield StackFrame(sp, pc, 0, frame, self._frame_names.get(kind, "Frame")), regs, regs, known
                    return
                caller = step.regs
            count += 1
            if caller["sp"] < sp or (caller["sp"] == sp and caller["pc"] == pc):
                return  # no progress: a damaged stack
            regs, leaf = caller, False

    def managed_frames(self, os_tid: int, first_frame: int) -> list[StackFrame]:
        """Only the managed methods' frames of ``walk`` (what ClrMD's ManagedMethod frames are)."""
        return [f for f in self.walk(os_tid, first_frame) if f.method_desc]
