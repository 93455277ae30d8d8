"""A GC heap snapshot taken over EventPipe (``sosext gcdump``): every live object's address,
size and type, its outgoing references, and the roots, as the runtime reported them while it
walked the heap during a full blocking GC. No memory of the process is read, so there are no
field values, no strings' contents, and no stacks.

File format (``*.gcdump.npz`` by convention; a NumPy ``.npz``, i.e. a zip of ``.npy`` arrays,
read with ``allow_pickle=False``)::

    meta          uint8[]   UTF-8 JSON: {"format": "sosext-gcdump", "version": 1, "pid", "time"
                            (seconds since the epoch), "runtime" (CLR product version or null),
                            "pointer_size", "gc_number", "type_names": [name per type index],
                            "type_ids": [hex TypeID (= MethodTable) per type index],
                            "root_names": {root index: field name of a static variable root}}
    node_address  uint64[n] object addresses, in the order the runtime walked them
    node_size     uint64[n] object sizes in bytes (as the GC sizes them)
    node_type     uint32[n] index into meta.type_names / type_ids
    node_edges    uint32[n] how many references node i has: its targets are the next
                            node_edges[i] entries of edge_target (CSR without the offsets)
    edge_target   uint64[m] referenced object addresses
    root_address  uint64[r] rooted object addresses
    root_kind     uint8[r]  GCRootKind: 0 stack, 1 finalizer queue, 2 handle, 3 older generation,
                            4 sized ref (unused), 5 overflow; static variables are kind 6 (ours)

Types are keyed by TypeID (the MethodTable address in that process); the file keeps the names
as the runtime's events spell them (``Entry[System.String,MyApp.Entry][]``: arguments in single
brackets, a nested type without the types enclosing it). Loaded, ``type_names`` are in C#'s
spelling, as sosext's other commands print names (``Entry<System.String, MyApp.Entry>[]``),
and ``event_names`` keep the file's.
"""
from __future__ import annotations

import io
import json
import os
import time
from dataclasses import dataclass, field

import numpy as np

from ...errors import SosError
from ...files import create_private
from .gcdumpformat import is_gcdump  # noqa: F401 - where callers have always found it
from .snapshot import HeapSnapshot, TypeTotal
from ..typesystem.typekeys import name_contains, named, shown_name

FORMAT = "sosext-gcdump"
VERSION = 1
ROOT_KIND_NAMES = {0: "stack", 1: "finalizer", 2: "handle", 3: "older generation", 4: "sized ref",
                   5: "overflow", 6: "static variable"}
_ARRAYS = {"node_address": np.uint64, "node_size": np.uint64, "node_type": np.uint32, "node_edges": np.uint32,
           "edge_target": np.uint64, "root_address": np.uint64, "root_kind": np.uint8}


class GcDumpError(SosError):
    """Not a sosext GC heap snapshot, or a damaged one."""


@dataclass(frozen=True, slots=True)
class GcTypeStat:
    type_id: int
    name: str  # C#'s spelling
    count: int
    size: int
    event_name: str = ""  # as the runtime's events spell it


