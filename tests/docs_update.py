"""Paste what a run printed into the docs: the mismatches test_docs wrote with SOSEXT_DOCS_DUMP.

    SOSEXT_DOCS_DUMP=/tmp/d.jsonl /usr/bin/python3 -m pytest tests/test_docs.py -k commands
    /usr/bin/python3 tests/docs_update.py /tmp/d.jsonl

Each record names a block (doc:line of its fence), a typed command and its real output. The
step's shown output becomes the real one, and since that output holds this run's addresses,
the addresses of the typed commands (and of the block's `run:` binding) become this run's too,
so the doc reads as one consistent session. Read the diff before committing: the docs' prose
around a block may need the same update.
"""
from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

from docblocks import _HEX, REPO, _key, match


def main(dump: str) -> int:
    records = [json.loads(ln) for ln in Path(dump).read_text().splitlines() if ln.strip()]
    by_doc: dict[str, dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        doc, line = r["where"].rsplit(":", 1)
        by_doc[doc][int(line)].append(r)
    for doc, per_block in by_doc.items():
        path = REPO / doc
        lines = path.read_text().split("\n")
        for fence in sorted(per_block, reverse=True):   # bottom-up: earlier line numbers stay valid
            lines = _update_block(lines, fence - 1, per_block[fence])
        path.write_text("\n".join(lines))
        print(f"{doc}: {sum(len(v) for v in per_block.values())} outputs updated in {len(per_block)} blocks")
    return 0


def _update_block(lines: list[str], fence: int, records: list[dict]) -> list[str]:
    end = fence + 1
    while not lines[end].startswith("```"):
        end += 1
    body = lines[fence + 1:end]
    prompt = next((p for p in ("(lldb) ", "(gdb) ", "$ ", "> ") if any(b.startswith(p) for b in body)), "$ ")
    addresses: dict[str, str] = {}
    for r in records:
        starts = [i for i, b in enumerate(body) if b.startswith(prompt) and b[len(prompt):] == r["command"]]
        if not starts:
            continue
        i = starts[0]
        j = i + 1
        while j < len(body) and not body[j].startswith(prompt):
            j += 1
        for a, b in zip(_HEX.findall(r["command"]), _HEX.findall(r["ran"])):
            addresses[_key(a)] = b   # the last record of a step is its final run (debugger blocks rerun)
        body = body[:i] + [prompt + r["command"]] + _shaped(body[i + 1:j], r["real"]) + body[j:]
    if addresses:
        def sub(m: re.Match) -> str:
            new = addresses.get(_key(m.group(0)))
            if new is None:
                return m.group(0)
            return ("0x" if m.group(0).lower().startswith("0x") else "") + new.lower().removeprefix("0x")
        body = [_HEX.sub(sub, b) if b.startswith(prompt) else b for b in body]
        k = fence - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        if k >= 0 and lines[k].startswith("<!-- run:"):
            lines[k] = _HEX.sub(sub, lines[k])
    return lines[:fence + 1] + body + lines[end:]


def _shaped(shown: list[str], real: list[str]) -> list[str]:
    """The real output, cut where the doc cut it. When the doc's lines still match the run's
    (numbers masked), each shown line becomes the run's line it matched and every `...` stays
    where it was (a doc that picks a row out of the middle keeps it); else the first few lines,
    `...` and the last few (`…` alone on a line counts as a cut too)."""
    cuts = [k for k, ln in enumerate(shown) if ln.strip() in ("...", "…")]
    if not cuts:
        return real
    pairs = match(shown, real)
    if pairs is not None:
        it = iter(pairs)
        return ["..." if ln.strip() in ("...", "…") else next(it)[1] for ln in shown]
    head, tail = cuts[0], len(shown) - cuts[-1] - 1
    if head + tail >= len(real):
        return real
    return real[:head] + ["..."] + (real[len(real) - tail:] if tail else [])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
