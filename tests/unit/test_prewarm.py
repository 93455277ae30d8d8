"""targets/prewarm.py: the CLI's early mapping of a core is used only for that same file, and a
large core held in 4 KiB pages is refolded into 2 MiB folios."""
from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from sosext.targets import prewarm


def test_the_mapping_is_taken_for_the_same_file_only(tmp_path) -> None:
    core = tmp_path / "a.core"
    core.write_bytes(b"\x7fELF" + bytes(1 << 20))
    prewarm.prewarm(str(core))
    made = prewarm.take(str(core), os.stat(core))
    assert made is not None
    mm, fd = made
    assert mm[:4] == b"\x7fELF" and os.fstat(fd).st_ino == os.stat(core).st_ino
    assert prewarm.take(str(core), os.stat(core)) is None  # taken once
    for t in threading.enumerate():  # its populating thread holds the mapping until it ends
        if t.name == "sosext-prewarm":
            t.join()
    mm.close()
    os.close(fd)

    prewarm.prewarm(str(core))
    time.sleep(0.01)
    os.utime(core, ns=(1, 1))  # the file changed since: not the same file
    assert prewarm.take(str(core), os.stat(core)) is None


def test_what_is_no_regular_file_is_left_alone(tmp_path) -> None:
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    for path in (str(tmp_path), str(empty), str(tmp_path / "missing")):
        prewarm.prewarm(path)
        assert prewarm.take(path, os.stat(tmp_path)) is None


# -- huge pages: the page cache refolded into 2 MiB folios -------------------------------------

_MIB = 1 << 20


