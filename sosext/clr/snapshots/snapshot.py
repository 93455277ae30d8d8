"""Heap snapshots and their differences: which types grew between two dumps.

A snapshot is the per-type statistics of one heap keyed by type *name* (MethodTable
addresses differ between processes and runtimes), in C#'s spelling (typenames.py), the one
sosext's own commands print; each type keeps the runtime's (or a gcdump's) spelling beside it,
so that ``-type`` finds it by any of them (typekeys.py). A baseline snapshot of another core is
computed in a child process (``python3 -m sosext snapshot CORE``): it gets its own DAC
instance, and it runs on the second core while this process walks the current heap.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from ...dac.loader import clr_path_override
from ...errors import SosError
from ..readerchoice import reader_choice
from ..typesystem.typekeys import name_contains, named
from ..typesystem.typenames import csharp_name

if TYPE_CHECKING:
    from ..heap.heap import ClrHeap

SNAPSHOT_SCHEMA = 1


@dataclass(frozen=True, slots=True)
class TypeTotal:
    name: str  # C#'s spelling
    count: int
    size: int
    retained: int | None = None  # dominators.DominatorTree.retained_by_type's figure; None: not computed
    raw_names: tuple[str, ...] = ()  # the names it was read under: the runtime's, a gcdump's events'


@dataclass
class HeapSnapshot:
    source: str  # what was walked: "core file /x", "process 123"
    types: dict[str, TypeTotal]
    note: str = ""  # what the comparison of this snapshot with the other one cannot see, if anything
    taken: float | None = None  # when the heap was as counted (a core's mtime, a gcdump's time), if known

    @property
    def total_count(self) -> int:
        return sum(t.count for t in self.types.values())

    @property
    def total_size(self) -> int:
        return sum(t.size for t in self.types.values())

    @property
    def has_retained(self) -> bool:
        return any(t.retained is not None for t in self.types.values())

    @classmethod
    def of_heap(cls, heap: "ClrHeap", source: str, include_free: bool = False,
                retained: bool = False, live_only: bool = False) -> "HeapSnapshot":
        """Per-type totals; with ``retained``, also each type's retained bytes (this builds
        the reference graph and the dominator tree); with ``live_only``, only the objects a
        root reaches (what a GC heap snapshot, taken after its own GC, holds)."""
        ix = heap.index()
        held: dict[int, int] = {}
        if retained:
            held = {r.method_table: r.retained for r in heap.dominators().retained_by_type()}
        if live_only:
            from ..heap.heapstats import HeapStatistics
            rows = HeapStatistics.of_index(heap, ix, heap.live()).rows()
        else:
            rows = [(st.method_table, st.count, st.total_size) for st in ix.stats()]
        types: dict[str, list[int]] = {}
        raw: dict[str, str] = {}
        for mt, count, size in rows:
            name = heap.types.csharp_name_of(mt)
            if name == "Free" and not include_free:
                continue
            acc = types.setdefault(name, [0, 0, 0])  # same name, several MTs (collectible, dynamic)
            raw.setdefault(name, heap.types.name_of(mt))
            acc[0] += count
            acc[1] += size
            acc[2] += held.get(mt, 0)
        return cls(source, {n: TypeTotal(n, c, s, r if retained else None, (raw[n],))
                            for n, (c, s, r) in types.items()}, taken=taken_of(heap.runtime.target))

    def to_json(self) -> dict:
        return {"schema": SNAPSHOT_SCHEMA, "source": self.source, "taken": self.taken,
                "types": [{"name": t.name, "count": t.count, "size": t.size, "raw_names": list(t.raw_names),
                           **({} if t.retained is None else {"retained": t.retained})}
                          for t in sorted(self.types.values(), key=lambda t: t.name)]}

    @classmethod
    def from_json(cls, doc: dict) -> "HeapSnapshot":
        if doc.get("schema") != SNAPSHOT_SCHEMA:
            raise SosError("not a sosext heap snapshot (schema mismatch)")
        types: dict[str, TypeTotal] = {}
        for t in doc["types"]:
            name = csharp_name(t["name"])  # an earlier version's file: the runtime's spelling
            raw = tuple(t.get("raw_names") or ([t["name"]] if name != t["name"] else []))
            was = types.get(name)
            if was is not None:
                types[name] = _merged(was, TypeTotal(name, t["count"], t["size"], t.get("retained"), raw))
            else:
                types[name] = TypeTotal(name, t["count"], t["size"], t.get("retained"), raw)
        return cls(doc["source"], types, taken=doc.get("taken"))


def _merged(a: TypeTotal, b: TypeTotal) -> TypeTotal:
    """Two entries of one name (several MethodTables, or two spellings of one type) summed."""
    retained = None if a.retained is None or b.retained is None else a.retained + b.retained
    return TypeTotal(a.name, a.count + b.count, a.size + b.size, retained,
                     tuple(dict.fromkeys(a.raw_names + b.raw_names)))


def taken_of(target: object) -> float | None:
    """When a target's heap was as it is: now for a live process, a core file's mtime (the
    dump's end; a copy made with cp -p keeps it)."""
    if getattr(target, "is_live", False):
        return time.time()
    core = getattr(target, "core", None)
    path = getattr(core, "path", None) or getattr(target, "path", None)
    try:
        return os.stat(path).st_mtime if path else None
    except OSError:
        return None


def swapped_note(old: HeapSnapshot, new: HeapSnapshot) -> str | None:
    """One line when the baseline was taken after the heap it is compared with: growth then
    reads as shrinking, and nothing else in the output says why. The same words serve diff and
    leaks, from the shell and in a debugger (the command does not know which ran it)."""
    if old.taken is None or new.taken is None or old.taken <= new.taken:
        return None
    return (f"Note: the baseline {old.source} was written after {new.source}: are OLD and NEW swapped? "
            "(name the older dump first: sosext diff|leaks OLD NEW; in a debugger on the newer one, "
            "heapdiff|leaks OLD)")


SNAPSHOT_LIMITS = ("a GC heap snapshot holds each live object's type and size and who references it: "
                   "no field values, no strings' text, no stacks")


def align(core: HeapSnapshot, events: HeapSnapshot, prefer_core: bool = True) -> tuple[HeapSnapshot, HeapSnapshot]:
    """``core`` (names from the DAC) and ``events`` (a gcdump snapshot's, from EventPipe) with
    one name per type (typekeys.py), the DAC's when ``prefer_core`` else the events'; types
    with the same key are summed. Both get a note saying how they were matched."""
    from ..typesystem.typekeys import key
    display: dict[str, str] = {}
    for preferred, other in ((core, events), (events, core))[:: 1 if prefer_core else -1]:
        for name in preferred.types:
            display.setdefault(key(name), name)
        for name in other.types:
            display.setdefault(key(name), name)

    def rekeyed(snap: HeapSnapshot) -> dict[str, TypeTotal]:
        out: dict[str, TypeTotal] = {}
        for t in snap.types.values():
            name = display[key(t.name)]
            was = out.get(name)
            mine = TypeTotal(name, t.count, t.size, None, t.raw_names)
            out[name] = _merged(was, mine) if was else mine
        return out

    note = (f"A core compared with a gcdump snapshot: the core counts only the objects a root reaches (the "
            f"snapshot's GC collected the rest); types are matched as the events name them (a nested type "
            f"without the types enclosing it); "
            f"{SNAPSHOT_LIMITS}.")
    return (HeapSnapshot(core.source, rekeyed(core), note, core.taken),
            HeapSnapshot(events.source, rekeyed(events), note, events.taken))


def python_for_children() -> str:
    """The Python to run sosext in a child: Debian's, which the debuggers embed, else ours."""
    for candidate in ("/usr/bin/python3", sys.executable, shutil.which("python3") or ""):
        if candidate and os.path.basename(candidate).startswith("python") and os.access(candidate, os.X_OK):
            return candidate
    raise SosError("no python3 found to analyze the baseline core")


class BaselineJob:
    """A baseline snapshot being computed by a child process."""

    def __init__(self, core: str, live_only: bool = False) -> None:
        from ...targets.elfcore import check_core_file
        check_core_file(core)  # in analyze's words: "not a core file: X is a directory"
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        self.core = core
        # The child loads its own DAC: it must take the user's setclrpath/--clr-path choice too,
        # and the reader chosen with setreader/--reader.
        clr_path = clr_path_override()
        env["SOSEXT_READER"] = reader_choice() or ""
        argv = [python_for_children(), "-m", "sosext", "snapshot", core] + (["--live"] if live_only else [])
        if clr_path:
            argv += ["--clr-path", clr_path]
        self.proc = subprocess.Popen(argv,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                     text=True, env=env)

    def result(self) -> HeapSnapshot:
        out, err = self.proc.communicate()
        if self.proc.returncode != 0:
            last = next((ln for ln in reversed(err.splitlines()) if ln.strip()), "failed")
            raise SosError(f"baseline {self.core}: {last.removeprefix('error: ')}")
        return HeapSnapshot.from_json(json.loads(out))

    def cancel(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@dataclass(frozen=True, slots=True)
class TypeDelta:
    name: str  # C#'s spelling
    old_count: int
    old_size: int
    new_count: int
    new_size: int
    old_retained: int | None = None  # None: a snapshot without retained sizes
    new_retained: int | None = None
    raw_names: tuple[str, ...] = ()  # the runtime's (or a gcdump's) spellings of the name

    def is_named(self, text: str) -> bool:
        """Whether ``text`` spells this type's name: C#'s, the runtime's or a gcdump's."""
        return text == self.name or any(named(text, raw) for raw in self.raw_names)

    def name_contains(self, text: str) -> bool:
        """Whether some spelling of this type's name contains ``text`` (``-type``)."""
        return text in self.name or any(name_contains(text, raw) for raw in self.raw_names)

    @property
    def retained_delta(self) -> int | None:
        if self.old_retained is None or self.new_retained is None:
            return None
        return self.new_retained - self.old_retained

    @property
    def count_delta(self) -> int:
        return self.new_count - self.old_count

    @property
    def size_delta(self) -> int:
        return self.new_size - self.old_size


def diff_snapshots(old: HeapSnapshot, new: HeapSnapshot) -> list[TypeDelta]:
    """Every type in either snapshot, largest growth in bytes first (then by count, name)."""
    names = set(old.types) | set(new.types)
    with_retained = old.has_retained and new.has_retained
    zero = TypeTotal("", 0, 0, 0 if with_retained else None)
    rows = [TypeDelta(n, old.types.get(n, zero).count, old.types.get(n, zero).size,
                      new.types.get(n, zero).count, new.types.get(n, zero).size,
                      old.types.get(n, zero).retained if with_retained else None,
                      new.types.get(n, zero).retained if with_retained else None,
                      tuple(dict.fromkeys(old.types.get(n, zero).raw_names + new.types.get(n, zero).raw_names)))
            for n in names]
    rows.sort(key=lambda r: (-r.size_delta, -r.count_delta, r.name))
    return rows


def filter_deltas(rows: Iterable[TypeDelta], *, type_substring: str | None = None,
                  min_delta: int | None = None, top: int | None = None) -> list[TypeDelta]:
    """``top``: the n types that grew most, never padded with types that did not grow."""
    out = [r for r in rows if (type_substring is None or r.name_contains(type_substring))
           and (min_delta is None or r.size_delta >= min_delta)]
    if top is None:
        return out
    return [r for r in out if r.size_delta > 0 or (r.size_delta == 0 and r.count_delta > 0)][:top]
