"""Hints to the CPU that compiled kernels give and plain Python ignores.

``prefetch(a, i)`` asks the CPU to start loading ``a[i]``'s cache line. A depth-first search
over a heap waits on one object header after another; asking for the next siblings' headers
while the current one is examined overlaps those waits. A prefetch never faults, so ``i`` may
be any index the kernel computed (it is still kept in bounds). In the compiled forms it is
LLVM's ``llvm.prefetch`` (read, keep in all cache levels); as Python it does nothing.

``touch(a, i)`` writes ``a[i]``'s own value back, atomically (``lock or 0``): the page holding
it is then mapped and written once, by the thread that touched it, while another thread may be
storing into the same array (the atomic write never undoes a value stored meanwhile). A thread
that maps pages ahead of a kernel writing them uses it (``roots/rootwalk.py``): on a VM whose
host backs a page only at its first write, ``madvise(MADV_POPULATE_WRITE)`` maps the page but
that write still costs ~10 µs (measured on a Firecracker VM: docs/design.md, sixteenth session).
As Python it does nothing.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np


def prefetch(a: np.ndarray, i: int) -> None:
    """Plain Python: nothing to hint."""


def jit_prefetch() -> Callable[[Any, Any], None]:
    """``prefetch`` as a numba intrinsic (imported only when numba compiles the kernels)."""
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    @intrinsic
    def prefetch_line(typingctx, a, i):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            array = context.make_array(signature.args[0])(context, builder, args[0])
            i8p = ir.IntType(8).as_pointer()
            i32 = ir.IntType(32)
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                                "llvm.prefetch.p0i8")
            address = builder.bitcast(builder.gep(array.data, [args[1]]), i8p)
            builder.call(fn, [address, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
            return context.get_dummy_value()
        return types.void(a, i), codegen

    return prefetch_line


def touch(a: np.ndarray, i: int) -> None:
    """Plain Python: nothing to touch (the writer faults its pages in itself)."""


def jit_touch() -> Callable[[Any, Any], None]:
    """``touch`` as a numba intrinsic: ``atomicrmw or a[i], 0`` (a 64-bit item)."""
    from llvmlite import ir
    from numba.core import types
    from numba.extending import intrinsic

    @intrinsic
    def touch_item(typingctx, a, i):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            array = context.make_array(signature.args[0])(context, builder, args[0])
            i64 = ir.IntType(64)
            address = builder.bitcast(builder.gep(array.data, [args[1]]), i64.as_pointer())
            builder.atomic_rmw("or", address, ir.Constant(i64, 0), "monotonic")
            return context.get_dummy_value()
        return types.void(a, i), codegen

    return touch_item
