"""The report of a gcdump snapshot: the same document as a core's (data.py), from the objects,
references and roots the runtime reported over EventPipe.

The dominator tree is the core's own computation (``clr.dominators.compute``) over the
snapshot's reference rows. What a snapshot lacks shows as such: no heap layout (segments,
committed memory, free space), every object is live (its GC collected the rest), a root is
named by its kind or a static's field name only, and type names are the events' (in C#'s spelling: a nested type without its enclosing types).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..clr.roots.dominators import compute
from ..clr.snapshots.snapshot import SNAPSHOT_LIMITS
from ..clr.typesystem.typekeys import key
from .data import FOLDED, HOLDERS, PICTURE, SCHEMA, folded_from, tree_records
from .paths import KIND, OTHER, build_paths
from .retained import ROOT, UNREACHABLE

if TYPE_CHECKING:
    from ..clr.snapshots.gcdumpsnap import GcDump

_U32_MAX = (1 << 32) - 1


class _Graph:
    """The snapshot as rows: node i's references as node numbers, its dominator tree."""

    def __init__(self, dump: "GcDump") -> None:
        self.dump = dump
        n = dump.object_count
        order = np.argsort(dump.node_address, kind="stable")
        self._sorted, self._order = dump.node_address[order], order
        targets = self.rows_of(dump.edge_target)
        sources = np.repeat(np.arange(n, dtype=np.int64), dump.node_edges.astype(np.int64))
        keep = targets >= 0   # a reference to something the snapshot did not report: no edge
        counts = np.bincount(sources[keep], minlength=n)
        self.offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        self.targets = targets[keep].astype(np.uint32)
        root_rows = self.rows_of(dump.root_address)
        self.roots = np.unique(root_rows[root_rows >= 0]).astype(np.int64)
        first_root: dict[int, int] = {}
        for i, r in enumerate(root_rows.tolist()):   # the first reported root of each root object names it
            if r >= 0:
                first_root.setdefault(r, i)
        self.first_root = first_root
        self.sizes = np.minimum(dump.node_size, _U32_MAX).astype(np.uint32)
        empty = np.empty(0, dtype=np.int64)
        self.idom, self.retained, _reached, _passes = compute(self.offsets, self.targets, self.sizes, self.roots,
                                                              empty, empty)
        self.idom = np.asarray(self.idom)
        self.retained = np.asarray(self.retained)

    def rows_of(self, addresses: np.ndarray) -> np.ndarray:
        n = self._sorted.size
        if n == 0:
            return np.full(addresses.size, -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self._sorted, addresses), n - 1)
        return np.where(self._sorted[pos] == addresses, self._order[pos], -1).astype(np.int64)

    def chain(self, row: int) -> list[int]:
        """Rows from the top of ``row``'s dominator chain down to it."""
        out = [row]
        while self.idom[out[-1]] >= 0:
            out.append(int(self.idom[out[-1]]))
        return out[::-1]

    def root_label(self, row: int) -> str:
        i = self.first_root.get(row)
        return self.dump.root_label(i) if i is not None else "several roots"


def _root_kinds(g: _Graph) -> tuple[list[str], np.ndarray]:
    """The root labels of the tree's tops, and for each top row its label's number (-1 elsewhere)."""
    tops = np.nonzero(g.idom == ROOT)[0].tolist()
    kinds = sorted({g.root_label(r) for r in tops})
    kind_of = {k: i for i, k in enumerate(kinds)}
    root_kind = np.full(len(g.idom), -1, dtype=np.int16)
    for r in tops:
        root_kind[r] = kind_of[g.root_label(r)]
    return kinds, root_kind


