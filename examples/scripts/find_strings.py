#!/usr/bin/python3
"""Strings by content: every System.String whose text matches a regular expression.

    examples/scripts/find_strings.py CORE|PID 'customer-\\d+' [--live] [--stat]

Prints address, size and text (cut to 80 characters) of each match; with --stat, how many
strings carry each distinct text instead (duplicates are a classic waste).
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from collections import Counter
from typing import Iterator

import sosext


def matching_strings(heap: sosext.Heap, pattern: str, live: bool | None = None,
                     max_chars: int = 4096) -> Iterator[tuple[sosext.HeapObject, str]]:
    """(object, text) of each string whose first ``max_chars`` characters match ``pattern``
    (``re.search``), in address order."""
    rx = re.compile(pattern)
    for obj in heap.objects(type="System.String", live=live):
        text = obj.as_string(max_chars)
        if text is not None and rx.search(text):
            yield obj, text


def open_target(text: str) -> sosext.Runtime:
    """A core file by path, or a running process by pid (read through /proc, not stopped)."""
    if text.isdigit() and not os.path.exists(text):
        return sosext.open(pid=int(text))
    return sosext.open(text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("target", help="core file, or pid of a running process")
    p.add_argument("pattern")
    p.add_argument("--live", action="store_true", help="only strings reachable from a root")
    p.add_argument("--stat", action="store_true", help="count strings per distinct text")
    args = p.parse_args(argv)
    with open_target(args.target) as rt:
        found = matching_strings(rt.heap, args.pattern, True if args.live else None)
        if args.stat:
            counts = Counter(text for _obj, text in found)
            for text, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
                print(f"{n:>8} {text[:80]!r}")
            print(f"{sum(counts.values())} strings, {len(counts)} distinct")
            return 0
        n = 0
        for obj, text in found:
            print(f"{obj.address:#x} {obj.size:>8} {text[:80]!r}")
            n += 1
        print(f"{n} strings")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except sosext.SosError as e:
        sys.exit(f"error: {e}")