def _write_in_small_pages(path, size: int, flush: bool = True) -> bytes:
    """A file written 4 KiB at a time and flushed: the page cache holds it in 4 KiB pages, as
    ``cp`` leaves a copied core (unflushed: dirty, as a core just written). Its bytes, to check
    that refolding changes none."""
    block = bytes(range(256)) * 16
    with open(path, "wb", buffering=0) as f:
        for i in range(size // len(block)):
            f.write(block[i % 256:] + block[:i % 256])
        if flush:
            os.fsync(f.fileno())
    return path.read_bytes()


def _mapped(path):
    import mmap
    fd = os.open(path, os.O_RDONLY)
    mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    base = np.frombuffer(mm, np.uint8).ctypes.data
    return mm, fd, base


def _populated_pmd(path) -> int:
    """What a fresh, unmarked mapping of ``path`` gets in 2 MiB entries once every page is mapped."""
    mm, fd, _ = _mapped(path)
    try:
        return prewarm.pmd_mapped_whole(mm)[0]
    finally:
        mm.close()
        os.close(fd)


def _require_folding_kernel(tmp_path) -> None:
    """Skip unless this kernel and file system give a file read through a MADV_HUGEPAGE
    mapping 2 MiB folios (Linux 6.x on ext4/xfs do; the machine's facts: docs/design.md)."""
    probe = tmp_path / "probe"
    _write_in_small_pages(probe, 8 * _MIB)
    mm, fd, base = _mapped(probe)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        mm.madvise(prewarm.MADV_HUGEPAGE)
        folded = base % (2 * _MIB) == 0 and prewarm.pmd_mapped_whole(mm)[0] > 0
    finally:
        mm.close()
        os.close(fd)
    if not folded:
        pytest.skip("this kernel or file system keeps a file in 4 KiB pages however it is read: nothing to refold")


@pytest.fixture
def small_refold_limits(monkeypatch):
    monkeypatch.setattr(prewarm, "_REFOLD_MIN", 16 * _MIB)  # test files of tens of MiB, not GiB
    monkeypatch.delenv("SOSEXT_HUGEPAGES", raising=False)


def test_a_core_held_in_small_pages_is_refolded_into_2mib_folios(tmp_path, small_refold_limits) -> None:
    _require_folding_kernel(tmp_path)
    core = tmp_path / "big.core"
    data = _write_in_small_pages(core, 40 * _MIB)
    assert _populated_pmd(core) == 0  # 4 KiB pages: what the search would wait on
    mm, fd, base = _mapped(core)
    try:
        prewarm._populate_mapping(mm, fd)
        assert prewarm.pmd_mapped(base) >= 36 * _MIB  # all but what cannot be whole 2 MiB
        assert mm[:] == data  # dropped from the cache and read again: the same bytes
    finally:
        mm.close()
        os.close(fd)
    assert _populated_pmd(core) >= 36 * _MIB  # and so the next process finds it


def test_sosext_hugepages_0_leaves_the_page_cache_as_it_is(tmp_path, small_refold_limits, monkeypatch) -> None:
    _require_folding_kernel(tmp_path)
    core = tmp_path / "big.core"
    _write_in_small_pages(core, 40 * _MIB)
    monkeypatch.setenv("SOSEXT_HUGEPAGES", "0")
    mm, fd, base = _mapped(core)
    try:
        prewarm._populate_mapping(mm, fd)
        assert prewarm.pmd_mapped(base) == 0
    finally:
        mm.close()
        os.close(fd)


def _dropped_ranges(monkeypatch) -> list[tuple[int, int]]:
    """The ranges refolding drops from the page cache, recorded as it goes."""
    dropped: list[tuple[int, int]] = []
    real = os.posix_fadvise
    monkeypatch.setattr(os, "posix_fadvise",
                        lambda fd, off, n, advice: (dropped.append((off, n)), real(fd, off, n, advice)))
    return dropped


def test_refolding_stops_when_the_file_s_last_8mib_come_back_too_slowly(tmp_path, small_refold_limits,
                                                                         monkeypatch) -> None:
    _require_folding_kernel(tmp_path)
    core = tmp_path / "big.core"
    _write_in_small_pages(core, 40 * _MIB)
    monkeypatch.setattr(prewarm, "_SLOW", 1 << 62)  # every disk is slower than that
    dropped = _dropped_ranges(monkeypatch)
    mm, fd, base = _mapped(core)
    try:
        prewarm._populate_mapping(mm, fd)
        assert dropped == [(32 * _MIB, 8 * _MIB)]  # the last 8 MiB only: the rest stays as it was
        assert prewarm.pmd_mapped(base) <= 8 * _MIB
    finally:
        mm.close()
        os.close(fd)


def test_a_core_held_in_2mib_folios_is_only_populated(tmp_path, small_refold_limits, monkeypatch) -> None:
    _require_folding_kernel(tmp_path)
    core = tmp_path / "big.core"
    _write_in_small_pages(core, 40 * _MIB)
    dropped = _dropped_ranges(monkeypatch)
    for _ in range(2):
        mm, fd, base = _mapped(core)
        try:
            prewarm._populate_mapping(mm, fd)
        finally:
            mm.close()
            os.close(fd)
    # the first process refolds, the last 8 MiB first; the second only populates
    assert dropped == [(32 * _MIB, 8 * _MIB), (0, 32 * _MIB)]


def _dirty_pages(fd: int) -> int | None:
    """The file's dirty pages in the page cache (cachestat(2), Linux 6.5), None if unknown."""
    import ctypes
    rng, stat = (ctypes.c_uint64 * 2)(0, 0), (ctypes.c_uint64 * 5)()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(451, fd, ctypes.byref(rng), ctypes.byref(stat), 0) != 0:  # __NR_cachestat
        return None
    return stat[1]


def test_a_core_just_written_is_left_to_a_later_process(tmp_path, small_refold_limits, monkeypatch) -> None:
    # Dirty pages are not dropped: the last 8 MiB come back unfolded, and nothing else is tried.
    _require_folding_kernel(tmp_path)
    core = tmp_path / "big.core"
    data = _write_in_small_pages(core, 40 * _MIB, flush=False)  # as createdump writes it
    dropped = _dropped_ranges(monkeypatch)
    mm, fd, base = _mapped(core)
    try:
        if not _dirty_pages(fd):
            pytest.skip("cachestat(2) does not show the file dirty (a kernel before 6.5, or written back already)")
        prewarm._populate_mapping(mm, fd)
        assert dropped == [(32 * _MIB, 8 * _MIB)]
        assert mm[:] == data
    finally:
        mm.close()
        os.close(fd)


def test_no_refold_off_a_block_device() -> None:
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm (tmpfs) on this machine")
    with open("/dev/shm/sosext-prewarm-test", "wb") as f:
        try:
            assert not prewarm._on_a_disk(f.fileno())  # tmpfs: major 0, as NFS, FUSE, overlayfs
        finally:
            os.unlink(f.name)


def test_only_the_ranges_held_in_small_pages_are_refolded(tmp_path, small_refold_limits, monkeypatch) -> None:
    _require_folding_kernel(tmp_path)
    core = tmp_path / "big.core"
    data = _write_in_small_pages(core, 40 * _MIB)
    monkeypatch.setattr(prewarm, "_CHUNK", 8 * _MIB)
    mm, fd, base = _mapped(core)
    try:  # the first 16 MiB read in 2 MiB folios, the rest left in 4 KiB pages
        os.posix_fadvise(fd, 0, 16 * _MIB, os.POSIX_FADV_DONTNEED)
        mm.madvise(prewarm.MADV_HUGEPAGE)
        mm.madvise(prewarm.MADV_POPULATE_READ, 0, 16 * _MIB)
    finally:
        mm.close()
        os.close(fd)
    dropped = _dropped_ranges(monkeypatch)
    mm, fd, base = _mapped(core)
    try:
        prewarm._populate_mapping(mm, fd)
        assert dropped == [(32 * _MIB, 8 * _MIB), (16 * _MIB, 8 * _MIB), (24 * _MIB, 8 * _MIB)]
        assert prewarm.pmd_mapped(base) >= 36 * _MIB
        assert mm[:] == data
    finally:
        mm.close()
        os.close(fd)