def snapshot_report(dump: "GcDump", source: str) -> dict[str, Any]:
    """The report document (data.heap_report's shape) of a gcdump snapshot."""
    g = _Graph(dump)
    names = dump.type_names
    tids = dump.node_type.astype(np.int64)
    ntypes = len(names)
    reached = g.idom != UNREACHABLE
    top = g.idom == ROOT
    kinds, root_kind = _root_kinds(g)
    # A type's retained bytes: its objects whose immediate dominator is of another type.
    par = np.where(g.idom >= 0, g.idom, 0)
    heads = reached & (top | (tids[par] != tids))
    retained_by_type = np.bincount(tids[heads], weights=g.retained[heads].astype(np.float64), minlength=ntypes)
    counts = np.bincount(tids, minlength=ntypes)
    totals = np.bincount(tids, weights=dump.node_size.astype(np.float64), minlength=ntypes)
    types = [{"name": names[t], "mt": int(dump.type_ids[t]), "count": int(counts[t]), "size": int(totals[t]),
              "retained": int(retained_by_type[t])} for t in np.nonzero(counts)[0].tolist()]
    types.sort(key=lambda r: (-r["size"], r["name"], r["mt"]))
    live_bytes = int(dump.node_size[reached].sum(dtype=np.uint64))
    summary = {"source": source, "runtime": dump.runtime or "unknown", "gc_mode": "unknown (a gcdump snapshot)",
               "gc_heaps": 0, "layout": "not in a snapshot", "allocated": 0, "committed": 0,
               "objects": dump.object_count, "object_bytes": dump.total_size, "free_bytes": 0, "fragmentation": 0.0,
               "live_objects": int(reached.sum()), "live_bytes": live_bytes, "walk_errors": 0,
               "note": f"A gcdump snapshot: {SNAPSHOT_LIMITS}; its GC collected the garbage first."}
    tree = build_paths(tids, dump.node_size, g.idom, root_kind, len(kinds), g.retained, **PICTURE)
    doc = {"sosext_report": SCHEMA, "summary": summary, "types": types, "paths": _nodes(g, tree, kinds),
           "holders": _holders(g)}
    return doc


def _labels(g: _Graph, tree, kinds: list[str]) -> list[str]:  # type: ignore[no-untyped-def]
    out = []
    for t, k, other in zip(tree.type_id.tolist(), tree.kind.tolist(), tree.other_types.tolist()):
        if t == KIND:
            out.append("all roots" if k < 0 else kinds[k])
        elif t == OTHER:
            out.append(f"other ({other:,} paths)")
        else:
            out.append(g.dump.type_names[t])
    return out


def _nodes(g: _Graph, tree, kinds: list[str]) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    return tree_records(tree, _labels(g, tree, kinds), g.dump.node_address)


def _holders(g: _Graph, n: int = HOLDERS) -> list[dict[str, Any]]:
    dump = g.dump
    rows = np.argsort(-g.retained.astype(np.int64), kind="stable")[:n].tolist()
    out = []
    for row in rows:
        if g.idom[row] == UNREACHABLE:
            continue
        chain = g.chain(row)
        out.append({"address": int(dump.node_address[row]), "type": dump.type_names[int(dump.node_type[row])],
                    "retained": int(g.retained[row]), "size": int(dump.node_size[row]),
                    "root": g.root_label(chain[0]),
                    "chain": [{"address": int(dump.node_address[r]), "type": dump.type_names[int(dump.node_type[r])],
                               "retained": int(g.retained[r])} for r in chain[-40:]]})
    return out


def folded_lines(dump: "GcDump") -> list[str]:
    """Folded stacks of the snapshot's dominator paths (data.folded_lines for a core)."""
    g = _Graph(dump)
    kinds, root_kind = _root_kinds(g)
    tree = build_paths(dump.node_type.astype(np.int64), dump.node_size, g.idom, root_kind, len(kinds), g.retained,
                       **FOLDED)
    return folded_from(tree, _labels(g, tree, kinds))


def with_event_names(doc: dict[str, Any]) -> dict[str, Any]:
    """A core's report document with its type names as a snapshot has them (typekeys.py: a nested
    type without its enclosing types), so a snapshot's report can take it as a baseline (and the
    other way round)."""
    for t in doc["types"]:
        t["name"] = key(t["name"])
    for p in doc["paths"]:
        p["path"] = [key(x) for x in p["path"]]
        p["label"] = key(p["label"])
    return doc
