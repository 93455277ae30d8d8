"""The heap index of a core, kept on disk so that the next process starts warm.

The first walk of a core writes its index straight into a file under the cache directory
(``$SOSEXT_INDEX_DIR``, else ``$XDG_CACHE_HOME/sosext``, else ``~/.cache/sosext``; the
CLI's ``--index-dir`` and ``--no-index-cache``): the walk's output arrays are that file,
memory-mapped, so they cost page cache rather than process memory, and nothing is
copied when the walk ends. The next process maps the file read-only and is done. The
directory is bounded in bytes, and a full disk only skips the cache (``cachedir.py``).

Layout: the columns (addresses u64, type ids u32, sizes u32, generations u8), each sized
for the most objects the heap could hold (the unused tail is a hole in a sparse file),
then a JSON trailer (identity, counts, MethodTables, segment slices, walk errors, sizes of
4 GiB and more, column offsets), then a 24-byte footer: magic, trailer offset and length.

A cache file is never trusted blindly. It must be a regular file owned by this user in a
directory owned by this user and writable by nobody else; its trailer must name this
core (path, size, mtime, inode and a hash of its notes), this format version and this
heap's segments; its columns must lie inside the file; addresses must ascend and type
ids be in range (a kernel checks all of them); and a sample of objects must have, in the
core's memory, the MethodTable the index says. Anything else: it is deleted and rebuilt.
"""
from __future__ import annotations

import json
import mmap
import os
import stat
import struct
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from . import cachedir
from .index import HeapIndex, SegmentSlice
from .walk import WalkError

if TYPE_CHECKING:
    from .fastwalk import IndexColumns
    from .heapstats import HeapStatistics
    from ..parts import HeapParts

FORMAT = 2  # 2: an object being allocated below an allocation pointer is no walk error
MAGIC = b"SOSEXTIX"
_FOOTER = struct.Struct("<8sQQ")
_COLUMNS = (("addresses", np.uint64), ("type_ids", np.uint32), ("sizes", np.uint32), ("generations", np.uint8))
_FREE_MARGIN = 64 << 20  # left free on the disk beyond what a file may need
_SAMPLES = 256
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # pre-fault the mapped file in one call: ~60K faults saved at 20M objects


_STATS_FIELDS = ("method_tables", "counts", "totals", "first", "free_blocks", "errors")


def _digest(fields: dict) -> str:
    """A hash of the statistics' fields: a flipped or cut number is noticed, not printed."""
    import hashlib
    body = json.dumps({k: fields[k] for k in _STATS_FIELDS}, sort_keys=True).encode()
    return hashlib.blake2b(body, digest_size=16).hexdigest()


def default_dir() -> str | None:
    """Where index files go, or None when caching is off (SOSEXT_NO_INDEX_CACHE=1)."""
    if os.environ.get("SOSEXT_NO_INDEX_CACHE", "") not in ("", "0"):
        return None
    return cache_directory()


