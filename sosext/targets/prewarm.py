"""A core file mapped, and its page tables filled on another core, before sosext has started.

gcroot's first search reads the heap in place through the core's mapping
(``clr/roots/rootsearch.py``) in depth-first order, taking a page fault per few pages as it goes
(0.06 s of a cold gcroot at 20M objects, and the CPU's prefetches are dropped on pages not
mapped yet). ``MADV_POPULATE_READ`` (Linux 5.14) maps every page in one pass, 0.065 s for an
812 MiB core; done while Python imports sosext and opens the runtime (0.15 s), it is free.
Only the CLI can do it that early, since it knows its commands before it starts: it calls
:func:`prewarm` when the first search will read in place, and :class:`~.elfcore.ElfCore`
:func:`take`\\s that mapping, when it is of the same file, instead of making its own.

**Huge pages.** The search's reads are at random over the whole core, and with the page cache
holding the core in 4 KiB pages nearly every object costs a TLB miss as well as a cache miss.
Linux (ext4 and xfs, 6.x) keeps a file in 2 MiB folios when it is read through a mapping
marked ``MADV_HUGEPAGE``, and maps such folios with one page-table entry each: the same cold
gcroot then takes ~0.8 s less at 20M objects (docs/design.md, eighteenth session). How the cache
holds a file depends on what filled it: ``cp`` leaves 4 KiB pages, ``dd bs=4M`` 2 MiB folios. So
the mapping is marked, three 2 MiB probes tell how the cache holds the file, and a core of
256 MiB or more held in small pages is *refolded*: each range is dropped from the cache
(``POSIX_FADV_DONTNEED``, clean pages only, none that a process maps) and read again through
the marked mapping. That is one read of the file from disk, on this thread; it stops at the
first range read slower than 512 MiB/s (a slow disk would lose more than the search gains)
and after a first 8 MiB that did not come back in 2 MiB folios (a kernel or file system
without them). Later processes find the file folded and only populate. ``SOSEXT_HUGEPAGES=0``
turns both off.
"""
from __future__ import annotations

import ctypes
import mmap
import os
import stat
import threading
import time
from typing import Callable

MADV_POPULATE_READ = 22  # linux/mman.h; Python's mmap module names it only from 3.12
MADV_DONTNEED = 4
MADV_HUGEPAGE = 14
_STEP = 4 << 20
_HUGE = 2 << 20  # a PMD: the folio and mapping size asked for
_REFOLD_MIN = 256 << 20  # below this the search is short anyway: never re-read
_FIRST = 8 << 20  # the first range refolded, to learn whether it comes back huge
_CHUNK = 64 << 20
_SLOW = 512 << 20  # bytes/s: re-reading from a slower disk costs more than the search gains
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
            own = os.dup(f.fileno())  # the thread's: ElfCore closes ``fd`` when it likes
    except (OSError, ValueError):
        return
    _made[os.path.realpath(path)] = (_identity(st), mm, fd)
    threading.Thread(target=_populate, args=(mm, own), name="sosext-prewarm", daemon=True).start()


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


def _populate(mm: mmap.mmap, fd: int) -> None:
    try:
        _populate_mapping(mm, fd)
    except (OSError, ValueError):
        pass  # the search faults pages in as before
    finally:
        os.close(fd)


def _populate_mapping(mm: mmap.mmap, fd: int) -> None:
    try:
        import numpy as np  # the address of a read-only mapping; sosext imports numpy anyway
        # Held to the end: while it exports the mapping, nobody can unmap it and map something
        # else there that MADV_DONTNEED would then empty (ElfCore.close leaves it to the last view).
        view = np.frombuffer(mm, dtype=np.uint8)
        base, size = view.ctypes.data, view.size
        madvise = ctypes.CDLL(None, use_errno=True).madvise  # through ctypes: without the GIL
        madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    except (AttributeError, ImportError, OSError, ValueError):
        return

    def populate(off: int, n: int) -> bool:
        return not mm.closed and madvise(base + off, n, MADV_POPULATE_READ) == 0

    start = 0
    if os.environ.get("SOSEXT_HUGEPAGES", "1") != "0" and not base % _HUGE and \
            madvise(base, size, MADV_HUGEPAGE) == 0 and size >= _REFOLD_MIN and not _held_huge(base, size, populate):
        madvise(base, size, MADV_DONTNEED)  # the probes' entries: a page this process maps is not dropped
        start = _refold(mm, fd, base, size, populate)
    for off in range(start, size, _STEP):
        if not populate(off, min(_STEP, size - off)):
            break  # a kernel without it: the search faults pages in as before
    del view


def _held_huge(base: int, size: int, populate: Callable[[int, int], bool]) -> bool:
    """Whether the page cache holds the file in 2 MiB folios, by three probes (a range not
    cached at all is read in as such through the marked mapping: it counts as held so)."""
    probes = [(size * k // 4) // _HUGE * _HUGE for k in (1, 2, 3)]
    if not all(populate(off, _HUGE) for off in probes):
        return True  # cannot tell: leave the cache as it is
    return pmd_mapped(base) >= 2 * _HUGE


def _refold(mm: mmap.mmap, fd: int, base: int, size: int, populate: Callable[[int, int], bool]) -> int:
    """Drop and read again, range by range, what the cache holds in small pages; the offset
    where that stopped (the rest is only populated)."""
    off = 0
    while off < size and not mm.closed:
        first = off == 0
        n = min(_FIRST if first else _CHUNK, size - off)
        began = time.perf_counter()
        os.posix_fadvise(fd, off, n, os.POSIX_FADV_DONTNEED)
        if not populate(off, n):
            return off
        took = time.perf_counter() - began
        off += n
        if first and pmd_mapped(base) < n // 2:
            return off  # it did not come back in 2 MiB folios: no use going on
        if not first and n < _SLOW * took:
            return off  # a disk slower than _SLOW
    return off


def pmd_mapped(base: int) -> int:
    """Bytes of the mapping at ``base`` mapped by 2 MiB entries (/proc/self/smaps), 0 if unknown."""
    head = f"{base:x}-"
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            if line.startswith(head):
                inside = True
            elif inside and line.startswith("FilePmdMapped:"):
                return int(line.split()[1]) * 1024
            elif inside and line[:1] in "0123456789abcdef" and "-" in line.split()[0]:
                return 0
    return 0
