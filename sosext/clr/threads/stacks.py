"""Managed call stacks: what a thread's frames are, as the runtime's own stack walker sees them.

The reader walks (``stack_frames``: the DAC's IXCLRDataStackWalk or the contracts reader's own
walk, readers/stacks.py has the records); the model asks for a fresh view of the target first.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

# The walk's records, where the model's users have always found them.
from ...readers.stacks import ClrStack, ClrStackFrame, FrameKind, FrameValue, NotManagedThread

if TYPE_CHECKING:
    from ..runtime import ClrRuntime

__all__ = ["ClrStack", "ClrStackFrame", "FrameKind", "FrameValue", "NotManagedThread", "walk_stack",
           "module_path", "module_file_name"]


def walk_stack(runtime: "ClrRuntime", os_tid: int, *, arguments: bool = False, local_variables: bool = False,
               registers: bool = False, max_frames: int = 0) -> ClrStack:
    """The managed frames of OS thread ``os_tid``, innermost first.

    ``arguments``/``local_variables`` also collect each managed frame's values where the runtime
    can describe them, ``registers`` each stop's register values (non-volatile ones are exact,
    volatile ones are whatever unwinding left); ``max_frames`` (0: all) stops early. Raises
    NotManagedThread when the runtime has no thread on ``os_tid``."""
    runtime.refresh()
    return runtime.reader.stack_frames(os_tid, arguments=arguments, local_variables=local_variables,
                                       registers=registers, max_frames=max_frames)


def module_path(runtime: "ClrRuntime", module: int) -> str:
    """Path of a runtime Module's file as the runtime loaded it, "" when unknown; cached per
    target generation."""
    cache: dict[int, str] = runtime.cache("stacks.module_paths", dict)
    path = cache.get(module)
    if path is None:
        dac = runtime.reader
        data = dac.module_data(module) if module else None
        path = (dac.pe_file_name(data.pe_assembly) if data is not None and data.pe_assembly else None) or ""
        cache[module] = path
    return path


def module_file_name(runtime: "ClrRuntime", module: int) -> str:
    """File name (no directory) of a runtime Module, "" when unknown."""
    return module_path(runtime, module).replace("\\", "/").rsplit("/", 1)[-1]
