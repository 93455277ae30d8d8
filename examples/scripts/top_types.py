#!/usr/bin/python3
"""The types that take the most bytes, and why the biggest object of the top type is alive.

    examples/scripts/top_types.py CORE|PID [--top 10] [--live]
"""
from __future__ import annotations

import argparse
import os
import sys

import sosext


def top_types(heap: sosext.Heap, n: int, live: bool | None = None) -> list[sosext.TypeStats]:
    """The ``n`` types with the largest total size, largest first (Free left out)."""
    rows = [r for r in heap.stats(live=live) if not r.type.is_free]
    return rows[::-1][:n]


def biggest(heap: sosext.Heap, t: sosext.ClrType, live: bool | None = None) -> sosext.HeapObject | None:
    """The largest object of type ``t`` (the lowest address among equals)."""
    best = None
    for obj in heap.objects(mt=t.method_table, live=live):
        if best is None or obj.size > best.size:
            best = obj
    return best


def print_chain(objects: tuple[sosext.HeapObject, ...], head: int = 4, tail: int = 4) -> None:
    """The chain root first; a long one (a linked list) shows its ends and how many between."""
    shown = list(objects) if len(objects) <= head + tail + 1 else [*objects[:head], None, *objects[-tail:]]
    for o in shown:
        if o is None:
            print(f"    ... {len(objects) - head - tail} more")
        else:
            print(f"    -> {o.address:#x} {o.type.name}")


def open_target(text: str) -> sosext.Runtime:
    """A core file by path, or a running process by pid (read through /proc, not stopped)."""
    if text.isdigit() and not os.path.exists(text):
        return sosext.open(pid=int(text))
    return sosext.open(text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("target", help="core file, or pid of a running process")
    p.add_argument("--top", type=int, default=10)
    p.add_argument("--live", action="store_true", help="only objects reachable from a root")
    args = p.parse_args(argv)
    live = True if args.live else None
    with open_target(args.target) as rt:
        rows = top_types(rt.heap, args.top, live)
        print(f"{'Count':>10} {'TotalSize':>12} Type")
        for row in rows:
            print(f"{row.count:>10} {row.total_size:>12} {row.type.name}")
        if not rows:
            return 0
        obj = biggest(rt.heap, rows[0].type, live)
        print(f"\nThe biggest {obj.type.name}, {obj.size} bytes at {obj.address:#x}:")
        paths = list(rt.heap.gcroot(obj, limit=1))
        if not paths:
            print("  no root: it is garbage, waiting for the next GC")
        for path in paths:
            static = f" static {path.static_field}" if path.static_field else ""
            print(f"  {path.root.kind} root ({path.root.name}){static}")
            print_chain(path.objects)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except sosext.SosError as e:
        sys.exit(f"error: {e}")
