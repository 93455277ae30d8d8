"""The index cache directory, bounded in bytes (``indexcache.py`` writes into it).

Each core has one *entry*: its index file ``<key>.sxi`` and the files derived from it
(``<key>.graph``, ``.reverse``, ``.dominators``, ``.stats``). Entries are counted by the
disk blocks they use (the index is a sparse file sized for the most objects the heap could
hold; only what the walk wrote takes space) and removed whole, least recently used first,
until the directory fits its cap.

**The cap** is ``SOSEXT_CACHE_MAX`` (bytes, or with a K/M/G/T suffix; ``--cache-max`` on the
CLI), else the smaller of 10 GiB and a tenth of the file system the cache lives on. Why:
an entry costs about 55 bytes per object once the graph, its reverse and the dominators are
kept (index 17, rows 8 + 4 per reference each way, dominators 12), so 10 GiB holds a
100M-object heap's whole entry (~5.5 GB) or several 20M ones, the sizes a leak hunt
compares; a tenth of a small disk keeps the cache from being what fills it. A cap counted
in files (the previous rule kept 16 indexes) could reach a terabyte on 500M-object heaps.

**A full disk** never breaks a command: a write that would not fit, or that fails with
ENOSPC, drops the cache for that file with one line on stderr, once per process.
"""
from __future__ import annotations

import errno
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MAX = 10 << 30
_FRACTION_OF_DISK = 10
_SUFFIX = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_INDEX = ".sxi"
_noted_full = False


def parse_size(text: str) -> int:
    """``"500M"`` → bytes; K/M/G/T are powers of 1024. ValueError for anything else."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", text, re.I)
    if not m:
        raise ValueError(f"not a size: {text!r} (e.g. 500M, 10G)")
    return int(float(m.group(1)) * _SUFFIX[m.group(2).upper()])


def fmt_size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def free_bytes(directory: Path) -> int:
    """Bytes an unprivileged writer may still use on the directory's file system (tests
    replace this to simulate a full disk)."""
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def cap_for(directory: Path) -> int:
    """The cache's cap in bytes: ``SOSEXT_CACHE_MAX``, else min(10 GiB, a tenth of the disk)."""
    given = os.environ.get("SOSEXT_CACHE_MAX", "")
    if given:
        try:
            return parse_size(given)
        except ValueError:
            pass
    try:
        st = os.statvfs(directory)
        return min(DEFAULT_MAX, st.f_blocks * st.f_frsize // _FRACTION_OF_DISK)
    except OSError:
        return DEFAULT_MAX


def note_full(directory: Path, what: str, detail: str = "no space left on device") -> None:
    """One line per process: the cache was skipped because the disk is (nearly) full."""
    global _noted_full
    if not _noted_full:
        _noted_full = True
        import sys
        sys.stderr.write(f"sosext: {what} not cached: {detail} ({directory})\n")


def is_full(e: OSError) -> bool:
    return e.errno in (errno.ENOSPC, errno.EDQUOT)


@dataclass(frozen=True)
class Entry:
    """One core's files in the cache."""

    key: str
    files: tuple[Path, ...]
    bytes: int  # disk blocks in use
    used: float  # the newest access or change of any of its files

    @property
    def index(self) -> Path:
        return next((f for f in self.files if f.suffix == _INDEX), self.files[0])


def _disk_bytes(st: os.stat_result) -> int:
    return st.st_blocks * 512 if hasattr(st, "st_blocks") else st.st_size


def entries(directory: Path) -> list[Entry]:
    """Every entry of the directory, least recently used first (temporary files apart)."""
    groups: dict[str, list[tuple[Path, os.stat_result]]] = {}
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    for name in names:
        if name.startswith(".") or "." not in name:
            continue
        path = directory / name
        try:
            st = os.lstat(path)
        except OSError:
            continue
        groups.setdefault(name.split(".", 1)[0], []).append((path, st))
    out = [Entry(key, tuple(sorted(p for p, _ in files)), sum(_disk_bytes(s) for _, s in files),
                 max(max(s.st_atime, s.st_mtime) for _, s in files))
           for key, files in groups.items()]
    return sorted(out, key=lambda e: (e.used, e.key))


def temporary_files(directory: Path) -> list[Path]:
    """Files a writer left behind (``.walk-*.tmp`` and the like), older than a minute."""
    now = time.time()
    out = []
    try:
        for name in os.listdir(directory):
            if name.startswith(".") and name.endswith(".tmp"):
                p = directory / name
                try:
                    if now - os.lstat(p).st_mtime > 60:
                        out.append(p)
                except OSError:
                    pass
    except OSError:
        pass
    return out


def remove(entry: Entry) -> int:
    """Delete an entry's files; the bytes freed."""
    freed = 0
    for f in entry.files:
        try:
            st = os.lstat(f)
            os.unlink(f)
            freed += _disk_bytes(st)
        except OSError:
            pass
    return freed


def enforce(directory: Path, keep: str | None = None, cap: int | None = None) -> list[Entry]:
    """Remove least recently used entries until the directory fits its cap; ``keep`` (the
    entry being written) goes last, and only when it alone is over the cap. The removed."""
    cap = cap_for(directory) if cap is None else cap
    found = entries(directory)
    total = sum(e.bytes for e in found)
    removed = []
    for e in sorted(found, key=lambda e: e.key == keep):  # stable: LRU order, ``keep`` last
        if total <= cap:
            break
        total -= remove(e)
        removed.append(e)
    return removed


def touch(path: Path) -> None:
    """Mark an entry used (a file of it was just read), for the LRU order: its access time
    only, so that its modification time still says when it was written."""
    try:
        os.utime(path, ns=(time.time_ns(), os.stat(path).st_mtime_ns))
    except OSError:
        pass
