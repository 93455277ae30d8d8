"""The report's facts about one heap, as plain JSON-able data (small whatever the heap's size).

``heap_report(heap)`` reads the model once (index, roots, the dominator tree) and keeps
only bounded aggregates: the summary, per-type totals, the grouped path tree (a few
thousand nodes at most) and the largest holders with their chains. The same document is
what a baseline child process prints (``sosext report OLD --format json -o -``), so a
comparison matches types and paths by name, never by address.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ..clr.heap.index import SIZE_OVERFLOW
from ..clr.progress import check_interrupt
from ..clr.heap.segments import SegmentKind
from .paths import KIND, OTHER, UNREACHABLE, PathTree, build_paths
from .retained import ROOT, Retention, retention_of

if TYPE_CHECKING:
    from ..clr.heap.heap import ClrHeap
    from ..clr.progress import Progress

SCHEMA = 1
PASSED_OVER = ("System.Collections.",)  # looked through for a holder, as leaks and heapdiff do
HOLDERS = 25
# Bounds for the picture and for the folded stacks (a flame graph tool copes with more).
PICTURE = dict(max_depth=16, top_children=12, max_nodes=2000)
FOLDED = dict(max_depth=48, top_children=200, max_nodes=100_000)


def object_sizes(heap: "ClrHeap") -> np.ndarray:
    """dumpheap's size of every object (uint64, the rare >= 4 GiB ones included)."""
    ix = heap.index()
    sizes = ix.sizes.astype(np.uint64)
    for p, s in ix.big_sizes.items():
        if ix.sizes[p] == SIZE_OVERFLOW:
            sizes[p] = s
    return sizes


def summary(heap: "ClrHeap", source: str, ret: Retention) -> dict[str, Any]:
    ix = heap.index()
    rt = heap.runtime
    counts, totals, _first = ix.type_totals()
    free_id = ix.type_id(heap.free_mt)
    free = int(totals[free_id]) if free_id is not None else 0
    allocated = sum(s.length for s in heap.segments if s.kind is not SegmentKind.FROZEN)
    committed = sum(s.committed - s.start for s in heap.segments if s.kind is not SegmentKind.FROZEN)
    live = ret.parent != UNREACHABLE  # what the roots reach: dumpheap -live's objects
    sizes = object_sizes(heap)
    return {
        "source": source,
        "runtime": rt.info.version,
        "gc_mode": "server" if heap.is_server else "workstation",
        "gc_heaps": len(heap.subheaps),
        "layout": "regions" if heap.uses_regions else "segments",
        "allocated": allocated,
        "committed": committed,
        "objects": int(counts.sum()),
        "object_bytes": int(totals.sum()),
        "free_bytes": free,
        "fragmentation": (free / allocated) if allocated else 0.0,
        "live_objects": int(live.sum()),
        "live_bytes": int(sizes[live].sum()),
        "walk_errors": len(ix.errors),
    }


def type_table(heap: "ClrHeap", ret: Retention) -> list[dict[str, Any]]:
    """Every type present: dumpheap -stat's count and bytes, and retained bytes with dominators."""
    ix = heap.index()
    counts, totals, _first = ix.type_totals()
    rows = []
    for t in np.nonzero(counts)[0].tolist():
        mt = int(ix.method_tables[t])
        row = {"name": heap.types.csharp_name_of(mt), "mt": mt, "count": int(counts[t]), "size": int(totals[t])}
        row["retained"] = int(ret.retained_by_type[t])
        rows.append(row)
    rows.sort(key=lambda r: (-r["size"], r["name"], r["mt"]))
    return rows


def path_tree(heap: "ClrHeap", ret: Retention, bounds: dict[str, int]) -> PathTree:
    ix = heap.index()
    return build_paths(ix.type_ids, object_sizes(heap), ret.parent, ret.root_kind, len(ret.kinds),
                       ret.retained, **bounds)


def node_labels(heap: "ClrHeap", ret: Retention, tree: PathTree) -> list[str]:
    ix = heap.index()
    out = []
    for t, k, other in zip(tree.type_id.tolist(), tree.kind.tolist(), tree.other_types.tolist()):
        if t == KIND:
            out.append("all roots" if k < 0 else ret.kinds[k])
        elif t == OTHER:
            out.append(f"other ({other:,} paths)")
        else:
            out.append(heap.types.csharp_name_of(int(ix.method_tables[t])))
    return out


def tree_nodes(heap: "ClrHeap", ret: Retention, tree: PathTree) -> list[dict[str, Any]]:
    """The path tree as records: each names its parent by position and carries its full path."""
    return tree_records(tree, node_labels(heap, ret, tree), heap.index().addresses)


