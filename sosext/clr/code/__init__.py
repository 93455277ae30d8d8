"""Managed code: MethodDescs and code versions, JIT'd and ReadyToRun code, IL, GC info, source
lines, breakpoints, and the loader heaps code lives in."""