def cache_directory() -> str:
    """The cache directory, whether caching is on or not (``sosext cache`` lists and clears it)."""
    if os.environ.get("SOSEXT_INDEX_DIR"):
        return os.environ["SOSEXT_INDEX_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "sosext")


def cache_listing(directory: Path) -> list[tuple[cachedir.Entry, str | None, int | None]]:
    """Each entry of the cache, least recently used first, with the core its index was
    written for and its object count as the index's trailer says (None if unreadable)."""
    out = []
    for e in cachedir.entries(directory):
        core = objects = None
        try:
            fd = os.open(e.index, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                size = os.fstat(fd).st_size
                magic, offset, length = _FOOTER.unpack(os.pread(fd, _FOOTER.size, size - _FOOTER.size))
                if magic == MAGIC and offset + length + _FOOTER.size == size and length < 1 << 24:
                    t = json.loads(os.pread(fd, length, offset))
                    core, objects = str(t["identity"]["path"]), int(t["count"])
            finally:
                os.close(fd)
        except (OSError, ValueError, KeyError, TypeError, struct.error):
            pass
        out.append((e, core, objects))
    return out


def _note(text: str) -> None:
    sys.stderr.write(f"sosext: {text}\n")


def _private_dir(path: str) -> Path | None:
    """The cache directory, created 0700; None if it exists but is not ours alone."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
    except OSError as e:
        _note(f"index cache off: cannot use {path}: {e.strerror or e}")
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        _note(f"index cache off: {path} is not a directory owned by you and writable only by you")
        return None
    return Path(path)


@dataclass(frozen=True)
class CoreIdentity:
    path: str
    size: int
    mtime_ns: int
    inode: int
    device: int
    notes: str

    @classmethod
    def of(cls, core) -> "CoreIdentity | None":  # core: elfcore.ElfCore
        try:
            st = os.stat(core.path)
        except OSError:
            return None
        return cls(os.path.realpath(core.path), st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev,
                   core.notes_digest.hexdigest())

    @property
    def file_name(self) -> str:
        import hashlib
        h = hashlib.blake2b(json.dumps(self.__dict__, sort_keys=True).encode(), digest_size=12)
        return f"{h.hexdigest()}.sxi"


class IndexStore:
    """One core's index file: ``load`` it, or ``columns`` to walk into and ``commit``."""

    def __init__(self, directory: Path, identity: CoreIdentity) -> None:
        self.directory = directory
        self.identity = identity
        self.path = directory / identity.file_name
        self._tmp: str | None = None
        self._fd = -1
        self._mm: mmap.mmap | None = None
        self._layout: dict[str, int] = {}
        self._capacity = 0
        self.over_cap = False  # this core's files alone were over the cache's cap

    @classmethod
    def for_heap(cls, heap: "HeapParts") -> "IndexStore | None":
        where = heap.runtime.index_dir
        core = heap.runtime.target.core_file()
        if where is None or core is None:
            return None
        identity = CoreIdentity.of(core)
        directory = _private_dir(where) if identity else None
        return cls(directory, identity) if directory and identity else None

    # -- writing ----------------------------------------------------------------------------

    def columns(self, capacity: int) -> "IndexColumns | None":
        """File-backed output arrays for a walk of at most ``capacity`` objects."""
        from .fastwalk import IndexColumns
        offset = 0
        for name, dtype in _COLUMNS:
            self._layout[name] = offset
            offset += (capacity * np.dtype(dtype).itemsize + 4095) & ~4095
        if not self._room_for(offset, "index"):  # the walk writes through a mapping: a full disk would kill it
            return None
        try:
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".walk-", suffix=".tmp")
            os.ftruncate(fd, max(offset, 4096))
            mm = mmap.mmap(fd, max(offset, 4096), mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError as e:
            if cachedir.is_full(e):
                cachedir.note_full(self.directory, "index")
            else:
                _note(f"index cache off: {e.strerror or e}")
            return None
        self._fd, self._tmp, self._mm, self._capacity = fd, tmp, mm, capacity
        self._end = offset
        cols = {name: np.frombuffer(mm, dtype=dtype, count=capacity, offset=self._layout[name])
                for name, dtype in _COLUMNS}
        self.generations = cols.pop("generations")
        return IndexColumns(**cols)

    def commit(self, index: HeapIndex) -> None:
        """Write the trailer and give the file its name; the index keeps its mapping."""
        if self._tmp is None:
            return
        trailer = json.dumps({
            "format": FORMAT, "identity": self.identity.__dict__, "count": len(index),
            "capacity": self._capacity, "columns": self._layout,
            "method_tables": [int(m) for m in index.method_tables],
            "slices": [[sl.segment.start, sl.first, sl.stop] for sl in index.slices],
            "errors": [[e.address, e.method_table, e.reason, e.resumed_at] for e in index.errors],
            "big_sizes": sorted(index.big_sizes.items()),
        }).encode()
        try:
            os.pwrite(self._fd, trailer + _FOOTER.pack(MAGIC, self._end, len(trailer)), self._end)
            os.replace(self._tmp, self.path)
        except OSError as e:
            if cachedir.is_full(e):
                cachedir.note_full(self.directory, "index")
            else:
                _note(f"index not cached: {e.strerror or e}")
            self.discard()
            return
        finally:
            os.close(self._fd)
            self._fd = -1
        self._tmp = None
        self._prune()

    def discard(self) -> None:
        if self._tmp is not None:
            try:
                os.unlink(self._tmp)
            except OSError:
                pass
            self._tmp = None

    def _prune(self) -> None:
        """Keep the directory within its cap in bytes (``cachedir``): least recently used
        cores' files go first, this core's last, and only when it alone is over the cap."""
        removed = cachedir.enforce(self.directory, keep=self.path.stem)
        if any(e.key == self.path.stem for e in removed) and not self.over_cap:
            self.over_cap = True  # and nothing more is written for it in this process
            _note(f"index not cached: this core's files are more than the cache's cap "
                  f"({cachedir.fmt_size(cachedir.cap_for(self.directory))}; SOSEXT_CACHE_MAX or --cache-max)")

    def _room_for(self, size: int, what: str) -> bool:
        """Whether ``size`` more bytes fit on the disk with a margin; else one line, and no."""
        try:
            free = cachedir.free_bytes(self.directory)
        except OSError:
            return True
        if free >= size + _FREE_MARGIN:
            return True
        cachedir.note_full(self.directory, what, f"{cachedir.fmt_size(free)} free, it may need "
                                                 f"{cachedir.fmt_size(size)}")
        return False

    # -- reading ----------------------------------------------------------------------------

    def load(self, heap: "HeapParts") -> HeapIndex | None:
        """The cached index if it is there and checks out; None otherwise."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return None
        try:
            index = self._read(fd, heap)
        except (OSError, ValueError, KeyError, TypeError, struct.error) as e:
            index = None
            why = str(e) or type(e).__name__
        else:
            why = "it does not match the core"
        finally:
            os.close(fd)
        if index is not None:
            cachedir.touch(self.path)  # recently used: pruned last
        if index is None:
            _note(f"index cache {self.path} is not valid ({why}); rebuilding it")
            for stale in self.directory.glob(f"{self.path.stem}.*"):  # and what was derived from it
                try:
                    stale.unlink()
                except OSError:
                    pass
        return index

    def _read(self, fd: int, heap: "HeapParts") -> HeapIndex | None:
        t, offset = self._trailer(fd)
        n, cap = int(t["count"]), int(t["capacity"])
        if not 0 <= n <= cap:
            raise ValueError("bad object count")
        for name, dtype in _COLUMNS:
            start = int(t["columns"][name])
            if start < 0 or start + cap * np.dtype(dtype).itemsize > offset:
                raise ValueError(f"column {name} outside the file")
        by_start = {s.start: s for s in heap.segments}
        slices = []
        pos = 0
        for start, first, stop in t["slices"]:
            seg = by_start.get(start)
            if seg is None or first != pos or stop < first:
                raise ValueError("segments differ from the heap's")
            slices.append(SegmentSlice(seg, first, stop))
            pos = stop
        if pos != n:
            raise ValueError("segment slices do not cover the objects")
        mm = mmap.mmap(fd, 0, mmap.MAP_SHARED | _POPULATE, mmap.PROT_READ)
        cols = {name: np.frombuffer(mm, dtype=dtype, count=n, offset=t["columns"][name])
                for name, dtype in _COLUMNS}
        mts = np.array(t["method_tables"], dtype=np.uint64)
        if len(mts) > 1 and not bool(np.all(mts[1:] > mts[:-1])):
            raise ValueError("MethodTables not sorted")
        from ..kernels import heapwalk
        if not heapwalk.check_index(cols["addresses"], cols["type_ids"], len(mts)):
            raise ValueError("addresses or type ids out of order")
        if not self._sample_matches(heap, cols["addresses"], cols["type_ids"], mts):
            return None
        errors = [WalkError(a, m, r, resumed) for a, m, r, resumed in t["errors"]]
        big = {int(p): int(s) for p, s in t["big_sizes"]}
        return HeapIndex(heap, cols["addresses"], cols["type_ids"], mts, cols["sizes"], cols["generations"],
                         slices, errors, big)

    # -- derived arrays (the reference graph and its reverse) --------------------------------

    def _save_pair(self, kind: str, first: np.ndarray, second: np.ndarray, at_key: str, fields: dict) -> None:
        """Write ``first``, then ``second`` from the next page (its offset under ``at_key``) and
        a trailer, to ``<stem>.<kind>`` next to the index file, replacing it atomically."""
        path = self.directory / f"{self.path.stem}.{kind}"
        if self.over_cap or not self._room_for(first.nbytes + second.nbytes + 8192, kind):
            return
        try:
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=f".{kind}-", suffix=".tmp")
        except OSError as e:
            if cachedir.is_full(e):
                cachedir.note_full(self.directory, kind)
            return
        try:
            with os.fdopen(fd, "wb") as f:
                second_at = (first.nbytes + 4095) & ~4095
                first.tofile(f)
                f.seek(second_at)
                second.tofile(f)
                end = f.tell()
                trailer = json.dumps({"format": FORMAT, "identity": self.identity.__dict__, "kind": kind,
                                      **fields, at_key: second_at}).encode()
                f.write(trailer + _FOOTER.pack(MAGIC, end, len(trailer)))
            os.replace(tmp, path)
        except OSError as e:
            if cachedir.is_full(e):
                cachedir.note_full(self.directory, kind)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return
        self._prune()

    def save_rows(self, kind: str, offsets: np.ndarray, items: np.ndarray, index: HeapIndex) -> None:
        """Keep a CSR array pair (``kind``: 'graph' or 'reverse') next to the index file."""
        self._save_pair(kind, offsets, items, "items_at", {"count": len(index), "items": len(items)})

    def load_rows(self, kind: str, index: HeapIndex) -> tuple[np.ndarray, np.ndarray] | None:
        """The CSR pair saved by ``save_rows`` for this core and index, checked; else None."""
        path = self.directory / f"{self.path.stem}.{kind}"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return None
        try:
            t, end = self._trailer(fd)
            n, m, items_at = len(index), int(t["items"]), int(t["items_at"])
            if (t["kind"], t["count"]) != (kind, n) or items_at < 8 * (n + 1) or items_at + 4 * m != end:
                raise ValueError("written for another core or index")
            # Not pre-faulted: a later gcroot reads only the rows its search reaches.
            mm = mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ)
            offsets = np.frombuffer(mm, dtype=np.int64, count=n + 1)
            items = np.frombuffer(mm, dtype=np.uint32, count=m, offset=items_at)
            from ..kernels import refs
            if not refs.check_rows(offsets, items, n):
                raise ValueError("rows out of order or out of range")
            return offsets, items
        except (OSError, ValueError, KeyError, TypeError, struct.error) as e:
            _note(f"cached {kind} {path} is not valid ({e}); rebuilding it")
            try:
                os.unlink(path)
            except OSError:
                pass
            return None
        finally:
            os.close(fd)

    def save_dominators(self, idom: np.ndarray, retained: np.ndarray, roots_key: str, index: HeapIndex) -> None:
        """Keep the dominator tree's columns next to the index file, for the roots that
        ``roots_key`` fingerprints (a host that could not walk the stacks gets other roots)."""
        self._save_pair("dominators", idom, retained, "retained_at", {"count": len(index), "roots": roots_key})

    def load_dominators(self, roots_key: str, index: HeapIndex) -> tuple[np.ndarray, np.ndarray] | None:
        """(idom, retained) saved by ``save_dominators`` for this core, index and roots, checked."""
        path = self.directory / f"{self.path.stem}.dominators"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return None
        try:
            t, end = self._trailer(fd)
            n, at = len(index), int(t["retained_at"])
            if (t["kind"], t["count"]) != ("dominators", n) or at < 4 * n or at + 8 * n != end:
                raise ValueError("written for another core or index")
            if t["roots"] != roots_key:
                return None  # other roots (e.g. stacks walked or not): computed again, file kept
            mm = mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ)
            idom = np.frombuffer(mm, dtype=np.int32, count=n)
            retained = np.frombuffer(mm, dtype=np.uint64, count=n, offset=at)
            from ..kernels import dominators
            if not dominators.check_tree(idom, retained, index.sizes):
                raise ValueError("not a dominator tree of this heap")
            return idom, retained
        except (OSError, ValueError, KeyError, TypeError, struct.error) as e:
            _note(f"cached dominators {path} are not valid ({e}); rebuilding them")
            try:
                os.unlink(path)
            except OSError:
                pass
            return None
        finally:
            os.close(fd)

    # -- dumpheap -stat's table --------------------------------------------------------------

    def save_statistics(self, stats: "HeapStatistics") -> None:
        """Keep the per-type table next to the index: a second process answers ``dumpheap
        -stat`` from ~10 KB instead of mapping, checking and summing the whole index."""
        fields = {"method_tables": [int(m) for m in stats.method_tables], "counts": stats.counts.tolist(),
                  "totals": stats.totals.tolist(), "first": stats.first.tolist(),
                  "free_blocks": [[b.address, b.size, b.next_address, b.next_method_table] for b in stats.free_blocks],
                  "errors": [[e.address, e.method_table, e.reason, e.resumed_at] for e in stats.errors]}
        fields["digest"] = _digest(fields)
        self._save_pair("stats", np.empty(0, np.uint8), np.empty(0, np.uint8), "unused_at", fields)

    def load_statistics(self, heap: "HeapParts") -> "HeapStatistics | None":
        """The table ``save_statistics`` kept for this core, checked against the heap; else None.

        Checked: ours and for this core (the trailer), the index it came from still there,
        every column the same length, counts and sizes possible (each type's total at least
        its count times the smallest object, the sum within the heap's segments), and every
        MethodTable counted one the runtime recognises. Anything else: deleted, rebuilt."""
        from .heapstats import FreeBlock, HeapStatistics
        path = self.directory / f"{self.path.stem}.stats"
        if not self.path.exists():
            return None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return None
        try:
            t, _end = self._trailer(fd)
            if t["kind"] != "stats":
                raise ValueError("not a statistics file")
            if t.pop("digest", None) != _digest({k: t[k] for k in _STATS_FIELDS}):
                raise ValueError("its digest does not match its contents")
            mts = np.array(t["method_tables"], dtype=np.uint64)
            counts = np.array(t["counts"], dtype=np.int64)
            totals = np.array(t["totals"], dtype=np.int64)
            first = np.array(t["first"], dtype=np.int64)
            if not len(mts) == len(counts) == len(totals) == len(first) or mts.ndim != 1:
                raise ValueError("columns of different lengths")
            if bool(np.any(counts < 0)) or bool(np.any(totals < counts * 12)):
                raise ValueError("impossible counts or sizes")
            if int(totals.sum()) > sum(s.length for s in heap.segments):
                raise ValueError("more bytes than the heap holds")
            if not all(heap.runtime.is_method_table(int(m)) for m, c in zip(mts.tolist(), counts.tolist()) if c):
                raise ValueError("a MethodTable the runtime does not recognise")
            blocks = [FreeBlock(int(a), int(s), int(n), int(m)) for a, s, n, m in t["free_blocks"]]
            if any(heap.segment_of(b.address) is None for b in blocks):
                raise ValueError("a free block outside the heap")
            errors = [WalkError(int(a), int(m), str(r), int(resumed)) for a, m, r, resumed in t["errors"]]
            cachedir.touch(path)
            return HeapStatistics(mts, counts, totals, first, blocks, errors)
        except (OSError, ValueError, KeyError, TypeError, struct.error) as e:
            _note(f"cached statistics {path} are not valid ({e}); rebuilding them")
            try:
                os.unlink(path)
            except OSError:
                pass
            return None
        finally:
            os.close(fd)

    def _trailer(self, fd: int) -> tuple[dict, int]:
        """The JSON trailer of a cache file of ours for this core, and where it starts."""
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_size < _FOOTER.size:
            raise ValueError("not a regular file of yours")
        magic, offset, length = _FOOTER.unpack(os.pread(fd, _FOOTER.size, st.st_size - _FOOTER.size))
        if magic != MAGIC or offset + length + _FOOTER.size != st.st_size:
            raise ValueError("no sosext footer")
        t = json.loads(os.pread(fd, length, offset))
        if t["format"] != FORMAT or t["identity"] != self.identity.__dict__:
            raise ValueError("written for another core or format")
        return t, offset

    @staticmethod
    def _sample_matches(heap: "HeapParts", addresses: np.ndarray, type_ids: np.ndarray, mts: np.ndarray) -> bool:
        """The MethodTable in the core at sampled objects is the one the index names."""
        n = len(addresses)
        if n == 0:
            return True
        target = heap.runtime.target
        for p in np.linspace(0, n - 1, min(n, _SAMPLES)).astype(np.int64).tolist():
            word = target.read_partial(int(addresses[p]), 8)
            if len(word) != 8 or int.from_bytes(word, "little") & ~7 != int(mts[type_ids[p]]):
                return False
        return True