def tree_records(tree: PathTree, labels: list[str], addresses: np.ndarray) -> list[dict[str, Any]]:
    """``tree`` with its nodes' ``labels``; ``addresses`` gives an example object's address by row."""
    paths: list[list[str]] = []
    out = []
    for k, (p, total, count, ex) in enumerate(zip(tree.parent.tolist(), tree.total.tolist(),
                                                  tree.count.tolist(), tree.example.tolist())):
        path = [] if p < 0 else paths[p] + [labels[k]]
        paths.append(path)
        out.append({"label": labels[k], "parent": p, "path": path, "total": total, "count": count,
                    "other": int(tree.type_id[k]) == OTHER,
                    "example": int(addresses[ex]) if ex >= 0 else None})
    return out


def chain_records(heap: "ClrHeap", ret: Retention, row: int, limit: int = 40) -> list[dict[str, Any]]:
    """The chain from the root object down to ``row``; a long one (a linked list) keeps its
    two ends and says how many links it skipped."""
    ix = heap.index()
    chain = ret.chain_of(row)
    out: list[dict[str, Any]] = []
    if len(chain) > limit:
        half = limit // 2
        chain = chain[:half] + [-1] + chain[-half:]
    skipped = len(ret.chain_of(row)) - limit
    for r in chain:
        if r < 0:
            out.append({"skipped": skipped})
            continue
        rec = {"address": int(ix.addresses[r]),
               "type": heap.types.csharp_name_of(int(ix.method_tables[ix.type_ids[r]]))}
        rec["retained"] = int(ret.retained[r])
        out.append(rec)
    return out


def holders(heap: "ClrHeap", ret: Retention, n: int = HOLDERS) -> list[dict[str, Any]]:
    """The objects retaining the most, each with its dominator chain."""
    ix = heap.index()
    sizes = object_sizes(heap)
    out = []
    for row in ret.top(n):
        out.append({"address": int(ix.addresses[row]),
                    "type": heap.types.csharp_name_of(int(ix.method_tables[ix.type_ids[row]])),
                    "retained": int(ret.retained[row]), "size": int(sizes[row]),
                    "root": ret.held_by(row), "chain": chain_records(heap, ret, row)})
    return out


def heap_report(heap: "ClrHeap", source: str,
                baseline: "dict[str, Any] | Callable[[], dict[str, Any]] | None" = None,
                progress: "Progress | None" = None) -> dict[str, Any]:
    """Everything the HTML page shows about one heap; with ``baseline`` (the same document
    of an older heap, or a function that waits for it) the growth of every type and path,
    and the growing holders."""
    heap.index(progress)
    ret = retention_of(heap, progress)
    check_interrupt()
    tree = path_tree(heap, ret, PICTURE)
    check_interrupt()
    nodes = tree_nodes(heap, ret, tree)
    doc = {"sosext_report": SCHEMA, "summary": summary(heap, source, ret),
           "types": type_table(heap, ret), "paths": nodes, "holders": holders(heap, ret)}
    check_interrupt()
    if callable(baseline):
        baseline = baseline()
    if baseline is not None:
        add_growth(doc, baseline)
        doc["growing_holders"] = growing_holders(heap, ret, doc["types"])
    return doc


def add_growth(doc: dict[str, Any], old: dict[str, Any]) -> None:
    """Deltas by name: per type (count, bytes, retained) and per path (bytes, objects)."""
    if old.get("sosext_report") != SCHEMA:
        from ..errors import SosError
        raise SosError("the baseline's report data has another schema (a different sosext?)")
    doc["baseline"] = old["summary"]
    old_types: dict[str, dict[str, int]] = {}
    for t in old["types"]:
        acc = old_types.setdefault(t["name"], {"count": 0, "size": 0, "retained": 0})
        for k in acc:
            acc[k] += t.get(k, 0)
    seen: set[str] = set()
    merged: dict[str, dict[str, int]] = {}
    for t in doc["types"]:
        o = old_types.get(t["name"], {"count": 0, "size": 0, "retained": 0})
        if t["name"] in seen:  # the same name twice (two MTs): the old totals go to the first
            o = {"count": 0, "size": 0, "retained": 0}
        seen.add(t["name"])
        t["count_delta"] = t["count"] - o["count"]
        t["size_delta"] = t["size"] - o["size"]
        if "retained" in t:
            t["retained_delta"] = t["retained"] - o["retained"]
        merged[t["name"]] = o
    doc["gone_types"] = [{"name": n, "count": o["count"], "size": o["size"]}
                         for n, o in sorted(old_types.items()) if n not in seen]
    old_paths = {tuple(p["path"]): p for p in old["paths"] if not p.get("other")}
    for p in doc["paths"]:
        o = old_paths.get(tuple(p["path"])) if not p["other"] else None
        p["total_delta"] = p["total"] - (o["total"] if o else 0)
        p["count_delta"] = p["count"] - (o["count"] if o else 0)
        p["in_baseline"] = o is not None


