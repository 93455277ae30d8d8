"""Kernel declarations: each kernel is a plain Python function with a typed signature.

``@kernel("(i8,i8,i8)", "u8[]r", "i8", ...)`` records the function, its return type and
its argument types in a small notation of our own: ``i8 u8 i4 u4 i1 u1 b1`` are numpy's
int64 … bool, ``T[]`` a C-contiguous 1-d array of T (``T[]r``: one the kernel only reads),
``(a,b)`` a tuple. The loader (``kernels/__init__.py``) turns the recorded functions into
machine code: ahead-of-time compiled, or numba's JIT, or leaves them as Python.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, TypeVar

F = TypeVar("F", bound=Callable)

DTYPES = {"i8": "int64", "u8": "uint64", "i4": "int32", "u4": "uint32", "i1": "int8", "u1": "uint8",
          "b1": "bool"}


@dataclass(frozen=True)
class KernelSpec:
    name: str
    module: str
    function: Callable
    returns: str
    args: tuple[str, ...]


KERNELS: dict[str, KernelSpec] = {}


def kernel(returns: str, *args: str) -> Callable[[F], F]:
    def record(fn: F) -> F:
        KERNELS[fn.__name__] = KernelSpec(fn.__name__, fn.__module__, fn, returns, args)
        return fn
    return record
