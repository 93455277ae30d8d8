#!/usr/bin/python3
"""Which objects hold the growth between two dumps of one process, and along which paths.

    examples/scripts/growth_holders.py OLD.core NEW.core [--top 2] [--type LeakyService.]

What `sosext leaks OLD NEW` prints, from the records sosext.leaks returns: each holder (the
first object up a growing object's dominator chain whose type did not grow) with the bytes it
retains now and how much that grew, the roots holding it and the growing types under it; then
for the types that grew most, the paths from a root that keep their new instances.
"""
from __future__ import annotations

import argparse

import sosext


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("old", help="the earlier core")
    p.add_argument("new", help="the later core")
    p.add_argument("--top", type=int, default=2, help="growing types to explain")
    p.add_argument("--type", help="only types whose name contains this text")
    args = p.parse_args()
    with sosext.open(args.new) as new:
        report = sosext.leaks(args.old, new, type=args.type, top=args.top, groups=1)
        for h in report.holders:
            grew = "" if h.retained_delta is None else f" ({h.retained_delta:+,} since {args.old})"
            who = h.object.type.name if h.instances == 1 else f"{h.instances} x {h.object.type.name}"
            print(f"{who} at {h.object.address:#x} retains {h.retained:,} bytes{grew}")
            print(f"    held by {'; '.join(h.held_by) or 'no root found'}")
            for name, count, size in h.types[:3]:
                print(f"    {count:>8,} {size:>12,} {name}")
        for t in report.types:
            g = t.growth
            print(f"\n{g.name}: {g.count_delta:+,} objects, {g.size_delta:+,} bytes")
            for path in t.groups:
                print(f"  {path.count:,} of them held by {path.root}:")
                print("    " + "\n    -> ".join(path.types))


if __name__ == "__main__":
    main()