@dataclass
class GcDump:
    pid: int
    time: float
    runtime: str | None
    pointer_size: int
    gc_number: int
    type_ids: list[int]
    type_names: list[str]
    node_address: np.ndarray
    node_size: np.ndarray
    node_type: np.ndarray
    node_edges: np.ndarray
    edge_target: np.ndarray
    root_address: np.ndarray
    root_kind: np.ndarray
    root_names: dict[int, str] = field(default_factory=dict)  # root index -> a static root's field name
    path: str | None = field(default=None)
    event_names: list[str] = field(default_factory=list)  # the events' spelling of type_names

    def __post_init__(self) -> None:
        # Built from the events' names: keep them, and name every type in C#'s spelling.
        if not self.event_names:
            self.event_names = list(self.type_names)
            self.type_names = [shown_name(n) for n in self.type_names]

    @classmethod
    def collect(cls, pid: int, *, timeout: float = 300.0, stop_flag=lambda: False) -> "GcDump":  # type: ignore[no-untyped-def]
        """Have process ``pid``'s runtime walk its heap during a full GC and report it."""
        from ...ipc.client import get_process_info
        from ...ipc.gcdump import collect_heap_dump
        try:
            runtime = get_process_info(pid).clr_product_version
        except SosError:
            runtime = None  # the dump itself will say what is wrong
        ev = collect_heap_dump(pid, timeout=timeout, stop_flag=stop_flag)
        ids, node_type = np.unique(ev.nodes["type"], return_inverse=True)
        type_ids = [int(t) for t in ids.tolist()]
        names = [ev.types.get(t, (f"UNKNOWN_TYPE_{t:x}", ()))[0] for t in type_ids]
        return cls(pid, time.time(), runtime, ev.pointer_size, ev.gc_number, type_ids, names,
                   ev.nodes["address"].astype(np.uint64), ev.nodes["size"].astype(np.uint64),
                   node_type.astype(np.uint32).reshape(-1), ev.nodes["edges"].astype(np.uint32),
                   ev.edges, ev.root_address.astype(np.uint64), ev.root_kind.astype(np.uint8), ev.root_names)

    # ------------------------------------------------------------------ queries

    @property
    def object_count(self) -> int:
        return int(self.node_address.size)

    @property
    def total_size(self) -> int:
        return int(self.node_size.sum(dtype=np.uint64))

    def stats(self) -> list[GcTypeStat]:
        """Per type: count and total size, ascending by total size as ``dumpheap -stat`` sorts."""
        n = len(self.type_ids)
        counts = np.bincount(self.node_type, minlength=n)
        sizes = np.bincount(self.node_type, weights=self.node_size.astype(np.float64), minlength=n)
        # float64 sums are exact below 2**53 bytes per type; recompute exactly where it matters.
        rows = []
        for i in np.nonzero(counts)[0].tolist():
            total = int(sizes[i]) if sizes[i] < 2**52 else int(self.node_size[self.node_type == i].sum(dtype=np.uint64))
            rows.append(GcTypeStat(self.type_ids[i], self.type_names[i], int(counts[i]), total, self.event_names[i]))
        rows.sort(key=lambda r: (r.size, r.count, r.name))
        return rows

    def source(self) -> str:
        return f"gcdump {self.path}" if self.path else f"gcdump of process {self.pid}"

    def heap_snapshot(self) -> HeapSnapshot:
        """Per-type totals keyed by name, the input of heapdiff's comparison."""
        types: dict[str, list] = {}
        for s in self.stats():
            acc = types.setdefault(s.name, [0, 0, ()])
            acc[0] += s.count
            acc[1] += s.size
            acc[2] = tuple(dict.fromkeys((*acc[2], s.event_name)))
        return HeapSnapshot(self.source(), {n: TypeTotal(n, c, sz, None, raw) for n, (c, sz, raw) in types.items()},
                            taken=self.time)

    def retention(self, type_name: str, *, exact: bool = False,
                  groups: int = 5) -> tuple[list["RetentionGroup"], int, int]:
        """Why instances of the types whose name contains ``type_name`` (or is it, ``exact``) are alive.

        Every instance gets its shortest path from a root, roots that live long (handles and
        statics) tried first, then the finalizer queue and others, then stacks; instances
        whose paths have the same root kind and the same sequence of types (runs of one type,
        a linked list, shown once) form a group. Returns (largest groups by bytes, number of
        groups, instances no root reaches).
        """
        n = self.object_count
        order = np.argsort(self.node_address, kind="stable")
        sorted_addr = self.node_address[order]

        def index_of(addresses: np.ndarray) -> np.ndarray:
            if n == 0:
                return np.full(addresses.size, -1, dtype=np.int64)
            pos = np.minimum(np.searchsorted(sorted_addr, addresses), n - 1)
            return np.where(sorted_addr[pos] == addresses, order[pos], -1).astype(np.int64)

        starts = np.concatenate(([0], np.cumsum(self.node_edges, dtype=np.int64)))
        targets = index_of(self.edge_target)
        parent = np.full(n, -2, dtype=np.int64)  # -2 unreached, -1 a root
        root_of = np.full(n, -1, dtype=np.int64)  # for a root node: the index of its first root
        root_nodes = index_of(self.root_address)
        for phase in ((2, 6), (1, 3, 4, 5), (0,)):  # handles and statics, finalizer and others, stacks
            mask = np.isin(self.root_kind, phase) & (root_nodes >= 0)
            nodes, first = np.unique(root_nodes[mask], return_index=True)
            fresh = parent[nodes] == -2
            frontier = nodes[fresh]
            parent[frontier] = -1
            root_of[frontier] = np.nonzero(mask)[0][first[fresh]]
            while frontier.size:  # breadth first, one numpy step per level
                counts = starts[frontier + 1] - starts[frontier]
                src = np.repeat(frontier, counts)
                dst = targets[_ranges(starts[frontier], counts)]
                keep = dst >= 0
                src, dst = src[keep], dst[keep]
                keep = parent[dst] == -2
                dst, first = np.unique(dst[keep], return_index=True)
                parent[dst] = src[keep][first]
                frontier = dst

        # Any spelling: C#'s, the runtime's, the events'.
        wanted = [i for i, (name, raw) in enumerate(zip(self.type_names, self.event_names))
                  if (type_name == name or named(type_name, raw) if exact
                      else type_name in name or name_contains(type_name, raw))]
        instances = np.nonzero(np.isin(self.node_type, wanted))[0]
        memo: dict[int, tuple[int, tuple[int, ...]]] = {}  # node -> (root node, collapsed type path)
        types = self.node_type

        def path_of(node: int) -> tuple[int, tuple[int, ...]]:
            chain = []
            cur = node
            while cur not in memo and parent[cur] >= 0:
                chain.append(cur)
                cur = int(parent[cur])
            if cur not in memo:  # cur is a root
                memo[cur] = (cur, (int(types[cur]),))
            root, prefix = memo[cur]
            for c in reversed(chain):
                t = int(types[c])
                if prefix[-1] != t:
                    prefix = (*prefix, t)
                memo[c] = (root, prefix)
            return memo[node]

        acc: dict[tuple[str, tuple[int, ...]], list[int]] = {}
        unreached = 0
        for node in instances.tolist():
            if parent[node] == -2:
                unreached += 1
                continue
            root, path = path_of(node)
            entry = acc.setdefault((self.root_label(int(root_of[root])), path), [0, 0, node])
            entry[0] += 1
            entry[1] += int(self.node_size[node])
        out = [RetentionGroup(label, tuple(self.type_names[t] for t in path), c, size, int(self.node_address[ex]))
               for (label, path), (c, size, ex) in acc.items()]
        out.sort(key=lambda g: (-g.size, -g.count, g.types))
        return (out[:groups] if groups else out), len(out), unreached

    def root_label(self, root_index: int) -> str:
        """'static s_field', 'handle', 'stack' … for root number ``root_index`` (the runtime
        names a static's field but not its declaring type)."""
        name = self.root_names.get(root_index)
        if name:
            return f"static {name}"
        kind = int(self.root_kind[root_index])
        return ROOT_KIND_NAMES.get(kind, f"root kind {kind}")

    def edges_of(self, index: int) -> np.ndarray:
        """Targets of node ``index`` (addresses)."""
        starts = np.concatenate(([0], np.cumsum(self.node_edges, dtype=np.uint64)))
        return self.edge_target[int(starts[index]):int(starts[index + 1])]

    # ------------------------------------------------------------------ files

    def save(self, path: str) -> None:
        """Write to a new private file (0600); never follows a symlink or overwrites."""
        meta = {"format": FORMAT, "version": VERSION, "pid": self.pid, "time": self.time, "runtime": self.runtime,
                "pointer_size": self.pointer_size, "gc_number": self.gc_number,
                "type_ids": [f"{t:x}" for t in self.type_ids], "type_names": self.event_names,
                "root_names": {str(k): v for k, v in self.root_names.items()}}
        f = create_private(path, binary=True, error=GcDumpError,
                           exists=f"{path} exists; choose another name (snapshots are never overwritten)")
        try:
            with f:
                np.savez_compressed(f, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8),
                                    **{k: np.ascontiguousarray(getattr(self, k), dtype=t) for k, t in _ARRAYS.items()})
        except OSError as exc:
            try:
                os.unlink(path)
            except OSError:
                pass
            raise GcDumpError(f"cannot write {path}: {exc.strerror or exc}") from None

    @classmethod
    def load(cls, path: str) -> "GcDump":
        if os.path.isdir(path):  # in the words analyze and diff use for a core
            raise GcDumpError(f"not a gcdump snapshot: {path} is a directory")
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise GcDumpError(f"cannot read {path}: {exc.strerror or exc}") from None
        if not data.startswith(b"PK"):
            raise GcDumpError(f"{path} is not a sosext gcdump snapshot")
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as z:
                arrays = {k: z[k] for k in ("meta", *_ARRAYS)}
        except Exception as exc:  # noqa: BLE001 - zipfile/zlib/numpy raise a dozen kinds on damaged input
            raise GcDumpError(f"{path} is not a sosext gcdump snapshot or is damaged ({type(exc).__name__})") from None
        try:
            meta = json.loads(arrays.pop("meta").tobytes().decode())
            if meta.get("format") != FORMAT:
                raise GcDumpError(f"{path} is not a sosext gcdump snapshot")
            if meta.get("version") != VERSION:
                raise GcDumpError(f"{path}: gcdump format version {meta.get('version')} is not supported")
            type_ids = [int(t, 16) for t in meta["type_ids"]]
            names = [str(n) for n in meta["type_names"]]
            dump = cls(int(meta["pid"]), float(meta["time"]), meta.get("runtime"), int(meta["pointer_size"]),
                       int(meta["gc_number"]), type_ids, names,
                       **{k: arrays[k].astype(t, copy=False) for k, t in _ARRAYS.items()},
                       root_names={int(k): str(v) for k, v in (meta.get("root_names") or {}).items()}, path=path)
        except GcDumpError:
            raise
        except (ValueError, KeyError, TypeError, UnicodeDecodeError, AttributeError) as exc:
            raise GcDumpError(f"{path}: damaged gcdump metadata ({type(exc).__name__})") from None
        dump.validate()
        return dump

    def validate(self) -> None:
        n = self.node_address.size
        if not (self.node_size.size == self.node_type.size == self.node_edges.size == n):
            raise GcDumpError("damaged gcdump: node arrays differ in length")
        if len(self.type_ids) != len(self.type_names):
            raise GcDumpError("damaged gcdump: type table")
        if n and int(self.node_type.max()) >= len(self.type_ids):
            raise GcDumpError("damaged gcdump: a node's type is out of range")
        if int(self.node_edges.sum(dtype=np.uint64)) != self.edge_target.size:
            raise GcDumpError("damaged gcdump: edge counts do not match the edges")
        if self.root_address.size != self.root_kind.size:
            raise GcDumpError("damaged gcdump: root arrays differ in length")


@dataclass(frozen=True, slots=True)
class RetentionGroup:
    root: str  # 'static s_field', or a ROOT_KIND_NAMES entry
    types: tuple[str, ...]  # from the rooted object down to the instance's type
    count: int
    size: int  # bytes of the instances themselves
    example: int  # one instance's address


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenated ranges [starts[i], starts[i] + counts[i]) without a Python loop."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(counts)
    offsets = np.repeat(starts - (ends - counts), counts)
    return np.arange(total, dtype=np.int64) + offsets


def _root_of(parent: np.ndarray, node: int) -> int:
    while parent[node] >= 0:
        node = int(parent[node])
    return node


