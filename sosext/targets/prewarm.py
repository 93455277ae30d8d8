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
gcroot of 20M live objects took 2.2 s instead of 2.7 s (docs/design.md, eighteenth session). How the cache
holds a file depends on what filled it: ``cp`` leaves 4 KiB pages, ``dd bs=4M`` 2 MiB folios. So
the mapping is marked, and a core of 256 MiB or more is populated range by range; a range the
cache holds in small pages (smaps' ``FilePmdMapped`` tells) is *refolded*: dropped from the
cache (``POSIX_FADV_DONTNEED``, clean pages only, none that a process maps) and read again
through the marked mapping. That is one read of the file from disk, on this thread, and only on a
block device's file system. The file's last 8 MiB go first: if they come back slower than
512 MiB/s (a slow disk would lose more than the search gains) or not in 2 MiB folios (a kernel
or file system without them), nothing more is refolded. Then each 64 MiB is populated, and
refolded if the cache holds it in small pages, until one comes back too slowly. Later
processes find the file folded and only populate. ``SOSEXT_HUGEPAGES=0`` turns both off.
A core written a moment ago (createdump, cp) is still dirty in the cache, which drops only
clean pages: its last 8 MiB come back unfolded, and the refold is left to a later process,
once the kernel has written the file back (within ~30 s). Writing each range back and waiting
for it here cost the first gcroot of the 20M leak core 0.6–0.9 s, and folded 55–68% of it.
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
_FIRST = 8 << 20  # the file's last 8 MiB, refolded first: whether it comes back huge, and how fast
_CHUNK = 64 << 20
_RANGES = 128  # a larger core in larger ranges
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

    def release(off: int, n: int) -> None:
        madvise(base + off, n, MADV_DONTNEED)  # this process's entries: a page mapped anywhere is not dropped

    if os.environ.get("SOSEXT_HUGEPAGES", "1") != "0" and not base % _HUGE and size >= _REFOLD_MIN and \
            madvise(base, size, MADV_HUGEPAGE) == 0 and _on_a_disk(fd):
        _populate_folded(fd, base, size, populate, release)
    else:
        for off in range(0, size, _STEP):
            if not populate(off, min(_STEP, size - off)):
                break  # a kernel without it: the search faults pages in as before
    del view


def _on_a_disk(fd: int) -> bool:
    """Whether the file is on a block device's file system (ext4, xfs): not NFS, FUSE, tmpfs,
    overlayfs or btrfs (device major 0), where a read again may cross a network or gain nothing."""
    return os.major(os.fstat(fd).st_dev) != 0


def _populate_folded(fd: int, base: int, size: int, populate: Callable[[int, int], bool],
                     release: Callable[[int, int], None]) -> None:
    """Populate range by range; a range that the cache holds in small pages is refolded.
    The file's last 8 MiB go first (what sosext reads first is at the start of a core, and a
    page this process maps cannot be dropped): whether they come back in 2 MiB folios, and how
    fast, decides whether the other ranges are refolded too."""
    last = max(0, (size - _FIRST) // _HUGE * _HUGE)
    done, gained = _fill(fd, base, last, size - last, True, populate, release, measure=True)
    refolding = done is True and gained >= (size - last) // _HUGE * _HUGE // 2  # else a kernel without them, or dirty pages
    step = max(_CHUNK, -(-last // _RANGES) // _HUGE * _HUGE)  # smaps is read twice a range: a few hundred at most
    for off in range(0, last, step):
        done, _ = _fill(fd, base, off, min(step, last - off), refolding, populate, release)
        if done is None:
            return  # a kernel without MADV_POPULATE_READ: the search faults pages in as before
        refolding = refolding and done


def _fill(fd: int, base: int, off: int, n: int, refold: bool, populate: Callable[[int, int], bool],
          release: Callable[[int, int], None], measure: bool = False) -> tuple[bool | None, int]:
    """Map ``n`` bytes at ``off``; with ``refold``, when the cache holds less than 90% of their
    whole 2 MiB in 2 MiB folios, drop them from the cache and read them again. The first item
    is False when a refold came back slower than _SLOW (refold no more), None when populating
    failed; the second, with ``measure``, the bytes the range now has in 2 MiB entries. A range
    may come back partly in small pages where the search has mapped pages meanwhile (they
    cannot be dropped): the next process refolds those."""
    before = pmd_mapped(base) if refold else 0
    if not populate(off, n):
        return None, 0
    if not refold:
        return True, 0
    gained = pmd_mapped(base) - before
    if gained >= n // _HUGE * _HUGE * 9 // 10:
        return True, gained
    began = time.perf_counter()
    release(off, n)
    os.posix_fadvise(fd, off, n, os.POSIX_FADV_DONTNEED)
    if not populate(off, n):
        return None, 0
    fast = n >= _SLOW * (time.perf_counter() - began)
    return fast, (pmd_mapped(base) - before if measure else 0)


def pmd_mapped(base: int) -> int:
    """Bytes of the mapping at ``base`` mapped by 2 MiB entries (/proc/self/smaps), 0 if unknown.
    Searched with str.find: the prewarm thread holds the GIL the while, which Python's imports want."""
    with open("/proc/self/smaps") as f:
        text = f.read()
    at = text.find(f"\n{base:x}-")
    if at < 0:
        return 0
    field = text.find("\nFilePmdMapped:", at)
    end = text.find("\nVmFlags:", at)  # the mapping's last field
    if field < 0 or (0 <= end < field):
        return 0
    return int(text[field + 15:text.index(" kB", field)]) * 1024


def pmd_mapped_whole(mm: mmap.mmap) -> tuple[int, int]:
    """Maps every page of ``mm`` (one byte read a page) without marking it and returns its bytes
    in 2 MiB entries and its size: how the page cache holds the file (the tests and bench ask)."""
    import numpy as np
    view = np.frombuffer(mm, np.uint8)
    try:
        int(view[::4096].sum())
        return pmd_mapped(view.ctypes.data), view.size
    finally:
        del view