def growing_holders(heap: "ClrHeap", ret: Retention, types: list[dict[str, Any]],
                    n: int = 10) -> list[dict[str, Any]]:
    """The holders of the growth as leaks and heapdiff find them (the model's
    ``growth_holders``): for each object of a type whose bytes grew, the first object up its
    dominator chain whose type did not grow and is not a collection's internals."""
    ix = heap.index()
    names = [heap.types.csharp_name_of(mt) for mt in ix.method_tables.tolist()]
    grown = {t["name"] for t in types if t["size_delta"] > 0}
    growing = np.array([nm in grown for nm in names], dtype=bool)
    if not growing.any():
        return []
    passed = np.array([nm.startswith(PASSED_OVER) for nm in names], dtype=bool)
    by_name = {t["name"]: t for t in types}
    groups: dict[object, dict[str, Any]] = {}
    roots_of = ret.tree.root_rows()
    for g in ret.tree.growth_holders(growing, passed):
        row = g.via if g.via >= 0 else g.row
        # Alike holders are one row, as in leaks: root objects of one type held by the same
        # kinds of long-lived roots (a thousand wrappers behind a thousand strong handles).
        top = roots_of.get(row, []) if int(ret.parent[row]) == ROOT else []
        alike = bool(top) and all(r.kind.value != "stack" for r in top)
        key = (names[ix.type_ids[row]], tuple(sorted({(r.kind.value, r.handle.handle_type if r.handle else -1)
                                                       for r in top}))) if alike else ("row", row)
        rec = groups.get(key)
        if rec is None:
            rec = groups[key] = {"row": row, "instances": 0, "retained": 0, "objects": 0, "size": 0, "types": {}}
        rec["instances"] += 1
        rec["retained"] += int(ret.retained[row])
        rec["objects"] += g.objects
        rec["size"] += g.size
        for tid, c, b in g.types:
            acc = rec["types"].setdefault(names[tid], [0, 0])
            acc[0] += c
            acc[1] += b
    out = []
    for rec in sorted(groups.values(), key=lambda r: (-r["size"], -r["retained"], r["row"]))[:n]:
        row = rec["row"]
        name = names[ix.type_ids[row]]
        t = by_name.get(name)
        # its type's retained growth is this object's only when it is the type's one instance
        delta = (t["retained_delta"] if t is not None and not growing[ix.type_ids[row]] and t["count"] == 1
                 and t["count"] - t["count_delta"] <= 1 else None)
        held = sorted(rec["types"].items(), key=lambda kv: (-kv[1][1], kv[0]))[:4]
        out.append({"address": int(ix.addresses[row]), "type": name, "instances": rec["instances"],
                    "retained": rec["retained"], "retained_delta": delta, "objects": rec["objects"],
                    "size": rec["size"], "types": [{"name": k, "count": c, "size": b} for k, (c, b) in held],
                    "root": ret.held_by(row), "chain": chain_records(heap, ret, row)})
    return out


def folded_lines(heap: "ClrHeap", progress: "Progress | None" = None) -> list[str]:
    """Brendan Gregg's folded stacks: ``root kind;Type;Type;... bytes`` (each line a path's own
    bytes; flamegraph.pl and speedscope add children up)."""
    ret = retention_of(heap, progress)
    check_interrupt()
    tree = path_tree(heap, ret, FOLDED)
    return folded_from(tree, node_labels(heap, ret, tree))


def folded_from(tree: PathTree, labels: list[str]) -> list[str]:
    """The folded-stack lines of a path tree whose nodes are named ``labels``."""
    labels = [lab.replace(";", ":") for lab in labels]
    own = tree.own()
    frames: list[str] = []
    lines = []
    for k, p in enumerate(tree.parent.tolist()):
        frames.append("" if p < 0 else (frames[p] + ";" if frames[p] else "") + labels[k])
        if p >= 0 and own[k] > 0:
            lines.append(f"{frames[k]} {int(own[k])}")
    return sorted(lines)
