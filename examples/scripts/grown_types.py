#!/usr/bin/python3
"""Which types grew between two dumps of one process, and what keeps a new instance alive.

    examples/scripts/grown_types.py OLD.core NEW.core [--top 5] [--type LeakyService.]

Types are matched by name (MethodTable addresses differ between processes). For the type
that grew most in bytes, one instance that is new (its address held no such object in the
old dump) is followed back to a GC root.
"""
from __future__ import annotations

import argparse
import sys

import sosext


def totals(heap: sosext.Heap, prefix: str = "") -> dict[str, tuple[int, int]]:
    """Type name -> (count, bytes), Free left out; one name may have several MethodTables."""
    out: dict[str, tuple[int, int]] = {}
    for row in heap.stats():
        name = row.type.name
        if row.type.is_free or not name.startswith(prefix):
            continue
        count, size = out.get(name, (0, 0))
        out[name] = (count + row.count, size + row.total_size)
    return out


def growth(old: sosext.Heap, new: sosext.Heap, prefix: str = "") -> list[tuple[str, int, int, int, int]]:
    """(name, old count, new count, count delta, bytes delta) of every type that grew, most bytes first."""
    before, after = totals(old, prefix), totals(new, prefix)
    rows = []
    for name, (count, size) in after.items():
        old_count, old_size = before.get(name, (0, 0))
        if size > old_size:
            rows.append((name, old_count, count, count - old_count, size - old_size))
    rows.sort(key=lambda r: (-r[4], r[0]))
    return rows


def a_new_instance(old: sosext.Heap, new: sosext.Heap, type_name: str) -> sosext.HeapObject | None:
    """An object of ``type_name`` in the new dump whose address held no such object before."""
    seen = {o.address for o in old.objects(type=type_name)}
    return next((o for o in new.objects(type=type_name) if o.address not in seen), None)


def print_chain(objects: tuple[sosext.HeapObject, ...], head: int = 4, tail: int = 4) -> None:
    """The chain root first; a long one (a linked list) shows its ends and how many between."""
    shown = list(objects) if len(objects) <= head + tail + 1 else [*objects[:head], None, *objects[-tail:]]
    for o in shown:
        if o is None:
            print(f"    ... {len(objects) - head - tail} more")
        else:
            print(f"    -> {o.address:#x} {o.type.name}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("--top", type=int, default=5)
    p.add_argument("--type", default="", help="only types whose name starts with this")
    args = p.parse_args(argv)
    with sosext.open(args.old) as old_rt, sosext.open(args.new) as new_rt:
        rows = growth(old_rt.heap, new_rt.heap, args.type)
        print(f"{'OldCount':>10} {'NewCount':>10} {'CountDelta':>11} {'BytesDelta':>12} Type")
        for name, old_count, count, delta, size_delta in rows[:args.top]:
            print(f"{old_count:>10} {count:>10} {delta:>+11} {size_delta:>+12} {name}")
        if not rows:
            return 0
        obj = a_new_instance(old_rt.heap, new_rt.heap, rows[0][0])
        if obj is None:
            return 0
        print(f"\nA new {obj.type.name} at {obj.address:#x} is kept alive by:")
        for path in new_rt.heap.gcroot(obj, limit=1):
            static = f" static {path.static_field}" if path.static_field else ""
            print(f"  {path.root.kind} root ({path.root.name}){static}")
            print_chain(path.objects)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except sosext.SosError as e:
        sys.exit(f"error: {e}")
