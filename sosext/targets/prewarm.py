"""A core file mapped, and its page tables filled on another core, before sosext has started.

gcroot's first search reads the heap in place through the core's mapping
(``clr/roots/rootsearch.py``) in depth-first order, taking a page fault per few pages as it goes
(0.06 s of a cold gcroot at 20M objects, and the CPU's prefetches are dropped on pages not
mapped yet). ``MADV_POPULATE_READ`` (Linux 5.14) maps every page in one pass, 0.065 s for an
812 MiB core; done while Python imports sosext and opens the runtime (0.15 s), it is free.
Only the CLI can do it that early, since it knows its commands before it starts: it calls
:func:`prewarm` when the first search will read in place, and :class:`~.elfcore.ElfCore`
:func:`take`\\s that mapping, when it is of the same file, instead of making its own.
"""
from __future__ import annotations

import ctypes
import mmap
import os
import stat
import threading

MADV_POPULATE_READ = 22  # linux/mman.h; Python's mmap module names it only from 3.12
_STEP = 4 << 20
_made: dict[str, tuple[tuple[int, int, int, int], mmap.mmap, int]] = {}


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def prewarm(path: str) -> None:
    """Map ``path`` (a regular, non-empty file) and fill the mapping's page tables in a
    daemon thread. Any failure leaves things as they were: the core is mapped later as usual."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
                return
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            fd = os.dup(f.fileno())
    except (OSError, ValueError):
        return
    _made[os.path.realpath(path)] = (_identity(st), mm, fd)
    threading.Thread(target=_populate, args=(mm,), name="sosext-prewarm", daemon=True).start()


def take(path: str, st: os.stat_result) -> tuple[mmap.mmap, int] | None:
    """The mapping and a descriptor of ``path`` made by :func:`prewarm`, if it is still the
    file ``st`` describes (else it is closed)."""
    made = _made.pop(os.path.realpath(path), None)
    if made is None:
        return None
    identity, mm, fd = made
    if identity != _identity(st):
        os.close(fd)
        return None
    return mm, fd


def _populate(mm: mmap.mmap) -> None:
    try:
        import numpy as np  # the address of a read-only mapping; sosext imports numpy anyway
        view = np.frombuffer(mm, dtype=np.uint8)
        base, size = view.ctypes.data, view.size
        del view  # no buffer export left behind: the mapping can be closed
        madvise = ctypes.CDLL(None, use_errno=True).madvise  # through ctypes: without the GIL
        madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    except (AttributeError, ImportError, OSError, ValueError):
        return
    for off in range(0, size, _STEP):
        if mm.closed or madvise(base + off, min(_STEP, size - off), MADV_POPULATE_READ) != 0:
            return  # closed, or a kernel without it: the search faults pages in as before
