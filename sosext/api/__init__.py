"""sosext's public Python API: see docs/api.md."""
from ..clr.heap.segments import Generation
from .growth import (GrownType, HeapDiff, HeldBy, Holder, Leaks, PathGroup, Retention, TypeGrowth, diff,
                     leaks)
from .heap import ClrType, Heap, HeapObject, TypeStats
from .roots import Root, RootPath
from .runtime import Runtime, current, open
from .threads import Frame, Thread

__all__ = ["open", "current", "diff", "leaks", "Runtime", "Heap", "HeapObject", "ClrType", "TypeStats", "Root",
           "RootPath", "Thread", "Frame", "Generation", "Retention", "HeldBy", "HeapDiff", "TypeGrowth", "Holder",
           "Leaks", "GrownType", "PathGroup"]
